"""The log cleaner: compaction of ``cleanup.policy=compact`` logs, after Kafka's ``LogCleaner``.

A compacted log keeps, per key, at least the latest record. ``PartitionLog.compact`` runs one
*pass* (Kafka's ``doClean``) in resumable steps, each limited by a byte budget:

1. **Choose** (under the partition lock, :func:`cleanable_info`): the cleanable range runs from
   the *first dirty offset* (the cleaner checkpoint, reset to the log start when it is below it or
   beyond the log end) to the *first uncleanable offset*: the smallest of the active segment's
   base, the high watermark, and the base of the first dirty segment whose largest timestamp is
   within min.compaction.lag.ms of now; rounded down to a segment base. The pass starts when the
   dirty ratio ``dirty / (clean + dirty)`` bytes is above min.cleanable.dirty.ratio (strictly, as
   Kafka compares), or when max.compaction.lag.ms forces it (a dirty segment whose first batch is
   older than that) and there are dirty bytes.
2. **Map** (no lock, :class:`OffsetMap`): key -> latest offset over the dirty segments, records of
   compressed batches decompressed into a bounded buffer and walked once in C before the Python
   loops read them; control batches and null keys are not mapped. The map stops
   at a segment boundary once it holds ``max_map_entries`` keys (at least one segment is mapped;
   Kafka's dedupe buffer); that boundary ``map_end`` becomes the new checkpoint.
3. **Rewrite** (no lock, :class:`GroupWriter`): segments from the log start to ``map_end`` are
   taken in groups of adjacent segments whose sizes add up to at most segment.bytes (and whose
   offsets fit a segment's 32-bit relative offsets), Kafka's ``groupSegmentsBySize``. Each group is
   filtered batch by batch (:func:`clean_batch`) into ``<base>.log.cleaned`` with its indexes in
   memory, then fsynced, indexes written as ``.index.cleaned``/``.timeindex.cleaned`` and fsynced.
4. **Swap** (under the lock, in ``PartitionLog``): if the log still holds exactly those segments
   (same generation, same objects), rename the ``.cleaned`` files to ``.swap`` (the rename of the
   log file is the commit point), retire the old segments (``.deleted``, unlinked after
   file.delete.delay.ms), rename ``.swap`` to the final names, and replace the segments in memory.
   A group that vanished (retention) is dropped; a truncation abandons the whole pass.
5. When every group is swapped the checkpoint becomes ``map_end`` (``cleaner-offset-checkpoint``
   in the partition directory, written atomically, so it survives restarts).

Transactions (Kafka's ``CleanedTransactionMetadata``): the cleanable range ends at the last
stable offset, so every transaction in it is decided; the batches of aborted transactions
(``AbortedRanges``, from the log's transaction index) are not mapped, so an aborted write never
shadows a committed value, and are dropped by the rewrite unless a batch is its producer's last.

Record rules (:func:`clean_batch`), Kafka's ``shouldRetainRecord`` and ``checkBatchRetention``:

- a keyed record is removed when the map holds a larger offset for its key;
- a tombstone (null value) that is the latest for its key is kept until its batch's *delete
  horizon* (KIP-534): the first pass that keeps it stamps the batch with horizon =
  now + delete.retention.ms (attribute bit 0x40, firstTimestamp = horizon, record timestamp
  deltas re-based so every record keeps its timestamp); a later pass at or after the horizon
  removes it;
- offsets never change: a rewritten batch keeps its baseOffset, lastOffsetDelta, producer id,
  epoch, base sequence, partition leader epoch, timestamp type and codec (retained records are
  recompressed with it); maxTimestamp is recomputed from the retained records (CreateTime);
- a batch that loses every record is dropped, unless it is the last batch of a producer the
  partition still tracks: then its header stays as an empty batch (recordsCount 0,
  uncompressed), so replaying the log rebuilds the producer's last sequence;
- a batch whose records all stay, and that needs no new horizon, is copied byte for byte.

Crash safety: a crash before the log's ``.swap`` rename leaves the old segments and stray
``.cleaned``/``.swap`` files, which the next load deletes (:func:`recover_swaps`); from that
rename on, the load completes the swap: it deletes every segment whose base lies in
``[swap base, swap's next offset)`` (and the base itself), and renames the ``.swap`` files. Either
way the log holds the old or the new segments, never a mix that loses a key's latest value.

Deliberate deviations from Kafka:

- records with a null key are kept (Kafka's cleaner drops them; produce refuses them in
  compacted topics, as Kafka does, so only a topic whose policy changed holds any);
- a batch whose records cannot be read (corrupt, or decompressing beyond the bound of
  ``decompressed_limit``, e.g. written by an older version) is kept as it is, its keys unmapped:
  counted in ``CleanerStats.batches_skipped`` and logged once per log, never retried forever
  (Kafka's cleaner fails the log and marks it uncleanable);
- a marker is dropped as Kafka drops it (its transaction's data gone, then delete.retention.ms
  after a pass stamped its horizon), and its aborted-transaction index entry with it; the other
  entries of the cleaned segments carry over;
- a rewritten batch keeps its original firstTimestamp when no horizon is set (Kafka's builder
  uses the first retained record's); readers see the same record timestamps either way;
- the offset map holds whole keys in a dict (Kafka: 16-byte MD5 digests in a fixed buffer);
- an empty group still yields an (empty) segment; the grouping bounds only bytes and offsets, the
  cleaned segment's offset index just stops growing at segment.index.bytes;
- a pass runs in budgeted steps across calls and groups are swapped one by one as in Kafka; the
  map is not rebuilt between steps (records appended meanwhile are beyond ``map_end``).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crc32c import crc32c

from shoal.protocol.records import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    DECOMPRESSED_LIMIT,
    InvalidRecords,
    check_batch_records,
    compress,
    decode_varint,
    decompress_bounded,
    encode_varint,
    is_truncation,
    scan_batches,
)
from shoal.storage.config import MAX_LONG
from shoal.storage.index import OffsetIndex, TimeIndex

if TYPE_CHECKING:
    from shoal.storage.fs import FileSystem

__all__ = [
    "AbortedRanges",
    "MarkerRetention",
    "CHECKPOINT_FILE",
    "DEFAULT_MAX_MAP_ENTRIES",
    "CleanResult",
    "CleanableInfo",
    "CleanerPass",
    "CleanerStats",
    "GroupWriter",
    "OffsetMap",
    "Source",
    "cleanable_info",
    "clean_batch",
    "empty_batch",
    "group_end",
    "read_checkpoint",
    "recover_swaps",
    "write_checkpoint",
]

log = logging.getLogger("shoal.storage.cleaner")

INT32_MAX = 2**31 - 1
MAX_KNOWN_BAD = 1024
CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_CHECKPOINT_HEADER = "shoal-cleaner-checkpoint 1"
DEFAULT_MAX_MAP_ENTRIES = 1_000_000
_CHUNK = 1 << 20
_MIN_CHUNK = 64 * 1024
_PREFIX = struct.Struct(">qi")
_U32 = struct.Struct(">I")
_KEEP_ON_EMPTY = ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL


# --- choosing -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanableInfo:
    """Kafka's ``LogToClean``: where the dirty section is and how dirty the log is."""

    first_dirty: int  # the (validated) checkpoint
    first_dirty_segment: int  # base of the segment holding it
    first_uncleanable: int  # a segment base
    clean_bytes: int
    dirty_bytes: int
    needs_compaction_now: bool  # max.compaction.lag.ms is exceeded
    checkpoint_reset: bool  # the stored checkpoint was invalid (below the log start or past the end)

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def should_clean(self, min_cleanable_dirty_ratio: float) -> bool:
        if self.dirty_bytes <= 0:
            return False
        return self.needs_compaction_now or self.dirty_ratio > min_cleanable_dirty_ratio


def cleanable_info(
    bases: Sequence[int],
    sizes: Sequence[int],
    *,
    log_start: int,
    log_end: int,
    high_watermark: int,
    checkpoint: int | None,
    now_ms: int,
    min_compaction_lag_ms: int,
    max_compaction_lag_ms: int,
    largest_timestamp: Callable[[int], int],
    first_batch_timestamp: Callable[[int], int],
) -> CleanableInfo:
    """Kafka's ``cleanableOffsets`` + ``calculateCleanableBytes`` + ``maxCompactionDelay``.

    ``bases``/``sizes`` describe the segments, the last one active. The callables give a
    segment's (by index) largest timestamp and its first batch's maxTimestamp; they are only
    called when min.compaction.lag.ms > 0, resp. max.compaction.lag.ms is finite.
    """
    from bisect import bisect_right

    active = len(bases) - 1
    first_dirty = checkpoint if checkpoint is not None else log_start
    reset = False
    if first_dirty < log_start or first_dirty > log_end:
        first_dirty = log_start
        reset = checkpoint is not None
    d = max(0, bisect_right(bases, first_dirty) - 1)
    uncleanable = min(bases[active], high_watermark)
    if min_compaction_lag_ms > 0:
        for i in range(d, active):
            if largest_timestamp(i) > now_ms - min_compaction_lag_ms:
                uncleanable = min(uncleanable, bases[i])
                break
    uncleanable = max(uncleanable, first_dirty)
    u = max(d, bisect_right(bases, uncleanable) - 1)
    needs_now = False
    if 0 < max_compaction_lag_ms < MAX_LONG:
        until = now_ms - max_compaction_lag_ms
        for i in range(d, active):
            ts = first_batch_timestamp(i)
            if 0 < ts < until:
                needs_now = True
                break
    return CleanableInfo(
        first_dirty,
        bases[d],
        bases[u],
        sum(sizes[:d]),
        sum(sizes[d:u]),
        needs_now,
        reset,
    )


def group_end(bases: Sequence[int], sizes: Sequence[int], start: int, stop: int, max_bytes: int) -> int:
    """Kafka's ``groupSegmentsBySize``: the exclusive end index of the group that starts at index
    ``start``, taking segments before index ``stop`` while their sizes add up to at most
    ``max_bytes`` and their offsets stay within 2^31 of the group's base. ``bases`` has an entry
    after ``stop - 1`` (the next segment, so each segment's last offset is known)."""
    total = sizes[start]
    end = start + 1
    base = bases[start]
    while end < stop:
        size = sizes[end]
        if total + size > max_bytes:
            break
        if size and bases[end + 1] - 1 - base > INT32_MAX:
            break
        total += size
        end += 1
    return end


# --- records --------------------------------------------------------------------------------------


def _vi(data: bytes, p: int) -> tuple[int, int]:
    """A zigzag varint, with fast paths for the one- and two-byte ones records are made of."""
    b = data[p]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p + 1
    b2 = data[p + 1]
    if b2 < 0x80:
        v = (b & 0x7F) | (b2 << 7)
        return (v >> 1) ^ -(v & 1), p + 2
    return decode_varint(data, p)


def _records_of(buf: bytes, pos: int, h: BatchHeader, limit: int) -> tuple[bytes | bytearray, int, int]:
    """``(data, start, end)`` of the batch's records section, decompressed into at most ``limit``
    bytes and walked once in C (:func:`check_batch_records`), so the loops over it cannot run
    past it. InvalidRecords when the batch cannot be read."""
    codec = h.attributes & ATTR_COMPRESSION_MASK
    end = pos + h.size
    if codec == 0:
        data: bytes | bytearray = buf
        start = pos + HEADER_SIZE
    else:
        data, end = decompress_bounded(codec, memoryview(buf)[pos + HEADER_SIZE : end], limit)
        start = 0
    check_batch_records(data, start, end, h.records_count, strict_offsets=False)  # cleaned batches have gaps
    return data, start, end


class OffsetMap:
    """Key -> offset of its latest record in the mapped section (Kafka's ``OffsetMap``).

    Also carries the pass's reading rules: ``limit``, the most a batch may decompress to, and
    ``known_bad``, the batches (base offset, CRC) already reported as unreadable (shared by the
    log's passes, so each is reported once)."""

    __slots__ = ("offsets", "latest_offset", "limit", "known_bad")

    def __init__(self, limit: int = DECOMPRESSED_LIMIT, known_bad: dict[tuple[int, int], None] | None = None) -> None:
        self.offsets: dict[bytes, int] = {}
        self.latest_offset = -1
        self.limit = limit
        self.known_bad = {} if known_bad is None else known_bad

    def __len__(self) -> int:
        return len(self.offsets)

    def get(self, key: bytes) -> int:
        return self.offsets.get(key, -1)

    def add_batch(self, buf: bytes, pos: int, h: BatchHeader) -> int:
        """Map the keyed records of the batch at ``pos``; returns how many records it holds.
        Control batches are skipped (their records have keys, but not the topic's), and so are
        batches that cannot be read (the rewrite keeps them as they are and reports them)."""
        if h.attributes & ATTR_CONTROL:
            return 0
        try:
            data, p, _end = _records_of(buf, pos, h, self.limit)
        except InvalidRecords:
            return 0
        base = h.base_offset
        offsets = self.offsets
        for _ in range(h.records_count):
            length, p = _vi(data, p)
            rec_end = p + length
            _ts, p = _vi(data, p + 1)
            od, p = _vi(data, p)
            kl, p = _vi(data, p)
            if kl >= 0:
                offsets[bytes(data[p : p + kl])] = base + od
            p = rec_end
        if h.last_offset > self.latest_offset:
            self.latest_offset = h.last_offset
        return h.records_count

    def unreadable(self, h: BatchHeader, error: InvalidRecords, stats: "CleanerStats") -> None:
        """Count a batch the rewrite keeps as it is; log it the first time it is seen."""
        stats.batches_skipped += 1
        key = (h.base_offset, h.crc)
        if key in self.known_bad:
            return
        if len(self.known_bad) < MAX_KNOWN_BAD:
            self.known_bad[key] = None
        log.warning(
            "log cleaner: kept the batch at offsets %d-%d as it is, its records cannot be read: %s",
            h.base_offset, h.last_offset, error,
        )


@dataclass(slots=True)
class CleanerStats:
    """What one ``compact`` call did (Kafka's ``CleanerStats``)."""

    bytes_read: int = 0  # map building and rewriting
    bytes_written: int = 0
    records_read: int = 0  # while rewriting
    records_retained: int = 0
    tombstones_removed: int = 0
    batches_rewritten: int = 0
    empty_batches_kept: int = 0
    batches_skipped: int = 0  # could not be read (corrupt, or beyond the decompression bound): kept as they are
    markers_removed: int = 0  # end-transaction markers whose transaction had no data left


def _encode(h: BatchHeader, attrs: int, base_ts: int, max_ts: int, count: int, body: bytes) -> bytes:
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        out,
        0,
        h.base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(body),
        h.partition_leader_epoch,
        2,
        0,
        attrs,
        h.last_offset_delta,
        base_ts,
        max_ts,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        count,
    )
    out += body
    _U32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def empty_batch(h: BatchHeader) -> bytes:
    """The header of ``h`` with no records (Kafka's ``writeEmptyHeader``): same offsets and
    producer fields, uncompressed, both timestamps the batch's maxTimestamp."""
    return _encode(h, h.attributes & _KEEP_ON_EMPTY, h.max_timestamp, h.max_timestamp, 0, b"")


def clean_batch(
    buf: bytes,
    pos: int,
    h: BatchHeader,
    offset_map: OffsetMap,
    *,
    now_ms: int,
    delete_retention_ms: int,
    retain_empty: bool,
    stats: CleanerStats,
    marker_removable: bool = False,
) -> bytes | None:
    """The bytes that replace the batch at ``pos`` (its own bytes if nothing changes), or None to
    drop it. ``retain_empty``: the batch is its producer's last, so it never disappears.
    ``marker_removable``: a control batch whose transaction has no data left (``MarkerRetention``):
    stamped with a delete horizon, then dropped by a pass at or after it."""
    size = h.size
    attrs = h.attributes
    count = h.records_count
    stats.records_read += count
    control = attrs & ATTR_CONTROL
    if control:
        if not marker_removable or (attrs & ATTR_DELETE_HORIZON and now_ms < h.base_timestamp):
            stats.records_retained += count
            return buf[pos : pos + size]
        if attrs & ATTR_DELETE_HORIZON:
            stats.markers_removed += 1
            return None
    try:
        data, p, end = _records_of(buf, pos, h, offset_map.limit)
    except InvalidRecords as e:
        offset_map.unreadable(h, e, stats)
        stats.records_retained += count
        return buf[pos : pos + size]
    base = h.base_offset
    base_ts = h.base_timestamp
    has_horizon = attrs & ATTR_DELETE_HORIZON
    keep_deletes = not has_horizon or now_ms < base_ts
    offsets = offset_map.offsets
    kept: list[tuple[int, int, int, int]] = []  # record start, attributes position, ts delta, end
    tombstones = False
    removed_tombstones = 0
    max_delta: int | None = None
    for _ in range(count):  # _records_of walked them: every length fits
        start = p
        length, p = _vi(data, p)
        rec_end = p + length
        attr_at = p
        tsd, p = _vi(data, p + 1)
        od, p = _vi(data, p)
        kl, p = _vi(data, p)
        keep = True
        if kl >= 0 and not control:  # a marker's key is no key of the topic
            key = bytes(data[p : p + kl])
            vl, _p = _vi(data, p + kl)
            if base + od < offsets.get(key, -1):
                keep = False
            elif vl < 0:
                if keep_deletes:
                    tombstones = True
                else:
                    keep = False
                    removed_tombstones += 1
        if keep:
            kept.append((start, attr_at, tsd, rec_end))
            if max_delta is None or tsd > max_delta:
                max_delta = tsd
        p = rec_end
    stats.tombstones_removed += removed_tombstones
    stats.records_retained += len(kept)
    set_horizon = (tombstones or control) and not has_horizon
    if len(kept) == count and not set_horizon:
        return buf[pos : pos + size]
    stats.batches_rewritten += 1
    if not kept:
        if retain_empty:
            stats.empty_batches_kept += 1
            return empty_batch(h)
        return None
    new_attrs = attrs
    new_base_ts = base_ts
    if set_horizon:
        new_base_ts = min(now_ms + delete_retention_ms, MAX_LONG)
        new_attrs |= ATTR_DELETE_HORIZON
    if new_base_ts == base_ts:
        body = b"".join([data[s:e] for s, _a, _t, e in kept])
    else:
        shift = base_ts - new_base_ts
        parts = []
        for _s, a, tsd, e in kept:
            # attributes, the re-based timestamp delta, then the record's fields after its delta
            _old, after_ts = _vi(data, a + 1)
            rec = data[a : a + 1] + encode_varint(tsd + shift) + data[after_ts:e]
            parts.append(encode_varint(len(rec)))
            parts.append(rec)
        body = b"".join(parts)
    if attrs & ATTR_TIMESTAMP_TYPE:
        max_ts = h.max_timestamp
    else:
        max_ts = base_ts + max_delta  # type: ignore[operator]
    codec = attrs & ATTR_COMPRESSION_MASK
    if codec:
        body = compress(codec, body)
    return _encode(h, new_attrs, new_base_ts, max_ts, len(kept), body)


# --- files ---------------------------------------------------------------------------------------


def read_batches(
    fs: FileSystem, fd: int, pos: int, end: int, want: int
) -> tuple[bytes, list[tuple[int, BatchHeader]], int]:
    """Whole batches from file position ``pos`` (before ``end``), about ``want`` bytes but at least
    one batch: ``(data, [(position in data, header)], next file position)``."""
    n = min(max(want, _MIN_CHUNK), _CHUNK, end - pos)
    data = fs.pread(fd, n, pos)
    batches, stop, problem = scan_batches(data, 0)
    if not batches:
        if is_truncation(problem) and len(data) >= LOG_OVERHEAD:
            declared = _PREFIX.unpack_from(data, 0)[1] + LOG_OVERHEAD
            if len(data) < declared <= end - pos:
                data = fs.pread(fd, declared, pos)
                batches, stop, problem = scan_batches(data, 0)
        if not batches:
            raise InvalidRecords("CORRUPT_MESSAGE", f"no whole batch at position {pos}: {problem}")
    return data, batches, pos + stop


@dataclass(slots=True)
class Source:
    """A segment being read by the cleaner: its base, size and path prefix when it was snapshot."""

    base: int
    size: int
    prefix: str


class AbortedRanges:
    """The aborted transactions of a log, by producer: ``(first offset, marker offset)``."""

    __slots__ = ("_by_pid",)

    def __init__(self, txns: Sequence[tuple[int, int, int]] = ()) -> None:
        self._by_pid: dict[int, list[tuple[int, int]]] = {}
        for pid, first, last in txns:
            self._by_pid.setdefault(pid, []).append((first, last))

    def __bool__(self) -> bool:
        return bool(self._by_pid)

    def holds(self, h: BatchHeader) -> bool:
        """Whether ``h`` is a data batch of an aborted transaction."""
        if not h.attributes & ATTR_TRANSACTIONAL or h.attributes & ATTR_CONTROL:
            return False
        ranges = self._by_pid.get(h.producer_id)
        if not ranges:
            return False
        off = h.base_offset
        return any(first <= off <= last for first, last in ranges)


class MarkerRetention:
    """Which end-transaction markers a pass may remove (Kafka's ``CleanedTransactionMetadata``):
    a pass reads the log in offset order from the log start, and a marker whose producer had no
    transactional data batch since its previous marker has no data left, so it can go (after
    its delete horizon, like a tombstone: a reader that got the data before it was cleaned still
    gets the marker). Aborted data read in this pass counts: it goes now, the marker a pass later."""

    __slots__ = ("_with_data",)

    def __init__(self) -> None:
        self._with_data: set[int] = set()

    def on_batch(self, h: BatchHeader) -> bool:
        """Learn a batch; for a control batch, whether it may be removed."""
        pid = h.producer_id
        if pid < 0 or not h.attributes & ATTR_TRANSACTIONAL:
            return False
        if h.attributes & ATTR_CONTROL:
            had = pid in self._with_data
            self._with_data.discard(pid)
            return not had
        self._with_data.add(pid)
        return False


class GroupWriter:
    """Cleans a group of adjacent segments into ``<base>.log.cleaned`` and builds its indexes,
    in steps (no lock: it only reads the old segments' files and writes its own)."""

    def __init__(
        self,
        segments: list,
        sources: list[Source],
        upper: int,
        *,
        index_interval: int,
        max_index_entries: int,
        max_time_entries: int,
        old_max_timestamp: int = -1,
    ) -> None:
        self.segments = segments  # the Segment objects, to check at swap that they are still there
        self.sources = sources
        self.base = sources[0].base
        self.upper = upper  # the next segment's base
        self.prefix = sources[0].prefix
        self.interval = index_interval
        self.max_oi = max_index_entries
        self.max_ti = max_time_entries
        self.oi = OffsetIndex()
        self.ti = TimeIndex()
        self.size = 0
        self.max_ts = -1
        self.max_ts_offset = self.base
        self.rolling_ts = -1
        self.last_entry = 0
        self.idx = 0
        self.pos = 0
        self.old_max_ts = old_max_timestamp
        self.dropped_markers: set[int] = set()  # offsets of the markers removed (their index entries go)

    @property
    def cleaned_paths(self) -> list[str]:
        return [self.prefix + s + ".cleaned" for s in (".log", ".index", ".timeindex")]

    def create(self, fs: FileSystem) -> None:
        fd = fs.open(self.prefix + ".log.cleaned", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        fs.close(fd)

    def step(
        self,
        fs: FileSystem,
        budget: int,
        offset_map: OffsetMap,
        producers_last: dict[int, int],
        *,
        now_ms: int,
        delete_retention_ms: int,
        stats: CleanerStats,
        aborted: AbortedRanges | None = None,
        markers: MarkerRetention | None = None,
    ) -> int:
        """Clean about ``budget`` bytes more; returns the bytes read. ``done`` when all are read."""
        used = 0
        out_fd = fs.open(self.prefix + ".log.cleaned", os.O_WRONLY)
        try:
            while self.idx < len(self.sources) and used < budget:
                src = self.sources[self.idx]
                if self.pos >= src.size:
                    self.idx += 1
                    self.pos = 0
                    continue
                fd = fs.open(src.prefix + ".log", os.O_RDONLY)
                try:
                    while self.pos < src.size and used < budget:
                        data, batches, nxt = read_batches(fs, fd, self.pos, src.size, budget - used)
                        out = []
                        for rel, h in batches:
                            pid = h.producer_id
                            retain_empty = pid >= 0 and producers_last.get(pid) == h.last_offset
                            removable = markers is not None and markers.on_batch(h)
                            if aborted and aborted.holds(h):
                                # an aborted transaction's data: no reader sees it (the producer's
                                # last batch stays as an empty header, for its sequence)
                                stats.records_read += h.records_count
                                got = empty_batch(h) if retain_empty else None
                            else:
                                got = clean_batch(
                                    data,
                                    rel,
                                    h,
                                    offset_map,
                                    now_ms=now_ms,
                                    delete_retention_ms=delete_retention_ms,
                                    retain_empty=retain_empty,
                                    stats=stats,
                                    marker_removable=removable,
                                )
                            if got is not None:
                                self._index(h, got)
                                out.append(got)
                            elif removable:
                                self.dropped_markers.add(h.last_offset)
                        if out:
                            blob = b"".join(out)
                            fs.pwrite_all(out_fd, blob, self.size - len(blob))
                            stats.bytes_written += len(blob)
                        used += nxt - self.pos
                        self.pos = nxt
                finally:
                    fs.close(fd)
        finally:
            fs.close(out_fd)
        while self.idx < len(self.sources) and self.pos >= self.sources[self.idx].size:
            self.idx += 1
            self.pos = 0
        stats.bytes_read += used
        return used

    @property
    def done(self) -> bool:
        return self.idx >= len(self.sources)

    def _index(self, h: BatchHeader, batch: bytes) -> None:
        """Account for a batch about to be written at ``self.size``, as a scan would index it."""
        p = self.size
        max_ts = HEADER.unpack_from(batch, 0)[8]  # the rewritten batch's maxTimestamp
        if p == 0:
            self.rolling_ts = max_ts
        if max_ts > self.max_ts:
            self.max_ts = max_ts
            self.max_ts_offset = h.last_offset
        if p - self.last_entry > self.interval and len(self.oi) < self.max_oi:
            self.oi.append(h.last_offset - self.base, p)
            if len(self.ti) < self.max_ti - 1:
                self.ti.maybe_append(self.max_ts, self.max_ts_offset - self.base)
            self.last_entry = p
        self.size = p + len(batch)

    def finish(self, fs: FileSystem) -> None:
        """fsync the cleaned log; write and fsync its indexes (``.cleaned`` too).

        A group cleaned to nothing keeps the old segments' largest timestamp in its time index,
        so time retention (compact,delete) treats it as it would have treated them (Kafka keeps
        the old last-modified time of the files for the same purpose).
        """
        if self.size == 0 and self.old_max_ts > self.max_ts:
            self.max_ts = self.old_max_ts
            self.max_ts_offset = self.base
        self.ti.maybe_append(self.max_ts, self.max_ts_offset - self.base)
        fs.fsync_path(self.prefix + ".log.cleaned")
        fs.write_file(self.prefix + ".index.cleaned", self.oi.to_bytes(), sync=True)
        fs.write_file(self.prefix + ".timeindex.cleaned", self.ti.to_bytes(), sync=True)

    def discard(self, fs: FileSystem) -> None:
        for path in self.cleaned_paths:
            try:
                fs.unlink(path)
            except OSError:
                pass


# --- the checkpoint -------------------------------------------------------------------------------


def read_checkpoint(fs: FileSystem, directory: str) -> int | None:
    """The stored first dirty offset, or None (absent or unreadable: clean from the log start)."""
    data = fs.read_file(os.path.join(directory, CHECKPOINT_FILE))
    if not data:
        return None
    try:
        lines = data.decode("ascii").split()
    except UnicodeDecodeError:
        return None
    if len(lines) >= 2 and lines[0] == _CHECKPOINT_HEADER.split()[0] and lines[1] != _CHECKPOINT_HEADER.split()[1]:
        log.warning("%s is version %s, this broker reads version %s: cleaning from the log start",
                    os.path.join(directory, CHECKPOINT_FILE), lines[1], _CHECKPOINT_HEADER.split()[1])
        return None
    if len(lines) != 3 or " ".join(lines[:2]) != _CHECKPOINT_HEADER or not lines[2].lstrip("-").isdigit():
        return None
    return int(lines[2])


def write_checkpoint(fs: FileSystem, directory: str, offset: int) -> None:
    fs.write_file_atomic(os.path.join(directory, CHECKPOINT_FILE), f"{_CHECKPOINT_HEADER}\n{offset}\n".encode("ascii"))


# --- recovery -------------------------------------------------------------------------------------


def _next_offset_of_file(fs: FileSystem, path: str, base: int) -> int:
    """The offset after the last whole batch of the file (``base`` if it holds none)."""
    fd = fs.open(path, os.O_RDONLY)
    try:
        end = fs.fsize(fd)
        pos = 0
        nxt = base
        while pos < end:
            try:
                _data, batches, pos = read_batches(fs, fd, pos, end, _CHUNK)
            except InvalidRecords:
                break
            nxt = batches[-1][1].next_offset
        return nxt
    finally:
        fs.close(fd)


def recover_swaps(fs: FileSystem, directory: str) -> list[str]:
    """Finish or roll back the swaps a crash interrupted (at load, before segments are listed).

    ``.cleaned`` files, and index ``.swap`` files without their log ``.swap``, are deleted (the
    old segments stand). A log ``.swap`` is complete (fsynced before its rename): every segment
    whose base lies in ``[swap base, swap's next offset)`` is deleted, then the ``.swap`` files
    are renamed. Returns what it did, for the log."""
    done: list[str] = []
    names = [e.name for e in fs.scandir(directory) if not e.is_dir]
    swaps: list[int] = []
    segment_files: dict[int, list[str]] = {}
    for name in names:
        stem, _, ext = name.partition(".")
        if len(stem) != 20 or not stem.isdigit():
            continue
        base = int(stem)
        if ext == "log.swap":
            swaps.append(base)
        elif ext in ("log", "index", "timeindex", "txnindex"):
            segment_files.setdefault(base, []).append(name)
    for name in names:
        stem, _, ext = name.partition(".")
        if not name.endswith((".cleaned", ".swap")) or ext == "log.swap":
            continue
        if ext.endswith(".swap") and stem.isdigit() and int(stem) in swaps:
            continue
        try:
            fs.unlink(os.path.join(directory, name))
            done.append(f"deleted {name}")
        except FileNotFoundError:
            pass
    for base in sorted(swaps):
        prefix = os.path.join(directory, f"{base:020d}")
        nxt = _next_offset_of_file(fs, prefix + ".log.swap", base)
        for old, files in sorted(segment_files.items()):
            if old == base or base <= old < nxt:
                for name in files:
                    try:
                        fs.unlink(os.path.join(directory, name))
                        done.append(f"deleted {name}")
                    except FileNotFoundError:
                        pass
        for suffix in (".index", ".timeindex", ".txnindex", ".log"):
            try:
                fs.rename(prefix + suffix + ".swap", prefix + suffix)
                done.append(f"renamed {os.path.basename(prefix)}{suffix}.swap")
            except FileNotFoundError:
                pass
    if done:
        fs.fsync_dir(directory)
    return done


# --- the pass ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class CleanResult:
    """What one ``PartitionLog.compact`` call did."""

    started: bool = False  # a pass ran (started or resumed)
    pass_complete: bool = False  # it finished: the checkpoint moved to ``checkpoint``
    checkpoint: int | None = None  # the first dirty offset after this call
    dirty_ratio: float = 0.0  # when the pass was chosen
    segments_replaced: int = 0  # old segments swapped out
    segments_written: int = 0  # cleaned segments swapped in
    aborted: str | None = None  # why the pass was abandoned (it restarts from the checkpoint)
    stats: CleanerStats = field(default_factory=CleanerStats)


class CleanerPass:
    """The state of one pass (Kafka's ``doClean``) between ``compact`` calls."""

    def __init__(
        self,
        generation: int,
        info: CleanableInfo,
        dirty: list[Source],
        producers_last: dict[int, int],
        max_map_entries: int,
        *,
        decompress_limit: int = DECOMPRESSED_LIMIT,
        known_bad: dict[tuple[int, int], None] | None = None,
        aborted: AbortedRanges | None = None,
    ) -> None:
        self.generation = generation
        self.aborted = aborted if aborted is not None else AbortedRanges()
        self.markers = MarkerRetention()
        self.info = info
        self.dirty = dirty
        self.producers_last = producers_last
        self.max_map_entries = max_map_entries
        self.map = OffsetMap(decompress_limit, known_bad)
        self.map_idx = 0
        self.map_pos = 0
        self.map_end: int | None = None if dirty else info.first_uncleanable
        self.next_base = -1  # groups start at segments with base >= this
        self.group: GroupWriter | None = None

    def build_map(self, fs: FileSystem, budget: int, stats: CleanerStats) -> int:
        """Map about ``budget`` more bytes of the dirty section; sets ``map_end`` when done."""
        used = 0
        while self.map_end is None and used < budget:
            if self.map_idx >= len(self.dirty):
                self.map_end = self.info.first_uncleanable
                break
            src = self.dirty[self.map_idx]
            if self.map_pos == 0 and self.map_idx > 0 and len(self.map) >= self.max_map_entries:
                self.map_end = src.base  # full: the rest waits for the next pass
                break
            if self.map_pos < src.size:
                fd = fs.open(src.prefix + ".log", os.O_RDONLY)
                try:
                    while self.map_pos < src.size and used < budget:
                        data, batches, nxt = read_batches(fs, fd, self.map_pos, src.size, budget - used)
                        aborted = self.aborted
                        for rel, h in batches:
                            if not (aborted and aborted.holds(h)):
                                self.map.add_batch(data, rel, h)
                        used += nxt - self.map_pos
                        self.map_pos = nxt
                finally:
                    fs.close(fd)
            if self.map_pos >= src.size:
                self.map_idx += 1
                self.map_pos = 0
        stats.bytes_read += used
        return used
