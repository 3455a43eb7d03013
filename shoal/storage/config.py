"""Per-topic log settings with Kafka's topic-level meanings and defaults."""

from __future__ import annotations

from dataclasses import dataclass

MAX_LONG = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Kafka topic configs that the partition log obeys (names with '_' for '.').

    ``retention_ms``/``retention_bytes`` of -1 mean unlimited. ``flush_messages``/``flush_ms`` are
    Kafka's defaults (never fsync: the page cache and replication are the durability story).
    ``message_timestamp_{before,after}_max_ms`` bound CreateTime timestamps (INVALID_TIMESTAMP).
    The last four drive compaction (``shoal.storage.cleaner``) when ``cleanup_policy`` has
    ``compact``: min.cleanable.dirty.ratio, min/max.compaction.lag.ms, delete.retention.ms.
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    retention_ms: int = 604800000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    flush_messages: int = MAX_LONG
    flush_ms: int = MAX_LONG
    file_delete_delay_ms: int = 60000
    cleanup_policy: str = "delete"
    message_timestamp_before_max_ms: int = MAX_LONG
    message_timestamp_after_max_ms: int = MAX_LONG
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = MAX_LONG
    delete_retention_ms: int = 86400000
    min_insync_replicas: int = 1  # not the log's: the replica layer's acks=all rule (kept with the topic's configs)
    min_insync_racks: int = 1  # not the log's either: acks=all's rack rule (shoal.replica.racks)

    def __post_init__(self) -> None:
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError(f"message.timestamp.type must be CreateTime or LogAppendTime: {self.message_timestamp_type!r}")
        if self.segment_bytes < 14:
            raise ValueError("segment.bytes must be at least 14")
        if self.segment_index_bytes < 12:
            raise ValueError("segment.index.bytes must be at least 12")
        if self.index_interval_bytes < 0:
            raise ValueError("index.interval.bytes must not be negative")
        if not 0 <= self.min_cleanable_dirty_ratio <= 1:
            raise ValueError("min.cleanable.dirty.ratio must be between 0 and 1")
        if self.min_compaction_lag_ms < 0 or self.delete_retention_ms < 0:
            raise ValueError("min.compaction.lag.ms and delete.retention.ms must not be negative")
        if self.max_compaction_lag_ms < 1:
            raise ValueError("max.compaction.lag.ms must be at least 1")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy
