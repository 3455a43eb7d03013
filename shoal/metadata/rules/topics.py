"""Topic rules: creation, deletion, added partitions, renames, partition (leader/ISR) changes.

Invariants: a name names at most one topic; topic ids are never the zero uuid and never reused
within the image; at creation (and for added partitions) leader = first replica, ISR = all
replicas, leader epoch 0; a leader change bumps ``leader_epoch`` and any partition change bumps
``partition_epoch`` (KRaft's PartitionChangeRecord).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Callable, Mapping

from shoal.metadata import MetadataError, MetadataImage, PartitionInfo, TopicInfo, frozen_topic
from shoal.metadata.change import Change, Result, unchanged
from shoal.metadata.rules import existing_topic


def new_partitions(first: int, assignments: list[tuple[int, ...]]) -> tuple[PartitionInfo, ...]:
    out = []
    for i, replicas in enumerate(assignments):
        replicas = tuple(int(r) for r in replicas)
        out.append(
            PartitionInfo(
                partition=first + i,
                replicas=replicas,
                isr=replicas,
                leader=replicas[0] if replicas else -1,
                leader_epoch=0,
                partition_epoch=0,
            )
        )
    return tuple(out)


def fresh_topic_id(image: MetadataImage, new_uuid: Callable[[], uuid.UUID]) -> uuid.UUID:
    """The first id ``new_uuid`` draws that is not zero and names no topic of ``image``."""
    while True:
        tid = new_uuid()
        if tid.int != 0 and tid not in image.topics_by_id:
            return tid


def create_topic(
    image: MetadataImage,
    name: str,
    assignments: list[tuple[int, ...]],
    configs: Mapping[str, str],
    *,
    internal: bool = False,
    new_uuid: Callable[[], uuid.UUID],
) -> Result[TopicInfo]:
    if name in image.topics:
        raise MetadataError("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
    topic = frozen_topic(
        name=name,
        topic_id=fresh_topic_id(image, new_uuid),
        partitions=new_partitions(0, list(assignments)),
        configs=configs,
        internal=internal,
    )
    return Result(Change(topics={name: topic}), topic)


def delete_topic(image: MetadataImage, name: str) -> Result[TopicInfo]:
    topic = existing_topic(image, name)
    return Result(Change(topics={name: None}), topic)


def add_partitions(image: MetadataImage, name: str, assignments: list[tuple[int, ...]]) -> Result[TopicInfo]:
    topic = existing_topic(image, name)
    new = dataclasses.replace(topic, partitions=topic.partitions + new_partitions(len(topic.partitions), list(assignments)))
    return Result(Change(topics={name: new}), new)


def rename_topic(image: MetadataImage, old_name: str, new_name: str) -> Result[TopicInfo]:
    """Same id, partitions and configs under ``new_name``; the old name goes into
    ``renamed_topics`` in the same change (tenancy: committed offsets follow the topic)."""
    topic = existing_topic(image, old_name)
    if new_name in image.topics:
        raise MetadataError("TOPIC_ALREADY_EXISTS", f"Topic '{new_name}' already exists.")
    new = dataclasses.replace(topic, name=new_name)
    return Result(Change(topics={old_name: None, new_name: new}, renamed_topics={old_name: topic.topic_id}), new)


def update_partition(
    image: MetadataImage,
    name: str,
    partition: int,
    *,
    leader: int | None = None,
    isr: tuple[int, ...] | None = None,
    replicas: tuple[int, ...] | None = None,
) -> Result[PartitionInfo]:
    topic = existing_topic(image, name)
    if not 0 <= partition < len(topic.partitions):
        raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"Partition {name}-{partition} does not exist.")
    p = topic.partitions[partition]
    new_leader = p.leader if leader is None else leader
    np = PartitionInfo(
        partition=p.partition,
        replicas=p.replicas if replicas is None else tuple(replicas),
        isr=p.isr if isr is None else tuple(isr),
        leader=new_leader,
        leader_epoch=p.leader_epoch + (1 if new_leader != p.leader else 0),
        partition_epoch=p.partition_epoch + 1,
    )
    parts = list(topic.partitions)
    parts[partition] = np
    return Result(Change(topics={name: dataclasses.replace(topic, partitions=tuple(parts))}), np)


def alter_isr(
    image: MetadataImage,
    name: str,
    partition: int,
    *,
    leader: int,
    leader_epoch: int,
    partition_epoch: int,
    isr: tuple[int, ...],
) -> Result[PartitionInfo]:
    """A leader's ISR change (Kafka's AlterPartition): accepted only from the current leader in its
    current leader epoch, against the partition epoch it decided on, so a deposed leader or a
    change decided on a stale ISR cannot commit (FENCED_LEADER_EPOCH / INVALID_UPDATE_VERSION).
    The new ISR holds the leader and only replicas; the partition epoch is bumped."""
    topic = existing_topic(image, name)
    if not 0 <= partition < len(topic.partitions):
        raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"Partition {name}-{partition} does not exist.")
    p = topic.partitions[partition]
    if p.leader != leader or p.leader_epoch != leader_epoch:
        raise MetadataError(
            "FENCED_LEADER_EPOCH",
            f"{name}-{partition}: leader {leader} in epoch {leader_epoch}, but the leader is {p.leader} "
            f"in epoch {p.leader_epoch}",
        )
    if p.partition_epoch != partition_epoch:
        raise MetadataError(
            "INVALID_UPDATE_VERSION",
            f"{name}-{partition}: partition epoch {partition_epoch} is stale (now {p.partition_epoch})",
        )
    isr = tuple(isr)
    if leader not in isr or any(r not in p.replicas for r in isr) or len(set(isr)) != len(isr):
        raise MetadataError("INVALID_REQUEST", f"{name}-{partition}: ISR {list(isr)} must hold the leader, "
                            f"replicas only ({list(p.replicas)})")
    if isr == p.isr:
        return unchanged(p)
    np = dataclasses.replace(p, isr=isr, partition_epoch=p.partition_epoch + 1)
    parts = list(topic.partitions)
    parts[partition] = np
    return Result(Change(topics={name: dataclasses.replace(topic, partitions=tuple(parts))}), np)
