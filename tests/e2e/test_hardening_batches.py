"""Issue 10, items 2 and 7: batches that lie about their contents, and decompression bombs.

A real broker process; batches crafted with valid CRCs and sent on raw sockets, as a hostile
client (or an old broker version that stored them) would. Each lying batch gets Kafka's error
code, leaves the high watermark where it was, and consumers read only the good records. A bomb
(a few hundred KB that expand to GBs) is refused on Produce with bounded memory; one planted in a
segment on disk keeps ListOffsets by timestamp and the log cleaner bounded, other clients
unstalled, and the cleaner reports it once instead of retrying forever.
"""

from __future__ import annotations

import shutil
import signal
import socket
import struct
import tempfile
import threading
import time
import zlib
from pathlib import Path

import cramjam
import pytest
from crc32c import crc32c

from broker_process import BrokerProcess
from e2e_helpers import consume, create_topic
from raw_client import recv_frame
from shoal.client import build_entity
from shoal.protocol import codec
from shoal.protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    build_batch,
    iter_batch_records,
    parse_batches,
)

pytestmark = pytest.mark.timeout(90)

CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, UNSUPPORTED_COMPRESSION_TYPE, INVALID_RECORD = 2, 10, 76, 87
RSS_GROWTH_BOUND = 400 * 1024 * 1024  # the decompression bound is 64 MiB; before the fix: GBs


@pytest.fixture(scope="module")
def hb():
    work = Path(tempfile.mkdtemp(prefix="shoal-hardening-batches-"))
    b = BrokerProcess(work, overrides={"log.cleaner.backoff.ms": "200"})  # a cleaner pass starts soon
    b.start()
    yield b
    b.stop()
    shutil.rmtree(work, ignore_errors=True)


# -- raw protocol ---------------------------------------------------------------------------------


def call(b, key: int, version: int, fields: dict, timeout: float = 30.0):
    body = build_entity(codec.request_type(key, version), fields)
    with socket.create_connection((b.host, b.port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(codec.encode_request(key, version, 1, "hardening", body))
        return codec.decode_response(key, version, recv_frame(s))[1]


def produce(b, topic: str, records: bytes, version: int = 9):
    resp = call(b, 0, version, {
        "transactional_id": None, "acks": 1, "timeout": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    })
    return resp.responses[0].partition_responses[0]


def list_offset(b, topic: str, timestamp: int) -> tuple[int, int]:
    resp = call(b, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]})
    p = resp.topics[0].partitions[0]
    assert p.error_code == 0
    return p.offset, p.timestamp


def fetch_batches(b, topic: str, offset: int = 0):
    resp = call(b, 1, 4, {"replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 8 << 20,
                          "isolation_level": 0, "topics": [{"topic": topic, "partitions": [
                              {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 8 << 20}]}]})
    data = resp.responses[0].partitions[0].records or b""
    return data, parse_batches(data, allow_partial=True)


def high_watermark(b, topic: str) -> int:
    return list_offset(b, topic, -1)[0]


# -- crafted batches ------------------------------------------------------------------------------


def recs(n: int, ts: int, prefix: str = "v", keys: bool = True):
    return [(ts + i, f"k{i % 5}".encode() if keys else None, f"{prefix}{i}".encode(), []) for i in range(n)]


def restamp(batch: bytes | bytearray, *, count: int | None = None, body: bytes | None = None, codec: int | None = None,
            base_offset: int = 0) -> bytes:
    """The batch with a new records count (lastOffsetDelta follows), body or codec; CRC valid."""
    h = list(HEADER.unpack_from(batch, 0))
    body = bytes(batch[HEADER_SIZE:]) if body is None else body
    if count is not None:
        h[6], h[12] = count - 1, count
    if codec is not None:
        h[5] = (h[5] & ~0x07) | codec
    h[0] = base_offset
    h[1] = HEADER_SIZE - LOG_OVERHEAD + len(body)
    out = bytearray(HEADER.pack(*h)) + body
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def zstd_bomb(gib: int) -> bytes:
    """Concatenated zstd frames of 16 MiB of zeros each: ~520 bytes per 16 MiB."""
    frame = bytes(cramjam.zstd.compress(b"\0" * (16 << 20)))
    return frame * (gib * 64)


def gzip_bomb(mib: int) -> bytes:
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = co.compress(b"\0" * (16 << 20)) + co.flush()
    return member * (mib // 16)


def rss_peak(b) -> int:
    """The broker's peak resident set (VmHWM), bytes."""
    for line in Path(f"/proc/{b.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def now_ms() -> int:
    return int(time.time() * 1000)


# -- item 7: lying batches -------------------------------------------------------------------------


def _lying_batches():
    ts = now_ms()
    plain = build_batch(recs(10, ts))
    cases = {}
    for c, name in ((COMPRESSION_GZIP, "gzip"), (COMPRESSION_SNAPPY, "snappy"), (COMPRESSION_LZ4, "lz4"),
                    (COMPRESSION_ZSTD, "zstd")):
        cases[f"garbage-{name}"] = (restamp(plain, codec=c, body=b"\x1f\x8b\x08not compressed at all" * 3),
                                    CORRUPT_MESSAGE)
    cases["claims-3-holds-10"] = (restamp(plain, count=3), INVALID_RECORD)
    cases["claims-3-holds-10-zstd"] = (restamp(build_batch(recs(10, ts), compression=COMPRESSION_ZSTD), count=3),
                                       INVALID_RECORD)
    cases["claims-2^31-1"] = (restamp(plain, count=2**31 - 1), INVALID_RECORD)
    cases["claims-2^31-1-lz4"] = (restamp(build_batch(recs(5, ts), compression=COMPRESSION_LZ4), count=2**31 - 1),
                                  INVALID_RECORD)
    cases["claims-12-holds-10-snappy"] = (restamp(build_batch(recs(10, ts), compression=COMPRESSION_SNAPPY), count=12),
                                          INVALID_RECORD)
    # Records whose offset deltas are 0, 0, 2, ... (a crafted duplicate delta): Kafka's "Invalid offset delta".
    two = build_batch(recs(2, ts))
    one = build_batch(recs(1, ts))
    body = one[HEADER_SIZE:] + one[HEADER_SIZE:]
    cases["duplicate-offset-delta-gzip"] = (
        restamp(two, codec=COMPRESSION_GZIP, body=bytes(cramjam.gzip.compress(body))), INVALID_RECORD)
    return cases


LYING = _lying_batches()


@pytest.mark.parametrize("case", sorted(LYING))
def test_lying_batch_is_refused_and_consumers_see_only_good_records(hb, case, topic_name):
    topic = topic_name
    create_topic(hb.bootstrap, topic)
    ts = now_ms()
    assert produce(hb, topic, build_batch(recs(2, ts, "good-a"))).error_code == 0
    bad, code = LYING[case]
    zstd = bad[22] & 0x07 == COMPRESSION_ZSTD
    for version in (9, 3):  # v3 does not know INVALID_RECORD: CORRUPT_MESSAGE, as Kafka answers
        p = produce(hb, topic, bad, version)
        if version >= 8:
            assert p.error_code == code, p
        else:  # and zstd needs v7 (KIP-110)
            assert p.error_code == (UNSUPPORTED_COMPRESSION_TYPE if zstd else CORRUPT_MESSAGE), p
        assert high_watermark(hb, topic) == 2
    assert produce(hb, topic, build_batch(recs(2, ts, "good-b"))).base_offset == 2
    got = consume(hb.bootstrap, topic, [0], expected=4)
    assert [(m.offset(), m.value()) for m in got] == [
        (0, b"good-a0"), (1, b"good-a1"), (2, b"good-b0"), (3, b"good-b1")]
    assert high_watermark(hb, topic) == 4


def test_rejections_log_one_line_per_interval(hb, topic_name):
    create_topic(hb.bootstrap, topic_name)
    before = hb.log_text().count(f"rejected produce to {topic_name}")
    for _ in range(30):
        assert produce(hb, topic_name, LYING["claims-3-holds-10"][0]).error_code == INVALID_RECORD
    assert hb.log_text().count(f"rejected produce to {topic_name}") - before == 1


# -- item 7: keyless records in a compacted topic ---------------------------------------------------


def test_keyless_record_in_compacted_topic_is_invalid_record(hb, topic_name):
    from confluent_kafka import KafkaError, Producer

    create_topic(hb.bootstrap, topic_name, config={"cleanup.policy": "compact"})
    # Raw v9: INVALID_RECORD with the index of each keyless record (KIP-467).
    batch = build_batch([(now_ms(), b"k" if i % 2 else None, b"v", []) for i in range(4)])
    p = produce(hb, topic_name, batch)
    assert p.error_code == INVALID_RECORD
    assert [e.batch_index for e in p.record_errors] == [0, 2]
    assert all("without key" in e.batch_index_error_message for e in p.record_errors)
    assert high_watermark(hb, topic_name) == 0
    # librdkafka (its test 0011): the keyless message fails with INVALID_RECORD, keyed ones pass.
    results = []
    prod = Producer({"bootstrap.servers": hb.bootstrap, "linger.ms": 0, "message.timeout.ms": 10000,
                     "retries": 0})
    prod.produce(topic_name, b"keyless", partition=0, on_delivery=lambda e, m: results.append(("nokey", e)))
    prod.flush(15)
    prod.produce(topic_name, b"keyed", key=b"k1", partition=0, on_delivery=lambda e, m: results.append(("key", e)))
    prod.flush(15)
    assert results[0][0] == "nokey" and results[0][1] is not None
    assert results[0][1].code() == KafkaError.INVALID_RECORD
    assert results[1] == ("key", None)
    got = consume(hb.bootstrap, topic_name, [0], expected=1)
    assert [(m.offset(), m.key(), m.value()) for m in got] == [(0, b"k1", b"keyed")]


# -- item 2: bombs -------------------------------------------------------------------------------------


def test_bombs_on_produce_are_refused_with_bounded_memory(hb, topic_name):
    create_topic(hb.bootstrap, topic_name)
    template = build_batch(recs(1, now_ms()))
    peak = rss_peak(hb)
    zb = restamp(template, codec=COMPRESSION_ZSTD, body=zstd_bomb(4))  # ~130 KB -> 4 GiB
    gb = restamp(template, codec=COMPRESSION_GZIP, body=gzip_bomb(512))  # ~520 KB -> 512 MiB
    assert len(zb) < 200_000 and len(gb) < 1_000_000
    for bomb in (zb, gb, zb):
        t0 = time.monotonic()
        assert produce(hb, topic_name, bomb).error_code == MESSAGE_TOO_LARGE
        assert time.monotonic() - t0 < 10
    growth = rss_peak(hb) - peak
    print(f"produce bombs: peak RSS growth {growth / 2**20:.0f} MiB")
    assert growth < RSS_GROWTH_BOUND
    assert high_watermark(hb, topic_name) == 0
    assert produce(hb, topic_name, build_batch(recs(3, now_ms()))).base_offset == 0


class Prober(threading.Thread):
    """Another client: ApiVersions round trips back to back; records the slowest."""

    def __init__(self, b) -> None:
        super().__init__(daemon=True)
        self.b = b
        self.stop = threading.Event()
        self.latencies: list[float] = []

    def run(self) -> None:
        req = codec.encode_request(18, 3, 7, "prober", build_entity(codec.request_type(18, 3), {
            "client_software_name": "prober", "client_software_version": "1"}))
        with socket.create_connection((self.b.host, self.b.port), timeout=30) as s:
            while not self.stop.is_set():
                t0 = time.monotonic()
                s.sendall(req)
                recv_frame(s)
                self.latencies.append(time.monotonic() - t0)
                time.sleep(0.01)


def test_bomb_planted_on_disk_bounds_list_offsets_and_the_cleaner(hb, topic_name):
    topic = topic_name
    create_topic(hb.bootstrap, topic, config={
        "cleanup.policy": "compact", "segment.ms": "1500", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0"})
    t0 = now_ms()
    for r in range(3):  # keys k0..k4, three values each: offsets 0-14
        assert produce(hb, topic, build_batch(recs(5, t0 + 10 * r, f"round{r}-"))).error_code == 0
    # An attacker with an old broker version stored this (valid CRC, 1 record claimed, 4 GiB of zstd).
    bomb_ts = t0 + 1000
    bomb = restamp(build_batch([(bomb_ts, b"k9", b"x", [])]), codec=COMPRESSION_ZSTD, body=zstd_bomb(4),
                   base_offset=15)
    hb._terminate(signal.SIGKILL)
    (seg,) = [p for p in hb.data_dir.glob(f"**/{topic}-0/*.log")]
    with open(seg, "ab") as f:
        f.write(bomb)
    hb.start()
    assert high_watermark(hb, topic) == 16
    peak = rss_peak(hb)
    prober = Prober(hb)
    prober.start()
    try:
        # ListOffsets by timestamp: the answer is in the bomb's batch; it cannot be read within the
        # bound, so the batch's own first offset (nothing a consumer needs is skipped).
        for _ in range(5):
            assert list_offset(hb, topic, bomb_ts) == (15, bomb_ts)
        assert list_offset(hb, topic, t0 + 21) == (11, t0 + 21)  # good batches: exact record
        assert list_offset(hb, topic, -3)[0] == 15  # MAX_TIMESTAMP
        # The cleaner: new records roll the segment holding the bomb, a pass runs and keeps it.
        time.sleep(1.6)
        assert produce(hb, topic, build_batch(recs(1, now_ms(), "after-"))).error_code == 0
        line = "log cleaner: kept the batch at offsets 15-15"
        deadline = time.monotonic() + 30
        while line not in hb.log_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert line in hb.log_text(), hb.log_tail()
        # Another roll and pass: the bomb is neither retried forever nor reported again.
        time.sleep(1.6)
        assert produce(hb, topic, build_batch(recs(1, now_ms(), "later-"))).error_code == 0
        time.sleep(4)
    finally:
        prober.stop.set()
        prober.join(30)
    text = hb.log_text()
    assert text.count(line) == 1
    assert text.count("cannot read the records of the batch at offsets 15-15") == 1
    assert "compaction of" not in text  # neither "restarts" nor "failed"
    growth = rss_peak(hb) - peak
    print(f"planted bomb: peak RSS growth {growth / 2**20:.0f} MiB, other client's slowest round trip "
          f"{max(prober.latencies) * 1000:.0f} ms over {len(prober.latencies)}")
    assert growth < RSS_GROWTH_BOUND
    assert prober.latencies and max(prober.latencies) < 1.5, max(prober.latencies)
    # Compaction did happen around the bomb: below it only the latest value of each key is left.
    data, batches = fetch_batches(hb, topic)
    below = [(r.offset, r.value) for pos, h in batches if h.base_offset < 15 for r in iter_batch_records(data, pos, h)]
    assert below == [(10 + i, f"round2-{i}".encode()) for i in range(5)]
    assert any(h.base_offset == 15 for _pos, h in batches)
