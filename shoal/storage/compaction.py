"""Compaction's side of the partition log: the hooks through which the log cleaner
(``shoal.storage.cleaner``, Kafka's ``LogCleaner``/``Cleaner``) reads and swaps a log's segments.

For cleanup.policy=compact, ``compact`` runs a pass of the log cleaner in budgeted steps. It reads
the old segments and writes the cleaned ones through descriptors of its own, without the lock, and
takes the lock only to choose what to clean, to pick each group of segments, and to swap a cleaned
group in (renames and the segment list: well under a millisecond). Reads hold the lock for their
whole length, so they see the old segments or the new ones, never a mix; retired files are unlinked
after file.delete.delay.ms. A truncation abandons a pass (``_generation``) and pulls the cleaner
checkpoint (``cleaner-offset-checkpoint``) back to the log end. ``open`` first completes or rolls
back a swap a crash interrupted. For compacted topics the active segment also rolls by
max.compaction.lag.ms (Kafka's ``maxSegmentMs``).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from typing import TYPE_CHECKING

from shoal.protocol.records import InvalidRecords
from shoal.storage.cleaner import (
    DEFAULT_MAX_MAP_ENTRIES,
    AbortedRanges,
    CleanableInfo,
    CleanerPass,
    CleanResult,
    GroupWriter,
    Source,
    cleanable_info,
    group_end,
    write_checkpoint,
)
from shoal.storage.config import MAX_LONG
from shoal.storage.txn_index import SUFFIX as TXN_SUFFIX, TxnIndex, encode_entries as encode_txn_entries

if TYPE_CHECKING:
    from shoal.storage.segment import Segment


class _PassAbandoned(Exception):
    """A compaction pass can no longer be completed (closed, truncated, policy changed)."""


class LogCompaction:
    """``PartitionLog``'s compaction methods: a mixin, whose state is the log's (segments, lock,
    config...); these fields are compaction's own, set by ``PartitionLog.__init__``."""

    _generation: int  # bumped by truncations: a pass of an older one gives up
    _cleaner_checkpoint: int | None  # first dirty offset (None: the log start)
    _pass: CleanerPass | None  # a compaction pass between ``compact`` calls
    _clean_lock: threading.Lock  # one compaction at a time
    _ckpt_lock: threading.Lock  # orders writes of the cleaner checkpoint file

    @property
    def cleaner_checkpoint(self) -> int | None:
        """The first dirty offset of compaction (None: never cleaned, so the log start)."""
        return self._cleaner_checkpoint

    @property
    def compaction_in_progress(self) -> bool:
        """A compaction pass is under way (``compact`` will resume it)."""
        return self._pass is not None

    def cleanable_info(self, now_ms: int) -> CleanableInfo | None:
        """How dirty the log is (None unless cleanup.policy has compact and the log is open)."""
        with self._lock:
            if self._closed or not self._config.compact_enabled:
                return None
            return self._cleanable_info(now_ms)

    def _cleanable_info(self, now_ms: int) -> CleanableInfo:
        segs = self._segments
        cfg = self._config
        return cleanable_info(
            self._bases,
            [s.size for s in segs],
            log_start=self._log_start,
            log_end=self._leo,
            # Kafka's firstUncleanableDirtyOffset: never at or beyond the first unstable offset
            high_watermark=self._lso_locked(),
            checkpoint=self._cleaner_checkpoint,
            now_ms=now_ms,
            min_compaction_lag_ms=cfg.min_compaction_lag_ms,
            max_compaction_lag_ms=cfg.max_compaction_lag_ms,
            largest_timestamp=lambda i: self._largest_timestamp(segs[i]),
            first_batch_timestamp=lambda i: self._first_batch_ts(segs[i]),
        )

    def _first_batch_ts(self, seg: Segment) -> int:
        if seg.rolling_ts is None:
            seg.rolling_ts = self._first_batch_max_ts(seg)
        return seg.rolling_ts

    def compact(
        self,
        now_ms: int,
        *,
        budget_bytes: int | None = None,
        force: bool = False,
        max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
    ) -> CleanResult:
        """Run (or resume) a compaction pass, reading about ``budget_bytes`` (unlimited: the
        whole pass). See ``shoal.storage.cleaner``. A pass starts only when the dirty ratio
        exceeds min.cleanable.dirty.ratio or max.compaction.lag.ms forces it (``force``: whenever
        there are dirty bytes). Blocking: run it in a worker thread. The partition lock is held
        only to choose, to pick each group, and to swap a cleaned group in; appends and reads go
        on meanwhile. Concurrent calls: the second returns at once (``aborted="busy"``).
        """
        result = CleanResult()
        if not self._clean_lock.acquire(blocking=False):
            result.aborted = "busy"
            return result
        try:
            self._compact(now_ms, MAX_LONG if budget_bytes is None else budget_bytes, force, max_map_entries, result)
        finally:
            self._clean_lock.release()
            result.checkpoint = self._cleaner_checkpoint
        return result

    def _compact(self, now_ms: int, budget: int, force: bool, max_map_entries: int, result: CleanResult) -> None:
        fs = self._fs
        with self._lock:
            cfg = self._config
            p = self._pass
            if self._closed or not cfg.compact_enabled:
                if p is not None:
                    self._drop_pass(p)
                return
            if p is not None and p.generation != self._generation:
                self._drop_pass(p)
                p = None
            if p is None:
                info = self._cleanable_info(now_ms)
                if info.checkpoint_reset:
                    self._cleaner_checkpoint = info.first_dirty  # Kafka: forceUpdateCheckpoint
                result.dirty_ratio = info.dirty_ratio
                if not (info.should_clean(cfg.min_cleanable_dirty_ratio) or (force and info.dirty_bytes > 0)):
                    return
                d = bisect_left(self._bases, info.first_dirty_segment)
                u = bisect_left(self._bases, info.first_uncleanable)
                dirty = [Source(s.base, s.size, s.prefix) for s in self._segments[d:u]]
                last_of = {e.producer_id: e.last_offset for e in self._producers.entries() if e.batches}
                aborted = AbortedRanges(
                    [(e.producer_id, e.first_offset, e.last_offset) for seg in self._segments for e in self._txn_of(seg).entries]
                )
                p = CleanerPass(
                    self._generation, info, dirty, last_of, max_map_entries,
                    decompress_limit=self._decompress_limit, known_bad=self._cleaner_bad, aborted=aborted,
                )
                self._pass = p
            else:
                result.dirty_ratio = p.info.dirty_ratio
        result.started = True
        stats = result.stats
        try:
            while budget > 0:
                if p.map_end is None:
                    budget -= p.build_map(fs, budget, stats)
                    continue
                g = p.group
                if g is None:
                    g = self._next_group(p)
                    if g is None:
                        self._finish_pass(p, result)
                        return
                    g.create(fs)
                    p.group = g
                if not g.done:
                    budget -= g.step(
                        fs,
                        budget,
                        p.map,
                        p.producers_last,
                        now_ms=now_ms,
                        delete_retention_ms=cfg.delete_retention_ms,
                        stats=stats,
                        aborted=p.aborted,
                        markers=p.markers,
                    )
                    if not g.done:
                        return  # budget spent: resume at the next call
                g.finish(fs)
                self._swap_in(p, g, now_ms, result)
                p.group = None
                p.next_base = g.upper
            if p.map_end is not None and p.group is None and self._next_group(p) is None:
                self._finish_pass(p, result)
        except _PassAbandoned as e:
            result.aborted = str(e)
            with self._lock:
                self._drop_pass(p)
        except (FileNotFoundError, InvalidRecords) as e:
            # A segment went away (retention) or changed (truncation) under the pass: start over.
            result.aborted = f"{type(e).__name__}: {e}"
            with self._lock:
                self._drop_pass(p)
        except Exception:
            with self._lock:
                self._drop_pass(p)
            raise

    def _drop_pass(self, p: CleanerPass) -> None:
        """Forget the pass and delete its half-written files (under the lock)."""
        if self._pass is p:
            self._pass = None
        if p.group is not None:
            p.group.discard(self._fs)
            p.group = None

    def _check_pass(self, p: CleanerPass) -> None:
        if self._closed:
            raise _PassAbandoned("the log was closed")
        if p.generation != self._generation:
            raise _PassAbandoned("the log was truncated")
        if not self._config.compact_enabled:
            raise _PassAbandoned("cleanup.policy no longer has compact")

    def _next_group(self, p: CleanerPass) -> GroupWriter | None:
        """The next group of segments to clean, from ``p.next_base`` up to ``p.map_end``."""
        with self._lock:
            self._check_pass(p)
            bases = self._bases
            segs = self._segments
            i = bisect_left(bases, p.next_base)
            stop = min(bisect_left(bases, p.map_end), len(segs) - 1)  # never the active segment
            if i >= stop:
                return None
            sizes = [s.size for s in segs]
            j = group_end(bases, sizes, i, stop, self._segment_bytes)
            group = segs[i:j]
            return GroupWriter(
                group,
                [Source(s.base, s.size, s.prefix) for s in group],
                bases[j],
                index_interval=self._interval,
                max_index_entries=self._max_oi,
                max_time_entries=self._max_ti,
                old_max_timestamp=max(self._segment_max_ts(s) for s in group),
            )

    def _swap_in(self, p: CleanerPass, g: GroupWriter, now_ms: int, result: CleanResult) -> None:
        """Replace the group's segments by the cleaned one, on disk and in memory (under the
        lock). If they are no longer all there (retention), the pass is abandoned."""
        fs = self._fs
        with self._lock:
            try:
                self._check_pass(p)
            except _PassAbandoned:
                g.discard(fs)
                raise
            bases = self._bases
            segs = self._segments
            n = len(g.segments)
            i = bisect_left(bases, g.base)
            if (
                i + n >= len(segs)
                or bases[i + n] != g.upper
                or any(segs[i + k] is not old for k, old in enumerate(g.segments))
            ):
                # Retention took some of them. Later groups must not get tombstones stamped (and
                # later removed) while older values of their keys may survive here: start over.
                g.discard(fs)
                raise _PassAbandoned("the segments changed under the pass")
            prefix = g.prefix
            # The group's aborted transactions carry over, but for the markers the pass removed.
            dropped = g.dropped_markers
            aborted = [e for old in g.segments for e in self._txn_of(old).entries if e.last_offset not in dropped]
            try:
                if aborted:
                    fs.write_file(prefix + TXN_SUFFIX + ".swap", encode_txn_entries(aborted), sync=True)
                fs.rename(prefix + ".index.cleaned", prefix + ".index.swap")
                fs.rename(prefix + ".timeindex.cleaned", prefix + ".timeindex.swap")
                fs.rename(prefix + ".log.cleaned", prefix + ".log.swap")  # the commit point
            except OSError:
                g.discard(fs)
                for suffix in (".index.swap", ".timeindex.swap", ".log.swap", TXN_SUFFIX + ".swap"):
                    self._unlink_quietly(prefix + suffix)
                raise
            new = self._new_segment(g.base, now_ms)
            new.size = g.size
            new.oi = g.oi
            new.ti = g.ti
            new.max_ts = g.max_ts
            new.max_ts_offset = g.max_ts_offset
            new.rolling_ts = g.rolling_ts
            new.txn = TxnIndex(prefix + TXN_SUFFIX, aborted)
            old_size = sum(s.size for s in g.segments)
            segs[i : i + n] = [new]
            bases[i : i + n] = [g.base]
            self._size += g.size - old_size
            self._dir_dirty = True
            self._index_cache.add(new, g.oi.nbytes() + g.ti.nbytes())
            # From here on the load would complete the swap; so do we, as far as the disk lets us.
            for k, old in enumerate(g.segments):
                self._retire_segment(old, now_ms, keep_snapshot=k == 0)
            for suffix in (".index", ".timeindex", ".log"):
                fs.rename(prefix + suffix + ".swap", prefix + suffix)
            if aborted:
                fs.rename(prefix + TXN_SUFFIX + ".swap", prefix + TXN_SUFFIX)
        fs.fsync_dir(self.directory)
        result.segments_replaced += n
        result.segments_written += 1

    def _finish_pass(self, p: CleanerPass, result: CleanResult) -> None:
        """Every group is swapped: the checkpoint moves to the end of the mapped section."""
        end = p.map_end
        assert end is not None
        with self._ckpt_lock:
            # Unlocked read: a truncation bumps the generation before it takes _ckpt_lock.
            if p.generation == self._generation and not self._closed:
                write_checkpoint(self._fs, self.directory, end)
                self._cleaner_checkpoint = end
                result.pass_complete = True
        with self._lock:
            if self._pass is p:
                self._pass = None

    def _discard_idle_pass(self, p: CleanerPass | None) -> None:
        """Delete the half-written segment of a pass just forgotten (truncation, close), if no
        compaction is running it (a running one discards its own)."""
        if p is not None and p.group is not None and self._clean_lock.acquire(blocking=False):
            try:
                p.group.discard(self._fs)
            finally:
                self._clean_lock.release()

    def _compaction_truncated(self) -> None:
        """After a truncation (under the lock): a running compaction sees the new generation and
        gives up, an idle one's files go, and the cleaner checkpoint comes back to the log end."""
        p = self._pass
        self._pass = None
        self._discard_idle_pass(p)
        # Kafka's maybeTruncateCheckpoint: what was cleaned beyond the cut is gone.
        with self._ckpt_lock:
            ckpt = self._cleaner_checkpoint
            if ckpt is not None and ckpt > self._leo:
                self._cleaner_checkpoint = self._leo
                write_checkpoint(self._fs, self.directory, self._leo)
