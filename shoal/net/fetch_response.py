"""A Fetch response (v12, what the replica fetcher asks for) read without copying its records.

kio's reader copies every partition's record set into a ``bytes`` of its own, and wants the
whole frame as ``bytes`` (one more copy of a frame read into a ``bytearray``). A follower only
checks each batch's header and CRC and writes the bytes as they came (Kafka's
``appendAsFollower``), so here the records are ``memoryview`` slices of the frame: the bytes the
socket read land in the segment file with no copy in between. Only the fields the fetcher reads
are kept; tagged fields other than ``diverging_epoch`` are skipped, as are the aborted
transactions (a follower reads uncommitted data and copies the log, markers included).

:func:`decode_fetch_v12` has the signature of ``Connection``'s ``decoders``; a frame it cannot
read raises ValueError (the connection then ends, as with kio's reader). Small answers (the
acks=all regime: a batch or two per fetch) still go to kio's native reader, which is faster there.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from shoal.net.wire import skip_tags, uvarint
from shoal.protocol import codec

__all__ = ["EpochEndOffset", "FetchPartition", "FetchResponse", "FetchTopic", "decode_fetch_v12"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PART = struct.Struct(">ihqqq")  # partition_index, error_code, high_watermark, last_stable_offset, log_start_offset
_EPOCH = struct.Struct(">iq")  # EpochEndOffset: epoch, end_offset
_ABORTED = 16  # producer_id int64 + first_offset int64
DIVERGING_EPOCH_TAG = 0


class EpochEndOffset(NamedTuple):
    epoch: int
    end_offset: int


class FetchPartition(NamedTuple):
    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    diverging_epoch: EpochEndOffset | None
    preferred_read_replica: int
    records: memoryview  # empty when the leader sent none (null or zero bytes)


class FetchTopic(NamedTuple):
    topic: str
    partitions: tuple[FetchPartition, ...]


class FetchResponse(NamedTuple):
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: tuple[FetchTopic, ...]


def _partition(buf: memoryview, pos: int, end: int) -> tuple[FetchPartition, int]:
    index, code, hw, lso, start = _PART.unpack_from(buf, pos)
    pos += _PART.size
    aborted, pos = uvarint(buf, pos)  # compact nullable array: 0 null, else n + 1
    for _ in range(max(0, aborted - 1)):
        pos = skip_tags(buf, pos + _ABORTED)
    (preferred,) = _I32.unpack_from(buf, pos)
    pos += 4
    size, pos = uvarint(buf, pos)  # compact nullable records: 0 null, else length + 1
    size = max(0, size - 1)
    if pos + size > end:
        raise ValueError(f"records of {size} bytes past the end of the frame")
    records = buf[pos:pos + size]
    pos += size
    diverging = None
    count, pos = uvarint(buf, pos)
    for _ in range(count):
        tag, pos = uvarint(buf, pos)
        tsize, pos = uvarint(buf, pos)
        if tag == DIVERGING_EPOCH_TAG:
            diverging = EpochEndOffset(*_EPOCH.unpack_from(buf, pos))
        pos += tsize
    return FetchPartition(index, code, hw, lso, start, diverging, preferred, records), pos


SMALL_FRAME = 32 * 1024  # below this kio's native reader is faster than the walk here, copies and all


def decode_fetch_v12(api_key: int, version: int, frame: bytes | bytearray | memoryview, *,
                     small: int = SMALL_FRAME) -> tuple[int, Any]:
    """(correlation id, response) of a Fetch v12 response frame (without its length prefix).

    A frame under ``small`` bytes goes to kio's reader (3 us for a one-partition answer where this
    walk takes 7; copying a few KiB costs less than that): its response has the same fields, with
    ``records`` as ``bytes`` (or None) and an absent ``diverging_epoch`` as epoch -1."""
    if version != 12:
        raise ValueError(f"decode_fetch_v12 reads Fetch v12, not v{version}")
    if len(frame) < small:
        return codec.decode_response(api_key, version, frame)
    buf = memoryview(frame)
    end = len(buf)
    try:
        (correlation_id,) = _I32.unpack_from(buf, 0)
        pos = skip_tags(buf, 4)  # response header v1
        throttle, code, session_id = _HEAD.unpack_from(buf, pos)
        pos += _HEAD.size
        topics = []
        n_topics, pos = uvarint(buf, pos)
        for _ in range(max(0, n_topics - 1)):
            size, pos = uvarint(buf, pos)
            name = str(buf[pos:pos + size - 1], "utf-8")
            pos += size - 1
            parts = []
            n_parts, pos = uvarint(buf, pos)
            for _ in range(max(0, n_parts - 1)):
                p, pos = _partition(buf, pos, end)
                parts.append(p)
            pos = skip_tags(buf, pos)
            topics.append(FetchTopic(name, tuple(parts)))
        pos = skip_tags(buf, pos)
    except (IndexError, struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"truncated or malformed Fetch v12 response: {e}") from None
    if pos != end:
        raise ValueError(f"Fetch v12 response of {end} bytes ends at {pos}")
    return correlation_id, FetchResponse(throttle, code, session_id, tuple(topics))
