"""Transactions in the partition log: transactional appends, markers, the last stable offset, the
aborted-transaction index (.txnindex) through rolls, restarts, kill -9 recovery, truncation,
follower appends, retention and compaction."""

from __future__ import annotations

import os
import struct

import pytest
from storage_helpers import T0

from shoal.protocol.records import build_batch, iter_records, parse_batches
from shoal.storage import LogConfig, PartitionLog, PartitionState, ProducerStateError
from shoal.storage.txn_index import ENTRY_SIZE, AbortedTxn, TxnIndex, decode_entries, marker_batch

A, B = 7000, 8000


def tbatch(pid: int, seq: int, n: int = 1, *, epoch: int = 0, key: bytes | None = None, tag: bytes = b"t") -> bytes:
    return build_batch(
        [(T0 + i, key, tag + b"%d" % (seq + i), []) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


def open_log(path, config: LogConfig | None = None, **kw) -> PartitionLog:
    return PartitionLog.open(path, config or LogConfig(), now_ms=T0, **kw)


def commit_hw(log: PartitionLog) -> None:
    log.high_watermark = log.log_end_offset


def txn_files(d) -> dict[int, list[AbortedTxn]]:
    out = {}
    for name in sorted(os.listdir(d)):
        if name.endswith(".txnindex"):
            data = (d / name).read_bytes()
            assert len(data) % ENTRY_SIZE == 0
            out[int(name[:20])] = decode_entries(data)
    return out


def test_lso_follows_open_transactions_and_the_hw(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(build_batch([(T0, None, b"plain", [])]), now_ms=T0)  # 0
    log.append(tbatch(A, 0, 2), now_ms=T0)  # 1-2
    log.append(tbatch(B, 0), now_ms=T0)  # 3
    commit_hw(log)
    assert log.last_stable_offset == 1
    assert log.ongoing_transactions() == [(A, 0, 1), (B, 0, 3)]
    assert log.ongoing_txn_first_offset(A) == 1 and log.ongoing_txn_first_offset(99) is None
    info = log.append_marker(A, 0, 5, True, now_ms=T0, leader_epoch=0)  # commit at 4
    assert (info.base_offset, info.last_offset) == (4, 4)
    assert log.last_stable_offset == 1  # the marker is not below the HW yet
    commit_hw(log)
    assert log.last_stable_offset == 3
    log.append_marker(B, 0, 5, False, now_ms=T0, leader_epoch=0)  # abort at 5
    commit_hw(log)
    assert log.last_stable_offset == 6 == log.high_watermark
    assert log.ongoing_transactions() == []
    assert log.aborted_transactions(0, 6) == [(B, 3)]
    assert log.aborted_transactions(4, 5) == [(B, 3)]  # overlaps [3, 5]
    assert log.aborted_transactions(0, 3) == []
    assert log.aborted_transactions(6, 7) == []
    assert txn_files(tmp_path / "t-0") == {0: [AbortedTxn(B, 3, 5, 6)]}
    # the marker is a control batch of the producer: key (0, type), value (0, coordinator epoch)
    data = log.read(4, 1 << 20).records
    batches = list(parse_batches(data))
    assert [(h.is_control, h.is_transactional, h.producer_id, h.base_sequence) for _p, h in batches][-2:] == [
        (True, True, A, -1),
        (True, True, B, -1),
    ]
    recs = list(iter_records(data))
    assert [(r.key, r.value) for r in recs] == [
        (struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 5)),
        (struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 5)),
    ]
    log.close()


def test_marker_rules_and_invalid_txn_state(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(tbatch(A, 0, epoch=3), now_ms=T0)
    end = log.log_end_offset
    with pytest.raises(ProducerStateError) as e:
        log.append_marker(A, 2, 0, True, now_ms=T0, leader_epoch=0)
    assert e.value.code == "INVALID_PRODUCER_EPOCH"
    with pytest.raises(ProducerStateError) as e:
        log.append(build_batch([(T0, None, b"x", [])], producer_id=A, producer_epoch=3, base_sequence=1), now_ms=T0)
    assert e.value.code == "INVALID_TXN_STATE"
    assert log.log_end_offset == end
    log.append_marker(A, 3, 4, False, now_ms=T0, leader_epoch=0)
    with pytest.raises(ProducerStateError) as e:
        log.append_marker(A, 3, 3, False, now_ms=T0, leader_epoch=0)
    assert e.value.code == "TRANSACTION_COORDINATOR_FENCED"
    # a marker for a producer with nothing open (or unknown) is appended and completes nothing
    info = log.append_marker(B, 0, 0, True, now_ms=T0, leader_epoch=0)
    assert info.base_offset == end + 1
    commit_hw(log)
    assert log.last_stable_offset == log.log_end_offset
    assert log.aborted_transactions(0, 100) == [(A, 0)]
    log.close()


def test_coordinator_origin_transactional_batch_without_sequence(tmp_path) -> None:
    """The group coordinator's TxnOffsetCommit: client=False, base sequence -1, transactional."""
    log = open_log(tmp_path / "t-0")
    b = build_batch([(T0, b"k", b"v", [])], producer_id=A, producer_epoch=2, base_sequence=-1, is_transactional=True)
    log.append(b, now_ms=T0, client=False)
    log.append(b, now_ms=T0, client=False)  # no sequence check, same transaction
    assert log.ongoing_transactions() == [(A, 2, 0)]
    with pytest.raises(ProducerStateError):
        log.append(
            build_batch([(T0, b"k", b"v", [])], producer_id=A, producer_epoch=1, base_sequence=-1, is_transactional=True),
            now_ms=T0,
            client=False,
        )
    log.append_marker(A, 2, 0, True, now_ms=T0, leader_epoch=0)
    assert log.ongoing_transactions() == []
    log.close()


def test_aborted_transaction_spanning_segments_is_found_from_its_first_segment(tmp_path) -> None:
    size = max(len(tbatch(A, 0)), len(marker_batch(A, 0, 0, False, T0)))
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=size * 2))
    log.append(tbatch(A, 0), now_ms=T0)  # 0
    log.append(tbatch(B, 0), now_ms=T0)  # 1
    log.append(tbatch(A, 1), now_ms=T0)  # 2 (second segment)
    log.append(tbatch(A, 2), now_ms=T0)  # 3
    log.append_marker(A, 0, 0, False, now_ms=T0, leader_epoch=0)  # 4 (third segment)
    log.append_marker(B, 0, 0, False, now_ms=T0, leader_epoch=0)  # 5
    assert log.segment_bases() == [0, 2, 4]
    assert txn_files(tmp_path / "t-0") == {4: [AbortedTxn(A, 0, 4, 1), AbortedTxn(B, 1, 5, 6)]}
    assert log.aborted_transactions(0, 1) == [(A, 0)]  # the search stops at the entry whose LSO reaches 1
    assert log.aborted_transactions(0, 2) == [(A, 0), (B, 1)]
    assert log.aborted_transactions(2, 4) == [(A, 0), (B, 1)]
    log.close()


def reopen_states(tmp_path):
    d = tmp_path / "t-0"
    size = max(len(tbatch(A, 0)), len(marker_batch(A, 0, 0, False, T0)))
    cfg = LogConfig(segment_bytes=size * 3)
    log = open_log(d, cfg)
    log.append(tbatch(A, 0), now_ms=T0)  # 0
    log.append(tbatch(B, 0), now_ms=T0)  # 1
    log.append_marker(A, 0, 0, False, now_ms=T0, leader_epoch=0)  # 2
    log.append(tbatch(A, 1, epoch=0), now_ms=T0)  # 3, new txn of A (second segment)
    log.append_marker(B, 0, 0, False, now_ms=T0, leader_epoch=0)  # 4
    log.append(tbatch(B, 1), now_ms=T0)  # 5, open
    commit_hw(log)
    assert log.segment_bases() == [0, 3]
    return d, cfg, log


EXPECTED_TXN = {0: [AbortedTxn(A, 0, 2, 1)], 3: [AbortedTxn(B, 1, 4, 3)]}


def check_state(log: PartitionLog) -> None:
    assert log.ongoing_transactions() == [(A, 0, 3), (B, 0, 5)]
    assert log.aborted_transactions(0, 6) == [(A, 0), (B, 1)]
    assert log.last_stable_offset == 3


def test_clean_restart_keeps_transactions_and_index(tmp_path) -> None:
    d, cfg, log = reopen_states(tmp_path)
    check_state(log)
    st = log.state()
    log.close()
    log2 = open_log(d, cfg, state=st, clean_shutdown=True)
    check_state(log2)
    assert txn_files(d) == EXPECTED_TXN
    log2.close()


@pytest.mark.parametrize("damage", ["none", "deleted", "torn", "stale"])
def test_kill9_recovery_rebuilds_producer_state_and_txn_index(tmp_path, damage) -> None:
    d, cfg, log = reopen_states(tmp_path)
    st = log.state()
    # kill -9: no close; the dead process's index files may be missing, torn or stale
    second = d / f"{3:020d}.txnindex"
    if damage == "deleted":
        second.unlink()
    elif damage == "torn":
        second.write_bytes(second.read_bytes()[:-5])
    elif damage == "stale":  # an abort whose marker is gone with the lost tail
        second.write_bytes(second.read_bytes() + second.read_bytes())
    for name in os.listdir(d):
        if name.endswith(".snapshot"):
            os.unlink(d / name)
    log2 = open_log(d, cfg, state=PartitionState(0, st.high_watermark, 0))
    check_state(log2)
    assert txn_files(d) == EXPECTED_TXN
    log2.close()


def test_recovery_from_a_later_recovery_point_rebuilds_only_the_recovered_segments(tmp_path) -> None:
    d, cfg, log = reopen_states(tmp_path)
    log.flush()
    st = log.state()
    assert st.recovery_point == 6
    (d / f"{3:020d}.txnindex").unlink()  # lost: it is in the recovered (active) segment
    log2 = open_log(d, cfg, state=st)
    check_state(log2)
    assert txn_files(d) == EXPECTED_TXN
    log2.close()


def test_truncation_drops_index_entries_and_reopens_the_transaction(tmp_path) -> None:
    d, cfg, log = reopen_states(tmp_path)
    log.truncate_to(4)  # the abort of B at 4 goes
    assert txn_files(d) == {0: [AbortedTxn(A, 0, 2, 1)]}
    assert log.ongoing_transactions() == [(B, 0, 1), (A, 0, 3)]
    assert log.aborted_transactions(0, 6) == [(A, 0)]
    log.high_watermark = 4
    assert log.last_stable_offset == 1
    log.truncate_to(2)
    assert txn_files(d) == {}
    assert log.ongoing_transactions() == [(A, 0, 0), (B, 0, 1)]
    log.close()


def test_follower_append_builds_the_same_state_and_index(tmp_path) -> None:
    d, cfg, leader = reopen_states(tmp_path)
    follower = open_log(tmp_path / "f-0", cfg)
    pos = 0
    while pos < leader.log_end_offset:
        data = leader.read(pos, 1 << 20).records
        follower.append_as_follower(data, now_ms=T0)
        pos = follower.log_end_offset
    follower.high_watermark = 6
    check_state(follower)
    assert txn_files(tmp_path / "f-0") == EXPECTED_TXN
    leader.close()
    follower.close()


def test_retention_deletes_the_index_with_its_segment(tmp_path) -> None:
    d, cfg, log = reopen_states(tmp_path)
    log.delete_records_before(3)
    log.apply_retention(T0)
    assert log.segment_bases() == [3]
    assert txn_files(d) == {3: [AbortedTxn(B, 1, 4, 3)]}
    assert log.aborted_transactions(3, 6) == [(B, 1)]
    log.purge_deleted_files(T0, force=True)
    assert not [n for n in os.listdir(d) if "txnindex" in n and n[:20] == f"{0:020d}"]
    log.close()


def test_lso_is_never_below_the_log_start(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(tbatch(A, 0), now_ms=T0)
    log.append(build_batch([(T0, None, b"p", [])]), now_ms=T0)
    commit_hw(log)
    assert log.last_stable_offset == 0
    log.delete_records_before(2)  # DeleteRecords is bounded by the HW only, as in Kafka
    assert log.last_stable_offset == 2
    log.close()


def test_compaction_stops_at_the_first_unstable_offset_and_carries_the_index(tmp_path) -> None:
    d = tmp_path / "c-0"
    cfg = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    log = open_log(d, cfg)
    log.append(tbatch(A, 0, key=b"k"), now_ms=T0)  # 0
    log.append(tbatch(A, 1, key=b"k"), now_ms=T0)  # 1
    log.roll(T0)
    log.append_marker(A, 0, 0, False, now_ms=T0, leader_epoch=0)  # 2
    log.roll(T0)
    log.append(tbatch(B, 0, key=b"j"), now_ms=T0)  # 3, open
    log.roll(T0)
    log.append(tbatch(B, 1, key=b"j"), now_ms=T0)  # 4
    log.append(tbatch(B, 2, key=b"j"), now_ms=T0)  # 5
    log.roll(T0)
    log.append(build_batch([(T0, b"x", b"1", [])]), now_ms=T0)  # 6
    commit_hw(log)
    assert log.segment_bases() == [0, 2, 3, 4, 6]
    assert log.last_stable_offset == 3
    assert log.cleanable_info(T0).first_uncleanable == 3  # not the HW (7), nor the active segment (6)
    log.compact(T0, force=True)
    assert log.segment_bases() == [0, 3, 4, 6]  # 0 and 2 cleaned into one segment
    assert log.cleaner_checkpoint == 3
    assert txn_files(d) == {0: [AbortedTxn(A, 0, 2, 3)]}
    assert log.aborted_transactions(0, 7) == [(A, 0)]
    assert log.ongoing_transactions() == [(B, 0, 3)]
    log.close()
    log2 = open_log(d, cfg, state=PartitionState(0, 7, 0))  # unclean: rebuilt from the batches
    # the cleaner removed the batch at 0 (key k is at 1), so the rebuilt abort starts at 1: the
    # same records are aborted for a reader
    assert log2.aborted_transactions(0, 7) == [(A, 1)]
    assert txn_files(d) == {0: [AbortedTxn(A, 1, 2, 3)]}
    log2.close()


def test_index_class_truncate_and_collect(tmp_path) -> None:
    from shoal.storage.fs import DEFAULT_FS

    t = TxnIndex(str(tmp_path / "x.txnindex"))
    t.append(DEFAULT_FS, AbortedTxn(1, 0, 5, 6))
    t.append(DEFAULT_FS, AbortedTxn(2, 3, 9, 10))
    assert len((tmp_path / "x.txnindex").read_bytes()) == 2 * 34
    out: list = []
    assert t.collect(6, 8, out) is True and out == [AbortedTxn(2, 3, 9, 10)]
    assert TxnIndex.load(DEFAULT_FS, str(tmp_path / "x")).entries == t.entries
    assert t.truncate_to(DEFAULT_FS, 9)
    assert decode_entries((tmp_path / "x.txnindex").read_bytes()) == [AbortedTxn(1, 0, 5, 6)]
    t.truncate_to(DEFAULT_FS, 0)
    assert not (tmp_path / "x.txnindex").exists()


def test_compaction_keeps_a_committed_value_over_a_later_aborted_write(tmp_path) -> None:
    """Kafka's cleaner does not map aborted records, so they never shadow a committed value; the
    aborted batches go, the markers stay."""
    d = tmp_path / "c-0"
    cfg = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    log = open_log(d, cfg)
    log.append(tbatch(A, 0, key=b"k", tag=b"committed"), now_ms=T0)  # 0
    log.append_marker(A, 0, 0, True, now_ms=T0, leader_epoch=0)  # 1
    log.append(tbatch(A, 1, key=b"k", tag=b"aborted"), now_ms=T0)  # 2
    log.append(tbatch(A, 2, key=b"k", tag=b"aborted"), now_ms=T0)  # 3
    log.append_marker(A, 0, 0, False, now_ms=T0, leader_epoch=0)  # 4
    log.append(tbatch(B, 0, key=b"j"), now_ms=T0)  # 5
    log.append_marker(B, 0, 0, True, now_ms=T0, leader_epoch=0)  # 6
    log.roll(T0)
    log.append(build_batch([(T0, b"x", b"1", [])]), now_ms=T0)  # 7
    commit_hw(log)
    log.compact(T0, force=True)
    recs = list(iter_records(log.read(0, 1 << 20).records))
    data = [(r.offset, r.value) for r in recs if r.key in (b"k", b"j")]
    assert data == [(0, b"committed0"), (5, b"t0")]
    assert [r.offset for r in recs] == [0, 1, 4, 5, 6]  # markers kept
    assert log.aborted_transactions(0, 8) == [(A, 2)]
    log.close()


# -- a property over the whole log: index, LSO and recovery agree with a model --------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

PIDS = (A, B, 9000)
log_op = st.one_of(
    st.tuples(st.just("data"), st.sampled_from(PIDS), st.integers(1, 3)),
    st.tuples(st.just("marker"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("plain"), st.integers(1, 2)),
    st.tuples(st.just("roll"),),
    st.tuples(st.just("hw"),),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(log_op, min_size=1, max_size=30), st.integers(0, 40), st.integers(1, 40))
def test_log_property_index_lso_and_recovery_match_a_model(ops, start, span) -> None:
    import tempfile

    d = tempfile.mkdtemp()
    path = os.path.join(d, "p-0")
    log = open_log(path)
    open_: dict[int, int] = {}
    aborted: list[tuple[int, int, int]] = []  # (pid, first, marker)
    seqs = dict.fromkeys(PIDS, 0)
    for o in ops:
        if o[0] == "data":
            _, pid, n = o
            info = log.append(tbatch(pid, seqs[pid], n), now_ms=T0)
            seqs[pid] += n
            open_.setdefault(pid, info.base_offset)
        elif o[0] == "marker":
            _, pid, commit = o
            info = log.append_marker(pid, 0, 0, commit, now_ms=T0, leader_epoch=0)
            first = open_.pop(pid, None)
            if first is not None and not commit:
                aborted.append((pid, first, info.base_offset))
        elif o[0] == "plain":
            log.append(build_batch([(T0, None, b"p", [])] * o[1]), now_ms=T0)
        elif o[0] == "roll":
            log.roll(T0)
        else:
            commit_hw(log)

    def check(lg: PartitionLog) -> None:
        upper = start + span
        want = [(p, f) for p, f, m in aborted if m >= start and f < upper]
        assert sorted(lg.aborted_transactions(start, upper)) == sorted(want)
        assert sorted(lg.aborted_transactions(0, lg.log_end_offset + 1)) == sorted((p, f) for p, f, _ in aborted)
        assert lg.ongoing_transactions() == sorted(((p, 0, f) for p, f in open_.items()), key=lambda t: t[2])
        hw = lg.high_watermark
        assert lg.last_stable_offset == min([f for f in open_.values()] + [hw])

    commit_hw(log)
    check(log)
    st_ = log.state()
    log.close(flush=False)
    for name in os.listdir(path):  # kill -9: the indexes and snapshots of the dead process are lost
        if name.endswith((".txnindex", ".snapshot")):
            os.unlink(os.path.join(path, name))
    log2 = open_log(path, state=PartitionState(0, st_.high_watermark, 0))
    check(log2)
    log2.close()


def test_a_torn_marker_leaves_the_transaction_open_after_recovery(tmp_path) -> None:
    """kill -9 in the middle of writing an abort marker: recovery cuts the torn batch, the
    transaction is open again (the coordinator writes the marker again) and no abort is indexed."""
    d = tmp_path / "t-0"
    log = open_log(d)
    log.append(tbatch(A, 0, 2), now_ms=T0)
    log.append_marker(A, 0, 0, False, now_ms=T0, leader_epoch=0)
    assert txn_files(d) == {0: [AbortedTxn(A, 0, 2, 3)]}
    seg = d / f"{0:020d}.log"
    log.close(flush=False)
    seg.write_bytes(seg.read_bytes()[:-7])
    for name in os.listdir(d):
        if name.endswith(".snapshot"):
            os.unlink(d / name)
    log2 = open_log(d, state=PartitionState(0, 2, 0))
    assert log2.log_end_offset == 2
    assert log2.ongoing_transactions() == [(A, 0, 0)]
    assert log2.aborted_transactions(0, 10) == [] and txn_files(d) == {}
    assert log2.last_stable_offset == 0
    log2.append_marker(A, 0, 0, False, now_ms=T0, leader_epoch=0)  # the coordinator's retry
    assert log2.aborted_transactions(0, 10) == [(A, 0)]
    log2.close()


def test_a_failed_index_write_keeps_the_abort_and_writes_it_at_flush(tmp_path) -> None:
    """ENOSPC while appending to the .txnindex (the marker is in the log already): readers still
    get the abort, the append succeeds, and the next flush writes the whole index."""
    from shoal.storage import FileSystem

    class FailingIndexFS(FileSystem):
        fail = True
        paths: dict[int, str] = {}

        def open(self, path, flags, mode=0o644):
            fd = super().open(path, flags, mode)
            self.paths[fd] = path
            return fd

        def pwrite(self, fd, data, offset):
            if self.fail and self.paths.get(fd, "").endswith(".txnindex"):
                raise OSError(28, "No space left on device")
            return super().pwrite(fd, data, offset)

    fs = FailingIndexFS()
    d = tmp_path / "t-0"
    log = open_log(d, fs=fs)
    log.append(tbatch(A, 0), now_ms=T0)
    log.append_marker(A, 0, 0, False, now_ms=T0, leader_epoch=0)
    log.append(tbatch(B, 0), now_ms=T0)
    log.append_marker(B, 0, 0, False, now_ms=T0, leader_epoch=0)
    assert log.aborted_transactions(0, 4) == [(A, 0), (B, 2)]
    assert txn_files(d) in ({}, {0: []})
    fs.fail = False
    log.flush()
    assert txn_files(d) == {0: [AbortedTxn(A, 0, 1, 2), AbortedTxn(B, 2, 3, 4)]}
    log.close()


def test_compaction_removes_markers_whose_transactions_have_no_data_left(tmp_path) -> None:
    """Kafka's marker cleaning: a pass that still reads a transaction's data keeps its marker; the
    next one stamps the marker with a delete horizon; one at or after the horizon drops it (and
    the abort's index entry)."""
    d = tmp_path / "c-0"
    cfg = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, delete_retention_ms=1000)
    log = open_log(d, cfg)
    log.append(tbatch(A, 0, key=b"k", tag=b"a1-"), now_ms=T0)  # 0
    log.append_marker(A, 0, 0, True, now_ms=T0, leader_epoch=0)  # 1
    log.append(tbatch(B, 0, key=b"j", tag=b"b1-"), now_ms=T0)  # 2
    log.append_marker(B, 0, 0, False, now_ms=T0, leader_epoch=0)  # 3
    log.append(tbatch(A, 1, key=b"k", tag=b"a2-"), now_ms=T0)  # 4
    log.append_marker(A, 0, 0, True, now_ms=T0, leader_epoch=0)  # 5
    log.append(tbatch(B, 1, key=b"m", tag=b"b2-"), now_ms=T0)  # 6
    log.append_marker(B, 0, 0, True, now_ms=T0, leader_epoch=0)  # 7

    def a_pass(now: int) -> list[tuple[int, bool]]:
        log.roll(T0)
        log.append(build_batch([(T0, b"x", b"%d" % now, [])]), now_ms=T0)
        log.roll(T0)
        commit_hw(log)
        assert log.compact(now, force=True).started
        return [(h.base_offset, h.is_control) for _p, h in parse_batches(log.read(0, 1 << 20, max_offset=8).records)]

    # 1: the data at 0 (k is newer at 4) and the aborted data at 2 go; their markers stay
    assert a_pass(T0) == [(1, True), (3, True), (4, False), (5, True), (6, False), (7, True)]
    assert log.aborted_transactions(0, 8) == [(B, 2)]
    # 2: markers 1 and 3 have no data left: stamped with a horizon, still there
    assert a_pass(T0) == [(1, True), (3, True), (4, False), (5, True), (6, False), (7, True)]
    data = log.read(0, 1 << 20, max_offset=8).records
    horizons = {h.base_offset: h.base_timestamp for _p, h in parse_batches(data) if h.attributes & 0x40}
    assert horizons == {1: T0 + 1000, 3: T0 + 1000}
    assert [(r.offset, r.key) for r in iter_records(data) if r.offset in (1, 3)] == [
        (1, struct.pack(">hh", 0, 1)),
        (3, struct.pack(">hh", 0, 0)),
    ]
    # 3: before the horizon nothing changes; at it, they go, with the abort's index entry
    assert a_pass(T0 + 999) == [(1, True), (3, True), (4, False), (5, True), (6, False), (7, True)]
    assert a_pass(T0 + 1000) == [(4, False), (5, True), (6, False), (7, True)]
    assert log.aborted_transactions(0, 8) == []
    assert not any(txn_files(d).values())
    st_ = log.state()
    log.close()
    log2 = open_log(d, cfg, state=PartitionState(0, st_.high_watermark, 0))
    assert log2.ongoing_transactions() == [] and log2.aborted_transactions(0, 20) == []
    log2.close()


def test_completed_transactions_are_forgotten_when_the_hw_passes_them(tmp_path) -> None:
    """Without anyone asking for the LSO (no consumer, no follower), completed transactions do not
    pile up: moving the high watermark past a marker forgets it."""
    log = open_log(tmp_path / "t-0")
    for i in range(50):
        log.append(tbatch(A, i), now_ms=T0)
        log.append_marker(A, 0, 0, i % 2 == 0, now_ms=T0, leader_epoch=0)
        commit_hw(log)
    assert not log._producers.has_transactions
    log.close()
