"""Sparse offset and time indexes of one segment, held in ``array`` columns and stored as Kafka does.

On disk (big-endian, like Kafka's ``.index``/``.timeindex``):

- offset index: ``relativeOffset u32, position u32`` per entry; an entry maps the last offset of a
  batch to the position where that batch starts, added once more than index.interval.bytes were
  appended since the previous entry;
- time index: ``timestamp i64, relativeOffset u32``; an entry holds the largest timestamp so far
  and the last offset of the batch that brought it, added only when the timestamp grows.

Files are written whole (at roll, rebuild and close); Kafka memory-maps and preallocates them
instead. Neither index is trusted after an unclean shutdown past the recovery point: recovery
rebuilds them from the log.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right

OFFSET_ENTRY = 8
TIME_ENTRY = 12

assert array("I").itemsize == 4 and array("q").itemsize == 8
_SWAP = sys.byteorder == "little"


def _interleave(cols: list[tuple[bytes, int]], entry: int, n: int) -> bytes:
    """Byte-lane interleave of columns of fixed-width items into ``n`` records of ``entry`` bytes."""
    out = bytearray(entry * n)
    lane = 0
    for data, width in cols:
        for k in range(width):
            out[lane + k :: entry] = data[k::width]
        lane += width
    return bytes(out)


def _column(data: bytes, entry: int, lane: int, width: int, typecode: str) -> array:
    n = len(data) // entry
    raw = bytearray(width * n)
    for k in range(width):
        raw[k::width] = data[lane + k :: entry]
    col = array(typecode)
    col.frombytes(raw)
    if _SWAP:
        col.byteswap()
    return col


def _be_bytes(col: array) -> bytes:
    if _SWAP:
        col = array(col.typecode, col)
        col.byteswap()
    return col.tobytes()


class OffsetIndex:
    """Relative offset → file position, sorted by both."""

    __slots__ = ("rel", "pos")

    def __init__(self, rel: array | None = None, pos: array | None = None) -> None:
        self.rel = rel if rel is not None else array("I")
        self.pos = pos if pos is not None else array("I")

    def __len__(self) -> int:
        return len(self.rel)

    def append(self, rel: int, pos: int) -> None:
        self.rel.append(rel)
        self.pos.append(pos)

    def lookup(self, rel: int) -> int:
        """Position of the entry with the largest relative offset <= ``rel`` (0 if none)."""
        i = bisect_right(self.rel, rel) - 1
        return self.pos[i] if i >= 0 else 0

    def nbytes(self) -> int:
        return len(self.rel) * OFFSET_ENTRY

    def to_bytes(self) -> bytes:
        n = len(self.rel)
        return _interleave([(_be_bytes(self.rel), 4), (_be_bytes(self.pos), 4)], OFFSET_ENTRY, n)

    @classmethod
    def from_bytes(cls, data: bytes) -> OffsetIndex:
        if len(data) % OFFSET_ENTRY:
            raise ValueError(f"offset index of {len(data)} bytes is not a whole number of entries")
        return cls(_column(data, OFFSET_ENTRY, 0, 4, "I"), _column(data, OFFSET_ENTRY, 4, 4, "I"))

    def is_sane(self, segment_size: int, max_rel: int) -> bool:
        """Kafka's sanity check, and a little more: ordered ends, in the segment's range."""
        n = len(self.rel)
        if not n:
            return True
        return (
            self.rel[-1] <= max_rel
            and self.pos[-1] < segment_size
            and self.rel[0] <= self.rel[-1]
            and self.pos[0] <= self.pos[-1]
            and (n < 2 or (self.rel[-2] < self.rel[-1] and self.pos[-2] < self.pos[-1]))
        )


class TimeIndex:
    """Largest timestamp so far → relative offset of the batch that brought it."""

    __slots__ = ("ts", "rel")

    def __init__(self, ts: array | None = None, rel: array | None = None) -> None:
        self.ts = ts if ts is not None else array("q")
        self.rel = rel if rel is not None else array("I")

    def __len__(self) -> int:
        return len(self.ts)

    def maybe_append(self, ts: int, rel: int) -> None:
        """Append unless ``ts`` is not larger than the last entry's (or negative, for an empty index)."""
        if ts > (self.ts[-1] if self.ts else -1):
            self.ts.append(ts)
            self.rel.append(rel)

    def lookup(self, ts: int) -> int:
        """Relative offset of the entry with the largest timestamp <= ``ts`` (0 if none)."""
        i = bisect_right(self.ts, ts) - 1
        return self.rel[i] if i >= 0 else 0

    def last(self) -> tuple[int, int] | None:
        return (self.ts[-1], self.rel[-1]) if self.ts else None

    def nbytes(self) -> int:
        return len(self.ts) * TIME_ENTRY

    def to_bytes(self) -> bytes:
        n = len(self.ts)
        return _interleave([(_be_bytes(self.ts), 8), (_be_bytes(self.rel), 4)], TIME_ENTRY, n)

    @classmethod
    def from_bytes(cls, data: bytes) -> TimeIndex:
        if len(data) % TIME_ENTRY:
            raise ValueError(f"time index of {len(data)} bytes is not a whole number of entries")
        return cls(_column(data, TIME_ENTRY, 0, 8, "q"), _column(data, TIME_ENTRY, 8, 4, "I"))

    def is_sane(self, max_rel: int) -> bool:
        n = len(self.ts)
        if not n:
            return True
        return (
            self.rel[-1] <= max_rel
            and self.ts[0] <= self.ts[-1]
            and (n < 2 or (self.ts[-2] < self.ts[-1] and self.rel[-2] <= self.rel[-1]))
        )
