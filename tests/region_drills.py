"""Datacenter drills and measures on a ``region_harness.Regions``, shared by the tests
(tests/multiregion/test_drills.py) and the benchmark (bench/bench_multiregion.py): each returns
what it saw, the caller asserts or prints.

Clients are real librdkafka clients bootstrapped through their datacenter's links; the harness's
own look at a partition (``layout``) asks one broker over its direct port, so it sees what that
broker believes, cut or not.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic

from acked_producer import AckedProducer
from cluster_harness import until
from region_harness import Regions
from shoal.client import AdminClient

REPO = Path(__file__).resolve().parents[1]


def create_topic(r: Regions, client_dc: str, name: str, assignment: list[int] | None = None,
                 rf: int = -1, configs: dict[str, str] | None = None) -> None:
    """One partition: ``assignment`` (its replicas, the first preferred leader) or ``rf``
    (through the client's links)."""
    if assignment:
        async def go() -> None:
            host, _, port = r.client_bootstrap(client_dc, assignment[0]).rpartition(":")
            async with AdminClient(f"{host}:{port}", timeout=30) as a:
                await a.create_topics([{"name": name, "assignments": {0: assignment}, "configs": configs or {}}])

        asyncio.run(go())
        return
    a = KafkaAdmin({"bootstrap.servers": r.client_bootstrap(client_dc), "log_level": 2})
    a.create_topics([NewTopic(name, 1, rf, config=configs or {})])[name].result(30)


def layout(r: Regions, node: int, topic: str) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(leader, replicas, ISR) of partition 0 as broker ``node`` sees it."""
    async def go():
        async with AdminClient(r[node].bootstrap, timeout=10) as c:
            p = (await c.describe_topics([topic]))[topic].partitions[0]
            return p.leader, tuple(p.replicas), tuple(sorted(p.isr))

    return asyncio.run(go())


def read_all(r: Regions, client_dc: str, topic: str, timeout: float = 60.0,
             rack: str | None = None, until_offset: int | None = None) -> dict[int, bytes]:
    """offset -> value of partition 0, from the start to its high watermark (or ``until_offset``),
    by a consumer in ``client_dc`` (with ``client.rack`` = ``rack``)."""
    conf = {"bootstrap.servers": r.client_bootstrap(client_dc), "group.id": "drill", "enable.auto.commit": False,
            "log_level": 2, "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 2000}
    if rack:
        conf["client.rack"] = rack
    c = Consumer(conf)
    out: dict[int, bytes] = {}
    try:
        deadline = time.monotonic() + timeout
        if until_offset is None:
            _, until_offset = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        c.assign([TopicPartition(topic, 0, 0)])
        while len(out) < until_offset and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                out[m.offset()] = m.value()
    finally:
        c.close()
    return out


def probe(bootstrap: str, topic: str, timeout: float = 10.0) -> KafkaError | None:
    """One acks=all record, no retries: its error (None when acknowledged)."""
    got: list = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "enable.idempotence": False,
                  "message.timeout.ms": int(timeout * 1000), "log_level": 2})
    p.produce(topic, b"probe", partition=0, on_delivery=lambda err, _m: got.append(err))
    p.flush(timeout + 5)
    return got[0] if got else KafkaError(KafkaError._MSG_TIMED_OUT)


def advisor(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "shoal", "placement", "check", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def stretch_drill(r: Regions, topic: str = "drill-a", survivor: str = "dc2", lost: str = "dc1",
                  outage_s: float = 5.0, cut: tuple[str, str] = ("reset", "refuse"),
                  configs: dict[str, str] | None = None) -> dict[str, Any]:
    """Drill (a): RF 4, two replicas per datacenter, the preferred leader in ``lost``,
    min.insync.replicas 3 (or the topic ``configs`` given). Cut ``lost`` while a producer in ``survivor`` writes with acks=all;
    probe acks=all and read there during the outage; heal; read everything back."""
    near, far = r.brokers_in(survivor), r.brokers_in(lost)
    assignment = [far[0], near[0], far[1], near[1]]
    create_topic(r, survivor, topic, assignment, configs=configs or {"min.insync.replicas": "3"})
    until(lambda: layout(r, near[0], topic)[2] == tuple(sorted(assignment)), 30, "the full ISR")
    out: dict[str, Any] = {"assignment": assignment}
    check = advisor("--topic", topic, "--bootstrap-server", r[near[0]].bootstrap)
    out["advisor"] = check.stdout
    with AckedProducer(r.client_bootstrap(survivor), topic) as p:
        assert p.wait_for_more(200, 60), p.failed[-3:]
        t_cut = time.monotonic()
        r.cut(lost, *cut)  # (mode, new): Regions.cut
        acked_before = dict(p.acked)  # the cut reset the links: no acknowledgement crosses after it
        # the survivors elect a leader among themselves and shrink the ISR to their two
        out["layout_after_cut"] = until(
            lambda: (lay := layout(r, near[0], topic)) and lay[0] in near and set(lay[2]) <= set(near) and lay,
            60, "a leader in the surviving datacenter")
        out["election_s"] = time.monotonic() - t_cut
        acked_at_cut = len(acked_before)
        errors = []
        for _ in range(20):
            e = probe(r.client_bootstrap(survivor), topic)
            errors.append(None if e is None else e.name())
            if e is not None and e.code() == KafkaError.NOT_ENOUGH_REPLICAS:
                break
            time.sleep(0.5)
        out["probe_errors"] = errors
        # up to the last record acknowledged before the cut: the new leader's high watermark
        # catches up with its follower's next fetch (a read at once can stop a few records short,
        # as in Kafka; a whole-suite run saw 5 of 208 not yet visible)
        stored = read_all(r, survivor, topic, 60, until_offset=max(acked_before, default=-1) + 1)
        out["read_during_outage"] = len(stored)
        out["acked_at_cut"] = acked_at_cut
        out["missing_during_outage"] = sum(1 for o, v in acked_before.items() if stored.get(o) != v)
        rest = outage_s - (time.monotonic() - t_cut)
        if rest > 0:
            time.sleep(rest)
        out["acked_during_outage"] = len(p.acked) - acked_at_cut
        t_heal = time.monotonic()
        r.heal(lost)
        assert p.wait_for_more(1, 90), p.failed[-3:]
        out["resume_s"] = time.monotonic() - t_heal
        assert p.wait_for_more(200, 60), p.failed[-3:]
    out["layout_after_heal"] = until(lambda: (lay := layout(r, near[0], topic)) and len(lay[2]) >= 3 and lay, 60,
                                     "three in the ISR")
    stored = read_all(r, survivor, topic, 90)
    out["acked"] = len(p.acked)
    out["failed"] = len(p.failed)
    out["lost"] = len(p.lost(stored))
    out["offsets_contiguous"] = sorted(stored) == list(range(len(stored)))
    return out


def produce_records(bootstrap: str, topic: str, n: int, size: int, timeout: float = 120.0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 2})
    value = b"x" * size
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(timeout) == 0


def follower_fetching_bytes(r: Regions, topic: str, leader: int, follower: int, client_dc: str,
                            rack: str | None, records: int = 2000, size: int = 1000) -> dict[str, Any]:
    """A topic led by ``leader`` with ``follower`` in ``client_dc``: ``records`` produced in the
    leader's datacenter, then all read by a consumer in ``client_dc`` (``client.rack`` = ``rack``).
    The bytes that crossed between the two datacenters meanwhile, by kind, per consumed byte."""
    home = r.dc_of[leader]
    create_topic(r, home, topic, [leader, follower])
    before = r.cross_bytes(home, client_dc)
    produce_records(r.client_bootstrap(home), topic, records, size)
    got = read_all(r, client_dc, topic, 120, rack=rack)
    after = r.cross_bytes(home, client_dc)
    consumed = sum(len(v) for v in got.values())
    delta = {k: after[k] - before[k] for k in after}
    return {"records": len(got), "consumed_bytes": consumed, "cross": delta,
            "client_per_consumed": delta["client"] / max(1, consumed),
            "total_per_consumed": delta["total"] / max(1, consumed),
            "replication_per_consumed": delta["replication"] / max(1, consumed)}


def ack_latencies(bootstrap: str, topic: str, n: int = 400, rate: float = 100.0, size: int = 1000) -> list[float]:
    """Milliseconds from produce() to the acks=all acknowledgement (librdkafka's own measure,
    ``Message.latency()``) of ``n`` records sent at ``rate`` a second, one at a time (linger.ms 0)."""
    lat: list[float] = []
    failed: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "log_level": 2,
                  "message.timeout.ms": 60000})
    p.produce(topic, b"warm-up", partition=0)
    assert p.flush(30) == 0

    def done(err, m) -> None:
        if err:
            failed.append(err.name())
        else:
            lat.append(m.latency() * 1000)

    value = b"y" * size
    start = time.perf_counter()
    for i in range(n):
        wait = start + i / rate - time.perf_counter()
        if wait > 0:
            p.poll(wait)
        p.produce(topic, value, partition=0, on_delivery=done)
        p.poll(0)
    assert p.flush(90) == 0
    assert not failed, failed[:5]
    return lat


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


class IsrWatch:
    """A thread sampling a partition's ISR (as broker ``node`` sees it) every ``every`` s, while
    in a ``with``: the distinct ISRs in order, and how many times it changed."""

    def __init__(self, r: Regions, node: int, topic: str, every: float = 0.25) -> None:
        import threading

        self.r, self.node, self.topic, self.every = r, node, topic, every
        self.seen: list[tuple[int, ...]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                isr = layout(self.r, self.node, self.topic)[2]
            except Exception:
                continue
            if not self.seen or self.seen[-1] != isr:
                self.seen.append(isr)

    def __enter__(self) -> "IsrWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    @property
    def changes(self) -> int:
        return max(0, len(self.seen) - 1)


def promotion_drill(r: Regions, topic: str = "drill-b", survivor: str = "dc2", lost: str = "dc1",
                    outage_s: float = 5.0, cut: tuple[str, str] = ("reset", "refuse")) -> dict[str, Any]:
    """Drill (b): placement v2, 2 sync replicas + 1 observer per datacenter (leaders in
    ``lost``), min.insync.replicas 3, promotion under-min-isr. Cut ``lost`` while a producer in
    ``survivor`` writes with acks=all: the surviving observer is promoted and acks=all goes on
    there (the time from the cut to the first acknowledged probe); heal: the observer is demoted;
    everything acknowledged is read back."""
    placement = {"version": 2, "observerPromotionPolicy": "under-min-isr",
                 "replicas": [{"count": 2, "constraints": {"rack": lost}}, {"count": 2, "constraints": {"rack": survivor}}],
                 "observers": [{"count": 1, "constraints": {"rack": lost}}, {"count": 1, "constraints": {"rack": survivor}}]}
    import json

    near = r.brokers_in(survivor)
    create_topic(r, survivor, topic, configs={"replica.placement": json.dumps(placement), "min.insync.replicas": "3"})
    full = until(lambda: (lay := layout(r, near[0], topic)) and len(lay[2]) == 4 and lay, 30, "the four sync replicas")
    sync = set(full[2])
    observer = next(b for b in full[1] if b not in sync and r.dc_of[b] == survivor)
    out: dict[str, Any] = {"layout": full, "observer": observer}
    with AckedProducer(r.client_bootstrap(survivor), topic) as p:
        assert p.wait_for_more(200, 60), p.failed[-3:]
        t_cut = time.monotonic()
        r.cut(lost, *cut)  # (mode, new): Regions.cut
        acked_before = dict(p.acked)
        first_ok = None
        probes = []
        while time.monotonic() - t_cut < 90:
            e = probe(r.client_bootstrap(survivor), topic, timeout=1)
            probes.append(None if e is None else e.name())
            if e is None:
                first_ok = time.monotonic() - t_cut
                break
            time.sleep(0.1)
        out["first_acks_all_s"] = first_ok
        out["probe_errors"] = sorted(set(x for x in probes if x))
        out["layout_after_cut"] = layout(r, near[0], topic)
        # the running producer: at once after a reset; after a stall, once librdkafka gives up on
        # the requests in flight to the lost leader (request.timeout.ms, 30 s)
        assert p.wait_for_more(1, 150), p.failed[-3:]
        out["producer_resumed_s"] = time.monotonic() - t_cut
        assert p.wait_for_more(100, 60), p.failed[-3:]
        out["acked_during_outage"] = len(p.acked) - len(acked_before)
        rest = outage_s - (time.monotonic() - t_cut)
        if rest > 0:
            time.sleep(rest)
        r.heal(lost)
        out["layout_after_heal"] = until(
            lambda: (lay := layout(r, near[0], topic)) and set(lay[2]) == sync and lay, 90, "the observer demoted")
        assert p.wait_for_more(100, 60), p.failed[-3:]
    stored = read_all(r, survivor, topic, 90)
    out["missing_acked_before_cut"] = sum(1 for o, v in acked_before.items() if stored.get(o) != v)
    out["acked"] = len(p.acked)
    out["failed"] = len(p.failed)
    out["lost"] = len(p.lost(stored))
    return out


def promotion_cycles(r: Regions, cycles: int = 3, topic: str = "drill-cycles", survivor: str = "dc2",
                     lost: str = "dc1", outage_s: float = 5.0) -> dict[str, Any]:
    """Drill (b) ``cycles`` times on one cluster, one producer in ``survivor`` throughout: each
    cycle cuts ``lost`` until the observer is promoted and the producer's records are
    acknowledged again, keeps it cut ``outage_s``, heals it until the observer is demoted.
    Per cycle: seconds from the cut to the producer's next acknowledgement and to the
    promotion, from the heal to the demotion; at the end, acknowledged records lost."""
    import json

    placement = {"version": 2, "observerPromotionPolicy": "under-min-isr",
                 "replicas": [{"count": 2, "constraints": {"rack": lost}}, {"count": 2, "constraints": {"rack": survivor}}],
                 "observers": [{"count": 1, "constraints": {"rack": lost}}, {"count": 1, "constraints": {"rack": survivor}}]}
    near = r.brokers_in(survivor)
    create_topic(r, survivor, topic, configs={"replica.placement": json.dumps(placement), "min.insync.replicas": "3"})
    full = until(lambda: (lay := layout(r, near[0], topic)) and len(lay[2]) == 4 and lay, 30, "the four sync replicas")
    sync = set(full[2])
    observer = next(b for b in full[1] if b not in sync and r.dc_of[b] == survivor)
    rows = []
    with AckedProducer(r.client_bootstrap(survivor), topic) as p:
        assert p.wait_for_more(200, 60), p.failed[-3:]
        for _ in range(cycles):
            t_cut = time.monotonic()
            r.cut(lost)
            row: dict[str, Any] = {}
            until(lambda: observer in layout(r, near[0], topic)[2], 90, "the observer promoted")
            row["promoted_s"] = time.monotonic() - t_cut
            assert p.wait_for_more(1, 90), p.failed[-3:]
            row["acks_again_s"] = time.monotonic() - t_cut
            time.sleep(max(0.0, outage_s - (time.monotonic() - t_cut)))
            t_heal = time.monotonic()
            r.heal(lost)
            until(lambda: set(layout(r, near[0], topic)[2]) == sync, 90, "the observer demoted")
            row["demoted_s"] = time.monotonic() - t_heal
            assert p.wait_for_more(100, 60), p.failed[-3:]
            rows.append(row)
    stored = read_all(r, survivor, topic, 120)
    return {"cycles": rows, "acked": len(p.acked), "failed": len(p.failed), "lost": len(p.lost(stored))}
