"""kafka-python against a real Shoal broker: producer, consumer (assign + seek), admin."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

pytestmark = pytest.mark.timeout(60)

TIMEOUT_MS = 15000


def test_admin_create_list_delete(broker, topic_name):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT_MS)
    try:
        admin.create_topics(
            {topic_name: {"num_partitions": 3, "replication_factor": 1, "configs": {"retention.ms": "600000"}}},
            timeout_ms=TIMEOUT_MS,
        )
        assert topic_name in admin.list_topics()
        admin.delete_topics([topic_name], timeout_ms=TIMEOUT_MS)
        deadline = time.monotonic() + 15
        while topic_name in admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert topic_name not in admin.list_topics()
    finally:
        admin.close()


# kafka-python 3 enables the idempotent producer by default (InitProducerId, key 22); the explicit
# False variant exercises everything else on brokers without it.
@pytest.mark.parametrize("idempotence", ["default", False])
def test_produce_then_assign_and_seek(broker, make_topic, topic_name, idempotence):
    topic = make_topic(topic_name, partitions=2)
    extra = {} if idempotence == "default" else {"enable_idempotence": idempotence}
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5, request_timeout_ms=TIMEOUT_MS, **extra
    )
    try:
        futures = [
            producer.send(topic, key=f"k{i % 4}".encode(), value=f"v{i}".encode(), headers=[("n", str(i).encode())])
            for i in range(40)
        ]
        producer.flush(timeout=15)
        metas = [f.get(timeout=15) for f in futures]
    finally:
        producer.close(timeout=5)
    per_partition: dict[int, list[int]] = {}
    for i, m in enumerate(metas):
        per_partition.setdefault(m.partition, []).append(m.offset)
    for offsets in per_partition.values():
        assert offsets == list(range(len(offsets)))

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, group_id=None,
        auto_offset_reset="earliest", consumer_timeout_ms=TIMEOUT_MS, request_timeout_ms=TIMEOUT_MS + 5000,
        fetch_max_wait_ms=100,
    )
    try:
        p0 = TopicPartition(topic, metas[0].partition)
        consumer.assign([p0])
        consumer.seek(p0, 1)  # skip the first record of that partition
        want = len(per_partition[p0.partition]) - 1
        got = []
        deadline = time.monotonic() + 15
        while len(got) < want and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
        assert [r.offset for r in got] == list(range(1, want + 1))
        sent = {(m.partition, m.offset): i for i, m in enumerate(metas)}
        for r in got:
            i = sent[(r.partition, r.offset)]
            assert r.key == f"k{i % 4}".encode() and r.value == f"v{i}".encode()
            assert r.headers == [("n", str(i).encode())]
        assert consumer.end_offsets([p0])[p0] == want + 1
        assert consumer.beginning_offsets([p0])[p0] == 0
    finally:
        consumer.close(autocommit=False)
