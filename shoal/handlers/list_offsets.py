"""ListOffsets (key 2, v1-v10) and DeleteRecords (key 21, v0-v2).

ListOffsets special timestamps: -1 latest (the high watermark, which on a leader that is its whole
ISR is the log end offset; with isolation_level READ_COMMITTED the last stable offset), -2 earliest (log start offset), -3 max timestamp (KIP-734), -4 earliest
local (KIP-405; no tiered storage, so the log start offset), -5 latest tiered (KIP-1005; nothing is
tiered: offset -1). A timestamp >= 0 finds the first record whose timestamp is at least it, below the high
watermark (READ_COMMITTED: below the last stable offset), as Kafka's ``lastFetchableOffset``.
Both timestamp searches read records (decompressing, bounded by max.message.bytes) in a worker
thread, never on the event loop; the partition lock is held only to find and read the batch.

DeleteRecords moves the log start offset up to the high watermark at most (-1: the high
watermark), as Kafka's ``deleteRecordsOnLeader``: an open transaction does not bound it (nor
retention); the last stable offset is never below the log start offset.

Scoped: topic names are the tenant's (``ctx.scope``). ListOffsets needs DESCRIBE on the topic,
DeleteRecords needs DELETE (TOPIC_AUTHORIZATION_FAILED otherwise, as Kafka answers).

Deviation: v11 (KIP-1023 timeout field) is not offered yet.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import TYPE_CHECKING

from shoal.handlers.registry import api
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode
from shoal.storage import OffsetOutOfRange
from shoal.tenancy.acl import Operation, ResourceType

if TYPE_CHECKING:
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import (
        DeleteRecordsRequest, DeleteRecordsResponse, ListOffsetsRequest, ListOffsetsResponse,
    )
    from shoal.metadata import PartitionInfo
    from shoal.replica.partition import Partition

LIST_OFFSETS = 2
DELETE_RECORDS = 21
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


def _resolve(ctx: RequestContext, name: str, index: int,
             operation: int) -> tuple[Partition | None, PartitionInfo | None, ErrorCode]:
    """(partition, partition info, error) for a partition this broker must lead; ``name`` is
    the scope's, ``operation`` the one the caller needs on the topic."""
    scope = ctx.scope
    if not scope.allowed(operation, ResourceType.TOPIC, name):
        return None, None, ErrorCode.topic_authorization_failed
    svc = ctx.services
    name = scope.physical(name)
    topic = svc.metadata.image.topic(name)
    if topic is None or not 0 <= index < len(topic.partitions):
        return None, None, ErrorCode.unknown_topic_or_partition
    pinfo = topic.partitions[index]
    part = svc.replicas.leader(name, pinfo)
    if part is None:  # cluster: another broker leads it
        return None, pinfo, ErrorCode.not_leader_or_follower
    return part, pinfo, ErrorCode.none


@api(LIST_OFFSETS, 1, 10)
async def handle_list_offsets(ctx: RequestContext, req: ListOffsetsRequest) -> ListOffsetsResponse:
    mod = response_module(LIST_OFFSETS, ctx.api_version)
    committed = getattr(req, "isolation_level", 0) == 1
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            part, pinfo, code = _resolve(ctx, t.name, p.partition_index, Operation.DESCRIBE)
            offset, ts = -1, -1
            epoch = pinfo.leader_epoch if pinfo is not None else -1
            if code == ErrorCode.none and part is not None:  # (part: always, with no error)
                code = part.check_leader_epoch(getattr(p, "current_leader_epoch", -1), epoch)
            if code == ErrorCode.none and part is not None:
                plog = part.view
                target = p.timestamp
                fetchable = plog.last_stable_offset if committed else plog.high_watermark
                if target == LATEST:
                    offset = fetchable
                elif target in (EARLIEST, EARLIEST_LOCAL):
                    offset = plog.log_start_offset
                elif target == LATEST_TIERED:
                    offset = -1
                elif target == MAX_TIMESTAMP:
                    found = await asyncio.to_thread(plog.latest_timestamp)
                    if found is not None:
                        offset, ts = found
                elif target >= 0:
                    found = await asyncio.to_thread(plog.offset_for_timestamp, target)
                    if found is not None and found[0] < fetchable:
                        offset, ts = found
                else:
                    code = ErrorCode.invalid_request
            parts.append(
                build(
                    mod.ListOffsetsPartitionResponse,
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=ts,
                    offset=offset,
                    leader_epoch=epoch if code == ErrorCode.none else -1,
                )
            )
        topics.append(build(mod.ListOffsetsTopicResponse, name=t.name, partitions=tuple(parts)))
    return build(mod.ListOffsetsResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics))


@api(DELETE_RECORDS, 0, 2)
async def handle_delete_records(ctx: RequestContext, req: DeleteRecordsRequest) -> DeleteRecordsResponse:
    mod = response_module(DELETE_RECORDS, ctx.api_version)
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            part, _pinfo, code = _resolve(ctx, t.name, p.partition_index, Operation.DELETE)
            low = -1
            if code == ErrorCode.none and part is not None:
                try:
                    low = ctx.services.replicas.delete_records(part, p.offset)
                except OffsetOutOfRange:
                    code = ErrorCode.offset_out_of_range
            parts.append(
                build(
                    mod.DeleteRecordsPartitionResult,
                    partition_index=p.partition_index,
                    low_watermark=low,
                    error_code=code,
                )
            )
        topics.append(build(mod.DeleteRecordsTopicResult, name=t.name, partitions=tuple(parts)))
    return build(mod.DeleteRecordsResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics))
