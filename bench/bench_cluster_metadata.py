"""Cluster metadata on etcd: propagation between brokers, and topic creation against the embedded store.

    python bench/bench_cluster_metadata.py [--topics 1000] [--partitions 6] [--samples 200]

Starts a real three-member etcd on loopback (tests/etcd_cluster.py) and real broker processes
(``python -m shoal serve``), all on this machine:

1. Propagation: three brokers on one etcd prefix; a topic is created through broker 1
   (CreateTopics, Shoal's admin client) and broker 3 is asked (Metadata, every 2 ms) until it lists
   it. Prints p50/p99/max from the create's answer to broker 3 listing it (the issue's target:
   p99 under 1 s), and the create's own latency.
2. Creation: ``--topics`` topics of ``--partitions`` partitions (RF 1), 20 concurrent
   CreateTopics of one topic each, through the three brokers on etcd (spread over them) and
   through one broker on the embedded store, measured in the same run; prints both and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from broker_process import BrokerProcess  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402

from shoal.client import AdminClient  # noqa: E402


class Broker(BrokerProcess):
    def __init__(self, workdir: Path, node_id: int = 1, url: str | None = None) -> None:
        super().__init__(workdir)
        self.node_id, self.url = node_id, url

    def serve_args(self) -> list[str]:
        args = super().serve_args() + ["--node-id", str(self.node_id), "--rack", f"dc{self.node_id}",
                                       "--log-level", "WARNING"]
        if self.url:
            args += ["--override", f"shoal.metadata.store={self.url}"]
        return args


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


async def propagation(b1: Broker, b3: Broker, samples: int) -> tuple[list[float], list[float]]:
    seen, created = [], []
    async with AdminClient(b1.bootstrap) as a1, AdminClient(b3.bootstrap) as a3:
        for i in range(samples):
            name = f"prop-{i}"
            t0 = time.perf_counter()
            await a1.create_topics([{"name": name, "num_partitions": 1, "replication_factor": 1}])
            t1 = time.perf_counter()
            while True:
                md = await a3.metadata([name])
                t = md.topics.get(name)
                if t is not None and not isinstance(t, Exception):
                    break
                await asyncio.sleep(0.002)
            created.append(t1 - t0)
            seen.append(time.perf_counter() - t1)
    return seen, created


async def create_many(bootstraps: list[str], topics: int, partitions: int, prefix: str) -> float:
    clients = [AdminClient(b, timeout=120) for b in bootstraps]
    for c in clients:
        await c.connect()
    sem = asyncio.Semaphore(20)

    async def one(i: int) -> None:
        async with sem:
            c = clients[i % len(clients)]
            await c.create_topics([{"name": f"{prefix}-{i}", "num_partitions": partitions, "replication_factor": 1}])

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(topics)))
    elapsed = time.perf_counter() - t0
    for c in clients:
        await c.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--samples", type=int, default=200)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-cluster-md-"))
    etcd = EtcdCluster(work / "etcd")
    etcd.start()
    started: list[Broker] = []
    try:
        url = etcd.url("/bench")
        brokers = [Broker(work / f"b{n}", n, url) for n in (1, 2, 3)]
        for b in brokers:
            b.start()
            started.append(b)
        embedded = Broker(work / "embedded", 1)
        embedded.start()
        started.append(embedded)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (shared machine)")

        seen, created = asyncio.run(propagation(brokers[0], brokers[2], args.samples))
        ms = [x * 1000 for x in seen]
        print(f"propagation broker 1 -> broker 3 ({args.samples} topics): p50 {pct(ms, 50):.1f} ms, "
              f"p99 {pct(ms, 99):.1f} ms, max {max(ms):.1f} ms (after the create's answer; "
              f"CreateTopics itself p50 {statistics.median(created) * 1000:.1f} ms)")

        # interleaved A/B: embedded, etcd, embedded, etcd (half the topics each round)
        half = args.topics // 2
        t_emb = t_etcd = 0.0
        for rnd in range(2):
            t_emb += asyncio.run(create_many([embedded.bootstrap], half, args.partitions, f"emb{rnd}"))
            t_etcd += asyncio.run(create_many([b.bootstrap for b in brokers], half, args.partitions, f"etcd{rnd}"))
        n = 2 * half
        print(f"create {n} topics x {args.partitions} partitions: embedded (1 broker) {t_emb:.2f} s "
              f"({n / t_emb:.0f} topics/s), etcd (3 brokers) {t_etcd:.2f} s ({n / t_etcd:.0f} topics/s); "
              f"etcd/embedded time ratio {t_etcd / t_emb:.2f}")
    finally:
        for b in started:
            b.stop()
        etcd.close()


if __name__ == "__main__":
    main()
