"""Routing: which partitions this broker serves, and where a client should go instead.

Produce, Fetch, ListOffsets and DeleteRecords are answered by a partition's leader only (Kafka's
``ReplicaManager.getPartitionOrError``). Every handler asks the replica manager
(``ReplicaManager.leader``): the partition when this broker leads it, else None, and the handler
answers NOT_LEADER_OR_FOLLOWER. With it goes
KIP-951's hint, so a client re-routes without refreshing its metadata first: the leader's id and
epoch in the partition (``current_leader``: Produce v10+, Fetch v12+) and that leader's endpoint,
on the listener the client used, in the response (``node_endpoints``: Produce v10+, Fetch v16+).

A partition whose leader is -1 (offline: no live member of its ISR) is NOT_LEADER_OR_FOLLOWER
everywhere, with leader -1, as Kafka answers (``LEADER_NOT_AVAILABLE`` is Metadata's code).

OffsetsForLeaderEpoch (key 23) is not served by Shoal yet (a replication API); when it is, its
handler asks ``ReplicaManager.leader`` too.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Iterable

from shoal.protocol.codec import build

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from shoal.metadata import MetadataImage, PartitionInfo

__all__ = ["current_leader", "node_endpoints"]


def current_leader(mod: ModuleType, pinfo: "PartitionInfo | None") -> dict[str, object]:
    """KIP-951 ``current_leader`` of a NOT_LEADER_OR_FOLLOWER partition, as keyword arguments for
    ``build`` (empty for versions without the field)."""
    cls = getattr(mod, "LeaderIdAndEpoch", None)
    if cls is None or pinfo is None:
        return {}
    return {"current_leader": build(cls, leader_id=pinfo.leader, leader_epoch=pinfo.leader_epoch)}


def node_endpoints(mod: ModuleType, image: "MetadataImage", leaders: Iterable[int], listener: str) -> tuple[Entity, ...]:
    """KIP-951 ``node_endpoints``: the live brokers among ``leaders``, with their endpoint on
    ``listener``, sorted by id (empty for versions without the field)."""
    cls = getattr(mod, "NodeEndpoint", None)
    if cls is None:
        return ()
    out = []
    for node in sorted({n for n in leaders if n >= 0}):
        b = image.brokers.get(node)
        if b is None:
            continue
        host, port = b.endpoint(listener)
        out.append(build(cls, node_id=node, host=host, port=port, rack=b.rack))
    return tuple(out)
