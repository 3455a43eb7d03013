"""Compressed produce throughput, with record validation (issue 10, item 7) against a baseline tree.

    git worktree add --detach /tmp/bbase <commit before the change>   # once; build its speed-ups:
    (cd /tmp/bbase && python setup.py build_ext --inplace)
    python bench/bench_compressed_produce.py --baseline /tmp/bbase [--this DIR] [--seconds 1.0] [--rounds 3]

``--this`` (default: this checkout) names the tree to measure against the baseline: a worktree of
the baseline plus only the change under test keeps other uncommitted work out of the comparison.

For each codec and two batch shapes (100 and 1,000 JSON-like records of ~150 bytes with keys, as
a producer with linger would send), a real Broker (file storage in a temporary directory) is fed
Produce v9 frames straight into a connection whose transport only counts bytes (like
bench/produce_path.py): framing, decoding, validation, append, response. Each tree runs in its own
process; the rounds alternate between the trees (A/B in the same run) and the best round counts.
Rates are per second of the broker process's user CPU time (not wall time: the machine may be
shared; not system time: both trees make the same writes, whose kernel cost varies with memory
pressure from other processes).
Printed: requests/s and uncompressed MB/s of each tree, and the ratio this tree / baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
SHAPES = (100, 1000)
HERE = Path(__file__).resolve()
REPO = HERE.parent.parent


def child(seconds: float) -> None:
    import asyncio
    import datetime
    import random
    import resource
    import tempfile
    import time

    sys.modules.setdefault("hypothesis", None)
    from shoal.broker import Broker
    from shoal.config import BrokerConfig
    from shoal.protocol import codec
    from shoal.protocol.records import build_batch
    from shoal.server.connection import KafkaConnection

    print(f"measuring {Path(sys.modules['shoal'].__file__).parent.parent}", file=sys.stderr)

    class Transport:
        def __init__(self) -> None:
            self.writes = 0

        def write(self, data: bytes) -> None:
            self.writes += 1

        def get_extra_info(self, name: str, default=None):
            return ("127.0.0.1", 1) if name == "peername" else default

        def pause_reading(self) -> None: ...
        def resume_reading(self) -> None: ...
        def set_write_buffer_limits(self, high=None, low=None) -> None: ...
        def get_write_buffer_size(self) -> int: return 0
        def close(self) -> None: ...

    rnd = random.Random(7)

    def records(n: int):
        out = []
        for i in range(n):
            value = json.dumps({
                "id": rnd.randrange(10**9), "user": f"user-{rnd.randrange(5000)}",
                "event": rnd.choice(["view", "click", "add_to_cart", "purchase"]),
                "ts": 1_700_000_000_000 + i, "path": f"/p/{rnd.randrange(100000)}",
                "ua": rnd.choice(["Mozilla/5.0 (X11; Linux x86_64)", "curl/8.4.0", "okhttp/4.12"]),
            }).encode()
            out.append((1_700_000_000_000 + i, f"key-{rnd.randrange(10000)}".encode(), value, []))
        return out

    def frame(topic: str, corr: int, batch: bytes) -> bytes:
        rq = codec.request_type(0, 9)
        mod = sys.modules[rq.__module__]
        body = codec.build(rq, transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30), topic_data=(
            codec.build(mod.TopicProduceData, name=topic, partition_data=(
                codec.build(mod.PartitionProduceData, index=0, records=batch),)),))
        return codec.encode_request(0, 9, corr, "bench", body)

    async def run() -> dict:
        results = {}
        with tempfile.TemporaryDirectory() as d:
            cfg = BrokerConfig.load(None, {"log.dirs": d, "listeners": "PLAINTEXT://127.0.0.1:0",
                                           "log.segment.bytes": str(64 << 20), "log.retention.bytes": str(128 << 20)})
            broker = Broker(cfg)
            await broker.start()
            for shape in SHAPES:
                recs = records(shape)
                raw_size = len(build_batch(recs))
                for c, name in enumerate(CODECS):
                    topic = f"bench-{name}-{shape}"
                    await broker.auto_create_topic(topic)
                    batch = build_batch(recs, compression=c)
                    frames = [frame(topic, i, batch) for i in range(16)]
                    conn = KafkaConnection(broker, "PLAINTEXT")
                    tr = Transport()
                    conn.connection_made(tr)
                    n = 0
                    t = time.perf_counter()
                    cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime
                    while time.perf_counter() - t < seconds:
                        for _ in range(20):
                            conn.data_received(frames[n % 16])
                            n += 1
                            await asyncio.sleep(0)
                    while tr.writes < n:
                        await asyncio.sleep(0)
                    dt = resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu
                    conn.connection_lost(None)
                    results[f"{name}/{shape}"] = {"rps": n / dt, "mbps": n * raw_size / dt / 1e6,
                                                  "batch": len(batch), "raw": raw_size}
            await broker.stop()
        return results

    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(run())))


def measure(tree: Path, seconds: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, str(HERE), "--child", "--seconds", str(seconds)], cwd=tree, env=env,
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, required=False)
    ap.add_argument("--this", type=Path, default=REPO)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args.seconds)
        return
    trees = {"this": args.this.resolve()}
    if args.baseline:
        trees["base"] = args.baseline.resolve()
    best: dict[str, dict] = {k: {} for k in trees}
    for r in range(args.rounds):
        for name, tree in trees.items():
            for key, v in measure(tree, args.seconds).items():
                if key not in best[name] or v["rps"] > best[name][key]["rps"]:
                    best[name][key] = v
            print(f"round {r + 1}/{args.rounds}: {name} done", file=sys.stderr)
    print(f"{'codec/records':<14} {'batch B':>8} {'raw B':>8} {'this req/s':>11} {'this MB/s':>10}"
          + (f" {'base req/s':>11} {'base MB/s':>10} {'ratio':>6}" if "base" in best else ""))
    for key, v in best["this"].items():
        line = f"{key:<14} {v['batch']:>8} {v['raw']:>8} {v['rps']:>11.0f} {v['mbps']:>10.1f}"
        if "base" in best:
            b = best["base"][key]
            line += f" {b['rps']:>11.0f} {b['mbps']:>10.1f} {v['rps'] / b['rps']:>6.2f}"
        print(line)


if __name__ == "__main__":
    main()
