"""Group offsets committed in a transaction (issue 14), with real clients over loopback: the
consume-transform-produce loop with ``send_offsets_to_transaction`` (confluent-kafka/librdkafka and
kafka-python). A committed transaction makes the offsets visible to the group (and its outputs to
read_committed consumers); an aborted one leaves the committed offsets as they were; a transaction
whose offsets were sent before a broker restart commits them after it (the load replays the
transactional offset commit as pending, the marker written after the restart materializes it); after
a kill -9 a new instance of the producer fences the old one, whose transaction and offsets abort."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from e2e_helpers import OP_TIMEOUT, consume, create_topic

pytestmark = pytest.mark.timeout(240)
TXN_TIMEOUT = 60.0  # seconds a client call of the transactional API may take on a loaded machine


def fill(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, value=f"{tag}-{part}-{i}".encode(), partition=part)
    assert p.flush(OP_TIMEOUT) == 0


def group_consumer(bootstrap: str, group: str, topic: str) -> Consumer:
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "session.timeout.ms": 30000, "fetch.wait.max.ms": 100, "socket.timeout.ms": 10000,
    })
    c.subscribe([topic])
    return c


def poll_n(c: Consumer, n: int, timeout: float = OP_TIMEOUT * 2) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append(m)
    assert len(out) == n, f"{len(out)} of {n} messages"
    return out


def committed(c: Consumer, topic: str, partitions: int) -> list[int]:
    """The group's committed offsets (librdkafka's OffsetFetch asks for stable offsets under
    read_committed, and retries UNSTABLE_OFFSET_COMMIT)."""
    tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=OP_TIMEOUT * 2)
    return [tp.offset for tp in sorted(tps, key=lambda tp: tp.partition)]


def transform(producer: Producer, msgs: list, out: str) -> None:
    for m in msgs:
        producer.produce(out, value=m.value().upper(), partition=m.partition())


def send_positions(producer: Producer, c: Consumer) -> None:
    producer.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), TXN_TIMEOUT)


def test_confluent_commit_abort_and_restart(fresh_broker):
    bs = fresh_broker.bootstrap
    tag = uuid.uuid4().hex[:6]
    src, dst, group = f"txo-in-{tag}", f"txo-out-{tag}", f"txo-g-{tag}"
    create_topic(bs, src, 2)
    create_topic(bs, dst, 2)
    fill(bs, src, 2, 10, "a")
    c = group_consumer(bs, group, src)
    conf = {"bootstrap.servers": bs, "transactional.id": f"txo-{tag}", "transaction.timeout.ms": 120000}
    producer = Producer(conf)
    try:
        producer.init_transactions(TXN_TIMEOUT)

        # 1. committed: offsets and outputs become visible together
        msgs = poll_n(c, 20)
        producer.begin_transaction()
        transform(producer, msgs, dst)
        send_positions(producer, c)
        producer.commit_transaction(TXN_TIMEOUT)
        assert committed(c, src, 2) == [10, 10]
        outs = consume(bs, dst, 2, 20, **{"isolation.level": "read_committed"})
        assert sorted(m.value() for m in outs) == sorted(m.value().upper() for m in msgs)

        # 2. aborted: the committed offsets stay as they were
        fill(bs, src, 2, 2, "b")
        msgs = poll_n(c, 4)
        producer.begin_transaction()
        transform(producer, msgs, dst)
        send_positions(producer, c)
        producer.abort_transaction(TXN_TIMEOUT)
        assert committed(c, src, 2) == [10, 10]

        # 3. offsets sent, then the broker restarts before the commit: they wait in the log as a
        # pending transactional commit, reloaded as such, and the commit after the restart
        # materializes them
        producer.begin_transaction()
        transform(producer, msgs, dst)
        send_positions(producer, c)
        c.close()
        fresh_broker.restart()
        producer.commit_transaction(TXN_TIMEOUT)
        c = group_consumer(bs, group, src)
        assert committed(c, src, 2) == [12, 12]
        outs = consume(bs, dst, 2, 24, **{"isolation.level": "read_committed"})
        assert sum(1 for m in outs if m.value().startswith(b"B-")) == 4  # the aborted copies are not there

        # 4. kill -9 with the offsets sent and the transaction open: a new instance of the producer
        # (same transactional id) fences the old one and its transaction is aborted, so the
        # offsets stay as they were; the new instance's own transaction commits them
        # (a new instance first: when its only broker goes away, librdkafka 2.16 re-bootstraps
        # (KIP-899) and decommissions the broker, but keeps that handle as the cached group
        # coordinator, so its next send_offsets_to_transaction waits forever; a client bug, seen
        # with "debug": "eos,broker")
        fill(bs, src, 2, 1, "c")
        msgs = poll_n(c, 2)
        producer = Producer(conf)
        producer.init_transactions(TXN_TIMEOUT)
        producer.begin_transaction()
        transform(producer, msgs, dst)
        send_positions(producer, c)
        c.close()
        fresh_broker.kill9()
        producer = Producer(conf)
        producer.init_transactions(TXN_TIMEOUT)
        c = group_consumer(bs, group, src)
        assert committed(c, src, 2) == [12, 12]
        msgs = poll_n(c, 2)
        producer.begin_transaction()
        transform(producer, msgs, dst)
        send_positions(producer, c)
        producer.commit_transaction(TXN_TIMEOUT)
        assert committed(c, src, 2) == [13, 13]
    finally:
        c.close()


def test_kafka_python_commit_and_abort(fresh_broker):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    bs = fresh_broker.bootstrap
    tag = uuid.uuid4().hex[:6]
    src, dst, group = f"txk-in-{tag}", f"txk-out-{tag}", f"txk-g-{tag}"
    create_topic(bs, src, 1)
    create_topic(bs, dst, 1)
    fill(bs, src, 1, 6, "a")
    c = KafkaConsumer(src, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", isolation_level="read_committed", consumer_timeout_ms=20000)
    producer = KafkaProducer(bootstrap_servers=bs, transactional_id=f"txk-{tag}")
    try:
        producer.init_transactions()
        msgs = []
        deadline = time.monotonic() + OP_TIMEOUT * 2
        while len(msgs) < 6 and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                msgs.extend(recs)
        assert len(msgs) == 6
        tp = KTP(src, 0)

        producer.begin_transaction()
        for m in msgs[:4]:
            producer.send(dst, m.value.upper(), partition=0)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(4, "", -1)}, c.group_metadata())
        producer.commit_transaction()
        assert c.committed(tp) == 4

        producer.begin_transaction()
        for m in msgs[4:]:
            producer.send(dst, m.value.upper(), partition=0)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(6, "", -1)}, c.group_metadata())
        producer.abort_transaction()
        assert c.committed(tp) == 4
        outs = consume(bs, dst, 1, 4, **{"isolation.level": "read_committed"})
        assert [m.value() for m in outs] == [m.value.upper() for m in msgs[:4]]
    finally:
        producer.close(timeout=10)
        c.close()


async def test_aiokafka_commit_and_abort(fresh_broker):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    bs = fresh_broker.bootstrap
    tag = uuid.uuid4().hex[:6]
    src, group = f"txa-in-{tag}", f"txa-g-{tag}"
    create_topic(bs, src, 1)
    fill(bs, src, 1, 3, "a")
    tp = ATP(src, 0)
    producer = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=f"txa-{tag}", request_timeout_ms=30000)
    consumer = AIOKafkaConsumer(src, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level="read_committed")
    await asyncio.wait_for(producer.start(), TXN_TIMEOUT)
    await asyncio.wait_for(consumer.start(), TXN_TIMEOUT)
    async def committed_soon(group_consumer, want: int) -> int | None:
        """aiokafka's committed() does not ask for stable offsets: markers are written after
        EndTxn answers, so the offset shows a moment later (as on Kafka)."""
        got = None
        for _ in range(100):
            got = await group_consumer.committed(tp)
            if got == want:
                break
            await asyncio.sleep(0.1)
        return got

    other = AIOKafkaConsumer(bootstrap_servers=bs, group_id=f"{group}-2", enable_auto_commit=False)
    await asyncio.wait_for(other.start(), TXN_TIMEOUT)
    try:
        async with producer.transaction():
            await producer.send_offsets_to_transaction({tp: 2}, group)
        assert await committed_soon(consumer, 2) == 2
        with pytest.raises(RuntimeError):
            async with producer.transaction():  # an exception aborts the transaction
                await producer.send_offsets_to_transaction({tp: 3}, group)
                raise RuntimeError("abort")
        # the next transaction starts once the abort's markers are written
        async with producer.transaction():
            await producer.send_offsets_to_transaction({tp: 1}, f"{group}-2")
        assert await committed_soon(other, 1) == 1
        assert await consumer.committed(tp) == 2
    finally:
        await producer.stop()
        await consumer.stop()
        await other.stop()
