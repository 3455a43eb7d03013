"""Appending as a follower (batches copied from the leader, unchanged) and truncating a divergent
tail: the follower's files end byte-identical to the leader's, its producer state and epoch
cache follow, and bad input changes nothing."""

from __future__ import annotations

import os

import pytest
from storage_helpers import T0, Crash, FaultyFS, batch

from shoal.clock import ManualClock
from shoal.protocol.records import LOG_OVERHEAD, InvalidRecords, assign_offsets, build_batch, read_header
from shoal.storage import LogConfig, LogManager, PartitionLog
from shoal.storage.log import UnexpectedAppendOffset

PID = 7001


def pbatch(seq: int, n: int = 1, *, tag: bytes = b"", pid: int = PID) -> bytes:
    return build_batch(
        [(T0 + seq + i, b"k", tag + b"v%d" % (seq + i), []) for i in range(n)],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
    )


def config(**kw) -> LogConfig:
    return LogConfig(segment_bytes=700, index_interval_bytes=150, **kw)


def open_log(path, cfg: LogConfig, now_ms: int = T0) -> PartitionLog:
    return PartitionLog.open(path, cfg, now_ms=now_ms)


def fill_leader(log: PartitionLog, epochs: list[int], *, seq: int = 0, tag: bytes = b"") -> tuple[int, bytes]:
    """Client batches under each epoch in turn: plain, compressed, an idempotent producer's.
    Returns the next sequence and the producer's last client batch."""
    last = b""
    for i, epoch in enumerate(epochs):
        log.append(batch(3, tag=tag + b"%d" % i, ts=T0 + i), now_ms=T0 + i, leader_epoch=epoch)
        log.append(batch(4, tag=tag, compression=1, ts=T0 + i), now_ms=T0 + i, leader_epoch=epoch)
        last = pbatch(seq, 2, tag=tag)
        info = log.append(last, now_ms=T0 + i, leader_epoch=epoch)
        assert not info.duplicate
        seq += 2
    return seq, last


def replicate(leader: PartitionLog, follower: PartitionLog, *, max_bytes: int = 300, cut: int = 0) -> int:
    """Fetch from the leader at the follower's log end until caught up; with ``cut`` each response
    also carries the first ``cut`` bytes of the next batch (a Fetch cut short). Returns rounds."""
    rounds = 0
    while follower.log_end_offset < leader.log_end_offset:
        data = leader.read(follower.log_end_offset, max_bytes).records
        assert data
        if cut:
            nxt = follower.log_end_offset + sum(read_header(data, p).records_count for p in _positions(data))
            if nxt < leader.log_end_offset:
                data += leader.read(nxt, 1 << 20).records[:cut]
        info = follower.append_as_follower(data)
        assert info.num_records > 0
        rounds += 1
        assert rounds < 1000
    follower.high_watermark = leader.high_watermark
    return rounds


def _positions(data: bytes) -> list[int]:
    out, p = [], 0
    while p < len(data):
        out.append(p)
        p += read_header(data, p).batch_length + LOG_OVERHEAD
    return out


def read_rest(log: PartitionLog, offset: int) -> bytes:
    """Every batch from ``offset`` to the log end (reads stop at segment ends)."""
    out = b""
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        out += data
        offset = read_header(data, _positions(data)[-1]).last_offset + 1
    return out


def dir_files(log: PartitionLog) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(log.directory)):
        with open(os.path.join(log.directory, name), "rb") as f:
            out[name] = f.read()
    return out


@pytest.mark.parametrize("cut", [0, 30, 70])
@pytest.mark.parametrize("timestamps", ["CreateTime", "LogAppendTime"])
def test_follower_files_are_byte_identical(tmp_path, cut: int, timestamps: str) -> None:
    cfg = config(message_timestamp_type=timestamps)
    a = open_log(tmp_path / "a" / "t-0", cfg)
    b = open_log(tmp_path / "b" / "t-0", cfg)
    _seq, last = fill_leader(a, [1, 1, 2, 2, 2, 4])
    a.high_watermark = a.log_end_offset
    assert len(a.segment_bases()) > 3  # several rolls to mirror
    assert replicate(a, b, cut=cut) > 3
    assert b.log_end_offset == a.log_end_offset and b.high_watermark == a.high_watermark
    assert b.segment_bases() == a.segment_bases()
    for base in a.segment_bases():
        name = f"{base:020d}.log"
        assert dir_files(b)[name] == dir_files(a)[name], name
    assert b.epoch_entries() == a.epoch_entries() == [(1, 0), (2, 18), (4, 45)]
    assert read_rest(b, 0) == read_rest(a, 0)
    assert b.offset_for_timestamp(T0 + 3) == a.offset_for_timestamp(T0 + 3)
    assert b.producer_entry(PID) == a.producer_entry(PID)

    # The producer's retry of its last batch is a duplicate on the follower too (after failover).
    da = a.append(last, now_ms=T0 + 9, leader_epoch=5)
    db = b.append(last, now_ms=T0 + 9, leader_epoch=5)
    assert da.duplicate and db.duplicate and (db.base_offset, db.last_offset) == (da.base_offset, da.last_offset)
    # Every file, indexes, producer snapshots and epoch checkpoint included, after a clean close.
    a.close()
    b.close()
    assert dir_files(b) == dir_files(a)


def test_follower_crash_recovery_keeps_producers_and_epochs(tmp_path) -> None:
    cfg = config()
    a = open_log(tmp_path / "a" / "t-0", cfg)
    b = open_log(tmp_path / "b" / "t-0", cfg)
    seq, last = fill_leader(a, [1, 3, 3, 6])
    replicate(a, b)
    entries = a.epoch_entries()
    b._handles.close_all()  # the follower's process dies (nothing closed, nothing flushed)
    b = open_log(tmp_path / "b" / "t-0", cfg)  # no state: recovery scans every segment
    assert b.log_end_offset == a.log_end_offset
    assert b.epoch_entries() == entries
    assert b.producer_entry(PID) == a.producer_entry(PID)
    assert b.append(last, now_ms=T0, leader_epoch=7).duplicate
    info = b.append(pbatch(seq), now_ms=T0, leader_epoch=7)  # the next sequence follows
    assert not info.duplicate and info.base_offset == a.log_end_offset
    assert b.epoch_entries() == entries + [(7, a.log_end_offset)]
    a.close()
    b.close()


def test_bad_input_changes_nothing(tmp_path) -> None:
    cfg = config()
    a = open_log(tmp_path / "a" / "t-0", cfg)
    b = open_log(tmp_path / "b" / "t-0", cfg)
    fill_leader(a, [1, 2])
    data = a.read(0, 1 << 20).records
    b.append_as_follower(data[:-20])  # the partial last batch is ignored
    leo, size = b.log_end_offset, b.size_bytes
    assert 0 < leo < a.log_end_offset

    def unchanged() -> None:
        assert (b.log_end_offset, b.size_bytes) == (leo, size)
        assert read_rest(b, 0) == read_rest(a, 0)[: b.size_bytes]

    with pytest.raises(UnexpectedAppendOffset) as e:
        b.append_as_follower(a.read(0, 1 << 20).records)  # starts below the log end
    assert e.value.first_offset == 0 and e.value.log_end_offset == leo
    unchanged()
    rest = bytearray(read_rest(a, leo))
    # Corrupt a record byte of the second batch: CRC mismatch, the first batch is not written either.
    p2 = read_header(rest).batch_length + LOG_OVERHEAD
    rest[p2 + 70] ^= 0xFF
    with pytest.raises(InvalidRecords) as e2:
        b.append_as_follower(bytes(rest))
    assert e2.value.code == "CORRUPT_MESSAGE"
    unchanged()
    rest[p2 + 70] ^= 0xFF
    # Batches out of order: the second one starts inside the first.
    swapped = bytearray(rest)
    h2 = read_header(swapped, p2)
    epoch = h2.partition_leader_epoch
    assign_offsets(swapped, [p2], h2.base_offset - 1, log_append_time_ms=None, partition_leader_epoch=epoch)
    with pytest.raises(UnexpectedAppendOffset):
        b.append_as_follower(bytes(swapped))
    unchanged()
    # Not a batch at all, and a partial batch alone.
    bad = bytearray(rest)
    bad[16] = 1  # magic 1
    with pytest.raises(InvalidRecords):
        b.append_as_follower(bytes(bad))
    unchanged()
    info = b.append_as_follower(bytes(rest[:40]))
    assert info.num_records == 0
    info = b.append_as_follower(b"")
    assert info.num_records == 0
    unchanged()
    b.append_as_follower(bytes(rest))
    assert b.log_end_offset == a.log_end_offset
    assert read_rest(b, 0) == read_rest(a, 0)
    a.close()
    b.close()


def test_gap_after_compaction_is_accepted(tmp_path) -> None:
    """A compacted leader may have dropped whole batches: the next one starts above the log end."""
    b = open_log(tmp_path / "b" / "t-0", config())
    first = bytearray(batch(2))
    assign_offsets(first, [0], 0, log_append_time_ms=None, partition_leader_epoch=1)
    later = bytearray(batch(3))
    assign_offsets(later, [0], 10, log_append_time_ms=None, partition_leader_epoch=2)
    b.append_as_follower(bytes(first))
    info = b.append_as_follower(bytes(later))
    assert (info.base_offset, info.last_offset, info.num_records) == (10, 12, 3)
    assert b.log_end_offset == 13 and b.epoch_entries() == [(1, 0), (2, 10)]
    assert b.read(5, 1 << 20).records == bytes(later)
    b.close()


def kip279_truncation_offset(leader: PartitionLog, follower: PartitionLog) -> int:
    """Where the follower truncates (KIP-279): it asks the leader for the end of its own latest
    epoch, then, while the leader answers an epoch the follower does not have, for the end of
    the follower's largest epoch below it."""
    epoch = follower.latest_epoch
    offset = follower.log_end_offset
    while True:
        leader_epoch, leader_end = leader.end_offset_for_epoch(epoch)
        if leader_epoch < 0:
            return min(offset, follower.high_watermark)
        follower_epoch, follower_end = follower.end_offset_for_epoch(leader_epoch)
        offset = min(offset, leader_end, follower_end if follower_epoch >= 0 else leader_end)
        if follower_epoch == leader_epoch or follower_epoch < 0:
            return offset
        epoch = follower_epoch


@pytest.mark.parametrize("leader_batches,follower_batches", [(1, 4), (4, 1), (2, 2)])
def test_divergent_tail_is_truncated_and_replaced(tmp_path, leader_batches: int, follower_batches: int) -> None:
    """A (leader) wrote epoch 1, B copied it; B then led epoch 2 and wrote a tail nobody copied
    (producer P's sequences included); A leads again at epoch 3 and wrote other data. B truncates
    to A's end_offset_for(2) and copies A's batches: byte-identical, P's state A's."""
    cfg = config()
    a = open_log(tmp_path / "a" / "t-0", cfg)
    b = open_log(tmp_path / "b" / "t-0", cfg)
    seq, _last = fill_leader(a, [1, 1, 1])
    a.high_watermark = a.log_end_offset
    replicate(a, b)
    common = a.log_end_offset
    a.take_snapshot()  # B's truncation reloads its producers from here
    b.take_snapshot()
    # B leads epoch 2: its own batches, P's next sequences among them (never copied to A).
    b.append(batch(1, tag=b"B"), now_ms=T0, leader_epoch=2)  # so P's batches land at other offsets
    fill_leader(b, [2] * follower_batches, seq=seq, tag=b"B")
    b.high_watermark = b.log_end_offset
    # A leads epoch 3 (B's tail lost): other batches, P retrying the same sequences with other bytes.
    fill_leader(a, [3] * leader_batches, seq=seq, tag=b"A")
    assert b.epoch_entries() == [(1, 0), (2, common)]
    assert a.epoch_entries() == [(1, 0), (3, common)]
    assert b.producer_entry(PID) != a.producer_entry(PID)

    assert a.end_offset_for_epoch(2) == (1, common)
    target = kip279_truncation_offset(a, b)
    assert target == common
    b.truncate_to(target)
    assert b.log_end_offset == common and b.high_watermark == common  # the high watermark is clamped
    assert b.epoch_entries() == [(1, 0)]
    # The producer state is rolled back to what A had at ``common``: P's divergent batches are forgotten.
    assert b.producer_entry(PID).batches[-1].last_offset < common
    replicate(a, b)
    assert b.epoch_entries() == a.epoch_entries()
    assert b.producer_entry(PID) == a.producer_entry(PID)
    nxt = pbatch(seq + 2 * leader_batches)
    ia = a.append(nxt, now_ms=T0, leader_epoch=3)
    ib = b.append(nxt, now_ms=T0, leader_epoch=3)  # as if B were leader now: P's next batch is new
    assert not ib.duplicate and ib.base_offset == ia.base_offset
    b.purge_deleted_files(T0, force=True)  # the truncated tail's segments, if it had whole ones
    a.close()
    b.close()
    assert dir_files(b) == dir_files(a)


def follower_scenario(leader: PartitionLog, directory, fs) -> int:
    """A follower through a LogManager on ``fs`` copies the leader (flushes, checkpoints, a clean
    close); returns how far it got before ``fs`` crashed, or the end."""
    m = LogManager(directory, clock=ManualClock(T0), fs=fs, checkpoint_interval_ms=0)
    m.load()
    b = m.get_or_create("t", 0, config())
    while b.log_end_offset < leader.log_end_offset:
        b.append_as_follower(leader.read(b.log_end_offset, 300).records)
        m.run_periodic(T0)
    m.close()
    return b.log_end_offset


@pytest.mark.parametrize("torn", [0, 40])
def test_follower_crash_at_every_write(tmp_path, torn: int) -> None:
    """The follower dies at each of its writes in turn (torn or not): after recovery its log is a
    prefix of the leader's, byte for byte, with the epochs and producers that prefix implies."""
    a = open_log(tmp_path / "a" / "t-0", config())
    fill_leader(a, [1, 1, 2, 3, 3])
    count = FaultyFS()
    follower_scenario(a, tmp_path / "count", count)
    assert count.writes > 20
    prefix = read_rest(a, 0)
    for fail_at in range(1, count.writes + 1):
        fs = FaultyFS()
        fs.fail_at = fail_at
        fs.torn_bytes = torn
        d = tmp_path / f"run{fail_at}"
        with pytest.raises(Crash):
            follower_scenario(a, d, fs)
        fs.bury()
        m = LogManager(d, clock=ManualClock(T0))
        m.load()
        b = m.get("t", 0)
        if b is None:
            continue
        got = read_rest(b, 0)
        assert prefix.startswith(got), fail_at
        leo = b.log_end_offset
        assert b.epoch_entries() == [e for e in a.epoch_entries() if e[1] < leo], fail_at
        ref = open_log(tmp_path / f"ref{fail_at}" / "t-0", config())  # the prefix copied without a crash
        if got:
            ref.append_as_follower(got)
        assert b.producer_entry(PID) == ref.producer_entry(PID), fail_at
        ref.close()
        b.append_as_follower(a.read(leo, 1 << 20).records)  # and it goes on from there
        m.close()
    a.close()
