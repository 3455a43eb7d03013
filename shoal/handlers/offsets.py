"""Committed offsets: OffsetCommit (8) v2-v10, OffsetFetch (9) v1-v10, OffsetDelete (47) v0.

Topic checks happen here, as in Kafka's ``KafkaApis``: a commit or delete for a topic or partition
the cluster does not have gets UNKNOWN_TOPIC_OR_PARTITION (v10, by topic id: UNKNOWN_TOPIC_ID) and
never reaches the coordinator; the rest go to ``shoal.groups.GroupCoordinator``. OffsetFetch takes
any topic and answers -1 for offsets never committed. OffsetFetch v8+ fetches several groups in one
request (each with its own error); v10 names topics by id (OffsetCommit v10 too).

A commit is answered once its record is in ``__consumer_offsets`` and the high watermark passed it.

Deviations from Kafka:
- OffsetCommit v0-v1 and OffsetFetch v0 are not offered (Kafka 4 removed them too, KIP-896).
- OffsetFetch v10 for all topics lists only topics that still exist (others have no id to show).
"""

from __future__ import annotations

import datetime

from shoal.groups import CommitRequest
from shoal.handlers.registry import api
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
OFFSET_DELETE = 47
ZERO = datetime.timedelta(0)


def _coordinator(ctx):
    return getattr(ctx.broker, "groups", None)


def _ms(td: datetime.timedelta) -> int:
    return int(td / datetime.timedelta(milliseconds=1))


# -- OffsetCommit --------------------------------------------------------------------------------


@api(OFFSET_COMMIT, 2, 10)
async def handle_offset_commit(ctx, req):
    v = ctx.api_version
    mod = response_module(OFFSET_COMMIT, v)
    image = ctx.broker.metadata.image
    by_id = v >= 10
    # Per request topic: (name or id, [(partition, error or None=to commit)])
    layout: list[tuple[object, list[tuple[int, ErrorCode | None]]]] = []
    commits: list[CommitRequest] = []
    for t in req.topics:
        if by_id:
            info = image.topics_by_id.get(t.topic_id)
            missing = ErrorCode.unknown_topic_id
        else:
            info = image.topic(t.name)
            missing = ErrorCode.unknown_topic_or_partition
        rows: list[tuple[int, ErrorCode | None]] = []
        for p in t.partitions:
            if info is None:
                rows.append((p.partition_index, missing))
            elif not 0 <= p.partition_index < len(info.partitions):
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
        layout.append((t.topic_id if by_id else t.name, rows))

    codes: list[ErrorCode] = []
    if commits:
        coord = _coordinator(ctx)
        if coord is None:
            codes = [ErrorCode.coordinator_not_available] * len(commits)
        else:
            retention = _ms(req.retention_time) if 2 <= v <= 4 else -1
            codes = await coord.commit_offsets(
                req.group_id,
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


# -- OffsetFetch ---------------------------------------------------------------------------------


async def _fetch_group(ctx, mod, v: int, group_id: str, req_topics, require_stable: bool, member_id, member_epoch):
    """(group error, response topics) for one group."""
    image = ctx.broker.metadata.image
    by_id = v >= 10
    coord = _coordinator(ctx)
    topics_cls = mod.OffsetFetchResponseTopics if v >= 8 else mod.OffsetFetchResponseTopic
    part_cls = mod.OffsetFetchResponsePartitions if v >= 8 else mod.OffsetFetchResponsePartition

    def part(p: int, offset: int = -1, epoch: int = -1, metadata: str = "", code: ErrorCode = ErrorCode.none):
        return build(part_cls, partition_index=p, committed_offset=offset, committed_leader_epoch=epoch, metadata=metadata, error_code=code)

    def topic(key, parts):
        if by_id:
            return build(topics_cls, topic_id=key, partitions=tuple(parts))
        return build(topics_cls, name=key, partitions=tuple(parts))

    wanted = None
    unknown: dict[object, list[int]] = {}
    order: list[object] = []
    if req_topics is not None:
        wanted = []
        for t in req_topics:
            if by_id:
                info = image.topics_by_id.get(t.topic_id)
                order.append(t.topic_id)
                if info is None:
                    unknown[t.topic_id] = list(t.partition_indexes)
                    continue
                wanted.append((info.name, list(t.partition_indexes)))
            else:
                order.append(t.name)
                wanted.append((t.name, list(t.partition_indexes)))
    if coord is None:
        code, fetched = ErrorCode.coordinator_not_available, []
    else:
        code, fetched = await coord.fetch_offsets(
            group_id, wanted, require_stable=require_stable, member_id=member_id, member_epoch=member_epoch
        )
    if code != ErrorCode.none:
        if v >= 2:
            return code, ()
        # v1 has no group-level error: every requested partition carries it.
        return code, tuple(topic(t.name, [part(p, code=code) for p in t.partition_indexes]) for t in req_topics or ())
    results: dict[object, list] = {}
    for name, rows in fetched:
        key = name
        if by_id:
            info = image.topic(name)
            if info is None:
                continue
            key = info.topic_id
        results[key] = [part(r.partition, r.offset, r.leader_epoch, r.metadata, r.error) for r in rows]
    for key, parts in unknown.items():
        results[key] = [part(p, code=ErrorCode.unknown_topic_id) for p in parts]
    keys = order if req_topics is not None else list(results)
    seen = set()
    out = []
    for key in keys:
        if key in seen or key not in results:
            continue
        seen.add(key)
        out.append(topic(key, results[key]))
    return ErrorCode.none, tuple(out)


@api(OFFSET_FETCH, 1, 10)
async def handle_offset_fetch(ctx, req):
    v = ctx.api_version
    mod = response_module(OFFSET_FETCH, v)
    require_stable = bool(getattr(req, "require_stable", False))
    if v >= 8:
        groups = []
        for g in req.groups:
            code, topics = await _fetch_group(
                ctx, mod, v, g.group_id, g.topics, require_stable,
                getattr(g, "member_id", None), getattr(g, "member_epoch", -1),
            )
            groups.append(build(mod.OffsetFetchResponseGroup, group_id=g.group_id, topics=topics, error_code=code))
        return build(mod.OffsetFetchResponse, throttle_time=ZERO, groups=tuple(groups))
    code, topics = await _fetch_group(ctx, mod, v, req.group_id, req.topics, require_stable, None, -1)
    return build(mod.OffsetFetchResponse, throttle_time=ZERO, topics=topics, error_code=code)


# -- OffsetDelete --------------------------------------------------------------------------------


@api(OFFSET_DELETE, 0, 0)
async def handle_offset_delete(ctx, req):
    mod = response_module(OFFSET_DELETE, ctx.api_version)
    image = ctx.broker.metadata.image
    known: list[tuple[str, list[int]]] = []
    unknown: dict[str, list[int]] = {}
    for t in req.topics:
        info = image.topic(t.name)
        parts = [p.partition_index for p in t.partitions]
        if info is None:
            unknown.setdefault(t.name, []).extend(parts)
            continue
        good = [p for p in parts if 0 <= p < len(info.partitions)]
        bad = [p for p in parts if not 0 <= p < len(info.partitions)]
        if bad:
            unknown.setdefault(t.name, []).extend(bad)
        if good:
            known.append((t.name, good))
    coord = _coordinator(ctx)
    if coord is None:
        code, deleted = ErrorCode.coordinator_not_available, []
    else:
        code, deleted = await coord.delete_offsets(req.group_id, known)
    if code != ErrorCode.none:
        return build(mod.OffsetDeleteResponse, error_code=code, throttle_time=ZERO, topics=())
    rows: dict[str, list[tuple[int, ErrorCode]]] = {}
    for name, parts in deleted:
        rows.setdefault(name, []).extend(parts)
    for name, parts in unknown.items():
        rows.setdefault(name, []).extend((p, ErrorCode.unknown_topic_or_partition) for p in parts)
    topics = tuple(
        build(
            mod.OffsetDeleteResponseTopic,
            name=name,
            partitions=tuple(build(mod.OffsetDeleteResponsePartition, partition_index=p, error_code=c) for p, c in parts),
        )
        for name, parts in rows.items()
    )
    return build(mod.OffsetDeleteResponse, error_code=ErrorCode.none, throttle_time=ZERO, topics=topics)
