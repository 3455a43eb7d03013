"""aiokafka against a real Shoal broker: AIOKafkaProducer, AIOKafkaConsumer with assign()."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("compression", [None, "gzip", "lz4", "zstd"])
async def test_produce_and_consume_from_beginning(broker, make_topic, topic_name, compression):
    topic = make_topic(topic_name, partitions=2)
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap, acks="all", compression_type=compression,
        request_timeout_ms=15000, linger_ms=5,
    )
    await asyncio.wait_for(producer.start(), 15)
    try:
        sends = [
            await producer.send(topic, key=f"k{i % 3}".encode(), value=f"v{i}".encode(), headers=[("i", str(i).encode())])
            for i in range(30)
        ]
        metas = await asyncio.wait_for(asyncio.gather(*sends), 15)
        batch_meta = await producer.send_and_wait(topic, b"last", key=b"k0", partition=0)
    finally:
        await producer.stop()
    assert batch_meta.partition == 0

    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, group_id=None,
        auto_offset_reset="none", request_timeout_ms=15000, fetch_max_wait_ms=100,
    )
    await asyncio.wait_for(consumer.start(), 15)
    try:
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = []

        async def drain():
            while len(got) < 31:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend(records)

        await asyncio.wait_for(drain(), 15)
        end = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    assert len(got) == 31
    expected = {(m.partition, m.offset): i for i, m in enumerate(metas)}
    for r in got:
        if r.value == b"last":
            assert (r.partition, r.offset) == (0, batch_meta.offset)
            continue
        i = expected[(r.partition, r.offset)]
        assert r.key == f"k{i % 3}".encode() and r.value == f"v{i}".encode()
        assert list(r.headers) == [("i", str(i).encode())]
    for tp in tps:
        offs = [r.offset for r in got if r.partition == tp.partition]
        assert offs == list(range(len(offs))) and end[tp] == len(offs)
