"""Transactions in the producer state of one partition: ongoing transactions, completion by a
marker, the last stable offset, the epoch/coordinator-epoch/txn-state rules, snapshots. Exact
examples, then a Hypothesis property over random interleavings of several producers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.storage.producer_state import CompletedTxn, ProducerStateError, ProducerStateManager

A, B, C = 1000, 2000, 3000


def txn_batch(m: ProducerStateManager, pid: int, first: int, n: int = 1, *, epoch: int = 0, seq: int = 0) -> None:
    m.update(pid, epoch, seq, seq + n - 1, first, first + n - 1, 100 + first, True)


def test_first_transactional_batch_opens_a_transaction_and_later_ones_keep_its_first_offset() -> None:
    m = ProducerStateManager()
    txn_batch(m, A, 5, 3)
    txn_batch(m, A, 9, 2, seq=3)
    assert m.ongoing_txn_first_offset(A) == 5
    assert m.ongoing_transactions() == [(A, 0, 5)]
    assert m.get(A).current_txn_first_offset == 5


def test_plain_idempotent_batches_open_nothing() -> None:
    m = ProducerStateManager()
    m.update(A, 0, 0, 0, 3, 3, 100)
    assert m.ongoing_txn_first_offset(A) is None
    assert not m.has_transactions
    assert m.last_stable_offset(50) == 50


def test_marker_completes_the_transaction_and_it_stays_unstable_until_the_hw_passes_the_marker() -> None:
    m = ProducerStateManager()
    txn_batch(m, A, 5, 3)  # 5..7
    assert m.last_stable_offset(8) == 5
    done = m.complete_txn(A, 0, 3, False, 8, 200)  # abort marker at 8
    assert done == CompletedTxn(A, 5, 8, True)
    assert m.ongoing_txn_first_offset(A) is None
    assert m.last_stable_offset(8) == 5  # the marker is not below the HW yet
    assert m.last_stable_offset(9) == 9
    assert not m.has_transactions  # forgotten once the HW passed it
    e = m.get(A)
    assert (e.coordinator_epoch, e.last_timestamp, e.current_txn_first_offset) == (3, 200, -1)


def test_lso_is_the_earliest_open_transaction_over_producers() -> None:
    m = ProducerStateManager()
    txn_batch(m, A, 2)
    txn_batch(m, B, 4)
    txn_batch(m, A, 6, seq=1)
    assert m.last_stable_offset(10) == 2
    assert m.last_stable_offset(1) == 1  # never above the HW
    m.complete_txn(A, 0, 0, True, 7, 0)
    assert m.last_stable_offset(10) == 4
    m.complete_txn(B, 0, 0, True, 8, 0)
    assert m.last_stable_offset(10) == 10
    assert m.ongoing_transactions() == []


def test_next_unstable_after_is_the_earliest_other_producers_open_transaction() -> None:
    m = ProducerStateManager()
    txn_batch(m, A, 2)
    txn_batch(m, B, 4)
    txn_batch(m, C, 6)
    t = m.complete_txn(B, 0, 0, False, 7, 0)
    assert m.next_unstable_after(t) == 2
    t = m.complete_txn(A, 0, 0, False, 8, 0)
    assert m.next_unstable_after(t) == 6
    t = m.complete_txn(C, 0, 0, False, 9, 0)
    assert m.next_unstable_after(t) == 10


def test_a_marker_without_an_ongoing_transaction_completes_nothing_but_updates_the_epochs() -> None:
    m = ProducerStateManager()
    assert m.complete_txn(A, 3, 7, True, 10, 55) is None
    e = m.get(A)
    assert (e.epoch, e.coordinator_epoch, e.last_timestamp) == (3, 7, 55)
    m.update(A, 3, 0, 0, 11, 11, 60)
    assert m.complete_txn(A, 3, 7, False, 12, 61) is None


def test_marker_with_a_new_epoch_forgets_the_batches() -> None:
    m = ProducerStateManager()
    txn_batch(m, A, 0, epoch=1)
    m.complete_txn(A, 2, 0, True, 1, 0)  # KIP-890: the marker bumps the epoch
    e = m.get(A)
    assert e.epoch == 2 and e.batches == []


def test_marker_rules() -> None:
    m = ProducerStateManager()
    m.check_marker(A, 0, 0)  # unknown producer: accepted
    txn_batch(m, A, 0, epoch=5)
    m.complete_txn(A, 5, 4, True, 1, 0)
    with pytest.raises(ProducerStateError) as e:
        m.check_marker(A, 4, 9)
    assert e.value.code == "INVALID_PRODUCER_EPOCH"
    with pytest.raises(ProducerStateError) as e:
        m.check_marker(A, 5, 3)
    assert e.value.code == "TRANSACTION_COORDINATOR_FENCED"
    m.check_marker(A, 5, 4)
    m.check_marker(A, 6, 4)


def test_non_transactional_batch_during_a_transaction_is_invalid_txn_state() -> None:
    m = ProducerStateManager()
    txn_batch(m, A, 0, 2)
    with pytest.raises(ProducerStateError) as e:
        m.check(A, 0, 2, 2, False)
    assert e.value.code == "INVALID_TXN_STATE"
    assert m.check(A, 0, 2, 2, True) is None
    # a retry of a batch already in the transaction is still a duplicate, not an error
    assert m.check(A, 0, 0, 1, False) is not None
    m.complete_txn(A, 0, 0, True, 2, 0)
    assert m.check(A, 0, 2, 2, False) is None


def test_coordinator_origin_epoch_check() -> None:
    m = ProducerStateManager()
    m.check_epoch(A, 0)
    txn_batch(m, A, 0, epoch=3)
    m.check_epoch(A, 3)
    with pytest.raises(ProducerStateError) as e:
        m.check_epoch(A, 2)
    assert e.value.code == "INVALID_PRODUCER_EPOCH"


def test_snapshot_round_trip_keeps_ongoing_transactions() -> None:
    m = ProducerStateManager()
    txn_batch(m, A, 3, 2)
    txn_batch(m, B, 7)
    m.complete_txn(B, 0, 2, True, 8, 0)
    m2 = ProducerStateManager.from_snapshot(m.to_snapshot())
    assert m2.ongoing_transactions() == [(A, 0, 3)]
    assert m2.ongoing_txn_first_offset(A) == 3
    assert m2.get(B).coordinator_epoch == 2
    assert m2.last_stable_offset(20) == 3
    m2.complete_txn(A, 0, 0, False, 9, 0)
    assert m2.last_stable_offset(20) == 20


def test_expiry_keeps_producers_with_an_open_transaction() -> None:
    m = ProducerStateManager()
    txn_batch(m, A, 0)
    m.update(B, 0, 0, 0, 1, 1, 101)
    assert m.remove_expired(10**9, 1000) == 1
    assert m.get(A) is not None and m.get(B) is None


# -- the property ---------------------------------------------------------------------------------

PIDS = (A, B, C)
op = st.one_of(
    st.tuples(st.just("data"), st.sampled_from(PIDS), st.integers(1, 4)),
    st.tuples(st.just("marker"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("hw"), st.integers(0, 3)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=60))
def test_lso_and_aborted_ranges_over_random_interleavings(ops) -> None:
    """A model: per producer its open transaction's first offset; completed transactions with
    their marker offset. LSO == min(first offset of every transaction open or whose marker is not
    below the HW, HW); the aborted transactions reported are exactly the aborted ones."""
    m = ProducerStateManager()
    offset = 0
    hw = 0
    open_: dict[int, int] = {}
    completed: list[CompletedTxn] = []
    seqs = dict.fromkeys(PIDS, 0)
    reported: list[CompletedTxn] = []
    for o in ops:
        if o[0] == "data":
            _, pid, n = o
            m.update(pid, 0, seqs[pid], seqs[pid] + n - 1, offset, offset + n - 1, 0, True)
            seqs[pid] += n
            open_.setdefault(pid, offset)
            offset += n
        elif o[0] == "marker":
            _, pid, commit = o
            m.check_marker(pid, 0, 0)
            done = m.complete_txn(pid, 0, 0, commit, offset, 0)
            if pid in open_:
                completed.append(CompletedTxn(pid, open_.pop(pid), offset, not commit))
                assert done == completed[-1]
                reported.append(done)
            else:
                assert done is None
            offset += 1
        else:
            hw = min(offset, hw + o[1])
        unstable = list(open_.values()) + [t.first_offset for t in completed if t.last_offset >= hw]
        assert m.last_stable_offset(hw) == min(unstable + [hw])
        assert sorted(m.ongoing_transactions()) == sorted((p, 0, f) for p, f in open_.items())
    assert [t for t in reported if t.is_aborted] == [t for t in completed if t.is_aborted]
