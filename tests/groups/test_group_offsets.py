"""Committed offsets, deletion, expiry and replay of __consumer_offsets, on a manual clock."""

from __future__ import annotations

import asyncio

import pytest

from group_helpers import make_env, settle, stable_group, started_env
from shoal.groups import CommitRequest, GroupCoordinator
from shoal.groups.classic import ClassicGroupState as S
from shoal.groups.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_offset_commit_value,
    encode_offset_commit_value,
    offset_commit_key,
)
from shoal.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.timeout(10)
MINUTE = 60_000
LONG_SESSION = 30 * MINUTE


def records(env):
    out = []
    for k, v in env.log.all():
        key = decode_key(k)
        if isinstance(key, OffsetCommitKey):
            out.append((key, None if v is None else decode_offset_commit_value(v)))
        else:
            out.append((key, v))
    return out


async def fetch(env, group, topics=None, **kw):
    code, rows = await env.coord.fetch_offsets(group, topics, **kw)
    return code, {(t, r.partition): (r.offset, r.leader_epoch, r.metadata, r.error) for t, rs in rows for r in rs}


async def test_simple_commit_creates_a_group_and_writes_kafkas_record():
    env = await started_env()
    codes = await env.coord.commit_offsets("simple", "", None, -1, [CommitRequest("t", 0, 42, 3, "meta")])
    assert codes == [E.none]
    [(key, value)] = env.log.all()
    assert key == offset_commit_key("simple", "t", 0)
    assert value == encode_offset_commit_value(OffsetCommitValue(42, 3, "meta", env.clock.now_ms()))
    assert await fetch(env, "simple", [("t", [0, 1])]) == (E.none, {("t", 0): (42, 3, "meta", E.none), ("t", 1): (-1, -1, "", E.none)})
    g = env.group("simple")
    assert (g.state, g.protocol_type, g.generation_id) == (S.EMPTY, None, 0)


async def test_commit_is_acknowledged_only_once_committed():
    env = await started_env()
    env.log.hold()
    task = asyncio.ensure_future(env.coord.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 5)]))
    await settle()
    assert not task.done()
    assert len(env.log.all()) == 1  # appended at once...
    assert (await fetch(env, "g", [("t", [0])]))[1][("t", 0)][0] == -1  # ...but not visible yet
    stable = asyncio.ensure_future(fetch(env, "g", [("t", [0])], require_stable=True))
    await settle()
    assert not stable.done()  # require_stable waits for the commit in flight
    env.log.release()
    assert await task == [E.none]
    assert (await stable)[1][("t", 0)] == (5, -1, "", E.none)


async def test_pipelined_commits_apply_in_log_order():
    env = await started_env()
    env.log.hold()
    first = asyncio.ensure_future(env.coord.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 1)]))
    second = asyncio.ensure_future(env.coord.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 2)]))
    await settle()
    env.log.release()
    await asyncio.gather(second, first)
    assert (await fetch(env, "g", [("t", [0])]))[1][("t", 0)][0] == 2


async def test_group_commit_checks_member_and_generation():
    env = await started_env()
    a, b = await stable_group(env, n=2)
    c = env.coord
    ok = [CommitRequest("t", 0, 10)]
    assert await c.commit_offsets("g", a, None, 1, ok) == [E.none]
    assert await c.commit_offsets("g", a, None, 0, ok) == [E.illegal_generation]
    assert await c.commit_offsets("g", "ghost", None, 1, ok) == [E.unknown_member_id]
    assert await c.commit_offsets("g", "", None, -1, ok) == [E.unknown_member_id]  # not Empty: no simple commits
    assert await c.commit_offsets("g", a, "not-mine", 1, ok) == [E.unknown_member_id]
    assert await c.commit_offsets("nope", a, None, 1, ok, api_version=9) == [E.group_id_not_found]
    assert await c.commit_offsets("nope", a, None, 1, ok, api_version=8) == [E.illegal_generation]
    assert "nope" not in c.groups
    env.join(member_id=a)  # rebalance: PreparingRebalance still takes commits
    await settle()
    assert await c.commit_offsets("g", b, None, 1, ok) == [E.none]
    fb = env.join(member_id=b)
    await settle()
    r = await fb
    assert await c.commit_offsets("g", b, None, 2, ok) == [E.rebalance_in_progress]  # CompletingRebalance
    assert r.generation_id == 2


async def test_oversized_metadata_is_refused_per_partition():
    env = await started_env(offset_metadata_max_bytes=10)
    codes = await env.coord.commit_offsets(
        "g", "", None, -1, [CommitRequest("t", 0, 1, -1, "x" * 10), CommitRequest("t", 1, 1, -1, "x" * 11), CommitRequest("t", 2, 1, -1, None)]
    )
    assert codes == [E.none, E.offset_metadata_too_large, E.none]
    assert len(env.log.all()) == 2
    assert (await fetch(env, "g", [("t", [2])]))[1][("t", 2)] == (1, -1, "", E.none)


async def test_failed_append_maps_to_coordinator_errors_and_stores_nothing():
    env = await started_env()
    env.log.fail_with = E.not_leader_or_follower
    assert await env.coord.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 1)]) == [E.not_coordinator]
    env.log.fail_with = E.message_too_large
    assert await env.coord.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 1)]) == [E.unknown_server_error]
    assert "g" not in env.coord.groups


async def test_status_not_coordinator_and_loading():
    env = make_env(partitions=4)
    env.coord.start_loading(1)
    assert env.coord.status("a") == E.coordinator_load_in_progress  # "a" hashes to 97 % 4 = 1
    assert env.coord.heartbeat("a", "m", None, 1) == E.none  # answered blindly while loading
    assert (await env.sync("a", 1, "m")).error == E.rebalance_in_progress
    assert env.coord.status("b") == E.not_coordinator  # 98 % 4 = 2
    assert await env.coord.commit_offsets("b", "", None, -1, [CommitRequest("t", 0, 1)]) == [E.not_coordinator]
    await env.coord.wait_loaded()
    assert env.coord.status("a") == E.none


async def test_fetch_all_topics_and_unknown_group():
    env = await started_env()
    await env.coord.commit_offsets("g", "", None, -1, [CommitRequest("t", 1, 5), CommitRequest("u", 0, 7, 2, "m")])
    code, rows = await env.coord.fetch_offsets("g", None)
    assert code == E.none
    assert [(t, [(r.partition, r.offset) for r in rs]) for t, rs in rows] == [("t", [(1, 5)]), ("u", [(0, 7)])]
    assert await env.coord.fetch_offsets("nobody", None) == (E.none, [])
    assert (await fetch(env, "nobody", [("t", [0])]))[1] == {("t", 0): (-1, -1, "", E.none)}


async def test_offset_delete():
    env = await started_env()
    a, b = await stable_group(env, n=2)  # subscribed to "t" (the helpers' subscription)
    c = env.coord
    await c.commit_offsets("g", a, None, 1, [CommitRequest("t", 0, 1), CommitRequest("old", 0, 2)])
    code, rows = await c.delete_offsets("g", [("t", [0]), ("old", [0, 1])])
    assert code == E.none
    assert rows == [("t", [(0, E.group_subscribed_to_topic)]), ("old", [(0, E.none), (1, E.none)])]
    assert records(env)[-1] == (OffsetCommitKey("g", "old", 0), None)  # one tombstone (1 had none)
    assert (await fetch(env, "g", [("old", [0])]))[1][("old", 0)][0] == -1
    assert await c.delete_offsets("missing", [("t", [0])]) == (E.group_id_not_found, [])
    # a non-consumer protocol group with members: NON_EMPTY_GROUP
    await stable_group(env, "connect", n=1, protocol_type="connect", protocols=(("default", b""),))
    assert await c.delete_offsets("connect", [("t", [0])]) == (E.non_empty_group, [])


async def test_delete_groups():
    env = await started_env()
    [a] = await stable_group(env, "busy")
    await env.coord.commit_offsets("idle", "", None, -1, [CommitRequest("t", 0, 1), CommitRequest("t", 1, 2)])
    results = await env.coord.delete_groups(["busy", "idle", "ghost"])
    assert results == {"busy": E.non_empty_group, "idle": E.none, "ghost": E.group_id_not_found}
    assert "idle" not in env.coord.groups
    tail = records(env)[-3:]
    assert tail == [(OffsetCommitKey("idle", "t", 0), None), (OffsetCommitKey("idle", "t", 1), None), (GroupMetadataKey("idle"), None)]
    assert await env.coord.fetch_offsets("idle", None) == (E.none, [])
    assert env.coord.heartbeat("busy", a, None, 1) == E.none


async def test_list_and_describe():
    env = await started_env(partitions=3)
    await stable_group(env, "stable-one")
    await env.coord.commit_offsets("simple", "", None, -1, [CommitRequest("t", 0, 1)])
    code, groups = env.coord.list_groups()
    assert code == E.none
    assert sorted((g.group_id, g.state_name, g.protocol_type, g.group_type) for g in groups) == [
        ("simple", "Empty", None, "classic"),
        ("stable-one", "Stable", "consumer", "classic"),
    ]
    assert [g.group_id for g in env.coord.list_groups(states=["STABLE "])[1]] == ["stable-one"]
    assert sorted(g.group_id for g in env.coord.list_groups(types=["Classic"])[1]) == ["simple", "stable-one"]
    assert env.coord.list_groups(types=["consumer"])[1] == []
    assert env.coord.describe_group("none") == (E.group_id_not_found, None)


async def test_offsets_of_an_empty_group_expire_after_retention_then_the_group_goes():
    env = await started_env(offsets_retention_ms=10 * MINUTE)
    [a] = await stable_group(env, session_ms=LONG_SESSION)
    await env.coord.commit_offsets("g", a, None, 1, [CommitRequest("t", 0, 5)])
    for _ in range(12):  # a Stable group subscribed to "t": nothing expires
        env.advance(5 * MINUTE)
        assert env.coord.heartbeat("g", a, None, 1) == E.none
    assert env.coord.cleanup_expired_offsets() == 0
    assert env.coord.leave_group("g", [(a, None)]) == (E.none, [E.none])
    assert env.group("g").state is S.EMPTY
    env.advance(10 * MINUTE - 1)
    assert env.coord.cleanup_expired_offsets() == 0
    env.advance(1)
    assert env.coord.cleanup_expired_offsets() == 1
    await settle()
    assert "g" not in env.coord.groups
    assert records(env)[-2:] == [(OffsetCommitKey("g", "t", 0), None), (GroupMetadataKey("g"), None)]


async def test_simple_group_offsets_expire_from_each_commit():
    env = await started_env(offsets_retention_ms=10 * MINUTE)
    await env.coord.commit_offsets("s", "", None, -1, [CommitRequest("t", 0, 1)])
    env.advance(5 * MINUTE)
    await env.coord.commit_offsets("s", "", None, -1, [CommitRequest("t", 1, 1)])
    env.advance(5 * MINUTE)
    assert env.coord.cleanup_expired_offsets() == 1  # partition 0 only
    assert (await fetch(env, "s", None))[1] == {("t", 1): (1, -1, "", E.none)}
    env.advance(5 * MINUTE)
    assert env.coord.cleanup_expired_offsets() == 1
    assert "s" not in env.coord.groups


async def test_stable_group_offsets_of_unsubscribed_topics_expire():
    env = await started_env(offsets_retention_ms=10 * MINUTE)
    [a] = await stable_group(env, session_ms=LONG_SESSION)
    await env.coord.commit_offsets("g", a, None, 1, [CommitRequest("t", 0, 1), CommitRequest("gone", 0, 1)])
    for _ in range(3):
        env.advance(5 * MINUTE)
        assert env.coord.heartbeat("g", a, None, 1) == E.none
    assert env.coord.cleanup_expired_offsets() == 1
    assert set((await fetch(env, "g", None))[1]) == {("t", 0)}


async def test_explicit_retention_time_of_old_clients():
    env = await started_env(offsets_retention_ms=10 * MINUTE)
    await env.coord.commit_offsets("s", "", None, -1, [CommitRequest("t", 0, 1)], retention_ms=MINUTE)
    [(_, value)] = records(env)
    assert value.expire_timestamp == env.clock.now_ms() + MINUTE
    env.advance(MINUTE)
    assert env.coord.cleanup_expired_offsets() == 1


async def test_expiry_runs_on_its_timer():
    env = await started_env(offsets_retention_ms=MINUTE, offsets_retention_check_interval_ms=30_000)
    env.coord.schedule_expiry()
    await env.coord.commit_offsets("s", "", None, -1, [CommitRequest("t", 0, 1)])
    env.advance(30_000)
    assert "s" in env.coord.groups
    env.advance(30_000)
    assert "s" not in env.coord.groups


async def test_replay_rebuilds_groups_and_offsets():
    env = await started_env(partitions=2)
    a, b = await stable_group(env, "live", n=2)
    await env.coord.commit_offsets("live", a, None, 1, [CommitRequest("t", 0, 11, 4, "x")])
    await env.coord.commit_offsets("simple", "", None, -1, [CommitRequest("t", 0, 1)])
    await env.coord.commit_offsets("simple", "", None, -1, [CommitRequest("t", 0, 2)])
    await env.coord.commit_offsets("deleted", "", None, -1, [CommitRequest("t", 0, 3)])
    await env.coord.delete_groups(["deleted"])
    [c] = await stable_group(env, "left")
    env.coord.leave_group("left", [(c, None)])
    await settle()

    # A new coordinator (a restarted broker) on the same log and clock.
    env2 = make_env(partitions=2, log=env.log, clock=env.clock)
    coord2: GroupCoordinator = env2.coord
    for p in range(2):
        coord2.start_loading(p)
    await coord2.wait_loaded()
    assert sorted(coord2.groups) == ["left", "live", "simple"]
    live = env2.group("live")
    assert (live.state, live.generation_id, live.leader_id, sorted(live.members)) == (S.STABLE, 1, a, sorted([a, b]))
    assert live.members[b].assignment == b.encode()
    assert (env2.group("left").state, env2.group("left").generation_id) == (S.EMPTY, 2)
    assert (await fetch(env2, "live", None))[1] == {("t", 0): (11, 4, "x", E.none)}
    assert (await fetch(env2, "simple", None))[1] == {("t", 0): (2, -1, "", E.none)}
    # Members carry on with their member id and generation...
    assert coord2.heartbeat("live", a, None, 1) == E.none
    r = await env2.sync("live", 1, b)
    assert (r.error, r.assignment) == (E.none, b.encode())
    # ...or expire after their session timeout and the group rebalances.
    env2.advance(5_000)
    assert coord2.heartbeat("live", a, None, 1) == E.none
    env2.advance(5_000)
    assert b not in live.members and live.state is S.PREPARING_REBALANCE


async def test_unload_fails_parked_requests_with_not_coordinator():
    env = await started_env()
    a = (await env.join(client_id="a")).member_id
    fut = env.join(member_id=a)
    await settle()
    env.coord.unload_partition(0)
    assert (await fut).error == E.not_coordinator
    assert env.coord.status("g") == E.not_coordinator
    assert env.coord.groups == {}


async def test_topic_deletion_tombstones_its_offsets():
    env = await started_env()
    await env.coord.commit_offsets("s", "", None, -1, [CommitRequest("t", 0, 1), CommitRequest("keep", 0, 1)])
    env.coord.on_topics_deleted(["t"])
    await settle()
    assert set((await fetch(env, "s", None))[1]) == {("keep", 0)}
    assert records(env)[-1] == (OffsetCommitKey("s", "t", 0), None)


async def test_a_record_of_a_newer_value_version_is_skipped_at_load_not_misread(caplog):
    """docs/upgrades.md: an OffsetCommitValue of a version this release does not read (as a
    later release could write) is skipped with one warning; the offset stays the last one read."""
    import struct

    from shoal.groups import MemoryCoordinatorLog

    log = MemoryCoordinatorLog()
    key = offset_commit_key("g", "t", 0)
    log.append(0, [(key, encode_offset_commit_value(OffsetCommitValue(5, 1, "m", 1000)))], 0)
    log.append(0, [(key, struct.pack(">hq", 5, 999) + b"\x00" * 16)], 0)  # version 5 (not read as offset 999)
    with caplog.at_level("WARNING", logger="shoal.groups"):
        env = await started_env(log=log)
        assert await fetch(env, "g") == (E.none, {("t", 0): (5, 1, "m", E.none)})
    assert "__consumer_offsets-0 offset 1: skipping a record: unknown OffsetCommitValue version 5" in caplog.text
