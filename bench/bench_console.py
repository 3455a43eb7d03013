#!/usr/bin/env python3
"""Page load of the Shoal Console at the server (issue 30): the topics page with 1,000 topics and
the consumer groups page with 500 groups, against the target of 300 ms.

One ``shoal serve`` with two tenants and the console beside it (tests/console/console_harness.py:
the console on its own thread and event loop, the broker in its own process, as the console
talks to a broker over the Kafka protocol either way). Tenant ``a`` gets ``--topics`` topics of
one partition, one record each, and ``--groups`` groups, each with an offset committed on one of
them (no members: what the page reads of a group is the same). Then each page is loaded ``--runs``
times as ``alice``, as the console shows it (its first 100 rows) and with all rows on one page
(``?per_page=1000``), then the operator's pages as ``admin`` (brokers, tenants, regions, the
balancer: the physical cluster with all those topics), and its time at the server is read from the console's ``Server-Timing``
header (its handler, the Kafka requests it makes included; not the network). Prints p50 and p99
and their ratio to the target (< 1 is under it).

Run:  PYTHONPATH=$PWD python bench/bench_console.py [--topics 1000] [--groups 500] [--runs 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "console"))

from console_harness import console_cluster  # noqa: E402

TARGET_MS = 300.0


def seed(conf: dict, topics: int, groups: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from shoal.client import AdminClient as ShoalAdmin, ClientSecurity

    admin = AdminClient(conf)
    names = [f"topic-{i:04d}" for i in range(topics)]
    for start in range(0, topics, 200):
        for f in admin.create_topics([NewTopic(n, 1, 1) for n in names[start:start + 200]]).values():
            f.result(60)
    p = Producer({**conf, "linger.ms": 20})
    for n in names:
        p.produce(n, b'{"hello": "world"}', b"k", partition=0)
    assert p.flush(60) == 0

    async def commit() -> None:
        sec = ClientSecurity.from_properties({
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": conf["sasl.mechanism"],
            "sasl.username": conf["sasl.username"], "sasl.password": conf["sasl.password"]})
        async with ShoalAdmin(conf["bootstrap.servers"], security=sec) as c:
            for i in range(groups):
                await c.commit_offsets(f"group-{i:04d}", {(names[i % topics], 0): 1})

    asyncio.run(commit())


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def timed(browser, path: str, runs: int) -> tuple[object, float, float]:
    """The last response of ``runs`` loads of ``path`` and their p50 and p99 time at the server."""
    times = []
    for _ in range(runs):
        r = browser.get(path)
        times.append(float(r.headers["Server-Timing"].split("dur=")[1]))
    return r, statistics.median(times), percentile(times, 0.99)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    gen = console_cluster()
    cc = next(gen)
    try:
        t0 = time.monotonic()
        seed(cc.cluster.a.conf(), args.topics, args.groups)
        print(f"seeded {args.topics} topics and {args.groups} groups in {time.monotonic() - t0:.1f} s")
        alice = cc.login("alice")
        for page, total in (("topics", args.topics), ("groups", args.groups)):
            for what, path, rows in ((f"first page of {total}", page, min(100, total)),
                                     (f"all {total} on one page", f"{page}?per_page=1000", total)):
                r = alice.get(path)
                assert r.status_code == 200 and r.text.count("<tr>") >= rows, (path, r.status_code)
                r, p50, p99 = timed(alice, path, args.runs)
                print(f"{page:6s} {what:24s} ({len(r.content) // 1024:3d} KiB): server time p50 {p50:4.0f} ms, "
                      f"p99 {p99:4.0f} ms over {args.runs} loads; p50/target {p50 / TARGET_MS:.2f}, "
                      f"p99/target {p99 / TARGET_MS:.2f} (target {TARGET_MS:.0f} ms)")
        admin = cc.login("admin")
        for page in ("operator", "operator/tenants", "operator/regions", "operator/balancer"):
            r = admin.get(page)
            assert r.status_code == 200, (page, r.status_code)
            r, p50, p99 = timed(admin, page, args.runs)
            print(f"{page:18s} ({len(r.content) // 1024:3d} KiB): server time p50 {p50:4.0f} ms, p99 {p99:4.0f} ms "
                  f"over {args.runs} loads; p50/target {p50 / TARGET_MS:.2f}")
        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    finally:
        for _ in gen:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
