"""DescribeTopicPartitions (KIP-966) called directly: a real EmbeddedMetadataStore and BrokerConfig,
kio requests through the wire codec both ways. Paging is checked against KIP-966's rules and, as a
property, that following ``next_cursor`` visits every partition once, in order, for any limit."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.config import BrokerConfig
from shoal.handlers.context import RequestContext
from shoal.handlers.describe_topic_partitions import DESCRIBE_TOPIC_PARTITIONS as KEY
from shoal.handlers.describe_topic_partitions import handle_describe_topic_partitions
from shoal.metadata import AclEntry, BrokerInfo, tenant_prefix
from shoal.metadata.embedded import EmbeddedMetadataStore
from shoal.protocol.codec import build, decode_request, decode_response, encode_request, encode_response
from shoal.protocol.errors import ErrorCode
from shoal.tenancy.acl import Operation, PatternType, Permission, ResourceType
from kio.index import load_payload_module
from kio.static.constants import EntityType
from test_admin import FakeBroker

REQ = load_payload_module(KEY, 0, EntityType.request)
AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
TENANT, OTHER = "lkc-aaaaaa", "lkc-bbbbbb"
# Topics (physical names) and their partition counts.
TOPICS = {"alpha": 3, "beta": 1, "gamma": 5, "__consumer_offsets": 2,
          f"{TENANT}_orders": 4, f"{TENANT}_users": 2, f"{OTHER}_secret": 3}


@pytest.fixture
async def broker(tmp_path):
    store = EmbeddedMetadataStore(tmp_path, node_id=1)
    await store.start()
    for node in (1, 2):
        await store.register_broker(BrokerInfo(node, "127.0.0.1", 9092 + node, None))
    for name, n in TOPICS.items():
        await store.create_topic(name, [(1 + i % 2,) for i in range(n)], {}, internal=name.startswith("__"))
    yield FakeBroker(store, BrokerConfig.load(None, AUTHORIZER))
    await store.close()


def request(topics=(), limit=2000, cursor=None):
    return build(REQ.DescribeTopicPartitionsRequest, topics=tuple(build(REQ.TopicRequest, name=t) for t in topics),
                 response_partition_limit=limit,
                 cursor=None if cursor is None else build(REQ.Cursor, topic_name=cursor[0], partition_index=cursor[1]))


async def call(broker, req, *, tenant=None, principal="User:admin"):
    frame = encode_request(KEY, 0, 7, "test", req)
    header, decoded = decode_request(KEY, 0, memoryview(frame)[4:])
    ctx = RequestContext(services=broker.services, header=header, client_address="127.0.0.1:1", principal=principal,
                         tenant=tenant)
    resp = await handle_describe_topic_partitions(ctx, decoded)
    out = encode_response(7, KEY, 0, resp)
    cid, back = decode_response(KEY, 0, memoryview(out)[4:])
    assert cid == 7 and back == resp
    return resp


def pages(resp) -> list[tuple[str, ErrorCode, tuple[int, ...]]]:
    return [(t.name, t.error_code, tuple(p.partition_index for p in t.partitions)) for t in resp.topics]


def cursor(resp):
    c = resp.next_cursor
    return None if c is None else (c.topic_name, c.partition_index)


async def super_user(broker):
    """Let ``User:admin`` do anything on the physical cluster (ACLs are enforced)."""
    await broker.metadata.alter_acls([AclEntry(None, ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL,
                                               "User:admin", "*", Operation.ALL, Permission.ALLOW),
                                      AclEntry(None, ResourceType.TOPIC, "*", PatternType.LITERAL,
                                               "User:admin", "*", Operation.ALL, Permission.ALLOW)], [])


PHYSICAL = sorted((n, c) for n, c in TOPICS.items())


async def test_all_topics_sorted_with_partitions(broker):
    await super_user(broker)
    resp = await call(broker, request())
    assert pages(resp) == [(n, ErrorCode.none, tuple(range(c))) for n, c in PHYSICAL]
    assert resp.next_cursor is None
    by_name = {t.name: t for t in resp.topics}
    image = broker.metadata.image
    assert by_name["alpha"].topic_id == image.topics["alpha"].topic_id
    assert by_name["__consumer_offsets"].is_internal and not by_name["alpha"].is_internal
    p1 = by_name["alpha"].partitions[1]
    assert (p1.leader_id, p1.replica_nodes, p1.isr_nodes, p1.offline_replicas) == (2, (2,), (2,), ())
    assert p1.eligible_leader_replicas == () and p1.last_known_elr == ()
    ops = by_name["alpha"].topic_authorized_operations
    assert ops > 0 and ops & (1 << Operation.DESCRIBE)


async def test_offline_leader(broker):
    """A leader that is not a live broker: LEADER_NOT_AVAILABLE, no leader, its replica offline."""
    await super_user(broker)
    await broker.metadata.create_topic("dead", [(7,), (1,)], {})
    (t,) = (await call(broker, request(["dead"]))).topics
    p0, p1 = t.partitions
    assert (p0.error_code, p0.leader_id, p0.replica_nodes, p0.offline_replicas) == (
        ErrorCode.leader_not_available, -1, (7,), (7,))
    assert (p1.error_code, p1.leader_id, p1.offline_replicas) == (ErrorCode.none, 1, ())


@pytest.mark.parametrize("limit,page1,cur", [
    # limit smaller than the first topic's partitions: stop inside it
    (2, [("__consumer_offsets", (0, 1))], ("alpha", 0)),  # exactly the first topic: next one at 0
    (4, [("__consumer_offsets", (0, 1)), ("alpha", (0, 1))], ("alpha", 2)),
    (0, [("__consumer_offsets", (0,))], ("__consumer_offsets", 1)),  # at least one partition
    (-5, [("__consumer_offsets", (0,))], ("__consumer_offsets", 1)),
])
async def test_limit(broker, limit, page1, cur):
    await super_user(broker)
    resp = await call(broker, request(limit=limit))
    assert [(n, p) for n, _, p in pages(resp)] == page1
    assert cursor(resp) == cur


async def test_broker_limit_caps_the_request(broker):
    await super_user(broker)
    broker.static_config = BrokerConfig.load(None, {**AUTHORIZER, "max.request.partition.size.limit": "3"})
    resp = await call(broker, request(limit=100))
    assert sum(len(p) for _, _, p in pages(resp)) == 3 and cursor(resp) == ("alpha", 1)


async def test_cursor_in_the_middle_of_a_topic(broker):
    await super_user(broker)
    resp = await call(broker, request(limit=4, cursor=("gamma", 2)))
    assert pages(resp) == [("gamma", ErrorCode.none, (2, 3, 4)), (f"{TENANT}_orders", ErrorCode.none, (0,))]
    assert cursor(resp) == (f"{TENANT}_orders", 1)


async def test_cursor_past_a_topics_end_gives_it_no_partitions(broker):
    await super_user(broker)
    resp = await call(broker, request(["beta", "gamma"], limit=10, cursor=("beta", 5)))
    assert pages(resp) == [("beta", ErrorCode.none, ()), ("gamma", ErrorCode.none, (0, 1, 2, 3, 4))]
    assert resp.next_cursor is None


async def test_unknown_cursor_topic_all_topics_starts_at_the_next_name(broker):
    """All topics: a cursor topic that does not exist starts at the first name after it, at 0."""
    await super_user(broker)
    resp = await call(broker, request(limit=2, cursor=("alz", 1)))
    assert pages(resp) == [("beta", ErrorCode.none, (0,)), ("gamma", ErrorCode.none, (0,))]
    assert cursor(resp) == ("gamma", 1)


@pytest.mark.parametrize("topics,cur", [(["alpha", "beta"], ("nosuch", 0)),  # not in the named list
                                        (["alpha"], ("alpha", -1)),           # negative partition
                                        ([], ("alpha", -1))])
async def test_invalid_cursor(broker, topics, cur):
    await super_user(broker)
    resp = await call(broker, request(topics, cursor=cur))
    assert pages(resp) == [(t, ErrorCode.invalid_request, ()) for t in topics]
    assert all(t.topic_id is None for t in resp.topics) and resp.next_cursor is None


async def test_named_topics_unknown_invalid_and_duplicates(broker):
    await super_user(broker)
    resp = await call(broker, request(["gamma", "nosuch", "alpha", "bad/name", "alpha"], limit=4))
    assert pages(resp) == [("alpha", ErrorCode.none, (0, 1, 2)), ("bad/name", ErrorCode.invalid_topic_exception, ()),
                           ("gamma", ErrorCode.none, (0,))]
    assert cursor(resp) == ("gamma", 1)  # "nosuch" is after the page's end: next time
    resp = await call(broker, request(["gamma", "nosuch", "alpha"], cursor=("gamma", 1)))
    assert pages(resp) == [("gamma", ErrorCode.none, (1, 2, 3, 4)), ("nosuch", ErrorCode.unknown_topic_or_partition, ())]


async def test_authorization(broker):
    """Without DESCRIBE: a named topic is TOPIC_AUTHORIZATION_FAILED (after the others, no id);
    all-topics leaves it out. The bit set names what the principal may do."""
    await broker.metadata.alter_acls([AclEntry(None, ResourceType.TOPIC, "gamma", PatternType.LITERAL,
                                               "User:bob", "*", Operation.DESCRIBE, Permission.ALLOW)], [])
    resp = await call(broker, request(["alpha", "gamma", "nosuch"]), principal="User:bob")
    assert pages(resp) == [("gamma", ErrorCode.none, (0, 1, 2, 3, 4)),
                           ("alpha", ErrorCode.topic_authorization_failed, ()),
                           ("nosuch", ErrorCode.topic_authorization_failed, ())]
    assert resp.topics[0].topic_authorized_operations == 1 << Operation.DESCRIBE
    assert resp.topics[1].topic_id is None
    resp = await call(broker, request(), principal="User:bob")
    assert pages(resp) == [("gamma", ErrorCode.none, (0, 1, 2, 3, 4))]


async def test_denied_topics_after_the_page_end_wait_for_their_page(broker):
    await broker.metadata.alter_acls([AclEntry(None, ResourceType.TOPIC, "alpha", PatternType.LITERAL,
                                               "User:bob", "*", Operation.DESCRIBE, Permission.ALLOW)], [])
    resp = await call(broker, request(["alpha", "beta", "gamma"], limit=1), principal="User:bob")
    assert pages(resp) == [("alpha", ErrorCode.none, (0,))] and cursor(resp) == ("alpha", 1)
    resp = await call(broker, request(["alpha", "beta", "gamma"], limit=2, cursor=("alpha", 1)), principal="User:bob")
    assert pages(resp) == [("alpha", ErrorCode.none, (1, 2)), ("beta", ErrorCode.topic_authorization_failed, ()),
                           ("gamma", ErrorCode.topic_authorization_failed, ())]
    assert resp.next_cursor is None


async def test_tenant_sees_its_own_topics_by_their_names(broker):
    """A tenant pages its own topics by unqualified name; another tenant's topic, by its name or
    its physical name, answers as one that does not exist."""
    tenant_user = f"User:{tenant_prefix(TENANT)}ada"
    await broker.metadata.alter_acls([AclEntry(TENANT, ResourceType.TOPIC, "*", PatternType.LITERAL,
                                               "User:ada", "*", Operation.ALL, Permission.ALLOW)], [])
    resp = await call(broker, request(limit=5), tenant=TENANT, principal=tenant_user)
    assert pages(resp) == [("orders", ErrorCode.none, (0, 1, 2, 3)), ("users", ErrorCode.none, (0,))]
    assert cursor(resp) == ("users", 1)
    assert resp.topics[0].topic_id == broker.metadata.image.topics[f"{TENANT}_orders"].topic_id

    async def named(name):
        r = await call(broker, request([name]), tenant=TENANT, principal=tenant_user)
        return [(t.error_code, t.topic_id, t.partitions, t.is_internal) for t in r.topics], r.next_cursor

    assert await named("secret") == await named("nosuch")
    assert (await named("secret"))[0][0][0] == ErrorCode.unknown_topic_or_partition
    assert await named(f"{OTHER}_secret") == await named("lkc-zzzzzz_nosuch")
    # a cursor on another tenant's physical name is just a name to start after
    resp = await call(broker, request(cursor=(f"{OTHER}_secret", 0)), tenant=TENANT, principal=tenant_user)
    assert pages(resp) == [("orders", ErrorCode.none, (0, 1, 2, 3)), ("users", ErrorCode.none, (0, 1))]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(limit=st.integers(min_value=1, max_value=25), named=st.booleans())
async def test_following_the_cursor_visits_every_partition_once(broker, limit, named):
    await super_user(broker)
    topics = [n for n, _ in PHYSICAL] if named else []
    seen, cur = [], None
    for _ in range(sum(TOPICS.values()) + len(TOPICS) + 1):
        resp = await call(broker, request(topics, limit=limit, cursor=cur))
        got = [(n, p) for n, _, ps in pages(resp) for p in ps]
        assert 0 < len(got) <= limit
        seen += got
        cur = cursor(resp)
        if cur is None:
            break
    assert seen == [(n, p) for n, c in PHYSICAL for p in range(c)]
