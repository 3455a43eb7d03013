"""Cluster rules: broker registrations and producer id blocks (Kafka's AllocateProducerIds)."""

from __future__ import annotations

from shoal.metadata import BrokerInfo, MetadataError, MetadataImage
from shoal.metadata.change import Change, Result, unchanged

MAX_PRODUCER_ID = 2**63 - 1


def register_broker(image: MetadataImage, info: BrokerInfo) -> Result[None]:
    if image.brokers.get(info.node_id) == info:
        return unchanged(None)
    return Result(Change(brokers={info.node_id: info}), None)


def allocate_producer_ids(image: MetadataImage, count: int) -> Result[tuple[int, int]]:
    """The next ``count`` ids, ``(first, count)``: once committed, no later block overlaps them."""
    if count <= 0:
        raise ValueError(f"cannot allocate {count} producer ids")
    first = image.next_producer_id
    if first + count > MAX_PRODUCER_ID:
        raise MetadataError("UNKNOWN_SERVER_ERROR", "producer ids are exhausted")
    return Result(Change(next_producer_id=first + count), (first, count))
