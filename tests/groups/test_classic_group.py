"""The classic group state machine on a manual clock: exact generations, leaders, errors and times."""

from __future__ import annotations

import asyncio

import pytest

from group_helpers import REBALANCE_MS, SESSION_MS, range_protocols, settle, stable_group, started_env, subscription
from shoal.groups.classic import ClassicGroupState as S
from shoal.groups.records import decode_group_metadata_value, decode_key, GroupMetadataKey
from shoal.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.timeout(10)


def group_records(env, group_id="g"):
    out = []
    for k, v in env.log.all():
        key = decode_key(k)
        if isinstance(key, GroupMetadataKey) and key.group == group_id:
            out.append(None if v is None else decode_group_metadata_value(v))
    return out


async def test_first_join_requires_member_id_then_waits_the_initial_delay():
    env = await started_env()
    r = await env.join(client_id="app")
    assert (r.error, r.member_id) == (E.member_id_required, "app-u0")
    fut = env.join(member_id="app-u0")
    await settle()
    assert env.group("g").state is S.PREPARING_REBALANCE
    env.advance(2999)
    await settle()
    assert not fut.done()
    env.advance(1)
    r = await fut
    assert r.error == E.none
    assert (r.generation_id, r.leader, r.member_id, r.protocol_type, r.protocol_name) == (1, "app-u0", "app-u0", "consumer", "range")
    assert [m.member_id for m in r.members] == ["app-u0"]
    assert env.group("g").state is S.COMPLETING_REBALANCE


async def test_join_without_member_id_before_v4_is_admitted_at_once():
    env = await started_env()
    fut = env.join(client_id="old", version=3)
    await settle()
    assert not fut.done()
    env.advance(3000)
    r = await fut
    assert (r.error, r.member_id, r.generation_id) == (E.none, "old-u0", 1)


async def test_initial_delay_extends_while_members_arrive():
    env = await started_env()
    a = (await env.join(client_id="a")).member_id
    b = (await env.join(client_id="b")).member_id
    fa = env.join(member_id=a)
    env.advance(2000)
    fb = env.join(member_id=b)  # arrives during the first delay
    env.advance(1000)  # t=3000: a new member came, so wait another 3000 (remaining 27000)
    await settle()
    assert not fa.done() and not fb.done()
    env.advance(2999)
    await settle()
    assert not fa.done()
    env.advance(1)  # t=6000: nobody new: complete
    ra, rb = await fa, await fb
    assert ra.generation_id == rb.generation_id == 1
    assert ra.leader == a and len(ra.members) == 2 and rb.members == ()


async def test_initial_delay_is_bounded_by_the_rebalance_timeout():
    env = await started_env()
    ids = [(await env.join(client_id=f"c{i}", rebalance_ms=5000)).member_id for i in range(4)]
    futs = [env.join(member_id=ids[0], rebalance_ms=5000)]
    for i in range(1, 4):
        env.advance(1500)  # a new member every 1.5 s, forever extending... up to 5 s
        futs.append(env.join(member_id=ids[i], rebalance_ms=5000))
    # t=4500: first timer (3000) saw a new member -> next at 3000+min(3000, 2000)=5000
    env.advance(500)
    results = [await f for f in futs]
    assert {r.generation_id for r in results} == {1}


async def test_leader_gets_metadata_and_sync_distributes_assignments():
    env = await started_env()
    a = (await env.join(client_id="a")).member_id
    b = (await env.join(client_id="b")).member_id
    ra, rb = await env.initial_rebalance(
        env.join(member_id=a, protocols=range_protocols("t1")), env.join(member_id=b, protocols=range_protocols("t2"))
    )
    assert {m.member_id: m.metadata for m in ra.members} == {a: subscription("t1"), b: subscription("t2")}
    sb = env.sync("g", 1, b)
    await settle()
    assert not sb.done()  # the follower waits for the leader
    sa = env.sync("g", 1, a, {a: b"A", b: b"B", "stranger": b"X"})
    assert (await sa).assignment == b"A"
    r = await sb
    assert (r.error, r.assignment, r.protocol_type, r.protocol_name) == (E.none, b"B", "consumer", "range")
    assert env.group("g").state is S.STABLE
    [value] = group_records(env)
    assert (value.generation, value.protocol, value.leader) == (1, "range", a)
    assert {m.member_id: (m.subscription, m.assignment) for m in value.members} == {
        a: (subscription("t1"), b"A"),
        b: (subscription("t2"), b"B"),
    }


async def test_sync_is_answered_only_after_the_record_is_committed():
    env = await started_env()
    [a] = await stable_group(env, "g0")
    env.log.hold()
    b = (await env.join("g0", client_id="b")).member_id
    fb, fa = env.join("g0", b), env.join("g0", a)
    ra, rb = await fa, await fb
    assert ra.generation_id == rb.generation_id == 2
    sa = env.sync("g0", ra.generation_id, a, {a: b"1", b: b"2"})
    await settle()
    assert not sa.done() and env.group("g0").state is S.COMPLETING_REBALANCE
    env.log.release()
    assert (await sa).assignment == b"1"
    assert env.group("g0").state is S.STABLE


@pytest.mark.parametrize(
    "protocols, expected",
    [
        ([[("roundrobin", b""), ("range", b"")], [("range", b""), ("roundrobin", b"")], [("range", b"")]], "range"),
        ([[("roundrobin", b""), ("range", b"")], [("roundrobin", b""), ("range", b"")], [("range", b""), ("roundrobin", b"")]], "roundrobin"),
        ([[("cooperative-sticky", b""), ("range", b"")], [("cooperative-sticky", b""), ("range", b"")]], "cooperative-sticky"),
    ],
)
async def test_protocol_selection_by_votes_among_common_protocols(protocols, expected):
    env = await started_env()
    ids = [(await env.join(client_id=f"c{i}", protocols=tuple(p))).member_id for i, p in enumerate(protocols)]
    results = await env.initial_rebalance(*(env.join(member_id=m, protocols=tuple(p)) for m, p in zip(ids, protocols)))
    assert {r.protocol_name for r in results} == {expected}


async def test_inconsistent_protocols_are_refused():
    env = await started_env()
    await stable_group(env)
    r = await env.join(protocol_type="connect")
    assert (r.error, r.member_id) == (E.inconsistent_group_protocol, "")
    r = await env.join(protocols=(("roundrobin", b""),))
    assert r.error == E.inconsistent_group_protocol
    r = await env.join("other", protocols=())
    assert r.error == E.inconsistent_group_protocol
    assert "other" not in env.coord.groups  # nothing is left behind
    r = await env.join("other2", protocol_type="")
    assert r.error == E.inconsistent_group_protocol


async def test_session_timeout_bounds_and_group_id():
    env = await started_env()
    assert (await env.join(session_ms=5999)).error == E.invalid_session_timeout
    assert (await env.join(session_ms=1_800_001)).error == E.invalid_session_timeout
    assert (await env.join("")).error == E.invalid_group_id
    assert (await env.join(member_id="nobody")).error == E.unknown_member_id


async def test_heartbeat_errors_and_rebalance_notice():
    env = await started_env()
    a, b = await stable_group(env, n=2)
    g = env.group("g")
    assert env.coord.heartbeat("g", a, None, 1) == E.none
    assert env.coord.heartbeat("g", a, None, 0) == E.illegal_generation
    assert env.coord.heartbeat("g", "ghost", None, 1) == E.unknown_member_id
    assert env.coord.heartbeat("nope", a, None, 1) == E.unknown_member_id
    assert env.coord.heartbeat("", a, None, 1) == E.invalid_group_id
    c = (await env.join(client_id="c")).member_id
    fc = env.join(member_id=c)
    await settle()
    assert g.state is S.PREPARING_REBALANCE
    assert env.coord.heartbeat("g", a, None, 1) == E.rebalance_in_progress
    # the old members rejoin; the join completes as soon as every member is in
    fa, fb = env.join(member_id=a), env.join(member_id=b)
    rs = [await f for f in (fa, fb, fc)]
    assert {r.generation_id for r in rs} == {2}
    assert env.coord.heartbeat("g", a, None, 2) == E.none  # heartbeats are fine in CompletingRebalance


async def test_session_timeout_removes_a_silent_member_and_rebalances():
    env = await started_env()
    a, b = await stable_group(env, n=2)
    g = env.group("g")
    env.advance(SESSION_MS // 2)
    assert env.coord.heartbeat("g", a, None, 1) == E.none
    env.advance(SESSION_MS // 2 - 1)
    assert b in g.members
    env.advance(1)
    # b never heartbeated: it was removed at SESSION_MS
    assert b not in g.members
    assert g.state is S.PREPARING_REBALANCE
    assert env.coord.heartbeat("g", a, None, 1) == E.rebalance_in_progress
    r = await env.join(member_id=a)  # the only member left: completes at once
    assert (r.generation_id, r.leader, [m.member_id for m in r.members]) == (2, a, [a])


async def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    env = await started_env()
    a, b = await stable_group(env, n=2)
    fa = env.join(member_id=a)  # the leader rejoins: rebalance
    await settle()
    for _ in range(REBALANCE_MS // 5000 - 1):
        env.advance(5000)
        assert env.coord.heartbeat("g", b, None, 1) == E.rebalance_in_progress  # b stays alive...
    env.advance(4999)
    await settle()
    assert not fa.done()  # ...but does not rejoin
    env.advance(1)
    r = await fa
    assert (r.generation_id, [m.member_id for m in r.members]) == (2, [a])
    assert b not in env.group("g").members
    assert env.coord.heartbeat("g", b, None, 1) == E.unknown_member_id


async def test_members_that_do_not_sync_are_removed_after_the_rebalance_timeout():
    env = await started_env()
    a = (await env.join(client_id="a")).member_id
    b = (await env.join(client_id="b")).member_id
    await env.initial_rebalance(env.join(member_id=a), env.join(member_id=b))
    await env.sync("g", 1, a, {a: b"x", b: b"y"})
    for _ in range(REBALANCE_MS // 5000):
        env.advance(5000)
        env.coord.heartbeat("g", a, None, 1)
        env.coord.heartbeat("g", b, None, 1)  # b heartbeats but never sends SyncGroup
    g = env.group("g")
    assert b not in g.members and g.state is S.PREPARING_REBALANCE
    r = await env.join(member_id=a)
    assert r.generation_id == 2


async def test_leave_group_batch_and_last_member_leaving_empties_the_group():
    env = await started_env()
    a, b = await stable_group(env, n=2)
    top, codes = env.coord.leave_group("g", [(b, None), ("ghost", None), ("", "no-such-instance")])
    assert (top, codes) == (E.none, [E.none, E.unknown_member_id, E.unknown_member_id])
    g = env.group("g")
    assert g.state is S.PREPARING_REBALANCE
    top, codes = env.coord.leave_group("g", [(a, None)])
    assert codes == [E.none]
    assert g.state is S.EMPTY and g.generation_id == 2 and not g.members
    await settle()
    assert group_records(env)[-1].members == () and group_records(env)[-1].generation == 2
    assert env.coord.leave_group("missing", [("x", None)]) == (E.none, [E.unknown_member_id])


async def test_sync_errors():
    env = await started_env()
    a, b = await stable_group(env, n=2)
    assert (await env.sync("g", 0, a)).error == E.illegal_generation
    assert (await env.sync("g", 1, "ghost")).error == E.unknown_member_id
    assert (await env.sync("nope", 1, a)).error == E.unknown_member_id
    assert (await env.sync("g", 1, a, protocol_type="connect")).error == E.inconsistent_group_protocol
    assert (await env.sync("g", 1, a, protocol_name="roundrobin")).error == E.inconsistent_group_protocol
    r = await env.sync("g", 1, b, protocol_type="consumer", protocol_name="range")
    assert (r.error, r.assignment) == (E.none, b.encode())  # Stable: the current assignment again
    env.join(member_id=a)
    await settle()
    assert (await env.sync("g", 1, b)).error == E.rebalance_in_progress


async def test_rejoin_while_completing_rebalance_with_same_metadata_gets_the_same_generation():
    env = await started_env()
    a = (await env.join(client_id="a")).member_id
    fa = env.join(member_id=a)
    env.advance(3000)
    first = await fa
    again = await env.join(member_id=a)
    assert again == first


async def test_follower_rejoining_stable_with_same_metadata_does_not_rebalance():
    env = await started_env()
    a, b = await stable_group(env, n=2)
    r = await env.join(member_id=b)
    assert (r.error, r.generation_id, r.leader, r.members) == (E.none, 1, a, ())
    assert env.group("g").state is S.STABLE


async def test_cooperative_second_rebalance_when_metadata_changes():
    """A cooperative member rejoins with new owned partitions (its metadata changed) while Stable."""
    env = await started_env()
    coop = lambda owned: (("cooperative-sticky", subscription("t", user_data=owned)),)  # noqa: E731
    a = (await env.join(client_id="a", protocols=coop(b""))).member_id
    fa = env.join(member_id=a, protocols=coop(b""))
    env.advance(3000)
    await fa
    await env.sync("g", 1, a, {a: b"all"})
    b = (await env.join(client_id="b", protocols=coop(b""))).member_id
    fb = env.join(member_id=b, protocols=coop(b""))
    await settle()
    assert env.coord.heartbeat("g", a, None, 1) == E.rebalance_in_progress
    ra = await env.join(member_id=a, protocols=coop(b"all"))
    rb = await fb
    assert ra.generation_id == rb.generation_id == 2
    await asyncio.gather(env.sync("g", 2, a, {a: b"half", b: b""}), env.sync("g", 2, b))
    # a revoked half and rejoins at once with its new ownership: generation 3, b gets its share
    fa = env.join(member_id=a, protocols=coop(b"half"))
    await settle()
    fb = env.join(member_id=b, protocols=coop(b""))
    ra, rb = await fa, await fb
    assert ra.generation_id == rb.generation_id == 3
    sa, sb = env.sync("g", 3, a, {a: b"half", b: b"other"}), env.sync("g", 3, b)
    assert ((await sa).assignment, (await sb).assignment) == (b"half", b"other")


async def test_max_group_size():
    env = await started_env(max_size=2)
    await stable_group(env, n=2)
    r = await env.join(client_id="third")
    assert (r.error, r.member_id) == (E.group_max_size_reached, "")
    assert len(env.group("g").members) == 2


async def test_pending_member_expires_after_its_session_timeout():
    env = await started_env()
    a = (await env.join(client_id="a")).member_id
    assert a in env.group("g").pending_join
    env.advance(SESSION_MS)
    assert "g" not in env.coord.groups  # never joined, nothing stored: forgotten


async def test_disconnected_join_is_harmless():
    env = await started_env()
    a, b = await stable_group(env, n=2)
    fa = env.join(member_id=a)
    fa.cancel()  # the client's connection went away while parked
    rb = await env.join(member_id=b)
    assert rb.generation_id == 2  # a still counts as joined, as in Kafka
    env.advance(REBALANCE_MS)  # a never syncs: removed, another rebalance
    assert a not in env.group("g").members


async def test_static_member_restart_without_rebalance():
    env = await started_env()
    ra, rb = await env.initial_rebalance(env.join(client_id="a", instance_id="ia"), env.join(client_id="b", instance_id="ib"))
    a, b = ra.member_id, rb.member_id
    assert (a, b) == ("ia-u0", "ib-u1")  # static members get their id at once (no MEMBER_ID_REQUIRED)
    await asyncio.gather(env.sync("g", 1, a, {a: b"A", b: b"B"}, instance_id="ia"), env.sync("g", 1, b, instance_id="ib"))
    # b restarts: same instance id, no member id, same protocols
    r = await env.join(client_id="b", instance_id="ib")
    b2 = r.member_id
    assert (r.error, r.generation_id, r.leader, r.skip_assignment, r.members) == (E.none, 1, a, False, ())
    g = env.group("g")
    assert g.state is S.STABLE and g.generation_id == 1
    assert env.coord.heartbeat("g", b, "ib", 1) == E.fenced_instance_id
    assert env.coord.heartbeat("g", b2, "ib", 1) == E.none
    s = await env.sync("g", 1, b2, instance_id="ib")
    assert s.assignment == b"B"
    assert env.coord.heartbeat("g", a, "ia", 1) == E.none  # a never noticed
    # the leader restarts too: v9 clients get the members and skip_assignment
    r = await env.join(client_id="a", instance_id="ia")
    assert (r.leader, r.skip_assignment, sorted(m.member_id for m in r.members)) == (r.member_id, True, sorted([r.member_id, b2]))
    # an older client (v8) is answered as a follower naming the old leader id
    r8 = await env.join(client_id="a", instance_id="ia", version=8)
    assert (r8.leader, r8.skip_assignment, r8.members) == (r.member_id, False, ())
    assert env.group("g").generation_id == 1


async def test_static_member_with_new_protocol_triggers_rebalance():
    env = await started_env()
    fa = env.join(client_id="a", instance_id="ia")
    env.advance(3000)
    a = (await fa).member_id
    await env.sync("g", 1, a, {a: b"A"}, instance_id="ia")
    new = (("roundrobin", b""), ("range", b""))  # now prefers roundrobin
    fut = env.join(client_id="a", instance_id="ia", protocols=new)
    r = await fut  # the only member, rejoined: completes at once
    assert (r.error, r.generation_id, r.protocol_name) == (E.none, 2, "roundrobin")


async def test_static_member_fencing_of_a_parked_request():
    env = await started_env()
    fa = env.join(client_id="a", instance_id="ia")
    await settle()
    fa2 = env.join(client_id="a", instance_id="ia")  # a second process with the same instance id
    r1 = await fa
    assert (r1.error, r1.member_id) == (E.fenced_instance_id, "ia-u0")
    env.advance(3000)
    r2 = await fa2
    assert (r2.error, r2.member_id, r2.generation_id) == (E.none, "ia-u1", 1)


async def test_static_members_survive_the_rebalance_timeout():
    env = await started_env()
    ra, rb = await env.initial_rebalance(env.join(client_id="a", instance_id="ia"), env.join(client_id="b", instance_id="ib"))
    a, b = ra.member_id, rb.member_id
    await asyncio.gather(env.sync("g", 1, a, {a: b"A", b: b"B"}), env.sync("g", 1, b))
    fa = env.join(member_id=a, instance_id="ia", protocols=(("range", b"changed"),))
    await settle()
    for _ in range(REBALANCE_MS // 5000):
        env.coord.heartbeat("g", b, "ib", 1)
        env.advance(5000)  # b (static) heartbeats, does not rejoin, and stays a member
    r = await fa
    assert r.generation_id == 2 and sorted(m.member_id for m in r.members) == sorted([a, b])


async def test_other_groups_are_unaffected_by_bad_requests():
    env = await started_env(partitions=3)
    a, b = await stable_group(env, "good", n=2)
    for bad in (
        env.join("good", "forged"),
        env.join("good", protocol_type="connect"),
        env.sync("good", 7, a),
        env.join("bad", session_ms=1),
    ):
        assert (await bad).error != E.none
    assert env.coord.heartbeat("good", a, None, 1) == E.none
    assert env.group("good").state is S.STABLE and env.group("good").generation_id == 1
