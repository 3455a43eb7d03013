"""Transaction version 2 (KIP-890 part 2), pure: EndTxn v5's decision and the transitions it writes."""

from __future__ import annotations

import asyncio

import pytest

from shoal.protocol.errors import ErrorCode as E
from shoal.txn.coordinator import end_v2_decision
from shoal.txn.metadata import MAX_EPOCH, TransactionMetadata
from shoal.txn.records import TxnLogValue, TxnState, decode_value, encode_value

PID = 10


def md(state: TxnState, epoch: int = 5, **kw) -> TransactionMetadata:
    parts = {("t", 0)} if state is not TxnState.EMPTY else set()
    return TransactionMetadata("tx", PID, producer_epoch=epoch, state=state, partitions=parts, **kw)


@pytest.mark.parametrize("state,epoch,commit,want", [
    (TxnState.ONGOING, 5, True, True),
    (TxnState.ONGOING, 5, False, True),
    (TxnState.ONGOING, 4, True, E.producer_fenced),
    (TxnState.EMPTY, 5, False, True),  # an abort with nothing the coordinator knows of
    (TxnState.EMPTY, 5, True, E.invalid_txn_state),
    (TxnState.COMPLETE_COMMIT, 4, True, E.none),  # a retry: the epoch before the bump
    (TxnState.COMPLETE_COMMIT, 4, False, E.invalid_txn_state),
    (TxnState.COMPLETE_COMMIT, 5, False, True),  # the next transaction's abort
    (TxnState.COMPLETE_COMMIT, 5, True, E.invalid_txn_state),
    (TxnState.COMPLETE_COMMIT, 3, True, E.producer_fenced),
    (TxnState.COMPLETE_ABORT, 4, False, E.none),
    (TxnState.COMPLETE_ABORT, 5, False, True),
    (TxnState.COMPLETE_ABORT, 4, True, E.invalid_txn_state),
    (TxnState.PREPARE_COMMIT, 4, True, E.concurrent_transactions),
    (TxnState.PREPARE_COMMIT, 4, False, E.invalid_txn_state),
    (TxnState.PREPARE_COMMIT, 5, True, E.producer_fenced),  # Kafka: only a retry may name a Prepare*
    (TxnState.PREPARE_ABORT, 4, False, E.concurrent_transactions),
])
def test_end_v2_decision(state, epoch, commit, want):
    assert end_v2_decision(md(state), PID, epoch, commit) == want


def test_end_v2_decision_ids_and_pending():
    assert end_v2_decision(md(TxnState.ONGOING), PID + 1, 5, True) == E.invalid_producer_id_mapping
    m = md(TxnState.ONGOING)
    m.pending = TxnState.PREPARE_COMMIT
    assert end_v2_decision(m, PID, 5, True) == E.concurrent_transactions
    # after a rotation: the old id at its last epoch is a retry
    rotated = TransactionMetadata("tx", 11, last_producer_id=PID, producer_epoch=0, state=TxnState.COMPLETE_COMMIT)
    assert end_v2_decision(rotated, PID, MAX_EPOCH - 1, True) == E.none
    assert end_v2_decision(rotated, PID, MAX_EPOCH - 2, True) == E.invalid_producer_id_mapping


def test_prepare_end_v2_bumps_and_completes():
    m = md(TxnState.ONGOING)
    t = m.prepare_end_v2(True, 100)
    assert (t.state, t.producer_id, t.producer_epoch, t.last_producer_epoch) == (TxnState.PREPARE_COMMIT, PID, 6, 5)
    assert t.client_transaction_version == 2 and t.log_version == 1 and t.partitions == {("t", 0)}
    m.complete(t)
    assert m.client_identity() == (PID, 6)
    c = m.prepare_complete(200)
    assert (c.state, c.producer_id, c.producer_epoch, c.partitions, c.log_version) == (
        TxnState.COMPLETE_COMMIT, PID, 6, frozenset(), 1)


def test_prepare_end_v2_rotates_an_exhausted_epoch():
    m = md(TxnState.ONGOING, epoch=MAX_EPOCH - 1)
    assert m.epoch_exhausted
    t = m.prepare_end_v2(False, 100, next_producer_id=11)
    assert (t.producer_id, t.producer_epoch, t.next_producer_id) == (PID, MAX_EPOCH, 11)
    m.complete(t)
    assert m.client_identity() == (11, 0)
    v = t.log_value()
    assert decode_value(encode_value(v, t.log_version)) == v  # the next producer id survives a reload
    reloaded = TransactionMetadata.from_log("tx", decode_value(encode_value(v, 1)))
    c = reloaded.prepare_complete(200)
    assert (c.state, c.producer_id, c.producer_epoch, c.last_producer_id, c.next_producer_id) == (
        TxnState.COMPLETE_ABORT, 11, 0, PID, -1)


def test_abort_of_an_idle_id_has_no_partitions():
    m = TransactionMetadata("tx", PID, producer_epoch=5, state=TxnState.COMPLETE_COMMIT, start_ms=1)
    t = m.prepare_end_v2(False, 100)
    assert (t.state, t.partitions, t.start_ms, t.producer_epoch) == (TxnState.PREPARE_ABORT, frozenset(), 100, 6)
    assert not t.fence


def test_version_1_transitions_are_written_as_before():
    m = md(TxnState.ONGOING)
    t = m.prepare_end(True, 100)
    assert t.log_version == 0 and t.producer_epoch == 5
    assert encode_value(t.log_value(), t.log_version) == encode_value(
        TxnLogValue(PID, 5, 60000, TxnState.PREPARE_COMMIT, (("t", (0,)),), 100, -1))
    m.abort_pending()
    assert m.prepare_fence_abort(100).fence
    m.abort_pending()
    assert m.prepare_add_partitions({("t", 1)}, 100).client_transaction_version == 0
    m.abort_pending()
    assert m.prepare_add_partitions({("t", 1)}, 100, 2).log_version == 1


# -- the coordinator, on an in-memory log ---------------------------------------------------------


async def test_end_txn_v2_commit_markers_and_records():
    from test_txn_coordinator import coordinator, records, settle

    c = await coordinator()
    r = await c.init_producer_id("tx", 60000)
    pid, e0 = r.producer_id, r.producer_epoch
    assert await c.verify("tx", pid, e0, [("t", 0), ("t", 1)], add=True) == {("t", 0): E.none, ("t", 1): E.none}
    res = await c.end_txn_v2("tx", pid, e0, True)
    assert (res.error, res.producer_id, res.producer_epoch) == (E.none, pid, e0 + 1)
    await settle(c)
    assert c.markers.sent == [(pid, e0 + 1, 5, True, (("t", 0), ("t", 1)))]  # the markers carry the new epoch
    states = [(v.state, v.producer_epoch, v.client_transaction_version) for _, v in records(c)]
    assert states == [(TxnState.EMPTY, 0, 0), (TxnState.ONGOING, 0, 2), (TxnState.PREPARE_COMMIT, 1, 2),
                      (TxnState.COMPLETE_COMMIT, 1, 2)]
    assert [k_v[1][:2] for k_v in c.log.all()] == [b"\x00\x00", b"\x00\x01", b"\x00\x01", b"\x00\x01"]
    # the old epoch is fenced; the version 1 EndTxn keeps its rules
    assert await c.add_partitions("tx", pid, e0, [("t", 0)], 2) == E.producer_fenced
    assert await c.end_txn("tx", pid, e0, True) == E.producer_fenced


async def test_end_txn_v2_rotates_the_producer_id_past_an_exhausted_epoch():
    from test_txn_coordinator import coordinator, records, settle

    c = await coordinator()
    r = await c.init_producer_id("tx", 60000)
    pid = r.producer_id
    c.txns["tx"].producer_epoch = MAX_EPOCH - 1  # as if many transactions went by
    assert await c.add_partitions("tx", pid, MAX_EPOCH - 1, [("t", 0)], 2) == E.none
    c.markers.gate = asyncio.Event()  # hold the markers: the id stays in PrepareAbort
    res = await c.end_txn_v2("tx", pid, MAX_EPOCH - 1, False)
    assert (res.error, res.producer_epoch) == (E.none, 0) and res.producer_id != pid
    new_pid = res.producer_id
    add = asyncio.ensure_future(c.add_partitions("tx", new_pid, 0, [("t", 1)], 2))  # waits for CompleteAbort
    await asyncio.sleep(0.01)
    assert not add.done()
    c.markers.gate.set()
    assert await add == E.none
    await settle(c)
    assert c.markers.sent[0][:2] == (pid, MAX_EPOCH)
    prepare = [v for _, v in records(c) if v.state is TxnState.PREPARE_ABORT][0]
    assert (prepare.producer_id, prepare.next_producer_id) == (pid, new_pid)
    complete = [v for _, v in records(c) if v.state is TxnState.COMPLETE_ABORT][0]
    assert (complete.producer_id, complete.producer_epoch, complete.previous_producer_id) == (new_pid, 0, pid)
    # the old id at its last epoch is a retry only while the id is Complete*: now Ongoing again, fenced
    assert (await c.end_txn_v2("tx", pid, MAX_EPOCH - 1, False)).error == E.producer_fenced
