"""What a partition log offers above the storage layer, as two protocols.

``PartitionStorage`` is what the replica layer (``shoal.replica.partition.Partition``, Kafka's
``Partition`` over its ``UnifiedLog``) uses: appends as leader and follower, truncation, the log
start and the high watermark, the topic's config, flushes. Nothing else writes a log.

``LogView`` is its read-only part, what handlers and other layers get (``Partition.view``):
offsets, sizes, leader epochs, producers and transactions, timestamp lookups and reads.

``PartitionLog`` is the one implementation; the protocols narrow what a caller may do with it and
cost nothing at run time (the same object, no wrapper).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from shoal.protocol.records import ValidatedBatches
    from shoal.storage.config import LogConfig
    from shoal.storage.log import AppendInfo, ReadInfo
    from shoal.storage.transactions import ProducerInfo


class LogView(Protocol):
    """The read-only face of one partition's log."""

    topic: str
    partition: int

    @property
    def config(self) -> LogConfig: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def latest_epoch(self) -> int: ...

    def segment_bases(self) -> list[int]: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True,
        regions: bool = False,
    ) -> ReadInfo: ...

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list[tuple[int, int]]: ...

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None: ...

    def latest_timestamp(self) -> tuple[int, int] | None: ...

    def ongoing_txn_first_offset(self, producer_id: int) -> int | None: ...

    def producer_epoch(self, producer_id: int) -> int | None: ...

    def active_producers(self) -> list[ProducerInfo]: ...


class PartitionStorage(LogView, Protocol):
    """What ``Partition`` does with its log: everything that changes it."""

    @property
    def high_watermark(self) -> int: ...

    @high_watermark.setter
    def high_watermark(self, value: int) -> None: ...

    def update_config(self, config: LogConfig) -> None: ...

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        now_ms: int,
        leader_epoch: int = 0,
        validated: ValidatedBatches | None = None,
        client: bool = True,
    ) -> AppendInfo: ...

    def append_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, *, now_ms: int, leader_epoch: int
    ) -> AppendInfo: ...

    def append_as_follower(self, data: bytes | bytearray | memoryview, *, now_ms: int | None = None) -> AppendInfo: ...

    def assign_epoch_start_offset(self, epoch: int) -> None: ...

    def truncate_to(self, offset: int) -> None: ...

    def truncate_fully_and_start_at(self, offset: int) -> None: ...

    def delete_records_before(self, offset: int) -> int: ...

    def flush_due(self, now_ms: int) -> bool: ...

    def maybe_flush(self, now_ms: int) -> bool: ...
