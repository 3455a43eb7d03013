"""The log of one topic-partition: segments of RecordBatch v2 files with sparse indexes.

Modelled on Kafka's ``UnifiedLog``/``LocalLog``/``LogSegment``:

- a directory ``<topic>-<partition>`` holds segments ``<20-digit base offset>.log`` with their
  ``.index`` (relative offset → position, every index.interval.bytes) and ``.timeindex``
  (max timestamp so far → relative offset) (``shoal.storage.segment``);
- appends go to the last (active) segment in one ``pwrite``; it rolls on segment.bytes,
  segment.ms (+ jitter, measured from the first batch's max timestamp, or the creation time),
  a full index, or relative offsets that would overflow 32 bits;
- the active segment's indexes live in memory (``array``) and reach disk at roll and close;
  inactive segments load theirs lazily into a shared LRU;
- after an unclean shutdown, segments from the one holding the recovery point (the offset up to
  which everything was fsynced) are scanned: CRCs and lengths checked, the log truncated at the
  first torn or corrupt batch, indexes rebuilt. A clean start trusts the state checkpoint and
  reads no data (``shoal.storage.loader``).

Durability is Kafka's: nothing is fsynced on append (flush.messages/flush.ms are Long.MAX by
default); a rolled segment is fsynced by the next ``flush`` (``flush_due`` says when), which
moves the recovery point so a later recovery only scans the active segment.

Thread safety: one lock per partition guards the segment list and offsets. Appends, reads and
maintenance (retention, rolls, truncation) take it; ``flush`` takes it only to snapshot and to
publish the new recovery point, and fsyncs through descriptors of its own, so it can run in a
worker thread while the event loop appends. Blocking work never happens under the lock except
file I/O on the page cache (writes, reads, index files at roll).

Deliberate deviations from Kafka:

- ``read`` returns whole batches only (Kafka may end a fetch with a partial batch) and continues
  into the next segment when the first holds nothing at the offset;
- a batch straddling ``max_offset`` is not returned (Kafka's position-based cut behaves the same);
- ``truncate_to`` cuts at the start of the batch holding the offset, and the log end offset then
  is the offset after the last kept batch (Kafka assumes batch-aligned targets);
- ``AppendInfo.offset_of_max_timestamp`` under CreateTime is the last offset of the batch with the
  largest timestamp (records are not decompressed on append);
- the aborted-transaction indexes of the segments a lookup touches stay in memory (Kafka reads
  them through a file channel each time);
- a timestamp lookup whose batch cannot be read (corrupt, or decompressing beyond
  ``decompressed_limit``) answers with that batch's first offset and maxTimestamp (Kafka fails);
- producer snapshots keep all five retained batches per producer (Kafka's keep the last one);
- the index files are written whole at roll/close rather than memory-mapped and preallocated.

Compaction (cleanup.policy=compact): ``compact`` runs a pass of the log cleaner in budgeted steps,
taking the lock only to choose, to pick each group of segments and to swap a cleaned one in (see
``shoal.storage.compaction``). For compacted topics the active segment also rolls by
max.compaction.lag.ms (Kafka's ``maxSegmentMs``).

Idempotent producers (``producer_state``): ``append`` checks a client batch with a producer id
against the partition's producer state under the lock, before any byte is written, and records
it after the write succeeded; a duplicate of one of the producer's last five batches is not
written and comes back as an ``AppendInfo`` with ``duplicate=True`` and the original offsets. A
batch without a producer id costs one field comparison. Snapshots ``<offset>.snapshot`` (the
state below that offset) are written at every roll (at the new segment's base) and at clean
shutdown (at the log end offset), fsynced by the next ``flush``, deleted with their segment.
Opening the log loads the latest snapshot not beyond the log end offset (a torn or corrupt one
is deleted and the previous one tried) and replays the batch headers after it; without any
snapshot it replays from the log start, except after a clean shutdown (a log written before
snapshots existed: it starts empty, as Kafka does on upgrade). Truncation reloads the same way,
so ``truncate_to`` rolls the producer state back to the cut (Kafka's ``truncateTo``).

Transactions: ``append_marker`` appends an end-transaction marker; the last stable offset and the
aborted-transaction indexes a read_committed Fetch needs are ``shoal.storage.transactions``'s.

Leader epochs (KIP-101/279): the log keeps a ``LeaderEpochCache`` equal to a scan of its batch
headers, written to ``leader-epoch-checkpoint`` by ``flush`` (``shoal.storage.leader_epochs``).

Followers (``append_as_follower``): the leader's batches are written as they are, offsets,
timestamps and epochs included, after the framing and CRC check recovery uses; the producer state
and epoch cache learn them, and segments roll batch by batch by the leader's rules, so a
follower's files are byte-identical to its leader's.
"""

from __future__ import annotations

import logging
import os
import threading
import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from shoal.protocol.records import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidRecords,
    ValidatedBatches,
    assign_offsets,
    decompressed_limit,
    is_truncation,
    iter_batch_records,
    read_header,
    scan_batches,
    validate_produce,
)
from shoal.storage.cache import FileHandles, IndexCache
from shoal.storage.cleaner import CleanerPass
from shoal.storage.compaction import LogCompaction
from shoal.storage.config import MAX_LONG, LogConfig
from shoal.storage.epochs import LeaderEpochCache, encode_checkpoint
from shoal.storage.fs import DEFAULT_FS, FileSystem
from shoal.storage.index import OffsetIndex, TimeIndex
from shoal.storage.leader_epochs import LogEpochs
from shoal.storage.loader import LogLoader
from shoal.storage.producer_state import (
    SNAPSHOT_SUFFIX,
    BatchMetadata,
    ProducerStateManager,
    last_sequence,
    snapshot_name,
)
from shoal.storage.segment import (
    INT32_MAX,
    LAST_OFFSET_DELTA,
    LOD_AT,
    PREFIX,
    Segment,
    iter_headers,
    whole_batches,
)
from shoal.storage.regions import FileRegion
from shoal.storage.transactions import LogTransactions
from shoal.storage.txn_index import SUFFIX as TXN_SUFFIX, read_marker

log = logging.getLogger("shoal.storage.log")

_MIN_READ = 16 * 1024


def _next_offset(buf: bytes, stop: int) -> int:
    """The offset after the whole batches that end at ``buf[stop]``: the last one's last offset + 1,
    or, when none is in ``buf`` (it starts at a batch that does not fit), the base offset of the
    batch at ``buf[0]`` (the first after the ones before it; a compacted gap holds no record)."""
    i = 0
    nxt = PREFIX.unpack_from(buf, 0)[0]
    while i < stop:
        b, length = PREFIX.unpack_from(buf, i)
        nxt = b + LAST_OFFSET_DELTA.unpack_from(buf, i + LOD_AT)[0] + 1
        i += length + LOG_OVERHEAD
    return nxt


class OffsetOutOfRange(Exception):
    """The offset is below the log start offset or above the log end offset (or, for
    ``delete_records_before``, above the high watermark)."""

    code = "OFFSET_OUT_OF_RANGE"

    def __init__(self, message: str, *, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class LogClosed(OSError):
    """The partition log was closed (or deleted) under the caller."""


class UnexpectedAppendOffset(ValueError):
    """``append_as_follower`` got batches that do not continue the log: the first one starts
    below the log end offset, or they are not in offset order (Kafka's
    UnexpectedAppendOffsetException / OffsetsOutOfOrderException). The follower must truncate or
    fetch again from its log end offset."""

    def __init__(self, message: str, *, first_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


@dataclass(slots=True)
class AppendInfo:
    base_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    max_timestamp: int
    offset_of_max_timestamp: int
    num_records: int
    log_start_offset: int
    duplicate: bool = False  # an idempotent retry: nothing was written, the offsets are the original's


@dataclass(slots=True)
class ReadInfo:
    records: bytes | FileRegion  # whole batches, possibly empty; a region only if asked (zero copy)
    log_start_offset: int
    high_watermark: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class PartitionState:
    """What the state checkpoint keeps per partition. The last three are only trusted after a
    clean shutdown, to start without reading any data."""

    log_start_offset: int
    high_watermark: int
    recovery_point: int
    log_end_offset: int = -1
    active_base: int = -1
    active_size: int = -1


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``("my.topic-x", 3)`` for ``"my.topic-x-3"``; None if the name is not ``<topic>-<n>``."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit() or (len(part) > 1 and part[0] == "0"):
        return None
    return topic, int(part)


class PartitionLog(LogLoader, LogEpochs, LogCompaction, LogTransactions):
    """The log of one topic-partition. Create with :meth:`open` (or through ``LogManager``)."""

    def __init__(
        self,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        fs: FileSystem,
        handles: FileHandles,
        index_cache: IndexCache,
        now_ms: int,
        on_state_change: Callable[[PartitionLog], None] | None = None,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self._fs = fs
        self._handles = handles
        self._index_cache = index_cache
        self._lock = threading.Lock()
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._leo = 0
        self._log_start = 0
        self._hw = 0
        self._recovery_point = 0
        self._size = 0
        self._last_flush_ms = now_ms
        self._now_ms = now_ms  # latest time seen, for deletions scheduled without a clock
        self._roll_pending = False
        self._dir_dirty = False
        self._pending_deletes: list[tuple[int, list[str]]] = []
        self._generation = 0  # bumped by truncations, so a concurrent flush does not overshoot
        self._closed = False
        self._persisted: tuple[int, int, int, int] | None = None
        self._on_state_change = on_state_change
        self._producers = ProducerStateManager()
        self._snapshots: list[int] = []  # offsets of the snapshot files on disk, ascending
        self._epochs = LeaderEpochCache()
        self._epoch_seq = 0  # bumped at every change of the epoch cache
        self._epoch_written = 0  # the change leader-epoch-checkpoint holds
        self._epoch_synced = 0  # the change it holds fsynced
        self._epoch_file_lock = threading.Lock()  # orders writes of that file
        self._cleaner_checkpoint: int | None = None  # first dirty offset (None: the log start)
        self._pass: CleanerPass | None = None  # a compaction pass between ``compact`` calls
        self._unreadable: dict[tuple[int, int], None] = {}  # (base offset, crc) of batches timestamp lookups cannot read
        self._cleaner_bad: dict[tuple[int, int], None] = {}  # the same, reported by the cleaner
        self._clean_lock = threading.Lock()  # one compaction at a time
        self._ckpt_lock = threading.Lock()  # orders writes of the cleaner checkpoint file
        self._apply_config(config)

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        now_ms: int,
        fs: FileSystem | None = None,
        state: PartitionState | None = None,
        clean_shutdown: bool = False,
        handles: FileHandles | None = None,
        index_cache: IndexCache | None = None,
        on_state_change: Callable[[PartitionLog], None] | None = None,
    ) -> PartitionLog:
        """Open (creating if needed) the partition directory ``<topic>-<partition>``.

        Without a ``state`` (the LogManager's checkpoint) the recovery point is 0, so every
        segment is verified; with ``clean_shutdown`` and a matching state nothing is read.
        """
        directory = os.fspath(directory)
        parsed = parse_partition_dir(os.path.basename(directory.rstrip(os.sep)))
        if parsed is None:
            raise ValueError(f"{directory!r} is not named <topic>-<partition>")
        fs = fs if fs is not None else DEFAULT_FS
        log = cls(
            directory,
            parsed[0],
            parsed[1],
            config or LogConfig(),
            fs=fs,
            handles=handles if handles is not None else FileHandles(fs, 64),
            index_cache=index_cache if index_cache is not None else IndexCache(),
            now_ms=now_ms,
            on_state_change=on_state_change,
        )
        with log._lock:
            log._load(state, clean_shutdown, now_ms)
        return log

    # -- properties ------------------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self._apply_config(config)

    def _apply_config(self, config: LogConfig) -> None:
        self._config = config
        self._lat = config.log_append_time
        # Kafka's LogConfig.maxSegmentMs: a compacted topic's active segment rolls by
        # max.compaction.lag.ms too, so its records become cleanable in time.
        self._segment_ms = config.segment_ms
        if config.compact_enabled and 0 < config.max_compaction_lag_ms < config.segment_ms:
            self._segment_ms = config.max_compaction_lag_ms
        self._interval = config.index_interval_bytes
        self._segment_bytes = config.segment_bytes
        self._max_oi = max(1, config.segment_index_bytes // 8)
        self._max_ti = max(1, config.segment_index_bytes // 12)
        self._max_message_bytes = config.max_message_bytes
        self._decompress_limit = decompressed_limit(config.max_message_bytes)
        before = config.message_timestamp_before_max_ms
        after = config.message_timestamp_after_max_ms
        self._ts_before = None if before >= MAX_LONG else before
        self._ts_after = None if after >= MAX_LONG else after

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._hw = self._clamp(value)
        if self._producers.unreplicated:
            with self._lock:  # forget the completed transactions the HW passed (Kafka's onHighWatermarkUpdated)
                self._producers.first_unstable_offset(self._hw)

    def _clamp(self, value: int) -> int:
        return min(max(value, self._log_start), self._leo)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def closed(self) -> bool:
        return self._closed

    def segment_bases(self) -> list[int]:
        return list(self._bases)

    def state(self) -> PartitionState:
        with self._lock:
            active = self._segments[-1]
            return PartitionState(
                self._log_start, self._hw, self._recovery_point, self._leo, active.base, active.size
            )

    def __repr__(self) -> str:
        return f"PartitionLog({self.topic}-{self.partition}, start={self._log_start}, end={self._leo})"

    # -- append ----------------------------------------------------------------------------------

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        now_ms: int,
        leader_epoch: int = 0,
        validated: ValidatedBatches | None = None,
        client: bool = True,
    ) -> AppendInfo:
        """Validate (unless ``validated`` is given), assign offsets and append in one write.

        A ``bytearray`` is rewritten in place (offsets, leader epoch, LogAppendTime). ``client``
        selects Kafka's client-origin validation, including the idempotent-producer rules for
        the (single) batch of a client; the broker's own appends pass False and their producer
        batches are recorded without validation. A duplicate of one of the producer's last five
        batches is not written: the result has ``duplicate=True`` and the original offsets.
        Raises InvalidRecords, ProducerStateError, or OSError if the write failed (the log and
        the producer state are unchanged then).
        """
        if validated is None:
            check = self._ts_before is not None or self._ts_after is not None
            validated = validate_produce(
                records,
                max_message_bytes=self._max_message_bytes,
                client=client,
                now_ms=now_ms if check else None,
                timestamp_before_max_ms=self._ts_before,
                timestamp_after_max_ms=self._ts_after,
                compact=client and self._config.compact_enabled,
            )
        size = validated.size
        count = validated.record_count
        lat = now_ms if self._lat else None
        msg_ts = now_ms if lat is not None else validated.max_timestamp
        headers = validated.headers
        h0 = headers[0]
        body: memoryview | None = None  # the batch after its header, written as the client sent it
        if type(records) is bytearray:
            buf = records
        elif client and len(headers) == 1 and lat is None and not h0.attributes & ATTR_TIMESTAMP_TYPE:
            # A client's one batch at CreateTime (nearly every Produce): only baseOffset and
            # partitionLeaderEpoch change, outside the CRC, so only the header is copied to be
            # rewritten, not the megabyte behind it
            buf = bytearray(memoryview(records)[:HEADER_SIZE])
            body = memoryview(records)[HEADER_SIZE:size]
        else:
            buf = bytearray(records)
        idempotent = h0.producer_id >= 0 or (len(headers) > 1 and any(h.producer_id >= 0 for h in headers))
        with self._lock:
            if self._closed:
                raise LogClosed(f"{self.topic}-{self.partition} is closed")
            self._now_ms = now_ms
            marker = None
            if idempotent and len(headers) == 1:
                lseq = last_sequence(h0.base_sequence, h0.last_offset_delta)
                txnal = h0.attributes & ATTR_TRANSACTIONAL
                if client:
                    dup = self._producers.check(h0.producer_id, h0.producer_epoch, h0.base_sequence, lseq, txnal)
                    if dup is not None:
                        return self._duplicate_info(dup)
                elif h0.attributes & ATTR_CONTROL:
                    marker = read_marker(buf, h0)
                    if marker is not None:
                        self._producers.check_marker(h0.producer_id, h0.producer_epoch, marker[1])
                elif txnal:
                    self._producers.check_epoch(h0.producer_id, h0.producer_epoch)
            seg = self._segments[-1]
            if not seg.ready:
                self._prepare_active(seg)
            base = self._leo
            last = base + count - 1
            # ``_roll_due`` and ``_write_at`` inlined: the produce hot path (a call each costs ~1%).
            if seg.size and (
                seg.size > self._segment_bytes - size
                or len(seg.oi) >= self._max_oi  # type: ignore[arg-type]
                or len(seg.ti) >= self._max_ti  # type: ignore[arg-type]
                or last - seg.base > INT32_MAX
                or self._time_to_roll(seg, msg_ts, now_ms)
            ):
                seg = self._roll(now_ms)
            positions = validated.positions
            assign_offsets(buf, positions, base, log_append_time_ms=lat, partition_leader_epoch=leader_epoch)
            pos = seg.size
            fd = seg.fd
            if fd < 0 or not seg.fd_writable:
                fd = self._handles.get(seg, writable=True)
            else:
                self._handles.touch(seg)
            try:
                if body is None:
                    self._fs.pwrite_all(fd, buf, pos)
                else:
                    self._fs.pwritev_all(fd, (buf, body), pos)
            except OSError:
                try:
                    self._fs.ftruncate(fd, pos)
                except OSError:
                    pass
                raise
            oi = seg.oi
            ti = seg.ti
            if len(positions) == 1:  # ``_track_batch`` inlined: the produce hot path
                bmax = msg_ts
                if bmax > seg.max_ts:  # type: ignore[operator]
                    seg.max_ts = bmax
                    seg.max_ts_offset = last
                if seg.bytes_since_index > self._interval:
                    oi.append(last - seg.base, pos)  # type: ignore[union-attr]
                    ti.maybe_append(seg.max_ts, seg.max_ts_offset - seg.base)  # type: ignore[union-attr,arg-type]
                    seg.bytes_since_index = 0
                seg.bytes_since_index += size
                offset_of_max = base if lat is not None else last
            else:
                offset_of_max = base
                offset = base
                for i, (p, h) in enumerate(zip(positions, validated.headers)):
                    blast = offset + h.last_offset_delta
                    seg.track_batch(blast, pos + p, h.size, lat if lat is not None else h.max_timestamp, self._interval)
                    if lat is None and i == validated.max_timestamp_index:
                        offset_of_max = blast
                    offset = blast + 1
            if pos == 0:
                seg.rolling_ts = msg_ts
            seg.size = pos + size
            self._size += size
            self._leo = last + 1
            if leader_epoch > self._epochs.latest_epoch:
                self._assign_epoch(leader_epoch, base)
            log_start = self._log_start
            if idempotent:
                if len(headers) == 1:
                    if not h0.attributes & ATTR_CONTROL:
                        self._producers.update(
                            h0.producer_id, h0.producer_epoch, h0.base_sequence, lseq, base, last, msg_ts, txnal
                        )
                    elif marker is not None:
                        self._complete_txn(
                            seg,
                            self._producers.complete_txn(
                                h0.producer_id, h0.producer_epoch, marker[1], marker[0], base, msg_ts
                            ),
                        )
                else:
                    self._record_producers(headers, base, lat, buf, positions, seg)
        return AppendInfo(
            base,
            last,
            lat if lat is not None else -1,
            msg_ts,
            offset_of_max,
            count,
            log_start,
        )

    def _duplicate_info(self, dup: BatchMetadata) -> AppendInfo:
        # Kafka answers a duplicate with the original offsets and its timestamp as the log append time.
        return AppendInfo(
            dup.first_offset,
            dup.last_offset,
            dup.timestamp,
            dup.timestamp,
            dup.last_offset,
            dup.last_offset - dup.first_offset + 1,
            self._log_start,
            True,
        )

    def append_as_follower(self, data: bytes | bytearray | memoryview, *, now_ms: int | None = None) -> AppendInfo:
        """Append batches copied from the leader (a Fetch response's records), byte for byte.

        Kafka's ``appendAsFollower``: each whole batch's framing and CRC are verified (the check
        recovery uses; records are not walked, the CRC covers them and the leader validated them;
        max.message.bytes does not apply, the leader's may differ); offsets, timestamps and
        partitionLeaderEpoch stay as the leader wrote them. A partial batch at the end of ``data``
        (a Fetch response may cut the last one) is ignored; when nothing whole is left the result
        has ``num_records == 0`` and nothing changes. The first batch may not start below the log
        end offset, nor a batch at or below the previous one's last offset: UnexpectedAppendOffset
        (nothing is written). A first batch above the log end offset is accepted (a compacted
        leader's log has gaps). The producer state records each producer batch (without the
        client rules), the epoch cache each new larger epoch; segments roll batch by batch by
        the leader's rules, so a follower's segments hold the same bytes as the leader's.
        Raises InvalidRecords (corrupt bytes, nothing written) or OSError (the log then ends at
        the last run of batches written whole).
        """
        batches, _end, problem = scan_batches(data, 0, verify_crc=True)
        if problem is not None and not is_truncation(problem):
            raise problem
        with self._lock:
            self._check_open()
            if now_ms is None:
                now_ms = self._now_ms
            else:
                self._now_ms = now_ms
            leo = self._leo
            if not batches:
                return AppendInfo(leo, leo - 1, -1, -1, -1, 0, self._log_start)
            prev = leo - 1
            for _p, h in batches:
                if h.base_offset <= prev:
                    first = batches[0][1].base_offset
                    raise UnexpectedAppendOffset(
                        f"{self}: batch at offset {h.base_offset} does not follow offset {prev} "
                        f"(first batch {first}, log end offset {leo})",
                        first_offset=first,
                        log_end_offset=leo,
                    )
                prev = h.last_offset
            mv = memoryview(data)
            seg = self._segments[-1]
            if not seg.ready:
                self._prepare_active(seg)
            run: list[BatchHeader] = []  # batches placed in ``seg`` from data[run_from:] on, not yet written
            run_from = run_pos = 0
            max_ts = -1
            offset_of_max = batches[0][1].base_offset
            count = 0
            for p, h in batches:
                size = h.batch_length + LOG_OVERHEAD
                last = h.last_offset
                bmax = h.max_timestamp
                if seg.size and self._roll_due(seg, size, last, bmax, now_ms):
                    if run:
                        self._write_follower_run(seg, mv[run_from:p], run_pos, run)
                        run = []
                    seg = self._roll(now_ms)
                if not run:
                    run_from, run_pos = p, seg.size
                run.append(h)
                seg.track_batch(last, seg.size, size, bmax, self._interval)
                if seg.size == 0:
                    seg.rolling_ts = bmax
                seg.size += size
                if bmax > max_ts:
                    max_ts = bmax
                    offset_of_max = last
                count += h.records_count
            end = batches[-1][0] + batches[-1][1].batch_length + LOG_OVERHEAD
            self._write_follower_run(seg, mv[run_from:end], run_pos, run)
            return AppendInfo(
                batches[0][1].base_offset, prev, -1, max_ts, offset_of_max, count, self._log_start
            )

    def _write_follower_run(self, seg: Segment, data: memoryview, pos: int, run: list[BatchHeader]) -> None:
        """Write batches ``append_as_follower`` placed in ``seg`` (its size and indexes already
        count them) at ``pos``, then move the log end offset and record their producers and epochs
        (under the lock). A failed write cuts the file back and rebuilds the segment's state."""
        try:
            self._write_at(seg, data, pos)
        except OSError:
            try:
                scan = seg.scan(self._fs, self._interval, truncate=True, min_offset=seg.base)
                seg.adopt(scan)
                seg.size = scan.valid_bytes
            except OSError:
                pass
            raise
        self._size += len(data)
        self._leo = run[-1].last_offset + 1
        epochs = self._epochs
        replay = self._producers.replay
        rel = 0
        for h in run:
            if h.partition_leader_epoch > epochs.latest_epoch:
                self._assign_epoch(h.partition_leader_epoch, h.base_offset)
            if h.attributes & ATTR_CONTROL and h.producer_id >= 0:
                self._complete_txn(seg, replay(h, read_marker(data, h, rel)))
            else:
                replay(h)
            rel += h.batch_length + LOG_OVERHEAD

    def _write_at(self, seg: Segment, data: bytes | bytearray | memoryview, pos: int) -> None:
        """Write ``data`` at ``pos`` of the segment's file in one call; on failure cut the file
        back to ``pos`` (as far as the disk lets us) and raise."""
        fd = seg.fd
        if fd < 0 or not seg.fd_writable:
            fd = self._handles.get(seg, writable=True)
        else:
            self._handles.touch(seg)
        try:
            self._fs.pwrite_all(fd, data, pos)
        except OSError:
            try:
                self._fs.ftruncate(fd, pos)
            except OSError:
                pass
            raise

    def _roll_due(self, seg: Segment, size: int, last: int, msg_ts: int, now_ms: int) -> bool:
        """Whether ``size`` more bytes up to offset ``last`` (max timestamp ``msg_ts``) must go to a
        new segment: segment.bytes, a full index, 32-bit relative offsets, segment.ms."""
        return (
            seg.size > self._segment_bytes - size
            or len(seg.oi) >= self._max_oi  # type: ignore[arg-type]
            or len(seg.ti) >= self._max_ti  # type: ignore[arg-type]
            or last - seg.base > INT32_MAX
            or self._time_to_roll(seg, msg_ts, now_ms)
        )

    def _time_to_roll(self, seg: Segment, msg_ts: int, now_ms: int) -> bool:
        rts = seg.rolling_ts
        waited = msg_ts - rts if rts is not None and rts >= 0 else now_ms - seg.created_ms
        return waited > self._segment_ms - seg.jitter_ms

    def _new_segment(self, base: int, now_ms: int) -> Segment:
        jitter = 0
        cfg = self._config
        if cfg.segment_jitter_ms > 0:
            # Kafka draws a random jitter per segment; a hash spreads rolls as well, reproducibly.
            key = f"{self.topic}-{self.partition}-{base}".encode()
            jitter = zlib.crc32(key) % min(cfg.segment_jitter_ms, max(cfg.segment_ms, 1))
        return Segment(self.directory, base, 0, self._lock, now_ms, jitter)

    def _prepare_active(self, seg: Segment) -> None:
        """Pin the active segment's indexes and learn what appends need (under the lock)."""
        oi, ti = self._ensure_indexes(seg)
        self._index_cache.forget(seg)  # pinned from now on
        seg.oi = oi
        seg.ti = ti
        if seg.rolling_ts is None:
            seg.rolling_ts = self._first_batch_max_ts(seg)
        seg.ready = True

    def _first_batch_max_ts(self, seg: Segment) -> int:
        if seg.size < HEADER_SIZE:
            return -1
        fd = self._handles.get(seg)
        data = self._fs.pread(fd, HEADER_SIZE, 0)
        if len(data) < HEADER_SIZE:
            return -1
        return read_header(data).max_timestamp

    def _roll(self, now_ms: int, *, persist_old: bool = True) -> Segment:
        """Start a new active segment at the log end offset (under the lock)."""
        old = self._segments[-1]
        if old.size == 0:
            return old
        if persist_old:
            if not old.ready:
                self._prepare_active(old)
            if old.max_ts is not None and old.max_ts >= 0:
                old.ti.maybe_append(old.max_ts, old.max_ts_offset - old.base)  # type: ignore[union-attr]
            old.write_indexes(self._fs)
        base = self._leo
        new = self._new_segment(base, now_ms)
        fd = self._fs.open(new.prefix + ".log", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        new.make_ready_empty()
        self._handles.adopt(new, fd, writable=True)
        old.ready = False
        if old.oi is not None and old.ti is not None:
            self._index_cache.add(old, old.oi.nbytes() + old.ti.nbytes())
        self._segments.append(new)
        self._bases.append(base)
        self._roll_pending = True
        self._dir_dirty = True
        try:
            self._take_snapshot(base)
        except OSError:
            pass  # no snapshot here only means a longer replay at the next load
        return new

    def roll(self, now_ms: int) -> None:
        """Roll now (if the active segment holds anything)."""
        with self._lock:
            self._check_open()
            self._roll(now_ms)

    def roll_if_due(self, now_ms: int) -> bool:
        """Roll by segment.ms when no append came to do it."""
        with self._lock:
            if self._closed:
                return False
            self._now_ms = max(self._now_ms, now_ms)
            seg = self._segments[-1]
            if seg.size == 0:
                return False
            if seg.rolling_ts is None:
                seg.rolling_ts = self._first_batch_max_ts(seg)
            if self._time_to_roll(seg, now_ms, now_ms):
                self._roll(now_ms)
                return True
            return False

    # -- indexes ---------------------------------------------------------------------------------

    def _next_offset_of(self, seg: Segment) -> int:
        i = bisect_right(self._bases, seg.base)
        return self._bases[i] if i < len(self._bases) else self._leo

    def _ensure_indexes(self, seg: Segment) -> tuple[OffsetIndex, TimeIndex]:
        """The segment's indexes, loaded from disk or rebuilt from the log (under the lock)."""
        oi = seg.oi
        ti = seg.ti
        if oi is not None and ti is not None:
            if not seg.ready:
                self._index_cache.touch(seg)
            return oi, ti
        max_rel = self._next_offset_of(seg) - 1 - seg.base
        oi_data = self._fs.read_file(seg.prefix + ".index")
        ti_data = self._fs.read_file(seg.prefix + ".timeindex")
        loaded = None
        if oi_data is not None and ti_data is not None:
            try:
                oi = OffsetIndex.from_bytes(oi_data)
                ti = TimeIndex.from_bytes(ti_data)
            except ValueError:
                pass
            else:
                if oi.is_sane(seg.size, max_rel) and ti.is_sane(max_rel):
                    loaded = (oi, ti)
        if loaded is None:
            scan = seg.scan(self._fs, self._interval, truncate=False, min_offset=seg.base)
            seg.adopt(scan)
            if not seg.ready:
                seg.write_indexes(self._fs)
            oi, ti = scan.oi, scan.ti
        else:
            oi, ti = loaded
            if seg.max_ts is None:
                last = ti.last()
                seg.max_ts = last[0] if last else -1
                seg.max_ts_offset = seg.base + last[1] if last else seg.base
        seg.oi = oi
        seg.ti = ti
        if not seg.ready:
            self._index_cache.add(seg, oi.nbytes() + ti.nbytes())
        return oi, ti

    def _segment_max_ts(self, seg: Segment) -> int:
        """Largest timestamp in the segment (-1 if none), from memory or the time index's tail."""
        if seg.max_ts is not None:
            return seg.max_ts
        entry = seg.read_last_time_entry(self._fs, self._next_offset_of(seg) - 1 - seg.base)
        if entry is not None:
            seg.max_ts, rel = entry
            seg.max_ts_offset = seg.base + rel
            return seg.max_ts
        self._ensure_indexes(seg)
        return seg.max_ts if seg.max_ts is not None else -1

    def _largest_timestamp(self, seg: Segment) -> int:
        """Kafka's ``LogSegment.largestTimestamp``: the max timestamp, else the file's mtime."""
        ts = self._segment_max_ts(seg)
        if ts > 0:
            return ts
        try:
            return self._fs.mtime_ms(seg.prefix + ".log")
        except FileNotFoundError:
            return 0

    # -- read ------------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        regions: bool = False,
    ) -> ReadInfo:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` (but the first
        whole if ``min_one_batch``), none reaching ``max_offset`` (exclusive, e.g. the high
        watermark). Empty at the log end offset; OffsetOutOfRange outside [start, end].

        With ``regions`` a long read (one that does not fit the first small read) is answered
        with a ``FileRegion`` of the segment instead of its bytes, for the connection to send
        with ``sendfile`` (zero-copy Fetch, ``shoal.storage.regions``); the caller closes it."""
        with self._lock:
            leo = self._leo
            start = self._log_start
            if offset < start or offset > leo:
                raise OffsetOutOfRange(
                    f"offset {offset} is outside [{start}, {leo}] of {self.topic}-{self.partition}",
                    offset=offset,
                    log_start_offset=start,
                    log_end_offset=leo,
                )
            limit = leo if max_offset is None or max_offset > leo else max_offset
            data = b""
            if offset < limit:
                if self._closed:
                    raise LogClosed(f"{self.topic}-{self.partition} is closed")
                segs = self._segments
                i = max(0, bisect_right(self._bases, offset) - 1)
                while i < len(segs):
                    got = self._read_segment(segs[i], offset, max_bytes, limit, min_one_batch, regions)
                    if got is not None:
                        data = got
                        break
                    i += 1
            return ReadInfo(data, start, self._hw, leo)

    def _read_segment(self, seg: Segment, offset: int, max_bytes: int, limit: int, min_one: bool,
                      regions: bool = False) -> bytes | FileRegion | None:
        """Bytes to return from ``seg`` (possibly empty), or None if it holds nothing at ``offset``.

        A small read finds the batch holding ``offset`` (from the offset index's position). If
        the answer fits in that read it is sliced from it; otherwise the offset index gives the
        start of a batch near the end of the range, only the batches after it are walked to find
        the last whole one, and the range is read exactly, with no copy; or, with ``regions``, not
        read at all: a region of the file over a descriptor of its own is returned instead.
        """
        end = seg.size
        if end == 0:
            return None
        fd = seg.fd
        if fd < 0:
            fd = self._handles.get(seg)
        else:
            self._handles.touch(seg)
        oi = seg.oi
        if oi is None:
            oi = self._ensure_indexes(seg)[0]
        elif not seg.ready:
            self._index_cache.touch(seg)
        base = seg.base
        pos = oi.lookup(offset - base)
        pread = self._fs.pread
        budget = max_bytes if max_bytes > 0 else 0
        span = min(end - pos, min(budget, _MIN_READ) + self._interval + 2 * HEADER_SIZE)
        buf = pread(fd, span, pos)
        cstart = pos
        n = len(buf)
        rel = 0
        # Find the first batch whose last offset reaches ``offset``.
        while True:
            if rel + HEADER_SIZE > n:
                here = cstart + rel
                if here + HEADER_SIZE > end:
                    return None
                buf = pread(fd, min(end - here, span), here)
                cstart = here
                rel = 0
                n = len(buf)
                if n < HEADER_SIZE:
                    return None
            b, length = PREFIX.unpack_from(buf, rel)
            if length < HEADER_SIZE - LOG_OVERHEAD:
                return None  # garbage: nothing readable past here
            last = b + LAST_OFFSET_DELTA.unpack_from(buf, rel + LOD_AT)[0]
            if last >= offset:
                break
            rel += length + LOG_OVERHEAD
        if last >= limit:
            return b""
        first_size = length + LOG_OVERHEAD
        if first_size > budget:
            if not min_one:
                return b""
            budget = first_size
        start = cstart + rel
        stop_at = min(start + budget, end)
        if stop_at <= cstart + n:
            stop = whole_batches(buf, rel, stop_at - cstart, limit)
            return buf if rel == 0 and stop == n else buf[rel:stop]
        # A long read: skip to the last indexed batch that is inside the range and below limit.
        i = min(bisect_right(oi.pos, stop_at), bisect_left(oi.rel, limit - base)) - 1
        q = oi.pos[i] if i >= 0 else 0
        if q <= start:
            data = pread(fd, stop_at - start, start)
            stop = whole_batches(data, 0, len(data), limit)
            return data if stop == len(data) else data[:stop]
        tail = pread(fd, stop_at - q, q)
        stop = q + whole_batches(tail, 0, len(tail), limit)
        if regions and len(tail) >= LOG_OVERHEAD:
            region = FileRegion.take(fd, start, stop - start, _next_offset(tail, stop - q))
            if region is not None:
                return region
        return pread(fd, stop - start, start)

    # -- timestamps ------------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp >= ``timestamp`` at or
        after the log start offset (ListOffsets by time), or None.

        Kafka's ``LogSegment.findOffsetByTimestamp``: the time index, then the first batch whose
        maxTimestamp reaches the target, then its records. The lock is held only to find and read
        that batch; its records (decompressed, bounded by max.message.bytes, see
        :func:`decompressed_limit`) are searched without it. Blocking: call it in a worker thread.
        A batch that cannot be read answers with its own first offset and maxTimestamp (an offset
        at or before the exact answer, so a consumer starting there misses nothing).
        """
        after = -1
        while True:
            with self._lock:
                self._check_open()
                found = self._timestamp_candidate(timestamp, after)
            if found is None:
                return None
            data, h, log_start = found
            if h.timestamp_type == 1:  # LogAppendTime: every record has the batch's maxTimestamp
                return max(h.base_offset, log_start), h.max_timestamp
            for offset, ts in self._record_timestamps(data, h, max(h.base_offset, log_start)):
                if ts >= timestamp and offset >= log_start:
                    return offset, ts
            after = h.last_offset

    def _timestamp_candidate(self, timestamp: int, after: int) -> tuple[bytes, BatchHeader, int] | None:
        """The bytes of the first batch past offset ``after`` that may hold ``timestamp`` (lock held)."""
        log_start = self._log_start
        segs = self._segments
        for i, seg in enumerate(segs):
            if seg.size == 0 or self._segment_max_ts(seg) < timestamp:
                continue
            if i + 1 < len(segs) and segs[i + 1].base <= after + 1:
                continue
            oi, ti = self._ensure_indexes(seg)
            start_offset = max(seg.base + ti.lookup(timestamp), log_start, after + 1)
            fd = self._handles.get(seg)
            pos = oi.lookup(max(start_offset - seg.base, 0))
            for p, h in iter_headers(self._fs, fd, pos, seg.size):
                if h.max_timestamp < timestamp or h.last_offset < log_start or h.last_offset <= after:
                    continue
                return self._fs.pread(fd, h.size, p), h, log_start
        return None

    def _record_timestamps(self, data: bytes, h: BatchHeader, fallback: int) -> Iterator[tuple[int, int]]:
        """``(offset, timestamp)`` of each record of the batch ``data``; a batch that cannot be
        decompressed within the bound, or is malformed, yields ``(fallback, maxTimestamp)`` only
        (reported once per batch)."""
        key = (h.base_offset, h.crc)
        if key not in self._unreadable:
            try:
                for r in iter_batch_records(data, 0, h, limit=self._decompress_limit):
                    yield r.offset, r.timestamp
                return
            except InvalidRecords as e:
                if len(self._unreadable) < 1024:
                    self._unreadable[key] = None
                log.warning(
                    "%s: cannot read the records of the batch at offsets %d-%d (%s); timestamp lookups "
                    "answer with its first offset", self, h.base_offset, h.last_offset, e,
                )
        yield fallback, h.max_timestamp

    def latest_timestamp(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with the largest timestamp (ListOffsets
        MAX_TIMESTAMP), or None for an empty log. Like :meth:`offset_for_timestamp`, the records
        are searched outside the lock: call it in a worker thread."""
        with self._lock:
            self._check_open()
            best: Segment | None = None
            best_ts = -1
            for seg in self._segments:
                if seg.size == 0:
                    continue
                ts = self._segment_max_ts(seg)
                if best is None or ts > best_ts:
                    best, best_ts = seg, ts
            if best is None:
                return None
            oi, _ti = self._ensure_indexes(best)
            fd = self._handles.get(best)
            pos = oi.lookup(best.max_ts_offset - best.base)
            for p, h in iter_headers(self._fs, fd, pos, best.size):
                if h.max_timestamp == best_ts:
                    break
            else:
                return None
            if h.timestamp_type == 1:
                return h.base_offset, best_ts
            data = self._fs.pread(fd, h.size, p)
        for offset, ts in self._record_timestamps(data, h, h.base_offset):
            if ts == best_ts:
                return offset, best_ts
        return h.last_offset, best_ts

    # -- deletion --------------------------------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (DeleteRecords) and drop the segments wholly
        below it; returns the new log start offset. OffsetOutOfRange above the high watermark."""
        changed = False
        with self._lock:
            self._check_open()
            if offset > self._hw or offset < 0:
                raise OffsetOutOfRange(
                    f"offset {offset} is above the high watermark {self._hw} of {self.topic}-{self.partition}",
                    offset=offset,
                    log_start_offset=self._log_start,
                    log_end_offset=self._leo,
                )
            if offset > self._log_start:
                self._log_start = offset
                self._delete_segments(lambda seg, nxt: nxt is not None and nxt.base <= offset, self._now_ms)
                if self._epochs.truncate_from_start(offset):
                    self._epoch_seq += 1
                changed = True
            result = self._log_start
        if changed and self._on_state_change is not None:
            self._on_state_change(self)
        return result

    def apply_retention(self, now_ms: int) -> int:
        """Delete segments past retention.ms (by their largest timestamp) or beyond
        retention.bytes, and those below the log start offset; returns how many went.

        As in Kafka, only segments wholly below the high watermark go, and when every segment
        qualifies the active one is rolled first so the log keeps an (empty) active segment.
        """
        with self._lock:
            if self._closed:
                return 0
            self._now_ms = max(self._now_ms, now_ms)
            cfg = self._config
            deleted = 0
            if cfg.delete_enabled:
                if cfg.retention_ms >= 0:
                    retention_ms = cfg.retention_ms
                    deleted += self._delete_segments(
                        lambda seg, nxt: now_ms - self._largest_timestamp(seg) > retention_ms, now_ms
                    )
                if cfg.retention_bytes >= 0 and self._size >= cfg.retention_bytes:
                    diff = self._size - cfg.retention_bytes

                    def over_size(seg: Segment, nxt: Segment | None) -> bool:
                        nonlocal diff
                        if diff - seg.size >= 0:
                            diff -= seg.size
                            return True
                        return False

                    deleted += self._delete_segments(over_size, now_ms)
            deleted += self._delete_segments(lambda seg, nxt: nxt is not None and nxt.base <= self._log_start, now_ms)
        if deleted and self._on_state_change is not None:
            self._on_state_change(self)
        return deleted

    def _delete_segments(self, should_delete: Callable[[Segment, Segment | None], bool], now_ms: int) -> int:
        """Kafka's ``deletableSegments`` + ``deleteSegments`` (under the lock)."""
        segs = self._segments
        hw = self._hw
        k = 0
        while k < len(segs):
            seg = segs[k]
            nxt = segs[k + 1] if k + 1 < len(segs) else None
            upper = nxt.base if nxt is not None else self._leo
            if nxt is None and seg.size == 0:
                break
            if hw >= upper and should_delete(seg, nxt):
                k += 1
            else:
                break
        if k == 0:
            return 0
        if k == len(segs):
            self._roll(now_ms, persist_old=False)
        doomed = segs[:k]
        del segs[:k]
        del self._bases[:k]
        for seg in doomed:
            self._size -= seg.size
            self._retire_segment(seg, now_ms)
        self._log_start = max(self._log_start, segs[0].base)
        self._recovery_point = max(self._recovery_point, segs[0].base)
        self._hw = self._clamp(self._hw)
        if self._epochs.truncate_from_start(self._log_start):
            self._epoch_seq += 1
        return k

    def _retire_segment(self, seg: Segment, now_ms: int, *, keep_snapshot: bool = False) -> None:
        """Close and rename a removed segment's files to ``.deleted``; unlink them after
        file.delete.delay.ms (``purge_deleted_files``). ``keep_snapshot`` leaves the producer
        snapshot at its base (a cleaned segment with the same base replaces it)."""
        self._handles.release(seg)
        self._index_cache.forget(seg)
        seg.oi = seg.ti = None
        seg.txn = None
        renamed = []
        suffixes: tuple[str, ...] = (".log", ".index", ".timeindex", TXN_SUFFIX)
        if not keep_snapshot:
            suffixes += (SNAPSHOT_SUFFIX,)
            i = bisect_left(self._snapshots, seg.base)
            if i < len(self._snapshots) and self._snapshots[i] == seg.base:
                del self._snapshots[i]
        for suffix in suffixes:
            path = seg.prefix + suffix
            try:
                self._fs.rename(path, path + ".deleted")
            except FileNotFoundError:
                continue
            renamed.append(path + ".deleted")
        if renamed:
            self._pending_deletes.append((now_ms + self._config.file_delete_delay_ms, renamed))

    def purge_deleted_files(self, now_ms: int, *, force: bool = False) -> int:
        """Unlink retired segment files whose delay has passed; returns how many."""
        if not self._pending_deletes:
            return 0
        with self._lock:
            due = [paths for t, paths in self._pending_deletes if force or t <= now_ms]
            self._pending_deletes = [(t, p) for t, p in self._pending_deletes if not (force or t <= now_ms)]
        n = 0
        for paths in due:
            for path in paths:
                if self._unlink_quietly(path):
                    n += 1
        return n

    def _unlink_quietly(self, path: str) -> bool:
        try:
            self._fs.unlink(path)
        except FileNotFoundError:
            return False
        return True

    # -- truncation ------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch from the one holding ``offset`` on (replication's truncation)."""
        with self._lock:
            self._check_open()
            if offset >= self._leo:
                # Nothing to cut, but an epoch entry may start at the log end: a leader that
                # took an epoch (``assign_epoch_start_offset``) and wrote nothing in it before
                # another was elected. Kafka's ``truncateTo`` trims the cache here too; without
                # it the follower keeps sending that empty epoch as ``last_fetched_epoch``, the
                # leader keeps answering it diverges, and the follower never fetches again.
                if self._epochs.truncate_from_end(self._leo):
                    self._epoch_seq += 1
                return
            if offset < self._segments[0].base or offset < self._log_start:
                self._truncate_fully(offset)
                return
            segs = self._segments
            k = bisect_right(self._bases, offset)
            for seg in segs[k:]:
                self._size -= seg.size
                self._retire_segment(seg, self._now_ms)
            del segs[k:]
            del self._bases[k:]
            seg = segs[-1]
            cut = self._position_of(seg, offset)
            fd = self._handles.get(seg, writable=True)
            self._fs.ftruncate(fd, cut)
            self._index_cache.forget(seg)
            scan = seg.scan(self._fs, self._interval, truncate=True, min_offset=seg.base)
            self._size += scan.valid_bytes - seg.size
            seg.size = scan.valid_bytes
            seg.adopt(scan)
            seg.ready = True
            self._leo = scan.next_offset if seg.size else seg.base
            self._txn_of(seg).truncate_to(self._fs, self._leo)
            self._after_truncation()
            self._load_producer_state(False)
            if self._epochs.truncate_from_end(self._leo):
                self._epoch_seq += 1

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log, empty, at ``offset``."""
        with self._lock:
            self._check_open()
            self._truncate_fully(offset)

    def _truncate_fully(self, offset: int) -> None:
        for seg in self._segments:
            self._retire_segment(seg, self._now_ms)
        seg = self._new_segment(offset, self._now_ms)
        fd = self._fs.open(seg.prefix + ".log", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        seg.make_ready_empty()
        self._handles.adopt(seg, fd, writable=True)
        self._segments = [seg]
        self._bases = [offset]
        self._size = 0
        self._leo = offset
        self._log_start = offset
        self._dir_dirty = True
        self._after_truncation()
        self._recovery_point = offset
        self._delete_snapshots_above(-1)
        self._producers = ProducerStateManager()
        # Kafka's clearAndFlush: written at once, so no stale entry below ``offset`` survives a crash.
        self._epochs.clear()
        self._epoch_seq += 1
        self._write_epoch_checkpoint(self._epoch_seq, encode_checkpoint(()))

    def _after_truncation(self) -> None:
        self._generation += 1
        self._log_start = min(self._log_start, self._leo)
        self._recovery_point = min(self._recovery_point, self._leo)
        self._hw = self._clamp(self._hw)
        self._compaction_truncated()

    def _position_of(self, seg: Segment, offset: int) -> int:
        """Position of the first batch in ``seg`` whose last offset reaches ``offset``, else its size."""
        oi, _ti = self._ensure_indexes(seg)
        fd = self._handles.get(seg)
        for p, h in iter_headers(self._fs, fd, oi.lookup(offset - seg.base), seg.size):
            if h.last_offset >= offset:
                return p
        return seg.size

    # -- flush -----------------------------------------------------------------------------------

    def flush_due(self, now_ms: int) -> bool:
        """Whether flush.messages, flush.ms or a rolled segment call for ``flush``."""
        if self._closed:
            return False
        if self._roll_pending:
            return True
        unflushed = self._leo - self._recovery_point
        if unflushed <= 0:
            return False
        cfg = self._config
        return unflushed >= cfg.flush_messages or now_ms - self._last_flush_ms >= cfg.flush_ms

    def maybe_flush(self, now_ms: int) -> bool:
        """``flush`` if due; blocking, so run it in a thread. True if it flushed."""
        if not self.flush_due(now_ms):
            return False
        self.flush(now_ms)
        return True

    def flush(self, now_ms: int | None = None) -> None:
        """fsync the segments (and their indexes) that may hold data past the recovery point,
        then move the recovery point to the log end offset seen at the start. Blocking: callers
        run it in a thread; appends may go on meanwhile."""
        with self._lock:
            if self._closed:
                return
            self._rewrite_dirty_txn_indexes()
            segs = list(self._segments)
            target = self._leo
            rp = self._recovery_point
            snapshots = [off for off in self._snapshots if off > rp]
            generation = self._generation
            dir_dirty = self._dir_dirty
            self._dir_dirty = False
            self._roll_pending = False
            epochs = self._epoch_snapshot()
        fs = self._fs
        try:
            if epochs is not None:
                self._write_epoch_checkpoint(*epochs)
            for i, seg in enumerate(segs):
                upper = segs[i + 1].base if i + 1 < len(segs) else None
                if upper is not None and upper <= rp:
                    continue
                fs.fsync_path(seg.prefix + ".log")
                fs.fsync_path(seg.prefix + ".index")
                fs.fsync_path(seg.prefix + ".timeindex")
                fs.fsync_path(seg.prefix + TXN_SUFFIX)
            for off in snapshots:
                fs.fsync_path(os.path.join(self.directory, snapshot_name(off)))
            if dir_dirty:
                fs.fsync_dir(self.directory)
        except BaseException:
            with self._lock:
                self._dir_dirty = self._dir_dirty or dir_dirty
                self._roll_pending = True
            raise
        with self._lock:
            if generation == self._generation and target > self._recovery_point:
                self._recovery_point = target
            if now_ms is not None:
                self._last_flush_ms = now_ms

    # -- closing ---------------------------------------------------------------------------------

    def persist_indexes(self) -> None:
        """Write the active segment's indexes, with the final time index entry a closed segment
        has, so the next clean start need not rebuild them, a producer snapshot at the log
        end offset (if it moved since the last one) so it need not replay batches, and the
        leader-epoch checkpoint (if it changed). Nothing is fsynced: the caller syncs."""
        with self._lock:
            if not self._closed:
                self._persist_active_indexes()
                self._rewrite_dirty_txn_indexes()
                self._snapshot_at_end()
                self._write_epochs_unsynced()

    def _persist_active_indexes(self) -> None:
        active = self._segments[-1]
        if not active.ready or active.oi is None or active.ti is None:
            return
        if self._persisted == (active.base, active.size, len(active.oi), len(active.ti)):
            return
        if active.max_ts is not None and active.max_ts >= 0:
            active.ti.maybe_append(active.max_ts, active.max_ts_offset - active.base)
        active.write_indexes(self._fs)
        self._persisted = (active.base, active.size, len(active.oi), len(active.ti))

    def close(self, *, flush: bool = True, synced: bool = False) -> None:
        """Persist the active segment's indexes, fsync (unless ``flush=False``), close files.

        ``synced`` tells that the caller synced the whole file system after ``persist_indexes``
        (``LogManager.close`` does one ``sync`` for all its logs instead of an fsync per file),
        so the recovery point moves to the log end offset.
        """
        with self._lock:
            if self._closed:
                return
            try:
                self._persist_active_indexes()
                if flush or synced:
                    self._snapshot_at_end()
                if synced:
                    self._write_epochs_unsynced()
            except OSError:
                if flush or synced:
                    raise
        if flush:
            self.flush()
        with self._lock:
            if synced:
                self._recovery_point = self._leo
            self._closed = True
            p = self._pass
            self._pass = None
        self._discard_idle_pass(p)
        with self._lock:
            for seg in self._segments:
                self._handles.release(seg)
                self._index_cache.forget(seg)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosed(f"{self.topic}-{self.partition} is closed")
