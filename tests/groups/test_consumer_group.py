"""The KIP-848 consumer group state machine on a ManualClock and a MemoryCoordinatorLog: epochs,
reconciliation (revoke before assign), timeouts, static members, validation, persistence."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from group_helpers import make_env, settle, started_env
from shoal.groups import CommitRequest, GroupCoordinator
from shoal.groups import consumer_records as cr
from shoal.groups.consumer import (
    ConsumerGroup,
    ConsumerGroupConfig,
    HeartbeatRequest,
    MemberState,
    compile_regex,
)
from shoal.metadata import MetadataImage, PartitionInfo, TopicInfo
from shoal.protocol.errors import ErrorCode

SESSION_MS = 45_000
REBALANCE_MS = 30_000
E = ErrorCode


def tid(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


class Topics:
    """A mutable metadata image for the coordinator (``set`` bumps its epoch)."""

    def __init__(self, **topics: int) -> None:
        self.epoch = 0
        self.image: MetadataImage
        self.set(**topics)

    def set(self, internal: tuple[str, ...] = (), **topics: int) -> None:
        self.epoch += 1
        infos = {
            name: TopicInfo(name, tid(name), tuple(PartitionInfo(p, (1,), (1,), 1) for p in range(n)), internal=name in internal)
            for name, n in topics.items()
        }
        self.image = MetadataImage("cluster", 1, {}, infos, {t.topic_id: t for t in infos.values()}, {}, epoch=self.epoch)


async def cenv(partitions: int = 1, config: ConsumerGroupConfig | None = None, **topics: int):
    env = await started_env(partitions)
    t = Topics(**(topics or {"t": 6}))
    env.coord.consumer.image_source = lambda: t.image
    env.coord.consumer.config = config or ConsumerGroupConfig(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=5000)
    env.topics = t
    return env


def hb(env, member_id: str, epoch: int, group: str = "g", *, version: int = 1, **kw):
    if epoch == 0:
        kw.setdefault("rebalance_timeout_ms", REBALANCE_MS)
        kw.setdefault("owned", {})
        if "subscribed_topic_regex" not in kw:
            kw.setdefault("subscribed_topic_names", ("t",))
    req = HeartbeatRequest(group_id=group, member_id=member_id, member_epoch=epoch, client_id="c", client_host="/127.0.0.1", **kw)
    return env.coord.consumer.heartbeat(req, version)


def parts(assignment, topic: str = "t") -> set[int]:
    return set(assignment.get(tid(topic), ())) if assignment is not None else set()


def group(env, gid: str = "g") -> ConsumerGroup:
    g = env.coord.groups[gid]
    assert isinstance(g, ConsumerGroup)
    return g


def records(env, partition: int = 0) -> list[tuple[int, str | None]]:
    """(key version, member) of the consumer group records written, in order."""
    out = []
    for k, v in env.log.all(partition):
        version = int.from_bytes(k[:2], "big", signed=True)
        if version in cr.KEY_VERSIONS:
            out.append((version, cr.decode_key(k).member, v is None))
    return out


class Client:
    """An honest member: owns exactly what the last assignment it got says, reports it every time."""

    def __init__(self, env, member_id: str, topics=("t",), **kw) -> None:
        self.env, self.member_id, self.topics, self.kw = env, member_id, topics, kw
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.fenced = False

    async def beat(self):
        if self.epoch == 0:
            r = await hb(self.env, self.member_id, 0, subscribed_topic_names=self.topics, **self.kw)
        else:
            r = await hb(self.env, self.member_id, self.epoch, owned=dict(self.owned))
        if r.error in (E.unknown_member_id, E.fenced_member_epoch):
            self.epoch, self.owned, self.fenced = 0, {}, True
            return r
        assert r.error == E.none, r
        self.epoch = r.member_epoch
        if r.assignment is not None:
            self.owned = {t: frozenset(ps) for t, ps in r.assignment.items() if ps}
        return r

    async def leave(self):
        return await hb(self.env, self.member_id, -1)

    def flat(self) -> set:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def assert_disjoint(clients) -> None:
    seen: dict = {}
    for c in clients:
        for tp in c.flat():
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.member_id}"
            seen[tp] = c.member_id


async def converge(env, clients, rounds: int = 10) -> None:
    for _ in range(rounds):
        for c in clients:
            await c.beat()
            assert_disjoint(clients)
        if group(env).state_name == "Stable" and all(c.epoch == group(env).assignment_epoch for c in clients):
            return
    raise AssertionError(f"not stable after {rounds} rounds: {group(env)}")


# -- joining, assignment, reconciliation -----------------------------------------------------------


async def test_first_member_gets_everything_at_once_and_records_are_written():
    env = await cenv()
    r = await hb(env, "m1", 0)
    assert (r.error, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (E.none, "m1", 1, 5000)
    assert parts(r.assignment) == set(range(6))
    g = group(env)
    assert (g.state_name, g.group_epoch, g.assignment_epoch) == ("Stable", 1, 1)
    assert records(env) == [
        (cr.MEMBER_METADATA, "m1", False),
        (cr.PARTITION_METADATA, None, False),
        (cr.GROUP_METADATA, None, False),
        (cr.TARGET_ASSIGNMENT_MEMBER, "m1", False),
        (cr.TARGET_ASSIGNMENT_METADATA, None, False),
        (cr.CURRENT_MEMBER_ASSIGNMENT, "m1", False),
    ]
    # A steady heartbeat writes nothing and sends no assignment.
    n = len(env.log.all())
    r = await hb(env, "m1", 1)
    assert (r.error, r.member_epoch, r.assignment) == (E.none, 1, None)
    assert len(env.log.all()) == n


async def test_a_joining_member_waits_until_the_old_owner_revoked():
    env = await cenv()
    a, b = Client(env, "a"), Client(env, "b")
    await a.beat()
    assert len(a.flat()) == 6
    r = await b.beat()  # epoch 2: its target is three partitions a still owns
    g = group(env)
    assert (r.member_epoch, r.assignment, g.group_epoch) == (2, {}, 2)
    assert g.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    assert g.state_name == "Reconciling"
    r = await a.beat()  # a is told to give three up, and stays in epoch 1 until it has
    assert r.member_epoch == 1 and len(a.flat()) == 3
    assert g.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    revoked = set(range(6)) - parts(r.assignment)
    assert_disjoint([a, b])
    r = await b.beat()  # nothing released yet
    assert r.assignment is None and not b.flat()
    r = await a.beat()  # a reports the partitions gone: epoch 2
    assert r.member_epoch == 2 and g.members["a"].state is MemberState.STABLE
    r = await b.beat()
    assert parts(r.assignment) == revoked and g.state_name == "Stable"
    assert_disjoint([a, b])


async def test_three_members_six_partitions_two_each_then_leave_and_join():
    env = await cenv()
    clients = [Client(env, f"m{i}") for i in range(3)]
    await converge(env, clients)
    assert sorted(len(c.flat()) for c in clients) == [2, 2, 2]
    gone = clients.pop()
    kept = {c.member_id: c.flat() for c in clients}
    r = await gone.leave()
    assert (r.error, r.member_epoch) == (E.none, -1)
    assert group(env).state_name == "Assigning"
    await converge(env, clients)
    assert sorted(len(c.flat()) for c in clients) == [3, 3]
    for c in clients:
        assert kept[c.member_id] <= c.flat()  # uniform is sticky: nobody lost anything
    clients.append(Client(env, "m3"))
    await converge(env, clients)
    assert sorted(len(c.flat()) for c in clients) == [2, 2, 2]


async def test_previous_epoch_is_accepted_when_the_bump_was_lost():
    env = await cenv()
    await hb(env, "a", 0)
    await hb(env, "b", 0)
    r = await hb(env, "a", 1, owned={tid("t"): frozenset(range(6))})
    assert r.member_epoch == 1  # told to revoke
    r = await hb(env, "a", 1, owned={tid("t"): frozenset(parts(r.assignment))})
    assert r.member_epoch == 2
    # The response with epoch 2 was lost: a heartbeats with epoch 1 and a subset of its partitions.
    r = await hb(env, "a", 1, owned={tid("t"): frozenset(parts(r.assignment))})
    assert (r.error, r.member_epoch) == (E.none, 2)
    # ...but not with partitions it no longer has.
    r = await hb(env, "a", 1, owned={tid("t"): frozenset(range(6))})
    assert r.error == E.fenced_member_epoch


async def test_epoch_errors():
    env = await cenv()
    await hb(env, "a", 0)
    assert (await hb(env, "a", 7)).error == E.fenced_member_epoch
    assert (await hb(env, "nobody", 1)).error == E.unknown_member_id
    assert (await hb(env, "a", 1, group="nope")).error == E.group_id_not_found
    assert (await hb(env, "nobody", -1)).error == E.unknown_member_id


async def test_request_validation():
    env = await cenv(config=ConsumerGroupConfig(assignors=("uniform", "range"), max_size=2))
    bad = [
        dict(member_id="", epoch=0, version=1),  # v1: the client names itself
        dict(member_id="x", epoch=0, rebalance_timeout_ms=-1),
        dict(member_id="x", epoch=0, owned={tid("t"): frozenset({0})}),
        dict(member_id="x", epoch=0, owned=None),
        dict(member_id="x", epoch=0, subscribed_topic_names=None),
        dict(member_id="x", epoch=-3),
        dict(member_id="x", epoch=-2),  # a static leave needs an instance id
        dict(member_id="x", epoch=0, instance_id=" "),
        dict(member_id="x", epoch=0, rack_id=""),
        dict(member_id="x", epoch=0, group=""),
    ]
    for case in bad:
        mid, epoch = case.pop("member_id"), case.pop("epoch")
        r = await hb(env, mid, epoch, **case)
        assert r.error == E.invalid_request and r.message, (mid, epoch, case, r)
    r = await hb(env, "x", 0, server_assignor="sticky")
    assert r.error == E.unsupported_assignor and "uniform, range" in r.message
    # v0: the coordinator names a member that joins without an id.
    r = await hb(env, "", 0, version=0)
    assert r.error == E.none and r.member_id
    await hb(env, "y", 0)
    r = await hb(env, "z", 0)
    assert r.error == E.group_max_size_reached
    assert (await hb(env, "y", 0 + group(env).members["y"].member_epoch)).error == E.none  # members still heartbeat


async def test_invalid_regex_and_regex_subscription_follows_new_topics():
    env = await cenv(**{"orders-eu": 2, "orders-us": 2, "other": 2})
    r = await hb(env, "a", 0, subscribed_topic_regex="orders-(\\w+")
    assert r.error == E.invalid_regular_expression
    assert (await hb(env, "a", 0, subscribed_topic_regex="(a)\\1")).error == E.invalid_regular_expression
    r = await hb(env, "a", 0, subscribed_topic_regex="orders-.*")
    assert r.error == E.none
    assert parts(r.assignment, "orders-eu") == {0, 1} and parts(r.assignment, "orders-us") == {0, 1}
    assert not parts(r.assignment, "other")
    assert group(env).is_subscribed_to_topic("orders-us") and not group(env).is_subscribed_to_topic("other")
    epoch = r.member_epoch
    env.topics.set(**{"orders-eu": 2, "orders-us": 2, "other": 2, "orders-jp": 1, "__orders-internal": 1},
                   internal=("__orders-internal",))
    r = await hb(env, "a", epoch)
    assert r.member_epoch == epoch + 1 and parts(r.assignment, "orders-jp") == {0}
    assert not parts(r.assignment, "__orders-internal")


def test_regex_translation():
    """RE2's syntax, which is RE2/J's (Kafka's): what it refuses is a ValueError (the handlers'
    INVALID_REGULAR_EXPRESSION), and a backtracking pattern is answered in linear time."""
    assert compile_regex("a\\z").fullmatch("a")
    assert compile_regex("orders\\\\1").fullmatch("orders\\1")  # an escaped backslash, not a backreference
    assert compile_regex("\\pL+-[[:digit:]]").fullmatch("orders-1")
    for bad in ("(?=x)", "(?!x)", "(?<=x)y", "(a)\\1", "a*+", "(?>a)", "\\Z", "(", "a" * 1001):
        with pytest.raises(ValueError):
            compile_regex(bad)
    assert compile_regex("(a+)+b").fullmatch("a" * 100_000) is None


async def test_partitions_added_to_a_subscribed_topic_bump_the_epoch():
    env = await cenv(t=2)
    r = await hb(env, "a", 0)
    assert parts(r.assignment) == {0, 1}
    env.topics.set(t=4)
    r = await hb(env, "a", 1)
    assert (r.member_epoch, parts(r.assignment)) == (2, {0, 1, 2, 3})


async def test_server_assignor_selection_and_describe():
    env = await cenv(t=4)
    await hb(env, "b", 0, server_assignor="range")
    await hb(env, "a", 0, server_assignor="range")
    [d] = env.coord.consumer.describe(["g"])
    assert (d.error, d.assignor, d.state, d.group_epoch) == (E.none, "range", "Reconciling", 2)
    c = [Client(env, "a"), Client(env, "b")]
    c[0].epoch = c[1].epoch = group(env).members["a"].member_epoch
    c[0].owned = dict(group(env).members["a"].assigned)
    c[1].owned = dict(group(env).members["b"].assigned)
    await converge(env, c)
    # range: sorted member ids get contiguous ranges.
    assert (c[0].flat(), c[1].flat()) == ({(tid("t"), 0), (tid("t"), 1)}, {(tid("t"), 2), (tid("t"), 3)})
    [d] = env.coord.consumer.describe(["g"])
    assert {m.member.member_id: parts(m.target) for m in d.members} == {"a": {0, 1}, "b": {2, 3}}
    [missing] = env.coord.consumer.describe(["nope"])
    assert missing.error == E.group_id_not_found


# -- timeouts -------------------------------------------------------------------------------------


async def test_session_timeout_fences_a_member_and_the_rest_take_over():
    env = await cenv()
    a, b = Client(env, "a"), Client(env, "b")
    await converge(env, [a, b])
    env.advance(SESSION_MS - 1000)
    await a.beat()  # a keeps its session; b stays silent
    env.advance(1000)
    await settle()
    g = group(env)
    assert list(g.members) == ["a"] and g.group_epoch == 3
    await converge(env, [a])
    assert len(a.flat()) == 6
    assert (await b.beat()).error == E.unknown_member_id


async def test_rebalance_timeout_fences_a_member_that_does_not_revoke():
    env = await cenv()
    await hb(env, "a", 0)
    await hb(env, "b", 0)
    r = await hb(env, "a", 1, owned={tid("t"): frozenset(range(6))})
    assert group(env).members["a"].state is MemberState.UNREVOKED_PARTITIONS
    for _ in range(5):  # keeps heartbeating, but keeps all six
        env.advance(REBALANCE_MS / 6)
        await hb(env, "a", 1, owned={tid("t"): frozenset(range(6))})
        await hb(env, "b", 2, owned={})
    env.advance(REBALANCE_MS / 6)
    await settle()
    assert "a" not in group(env).members
    r = await hb(env, "b", 2, owned={})
    assert r.member_epoch == 3 and parts(r.assignment) == set(range(6))  # joins: 1, 2; fencing: 3


# -- static membership ----------------------------------------------------------------------------


async def test_static_member_restart_keeps_its_partitions_without_a_rebalance():
    env = await cenv()
    a = Client(env, "a1", instance_id="ia")
    b = Client(env, "b", instance_id="ib")
    await converge(env, [a, b])
    epoch, a_parts = group(env).group_epoch, a.flat()
    r = await hb(env, "a1", -2, instance_id="ia")
    assert (r.error, r.member_epoch) == (E.none, -2)
    assert group(env).members["a1"].member_epoch == -2 and group(env).group_epoch == epoch
    # Another process with the same instance id, while a1 is gone: takes over at once.
    a2 = Client(env, "a2", instance_id="ia")
    r = await a2.beat()
    assert (r.error, a2.flat()) == (E.none, a_parts)
    assert group(env).group_epoch == epoch and "a1" not in group(env).members
    # The old incarnation is fenced; a third one cannot take an instance id in use.
    assert (await hb(env, "a1", 2, instance_id="ia")).error == E.fenced_instance_id
    assert (await hb(env, "a3", 0, instance_id="ia")).error == E.unreleased_instance_id
    assert (await hb(env, "x", 1, instance_id="nope")).error == E.unknown_member_id
    await converge(env, [a2, b])
    assert group(env).group_epoch == epoch


async def test_static_member_that_never_comes_back_expires():
    env = await cenv()
    a, b = Client(env, "a", instance_id="ia"), Client(env, "b")
    await converge(env, [a, b])
    await hb(env, "a", -2, instance_id="ia")
    for _ in range(10):
        env.advance(SESSION_MS / 9)
        await b.beat()
    assert list(group(env).members) == ["b"]
    assert len(b.flat()) == 6


async def test_static_member_leaving_for_good():
    env = await cenv()
    await hb(env, "a", 0, instance_id="ia")
    r = await hb(env, "a", -1, instance_id="ia")
    assert (r.error, r.member_epoch) == (E.none, -1)
    assert group(env).state_name == "Empty"


# -- other protocol, offsets, deletion ------------------------------------------------------------


async def test_classic_group_with_members_is_not_found_and_empty_classic_group_upgrades():
    env = await cenv()
    fut = env.join("g", "")  # MEMBER_ID_REQUIRED: a pending classic member
    r = await fut
    fut = env.join("g", r.member_id)
    await env.initial_rebalance(fut)
    r = await hb(env, "a", 0)
    assert r.error == E.group_id_not_found and "online upgrade" in r.message
    assert (await hb(env, "a", 3)).error == E.group_id_not_found
    # A simple group (offsets only) converts, keeping its offsets.
    codes = await env.coord.commit_offsets("simple", "", None, -1, [CommitRequest("t", 0, 42)])
    assert codes == [E.none]
    r = await hb(env, "a", 0, group="simple")
    assert r.error == E.none and isinstance(env.coord.groups["simple"], ConsumerGroup)
    code, fetched = await env.coord.fetch_offsets("simple", [("t", [0])])
    assert fetched[0][1][0].offset == 42


async def test_classic_join_converts_an_empty_consumer_group_but_not_a_live_one():
    env = await cenv()
    await hb(env, "a", 0)
    r = await env.join("g", "")
    assert r.error == E.inconsistent_group_protocol
    await hb(env, "a", -1)
    r = await env.join("g", "")
    assert r.error == E.member_id_required
    assert env.coord.groups["g"].group_type == "classic"
    assert records(env)[-8:] == [
        (cr.CURRENT_MEMBER_ASSIGNMENT, "a", True),  # the leave: the member's records go,
        (cr.TARGET_ASSIGNMENT_MEMBER, "a", True),
        (cr.MEMBER_METADATA, "a", True),
        (cr.PARTITION_METADATA, None, False),  # nobody subscribes to anything,
        (cr.GROUP_METADATA, None, False),  # the epoch bumps
        (cr.TARGET_ASSIGNMENT_METADATA, None, True),  # the conversion: the group's records go
        (cr.PARTITION_METADATA, None, True),
        (cr.GROUP_METADATA, None, True),
    ]


async def test_offset_commit_and_fetch_check_member_epochs():
    env = await cenv()
    await hb(env, "a", 0)

    async def commit(member, epoch, version=9):
        return (await env.coord.commit_offsets("g", member, None, epoch, [CommitRequest("t", 0, 5)], api_version=version))[0]

    assert await commit("a", 1) == E.none
    assert await commit("a", 0) == E.stale_member_epoch
    assert await commit("zz", 1) == E.unknown_member_id
    assert await commit("a", 1, version=8) == E.unsupported_version
    assert await commit("", -1) == E.unknown_member_id  # a simple commit to a group with members
    code, _ = await env.coord.fetch_offsets("g", [("t", [0])], member_id="a", member_epoch=0)
    assert code == E.stale_member_epoch
    code, _ = await env.coord.fetch_offsets("g", [("t", [0])], member_id="zz", member_epoch=1)
    assert code == E.unknown_member_id
    code, rows = await env.coord.fetch_offsets("g", [("t", [0])], member_id="a", member_epoch=1)
    assert code == E.none and rows[0][1][0].offset == 5
    code, rows = await env.coord.fetch_offsets("g", [("t", [0])])  # admin: no member
    assert code == E.none and rows[0][1][0].offset == 5
    await hb(env, "a", -1)
    assert await commit("", -1) == E.none  # empty group: simple commits are fine


async def test_list_describe_and_delete():
    env = await cenv()
    await hb(env, "a", 0)
    code, groups = env.coord.list_groups(types=["consumer"])
    assert code == E.none and [(g.group_id, g.state_name, g.protocol_type) for g in groups] == [("g", "Stable", "consumer")]
    assert env.coord.list_groups(types=["classic"])[1] == []
    assert env.coord.describe_group("g")[0] == E.group_id_not_found  # DescribeGroups: classic only
    assert (await env.coord.delete_groups(["g"]))["g"] == E.non_empty_group
    await hb(env, "a", -1)
    await env.coord.commit_offsets("g", "", None, -1, [CommitRequest("t", 1, 7)])
    assert (await env.coord.delete_groups(["g"]))["g"] == E.none
    assert "g" not in env.coord.groups
    # After a restart nothing of it comes back.
    env2 = await started_env(log=env.log)
    assert "g" not in env2.coord.groups and not env2.coord.offsets.has_offsets("g")


async def test_empty_consumer_group_without_offsets_expires():
    env = await cenv()
    await hb(env, "a", 0)
    await hb(env, "a", -1)
    env.coord.cleanup_expired_offsets()
    await settle()
    assert "g" not in env.coord.groups
    env2 = await started_env(log=env.log)
    assert "g" not in env2.coord.groups


# -- persistence ------------------------------------------------------------------------------


async def test_group_survives_a_coordinator_restart_and_members_carry_on():
    env = await cenv(t=6, u=3)
    clients = [Client(env, "a", topics=("t", "u")), Client(env, "b", topics=("t",), instance_id="ib")]
    await converge(env, clients)
    await env.coord.commit_offsets("g", "a", None, clients[0].epoch, [CommitRequest("t", 0, 11)])
    before = group(env)
    snapshot = (before.group_epoch, before.assignment_epoch, dict(before.members), dict(before.target),
                dict(before.subscription_metadata), dict(before.partition_epochs), dict(before.static_members))

    env2 = await started_env(log=env.log, clock=env.clock)
    env2.coord.consumer.image_source = lambda: env.topics.image
    env2.coord.consumer.config = env.coord.consumer.config
    g = group(env2)
    assert (g.group_epoch, g.assignment_epoch, g.members, g.target, g.subscription_metadata, g.partition_epochs,
            g.static_members) == snapshot
    assert g.state_name == "Stable"
    for c in clients:
        c.env = env2
    n = len(env.log.all())
    for c in clients:
        r = await c.beat()
        assert r.error == E.none and r.member_epoch == snapshot[0]
    assert len(env.log.all()) == n  # no rebalance, nothing written
    code, rows = await env2.coord.fetch_offsets("g", [("t", [0])], member_id="a", member_epoch=clients[0].epoch)
    assert code == E.none and rows[0][1][0].offset == 11
    # Sessions were restarted at load: a member that does not come back expires.
    for _ in range(10):
        env2.advance(SESSION_MS / 9)
        await clients[0].beat()
    assert list(group(env2).members) == ["a"]


async def test_mid_reconciliation_state_survives_a_restart():
    env = await cenv()
    a, b = Client(env, "a"), Client(env, "b")
    await a.beat()
    await b.beat()
    await a.beat()  # a is now revoking
    env2 = await started_env(log=env.log, clock=env.clock)
    env2.coord.consumer.image_source = lambda: env.topics.image
    a.env = b.env = env2
    assert group(env2).members["a"].state is MemberState.UNREVOKED_PARTITIONS
    await converge(env2, [a, b])
    assert sorted(len(c.flat()) for c in (a, b)) == [3, 3]


def test_record_bytes_round_trip():
    t1, t2 = tid("t1"), tid("t2")
    values = [
        (cr.GROUP_METADATA, cr.GroupMetadataValue(7)),
        (cr.PARTITION_METADATA, cr.PartitionMetadataValue((cr.TopicMetadata(t1, "t1", 3), cr.TopicMetadata(t2, "t2", 1)))),
        (cr.MEMBER_METADATA, cr.MemberMetadataValue("i", None, "cid", "/1.2.3.4", ("a", "b"), "x.*", 3000, "range")),
        (cr.MEMBER_METADATA, cr.MemberMetadataValue(None, "r", "", "", (), None, -1, None)),
        (cr.TARGET_ASSIGNMENT_METADATA, cr.TargetAssignmentMetadataValue(7)),
        (cr.TARGET_ASSIGNMENT_MEMBER, cr.TargetAssignmentMemberValue({t1: frozenset({0, 2})})),
        (cr.CURRENT_MEMBER_ASSIGNMENT, cr.CurrentMemberAssignmentValue(7, 6, 1, {t1: frozenset({0})}, {t2: frozenset({0})})),
    ]
    for version, v in values:
        assert cr.decode_value(version, cr.encode_value(v)) == v
    k = cr.ConsumerKey(cr.CURRENT_MEMBER_ASSIGNMENT, "g", "m")
    assert cr.decode_key(cr.encode_key(k)) == k
    # Exact bytes as Kafka writes them: int16 version, int16-length strings.
    assert cr.encode_key(k) == b"\x00\x08\x00\x01g\x00\x01m"
    assert cr.encode_key(cr.ConsumerKey(cr.GROUP_METADATA, "g")) == b"\x00\x03\x00\x01g"
    assert cr.encode_value(cr.GroupMetadataValue(7)) == b"\x00\x00\x00\x00\x00\x07\x00"


async def test_a_failed_append_changes_nothing():
    env = await cenv()
    env.log.fail_with = E.not_leader_or_follower
    r = await hb(env, "a", 0)
    assert r.error == E.not_coordinator and "g" not in env.coord.groups
    env.log.fail_with = None
    assert (await hb(env, "a", 0)).error == E.none


# -- the invariant under arbitrary interleavings ----------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["beat", "beat", "beat", "join", "leave"]), st.integers(0, 4)), max_size=60),
       st.sampled_from(["uniform", "range"]))
def test_no_partition_is_ever_owned_twice_and_the_group_converges(ops, assignor):
    import asyncio

    async def run() -> None:
        env = await cenv(t=7, u=3)
        clients = {i: Client(env, f"m{i}", topics=("t", "u") if i % 2 else ("t",), server_assignor=assignor) for i in range(5)}
        live: set[int] = set()
        for op, i in ops:
            c = clients[i]
            if op == "join" and i not in live:
                c.epoch, c.owned = 0, {}
                await c.beat()
                live.add(i)
            elif op == "leave" and i in live:
                await c.leave()
                c.epoch, c.owned = 0, {}
                live.discard(i)
            elif op == "beat" and i in live:
                await c.beat()
            assert_disjoint([clients[j] for j in live])
        if live:
            await converge(env, [clients[j] for j in sorted(live)], rounds=12)
            owned = set().union(*(clients[j].flat() for j in live))
            assert owned == {(tid("t"), p) for p in range(7)} | {(tid("u"), p) for p in range(3)} if any(j % 2 for j in live) \
                else owned == {(tid("t"), p) for p in range(7)}

    asyncio.get_event_loop_policy().new_event_loop().run_until_complete(run())


def test_config_from_broker_config():
    from shoal.config import BrokerConfig

    cfg = BrokerConfig.load(None, {
        "group.consumer.session.timeout.ms": "6000", "group.consumer.heartbeat.interval.ms": "250",
        "group.consumer.assignors": "range,uniform", "group.consumer.max.size": "3",
        "group.coordinator.rebalance.protocols": "classic",
    })
    c = ConsumerGroupConfig.from_broker_config(cfg)
    assert c == ConsumerGroupConfig(6000, 250, ("range", "uniform"), 3, False)
    assert c.default_assignor == "range"


async def test_disabled_protocol_answers_unsupported_version():
    env = await cenv(config=ConsumerGroupConfig(enabled=False))
    assert (await hb(env, "a", 0)).error == E.unsupported_version


def test_coordinator_without_partitions_is_not_available():
    import asyncio

    env = make_env()
    assert isinstance(env.coord, GroupCoordinator)

    async def run():
        return await hb(env, "a", 0)

    r = asyncio.new_event_loop().run_until_complete(run())
    assert r.error in (E.coordinator_load_in_progress, E.not_coordinator, E.coordinator_not_available)


# -- the handlers, through the codec both ways ------------------------------------------------------

CGH, CGD, LIST, DESCRIBE, COMMIT, FETCH = 68, 69, 16, 15, 8, 9


@pytest.fixture
async def broker(tmp_path):
    from shoal.broker import Broker
    from shoal.config import BrokerConfig

    cfg = BrokerConfig.load(None, {
        "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path), "offsets.topic.num.partitions": "3",
        "group.consumer.heartbeat.interval.ms": "1000",
    })
    b = Broker(cfg)
    await b.start()
    b.topic = await b.metadata.create_topic("t", [(1,), (1,), (1,)], {})
    yield b
    await b.stop()


async def call(broker, api_key: int, version: int, /, **values):
    from shoal.client import build_entity
    from shoal.handlers.context import RequestContext
    from shoal.protocol.codec import decode_request, decode_response, encode_request, encode_response, request_type

    req = build_entity(request_type(api_key, version), values)
    frame = encode_request(api_key, version, 7, "handler-test", req)
    header, decoded = decode_request(api_key, version, memoryview(frame)[4:])
    spec = broker.registry.lookup(api_key)
    assert spec is not None and spec.min_version <= version <= spec.max_version
    ctx = RequestContext(services=broker.services, header=header, client_address="127.0.0.1:5555")
    resp = await spec.handler(ctx, decoded)
    _, back = decode_response(api_key, version, memoryview(encode_response(7, api_key, version, resp))[4:])
    return back


def join_values(member_id: str, group_id: str = "hg", **kw):
    values = dict(group_id=group_id, member_id=member_id, member_epoch=0, instance_id=None, rack_id=None,
                  rebalance_timeout=30000, subscribed_topic_names=["t"], server_assignor=None, topic_partitions=[])
    values.update(kw)
    return values


@pytest.mark.parametrize("version", [0, 1])
async def test_heartbeat_and_describe_on_the_wire(broker, version):
    gid = f"hg{version}"
    member = "" if version == 0 else "member-1"
    r = await call(broker, CGH, version, **join_values(member, gid))
    assert r.error_code == E.none and r.member_epoch == 1 and r.member_id
    assert r.heartbeat_interval.total_seconds() == 1.0
    assert [(tp.topic_id, sorted(tp.partitions)) for tp in r.assignment.topic_partitions] == [(broker.topic.topic_id, [0, 1, 2])]
    member = r.member_id
    r = await call(broker, CGH, version, **join_values(member, gid, member_epoch=1, rebalance_timeout=-1,
                                                       subscribed_topic_names=None, topic_partitions=None))
    assert (r.error_code, r.member_epoch, r.assignment) == (E.none, 1, None)
    r = await call(broker, CGH, version, **join_values("", gid, member_epoch=0, rebalance_timeout=-1))
    assert r.error_code == E.invalid_request and r.error_message

    d = await call(broker, CGD, version, group_ids=[gid, "nope"], include_authorized_operations=True)
    g, missing = d.groups
    assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == (E.none, "Stable", 1, 1, "uniform")
    [m] = g.members
    assert (m.member_id, m.member_epoch, m.client_id, m.client_host, m.subscribed_topic_names) == (member, 1, "handler-test", "/127.0.0.1", ("t",))
    assert [(tp.topic_name, sorted(tp.partitions)) for tp in m.assignment.topic_partitions] == [("t", [0, 1, 2])]
    assert [(tp.topic_name, sorted(tp.partitions)) for tp in m.target_assignment.topic_partitions] == [("t", [0, 1, 2])]
    assert g.authorized_operations != -2147483648
    assert missing.error_code == E.group_id_not_found
    if version >= 1:
        assert m.member_type == 1

    r = await call(broker, CGH, version, **join_values(member, gid, member_epoch=-1))
    assert (r.error_code, r.member_epoch) == (E.none, -1)


async def test_list_describe_groups_and_offsets_for_a_consumer_group(broker):
    r = await call(broker, CGH, 1, **join_values("m", "og"))
    epoch = r.member_epoch
    listed = await call(broker, LIST, 5, states_filter=[], types_filter=["consumer"])
    assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed.groups] == [("og", "consumer", "consumer", "Stable")]
    d = await call(broker, DESCRIBE, 5, groups=["og"], include_authorized_operations=False)
    assert (d.groups[0].error_code, d.groups[0].group_state) == (E.none, "Dead")
    d = await call(broker, DESCRIBE, 6, groups=["og"], include_authorized_operations=False)
    assert (d.groups[0].error_code, d.groups[0].group_state) == (E.group_id_not_found, "Dead")

    def commit(member_epoch):
        return call(broker, COMMIT, 9, group_id="og", generation_id_or_member_epoch=member_epoch, member_id="m",
                    group_instance_id=None, topics=[{"name": "t", "partitions": [
                        {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1, "committed_metadata": ""}]}])

    assert (await commit(epoch)).topics[0].partitions[0].error_code == E.none
    assert (await commit(epoch + 5)).topics[0].partitions[0].error_code == E.stale_member_epoch
    f = await call(broker, FETCH, 9, groups=[{"group_id": "og", "member_id": "m", "member_epoch": epoch,
                                              "topics": [{"name": "t", "partition_indexes": [0]}]}], require_stable=True)
    assert f.groups[0].error_code == E.none and f.groups[0].topics[0].partitions[0].committed_offset == 3
    f = await call(broker, FETCH, 9, groups=[{"group_id": "og", "member_id": "m", "member_epoch": epoch + 1,
                                              "topics": [{"name": "t", "partition_indexes": [0]}]}], require_stable=True)
    assert f.groups[0].error_code == E.stale_member_epoch
