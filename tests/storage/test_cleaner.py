"""Log compaction: exact outcomes on small logs, crash safety of the swap, concurrency, a property."""

from __future__ import annotations

import os
import shutil
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_helpers import T0, Crash

from shoal.clock import ManualClock
from shoal.protocol.records import (
    ATTR_DELETE_HORIZON,
    COMPRESSION_GZIP,
    COMPRESSION_ZSTD,
    build_batch,
    iter_batch_records,
    parse_batches,
)
from shoal.storage import FileSystem, LogConfig, LogManager, PartitionLog
from shoal.storage.cleaner import (
    CHECKPOINT_FILE,
    CleanerStats,
    OffsetMap,
    clean_batch,
    cleanable_info,
    group_end,
)
from shoal.storage.config import MAX_LONG

DAY = 86_400_000


def cfg(**kw) -> LogConfig:
    base = dict(segment_bytes=600, cleanup_policy="compact", index_interval_bytes=64, file_delete_delay_ms=0)
    base.update(kw)
    return LogConfig(**base)


def open_log(path, config: LogConfig | None = None, **kw) -> PartitionLog:
    return PartitionLog.open(path, config or cfg(), now_ms=T0, **kw)


def rec(key: bytes | None, value: bytes | None, ts: int = T0) -> bytes:
    return build_batch([(ts, key, value, [])])


def put(log: PartitionLog, key: bytes | None, value: bytes | None, ts: int = T0, **kw) -> int:
    info = log.append(build_batch([(ts, key, value, [])], **kw), now_ms=ts, client=False)
    return info.base_offset


def commit(log: PartitionLog) -> None:
    """Roll (so every record is in an inactive segment) and move the high watermark to the end."""
    log.roll(T0)
    log.high_watermark = log.log_end_offset


def batches(log: PartitionLog):
    """``(header, [records])`` of every batch from the log start, empty batches included."""
    out = []
    pos = log.log_start_offset
    while pos < log.log_end_offset:
        data = log.read(pos, 1 << 20).records
        if not data:
            break
        for p, h in parse_batches(data):
            if h.last_offset < pos:
                continue
            out.append((h, [r for r in iter_batch_records(data, p, h) if r.offset >= pos]))
            pos = h.next_offset
    return out


def records(log: PartitionLog):
    return [r for _h, rs in batches(log) for r in rs]


def latest(log: PartitionLog) -> dict:
    out = {}
    for r in records(log):
        out[r.key] = r.value
    return out


def offsets_by_key(log: PartitionLog) -> dict:
    return {r.key: r.offset for r in records(log)}


# --- exact outcomes -----------------------------------------------------------------------------


def test_latest_value_per_key_is_kept_and_offsets_are_preserved(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    writes = [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"b", b"2"), (b"a", b"3")] * 4
    for k, v in writes:
        put(log, k, v + b"x" * 40)
    log.roll(T0)
    put(log, b"z", b"in the active segment")
    active = log.segment_bases()[-1]
    log.high_watermark = log.log_end_offset
    assert len(log.segment_bases()) > 3
    result = log.compact(T0 + 1)
    assert result.pass_complete and result.aborted is None
    assert result.checkpoint == active == log.cleaner_checkpoint
    # Offsets 21, 22, 23 hold the last a, b and c (the writes before the active segment).
    assert [(r.offset, r.key, r.value[:1]) for r in records(log)] == [
        (21, b"c", b"1"),
        (22, b"b", b"2"),
        (23, b"a", b"3"),
        (24, b"z", b"i"),
    ]
    assert result.stats.records_read == 24 and result.stats.records_retained == 3
    assert log.log_end_offset == 25 and log.log_start_offset == 0
    # Reads from any offset land on the next retained record.
    for off in range(0, 21):
        assert records_from(log, off)[0] == 21


def records_from(log: PartitionLog, offset: int) -> list[int]:
    data = log.read(offset, 1 << 20).records
    return [r.offset for p, h in parse_batches(data) for r in iter_batch_records(data, p, h) if r.offset >= offset]


def test_batches_keep_their_offsets_and_only_retained_records(tmp_path) -> None:
    log = open_log(tmp_path / "t-0", cfg(segment_bytes=100_000))
    log.append(build_batch([(T0, b"a", b"1", []), (T0 + 1, b"b", b"1", []), (T0 + 2, b"c", b"1", [])]), now_ms=T0)
    log.append(build_batch([(T0 + 3, b"a", b"2", []), (T0 + 4, b"d", b"1", [])]), now_ms=T0)
    commit(log)
    log.compact(T0)
    got = [
        (h.base_offset, h.last_offset_delta, h.records_count, h.max_timestamp, [r.offset for r in rs])
        for h, rs in batches(log)
    ]
    # The first batch keeps baseOffset 0 and lastOffsetDelta 2; maxTimestamp is the retained max.
    assert got == [(0, 2, 2, T0 + 2, [1, 2]), (3, 1, 2, T0 + 4, [3, 4])]
    # The second batch was untouched: the same bytes as appended (offsets assigned).
    assert [r.timestamp for r in records(log)] == [T0 + 1, T0 + 2, T0 + 3, T0 + 4]


def test_active_segment_is_never_cleaned(tmp_path) -> None:
    log = open_log(tmp_path / "t-0", cfg(segment_bytes=1_000_000))
    for i in range(10):
        put(log, b"k", b"%d" % i)
    log.high_watermark = log.log_end_offset
    before = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    result = log.compact(T0, force=True)
    assert not result.started
    assert (tmp_path / "t-0" / "00000000000000000000.log").read_bytes() == before
    assert len(records(log)) == 10


def test_high_watermark_bounds_the_cleanable_range(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(30):
        put(log, b"k", b"%d" % i + b"x" * 40)
    log.roll(T0)
    bases = log.segment_bases()
    log.high_watermark = bases[2] + 1  # inside the third segment: it and later ones stay dirty
    log.compact(T0)
    assert log.cleaner_checkpoint == bases[2]
    offs = [r.offset for r in records(log)]
    assert offs == [bases[2] - 1] + list(range(bases[2], 30))


def test_null_keys_are_kept_and_control_batches_untouched(tmp_path) -> None:
    log = open_log(tmp_path / "t-0", cfg(segment_bytes=100_000))
    put(log, None, b"no key")
    put(log, b"k", b"1")
    marker = [(T0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", [])]  # a COMMIT marker
    control = build_batch(marker, is_control=True, producer_id=3, producer_epoch=0)
    log.append(control, now_ms=T0, client=False)
    put(log, b"k", b"2")
    commit(log)
    log.compact(T0)
    assert [(r.offset, r.key) for r in records(log)] == [(0, None), (2, b"\x00\x00\x00\x00"), (3, b"k")]
    assert [h.is_control for h, _ in batches(log)] == [False, True, False]


# --- tombstones -----------------------------------------------------------------------------------


def test_tombstones_stay_until_delete_retention_after_their_first_cleaning(tmp_path) -> None:
    clock = ManualClock(T0)
    log = open_log(tmp_path / "t-0", cfg(delete_retention_ms=1000, segment_bytes=100_000))
    put(log, b"a", b"1", ts=T0 - 50)
    put(log, b"b", b"1", ts=T0 - 40)
    put(log, b"a", None, ts=T0 - 30)
    commit(log)
    log.compact(clock.now_ms())
    [(h, rs)] = [(h, rs) for h, rs in batches(log) if h.base_offset == 2]
    # First cleaning: a's value goes, its tombstone stays, stamped with the delete horizon.
    assert [(r.offset, r.key, r.value) for r in records(log)] == [(1, b"b", b"1"), (2, b"a", None)]
    assert h.attributes & ATTR_DELETE_HORIZON and h.base_timestamp == T0 + 1000
    assert rs[0].timestamp == T0 - 30  # the record keeps its timestamp
    clock.sleep(0.999)
    put(log, b"c", b"1", ts=clock.now_ms())
    commit(log)
    log.compact(clock.now_ms(), force=True)
    assert (2, b"a", None) in [(r.offset, r.key, r.value) for r in records(log)]
    clock.sleep(0.001)  # now == horizon: Kafka removes at currentTime >= deleteHorizonMs
    put(log, b"d", b"1", ts=clock.now_ms())
    commit(log)
    result = log.compact(clock.now_ms(), force=True)
    assert result.stats.tombstones_removed == 1
    assert [(r.offset, r.key) for r in records(log)] == [(1, b"b"), (3, b"c"), (4, b"d")]


def test_a_tombstone_superseded_by_a_value_goes_at_once(tmp_path) -> None:
    log = open_log(tmp_path / "t-0", cfg(segment_bytes=100_000))
    put(log, b"a", None)
    put(log, b"a", b"back")
    commit(log)
    log.compact(T0)
    assert [(r.offset, r.value) for r in records(log)] == [(1, b"back")]


# --- compression ----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [COMPRESSION_GZIP, COMPRESSION_ZSTD])
def test_compressed_batches_are_compacted_and_keep_their_codec(tmp_path, codec) -> None:
    log = open_log(tmp_path / "t-0", cfg(segment_bytes=100_000))
    for round_ in range(3):
        recs = [(T0 + i, b"k%d" % (i % 4), b"r%d-%d" % (round_, i) * 5, [("h", b"v")]) for i in range(8)]
        log.append(build_batch(recs, compression=codec), now_ms=T0)
    commit(log)
    result = log.compact(T0)
    assert result.pass_complete
    got = batches(log)
    assert [(h.base_offset, h.last_offset_delta, h.compression) for h, _ in got] == [(16, 7, codec)]
    assert [(r.offset, r.key, r.value, r.headers) for r in got[0][1]] == [
        (16 + i, b"k%d" % (i % 4), b"r2-%d" % i * 5, [("h", b"v")]) for i in range(4, 8)
    ]


# --- when to clean ----------------------------------------------------------------------------------


def test_dirty_ratio_threshold_is_strict_as_in_kafka(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(20):
        put(log, b"k%d" % (i % 3), b"v" * 40)
    commit(log)
    assert log.compact(T0).pass_complete  # never cleaned: ratio 1.0
    for i in range(20):
        put(log, b"k%d" % (i % 3), b"w" * 40)
    commit(log)
    info = log.cleanable_info(T0)
    assert 0 < info.dirty_ratio < 1
    assert info.dirty_bytes == sum(os.path.getsize(p) for p in dirty_logs(log))
    log.update_config(cfg(min_cleanable_dirty_ratio=info.dirty_ratio))
    assert not log.compact(T0).started  # equal: not cleaned
    log.update_config(cfg(min_cleanable_dirty_ratio=info.dirty_ratio - 1e-9))
    assert log.compact(T0).pass_complete


def dirty_logs(log: PartitionLog) -> list[str]:
    ckpt = log.cleaner_checkpoint
    bases = log.segment_bases()
    return [os.path.join(log.directory, f"{b:020d}.log") for b in bases[:-1] if b >= ckpt]


def test_pure_cleanable_info_examples() -> None:
    def info(**kw):
        args = dict(
            log_start=0,
            log_end=400,
            high_watermark=400,
            checkpoint=None,
            now_ms=T0,
            min_compaction_lag_ms=0,
            max_compaction_lag_ms=MAX_LONG,
            largest_timestamp=lambda i: T0 - 1000 + i * 100,
            first_batch_timestamp=lambda i: T0 - 1000 + i * 100,
        )
        args.update(kw)
        return cleanable_info([0, 100, 200, 300], [10, 20, 30, 40], **args)

    i = info()
    assert (i.first_dirty, i.first_uncleanable, i.clean_bytes, i.dirty_bytes) == (0, 300, 0, 60)
    i = info(checkpoint=200)
    assert (i.first_dirty_segment, i.clean_bytes, i.dirty_bytes, i.dirty_ratio) == (200, 30, 30, 0.5)
    assert not i.should_clean(0.5) and i.should_clean(0.49)
    i = info(checkpoint=500)  # past the end: reset to the log start
    assert i.first_dirty == 0 and i.checkpoint_reset
    i = info(high_watermark=150)
    assert (i.first_uncleanable, i.dirty_bytes) == (100, 10)
    i = info(min_compaction_lag_ms=850)  # segment 1's largest timestamp is T0-900: old enough
    assert i.first_uncleanable == 200
    i = info(checkpoint=300)
    assert i.dirty_bytes == 0 and not i.should_clean(0.0)
    i = info(checkpoint=100, max_compaction_lag_ms=850)  # segment 1's first batch is T0-900
    assert i.needs_compaction_now and i.should_clean(1.0)
    assert not info(checkpoint=100, max_compaction_lag_ms=950).needs_compaction_now


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path) -> None:
    log = open_log(tmp_path / "t-0", cfg(min_compaction_lag_ms=10_000))
    for i in range(30):
        put(log, b"k", b"%d" % i + b"x" * 40, ts=T0 + i * 1000)
    commit(log)
    # Record i has timestamp T0 + i s; segments whose largest one is after T0 + 20 s stay dirty.
    first_recent = min(b for b in log.segment_bases() if next_base(log, b) - 1 > 20)
    assert 0 < first_recent <= 20
    log.compact(T0 + 30_000)
    assert log.cleaner_checkpoint == first_recent
    assert [r.offset for r in records(log)] == list(range(first_recent - 1, 30))


def next_base(log: PartitionLog, base: int) -> int:
    bases = log.segment_bases()
    i = bases.index(base)
    return bases[i + 1] if i + 1 < len(bases) else log.log_end_offset


def test_max_compaction_lag_forces_cleaning_and_rolls_the_active_segment(tmp_path) -> None:
    config = cfg(segment_bytes=100_000, min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=5000)
    log = open_log(tmp_path / "t-0", config)
    put(log, b"k", b"1", ts=T0)
    put(log, b"k", b"2", ts=T0 + 1)
    log.high_watermark = log.log_end_offset
    assert not log.compact(T0 + 5000).started  # nothing inactive
    put(log, b"k", b"3", ts=T0 + 5002)  # rolls: segment.ms is capped by max.compaction.lag.ms
    assert log.segment_bases() == [0, 2]
    log.high_watermark = log.log_end_offset
    assert not log.compact(T0 + 5000).started  # ratio 1.0 is never exceeded, lag not reached
    assert log.compact(T0 + 5002).pass_complete  # first batch T0 < now - 5000
    assert [r.offset for r in records(log)] == [1, 2]


# --- grouping, budget, checkpoint ---------------------------------------------------------------------


def test_small_cleaned_segments_are_grouped_up_to_segment_bytes(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(60):
        put(log, b"k%d" % (i % 2), b"v" * 40)
    commit(log)
    n_before = len(log.segment_bases())
    log.compact(T0)
    assert len(log.segment_bases()) == n_before  # every segment was full: nothing to merge
    put(log, b"j", b"w" * 40)
    commit(log)
    log.compact(T0, force=True)  # the segments cleaned to (almost) nothing are merged now
    bases = log.segment_bases()
    assert len(bases) == 2
    sizes = [os.path.getsize(os.path.join(log.directory, f"{b:020d}.log")) for b in bases[:-1]]
    assert all(s <= 600 for s in sizes)
    assert latest(log) == {b"k0": b"v" * 40, b"k1": b"v" * 40, b"j": b"w" * 40}
    # The rebuilt indexes are the ones a scan would build.
    assert_indexes_match_a_rebuild(log, tmp_path)


def assert_indexes_match_a_rebuild(log: PartitionLog, tmp_path) -> None:
    log.close()
    copy = tmp_path / "copy" / "t-0"
    shutil.copytree(log.directory, copy)
    for name in os.listdir(copy):
        if name.endswith((".index", ".timeindex")):
            os.unlink(copy / name)
    rebuilt = open_log(copy)
    again = open_log(log.directory)
    for base in again.segment_bases()[:-1]:
        for off in range(base, next_base(again, base)):
            assert records_from(again, off) == records_from(rebuilt, off)
    assert again.offset_for_timestamp(T0) == rebuilt.offset_for_timestamp(T0)
    rebuilt.close()
    again.close()


def test_a_pass_in_small_steps_with_appends_in_between(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    expected = {}
    for i in range(80):
        k, v = b"k%d" % (i % 5), b"%d" % i + b"x" * 40
        put(log, k, v)
        expected[k] = v
    commit(log)
    steps = 0
    while True:
        result = log.compact(T0, budget_bytes=100)
        steps += 1
        assert result.aborted is None
        k, v = b"new%d" % steps, b"y"
        put(log, k, v)  # appends go on between steps
        expected[k] = v
        assert latest(log) == expected
        if result.pass_complete:
            break
        assert log.compaction_in_progress
    assert steps > 5
    assert not log.compaction_in_progress
    assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]


def test_truncation_abandons_a_pass(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(60):
        put(log, b"k%d" % (i % 3), b"%d" % i + b"x" * 40)
    commit(log)
    log.compact(T0, budget_bytes=2000)  # map built, a group half written
    assert log.compaction_in_progress
    log.truncate_to(40)
    assert not log.compaction_in_progress
    result = log.compact(T0)
    assert result.aborted is None and result.pass_complete
    assert {r.key: r.offset for r in records(log)} == {b"k0": 39, b"k1": 37, b"k2": 38}
    assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]


def test_the_checkpoint_survives_a_restart_and_is_clamped_by_truncation(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(40):
        put(log, b"k%d" % (i % 3), b"x" * 40)
    commit(log)
    log.compact(T0)
    ckpt = log.cleaner_checkpoint
    assert ckpt == log.segment_bases()[-1] == 40
    log.close()
    log = open_log(tmp_path / "t-0")
    assert log.cleaner_checkpoint == ckpt
    assert log.cleanable_info(T0).dirty_bytes == 0
    log.truncate_to(30)
    log.close()
    log = open_log(tmp_path / "t-0")
    assert log.cleaner_checkpoint == log.log_end_offset == 30
    log.close()


def test_retention_under_compact_delete_still_applies(tmp_path) -> None:
    log = open_log(tmp_path / "t-0", cfg(cleanup_policy="compact,delete", retention_ms=1000))
    for i in range(30):
        put(log, b"k%d" % (i % 3), b"x" * 40, ts=T0)
    commit(log)
    log.compact(T0)
    assert log.apply_retention(T0 + 2000) > 0
    assert log.log_start_offset == log.segment_bases()[0]


# --- producer state ------------------------------------------------------------------------------------


def test_the_last_batch_of_each_producer_survives_as_an_empty_batch(tmp_path) -> None:
    log = open_log(tmp_path / "t-0", cfg(segment_bytes=100_000))
    for seq in range(3):
        b = build_batch([(T0, b"p", b"%d" % seq, [])], producer_id=7, producer_epoch=2, base_sequence=seq)
        log.append(b, now_ms=T0)
    put(log, b"p", b"plain")  # supersedes the producer's records
    commit(log)
    before = log.producer_entry(7)
    log.compact(T0)
    got = [(h.base_offset, h.producer_id, h.base_sequence, h.records_count) for h, _ in batches(log)]
    assert got == [(2, 7, 2, 0), (3, -1, -1, 1)]
    log.close(flush=False)
    for name in os.listdir(tmp_path / "t-0"):
        if name.endswith(".snapshot"):
            os.unlink(tmp_path / "t-0" / name)
    log = open_log(tmp_path / "t-0")  # replays the batch headers from the log start
    after = log.producer_entry(7)
    assert (after.epoch, after.last_seq, after.batches[-1]) == (before.epoch, before.last_seq, before.batches[-1])
    retry = build_batch([(T0, b"p", b"2", [])], producer_id=7, producer_epoch=2, base_sequence=2)
    info = log.append(retry, now_ms=T0)
    assert info.duplicate and info.base_offset == 2
    nxt = build_batch([(T0, b"p", b"3", [])], producer_id=7, producer_epoch=2, base_sequence=3)
    assert not log.append(nxt, now_ms=T0).duplicate
    log.close()


# --- crashes -------------------------------------------------------------------------------------------


class CrashAt(FileSystem):
    """Real files; the ``at``-th mutating operation (write, fsync, rename, unlink, truncate) kills
    the process (a write first writes half its bytes). ``at=None`` only counts."""

    def __init__(self, at: int | None) -> None:
        self.at = at
        self.n = 0
        self.dead = False
        self.fds: set[int] = set()
        self.ops: list[str] = []

    def _tick(self, what: str) -> None:
        if self.dead:
            raise Crash("dead")
        self.n += 1
        self.ops.append(what)
        if self.at is not None and self.n == self.at:
            self.dead = True
            raise Crash(what)

    def open(self, path, flags, mode=0o644):
        if self.dead:
            raise Crash("dead")
        fd = super().open(path, flags, mode)
        self.fds.add(fd)
        return fd

    def close(self, fd):
        self.fds.discard(fd)
        super().close(fd)

    def pread(self, fd, size, offset):
        if self.dead:
            raise Crash("dead")
        return super().pread(fd, size, offset)

    def pwrite(self, fd, data, offset):
        if self.at is not None and self.n + 1 == self.at and len(data) > 1:
            super().pwrite(fd, memoryview(data)[: len(data) // 2], offset)
        self._tick("pwrite")
        return super().pwrite(fd, data, offset)

    def fsync(self, fd):
        self._tick("fsync")
        super().fsync(fd)

    def rename(self, src, dst):
        self._tick(f"rename {os.path.basename(src)} {os.path.basename(dst)}")
        super().rename(src, dst)

    def unlink(self, path):
        self._tick(f"unlink {os.path.basename(path)}")
        super().unlink(path)

    def ftruncate(self, fd, size):
        self._tick("ftruncate")
        super().ftruncate(fd, size)

    def bury(self) -> None:
        for fd in list(self.fds):
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()


def test_restart_after_a_crash_at_every_step_of_compaction(tmp_path) -> None:
    pristine = tmp_path / "pristine" / "t-0"
    log = open_log(pristine, cfg(segment_bytes=400, delete_retention_ms=0))
    for i in range(40):
        key = b"u%d" % i if i % 7 == 3 else b"k%d" % (i % 4)  # some keys are never overwritten
        put(log, key, None if i % 9 == 8 else b"%d" % i + b"x" * 30)
        if i == 29:  # a first pass leaves small segments, which the crashing pass groups
            commit(log)
            assert log.compact(T0).pass_complete
    put(log, b"a", b"active")
    log.high_watermark = log.log_end_offset
    expected = latest(log)
    original = {r.offset: (r.key, r.value) for r in records(log)}
    hw = log.high_watermark
    log.close()

    def check(d) -> None:
        got = open_log(d)  # no state: recovery verifies every segment
        assert_segments_disjoint(d)
        got.high_watermark = hw
        assert_same_latest(latest(got), expected)  # tombstones past their horizon may be gone
        assert all(original[r.offset] == (r.key, r.value) for r in records(got))
        assert not [n for n in os.listdir(d) if n.endswith((".cleaned", ".swap"))]
        result = got.compact(T0 + 1, force=True)
        assert result.aborted is None
        assert_same_latest(latest(got), expected)
        got.close()

    # Count the operations of a whole compaction, then crash at each of them.
    counter = CrashAt(None)
    work = tmp_path / "count" / "t-0"
    shutil.copytree(pristine, work)
    log = open_log(work, fs=counter)
    log.high_watermark = hw
    counter.n = 0
    counter.ops.clear()
    assert log.compact(T0 + 1, force=True).pass_complete
    total = counter.n
    swapped = [op for op in counter.ops if op.startswith("rename") and op.endswith(".log.swap")]
    retired = [op for op in counter.ops if op.startswith("rename") and op.endswith(".log.deleted")]
    assert 1 < len(swapped) < len(retired)  # groups of several segments were swapped in
    log.close()
    outcomes = set()
    for at in range(1, total + 1):
        work = tmp_path / f"w{at}" / "t-0"
        shutil.copytree(pristine, work)
        fs = CrashAt(None)
        log = open_log(work, fs=fs)
        log.high_watermark = hw
        fs.at = fs.n + at
        with pytest.raises(Crash):
            log.compact(T0 + 1, force=True)
        fs.bury()
        swaps = [n for n in os.listdir(work) if n.endswith(".log.swap")]
        outcomes.add("swap" if swaps else "no swap")
        check(work)
        shutil.rmtree(work.parent)
    assert outcomes == {"swap", "no swap"}


def assert_same_latest(got: dict, expected: dict) -> None:
    """The same value for every key, except that a deleted key (tombstone) may be absent."""
    assert {k: v for k, v in got.items() if v is not None} == {k: v for k, v in expected.items() if v is not None}
    assert all(expected[k] is None for k, v in got.items() if v is None)


def assert_segments_disjoint(d) -> None:
    """Every batch of every segment file lies in [its base, the next segment's base)."""
    bases = sorted(int(n[:20]) for n in os.listdir(d) if n.endswith(".log"))
    for i, base in enumerate(bases):
        name = f"{base:020d}.log"
        for _p, h in parse_batches((d / name).read_bytes(), allow_partial=True):
            assert base <= h.base_offset and (i + 1 == len(bases) or h.last_offset < bases[i + 1]), (name, h)


def test_a_torn_cleaned_file_is_rolled_back_and_a_swap_completed_at_load(tmp_path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    for i in range(30):
        put(log, b"k%d" % (i % 2), b"%d" % i + b"x" * 40)
    commit(log)
    expected = latest(log)
    log.close()
    # A leftover .cleaned (crash while writing) and index .swap without a log .swap: deleted.
    (d / "00000000000000000000.log.cleaned").write_bytes(b"garbage")
    (d / "00000000000000000011.index.swap").write_bytes(b"\x00" * 8)
    log = open_log(d)
    assert latest(log) == expected
    assert sorted(n for n in os.listdir(d) if "cleaned" in n or "swap" in n) == []
    log.close()


# --- concurrency ---------------------------------------------------------------------------------------


class Watch(FileSystem):
    """Calls ``hook`` on each write to a ``.cleaned`` file."""

    def __init__(self) -> None:
        self.hook = None
        self.paths: dict[int, str] = {}

    def open(self, path, flags, mode=0o644):
        fd = super().open(path, flags, mode)
        self.paths[fd] = path
        return fd

    def pwrite(self, fd, data, offset):
        if self.hook is not None and self.paths.get(fd, "").endswith(".cleaned"):
            self.hook()
        return super().pwrite(fd, data, offset)


def test_cleaned_data_is_written_without_the_partition_lock(tmp_path) -> None:
    fs = Watch()
    log = open_log(tmp_path / "t-0", fs=fs)
    for i in range(40):
        put(log, b"k%d" % (i % 3), b"%d" % i + b"x" * 40)
    commit(log)
    expected = latest(log)
    seen = []

    def hook() -> None:
        assert not log._lock.locked()
        put(log, b"during", b"%d" % len(seen))  # an append, and a read, while the cleaner writes
        seen.append(latest(log))

    fs.hook = hook
    log.compact(T0)
    assert seen
    for got in seen:
        assert {k: v for k, v in got.items() if k != b"during"} == expected


def test_reads_racing_with_compaction_see_consistent_data(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(300):
        put(log, b"k%d" % (i % 7), b"%d" % i + b"x" * 30)
    commit(log)
    expected = latest(log)
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        try:
            while not stop.is_set():
                assert latest(log) == expected
                reads[0] += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        while not log.compact(T0, budget_bytes=300).pass_complete:
            pass
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    assert reads[0] > 0
    assert latest(log) == expected


# --- the manager ---------------------------------------------------------------------------------------


def test_run_periodic_compacts_within_its_budget_and_backs_off(tmp_path) -> None:
    clock = ManualClock(T0)
    m = LogManager(tmp_path, clock=clock, cleaner_step_bytes=500, cleaner_backoff_ms=10_000)
    m.load()
    plain = m.get_or_create("plain", 0, cfg(cleanup_policy="delete"))
    log = m.get_or_create("__consumer_offsets", 0, cfg())
    for i in range(50):
        put(log, b"g%d" % (i % 2), b"%d" % i + b"x" * 40)
        put(plain, b"g", b"x" * 40)
    commit(log)
    commit(plain)
    report = m.run_periodic(clock.now_ms())
    assert report.compaction_passes == 1 and report.compacted_bytes > 0
    assert len(records(log)) == 2 and len(records(plain)) == 50
    for i in range(20):
        put(log, b"g%d" % (i % 2), b"y" * 40)
    commit(log)
    assert m.run_periodic(clock.now_ms()).compaction_passes == 0  # backing off
    clock.sleep(10)
    assert m.run_periodic(clock.now_ms()).compaction_passes == 1
    assert (tmp_path / "__consumer_offsets-0" / CHECKPOINT_FILE).exists()
    m.close()


def test_topic_configs_reach_the_log_config() -> None:
    from shoal.config import BrokerConfig, log_config

    broker = BrokerConfig.load(None, {"log.cleaner.delete.retention.ms": "5000"})
    overrides = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.25", "max.compaction.lag.ms": "9000"}
    lc = log_config(broker, overrides)
    assert lc.compact_enabled and not lc.delete_enabled

    def fields(c: LogConfig) -> tuple:
        return (c.min_cleanable_dirty_ratio, c.min_compaction_lag_ms, c.max_compaction_lag_ms, c.delete_retention_ms)

    assert fields(lc) == (0.25, 0, 9000, 5000)
    assert fields(LogConfig()) == (0.5, 0, MAX_LONG, DAY)  # Kafka's defaults


# --- pure functions --------------------------------------------------------------------------------------


def test_group_end_bounds_bytes_and_relative_offsets() -> None:
    bases = [0, 10, 20, 30, 40]
    assert group_end(bases, [100, 100, 100, 100, 0], 0, 4, 300) == 3
    assert group_end(bases, [100, 100, 100, 100, 0], 0, 2, 300) == 2
    assert group_end(bases, [400, 1, 1, 1, 0], 0, 4, 300) == 1  # the first segment always
    assert group_end(bases, [0, 0, 0, 0, 0], 1, 4, 0) == 4
    far = [0, 2**31, 2**31 + 5]
    assert group_end(far, [10, 10, 0], 0, 2, 1000) == 1  # offsets of segment 1 do not fit


def test_clean_batch_keeps_untouched_batches_byte_for_byte() -> None:
    data = build_batch([(T0, b"a", b"1", []), (T0, b"b", b"1", [])], base_offset=10, compression=COMPRESSION_GZIP)
    h = parse_batches(data)[0][1]
    m = OffsetMap()
    m.add_batch(data, 0, h)
    assert m.offsets == {b"a": 10, b"b": 11}
    stats = CleanerStats()
    assert clean_batch(data, 0, h, m, now_ms=T0, delete_retention_ms=0, retain_empty=False, stats=stats) == data
    m.offsets[b"a"] = 12
    m.offsets[b"b"] = 12
    assert clean_batch(data, 0, h, m, now_ms=T0, delete_retention_ms=0, retain_empty=False, stats=stats) is None
    empty = clean_batch(data, 0, h, m, now_ms=T0, delete_retention_ms=0, retain_empty=True, stats=stats)
    eh = parse_batches(empty, verify_crc=True)[0][1]
    assert (eh.base_offset, eh.last_offset_delta, eh.records_count, eh.compression) == (10, 1, 0, 0)


# --- the property ----------------------------------------------------------------------------------------

writes = st.lists(
    st.tuples(st.integers(0, 9), st.one_of(st.none(), st.binary(min_size=0, max_size=30)), st.integers(1, 3)),
    min_size=1,
    max_size=120,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=writes,
    codec=st.sampled_from([0, 0, COMPRESSION_GZIP, COMPRESSION_ZSTD]),
    budget=st.sampled_from([None, 200, 5000]),
    retention=st.sampled_from([0, 10, DAY]),
    segment_bytes=st.sampled_from([200, 500, 2000]),
)
def test_compaction_keeps_the_latest_value_of_every_key(
    tmp_path_factory, ops, codec, budget, retention, segment_bytes
) -> None:
    d = tmp_path_factory.mktemp("prop") / "t-0"
    log = open_log(d, cfg(segment_bytes=segment_bytes, delete_retention_ms=retention))
    expected: dict = {}
    last_offset: dict = {}
    pending: list = []
    now = T0

    def flush_pending() -> None:
        if pending:
            info = log.append(build_batch(pending, compression=codec), now_ms=now, client=False)
            for i, (_ts, k, _v, _h) in enumerate(pending):
                last_offset[k] = info.base_offset + i
            pending.clear()

    for n, (k, v, batch_len) in enumerate(ops):
        key = b"key%d" % k
        pending.append((now + n, key, v, []))
        expected[key] = v
        if len(pending) >= batch_len:
            flush_pending()
        if n % 17 == 16:
            commit(log)
            now += 7
            while not log.compact(now, budget_bytes=budget, force=True).pass_complete and log.compaction_in_progress:
                pass
    flush_pending()
    commit(log)
    for _ in range(2):
        now += 7
        while True:
            r = log.compact(now, budget_bytes=budget, force=True)
            assert r.aborted is None
            if not log.compaction_in_progress:
                break
        put(log, b"tick", b"", ts=now)
        commit(log)
        expected[b"tick"] = b""
        last_offset[b"tick"] = log.log_end_offset - 1
    got = latest(log)
    assert_same_latest(got, expected)
    assert {r.key: r.offset for r in records(log)} == {k: o for k, o in last_offset.items() if k in got}
    log.close()
