"""Committed offsets: OffsetCommit (8) v2-v10, OffsetFetch (9) v1-v10, OffsetDelete (47) v0,
TxnOffsetCommit (28) v0-v5.

Topic checks happen here, as in Kafka's ``KafkaApis``: a commit or delete for a topic or partition
the cluster does not have gets UNKNOWN_TOPIC_OR_PARTITION (v10, by topic id: UNKNOWN_TOPIC_ID) and
never reaches the coordinator; the rest go to ``shoal.groups.GroupCoordinator``. OffsetFetch takes
any topic and answers -1 for offsets never committed. OffsetFetch v8+ fetches several groups in one
request (each with its own error); v10 names topics by id (OffsetCommit v10 too).

A commit is answered once its record is in ``__consumer_offsets`` and the high watermark passed it.

TxnOffsetCommit (KIP-98; v3 adds the group's generation, member id and instance id, KIP-447) goes to
``GroupCoordinator.commit_txn_offsets``: the offsets are appended in a transactional batch of the
producer and stay invisible until the transaction commits. As Kafka 3.6+ (KIP-890 part 1), when the
group's ``__consumer_offsets`` partition has no ongoing transaction of the producer yet, the
transaction coordinator (``services.txn.verify``) must confirm that AddOffsetsToTxn put the
partition in the transaction, else the producer's error (INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH;
coordinator trouble COORDINATOR_NOT_AVAILABLE), so no commit opens a transaction that nobody will
ever end. OffsetFetch v7+ with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for a partition
with such pending offsets (the client retries).

Tenancy (``ctx.scope``): group ids and topic names arrive as the client sees them and reach the
coordinator qualified; topic ids resolve only to the scope's topics (another tenant's id is
UNKNOWN_TOPIC_ID); responses carry the client's names. OffsetFetch of all topics lists only the
scope's topics. Another tenant's group is exactly a group that does not exist.

Authorization, as Kafka's ``KafkaApis``: OffsetCommit needs READ on the group, then READ on each
topic; OffsetFetch DESCRIBE on the group, then DESCRIBE on each topic (for all topics, the topics
without it are left out); OffsetDelete DELETE on the group, then READ on each topic. A denied group
is GROUP_AUTHORIZATION_FAILED (OffsetCommit: on every partition; OffsetFetch v1: on every
requested partition), a denied topic TOPIC_AUTHORIZATION_FAILED on its partitions, checked before
whether the topic exists. TxnOffsetCommit needs WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition), then READ on the group (else
GROUP_AUTHORIZATION_FAILED on every partition), then READ on each topic. Transactional ids are
scoped to the tenant like group ids (ACLs name them as the tenant does).

Deviations from Kafka:
- OffsetCommit v0-v1 and OffsetFetch v0 are not offered (Kafka 4 removed them too, KIP-896).
- OffsetFetch v10 for all topics lists only topics that still exist (others have no id to show).
"""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any, Sequence

from shoal.groups import OFFSETS_TOPIC, CommitRequest
from shoal.groups.coordinator import coordinator_error
from shoal.handlers.registry import api
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode
from shoal.tenancy.acl import Operation, ResourceType
from shoal.txn.coordinator import transaction_version

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from shoal.groups import GroupCoordinator
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import (
        OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest,
        OffsetFetchResponse, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
    )

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
OFFSET_DELETE = 47
TXN_OFFSET_COMMIT = 28
ZERO = datetime.timedelta(0)


def _ms(td: datetime.timedelta) -> int:
    return int(td / datetime.timedelta(milliseconds=1))


# -- OffsetCommit --------------------------------------------------------------------------------


@api(OFFSET_COMMIT, 2, 10)
async def handle_offset_commit(ctx: RequestContext, req: OffsetCommitRequest) -> OffsetCommitResponse:
    v = ctx.api_version
    mod = response_module(OFFSET_COMMIT, v)
    image = ctx.services.metadata.image
    scope = ctx.scope
    by_id = v >= 10
    group_denied = not scope.allowed(Operation.READ, ResourceType.GROUP, req.group_id)
    # Per request topic: (name or id, [(partition, error or None=to commit)])
    layout: list[tuple[object, list[tuple[int, ErrorCode | None]]]] = []
    commits: list[CommitRequest] = []
    for t in req.topics:
        if by_id:
            info = scope.topic_by_id(image, getattr(t, "topic_id"))
            name = scope.visible(info.name) if info is not None else None
            missing = ErrorCode.unknown_topic_id
        else:
            name = getattr(t, "name")
            info = scope.topic(image, name)
            missing = ErrorCode.unknown_topic_or_partition
        if group_denied:
            topic_error = ErrorCode.group_authorization_failed
        elif scope.reserved_group(req.group_id):  # tenancy: a tenant's ids are not lkc-xxxxxx_ shaped
            topic_error = ErrorCode.invalid_group_id
        elif by_id and info is None:
            topic_error = missing
        elif name is None or not scope.allowed(Operation.READ, ResourceType.TOPIC, name):  # (name: set when info is)
            topic_error = ErrorCode.topic_authorization_failed
        elif info is None:
            topic_error = missing
        else:
            topic_error = None
        rows: list[tuple[int, ErrorCode | None]] = []
        for p in t.partitions:
            if topic_error is not None:
                rows.append((p.partition_index, topic_error))
            elif info is None or not 0 <= p.partition_index < len(info.partitions):  # (info: set, with no error)
                rows.append((p.partition_index, ErrorCode.unknown_topic_or_partition))
            else:
                rows.append((p.partition_index, None))
                commits.append(
                    CommitRequest(
                        info.name,
                        p.partition_index,
                        p.committed_offset,
                        getattr(p, "committed_leader_epoch", -1),
                        p.committed_metadata,
                    )
                )
        layout.append((getattr(t, "topic_id") if by_id else getattr(t, "name"), rows))

    codes: list[ErrorCode] = []
    if commits:
        retention = _ms(getattr(req, "retention_time")) if 2 <= v <= 4 else -1
        codes = await ctx.services.groups.commit_offsets(
            scope.physical(req.group_id),
            req.member_id,
            getattr(req, "group_instance_id", None),
            req.generation_id_or_member_epoch,
            commits,
            retention_ms=retention,
            api_version=v,
        )
    it = iter(codes)
    topics = []
    for key, rows in layout:
        parts = tuple(
            build(mod.OffsetCommitResponsePartition, partition_index=p, error_code=code if code is not None else next(it))
            for p, code in rows
        )
        topics.append(
            build(mod.OffsetCommitResponseTopic, topic_id=key, partitions=parts)
            if by_id
            else build(mod.OffsetCommitResponseTopic, name=key, partitions=parts)
        )
    return build(mod.OffsetCommitResponse, throttle_time=ZERO, topics=tuple(topics))


# -- TxnOffsetCommit -----------------------------------------------------------------------------


@api(TXN_OFFSET_COMMIT, 0, 5)
async def handle_txn_offset_commit(ctx: RequestContext, req: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    v = ctx.api_version
    mod = response_module(TXN_OFFSET_COMMIT, v)
    image = ctx.services.metadata.image
    scope = ctx.scope

    def response(rows: dict[str, list[tuple[int, ErrorCode]]]) -> TxnOffsetCommitResponse:
        topics = tuple(
            build(mod.TxnOffsetCommitResponseTopic, name=name, partitions=tuple(
                build(mod.TxnOffsetCommitResponsePartition, partition_index=p, error_code=code) for p, code in parts))
            for name, parts in rows.items()
        )
        return build(mod.TxnOffsetCommitResponse, throttle_time=ZERO, topics=topics)

    def everywhere(code: ErrorCode) -> TxnOffsetCommitResponse:
        rows: dict[str, list[tuple[int, ErrorCode]]] = {}
        for t in req.topics:
            rows.setdefault(t.name, []).extend((p.partition_index, code) for p in t.partitions)
        return response(rows)

    if not scope.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return everywhere(ErrorCode.transactional_id_authorization_failed)
    if not scope.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return everywhere(ErrorCode.group_authorization_failed)
    if scope.reserved_group(req.group_id):  # tenancy: a tenant's ids are not lkc-xxxxxx_ shaped
        return everywhere(ErrorCode.invalid_group_id)
    rows: dict[str, list[tuple[int, ErrorCode | None]]] = {}
    commits: list[CommitRequest] = []
    names: dict[str, str] = {}  # physical -> as requested
    for t in req.topics:
        info = scope.topic(image, t.name)
        if not scope.allowed(Operation.READ, ResourceType.TOPIC, t.name):
            topic_error: ErrorCode | None = ErrorCode.topic_authorization_failed
        elif info is None:
            topic_error = ErrorCode.unknown_topic_or_partition
        else:
            topic_error = None
            names[info.name] = t.name
        out = rows.setdefault(t.name, [])
        for p in t.partitions:
            if topic_error is not None:
                out.append((p.partition_index, topic_error))
            elif info is None or not 0 <= p.partition_index < len(info.partitions):  # (info: set, with no error)
                out.append((p.partition_index, ErrorCode.unknown_topic_or_partition))
            else:
                out.append((p.partition_index, None))
                commits.append(CommitRequest(
                    info.name, p.partition_index, p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1), p.committed_metadata,
                ))
    results: dict[tuple[str, int], ErrorCode] = {}
    if commits:
        coord = ctx.services.groups
        code = await _verify_txn(ctx, req, coord)
        if code != ErrorCode.none:
            results = {(c.topic, c.partition): code for c in commits}
        else:
            results = await coord.commit_txn_offsets(
                scope.physical(req.group_id), req.producer_id, req.producer_epoch,
                getattr(req, "member_id", ""), getattr(req, "generation_id", -1),
                getattr(req, "group_instance_id", None), commits,
            )
    if v < 2:  # clients before KAFKA-7296 cannot handle COORDINATOR_LOAD_IN_PROGRESS here
        results = {
            k: ErrorCode.coordinator_not_available if c == ErrorCode.coordinator_load_in_progress else c
            for k, c in results.items()
        }
    physical = {name: phys for phys, name in names.items()}
    return response({
        name: [(p, code if code is not None else results.get((physical[name], p), ErrorCode.unknown_server_error))
               for p, code in parts]
        for name, parts in rows.items()
    })


async def _verify_txn(ctx: RequestContext, req: TxnOffsetCommitRequest, coord: GroupCoordinator) -> ErrorCode:
    """KIP-890 part 1 for TxnOffsetCommit (Kafka's ``maybeStartTransactionVerificationForPartition``):
    NONE when the group's partition of ``__consumer_offsets`` already has an ongoing transaction of
    the producer, or its transaction coordinator says the partition is in the transaction. From v5
    at transaction version 2 (KIP-890 part 2) the coordinator adds the partition instead: the client
    sends no AddOffsetsToTxn."""
    svc = ctx.services
    group = ctx.scope.physical(req.group_id)
    if coord.status(group) != ErrorCode.none:
        return ErrorCode.none  # not ours: said later
    partition = coord.partition_for(group)
    topic = svc.metadata.image.topic(OFFSETS_TOPIC)
    part = svc.replicas.leader(OFFSETS_TOPIC, topic.partitions[partition]) if topic is not None else None
    if part is not None and part.view.ongoing_txn_first_offset(req.producer_id) is not None:
        return ErrorCode.none
    from shoal.handlers.produce import verification_error  # the producer's view of a refusal

    add = ctx.api_version >= 5 and transaction_version(svc.config, svc.metadata.image) >= 2
    codes = await svc.txn.verify(ctx.scope.physical(req.transactional_id), req.producer_id, req.producer_epoch,
                                 [(OFFSETS_TOPIC, partition)], add)
    code = codes.get((OFFSETS_TOPIC, partition), ErrorCode.unknown_server_error)
    if code == ErrorCode.network_exception:
        return ErrorCode.coordinator_load_in_progress  # Kafka's maybeConvertOffsetCommitError
    return coordinator_error(verification_error(code))


# -- OffsetFetch ---------------------------------------------------------------------------------


async def _fetch_group(ctx: RequestContext, mod: ModuleType, v: int, group_id: str, req_topics: Sequence[Any] | None,
                       require_stable: bool, member_id: str | None,
                       member_epoch: int) -> tuple[ErrorCode, tuple[Entity, ...]]:
    """(group error, response topics) for one group, named as the client names it."""
    image = ctx.services.metadata.image
    scope = ctx.scope
    by_id = v >= 10
    coord = ctx.services.groups
    topics_cls = mod.OffsetFetchResponseTopics if v >= 8 else mod.OffsetFetchResponseTopic
    part_cls = mod.OffsetFetchResponsePartitions if v >= 8 else mod.OffsetFetchResponsePartition

    def part(p: int, offset: int = -1, epoch: int = -1, metadata: str = "", code: ErrorCode = ErrorCode.none) -> Entity:
        return build(part_cls, partition_index=p, committed_offset=offset, committed_leader_epoch=epoch, metadata=metadata, error_code=code)

    def topic(key: object, parts: list[Entity]) -> Entity:
        if by_id:
            return build(topics_cls, topic_id=key, partitions=tuple(parts))
        return build(topics_cls, name=key, partitions=tuple(parts))

    def group_error(code: ErrorCode) -> tuple[ErrorCode, tuple[Entity, ...]]:
        if v >= 2:
            return code, ()
        # v1 has no group-level error: every requested partition carries it.
        return code, tuple(topic(t.name, [part(p, code=code) for p in t.partition_indexes]) for t in req_topics or ())

    if not scope.allowed(Operation.DESCRIBE, ResourceType.GROUP, group_id):
        return group_error(ErrorCode.group_authorization_failed)
    wanted = None
    errors: dict[object, list] = {}  # response key -> partitions answered here
    keys: dict[str, object] = {}  # physical topic name -> response key (name or id)
    order: list[object] = []
    if req_topics is not None:
        wanted = []
        for t in req_topics:
            key = t.topic_id if by_id else t.name
            order.append(key)
            if by_id:
                info = scope.topic_by_id(image, t.topic_id)
                if info is None:
                    errors[key] = [part(p, code=ErrorCode.unknown_topic_id) for p in t.partition_indexes]
                    continue
                name = scope.visible(info.name)
            else:
                name = t.name
            # (name None: not the scope's topic)
            if name is None or not scope.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
                errors[key] = [part(p, code=ErrorCode.topic_authorization_failed) for p in t.partition_indexes]
                continue
            keys[scope.physical(name)] = key
            wanted.append((scope.physical(name), list(t.partition_indexes)))
    code, fetched = await coord.fetch_offsets(
        scope.physical(group_id), wanted, require_stable=require_stable, member_id=member_id, member_epoch=member_epoch
    )
    if code != ErrorCode.none:
        return group_error(code)
    results: dict[object, list] = {}
    for physical, rows in fetched:
        key = keys.get(physical)
        if key is None:  # all topics: the scope's, those it may describe, with an id for v10
            name = scope.visible(physical)
            if name is None or not scope.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
                continue
            key = name
            if by_id:
                info = image.topic(physical)
                if info is None:
                    continue
                key = info.topic_id
        results[key] = [part(r.partition, r.offset, r.leader_epoch, r.metadata, r.error) for r in rows]
    results.update(errors)
    seen = set()
    out = []
    for key in (order if req_topics is not None else list(results)):
        if key in seen or key not in results:
            continue
        seen.add(key)
        out.append(topic(key, results[key]))
    return ErrorCode.none, tuple(out)


@api(OFFSET_FETCH, 1, 10)
async def handle_offset_fetch(ctx: RequestContext, req: OffsetFetchRequest) -> OffsetFetchResponse:
    v = ctx.api_version
    mod = response_module(OFFSET_FETCH, v)
    require_stable = bool(getattr(req, "require_stable", False))
    if v >= 8:
        groups = []
        for g in getattr(req, "groups"):
            code, topics = await _fetch_group(
                ctx, mod, v, g.group_id, g.topics, require_stable,
                getattr(g, "member_id", None), getattr(g, "member_epoch", -1),
            )
            groups.append(build(mod.OffsetFetchResponseGroup, group_id=g.group_id, topics=topics, error_code=code))
        return build(mod.OffsetFetchResponse, throttle_time=ZERO, groups=tuple(groups))
    code, topics = await _fetch_group(ctx, mod, v, getattr(req, "group_id"), getattr(req, "topics"), require_stable,
                                      None, -1)
    return build(mod.OffsetFetchResponse, throttle_time=ZERO, topics=topics, error_code=code)


# -- OffsetDelete --------------------------------------------------------------------------------


@api(OFFSET_DELETE, 0, 0)
async def handle_offset_delete(ctx: RequestContext, req: OffsetDeleteRequest) -> OffsetDeleteResponse:
    mod = response_module(OFFSET_DELETE, ctx.api_version)
    image = ctx.services.metadata.image
    scope = ctx.scope
    if not scope.allowed(Operation.DELETE, ResourceType.GROUP, req.group_id):
        return build(mod.OffsetDeleteResponse, error_code=ErrorCode.group_authorization_failed, throttle_time=ZERO, topics=())
    known: list[tuple[str, list[int]]] = []
    names: dict[str, str] = {}  # physical -> as requested
    answered_here: dict[str, list[tuple[int, ErrorCode]]] = {}
    for t in req.topics:
        indexes: list[int] = [p.partition_index for p in t.partitions]
        if not scope.allowed(Operation.READ, ResourceType.TOPIC, t.name):
            answered_here.setdefault(t.name, []).extend((p, ErrorCode.topic_authorization_failed) for p in indexes)
            continue
        info = scope.topic(image, t.name)
        if info is None:
            answered_here.setdefault(t.name, []).extend((p, ErrorCode.unknown_topic_or_partition) for p in indexes)
            continue
        good = [p for p in indexes if 0 <= p < len(info.partitions)]
        bad = [p for p in indexes if not 0 <= p < len(info.partitions)]
        if bad:
            answered_here.setdefault(t.name, []).extend((p, ErrorCode.unknown_topic_or_partition) for p in bad)
        if good:
            known.append((info.name, good))
            names[info.name] = t.name
    code, deleted = await ctx.services.groups.delete_offsets(scope.physical(req.group_id), known)
    if code != ErrorCode.none:
        return build(mod.OffsetDeleteResponse, error_code=code, throttle_time=ZERO, topics=())
    rows: dict[str, list[tuple[int, ErrorCode]]] = {}
    for physical, parts in deleted:
        rows.setdefault(names[physical], []).extend(parts)
    for name, parts in answered_here.items():
        rows.setdefault(name, []).extend(parts)
    topics = tuple(
        build(
            mod.OffsetDeleteResponseTopic,
            name=name,
            partitions=tuple(build(mod.OffsetDeleteResponsePartition, partition_index=p, error_code=c) for p, c in parts),
        )
        for name, parts in rows.items()
    )
    return build(mod.OffsetDeleteResponse, error_code=ErrorCode.none, throttle_time=ZERO, topics=topics)
