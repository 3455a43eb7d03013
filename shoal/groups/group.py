"""What the coordinator needs of any kind of group, and the committed-offset record.

Offsets, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete and offset expiry work on
``Group`` only; the classic protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) is one kind
(``shoal.groups.classic``), and the KIP-848 consumer protocol plugs in as another: a subclass with
``group_type = "consumer"`` stored in the same ``GroupCoordinator.groups`` map (one namespace of
group ids, as in Kafka), with its own records registered through
``GroupCoordinator.register_record_type``.

Validation methods return an ``ErrorCode`` (``ErrorCode.none`` when the operation may go on)
rather than raising, so callers build responses without exception plumbing.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

from shoal.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int  # -1 when the client did not say
    metadata: str
    commit_timestamp: int  # ms, when the coordinator accepted it
    expire_timestamp: int = -1  # ms; only OffsetCommit v2-v4 with an explicit retention_time
    record_offset: int = -1  # where its record sits in __consumer_offsets (orders replays/applies)


def tenant_of_group(group_id: str) -> str | None:
    """The tenant id a physical group id is qualified with (``lkc-3f9a2c_g`` -> ``lkc-3f9a2c``),
    whether or not that tenant exists (``shoal.metadata.owner_tenant`` asks the image)."""
    if len(group_id) > 11 and group_id[10] == "_" and group_id.startswith("lkc-"):
        return group_id[:10]
    return None


class Group(abc.ABC):
    """A group of any protocol, as the offset and admin APIs see it."""

    group_type: ClassVar[str]  # ListGroups v5 "classic" / "consumer"

    def __init__(self, group_id: str, partition: int) -> None:
        self.group_id = group_id
        self.partition = partition  # of __consumer_offsets

    @property
    @abc.abstractmethod
    def state_name(self) -> str:
        """As DescribeGroups and ListGroups spell it ("Stable", "Empty", ...)."""

    @property
    @abc.abstractmethod
    def protocol_type(self) -> str | None: ...

    @abc.abstractmethod
    def is_empty(self) -> bool: ...

    @abc.abstractmethod
    def is_dead(self) -> bool: ...

    def in_states(self, states_lower: set[str]) -> bool:
        return self.state_name.lower() in states_lower

    @abc.abstractmethod
    def validate_offset_commit(
        self, member_id: str, instance_id: str | None, generation_or_epoch: int, api_version: int,
        *, transactional: bool = False,
    ) -> ErrorCode:
        """OffsetCommit's rules (``api_version`` its version), or TxnOffsetCommit's
        (``transactional``: member id, generation and instance id are optional there)."""

    def on_offset_commit(self, member_id: str) -> None:
        """A commit was accepted from ``member_id`` (the classic protocol keeps its session alive)."""

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        return ErrorCode.group_id_not_found if self.is_dead() else ErrorCode.none

    @abc.abstractmethod
    def validate_offset_delete(self) -> ErrorCode: ...

    @abc.abstractmethod
    def validate_delete(self) -> ErrorCode: ...

    @abc.abstractmethod
    def is_subscribed_to_topic(self, topic: str) -> bool: ...

    @abc.abstractmethod
    def offset_expiration_base(self, offset: OffsetAndMetadata) -> int | None:
        """The time from which ``offsets.retention.minutes`` counts for ``offset``; None: keep it."""

    @abc.abstractmethod
    def mark_dead(self) -> None:
        """The group is being deleted or unloaded: fail whatever requests are parked on it."""

    def tombstone_records(self) -> list[tuple[bytes, bytes | None]]:
        """Tombstones for every record naming the group in ``__consumer_offsets`` except its
        offsets (DeleteGroups, expiry). The classic protocol has one; KIP-848 groups several."""
        from shoal.groups.records import group_metadata_key

        return [(group_metadata_key(self.group_id), None)]
