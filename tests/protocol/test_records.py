"""RecordBatch v2: codec round trips, produce validation error codes, offset assignment."""

from __future__ import annotations

import struct

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.protocol.records import (
    HEADER,
    HEADER_SIZE,
    BatchHeader,
    InvalidRecords,
    assign_offsets,
    build_batch,
    compress,
    decode_uvarint,
    decode_varint,
    encode_uvarint,
    encode_varint,
    iter_records,
    parse_batches,
    read_header,
    scan_batches,
    validate_produce,
)

T0 = 1_700_000_000_000
MAX = 1 << 20


def recs(n: int, *, ts: int = T0, size: int = 20) -> list:
    return [(ts + i, b"key-%d" % i, bytes([65 + i % 26]) * size, [("hdr", b"v"), ("null", None)]) for i in range(n)]


def patch(buf: bytes, offset: int, fmt: str, value: int, *, fix_crc: bool = True) -> bytes:
    """Overwrite a header field and (by default) recompute the CRC so only that field is wrong."""
    out = bytearray(buf)
    struct.pack_into(fmt, out, offset, value)
    if fix_crc:
        struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def code_of(buf: bytes, **kw) -> str:
    with pytest.raises(InvalidRecords) as e:
        validate_produce(buf, max_message_bytes=kw.pop("max_message_bytes", MAX), **kw)
    return e.value.code


# -- varints ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"), (-65, b"\x81\x01")],
)
def test_zigzag_varint_exact_bytes(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded, 0) == (value, len(encoded))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_round_trip(value: int) -> None:
    data = b"\xff" + encode_varint(value)
    assert decode_varint(data, 1) == (value, len(data))


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_uvarint_round_trip(value: int) -> None:
    data = encode_uvarint(value)
    assert decode_uvarint(data, 0) == (value, len(data))


def test_truncated_varint_is_corrupt() -> None:
    with pytest.raises(InvalidRecords) as e:
        decode_uvarint(b"\x80\x80", 0)
    assert e.value.code == "CORRUPT_MESSAGE"


# -- layout -------------------------------------------------------------------------------------


def test_header_layout_matches_kafka() -> None:
    b = build_batch(recs(3), producer_id=7, producer_epoch=2, base_sequence=11, partition_leader_epoch=5)
    assert HEADER_SIZE == 61
    (base_offset, length, epoch, magic, crc, attrs, lod, first_ts, max_ts, pid, pepoch, seq, count) = struct.unpack_from(
        ">qiibIhiqqqhii", b
    )
    assert (base_offset, length, epoch, magic) == (0, len(b) - 12, 5, 2)
    assert crc == crc32c(b[21:])
    assert (attrs, lod, first_ts, max_ts) == (0, 2, T0, T0 + 2)
    assert (pid, pepoch, seq, count) == (7, 2, 11, 3)
    # First record: length, attributes 0, timestampDelta 0, offsetDelta 0, key "key-0".
    length, pos = decode_varint(b, 61)
    assert b[pos] == 0 and b[pos + 1] == 0 and b[pos + 2] == 0
    assert decode_varint(b, pos + 3) == (5, pos + 4) and b[pos + 4 : pos + 9] == b"key-0"


def test_batch_header_properties() -> None:
    b = build_batch(recs(4), compression=3, timestamp_type=1, is_transactional=True, producer_id=1, base_sequence=0)
    h = read_header(b)
    assert isinstance(h, BatchHeader)
    assert h.compression == 3 and h.timestamp_type == 1 and h.is_transactional and not h.is_control
    assert h.records_count == 4 and h.last_offset == 3 and h.size == len(b)
    c = read_header(build_batch(recs(1), is_control=True))
    assert c.is_control and c.timestamp_type == 0 and c.compression == 0


# -- round trips --------------------------------------------------------------------------------

record_st = st.tuples(
    st.integers(min_value=0, max_value=2**41),
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=300),
    st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3),
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(record_st, min_size=1, max_size=12), st.integers(min_value=0, max_value=4))
def test_build_iter_round_trip_every_codec(records: list, codec: int) -> None:
    b = build_batch(records, compression=codec, base_offset=100)
    v = validate_produce(b, max_message_bytes=MAX, client=False)
    assert v.record_count == len(records) and v.size == len(b)
    out = list(iter_records(b))
    assert [r.offset for r in out] == list(range(100, 100 + len(records)))
    assert [(r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in out] == [
        (ts, k, v, [tuple(h) for h in hs]) for ts, k, v, hs in records
    ]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_large_compressed_batches(codec: int) -> None:
    records = [(T0 + i, None, b"%06d" % i * 200, []) for i in range(100)]  # ~120 KiB: several snappy/lz4 blocks
    b = build_batch(records, compression=codec)
    assert len(b) < 120_000
    assert [r.value for r in iter_records(b)] == [r[2] for r in records]


def _with_body(records: list, codec: int, body: bytes) -> bytes:
    """A batch of ``records`` whose compressed section is ``body`` (compressed by the caller)."""
    plain = build_batch(records)
    header = bytearray(plain[:HEADER_SIZE])
    struct.pack_into(">i", header, 8, HEADER_SIZE - 12 + len(body))
    struct.pack_into(">h", header, 21, codec)
    out = bytes(header) + body
    return patch(out, 21, ">h", codec)


def test_raw_snappy_as_librdkafka_writes_it() -> None:
    records = recs(5)
    raw = build_batch(records)[HEADER_SIZE:]
    b = _with_body(records, 2, bytes(cramjam.snappy.compress_raw(raw)))
    validate_produce(b, max_message_bytes=MAX)
    assert [r.value for r in iter_records(b)] == [r[2] for r in records]


def test_xerial_snappy_as_the_java_client_writes_it() -> None:
    b = build_batch(recs(5), compression=2)
    assert b[HEADER_SIZE : HEADER_SIZE + 8] == b"\x82SNAPPY\x00"
    assert struct.unpack_from(">ii", b, HEADER_SIZE + 8) == (1, 1)


def test_lz4_frames_have_independent_blocks_for_java_consumers() -> None:
    b = build_batch(recs(5), compression=3)
    assert b[HEADER_SIZE : HEADER_SIZE + 4] == b"\x04\x22\x4d\x18"
    flg = b[HEADER_SIZE + 4]
    assert flg >> 6 == 1 and flg & 0x20  # version 01, block independence


def test_log_append_time_records_take_the_batch_max_timestamp() -> None:
    b = bytearray(build_batch(recs(3)))
    assign_offsets(b, [0], 10, log_append_time_ms=T0 + 999, partition_leader_epoch=0)
    assert [(r.offset, r.timestamp) for r in iter_records(b)] == [(10, T0 + 999), (11, T0 + 999), (12, T0 + 999)]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_decoders_only_raise_invalid_records(data: bytes) -> None:
    for fn in (lambda: list(iter_records(data)), lambda: validate_produce(data, max_message_bytes=MAX)):
        try:
            fn()
        except InvalidRecords:
            pass


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=4), st.data())
def test_mutated_batches_only_raise_invalid_records(codec: int, data) -> None:
    b = bytearray(build_batch(recs(3), compression=codec))
    i = data.draw(st.integers(min_value=HEADER_SIZE, max_value=len(b) - 1))
    b[i] ^= data.draw(st.integers(min_value=1, max_value=255))
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))  # a "valid" batch with garbage inside
    try:
        validate_produce(bytes(b), max_message_bytes=MAX)
        list(iter_records(bytes(b)))
    except InvalidRecords:
        pass


# -- validate_produce ---------------------------------------------------------------------------


def test_validate_produce_result() -> None:
    b = build_batch(recs(5, ts=T0))
    v = validate_produce(b, max_message_bytes=MAX)
    assert v.positions == [0] and v.record_count == 5 and v.size == len(b)
    assert v.max_timestamp == T0 + 4 and v.headers[0].records_count == 5


def test_crc_corruption_is_detected_anywhere_it_covers() -> None:
    b = build_batch(recs(3))
    for i in range(21, len(b)):
        bad = bytearray(b)
        bad[i] ^= 0x01
        assert code_of(bytes(bad)) in ("CORRUPT_MESSAGE",), i


def test_fields_before_the_crc_are_not_covered() -> None:
    b = build_batch(recs(3))
    v = validate_produce(patch(b, 12, ">i", 99, fix_crc=False), max_message_bytes=MAX)  # leader epoch
    assert v.record_count == 3
    assert code_of(patch(b, 0, ">q", 5, fix_crc=False)) == "INVALID_RECORD"  # baseOffset from a client


def test_malformed_batches_get_kafkas_error_codes() -> None:
    b = build_batch(recs(3))
    assert code_of(b"") == "INVALID_RECORD"
    for cut in (1, 16, 17, 60, 61, len(b) - 1):
        assert code_of(b[:cut]) == "CORRUPT_MESSAGE", cut
    assert code_of(b + b"\x00" * 5) == "CORRUPT_MESSAGE"  # trailing garbage
    assert code_of(b + b) == "INVALID_RECORD"  # a client sends exactly one batch
    assert code_of(patch(b, 16, ">b", 1, fix_crc=False)) == "INVALID_RECORD"  # magic 1
    assert code_of(patch(b, 16, ">b", 0, fix_crc=False)) == "INVALID_RECORD"  # magic 0
    assert code_of(patch(b, 16, ">b", 3, fix_crc=False)) == "CORRUPT_MESSAGE"  # unknown magic
    assert code_of(patch(b, 8, ">i", 20, fix_crc=False)) == "CORRUPT_MESSAGE"  # length below overhead
    assert code_of(patch(b, 8, ">i", len(b), fix_crc=False)) == "CORRUPT_MESSAGE"  # length past the end
    assert code_of(b, max_message_bytes=len(b) - 1) == "MESSAGE_TOO_LARGE"
    validate_produce(b, max_message_bytes=len(b))
    assert code_of(patch(b, 21, ">h", 5)) == "UNSUPPORTED_COMPRESSION_TYPE"
    assert code_of(patch(b, 21, ">h", 7)) == "UNSUPPORTED_COMPRESSION_TYPE"
    assert code_of(patch(b, 23, ">i", 3)) == "INVALID_RECORD"  # lastOffsetDelta + 1 != count
    assert code_of(patch(b, 57, ">i", 0)) == "INVALID_RECORD"  # no records
    assert code_of(patch(patch(b, 57, ">i", 2), 23, ">i", 1)) == "INVALID_RECORD"  # 3 records inside, 2 declared
    assert code_of(patch(patch(b, 57, ">i", 4), 23, ">i", 3)) == "INVALID_RECORD"  # 3 records inside, 4 declared
    assert code_of(build_batch(recs(1), is_control=True)) == "INVALID_RECORD"
    assert code_of(build_batch(recs(1), producer_id=5, producer_epoch=0)) == "INVALID_RECORD"  # no sequence
    validate_produce(build_batch(recs(1), producer_id=5, producer_epoch=0, base_sequence=0), max_message_bytes=MAX)
    assert code_of(build_batch(recs(1), timestamp_type=1)) == "INVALID_TIMESTAMP"


def test_a_record_length_that_lies_is_invalid() -> None:
    records = build_batch(recs(2))
    body = bytearray(records[HEADER_SIZE:])
    body[0] += 2  # first record claims 1 more byte (zigzag +2)
    bad = patch(records[:HEADER_SIZE] + bytes(body), 21, ">h", 0)
    assert code_of(bad) == "INVALID_RECORD"


def test_broker_appends_may_hold_several_batches_and_offsets() -> None:
    b = build_batch(recs(2)) + build_batch(recs(3), base_offset=7) + build_batch(recs(1), is_control=True)
    v = validate_produce(b, max_message_bytes=MAX, client=False)
    assert v.positions[0] == 0 and len(v.positions) == 3 and v.record_count == 6


def test_timestamp_bounds() -> None:
    b = build_batch(recs(3, ts=T0))
    kw = {"now_ms": T0 + 10_000, "timestamp_before_max_ms": 5_000, "timestamp_after_max_ms": 5_000}
    assert code_of(b, **kw) == "INVALID_TIMESTAMP"
    validate_produce(b, max_message_bytes=MAX, now_ms=T0 + 1_000, timestamp_before_max_ms=5_000)
    assert code_of(b, now_ms=T0 - 10_000, timestamp_after_max_ms=5_000) == "INVALID_TIMESTAMP"


# -- parse_batches ------------------------------------------------------------------------------


def test_parse_batches_strict_and_partial() -> None:
    a, b = build_batch(recs(2)), build_batch(recs(3), base_offset=2)
    whole = a + b
    assert [(p, h.base_offset) for p, h in parse_batches(whole)] == [(0, 0), (len(a), 2)]
    for cut in range(len(a), len(whole)):
        assert [p for p, _ in parse_batches(whole[:cut], allow_partial=True)] == [0]
        if cut > len(a):
            with pytest.raises(InvalidRecords):
                parse_batches(whole[:cut])
    bad = bytearray(whole)
    bad[-1] ^= 1
    assert len(parse_batches(bytes(bad))) == 2  # framing only
    assert len(parse_batches(bytes(bad), allow_partial=True, verify_crc=True)) == 1
    batches, end, problem = scan_batches(whole[: len(a) + 10])
    assert len(batches) == 1 and end == len(a) and problem is not None and problem.message.startswith("truncated")


# -- assign_offsets -----------------------------------------------------------------------------


def test_assign_offsets_keeps_the_crc_valid() -> None:
    one, two = build_batch(recs(2)), build_batch(recs(3))
    buf = bytearray(one + two)
    last = assign_offsets(buf, [0, len(one)], 1000, log_append_time_ms=None, partition_leader_epoch=7)
    assert last == 1004
    v = validate_produce(bytes(buf), max_message_bytes=MAX, client=False)
    assert [(h.base_offset, h.partition_leader_epoch) for h in v.headers] == [(1000, 7), (1002, 7)]
    n = len(one)
    assert buf[21:n] == one[21:] and buf[n + 21 :] == two[21:]  # CRC'd bytes untouched


def test_assign_offsets_stamps_log_append_time() -> None:
    b = build_batch(recs(3, ts=T0))
    buf = bytearray(b)
    assign_offsets(buf, [0], 50, log_append_time_ms=T0 + 5000, partition_leader_epoch=0)
    v = validate_produce(bytes(buf), max_message_bytes=MAX, client=False)  # CRC recomputed
    h = v.headers[0]
    assert h.timestamp_type == 1 and h.max_timestamp == T0 + 5000 and h.base_timestamp == T0
    # A CreateTime topic resets a batch that claims LogAppendTime.
    assign_offsets(buf, [0], 50, log_append_time_ms=None, partition_leader_epoch=0)
    h = validate_produce(bytes(buf), max_message_bytes=MAX, client=False).headers[0]
    assert h.timestamp_type == 0


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_compress_is_inverse_of_decompress(codec: int) -> None:
    from shoal.protocol.records import decompress

    data = b"hello kafka " * 500
    assert decompress(codec, compress(codec, data)) == data


def test_garbage_compressed_payload_is_corrupt() -> None:
    records = recs(2)
    for codec in (1, 2, 3, 4):
        b = _with_body(records, codec, b"definitely not compressed data")
        with pytest.raises(InvalidRecords) as e:
            list(iter_records(b))
        assert e.value.code == "CORRUPT_MESSAGE"


def test_header_struct_is_61_bytes() -> None:
    assert HEADER.size == 61


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=20), st.integers(0, 40), st.booleans(), st.booleans())
def test_native_record_walk_agrees_with_python(raw: bytes, start: int, count: int, need_key: bool, strict: bool) -> None:
    from shoal.protocol import records

    start = min(start, len(raw))
    native = records._check_records(raw, start, len(raw), count, need_key, strict)
    assert native == records._check_records_py(raw, start, len(raw), count, need_key, strict)


def test_native_record_walk_is_built() -> None:
    # `pip install -e .` builds it; the fallback exists for machines without a compiler.
    from shoal._native import speedups

    batch = build_batch([(1 + i, None, b"x" * 100, [("h", b"v")]) for i in range(50)])
    assert speedups.check_records(batch, 61, len(batch), 50, True, True) == (0, 50, 0, 49, list(range(50)))
    assert speedups.check_records(batch, 61, len(batch), 51, False, True) == (1, 50, 0, 49, None)
    assert speedups.check_records(batch, 61, len(batch), 49, False, False)[0] == 2
