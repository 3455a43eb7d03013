"""Option parsing of the Shoal Spark source and sink: names, defaults and refusals as Spark's Kafka source."""

from __future__ import annotations

import pytest

from shoal.spark.options import (
    EARLIEST,
    LATEST,
    OptionError,
    kafka_client_conf,
    parse_jaas,
    parse_sink_options,
    parse_source_options,
)

BASE = {"kafka.bootstrap.servers": "h:9092", "subscribe": "a"}


def src(streaming=False, **extra):
    return parse_source_options({**BASE, **extra}, streaming=streaming)


def test_defaults_batch_and_streaming():
    b = src()
    assert b.starting.kind == "earliest" and b.ending.kind == "latest"
    assert b.fail_on_data_loss is True and b.include_headers is False
    assert b.max_offsets_per_trigger is None and b.min_partitions is None
    assert b.conf == {"bootstrap.servers": "h:9092"}
    s = src(streaming=True)
    assert s.starting.kind == "latest" and s.ending is None


def test_option_names_are_case_insensitive():
    o = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SubscribePattern": "t-.*",
                              "STARTINGOFFSETS": "latest", "failondataloss": "FALSE"}, streaming=True)
    assert o.subscription.kind == "subscribePattern" and o.starting.kind == "latest"
    assert o.fail_on_data_loss is False


@pytest.mark.parametrize("opts", [{}, {"subscribe": "a", "assign": '{"a":[0]}'},
                                  {"subscribe": "a", "subscribePattern": "a.*"}])
def test_exactly_one_subscription(opts):
    with pytest.raises(OptionError, match="exactly one of"):
        parse_source_options({"kafka.bootstrap.servers": "h:1", **opts}, streaming=False)


def test_subscription_select():
    cluster = {"a": 2, "b": 1, "ab": 3, "__consumer_offsets": 50}
    assert parse_source_options({**BASE, "subscribe": " a , b,missing "}, streaming=False).subscription.select(
        cluster) == [("a", 0), ("a", 1), ("b", 0)]
    pat = parse_source_options({"kafka.bootstrap.servers": "h", "subscribePattern": "a.*|_.*"}, streaming=False)
    assert pat.subscription.select(cluster) == [("a", 0), ("a", 1), ("ab", 0), ("ab", 1), ("ab", 2)]
    assign = parse_source_options({"kafka.bootstrap.servers": "h", "assign": '{"b":[0],"zz":[3,1]}'}, streaming=False)
    assert assign.subscription.select(cluster) == [("b", 0), ("zz", 1), ("zz", 3)]


def test_bootstrap_required():
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        parse_source_options({"subscribe": "a"}, streaming=False)


def test_offsets_json():
    o = src(startingOffsets='{"a":{"0":23,"1":-2}}', endingOffsets='{"a":{"0":50,"1":-1}}')
    assert o.starting.kind == "offsets" and dict(o.starting.offsets) == {("a", 0): 23, ("a", 1): EARLIEST}
    assert dict(o.ending.offsets) == {("a", 0): 50, ("a", 1): LATEST}


@pytest.mark.parametrize("extra, message", [
    ({"startingOffsets": "latest"}, "can't be latest for batch"),
    ({"startingOffsets": '{"a":{"0":-1}}'}, "can't be latest for batch"),
    ({"endingOffsets": "earliest"}, "can't be earliest"),
    ({"endingOffsets": '{"a":{"0":-2}}'}, "can't be earliest"),
    ({"startingOffsets": "{nope"}, "must be 'earliest', 'latest' or JSON"),
    ({"startingOffsets": '{"a":{"0":-7}}'}, "offsets must be >= 0"),
    ({"maxOffsetsPerTrigger": "0"}, "at least 1"),
    ({"minPartitions": "x"}, "must be an integer"),
    ({"includeHeaders": "yes"}, "'true' or 'false'"),
    ({"kafka.auto.offset.reset": "earliest"}, "startingOffsets"),
    ({"kafka.value.deserializer": "x"}, "not supported"),
    ({"kafka.enable.auto.commit": "true"}, "not supported"),
    ({"minOffsetsPerTrigger": "5"}, "not supported"),
    ({"startingOffsetsByTimestampStrategy": "nearest"}, "'error' or 'latest'"),
])
def test_refused(extra, message):
    with pytest.raises(OptionError, match=message):
        src(**extra)


def test_ending_offsets_refused_in_streaming():
    with pytest.raises(OptionError, match="not valid in streaming"):
        src(streaming=True, endingOffsets="latest")


def test_latest_allowed_when_streaming():
    o = src(streaming=True, startingOffsets='{"a":{"0":-1}}')
    assert dict(o.starting.offsets) == {("a", 0): LATEST}


def test_timestamp_precedence():
    o = src(startingTimestamp="1000", startingOffsetsByTimestamp='{"a":{"0":5}}', startingOffsets="earliest")
    assert o.starting.kind == "timestamp" and o.starting.timestamp == 1000
    o = src(startingOffsetsByTimestamp='{"a":{"0":5}}', startingOffsets="earliest")
    assert o.starting.kind == "timestamps" and dict(o.starting.offsets) == {("a", 0): 5}
    o = src(endingTimestamp="2000")
    assert o.ending.kind == "timestamp" and o.ending.timestamp == 2000


def test_numbers_and_flags():
    o = src(maxOffsetsPerTrigger="1000", minPartitions="8", maxRecordsPerPartition="50",
            includeHeaders="true", failOnDataLoss="false", **{"kafkaConsumer.pollTimeoutMs": "5000"})
    assert (o.max_offsets_per_trigger, o.min_partitions, o.max_records_per_partition) == (1000, 8, 50)
    assert o.include_headers and not o.fail_on_data_loss and o.poll_timeout_ms == 5000


def test_kafka_passthrough_and_sasl():
    conf = kafka_client_conf({
        "kafka.bootstrap.servers": "h:9093",
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="tenant-a" password="p\\"w;d";',
        "kafka.client.id": "etl",
        "subscribe": "ignored",
    })
    assert conf == {
        "bootstrap.servers": "h:9093",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "tenant-a",
        "sasl.password": 'p"w;d',
        "client.id": "etl",
    }


def test_explicit_sasl_username_wins_over_jaas():
    conf = kafka_client_conf({"kafka.bootstrap.servers": "h", "kafka.sasl.username": "u",
                              "kafka.sasl.jaas.config": "x.PlainLoginModule required username='v' password='q';"})
    assert conf["sasl.username"] == "u" and conf["sasl.password"] == "q"


def test_jaas_other_modules_refused():
    with pytest.raises(OptionError, match="PlainLoginModule or ScramLoginModule"):
        parse_jaas("com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;")


def test_sink_options():
    s = parse_sink_options({"kafka.bootstrap.servers": "h", "topic": " out ", "sinkCommitLogTopicPrefix": "_c-"})
    assert s.topic == "out" and s.commit_log_prefix == "_c-" and s.conf == {"bootstrap.servers": "h"}
    assert parse_sink_options({"kafka.bootstrap.servers": "h"}).topic is None
    with pytest.raises(OptionError, match="not supported"):
        parse_sink_options({"kafka.bootstrap.servers": "h", "kafka.value.serializer": "x"})
    with pytest.raises(OptionError, match="topic name prefix"):
        parse_sink_options({"kafka.bootstrap.servers": "h", "sinkCommitLogTopicPrefix": "a b"})
