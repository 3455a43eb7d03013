"""Committed offsets follow a renamed topic (KIP-37 move): exact records, replay, commits in
flight, idempotence, and a Hypothesis property against a model of the log's final state."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from group_helpers import make_env, settle, started_env
from shoal.groups import CommitRequest, GroupCoordinator
from shoal.groups.records import OffsetCommitValue, encode_offset_commit_value, offset_commit_key
from shoal.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.timeout(30)


def state(coord: GroupCoordinator) -> dict:
    """(group, topic, partition) -> (offset, epoch, metadata, commit ts, expire ts)."""
    return {
        (g, t, p): (om.offset, om.leader_epoch, om.metadata, om.commit_timestamp, om.expire_timestamp)
        for g in coord.offsets.groups()
        for t, parts in coord.offsets.group_offsets(g).items()
        for p, om in parts.items()
    }


async def replayed(env) -> dict:
    """The state a coordinator loading the same log (after a restart) ends up with."""
    again = make_env(env.partitions, log=env.log, clock=env.clock)
    for p in range(env.partitions):
        again.coord.start_loading(p)
    await again.coord.wait_loaded()
    return state(again.coord)


async def durable_offsets(env) -> dict:
    """(group, topic, partition) -> offset in memory, checked equal to what a replay rebuilds."""
    now = state(env.coord)
    assert await replayed(env) == now
    return {k: v[0] for k, v in now.items()}


def value(offset, epoch, metadata, commit_ts, expire_ts=-1) -> bytes:
    return encode_offset_commit_value(OffsetCommitValue(offset, epoch, metadata, commit_ts, expire_ts))


async def test_move_writes_the_same_values_under_the_new_name_and_tombstones_the_old():
    env = await started_env()
    c, t0 = env.coord, env.clock.now_ms()
    assert await c.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 5, 3, "m0"), CommitRequest("u", 0, 1)]) == [E.none] * 2
    env.advance(1000)
    assert await c.commit_offsets("g", "", None, -1, [CommitRequest("t", 1, 7, -1, "")], retention_ms=60_000, api_version=4) == [E.none]
    assert await c.commit_offsets("h", "", None, -1, [CommitRequest("t", 0, 9)]) == [E.none]
    written = len(env.log.all())

    assert c.follow_renamed_topics({"t": "ns:t"}) == 3
    assert env.log.all()[written:] == [
        (offset_commit_key("g", "t", 0), None),
        (offset_commit_key("g", "t", 1), None),
        (offset_commit_key("h", "t", 0), None),
        (offset_commit_key("g", "ns:t", 0), value(5, 3, "m0", t0)),  # epoch, metadata, timestamps kept
        (offset_commit_key("g", "ns:t", 1), value(7, -1, "", t0 + 1000, t0 + 61_000)),
        (offset_commit_key("h", "ns:t", 0), value(9, -1, "", t0 + 1000)),
    ]
    assert state(c) == {
        ("g", "ns:t", 0): (5, 3, "m0", t0, -1),
        ("g", "ns:t", 1): (7, -1, "", t0 + 1000, t0 + 61_000),
        ("g", "u", 0): (1, -1, "", t0, -1),
        ("h", "ns:t", 0): (9, -1, "", t0 + 1000, -1),
    }
    code, rows = await c.fetch_offsets("g", [("ns:t", [0, 1]), ("t", [0])])
    assert code == E.none
    assert [(t, r.partition, r.offset, r.leader_epoch, r.metadata) for t, rs in rows for r in rs] == [
        ("ns:t", 0, 5, 3, "m0"), ("ns:t", 1, 7, -1, ""), ("t", 0, -1, -1, ""),
    ]
    assert await replayed(env) == state(c)  # a restart sees the same
    # idempotent: nothing is left under the old name, so nothing more is written
    assert c.follow_renamed_topics({"t": "ns:t"}) == 0
    assert len(env.log.all()) == written + 6


async def test_a_commit_in_flight_during_the_move_follows_it():
    env = await started_env()
    c = env.coord
    assert await c.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 5)]) == [E.none]
    env.log.hold()
    commit = asyncio.ensure_future(c.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 8)]))
    first = asyncio.ensure_future(c.commit_offsets("new", "", None, -1, [CommitRequest("t", 0, 2)]))  # group's first
    await settle()
    assert c.follow_renamed_topics({"t": "t2"}) == 2
    env.log.release()
    assert await commit == [E.none] and await first == [E.none]
    assert await durable_offsets(env) == {("g", "t2", 0): 8, ("new", "t2", 0): 2}


async def test_a_later_commit_under_the_new_name_wins():
    env = await started_env()
    c = env.coord
    await c.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 5), CommitRequest("t", 1, 6)])
    await c.commit_offsets("g", "", None, -1, [CommitRequest("t2", 0, 50)])
    written = len(env.log.all())
    assert c.follow_renamed_topics({"t": "t2"}) == 1
    assert [k for k, _ in env.log.all()[written:]] == [
        offset_commit_key("g", "t", 0), offset_commit_key("g", "t", 1), offset_commit_key("g", "t2", 1),
    ]
    assert await durable_offsets(env) == {("g", "t2", 0): 50, ("g", "t2", 1): 6}


async def test_swapped_names_swap_offsets():
    env = await started_env()
    c = env.coord
    await c.commit_offsets("g", "", None, -1, [CommitRequest("a", 0, 1), CommitRequest("b", 0, 2)])
    assert c.follow_renamed_topics({"a": "b", "b": "a"}) == 2
    assert await durable_offsets(env) == {("g", "b", 0): 1, ("g", "a", 0): 2}


async def test_only_active_or_given_partitions_move():
    env = await started_env(partitions=4)  # "a" -> partition 1, "b" -> 2 (hash % 4)
    c = env.coord
    for g in ("a", "b"):
        await c.commit_offsets(g, "", None, -1, [CommitRequest("t", 0, 1)])
    assert c.follow_renamed_topics({"t": "t2"}, [2]) == 1
    assert set(state(c)) == {("a", "t", 0), ("b", "t2", 0)}
    c.unload_partition(1)
    assert c.follow_renamed_topics({"t": "t2"}) == 0  # "a" is not ours now: its next load moves it
    assert env.log.all(1)[-1][0] == offset_commit_key("a", "t", 0)


async def test_offset_delete_during_a_commit_in_flight_is_not_undone():
    """The tombstone's floor holds until the commit's own pending mark is gone."""
    env = await started_env()
    c = env.coord
    await c.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 1)])
    env.log.hold()
    commit = asyncio.ensure_future(c.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 5)]))
    await settle()
    delete = asyncio.ensure_future(c.delete_offsets("g", [("t", [0])]))
    await settle()
    env.log.release()
    assert await commit == [E.none] and (await delete)[0] == E.none
    assert await durable_offsets(env) == {}


# -- property: the move against a model ---------------------------------------------------------

TOPICS = ["a", "b", "c", "d"]
commits = st.lists(
    st.tuples(
        st.sampled_from(["g1", "g2", "g3"]), st.sampled_from(TOPICS), st.integers(0, 1),
        st.integers(0, 1000), st.integers(-1, 5), st.booleans(),
    ),
    min_size=1, max_size=25,
)
renames = st.lists(
    st.tuples(st.sampled_from(TOPICS), st.sampled_from(TOPICS + ["x", "y"])),
    unique_by=(lambda r: r[0], lambda r: r[1]), max_size=4,
).map(lambda pairs: {o: n for o, n in pairs if o != n})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(commits=commits, renames=renames)
def test_property_moved_state_is_the_model_and_survives_a_replay(commits, renames):
    async def run() -> None:
        env = await started_env(partitions=2)
        c = env.coord
        for g, t, p, offset, epoch, expiring in commits:
            env.advance(7)
            epoch = -1 if expiring else epoch  # Kafka's v1 value, written with an expiry, has no epoch
            codes = await c.commit_offsets(g, "", None, -1, [CommitRequest(t, p, offset, epoch, f"{g}{offset}")],
                                           retention_ms=1000 if expiring else -1, api_version=4)
            assert codes == [E.none]
        before = {k: (v, c.offsets.get(*k).record_offset) for k, v in state(c).items()}
        expected = {k: v for k, (v, _) in before.items() if k[1] not in renames}
        order = {k: r for k, (_, r) in before.items() if k[1] not in renames}
        for (g, t, p), (v, r) in before.items():
            if t in renames:
                key = (g, renames[t], p)
                if key not in order or order[key] < r:
                    expected[key], order[key] = v, r
        moved = c.follow_renamed_topics(renames)
        assert state(c) == expected
        assert moved == sum(1 for (g, t, p) in before if t in renames and expected[(g, renames[t], p)] == before[(g, t, p)][0])
        assert await replayed(env) == expected
        assert c.follow_renamed_topics(renames) == 0 or any(t in renames for t in renames.values())

    asyncio.run(run())
