"""Idempotent-producer state: the rules (exact outcomes), the partition log's use of them, snapshots,
restarts, crash recovery, retention, truncation and expiry."""

from __future__ import annotations

import os

import pytest
from storage_helpers import T0, Crash, FaultyFS, read_all

from shoal.clock import ManualClock
from shoal.protocol.records import build_batch, iter_records
from shoal.storage import LogConfig, LogManager, PartitionLog, PartitionState, ProducerStateError
from shoal.storage.producer_state import (
    INT32_MAX,
    BatchMetadata,
    ProducerStateManager,
    SnapshotError,
    last_sequence,
)

PID = 4000
SNAP = ".snapshot"


def pbatch(seq: int, n: int = 1, *, pid: int = PID, epoch: int = 0, ts: int = T0, tag: bytes = b"") -> bytes:
    """A client batch of producer ``pid`` with sequences seq .. seq+n-1 (wrapping)."""
    return build_batch(
        [(ts + i, None, tag + b"s%d" % ((seq + i) % (INT32_MAX + 1)), []) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def plain(n: int = 1) -> bytes:
    return build_batch([(T0 + i, None, b"plain%d" % i, []) for i in range(n)])


def code_of(excinfo) -> str:
    return excinfo.value.code


def snapshots(directory) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(directory) if n.endswith(SNAP))


# -- the rules, on the manager alone -------------------------------------------------------------


def state_with(batches: list[tuple[int, int]], epoch: int = 0) -> ProducerStateManager:
    """A manager whose producer PID appended batches of (first_seq, last_seq) at offsets 0, 10, 20..."""
    m = ProducerStateManager()
    for i, (first, last) in enumerate(batches):
        m.update(PID, epoch, first, last, 10 * i, 10 * i + (last - first), T0 + i)
    return m


def test_last_sequence_wraps_at_int32_max() -> None:
    assert last_sequence(0, 0) == 0
    assert last_sequence(5, 3) == 8
    assert last_sequence(INT32_MAX, 0) == INT32_MAX
    assert last_sequence(INT32_MAX - 1, 1) == INT32_MAX
    assert last_sequence(INT32_MAX - 1, 2) == 0
    assert last_sequence(INT32_MAX, 4) == 3


def test_unknown_producer_is_accepted_at_any_sequence_and_epoch() -> None:
    m = ProducerStateManager()
    assert m.check(PID, 0, 0, 0) is None
    assert m.check(PID, 7, 12345, 12350) is None  # KIP-360: never UNKNOWN_PRODUCER_ID


def test_in_sequence_batches_are_accepted() -> None:
    m = state_with([(0, 2)])
    assert m.check(PID, 0, 3, 3) is None


def test_a_duplicate_of_each_of_the_last_five_batches_returns_its_metadata() -> None:
    m = state_with([(0, 0), (1, 3), (4, 4), (5, 9), (10, 10), (11, 12)])  # six: the first is gone
    entry = m.get(PID)
    assert [(b.first_seq, b.last_seq) for b in entry.batches] == [(1, 3), (4, 4), (5, 9), (10, 10), (11, 12)]
    assert m.check(PID, 0, 1, 3) == BatchMetadata(1, 3, 10, 12, T0 + 1)
    assert m.check(PID, 0, 4, 4) == BatchMetadata(4, 4, 20, 20, T0 + 2)
    assert m.check(PID, 0, 5, 9) == BatchMetadata(5, 9, 30, 34, T0 + 3)
    assert m.check(PID, 0, 10, 10) == BatchMetadata(10, 10, 40, 40, T0 + 4)
    assert m.check(PID, 0, 11, 12) == BatchMetadata(11, 12, 50, 51, T0 + 5)
    # Older than the last five: not a duplicate any more, and out of order.
    with pytest.raises(ProducerStateError) as e:
        m.check(PID, 0, 0, 0)
    assert code_of(e) == "OUT_OF_ORDER_SEQUENCE_NUMBER"


def test_same_first_sequence_but_another_last_is_not_a_duplicate() -> None:
    m = state_with([(0, 4)])
    with pytest.raises(ProducerStateError) as e:
        m.check(PID, 0, 0, 2)
    assert code_of(e) == "OUT_OF_ORDER_SEQUENCE_NUMBER"


@pytest.mark.parametrize("first", [4, 6, 100, 2])
def test_gaps_and_overlaps_are_out_of_order(first: int) -> None:
    m = state_with([(0, 4)])
    with pytest.raises(ProducerStateError) as e:
        m.check(PID, 0, first, first)
    assert code_of(e) == "OUT_OF_ORDER_SEQUENCE_NUMBER"


def test_an_older_epoch_is_fenced_even_for_a_duplicate_sequence() -> None:
    m = state_with([(0, 0), (1, 1)], epoch=3)
    for first in (0, 1, 2, 0):
        with pytest.raises(ProducerStateError) as e:
            m.check(PID, 2, first, first)
        assert code_of(e) == "INVALID_PRODUCER_EPOCH"


def test_a_new_epoch_must_start_at_zero_and_forgets_the_old_batches() -> None:
    m = state_with([(0, 0), (1, 1)], epoch=0)
    with pytest.raises(ProducerStateError) as e:
        m.check(PID, 1, 2, 2)
    assert code_of(e) == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert m.check(PID, 1, 0, 0) is None  # not a duplicate of epoch 0's (0, 0)
    m.update(PID, 1, 0, 0, 20, 20, T0)
    assert m.get(PID).epoch == 1 and [(b.first_seq, b.last_seq) for b in m.get(PID).batches] == [(0, 0)]
    with pytest.raises(ProducerStateError) as e:
        m.check(PID, 0, 2, 2)
    assert code_of(e) == "INVALID_PRODUCER_EPOCH"
    assert m.check(PID, 5, 0, 3) is None  # skipping epochs is fine


def test_sequence_wraps_after_int32_max() -> None:
    m = state_with([(INT32_MAX - 2, INT32_MAX)])
    assert m.check(PID, 0, 0, 1) is None
    with pytest.raises(ProducerStateError):
        m.check(PID, 0, 1, 1)
    # A batch spanning the wrap: first INT32_MAX - 1, last 1.
    m = state_with([(INT32_MAX - 5, INT32_MAX - 2)])
    assert m.check(PID, 0, INT32_MAX - 1, last_sequence(INT32_MAX - 1, 3)) is None
    m.update(PID, 0, INT32_MAX - 1, 1, 10, 13, T0)
    assert m.check(PID, 0, INT32_MAX - 1, 1) == BatchMetadata(INT32_MAX - 1, 1, 10, 13, T0)
    assert m.check(PID, 0, 2, 2) is None


def test_producers_are_independent() -> None:
    m = state_with([(0, 9)])
    assert m.check(PID + 1, 0, 0, 0) is None
    m.update(PID + 1, 0, 0, 0, 100, 100, T0)
    assert m.check(PID, 0, 10, 10) is None
    assert m.check(PID + 1, 0, 1, 1) is None


def test_expiry_compares_the_last_batch_timestamp() -> None:
    m = ProducerStateManager()
    m.update(1, 0, 0, 0, 0, 0, T0)
    m.update(2, 0, 0, 0, 1, 1, T0 + 10)
    assert m.remove_expired(T0 + 999, 1000) == 0
    assert m.remove_expired(T0 + 1000, 1000) == 1  # idle for exactly expiration_ms: gone
    assert m.get(1) is None and m.get(2) is not None
    assert m.remove_expired(T0 + 1010, 1000) == 1 and len(m) == 0


def test_snapshot_round_trip_and_corruption() -> None:
    m = ProducerStateManager()
    for i in range(7):
        m.update(PID, 2, i, i, 10 + i, 10 + i, T0 + i)
    m.update(PID + 1, 0, INT32_MAX, 0, 100, 101, T0)
    data = m.to_snapshot()
    back = ProducerStateManager.from_snapshot(data)
    assert back.entries() == m.entries()
    assert len(back.get(PID).batches) == 5
    assert ProducerStateManager.from_snapshot(ProducerStateManager().to_snapshot()).entries() == []
    for bad in (data[:-1], data[:5], b"", data[:10] + bytes([data[10] ^ 1]) + data[11:], b"\x00\x07" + data[2:]):
        with pytest.raises(SnapshotError):
            ProducerStateManager.from_snapshot(bad)


# -- in the partition log ------------------------------------------------------------------------


def open_log(path, config: LogConfig | None = None, **kw) -> PartitionLog:
    return PartitionLog.open(path, config or LogConfig(), now_ms=T0, **kw)


def test_duplicates_of_each_of_the_last_five_are_not_written(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(plain(2), now_ms=T0)
    firsts = []
    seq = 0
    for n in (1, 2, 3, 1, 2, 4):
        info = log.append(pbatch(seq, n), now_ms=T0)
        assert not info.duplicate
        firsts.append((seq, n, info.base_offset, info.last_offset))
        seq += n
    end = log.log_end_offset
    size = log.size_bytes
    for seq, n, base, last in firsts[1:]:
        info = log.append(pbatch(seq, n), now_ms=T0 + 5)
        assert info.duplicate
        assert (info.base_offset, info.last_offset, info.num_records) == (base, last, n)
        assert info.log_append_time_ms == T0 + n - 1  # Kafka: the original batch's timestamp
    assert (log.log_end_offset, log.size_bytes) == (end, size)
    seq0, n0, _, _ = firsts[0]
    with pytest.raises(ProducerStateError) as e:  # older than the last five
        log.append(pbatch(seq0, n0), now_ms=T0)
    assert code_of(e) == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert (log.log_end_offset, log.size_bytes) == (end, size)
    assert read_all(log) == list(range(end))


def test_refused_batches_leave_log_and_state_alone(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(pbatch(0, 3, epoch=1), now_ms=T0)
    before = log.producer_entry(PID)
    for records, code in [
        (pbatch(5, epoch=1), "OUT_OF_ORDER_SEQUENCE_NUMBER"),
        (pbatch(3, epoch=0), "INVALID_PRODUCER_EPOCH"),
        (pbatch(1, epoch=2), "OUT_OF_ORDER_SEQUENCE_NUMBER"),
    ]:
        with pytest.raises(ProducerStateError) as e:
            log.append(records, now_ms=T0)
        assert code_of(e) == code
    assert log.log_end_offset == 3 and log.producer_entry(PID) == before
    info = log.append(pbatch(0, epoch=2), now_ms=T0)
    assert (info.base_offset, info.duplicate) == (3, False)
    assert log.producer_entry(PID).epoch == 2


def test_plain_batches_do_not_touch_producer_state(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    for _ in range(3):
        log.append(plain(2), now_ms=T0)
    assert log.active_producers() == []


def test_log_append_time_is_the_recorded_timestamp(tmp_path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"))
    log.append(pbatch(0, 2, ts=T0 - 50_000), now_ms=T0 + 7)
    (p,) = log.active_producers()
    assert (p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp) == (PID, 0, 1, T0 + 7)
    info = log.append(pbatch(0, 2, ts=T0 - 50_000), now_ms=T0 + 99)
    assert info.duplicate and info.log_append_time_ms == T0 + 7


def test_broker_appends_of_several_batches_are_recorded_unvalidated(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    records = pbatch(7, 2) + plain(1) + pbatch(0, 1, pid=PID + 1, epoch=3)
    log.append(records, now_ms=T0, client=False)
    a, b = log.producer_entry(PID), log.producer_entry(PID + 1)
    assert a.batches == [BatchMetadata(7, 8, 0, 1, T0 + 1)]
    assert (b.epoch, b.batches) == (3, [BatchMetadata(0, 0, 3, 3, T0)])


def test_snapshot_at_every_roll_and_clean_shutdown(tmp_path) -> None:
    m = LogManager(tmp_path, clock=ManualClock(T0))
    m.load()
    log = m.get_or_create("t", 0, LogConfig(segment_bytes=len(pbatch(0, 2)) * 2))
    for seq in range(0, 10, 2):
        log.append(pbatch(seq, 2), now_ms=T0)
    assert snapshots(tmp_path / "t-0") == [4, 8]  # the active segment bases after the rolls
    m.close()
    assert snapshots(tmp_path / "t-0") == [4, 8, 10]

    fs = FaultyFS()
    m2 = LogManager(tmp_path, clock=ManualClock(T0), fs=fs)
    m2.load()
    assert m2.loaded_cleanly
    assert not [p for p in fs.reads if p.endswith(".log")]  # state from the snapshot, no replay
    log2 = m2.get("t", 0)
    e = log2.producer_entry(PID)
    assert [(b.first_seq, b.first_offset) for b in e.batches] == [(0, 0), (2, 2), (4, 4), (6, 6), (8, 8)]
    for seq in range(0, 10, 2):  # all five still detected after the restart
        info = log2.append(pbatch(seq, 2), now_ms=T0)
        assert info.duplicate and info.base_offset == seq
    assert log2.append(pbatch(10, 1), now_ms=T0).base_offset == 10
    m2.close()
    # The next start removes the older shutdown snapshot (not a segment base); bases stay.
    m3 = LogManager(tmp_path, clock=ManualClock(T0))
    m3.load()
    assert snapshots(tmp_path / "t-0") == [4, 8, 11]
    m3.close()


def test_recovery_replays_after_the_snapshot_and_a_torn_tail(tmp_path) -> None:
    clock = ManualClock(T0)
    fs = FaultyFS()
    m = LogManager(tmp_path, clock=clock, fs=fs)
    m.load()
    cfg = LogConfig(segment_bytes=len(pbatch(0, 2)) * 3)
    log = m.get_or_create("t", 0, cfg)
    for seq in range(0, 8, 2):  # offsets 0..7; a roll after 6 → snapshot at 6
        log.append(pbatch(seq, 2), now_ms=T0)
    log.append(pbatch(0, 1, pid=PID + 1), now_ms=T0)  # offset 8
    assert snapshots(tmp_path / "t-0") == [6]
    m.checkpoint()
    fs.fail_at = fs.writes + 1
    fs.torn_bytes = 30
    with pytest.raises(Crash):
        log.append(pbatch(8, 2), now_ms=T0)  # torn: the process dies
    m.handles.close_all()

    m2 = LogManager(tmp_path, clock=clock)
    m2.load()
    assert not m2.loaded_cleanly
    log2 = m2.get("t", 0)
    assert log2.log_end_offset == 9
    e = log2.producer_entry(PID)
    assert [(b.first_seq, b.last_seq, b.first_offset) for b in e.batches] == [(0, 1, 0), (2, 3, 2), (4, 5, 4), (6, 7, 6)]
    assert log2.producer_entry(PID + 1).batches == [BatchMetadata(0, 0, 8, 8, T0)]
    assert log2.append(pbatch(6, 2), now_ms=T0).duplicate  # replayed from the log after snapshot 6
    assert log2.append(pbatch(2, 2), now_ms=T0).duplicate  # from the snapshot
    info = log2.append(pbatch(8, 2), now_ms=T0)  # the torn batch never was: its retry is new
    assert (info.duplicate, info.base_offset) == (False, 9)
    with pytest.raises(ProducerStateError):
        log2.append(pbatch(11), now_ms=T0)
    m2.close()


def test_snapshot_beyond_the_recovered_log_end_is_ignored(tmp_path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    for seq in range(0, 6, 2):
        log.append(pbatch(seq, 2), now_ms=T0)
    log.take_snapshot()  # at 6
    log.close()
    # Lose the last batch (it was never fsynced, say): the log ends at 4, the snapshot says 6.
    path = d / "00000000000000000000.log"
    size = len(pbatch(0, 2))
    with open(path, "r+b") as f:
        f.truncate(2 * size)
    log2 = open_log(d)  # no state: full verification, replay from the log start
    assert log2.log_end_offset == 4 and snapshots(d) == []
    assert [b.first_seq for b in log2.producer_entry(PID).batches] == [0, 2]
    assert log2.append(pbatch(4, 2), now_ms=T0).base_offset == 4


def test_corrupt_latest_snapshot_falls_back_to_an_older_one(tmp_path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, LogConfig(segment_bytes=len(pbatch(0, 1)) * 2))
    for seq in range(6):
        log.append(pbatch(seq), now_ms=T0)
    assert snapshots(d) == [2, 4]
    log.close()
    assert snapshots(d) == [2, 4, 6]
    (d / f"{6:020d}{SNAP}").write_bytes(b"\x00\x01garbage")
    data = (d / f"{4:020d}{SNAP}").read_bytes()
    (d / f"{4:020d}{SNAP}").write_bytes(data[:-3])  # torn
    # An unclean open replays from a snapshot at or below the recovery point's segment (4 here),
    # so the transaction indexes from there on are rebuilt from the replay.
    log2 = open_log(d, state=PartitionState(0, 6, 6))
    assert snapshots(d) == [2]  # both bad ones deleted; state from 2, batches 2..5 replayed
    assert [b.first_seq for b in log2.producer_entry(PID).batches] == [1, 2, 3, 4, 5]
    assert log2.append(pbatch(1), now_ms=T0).duplicate


def test_a_log_without_snapshots_from_a_clean_shutdown_starts_empty(tmp_path) -> None:
    # Written before producer snapshots existed: Kafka's upgrade rule, no full scan.
    m = LogManager(tmp_path, clock=ManualClock(T0))
    m.load()
    m.get_or_create("t", 0).append(pbatch(0, 2), now_ms=T0)
    m.close()
    for name in os.listdir(tmp_path / "t-0"):
        if name.endswith(SNAP):
            os.unlink(tmp_path / "t-0" / name)
    m2 = LogManager(tmp_path, clock=ManualClock(T0))
    m2.load()
    assert m2.get("t", 0).active_producers() == []
    m2.close()


def test_retention_does_not_forget_producers(tmp_path) -> None:
    clock = ManualClock(T0)
    m = LogManager(tmp_path, clock=clock, retention_check_interval_ms=0)
    m.load()
    cfg = LogConfig(segment_bytes=len(pbatch(0, 1)) * 2, retention_ms=60_000, file_delete_delay_ms=0)
    log = m.get_or_create("t", 0, cfg)
    for seq in range(5):
        log.append(pbatch(seq, ts=clock.now_ms()), now_ms=clock.now_ms())
    log.append(plain(), now_ms=clock.now_ms())
    log.high_watermark = log.log_end_offset
    clock.sleep(120)
    report = m.run_periodic(clock.now_ms())
    assert report.deleted_segments == 4 and log.log_start_offset == 6 and log.segment_bases() == [6]
    for seq in range(5):  # every one of the last five is still known, though its data is gone
        info = log.append(pbatch(seq, ts=T0), now_ms=clock.now_ms())
        assert info.duplicate and info.base_offset == seq
    m.close()
    for clean in (True, False):
        m2 = LogManager(tmp_path, clock=clock)
        m2.load()
        assert m2.loaded_cleanly is clean
        log2 = m2.get("t", 0)
        assert log2.append(pbatch(4, ts=T0), now_ms=clock.now_ms()).base_offset == 4
        if clean:
            m2.handles.close_all()  # then crash: the next start recovers and replays
        else:
            m2.close()


def test_truncation_reloads_producer_state(tmp_path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, LogConfig(segment_bytes=len(pbatch(0, 1)) * 3))
    for seq in range(8):
        log.append(pbatch(seq), now_ms=T0)
    assert snapshots(d) == [3, 6]
    log.truncate_to(5)
    assert log.log_end_offset == 5 and snapshots(d) == [3]
    assert [b.first_seq for b in log.producer_entry(PID).batches] == [0, 1, 2, 3, 4]
    info = log.append(pbatch(5), now_ms=T0)  # truncated away: appended again, not a duplicate
    assert (info.duplicate, info.base_offset) == (False, 5)
    log.truncate_fully_and_start_at(100)
    assert log.active_producers() == [] and snapshots(d) == []
    assert log.append(pbatch(40), now_ms=T0).base_offset == 100  # unknown again: any sequence


def test_expiry_through_the_log_manager_with_an_injected_clock(tmp_path) -> None:
    clock = ManualClock(T0)
    m = LogManager(
        tmp_path, clock=clock, producer_id_expiration_ms=10_000, producer_id_expiration_check_interval_ms=1_000
    )
    m.load()
    log = m.get_or_create("t", 0)
    log.append(pbatch(0, ts=T0), now_ms=T0)
    log.append(pbatch(0, pid=PID + 1, ts=T0 + 5_000), now_ms=T0)
    assert m.run_periodic(clock.now_ms()).expired_producers == 0  # t = 0: checked
    clock.sleep(9.999)
    assert m.run_periodic(clock.now_ms()).expired_producers == 0  # PID idle 9.999 s
    clock.sleep(0.501)
    assert m.run_periodic(clock.now_ms()).expired_producers == 0  # idle 10.5 s, but no check is due
    assert len(log.active_producers()) == 2
    clock.sleep(0.499)
    assert m.run_periodic(clock.now_ms()).expired_producers == 1  # t = 10.999: checked, PID goes
    assert [p.producer_id for p in log.active_producers()] == [PID + 1]
    clock.sleep(4.001)
    assert m.run_periodic(clock.now_ms()).expired_producers == 1  # t = 15: idle exactly 10 s
    # Forgotten: the producer may continue at any sequence, as Kafka allows.
    assert not log.append(pbatch(17, ts=clock.now_ms()), now_ms=clock.now_ms()).duplicate
    m.close()


def test_records_of_duplicates_are_never_read_twice(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    for seq in range(3):
        log.append(pbatch(seq, tag=b"v"), now_ms=T0)
        log.append(pbatch(seq, tag=b"v"), now_ms=T0)
    vals = [r.value for r in iter_records(log.read(0, 1 << 20).records)]
    assert vals == [b"vs0", b"vs1", b"vs2"]
