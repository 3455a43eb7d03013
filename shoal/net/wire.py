"""The two primitives a hand-written reader of a flexible response needs: an unsigned varint and
the tagged fields it skips (the admin client's DescribeTransactions, the replica fetcher's Fetch
v12: ``shoal.net.fetch_response``). They read ``bytes``, ``bytearray`` or ``memoryview`` alike;
a truncated buffer raises IndexError, a varint longer than 5 bytes ValueError."""

from __future__ import annotations


def uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint at ``pos``."""
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("varint longer than 5 bytes")


def skip_tags(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """The position after the tagged fields at ``pos`` (their count, then tag, size, bytes each)."""
    count, pos = uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = uvarint(buf, pos)
        size, pos = uvarint(buf, pos)
        pos += size
    return pos
