"""One fault run, shared by tests/faults/test_smoke.py and bench/bench_faults.py: a fresh topic,
an idle topic beside it (same RF, never written: leadership moves on partitions whose epochs
stay empty), the workload, a schedule played by the nemesis, liveness after healing, the final
read, replica bytes, the checkers, and that every replica is back in the ISR of every partition
of both topics within ``isr_timeout`` (``Result.out_of_isr``)::

    run = FaultRun(cluster, etcd, rf=1)
    result = run.play(schedule)          # a checker.Result; run.nemesis.events, run.workload
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from typing import Callable

from faults.checker import Result, check, log_bytes_upto
from faults.nemesis import Nemesis, Schedule
from faults.workload import Workload
from shoal.client import AdminClient


def create_topic(cluster, name: str, rf: int, partitions: int, attempts: int = 3) -> None:
    """CreateTopics through a live broker's direct port (a request that times out is sent again,
    to the next broker: it may have committed, so TOPIC_ALREADY_EXISTS then counts as done);
    until every partition has a leader."""
    from shoal.client import KafkaError

    async def go(bootstrap: str) -> None:
        async with AdminClient(bootstrap, timeout=30) as c:
            await c.create_topics([{"name": name, "num_partitions": partitions, "replication_factor": rf}])

    for attempt in range(attempts):
        live = cluster.live
        t0 = time.monotonic()
        try:
            asyncio.run(go(live[attempt % len(live)].bootstrap))
            break
        except KafkaError as e:
            if e.code_name == "TOPIC_ALREADY_EXISTS" and attempt > 0:
                break
            if e.code_name != "REQUEST_TIMED_OUT" or attempt == attempts - 1:
                raise
            print(f"CreateTopics {name}: {e} after {time.monotonic() - t0:.1f} s; again (attempt {attempt + 2})",
                  flush=True)
    deadline = time.monotonic() + 30
    while any(cluster.leader_of(name, p) < 0 for p in range(partitions)):
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}: partitions without a leader after 30 s")
        time.sleep(0.2)


def isr(cluster, topic: str) -> dict[int, tuple[int, ...]]:
    async def go() -> dict[int, tuple[int, ...]]:
        async with AdminClient(cluster.live[0].bootstrap, timeout=10) as c:
            t = (await c.describe_topics([topic]))[topic]
            return {p.partition: tuple(p.isr) for p in t.partitions}

    return asyncio.run(go())


def seed_records(bootstrap: str, topic: str, partitions: int, per_partition: int = 5) -> None:
    """A few acks=all records in every partition, then nothing more: the idle topic's logs are not
    empty (a follower's divergence check needs a fetch offset above the log start)."""
    from confluent_kafka import Producer

    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 2})
    for i in range(partitions * per_partition):
        p.produce(topic, b"idle-%d" % i, partition=i % partitions, on_delivery=lambda err, _m: err and errors.append(err))
    if p.flush(30) or errors:
        raise AssertionError(f"{topic}: records not acknowledged: {errors[:3]}")


DIVERGES = re.compile(r"INFO shoal\.replica\.fetcher: (\S+): log diverges from leader")


def spinning(logs: dict[int, str], most: int = 20) -> dict[tuple[int, str], int]:
    """``(broker, partition) -> times`` a follower was told its log diverges, where more than
    ``most`` in one run: a follower truncates once or twice per leadership change; one that is
    told again and again is not making progress (issue 24's livelock logged it 2,800 times a
    second while still listed in the ISR)."""
    out: dict[tuple[int, str], int] = {}
    for n, text in logs.items():
        counts: dict[str, int] = {}
        for m in DIVERGES.finditer(text):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
        out.update(((n, p), k) for p, k in counts.items() if k > most)
    return out


def out_of_isr(cluster, topics: list[str], timeout: float,
               settle: float = 0.0) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...]]]:
    """The partitions whose ISR lacks a sync replica: ``(topic, partition) -> (replicas, isr)``;
    empty when every replica rejoined within ``timeout`` (polled) and, ``settle`` seconds later
    (longer than ``replica.lag.time.max.ms``), is still there: a follower that stopped fetching
    stays in the ISR until the leader's lag clock runs out, so one look proves nothing."""
    first = _out_of_isr(cluster, topics, timeout)
    if first or settle <= 0:
        return first
    time.sleep(settle)
    return _out_of_isr(cluster, topics, 5.0)


def _out_of_isr(cluster, topics: list[str], timeout: float) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...]]]:
    async def go() -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...]]]:
        async with AdminClient(cluster.live[0].bootstrap, timeout=10) as c:
            described = await c.describe_topics(topics)
        return {(t, p.partition): (tuple(p.replicas), tuple(p.isr)) for t in topics for p in described[t].partitions
                if set(p.replicas) - set(getattr(p, "observers", ()) or ()) - set(p.isr)}

    deadline = time.monotonic() + timeout
    while True:
        try:
            missing = asyncio.run(go())
        except Exception as e:  # a broker mid-restart answered: ask again
            missing = {("?", -1): ((), (repr(e)[:80],))}  # type: ignore[dict-item]
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(0.5)


def replica_bytes(cluster, topic: str, hws: dict[int, int]) -> dict[int, dict[int, bytes]]:
    """partition -> broker -> its log bytes up to the HW, for every in-sync replica (read from the
    files, not through Fetch: ``checker.log_bytes_upto``)."""
    return {p: {b: log_bytes_upto(cluster[b].data_dir / f"{topic}-{p}", hws[p]) for b in members}
            for p, members in isr(cluster, topic).items()}


class FaultRun:
    def __init__(self, cluster, etcd, rf: int = 1, partitions: int = 6, producers: int = 2, consumers: int = 2,
                 rate: float = 150.0, log: Callable[[str], None] = print, idle_partitions: int = 3,
                 isr_timeout: float = 60.0) -> None:
        self.cluster, self.etcd, self.rf, self.partitions = cluster, etcd, rf, partitions
        self.topic = f"faults-rf{rf}-{uuid.uuid4().hex[:6]}"
        self.idle_topic = f"{self.topic}-idle" if idle_partitions else ""
        self.isr_timeout = isr_timeout
        self.log = log
        create_topic(cluster, self.topic, rf, partitions)
        if idle_partitions:
            create_topic(cluster, self.idle_topic, rf, idle_partitions)
            seed_records(cluster.bootstrap(), self.idle_topic, idle_partitions)
        self.workload = Workload(self.topic, partitions, cluster.client_bootstrap("producer"),
                                 cluster.client_bootstrap("consumer"), observer_bootstrap=cluster.bootstrap(),
                                 producers=producers, consumers=consumers, rate=rate)
        self.nemesis = Nemesis(cluster, etcd, self.topic, idle_topic=self.idle_topic, log=log)
        self.hws: dict[int, int] = {}

    def play(self, schedule: Schedule, warmup_acks: int = 100, after_acks: int = 300) -> Result:
        """Workload; ``warmup_acks``; the schedule; every broker back; ``after_acks`` more (the
        cluster is live again); stop; final read; checks. A liveness failure raises."""
        c, w = self.cluster, self.workload
        marks = {n: len(b.log_text()) for n, b in c.brokers.items()}
        w.start()
        try:
            if not w.wait_acked(warmup_acks, timeout=60):
                raise AssertionError("no acknowledgements before the faults")
            self.log(str(schedule))
            self.nemesis.run(schedule)
            c.wait_brokers(set(c.brokers), timeout=60)
            if not w.wait_acked(after_acks, timeout=90):
                raise AssertionError(f"producers stuck after the faults healed (fatal: {w.fatal})")
        finally:
            w.stop()
        self.hws = w.final_read(c.bootstrap())
        result = check(w.history, replica_bytes(c, self.topic, self.hws))
        lag_s = int(c[min(c.brokers)].overrides.get("replica.lag.time.max.ms", 30000)) / 1000
        result.out_of_isr = out_of_isr(c, [t for t in (self.topic, self.idle_topic) if t], self.isr_timeout,
                                       settle=lag_s + 2)
        result.spinning = spinning({n: b.log_text()[marks[n]:] for n, b in c.brokers.items()})
        return result


def high_watermarks(cluster, topic: str, partitions: int) -> dict[int, int]:
    """ListOffsets LATEST of every partition through a live broker's direct port."""
    from shoal.client import LATEST

    async def go() -> dict[int, int]:
        async with AdminClient(cluster.live[0].bootstrap, timeout=10) as c:
            got = await c.list_offsets({(topic, p): LATEST for p in range(partitions)})
            return {p: got[(topic, p)][0] for p in range(partitions)}

    return asyncio.run(go())


def replicating(cluster, topic: str, partitions: int, rf: int, timeout: float = 10.0) -> bool:
    """Whether followers really hold the data: every partition with records has ``rf`` in-sync
    replicas whose log files are byte-identical and non-empty up to the high watermark, and some
    partition has records (a high watermark above 0), at some poll within ``timeout``. (An ISR listing alone proves nothing: a cluster without followers
    may still list every replica in it.)"""
    deadline = time.monotonic() + timeout
    while True:
        hws = high_watermarks(cluster, topic, partitions)
        try:
            by_p = replica_bytes(cluster, topic, hws)
        except OSError:  # a follower without the partition's directory
            by_p = {}
        if any(hws.values()) and by_p and all(len(by_b) == rf and len(set(by_b.values())) == 1 and (hws[p] == 0 or all(by_b.values()))
                        for p, by_b in by_p.items()):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
