"""The transactional workload of a fault run (issue 14): a consume-transform-produce pipeline with
real confluent-kafka clients, exactly once through Kafka transactions, while the nemesis plays a
schedule; then :mod:`faults.txn_checker` judges the read_committed output::

    run = TxnRun(cluster, etcd, rf=3, partitions=3, records=600)
    result = run.play(schedule)           # a txn_checker.TxnResult; run.pipeline.restarts ...

- ``seed``: ``records`` values ``in-<i>`` written to the input topic, partition ``i % partitions``,
  by an idempotent acks=all producer through a direct address before any fault (their offsets,
  from the delivery reports, are the input order);
- workers (threads; ``workers`` of them, one consumer group): a consumer (``read_committed``,
  no auto commit, ``subscribe``) and a transactional producer (``transactional.id`` =
  ``<group>-w<i>``: a restarted worker fences its predecessor), both through the clients' link
  proxies. Loop: up to ``batch`` records, ``begin_transaction``, each record's transform
  (``value + "|out"``) to the same partition of the output topic,
  ``send_offsets_to_transaction`` (the next offsets with the consumer's group metadata),
  ``commit_transaction``. Any error (fenced, coordinator gone, rebalance, timeout) ends the
  worker's clients and starts new ones, which resume from the group's committed offsets; the
  new producer's ``init_transactions`` finishes or aborts what the old one left. A worker whose
  client call has not returned for ``wedge_after`` seconds is replaced by a watchdog (``wedged``
  counts them; its consumer leaves the group after ``max.poll.interval.ms``, 20 s);
- done when the group's committed offsets reach the end of every input partition;
- final read (direct address): once every output partition's last stable offset equals its high
  watermark (no transaction open: an abandoned one ends by ``transaction.timeout.ms``), a
  read_committed consumer reads each from offset 0 to its end; a read_uncommitted one counts.

``TxnNemesis`` adds broker targets for transactions to the nemesis' roles: ``txn-coordinator``
(the broker FindCoordinator names for worker 0's transactional id), ``group-coordinator``, and
``out-leader:<p>`` (a partition's leader of the output topic); ``leader:<p>`` etc. are the input
topic's. ``txn_schedule`` draws random schedules that use them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from faults.nemesis import Nemesis, Op, Schedule
from faults.run import create_topic
from faults.txn_checker import SUFFIX, TxnResult, check_pipeline
from faults.workload import CLIENT_CONF
from shoal.client import LATEST, AdminClient

TXN_ROLES = ("txn-coordinator", "group-coordinator", "out-leader")


@dataclass
class Restart:
    worker: str
    reason: str
    at: float


@dataclass
class TxnPipeline:
    input_topic: str
    output_topic: str
    partitions: int
    records: int
    producer_bootstrap: str
    consumer_bootstrap: str
    direct_bootstrap: str
    workers: int = 2
    batch: int = 20
    pause: float = 0.02
    txn_timeout_ms: int = 10_000
    wedge_after: float = 45.0
    group: str = ""
    inputs: dict[int, list[str]] = field(default_factory=dict)
    commits: int = 0
    wedged: int = 0  # workers replaced because a client call never returned (see _watch)
    restarts: list[Restart] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.group = self.group or f"txn-{self.input_topic}"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._steps: dict[str, tuple[float, str]] = {}  # worker -> (monotonic time, what it is doing)
        self._last_commit: dict[str, float] = {}

    def tid(self, worker: int) -> str:
        return f"{self.group}-w{worker}"

    # -- input ------------------------------------------------------------------------------------

    def seed(self, timeout: float = 60.0) -> None:
        """Write the input records (direct address, before faults); ``inputs`` in offset order."""
        p = Producer({**CLIENT_CONF, "bootstrap.servers": self.direct_bootstrap, "enable.idempotence": True,
                      "acks": "all", "linger.ms": 5})
        acked: dict[int, list[tuple[int, str]]] = {q: [] for q in range(self.partitions)}
        failed: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                acked[msg.partition()].append((msg.offset(), msg.value().decode()))
            else:
                failed.append(str(err))

        for i in range(self.records):
            while True:
                try:
                    p.produce(self.input_topic, value=f"in-{i}".encode(), partition=i % self.partitions,
                              on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.05)
        if p.flush(timeout) or failed:
            raise AssertionError(f"seeding the input: {p.flush(0)} undelivered, errors {failed[:3]}")
        self.inputs = {q: [v for _, v in sorted(vs)] for q, vs in acked.items()}

    # -- workers ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._gen = [0] * self.workers
        for i in range(self.workers):
            self._spawn(i)
        self._watchdog = threading.Thread(target=self._watch, name="txn-watchdog", daemon=True)
        self._watchdog.start()

    def _spawn(self, i: int) -> None:
        t = threading.Thread(target=self._work, args=(i, self._gen[i]), name=f"txn-w{i}.{self._gen[i]}", daemon=True)
        self._threads.append(t)
        self._step(f"w{i}", "starting")
        t.start()

    def _watch(self) -> None:
        """Replace a worker whose client call has not returned for ``wedge_after`` seconds (every
        call has a timeout below that): the new one's ``init_transactions`` fences the old producer,
        and the old consumer leaves the group after ``max.poll.interval.ms``."""
        while not self._stop.wait(1.0):
            now = time.monotonic()
            for i in range(self.workers):
                at, what = self._steps.get(f"w{i}", (now, ""))
                if now - at > self.wedge_after:
                    self._restart(f"w{i}", f"wedged: {what} did not return in {now - at:.0f} s; replaced")
                    self.wedged += 1
                    self._gen[i] += 1
                    self._spawn(i)

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.1, deadline - time.monotonic()))

    def _step(self, name: str, what: str) -> None:
        self._steps[name] = (time.monotonic(), what)

    def status(self) -> str:
        """One line per worker (its step, for how long, its last commit) and the input and
        output partitions' HW/LSO: what a liveness failure prints."""
        now = time.monotonic()
        lines = []
        for name in sorted(self._steps):
            at, what = self._steps[name]
            last = self._last_commit.get(name)  # (no consumer calls here: they wait for the worker's own)
            lines.append(f"{name}: {what} for {now - at:.1f} s, last commit "
                         f"{'never' if last is None else f'{now - last:.1f} s ago'}")
        for topic in (self.input_topic, self.output_topic):
            try:
                lines.append(f"{topic}: HW {self._ends(0, topic)} LSO {self._ends(1, topic)}")
            except Exception as e:
                lines.append(f"{topic}: {e!r}")
        return "; ".join(lines)

    def _restart(self, name: str, reason: str) -> None:
        with self._lock:
            self.restarts.append(Restart(name, reason, time.time()))

    def _current(self, i: int, gen: int) -> bool:
        return not self._stop.is_set() and self._gen[i] == gen

    def _work(self, i: int, gen: int) -> None:
        name = f"w{i}"
        current = lambda: self._current(i, gen)  # noqa: E731
        while current():
            producer = consumer = None
            try:
                producer = Producer({
                    **CLIENT_CONF, "bootstrap.servers": self.producer_bootstrap, "transactional.id": self.tid(i),
                    "transaction.timeout.ms": self.txn_timeout_ms, "linger.ms": 5, "client.id": f"{name}-p",
                    **_debug(name),
                })
                self._step(name, "init_transactions")
                producer.init_transactions(30)
                consumer = Consumer({
                    **CLIENT_CONF, "bootstrap.servers": self.consumer_bootstrap, "group.id": self.group,
                    "isolation.level": "read_committed", "enable.auto.commit": False,
                    "auto.offset.reset": "earliest", "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
                    "max.poll.interval.ms": 20000, "client.id": f"{name}-c",
                })
                consumer.subscribe([self.input_topic])
                self._loop(name, producer, consumer, current)
            except KafkaException as e:
                if current():
                    self._restart(name, str(e.args[0]) if e.args else repr(e))
            except Exception as e:  # anything else: still a restart, recorded
                if current():
                    self._restart(name, repr(e))
            finally:
                if self._gen[i] == gen:
                    self._step(name, "restarting")
                _leave(consumer)
                if producer is not None:
                    try:  # an open transaction would hold the LSO until transaction.timeout.ms
                        producer.abort_transaction(5)
                    except Exception:
                        pass
                if current():
                    time.sleep(0.5)

    def _loop(self, name: str, producer: Producer, consumer: Consumer, current: Callable[[], bool]) -> None:
        def step(what: str) -> None:  # a replaced worker's thread, back from its wedge, says nothing
            if current():
                self._step(name, what)

        while current():
            step("consume")
            msgs = consumer.consume(num_messages=self.batch, timeout=0.5)
            good = []
            for m in msgs:
                err = m.error()
                if err is None:
                    good.append(m)
                elif err.fatal():
                    raise KafkaException(err)
            if not good:
                continue
            step(f"transaction of {len(good)}")
            producer.begin_transaction()
            nxt: dict[int, int] = {}
            for m in good:
                while True:
                    try:
                        producer.produce(self.output_topic, value=m.value() + SUFFIX.encode(),
                                         partition=m.partition())
                        break
                    except BufferError:
                        producer.poll(0.05)
                nxt[m.partition()] = m.offset() + 1
            producer.poll(0)  # serve delivery reports, as a confluent-kafka application must
            offsets = [TopicPartition(self.input_topic, p, o) for p, o in sorted(nxt.items())]
            step(f"send_offsets_to_transaction {[(o.partition, o.offset) for o in offsets]}")
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
            step("commit_transaction")
            producer.commit_transaction(30)
            with self._lock:
                self.commits += 1
            if current():
                self._last_commit[name] = time.monotonic()
            if self.pause:
                time.sleep(self.pause)

    # -- progress and the final read ----------------------------------------------------------------

    def committed_offsets(self) -> dict[int, int | None]:
        async def go() -> dict[tuple[str, int], int]:
            async with AdminClient(self.direct_bootstrap, timeout=10) as a:
                return await a.fetch_offsets(self.group)

        got = asyncio.run(go())
        return {p: got.get((self.input_topic, p)) for p in range(self.partitions)}

    def wait_done(self, timeout: float) -> bool:
        """Until the group's committed offsets reach every input partition's end; False on timeout."""
        ends = {p: len(v) for p, v in self.inputs.items()}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.committed_offsets() == ends:
                    return True
            except Exception:  # the coordinator moving: ask again
                pass
            time.sleep(1.0)
        return False

    def _ends(self, isolation_level: int, topic: str | None = None) -> dict[int, int]:
        topic = topic or self.output_topic

        async def go() -> dict[tuple[str, int], Any]:
            async with AdminClient(self.direct_bootstrap, timeout=10) as a:
                return await a.list_offsets({(topic, p): LATEST for p in range(self.partitions)},
                                            isolation_level=isolation_level)

        return {p: o[0] for (_, p), o in asyncio.run(go()).items()}

    def final_read(self, timeout: float = 90.0) -> tuple[dict[int, list[str]], int]:
        """(each output partition's read_committed values from offset 0, how many records a
        read_uncommitted read saw), once no transaction is open on the output."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                hw, lso = self._ends(0), self._ends(1)
                if hw == lso:
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"output transactions still open after {timeout:.0f} s: HW {hw} LSO {lso}")
            time.sleep(1.0)
        committed = self._read("read_committed", deadline)
        uncommitted = self._read("read_uncommitted", deadline)
        return committed, sum(len(v) for v in uncommitted.values())

    def _read(self, isolation: str, deadline: float) -> dict[int, list[str]]:
        c = Consumer({**CLIENT_CONF, "bootstrap.servers": self.direct_bootstrap, "group.id": f"{self.group}-check",
                      "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
        out: dict[int, list[str]] = {p: [] for p in range(self.partitions)}
        todo = set(range(self.partitions))
        try:
            c.assign([TopicPartition(self.output_topic, p, 0) for p in todo])
            while todo and time.monotonic() < deadline:
                for m in c.consume(num_messages=500, timeout=0.5):
                    err = m.error()
                    if err is None:
                        out[m.partition()].append(m.value().decode())
                    elif err.code() == KafkaError._PARTITION_EOF:
                        todo.discard(m.partition())
        finally:
            c.close()
        if todo:
            raise AssertionError(f"final {isolation} read: partitions {sorted(todo)} not read to their end")
        return out


def _debug(name: str) -> dict[str, Any]:
    """With ``FAULTS_TXN_DEBUG=DIR``: librdkafka's eos/protocol/broker debug log of each worker's
    producer into ``DIR/<worker>.log`` (to see what a stuck transactional call waits for)."""
    where = os.environ.get("FAULTS_TXN_DEBUG")
    if not where:
        return {}
    logger = logging.getLogger(f"faults.txn.{name}")
    if not logger.handlers:
        logger.addHandler(logging.FileHandler(os.path.join(where, f"{name}.log")))
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    return {"debug": "eos,protocol,broker", "logger": logger, "log_level": 7}


def _leave(consumer: Consumer | None) -> None:
    """Leave the group in poll, then close (workload.py's way around librdkafka #4041)."""
    if consumer is None:
        return
    try:
        consumer.unsubscribe()
        deadline = time.monotonic() + 10
        while consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.1)
    except Exception:
        pass
    try:
        consumer.close()
    except Exception:
        pass


# -- the nemesis' transaction roles ---------------------------------------------------------------


@dataclass
class TxnNemesis(Nemesis):
    """The nemesis with ``txn-coordinator``, ``group-coordinator`` and ``out-leader:<p>`` targets
    (see the module doc); ``topic`` is the input topic."""

    output_topic: str = ""
    transactional_id: str = ""
    group: str = ""

    def resolve(self, target: str) -> int:
        if target in ("txn-coordinator", "group-coordinator"):
            key, key_type = ((self.transactional_id, 1) if target == "txn-coordinator" else (self.group, 0))

            async def go() -> int:
                async with AdminClient(self.cluster.live[0].bootstrap, timeout=10) as a:
                    return (await a.find_coordinator(key, key_type))[0]

            return asyncio.run(go())
        if target.startswith("out-leader"):
            _, _, p = target.partition(":")
            leader = self.cluster.leader_of(self.output_topic, int(p or 0))
            if leader < 0:
                raise RuntimeError(f"{target}: output partition {p} has no leader")
            return leader
        return super().resolve(target)


def txn_schedule(seed: int, duration: float, brokers: list[int], clients: list[str], kinds: tuple[str, ...],
                 partitions: int, max_hold: float = 4.0, txn_share: float = 0.5) -> Schedule:
    """``Schedule.random`` whose kill and pause ops aim, ``txn_share`` of the time, at a
    transaction role instead (drawn from the seed too, so a replay is the same)."""
    base = Schedule.random(seed, duration, brokers, clients, kinds=kinds, partitions=partitions, max_hold=max_hold)
    rng = random.Random(seed * 7919 + 1)
    ops = []
    for op in base.ops:
        if op.kind in ("kill", "pause") and rng.random() < txn_share:
            role = rng.choice(TXN_ROLES)
            target = f"out-leader:{rng.randrange(partitions)}" if role == "out-leader" else role
            op = Op(op.at, op.kind, target, op.hold, op.mode)
        ops.append(op)
    return Schedule(seed, tuple(ops))


# -- one run ----------------------------------------------------------------------------------------


class TxnRun:
    """Fresh input and output topics (``partitions``, RF ``rf``), the seeded input, the pipeline
    through the clients' proxies, the nemesis; ``play`` returns the checker's result."""

    def __init__(self, cluster, etcd, rf: int = 3, partitions: int = 3, records: int = 600, workers: int = 2,
                 batch: int = 20, pause: float = 0.02, txn_timeout_ms: int = 10_000,
                 log: Callable[[str], None] = print) -> None:
        self.cluster, self.log = cluster, log
        tag = uuid.uuid4().hex[:6]
        self.input_topic, self.output_topic = f"txn-in-rf{rf}-{tag}", f"txn-out-rf{rf}-{tag}"
        create_topic(cluster, self.input_topic, rf, partitions)
        create_topic(cluster, self.output_topic, rf, partitions)
        self.pipeline = TxnPipeline(self.input_topic, self.output_topic, partitions, records,
                                    cluster.client_bootstrap("producer"), cluster.client_bootstrap("consumer"),
                                    cluster.bootstrap(), workers=workers, batch=batch, pause=pause,
                                    txn_timeout_ms=txn_timeout_ms)
        self.nemesis = TxnNemesis(cluster, etcd, self.input_topic, log=log, output_topic=self.output_topic,
                                  transactional_id=self.pipeline.tid(0), group=self.pipeline.group)
        self.offsets: dict[int, int | None] = {}
        self.left_after_faults: int | None = None  # input records not yet consumed when the schedule ended

    def _left(self) -> int | None:
        try:
            done = self.pipeline.committed_offsets()
        except Exception:  # the group's coordinator moving: unknown
            return None
        return sum(len(v) - (done.get(p) or 0) for p, v in self.pipeline.inputs.items())

    def play(self, schedule: Schedule, done_timeout: float = 120.0) -> TxnResult:
        """Seed; workers; wait for the first commit; the schedule; every broker back; until the input is
        consumed (liveness: raises after ``done_timeout``); stop; final read; check."""
        c, pl = self.cluster, self.pipeline
        pl.seed()
        pl.start()
        try:
            deadline = time.monotonic() + 90
            while pl.commits == 0:
                if time.monotonic() > deadline:
                    raise AssertionError(f"no transaction committed before the faults (restarts: "
                                         f"{[r.reason for r in pl.restarts[-3:]]})")
                time.sleep(0.1)
            self.log(str(schedule))
            self.nemesis.run(schedule)
            self.left_after_faults = self._left()
            c.wait_brokers(set(c.brokers), timeout=60)
            t0 = time.monotonic()
            if not pl.wait_done(done_timeout):
                raise AssertionError(f"pipeline did not finish the input {done_timeout:.0f} s after the faults "
                                     f"(committed {pl.committed_offsets()}, {pl.commits} commits, last restarts "
                                     f"{[r.reason for r in pl.restarts[-3:]]}; {pl.status()})")
            self.log(f"input consumed {time.monotonic() - t0:.1f} s after the faults healed "
                     f"({self.left_after_faults} records were left)")
        finally:
            pl.stop()
        self.offsets = pl.committed_offsets()
        t0 = time.monotonic()
        view, uncommitted = pl.final_read()
        self.log(f"final read in {time.monotonic() - t0:.1f} s")
        return check_pipeline(pl.inputs, view, self.offsets, uncommitted)
