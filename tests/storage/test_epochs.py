"""The leader-epoch cache: exact rules (Kafka's LeaderEpochFileCache tests, KIP-101/279), the
checkpoint file, and the partition log keeping it equal to a scan of its batch headers through
appends, truncation, retention, DeleteRecords, restarts and crashes (a Hypothesis property)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_helpers import T0, Crash, FaultyFS, batch

from shoal.protocol.records import assign_offsets, read_header, scan_batches
from shoal.clock import ManualClock
from shoal.storage import LogConfig, LogManager, PartitionLog
from shoal.storage.epochs import (
    CHECKPOINT_FILE,
    CheckpointError,
    LeaderEpochCache,
    decode_checkpoint,
    encode_checkpoint,
    epochs_of_batches,
)

UNDEFINED = (-1, -1)


# -- the cache's rules -------------------------------------------------------------------------


def test_assign_appends_larger_epochs_only_once() -> None:
    c = LeaderEpochCache()
    assert c.latest_epoch == -1 and c.entries() == []
    assert c.assign(1, 11)
    assert not c.assign(1, 12)  # the same epoch later on: nothing changes
    assert c.assign(2, 13)
    assert not c.assign(2, 14)
    assert c.assign(3, 15)
    assert c.entries() == [(1, 11), (2, 13), (3, 15)] and c.latest_epoch == 3


def test_assign_drops_entries_that_would_break_monotonicity() -> None:
    c = LeaderEpochCache([(2, 6), (3, 8)])
    assert c.assign(4, 7)  # (3, 8) starts at or after 7: gone
    assert c.entries() == [(2, 6), (4, 7)]
    assert c.assign(1, 9)  # every epoch >= 1 goes
    assert c.entries() == [(1, 9)] and c.latest_epoch == 1
    c = LeaderEpochCache([(2, 6), (3, 8)])
    assert c.assign(3, 7)  # the latest epoch, earlier: its start moves back
    assert c.entries() == [(2, 6), (3, 7)]
    with pytest.raises(ValueError):
        c.assign(-1, 5)
    with pytest.raises(ValueError):
        c.assign(5, -1)


def test_end_offset_for_kafka_examples() -> None:
    # LeaderEpochFileCacheTest.shouldGetFirstOffsetOfSubsequentEpochWhenOffsetRequestedForPreviousEpoch
    c = LeaderEpochCache()
    for epoch, offset in [(1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16)]:
        c.assign(epoch, offset)
    assert c.end_offset_for(2, 17) == (2, 15)
    # ...ReturnNextAvailableEpochIfThereIsNoExactEpochForTheOneRequested
    c = LeaderEpochCache([(0, 10), (2, 13), (4, 17)])
    assert c.end_offset_for(0, 20) == (0, 13)
    assert c.end_offset_for(1, 20) == (0, 13)
    assert c.end_offset_for(2, 20) == (2, 17)
    assert c.end_offset_for(3, 20) == (2, 17)
    assert c.end_offset_for(4, 20) == (4, 20)  # the latest epoch: the log end offset
    assert c.end_offset_for(5, 20) == UNDEFINED  # above the latest
    assert c.end_offset_for(-1, 20) == UNDEFINED
    assert LeaderEpochCache().end_offset_for(0, 20) == UNDEFINED
    # Below the first epoch (KAFKA-7415, apache/kafka#5678): the requested epoch and the first start.
    c = LeaderEpochCache([(5, 10), (6, 12)])
    assert c.end_offset_for(4, 20) == (4, 10)


def test_end_offset_for_kip_279_double_failover() -> None:
    # KIP-279: leader A wrote epoch 1 [0, 10), epoch 3 from 10; follower B has epoch 1 [0, 10) and a
    # divergent epoch-2 tail [10, 14). B asks for its latest epoch 2; A answers the largest epoch
    # <= 2 it has (1) and its end (10); B's own end of epoch 1 is 10 too: B truncates to 10.
    a = LeaderEpochCache([(1, 0), (3, 10)])
    b = LeaderEpochCache([(1, 0), (2, 10)])
    assert a.end_offset_for(b.latest_epoch, 16) == (1, 10)
    assert b.end_offset_for(1, 14) == (1, 10)
    # An epoch above the cache's latest is UNDEFINED (the leader fences such a request first).
    assert b.end_offset_for(a.latest_epoch, 14) == UNDEFINED


def test_truncate_from_end() -> None:
    c = LeaderEpochCache([(2, 6), (3, 8), (4, 11)])
    assert not c.truncate_from_end(12)
    assert not c.truncate_from_end(-1)
    assert c.truncate_from_end(11) and c.entries() == [(2, 6), (3, 8)] and c.latest_epoch == 3
    assert c.truncate_from_end(7) and c.entries() == [(2, 6)]
    assert c.truncate_from_end(0) and c.entries() == [] and c.latest_epoch == -1


def test_truncate_from_start() -> None:
    c = LeaderEpochCache([(2, 6), (3, 8), (4, 11)])
    assert not c.truncate_from_start(5)
    assert not c.truncate_from_start(6)  # "truncateFromStart(6) will retain an entry at offset 6"
    assert c.truncate_from_start(9) and c.entries() == [(3, 9), (4, 11)]
    assert not c.truncate_from_start(9)
    assert c.truncate_from_start(11) and c.entries() == [(4, 11)]
    assert c.truncate_from_start(20) and c.entries() == [(4, 20)] and c.latest_epoch == 4


def test_epoch_for_offset_and_start_of() -> None:
    c = LeaderEpochCache([(2, 6), (3, 8)])
    assert [c.epoch_for_offset(o) for o in (5, 6, 7, 8, 100)] == [None, 2, 2, 3, 3]
    assert c.start_offset_of(3) == 8 and c.start_offset_of(1) is None


def test_epochs_of_batches() -> None:
    batches = [(0, 0, 1), (0, 2, 2), (-1, 3, 3), (2, 4, 6), (1, 7, 7), (2, 8, 8), (5, 9, 9)]
    assert epochs_of_batches(batches) == [(0, 0), (2, 4), (5, 9)]
    assert epochs_of_batches(batches, 5) == [(2, 5), (5, 9)]  # clamped to the log start
    assert epochs_of_batches(batches, 9) == [(5, 9)]


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 40)), max_size=30), st.integers(-1, 45))
def test_cache_stays_monotonic(ops: list[tuple[int, int]], probe: int) -> None:
    c = LeaderEpochCache()
    for epoch, offset in ops:
        c.assign(epoch, offset)
        e = c.entries()
        assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(e, e[1:]))
        assert c.latest_epoch == (e[-1][0] if e else -1)
        assert e[-1][0] == epoch  # the newest assignment always holds
    # end_offset_for is the largest epoch <= the requested and the next one's start.
    e = c.entries()
    got = c.end_offset_for(probe, 50)
    below = [x for x in e if x[0] <= probe]
    above = [x for x in e if x[0] > probe]
    if probe < 0 or not e or not above and e[-1][0] != probe:
        assert got == UNDEFINED
    elif e[-1][0] == probe:
        assert got == (probe, 50)
    elif not below:
        assert got == (probe, above[0][1])
    else:
        assert got == (below[-1][0], above[0][1])


# -- the checkpoint file ---------------------------------------------------------------------


def test_checkpoint_format_is_kafkas() -> None:
    assert encode_checkpoint([(0, 0), (3, 1200)]) == b"0\n2\n0 0\n3 1200\n"
    assert encode_checkpoint([]) == b"0\n0\n"
    assert decode_checkpoint(b"0\n2\n0 0\n3 1200\n") == [(0, 0), (3, 1200)]
    assert decode_checkpoint(b"0\n0\n") == []


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"0\n",
        b"1\n0\n",  # unknown version
        b"0\n2\n0 0\n",  # fewer entries than declared
        b"0\n1\n0 0\n1 5\n",  # more
        b"0\n1\n0\n",
        b"0\n1\nx 0\n",
        b"0\n2\n1 5\n1 6\n",  # epochs not increasing
        b"0\n2\n1 5\n2 5\n",  # offsets not increasing
        b"0\n1\n-1 0\n",
        b"0\n1\n\xff 0\n",
    ],
)
def test_checkpoint_corrupt(data: bytes) -> None:
    with pytest.raises(CheckpointError):
        decode_checkpoint(data)


# -- the partition log's cache ---------------------------------------------------------------


def open_log(path, fs=None, state=None, **cfg) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(**cfg), now_ms=T0, fs=fs, state=state, clean_shutdown=state is not None)


def header_epochs(log: PartitionLog) -> list[tuple[int, int]]:
    """What a scan of every batch header of the log's files gives (the reference)."""
    out = []
    for base in log.segment_bases():
        with open(os.path.join(log.directory, f"{base:020d}.log"), "rb") as f:
            data = f.read()
        for _p, h in scan_batches(data)[0]:
            out.append((h.partition_leader_epoch, h.base_offset, h.last_offset))
    return epochs_of_batches(out, log.log_start_offset)


def file_entries(log: PartitionLog) -> list[tuple[int, int]] | None:
    path = os.path.join(log.directory, CHECKPOINT_FILE)
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        return decode_checkpoint(f.read())


def test_append_assigns_epochs_and_flush_writes_the_checkpoint(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    assert log.latest_epoch == -1 and log.epoch_entries() == []
    log.append(batch(2), now_ms=T0, leader_epoch=0)
    log.append(batch(1), now_ms=T0, leader_epoch=0)
    log.append(batch(3), now_ms=T0, leader_epoch=4)
    log.append(batch(1), now_ms=T0, leader_epoch=2)  # a stale epoch changes nothing
    assert log.epoch_entries() == [(0, 0), (4, 3)] == header_epochs(log)
    assert log.latest_epoch == 4
    assert log.end_offset_for_epoch(0) == (0, 3)
    assert log.end_offset_for_epoch(3) == (0, 3)
    assert log.end_offset_for_epoch(4) == (4, 7)
    assert log.end_offset_for_epoch(5) == UNDEFINED
    assert log.epoch_for_offset(2) == 0 and log.epoch_for_offset(6) == 4
    assert file_entries(log) is None  # appends do no I/O for the cache...
    log.flush()
    assert file_entries(log) == [(0, 0), (4, 3)]  # ...the next flush writes it, fsynced
    assert not os.path.exists(os.path.join(log.directory, CHECKPOINT_FILE + ".tmp"))
    log.assign_epoch_start_offset(6)  # a new leader before its first batch
    assert log.end_offset_for_epoch(4) == (4, 7) and log.latest_epoch == 6
    log.close()
    assert file_entries(log) == [(0, 0), (4, 3), (6, 7)]


def test_reopen_uses_the_checkpoint_and_rebuilds_a_missing_or_corrupt_one(tmp_path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=len(batch(2)) * 2)
    for i, epoch in enumerate([1, 1, 2, 2, 2, 5, 5]):
        log.append(batch(2, tag=b"%d" % i), now_ms=T0, leader_epoch=epoch)
    expected = [(1, 0), (2, 4), (5, 10)]
    assert log.epoch_entries() == expected
    log.close()
    assert file_entries(log) == expected
    for damage in (None, b"0\n3\n1 0\n", b"garbage"):
        path = tmp_path / "t-0" / CHECKPOINT_FILE
        if damage is None:
            path.unlink()
        else:
            path.write_bytes(damage)
        log = open_log(tmp_path / "t-0")
        assert log.epoch_entries() == expected
        log.close()
        assert file_entries(log) == expected  # written again
    # A stale file (say from before a crash) that disagrees with the batches is corrected by the
    # recovery scan from the recovery point (0 here: no state).
    (tmp_path / "t-0" / CHECKPOINT_FILE).write_bytes(encode_checkpoint([(1, 0), (3, 4), (9, 12)]))
    log = open_log(tmp_path / "t-0")
    assert log.epoch_entries() == expected
    log.close()


def test_truncation_retention_and_delete_records(tmp_path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=len(batch(2)) * 2, retention_ms=-1)
    for i, epoch in enumerate([1, 1, 2, 2, 3, 3, 4]):
        log.append(batch(2, tag=b"%d" % i), now_ms=T0, leader_epoch=epoch)
    assert log.epoch_entries() == [(1, 0), (2, 4), (3, 8), (4, 12)]
    log.high_watermark = log.log_end_offset
    log.truncate_to(9)  # cuts at the batch holding 9: [8, 10) goes, epoch 3 entirely
    assert log.log_end_offset == 8
    assert log.epoch_entries() == [(1, 0), (2, 4)] == header_epochs(log)
    assert log.high_watermark == 8
    assert log.end_offset_for_epoch(3) == UNDEFINED and log.end_offset_for_epoch(2) == (2, 8)
    log.append(batch(2), now_ms=T0, leader_epoch=5)
    assert log.epoch_entries() == [(1, 0), (2, 4), (5, 8)]
    log.high_watermark = log.log_end_offset
    assert log.delete_records_before(5) == 5
    assert log.epoch_entries() == [(2, 5), (5, 8)] == header_epochs(log)
    log.flush()
    assert file_entries(log) == [(2, 5), (5, 8)]
    log.truncate_fully_and_start_at(30)
    assert log.epoch_entries() == [] and log.latest_epoch == -1
    assert file_entries(log) == []  # written at once (Kafka's clearAndFlush)
    log.append(batch(1), now_ms=T0, leader_epoch=6)
    assert log.epoch_entries() == [(6, 30)]
    log.close()


def test_truncating_to_the_log_end_drops_an_empty_epoch_taken_there(tmp_path) -> None:
    """A broker led epoch 4 (``assign_epoch_start_offset`` at its log end, 4) and wrote nothing
    before the old leader came back with epoch 5; its follower asks where epoch 4 ends, learns 4,
    and truncates to 4, its log end: nothing is cut, but the entry (4, 4) must go, or it keeps
    sending 4 as ``last_fetched_epoch`` and is told it diverges forever (Kafka's ``truncateTo``)."""
    log = open_log(tmp_path / "t-0", retention_ms=-1)
    log.append(batch(2), now_ms=T0, leader_epoch=1)
    log.append(batch(2), now_ms=T0, leader_epoch=3)
    log.assign_epoch_start_offset(4)
    assert log.epoch_entries() == [(1, 0), (3, 2), (4, 4)] and log.latest_epoch == 4
    log.truncate_to(4)
    assert log.log_end_offset == 4
    assert log.epoch_entries() == [(1, 0), (3, 2)] == header_epochs(log)
    assert log.latest_epoch == 3
    log.flush()
    assert file_entries(log) == [(1, 0), (3, 2)]  # the change reaches the checkpoint
    log.truncate_to(9)  # beyond the end: nothing to cut, nothing to drop
    assert log.epoch_entries() == [(1, 0), (3, 2)]
    log.close()


def test_retention_moves_the_first_entry(tmp_path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=len(batch(2)) * 2, retention_ms=1000)
    for i, epoch in enumerate([1, 1, 2, 2, 3]):
        log.append(batch(2, ts=T0 + i * 10_000), now_ms=T0 + i * 10_000, leader_epoch=epoch)
    log.high_watermark = log.log_end_offset
    assert log.apply_retention(T0 + 40_500) > 0
    assert log.log_start_offset == 8
    assert log.epoch_entries() == [(3, 8)] == header_epochs(log)
    log.close()


def test_crash_after_truncation_and_reappend_recovers_the_cache(tmp_path) -> None:
    """A checkpoint fsynced by a flush, then a truncation and appends under older epochs that
    never reached it: the recovery scan after the crash gives the batches' epochs."""
    fs = FaultyFS()
    log = open_log(tmp_path / "t-0", fs=fs, segment_bytes=len(batch(2)) * 3)
    for i, epoch in enumerate([1, 1, 5, 5]):
        log.append(batch(2, tag=b"%d" % i), now_ms=T0, leader_epoch=epoch)
    log.flush()
    assert file_entries(log) == [(1, 0), (5, 4)]
    log.truncate_to(4)
    log.append(batch(2), now_ms=T0, leader_epoch=3)
    log.append(batch(2), now_ms=T0, leader_epoch=3)
    assert log.epoch_entries() == [(1, 0), (3, 4)]
    fs.dead = True  # the process dies: nothing more reaches the files
    with pytest.raises(Crash):
        log.append(batch(1), now_ms=T0, leader_epoch=3)
    fs.bury()
    assert file_entries(log) == [(1, 0), (5, 4)]  # stale
    log = open_log(tmp_path / "t-0")  # no state: recovery from 0
    assert log.epoch_entries() == [(1, 0), (3, 4)] == header_epochs(log)
    log.close()


def test_crash_while_writing_the_checkpoint(tmp_path) -> None:
    fs = FaultyFS()
    log = open_log(tmp_path / "t-0", fs=fs, segment_bytes=len(batch(2)) * 2)
    log.append(batch(2), now_ms=T0, leader_epoch=1)
    log.flush()
    log.append(batch(2), now_ms=T0, leader_epoch=2)
    log.append(batch(2), now_ms=T0, leader_epoch=2)  # rolls: the flush is due
    fs.crash_on_rename = True
    with pytest.raises(Crash):
        log.flush()
    fs.bury()
    assert os.path.exists(tmp_path / "t-0" / (CHECKPOINT_FILE + ".tmp"))
    assert file_entries(log) == [(1, 0)]
    log = open_log(tmp_path / "t-0")
    assert log.epoch_entries() == [(1, 0), (2, 2)]
    assert not os.path.exists(tmp_path / "t-0" / (CHECKPOINT_FILE + ".tmp"))
    log.close()


def test_log_manager_clean_restart_reads_no_data(tmp_path) -> None:
    fs = FaultyFS()
    m = LogManager(tmp_path, clock=ManualClock(T0), fs=fs)
    m.load()
    log = m.get_or_create("t", 0, LogConfig(segment_bytes=len(batch(2)) * 2))
    for epoch in (1, 1, 3, 4):
        log.append(batch(2), now_ms=T0, leader_epoch=epoch)
    m.close()
    fs.reads.clear()
    m = LogManager(tmp_path, clock=ManualClock(T0), fs=fs)
    m.load()
    assert m.loaded_cleanly
    assert [r for r in fs.reads if r.endswith(".log")] == []  # the checkpoint was trusted
    assert m.get("t", 0).epoch_entries() == [(1, 0), (3, 4), (4, 6)]
    m.close()


# -- the property ------------------------------------------------------------------------------

# Epochs are drawn as a step up from the log's latest: a leader writes its own (the largest so
# far), a follower its leader's; only a truncation lets a smaller epoch follow again.
OPS = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("truncate"), st.integers(0, 40)),
    st.tuples(st.just("delete_records"), st.integers(0, 40)),
    st.tuples(st.just("truncate_fully"), st.integers(0, 60)),
    st.tuples(st.just("follower"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("flush")),
    st.tuples(st.just("reopen"), st.booleans()),
    st.tuples(st.just("roll")),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(OPS, max_size=25))
def test_cache_equals_a_scan_of_the_batch_headers(tmp_path_factory, ops) -> None:
    path = tmp_path_factory.mktemp("prop") / "t-0"
    cfg = {"segment_bytes": len(batch(2)) * 3}
    log = open_log(path, **cfg)
    try:
        for op in ops:
            kind = op[0]
            if kind == "append":
                log.append(batch(op[2]), now_ms=T0, leader_epoch=max(log.latest_epoch, 0) + op[1])
            elif kind == "follower":
                # A leader's batch carrying its own epoch and offsets.
                b = bytearray(batch(op[2]))
                epoch = max(log.latest_epoch, 0) + op[1]
                assign_offsets(b, [0], log.log_end_offset, log_append_time_ms=None, partition_leader_epoch=epoch)
                log.append_as_follower(bytes(b))
            elif kind == "truncate":
                log.truncate_to(op[1])
            elif kind == "delete_records":
                log.high_watermark = log.log_end_offset
                if op[1] <= log.high_watermark:
                    log.delete_records_before(op[1])
            elif kind == "truncate_fully":
                log.truncate_fully_and_start_at(op[1])
            elif kind == "flush":
                log.flush()
            elif kind == "roll":
                log.roll(T0)
            else:
                state = None
                if op[1]:
                    log.close()  # clean: reopened trusting the state, reading no data
                    state = log.state()
                else:
                    log.flush()  # then "crash": the open log is abandoned; recovery from 0
                    log._handles.close_all()
                log = open_log(path, state=state, **cfg)
            # Entries starting at the log end offset hold no batch (Kafka keeps the epoch of the
            # log start when DeleteRecords or retention emptied the log, until a restart).
            entries = log.epoch_entries()
            leo = log.log_end_offset
            assert [e for e in entries if e[1] < leo] == header_epochs(log), op
            assert all(e[1] <= leo for e in entries) and sum(e[1] == leo for e in entries) <= 1
            assert log.latest_epoch == (entries or [(-1, 0)])[-1][0]
    finally:
        log.close()


def test_header_reference_reads_the_partition_leader_epoch(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(1), now_ms=T0, leader_epoch=7)
    data = log.read(0, 1 << 20).records
    assert read_header(data).partition_leader_epoch == 7
    log.close()
