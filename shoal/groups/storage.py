"""Where the coordinator's records go: the partitions of ``__consumer_offsets``.

``CoordinatorLog`` is the narrow interface the coordinator writes through:

- ``append(partition, records, now_ms, producer_id=-1, producer_epoch=-1)`` writes one batch
  synchronously (so the order of operations on the event loop is the order in the log) and
  returns the offset after it, or an error code. With a producer id it is a *transactional*
  batch (KIP-98, a TxnOffsetCommit): producer id and epoch, base sequence -1, the transactional
  attribute, appended with the coordinator's origin (no sequence checks; the log still fences an
  older producer epoch: INVALID_PRODUCER_EPOCH);
- ``wait_committed(partition, offset, timeout_s)`` resolves when the high watermark reaches
  ``offset`` (acks=all), or with REQUEST_TIMED_OUT;
- ``replay(partition)`` yields ``(offset, key, value)`` of every data record from the log start
  (control batches skipped); ``replay_batches(partition)`` yields :class:`LogBatch` es, data and
  end-transaction markers, with the producer id and transactional bit the group coordinator's
  load needs to rebuild pending transactional offsets. Both block on disk reads and run in a
  worker thread at load time.

``BrokerCoordinatorLog`` is the real one (the broker's replica manager: partitions, acks=all
purgatory, flush policy); ``MemoryCoordinatorLog`` keeps records in lists, for tests of the state machine
and for checking exactly which records an operation wrote.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Protocol, Sequence

from shoal.groups.records import OFFSETS_TOPIC
from shoal.protocol.errors import ErrorCode, error_code
from shoal.protocol.records import InvalidRecords, build_batch, iter_batch_records, iter_records, parse_batches
from shoal.storage.producer_state import ProducerStateError
from shoal.storage.txn_index import read_marker

if TYPE_CHECKING:
    from shoal.clock import Clock
    from shoal.metadata import MetadataImage
    from shoal.replica import Partition, ReplicaManager

log = logging.getLogger("shoal.groups")

Record = tuple[bytes, bytes | None]  # (key, value); value None is a tombstone
READ_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class LogBatch:
    """One batch of the log as the load sees it. ``marker`` is None for data; for an
    end-transaction control batch, True (COMMIT) or False (ABORT), and ``records`` is empty."""

    base_offset: int
    producer_id: int = -1
    producer_epoch: int = -1
    transactional: bool = False
    marker: bool | None = None
    records: list[tuple[int, bytes | None, bytes | None]] = field(default_factory=list)


class CoordinatorLog(Protocol):
    def append(
        self, partition: int, records: Sequence[Record], now_ms: int, *, producer_id: int = -1, producer_epoch: int = -1
    ) -> int | ErrorCode: ...

    async def wait_committed(self, partition: int, offset: int, timeout_s: float) -> ErrorCode: ...

    def replay(self, partition: int) -> Iterator[tuple[int, bytes | None, bytes | None]]: ...

    def replay_batches(self, partition: int) -> Iterator[LogBatch]: ...

    def hosted(self, partition: int) -> bool:
        """Whether this broker has the partition's log open: a replay before that would read an
        empty log that is not the partition's."""
        ...


class BrokerCoordinatorLog:
    """Appends to the leader's partition of ``__consumer_offsets`` (through the replica manager)
    and waits for its high watermark. ``topic``: another coordinator's internal topic
    (``__transaction_state`` for ``shoal.txn``)."""

    def __init__(self, replicas: "ReplicaManager", image: "Callable[[], MetadataImage]", clock: "Clock",
                 topic: str = OFFSETS_TOPIC) -> None:
        self._replicas = replicas
        self._image = image
        self._clock = clock
        self.topic = topic

    def _leader(self, partition: int) -> "tuple[Partition | None, ErrorCode]":
        topic = self._image().topic(self.topic)
        if topic is None or not 0 <= partition < len(topic.partitions):
            return None, ErrorCode.unknown_topic_or_partition
        part = self._replicas.leader(self.topic, topic.partitions[partition])
        if part is None:
            return None, ErrorCode.not_leader_or_follower
        return part, ErrorCode.none

    def append(
        self, partition: int, records: Sequence[Record], now_ms: int, *, producer_id: int = -1, producer_epoch: int = -1
    ) -> int | ErrorCode:
        part, code = self._leader(partition)
        if part is None:
            return code
        txn = producer_id >= 0
        batch = bytearray(build_batch(
            [(now_ms, k, v, ()) for k, v in records],
            producer_id=producer_id, producer_epoch=producer_epoch if txn else -1, is_transactional=txn,
        ))
        try:
            info = part.append_as_leader(batch, now_ms, client=False)
        except InvalidRecords as e:
            log.warning("cannot append %d records to %s-%d: %s", len(records), self.topic, partition, e)
            return error_code(e.code)
        except ProducerStateError as e:  # a transactional batch of a fenced producer epoch
            log.info("transactional append to %s-%d of producer %d epoch %d refused: %s",
                     self.topic, partition, producer_id, producer_epoch, e)
            return error_code(e.code)
        except OSError as e:
            log.error("cannot append to %s-%d: %s", self.topic, partition, e)
            return ErrorCode.kafka_storage_error
        return info.last_offset + 1

    async def wait_committed(self, partition: int, offset: int, timeout_s: float) -> ErrorCode:
        part, code = self._leader(partition)
        if part is None:
            return code
        await part.flush_if_due(self._clock.now_ms())
        if part.high_watermark >= offset:
            return ErrorCode.none
        failed = await self._replicas.wait_committed([(self.topic, partition, offset, 1)], timeout_s)
        return failed.get((self.topic, partition), ErrorCode.none)

    def hosted(self, partition: int) -> bool:
        return self._replicas.partition(self.topic, partition) is not None

    def replay(self, partition: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        part = self._replicas.partition(self.topic, partition)
        if part is None:
            return
        plog = part.view
        offset = plog.log_start_offset
        end = plog.log_end_offset  # Kafka's loader reads to the log end offset too
        while offset < end:
            data = plog.read(offset, READ_CHUNK, max_offset=end).records
            if not data:
                break
            for pos, h in parse_batches(data):
                if h.is_control:
                    offset = h.next_offset
                    continue
                for rec in iter_records(data[pos : pos + h.size]):
                    if rec.offset >= offset:
                        yield rec.offset, rec.key, rec.value
                offset = h.next_offset

    def replay_batches(self, partition: int) -> Iterator[LogBatch]:
        part = self._replicas.partition(self.topic, partition)
        if part is None:
            return
        plog = part.view
        offset = plog.log_start_offset
        end = plog.log_end_offset
        while offset < end:
            data = plog.read(offset, READ_CHUNK, max_offset=end).records
            if not data:
                break
            for pos, h in parse_batches(data):
                if h.next_offset <= offset:
                    continue
                txn = h.is_transactional and h.producer_id >= 0
                if h.is_control:
                    marker = read_marker(data, h, pos)
                    if marker is not None and txn:
                        yield LogBatch(h.base_offset, h.producer_id, h.producer_epoch, True, marker[0])
                else:
                    recs = [(r.offset, r.key, r.value) for r in iter_batch_records(data, pos, h) if r.offset >= offset]
                    yield LogBatch(h.base_offset, h.producer_id, h.producer_epoch, txn, None, recs)
                offset = h.next_offset


class MemoryCoordinatorLog:
    """Records in lists; commits complete at once unless ``hold()`` parks them.

    Transactional batches and end-transaction markers (:meth:`append_marker`, what the
    transaction coordinator's marker writer appends) are kept as batches, so ``replay_batches``
    replays them as the real log does; a transactional append of a producer epoch older than the
    last one seen for that producer id answers INVALID_PRODUCER_EPOCH, as the log's producer
    state does."""

    def __init__(self) -> None:
        self.records: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
        # per partition: (base offset, count, producer id, epoch, transactional, marker or None)
        self.batches: dict[int, list[tuple[int, int, int, int, bool, bool | None]]] = {}
        self.epochs: dict[tuple[int, int], int] = {}  # (partition, producer id) -> latest epoch
        self.fail_with: ErrorCode | None = None  # the next appends return this error
        self._held: asyncio.Event | None = None
        self.unhosted: set[int] = set()  # partitions whose log is not open yet (hosted() False)

    def hosted(self, partition: int) -> bool:
        return partition not in self.unhosted

    def append(
        self, partition: int, records: Sequence[Record], now_ms: int, *, producer_id: int = -1, producer_epoch: int = -1
    ) -> int | ErrorCode:
        if self.fail_with is not None:
            return self.fail_with
        if producer_id >= 0:
            code = self._check_epoch(partition, producer_id, producer_epoch)
            if code != ErrorCode.none:
                return code
        out = self.records.setdefault(partition, [])
        base = len(out)
        for k, v in records:
            out.append((len(out), k, v))
        self.batches.setdefault(partition, []).append(
            (base, len(records), producer_id, producer_epoch, producer_id >= 0, None))
        return len(out)

    def _check_epoch(self, partition: int, producer_id: int, producer_epoch: int) -> ErrorCode:
        latest = self.epochs.get((partition, producer_id), -1)
        if producer_epoch < latest:
            return ErrorCode.invalid_producer_epoch
        self.epochs[(partition, producer_id)] = producer_epoch
        return ErrorCode.none

    def append_marker(self, partition: int, producer_id: int, producer_epoch: int, commit: bool) -> int | ErrorCode:
        """An end-transaction marker (one offset, no record of the coordinator's)."""
        code = self._check_epoch(partition, producer_id, producer_epoch)
        if code != ErrorCode.none:
            return code
        out = self.records.setdefault(partition, [])
        base = len(out)
        out.append((base, b"", None))  # holds the marker's offset; ``all`` leaves it out
        self.batches.setdefault(partition, []).append((base, 1, producer_id, producer_epoch, True, commit))
        return base + 1

    def hold(self) -> None:
        """Park every ``wait_committed`` until :meth:`release`."""
        self._held = asyncio.Event()

    def release(self) -> None:
        if self._held is not None:
            self._held.set()
            self._held = None

    async def wait_committed(self, partition: int, offset: int, timeout_s: float) -> ErrorCode:
        held = self._held
        if held is not None:
            await held.wait()
        return ErrorCode.none

    def replay(self, partition: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        for batch in list(self.replay_batches(partition)):
            yield from batch.records

    def replay_batches(self, partition: int) -> Iterator[LogBatch]:
        records = list(self.records.get(partition, ()))
        for base, n, pid, epoch, txn, marker in list(self.batches.get(partition, ())):
            if marker is not None:
                yield LogBatch(base, pid, epoch, True, marker)
            else:
                yield LogBatch(base, pid, epoch, txn, None, records[base : base + n])

    def all(self, partition: int | None = None) -> list[tuple[bytes, bytes | None]]:
        parts = [partition] if partition is not None else sorted(self.records)
        markers = {(p, b[0]) for p in parts for b in self.batches.get(p, ()) if b[5] is not None}
        return [(k, v) for p in parts for o, k, v in self.records.get(p, ()) if (p, o) not in markers]
