"""Helpers for the end-to-end tests (imported as ``e2e_helpers``): topic set-up and draining partitions with confluent-kafka.

Group coordination (FindCoordinator/JoinGroup) is not implemented yet, so consumers here always
``assign()`` explicit partitions and never commit.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from polling import until

# Every blocking wait in these tests is bounded by one of these (seconds).
OP_TIMEOUT = 15.0


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    client = admin(bootstrap)  # keep a reference until the result is in: GC destroys the handle
    futures = client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=10,
        request_timeout=OP_TIMEOUT,
    )
    futures[name].result(timeout=OP_TIMEOUT)


def consumer(bootstrap: str, **extra: Any) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": "shoal-e2e-unused",  # required by librdkafka; never joined nor committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "socket.timeout.ms": 10000,
        "fetch.wait.max.ms": 100,
    }
    conf.update(extra)
    return Consumer(conf)


def consume(
    bootstrap: str,
    topic: str,
    partitions: list[int] | int,
    expected: int | dict[int, int],
    *,
    start: int = OFFSET_BEGINNING,
    timeout: float = OP_TIMEOUT,
    **extra: Any,
) -> list[Any]:
    """Assign the partitions at ``start`` and poll until ``expected`` messages arrived: a count,
    or {partition: offset}, until the consumer's position in each of those partitions reached the
    offset (an end offset: past transaction markers too, which no message counts)."""
    if isinstance(partitions, int):
        partitions = list(range(partitions))
    c = consumer(bootstrap, **extra)
    out: list[Any] = []

    def done() -> bool:
        if isinstance(expected, int):
            return len(out) >= expected
        ends = {p: end for p, end in expected.items() if end > 0}
        return all(tp.offset >= ends[tp.partition] for tp in c.position([TopicPartition(topic, p) for p in ends]))

    try:
        c.assign([TopicPartition(topic, p, start) for p in partitions])
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            msgs = c.consume(num_messages=500, timeout=0.2)
            for m in msgs:
                if m.error():
                    raise KafkaException(m.error())
                out.append(m)
        # Anything beyond what was expected is a bug too; give it a brief chance to show up.
        if done():
            for m in c.consume(num_messages=500, timeout=0.3):
                if not m.error():
                    out.append(m)
    finally:
        c.close()
    return out


def commit_and_count(member: Any, batch: list) -> None:
    """Commit a consumed batch; count its messages only if the commit succeeded.

    A failed commit (the partition moved to another member meanwhile) seeks the member's still-owned
    partitions back, so the messages come again to whoever owns them now: across all members every
    produced message must then be counted exactly once, whatever the rebalances. ``member`` has
    ``c`` (a Consumer), ``topic``, ``assignment`` (set of partitions) and ``counted`` (a list).
    """
    if not batch:
        return
    ends: dict[int, int] = {}
    starts: dict[int, int] = {}
    for m in batch:
        ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
        starts[m.partition()] = min(starts.get(m.partition(), m.offset()), m.offset())
    try:
        member.c.commit(offsets=[TopicPartition(member.topic, p, o) for p, o in ends.items()], asynchronous=False)
    except KafkaException:
        for p, o in starts.items():
            if p in member.assignment:
                try:
                    member.c.seek(TopicPartition(member.topic, p, o))
                except KafkaException:
                    pass
        return
    member.counted.extend((m.partition(), m.offset(), int(m.value())) for m in batch)


def run_until(members: list, cond, what: str, timeout: float) -> None:
    """Step every member until ``cond()`` holds; fail with each member's assignment otherwise."""
    until(cond, timeout, lambda: f"{what} ({', '.join(f'{m.name}={sorted(m.assignment)}' for m in members)})",
          retry=(), between=lambda: [m.step() for m in members])


def one_line(r: Any, status: int, *words: str) -> str:
    """A ``shoal`` CLI run (subprocess.CompletedProcess) that exited with ``status`` and wrote one
    line on stderr, no traceback, holding each of ``words``: that line."""
    assert r.returncode == status, f"exit {r.returncode}: {r.stdout}\n{r.stderr}"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]
