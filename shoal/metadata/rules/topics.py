"""Topic rules: creation, deletion, added partitions, renames, partition (leader/ISR) changes.

Invariants: a name names at most one topic; topic ids are never the zero uuid and never reused
within the image; at creation (and for added partitions) leader = first replica, ISR = all
replicas but the observers (``replica.placement``), leader epoch 0; an observer enters the ISR
only by automatic promotion (``alter_isr`` checks the topic's policy); a leader change bumps ``leader_epoch`` and any partition change bumps
``partition_epoch`` (KRaft's PartitionChangeRecord).
"""

from __future__ import annotations

import dataclasses
import uuid
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

from shoal.metadata import IsrChange, MetadataError, MetadataImage, PartitionInfo, TopicInfo, frozen_topic
from shoal.metadata.change import Change, Result, unchanged
from shoal.metadata.partition_change import PartitionChange
from shoal.metadata.rules import existing_topic
from shoal.placement.promotion import promotion_allowed, promotion_policy


def new_partitions(first: int, assignments: list[tuple[int, ...]],
                   observers: Sequence[tuple[int, ...]] | None = None) -> tuple[PartitionInfo, ...]:
    """Partitions ``first, first + 1, ...`` with these replicas (and observers among them: out
    of the ISR, never the leader), every sync replica in the ISR, the first leading."""
    out = []
    for i, replicas in enumerate(assignments):
        replicas = tuple(int(r) for r in replicas)
        obs = tuple(int(r) for r in observers[i]) if observers else ()
        if any(r not in replicas for r in obs):
            raise MetadataError("INVALID_REPLICA_ASSIGNMENT", f"Observers {list(obs)} are not among replicas {list(replicas)}.")
        sync = tuple(r for r in replicas if r not in obs)
        if replicas and not sync:
            raise MetadataError("INVALID_REPLICA_ASSIGNMENT", "A partition needs at least one replica that is not an observer.")
        out.append(
            PartitionInfo(
                partition=first + i,
                replicas=replicas,
                isr=sync,
                leader=sync[0] if sync else -1,
                leader_epoch=0,
                partition_epoch=0,
                observers=obs,
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
    observers: Sequence[tuple[int, ...]] | None = None,
) -> Result[TopicInfo]:
    if name in image.topics:
        raise MetadataError("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
    topic = frozen_topic(
        name=name,
        topic_id=fresh_topic_id(image, new_uuid),
        partitions=new_partitions(0, list(assignments), observers),
        configs=configs,
        internal=internal,
    )
    return Result(Change(topics={name: topic}), topic)


def delete_topic(image: MetadataImage, name: str) -> Result[TopicInfo]:
    topic = existing_topic(image, name)
    return Result(Change(topics={name: None}), topic)


def add_partitions(image: MetadataImage, name: str, assignments: list[tuple[int, ...]],
                   observers: Sequence[tuple[int, ...]] | None = None) -> Result[TopicInfo]:
    topic = existing_topic(image, name)
    new = dataclasses.replace(
        topic, partitions=topic.partitions + new_partitions(len(topic.partitions), list(assignments), observers))
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
    change = PartitionChange(p)
    if replicas is not None:
        change.replicas(replicas)
    if isr is not None:
        change.isr(isr)
    if leader is not None:
        change.leader(leader)
    np = change.build(always=True)  # an explicit write: a new partition epoch, as before
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
    min_isr: int | None = None,
) -> Result[PartitionInfo]:
    """A leader's ISR change (Kafka's AlterPartition): accepted only from the current leader in its
    current leader epoch, against the partition epoch it decided on, so a deposed leader or a
    change decided on a stale ISR cannot commit (FENCED_LEADER_EPOCH / INVALID_UPDATE_VERSION).
    The new ISR holds the leader and only replicas; the partition epoch is bumped.

    Observers join the ISR only by automatic promotion: the topic's ``replica.placement`` is
    version 2 with a policy that promotes under this ISR, and no more observers than it needs
    (``shoal.placement.promotion.promotion_allowed``; ``min_isr`` is the leader's ``min.insync.replicas``,
    else the topic's, else 1)."""
    topic = existing_topic(image, name)
    np = _isr_change(topic, topic.partitions, IsrChange(name, partition, leader, leader_epoch, partition_epoch,
                                                        tuple(isr), min_isr))
    if np is None:
        return unchanged(topic.partitions[partition])
    parts = list(topic.partitions)
    parts[partition] = np
    return Result(Change(topics={name: dataclasses.replace(topic, partitions=tuple(parts))}), np)


def _isr_change(topic: TopicInfo, partitions: Sequence[PartitionInfo], c: IsrChange) -> PartitionInfo | None:
    """:func:`alter_isr`'s decision for one partition of ``topic`` (whose partitions are
    ``partitions``: a batch's, with its earlier changes): the partition after it, None when the
    ISR is already ``c.isr``; MetadataError when refused."""
    name, partition, leader, isr = c.topic, c.partition, c.leader, c.isr
    if not 0 <= partition < len(partitions):
        raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"Partition {name}-{partition} does not exist.")
    p = partitions[partition]
    if p.leader != leader or p.leader_epoch != c.leader_epoch:
        raise MetadataError(
            "FENCED_LEADER_EPOCH",
            f"{name}-{partition}: leader {leader} in epoch {c.leader_epoch}, but the leader is {p.leader} "
            f"in epoch {p.leader_epoch}",
        )
    if p.partition_epoch != c.partition_epoch:
        raise MetadataError(
            "INVALID_UPDATE_VERSION",
            f"{name}-{partition}: partition epoch {c.partition_epoch} is stale (now {p.partition_epoch})",
        )
    if leader not in isr or any(r not in p.replicas for r in isr) or len(set(isr)) != len(isr):
        raise MetadataError("INVALID_REQUEST", f"{name}-{partition}: ISR {list(isr)} must hold the leader, "
                            f"replicas only ({list(p.replicas)})")
    if any(r in p.observers and r not in p.isr for r in isr):
        policy = promotion_policy(topic.configs.get("replica.placement") or "")
        min_isr = c.min_isr if c.min_isr is not None else _int_config(topic, "min.insync.replicas", 1)
        if not promotion_allowed(policy, old_isr=p.isr, new_isr=isr, sync_replicas=p.sync_replicas,
                                 observers=p.observers, leader=leader, min_isr=min_isr):
            why = (f"its observerPromotionPolicy {policy} does not promote with ISR {list(p.isr)} and "
                   f"min.insync.replicas {min_isr}" if policy else "its replica.placement promotes no observer")
            raise MetadataError("INVALID_REQUEST", f"{name}-{partition}: ISR {list(isr)} holds an observer "
                                f"({list(p.observers)}): {why}")
    if isr == p.isr:
        return None
    return PartitionChange(p).isr(isr).build()


IsrAnswer = PartitionInfo | MetadataError | None


def alter_isrs(
    image: MetadataImage, changes: Sequence[IsrChange], admit: Callable[[TopicInfo], bool] = lambda t: True,
) -> Result[list[IsrAnswer]]:
    """Many leaders' ISR changes as one change (Kafka's AlterPartition request carries many
    partitions): each decided as :func:`alter_isr` decides it, on the image with the batch's
    earlier changes, so a stale or fenced one fails alone and the others commit. Per change, in
    order: the partition after it (or as it is, when its ISR already is that), the
    ``MetadataError`` refusing it, or None: left out because its topic did not fit.

    ``admit`` bounds the change (a backend's transaction limits: ``MetadataBackend.txn_budget``):
    it is asked once per topic the change would write, in order, with the topic as it is in
    ``image``; a topic it refuses stays out of this change and its changes are answered None (the
    caller decides them again, in another change). The first topic is always admitted, so every
    call with a change to make makes progress."""
    parts: dict[str, list[PartitionInfo]] = {}
    refused: set[str] = set()
    answers: list[IsrAnswer] = []
    for c in changes:
        topic = image.topics.get(c.topic)
        if c.topic in refused:
            answers.append(None)
            continue
        try:
            if topic is None:
                raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition.")
            np = _isr_change(topic, parts.get(c.topic, topic.partitions), c)
        except MetadataError as e:
            answers.append(e)
            continue
        if np is None:
            answers.append(parts.get(c.topic, topic.partitions)[c.partition])
            continue
        if c.topic not in parts:
            if not admit(topic) and parts:
                refused.add(c.topic)
                answers.append(None)
                continue
            parts[c.topic] = list(topic.partitions)
        parts[c.topic][c.partition] = np
        answers.append(np)
    if not parts:
        return unchanged(answers)
    topics: dict[str, TopicInfo | None] = {
        n: dataclasses.replace(image.topics[n], partitions=tuple(ps)) for n, ps in parts.items()}
    return Result(Change(topics=topics), answers)


def _int_config(topic: TopicInfo, key: str, default: int) -> int:
    try:
        return int(topic.configs.get(key) or default)
    except ValueError:
        return default


# -- reassignment (KIP-455) -----------------------------------------------------------------------


def _with_partition(image: MetadataImage, name: str, np: PartitionInfo) -> Change:
    topic = image.topics[name]
    parts = list(topic.partitions)
    parts[np.partition] = np
    return Change(topics={name: dataclasses.replace(topic, partitions=tuple(parts))})


def _existing_partition(image: MetadataImage, name: str, partition: int) -> PartitionInfo:
    """(Messages name no topic: a tenant's answer must not show its physical names.)"""
    topic = existing_topic(image, name)
    if not 0 <= partition < len(topic.partitions):
        raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition.")
    return topic.partitions[partition]


def start_reassignment(
    image: MetadataImage, name: str, partition: int, target: tuple[int, ...],
    target_observers: tuple[int, ...] | None = None,
) -> Result[PartitionInfo]:
    """AlterPartitionReassignments with a target (KRaft's ``PartitionReassignmentReplicas``):
    replicas = target + the current replicas not in it (in that order), adding = target -
    current, removing = current - target; leader and ISR unchanged, partition epoch bumped. The
    adding replicas start as followers and catch up; :func:`complete_reassignment` finishes.
    A partition already being reassigned gets the new target, computed against its current
    replicas (Kafka's override). A target that is empty, repeats a broker or names an
    unregistered one: INVALID_REPLICA_ASSIGNMENT. A target equal to the replicas of a partition
    not being reassigned changes nothing.

    ``target_observers`` (a ``replica.placement`` change): the observers among ``target``. While
    the reassignment runs, the observers are the target's plus the current observers leaving;
    a current observer that the target makes a sync replica may join the ISR at once, and a sync
    replica the target makes an observer stays in the ISR until the reassignment completes. A
    target with the current replicas (roles swapped only) has nothing to complete: its roles apply
    at once (:func:`_roles_changed`).
    Without it (a manual reassignment), a partition with observers is refused: the request
    cannot say which replicas observe."""
    p = _existing_partition(image, name, partition)
    target = tuple(int(r) for r in target)
    if p.observers and target_observers is None:
        raise MetadataError("INVALID_REPLICA_ASSIGNMENT",
                            f"{name}-{partition} has observers (replica.placement): change the topic's "
                            "replica.placement to move them")
    target_observers = tuple(int(r) for r in target_observers or ())
    if not target:
        raise MetadataError("INVALID_REPLICA_ASSIGNMENT", "The manual partition assignment includes an empty replica list.")
    dup = next((r for i, r in enumerate(target) if r in target[:i]), None)
    if dup is not None:
        raise MetadataError("INVALID_REPLICA_ASSIGNMENT",
                            f"The manual partition assignment includes the replica {dup} more than once.")
    unknown = next((r for r in target if r not in image.brokers), None)
    if unknown is not None:
        raise MetadataError("INVALID_REPLICA_ASSIGNMENT",
                            f"The manual partition assignment includes broker {unknown}, but no such broker is registered.")
    if any(r not in target for r in target_observers) or len(target_observers) >= len(target):
        raise MetadataError("INVALID_REPLICA_ASSIGNMENT",
                            f"observers {list(target_observers)} must be among the target {list(target)}, with at "
                            "least one replica that is not an observer")
    current = p.replicas
    replicas = target + tuple(r for r in current if r not in target)
    adding = tuple(r for r in target if r not in current)
    removing = tuple(r for r in current if r not in target)
    observers = p.observers
    if target_observers or p.observers:
        observers = tuple(r for r in replicas if r in target_observers or (r in p.observers and r in removing))
    if (replicas, adding, removing, observers) == (p.replicas, p.adding, p.removing, p.observers):
        return unchanged(p)
    if not any(r in p.isr and r not in observers for r in replicas):
        raise MetadataError("INVALID_REPLICA_ASSIGNMENT",
                            f"{name}-{partition}: no in-sync replica would stay a sync replica (ISR {list(p.isr)})")
    if not adding and not removing:
        np = _roles_changed(p, replicas, observers)
    else:
        np = PartitionChange(p).replicas(replicas).reassignment(adding, removing).observers(observers).build()
    return Result(_with_partition(image, name, np), np)


def _roles_changed(p: PartitionInfo, replicas: tuple[int, ...], observers: tuple[int, ...]) -> PartitionInfo:
    """A target with the partition's own replicas and other roles (a ``replica.placement`` change
    that swaps a sync replica and an observer): nothing is copied, so no reassignment would ever
    complete; the roles change at once, as KRaft's PartitionChangeBuilder does when the leader is
    no longer eligible. The replicas the target makes observers leave the ISR, and a leader among
    them hands over to the target's first sync replica in the ISR (a new leader epoch; the caller
    checked one is there, and every ISR member has every acknowledged record). A former observer
    that becomes a sync replica joins the ISR when the leader finds it caught up; until then the
    ISR may be smaller than before. Observers already in the ISR (promoted) stay: their leader
    demotes them by the topic's policy."""
    demoted = tuple(r for r in observers if r not in p.observers)
    isr = tuple(r for r in p.isr if r not in demoted)
    leader = p.leader
    if leader in observers:
        leader = next(r for r in replicas if r in isr and r not in observers)
    return (PartitionChange(p).replicas(replicas).isr(isr).leader(leader).observers(observers)
            .reassignment((), ()).build())


def change_placement(
    image: MetadataImage, name: str, configs: Mapping[str, str],
    targets: Sequence[tuple[tuple[int, ...], tuple[int, ...]]],
) -> Result[TopicInfo]:
    """A topic's ``replica.placement`` changes: its configs become ``configs`` and each partition
    ``i`` is reassigned to ``targets[i]`` = (replicas, observers) (:func:`start_reassignment`;
    partitions already there are left alone), as one change. The controller completes each
    reassignment when the target's sync replicas are in the ISR."""
    topic = existing_topic(image, name)
    if len(targets) != len(topic.partitions):
        raise MetadataError("INVALID_REPLICA_ASSIGNMENT",
                            f"{len(targets)} targets for the {len(topic.partitions)} partitions of {name}")
    work = Change(topics={name: dataclasses.replace(topic, configs=MappingProxyType(dict(configs)))}).apply(image)
    for i, (replicas, observers) in enumerate(targets):
        p = work.topics[name].partitions[i]
        if (p.replicas, p.observers) == (tuple(replicas), tuple(observers)) and not p.reassigning:
            continue
        r = start_reassignment(work, name, i, tuple(replicas), tuple(observers))
        if r.change is not None:
            work = r.change.apply(work)
    final = work.topics[name]
    return Result(Change(topics={name: final}), final)


def cancel_reassignment(image: MetadataImage, name: str, partition: int) -> Result[PartitionInfo]:
    """AlterPartitionReassignments with a null target (KRaft's ``PartitionReassignmentRevert``):
    back to the replicas before it (current - adding), the ISR without the adding replicas,
    adding/removing cleared; a leader that was an adding replica hands over to the first remaining
    ISR member (a new leader epoch). An ISR left empty takes the first original replica (Kafka does
    the same, as an unclean choice). NO_REASSIGNMENT_IN_PROGRESS when none runs."""
    p = _existing_partition(image, name, partition)
    if not p.reassigning:
        raise MetadataError("NO_REASSIGNMENT_IN_PROGRESS", "No reassignment is in progress for this partition.")
    replicas = tuple(r for r in p.replicas if r not in p.adding)
    isr = tuple(r for r in p.isr if r not in p.adding) or replicas[:1]
    leader = p.leader if p.leader in replicas else next((r for r in replicas if r in isr), -1)
    observers = tuple(r for r in p.observers if r in replicas)  # (a placement change's: see start_reassignment)
    np = (PartitionChange(p).replicas(replicas).isr(isr).leader(leader).reassignment((), ())
          .observers(observers).build())
    return Result(_with_partition(image, name, np), np)


def reassignment_done(p: PartitionInfo) -> bool:
    """A reassignment may complete once every target replica is in the ISR (KRaft's
    ``maybeCompleteReassignment``; so every adding one is, and the ISR left is not empty).
    Target observers replicate asynchronously: only the target's sync replicas count."""
    return p.reassigning and all(r in p.isr for r in p.replicas if r not in p.removing and r not in p.observers)


def complete_reassignment(p: PartitionInfo) -> PartitionInfo | None:
    """The partition after its reassignment completes (None while it may not: see
    :func:`reassignment_done`): replicas = target, ISR = ISR ∩ target (without the target's
    observers), observers = the target's, adding/removing cleared; a leader outside the target's
    sync replicas hands over to the first of them in the ISR (a new leader epoch), as KRaft's
    PartitionChangeBuilder elects when the leader is removed."""
    if not reassignment_done(p):
        return None
    target = tuple(r for r in p.replicas if r not in p.removing)
    observers = tuple(r for r in p.observers if r in target)
    sync = tuple(r for r in target if r not in observers)
    target = sync + observers  # observers last, as placement lists them
    isr = tuple(r for r in p.isr if r in sync)
    leader = p.leader if p.leader in sync else next(r for r in sync if r in isr)
    return (PartitionChange(p).replicas(target).isr(isr).leader(leader).reassignment((), ())
            .observers(observers).build())


def complete_reassignments(image: MetadataImage) -> Result[list[tuple[str, int]]]:
    """Every reassignment that may complete, as one change; the response names the partitions."""
    topics: dict[str, TopicInfo | None] = {}
    done = []
    for name, topic in image.topics.items():
        parts = list(topic.partitions)
        for i, p in enumerate(parts):
            np = complete_reassignment(p) if p.reassigning else None
            if np is not None:
                parts[i] = np
                done.append((name, p.partition))
                topics[name] = dataclasses.replace(topic, partitions=tuple(parts))
    if not topics:
        return unchanged([])
    return Result(Change(topics=topics), done)


def ongoing_reassignments(
    image: MetadataImage, wanted: list[tuple[str, int]] | None = None
) -> list[tuple[str, PartitionInfo]]:
    """ListPartitionReassignments: (topic, partition) of every partition being reassigned, or of
    those of ``wanted`` that are (unknown ones are left out, as Kafka does)."""
    out: list[tuple[str, PartitionInfo]] = []
    if wanted is None:
        for name, topic in image.topics.items():
            out.extend((name, p) for p in topic.partitions if p.reassigning)
        return out
    for name, index in wanted:
        found = image.topics.get(name)
        if found is not None and 0 <= index < len(found.partitions) and found.partitions[index].reassigning:
            out.append((name, found.partitions[index]))
    return out


def alter_reassignments(
    image: MetadataImage, wanted: list[tuple[str, int, tuple[int, ...] | None]]
) -> Result[dict[tuple[str, int], tuple[str, str | None]]]:
    """AlterPartitionReassignments: each ``(topic, partition, target or None to cancel)`` decided
    in turn (:func:`start_reassignment`, :func:`cancel_reassignment`), one change for all; per
    partition ``(error code name, message)``, NONE when accepted."""
    work = image
    changed: dict[str, TopicInfo | None] = {}
    results: dict[tuple[str, int], tuple[str, str | None]] = {}
    for name, index, target in wanted:
        try:
            if target is None:
                r = cancel_reassignment(work, name, index)
            else:
                r = start_reassignment(work, name, index, target)
        except MetadataError as e:
            results[(name, index)] = (e.code, e.message)
            continue
        if r.change is not None:
            work = r.change.apply(work)
            changed[name] = work.topics[name]
        results[(name, index)] = ("NONE", None)
    return Result(Change(topics=changed) if changed else None, results)
