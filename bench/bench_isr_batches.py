"""A broker's restart at thousands of partitions: how long until every ISR is full again, and what it costs etcd.

Issue 25 ("Thousands of partitions per broker"): at 6,000 partitions (RF 3, 3 brokers, a
3-member etcd, a 2-core machine) a restarted broker's rejoin saturated the brokers for minutes;
two lost their etcd leases and thousands of ISR changes were refused as stale. This bench makes
that cluster (real etcd members, real broker processes: ``tests/etcd_cluster.py``,
``tests/cluster_harness.py``), creates ``--partitions`` partitions at RF 3 (``--per-topic`` a
topic), writes ``--records`` records to each, kill -9s one broker (not the controller), waits until
the controller has taken it out of every ISR, starts it again and reports:

- the time from its start until every ISR is full again (and the ISR-full count every few seconds);
- the metadata changes committed meanwhile (the image epoch in etcd: one per etcd transaction of a
  change), and the ISR batches the brokers sent (``shoal_replica_isr_batches``, when they have it);
- whether any broker lost its etcd lease (``registered again under a new lease`` in its log), and
  how many ISR changes were refused as stale (``INVALID_UPDATE_VERSION`` in the logs).

::

    python bench/bench_isr_batches.py                       # 2,000 partitions
    python bench/bench_isr_batches.py --partitions 6000     # the issue's size
    python bench/bench_isr_batches.py --json out.json --keep /tmp/isr-bench

Exit code 0 when every ISR was full again within ``--timeout`` and no lease was lost, else 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE.parent / "tests" / "e2e")]

import broker_process  # noqa: E402
from cluster_harness import Cluster, until  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402
from shoal.client import AdminClient  # noqa: E402
from shoal.etcd.client import EtcdClient  # noqa: E402
from shoal.etcd.client import range_end as _range_end  # noqa: E402
from shoal.metadata import codec  # noqa: E402

PREFIX = "/isr-bench"


class EtcdView:
    """What etcd holds: each partition's replicas and ISR, and the image epoch."""

    def __init__(self, etcd: EtcdCluster) -> None:
        self.client = EtcdClient([("127.0.0.1", m.client_port) for m in etcd.members], timeout=30)

    async def read(self) -> tuple[int, list[tuple[list[int], list[int]]]]:
        root = f"{PREFIX}/topics/".encode()
        resp = await self.client.range(root, _range_end(root))
        topics = [codec.topic_from_json(json.loads(kv.value)) for kv in resp.kvs]  # either format version
        parts = [(list(p.replicas), list(p.isr)) for t in topics for p in t.partitions]
        epoch = await self.client.range(f"{PREFIX}/meta/epoch".encode())
        return int(json.loads(epoch.kvs[0].value)["epoch"]), parts

    async def close(self) -> None:
        await self.client.close()


def isr_full(parts: list[tuple[list[int], list[int]]]) -> int:
    return sum(1 for replicas, isr in parts if len(isr) == len(replicas))


def batches(cluster: Cluster) -> int | None:
    """``shoal_replica_isr_batches`` summed over the live brokers (None: the brokers lack it)."""
    total, seen = 0, False
    for b in cluster.live:
        try:
            with urllib.request.urlopen(b.overrides["shoal.metrics.listener"] + "/metrics", timeout=10) as r:
                text = r.read().decode()
        except OSError:
            continue
        m = re.search(r"^shoal_replica_isr_batches(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.M)
        if m:
            total, seen = total + int(float(m.group(1))), True
    return total if seen else None


def log_counts(cluster: Cluster, since: dict[int, int]) -> dict[str, int]:
    """Lines of the broker logs written after ``since`` (byte offsets) that say a lease was lost or
    an ISR change was refused as stale."""
    leases = stale = 0
    for n, b in cluster.brokers.items():
        text = b.log_text()[since.get(n, 0):]
        leases += text.count("registered again under a new lease")
        stale += len(re.findall(r"INVALID_UPDATE_VERSION \d+|partition epoch \d+ is stale", text))
    return {"leases_lost": leases, "stale_refusals": stale}


async def create_topics(bootstrap: str, partitions: int, per_topic: int) -> list[str]:
    """The topics, 10 a request; a request refused (a broker that lost its lease under the load
    of creating logs: fewer than 3 registered) is made again for the topics it did not create."""
    names = [f"t{i:04d}" for i in range((partitions + per_topic - 1) // per_topic)]
    async with AdminClient(bootstrap, timeout=120) as admin:
        for i in range(0, len(names), 10):
            todo = names[i:i + 10]
            for _ in range(30):
                out = await admin.create_topics([{"name": n, "num_partitions": per_topic, "replication_factor": 3}
                                                 for n in todo], timeout_ms=120000, raise_errors=False)
                todo = [n for n, r in out.items() if isinstance(r, Exception) and "ALREADY_EXISTS" not in str(r)]
                if not todo:
                    break
                print(f"  creating {len(todo)} topics again: {out[todo[0]]}", flush=True)
                await asyncio.sleep(2)
            else:
                raise RuntimeError(f"cannot create {todo}")
    return names


def produce(bootstrap: str, names: list[str], per_topic: int, records: int) -> None:
    """``records`` records to every partition, acks=all (librdkafka)."""
    if records <= 0:
        return
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                  "queue.buffering.max.messages": 1000000})
    for n in names:
        for i in range(per_topic):
            for r in range(records):
                p.produce(n, b"x" * 100, partition=i)
            p.poll(0)
    left = p.flush(300)
    if left:  # (setup only: a partition with no records rejoins as well)
        print(f"  {left} records not acknowledged within 300 s", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=2000)
    ap.add_argument("--per-topic", type=int, default=20, help="partitions a topic (default 20)")
    ap.add_argument("--records", type=int, default=5, help="records written to each partition first")
    ap.add_argument("--session-ms", type=int, default=9000, help="broker.session.timeout.ms (the default)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for every ISR to be full")
    ap.add_argument("--sample", type=float, default=5.0, help="seconds between ISR-full samples")
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--keep", help="keep the etcd and broker directories here")
    args = ap.parse_args()

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="isr-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    etcd = EtcdCluster(work / "etcd")
    etcd.start()
    cluster = Cluster(work, etcd.url(PREFIX), overrides={"broker.session.timeout.ms": str(args.session_ms)})
    for b in cluster.brokers.values():
        b.overrides["shoal.metrics.listener"] = f"http://127.0.0.1:{broker_process.free_port()}"
    view = EtcdView(etcd)
    loop = asyncio.new_event_loop()
    result: dict[str, Any] = {"partitions": args.partitions, "per_topic": args.per_topic}
    try:
        cluster.start()
        controller = cluster.wait_controller()
        t0 = time.monotonic()
        names = loop.run_until_complete(create_topics(cluster.bootstrap(), args.partitions, args.per_topic))
        total = len(names) * args.per_topic
        until(lambda: (parts := loop.run_until_complete(view.read())[1]) and isr_full(parts) == len(parts) >= total,
              900, "topics created")
        produce(cluster.bootstrap(), names, args.per_topic, args.records)
        print(f"{total} partitions in {len(names)} topics created and written in {time.monotonic() - t0:.1f} s",
              flush=True)
        result["leases_lost_creating"] = log_counts(cluster, {})["leases_lost"]
        controller = cluster.wait_controller()
        victim = max(n for n in cluster.brokers if n != controller)
        since = {n: len(b.log_text()) for n, b in cluster.brokers.items()}
        cluster.kill(victim)
        t1 = time.monotonic()
        until(lambda: all(victim not in isr for _, isr in loop.run_until_complete(view.read())[1]), 120,
              f"broker {victim} out of every ISR")
        print(f"broker {victim} killed; out of every ISR after {time.monotonic() - t1:.1f} s", flush=True)
        epoch0, _ = loop.run_until_complete(view.read())
        batches0 = batches(cluster) or 0
        broker_process.START_TIMEOUT = 900  # it opens thousands of logs before it answers
        t2 = time.monotonic()
        cluster.start_one(victim)
        print(f"broker {victim} started again; it answers after {time.monotonic() - t2:.1f} s", flush=True)
        samples = []
        full = 0
        while time.monotonic() - t2 < args.timeout:
            time.sleep(min(args.sample, 1.0) if not samples else 0.2)
            epoch, parts = loop.run_until_complete(view.read())
            full, total = isr_full(parts), len(parts)  # (the internal topics' partitions too)
            now = time.monotonic() - t2
            if not samples or now - samples[-1][0] >= args.sample or full == total:
                samples.append((round(now, 1), full, epoch - epoch0))
                print(f"  {now:6.1f} s: {full} of {total} ISRs full, {epoch - epoch0} metadata commits", flush=True)
            if full == total:
                break
        elapsed = time.monotonic() - t2
        epoch, _ = loop.run_until_complete(view.read())
        b = batches(cluster)
        result.update({
            "restarted": victim, "seconds_to_full_isrs": round(elapsed, 1) if full == total else None,
            "metadata_commits": epoch - epoch0, "isr_batches": None if b is None else b - batches0,
            "samples": samples, **log_counts(cluster, since),
        })
        print(json.dumps({k: v for k, v in result.items() if k != "samples"}), flush=True)
        ok = full == total and result["leases_lost"] == 0
        return 0 if ok else 1
    finally:
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
        loop.run_until_complete(view.close())
        loop.close()
        cluster.close()
        etcd.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
