"""Crash recovery: torn tails at every byte, crashes at every write, corrupt data, lost indexes."""

from __future__ import annotations

import os
import shutil

import pytest
from storage_helpers import T0, Crash, FaultyFS, batch, read_all

from shoal.clock import ManualClock
from shoal.protocol.records import iter_records, parse_batches
from shoal.storage import LogConfig, LogManager, PartitionLog

ACTIVE = "00000000000000000000.log"


def values(log) -> list[tuple[int, bytes]]:
    out = []
    pos = log.log_start_offset
    while pos < log.log_end_offset:
        recs = [r for r in iter_records(log.read(pos, 1 << 20).records) if r.offset >= pos]
        out.extend((r.offset, r.value) for r in recs)
        pos = recs[-1].offset + 1
    return out


def test_torn_tail_at_every_cut_position(tmp_path) -> None:
    src = tmp_path / "src" / "t-0"
    log = PartitionLog.open(src, LogConfig(index_interval_bytes=100), now_ms=T0)
    for i in range(6):
        log.append(batch(2, value_size=30, tag=b"%d" % i), now_ms=T0)
    last_start = log.size_bytes
    log.append(batch(4, value_size=40, tag=b"last"), now_ms=T0)
    expected = values(log)
    log.close(flush=False)
    pristine = (src / ACTIVE).read_bytes()
    assert len(pristine) > last_start + 61

    work = tmp_path / "w" / "t-0"
    for cut in range(last_start, len(pristine) + 1):
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        (work / ACTIVE).write_bytes(pristine[:cut])
        got = PartitionLog.open(work, LogConfig(index_interval_bytes=100), now_ms=T0)  # no state: verify all
        whole = cut == len(pristine)
        assert got.log_end_offset == (16 if whole else 12), cut
        assert os.path.getsize(work / ACTIVE) == (cut if whole else last_start), cut
        assert values(got) == (expected if whole else expected[:12]), cut
        assert got.append(batch(1), now_ms=T0).base_offset == got.log_end_offset - 1
        got.close(flush=False)


def test_recovery_starts_at_the_recovery_point(tmp_path) -> None:
    clock = ManualClock(T0)
    m = LogManager(tmp_path, clock=clock)
    m.load()
    log = m.get_or_create("t", 0, LogConfig(segment_bytes=1000))
    for _ in range(20):
        log.append(batch(2), now_ms=T0)
    log.flush()
    for _ in range(3):
        log.append(batch(2), now_ms=T0)
    m.checkpoint()
    active = log.segment_bases()[-1]
    m.handles.close_all()  # crash: no clean-shutdown marker

    fs = FaultyFS()
    m2 = LogManager(tmp_path, clock=clock, fs=fs)
    m2.load()
    assert not m2.loaded_cleanly
    read_logs = {os.path.basename(p) for p in fs.reads if p.endswith(".log")}
    assert read_logs == {f"{active:020d}.log"}
    assert read_all(m2.get("t", 0)) == list(range(46))
    m2.close()


def test_clean_start_reads_no_data(tmp_path) -> None:
    clock = ManualClock(T0)
    m = LogManager(tmp_path, clock=clock)
    m.load()
    for p in range(3):
        log = m.get_or_create("t", p, LogConfig(segment_bytes=1000))
        for _ in range(10):
            log.append(batch(2), now_ms=T0)
    m.close()
    fs = FaultyFS()
    m2 = LogManager(tmp_path, clock=clock, fs=fs)
    m2.load()
    assert m2.loaded_cleanly
    assert [p for p in fs.reads if p.endswith(("log", "index"))] == []  # only the state file
    assert not os.path.exists(tmp_path / ".shoal-clean-shutdown")
    for p in range(3):
        assert m2.get("t", p).log_end_offset == 20
        assert read_all(m2.get("t", p)) == list(range(20))
    m2.close()


def test_corrupt_batch_truncates_and_drops_later_segments(tmp_path) -> None:
    src = tmp_path / "t-0"
    log = PartitionLog.open(src, LogConfig(segment_bytes=700), now_ms=T0)
    for _ in range(15):
        log.append(batch(2), now_ms=T0)
    bases = log.segment_bases()
    assert len(bases) >= 4
    log.close(flush=False)
    victim = src / f"{bases[1]:020d}.log"
    data = bytearray(victim.read_bytes())
    positions = [p for p, _ in parse_batches(bytes(data))]
    data[positions[1] + 70] ^= 0xFF  # inside the second batch of the second segment
    victim.write_bytes(bytes(data))

    got = PartitionLog.open(src, LogConfig(segment_bytes=700), now_ms=T0)
    assert got.segment_bases() == bases[:2]
    assert got.log_end_offset == bases[1] + 2
    assert read_all(got) == list(range(bases[1] + 2))
    assert sorted(f for f in os.listdir(src) if f.endswith(".log")) == [f"{b:020d}.log" for b in bases[:2]]
    assert got.append(batch(1), now_ms=T0).base_offset == bases[1] + 2


def test_out_of_order_offsets_are_corruption(tmp_path) -> None:
    src = tmp_path / "t-0"
    log = PartitionLog.open(src, now_ms=T0)
    for _ in range(3):
        log.append(batch(2), now_ms=T0)
    log.close(flush=False)
    data = (src / ACTIVE).read_bytes()
    first = parse_batches(data)[0][1].size
    (src / ACTIVE).write_bytes(data + data[:first])  # a stale copy of batch 0 after batch 2
    got = PartitionLog.open(src, now_ms=T0)
    assert got.log_end_offset == 6 and os.path.getsize(src / ACTIVE) == len(data)


def scenario(tmp_path, fs, acked: list[tuple[int, bytes]]) -> None:
    """Appends with rolls, flushes, checkpoints and retention until ``fs`` crashes (or not)."""
    clock = ManualClock(T0)
    m = LogManager(tmp_path, clock=clock, fs=fs, checkpoint_interval_ms=0, retention_check_interval_ms=0)
    m.load()
    cfg = LogConfig(segment_bytes=900, index_interval_bytes=150, retention_bytes=5000, file_delete_delay_ms=0)
    log = m.get_or_create("t", 0, cfg)
    for i in range(24):
        value = b"v%03d" % i
        b = batch(1 + i % 3, value_size=40, tag=value)
        info = log.append(b, now_ms=clock.now_ms())
        log.high_watermark = log.log_end_offset
        acked.extend((o, value) for o in range(info.base_offset, info.last_offset + 1))
        if i % 5 == 4:
            m.run_periodic(clock.now_ms())
        clock.sleep(1)
    m.close()


@pytest.mark.parametrize("torn", [0, 7, 64])
def test_crash_at_every_write(tmp_path, torn: int) -> None:
    total = FaultyFS()
    scenario(tmp_path / "count", total, [])
    assert total.writes > 30
    for fail_at in range(1, total.writes + 1):
        d = tmp_path / f"run{fail_at}"
        fs = FaultyFS()
        fs.fail_at = fail_at
        fs.torn_bytes = torn
        acked: list[tuple[int, bytes]] = []
        with pytest.raises(Crash):
            scenario(d, fs, acked)
        fs.bury()
        m = LogManager(d, clock=ManualClock(T0))
        m.load()
        log = m.get("t", 0)
        if log is None:  # died before the partition existed on disk
            assert acked == []
            continue
        got = values(log)
        first = log.log_start_offset
        want = [(o, v[:4]) for o, v in acked if o >= first]
        assert [(o, v[:4]) for o, v in got] == want, fail_at
        assert log.log_end_offset == (acked[-1][0] + 1 if acked else 0), fail_at
        log.append(batch(1), now_ms=T0)  # and it takes writes again
        m.close()


def test_crash_while_writing_the_checkpoint_keeps_the_old_one(tmp_path) -> None:
    clock = ManualClock(T0)
    m = LogManager(tmp_path, clock=clock)
    m.load()
    log = m.get_or_create("t", 0)
    log.append(batch(3), now_ms=T0)
    log.high_watermark = 3
    m.checkpoint()
    before = (tmp_path / "shoal-log-state").read_bytes()
    m.handles.close_all()

    fs = FaultyFS()
    m2 = LogManager(tmp_path, clock=clock, fs=fs)
    m2.load()
    m2.get("t", 0).append(batch(2), now_ms=T0)
    fs.crash_on_rename = True
    with pytest.raises(Crash):
        m2.checkpoint()
    fs.bury()
    assert (tmp_path / "shoal-log-state").read_bytes() == before
    m3 = LogManager(tmp_path, clock=clock)
    m3.load()
    assert m3.get("t", 0).log_end_offset == 5 and m3.get("t", 0).high_watermark == 3
    m3.close()


def test_index_rebuild_after_deleting_index_files(tmp_path) -> None:
    clock = ManualClock(T0)
    m = LogManager(tmp_path, clock=clock)
    m.load()
    cfg = LogConfig(segment_bytes=2000, index_interval_bytes=200)
    log = m.get_or_create("t", 0, cfg)
    for i in range(60):
        log.append(batch(3, ts=T0 + i * 10, compression=i % 2), now_ms=T0)
    expected_ts = log.offset_for_timestamp(T0 + 305)
    m.close()
    pdir = tmp_path / "t-0"
    originals = {f: (pdir / f).read_bytes() for f in os.listdir(pdir) if f.endswith("index")}
    assert len(originals) >= 8 and any(originals.values())
    for f in originals:
        os.unlink(pdir / f)

    m2 = LogManager(tmp_path, clock=clock)
    m2.load(config_for=lambda topic: cfg)
    log2 = m2.get("t", 0)
    assert read_all(log2) == list(range(180))
    for o in range(0, 180, 7):
        assert o in [r.offset for r in iter_records(log2.read(o, 1).records)]
    assert log2.offset_for_timestamp(T0 + 305) == expected_ts
    assert log2.latest_timestamp() == (179, T0 + 592)
    log2.append(batch(1), now_ms=T0)  # the active segment's indexes are rebuilt too
    m2.close()
    for f, data in originals.items():
        assert (pdir / f).read_bytes()[: len(data)] == data, f


def test_garbage_indexes_are_rebuilt(tmp_path) -> None:
    src = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=1500, index_interval_bytes=100)
    log = PartitionLog.open(src, cfg, now_ms=T0)
    for _ in range(30):
        log.append(batch(2), now_ms=T0)
    log.close()
    for f in os.listdir(src):
        if f.endswith(".index"):
            (src / f).write_bytes(b"\xff" * 16)  # offsets and positions far out of range
        elif f.endswith(".timeindex"):
            (src / f).write_bytes(b"\x01" * 13)  # not a whole number of entries
    state = log.state()
    got = PartitionLog.open(src, cfg, now_ms=T0, state=state, clean_shutdown=True)
    assert got.log_end_offset == 60
    for o in range(60):
        assert o in [r.offset for r in iter_records(got.read(o, 1).records)]
    assert got.latest_timestamp() == (1, T0 + 1)
    assert got.append(batch(1), now_ms=T0).base_offset == 60


def test_leftover_files_are_cleaned_up(tmp_path) -> None:
    src = tmp_path / "t-0"
    log = PartitionLog.open(src, LogConfig(segment_bytes=500), now_ms=T0)
    for _ in range(6):
        log.append(batch(2), now_ms=T0)
    log.close()
    (src / "00000000000000000999.index").write_bytes(b"")  # an index without its log
    (src / "00000000000000000000.log.deleted").write_bytes(b"x")
    (src / "00000000000000000000.index.tmp").write_bytes(b"x")
    got = PartitionLog.open(src, LogConfig(segment_bytes=500), now_ms=T0)
    names = os.listdir(src)
    assert not any(n.endswith((".deleted", ".tmp")) or n.startswith("00000000000000000999") for n in names)
    assert read_all(got) == list(range(12))
