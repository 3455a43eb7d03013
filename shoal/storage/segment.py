"""One segment of a partition log (Kafka's ``LogSegment``): a ``<20-digit base offset>.log`` file
of RecordBatch v2 batches back to back, with its sparse ``.index`` (relative offset → position,
every index.interval.bytes) and ``.timeindex`` (max timestamp so far → relative offset), and its
aborted-transaction index (``shoal.storage.txn_index``).

A ``Segment`` holds the file's size, the indexes (``None`` until loaded: the active segment's are
pinned in memory, the others' load lazily into a shared LRU), its largest timestamp and what
rolling needs. ``PartitionLog`` owns the segment list and the lock; what reads or writes one
segment's files alone is here: the full scan that verifies every batch and rebuilds the indexes
(recovery, index rebuild, a failed follower write), the header walk, the index files.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shoal.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidRecords,
    is_truncation,
    read_header,
    scan_batches,
)
from shoal.storage.index import TIME_ENTRY, OffsetIndex, TimeIndex

if TYPE_CHECKING:
    from shoal.storage.epochs import LeaderEpochCache
    from shoal.storage.fs import FileSystem
    from shoal.storage.txn_index import TxnIndex

INT32_MAX = 2**31 - 1
_READ_CHUNK = 64 * 1024
_RECOVERY_CHUNK = 8 * 1024 * 1024
PREFIX = struct.Struct(">qi")  # a batch's base offset and length
LAST_OFFSET_DELTA = struct.Struct(">i")
LOD_AT = 23  # lastOffsetDelta's position in a batch
_LAST_TIME_ENTRY = struct.Struct(">qI")


def whole_batches(buf: bytes, i: int, avail: int, limit: int) -> int:
    """End of the whole batches from ``i`` that fit before ``avail`` and end below offset ``limit``."""
    unpack = PREFIX.unpack_from
    lod = LAST_OFFSET_DELTA.unpack_from
    while i + HEADER_SIZE <= avail:
        b, length = unpack(buf, i)
        size = length + LOG_OVERHEAD
        if length < HEADER_SIZE - LOG_OVERHEAD or i + size > avail or b + lod(buf, i + LOD_AT)[0] >= limit:
            break
        i += size
    return i


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class Segment:
    """One ``.log`` file and its indexes. ``None`` fields are not loaded yet."""

    __slots__ = (
        "base",
        "size",
        "prefix",
        "lock",
        "oi",
        "ti",
        "max_ts",
        "max_ts_offset",
        "rolling_ts",
        "created_ms",
        "jitter_ms",
        "bytes_since_index",
        "fd",
        "fd_writable",
        "ready",
        "txn",
    )

    def __init__(self, directory: str, base: int, size: int, lock: threading.Lock, created_ms: int, jitter_ms: int):
        self.base = base
        self.size = size
        self.prefix = os.path.join(directory, segment_name(base))
        self.lock = lock
        self.oi: OffsetIndex | None = None
        self.ti: TimeIndex | None = None
        self.max_ts: int | None = None  # largest batch maxTimestamp, -1 if none
        self.max_ts_offset = base  # last offset of the first batch that reached max_ts
        self.rolling_ts: int | None = None  # first batch's maxTimestamp, -1 if empty
        self.created_ms = created_ms
        self.jitter_ms = jitter_ms
        self.bytes_since_index = 0
        self.fd = -1
        self.fd_writable = False
        self.ready = False  # active and prepared: indexes pinned in memory, stats known
        self.txn: TxnIndex | None = None  # aborted transactions, loaded on demand

    def __repr__(self) -> str:
        return f"Segment({self.prefix}, size={self.size})"

    def make_ready_empty(self) -> None:
        """Empty indexes and stats: a new segment, ready for appends."""
        self.oi = OffsetIndex()
        self.ti = TimeIndex()
        self.max_ts = -1
        self.max_ts_offset = self.base
        self.rolling_ts = -1
        self.bytes_since_index = 0
        self.ready = True

    def adopt(self, scan: SegmentScan) -> None:
        """Take the indexes and stats a full scan rebuilt."""
        self.oi = scan.oi
        self.ti = scan.ti
        self.max_ts = scan.max_ts
        self.max_ts_offset = scan.max_ts_offset
        self.rolling_ts = scan.rolling_ts
        self.bytes_since_index = scan.bytes_since_index

    def track_batch(self, last: int, pos: int, size: int, max_ts: int, interval: int) -> None:
        """The segment's largest timestamp and sparse indexes learn a batch written at ``pos``."""
        if max_ts > self.max_ts:  # type: ignore[operator]
            self.max_ts = max_ts
            self.max_ts_offset = last
        if self.bytes_since_index > interval:
            self.oi.append(last - self.base, pos)  # type: ignore[union-attr]
            self.ti.maybe_append(self.max_ts, self.max_ts_offset - self.base)  # type: ignore[union-attr,arg-type]
            self.bytes_since_index = 0
        self.bytes_since_index += size

    def write_indexes(self, fs: FileSystem) -> None:
        if self.oi is None or self.ti is None:
            return
        fs.write_file(self.prefix + ".index", self.oi.to_bytes())
        fs.write_file(self.prefix + ".timeindex", self.ti.to_bytes())

    def read_last_time_entry(self, fs: FileSystem, max_rel: int) -> tuple[int, int] | None:
        """The last entry of the ``.timeindex`` file, if sane (its offset at most ``max_rel``)."""
        try:
            fd = fs.open(self.prefix + ".timeindex", os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            size = fs.fsize(fd)
            if size % TIME_ENTRY:
                return None
            if size == 0:
                return (-1, 0) if self.size > 0 else None
            data = fs.pread(fd, TIME_ENTRY, size - TIME_ENTRY)
        finally:
            fs.close(fd)
        if len(data) != TIME_ENTRY:
            return None
        ts, rel = _LAST_TIME_ENTRY.unpack(data)
        if rel > max_rel:
            return None
        return ts, rel

    def scan(
        self, fs: FileSystem, interval: int, *, truncate: bool, min_offset: int, epochs: LeaderEpochCache | None = None
    ) -> SegmentScan:
        """Read the whole segment, verifying every batch; rebuild its indexes. With ``truncate``,
        cut the file at the first torn or corrupt batch. ``epochs`` learns the batches' epochs."""
        fd = fs.open(self.prefix + ".log", os.O_RDWR if truncate else os.O_RDONLY)
        try:
            file_size = fs.fsize(fd)
            base = self.base
            oi = OffsetIndex()
            ti = TimeIndex()
            pos = 0
            last_entry = 0
            max_ts = -1
            max_ts_offset = base
            rolling = -1
            expected = max(min_offset, base)
            next_offset = base
            chunk = _RECOVERY_CHUNK
            bad = False
            while pos < file_size and not bad:
                data = fs.pread(fd, min(chunk, file_size - pos), pos)
                if not data:
                    break
                batches, end, problem = scan_batches(data, 0, verify_crc=True)
                for bpos, h in batches:
                    if h.base_offset < expected or h.last_offset - base > INT32_MAX:
                        end = bpos
                        problem = InvalidRecords("CORRUPT_MESSAGE", "offsets out of order")
                        break
                    p = pos + bpos
                    if p == 0:
                        rolling = h.max_timestamp
                    if h.max_timestamp > max_ts:
                        max_ts = h.max_timestamp
                        max_ts_offset = h.last_offset
                    if p - last_entry > interval:
                        oi.append(h.last_offset - base, p)
                        ti.maybe_append(max_ts, max_ts_offset - base)
                        last_entry = p
                    expected = next_offset = h.last_offset + 1
                    if epochs is not None and h.partition_leader_epoch > epochs.latest_epoch:
                        epochs.assign(h.partition_leader_epoch, h.base_offset)
                chunk_end = pos + len(data)
                pos += end
                if problem is None:
                    continue
                if is_truncation(problem) and chunk_end < file_size:
                    # Cut by our read, not by the file: read again from the batch, whole.
                    if len(data) - end >= LOG_OVERHEAD:
                        declared = PREFIX.unpack_from(data, end)[1] + LOG_OVERHEAD
                        chunk = max(chunk, declared)
                    continue
                bad = True
            if truncate and pos < file_size:
                fs.ftruncate(fd, pos)
        finally:
            fs.close(fd)
        ti.maybe_append(max_ts, max_ts_offset - base)
        return SegmentScan(oi, ti, pos, file_size, next_offset, max_ts, max_ts_offset, rolling, pos - last_entry)


def iter_headers(fs: FileSystem, fd: int, pos: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
    """``(position, header)`` of each batch from ``pos`` to ``end``, reading only around headers."""
    pread = fs.pread
    while pos + HEADER_SIZE <= end:
        data = pread(fd, min(_READ_CHUNK, end - pos), pos)
        n = len(data)
        rel = 0
        while rel + HEADER_SIZE <= n:
            h = read_header(data, rel)
            if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                return
            yield pos + rel, h
            rel += h.batch_length + LOG_OVERHEAD
        if rel == 0:
            return
        pos += rel


@dataclass(slots=True)
class SegmentScan:
    """What a full scan of a segment found (recovery and index rebuild)."""

    oi: OffsetIndex
    ti: TimeIndex
    valid_bytes: int
    file_size: int
    next_offset: int
    max_ts: int
    max_ts_offset: int
    rolling_ts: int
    bytes_since_index: int
