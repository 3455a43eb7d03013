"""Zero-copy Fetch in process (issue 29, part 1): the log's file regions, the encoder's region frames
and the connection's outbox (``shoal.server.sendfile``) over a real socket pair. The brokers and
clients end to end: tests/e2e/test_zero_copy.py."""

from __future__ import annotations

import asyncio
import datetime
import socket
import sys
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "storage"))
from storage_helpers import T0, batch, offsets  # noqa: E402

from shoal.protocol import codec  # noqa: E402
from shoal.protocol.errors import ErrorCode  # noqa: E402
from shoal.protocol.regions import RegionCounters, RegionFrame  # noqa: E402
from shoal.server.sendfile import Outbox  # noqa: E402
from shoal.storage import LogConfig, PartitionLog  # noqa: E402
from shoal.storage.regions import FileRegion  # noqa: E402

BATCHES = 300  # of ~1.1 KiB: 330 KiB in one segment


def open_log(tmp_path: Path) -> PartitionLog:
    log = PartitionLog.open(tmp_path / "zc-0", LogConfig(), now_ms=T0)
    for _ in range(BATCHES):
        log.append(batch(1, value_size=1000), now_ms=T0)
    log.high_watermark = log.log_end_offset
    return log


@pytest.fixture
def log(tmp_path):
    before = RegionCounters.open
    log = open_log(tmp_path)
    yield log
    log.close()
    assert RegionCounters.open == before, "a region's descriptor was not given back"


def fetch_response(records) -> RegionFrame | bytearray:
    mod = codec.response_module(1, 4)
    part = mod.PartitionData(partition_index=0, error_code=ErrorCode.none, high_watermark=BATCHES, last_stable_offset=BATCHES,
                             aborted_transactions=(), records=records)
    body = mod.FetchResponse(throttle_time=datetime.timedelta(0), responses=(
        mod.FetchableTopicResponse(topic="zc", partitions=(part,)),))
    return codec.encode_response(7, 1, 4, body)


def test_a_long_read_is_a_region_of_exactly_the_bytes_a_copy_reads(log) -> None:
    copy = log.read(3, 200_000).records
    region = log.read(3, 200_000, regions=True).records
    assert isinstance(region, FileRegion) and isinstance(copy, bytes)
    assert region.read() == copy and region.length == len(copy)
    assert region.end_offset == offsets(copy)[-1] + 1
    region.close()
    small = log.read(3, 4000, regions=True).records  # fits the first small read: a copy already
    assert isinstance(small, bytes) and small == log.read(3, 4000).records


def test_the_budget_of_open_regions_falls_back_to_a_copy(log, monkeypatch) -> None:
    monkeypatch.setattr(RegionCounters, "limit", RegionCounters.open)
    got = log.read(0, 200_000, regions=True).records
    assert isinstance(got, bytes) and got == log.read(0, 200_000).records


def test_a_region_outlives_its_segment(log) -> None:
    copy = log.read(0, 300_000).records
    region = log.read(0, 300_000, regions=True).records
    log.truncate_fully_and_start_at(BATCHES + 10)  # every segment file deleted
    assert not (Path(log.directory) / "00000000000000000000.log").exists()
    assert region.read() == copy
    region.close()


async def _pair() -> tuple[socket.socket, socket.socket, asyncio.Transport]:
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    b.setblocking(False)
    transport, _ = await asyncio.get_running_loop().create_connection(asyncio.Protocol, sock=a)
    return a, b, transport  # type: ignore[return-value]


async def _read(b: socket.socket, n: int, *, pause: float = 0.0) -> bytes:
    loop = asyncio.get_running_loop()
    out = bytearray()
    while len(out) < n:
        chunk = await loop.sock_recv(b, min(65536, n - len(out)))
        assert chunk, "closed early"
        out += chunk
        if pause:
            await asyncio.sleep(pause)
    return bytes(out)


def test_the_outbox_sends_regions_in_order_between_the_bytes(log) -> None:
    """Two region frames around a plain response, read slowly (the socket fills: sendfile waits
    for it): the bytes are the copy path's, in order, and every descriptor is given back."""
    frames = [fetch_response(log.read(0, 150_000, regions=True).records), bytearray(b"\0\0\0\x04abcd"),
              fetch_response(log.read(100, 150_000, regions=True).records)]
    assert isinstance(frames[0], RegionFrame)
    expected = fetch_response(log.read(0, 150_000).records) + b"\0\0\0\x04abcd" + \
        fetch_response(log.read(100, 150_000).records)
    assert sum(len(f) for f in frames) == len(expected)

    async def main() -> bytes:
        a, b, transport = await _pair()
        moved = []
        box = Outbox(transport, a.fileno(), lambda: moved.append(1), lambda why: pytest.fail(why))
        sent = RegionCounters.sent_bytes
        for f in frames:
            box.write(f)
        assert box.bytes > 0  # the socket is full: the rest waits in the outbox
        got = await _read(b, len(expected), pause=0.001)
        assert box.bytes == 0 and not box.parts and moved
        assert RegionCounters.sent_bytes - sent == sum(r.length for f in frames if isinstance(f, RegionFrame)
                                                       for r in f.regions())
        transport.close()
        b.close()
        return got

    assert asyncio.run(main()) == expected


def test_a_connection_closed_mid_send_gives_back_its_regions(log) -> None:
    async def main() -> None:
        a, b, transport = await _pair()
        box = Outbox(transport, a.fileno(), lambda: None, lambda why: None)
        opened = RegionCounters.open
        for start in (0, 50, 100):
            box.write(fetch_response(log.read(start, 150_000, regions=True).records))
        assert RegionCounters.open == opened + 3 and box.bytes > 0
        b.close()
        transport.abort()
        box.close()
        assert RegionCounters.open == opened and box.bytes == 0

    asyncio.run(main())


def test_a_truncation_under_a_region_is_padded_and_the_client_drops_the_padding(log) -> None:
    """The file gets shorter while its region waits (a leader truncated to its new leader's log):
    the response keeps its announced size, the batches before the cut arrive whole and valid, and
    a real client's parser (kafka-python's) takes the padding for a partial last batch."""
    region = log.read(0, 200_000, regions=True).records
    frame = fetch_response(region)
    cut = 120
    log.truncate_to(cut)  # at a batch boundary, inside the region

    async def main() -> bytes:
        a, b, transport = await _pair()
        box = Outbox(transport, a.fileno(), lambda: None, lambda why: pytest.fail(why))
        padded = RegionCounters.padded_bytes
        box.write(frame)
        got = await _read(b, len(frame))
        assert RegionCounters.padded_bytes > padded
        transport.close()
        b.close()
        return got

    data = asyncio.run(main())
    size = int.from_bytes(data[:4], "big")
    assert size == len(data) - 4
    _, resp = codec.decode_response(1, 4, data[4:])
    records = resp.responses[0].partitions[0].records
    assert len(records) == region.length
    parsed = MemoryRecords(bytes(records))
    got = []
    while parsed.has_next():
        b = parsed.next_batch()
        if b is None:
            break
        assert isinstance(b, DefaultRecordBatch) and b.validate_crc()
        got.extend(r.offset for r in b)
    assert got == list(range(cut))  # and the reader stopped at the padding without an error
