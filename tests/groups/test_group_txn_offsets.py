"""Transactional offset commits (TxnOffsetCommit, KIP-98/KIP-447) in the group coordinator, on a
ManualClock and a MemoryCoordinatorLog: pending per producer until the end-transaction marker,
UNSTABLE_OFFSET_COMMIT for require_stable, the mix with regular commits in log order, deletion,
expiry, and the replay of transactional batches and markers after a restart."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from group_helpers import make_env, settle, stable_group, started_env
from shoal.groups import CommitRequest, GroupCoordinator
from shoal.groups.classic import ClassicGroupState as S
from shoal.groups.records import OffsetCommitValue, encode_offset_commit_value, offset_commit_key, partition_for
from shoal.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.timeout(10)
PID, EPOCH = 4000, 0


async def fetch(env, group, topics=None, *, coord=None, **kw):
    code, rows = await (coord or env.coord).fetch_offsets(group, topics, **kw)
    assert code == E.none
    return {(t, r.partition): (r.offset, r.error) for t, rs in rows for r in rs}


async def txn_commit(env, group="g", offsets=(("t", 0, 10),), *, pid=PID, epoch=EPOCH, member="", generation=-1,
                     instance=None, coord=None):
    return await (coord or env.coord).commit_txn_offsets(
        group, pid, epoch, member, generation, instance, [CommitRequest(t, p, o) for t, p, o in offsets])


async def test_offsets_stay_pending_until_commit_and_are_written_in_a_transactional_batch():
    env = await started_env()
    codes = await txn_commit(env, offsets=[("t", 0, 10), ("t", 1, 20)])
    assert codes == {("t", 0): E.none, ("t", 1): E.none}
    # one transactional batch of the producer, Kafka's OffsetCommit records (no expire timestamp)
    assert env.log.batches[0] == [(0, 2, PID, EPOCH, True, None)]
    now = env.clock.now_ms()
    assert env.log.all() == [
        (offset_commit_key("g", "t", 0), encode_offset_commit_value(OffsetCommitValue(10, -1, "", now))),
        (offset_commit_key("g", "t", 1), encode_offset_commit_value(OffsetCommitValue(20, -1, "", now))),
    ]
    wanted = [("t", [0, 1, 2])]
    assert await fetch(env, "g", wanted) == {("t", 0): (-1, E.none), ("t", 1): (-1, E.none), ("t", 2): (-1, E.none)}
    assert await fetch(env, "g", wanted, require_stable=True) == {
        ("t", 0): (-1, E.unstable_offset_commit), ("t", 1): (-1, E.unstable_offset_commit), ("t", 2): (-1, E.none)}
    env.coord.on_txn_completed(PID, [0], True)
    assert await fetch(env, "g", wanted, require_stable=True) == {
        ("t", 0): (10, E.none), ("t", 1): (20, E.none), ("t", 2): (-1, E.none)}


async def test_abort_drops_the_pending_offsets():
    env = await started_env()
    await env.coord.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 5)])
    await txn_commit(env, offsets=[("t", 0, 10)])
    assert await fetch(env, "g", [("t", [0])], require_stable=True) == {("t", 0): (-1, E.unstable_offset_commit)}
    env.coord.on_txn_completed(PID, [0], False)
    assert await fetch(env, "g", [("t", [0])], require_stable=True) == {("t", 0): (5, E.none)}
    env.coord.on_txn_completed(PID, [0], True)  # a marker of nothing pending changes nothing
    assert await fetch(env, "g", [("t", [0])]) == {("t", 0): (5, E.none)}


async def test_completion_touches_only_the_groups_of_the_marked_partitions():
    env = await started_env(partitions=4)
    g1, g2 = "a", "b"
    assert partition_for(g1, 4) != partition_for(g2, 4)
    await txn_commit(env, g1, [("t", 0, 1)])
    await txn_commit(env, g2, [("t", 0, 2)])
    env.coord.on_txn_completed(PID, [partition_for(g1, 4)], True)
    assert await fetch(env, g1, [("t", [0])], require_stable=True) == {("t", 0): (1, E.none)}
    assert await fetch(env, g2, [("t", [0])], require_stable=True) == {("t", 0): (-1, E.unstable_offset_commit)}
    env.coord.on_txn_completed(PID, [partition_for(g2, 4)], True)
    assert await fetch(env, g2, [("t", [0])]) == {("t", 0): (2, E.none)}


async def test_producers_are_independent_and_a_later_commit_of_one_replaces_its_earlier():
    env = await started_env()
    await txn_commit(env, offsets=[("t", 0, 1)], pid=1)
    await txn_commit(env, offsets=[("t", 0, 2)], pid=2)
    await txn_commit(env, offsets=[("t", 0, 3)], pid=1)
    env.coord.on_txn_completed(1, [0], True)
    assert await fetch(env, "g", [("t", [0])]) == {("t", 0): (3, E.none)}
    # producer 2 is still open: unstable; its commit record is earlier in the log than 1's
    assert await fetch(env, "g", [("t", [0])], require_stable=True) == {("t", 0): (-1, E.unstable_offset_commit)}
    env.coord.on_txn_completed(2, [0], True)
    assert await fetch(env, "g", [("t", [0])], require_stable=True) == {("t", 0): (3, E.none)}


async def test_regular_and_transactional_commits_resolve_in_log_order():
    env = await started_env()
    # transactional first, regular later in the log: the regular one stays when the txn commits
    await txn_commit(env, offsets=[("t", 0, 10)])
    await env.coord.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 7)])
    assert await fetch(env, "g", [("t", [0])]) == {("t", 0): (7, E.none)}
    env.coord.on_txn_completed(PID, [0], True)
    assert await fetch(env, "g", [("t", [0])]) == {("t", 0): (7, E.none)}
    # regular first, transactional later: the transaction's offset wins on commit
    await env.coord.commit_offsets("g", "", None, -1, [CommitRequest("t", 1, 7)])
    await txn_commit(env, offsets=[("t", 1, 10)])
    env.coord.on_txn_completed(PID, [0], True)
    assert await fetch(env, "g", [("t", [1])]) == {("t", 1): (10, E.none)}


async def test_validation_unknown_group_generation_member_and_instance():
    env = await started_env()
    c = env.coord
    assert await txn_commit(env, "nope", generation=1, member="m") == {("t", 0): E.illegal_generation}
    assert "nope" not in c.groups
    a, b = await stable_group(env, n=2)
    assert await txn_commit(env, generation=1, member=a) == {("t", 0): E.none}
    assert await txn_commit(env, generation=0, member=a) == {("t", 0): E.illegal_generation}
    assert await txn_commit(env, generation=1, member="ghost") == {("t", 0): E.unknown_member_id}
    assert await txn_commit(env, generation=1, member=a, instance="not-mine") == {("t", 0): E.unknown_member_id}
    # v0-v2 carry no member: accepted in a Stable group (OffsetCommit would say UNKNOWN_MEMBER_ID)
    assert await txn_commit(env) == {("t", 0): E.none}
    assert await c.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 1)]) == [E.unknown_member_id]
    # CompletingRebalance takes transactional commits (OffsetCommit: REBALANCE_IN_PROGRESS)
    env.join(member_id=a)
    fb = env.join(member_id=b)
    await settle()
    r = await fb
    assert env.group("g").state is S.COMPLETING_REBALANCE
    assert await txn_commit(env, generation=r.generation_id, member=b) == {("t", 0): E.none}
    assert await txn_commit(env, "", generation=-1) == {("t", 0): E.invalid_group_id}
    assert await txn_commit(env, pid=-1) == {("t", 0): E.invalid_producer_epoch}
    assert await txn_commit(env, epoch=-1) == {("t", 0): E.invalid_producer_epoch}


async def test_static_member_fenced():
    env = await started_env()
    [r] = await env.initial_rebalance(env.join(client_id="a", instance_id="i1"))
    a = r.member_id
    await env.sync("g", 1, a, {a: b"A"}, instance_id="i1")
    assert await txn_commit(env, generation=1, member=a, instance="i1") == {("t", 0): E.none}
    assert await txn_commit(env, generation=1, member="old", instance="i1") == {("t", 0): E.fenced_instance_id}


async def test_simple_group_is_created_and_oversized_metadata_refused():
    env = await started_env(offset_metadata_max_bytes=4)
    codes = await env.coord.commit_txn_offsets(
        "s", PID, EPOCH, "", -1, None, [CommitRequest("t", 0, 1, -1, "12345"), CommitRequest("t", 1, 1, -1, "1234")])
    assert codes == {("t", 0): E.offset_metadata_too_large, ("t", 1): E.none}
    assert env.group("s").state is S.EMPTY and env.log.batches[0] == [(0, 1, PID, EPOCH, True, None)]


async def test_fenced_producer_epoch_and_append_failures():
    env = await started_env()
    assert await txn_commit(env, epoch=3) == {("t", 0): E.none}
    assert await txn_commit(env, epoch=2, offsets=[("t", 1, 5)]) == {("t", 1): E.invalid_producer_epoch}
    env.log.fail_with = E.not_leader_or_follower
    assert await txn_commit(env, epoch=3, offsets=[("t", 2, 5)]) == {("t", 2): E.not_coordinator}
    env.log.fail_with = None
    assert await fetch(env, "g", [("t", [0, 1, 2])], require_stable=True) == {
        ("t", 0): (-1, E.unstable_offset_commit), ("t", 1): (-1, E.none), ("t", 2): (-1, E.none)}
    # a simple group created by a refused commit is not left behind
    env.log.fail_with = E.not_leader_or_follower
    await txn_commit(env, "other")
    assert "other" not in env.coord.groups


async def test_a_failed_wait_forgets_the_pending_offset():
    env = await started_env()

    async def timed_out(partition, offset, timeout_s):
        return E.request_timed_out

    env.log.wait_committed = timed_out
    assert await txn_commit(env) == {("t", 0): E.coordinator_not_available}
    assert await fetch(env, "g", [("t", [0])], require_stable=True) == {("t", 0): (-1, E.none)}


async def test_offset_delete_and_group_deletion_drop_pending_offsets():
    env = await started_env()
    c = env.coord
    await txn_commit(env, offsets=[("t", 0, 1), ("t", 1, 1)])
    code, _ = await c.delete_offsets("g", [("t", [0])])
    assert code == E.none
    assert env.log.all()[-1] == (offset_commit_key("g", "t", 0), None)  # its tombstone
    assert await fetch(env, "g", [("t", [0, 1])], require_stable=True) == {
        ("t", 0): (-1, E.none), ("t", 1): (-1, E.unstable_offset_commit)}
    assert await c.delete_groups(["g"]) == {"g": E.none}
    assert env.log.all()[-2] == (offset_commit_key("g", "t", 1), None)  # the pending one's tombstone too
    c.on_txn_completed(PID, [0], True)
    assert "g" not in c.groups
    assert await fetch(env, "g", [("t", [0, 1])]) == {("t", 0): (-1, E.none), ("t", 1): (-1, E.none)}


async def test_deleted_topics_drop_pending_offsets():
    env = await started_env()
    await env.coord.commit_offsets("g", "", None, -1, [CommitRequest("gone", 0, 1)])
    await txn_commit(env, offsets=[("gone", 0, 5), ("gone", 1, 5), ("t", 0, 5)])
    env.coord.on_topics_deleted(["gone"])
    await settle()
    assert env.log.all()[-2:] == [(offset_commit_key("g", "gone", 0), None), (offset_commit_key("g", "gone", 1), None)]
    env.coord.on_txn_completed(PID, [0], True)
    assert await fetch(env, "g", [("gone", [0, 1]), ("t", [0])]) == {
        ("gone", 0): (-1, E.none), ("gone", 1): (-1, E.none), ("t", 0): (5, E.none)}


async def test_offsets_of_a_topic_renamed_during_the_transaction_follow_it_at_commit():
    from types import SimpleNamespace

    env = await started_env()
    await txn_commit(env, offsets=[("old", 0, 8), ("t", 0, 9)])
    image = SimpleNamespace(renamed_topics={"old": "id-1"}, topics={"new": None},
                            topics_by_id={"id-1": SimpleNamespace(name="new")})
    env.coord._ctx = SimpleNamespace(metadata=SimpleNamespace(image=image))  # a KIP-37 move happened
    env.coord.on_txn_completed(PID, [0], True)
    await settle()
    assert await fetch(env, "g", [("old", [0]), ("new", [0]), ("t", [0])]) == {
        ("old", 0): (-1, E.none), ("new", 0): (8, E.none), ("t", 0): (9, E.none)}


async def test_expiry_keeps_offsets_and_groups_with_an_open_transaction():
    env = await started_env(offsets_retention_ms=60_000)
    c = env.coord
    await c.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 5), CommitRequest("t", 1, 5)])
    await txn_commit(env, offsets=[("t", 0, 9)])
    await txn_commit(env, "only-txn", offsets=[("t", 0, 9)])
    env.clock.sleep(120)
    assert c.cleanup_expired_offsets() == 1  # t-1 only: t-0 has a transaction open
    assert await fetch(env, "g", [("t", [0, 1])]) == {("t", 0): (5, E.none), ("t", 1): (-1, E.none)}
    assert "g" in c.groups and "only-txn" in c.groups  # open transactions keep their groups
    c.on_txn_completed(PID, [0], False)
    env.clock.sleep(120)
    assert c.cleanup_expired_offsets() == 1
    assert "g" not in c.groups and "only-txn" not in c.groups


async def test_replay_rebuilds_pending_committed_and_aborted_transactions():
    env = await started_env()
    c, log = env.coord, env.log
    await c.commit_offsets("g", "", None, -1, [CommitRequest("t", 0, 1), CommitRequest("t", 3, 1)])
    await txn_commit(env, offsets=[("t", 0, 10), ("t", 1, 10)], pid=1)  # committed
    await txn_commit(env, offsets=[("t", 2, 20)], pid=2)  # aborted
    await txn_commit(env, offsets=[("t", 3, 30)], pid=3)  # committed, but a regular commit follows it
    await c.commit_offsets("g", "", None, -1, [CommitRequest("t", 3, 3)])
    await txn_commit(env, offsets=[("t", 4, 40)], pid=4)  # still open
    await txn_commit(env, "gone", offsets=[("t", 0, 50)], pid=5)  # open, group deleted
    await c.delete_groups(["gone"])
    for pid, commit in ((1, True), (2, False), (3, True)):
        log.append_marker(0, pid, EPOCH, commit)
        c.on_txn_completed(pid, [0], commit)
    before = await fetch(env, "g", [("t", range(5))], require_stable=True)
    assert before == {("t", 0): (10, E.none), ("t", 1): (10, E.none), ("t", 2): (-1, E.none),
                      ("t", 3): (3, E.none), ("t", 4): (-1, E.unstable_offset_commit)}

    env2 = make_env(log=log, clock=env.clock)  # a restarted broker on the same log
    c2: GroupCoordinator = env2.coord
    c2.start_loading(0)
    await c2.wait_loaded()
    assert await fetch(env2, "g", [("t", range(5))], require_stable=True) == before
    assert "gone" not in c2.groups
    log.append_marker(0, 4, EPOCH, True)
    c2.on_txn_completed(4, [0], True)
    assert (await fetch(env2, "g", [("t", [4])], require_stable=True)) == {("t", 4): (40, E.none)}


async def test_pending_offsets_alone_bring_back_a_simple_group():
    env = await started_env()
    await txn_commit(env, "s", offsets=[("t", 0, 7)])
    env2 = make_env(log=env.log, clock=env.clock)
    env2.coord.start_loading(0)
    await env2.coord.wait_loaded()
    assert env2.group("s").state is S.EMPTY
    assert await fetch(env2, "s", [("t", [0])], require_stable=True) == {("t", 0): (-1, E.unstable_offset_commit)}
    env2.coord.on_txn_completed(PID, [0], True)
    assert await fetch(env2, "s", [("t", [0])]) == {("t", 0): (7, E.none)}


async def test_a_transaction_ending_while_the_partition_loads_applies_after_the_load():
    env = await started_env()
    await txn_commit(env, offsets=[("t", 0, 7)])
    env2 = make_env(log=env.log, clock=env.clock)
    task = env2.coord.start_loading(0)
    env.log.append_marker(0, PID, EPOCH, True)  # the replay may or may not read it
    env2.coord.on_txn_completed(PID, [0], True)
    assert env2.coord.status("g") == E.coordinator_load_in_progress
    await task
    assert await fetch(env2, "g", [("t", [0])], require_stable=True) == {("t", 0): (7, E.none)}
    env2.coord.on_txn_completed(PID, [1], True)  # not ours: nothing happens
    env2.coord.unload_partition(0)
    assert env2.coord._txn_ended_while_loading == {}


async def test_unload_forgets_pending_offsets():
    env = await started_env()
    await txn_commit(env)
    env.coord.unload_partition(0)
    assert env.coord.offsets.txn_producers() == []
    assert await txn_commit(env) == {("t", 0): E.not_coordinator}


async def test_pending_commit_survives_concurrent_marker():
    """A marker committed while the TxnOffsetCommit's own wait is still parked: the offsets
    materialize, and the commit's late completion does not undo them."""
    env = await started_env()
    env.log.hold()
    task = asyncio.ensure_future(txn_commit(env))
    await settle()
    env.coord.on_txn_completed(PID, [0], True)
    env.log.release()
    assert await task == {("t", 0): E.none}
    assert await fetch(env, "g", [("t", [0])], require_stable=True) == {("t", 0): (10, E.none)}


# -- a property: the replay of the log rebuilds exactly the live state ----------------------------

GROUPS, PARTS, PIDS = ("a", "b"), (0, 1), (1, 2, 3)
OPS = st.lists(st.one_of(
    st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.sampled_from(PARTS), st.integers(0, 99)),
    st.tuples(st.just("txn"), st.sampled_from(PIDS), st.sampled_from(GROUPS), st.sampled_from(PARTS),
              st.integers(0, 99)),
    st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("delete"), st.sampled_from(GROUPS), st.sampled_from(PARTS)),
    st.tuples(st.just("delete_group"), st.sampled_from(GROUPS)),
), max_size=25)


async def _view(env) -> dict:
    out = {}
    for g in GROUPS:
        for stable in (False, True):
            out[(g, stable)] = await fetch(env, g, [("t", list(PARTS))], require_stable=stable)
    return out


async def _live_and_replayed(ops) -> tuple[dict, dict]:
    env = await started_env()
    c = env.coord
    for op in ops:
        if op[0] == "commit":
            await c.commit_offsets(op[1], "", None, -1, [CommitRequest("t", op[2], op[3])])
        elif op[0] == "txn":
            await txn_commit(env, op[2], [("t", op[3], op[4])], pid=op[1])
        elif op[0] == "end":
            env.log.append_marker(0, op[1], EPOCH, op[2])
            c.on_txn_completed(op[1], [0], op[2])
        elif op[0] == "delete":
            await c.delete_offsets(op[1], [("t", [op[2]])])
        else:
            await c.delete_groups([op[1]])
    live = await _view(env)
    env2 = make_env(log=env.log, clock=env.clock)
    env2.coord.start_loading(0)
    await env2.coord.wait_loaded()
    return live, await _view(env2)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_replay_rebuilds_the_live_state(ops):
    live, replayed = asyncio.run(_live_and_replayed(ops))
    assert replayed == live
