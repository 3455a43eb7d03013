"""LogManager: loading, creation, deletion, upkeep, shared caches, a worker thread beside appends."""

from __future__ import annotations

import os
import threading
import time

from storage_helpers import T0, batch, read_all

from shoal.clock import ManualClock
from shoal.storage import LogConfig, LogManager, parse_partition_dir
from shoal.storage.fs import FileSystem


def manager(tmp_path, **kw) -> tuple[LogManager, ManualClock]:
    clock = ManualClock(T0)
    m = LogManager(tmp_path, clock=clock, **kw)
    m.load()
    return m, clock


def test_parse_partition_dir() -> None:
    assert parse_partition_dir("a-b.c-12") == ("a-b.c", 12)
    assert parse_partition_dir("x-0") == ("x", 0)
    for bad in ("x", "-3", "x-", "x-a", "x-01", "x-1.abc-delete", "__metadata"):
        assert parse_partition_dir(bad) is None, bad


def test_load_finds_partitions_and_ignores_the_rest(tmp_path) -> None:
    m, clock = manager(tmp_path)
    for name, p in [("my-topic.v2", 0), ("my-topic.v2", 1), ("x", 7)]:
        m.get_or_create(name, p).append(batch(2), now_ms=T0)
    m.close()
    (tmp_path / "__metadata").mkdir()
    (tmp_path / "junk-dir-x").mkdir()
    (tmp_path / "old-0.0123abcd-delete").mkdir()
    (tmp_path / "old-0.0123abcd-delete" / "00000000000000000000.log").write_bytes(b"x")
    m2, _ = manager(tmp_path)
    assert sorted(m2.partitions()) == [("my-topic.v2", 0), ("my-topic.v2", 1), ("x", 7)]
    assert not (tmp_path / "old-0.0123abcd-delete").exists()
    assert (tmp_path / "__metadata").exists()
    assert m2.get("x", 7).log_end_offset == 2 and m2.get("x", 8) is None
    m2.close()


def test_get_or_create_applies_the_config(tmp_path) -> None:
    m, _ = manager(tmp_path)
    a = m.get_or_create("t", 0, LogConfig(segment_bytes=1000))
    assert m.get_or_create("t", 0) is a and a.config.segment_bytes == 1000
    m.get_or_create("t", 0, LogConfig(segment_bytes=2000))
    assert a.config.segment_bytes == 2000
    m.close()


def test_delete_partition(tmp_path) -> None:
    m, _ = manager(tmp_path)
    log = m.get_or_create("t", 0)
    log.append(batch(3), now_ms=T0)
    assert m.delete_partition("t", 0)
    assert m.get("t", 0) is None and not (tmp_path / "t-0").exists()
    assert [n for n in os.listdir(tmp_path) if n.endswith("-delete")] == []
    assert not m.delete_partition("t", 0)
    assert m.get_or_create("t", 0).log_end_offset == 0
    m.close()


def test_high_watermark_and_offsets_persist(tmp_path) -> None:
    m, clock = manager(tmp_path)
    log = m.get_or_create("t", 0)
    for _ in range(5):
        log.append(batch(2), now_ms=T0)
    log.high_watermark = 6
    m.close()
    assert (tmp_path / ".shoal-clean-shutdown").exists()
    m2, _ = manager(tmp_path)
    log2 = m2.get("t", 0)
    assert (log2.log_start_offset, log2.high_watermark, log2.log_end_offset) == (0, 6, 10)
    assert log2.recovery_point == 10
    m2.close()


def test_run_periodic(tmp_path) -> None:
    cfg = LogConfig(segment_bytes=len(batch(2)) * 2, retention_ms=10_000, file_delete_delay_ms=1_000)
    m, clock = manager(tmp_path, checkpoint_interval_ms=5_000, retention_check_interval_ms=1_000)
    log = m.get_or_create("t", 0, cfg)
    for _ in range(6):
        log.append(batch(2, ts=clock.now_ms()), now_ms=clock.now_ms())
    log.high_watermark = log.log_end_offset
    report = m.run_periodic(clock.now_ms())
    assert report.flushed == 1 and report.checkpointed  # rolled segments get fsynced; new partition
    assert log.recovery_point == 12
    clock.sleep(11)
    report = m.run_periodic(clock.now_ms())
    assert report.deleted_segments == 3  # every segment expired: the active one was rolled first
    assert log.log_start_offset == 12 and log.segment_bases() == [12]
    assert report.checkpointed  # the log start moved
    clock.sleep(1)
    report = m.run_periodic(clock.now_ms())
    assert report.purged_files >= 3 and not report.checkpointed
    # The roll before the deletion left a producer snapshot at the new active segment's base.
    assert sorted(os.listdir(tmp_path / "t-0")) == [
        "00000000000000000012.log", "00000000000000000012.snapshot", "leader-epoch-checkpoint"
    ]
    m.close()


def test_segment_ms_rolls_idle_partitions(tmp_path) -> None:
    m, clock = manager(tmp_path, retention_check_interval_ms=0)
    log = m.get_or_create("t", 0, LogConfig(segment_ms=60_000))
    log.append(batch(1, ts=T0), now_ms=T0)
    assert m.run_periodic(T0 + 60_000).rolled == 0
    assert m.run_periodic(T0 + 60_001).rolled == 1
    assert log.segment_bases() == [0, 1]
    m.close()


def test_open_files_are_bounded(tmp_path) -> None:
    m, _ = manager(tmp_path, max_open_files=4)
    for p in range(20):
        log = m.get_or_create("t", p, LogConfig(segment_bytes=500))
        for _ in range(4):
            log.append(batch(1), now_ms=T0)
    assert len(m.handles) <= 4
    for p in range(20):
        assert read_all(m.get("t", p)) == [0, 1, 2, 3]
        assert len(m.handles) <= 4
    m.close()


def test_index_cache_budget(tmp_path) -> None:
    cfg = LogConfig(segment_bytes=1000, index_interval_bytes=50)
    m, clock = manager(tmp_path, index_cache_bytes=200)
    log = m.get_or_create("t", 0, cfg)
    for i in range(100):
        log.append(batch(1, ts=T0 + i), now_ms=T0)
    m.close()
    m2 = LogManager(tmp_path, clock=clock, index_cache_bytes=200)
    m2.load(config_for=lambda topic: cfg)
    log2 = m2.get("t", 0)
    for o in range(0, 100, 3):
        assert log2.read(o, 1).records
        assert m2.index_cache.total_bytes <= 200 or len(m2.index_cache._lru) == 1
    assert log2.offset_for_timestamp(T0 + 42) == (42, T0 + 42)
    m2.close()


def test_maintenance_in_a_thread_beside_appends(tmp_path) -> None:
    cfg = LogConfig(segment_bytes=2000, retention_bytes=20_000, file_delete_delay_ms=0, flush_messages=50)
    m, clock = manager(tmp_path, retention_check_interval_ms=0, checkpoint_interval_ms=0, max_open_files=8)
    logs = [m.get_or_create("t", p, cfg) for p in range(4)]
    stop = threading.Event()
    errors: list[BaseException] = []
    runs = [0]

    def upkeep() -> None:
        try:
            while not stop.is_set():
                m.run_periodic(clock.now_ms())
                runs[0] += 1
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=upkeep)
    t.start()
    try:
        for i in range(2000):
            if i % 50 == 0:
                time.sleep(0.001)  # let the maintenance thread in
            log = logs[i % 4]
            log.append(batch(2), now_ms=T0)
            log.high_watermark = log.log_end_offset
            log.read(max(log.log_start_offset, log.log_end_offset - 3), 1 << 16)
    finally:
        stop.set()
        t.join()
    # How often the thread got in depends on scheduling; what matters is that it ran beside the
    # appends without an error, and that the logs are consistent afterwards.
    assert errors == [] and runs[0] >= 1
    m.run_periodic(clock.now_ms())  # retention for whatever the thread did not reach
    for log in logs:
        assert log.log_end_offset == 1000
        got = read_all(log)
        assert got == list(range(log.log_start_offset, 1000)) and log.log_start_offset > 0
    m.close()
    m2, _ = manager(tmp_path)
    assert [m2.get("t", p).log_end_offset for p in range(4)] == [1000] * 4
    m2.close()


def test_idle_partitions_are_cheap_to_open(tmp_path) -> None:
    import gc
    import tracemalloc

    m, clock = manager(tmp_path)
    for p in range(300):
        m.get_or_create("t", p).append(batch(1), now_ms=T0)
    m.close()
    gc.collect()
    tracemalloc.start()
    m2 = LogManager(tmp_path, clock=clock, max_open_files=16)
    m2.load()
    used, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(m2.partitions()) == 300
    assert used / 300 < 8 * 1024  # bytes per idle partition (the target is 50 KiB)
    assert len(m2.handles) == 0  # nothing opened until used
    assert all(m2.get("t", p).log_end_offset == 1 for p in range(300))
    m2.close()


def test_flush_ms_is_honoured_by_run_periodic(tmp_path) -> None:
    m, clock = manager(tmp_path, retention_check_interval_ms=10**9)
    log = m.get_or_create("t", 0, LogConfig(flush_ms=1_000))
    log.append(batch(2), now_ms=clock.now_ms())
    assert m.run_periodic(clock.now_ms()).flushed == 0
    clock.sleep(1)
    assert m.run_periodic(clock.now_ms()).flushed == 1
    assert log.recovery_point == 2
    m.close()


class _CountingFS(FileSystem):
    """Counts the state file's writes and the reads of partition directories."""

    def __init__(self) -> None:
        self.state_writes: list[bytes] = []
        self.scans = 0

    def write_file_atomic(self, path: str, data: bytes) -> None:
        if os.path.basename(path) == "shoal-log-state":
            self.state_writes.append(data)
        super().write_file_atomic(path, data)

    def scandir(self, path: str):
        self.scans += 1
        return super().scandir(path)


def test_the_state_checkpoint_is_written_only_when_a_partitions_state_changed(tmp_path) -> None:
    """Issue 25: a creation of thousands of partitions checkpointed every one every second."""
    fs = _CountingFS()
    m, clock = manager(tmp_path, fs=fs)
    logs = [m.get_or_create("t", i) for i in range(3)]
    m.checkpoint()
    assert len(fs.state_writes) == 1
    m.checkpoint()
    m.checkpoint()
    assert len(fs.state_writes) == 1  # nothing changed: not written again
    logs[1].append(batch(2), now_ms=T0)
    logs[1].high_watermark = 2
    m.checkpoint()
    assert len(fs.state_writes) == 2
    assert b"t 1 0 2 0 2 0 " in fs.state_writes[-1] and b"t 0 0 0 0 0 0 0\n" in fs.state_writes[-1]
    m.delete_partition("t", 2)
    m.checkpoint()
    assert len(fs.state_writes) == 3 and b"t 2 " not in fs.state_writes[-1]
    m.close()
    m2, _ = manager(tmp_path)
    assert m2.loaded_cleanly
    assert sorted(m2.partitions()) == [("t", 0), ("t", 1)]
    assert (m2.get("t", 1).log_end_offset, m2.get("t", 1).high_watermark) == (2, 2)
    m2.close()


def test_a_failed_state_write_is_written_again_in_full(tmp_path) -> None:
    class Failing(_CountingFS):
        fail = True

        def write_file_atomic(self, path: str, data: bytes) -> None:
            if self.fail and os.path.basename(path) == "shoal-log-state":
                raise OSError("disk full")
            super().write_file_atomic(path, data)

    fs = Failing()
    m, _ = manager(tmp_path, fs=fs)
    m.get_or_create("t", 0)
    try:
        m.checkpoint()
    except OSError:
        pass
    fs.fail = False
    m.checkpoint()  # nothing changed since the failed write: written all the same
    assert len(fs.state_writes) == 1 and b"t 0 0 0 0 0 0 0\n" in fs.state_writes[0]
    m.close()


def test_a_new_partitions_directory_is_not_read_but_an_existing_one_is(tmp_path) -> None:
    fs = _CountingFS()
    m, _ = manager(tmp_path, fs=fs)
    scans = fs.scans
    m.get_or_create("new", 0)
    assert fs.scans == scans  # created here: empty, nothing to read
    (tmp_path / "old-0").mkdir()  # an existing directory (a crash between mkdir and the manager's state)
    (tmp_path / "old-0" / "00000000000000000000.index").write_bytes(b"")  # an index without its log
    m.get_or_create("old", 0)
    assert fs.scans > scans
    assert not (tmp_path / "old-0" / "00000000000000000000.index").exists()  # read and cleaned up
    m.close()
