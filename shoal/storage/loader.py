"""Opening a partition log (Kafka's ``LogLoader``): what is on disk becomes the log's segments,
offsets, producer state and leader-epoch cache.

A fresh directory reads nothing. Otherwise leftovers go first (a compaction's interrupted swap is
completed or rolled back, ``.deleted``/``.tmp``/``.cleaned``/``.swap`` files and indexes without
a ``.log`` are removed); then either the state checkpoint of a clean shutdown is trusted (it
matches the active segment: no data is read), or every segment from the one holding the recovery
point is scanned (``Segment.scan``: CRCs and lengths checked, the log truncated at the first torn
or corrupt batch and every later segment deleted, indexes rebuilt). The producer state loads from
the latest usable snapshot and replays the batch headers after it (after a recovery, from a
snapshot at or below the first recovered segment, rebuilding the transaction indexes from there);
the leader-epoch cache takes ``leader-epoch-checkpoint`` and learns the recovered batches' epochs,
or is rebuilt from every batch header when the checkpoint is missing or corrupt. Truncation reuses
the producer-state load (``_load_producer_state``).
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from typing import TYPE_CHECKING

from shoal.protocol.records import ATTR_CONTROL
from shoal.storage.cleaner import read_checkpoint, recover_swaps
from shoal.storage.epochs import CheckpointError, LeaderEpochCache, decode_checkpoint
from shoal.storage.producer_state import ProducerStateManager, SnapshotError
from shoal.storage.segment import iter_headers
from shoal.storage.txn_index import SUFFIX as TXN_SUFFIX, read_marker

if TYPE_CHECKING:
    from shoal.storage.log import PartitionState
    from shoal.storage.segment import Segment

log = logging.getLogger("shoal.storage.log")  # the log's own: its warnings keep their logger name


class LogLoader:
    """``PartitionLog``'s loading methods: a mixin, whose state is the log's; run under its lock
    by ``PartitionLog.open`` (and ``_load_producer_state`` by truncation)."""

    def _load(self, state: PartitionState | None, clean: bool, now_ms: int) -> None:
        fs = self._fs
        # a directory this call created is empty: none of the reads below (a topic's creation at
        # thousands of partitions paid them for each, on the event loop: issue 25)
        fresh = fs.make_new_dir(self.directory)
        if not fresh:
            recover_swaps(fs, self.directory)  # a compaction's swap the last run left half done
            self._cleaner_checkpoint = read_checkpoint(fs, self.directory)
        logs: dict[int, int] = {}
        indexes: list[tuple[int, str]] = []
        snapshots: list[int] = []
        for e in () if fresh else fs.scandir(self.directory):
            if e.is_dir:
                continue
            name = e.name
            if name.endswith((".deleted", ".tmp", ".cleaned", ".swap")):
                self._unlink_quietly(os.path.join(self.directory, name))
                continue
            stem, _, ext = name.partition(".")
            if len(stem) != 20 or not stem.isdigit():
                continue
            if ext == "log":
                logs[int(stem)] = e.size
            elif ext in ("index", "timeindex", "txnindex"):
                indexes.append((int(stem), name))
            elif ext == "snapshot":
                snapshots.append(int(stem))
        for base, name in indexes:
            if base not in logs:
                self._unlink_quietly(os.path.join(self.directory, name))
        if not logs:
            start = max(state.log_start_offset, 0) if state is not None else 0
            seg = self._new_segment(start, now_ms)
            fd = fs.open(seg.prefix + ".log", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            self._handles.adopt(seg, fd, writable=True)
            self._dir_dirty = True
            self._segments = [seg]
            self._bases = [start]
            self._leo = start
            self._log_start = start
            self._recovery_point = start
            self._hw = start
            seg.make_ready_empty()
            self._snapshots = sorted(snapshots)
            self._load_producer_state(False)
            if not fresh and self._read_epoch_checkpoint():
                self._epoch_seq += 1  # entries of segments that are gone: rewrite it empty
            return
        for base in sorted(logs):
            seg = self._new_segment(base, now_ms)
            seg.size = logs[base]
            self._segments.append(seg)
            self._bases.append(base)
            self._size += seg.size
        active = self._segments[-1]
        rp = state.recovery_point if state is not None else 0
        trusted = False
        checkpointed = self._read_epoch_checkpoint()
        epochs = LeaderEpochCache(checkpointed) if checkpointed is not None else None
        if (
            clean
            and state is not None
            and state.active_base == active.base
            and state.active_size == active.size
            and (state.log_end_offset > active.base or (state.log_end_offset == active.base and active.size == 0))
        ):
            self._leo = state.log_end_offset
            trusted = True
        else:
            self._recover(rp, now_ms, epochs)
        start = max(state.log_start_offset if state is not None else 0, self._segments[0].base)
        self._log_start = min(start, self._leo)
        self._recovery_point = max(min(rp, self._leo), self._segments[0].base)
        self._hw = self._clamp(state.high_watermark if state is not None else 0)
        self._snapshots = sorted(snapshots)
        rebuild = None if trusted else self._bases[max(0, bisect_right(self._bases, rp) - 1)]
        self._load_producer_state(trusted, rebuild)
        self._load_epochs(epochs, checkpointed)

    def _read_epoch_checkpoint(self) -> list[tuple[int, int]] | None:
        """The entries of ``leader-epoch-checkpoint``; None if it is missing or unreadable."""
        data = self._fs.read_file(self._epoch_checkpoint_path())
        if data is None:
            return None
        try:
            return decode_checkpoint(data)
        except CheckpointError as e:
            log.warning("%s: %s; rebuilding the leader-epoch cache from the batches", self, e)
            return None

    def _load_epochs(self, epochs: LeaderEpochCache | None, checkpointed: list[tuple[int, int]] | None) -> None:
        """Settle the epoch cache at open (under the lock). ``epochs`` is the checkpoint's, with
        the recovered segments' batches already assigned (``_recover``); without a usable
        checkpoint it is rebuilt from every batch header (one read of the whole log)."""
        if epochs is None:
            epochs = LeaderEpochCache()
            self._scan_epochs(epochs, self._segments)
        epochs.truncate_from_end(self._leo)
        epochs.truncate_from_start(self._log_start)
        self._epochs = epochs
        if epochs.entries() != checkpointed:
            self._epoch_seq += 1  # the next flush writes it

    def _scan_epochs(self, epochs: LeaderEpochCache, segments: list[Segment]) -> None:
        """Assign the epochs of the batch headers of ``segments`` (under the lock)."""
        for seg in segments:
            if seg.size == 0:
                continue
            fd = self._handles.get(seg)
            for _p, h in iter_headers(self._fs, fd, 0, seg.size):
                if h.partition_leader_epoch > epochs.latest_epoch:
                    epochs.assign(h.partition_leader_epoch, h.base_offset)

    def _recover(self, recovery_point: int, now_ms: int, epochs: LeaderEpochCache | None) -> None:
        """Verify every segment from the one holding ``recovery_point``; truncate at the first bad
        byte. ``epochs`` (the checkpoint's cache) forgets what it holds from there on and learns
        the epochs of the batches that survive."""
        segs = self._segments
        first = max(0, bisect_right(self._bases, recovery_point) - 1)
        next_offset = segs[first].base
        if epochs is not None:
            epochs.truncate_from_end(next_offset)
        j = first
        while j < len(segs):
            seg = segs[j]
            scan = seg.scan(self._fs, self._interval, truncate=True, min_offset=next_offset, epochs=epochs)
            self._size += scan.valid_bytes - seg.size
            seg.size = scan.valid_bytes
            seg.adopt(scan)
            next_offset = scan.next_offset
            if scan.valid_bytes < scan.file_size and j + 1 < len(segs):
                # Everything after a corrupt batch goes, as in Kafka's recovery.
                for doomed in segs[j + 1 :]:
                    for suffix in (".log", ".index", ".timeindex", TXN_SUFFIX):
                        self._unlink_quietly(doomed.prefix + suffix)
                    self._size -= doomed.size
                del segs[j + 1 :]
                del self._bases[j + 1 :]
            if j + 1 < len(segs):
                seg.write_indexes(self._fs)
                seg.oi = seg.ti = None  # loaded again on demand, into the shared cache
            j += 1
        active = segs[-1]
        self._leo = next_offset if active.size else active.base
        self._index_cache.forget(active)
        active.ready = True

    def _load_producer_state(self, trusted_clean: bool, rebuild_from: int | None = None) -> None:
        """Load the latest usable snapshot not beyond the log end and replay the batches after it
        (under the lock: at open, after recovery, and after a truncation). ``rebuild_from`` (a
        segment base: the recovery scan's first segment) drops the transaction indexes from there
        on and rebuilds them from the replay, which then starts at a snapshot at or below it."""
        leo = self._leo
        self._delete_snapshots_above(leo)
        had_snapshots = bool(self._snapshots)
        state: ProducerStateManager | None = None
        start = self._segments[0].base
        limit = leo if rebuild_from is None else min(rebuild_from, leo)
        k = bisect_right(self._snapshots, limit)
        while k > 0:
            off = self._snapshots[k - 1]
            path = self._snapshot_path(off)
            try:
                state = ProducerStateManager.from_snapshot(self._fs.read_file(path) or b"")
            except SnapshotError as e:  # torn, corrupt, or of a version this release does not read
                log.warning("%s: %s; using an older snapshot or the batches instead", path, e)
                self._unlink_quietly(path)
                del self._snapshots[k - 1]
                k -= 1
                continue
            start = off
            break
        if state is None:
            state = ProducerStateManager()
            if trusted_clean and not had_snapshots:
                start = leo  # written before producer snapshots existed: start empty, as Kafka does
        self._producers = state
        if rebuild_from is not None:
            for seg in self._segments:
                if seg.base >= rebuild_from:
                    self._txn_of(seg).reset(self._fs)
        self._replay_producers(max(start, self._segments[0].base), leo, rebuild_from)
        # Stray snapshots (not at a segment base: an older shutdown's) go, except the one loaded.
        bases = set(self._bases)
        keep = []
        for off in self._snapshots:
            if off in bases or off == start:
                keep.append(off)
            else:
                self._unlink_quietly(self._snapshot_path(off))
        self._snapshots = keep

    def _replay_producers(self, start: int, end: int, rebuild_from: int | None = None) -> None:
        """Record the producer batches in [start, end) from their headers (under the lock); a
        marker's batch is read whole. Aborts whose marker is at or above ``rebuild_from`` are
        written to the transaction index of their segment."""
        if start >= end:
            return
        replay = self._producers.replay
        segs = self._segments
        i = max(0, bisect_right(self._bases, start) - 1)
        for j in range(i, len(segs)):
            seg = segs[j]
            if seg.size == 0:
                continue
            upper = segs[j + 1].base if j + 1 < len(segs) else self._leo
            if upper <= start:
                continue
            pos = seg.oi.lookup(start - seg.base) if seg.oi is not None and start > seg.base else 0
            fd = self._handles.get(seg)
            for p, h in iter_headers(self._fs, fd, pos, seg.size):
                if h.base_offset >= end:
                    return
                if h.base_offset < start:
                    continue
                if h.attributes & ATTR_CONTROL and h.producer_id >= 0:
                    txn = replay(h, read_marker(self._fs.pread(fd, h.size, p), h))
                    if rebuild_from is not None and h.base_offset >= rebuild_from:
                        self._complete_txn(seg, txn)
                else:
                    replay(h)
