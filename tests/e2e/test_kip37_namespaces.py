"""KIP-37 namespaces end to end, in a tenant, with real clients: ``payments:eu:orders`` produced and
consumed by confluent-kafka, aiokafka and kcat; kafka-python refuses ':' before sending anything
(its ``kafka.util.ensure_valid_topic_name``, a copy of the Java client's ``Topic.validate``);
config inheritance (namespace -> parents -> tenant default -> broker) seen through confluent-kafka's
describe_configs and applied by the broker's logs; a move that keeps data readable under the new
name, across a restart and when the broker was down during the move, with the committed offsets of
a consumer group following it (also when the coordinator missed the move); recursive delete through
``shoal namespaces``; the tenant's create-topic policy.

(Named test_kip37_namespaces.py: tests/tenancy/test_namespaces.py holds the pure tests, and two
test modules of one basename cannot be collected together without packages.)
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from e2e_helpers import OP_TIMEOUT, consume
from tenancy_fixtures import MECHANISM, Tenant, TenantCluster, tenant_cluster

pytestmark = pytest.mark.timeout(120)

SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def cluster():
    yield from tenant_cluster()


@pytest.fixture
def ns(cluster: TenantCluster):
    """A fresh top-level namespace name of tenant a, created with ``<ns>:eu`` under it."""
    name = f"n{uuid.uuid4().hex[:8]}"
    status, body = cluster.broker.http("POST", f"/v1/tenants/{cluster.a.tenant_id}/namespaces", {"name": f"{name}:eu"})
    assert status == 201, body
    return name


def admin_of(t: Tenant) -> AdminClient:
    return AdminClient({**t.conf(), "socket.timeout.ms": 10000})


def create(t: Tenant, name: str, partitions: int = 1, config: dict | None = None, validate_only=False) -> None:
    a = admin_of(t)
    f = a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
                        operation_timeout=10, request_timeout=OP_TIMEOUT, validate_only=validate_only)
    f[name].result(timeout=OP_TIMEOUT)


def produce(t: Tenant, topic: str, values: list[bytes], **extra) -> list:
    p = Producer({**t.conf(), "linger.ms": 5, **extra})
    errors: list = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(OP_TIMEOUT) == 0
    return errors


def read(t: Tenant, topic: str, expected: int, partitions: int = 1) -> list[bytes]:
    conf = {k: v for k, v in t.conf().items() if k != "bootstrap.servers"}
    return [m.value() for m in consume(t.broker.sasl_bootstrap, topic, partitions, expected, **conf)]


def shoal(cluster: TenantCluster, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "shoal", *args, "--admin-url", cluster.broker.admin_url],
                          capture_output=True, text=True, timeout=60, env=env)


def kafka_error(excinfo) -> KafkaError:
    err = excinfo.value.args[0]
    assert isinstance(err, KafkaError), excinfo.value
    return err


# -- names: each real client -----------------------------------------------------------------------


def test_confluent_kafka_produces_and_consumes_in_a_namespace(cluster, ns):
    a = cluster.a
    topic = f"{ns}:eu:orders"
    create(a, topic, partitions=2)
    assert produce(a, topic, [b"m%d" % i for i in range(20)]) == []
    assert sorted(read(a, topic, 20, partitions=2)) == sorted(b"m%d" % i for i in range(20))
    md = admin_of(a).list_topics(timeout=10)
    assert topic in md.topics and not md.topics[topic].error
    # group subscription works with the name too (JoinGroup/SyncGroup/OffsetCommit carry it)
    c = Consumer({**a.conf(), "group.id": f"g-{ns}", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m)
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=10)
    c.close()
    assert len(got) == 20 and {m.topic() for m in got} == {topic}
    # keyless records go to one partition per batch (the sticky partitioner), so either partition
    # may be empty; an empty one has no position to commit
    ends: dict[int, int] = {}
    for m in got:
        ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
    assert {tp.partition: tp.offset for tp in committed if tp.partition in ends} == ends
    assert all(tp.offset in (0, OFFSET_INVALID) for tp in committed if tp.partition not in ends)


def test_topic_needs_its_namespace(cluster, ns):
    with pytest.raises(KafkaException) as e:
        create(cluster.a, f"{ns}:us:orders")
    err = kafka_error(e)
    assert err.code() == KafkaError.TOPIC_EXCEPTION and f"Namespace '{ns}:us' does not exist" in err.str()
    # another tenant has no such namespace: the names are the tenant's own
    with pytest.raises(KafkaException):
        create(cluster.b, f"{ns}:eu:orders")


def test_aiokafka_round_trip(cluster, ns):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    a = cluster.a
    topic = f"{ns}:eu:aio"
    create(a, topic)

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(**a.aiokafka())
        await p.start()
        try:
            for i in range(5):
                await p.send_and_wait(topic, b"a%d" % i)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, **a.aiokafka(), group_id=f"aio-{ns}", auto_offset_reset="earliest")
        await c.start()
        try:
            out: list[bytes] = []
            async with asyncio.timeout(20):
                while len(out) < 5:
                    for msgs in (await c.getmany(timeout_ms=500)).values():
                        out += [m.value for m in msgs]
            return out
        finally:
            await c.stop()

    assert asyncio.run(run()) == [b"a%d" % i for i in range(5)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (make deps)")
def test_kcat_round_trip(cluster, ns):
    a = cluster.a
    topic = f"{ns}:eu:kcat"
    create(a, topic)
    auth = ["-b", a.broker.sasl_bootstrap, "-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={MECHANISM}",
            "-X", f"sasl.username={a.user}", "-X", f"sasl.password={a.users[a.user]}"]
    r = subprocess.run(["kcat", *auth, "-P", "-t", topic], input=b"k1\nk2\nk3\n", capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr.decode()
    r = subprocess.run(["kcat", *auth, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%t|%s\n"],
                       capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().splitlines() == [f"{topic}|k1", f"{topic}|k2", f"{topic}|k3"]


def test_kafka_python_refuses_colons_client_side(cluster, ns, monkeypatch):
    """kafka-python validates topic names itself (kafka/util.py ``ensure_valid_topic_name``, the
    Java client's ``Topic.validate`` regex ``[a-zA-Z0-9._-]``) in KafkaProducer.send,
    KafkaConsumer.subscribe and its metadata: it raises ValueError before any request. The broker
    is not involved: with that one check relaxed, the same client round-trips the name."""
    import kafka.cluster
    import kafka.consumer.subscription_state
    import kafka.producer.sender
    import kafka.util
    from kafka import KafkaConsumer, KafkaProducer

    a = cluster.a
    topic = f"{ns}:eu:kp"
    create(a, topic)
    producer = KafkaProducer(**a.kafka_python())
    try:
        with pytest.raises(ValueError, match="illegal, it contains a character other than"):
            producer.send(topic, b"x").get(timeout=10)
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(**a.kafka_python())
    with pytest.raises(ValueError, match="illegal"):
        consumer.subscribe([topic])
    consumer.close()

    def kip37(name: str) -> None:  # the same check, with ':' allowed
        kafka.util.ensure_valid_topic_name(name.replace(":", "."))

    for module in (kafka.producer.sender, kafka.cluster, kafka.consumer.subscription_state):
        monkeypatch.setattr(module, "ensure_valid_topic_name", kip37)
    producer = KafkaProducer(**a.kafka_python())
    try:
        for i in range(3):
            producer.send(topic, b"p%d" % i).get(timeout=15)
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(topic, **a.kafka_python(), auto_offset_reset="earliest", consumer_timeout_ms=10000)
    try:
        got = [m.value for _, m in zip(range(3), consumer)]
    finally:
        consumer.close()
    assert got == [b"p0", b"p1", b"p2"]


# -- configs: inheritance, sources, the broker applies them ------------------------------------------


def _alter(admin: AdminClient, resource: ConfigResource) -> None:
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(timeout=OP_TIMEOUT)


def test_inherited_configs_and_their_sources(cluster, ns):
    a = cluster.a
    admin = admin_of(a)
    topic = f"{ns}:eu:cfg"
    create(a, topic, config={"cleanup.policy": "delete"})
    S = ConfigEntry
    _alter(admin, ConfigResource("TOPIC", f"{ns}:", incremental_configs=[
        S("retention.ms", "1000000", incremental_operation=SET), S("segment.ms", "3600000", incremental_operation=SET)]))
    _alter(admin, ConfigResource("TOPIC", f"{ns}:eu:", incremental_configs=[
        S("retention.ms", "2000000", incremental_operation=SET)]))
    _alter(admin, ConfigResource("BROKER", "1", incremental_configs=[
        S("log.retention.hours", "3", incremental_operation=SET), S("flush.ms", "777777", incremental_operation=SET)]))
    try:
        res = ConfigResource("TOPIC", topic)
        configs = admin.describe_configs([res], request_timeout=OP_TIMEOUT)[res].result(timeout=OP_TIMEOUT)
        r = configs["retention.ms"]
        assert r.value == "2000000" and r.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        # confluent-kafka keeps synonyms in a dict by name, so of the three "retention.ms" layers
        # it shows the last (the tenant default); the broker's synonym follows
        assert {k: (v.value, v.source) for k, v in r.synonyms.items()} == {
            "retention.ms": ("10800000", 3), "log.retention.hours": ("168", 5)}
        # kafka-python keeps the list: every layer, in precedence order
        from kafka.admin import ConfigResource as KPResource, ConfigResourceType, KafkaAdminClient

        kp = KafkaAdminClient(**a.kafka_python())
        try:
            out = kp.describe_configs([KPResource(ConfigResourceType.TOPIC, topic, {"retention.ms": None})],
                                      include_synonyms=True, config_filter="all")
        finally:
            kp.close()
        kr = out["topic"][topic]["retention.ms"]
        assert (kr["value"], kr["config_source"]) == ("2000000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
        assert [(x["name"], x["value"], x["source"]) for x in kr["synonyms"]] == [
            ("retention.ms", "2000000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),  # namespace <ns>:eu
            ("retention.ms", "1000000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),  # namespace <ns>
            ("retention.ms", "10800000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),  # the tenant default
            ("log.retention.hours", "168", "DEFAULT_CONFIG")]
        assert (configs["segment.ms"].value, configs["segment.ms"].source) == ("3600000", 3)
        assert (configs["flush.ms"].value, configs["flush.ms"].source) == ("777777", 3)
        assert (configs["cleanup.policy"].value, configs["cleanup.policy"].source) == ("delete", 1)
        assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
        # the namespace itself, and the tenant's defaults, as the clients address them
        nres = ConfigResource("TOPIC", f"{ns}:eu:")
        nconf = admin.describe_configs([nres])[nres].result(timeout=OP_TIMEOUT)
        assert (nconf["retention.ms"].value, nconf["retention.ms"].source) == ("2000000", 1)
        assert (nconf["segment.ms"].value, nconf["segment.ms"].source) == ("3600000", 3)
        bres = ConfigResource("BROKER", "1")  # librdkafka refuses "" (the cluster default) itself
        bconf = admin.describe_configs([bres])[bres].result(timeout=OP_TIMEOUT)
        assert {k: v.value for k, v in bconf.items()} == {"retention.ms": "10800000", "flush.ms": "777777"}
        # the HTTP API names the real origin
        status, body = a.broker.http("GET", f"/v1/tenants/{a.tenant_id}/topics/{topic}/configs")
        eff = {e["name"]: e["source"] for e in body["effective"]}
        assert status == 200 and eff["retention.ms"] == f"NAMESPACE {ns}:eu" and eff["segment.ms"] == f"NAMESPACE {ns}"
        assert eff["flush.ms"] == "TENANT_DEFAULT" and eff["cleanup.policy"] == "TOPIC"
        # a broker config that is no topic default is the platform's, not the tenant's
        with pytest.raises(KafkaException) as e:
            _alter(admin, ConfigResource("BROKER", "1", incremental_configs=[S("num.io.threads", "2", incremental_operation=SET)]))
        assert kafka_error(e).code() == KafkaError.POLICY_VIOLATION
    finally:
        _alter(admin, ConfigResource("BROKER", "1", incremental_configs=[
            S("retention.ms", "", incremental_operation=DELETE), S("flush.ms", "", incremental_operation=DELETE)]))


def test_broker_applies_and_reapplies_inherited_configs(cluster, ns):
    """max.message.bytes set on the namespace bounds what the topic's log accepts; raising it on
    the namespace lets the same record in (the broker re-derives the LogConfig)."""
    a = cluster.a
    admin = admin_of(a)
    topic = f"{ns}:eu:size"
    create(a, topic)
    _alter(admin, ConfigResource("TOPIC", f"{ns}:", incremental_configs=[
        ConfigEntry("max.message.bytes", "1000", incremental_operation=SET)]))
    big = b"x" * 3000
    errors = produce(a, topic, [big], **{"message.max.bytes": 1000000})
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    _alter(admin, ConfigResource("TOPIC", f"{ns}:eu:", incremental_configs=[
        ConfigEntry("max.message.bytes", "100000", incremental_operation=SET)]))
    assert produce(a, topic, [big]) == []
    assert read(a, topic, 1) == [big]


# -- move, delete -----------------------------------------------------------------------------------


def test_move_keeps_data_readable_under_the_new_name(cluster, ns):
    a = cluster.a
    old, new = f"{ns}:eu:orders", f"{ns}:us:orders"
    status, body = a.broker.http("POST", f"/v1/tenants/{a.tenant_id}/namespaces", {"name": f"{ns}:us"})
    assert status == 201, body
    create(a, old, partitions=2, config={"retention.ms": "86400000"})
    values = [b"v%d" % i for i in range(30)]
    assert produce(a, old, values) == []
    before = admin_of(a).list_topics(old, timeout=10).topics[old]
    r = shoal(cluster, "namespaces", "move", "--tenant", a.tenant_id, "--topic", old, "--to-namespace", f"{ns}:us")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"moved {old} -> {new} (topic id ")
    assert sorted(read(a, new, 30, partitions=2)) == sorted(values)
    md = admin_of(a).list_topics(timeout=10)
    assert new in md.topics and old not in md.topics
    res = ConfigResource("TOPIC", new)
    admin = admin_of(a)  # referenced until the result is in: GC destroys the handle
    conf = admin.describe_configs([res])[res].result(timeout=OP_TIMEOUT)
    assert conf["retention.ms"].value == "86400000"  # its own configs moved with it
    assert len(md.topics[new].partitions) == len(before.partitions)
    # appends go on at the offsets it had
    assert produce(a, new, [b"after"]) == []
    assert len(read(a, new, 31, partitions=2)) == 31
    # a restart finds the data under the new name
    cluster.broker.restart()
    assert len(read(a, new, 31, partitions=2)) == 31
    data = cluster.broker.data_dir
    assert (data / f"{a.prefix}{new}-0").is_dir() and not (data / f"{a.prefix}{old}-0").exists()


def test_move_while_the_broker_is_down_is_finished_at_start(cluster, ns):
    """The metadata says the topic moved, the disk still has the old directories (the broker was
    down, or crashed before renaming them): start-up adopts them by their topic id."""
    a = cluster.a
    old, new = f"{ns}:eu:late", f"{ns}:late"
    create(a, old)
    assert produce(a, old, [b"one", b"two"]) == []

    async def rename(store) -> None:
        await store.rename_topic(a.prefix + old, a.prefix + new)

    cluster.edit_metadata(rename)
    assert read(a, new, 2) == [b"one", b"two"]
    assert "renamed while the broker was down" in cluster.broker.log_text()


def group_consumer(t: Tenant, group: str) -> Consumer:
    return Consumer({**t.conf(), "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "fetch.wait.max.ms": 100})


def poll_values(c: Consumer, expected: int, linger: float = 1.0, timeout: float = 30.0) -> list[bytes]:
    """Poll until ``expected`` messages, then ``linger`` seconds more (anything beyond is a bug)."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append(m.value())
    end = time.monotonic() + linger
    while time.monotonic() < end:
        m = c.poll(0.1)
        if m is not None and not m.error():
            got.append(m.value())
    return got


def total(offsets: list[int]) -> int:
    """Records consumed by the committed ``offsets``: a partition without a commit (-1001) had none
    to read (librdkafka's sticky partitioner may put every record of a short run in one partition)."""
    return sum(max(o, 0) for o in offsets)


def committed(t: Tenant, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offsets (OffsetFetch), -1001 (OFFSET_INVALID) for none."""
    c = group_consumer(t, group)
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=OP_TIMEOUT)]
    finally:
        c.close()


def test_committed_offsets_follow_a_move(cluster, ns):
    """A group that consumed part of payments:eu:orders resumes payments:us:orders after a move
    exactly where it stopped (nothing twice, nothing lost), also after a SIGKILL and restart."""
    a = cluster.a
    old, new, group = f"{ns}:eu:orders", f"{ns}:us:orders", f"g-{ns}"
    status, body = a.broker.http("POST", f"/v1/tenants/{a.tenant_id}/namespaces", {"name": f"{ns}:us"})
    assert status == 201, body
    create(a, old, partitions=2)
    values = [b"o%d" % i for i in range(40)]
    assert produce(a, old, values) == []
    c = group_consumer(a, group)
    c.subscribe([old])
    first = poll_values(c, 15, linger=0)
    c.commit(asynchronous=False)
    before = [tp.offset for tp in c.committed([TopicPartition(old, p) for p in (0, 1)], timeout=OP_TIMEOUT)]
    c.close()
    assert len(first) == 15 and total(before) == 15, before  # -1001: none yet

    r = shoal(cluster, "namespaces", "move", "--tenant", a.tenant_id, "--topic", old, "--to-namespace", f"{ns}:us")
    assert r.returncode == 0, r.stderr
    assert committed(a, group, new, 2) == before
    assert committed(a, group, old, 2) == [OFFSET_INVALID] * 2  # the old name is gone with its offsets

    c = group_consumer(a, group)
    c.subscribe([new])
    rest = poll_values(c, 25)
    c.commit(asynchronous=False)
    c.close()
    assert sorted(first + rest) == sorted(values)  # resumed exactly: no duplicates, nothing lost
    assert total(committed(a, group, new, 2)) == 40

    cluster.broker.kill9()  # the moved offsets are in __consumer_offsets, not only in memory
    assert total(committed(a, group, new, 2)) == 40
    assert committed(a, group, old, 2) == [OFFSET_INVALID] * 2


def test_offsets_follow_a_move_the_coordinator_missed(cluster, ns):
    """The metadata says the topic moved, __consumer_offsets still has the offsets under the old
    name (the broker was down, or crashed before writing them): loading the partition moves them
    by the image's former names, durably."""
    a = cluster.a
    old, new, group = f"{ns}:eu:missed", f"{ns}:missed", f"g-{ns}"
    create(a, old, partitions=2)
    assert produce(a, old, [b"m%d" % i for i in range(10)]) == []
    c = group_consumer(a, group)
    c.subscribe([old])
    first = poll_values(c, 10)
    c.commit(asynchronous=False)
    c.close()
    assert len(first) == 10
    before = committed(a, group, old, 2)
    assert total(before) == 10, before

    async def rename(store) -> None:
        await store.rename_topic(a.prefix + old, a.prefix + new)

    cluster.edit_metadata(rename)
    assert committed(a, group, new, 2) == before
    assert "committed offsets follow renamed topics" in cluster.broker.log_text()
    cluster.broker.restart()  # written back: a second load finds them under the new name
    assert committed(a, group, new, 2) == before
    assert committed(a, group, old, 2) == [OFFSET_INVALID] * 2
    assert produce(a, new, [b"after"]) == []
    c = group_consumer(a, group)
    c.subscribe([new])
    assert poll_values(c, 1) == [b"after"]
    c.close()


def test_recursive_delete(cluster, ns):
    a = cluster.a
    create(a, f"{ns}:top")
    create(a, f"{ns}:eu:inner")
    r = shoal(cluster, "namespaces", "delete", ns, "--tenant", a.tenant_id)
    assert r.returncode == 1 and "child namespaces" in r.stderr and "--recursive" not in r.stdout
    r = shoal(cluster, "namespaces", "list", "--tenant", a.tenant_id, "--parent", ns)
    assert r.returncode == 0 and r.stdout.split() == [f"{ns}:eu"]
    r = shoal(cluster, "namespaces", "describe", ns, "--tenant", a.tenant_id)
    assert r.returncode == 0 and f"Topics: {ns}:top" in r.stdout
    r = shoal(cluster, "namespaces", "delete", ns, "--tenant", a.tenant_id, "--recursive")
    assert r.returncode == 0, r.stderr
    assert f"deleted topics: {ns}:eu:inner, {ns}:top" in r.stdout
    md = admin_of(a).list_topics(timeout=10)
    assert not any(t.startswith(ns + ":") for t in md.topics)
    r = shoal(cluster, "namespaces", "list", "--tenant", a.tenant_id)
    assert ns not in r.stdout.split()


def test_cli_create_alter_describe(cluster):
    a = cluster.a
    name = f"c{uuid.uuid4().hex[:6]}:x"
    r = shoal(cluster, "namespaces", "create", name, "--tenant", a.tenant_id, "--config", "retention.ms=5000")
    assert r.returncode == 0 and r.stdout.strip() == f"namespace {name} created (with {name.split(':')[0]})", r
    r = shoal(cluster, "namespaces", "alter", name, "--tenant", a.tenant_id, "--set", "segment.ms=7000")
    assert r.returncode == 0 and "retention.ms=5000" in r.stdout and "segment.ms=7000" in r.stdout
    r = shoal(cluster, "namespaces", "describe", name, "--tenant", a.tenant_id)
    assert r.returncode == 0
    assert f"retention.ms=5000  (NAMESPACE {name})" in r.stdout.replace("   ", "  ")
    r = shoal(cluster, "namespaces", "alter", name, "--tenant", a.tenant_id, "--set", "retention.ms=soon")
    assert r.returncode == 1 and "retention.ms" in r.stderr
    r = shoal(cluster, "namespaces", "create", "bad/name", "--tenant", a.tenant_id)
    assert r.returncode == 1 and "illegal" in r.stderr


# -- policy -----------------------------------------------------------------------------------------


def test_create_topic_policy(cluster, ns):
    t = cluster.create_tenant("Policy", f"pol-{uuid.uuid4().hex[:6]}")
    status, body = t.broker.http("PUT", f"/v1/tenants/{t.tenant_id}/policy", {"policy": {
        "max.partitions.per.topic": 3, "max.partitions": 4, "topic.name.prefix": "team-",
        "config.ranges": {"retention.ms": [60000, None]}}})
    assert status == 200, body
    cases = [("team-a", 4, {}, "max.partitions.per.topic"), ("orders", 1, {}, "topic.name.prefix"),
             ("team-b", 1, {"retention.ms": "10"}, "config.ranges")]
    for name, partitions, config, key in cases:
        for validate_only in (True, False):
            with pytest.raises(KafkaException) as e:
                create(t, name, partitions, config, validate_only=validate_only)
            err = kafka_error(e)
            assert err.code() == KafkaError.POLICY_VIOLATION and f"({key})" in err.str(), (name, err)
    create(t, "team-ok", 3)
    with pytest.raises(KafkaException) as e:
        create(t, "team-two", 2)
    assert "(max.partitions)" in kafka_error(e).str()
    admin = admin_of(t)
    f = admin.create_partitions([NewPartitions("team-ok", 5)], request_timeout=OP_TIMEOUT)
    with pytest.raises(KafkaException) as e:
        f["team-ok"].result(timeout=OP_TIMEOUT)
    assert kafka_error(e).code() == KafkaError.POLICY_VIOLATION
    md = admin.list_topics(timeout=10)
    assert set(md.topics) == {"team-ok"} and len(md.topics["team-ok"].partitions) == 3
    cluster.delete_tenant(t)


def test_placement_is_the_operators(cluster, ns):
    """A tenant chooses neither the brokers nor the placement of its replicas: a manual assignment
    (CreateTopics, CreatePartitions, validate_only too), ``replica.placement`` (or its Confluent
    name) or a throttled-replicas list at creation, and these set on its topic, namespace or topic
    defaults are POLICY_VIOLATION, with a message that says why. A tenant's AlterConfigs (which
    replaces every override) keeps the operator's; the operator (the physical view) assigns."""
    a = cluster.a
    admin = admin_of(a)
    node = next(iter(admin.list_topics(timeout=10).brokers))
    placed = json.dumps({"version": 1, "replicas": [{"count": 1, "constraints": {"rack": "r1"}}]})
    topic = f"{ns}:eu:placed"

    def refused(futures: dict, what: str) -> None:
        for f in futures.values():
            with pytest.raises(KafkaException) as e:
                f.result(timeout=OP_TIMEOUT)
            err = kafka_error(e)
            assert err.code() == KafkaError.POLICY_VIOLATION and "platform operator's" in err.str(), (what, err)

    for validate_only in (False, True):
        opts = {"validate_only": validate_only, "request_timeout": OP_TIMEOUT}
        refused(admin.create_topics([NewTopic(topic, 2, replica_assignment=[[node], [node]])], **opts), "assignment")
        for config in ({"replica.placement": placed}, {"confluent.placement.constraints": placed},
                       {"leader.replication.throttled.replicas": "*"}):
            refused(admin.create_topics([NewTopic(topic, 1, 1, config=config)], **opts), str(config))
    assert topic not in admin.list_topics(timeout=10).topics
    create(a, topic)
    refused(admin.create_partitions([NewPartitions(topic, 2, replica_assignment=[[node]])],
                                    request_timeout=OP_TIMEOUT), "CreatePartitions")
    for rtype, name in ((ConfigResource.Type.TOPIC, topic), (ConfigResource.Type.TOPIC, f"{ns}:eu:"),
                        (ConfigResource.Type.BROKER, str(node))):  # its topic defaults (librdkafka sends no "")
        for key, value in (("replica.placement", placed), ("follower.replication.throttled.replicas", "*")):
            res = ConfigResource(rtype, name, incremental_configs=[ConfigEntry(key, value, incremental_operation=SET)])
            refused(admin.incremental_alter_configs([res]), f"{key} on {name}")

    operator = AdminClient(cluster.operator_conf())
    physical = a.prefix + topic
    _alter(operator, ConfigResource(ConfigResource.Type.TOPIC, physical, incremental_configs=[
        ConfigEntry("follower.replication.throttled.replicas", "*", incremental_operation=SET)]))
    with pytest.warns(DeprecationWarning):  # AlterConfigs: the tenant's whole set of overrides
        fs = admin.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"retention.ms": "600000"})])
    for f in fs.values():
        f.result(timeout=OP_TIMEOUT)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("follower.replication.throttled.replicas", None, incremental_operation=DELETE)])
    refused(admin.incremental_alter_configs([res]), "a DELETE")
    desc = operator.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, physical)])
    entries = next(iter(desc.values())).result(timeout=OP_TIMEOUT)
    assert (entries["follower.replication.throttled.replicas"].value, entries["retention.ms"].value) == ("*", "600000")
    mine = f"op-{uuid.uuid4().hex[:6]}"
    operator.create_topics([NewTopic(mine, 2, replica_assignment=[[node], [node]])])[mine].result(timeout=OP_TIMEOUT)
    operator.delete_topics([mine])[mine].result(timeout=OP_TIMEOUT)


def test_auto_creation_needs_the_namespace(cluster, ns):
    """Metadata with auto-creation (a producer's first send) creates ``<ns>:eu:auto`` but not a
    topic in a namespace that does not exist (KIP-37: no auto-creation of namespaces)."""
    a = cluster.a
    assert produce(a, f"{ns}:eu:auto", [b"x"], **{"message.timeout.ms": 10000}) == []
    errors = produce(a, f"{ns}:nowhere:auto", [b"x"], **{"message.timeout.ms": 3000})
    assert len(errors) == 1 and errors[0].code() in (KafkaError.TOPIC_EXCEPTION, KafkaError._MSG_TIMED_OUT), errors
    md = admin_of(a).list_topics(timeout=10)
    assert f"{ns}:eu:auto" in md.topics and f"{ns}:nowhere:auto" not in md.topics
