"""Consumer groups and committed offsets per tenant, with real clients over SASL_PLAINTEXT/SCRAM
(issue 4, name virtualization): tenants A and B both consume topic ``users`` in group ``g`` with
confluent-kafka (classic and KIP-848 protocols), kafka-python and aiokafka, and each sees only
its own groups, members and offsets; the operator (PLAINTEXT, the physical view) sees both, qualified. Deleting a tenant
deletes its groups, also across a restart. With an authorizer, a consumer without READ on its
group gets GROUP_AUTHORIZATION_FAILED.

One broker for the module (tests/e2e/tenancy_fixtures.py); the ACL test has its own.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from e2e_helpers import OP_TIMEOUT
from tenancy_fixtures import Tenant, TenantCluster, tenant_cluster

pytestmark = pytest.mark.timeout(180)

TOPIC, GROUP = "users", "g"
COUNTS = {"a": 5, "b": 8}  # records each tenant produces to its own "users" (so offsets differ)


def make_topic(t: Tenant, conf: dict | None = None, name: str = TOPIC, partitions: int = 2) -> None:
    admin = AdminClient(conf or t.conf())
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(OP_TIMEOUT)


def produce(conf: dict, n: int, mark: str, topic: str = TOPIC) -> None:
    p = Producer(conf)
    for i in range(n):
        p.produce(topic, f"{mark}-{i}".encode(), partition=i % 2)
    assert p.flush(OP_TIMEOUT) == 0


def group_consumer(t: Tenant, group: str = GROUP, **extra) -> Consumer:
    return Consumer({**t.conf(), "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "client.id": f"{t.tenant_id}-consumer", **extra})


def consume_all(c: Consumer, n: int, timeout: float = 30) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        assert not m.error(), m.error()
        got.append(m.value())
    return got


def consume_and_commit(c: Consumer, n: int) -> None:
    """Subscribe to ``users``, read ``n`` records, commit, close."""
    try:
        c.subscribe([TOPIC])
        assert len(consume_all(c, n)) == n
        c.commit(asynchronous=False)
    finally:
        c.close()


def committed(admin: AdminClient, group: str) -> list[tuple[str, int, int]]:
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(OP_TIMEOUT)
    return sorted((tp.topic, tp.partition, tp.offset) for tp in res.topic_partitions)


def group_ids(admin: AdminClient) -> set[str]:
    return {g.group_id for g in admin.list_consumer_groups().result(OP_TIMEOUT).valid}


@pytest.fixture(scope="module")
def world():
    """Tenants A and B (tenancy_fixtures), each with ``users`` holding its own records."""
    cluster: TenantCluster
    for cluster in tenant_cluster():
        for key, t in (("a", cluster.a), ("b", cluster.b)):
            make_topic(t)
            produce(t.conf(), COUNTS[key], t.tenant_id)
        yield cluster


def test_same_group_and_topic_with_confluent_kafka(world):
    w = world
    consumers = {}
    try:
        for key, t in (("a", w.a), ("b", w.b)):
            c = consumers[key] = group_consumer(t)
            c.subscribe([TOPIC])
            got = consume_all(c, COUNTS[key])
            assert sorted(got) == sorted(f"{t.tenant_id}-{i}".encode() for i in range(COUNTS[key]))
            c.commit(asynchronous=False)
        # both members are alive now: each tenant sees its own group, member and offsets
        for key, t, other in (("a", w.a, w.b), ("b", w.b, w.a)):
            admin = AdminClient(t.conf())
            assert group_ids(admin) == {GROUP}
            desc = admin.describe_consumer_groups([GROUP])[GROUP].result(OP_TIMEOUT)
            assert desc.state == ConsumerGroupState.STABLE
            assert [m.client_id for m in desc.members] == [f"{t.tenant_id}-consumer"]
            assert {(tp.topic, tp.partition) for tp in desc.members[0].assignment.topic_partitions} == {
                (TOPIC, 0), (TOPIC, 1)}
            half = COUNTS[key] // 2
            assert committed(admin, GROUP) == [(TOPIC, 0, COUNTS[key] - half), (TOPIC, 1, half)]
            assert other.tenant_id not in repr(desc)
        op = AdminClient(w.operator_conf())
        assert {f"{w.a.prefix}{GROUP}", f"{w.b.prefix}{GROUP}"} <= group_ids(op)
        desc = op.describe_consumer_groups([f"{w.a.prefix}{GROUP}"])[f"{w.a.prefix}{GROUP}"].result(OP_TIMEOUT)
        assert {tp.topic for m in desc.members for tp in m.assignment.topic_partitions} == {f"{w.a.prefix}{TOPIC}"}
    finally:
        for c in consumers.values():
            c.close()


def test_another_tenants_group_looks_like_no_group(world):
    w = world
    c = group_consumer(w.b, "only-b")
    try:
        c.subscribe([TOPIC])
        assert consume_all(c, 1)
        c.commit(asynchronous=False)
        admin = AdminClient(w.a.conf())

        def seen(group: str):
            d = admin.describe_consumer_groups([group])[group].result(OP_TIMEOUT)
            return (d.state, d.members, d.is_simple_consumer_group, d.partition_assignor, d.coordinator.id)

        assert seen("only-b") == seen("never-anywhere")
        assert seen("only-b")[1] == []
        assert committed(admin, "only-b") == committed(admin, "never-anywhere")
        assert "only-b" not in group_ids(admin) and "only-b" in group_ids(AdminClient(w.b.conf()))
    finally:
        c.close()


def test_kafka_python_and_aiokafka_commit_in_their_own_tenant(world):
    from kafka import KafkaConsumer
    from kafka.admin import KafkaAdminClient

    w = world
    group = "g-py"
    kc = KafkaConsumer(TOPIC, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                       consumer_timeout_ms=15000, **w.a.kafka_python())
    try:
        got = []
        for m in kc:
            got.append(m.value)
            if len(got) == COUNTS["a"]:
                break
        assert len(got) == COUNTS["a"]
        kc.commit()
    finally:
        kc.close()

    async def aio() -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka import TopicPartition as ATP

        c = AIOKafkaConsumer(TOPIC, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                             **w.b.aiokafka())
        await c.start()
        try:
            n = 0
            deadline = time.monotonic() + 30
            while n < 3 and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=500)
                n += sum(len(v) for v in batch.values())
            assert n >= 3
            await c.commit({ATP(TOPIC, 0): 1})
        finally:
            await c.stop()

    asyncio.run(aio())
    a_admin = KafkaAdminClient(**w.a.kafka_python())
    b_admin = KafkaAdminClient(**w.b.kafka_python())
    try:
        half = COUNTS["a"] // 2
        a_offsets = {(tp.topic, tp.partition): om.offset for tp, om in a_admin.list_group_offsets(group)[group].items()}
        b_offsets = {(tp.topic, tp.partition): om.offset for tp, om in b_admin.list_group_offsets(group)[group].items()}
        assert a_offsets == {(TOPIC, 0): COUNTS["a"] - half, (TOPIC, 1): half}
        assert b_offsets == {(TOPIC, 0): 1}
        a_groups = {g["group_id"] for g in a_admin.list_groups()}
        assert group in a_groups and "only-b" not in a_groups and not [g for g in a_groups if g.startswith("lkc-")]
    finally:
        a_admin.close()
        b_admin.close()


def test_consumer_group_protocol_regex_sees_only_the_tenants_topics(world):
    """KIP-848 (group.protocol=consumer), same group id in both tenants, a regex subscription: the
    broker resolves it over each tenant's own topic names."""
    w = world
    make_topic(w.b, name="umbrella", partitions=1)
    want = {"a": {(TOPIC, 0), (TOPIC, 1)}, "b": {(TOPIC, 0), (TOPIC, 1), ("umbrella", 0)}}
    consumers = {key: group_consumer(t, "k", **{"group.protocol": "consumer"}) for key, t in (("a", w.a), ("b", w.b))}
    try:
        for c in consumers.values():
            c.subscribe(["^u.*"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
            {(tp.topic, tp.partition) for tp in c.assignment()} != want[key] for key, c in consumers.items()
        ):
            for c in consumers.values():
                c.poll(0.05)
        for key, c in consumers.items():
            assert {(tp.topic, tp.partition) for tp in c.assignment()} == want[key]
        got = consume_all(consumers["a"], COUNTS["a"])
        assert sorted(got) == sorted(f"{w.a.tenant_id}-{i}".encode() for i in range(COUNTS["a"]))
        op = AdminClient(w.operator_conf())
        desc = op.describe_consumer_groups([f"{w.b.prefix}k"])[f"{w.b.prefix}k"].result(OP_TIMEOUT)
        assert {tp.topic for m in desc.members for tp in m.assignment.topic_partitions} == {
            f"{w.b.prefix}{TOPIC}", f"{w.b.prefix}umbrella"}
    finally:
        for c in consumers.values():
            c.close()


def test_zz_deleting_a_tenant_deletes_its_groups(world):
    """Last in the module: it restarts the broker."""
    w = world
    c_tenant = w.create_tenant("Tenant C", "carol")
    make_topic(c_tenant)
    produce(c_tenant.conf(), 3, "c")
    consume_and_commit(group_consumer(c_tenant), 3)
    op = AdminClient(w.operator_conf())
    physical = f"{c_tenant.prefix}{GROUP}"
    assert physical in group_ids(op)
    w.delete_tenant(c_tenant)
    deadline = time.monotonic() + OP_TIMEOUT
    while physical in group_ids(op) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert physical not in group_ids(op)
    assert committed(op, physical) == []
    w.broker.restart()
    op = AdminClient(w.operator_conf())
    listed = group_ids(op)
    assert not [g for g in listed if g.startswith(c_tenant.prefix)], listed
    assert {f"{w.a.prefix}{GROUP}", f"{w.b.prefix}{GROUP}"} <= listed
    assert "deleted: its tenant is gone" in w.broker.log_text()


# -- authorization ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def acl_tenants():
    yield from tenant_cluster({"authorizer.class.name": "shoal"})


def test_consumer_without_read_on_its_group_is_refused(acl_tenants):
    from shoal.metadata import AclEntry
    from shoal.tenancy.acl import Operation, PatternType, Permission, ResourceType

    w = acl_tenants
    a = w.a
    a.add_user("mallory")
    op = w.operator_conf()
    make_topic(a, op, name=f"{a.prefix}{TOPIC}")  # the operator sets the topic up, physically
    produce(op, 4, "x", topic=f"{a.prefix}{TOPIC}")

    def acl(rtype, name, user, operation):
        return AclEntry(a.tenant_id, rtype, name, PatternType.LITERAL, f"User:{user}", "*", operation, Permission.ALLOW)

    async def grant(store):
        await store.alter_acls([
            acl(ResourceType.TOPIC, TOPIC, "alice", Operation.READ),
            acl(ResourceType.TOPIC, TOPIC, "mallory", Operation.READ),
            acl(ResourceType.GROUP, GROUP, "alice", Operation.READ),
        ], [])

    w.edit_metadata(grant)

    c = Consumer({**a.conf("mallory"), "group.id": GROUP, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + OP_TIMEOUT
        error = None
        while error is None and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None:
                assert m.error(), "mallory got a record without READ on the group"
                error = m.error()
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    finally:
        c.close()

    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    kc = KafkaConsumer(TOPIC, group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False,
                       **a.kafka_python("mallory"))
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            kc.poll(timeout_ms=10000)
    finally:
        kc.close()

    consume_and_commit(group_consumer(a), 4)  # alice may
