"""The workload of a fault run (Jepsen's Kafka queue workload, with real confluent-kafka clients):
idempotent acks=all producers over several partitions and consumers in a group that commit,
every acknowledgement, send error, read and commit recorded into a ``checker.History``::

    w = Workload(topic, partitions=6, producer_bootstrap=..., consumer_bootstrap=...,
                 observer_bootstrap=direct)
    w.start()
    ...                                   # faults
    w.stop()                              # producers flush (bounded), consumers commit and close
    w.final_read(direct)                  # every partition from its start to its high watermark
    result = checker.check(w.history)

Producers (threads, one confluent-kafka Producer each): value ``<name>.<generation>:<seq>``, sent
to partition ``seq % partitions`` (every producer covers every partition, in sequence order),
``enable.idempotence=true``, ``acks=all``, a paced rate. A producer whose client reports a fatal
error (idempotence state lost) is recorded and replaced by a new one (``generation`` + 1): values
stay unique.

Consumers (threads): ``subscribe`` in group ``group``, ``enable.auto.commit=false``, every read
recorded with the consumer's session (moved at each assignment), positions committed
synchronously every ``commit_interval`` seconds and at revocation; each partition of a
successful commit is recorded. An observer thread reads the group's committed offsets from the
broker (OffsetFetch, direct address) every second into ``observed_commits``.

Clients are told their bootstrap (through link proxies in a ``ProxiedCluster``); the observer and
the final read use a direct address, so they see the state, not the faults.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from faults.checker import Ack, Commit, History, Read, SendError

CLIENT_CONF = {
    "socket.keepalive.enable": True,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "retry.backoff.ms": 100,
    "topic.metadata.refresh.interval.ms": 2000,
    "log_level": 2,  # connection failures are the point of a fault run: error_cb records them
}


class Workload:
    def __init__(self, topic: str, partitions: int, producer_bootstrap: str, consumer_bootstrap: str,
                 observer_bootstrap: str | None = None, producers: int = 2, consumers: int = 2,
                 rate: float = 200.0, group: str | None = None, commit_interval: float = 0.5,
                 message_timeout_ms: int = 120_000) -> None:
        self.topic, self.partitions = topic, partitions
        self.producer_bootstrap, self.consumer_bootstrap = producer_bootstrap, consumer_bootstrap
        self.observer_bootstrap = observer_bootstrap
        self.n_producers, self.n_consumers, self.rate = producers, consumers, rate
        self.group = group or f"faults-{topic}"
        self.commit_interval, self.message_timeout_ms = commit_interval, message_timeout_ms
        self.history = History()
        self.fatal: list[str] = []
        self.client_errors: list[str] = []  # error_cb: transport errors while links are cut (expected)
        self._lock = threading.Lock()
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads: list[threading.Thread] = []
        self._consumer_threads: list[threading.Thread] = []
        self._observer: threading.Thread | None = None
        self._fatal_clients: set[str] = set()
        self._flush_timeout = 60.0

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        for i in range(self.n_producers):
            self._threads.append(threading.Thread(target=self._produce, args=(f"p{i}",), daemon=True))
        for i in range(self.n_consumers):
            self._consumer_threads.append(threading.Thread(target=self._consume, args=(f"c{i}",), daemon=True))
        if self.observer_bootstrap:
            self._observer = threading.Thread(target=self._observe, daemon=True)
        for t in [*self._threads, *self._consumer_threads, *([self._observer] if self._observer else [])]:
            t.start()

    def stop(self, flush_timeout: float = 60.0, drain: float = 5.0) -> None:
        """Stop producing (outstanding sends get ``flush_timeout``), let consumers read ``drain``
        seconds more, then stop them."""
        self._flush_timeout = flush_timeout
        self._stop_producing.set()
        for t in self._threads:
            t.join(flush_timeout + 10)
        time.sleep(drain)
        self._stop_consuming.set()
        for t in self._consumer_threads:
            t.join(60)
        if self._observer is not None:
            self._observer.join(30)

    @property
    def acked(self) -> int:
        return len(self.history.acks)

    def wait_acked(self, n: int, timeout: float = 60.0) -> bool:
        """Until ``n`` more sends than now are acknowledged; False on timeout."""
        target = self.acked + n
        deadline = time.monotonic() + timeout
        while self.acked < target and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.acked >= target

    # -- producers --------------------------------------------------------------------------------

    def _error_cb(self, who: str):
        def cb(err: KafkaError) -> None:
            with self._lock:
                (self.fatal if err.fatal() else self.client_errors).append(f"{who}: {err}")
                if err.fatal():
                    self._fatal_clients.add(who)
        return cb

    def _produce(self, name: str) -> None:
        generation, seq = 0, 0
        period = 1.0 / self.rate if self.rate else 0.0
        next_at = time.monotonic()
        while not self._stop_producing.is_set():
            who = f"{name}.{generation}"
            p = Producer({
                **CLIENT_CONF, "bootstrap.servers": self.producer_bootstrap, "enable.idempotence": True,
                "acks": "all", "linger.ms": 5, "message.timeout.ms": self.message_timeout_ms,
                "client.id": who, "error_cb": self._error_cb(who),
            })

            def on_delivery(err: Any, msg: Any, who: str = who) -> None:
                value = msg.value()
                s = int(value.rsplit(b":", 1)[1])
                with self._lock:
                    if err is None:
                        self.history.acks.append(Ack(who, s, msg.partition(), msg.offset(), value, time.time()))
                    else:
                        self.history.errors.append(SendError(who, s, msg.partition(), value, str(err), time.time()))

            while not self._stop_producing.is_set() and who not in self._fatal_clients:
                now = time.monotonic()
                if now < next_at:
                    p.poll(min(next_at - now, 0.05))
                    continue
                next_at = max(next_at + period, now - 1.0)  # catch up at most 1 s of backlog
                try:
                    p.produce(self.topic, value=f"{who}:{seq}".encode(), partition=seq % self.partitions,
                              on_delivery=on_delivery)
                    seq += 1
                except BufferError:
                    p.poll(0.1)
                p.poll(0)
            p.flush(self._flush_timeout)
            generation += 1

    # -- consumers --------------------------------------------------------------------------------

    def _consume(self, name: str) -> None:
        session = [0]
        positions: dict[int, int] = {}  # partition -> next offset to commit (read so far + 1)
        c = Consumer({
            **CLIENT_CONF, "bootstrap.servers": self.consumer_bootstrap, "group.id": self.group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": name,
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000, "error_cb": self._error_cb(name),
        })

        def commit(parts: list[int]) -> None:
            offsets = [TopicPartition(self.topic, p, positions[p]) for p in parts if p in positions]
            if not offsets:
                return
            try:
                done = c.commit(offsets=offsets, asynchronous=False)
            except Exception as e:  # KafkaException: rebalance in progress, coordinator gone...
                with self._lock:
                    self.client_errors.append(f"{name} commit: {e}")
                return
            now = time.time()
            with self._lock:
                for tp in done or []:
                    if tp.error is None:
                        self.history.commits.append(Commit(name, tp.partition, tp.offset, now))

        def on_assign(consumer: Any, parts: list[TopicPartition]) -> None:
            session[0] += 1

        def on_revoke(consumer: Any, parts: list[TopicPartition]) -> None:
            commit([tp.partition for tp in parts])
            for tp in parts:
                positions.pop(tp.partition, None)
            session[0] += 1

        c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        last_commit = time.monotonic()
        try:
            while not self._stop_consuming.is_set():
                msg = c.poll(0.2)
                if msg is not None and msg.error() is None:
                    with self._lock:
                        self.history.reads.append(
                            Read(name, session[0], msg.partition(), msg.offset(), msg.value(), time.time()))
                    positions[msg.partition()] = msg.offset() + 1
                if time.monotonic() - last_commit >= self.commit_interval:
                    commit(list(positions))
                    last_commit = time.monotonic()
            commit(list(positions))
        finally:
            # Leave the group in poll, not in close: a rebalance callback served inside close()
            # can wait forever in rd_kafka_rebalance_protocol (librdkafka #4041) and
            # confluent-kafka holds the GIL there, freezing every thread of this process,
            # the link proxies included.
            try:
                c.unsubscribe()
                deadline = time.monotonic() + 15
                while c.assignment() and time.monotonic() < deadline:
                    c.poll(0.1)
            except Exception as e:
                with self._lock:
                    self.client_errors.append(f"{name} unsubscribe: {e}")
            c.close()

    # -- the observer -----------------------------------------------------------------------------

    def _observe(self) -> None:
        from shoal.client import AdminClient

        async def once() -> dict[tuple[str, int], int]:
            async with AdminClient(self.observer_bootstrap, timeout=5) as a:
                return await a.fetch_offsets(self.group)

        while not self._stop_consuming.wait(1.0):
            try:
                offsets = asyncio.run(once())
            except Exception:  # the coordinator down or moving: nothing observed this round
                continue
            now = time.time()
            with self._lock:
                for (t, p), o in sorted(offsets.items()):
                    if t == self.topic and o >= 0:
                        self.history.observed_commits.append(Commit("observer", p, o, now))

    # -- the final read ---------------------------------------------------------------------------

    def final_read(self, bootstrap: str, timeout: float = 60.0) -> dict[int, int]:
        """Read every partition from its start to its high watermark into ``history.final``;
        the high watermarks."""
        c = Consumer({**CLIENT_CONF, "bootstrap.servers": bootstrap, "group.id": f"{self.group}-final",
                      "enable.auto.commit": False, "enable.partition.eof": False})
        try:
            hws = {p: c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)[1]
                   for p in range(self.partitions)}
            final: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(self.partitions)}
            todo = {p for p, hw in hws.items() if hw > 0}
            c.assign([TopicPartition(self.topic, p, 0) for p in todo])
            deadline = time.monotonic() + timeout
            while todo and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                p = msg.partition()
                if msg.offset() < hws[p]:
                    final[p].append((msg.offset(), msg.value()))
                if msg.offset() >= hws[p] - 1:
                    todo.discard(p)
            if todo:
                raise AssertionError(f"final read: partitions {sorted(todo)} not read to their high watermark "
                                     f"{hws} within {timeout}s")
        finally:
            c.close()
        self.history.final = final
        return hws
