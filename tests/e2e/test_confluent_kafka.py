"""confluent-kafka (librdkafka) against a real Shoal broker."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from e2e_helpers import OP_TIMEOUT, admin, consume, consumer

pytestmark = pytest.mark.timeout(60)


def producer(bootstrap: str, **extra) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "socket.timeout.ms": 10000, "message.timeout.ms": 15000}
    conf.update(extra)
    return Producer(conf)


def produce_all(p: Producer, topic: str, items, **kwargs) -> list:
    """Produce (key, value, headers) items; return the delivery reports, raising on any error."""
    reports: list = []
    errors: list = []

    def on_delivery(err, msg):
        (errors if err else reports).append(err or msg)

    for key, value, headers in items:
        p.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery, **kwargs)
        p.poll(0)
    left = p.flush(OP_TIMEOUT)
    assert left == 0, f"{left} messages not delivered within {OP_TIMEOUT}s"
    assert not errors, errors[:3]
    return reports


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume_keys_headers_compression(broker, make_topic, topic_name, codec):
    topic = make_topic(topic_name, partitions=3)
    items = [
        (f"key-{i % 10}".encode(), f"{codec}-value-{i}".encode() * (1 + i % 4), [("i", str(i).encode()), ("codec", codec.encode())])
        for i in range(90)
    ]
    reports = produce_all(producer(broker.bootstrap, **{"compression.codec": codec, "acks": "all"}), topic, items)
    assert len(reports) == 90

    # Keyed partitioning: one key, one partition; and keys spread over more than one partition.
    partition_of_key: dict[bytes, set[int]] = defaultdict(set)
    for m in reports:
        partition_of_key[m.key()].add(m.partition())
    assert all(len(ps) == 1 for ps in partition_of_key.values()), partition_of_key
    assert len({next(iter(ps)) for ps in partition_of_key.values()}) > 1

    got = consume(broker.bootstrap, topic, 3, expected=90)
    assert len(got) == 90, f"consumed {len(got)} of 90"
    by_partition: dict[int, list] = defaultdict(list)
    for m in got:
        by_partition[m.partition()].append(m)
    reported: dict[int, list] = defaultdict(list)
    for m in reports:
        reported[m.partition()].append(m)
    for part, msgs in by_partition.items():
        offsets = [m.offset() for m in msgs]
        assert offsets == list(range(len(msgs))), f"partition {part}: offsets {offsets}"
        expected = sorted(reported[part], key=lambda m: m.offset())
        assert [(m.offset(), m.key(), m.value()) for m in msgs] == [
            (m.offset(), m.key(), m.value()) for m in expected
        ]
        # Per-key production order is kept.
        for key in {m.key() for m in msgs}:
            seq = [int(dict(m.headers())["i"]) for m in msgs if m.key() == key]
            assert seq == sorted(seq)
    for m in got:
        headers = m.headers()
        assert headers is not None and len(headers) == 2
        i = int(dict(headers)["i"])
        assert m.key() == f"key-{i % 10}".encode()
        assert m.value() == items[i][1]
        assert dict(headers)["codec"] == codec.encode()
        ts_type, ts = m.timestamp()
        assert ts_type != 0 and abs(ts - time.time() * 1000) < 120_000


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(broker, make_topic, topic_name, acks):
    topic = make_topic(topic_name, partitions=1)
    items = [(None, f"acks-{acks}-{i}".encode(), None) for i in range(25)]
    reports = produce_all(producer(broker.bootstrap, acks=acks), topic, items, partition=0)
    assert len(reports) == 25
    if acks != "0":
        assert sorted(m.offset() for m in reports) == list(range(25))
    c = consumer(broker.bootstrap)
    try:
        # acks=0 gives no confirmation: wait until the broker has everything.
        deadline = time.monotonic() + OP_TIMEOUT
        while True:
            low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=OP_TIMEOUT)
            if high >= 25 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert (low, high) == (0, 25)
    finally:
        c.close()
    got = consume(broker.bootstrap, topic, [0], expected=25)
    assert [m.value() for m in got] == [v for _, v, _ in items]


def test_list_offsets_by_time_and_watermarks(broker, make_topic, topic_name):
    topic = make_topic(topic_name, partitions=2)
    base = int(time.time() * 1000) - 60_000
    p = producer(broker.bootstrap, acks="all", **{"linger.ms": 0})
    for i in range(5):
        p.produce(topic, value=f"t{i}".encode(), partition=0, timestamp=base + i * 1000)
        p.flush(OP_TIMEOUT)  # one batch per record
    assert p.flush(OP_TIMEOUT) == 0

    c = consumer(broker.bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=OP_TIMEOUT) == (0, 5)
        assert c.get_watermark_offsets(TopicPartition(topic, 1), timeout=OP_TIMEOUT) == (0, 0)
        queries = [
            TopicPartition(topic, 0, base - 5000),  # before everything -> 0
            TopicPartition(topic, 0, base + 1500),  # first record at or after -> 2
            TopicPartition(topic, 0, base + 4000),  # exact hit -> 4
            TopicPartition(topic, 0, base + 99_000),  # after everything -> -1 (end)
        ]
        answers = []
        for q in queries:
            (r,) = c.offsets_for_times([q], timeout=OP_TIMEOUT)
            assert r.error is None, r.error
            answers.append(r.offset)
        assert answers == [0, 2, 4, -1]
    finally:
        c.close()

    # The same through the admin API, including max timestamp (KIP-734).
    a = admin(broker.bootstrap)
    tp = TopicPartition(topic, 0)
    for spec, expected in (
        (OffsetSpec.earliest(), 0),
        (OffsetSpec.latest(), 5),
        (OffsetSpec.max_timestamp(), 4),
        (OffsetSpec.for_timestamp(base + 2500), 3),
    ):
        result = a.list_offsets({tp: spec}, request_timeout=OP_TIMEOUT)[tp].result(timeout=OP_TIMEOUT)
        assert result.offset == expected, (spec, result.offset)


def test_admin_create_topics_validate_only_and_configs(broker, topic_name):
    a = admin(broker.bootstrap)
    # validate_only creates nothing.
    fs = a.create_topics([NewTopic(topic_name, 2, 1)], validate_only=True, request_timeout=OP_TIMEOUT)
    fs[topic_name].result(timeout=OP_TIMEOUT)
    assert topic_name not in a.list_topics(timeout=OP_TIMEOUT).topics

    config = {"retention.ms": "123456", "cleanup.policy": "compact"}
    fs = a.create_topics([NewTopic(topic_name, 2, 1, config=config)], request_timeout=OP_TIMEOUT)
    fs[topic_name].result(timeout=OP_TIMEOUT)
    md = a.list_topics(topic=topic_name, timeout=OP_TIMEOUT).topics[topic_name]
    assert md.error is None and sorted(md.partitions) == [0, 1]

    # Creating it again fails with TOPIC_ALREADY_EXISTS.
    fs = a.create_topics([NewTopic(topic_name, 2, 1)], request_timeout=OP_TIMEOUT)
    with pytest.raises(KafkaException) as e:
        fs[topic_name].result(timeout=OP_TIMEOUT)
    assert e.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    # An invalid config value is rejected.
    bad = topic_name + "-bad"
    fs = a.create_topics([NewTopic(bad, 1, 1, config={"retention.ms": "soon"})], request_timeout=OP_TIMEOUT)
    with pytest.raises(KafkaException) as e:
        fs[bad].result(timeout=OP_TIMEOUT)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG

    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    entries = a.describe_configs([res], request_timeout=OP_TIMEOUT)[res].result(timeout=OP_TIMEOUT)
    assert entries["retention.ms"].value == "123456"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].value == "compact"
    assert entries["segment.bytes"].source in (
        ConfigSource.DEFAULT_CONFIG.value,
        ConfigSource.STATIC_BROKER_CONFIG.value,
    )
    assert not entries["segment.bytes"].is_read_only


def test_admin_incremental_alter_configs(broker, make_topic, topic_name):
    topic = make_topic(topic_name, config={"cleanup.policy": "compact", "retention.ms": "1000000"})
    a = admin(broker.bootstrap)
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "7777777", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("max.message.bytes", "200000", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    a.incremental_alter_configs([res], request_timeout=OP_TIMEOUT)[res].result(timeout=OP_TIMEOUT)
    plain = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = a.describe_configs([plain], request_timeout=OP_TIMEOUT)[plain].result(timeout=OP_TIMEOUT)
    assert entries["retention.ms"].value == "7777777"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["max.message.bytes"].value == "200000"
    assert entries["cleanup.policy"].value == "delete"
    assert entries["cleanup.policy"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # An unknown config name is an error for that resource.
    bad = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    with pytest.raises(KafkaException) as e:
        a.incremental_alter_configs([bad], request_timeout=OP_TIMEOUT)[bad].result(timeout=OP_TIMEOUT)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_admin_create_partitions(broker, make_topic, topic_name):
    topic = make_topic(topic_name, partitions=2)
    a = admin(broker.bootstrap)
    a.create_partitions([NewPartitions(topic, 5)], request_timeout=OP_TIMEOUT)[topic].result(timeout=OP_TIMEOUT)
    md = a.list_topics(topic=topic, timeout=OP_TIMEOUT).topics[topic]
    assert sorted(md.partitions) == [0, 1, 2, 3, 4]
    # Shrinking is refused.
    with pytest.raises(KafkaException) as e:
        a.create_partitions([NewPartitions(topic, 3)], request_timeout=OP_TIMEOUT)[topic].result(timeout=OP_TIMEOUT)
    assert e.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    # The new partition takes data.
    reports = produce_all(producer(broker.bootstrap, **{"topic.metadata.refresh.interval.ms": 500}), topic, [(None, b"p4", None)], partition=4)
    assert reports[0].partition() == 4 and reports[0].offset() == 0
    got = consume(broker.bootstrap, topic, [4], expected=1)
    assert [m.value() for m in got] == [b"p4"]


def test_admin_delete_topics(broker, make_topic, topic_name):
    topic = make_topic(topic_name, partitions=1)
    a = admin(broker.bootstrap)
    a.delete_topics([topic], request_timeout=OP_TIMEOUT)[topic].result(timeout=OP_TIMEOUT)
    deadline = time.monotonic() + OP_TIMEOUT
    while topic in a.list_topics(timeout=OP_TIMEOUT).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic not in a.list_topics(timeout=OP_TIMEOUT).topics
    with pytest.raises(KafkaException) as e:
        a.delete_topics([topic], request_timeout=OP_TIMEOUT)[topic].result(timeout=OP_TIMEOUT)
    assert e.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_delete_records(broker, make_topic, topic_name):
    topic = make_topic(topic_name, partitions=1)
    produce_all(producer(broker.bootstrap, acks="all"), topic, [(None, f"r{i}".encode(), None) for i in range(10)], partition=0)
    a = admin(broker.bootstrap)
    tp = TopicPartition(topic, 0, 4)
    result = a.delete_records([tp], request_timeout=OP_TIMEOUT)[tp].result(timeout=OP_TIMEOUT)
    assert result.low_watermark == 4
    c = consumer(broker.bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=OP_TIMEOUT) == (4, 10)
    finally:
        c.close()
    got = consume(broker.bootstrap, topic, [0], expected=6, start=OFFSET_BEGINNING)
    assert [(m.offset(), m.value()) for m in got] == [(i, f"r{i}".encode()) for i in range(4, 10)]
    # Beyond the high watermark: OFFSET_OUT_OF_RANGE.
    beyond = TopicPartition(topic, 0, 50)
    with pytest.raises(KafkaException) as e:
        a.delete_records([beyond], request_timeout=OP_TIMEOUT)[beyond].result(timeout=OP_TIMEOUT)
    assert e.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE


def test_describe_cluster(broker):
    a = admin(broker.bootstrap)
    desc = a.describe_cluster(request_timeout=OP_TIMEOUT).result(timeout=OP_TIMEOUT)
    assert desc.cluster_id
    assert [(n.host, n.port) for n in desc.nodes] == [("127.0.0.1", broker.port)]


def test_describe_cluster_authorized_operations_are_kafkas_seven(broker):
    # Without an authorizer the operator may do everything on the cluster: Kafka reports the
    # seven cluster operations (never WRITE; librdkafka's test 0081 checks this).
    from confluent_kafka.admin import AclOperation

    a = admin(broker.bootstrap)
    desc = a.describe_cluster(include_authorized_operations=True, request_timeout=OP_TIMEOUT).result(
        timeout=OP_TIMEOUT)
    assert sorted(op.name for op in desc.authorized_operations) == sorted(op.name for op in (
        AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE))
