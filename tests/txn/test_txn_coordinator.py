"""The transaction coordinator's state machine on an in-memory log (shoal.groups.MemoryCoordinatorLog)
and a marker writer that records what it was asked: every transition, its record and its answer."""

import asyncio

import pytest

from shoal.clock import ManualClock
from shoal.groups import MemoryCoordinatorLog
from shoal.protocol.errors import ErrorCode
from shoal.txn import TransactionCoordinator, TxnConfig, TxnState
from shoal.txn.metadata import MAX_EPOCH
from shoal.txn.records import decode_key, decode_value, encode_key, encode_value, TxnLogValue

E = ErrorCode


class FakeMarkers:
    def __init__(self):
        self.sent = []
        self.result = True
        self.gate: asyncio.Event | None = None

    async def send(self, pid, epoch, coordinator_epoch, commit, partitions, still_valid):
        self.sent.append((pid, epoch, coordinator_epoch, commit, tuple(partitions)))
        if self.gate is not None:
            await self.gate.wait()
        return self.result

    async def close(self):
        pass


class Ids:
    def __init__(self, first=1000):
        self.n = first

    async def __call__(self):
        self.n += 1
        return self.n - 1


async def coordinator(log=None, clock=None, **cfg) -> TransactionCoordinator:
    c = TransactionCoordinator(clock=clock or ManualClock(), log=log or MemoryCoordinatorLog(),
                               config=TxnConfig(**cfg), next_producer_id=Ids(), markers=FakeMarkers(),
                               num_partitions=1)
    await c.start_loading(0, coordinator_epoch=5)
    return c


def records(c):
    return [(decode_key(k), None if v is None else decode_value(v)) for k, v in c.log.all()]


async def settle(c):
    for _ in range(20):
        await asyncio.sleep(0)
    while c._tasks:
        await asyncio.gather(*list(c._tasks), return_exceptions=True)


async def test_init_new_id_then_bump():
    c = await coordinator()
    r = await c.init_producer_id("tx", 60000)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, 1000, 0)
    (tid, v), = records(c)
    assert tid == "tx" and (v.producer_id, v.producer_epoch, v.state, v.timeout_ms) == (1000, 0, TxnState.EMPTY, 60000)
    r = await c.init_producer_id("tx", 30000)  # a new instance: same id, epoch + 1
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, 1000, 1)
    assert records(c)[-1][1].timeout_ms == 30000


async def test_invalid_requests():
    c = await coordinator(max_timeout_ms=1000)
    assert (await c.init_producer_id("tx", 1001)).error == E.invalid_transaction_timeout
    assert (await c.init_producer_id("tx", 0)).error == E.invalid_transaction_timeout
    assert (await c.init_producer_id("", 100)).error == E.invalid_request
    assert await c.add_partitions("nope", 1, 0, [("t", 0)]) == E.invalid_producer_id_mapping
    r = await c.init_producer_id("tx", 100)
    assert await c.add_partitions("tx", r.producer_id + 1, 0, [("t", 0)]) == E.invalid_producer_id_mapping
    assert await c.add_partitions("tx", r.producer_id, 1, [("t", 0)]) == E.producer_fenced
    assert await c.end_txn("tx", r.producer_id, 0, True) == E.invalid_txn_state  # Empty
    assert c.log.all()[-1:] == c.log.all()[-1:] and len(c.log.all()) == 1  # nothing more written


async def test_commit_writes_prepare_markers_then_complete():
    c = await coordinator()
    r = await c.init_producer_id("tx", 60000)
    pid = r.producer_id
    assert await c.add_partitions("tx", pid, 0, [("t", 0), ("t", 1)]) == E.none
    assert await c.add_partitions("tx", pid, 0, [("t", 1)]) == E.none  # already in: nothing written
    assert await c.add_partitions("tx", pid, 0, [("u", 0)]) == E.none
    assert [v.state for _, v in records(c)] == [TxnState.EMPTY, TxnState.ONGOING, TxnState.ONGOING]
    assert records(c)[-1][1].partitions == (("t", (0, 1)), ("u", (0,)))
    assert c.verify_partitions("tx", pid, 0, [("t", 0), ("v", 0)]) == {("t", 0): E.none, ("v", 0): E.invalid_txn_state}
    assert await c.end_txn("tx", pid, 0, True) == E.none
    await settle(c)
    assert c.markers.sent == [(pid, 0, 5, True, (("t", 0), ("t", 1), ("u", 0)))]
    states = [v.state for _, v in records(c)]
    assert states[-2:] == [TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    assert records(c)[-1][1].partitions == ()
    assert await c.end_txn("tx", pid, 0, True) == E.none  # a retry of the commit
    assert await c.end_txn("tx", pid, 0, False) == E.invalid_txn_state
    assert await c.end_txn("tx", pid, 1, True) == E.producer_fenced
    # the next transaction starts from CompleteCommit with only its own partitions
    assert await c.add_partitions("tx", pid, 0, [("w", 3)]) == E.none
    assert c.txns["tx"].partitions == {("w", 3)} and c.txns["tx"].state is TxnState.ONGOING


async def test_concurrent_transactions_while_markers_and_writes_are_pending():
    c = await coordinator()
    pid = (await c.init_producer_id("tx", 60000)).producer_id
    await c.add_partitions("tx", pid, 0, [("t", 0)])
    c.markers.gate = asyncio.Event()
    c.completion_wait_s = 0.05
    assert await c.end_txn("tx", pid, 0, False) == E.none
    await asyncio.sleep(0)
    assert c.txns["tx"].state is TxnState.PREPARE_ABORT
    # waits (completion_wait_s) for the markers, which do not come: CONCURRENT_TRANSACTIONS
    assert await c.add_partitions("tx", pid, 0, [("t", 0)]) == E.concurrent_transactions
    assert (await c.init_producer_id("tx", 60000)).error == E.concurrent_transactions
    assert await c.end_txn("tx", pid, 0, False) == E.concurrent_transactions
    assert await c.end_txn("tx", pid, 0, True) == E.concurrent_transactions  # pending Complete
    c.markers.gate.set()
    await settle(c)
    assert c.txns["tx"].state is TxnState.COMPLETE_ABORT
    # a write in flight (acks=all not reached yet)
    c.log.hold()
    task = asyncio.ensure_future(c.add_partitions("tx", pid, 0, [("t", 1)]))
    await asyncio.sleep(0)
    assert await c.add_partitions("tx", pid, 0, [("t", 2)]) == E.concurrent_transactions
    c.log.release()
    assert await task == E.none


async def test_next_transaction_waits_for_the_previous_ones_markers():
    """AddPartitionsToTxn right after EndTxn (the id still in Prepare*) is answered once Complete*
    is written, not with CONCURRENT_TRANSACTIONS and a client retry backoff."""
    c = await coordinator()
    pid = (await c.init_producer_id("tx", 60000)).producer_id
    await c.add_partitions("tx", pid, 0, [("t", 0)])
    c.markers.gate = asyncio.Event()
    assert await c.end_txn("tx", pid, 0, True) == E.none
    add = asyncio.ensure_future(c.add_partitions("tx", pid, 0, [("t", 1)]))
    offsets = asyncio.ensure_future(c.add_partitions("tx", pid, 0, [("__consumer_offsets", 3)]))
    await asyncio.sleep(0.01)
    assert not add.done() and c.txns["tx"].state is TxnState.PREPARE_COMMIT
    c.markers.gate.set()
    assert await add == E.none and await offsets == E.none
    md = c.txns["tx"]
    assert md.state is TxnState.ONGOING and md.partitions == {("t", 1), ("__consumer_offsets", 3)}
    states = [v.state for _, v in records(c)]
    assert states[-4:-2] == [TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    # the coordinator moved away meanwhile: the waiter is told so
    c.markers.gate = asyncio.Event()
    assert await c.end_txn("tx", pid, 0, False) == E.none
    stale = asyncio.ensure_future(c.add_partitions("tx", pid, 0, [("t", 0)]))
    await asyncio.sleep(0.01)
    c.unload_partition(0)
    c.markers.gate.set()
    assert await stale == E.not_coordinator
    await settle(c)


async def test_new_instance_fences_and_aborts_the_ongoing_transaction():
    c = await coordinator()
    pid = (await c.init_producer_id("tx", 60000)).producer_id
    await c.add_partitions("tx", pid, 0, [("t", 0)])
    r = await c.init_producer_id("tx", 60000)
    assert r.error == E.concurrent_transactions
    await settle(c)
    assert c.markers.sent == [(pid, 1, 5, False, (("t", 0),))]  # the abort, with the bumped epoch
    assert [v.state for _, v in records(c)][-2:] == [TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT]
    assert records(c)[-2][1].producer_epoch == 1
    r = await c.init_producer_id("tx", 60000)  # the client's retry
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, pid, 2)
    assert await c.add_partitions("tx", pid, 0, [("t", 0)]) == E.producer_fenced  # the zombie
    assert await c.end_txn("tx", pid, 1, True) == E.producer_fenced


async def test_kip360_expected_epoch():
    c = await coordinator()
    pid = (await c.init_producer_id("tx", 60000)).producer_id
    r = await c.init_producer_id("tx", 60000, pid, 0)
    assert (r.error, r.producer_epoch) == (E.none, 1)
    r = await c.init_producer_id("tx", 60000, pid, 0)  # a retry of that bump: same answer
    assert (r.error, r.producer_epoch) == (E.none, 1)
    assert (await c.init_producer_id("tx", 60000, pid + 7, 3)).error == E.producer_fenced
    assert (await c.init_producer_id("tx", 60000, pid, 5)).error == E.producer_fenced


async def test_exhausted_epoch_rotates_the_producer_id():
    log = MemoryCoordinatorLog()
    value = TxnLogValue(42, MAX_EPOCH - 1, 1000, TxnState.COMPLETE_COMMIT, (), 1, 1)
    log.append(0, [(encode_key("tx"), encode_value(value))], 0)
    c = await coordinator(log)
    r = await c.init_producer_id("tx", 1000)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, 1000, 0)
    assert c.txns["tx"].last_producer_id == 42


async def test_timed_out_transaction_is_aborted_with_a_bumped_epoch():
    clock = ManualClock()
    c = await coordinator(clock=clock)
    pid = (await c.init_producer_id("tx", 1000)).producer_id
    await c.add_partitions("tx", pid, 0, [("t", 0)])
    clock.sleep(0.9)
    assert c.abort_timed_out() == 0
    clock.sleep(0.2)
    assert c.abort_timed_out() == 1
    await settle(c)
    assert c.markers.sent == [(pid, 1, 5, False, (("t", 0),))]
    assert c.txns["tx"].state is TxnState.COMPLETE_ABORT and c.txns["tx"].producer_epoch == 1
    assert await c.end_txn("tx", pid, 0, True) == E.producer_fenced  # the producer finds itself fenced


async def test_idle_ids_expire_with_a_tombstone():
    clock = ManualClock()
    c = await coordinator(clock=clock, id_expiration_ms=10_000)
    pid = (await c.init_producer_id("idle", 1000)).producer_id
    await c.init_producer_id("busy", 1000)
    await c.add_partitions("busy", pid + 1, 0, [("t", 0)])
    clock.sleep(11)
    assert c.expire_ids() == 1  # an Ongoing id never expires
    await settle(c)
    assert "idle" not in c.txns and "busy" in c.txns
    assert records(c)[-1] == ("idle", None)
    assert c.describe("idle")[0] == E.transactional_id_not_found


async def test_load_completes_prepared_transactions_and_skips_tombstones():
    log = MemoryCoordinatorLog()
    rows = [
        ("a", TxnLogValue(1, 0, 1000, TxnState.PREPARE_COMMIT, (("t", (0, 1)),), 5, 4)),
        ("b", TxnLogValue(2, 3, 1000, TxnState.PREPARE_ABORT, (("t", (2,)),), 5, 4)),
        ("c", TxnLogValue(3, 0, 1000, TxnState.ONGOING, (("t", (0,)),), 5, 4)),
        ("d", TxnLogValue(4, 0, 1000, TxnState.COMPLETE_COMMIT, (), 5, 4)),
    ]
    log.append(0, [(encode_key(t), encode_value(v)) for t, v in rows] + [(encode_key("d"), None)], 0)
    c = await coordinator(log)
    await settle(c)
    assert sorted(c.markers.sent) == [(1, 0, 5, True, (("t", 0), ("t", 1))), (2, 3, 5, False, (("t", 2),))]
    assert c.txns["a"].state is TxnState.COMPLETE_COMMIT and c.txns["b"].state is TxnState.COMPLETE_ABORT
    assert c.txns["c"].state is TxnState.ONGOING and "d" not in c.txns
    code, listed, unknown = c.list(["Ongoing", "Bogus"])
    assert code == E.none and [m.transactional_id for m in listed] == ["c"] and unknown == ["Bogus"]
    assert [m.transactional_id for m in c.list(producer_ids=[2])[1]] == ["b"]


async def test_unloaded_partition_answers_not_coordinator():
    c = await coordinator()
    await c.init_producer_id("tx", 1000)
    c.unload_partition(0)
    assert (await c.init_producer_id("tx", 1000)).error == E.not_coordinator
    assert c.verify_partitions("tx", 1000, 0, [("t", 0)]) == {("t", 0): E.not_coordinator}
    assert "tx" not in c.txns


async def test_fenced_markers_leave_the_transaction_prepared():
    c = await coordinator()
    pid = (await c.init_producer_id("tx", 1000)).producer_id
    await c.add_partitions("tx", pid, 0, [("t", 0)])
    c.markers.result = False
    assert await c.end_txn("tx", pid, 0, True) == E.none
    await settle(c)
    assert c.txns["tx"].state is TxnState.PREPARE_COMMIT and not c.txns["tx"].pending_in_progress


async def test_failed_write_keeps_the_state():
    c = await coordinator()
    pid = (await c.init_producer_id("tx", 1000)).producer_id
    c.log.fail_with = E.not_leader_or_follower
    assert await c.add_partitions("tx", pid, 0, [("t", 0)]) == E.not_coordinator
    c.log.fail_with = E.request_timed_out
    assert await c.add_partitions("tx", pid, 0, [("t", 0)]) == E.coordinator_not_available
    assert c.txns["tx"].state is TxnState.EMPTY and not c.txns["tx"].pending_in_progress
    c.log.fail_with = None
    assert await c.add_partitions("tx", pid, 0, [("t", 0)]) == E.none


async def test_a_record_of_a_newer_value_version_is_skipped_at_load_not_misread(caplog):
    """docs/upgrades.md: a TransactionLogValue of a version this release does not read is skipped
    with one warning; the transactional id keeps the last value read."""
    import struct

    log = MemoryCoordinatorLog()
    value = TxnLogValue(42, 3, 1000, TxnState.COMPLETE_COMMIT, (), 1, 1)
    log.append(0, [(encode_key("tx"), encode_value(value))], 0)
    log.append(0, [(encode_key("tx"), struct.pack(">hqh", 2, 77, 9) + b"\x00" * 20)], 0)
    with caplog.at_level("WARNING", logger="shoal.txn"):
        c = await coordinator(log)
    assert (c.txns["tx"].producer_id, c.txns["tx"].producer_epoch) == (42, 3)
    assert "__transaction_state-0 offset 1: skipping a record: unknown TransactionLogValue version 2" in caplog.text
