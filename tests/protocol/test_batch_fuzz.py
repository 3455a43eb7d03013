"""Malformed record batches (issue 10, item 7): a fuzzer for the produce validator.

Batches are built, their records section mutated (bytes flipped, cut, extended, a record count
that lies), recompressed with every codec and re-CRC'd, so the mutation reaches the record walk
rather than stopping at the CRC. The validator may only answer with its own error
(InvalidRecords with a Kafka error name); whatever it accepts must read back as exactly the
declared records with offsets 0..n-1, keys present when the topic is compacted.
"""

from __future__ import annotations

import struct

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.protocol import records as R
from shoal.protocol.records import (
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    InvalidRecords,
    _check_records_py,
    build_batch,
    compress,
    decompress,
    decompressed_limit,
    iter_batch_records,
    validate_produce,
)

CODES = {"CORRUPT_MESSAGE", "INVALID_RECORD", "MESSAGE_TOO_LARGE", "INVALID_TIMESTAMP", "UNSUPPORTED_COMPRESSION_TYPE"}
MAX = 1 << 20

record = st.tuples(
    st.integers(0, 10**6),
    st.one_of(st.none(), st.binary(max_size=8)),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=4))), max_size=2),
)


def rebuild(template: bytes, body: bytes, codec: int, count: int) -> bytes:
    """``template``'s header around ``body`` (the raw records section), compressed with
    ``codec``, claiming ``count`` records, with a valid CRC and batch length."""
    h = list(HEADER.unpack_from(template, 0))
    payload = compress(codec, body)
    h[1] = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    h[5] = (h[5] & ~0x07) | codec
    h[6], h[12] = count - 1, count
    out = bytearray(HEADER.pack(*h)) + payload
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def check(batch: bytes, compact: bool) -> None:
    try:
        v = validate_produce(batch, max_message_bytes=MAX, compact=compact)
    except InvalidRecords as e:
        assert e.code in CODES, e
        return
    h = v.headers[0]
    got = list(iter_batch_records(batch, 0, h))
    assert [r.offset for r in got] == list(range(h.records_count))
    if compact:
        assert all(r.key is not None for r in got)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.lists(record, min_size=1, max_size=8),
    st.integers(0, 4),
    st.sampled_from(["flip", "cut", "extend", "count", "splice", "none"]),
    st.integers(0, 2**31 - 1),
    st.binary(min_size=1, max_size=16),
    st.booleans(),
)
def test_mutated_batches_raise_only_invalid_records(records, codec, how, n, junk, compact):
    template = build_batch(records)
    body = template[HEADER_SIZE:]
    count = len(records)
    if how == "flip":
        i = n % len(body)
        body = body[:i] + bytes([body[i] ^ (junk[0] or 1)]) + body[i + 1 :]
    elif how == "cut":
        body = body[: n % len(body)]
    elif how == "extend":
        body = body + junk
    elif how == "count":
        count = max(1, n)
    elif how == "splice":  # a record repeated: offset deltas 0, 1, ..., k, k
        body = body + body[: max(1, n % len(body))]
    check(rebuild(template, body, codec, count), compact)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.binary(max_size=200), st.integers(1, 50))
def test_garbage_payloads_with_a_valid_crc(codec, payload, count):
    template = build_batch([(1, b"k", b"v", [])])
    h = list(HEADER.unpack_from(template, 0))
    h[1] = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    h[5] = codec
    h[6], h[12] = count - 1, count
    out = bytearray(HEADER.pack(*h)) + payload
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    check(bytes(out), compact=False)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_bounded_decompression_stops_at_the_limit(codec):
    data = compress(codec, b"\0" * (4 << 20))
    assert decompress(codec, data, limit=4 << 20) == b"\0" * (4 << 20)
    with pytest.raises(InvalidRecords) as e:
        decompress(codec, data, limit=(4 << 20) - 1)
    assert e.value.code == "MESSAGE_TOO_LARGE"


def test_zstd_frame_declaring_a_huge_size_is_refused_without_allocating_it():
    frame = bytes(cramjam.zstd.compress(b"\0" * 1000))  # one-shot: declares its content size
    with pytest.raises(InvalidRecords) as e:
        decompress(4, frame, limit=999)
    assert e.value.code == "MESSAGE_TOO_LARGE"


def test_record_count_beyond_what_the_bound_can_hold_is_refused_before_decompressing():
    template = build_batch([(1, b"k", b"v", [])])
    lie = rebuild(template, template[HEADER_SIZE:], 4, 2**31 - 1)
    with pytest.raises(InvalidRecords) as e:
        validate_produce(lie, max_message_bytes=MAX)
    assert e.value.code == "INVALID_RECORD" and "cannot hold" in e.value.message
    assert decompressed_limit(MAX) == 64 << 20 and decompressed_limit(10 << 20) == 160 << 20


def test_keyless_records_in_a_compacted_topic_are_named():
    batch = build_batch([(1, None, b"a", []), (2, b"k", b"b", []), (3, None, None, [])])
    with pytest.raises(InvalidRecords) as e:
        validate_produce(batch, max_message_bytes=MAX, compact=True)
    assert e.value.code == "INVALID_RECORD" and [i for i, _ in e.value.record_errors] == [0, 2]
    validate_produce(batch, max_message_bytes=MAX)  # a delete-policy topic takes them


def test_python_walk_reports_like_the_c_one_on_a_batch():
    batch = build_batch([(5 + i, b"k", b"v" * i, [("h", None)]) for i in range(6)])
    assert _check_records_py(batch, HEADER_SIZE, len(batch), 6, True, True) == (0, 6, 0, 5, [])
    # A batch the cleaner thinned keeps its records' offset deltas (1, 3, 5): not a producer's batch.
    thinned = b"".join(
        bytes(R._encode_record(od, 0, b"k", b"v", [])) for od in (1, 3, 5))
    assert _check_records_py(thinned, 0, len(thinned), 3, False, False)[0] == 0
    assert R._check_records(thinned, 0, len(thinned), 3, False, False)[0] == 0
    assert R._check_records(thinned, 0, len(thinned), 3, False, True)[:2] == (4, 0)
    assert R._check_records(thinned, 0, len(thinned) , 3, False, False) == R._check_records_py(
        thinned, 0, len(thinned), 3, False, False)


def test_record_timestamps_are_checked_not_only_the_header_ones():
    now = 1_700_000_000_000
    batch = bytearray(build_batch([(now, b"k", b"a", []), (now - 10**9, b"k", b"b", []), (now, b"k", b"c", [])]))
    # The header says first = max = now (a producer that lies); record 1 is 11.6 days old.
    struct.pack_into(">qq", batch, 27, now, now)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    with pytest.raises(InvalidRecords) as e:
        validate_produce(bytes(batch), max_message_bytes=MAX, now_ms=now, timestamp_before_max_ms=86_400_000)
    assert e.value.code == "INVALID_TIMESTAMP"
    validate_produce(bytes(batch), max_message_bytes=MAX, now_ms=now, timestamp_before_max_ms=2 * 10**9)
