"""Time and size retention, DeleteRecords, and the delayed removal of segment files."""

from __future__ import annotations

import os

import pytest
from storage_helpers import T0, batch, read_all

from shoal.clock import ManualClock
from shoal.storage import LogConfig, LogManager, OffsetOutOfRange, PartitionLog

HOUR = 3_600_000


def filled_log(tmp_path, config: LogConfig, *, n: int = 12, step_ms: int = HOUR) -> PartitionLog:
    """``n`` batches of 2 records, one segment per 3 batches, the i-th batch stamped T0 + i*step."""
    log = PartitionLog.open(tmp_path / "t-0", config, now_ms=T0)
    for i in range(n):
        log.append(batch(2, ts=T0 + i * step_ms), now_ms=T0 + i * step_ms)
    log.high_watermark = log.log_end_offset
    return log


def seg_cfg(**kw) -> LogConfig:
    return LogConfig(segment_bytes=len(batch(2)) * 3, file_delete_delay_ms=0, **kw)


def log_files(log: PartitionLog) -> list[str]:
    return sorted(f for f in os.listdir(log.directory) if f.endswith(".log"))


def test_time_retention_by_largest_timestamp(tmp_path) -> None:
    log = filled_log(tmp_path, seg_cfg(retention_ms=5 * HOUR))
    assert log.segment_bases() == [0, 6, 12, 18]
    # Segment [0..5] holds timestamps up to 2h + 1 ms: gone once now - (2h + 1) > 5h.
    assert log.apply_retention(T0 + 7 * HOUR + 1) == 0
    assert log.apply_retention(T0 + 7 * HOUR + 2) == 1
    assert log.log_start_offset == 6 and log.segment_bases() == [6, 12, 18]
    with pytest.raises(OffsetOutOfRange):
        log.read(5, 1000)
    assert read_all(log) == list(range(6, 24))
    assert log.apply_retention(T0 + 14 * HOUR) == 2
    assert log.log_start_offset == 18 and log.size_bytes == 3 * len(batch(2))


def test_time_retention_rolls_and_deletes_an_expired_active_segment(tmp_path) -> None:
    log = filled_log(tmp_path, seg_cfg(retention_ms=HOUR), n=4)
    assert log.apply_retention(T0 + 100 * HOUR) == 2
    assert log.segment_bases() == [8]
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (8, 8, 0)
    assert log.read(8, 1000).records == b""
    assert log.append(batch(1), now_ms=T0).base_offset == 8


def test_retention_only_deletes_below_the_high_watermark(tmp_path) -> None:
    log = filled_log(tmp_path, seg_cfg(retention_ms=HOUR))
    log.high_watermark = 7
    assert log.apply_retention(T0 + 100 * HOUR) == 1  # only [0, 6) lies wholly below 7
    assert log.log_start_offset == 6


def test_infinite_retention_and_compaction_keep_everything(tmp_path) -> None:
    log = filled_log(tmp_path, seg_cfg(retention_ms=-1))
    assert log.apply_retention(T0 + 10**12) == 0
    log2 = filled_log(tmp_path / "c", seg_cfg(retention_ms=1, retention_bytes=1, cleanup_policy="compact"))
    assert log2.apply_retention(T0 + 10**12) == 0 and log2.log_start_offset == 0


def test_size_retention(tmp_path) -> None:
    one = len(batch(2))
    log = filled_log(tmp_path, seg_cfg(retention_ms=-1, retention_bytes=one * 7))
    assert log.size_bytes == one * 12
    # 12 batches in segments of 3: dropping the oldest segment leaves 9 > 7, the next leaves 6.
    assert log.apply_retention(T0) == 1
    assert log.size_bytes == one * 9 and log.log_start_offset == 6
    log.update_config(seg_cfg(retention_ms=-1, retention_bytes=one * 6))
    assert log.apply_retention(T0) == 1 and log.size_bytes == one * 6
    log.update_config(seg_cfg(retention_ms=-1, retention_bytes=0))
    assert log.apply_retention(T0) == 2
    assert log.size_bytes == 0 and log.log_start_offset == log.log_end_offset == 24


def test_delete_records_before(tmp_path) -> None:
    log = filled_log(tmp_path, seg_cfg())
    log.high_watermark = 20
    assert log.delete_records_before(3) == 3
    assert log.segment_bases() == [0, 6, 12, 18]  # segment 0 still holds 3..5
    with pytest.raises(OffsetOutOfRange):
        log.read(2, 1000)
    assert read_all(log)[0] == 3  # the batch holding 3 starts at 2, which is below the log start
    assert log.delete_records_before(13) == 13
    assert log.segment_bases() == [12, 18]
    assert log.delete_records_before(5) == 13  # below the log start: no-op, answers the start
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(21)  # above the high watermark
    assert log.delete_records_before(20) == 20
    assert log.segment_bases() == [18] and log.log_end_offset == 24


def test_log_start_offset_survives_restarts(tmp_path) -> None:
    clock = ManualClock(T0)
    m = LogManager(tmp_path, clock=clock)
    m.load()
    log = m.get_or_create("t", 0, seg_cfg())
    for _ in range(10):
        log.append(batch(2), now_ms=T0)
    log.high_watermark = log.log_end_offset
    log.delete_records_before(9)
    m.run_periodic(T0)  # the checkpoint is dirty: written now
    m.handles.close_all()  # crash
    m2 = LogManager(tmp_path, clock=clock)
    m2.load()
    log2 = m2.get("t", 0)
    assert (log2.log_start_offset, log2.high_watermark, log2.log_end_offset) == (9, 20, 20)
    m2.close()


def test_retired_files_are_removed_after_file_delete_delay(tmp_path) -> None:
    log = filled_log(tmp_path, LogConfig(segment_bytes=len(batch(2)) * 3, retention_ms=HOUR, file_delete_delay_ms=60_000))
    now = T0 + 100 * HOUR
    assert log.apply_retention(now) == 4
    names = os.listdir(log.directory)
    assert any(n.endswith(".log.deleted") for n in names)
    assert log.purge_deleted_files(now + 59_999) == 0
    assert log.purge_deleted_files(now + 60_000) > 0
    assert not any(n.endswith(".deleted") for n in os.listdir(log.directory))
    assert log_files(log) == ["00000000000000000024.log"]


def test_segment_without_timestamps_uses_the_file_time(tmp_path) -> None:
    from shoal.protocol.records import build_batch

    log = PartitionLog.open(tmp_path / "t-0", seg_cfg(retention_ms=HOUR), now_ms=T0)
    for _ in range(4):
        log.append(build_batch([(-1, None, b"x" * 40, [])] * 2), now_ms=T0)
    log.high_watermark = log.log_end_offset
    first = os.path.join(log.directory, "00000000000000000000.log")
    mtime_ms = os.stat(first).st_mtime_ns // 1_000_000
    assert log.apply_retention(mtime_ms + HOUR) == 0
    assert log.apply_retention(mtime_ms + HOUR + 1) >= 1
