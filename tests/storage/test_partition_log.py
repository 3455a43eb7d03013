"""PartitionLog: offsets, reads, indexes over many segments, rolls, timestamps, truncation, flush."""

from __future__ import annotations

import os

import pytest
from storage_helpers import T0, FaultyFS, batch, offsets, read_all

from shoal.clock import ManualClock
from shoal.protocol.records import InvalidRecords, iter_records, parse_batches, validate_produce
from shoal.storage import FileSystem, LogConfig, LogManager, OffsetOutOfRange, PartitionLog


def open_log(tmp_path, config: LogConfig | None = None, **kw) -> PartitionLog:
    return PartitionLog.open(tmp_path / "topic.a-b-0", config or LogConfig(), now_ms=T0, **kw)


def test_name_is_parsed_from_the_last_dash(tmp_path) -> None:
    log = open_log(tmp_path)
    assert (log.topic, log.partition) == ("topic.a-b", 0)
    assert os.listdir(tmp_path / "topic.a-b-0") == ["00000000000000000000.log"]
    with pytest.raises(ValueError):
        PartitionLog.open(tmp_path / "no_partition", now_ms=T0)


def test_append_assigns_consecutive_offsets(tmp_path) -> None:
    log = open_log(tmp_path)
    infos = [log.append(batch(n), now_ms=T0) for n in (1, 3, 2)]
    assert [(i.base_offset, i.last_offset, i.num_records) for i in infos] == [(0, 0, 1), (1, 3, 3), (4, 5, 2)]
    assert infos[1].max_timestamp == T0 + 2 and infos[1].offset_of_max_timestamp == 3
    assert infos[1].log_append_time_ms == -1 and infos[1].log_start_offset == 0
    assert log.log_end_offset == 6
    assert log.size_bytes == sum(len(batch(n)) for n in (1, 3, 2))
    assert read_all(log) == list(range(6))


def test_append_rejects_bad_batches_and_leaves_the_log_alone(tmp_path) -> None:
    log = open_log(tmp_path, LogConfig(max_message_bytes=500))
    log.append(batch(1), now_ms=T0)
    with pytest.raises(InvalidRecords) as e:
        log.append(batch(20), now_ms=T0)
    assert e.value.code == "MESSAGE_TOO_LARGE"
    bad = bytearray(batch(1))
    bad[-1] ^= 1
    with pytest.raises(InvalidRecords):
        log.append(bytes(bad), now_ms=T0)
    assert log.log_end_offset == 1 and read_all(log) == [0]


def test_broker_appends_with_several_batches(tmp_path) -> None:
    log = open_log(tmp_path)
    info = log.append(batch(2) + batch(3, ts=T0 + 50) + batch(1), now_ms=T0, client=False)
    assert (info.base_offset, info.last_offset, info.max_timestamp, info.offset_of_max_timestamp) == (0, 5, T0 + 52, 4)
    assert [h.base_offset for _, h in parse_batches(log.read(0, 1 << 20).records)] == [0, 2, 5]


def test_read_from_the_middle_of_a_batch_returns_the_whole_batch(tmp_path) -> None:
    log = open_log(tmp_path)
    log.append(batch(5), now_ms=T0)
    log.append(batch(5), now_ms=T0)
    info = log.read(7, 1 << 20)
    assert offsets(info.records) == [5, 6, 7, 8, 9]
    assert (info.log_start_offset, info.log_end_offset) == (0, 10)


def test_read_bounds(tmp_path) -> None:
    log = open_log(tmp_path)
    log.append(batch(3), now_ms=T0)
    assert log.read(3, 1000).records == b""
    for bad in (4, -1):
        with pytest.raises(OffsetOutOfRange) as e:
            log.read(bad, 1000)
        assert e.value.code == "OFFSET_OUT_OF_RANGE" and e.value.log_end_offset == 3


def test_max_bytes_returns_whole_batches(tmp_path) -> None:
    log = open_log(tmp_path)
    sizes = []
    for _ in range(5):
        b = batch(2, value_size=100)
        sizes.append(len(b))
        log.append(b, now_ms=T0)
    one = sizes[0]
    assert offsets(log.read(0, one * 2 + 10).records) == [0, 1, 2, 3]
    assert offsets(log.read(0, one * 2).records) == [0, 1, 2, 3]
    assert offsets(log.read(0, one * 2 - 1).records) == [0, 1]
    assert offsets(log.read(0, 1).records) == [0, 1]  # the first batch whole, even when larger
    assert offsets(log.read(0, 0).records) == [0, 1]
    assert log.read(0, 1, min_one_batch=False).records == b""
    assert len(log.read(0, 1 << 20).records) == sum(sizes)


def test_max_offset_is_an_exclusive_bound(tmp_path) -> None:
    log = open_log(tmp_path)
    for _ in range(4):
        log.append(batch(2), now_ms=T0)
    assert offsets(log.read(0, 1 << 20, max_offset=4).records) == [0, 1, 2, 3]
    assert offsets(log.read(2, 1 << 20, max_offset=6).records) == [2, 3, 4, 5]
    assert log.read(4, 1 << 20, max_offset=4).records == b""
    assert log.read(4, 1 << 20, max_offset=5).records == b""  # the batch straddles the bound
    assert offsets(log.read(0, 1 << 20, max_offset=100).records) == list(range(8))


def test_index_lookups_over_many_segments(tmp_path) -> None:
    cfg = LogConfig(segment_bytes=2000, index_interval_bytes=300)
    log = open_log(tmp_path, cfg)
    batch_of = {}
    for i in range(150):
        n = 1 + i % 4
        info = log.append(batch(n, value_size=20 + (i * 7) % 90), now_ms=T0)
        for o in range(info.base_offset, info.last_offset + 1):
            batch_of[o] = info.base_offset
    assert len(log.segment_bases()) > 10
    assert all(name.endswith((".log", ".index", ".timeindex", ".snapshot")) for name in os.listdir(log.directory))
    for o in range(log.log_end_offset):
        got = offsets(log.read(o, 1).records)
        assert got[0] == batch_of[o] and o in got, o
    assert read_all(log) == list(range(log.log_end_offset))
    # Reads that span segment ends stop at whole batches and go on from the next segment.
    assert offsets(log.read(0, 1 << 20).records)[0] == 0


def test_long_reads_use_the_index_and_return_exact_bytes(tmp_path) -> None:
    log = open_log(tmp_path, LogConfig(index_interval_bytes=1000))
    for i in range(600):
        log.append(batch(3, value_size=100 + i % 50), now_ms=T0)
    all_bytes = log.read(0, 1 << 30).records
    assert offsets(all_bytes) == list(range(1800))
    positions = [p for p, _ in parse_batches(all_bytes)] + [len(all_bytes)]
    for start_batch, budget in [(0, 50_000), (17, 123_456), (100, 20_000), (590, 50_000)]:
        want_start = positions[start_batch]
        info = log.read(start_batch * 3 + 1, budget)
        ends = [p for p in positions if p - want_start <= budget]
        assert info.records == all_bytes[want_start : ends[-1]], (start_batch, budget)
    limited = log.read(0, 1 << 30, max_offset=901)
    assert offsets(limited.records)[-1] == 899


def test_offsets_survive_restarts(tmp_path) -> None:
    clock = ManualClock(T0)
    cfg = LogConfig(segment_bytes=1500)
    for round_ in range(3):
        m = LogManager(tmp_path, clock=clock)
        m.load()
        log = m.get_or_create("t", 0, cfg)
        assert log.log_end_offset == round_ * 20
        for _ in range(10):
            log.append(batch(2), now_ms=clock.now_ms())
        assert read_all(log) == list(range((round_ + 1) * 20))
        if round_ == 1:
            m.handles.close_all()  # "crash": no clean shutdown, the next load recovers
        else:
            m.close()


def test_time_based_roll(tmp_path) -> None:
    log = open_log(tmp_path, LogConfig(segment_ms=1000))
    log.append(batch(1, ts=T0), now_ms=T0)
    log.append(batch(1, ts=T0 + 1000), now_ms=T0)
    assert log.segment_bases() == [0]
    log.append(batch(1, ts=T0 + 1001), now_ms=T0)  # 1001 ms after the first batch's timestamp
    assert log.segment_bases() == [0, 2]
    assert not log.roll_if_due(T0 + 1500)
    assert log.roll_if_due(T0 + 2002)
    assert log.segment_bases() == [0, 2, 3]
    assert not log.roll_if_due(T0 + 10_000)  # an empty segment does not roll


def test_roll_when_the_index_is_full(tmp_path) -> None:
    log = open_log(tmp_path, LogConfig(index_interval_bytes=0, segment_index_bytes=24))  # two time entries
    for _ in range(6):
        log.append(batch(1), now_ms=T0)
    assert len(log.segment_bases()) > 1
    assert read_all(log) == list(range(6))


def test_segment_bytes_roll(tmp_path) -> None:
    one = len(batch(1))
    log = open_log(tmp_path, LogConfig(segment_bytes=one * 3))
    for _ in range(7):
        log.append(batch(1), now_ms=T0)
    assert log.segment_bases() == [0, 3, 6]
    big = open_log(tmp_path / "x", LogConfig(segment_bytes=100))
    big.append(batch(5), now_ms=T0)  # larger than a segment: it still goes in (one per segment)
    big.append(batch(5), now_ms=T0)
    assert big.segment_bases() == [0, 5]


def test_log_append_time(tmp_path) -> None:
    log = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"))
    raw = batch(3, ts=T0)
    info = log.append(raw, now_ms=T0 + 777)
    assert info.log_append_time_ms == T0 + 777 and info.max_timestamp == T0 + 777
    assert info.offset_of_max_timestamp == 0
    data = log.read(0, 1 << 20).records
    h = validate_produce(data, max_message_bytes=1 << 20, client=False).headers[0]  # CRC still valid
    assert h.timestamp_type == 1 and h.max_timestamp == T0 + 777
    assert [r.timestamp for r in iter_records(data)] == [T0 + 777] * 3
    assert log.offset_for_timestamp(T0 + 500) == (0, T0 + 777)
    assert log.latest_timestamp() == (0, T0 + 777)


def test_a_bytearray_is_rewritten_in_place(tmp_path) -> None:
    log = open_log(tmp_path)
    log.append(batch(2), now_ms=T0)
    buf = bytearray(batch(1))
    log.append(buf, now_ms=T0)
    assert parse_batches(buf)[0][1].base_offset == 2


class _ShortWrites(FileSystem):
    """Vectored writes stop after ``short`` bytes (a signal, a nearly full disk); records them."""

    def __init__(self, short: int) -> None:
        self.short = short
        self.vectored: list[int] = []

    def pwritev(self, fd, buffers, offset):
        data = b"".join(buffers)
        self.vectored.append(len(data))
        return os.pwrite(fd, data[: self.short], offset)


@pytest.mark.parametrize("short", [0, 10, 61, 80])
def test_a_clients_batch_is_written_as_sent_but_its_header(tmp_path, short: int) -> None:
    """A client's one batch at CreateTime: the header (offsets, leader epoch) rewritten, the rest
    written from the request's bytes in the same write; a short write is finished."""
    fs = _ShortWrites(short)
    log = open_log(tmp_path, fs=fs)
    log.append(batch(2), now_ms=T0)
    raw = batch(3, value_size=40)
    info = log.append(raw, now_ms=T0, leader_epoch=7)
    assert fs.vectored == [len(batch(2)), len(raw)]
    data = log.read(info.base_offset, 1 << 20).records
    h = validate_produce(data, max_message_bytes=1 << 20, client=False).headers[0]  # CRC still valid
    assert (h.base_offset, h.partition_leader_epoch) == (2, 7)
    assert data[12 + 4 :] == raw[12 + 4 :]
    assert read_all(log) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("codec", [0, 1, 4])
def test_offset_for_timestamp(tmp_path, codec: int) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=1500, index_interval_bytes=200))
    # Batches of 5 records, timestamps T0 + 10*i + j (j < 5), not monotonic across batches.
    for i in range(60):
        ts = T0 + 10 * i if i != 30 else T0 + 10  # one batch from the past
        log.append(batch(5, ts=ts, compression=codec), now_ms=T0)
    assert len(log.segment_bases()) > 3
    assert log.offset_for_timestamp(T0) == (0, T0)
    assert log.offset_for_timestamp(T0 + 3) == (3, T0 + 3)
    assert log.offset_for_timestamp(T0 + 6) == (5, T0 + 10)
    assert log.offset_for_timestamp(T0 + 252) == (127, T0 + 252)
    assert log.offset_for_timestamp(T0 + 594) == (299, T0 + 594)
    assert log.offset_for_timestamp(T0 + 595) is None
    assert log.latest_timestamp() == (299, T0 + 594)
    log.high_watermark = log.log_end_offset
    log.delete_records_before(7)
    assert log.offset_for_timestamp(T0) == (7, T0 + 12)


def test_latest_timestamp_is_the_first_record_with_the_max(tmp_path) -> None:
    log = open_log(tmp_path)
    assert log.latest_timestamp() is None
    from shoal.protocol.records import build_batch

    log.append(build_batch([(T0 + 5, None, b"a", []), (T0 + 9, None, b"b", []), (T0 + 9, None, b"c", [])]), now_ms=T0)
    log.append(build_batch([(T0 + 1, None, b"d", [])]), now_ms=T0)
    assert log.latest_timestamp() == (1, T0 + 9)


def test_high_watermark_is_clamped(tmp_path) -> None:
    log = open_log(tmp_path)
    log.append(batch(4), now_ms=T0)
    log.high_watermark = 10
    assert log.high_watermark == 4
    log.high_watermark = -5
    assert log.high_watermark == 0


def test_truncate_to(tmp_path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=800))
    for _ in range(20):
        log.append(batch(2), now_ms=T0)
    log.high_watermark = 40
    bases = log.segment_bases()
    log.truncate_to(21)  # inside the batch [20, 21]: the whole batch goes
    assert log.log_end_offset == 20 and log.high_watermark == 20
    assert read_all(log) == list(range(20))
    assert all(b <= 20 for b in log.segment_bases()) and len(log.segment_bases()) < len(bases)
    assert log.append(batch(1), now_ms=T0).base_offset == 20
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.append(batch(1), now_ms=T0).base_offset == 0
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.segment_bases()) == (500, 500, [500])
    assert log.append(batch(1), now_ms=T0).base_offset == 500


def test_flush_moves_the_recovery_point(tmp_path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=600))
    assert not log.flush_due(T0)
    log.append(batch(1), now_ms=T0)
    assert log.recovery_point == 0 and not log.flush_due(T0)
    for _ in range(10):
        log.append(batch(1), now_ms=T0)
    assert log.flush_due(T0)  # a segment rolled: Kafka fsyncs it
    assert log.maybe_flush(T0)
    assert log.recovery_point == log.log_end_offset and not log.flush_due(T0)

    msgs = open_log(tmp_path / "m", LogConfig(flush_messages=3))
    msgs.append(batch(2), now_ms=T0)
    assert not msgs.flush_due(T0)
    msgs.append(batch(1), now_ms=T0)
    assert msgs.flush_due(T0) and msgs.maybe_flush(T0) and msgs.recovery_point == 3

    timed = open_log(tmp_path / "t", LogConfig(flush_ms=1000))
    timed.append(batch(1), now_ms=T0)
    assert not timed.flush_due(T0 + 999) and timed.flush_due(T0 + 1000)


def test_a_failed_write_leaves_the_log_unchanged(tmp_path) -> None:
    fs = FaultyFS()
    log = open_log(tmp_path, fs=fs)
    log.append(batch(2), now_ms=T0)
    size = log.size_bytes
    fs.enospc_at = fs.writes + 1
    fs.torn_bytes = 30
    with pytest.raises(OSError):
        log.append(batch(3), now_ms=T0)
    assert (log.log_end_offset, log.size_bytes) == (2, size)
    assert os.path.getsize(os.path.join(log.directory, "00000000000000000000.log")) == size
    assert log.append(batch(1), now_ms=T0).base_offset == 2
    assert read_all(log) == [0, 1, 2]


def test_update_config(tmp_path) -> None:
    log = open_log(tmp_path)
    log.append(batch(1), now_ms=T0)
    log.update_config(LogConfig(message_timestamp_type="LogAppendTime"))
    assert log.append(batch(1), now_ms=T0 + 5).log_append_time_ms == T0 + 5
    assert log.config.log_append_time


def test_closed_log_refuses_work(tmp_path) -> None:
    log = open_log(tmp_path)
    log.append(batch(1), now_ms=T0)
    log.close()
    with pytest.raises(OSError):
        log.append(batch(1), now_ms=T0)
