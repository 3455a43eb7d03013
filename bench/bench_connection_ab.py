"""A/B: the broker's CPU per request on the connection path, this tree against a baseline checkout.

    git worktree add --detach /tmp/base HEAD~1        # (and build its C speed-ups there:
    (cd /tmp/base && python setup.py build_ext --inplace)   # python setup.py build_ext --inplace)
    python bench/bench_connection_ab.py --base /tmp/base [--rounds 5] [--requests 20000]

For each tree, in alternating subprocesses (so both see the same machine load): a real Broker
(file storage in a temporary directory) and a connection object whose transport only counts
bytes; Produce v9 frames (one 1 KiB record) and ApiVersions v3 frames are fed to it in bursts of
16 per ``data_received``, as a pipelining client's reads arrive, and the process CPU time
(``time.process_time``, not wall time: the machine may be shared) per request is measured. Prints
every round, the median per tree and the ratio this/base (1.00 = no change; > 1 = slower).

CPU time on a loaded machine varies by tens of percent between rounds. ``--valgrind`` counts
instructions instead (valgrind's callgrind; deterministic, ~100x slower): each tree runs with N
and with N + ``--requests`` requests of each kind, and the difference divided by the requests
added is the instructions per request (Produce and ApiVersions averaged).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

CHILD = r'''
import asyncio, datetime, json, sys, tempfile, time
sys.modules.setdefault("hypothesis", None)
from shoal.broker import Broker
from shoal.config import BrokerConfig
from shoal.protocol import codec
from shoal.protocol.records import build_batch

N = int(sys.argv[1])
BURST = 16

class Transport:
    def __init__(self): self.writes = 0
    def write(self, data): self.writes += 1
    def get_extra_info(self, name, default=None): return ("127.0.0.1", 1) if name == "peername" else default
    def pause_reading(self): pass
    def resume_reading(self): pass
    def set_write_buffer_limits(self, high=None, low=None): pass
    def get_write_buffer_size(self): return 0
    def close(self): pass

def produce_frame(cid):
    rq = codec.request_type(0, 9)
    mod = sys.modules[rq.__module__]
    body = codec.build(rq, transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30),
        topic_data=(codec.build(mod.TopicProduceData, name="bench", partition_data=(
            codec.build(mod.PartitionProduceData, index=0,
                        records=build_batch([(1_700_000_000_000, b"k", b"v" * 1024, [])])),)),))
    return codec.encode_request(0, 9, cid, "bench", body)

def api_versions_frame(cid):
    return codec.encode_request(18, 3, cid, "bench", codec.request_type(18, 3)(
        client_software_name="bench", client_software_version="1"))

async def measure(broker, make):
    from shoal.server.connection import KafkaConnection
    chunks = [b"".join(make(i * BURST + j) for j in range(BURST)) for i in range(64)]
    conn = KafkaConnection(broker, "PLAINTEXT")
    t = Transport()
    conn.connection_made(t)
    sent = 0
    cpu = time.process_time()
    while sent < N:
        conn.data_received(chunks[(sent // BURST) % len(chunks)])
        sent += BURST
        await asyncio.sleep(0)
    while t.writes < sent:
        await asyncio.sleep(0)
    cpu = time.process_time() - cpu
    conn.connection_lost(None)
    return cpu / sent * 1e6

async def main():
    with tempfile.TemporaryDirectory() as d:
        cfg = BrokerConfig.load(None, {"log.dirs": d, "listeners": "PLAINTEXT://127.0.0.1:0"})
        broker = Broker(cfg)
        await broker.start()
        await broker.auto_create_topic("bench")
        await measure(broker, api_versions_frame)  # warm-up
        out = {"produce": await measure(broker, produce_frame), "api_versions": await measure(broker, api_versions_frame)}
        await broker.stop()
    print(json.dumps(out))

asyncio.run(main())
'''


def run(tree: Path, requests: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", CHILD, str(requests)], cwd=tree, env=env, check=True,
                         capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def instructions(tree: Path, requests: int) -> int:
    """callgrind's instruction count of the child (``requests`` of each kind)."""
    import re
    import shutil

    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--valgrind needs valgrind")
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
    out = subprocess.run([valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c",
                          CHILD, str(requests)], cwd=tree, env=env, check=True, capture_output=True, text=True,
                         timeout=3600)
    return int(re.search(r"Collected : (\d+)", out.stderr).group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, type=Path, help="a checkout of the baseline (e.g. a git worktree)")
    ap.add_argument("--this", type=Path, default=HERE, help="the tree to compare (default: this one)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--valgrind", action="store_true", help="count instructions (see above)")
    args = ap.parse_args()
    trees = {"base": args.base.resolve(), "this": args.this.resolve()}
    if args.valgrind:
        per: dict[str, float] = {}
        for name, tree in trees.items():
            small, large = instructions(tree, 96), instructions(tree, 96 + args.requests)
            per[name] = (large - small) / (2 * args.requests)
            print(f"{name:4s}: {per[name]:,.0f} instructions per request (callgrind)", flush=True)
        print(f"ratio this/base {per['this'] / per['base']:.3f}")
        return
    results: dict[str, dict[str, list[float]]] = {t: {"produce": [], "api_versions": []} for t in trees}
    for r in range(args.rounds):
        for name, tree in (trees.items() if r % 2 == 0 else reversed(list(trees.items()))):
            res = run(tree, args.requests)
            for k, v in res.items():
                results[name][k].append(v)
            print(f"round {r + 1} {name:4s}: produce {res['produce']:6.1f} µs/request, "
                  f"api_versions {res['api_versions']:6.1f} µs/request (process CPU)", flush=True)
    print()
    for kind in ("produce", "api_versions"):
        b = statistics.median(results["base"][kind])
        t = statistics.median(results["this"][kind])
        print(f"{kind:13s} median base {b:6.1f} µs, this {t:6.1f} µs, ratio this/base {t / b:.3f}")


if __name__ == "__main__":
    main()
