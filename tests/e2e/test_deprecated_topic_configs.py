"""Deprecated topic configs Kafka 3.x accepts and ignores (``message.format.version``,
``message.timestamp.difference.max.ms``; librdkafka's test 0092 creates its topic with
``message.format.version``): CreateTopics, AlterConfigs and IncrementalAlterConfigs take them,
the broker logs one warning line (rate-limited) and drops them; DescribeConfigs keeps working and
the topic serves clients. Through confluent-kafka against the real broker process."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from e2e_helpers import OP_TIMEOUT, admin, consume

pytestmark = pytest.mark.timeout(90)

WARNING = "Topic configuration message.format.version is ignored"


def topic_configs(client, topic: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return client.describe_configs([res])[res].result(timeout=OP_TIMEOUT)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_deprecated_topic_configs_are_accepted_and_ignored(broker):
    from confluent_kafka import Producer

    client = admin(broker.bootstrap)
    log_start = len(broker.log_text())
    a, b = (f"deprecated-{x}-{uuid.uuid4().hex[:6]}" for x in "ab")
    futures = client.create_topics([
        NewTopic(a, 2, 1, config={"message.format.version": "0.10.0", "retention.ms": "3600000"}),
        NewTopic(b, 1, 1, config={"message.format.version": "2.8", "message.timestamp.difference.max.ms": "1000"}),
    ], request_timeout=OP_TIMEOUT)
    for f in futures.values():
        f.result(timeout=OP_TIMEOUT)

    configs = topic_configs(client, a)
    assert "message.format.version" not in configs  # never stored: no effect
    assert configs["retention.ms"].value == "3600000" and configs["retention.ms"].source == 1  # the rest kept
    assert "message.timestamp.difference.max.ms" not in topic_configs(client, b)

    # AlterConfigs (replaces the overrides) and IncrementalAlterConfigs accept them too
    res = ConfigResource(ResourceType.TOPIC, a, set_config={"message.format.version": "0.10.0", "retention.ms": "7200000"})
    client.alter_configs([res])[res].result(timeout=OP_TIMEOUT)
    res = ConfigResource(ResourceType.TOPIC, a, incremental_configs=[
        ConfigEntry("message.format.version", "0.11.0", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.ms", "600000", incremental_operation=AlterConfigOpType.SET),
    ])
    client.incremental_alter_configs([res])[res].result(timeout=OP_TIMEOUT)
    configs = topic_configs(client, a)
    assert "message.format.version" not in configs
    assert (configs["retention.ms"].value, configs["segment.ms"].value) == ("7200000", "600000")

    # a key Kafka never had is still refused
    bad = client.create_topics([NewTopic(f"bad-{uuid.uuid4().hex[:6]}", 1, 1, config={"message.format.versoin": "1"})],
                               request_timeout=OP_TIMEOUT)
    with pytest.raises(KafkaException) as e:
        next(iter(bad.values())).result(timeout=OP_TIMEOUT)
    assert "INVALID_CONFIG" in str(e.value) or "Unknown topic config" in str(e.value)

    # the topic serves clients as any other
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        p.produce(a, value=b"%d" % i, partition=i % 2)
    assert p.flush(OP_TIMEOUT) == 0
    assert len(consume(broker.bootstrap, a, 2, 10)) == 10

    # one warning line for message.format.version over three requests (rate-limited), naming it
    log = broker.log_text()[log_start:]
    assert log.count(WARNING) == 1, log[-3000:]
    assert "Topic configuration message.timestamp.difference.max.ms is ignored" in log
