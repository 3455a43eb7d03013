"""Per-broker dynamic configs against a real broker process (issue 11): confluent-kafka's
``describe_configs`` / ``incremental_alter_configs`` on ``ConfigResource(BROKER, "1")`` (librdkafka's
test 0081 does this) over the cluster-wide default ``""`` (librdkafka refuses an empty resource
name, so that one is set with ``shoal configs``), a change the running broker applies at once
(message.max.bytes refuses a larger record), and ``shoal configs`` in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

pytestmark = pytest.mark.timeout(90)

REPO = Path(__file__).resolve().parents[2]


def shoal_configs(broker, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "shoal", "configs", *args, "--bootstrap-server", broker.bootstrap, "--timeout", "15"],
        capture_output=True, text=True, timeout=30, env=env,
    )


def incremental(admin: AdminClient, name: str, *ops: tuple[str, AlterConfigOpType, str | None]) -> None:
    res = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=op) for k, op, v in ops])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=15)


def describe(admin: AdminClient, name: str) -> dict:
    [f] = admin.describe_configs([ConfigResource(ResourceType.BROKER, name)], request_timeout=15).values()
    return f.result(timeout=15)


def test_a_real_client_describes_and_alters_a_brokers_own_configs_and_the_cluster_default(fresh_broker, topic_name):
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    assert shoal_configs(fresh_broker, "alter", "--broker-defaults", "--add-config",
                         "log.retention.ms=600000").returncode == 0
    incremental(admin, "1", ("message.max.bytes", AlterConfigOpType.SET, "2000"),
                ("log.retention.ms", AlterConfigOpType.SET, "700000"))
    own = describe(admin, "1")
    mmb = own["message.max.bytes"]
    assert (mmb.value, mmb.source, mmb.is_read_only) == ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    retention = own["log.retention.ms"]
    # (confluent-kafka keys synonyms by name: the chain per layer is checked with shoal configs)
    assert (retention.value, retention.source) == ("700000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert own["listeners"].is_read_only

    # The running broker applies it: a record above the broker's own message.max.bytes is refused.
    for f in admin.create_topics([NewTopic(topic_name, 1, 1)]).values():
        f.result(timeout=15)
    errors: list = []
    p = Producer({"bootstrap.servers": fresh_broker.bootstrap, "retries": 0})
    p.produce(topic_name, b"x" * 3000, on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)  # (the limit is on a batch: the small record goes alone)
    p.produce(topic_name, b"small", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert [e.name() if e else None for e in errors] == ["MSG_SIZE_TOO_LARGE", None]

    # A static config is refused with Kafka's error (librdkafka sends broker "7" to broker 7: that
    # one is shoal configs' below).
    with pytest.raises(KafkaException) as e:
        incremental(admin, "1", ("listeners", AlterConfigOpType.SET, "PLAINTEXT://:1"))
    assert "Cannot update these configs dynamically" in str(e.value)

    incremental(admin, "1", ("message.max.bytes", AlterConfigOpType.DELETE, None),
                ("log.retention.ms", AlterConfigOpType.DELETE, None))
    assert shoal_configs(fresh_broker, "alter", "--broker-defaults", "--delete-config",
                         "log.retention.ms").returncode == 0
    assert describe(admin, "1")["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value


def test_shoal_configs_describes_and_alters_broker_configs(fresh_broker):
    def ok(*args: str) -> str:
        r = shoal_configs(fresh_broker, *args)
        assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
        return r.stdout

    assert ok("alter", "--broker", "1", "--add-config", "log.cleaner.threads=2,num.io.threads=4") == (
        "Completed updating config for broker 1.\n")
    assert ok("alter", "--broker-defaults", "--add-config", "log.cleaner.threads=3") == (
        "Completed updating default config for brokers in the cluster.\n")
    out = ok("describe", "--broker", "1").splitlines()
    assert out[0] == "Dynamic configs for broker 1 are:"
    assert out[1].startswith("  log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
                             "log.cleaner.threads=2, DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=3")
    assert out[2].startswith("  num.io.threads=4 sensitive=false")
    assert len(out) == 3
    out = ok("describe", "--broker-defaults").splitlines()
    assert out == ["Default configs for brokers in the cluster are:",
                   "  log.cleaner.threads=3 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
                   "log.cleaner.threads=3}"]
    assert "  listeners=" in ok("describe", "--broker", "1", "--all")

    r = shoal_configs(fresh_broker, "alter", "--broker", "1", "--add-config", "listeners=PLAINTEXT://:1")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "INVALID_REQUEST" in r.stderr
    r = shoal_configs(fresh_broker, "alter", "--broker", "1")
    assert r.returncode == 2 and "nothing to alter" in r.stderr
    r = shoal_configs(fresh_broker, "alter", "--broker", "7", "--add-config", "num.io.threads=2")
    assert r.returncode == 1 and "Unexpected broker id, expected 1 or empty string, but received 7" in r.stderr

    ok("alter", "--broker", "1", "--delete-config", "log.cleaner.threads,num.io.threads")
    ok("alter", "--broker-defaults", "--delete-config", "log.cleaner.threads")
    assert ok("describe", "--broker", "1").splitlines() == ["Dynamic configs for broker 1 are:"]


def test_librdkafkas_admin_test_alters_a_broker_as_kafka_answers(fresh_broker, topic_name):
    """What librdkafka's own test 0081_admin sends, on one broker as on three: AlterConfigs of a
    topic, of this broker (``sasl.kerberos.min.time.before.relogin``) and of a topic that does
    not exist, in one request; then IncrementalAlterConfigs of this broker setting
    ``background.threads`` and appending to ``log.cleanup.policy``, and undoing both. Kafka
    accepts every config named here as dynamic (``background.threads`` was answered
    INVALID_REQUEST, which librdkafka reports as a malformed request). kafka-python's
    DescribeConfigs without ``include_synonyms`` gets no synonyms, with it the chain."""
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic_name, 1, 1)]).values():
        f.result(timeout=15)
    resources = [
        ConfigResource(ResourceType.TOPIC, topic_name, set_config={"compression.type": "gzip", "flush.ms": "12345678"}),
        ConfigResource(ResourceType.BROKER, "1", set_config={"sasl.kerberos.min.time.before.relogin": "58000"}),
        ConfigResource(ResourceType.TOPIC, topic_name + "-none", set_config={"compression.type": "lz4"}),
    ]
    with pytest.warns(DeprecationWarning):
        futures = admin.alter_configs(resources, request_timeout=15)
    outcome = []
    for res in resources:
        try:
            outcome.append(futures[res].result(timeout=15))
        except KafkaException as e:
            outcome.append(e.args[0].name())
    assert outcome == [None, None, "UNKNOWN_TOPIC_OR_PART"]

    incremental(admin, "1", ("background.threads", AlterConfigOpType.SET, "9"),
                ("log.cleanup.policy", AlterConfigOpType.APPEND, "compact"))
    own = describe(admin, "1")
    assert (own["background.threads"].value, own["background.threads"].source) == (
        "9", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert own["log.cleanup.policy"].value == "delete,compact"
    incremental(admin, "1", ("background.threads", AlterConfigOpType.DELETE, None),
                ("log.cleanup.policy", AlterConfigOpType.SUBTRACT, "compact"))
    own = describe(admin, "1")
    assert own["background.threads"].source == ConfigSource.DEFAULT_CONFIG.value
    assert own["log.cleanup.policy"].value == "delete"

    from kafka.admin import ConfigResource as KpResource, ConfigResourceType, KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=fresh_broker.bootstrap)
    try:
        for include in (False, True):
            got = kp.describe_configs([KpResource(ConfigResourceType.BROKER, "1"),
                                       KpResource(ConfigResourceType.TOPIC, topic_name)],
                                      include_synonyms=include, config_filter="all")
            entries = [*got["broker"]["1"].values(), *got["topic"][topic_name].values()]
            assert any(e["synonyms"] for e in entries) is include
    finally:
        kp.close()
    shoal_configs(fresh_broker, "alter", "--broker", "1", "--delete-config", "sasl.kerberos.min.time.before.relogin")
