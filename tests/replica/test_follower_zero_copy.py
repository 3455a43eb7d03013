"""A follower's fetch answers without copies (issue 29, part 3): the Fetch v12 response read
with its records as views of the frame (``shoal.net.fetch_response``) says what kio's reader says;
``Connection``'s frames come out whole however the socket cuts them, a large one read straight
into its own buffer; and a batch whose CRC does not match is never appended: the fetcher drops
the answer and fetches again from its log end. The brokers replicating this way are in
tests/cluster/test_replication.py and tests/cluster/test_zero_copy_replication.py."""

from __future__ import annotations

import datetime
import random
import struct

import pytest

from shoal.config import BrokerConfig
from shoal.net import Connection
from shoal.net.connection import _Frames
from shoal.net.fetch_request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic, encode_fetch_v12
from shoal.net.fetch_response import SMALL_FRAME, decode_fetch_v12
from shoal.protocol import codec
from shoal.protocol.codec import build
from shoal.protocol.errors import ErrorCode
from shoal.replica.fetcher import ReplicaFetcher, _Fetching
from test_replica_manager import FOLLOWING, batch, image, rm  # noqa: F401  (fixture)

M = codec.response_module(1, 12)


def partition(index: int, records: bytes | None, *, diverging: tuple[int, int] | None = None,
              aborted: list[tuple[int, int]] | None = None, code: ErrorCode = ErrorCode.none) -> object:
    extra = {}
    if diverging is not None:
        extra["diverging_epoch"] = build(M.EpochEndOffset, epoch=diverging[0], end_offset=diverging[1])
    return build(M.PartitionData, partition_index=index, error_code=code, high_watermark=100 + index,
                 last_stable_offset=90 + index, log_start_offset=index, preferred_read_replica=-1, records=records,
                 aborted_transactions=None if aborted is None else tuple(
                     build(M.AbortedTransaction, producer_id=p, first_offset=o) for p, o in aborted), **extra)


def frame(*topics: tuple[str, tuple], session_id: int = 7, correlation_id: int = 5) -> bytes:
    """A Fetch v12 response frame (without its length prefix), as a leader encodes it."""
    body = build(M.FetchResponse, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                 session_id=session_id, responses=tuple(
                     build(M.FetchableTopicResponse, topic=name, partitions=parts) for name, parts in topics))
    return bytes(codec.encode_response(correlation_id, 1, 12, body))[4:]


def test_the_fetch_response_reads_as_kio_reads_it_with_records_as_views() -> None:
    data = frame(
        ("tópico", (partition(0, bytes(batch(3))), partition(1, b"", diverging=(4, 77)),
                    partition(2, None, code=ErrorCode.offset_out_of_range),
                    partition(3, bytes(batch(1)), aborted=[(11, 12), (13, 14)]))),
        ("empty", ()),
        session_id=123456, correlation_id=99)
    cid, kio = codec.decode_response(1, 12, data)
    cid2, ours = decode_fetch_v12(1, 12, bytearray(data), small=0)
    assert (cid2, ours.session_id, ours.error_code) == (cid, kio.session_id, kio.error_code) == (99, 123456, 0)
    assert [t.topic for t in ours.responses] == [t.topic for t in kio.responses] == ["tópico", "empty"]
    for a, b in zip(kio.responses[0].partitions, ours.responses[0].partitions, strict=True):
        assert (b.partition_index, b.error_code, b.high_watermark, b.last_stable_offset, b.log_start_offset) == (
            a.partition_index, a.error_code, a.high_watermark, a.last_stable_offset, a.log_start_offset)
        assert isinstance(b.records, memoryview) and bytes(b.records) == bytes(a.records or b"")
        div = a.diverging_epoch
        assert b.diverging_epoch == (None if div is None or div.epoch < 0 else (div.epoch, div.end_offset))


def test_a_truncated_or_overlong_fetch_response_is_refused() -> None:
    data = frame(("t", (partition(0, bytes(batch(2))),)))
    for cut in range(len(data)):
        with pytest.raises(ValueError):
            decode_fetch_v12(1, 12, data[:cut], small=0)
    with pytest.raises(ValueError):
        decode_fetch_v12(1, 12, data + b"\0", small=0)
    with pytest.raises(ValueError):
        decode_fetch_v12(1, 11, data)


def kio_request(r: FetchRequest) -> object:
    """``r`` as kio's FetchRequest v12 entity."""
    import importlib

    m = importlib.import_module(codec.request_type(1, 12).__module__)
    return m.FetchRequest(
        replica_id=r.replica_id, max_wait=datetime.timedelta(milliseconds=r.max_wait_ms), min_bytes=r.min_bytes,
        max_bytes=r.max_bytes, isolation_level=r.isolation_level, session_id=r.session_id,
        session_epoch=r.session_epoch, rack_id=r.rack_id,
        topics=tuple(m.FetchTopic(topic=t.topic, partitions=tuple(m.FetchPartition(**p._asdict()) for p in t.partitions))
                     for t in r.topics),
        forgotten_topics_data=tuple(m.ForgottenTopic(topic=f.topic, partitions=f.partitions)
                                    for f in r.forgotten_topics_data))


def test_the_fetch_request_encodes_as_kio_encodes_it() -> None:
    requests = [
        FetchRequest(2, 500, 1, 10 << 20, 0, 0, 0, (), (), ""),
        FetchRequest(3, 0, 1, 10 << 20, 0, 123456789, 7, (
            FetchTopic("tópico", (FetchPartition(0, 5, 1 << 40, 4, 17, 1 << 20), FetchPartition(9, -1, 0, -1, -1, 0))),
            FetchTopic("b" * 300, (FetchPartition(1, 0, 2, 0, 0, 1),))),
            (ForgottenTopic("gone", (1, 2, 3)), ForgottenTopic("x", ())), "rack-1"),
    ]
    for r in requests:
        for client_id in ("shoal-replica-2", ""):
            assert encode_fetch_v12(12, 77, client_id, r) == codec.encode_request(1, 12, 77, client_id, kio_request(r))
    with pytest.raises(ValueError):
        encode_fetch_v12(11, 1, "x", requests[0])


class Recording(Connection):
    def __init__(self) -> None:
        super().__init__("127.0.0.1", 9, "test", 1.0)
        self.frames: list[bytes] = []

    def _frame(self, frame: bytearray) -> bool:
        assert isinstance(frame, bytearray)
        self.frames.append(bytes(frame))
        return True


def feed(proto: _Frames, stream: bytes, cuts: list[int]) -> None:
    """The socket's reads: ``stream`` in pieces ending at ``cuts``, each read into the buffer
    ``get_buffer`` offers (as much of the piece as fits, the rest in the next read)."""
    pos = 0
    for end in cuts + [len(stream)]:
        while pos < end:
            buf = proto.get_buffer(-1)
            assert len(buf) > 0
            n = min(len(buf), end - pos)
            buf[:n] = stream[pos:pos + n]
            proto.buffer_updated(n)
            pos += n


def test_frames_come_out_whole_however_the_socket_cuts_them() -> None:
    rnd = random.Random(29)
    sizes = [4, 10, 300, _Frames.STAGE - 4, _Frames.STAGE - 3, 5 * _Frames.STAGE + 17, 8, _Frames.STAGE * 2]
    frames = [struct.pack(">i", i) + rnd.randbytes(n - 4) for i, n in enumerate(sizes)]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    cuttings = [[], list(range(1, len(stream))) if len(stream) < 2000 else list(range(1, 3000)),
                sorted(rnd.sample(range(1, len(stream)), 40)), [3, 4, 5, 17, 70000, 70001]]
    for cuts in cuttings:
        conn = Recording()
        proto = _Frames(conn)
        feed(proto, stream, cuts)
        assert conn.frames == frames


def test_a_frame_of_an_impossible_size_ends_the_connection() -> None:
    conn = Recording()
    proto = _Frames(conn)
    feed(proto, struct.pack(">i", 2) + b"xx", [])
    assert conn.frames == [] and conn.closed and "response of 2 bytes" in (conn._closed_reason or "")


@pytest.mark.parametrize("small", [0, SMALL_FRAME], ids=["views", "kio"])
def test_a_follower_never_appends_a_batch_whose_crc_does_not_match_and_fetches_again(rm, caplog, small) -> None:  # noqa: F811
    rm.publish(image([FOLLOWING]))
    fetcher = ReplicaFetcher(rm.fetchers, 2, 0)
    p = rm.partition("t", FOLLOWING.partition)
    ready = {p.key: _Fetching(p, 0)}
    fetcher.partitions.update(ready)
    fetcher._request(BrokerConfig.load(None, {}), ready)
    good = bytes(batch(3))
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # a byte of the last record: the batch's CRC no longer matches
    _, answer = decode_fetch_v12(1, 12, frame(("t", (partition(FOLLOWING.partition, bytes(bad)),))), small=small)
    assert not fetcher._handle(answer, ready, 5.0)  # the pipeline starts again: a new connection, from the log end
    assert p.log_end_offset == 0 and p.view.size_bytes == 0
    assert ready[p.key].delayed_until == 5.0  # after replica.fetch.backoff.ms, as Kafka delays a partition in error
    assert [r.getMessage() for r in caplog.records if "refused" in r.getMessage()] == [
        f"t-{FOLLOWING.partition}: leader 2's records refused (CRC mismatch in batch at 0): fetching them again"]
    assert not [r for r in caplog.records if r.exc_info]  # one line, no traceback
    _, answer = decode_fetch_v12(1, 12, frame(("t", (partition(FOLLOWING.partition, good),))), small=small)
    assert isinstance(answer.responses[0].partitions[0].records, memoryview if small == 0 else bytes)
    assert fetcher._handle(answer, ready, 0.0)
    assert p.log_end_offset == 3 and p.view.size_bytes == len(good)
