"""The partition log's side of idempotent producers and transactions (Kafka's ``UnifiedLog``
parts over ``ProducerStateManager`` and ``TransactionIndex``): the last stable offset, markers,
the aborted-transaction indexes, and the producer state with its snapshots.

Transactions (``producer_state``, ``txn_index``): a transactional batch opens its producer's
transaction; ``append_marker`` appends an end-transaction marker (a control batch) that completes
it, and an abort is appended to the ``.txnindex`` of the segment holding the marker. The last
stable offset is the first offset of the earliest transaction still open, or completed with its
marker not below the high watermark, capped by the high watermark and never below the log start
offset; Kafka's bounds hold: retention and DeleteRecords stop at the high watermark, compaction at
the last stable offset. ``aborted_transactions(start, upper)`` reads the indexes for a
read_committed Fetch. Follower appends and the load's replay complete transactions from the
markers they read (a marker's batch is read whole); an unclean open replays from a snapshot at or
below the first recovered segment and rebuilds the indexes from there on; truncation drops the
entries above the cut; the indexes go with their segments and compaction carries them over.
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shoal.protocol.records import ATTR_CONTROL, ATTR_TRANSACTIONAL, BatchHeader
from shoal.storage.producer_state import CompletedTxn, ProducerStateManager, last_sequence, snapshot_name
from shoal.storage.txn_index import AbortedTxn, TxnIndex, marker_batch, read_marker

if TYPE_CHECKING:
    from shoal.storage.log import AppendInfo
    from shoal.storage.segment import Segment


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    """One active producer of a partition (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


class LogTransactions:
    """``PartitionLog``'s transaction and producer-state methods: a mixin, whose state is the
    log's (segments, lock, offsets...); these fields are its own, set by ``PartitionLog.__init__``."""

    _producers: ProducerStateManager
    _snapshots: list[int]  # offsets of the snapshot files on disk, ascending

    def _record_producers(
        self, headers: list[BatchHeader], base: int, lat: int | None, buf: bytearray, positions: list[int], seg: Segment
    ) -> None:
        """Record the producer batches just written from ``base`` on (under the lock); markers
        among them complete their producers' transactions."""
        producers = self._producers
        offset = base
        for h, p in zip(headers, positions):
            last = offset + h.last_offset_delta
            ts = lat if lat is not None else h.max_timestamp
            if h.producer_id >= 0:
                if not h.attributes & ATTR_CONTROL:
                    producers.update(
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        last_sequence(h.base_sequence, h.last_offset_delta),
                        offset,
                        last,
                        ts,
                        bool(h.attributes & ATTR_TRANSACTIONAL),
                    )
                else:
                    marker = read_marker(buf, h, p)
                    if marker is not None:
                        self._complete_txn(
                            seg, producers.complete_txn(h.producer_id, h.producer_epoch, marker[1], marker[0], offset, ts)
                        )
            offset = last + 1

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        *,
        now_ms: int,
        leader_epoch: int,
    ) -> AppendInfo:
        """Append one end-transaction marker (a control batch, see ``shoal.storage.txn_index``)
        for the producer: its ongoing transaction completes (the last stable offset passes it
        once the high watermark passes the marker) and an abort is recorded in the transaction
        index. A producer without an ongoing transaction gets the marker too, completing
        nothing. Raises ProducerStateError (INVALID_PRODUCER_EPOCH for an older producer epoch,
        TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch; nothing is written)."""
        data = bytearray(marker_batch(producer_id, producer_epoch, coordinator_epoch, commit, now_ms))
        return self.append(data, now_ms=now_ms, leader_epoch=leader_epoch, client=False)

    def _complete_txn(self, seg: Segment, txn: CompletedTxn | None) -> None:
        """An abort goes to the transaction index of ``seg``, the segment holding its marker
        (under the lock)."""
        if txn is None or not txn.is_aborted:
            return
        entry = AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, self._producers.next_unstable_after(txn))
        self._txn_of(seg).append(self._fs, entry)

    def _rewrite_dirty_txn_indexes(self) -> None:
        """Write again the transaction indexes an append failed to extend (under the lock)."""
        for seg in self._segments:
            t = seg.txn
            if t is not None and t.dirty:
                t.rewrite_if_dirty(self._fs)

    def _txn_of(self, seg: Segment) -> TxnIndex:
        """The segment's transaction index, loaded on first use (under the lock)."""
        t = seg.txn
        if t is None:
            t = seg.txn = TxnIndex.load(self._fs, seg.prefix)
        return t

    @property
    def last_stable_offset(self) -> int:
        """``min(first unstable offset, high watermark)``, never below the log start offset: the
        first offset of an ongoing transaction, or of a completed one whose marker is not below
        the high watermark yet (Kafka's ``UnifiedLog.lastStableOffset``)."""
        producers = self._producers
        if not producers.has_transactions:
            return self._hw
        with self._lock:
            return self._lso_locked()

    def _lso_locked(self) -> int:
        # the log start never passes the high watermark, so the clamp keeps LSO <= HW
        return max(self._producers.last_stable_offset(self._hw), self._log_start)

    def ongoing_txn_first_offset(self, producer_id: int) -> int | None:
        """The first offset of the producer's ongoing transaction in this partition, or None."""
        with self._lock:
            return self._producers.ongoing_txn_first_offset(producer_id)

    def ongoing_transactions(self) -> list[tuple[int, int, int]]:
        """``(producer_id, epoch, first_offset)`` of every ongoing transaction, by first offset."""
        with self._lock:
            return self._producers.ongoing_transactions()

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of every aborted transaction overlapping
        ``[start_offset, upper_offset)``, from the transaction indexes of the segments from the
        one holding ``start_offset`` on (Kafka's ``collectAbortedTransactions``)."""
        out: list[AbortedTxn] = []
        with self._lock:
            self._check_open()
            segs = self._segments
            i = max(0, bisect_right(self._bases, start_offset) - 1)
            for seg in segs[i:]:
                if self._txn_of(seg).collect(start_offset, upper_offset, out):
                    break
        return [(e.producer_id, e.first_offset) for e in out]

    def active_producers(self) -> list[ProducerInfo]:
        """The producers the partition remembers (DescribeProducers)."""
        with self._lock:
            return [
                ProducerInfo(e.producer_id, e.epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch, e.current_txn_first_offset)
                for e in self._producers.entries()
            ]

    def producer_epoch(self, producer_id: int) -> int | None:
        """The producer's current epoch in this partition, or None if it is unknown here."""
        entry = self._producers.get(producer_id)
        return entry.epoch if entry is not None else None

    def producer_entry(self, producer_id: int):
        """A copy of the producer's state (tests and tools)."""
        with self._lock:
            e = self._producers.get(producer_id)
            if e is None:
                return None
            return type(e)(e.producer_id, e.epoch, list(e.batches), e.last_timestamp, e.coordinator_epoch, e.current_txn_first_offset)

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` (producer.id.expiration.ms); returns how many."""
        with self._lock:
            if self._closed or not len(self._producers):
                return 0
            return self._producers.remove_expired(now_ms, expiration_ms)

    def snapshot_offsets(self) -> list[int]:
        with self._lock:
            return list(self._snapshots)

    def take_snapshot(self) -> None:
        """Write a producer snapshot at the log end offset now (if it moved since the last one)."""
        with self._lock:
            self._check_open()
            self._snapshot_at_end()

    def _snapshot_at_end(self) -> None:
        latest = self._snapshots[-1] if self._snapshots else self._segments[0].base
        if latest < self._leo:
            self._take_snapshot(self._leo)

    def _snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, snapshot_name(offset))

    def _take_snapshot(self, offset: int) -> None:
        """Write ``<offset>.snapshot`` with the current state (under the lock). Not fsynced here:
        ``flush`` fsyncs the snapshots above the recovery point; a torn one fails its CRC at load."""
        self._fs.write_file(self._snapshot_path(offset), self._producers.to_snapshot())
        i = bisect_left(self._snapshots, offset)
        if i == len(self._snapshots) or self._snapshots[i] != offset:
            self._snapshots.insert(i, offset)
        self._dir_dirty = True

    def _delete_snapshots_above(self, offset: int) -> None:
        i = bisect_right(self._snapshots, offset)
        for off in self._snapshots[i:]:
            self._unlink_quietly(self._snapshot_path(off))
        del self._snapshots[i:]
