"""Where the coordinator's records go: the partitions of ``__consumer_offsets``.

``CoordinatorLog`` is the narrow interface the coordinator writes through:

- ``append(partition, records, now_ms)`` writes one batch synchronously (so the order of
  operations on the event loop is the order in the log) and returns the offset after it, or an
  error code;
- ``wait_committed(partition, offset, timeout_s)`` resolves when the high watermark reaches
  ``offset`` (acks=all), or with REQUEST_TIMED_OUT;
- ``replay(partition)`` yields ``(offset, key, value)`` of every record from the log start; it
  blocks on disk reads and is run in a worker thread at load time.

``BrokerCoordinatorLog`` is the real one (the broker's replica manager: partitions, acks=all
purgatory, flush policy); ``MemoryCoordinatorLog`` keeps records in lists, for tests of the state machine
and for checking exactly which records an operation wrote.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Callable, Iterator, Protocol, Sequence

from shoal.groups.records import OFFSETS_TOPIC
from shoal.protocol.errors import ErrorCode, error_code
from shoal.protocol.records import InvalidRecords, build_batch, iter_records, parse_batches

if TYPE_CHECKING:
    from shoal.clock import Clock
    from shoal.metadata import MetadataImage
    from shoal.replica import Partition, ReplicaManager

log = logging.getLogger("shoal.groups")

Record = tuple[bytes, bytes | None]  # (key, value); value None is a tombstone
READ_CHUNK = 1 << 20


class CoordinatorLog(Protocol):
    def append(self, partition: int, records: Sequence[Record], now_ms: int) -> int | ErrorCode: ...

    async def wait_committed(self, partition: int, offset: int, timeout_s: float) -> ErrorCode: ...

    def replay(self, partition: int) -> Iterator[tuple[int, bytes | None, bytes | None]]: ...


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

    def append(self, partition: int, records: Sequence[Record], now_ms: int) -> int | ErrorCode:
        part, code = self._leader(partition)
        if part is None:
            return code
        batch = bytearray(build_batch([(now_ms, k, v, ()) for k, v in records]))
        try:
            info = part.append_as_leader(batch, now_ms, client=False)
        except InvalidRecords as e:
            log.warning("cannot append %d records to %s-%d: %s", len(records), self.topic, partition, e)
            return error_code(e.code)
        except OSError as e:
            log.error("cannot append to %s-%d: %s", self.topic, partition, e)
            return ErrorCode.kafka_storage_error
        return info.last_offset + 1

    async def wait_committed(self, partition: int, offset: int, timeout_s: float) -> ErrorCode:
        part, code = self._leader(partition)
        if part is None:
            return code
        plog = part.log
        now_ms = self._clock.now_ms()
        if plog.flush_due(now_ms):
            await asyncio.to_thread(plog.maybe_flush, now_ms)
        if part.high_watermark >= offset:
            return ErrorCode.none
        failed = await self._replicas.wait_committed([(self.topic, partition, offset, 1)], timeout_s)
        return failed.get((self.topic, partition), ErrorCode.none)

    def replay(self, partition: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        part = self._replicas.partition(self.topic, partition)
        if part is None:
            return
        plog = part.log
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


class MemoryCoordinatorLog:
    """Records in lists; commits complete at once unless ``hold()`` parks them."""

    def __init__(self) -> None:
        self.records: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
        self.fail_with: ErrorCode | None = None  # the next appends return this error
        self._held: asyncio.Event | None = None

    def append(self, partition: int, records: Sequence[Record], now_ms: int) -> int | ErrorCode:
        if self.fail_with is not None:
            return self.fail_with
        out = self.records.setdefault(partition, [])
        for k, v in records:
            out.append((len(out), k, v))
        return len(out)

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
        yield from list(self.records.get(partition, ()))

    def all(self, partition: int | None = None) -> list[tuple[bytes, bytes | None]]:
        parts = [partition] if partition is not None else sorted(self.records)
        return [(k, v) for p in parts for _, k, v in self.records.get(p, ())]
