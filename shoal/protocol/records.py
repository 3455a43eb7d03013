"""RecordBatch v2 (magic 2): header access, produce validation, offset assignment, codecs. No I/O.

Layout of one batch (big-endian), as in Kafka's ``DefaultRecordBatch``::

    0  baseOffset int64          21 attributes int16        43 producerId int64
    8  batchLength int32         23 lastOffsetDelta int32   51 producerEpoch int16
    12 partitionLeaderEpoch int32 27 firstTimestamp int64   53 baseSequence int32
    16 magic int8                35 maxTimestamp int64      57 recordsCount int32
    17 crc uint32 (CRC-32C of attributes .. end)            61 records

``baseOffset`` and ``partitionLeaderEpoch`` sit before the CRC'd range, so the broker rewrites them
in place without touching the CRC; stamping LogAppendTime changes ``attributes`` and
``maxTimestamp`` and so recomputes it.

Error codes follow Kafka 4 (``ProduceRequest.validateRecords``, ``UnifiedLog.analyzeAndValidateRecords``,
``LogValidator.validateBatch``):

- magic outside 0..2, lengths that do not add up, a truncated batch, bad CRC: CORRUPT_MESSAGE;
- a compressed records section that cannot be decompressed: CORRUPT_MESSAGE;
- magic 0 or 1, more than one batch or none, baseOffset != 0, lastOffsetDelta + 1 != recordsCount,
  records (decompressed when the batch is compressed, ``LogValidator``'s iteration) that are fewer
  or more than recordsCount, a record whose lengths or varints do not fit it, an offset delta that
  is not the record's index, a record without a key in a compacted topic (with ``record_errors``,
  KIP-467), control batches or a producer id without a sequence from a client: INVALID_RECORD;
- a batch larger than max.message.bytes, or one that decompresses to more than
  :func:`decompressed_limit` bytes: MESSAGE_TOO_LARGE;
- a client batch claiming LogAppendTime, or a record timestamp outside
  message.timestamp.{before,after}.max.ms: INVALID_TIMESTAMP.

Decompression is bounded (:func:`decompress_bounded`): the output buffer never grows beyond the
limit, so a bomb (a few KB declaring nothing, expanding to GBs) costs at most the limit in memory
and the time to fill it. Batches are never recompressed: the producer's bytes are stored.

Deliberate deviations: trailing bytes after the last whole batch are rejected (CORRUPT_MESSAGE)
where Kafka silently trims them; a compression id above 4 is UNSUPPORTED_COMPRESSION_TYPE (Kafka
fails with an unknown server error); a batch decompressing beyond the limit is refused (Kafka
streams any size); a client batch with the LogAppendTime bit is rejected even on a CreateTime topic
(Kafka resets the bit there); a batch's maxTimestamp is not checked against its records' (Kafka
rewrites it). Produce versions below 8 do not know INVALID_RECORD: the handler maps it to
CORRUPT_MESSAGE for them, as Kafka does.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import cramjam
from crc32c import crc32c

__all__ = [
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "BatchHeader",
    "InvalidRecords",
    "Record",
    "ValidatedBatches",
    "assign_offsets",
    "build_batch",
    "check_batch_records",
    "compress",
    "decode_varint",
    "decode_uvarint",
    "decompress",
    "decompress_bounded",
    "decompressed_limit",
    "encode_uvarint",
    "encode_varint",
    "iter_batch_records",
    "iter_records",
    "is_truncation",
    "parse_batches",
    "read_header",
    "scan_batches",
    "validate_produce",
]

# --- layout -------------------------------------------------------------------------------------

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part of a batch that batchLength does not count
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49

LENGTH_OFFSET = 8
LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
FIRST_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength
_LENGTH_MAGIC = struct.Struct(">ixxxxb")  # batchLength, (epoch), magic — read at offset 8
_OFFSET_LEN_EPOCH = struct.Struct(">qii")  # what assign_offsets rewrites in one call
_ATTRS_LOD = struct.Struct(">hi")  # attributes, lastOffsetDelta at offset 21
_ATTRS = struct.Struct(">h")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")

MIN_RECORD_SIZE = 7  # length, attributes, timestamp and offset deltas, key and value lengths, header count
DECOMPRESSED_LIMIT = 64 * 1024 * 1024  # the least decompressed_limit() allows a batch

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
_XERIAL_BLOCK = 32 * 1024  # block size of the Java client's SnappyOutputStream


class InvalidRecords(Exception):
    """The bytes are not acceptable record batches. ``code`` is the Kafka error name to answer;
    ``record_errors`` names the offending records when the fault is theirs (ProduceResponse v8+)."""

    def __init__(self, code: str, message: str, record_errors: Sequence[tuple[int, str]] = ()) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.record_errors = tuple(record_errors)  # KIP-467: (index of the record in its batch, why)


@dataclass(slots=True)
class BatchHeader:
    """Every field of a v2 batch header, in wire order (``BatchHeader(*HEADER.unpack_from(b, p))``)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int  # firstTimestamp
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """The header at ``pos``, unchecked (the caller knows HEADER_SIZE bytes are there)."""
    return BatchHeader(*HEADER.unpack_from(buf, pos))


# --- framing ------------------------------------------------------------------------------------


def scan_batches(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    verify_crc: bool = False,
) -> tuple[list[tuple[int, BatchHeader]], int, InvalidRecords | None]:
    """Walk whole v2 batches from ``pos``: ``(batches, end, problem)``.

    ``end`` is the position just past the last whole good batch. ``problem`` is None when the walk
    reached the end of ``buf`` exactly; otherwise it says why it stopped: CORRUPT_MESSAGE with the
    message starting "truncated" when the bytes at ``end`` are the beginning of a batch cut short
    (more data may complete it), any other InvalidRecords when they cannot be a good batch.
    Used by recovery (which truncates at ``end``) and by :func:`parse_batches`.
    """
    n = len(buf)
    out: list[tuple[int, BatchHeader]] = []
    unpack = HEADER.unpack_from
    while pos < n:
        remaining = n - pos
        if remaining < HEADER_SIZE:
            if remaining >= MAGIC_OFFSET + 1:
                length, magic = _LENGTH_MAGIC.unpack_from(buf, pos + LENGTH_OFFSET)
                if magic != 2 or length < MIN_BATCH_LENGTH:
                    return out, pos, _framing_error(length, magic)
            return out, pos, InvalidRecords("CORRUPT_MESSAGE", f"truncated batch header at {pos}")
        h = BatchHeader(*unpack(buf, pos))
        if h.magic != 2 or h.batch_length < MIN_BATCH_LENGTH:
            return out, pos, _framing_error(h.batch_length, h.magic)
        size = h.batch_length + LOG_OVERHEAD
        if size > remaining:
            return out, pos, InvalidRecords(
                "CORRUPT_MESSAGE", f"truncated batch at {pos}: {size} bytes declared, {remaining} present"
            )
        if h.last_offset_delta < 0 or h.records_count < 0:
            return out, pos, InvalidRecords("CORRUPT_MESSAGE", f"negative lastOffsetDelta or count at {pos}")
        if verify_crc and crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size]) != h.crc:
            return out, pos, InvalidRecords("CORRUPT_MESSAGE", f"CRC mismatch in batch at {pos}")
        out.append((pos, h))
        pos += size
    return out, pos, None


def _framing_error(length: int, magic: int) -> InvalidRecords:
    if magic < 0 or magic > 2:
        return InvalidRecords("CORRUPT_MESSAGE", f"invalid magic {magic}")
    if magic != 2:
        return InvalidRecords("INVALID_RECORD", f"only magic 2 record batches are accepted, got magic {magic}")
    return InvalidRecords("CORRUPT_MESSAGE", f"batch length {length} is below the minimum {MIN_BATCH_LENGTH}")


def is_truncation(problem: InvalidRecords | None) -> bool:
    """Whether a :func:`scan_batches` problem is a batch cut short (rather than bad bytes)."""
    return problem is not None and problem.message.startswith("truncated")


def parse_batches(
    buf: bytes | bytearray | memoryview,
    *,
    allow_partial: bool = False,
    verify_crc: bool = False,
) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of each whole batch in ``buf``.

    Strict mode raises InvalidRecords on anything that is not a sequence of whole v2 batches.
    With ``allow_partial`` it returns the batches before the first problem instead (recovery's
    mode: a torn tail, or any bad bytes, end the list).
    """
    batches, _end, problem = scan_batches(buf, 0, verify_crc=verify_crc)
    if problem is not None and not allow_partial:
        raise problem
    return batches


# --- produce validation -------------------------------------------------------------------------


@dataclass(slots=True)
class ValidatedBatches:
    """What :func:`validate_produce` learnt, handed on to ``PartitionLog.append``."""

    positions: list[int]
    headers: list[BatchHeader]
    record_count: int  # sum of lastOffsetDelta + 1: the offsets the append will use
    size: int  # bytes, = len(buf)
    max_timestamp: int
    max_timestamp_index: int  # which batch holds max_timestamp (the first one if tied)


def validate_produce(
    buf: bytes | bytearray | memoryview,
    *,
    max_message_bytes: int,
    client: bool = True,
    now_ms: int | None = None,
    timestamp_before_max_ms: int | None = None,
    timestamp_after_max_ms: int | None = None,
    check_records: bool = True,
    compact: bool = False,
    max_decompressed_bytes: int | None = None,
) -> ValidatedBatches:
    """Check the ``records`` bytes of one partition of a Produce request.

    ``client`` applies Kafka's rules for appends from clients: exactly one batch, baseOffset 0, no
    control batch, a sequence when there is a producer id, CreateTime only. With ``client=False``
    (the broker's own appends) several batches and any base offset are accepted.
    ``now_ms`` with ``timestamp_before_max_ms``/``timestamp_after_max_ms`` enables the
    message.timestamp.{before,after}.max.ms check (INVALID_TIMESTAMP).

    ``check_records`` walks the records of every batch (:func:`check_batch_records`), those of a
    compressed batch decompressed into a buffer of at most ``max_decompressed_bytes`` (default
    :func:`decompressed_limit` of ``max_message_bytes``; MESSAGE_TOO_LARGE beyond it): the record
    count, lengths, varints, offset deltas, per-record timestamps and, with ``compact`` (a
    compacted topic), keys. Turning it off leaves only header checks and the CRC.

    Cost: a few µs for a 1 KiB batch; the record walk is C (``shoal._native.speedups``), about
    0.2 µs a record; a compressed batch costs its decompression on top (see docs/benchmarks.md).
    """
    limit = decompressed_limit(max_message_bytes) if max_decompressed_bytes is None else max_decompressed_bytes
    n = len(buf)
    if n == 0:
        raise InvalidRecords("INVALID_RECORD", "produce request has no record batch")
    positions: list[int] = []
    headers: list[BatchHeader] = []
    count = 0
    max_ts = -1
    max_ts_index = 0
    pos = 0
    unpack = HEADER.unpack_from
    while pos < n:
        remaining = n - pos
        if remaining < HEADER_SIZE:
            if remaining >= MAGIC_OFFSET + 1:
                length, magic = _LENGTH_MAGIC.unpack_from(buf, pos + LENGTH_OFFSET)
                if magic != 2 or length < MIN_BATCH_LENGTH:
                    raise _framing_error(length, magic)
            raise InvalidRecords("CORRUPT_MESSAGE", f"{remaining} trailing bytes are not a whole batch")
        h = BatchHeader(*unpack(buf, pos))
        if h.magic != 2 or h.batch_length < MIN_BATCH_LENGTH:
            raise _framing_error(h.batch_length, h.magic)
        size = h.batch_length + LOG_OVERHEAD
        if size > remaining:
            raise InvalidRecords("CORRUPT_MESSAGE", f"batch of {size} bytes truncated to {remaining}")
        if client:
            if pos:
                raise InvalidRecords("INVALID_RECORD", "produce requests may hold exactly one record batch")
            if h.base_offset != 0:
                raise InvalidRecords("INVALID_RECORD", f"baseOffset should be 0, but it is {h.base_offset}")
        if size > max_message_bytes:
            raise InvalidRecords(
                "MESSAGE_TOO_LARGE", f"batch of {size} bytes exceeds max.message.bytes {max_message_bytes}"
            )
        end = pos + size
        if crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end]) != h.crc:
            raise InvalidRecords("CORRUPT_MESSAGE", "record batch CRC does not match its contents")
        attrs = h.attributes
        codec = attrs & ATTR_COMPRESSION_MASK
        if codec > COMPRESSION_ZSTD:
            raise InvalidRecords("UNSUPPORTED_COMPRESSION_TYPE", f"unknown compression type id {codec}")
        rc = h.records_count
        if rc <= 0 or h.last_offset_delta + 1 != rc:
            raise InvalidRecords(
                "INVALID_RECORD",
                f"inconsistent batch: lastOffsetDelta {h.last_offset_delta} and recordsCount {rc}",
            )
        if client:
            if attrs & ATTR_CONTROL:
                raise InvalidRecords("INVALID_RECORD", "clients are not allowed to write control records")
            if h.producer_id >= 0 and h.base_sequence < 0:
                raise InvalidRecords("INVALID_RECORD", f"invalid sequence number {h.base_sequence}")
            if attrs & ATTR_TIMESTAMP_TYPE:
                raise InvalidRecords("INVALID_TIMESTAMP", "producers may not set the timestamp type to LogAppendTime")
        if now_ms is not None:
            _check_timestamps(h, now_ms, timestamp_before_max_ms, timestamp_after_max_ms)
        if check_records and not attrs & ATTR_CONTROL:
            if codec == 0:
                lo, hi = check_batch_records(buf, pos + HEADER_SIZE, end, rc, need_key=compact, strict_offsets=client)
            else:
                if rc > limit // MIN_RECORD_SIZE:
                    raise InvalidRecords("INVALID_RECORD", f"a batch of at most {limit} bytes cannot hold {rc} records")
                data, dn = decompress_bounded(codec, memoryview(buf)[pos + HEADER_SIZE : end], limit)
                lo, hi = check_batch_records(data, 0, dn, rc, need_key=compact, strict_offsets=client)
            if now_ms is not None and (lo or hi):
                _check_record_timestamps(h, lo, hi, now_ms, timestamp_before_max_ms, timestamp_after_max_ms)
        if h.max_timestamp > max_ts:
            max_ts = h.max_timestamp
            max_ts_index = len(headers)
        positions.append(pos)
        headers.append(h)
        count += rc
        pos = end
    return ValidatedBatches(positions, headers, count, n, max_ts, max_ts_index)


def _check_timestamps(h: BatchHeader, now_ms: int, before: int | None, after: int | None) -> None:
    for ts in (h.base_timestamp, h.max_timestamp):
        if ts == -1:
            continue
        if (before is not None and now_ms - ts > before) or (after is not None and ts - now_ms > after):
            raise InvalidRecords("INVALID_TIMESTAMP", f"timestamp {ts} is out of range around {now_ms}")


def _check_record_timestamps(
    h: BatchHeader, lo: int, hi: int, now_ms: int, before: int | None, after: int | None
) -> None:
    """The records' own timestamps (firstTimestamp + their deltas), as Kafka checks each record."""
    for ts in (h.base_timestamp + lo, h.base_timestamp + hi):
        if (before is not None and now_ms - ts > before) or (after is not None and ts - now_ms > after):
            raise InvalidRecords("INVALID_TIMESTAMP", f"record timestamp {ts} is out of range around {now_ms}")


COMPACTED_WITHOUT_KEY = "Compacted topic cannot accept message without key"


def check_batch_records(
    data: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    count: int,
    *,
    need_key: bool = False,
    strict_offsets: bool = True,
) -> tuple[int, int]:
    """Walk the records section ``data[pos:end]`` of a batch declaring ``count`` records, as
    Kafka's ``LogValidator`` iterates a batch; return the smallest and largest timestamp delta.

    INVALID_RECORD when the records are fewer or more than ``count``, one's lengths or varints do
    not fit it, its offset delta is not its index (``strict_offsets``: a producer's batch; else not
    above the previous one's, as in a batch the cleaner removed records from), or (``need_key``, a
    compacted topic) records have no key: then ``record_errors`` names each of them (KIP-467).
    """
    status, index, lo, hi, keyless = _check_records(data, pos, end, count, need_key, strict_offsets)
    if status == 1:
        raise InvalidRecords("INVALID_RECORD", f"the batch declares {count} records but holds {index}")
    if status == 2:
        raise InvalidRecords("INVALID_RECORD", f"the batch holds more records than the {count} it declares")
    if status == 3:
        raise InvalidRecords("INVALID_RECORD", f"record {index} is malformed: its fields do not fit its length")
    if status == 4:
        raise InvalidRecords("INVALID_RECORD", f"invalid offset delta in record {index}")
    if keyless:
        raise InvalidRecords(
            "INVALID_RECORD",
            f"{COMPACTED_WITHOUT_KEY} ({len(keyless)} of {count} records)",
            [(i, COMPACTED_WITHOUT_KEY) for i in keyless],
        )
    return lo, hi


def _check_records_py(
    data: bytes | bytearray | memoryview, pos: int, end: int, count: int, need_key: bool, strict: bool
) -> tuple[int, int, int, int, list[int] | None]:
    """Pure-Python :func:`check_batch_records` walk, the same contract as the C one:
    ``(status, index, min_ts_delta, max_ts_delta, keyless)``; see shoal/_native/speedups.c."""
    keyless: list[int] | None = [] if need_key else None
    lo = hi = 0
    i = 0
    prev_od = -1
    if pos < 0 or end > len(data) or pos > end:
        return 3, 0, 0, 0, keyless

    def varint(p: int, limit: int, maxbytes: int = 5) -> tuple[int, int]:
        v = 0
        for k in range(maxbytes):
            if p >= limit:
                raise ValueError
            b = data[p]
            p += 1
            v |= (b & 0x7F) << (7 * k)
            if not b & 0x80:
                v &= (1 << 64) - 1
                v = (v >> 1) ^ -(v & 1)
                if maxbytes == 5 and not -(2**31) <= v < 2**31:
                    raise ValueError
                return v, p
        raise ValueError

    try:
        while pos < end:
            if i >= count:
                return 2, i, lo, hi, keyless
            length, pos = varint(pos, end)
            if length <= 0 or length > end - pos:
                raise ValueError
            rec_end = pos + length
            tsd, pos = varint(pos + 1, rec_end, 10)
            od, pos = varint(pos, rec_end)
            if (od != i) if strict else (od <= prev_od):
                return 4, i, lo, hi, keyless
            prev_od = od
            kl, pos = varint(pos, rec_end)
            if kl < -1 or kl > rec_end - pos:
                raise ValueError
            if kl >= 0:
                pos += kl
            elif keyless is not None:
                keyless.append(i)
            vl, pos = varint(pos, rec_end)
            if vl < -1 or vl > rec_end - pos:
                raise ValueError
            pos += max(vl, 0)
            nh, pos = varint(pos, rec_end)
            if nh < 0:
                raise ValueError
            for _ in range(nh):
                hk, pos = varint(pos, rec_end)
                if hk < 0 or hk > rec_end - pos:
                    raise ValueError
                hv, pos = varint(pos + hk, rec_end)
                if hv < -1 or hv > rec_end - pos:
                    raise ValueError
                pos += max(hv, 0)
            if pos != rec_end:
                raise ValueError
            if i == 0 or tsd < lo:
                lo = tsd
            if i == 0 or tsd > hi:
                hi = tsd
            i += 1
    except ValueError:
        return 3, i, lo, hi, keyless
    return (1 if i < count else 0), i, lo, hi, keyless


try:  # the same walk in C (shoal/_native/speedups.c): ~30x faster on batches of small records
    from shoal._native.speedups import check_records as _check_records
except ImportError:  # not built: pure Python
    _check_records = _check_records_py
NATIVE = _check_records is not _check_records_py  # the C speed-up is in use (/metrics' shoal_build_info)


# --- offset assignment --------------------------------------------------------------------------


def assign_offsets(
    buf: bytearray,
    positions: Iterable[int],
    base_offset: int,
    *,
    log_append_time_ms: int | None,
    partition_leader_epoch: int,
) -> int:
    """Rewrite baseOffset and partitionLeaderEpoch of each batch in place; return the last offset.

    With ``log_append_time_ms`` the timestamp-type bit is set and maxTimestamp becomes the append
    time (firstTimestamp is left alone: readers take every record's timestamp from maxTimestamp
    under LogAppendTime), and the CRC is recomputed. Without it, a batch that claims LogAppendTime
    is reset to CreateTime (CRC recomputed), as Kafka's ``setMaxTimestamp(CREATE_TIME, ...)`` does.
    """
    offset = base_offset
    mv: memoryview | None = None
    for pos in positions:
        length = _I32.unpack_from(buf, pos + LENGTH_OFFSET)[0]
        _OFFSET_LEN_EPOCH.pack_into(buf, pos, offset, length, partition_leader_epoch)
        attrs, lod = _ATTRS_LOD.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
        if log_append_time_ms is not None:
            _ATTRS.pack_into(buf, pos + ATTRIBUTES_OFFSET, attrs | ATTR_TIMESTAMP_TYPE)
            _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, log_append_time_ms)
        elif attrs & ATTR_TIMESTAMP_TYPE:
            _ATTRS.pack_into(buf, pos + ATTRIBUTES_OFFSET, attrs & ~ATTR_TIMESTAMP_TYPE)
        else:
            offset += lod + 1
            continue
        if mv is None:
            mv = memoryview(buf)
        crc = crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + length + LOG_OVERHEAD])
        _U32.pack_into(buf, pos + CRC_OFFSET, crc)
        offset += lod + 1
    if mv is not None:
        mv.release()
    return offset - 1


# --- varints ------------------------------------------------------------------------------------


def encode_uvarint(value: int) -> bytes:
    """Unsigned LEB128 (protobuf varint)."""
    if value < 0:
        raise ValueError("unsigned varint of a negative value")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zigzag varint (Kafka's varint and varlong: the encoding is the same, only the range differs)."""
    return encode_uvarint((value << 1) ^ (value >> 63))


def decode_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """``(value, next position)``; raises InvalidRecords on a truncated or over-long varint."""
    result = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise InvalidRecords("CORRUPT_MESSAGE", "truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise InvalidRecords("CORRUPT_MESSAGE", "varint longer than 10 bytes")


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Zigzag varint: ``(value, next position)``."""
    v, pos = decode_uvarint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


# --- codecs -------------------------------------------------------------------------------------


def compress(codec: int, data: bytes) -> bytes:
    """Compress a records section the way the Java client does (xerial-framed snappy, LZ4 frames
    with independent blocks)."""
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == COMPRESSION_SNAPPY:
        out = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
            out.append(_I32.pack(len(block)))
            out.append(block)
        return b"".join(out)
    if codec == COMPRESSION_LZ4:
        c = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        c.compress(data)
        return bytes(c.finish())
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression type id {codec}")


_FULL = "failed to write whole buffer"  # cramjam: the output buffer is full (std's WriteZero)
_FIRST_GUESS = 64 * 1024
_ZSTD_MAGIC = 0xFD2FB528
_LZ4_MAGIC = 0x184D2204
_U32LE = struct.Struct("<I")


def decompressed_limit(max_message_bytes: int) -> int:
    """The most a batch of a topic may decompress to: DECOMPRESSED_LIMIT, or 16 times the topic's
    max.message.bytes when that is more (a batch of that many compressed bytes, 16:1)."""
    return max(DECOMPRESSED_LIMIT, 16 * max_message_bytes)


def decompress(codec: int, data: bytes | memoryview, limit: int = DECOMPRESSED_LIMIT) -> bytes:
    """Inverse of :func:`compress`; also reads raw snappy (librdkafka). CORRUPT_MESSAGE when the
    data cannot be decompressed, MESSAGE_TOO_LARGE when it would exceed ``limit`` bytes (found out
    without producing more than ``limit`` bytes: a bomb costs at most that much memory and time)."""
    if codec == COMPRESSION_NONE:
        return bytes(data)
    out, n = decompress_bounded(codec, data, limit)
    if n == len(out):
        return bytes(out)
    return bytes(memoryview(out)[:n])


def decompress_bounded(codec: int, data: bytes | memoryview, limit: int) -> tuple[bytes | bytearray, int]:
    """``(buffer, n)``: the decompressed bytes are ``buffer[:n]`` (no copy to trim it).

    The output buffer is sized from what the data declares (zstd and LZ4 frame content size,
    gzip's ISIZE, snappy's block lengths), else guessed, and grown fourfold while the
    decompressor reports it full, never beyond ``limit``.
    """
    if codec > COMPRESSION_ZSTD or codec < COMPRESSION_GZIP:
        raise InvalidRecords("UNSUPPORTED_COMPRESSION_TYPE", f"unknown compression type id {codec}")
    if codec == COMPRESSION_SNAPPY:
        return _snappy_bounded(data, limit)
    if codec == COMPRESSION_GZIP and _isal_zlib is not None:
        return _gzip_bounded(data, limit)
    fn = _DECOMPRESS_INTO[codec]
    hint = _size_hint(codec, data)
    declared_too_large = hint is not None and hint > limit
    if declared_too_large or hint is None:
        size = min(limit, _FIRST_GUESS if declared_too_large else max(_FIRST_GUESS, 8 * len(data)))
    else:
        size = hint
    while True:
        out = bytearray(size)
        try:
            return out, fn(data, out)
        except Exception as e:  # cramjam.DecompressionError, ValueError on some input
            if _FULL not in str(e):
                raise InvalidRecords(
                    "CORRUPT_MESSAGE", f"cannot decompress {COMPRESSION_NAMES[codec]} records: {e}"
                ) from None
        if size >= limit or declared_too_large:  # a declared size above the limit, and data that really is
            raise _too_large(codec, limit)
        size = min(limit, size * 4)


def _gzip_bounded(data: bytes | memoryview, limit: int) -> tuple[bytes, int]:
    """gzip with ISA-L's inflate (about twice cramjam's speed), member after member, never asking
    for more than ``limit`` + 1 bytes of output."""
    parts: list[bytes] = []
    total = 0
    rest: bytes | memoryview = data
    try:
        while True:
            d = _isal_zlib.decompressobj(31)
            want = limit + 1 - total
            out = d.decompress(rest, want)
            total += len(out)
            parts.append(out)
            if len(out) >= want:
                raise _too_large(COMPRESSION_GZIP, limit)
            if not d.eof:
                raise InvalidRecords("CORRUPT_MESSAGE", "cannot decompress gzip records: truncated stream")
            rest = d.unused_data
            if not rest:
                break
    except InvalidRecords:
        raise
    except Exception as e:  # isal_zlib.error
        raise InvalidRecords("CORRUPT_MESSAGE", f"cannot decompress gzip records: {e}") from None
    return (parts[0] if len(parts) == 1 else b"".join(parts)), total


try:  # ISA-L's inflate when installed (a dependency); cramjam's otherwise
    from isal import isal_zlib as _isal_zlib
except ImportError:  # pragma: no cover
    _isal_zlib = None


def _too_large(codec: int, limit: int) -> InvalidRecords:
    return InvalidRecords(
        "MESSAGE_TOO_LARGE", f"{COMPRESSION_NAMES[codec]} records decompress to more than {limit} bytes"
    )


_DECOMPRESS_INTO = {
    COMPRESSION_GZIP: cramjam.gzip.decompress_into,
    COMPRESSION_LZ4: cramjam.lz4.decompress_into,
    COMPRESSION_ZSTD: cramjam.zstd.decompress_into,
}


def _size_hint(codec: int, data: bytes | memoryview) -> int | None:
    """The decompressed size the data declares, if it does (a hint: it may lie)."""
    n = len(data)
    if codec == COMPRESSION_GZIP:
        return _U32LE.unpack_from(data, n - 4)[0] if n >= 18 else None
    if codec == COMPRESSION_ZSTD:
        if n < 6 or _U32LE.unpack_from(data, 0)[0] != _ZSTD_MAGIC:
            return None
        fhd = data[4]
        single = (fhd >> 5) & 1
        p = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
        fcs = (1 if single else 0, 2, 4, 8)[fhd >> 6]
        if fcs == 0 or p + fcs > n:
            return None
        v = int.from_bytes(data[p : p + fcs], "little")
        return v + 256 if fcs == 2 else v
    if codec == COMPRESSION_LZ4:
        if n < 15 or _U32LE.unpack_from(data, 0)[0] != _LZ4_MAGIC or not data[4] & 0x08:
            return None
        return int.from_bytes(data[6:14], "little")
    return None


def _snappy_bounded(data: bytes | memoryview, limit: int) -> tuple[bytearray, int]:
    """Raw snappy (librdkafka) or xerial-framed blocks (the Java client); every block declares
    its length up front, so the total is known before anything is allocated."""
    mv = memoryview(data)
    blocks: list[memoryview] = []
    if bytes(mv[:8]) != _XERIAL_MAGIC:
        blocks.append(mv)
    else:
        pos = _XERIAL_HEADER.size
        n = len(mv)
        while pos < n:
            if pos + 4 > n:
                raise InvalidRecords("CORRUPT_MESSAGE", "truncated xerial snappy block length")
            size = _I32.unpack_from(mv, pos)[0]
            pos += 4
            if size < 0 or pos + size > n:
                raise InvalidRecords("CORRUPT_MESSAGE", "truncated xerial snappy block")
            blocks.append(mv[pos : pos + size])
            pos += size
    try:
        lengths = [cramjam.snappy.decompress_raw_len(b) for b in blocks]
        total = sum(lengths)
        if total > limit:
            raise _too_large(COMPRESSION_SNAPPY, limit)
        out = bytearray(total)
        view = memoryview(out)
        at = 0
        for b, length in zip(blocks, lengths):
            if cramjam.snappy.decompress_raw_into(b, view[at : at + length]) != length:
                raise InvalidRecords("CORRUPT_MESSAGE", "a snappy block is shorter than it declares")
            at += length
        view.release()
    except InvalidRecords:
        raise
    except Exception as e:
        raise InvalidRecords("CORRUPT_MESSAGE", f"cannot decompress snappy records: {e}") from None
    return out, total


# --- records ------------------------------------------------------------------------------------

Header = tuple[str, bytes | None]


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]


def iter_records(buf: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Every record of every batch in ``buf`` (whole batches, as ``read`` returns them).

    Timestamps are as readers see them: under LogAppendTime every record carries the batch's
    maxTimestamp. Raises InvalidRecords on malformed input.
    """
    for pos, h in parse_batches(buf):
        yield from iter_batch_records(buf, pos, h)


def iter_batch_records(
    buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader, *, limit: int = DECOMPRESSED_LIMIT
) -> Iterator[Record]:
    """The records of the batch at ``pos`` whose header ``h`` was already read; a compressed batch
    is decompressed into at most ``limit`` bytes (MESSAGE_TOO_LARGE beyond)."""
    end = pos + h.size
    codec = h.compression
    if codec == COMPRESSION_NONE:
        data: bytes | bytearray | memoryview = buf
        p = pos + HEADER_SIZE
    else:
        data, end = decompress_bounded(codec, memoryview(buf)[pos + HEADER_SIZE : end], limit)
        p = 0
    log_append = h.attributes & ATTR_TIMESTAMP_TYPE
    base_offset = h.base_offset
    base_ts = h.base_timestamp
    for _ in range(h.records_count):
        length, p = decode_varint(data, p)
        rec_end = p + length
        if length <= 0 or rec_end > end:
            raise InvalidRecords("CORRUPT_MESSAGE", "record length runs past the batch")
        p += 1  # attributes
        ts_delta, p = decode_varint(data, p)
        off_delta, p = decode_varint(data, p)
        klen, p = decode_varint(data, p)
        key = None
        if klen >= 0:
            key = bytes(data[p : p + klen])
            p += klen
        vlen, p = decode_varint(data, p)
        value = None
        if vlen >= 0:
            value = bytes(data[p : p + vlen])
            p += vlen
        nh, p = decode_varint(data, p)
        if nh < 0:
            raise InvalidRecords("CORRUPT_MESSAGE", "negative header count")
        headers: list[Header] = []
        for _h in range(nh):
            hk, p = decode_varint(data, p)
            if hk < 0:
                raise InvalidRecords("CORRUPT_MESSAGE", "null header key")
            hkey = bytes(data[p : p + hk]).decode("utf-8", "replace")
            p += hk
            hv, p = decode_varint(data, p)
            hval = None
            if hv >= 0:
                hval = bytes(data[p : p + hv])
                p += hv
            headers.append((hkey, hval))
        if p != rec_end:
            raise InvalidRecords("CORRUPT_MESSAGE", "record fields do not fill the record length")
        ts = h.max_timestamp if log_append else base_ts + ts_delta
        yield Record(base_offset + off_delta, ts, key, value, headers)
    if p != end:
        raise InvalidRecords("CORRUPT_MESSAGE", "bytes left after the declared records")


def _encode_record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None, headers) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += encode_varint(ts_delta)
    body += encode_varint(offset_delta)
    if key is None:
        body += b"\x01"  # varint -1
    else:
        body += encode_varint(len(key))
        body += key
    if value is None:
        body += b"\x01"
    else:
        body += encode_varint(len(value))
        body += value
    body += encode_varint(len(headers))
    for hk, hv in headers:
        kb = hk.encode("utf-8") if isinstance(hk, str) else bytes(hk)
        body += encode_varint(len(kb))
        body += kb
        if hv is None:
            body += b"\x01"
        else:
            body += encode_varint(len(hv))
            body += hv
    return encode_varint(len(body)) + bytes(body)


def build_batch(
    records: Sequence[tuple[int, bytes | None, bytes | None, Sequence[Header]]],
    *,
    base_offset: int = 0,
    compression: int = 0,
    timestamp_type: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """Encode one v2 batch from ``(timestamp, key, value, headers)`` tuples, like the Java client's
    MemoryRecordsBuilder: firstTimestamp is the first record's, maxTimestamp the largest."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    if not 0 <= compression <= 4:
        raise ValueError(f"unknown compression type id {compression}")
    first_ts = records[0][0]
    max_ts = max(r[0] for r in records)
    body = b"".join(
        _encode_record(i, ts - first_ts, key, value, headers) for i, (ts, key, value, headers) in enumerate(records)
    )
    body = compress(compression, body)
    attrs = compression
    if timestamp_type:
        attrs |= ATTR_TIMESTAMP_TYPE
    if is_transactional:
        attrs |= ATTR_TRANSACTIONAL
    if is_control:
        attrs |= ATTR_CONTROL
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        out,
        0,
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(body),
        partition_leader_epoch,
        2,
        0,
        attrs,
        len(records) - 1,
        first_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    out += body
    _U32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)
