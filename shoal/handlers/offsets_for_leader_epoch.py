"""OffsetsForLeaderEpoch (key 23), v2-v4: where a leader epoch ends in the leader's log (KIP-101,
KIP-279), so a consumer can tell whether the records it read were truncated away (KIP-320:
librdkafka validates its position with it after a leader change).

As Kafka's ``KafkaApis.handleOffsetForLeaderEpochRequest`` and ``Partition.lastOffsetForLeaderEpoch``:
- answered by the partition's leader only (NOT_LEADER_OR_FOLLOWER elsewhere, through the
  replica manager); ``current_leader_epoch`` (v2+) checked: FENCED_LEADER_EPOCH when older than
  the leader's, UNKNOWN_LEADER_EPOCH when newer;
- the answer is the largest epoch <= the requested one and its end offset (the next epoch's
  start, or the log end offset for the latest epoch); (-1, -1) for an epoch older than the log's
  first (UNDEFINED);
- a client's request (replica_id -1) needs DESCRIBE on the topic; a replica's (v3+ replica_id
  >= 0) CLUSTER_ACTION on the cluster, in the physical view only.
Scoped: topic names are the tenant's (``ctx.scope``).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from shoal.handlers.registry import api
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode
from shoal.tenancy.acl import Operation, ResourceType

if TYPE_CHECKING:
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

KEY = 23


@api(KEY, 2, 4)
async def handle_offsets_for_leader_epoch(ctx: RequestContext,
                                          req: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    svc = ctx.services
    mod = response_module(KEY, ctx.api_version)
    scope = ctx.scope
    image = svc.metadata.image
    replica = getattr(req, "replica_id", -1)
    replica_ok = ctx.is_replica(replica)
    topics = []
    for t in req.topics:
        allowed = replica_ok if replica >= 0 else scope.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t.topic)
        name = scope.physical(t.topic)
        topic = image.topic(name)
        parts = []
        for p in t.partitions:
            epoch, end = -1, -1
            if not allowed:
                code = ErrorCode.topic_authorization_failed
            elif topic is None or not 0 <= p.partition < len(topic.partitions):
                code = ErrorCode.unknown_topic_or_partition
            else:
                part = svc.replicas.leader(name, topic.partitions[p.partition])
                if part is None:
                    code = ErrorCode.not_leader_or_follower
                else:
                    code = part.check_leader_epoch(p.current_leader_epoch)
                    if code == ErrorCode.none:
                        epoch, end = part.view.end_offset_for_epoch(p.leader_epoch)
            parts.append(build(mod.EpochEndOffset, error_code=code, partition=p.partition, leader_epoch=epoch,
                               end_offset=end))
        topics.append(build(mod.OffsetForLeaderTopicResult, topic=t.topic, partitions=tuple(parts)))
    return build(mod.OffsetForLeaderEpochResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics))
