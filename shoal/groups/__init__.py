"""Consumer groups and committed offsets (Kafka's group coordinator).

- ``coordinator``: :class:`GroupCoordinator`, one per broker: owns the ``__consumer_offsets``
  partitions this node leads, loads them, serves groups and offsets, expires offsets;
- ``classic``: the classic protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) state machine;
- ``group``: what every kind of group offers the offset and admin APIs (a second protocol,
  KIP-848, plugs in here);
- ``offsets``: the committed-offset store (with the pending offsets of open transactions); ``records``: Kafka's record formats in
  ``__consumer_offsets`` and the group → partition hash; ``storage``: the log the coordinator
  writes to; ``runtime``: the ownership of an internal topic's partitions (loading, unloading,
  creating the topic) that this coordinator and the transaction coordinator share; ``timer``:
  keyed timeouts on an injected clock; ``config``: its settings.

The wire handlers live in ``shoal.handlers.groups`` and ``shoal.handlers.offsets``.
"""

from shoal.groups.classic import ClassicGroup, ClassicGroupState, JoinRequest, JoinResult, SyncResult
from shoal.groups.config import GroupConfig
from shoal.groups.coordinator import CommitRequest, FetchedOffset, GroupCoordinator
from shoal.groups.group import Group, OffsetAndMetadata
from shoal.groups.records import OFFSETS_TOPIC, partition_for
from shoal.groups.storage import BrokerCoordinatorLog, CoordinatorLog, MemoryCoordinatorLog

__all__ = [
    "OFFSETS_TOPIC",
    "BrokerCoordinatorLog",
    "ClassicGroup",
    "ClassicGroupState",
    "CommitRequest",
    "CoordinatorLog",
    "FetchedOffset",
    "Group",
    "GroupConfig",
    "GroupCoordinator",
    "JoinRequest",
    "JoinResult",
    "MemoryCoordinatorLog",
    "OffsetAndMetadata",
    "SyncResult",
    "partition_for",
]
