"""The group coordinator's settings, read from the broker config (dynamic overrides included)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000  # Kafka's classicGroupNewMemberJoinTimeoutMs


@dataclass(frozen=True, slots=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = 500
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 10080 * 60_000
    offsets_retention_check_interval_ms: int = 600000
    offset_commit_timeout_ms: int = 5000
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 1
    offsets_topic_segment_bytes: int = 104857600
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS

    @classmethod
    def from_broker_config(cls, cfg: Any) -> "GroupConfig":
        def get(name: str) -> int:
            return int(cfg.get(name))

        return cls(
            initial_rebalance_delay_ms=get("group.initial.rebalance.delay.ms"),
            min_session_timeout_ms=get("group.min.session.timeout.ms"),
            max_session_timeout_ms=get("group.max.session.timeout.ms"),
            max_size=get("group.max.size"),
            offset_metadata_max_bytes=get("offset.metadata.max.bytes"),
            offsets_retention_ms=get("offsets.retention.minutes") * 60_000,
            offsets_retention_check_interval_ms=get("offsets.retention.check.interval.ms"),
            offset_commit_timeout_ms=get("offsets.commit.timeout.ms"),
            offsets_topic_num_partitions=get("offsets.topic.num.partitions"),
            offsets_topic_replication_factor=get("offsets.topic.replication.factor"),
            offsets_topic_segment_bytes=get("offsets.topic.segment.bytes"),
        )
