"""Tenant scoping and authorization of the group and offset APIs, at the handlers of an in-process
broker (no sockets; requests and responses through the codec both ways).

Tenants A (user alice) and B (user bob) each have a topic ``users``; the operator (the physical
view, a super user) has its own ``users``. Both tenants use the same group ids.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from dataclasses import dataclass

import pytest

from group_helpers import handler_call, subscription
from shoal.broker import Broker
from shoal.config import BrokerConfig
from shoal.groups.records import subscription_topics
from shoal.metadata import AclEntry
from shoal.protocol.errors import ErrorCode as E
from shoal.tenancy.acl import Operation, PatternType, Permission, ResourceType

pytestmark = pytest.mark.timeout(60)

FIND, COMMIT, FETCH, JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE, LIST, DELETE, OFFSET_DELETE = 10, 8, 9, 11, 12, 13, 14, 15, 16, 42, 47
CGH, CGD = 68, 69
AUTHORIZER = {"authorizer.class.name": "shoal"}


def assignment(*tps: tuple[str, list[int]]) -> bytes:
    """A ConsumerProtocolAssignment v0."""
    out = struct.pack(">hi", 0, len(tps))
    for t, ps in tps:
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


@dataclass
class World:
    broker: Broker
    a: str  # tenant ids
    b: str

    def pa(self, name: str) -> str:
        return f"{self.a}_{name}"

    def pb(self, name: str) -> str:
        return f"{self.b}_{name}"

    def as_a(self, api_key: int, version: int, /, user: str = "alice", **values):
        return handler_call(self.broker, api_key, version, principal=f"User:{user}", tenant=self.a, **values)

    def as_b(self, api_key: int, version: int, /, **values):
        return handler_call(self.broker, api_key, version, principal="User:bob", tenant=self.b, **values)

    def as_op(self, api_key: int, version: int, /, **values):
        return handler_call(self.broker, api_key, version, **values)

    def topic_id(self, physical: str):
        return self.broker.metadata.image.topic(physical).topic_id

    async def acl(self, tenant: str, rtype: int, name: str, op: int, principal: str = "User:alice",
                  permission: int = Permission.ALLOW, pattern: int = PatternType.LITERAL) -> None:
        await self.broker.metadata.alter_acls(
            [AclEntry(tenant, rtype, name, pattern, principal, "*", op, permission)], [])


async def make_world(tmp_path, overrides: dict[str, str] | None = None) -> World:
    cfg = BrokerConfig.load(None, {
        "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path), "offsets.topic.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0", "super.users": "User:ANONYMOUS", **(overrides or {}),
    })
    b = Broker(cfg)
    await b.start()
    w = World(b, (await b.metadata.create_tenant("A")).tenant_id, (await b.metadata.create_tenant("B")).tenant_id)
    await b.metadata.assign_user("alice", w.a)
    await b.metadata.assign_user("alice2", w.a)
    await b.metadata.assign_user("bob", w.b)
    for name in (w.pa("users"), w.pa("secret"), w.pb("users")):
        await b.metadata.create_topic(name, [(1,), (1,)], {})
    await b.metadata.create_topic("users", [(1,)], {})  # the operator's own
    return w


@pytest.fixture
async def world(tmp_path):
    w = await make_world(tmp_path)
    yield w
    await w.broker.stop()


@pytest.fixture
async def acl_world(tmp_path):
    w = await make_world(tmp_path, AUTHORIZER)
    yield w
    await w.broker.stop()


async def join_stable(call, group: str, topics=("users",), join_v: int = 5, sync_v: int = 3) -> str:
    """One member in a Stable generation; checks that what the client gets back carries its names."""
    values = dict(group_id=group, session_timeout=6000, rebalance_timeout=6000, protocol_type="consumer",
                  group_instance_id=None, protocols=[{"name": "range", "metadata": subscription(*topics)}])
    r = await call(JOIN, join_v, member_id="", **values)
    assert r.error_code == E.member_id_required
    r = await call(JOIN, join_v, member_id=r.member_id, **values)
    assert (r.error_code, r.leader) == (E.none, r.member_id)
    assert [m.metadata for m in r.members] == [subscription(*topics)]
    mine = assignment(*[(t, [0, 1]) for t in topics])
    s = await call(SYNC, sync_v, group_id=group, generation_id=r.generation_id, member_id=r.member_id,
                   group_instance_id=None, assignments=[{"member_id": r.member_id, "assignment": mine}])
    assert (s.error_code, s.assignment) == (E.none, mine)
    return r.member_id


def commit(call, group: str, offset: int, topic: str = "users", version: int = 9, partition: int = 0, **kw):
    t = {"name": topic, **kw}
    return call(COMMIT, version, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                topics=[{**t, "partitions": [{"partition_index": partition, "committed_offset": offset}]}])


def codes(resp) -> list[list[int]]:
    return [[p.error_code for p in t.partitions] for t in resp.topics]


# -- names ----------------------------------------------------------------------------------------


async def test_same_group_id_in_two_tenants_is_two_groups_with_qualified_topics(world):
    w = world
    ma = await join_stable(w.as_a, "g")
    mb = await join_stable(w.as_b, "g")
    coord = w.broker.groups
    ga, gb = coord.groups[w.pa("g")], coord.groups[w.pb("g")]
    assert "g" not in coord.groups and list(ga.members) == [ma] and list(gb.members) == [mb]
    # the coordinator keeps physical names, also inside the consumer protocol's bytes
    assert subscription_topics(ga.members[ma].metadata("range")) == [w.pa("users")]
    assert ga.members[ma].assignment == assignment((w.pa("users"), [0, 1]))
    assert ga.subscribed_topics == {w.pa("users")} and gb.subscribed_topics == {w.pb("users")}

    for call, me in ((w.as_a, ma), (w.as_b, mb)):
        [g] = (await call(DESCRIBE, 5, groups=["g"], include_authorized_operations=True)).groups
        assert (g.group_id, g.group_state, [m.member_id for m in g.members]) == ("g", "Stable", [me])
        assert g.members[0].member_metadata == subscription("users")
        assert g.members[0].member_assignment == assignment(("users", [0, 1]))
        assert g.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)  # no authorizer: everything
        assert (await call(HEARTBEAT, 4, group_id="g", member_id=me, generation_id=1, group_instance_id=None)).error_code == E.none
    [g] = (await w.as_op(DESCRIBE, 5, groups=[w.pa("g")], include_authorized_operations=False)).groups
    assert g.members[0].member_assignment == assignment((w.pa("users"), [0, 1]))

    # another tenant's member id is unknown here; leaving works per tenant
    assert (await w.as_a(HEARTBEAT, 4, group_id="g", member_id=mb, generation_id=1, group_instance_id=None)
            ).error_code == E.unknown_member_id
    r = await w.as_a(LEAVE, 5, group_id="g", members=[{"member_id": ma, "group_instance_id": None, "reason": None}])
    assert r.error_code == E.none and ga.state_name == "Empty" and gb.state_name == "Stable"


@pytest.mark.parametrize("version", range(0, 6))
async def test_list_groups_shows_each_scope_its_own(world, version):
    w = world
    await commit(w.as_a, "g", 1)
    await commit(w.as_a, "only-a", 1)
    await commit(w.as_b, "g", 2)
    await commit(w.as_op, "op", 3)
    assert [g.group_id for g in (await w.as_a(LIST, version)).groups] == ["g", "only-a"]
    assert [g.group_id for g in (await w.as_b(LIST, version)).groups] == ["g"]
    assert [g.group_id for g in (await w.as_op(LIST, version)).groups] == sorted(
        [w.pa("g"), w.pa("only-a"), w.pb("g"), "op"])


@pytest.mark.parametrize("version", range(0, 7))
async def test_another_tenants_group_looks_like_no_group(world, version):
    w = world
    await join_stable(w.as_b, "only-b")
    await commit(w.as_b, "only-b-simple", 4)
    d = await w.as_a(DESCRIBE, version, groups=["only-b", "only-b-simple", "never"], include_authorized_operations=True)
    rows = [dataclasses.asdict(g) for g in d.groups]
    for row, name in zip(rows, ("only-b", "only-b-simple", "never")):
        assert row.pop("group_id") == name
        if version >= 6:
            assert row.pop("error_message") == f"Group {name} not found."
    assert rows[0] == rows[1] == rows[2]
    assert rows[0]["group_state"] == "Dead"
    f = await w.as_a(FETCH, 8, groups=[{"group_id": n, "topics": None} for n in ("only-b-simple", "never")])
    assert [(g.error_code, g.topics) for g in f.groups] == [(E.none, ())] * 2
    r = await w.as_a(DELETE, 2, groups_names=["only-b", "never"])
    assert [x.error_code for x in r.results] == [E.group_id_not_found] * 2
    assert w.pb("only-b") in w.broker.groups.groups


@pytest.mark.parametrize("version", range(2, 11))
async def test_offsets_are_per_tenant(world, version):
    w = world
    by_id = version >= 10
    ids = {"a": w.topic_id(w.pa("users")), "b": w.topic_id(w.pb("users"))}
    ra = await commit(w.as_a, "s", 5, version=version, topic_id=ids["a"])
    rb = await commit(w.as_b, "s", 7, version=version, topic_id=ids["b"])
    assert codes(ra) == codes(rb) == [[E.none]]
    fetch_v = min(version, 10)

    async def fetched(call, topics):
        if fetch_v >= 8:
            [g] = (await call(FETCH, fetch_v, require_stable=False, groups=[{"group_id": "s", "topics": topics}])).groups
            return g.error_code, g.topics
        r = await call(FETCH, fetch_v, group_id="s", topics=topics, require_stable=False)
        return r.error_code, r.topics

    def ask(who):
        return [{"name": "users", "topic_id": ids[who], "partition_indexes": [0, 1]}]

    for who, call, offset in (("a", w.as_a, 5), ("b", w.as_b, 7)):
        code, topics = await fetched(call, ask(who))
        assert code == E.none
        assert [(t.topic_id if by_id else t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
                for t in topics] == [(ids[who] if by_id else "users", [(0, offset), (1, -1)])]
    # the operator puts foreign topics into A's group: A's "all topics" shows only its own
    await commit(w.as_op, w.pa("s"), 9, topic=w.pb("users"))
    await commit(w.as_op, w.pa("s"), 9, topic="users")
    code, topics = await fetched(w.as_a, None)
    assert [(t.topic_id if by_id else t.name) for t in topics] == [ids["a"] if by_id else "users"]
    if by_id:  # B's topic id is no topic for A
        r = await commit(w.as_a, "s", 1, version=version, topic_id=ids["b"])
        assert codes(r) == [[E.unknown_topic_id]]
        code, topics = await fetched(w.as_a, ask("b"))
        assert [[p.error_code for p in t.partitions] for t in topics] == [[E.unknown_topic_id] * 2]
    else:  # a physical name means nothing inside a tenant
        assert codes(await commit(w.as_a, "s", 1, topic=w.pb("users"))) == [[E.unknown_topic_or_partition]]
        assert codes(await commit(w.as_a, "s", 1, topic="__consumer_offsets")) == [[E.unknown_topic_or_partition]]


async def test_offset_delete_and_delete_groups_stay_in_the_tenant(world):
    w = world
    await commit(w.as_a, "s", 5)
    await commit(w.as_b, "s", 7)
    od = await w.as_a(OFFSET_DELETE, 0, group_id="s", topics=[{"name": "users", "partitions": [{"partition_index": 0}]},
                                                              {"name": "nope", "partitions": [{"partition_index": 0}]}])
    assert (od.error_code, [(t.name, [p.error_code for p in t.partitions]) for t in od.topics]) == (
        E.none, [("users", [E.none]), ("nope", [E.unknown_topic_or_partition])])
    assert w.broker.groups.offsets.get(w.pa("s"), w.pa("users"), 0) is None
    assert w.broker.groups.offsets.get(w.pb("s"), w.pb("users"), 0).offset == 7
    r = await w.as_a(DELETE, 2, groups_names=["s"])
    assert [(x.group_id, x.error_code) for x in r.results] == [("s", E.none)]
    assert w.pa("s") not in w.broker.groups.groups and w.pb("s") in w.broker.groups.groups


@pytest.mark.parametrize("version", [0, 1])
async def test_consumer_group_protocol_in_two_tenants(world, version):
    w = world
    ids = {n: w.topic_id(n) for n in (w.pa("users"), w.pa("secret"), w.pb("users"), "users")}

    def hb(call, member, **kw):
        values = dict(group_id="k", member_id=member, member_epoch=0, instance_id=None, rack_id=None,
                      rebalance_timeout=30000, subscribed_topic_names=["users"], server_assignor=None, topic_partitions=[])
        values.update(kw)
        return call(CGH, version, **values)

    ra = await hb(w.as_a, "ma")
    rb = await hb(w.as_b, "mb")
    assert {tp.topic_id for tp in ra.assignment.topic_partitions} == {ids[w.pa("users")]}
    assert {tp.topic_id for tp in rb.assignment.topic_partitions} == {ids[w.pb("users")]}
    d = await w.as_a(CGD, version, group_ids=["k"], include_authorized_operations=True)
    [m] = d.groups[0].members
    assert (d.groups[0].group_id, m.member_id, m.subscribed_topic_names) == ("k", "ma", ("users",))
    assert [tp.topic_name for tp in m.assignment.topic_partitions] == ["users"]
    d = await w.as_op(CGD, version, group_ids=[w.pa("k")], include_authorized_operations=False)
    assert d.groups[0].members[0].subscribed_topic_names == (w.pa("users"),)
    # B asking about A's member, or for a group only A has: as for nothing at all
    r = await hb(w.as_b, "ma", member_epoch=1, rebalance_timeout=-1, subscribed_topic_names=None, topic_partitions=None)
    assert (r.error_code, r.error_message) == (E.unknown_member_id, "Member ma is not a member of group k.")
    only_a = await w.as_b(CGD, version, group_ids=["k-a", "nothing"], include_authorized_operations=False)
    await hb(w.as_a, "ma2", group_id="k-a")
    only_a2 = await w.as_b(CGD, version, group_ids=["k-a", "nothing"], include_authorized_operations=False)
    assert only_a == only_a2
    assert [g.error_message for g in only_a2.groups] == ["Group k-a not found.", "Group nothing not found."]
    if version >= 1:  # a regex matches the tenant's own topics, by the names it sees
        r = await hb(w.as_b, "mr", group_id="kr", subscribed_topic_names=None, subscribed_topic_regex="u.*|secret")
        assert {tp.topic_id for tp in r.assignment.topic_partitions} == {ids[w.pb("users")]}
        assert w.broker.groups.groups[w.pb("kr")].subscribed_topic_names() == {w.pb("users")}
        r = await hb(w.as_a, "mr", group_id="kr", subscribed_topic_names=None, subscribed_topic_regex="u.*|secret")
        assert {tp.topic_id for tp in r.assignment.topic_partitions} == {ids[w.pa("users")], ids[w.pa("secret")]}
        r = await hb(w.as_op, "mr", group_id="kr", subscribed_topic_names=None, subscribed_topic_regex="users")
        assert {tp.topic_id for tp in r.assignment.topic_partitions} == {ids["users"]}
        r = await hb(w.as_a, "mr2", group_id="kr2", subscribed_topic_names=None, subscribed_topic_regex=f"{w.b}.*")
        assert r.error_code == E.none and r.assignment.topic_partitions == ()


# -- authorization ----------------------------------------------------------------------------------


async def test_no_acl_no_group_api(acl_world):
    w = acl_world
    join = dict(group_id="g", session_timeout=6000, rebalance_timeout=6000, protocol_type="consumer",
                group_instance_id=None, reason=None, protocols=[{"name": "range", "metadata": subscription("users")}])
    for v in range(0, 10):
        r = await w.as_a(JOIN, v, member_id="", **join)
        assert (r.error_code, r.member_id, r.generation_id) == (E.group_authorization_failed, "", -1)
    for v in range(0, 6):
        r = await w.as_a(SYNC, v, group_id="g", generation_id=1, member_id="m", group_instance_id=None,
                         protocol_type="consumer", protocol_name="range", assignments=[])
        assert r.error_code == E.group_authorization_failed
        r = await w.as_a(LEAVE, v, group_id="g", member_id="m", members=[{"member_id": "m"}])
        assert r.error_code == E.group_authorization_failed
    for v in range(0, 5):
        assert (await w.as_a(HEARTBEAT, v, group_id="g", member_id="m", generation_id=1)).error_code == E.group_authorization_failed
    for v in range(2, 11):
        r = await commit(w.as_a, "g", 1, version=v, topic_id=w.topic_id(w.pa("users")))
        assert codes(r) == [[E.group_authorization_failed]]
    r = await w.as_a(FETCH, 1, group_id="g", topics=[{"name": "users", "partition_indexes": [0, 1]}])
    assert codes(r) == [[E.group_authorization_failed] * 2]
    assert (await w.as_a(FETCH, 7, group_id="g", topics=None)).error_code == E.group_authorization_failed
    f = await w.as_a(FETCH, 8, groups=[{"group_id": "g", "topics": None}])
    assert (f.groups[0].error_code, f.groups[0].topics) == (E.group_authorization_failed, ())
    d = await w.as_a(DESCRIBE, 6, groups=["g"], include_authorized_operations=True)
    assert (d.groups[0].error_code, d.groups[0].group_state, d.groups[0].error_message) == (E.group_authorization_failed, "", None)
    r = await w.as_a(DELETE, 2, groups_names=["g"])
    assert [(x.group_id, x.error_code) for x in r.results] == [("g", E.group_authorization_failed)]
    r = await w.as_a(OFFSET_DELETE, 0, group_id="g", topics=[{"name": "users", "partitions": [{"partition_index": 0}]}])
    assert (r.error_code, r.topics) == (E.group_authorization_failed, ())
    for v in (0, 1):
        r = await w.as_a(CGH, v, group_id="g", member_id="m", member_epoch=0, rebalance_timeout=30000,
                         subscribed_topic_names=["users"], topic_partitions=[])
        assert (r.error_code, r.member_epoch, r.assignment) == (E.group_authorization_failed, 0, None)
        d = await w.as_a(CGD, v, group_ids=["g"], include_authorized_operations=True)
        assert (d.groups[0].error_code, d.groups[0].members) == (E.group_authorization_failed, ())
    r = await w.as_a(FIND, 3, key="g", key_type=0)
    assert (r.error_code, r.node_id) == (E.group_authorization_failed, -1)
    r = await w.as_a(FIND, 4, key_type=1, coordinator_keys=["tx"])
    assert r.coordinators[0].error_code == E.transactional_id_authorization_failed
    # ACLs of another tenant or of the physical cluster do not count inside tenant A
    await w.acl(w.b, ResourceType.GROUP, "*", Operation.ALL)
    await w.acl(None, ResourceType.GROUP, "*", Operation.ALL)
    assert (await w.as_a(HEARTBEAT, 4, group_id="g", member_id="m", generation_id=1)).error_code == E.group_authorization_failed


async def test_read_on_group_and_topics(acl_world):
    w = acl_world
    await w.acl(w.a, ResourceType.GROUP, "g", Operation.READ)
    await w.acl(w.a, ResourceType.GROUP, "s", Operation.READ)
    await w.acl(w.a, ResourceType.TOPIC, "users", Operation.READ)
    await join_stable(w.as_a, "g")
    r = await w.as_a(FIND, 4, key_type=0, coordinator_keys=["g", "h"])
    assert [c.error_code for c in r.coordinators] == [E.none, E.group_authorization_failed]
    # READ on a topic to commit; checked before the topic's existence, as Kafka
    for topic, code in (("users", E.none), ("secret", E.topic_authorization_failed), ("nope", E.topic_authorization_failed)):
        assert codes(await commit(w.as_a, "s", 3, topic=topic)) == [[code]]
    r = await w.as_a(FETCH, 6, group_id="s", topics=[{"name": "users", "partition_indexes": [0]},
                                                     {"name": "secret", "partition_indexes": [0]}])
    assert [(t.name, [(p.committed_offset, p.error_code) for p in t.partitions]) for t in r.topics] == [
        ("users", [(3, E.none)]), ("secret", [(-1, E.topic_authorization_failed)])]
    await commit(w.as_op, w.pa("s"), 8, topic=w.pa("secret"))  # offsets of a topic alice may not describe
    r = await w.as_a(FETCH, 6, group_id="s", topics=None)
    assert [t.name for t in r.topics] == ["users"]
    await commit(w.as_op, w.pa("h"), 1, topic=w.pa("users"))
    d = await w.as_a(DESCRIBE, 5, groups=["g", "h"], include_authorized_operations=True)
    assert [(g.group_id, g.error_code) for g in d.groups] == [("h", E.group_authorization_failed), ("g", E.none)]
    assert d.groups[1].authorized_operations == (1 << 3) | (1 << 8)  # READ implies DESCRIBE
    assert [g.group_id for g in (await w.as_a(LIST, 4)).groups] == ["g", "s"]
    await w.acl(w.a, ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE)
    assert [g.group_id for g in (await w.as_a(LIST, 4)).groups] == ["g", "h", "s"]
    r = await w.as_a(DELETE, 2, groups_names=["h", "s"])
    assert [(x.group_id, x.error_code) for x in r.results] == [("h", E.group_authorization_failed), ("s", E.group_authorization_failed)]
    r = await w.as_a(OFFSET_DELETE, 0, group_id="s", topics=[{"name": "users", "partitions": [{"partition_index": 0}]}])
    assert r.error_code == E.group_authorization_failed
    await w.acl(w.a, ResourceType.GROUP, "s", Operation.DELETE)
    r = await w.as_a(OFFSET_DELETE, 0, group_id="s", topics=[{"name": "users", "partitions": [{"partition_index": 0}]},
                                                             {"name": "secret", "partitions": [{"partition_index": 0}]}])
    assert [(t.name, [p.error_code for p in t.partitions]) for t in r.topics] == [
        ("users", [E.none]), ("secret", [E.topic_authorization_failed])]
    # a tenant administrator may do anything in its tenant
    await w.broker.metadata.set_tenant_admin("alice", True)
    r = await w.as_a(DELETE, 2, groups_names=["h"])
    assert [(x.group_id, x.error_code) for x in r.results] == [("h", E.none)]


async def test_consumer_group_heartbeat_authorization(acl_world):
    w = acl_world
    await w.acl(w.a, ResourceType.GROUP, "k", Operation.READ, principal="User:*")
    await w.acl(w.a, ResourceType.TOPIC, "users", Operation.READ, principal="User:alice")

    def hb(member, user="alice", **kw):
        values = dict(group_id="k", member_id=member, member_epoch=0, instance_id=None, rack_id=None,
                      rebalance_timeout=30000, subscribed_topic_names=["users"], server_assignor=None, topic_partitions=[])
        values.update(kw)
        return w.as_a(CGH, 1, user=user, **values)

    r = await hb("m1", subscribed_topic_names=["users", "secret"])
    assert (r.error_code, r.assignment) == (E.topic_authorization_failed, None)
    r = await hb("m1", subscribed_topic_names=None, subscribed_topic_regex=".*")
    assert {tp.topic_id for tp in r.assignment.topic_partitions} == {w.topic_id(w.pa("users"))}  # not "secret"
    r = await hb("m2", user="alice2", subscribed_topic_names=["users"])
    assert r.error_code == E.topic_authorization_failed
    d = await w.as_a(CGD, 1, user="alice2", group_ids=["k"], include_authorized_operations=True)
    [g] = d.groups
    assert (g.error_code, g.members) == (E.topic_authorization_failed, ())
    assert g.error_message == "The group has described topic(s) that the client is not authorized to describe."
    d = await w.as_a(CGD, 1, group_ids=["k"], include_authorized_operations=True)
    assert (d.groups[0].error_code, d.groups[0].authorized_operations) == (E.none, (1 << 3) | (1 << 8))


# -- tenant deletion --------------------------------------------------------------------------------


async def settled(broker: Broker) -> None:
    """Wait until the coordinator's background writes (tombstones) are committed."""
    for _ in range(200):
        if not broker.groups._tasks:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("coordinator writes still pending")


async def populate(w: World, call, prefix_ok=True) -> None:
    await join_stable(call, "g")  # a live classic member
    await commit(call, "s", 5)  # a simple group
    r = await call(CGH, 1, group_id="k", member_id="m", member_epoch=0, instance_id=None, rack_id=None,
                   rebalance_timeout=30000, subscribed_topic_names=["users"], server_assignor=None, topic_partitions=[])
    assert r.error_code == E.none


async def restarted(w: World, tmp_path) -> World:
    await settled(w.broker)
    await w.broker.stop()
    b = Broker(w.broker.static_config)
    await b.start()
    return World(b, w.a, w.b)


async def test_deleting_a_tenant_deletes_its_groups_and_offsets(tmp_path):
    w = await make_world(tmp_path)
    try:
        await populate(w, w.as_a)
        await populate(w, w.as_b)
        await commit(w.as_op, "op", 1)
        a_groups = {w.pa(g) for g in ("g", "s", "k")}
        assert a_groups <= set(w.broker.groups.groups)
        await w.broker.metadata.delete_tenant(w.a)
        assert not a_groups & set(w.broker.groups.groups)
        assert {w.pb("g"), w.pb("s"), w.pb("k"), "op"} <= set(w.broker.groups.groups)
        assert not [k for k in w.broker.groups.offsets._pending if k[0].startswith(w.a)]
        w = await restarted(w, tmp_path)
        listed = [g.group_id for g in (await w.as_op(LIST, 4)).groups]
        assert not [g for g in listed if g.startswith(w.a)], listed
        assert {w.pb("g"), w.pb("s"), w.pb("k"), "op"} <= set(listed)
        assert w.broker.groups.offsets.get(w.pb("s"), w.pb("users"), 0).offset == 5
    finally:
        await w.broker.stop()


async def test_groups_of_a_tenant_deleted_while_down_go_at_load(tmp_path):
    w = await make_world(tmp_path)
    await populate(w, w.as_b)
    await commit(w.as_op, "lkc-zzzzzz", 1)  # not a tenant-qualified name (no "_")
    await settled(w.broker)
    await w.broker.stop()
    from shoal.metadata.embedded import EmbeddedMetadataStore

    store = EmbeddedMetadataStore(tmp_path / "__metadata" / "metadata.json", node_id=w.broker.node_id)
    await store.start()
    await store.delete_tenant(w.b)
    await store.close()
    for _ in range(2):  # at the first load the groups go; the tombstones keep them gone
        b = Broker(w.broker.static_config)
        await b.start()
        try:
            w = World(b, w.a, w.b)
            listed = [g.group_id for g in (await w.as_op(LIST, 4)).groups]
            assert listed == ["lkc-zzzzzz"]
            await settled(b)
        finally:
            await b.stop()
