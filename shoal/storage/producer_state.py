"""Idempotent-producer state of one partition: the rules, and the snapshot file format. No I/O.

Modelled on Kafka's ``ProducerStateManager``/``ProducerAppendInfo``/``ProducerStateEntry``. Per
producer id the partition keeps the epoch, the metadata of the last five batches appended
(first and last sequence, first and last offset, timestamp), the last timestamp and the
coordinator epoch. ``PartitionLog`` owns one ``ProducerStateManager`` and calls it under its
lock: ``check`` before an append, ``update`` after it succeeded, so validation and update are
atomic with respect to other appends on the partition.

Rules for a client batch with producer id >= 0 (``check``), as Kafka 4 applies them:

- a producer the partition does not know is accepted with any epoch and any sequence (since
  KIP-360 Kafka never answers UNKNOWN_PRODUCER_ID to Produce: the state may have been removed by
  expiry or retention);
- same epoch and the same (first, last) sequence as one of the last five batches: a duplicate.
  Nothing is appended; the caller answers NONE with the original batch's offsets (what Kafka
  does; DUPLICATE_SEQUENCE_NUMBER is never sent);
- epoch older than the current one: INVALID_PRODUCER_EPOCH;
- a newer epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER;
- same epoch: the first sequence must follow the last one (Int32.MAX is followed by 0), else
  OUT_OF_ORDER_SEQUENCE_NUMBER (a gap, or a retry older than the last five batches).

Batches the broker writes itself, or replays at load, are not validated (Kafka's REPLICATION
origin): ``update`` just records them.

Transactions (Kafka's ``ProducerAppendInfo.appendDataBatch``/``appendEndTxnMarker``): the first
transactional batch (attribute 0x10) of a producer with no ongoing transaction opens one at its
first offset (``current_txn_first_offset``); a non-transactional batch from a producer with an
ongoing transaction is INVALID_TXN_STATE. A control batch carrying an end-transaction marker
(``check_marker`` then ``complete_txn``; never sequence-checked) closes it: an older producer epoch
is INVALID_PRODUCER_EPOCH, an older coordinator epoch TRANSACTION_COORDINATOR_FENCED; the epoch and
coordinator epoch of the marker become the producer's; a marker of a producer without an ongoing
transaction completes nothing (and is still appended). A completed transaction stays *unstable*
until the high watermark passes its marker (Kafka's ``unreplicatedTxns``): the first unstable
offset is the smallest first offset of the ongoing transactions and of those, and the last stable
offset is ``min(first unstable offset, high watermark)`` (:meth:`last_stable_offset`).

Expiry: a producer whose last batch timestamp (the batch's maxTimestamp, as in Kafka) is
``producer.id.expiration.ms`` or more behind the clock is forgotten (``remove_expired``).
Retention and DeleteRecords forget nobody (KIP-360): a producer whose batches were deleted keeps
its last five batches' metadata, so a retry of one of them is still a duplicate.

Snapshot file (``<20-digit offset>.snapshot``, the state after every batch below that offset).
Kafka's file name, but not its layout: Kafka keeps only the last batch of each producer, this
keeps all five, so duplicates of any of them are still detected after a restart. Big-endian::

    version int16 (1) | crc uint32 (CRC-32C of everything after it) | count int32
    count x { producer_id int64 | epoch int16 | coordinator_epoch int32 | last_timestamp int64
              | current_txn_first_offset int64 | n int8
              | n x { first_seq int32 | last_seq int32 | first_offset int64 | last_offset int64
                      | timestamp int64 } }

Thread safety: none of its own; ``PartitionLog`` calls it under the partition lock.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from crc32c import crc32c

from shoal.protocol.records import ATTR_CONTROL, ATTR_TRANSACTIONAL, BatchHeader

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "BatchMetadata",
    "CompletedTxn",
    "ProducerStateEntry",
    "ProducerStateError",
    "ProducerStateManager",
    "SnapshotError",
    "last_sequence",
]

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1

_HEAD = struct.Struct(">hIi")  # version, crc, count
_ENTRY = struct.Struct(">qhiqqb")
_BATCH = struct.Struct(">iiqqq")
_CRC_FROM = 6  # the CRC covers the bytes after version and crc


class ProducerStateError(Exception):
    """A batch the producer rules refuse; ``code`` is the Kafka error name to answer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class SnapshotError(ValueError):
    """A snapshot file that is torn, corrupt or of an unknown version."""


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class CompletedTxn(NamedTuple):
    """A transaction closed by a marker: its first data offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The batch's last sequence: ``base + delta``, wrapping past Int32.MAX to 0 (Kafka's
    ``DefaultRecordBatch.incrementSequence``)."""
    if base_sequence > INT32_MAX - last_offset_delta:
        return last_offset_delta - (INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


class ProducerStateEntry:
    """One producer's state in one partition; ``batches`` oldest first, at most five."""

    __slots__ = ("producer_id", "epoch", "batches", "last_timestamp", "coordinator_epoch", "current_txn_first_offset")

    def __init__(
        self,
        producer_id: int,
        epoch: int = NO_PRODUCER_EPOCH,
        batches: list[BatchMetadata] | None = None,
        last_timestamp: int = -1,
        coordinator_epoch: int = -1,
        current_txn_first_offset: int = -1,
    ) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: list[BatchMetadata] = batches if batches is not None else []
        self.last_timestamp = last_timestamp
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerStateEntry):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(pid={self.producer_id}, epoch={self.epoch}, batches={self.batches}, "
            f"last_timestamp={self.last_timestamp})"
        )


class ProducerStateManager:
    """The producers of one partition (see the module docstring for the rules)."""

    __slots__ = ("_producers", "_ongoing", "unreplicated")

    def __init__(self) -> None:
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}  # first offset -> producer id (Kafka's ongoingTxns)
        self.unreplicated: dict[int, CompletedTxn] = {}  # first offset -> txn whose marker is above the HW

    def __len__(self) -> int:
        return len(self._producers)

    def get(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def entries(self) -> list[ProducerStateEntry]:
        return list(self._producers.values())

    def clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self.unreplicated.clear()

    # -- the append rules -------------------------------------------------------------------

    def check(
        self, producer_id: int, epoch: int, first_seq: int, last_seq: int, transactional: bool = False
    ) -> BatchMetadata | None:
        """Validate a client batch before it is appended: None to append it, the original
        batch's metadata if it is a duplicate, ProducerStateError if it must be refused."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return None  # unknown producer: any epoch, any sequence (KIP-360)
        current = entry.epoch
        if epoch == current:
            for b in entry.batches:
                if b.first_seq == first_seq and b.last_seq == last_seq:
                    return b
        if epoch < current:
            raise ProducerStateError(
                "INVALID_PRODUCER_EPOCH",
                f"epoch {epoch} of producer {producer_id} is older than the current epoch {current}",
            )
        if not transactional and entry.current_txn_first_offset >= 0:
            raise ProducerStateError(
                "INVALID_TXN_STATE",
                f"non-transactional batch from producer {producer_id}, which has a transaction open "
                f"at offset {entry.current_txn_first_offset}",
            )
        if epoch != current:
            if first_seq != 0 and current != NO_PRODUCER_EPOCH:
                raise ProducerStateError(
                    "OUT_OF_ORDER_SEQUENCE_NUMBER",
                    f"new epoch {epoch} of producer {producer_id} starts at sequence {first_seq}, not 0",
                )
            return None
        last = entry.last_seq
        if current != NO_PRODUCER_EPOCH and not (first_seq == last + 1 or (first_seq == 0 and last == INT32_MAX)):
            raise ProducerStateError(
                "OUT_OF_ORDER_SEQUENCE_NUMBER",
                f"sequence {first_seq} of producer {producer_id} (epoch {epoch}) does not follow {last}",
            )
        return None

    def check_epoch(self, producer_id: int, epoch: int) -> None:
        """Only the epoch rule (the broker's own transactional batches, Kafka's COORDINATOR
        origin: no sequence check): INVALID_PRODUCER_EPOCH for an older epoch."""
        entry = self._producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise ProducerStateError(
                "INVALID_PRODUCER_EPOCH",
                f"epoch {epoch} of producer {producer_id} is older than the current epoch {entry.epoch}",
            )

    def update(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp: int,
        transactional: bool = False,
    ) -> None:
        """Record a batch that was appended (or replayed); a new epoch forgets the old batches;
        the first transactional batch of a producer opens its transaction."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id)
        batches = entry.batches
        if entry.epoch != epoch:
            entry.epoch = epoch
            batches.clear()
        elif len(batches) >= NUM_BATCHES_TO_RETAIN:
            del batches[0]
        batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp))
        entry.last_timestamp = timestamp
        if transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self._ongoing[first_offset] = producer_id

    def replay(self, h: BatchHeader, marker: tuple[bool, int] | None = None) -> CompletedTxn | None:
        """Record a batch already in the log from its header (load, or a follower's append of the
        leader's batches): offsets and timestamp as written; batches without a producer id are
        skipped. A control batch completes the producer's transaction when ``marker``
        (``(commit, coordinator_epoch)``, read from its record by the caller) is given; the
        completed transaction is returned."""
        pid = h.producer_id
        if pid < 0:
            return None
        attrs = h.attributes
        if attrs & ATTR_CONTROL:
            if marker is None:
                return None
            return self.complete_txn(pid, h.producer_epoch, marker[1], marker[0], h.base_offset, h.max_timestamp)
        self.update(
            pid,
            h.producer_epoch,
            h.base_sequence,
            last_sequence(h.base_sequence, h.last_offset_delta),
            h.base_offset,
            h.base_offset + h.last_offset_delta,
            h.max_timestamp,
            bool(attrs & ATTR_TRANSACTIONAL),
        )
        return None

    # -- transactions -------------------------------------------------------------------------

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Validate an end-transaction marker the coordinator writes (no sequence check):
        INVALID_PRODUCER_EPOCH for an older producer epoch, TRANSACTION_COORDINATOR_FENCED for an
        older coordinator epoch (Kafka's ``checkProducerEpoch`` / ``checkCoordinatorEpoch``)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise ProducerStateError(
                "INVALID_PRODUCER_EPOCH",
                f"marker epoch {epoch} of producer {producer_id} is older than the current epoch {entry.epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise ProducerStateError(
                "TRANSACTION_COORDINATOR_FENCED",
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}",
            )

    def complete_txn(
        self, producer_id: int, epoch: int, coordinator_epoch: int, commit: bool, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        """Record a marker written at ``offset``: the producer's ongoing transaction (if any) is
        completed and stays unstable until the high watermark passes ``offset``."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id)
        if entry.epoch != epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp
        first = entry.current_txn_first_offset
        if first < 0:
            return None
        entry.current_txn_first_offset = -1
        self._ongoing.pop(first, None)
        txn = CompletedTxn(producer_id, first, offset, not commit)
        self.unreplicated[first] = txn
        return txn

    def next_unstable_after(self, txn: CompletedTxn) -> int:
        """The last stable offset to record with ``txn`` in the transaction index (Kafka's
        ``lastStableOffset(completedTxn)``): the first offset of the earliest ongoing transaction
        of another producer, else the offset after the marker."""
        others = [first for first, pid in self._ongoing.items() if pid != txn.producer_id]
        return min(others) if others else txn.last_offset + 1

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The smallest first offset of the ongoing transactions and of the completed ones whose
        marker is not below ``high_watermark`` (those are forgotten here), or None."""
        unrep = self.unreplicated
        if unrep:
            for first in [f for f, t in unrep.items() if t.last_offset < high_watermark]:
                del unrep[first]
        if not self._ongoing:
            return min(unrep) if unrep else None
        first = min(self._ongoing)
        return min(first, min(unrep)) if unrep else first

    def last_stable_offset(self, high_watermark: int) -> int:
        """``min(first unstable offset, high watermark)``."""
        if not self._ongoing and not self.unreplicated:
            return high_watermark
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None or first > high_watermark else first

    @property
    def has_transactions(self) -> bool:
        """Any ongoing transaction, or a completed one not known to be below the high watermark."""
        return bool(self._ongoing or self.unreplicated)

    def ongoing_txn_first_offset(self, producer_id: int) -> int | None:
        entry = self._producers.get(producer_id)
        if entry is None or entry.current_txn_first_offset < 0:
            return None
        return entry.current_txn_first_offset

    def ongoing_transactions(self) -> list[tuple[int, int, int]]:
        """``(producer_id, epoch, first_offset)`` of every ongoing transaction, by first offset."""
        out = []
        for first in sorted(self._ongoing):
            pid = self._ongoing[first]
            e = self._producers[pid]
            out.append((pid, e.epoch, first))
        return out

    # -- expiry -----------------------------------------------------------------------------

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` or more (Kafka's ``isProducerExpired``,
        which compares the last batch timestamp); returns how many."""
        doomed = [
            pid
            for pid, e in self._producers.items()
            if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in doomed:
            del self._producers[pid]
        return len(doomed)

    # -- snapshots --------------------------------------------------------------------------

    def to_snapshot(self) -> bytes:
        return encode_snapshot(self._producers.values())

    @classmethod
    def from_snapshot(cls, data: bytes) -> ProducerStateManager:
        """Raises SnapshotError for a torn, corrupt or unknown file."""
        m = cls()
        for e in decode_snapshot(data):
            m._producers[e.producer_id] = e
            if e.current_txn_first_offset >= 0:
                m._ongoing[e.current_txn_first_offset] = e.producer_id
        return m


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    body = bytearray()
    count = 0
    for e in entries:
        count += 1
        body += _ENTRY.pack(
            e.producer_id, e.epoch, e.coordinator_epoch, e.last_timestamp, e.current_txn_first_offset, len(e.batches)
        )
        for b in e.batches:
            body += _BATCH.pack(*b)
    payload = struct.pack(">i", count) + bytes(body)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(payload)) + payload


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    if len(data) < _HEAD.size:
        raise SnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise SnapshotError(f"unknown producer snapshot version {version}")
    if crc32c(memoryview(data)[_CRC_FROM:]) != crc:
        raise SnapshotError("producer snapshot CRC mismatch")
    if count < 0:
        raise SnapshotError(f"negative producer count {count}")
    pos = _HEAD.size
    out = []
    try:
        for _ in range(count):
            pid, epoch, coord, last_ts, txn_first, n = _ENTRY.unpack_from(data, pos)
            pos += _ENTRY.size
            if not 0 <= n <= NUM_BATCHES_TO_RETAIN:
                raise SnapshotError(f"producer {pid} has {n} batches in the snapshot")
            batches = []
            for _b in range(n):
                batches.append(BatchMetadata(*_BATCH.unpack_from(data, pos)))
                pos += _BATCH.size
            out.append(ProducerStateEntry(pid, epoch, batches, last_ts, coord, txn_first))
    except struct.error as e:
        raise SnapshotError(f"truncated producer snapshot: {e}") from e
    if pos != len(data):
        raise SnapshotError(f"{len(data) - pos} bytes after the last producer in the snapshot")
    return out


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"
