"""What idle partitions cost: CPU per broker of an idle three-broker cluster with many partitions.

    python bench/bench_idle_partitions.py [--partitions 2000] [--duration 30] [--settle 10]
        [--override KEY=VALUE ...] [--restart] [--py-spy OUT]

Starts a real three-member etcd on loopback (tests/etcd_cluster.py) and three real broker
processes (tests/cluster_harness.py: ``python -m shoal serve``, racks dc1-dc3), creates
``--partitions`` partitions as topics of 100 partitions at RF 3, waits until every partition has
its three replicas in the ISR, lets the cluster settle ``--settle`` s, then samples each broker's
CPU time (utime + stime, /proc/<pid>/stat) over ``--duration`` s with no client traffic. Prints CPU%
of one core per broker, the load average (the machine is shared), and the ratio to issue 25's
target: under 5% of a core per broker at 6,000 partitions. Then it checks that no idle follower
left an ISR while nothing was written (an idle partition must cost nothing, and stay in sync).

``--restart``: afterwards, broker 3 is stopped (SIGTERM) and started again; prints the time until
every partition has its three replicas in the ISR again, and each broker's CPU% over that time.

``--py-spy OUT``: record broker 1 during the measurement with py-spy (``pip install py-spy``) into
OUT (speedscope JSON), to see where an idle broker's time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "bench")]

from _util import cpu_seconds  # noqa: E402
from cluster_harness import Cluster  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402

from shoal.client import AdminClient  # noqa: E402

TARGET = 5.0  # % of one core per broker, idle, at 6,000 partitions (issue 25)
PER_TOPIC = 100


async def create(bootstrap: str, partitions: int) -> list[str]:
    names = [f"idle-{i}" for i in range((partitions + PER_TOPIC - 1) // PER_TOPIC)]
    async with AdminClient(bootstrap, timeout=120) as admin:
        for name in names:
            await admin.create_topics([{"name": name, "num_partitions": PER_TOPIC, "replication_factor": 3}],
                                      timeout_ms=120000)
    return names


async def short_isr(bootstrap: str, names: list[str]) -> int:
    """Partitions whose ISR lacks one of their replicas (or that are not listed yet)."""
    async with AdminClient(bootstrap, timeout=60) as admin:
        md = await admin.metadata(names)
    short = 0
    for name in names:
        t = md.topics.get(name)
        if t is None or isinstance(t, Exception):
            short += PER_TOPIC
            continue
        short += sum(1 for p in t.partitions if len(p.isr) < len(p.replicas) or len(p.replicas) < 3)
        short += PER_TOPIC - len(t.partitions)
    return short


def wait_full_isr(c: Cluster, names: list[str], polls: int) -> float:
    """Poll (about once a second, at most ``polls`` times) until every ISR is full; the time it took."""
    t0 = time.monotonic()
    for _ in range(polls):
        try:
            short = asyncio.run(short_isr(c.bootstrap(), names))
        except Exception as e:
            short = -1
            print(f"  (metadata not answered: {e})")
        if short == 0:
            return time.monotonic() - t0
        time.sleep(1.0)
    raise SystemExit(f"{short} partitions still lack a replica in their ISR after {time.monotonic() - t0:.0f} s")


def cpu_by_broker(c: Cluster) -> dict[int, float]:
    return {n: cpu_seconds([b.proc.pid]) for n, b in c.brokers.items() if b.running}


def report(before: dict[int, float], after: dict[int, float], seconds: float, what: str) -> float:
    worst = 0.0
    for n in sorted(after):
        pct = 100.0 * (after[n] - before.get(n, 0.0)) / seconds
        worst = max(worst, pct)
        print(f"  broker {n}: {pct:5.1f}% of a core {what}")
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=2000)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--settle", type=float, default=10.0)
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="broker config")
    ap.add_argument("--restart", action="store_true", help="then restart broker 3 and time its rejoin")
    ap.add_argument("--rejoin-polls", type=int, default=600, help="give up on the rejoin after this many polls (~1 s)")
    ap.add_argument("--py-spy", metavar="OUT", help="record broker 1 with py-spy during the measurement")
    args = ap.parse_args()
    # the broker's default session (the harness's 3 s is for tests that kill brokers): a lease
    # lost while 6,000 partitions are created would move leaderships and churn ISRs meanwhile
    overrides = {"broker.session.timeout.ms": "9000", **dict(kv.split("=", 1) for kv in args.override)}
    work = Path(tempfile.mkdtemp(prefix="bench-idle-"))
    etcd = EtcdCluster(work / "etcd")
    etcd.start()
    c = Cluster(work, etcd.url("/idle"), overrides=overrides)
    try:
        c.start()
        t0 = time.monotonic()
        names = asyncio.run(create(c.bootstrap(), args.partitions))
        print(f"{len(names) * PER_TOPIC} partitions (RF 3) created in {time.monotonic() - t0:.1f} s; "
              f"full ISRs after {wait_full_isr(c, names, 600):.1f} s more")
        time.sleep(args.settle)
        spy = None
        if args.py_spy:
            spy = subprocess.Popen(["py-spy", "record", "-p", str(c[1].proc.pid), "-d", str(int(args.duration)),
                                    "-f", "speedscope", "-o", args.py_spy, "-r", "200"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        load0 = os.getloadavg()[0]
        before, t1 = cpu_by_broker(c), time.monotonic()
        time.sleep(args.duration)
        after, seconds = cpu_by_broker(c), time.monotonic() - t1
        print(f"idle, {args.duration:.0f} s, load average {load0:.1f} -> {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} cores (shared machine):")
        worst = report(before, after, seconds, "")
        scale = max(args.partitions, 1) / 6000.0
        print(f"  worst {worst:.1f}%: {worst / TARGET:.2f}x the target ({TARGET:.0f}% at 6,000 partitions); "
              f"scaled to 6,000 partitions ~{worst / scale:.1f}% ({worst / scale / TARGET:.2f}x)")
        if spy is not None:
            spy.wait()
        short = asyncio.run(short_isr(c.bootstrap(), names))
        print(f"  partitions with a replica out of the ISR after the idle period: {short}")
        if args.restart:
            c.stop(3)
            time.sleep(1.0)
            before, t2 = cpu_by_broker(c), time.monotonic()
            c.start_one(3)
            try:
                took = wait_full_isr(c, names, args.rejoin_polls)
                said = f"every ISR full again after {took:.1f} s"
            except SystemExit as e:
                said = str(e)
            after = cpu_by_broker(c)
            before.setdefault(3, 0.0)
            print(f"broker 3 restarted: {said}; CPU over that time:")
            report(before, after, time.monotonic() - t2, "(rejoin)")
    finally:
        c.close()
        etcd.close()


if __name__ == "__main__":
    main()
