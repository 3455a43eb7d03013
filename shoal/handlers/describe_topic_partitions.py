"""DescribeTopicPartitions (key 75, v0; KIP-966): topics and their partitions, paged.

As Kafka's ``DescribeTopicPartitionsRequestHandler`` and ``KRaftMetadataCache
.getTopicMetadataForDescribeTopicResponse``:
- An empty topic list means every topic the principal may DESCRIBE (unknown and unauthorized
  ones are then simply absent); a named topic without DESCRIBE is TOPIC_AUTHORIZATION_FAILED
  (listed after the others, with no id, up to where the page ends), a named one that does not exist UNKNOWN_TOPIC_OR_PARTITION
  (INVALID_TOPIC_EXCEPTION for a name no topic can have).
- Topics are taken in name order from the cursor's topic (names before it are skipped), partitions
  in index order from the cursor's partition in that topic and from 0 in the others. At most
  ``min(response_partition_limit, max.request.partition.size.limit)`` partitions (at least 1)
  are described; ``next_cursor`` names the first one left out, or the next topic at partition 0
  when the limit ran out exactly at the end of a topic. A cursor topic that is not in a named
  list, or a negative cursor partition, is INVALID_REQUEST on every requested topic.
- Scoped (``ctx.scope``) as Metadata is: a tenant names, sorts and pages its topics by their
  unqualified names, and another tenant's topic answers exactly as one that does not exist.
- ``topic_authorized_operations`` is always filled in (the request has no flag for it).

Deviations from Kafka: no eligible leader replicas yet (``eligible_leader_replicas`` and
``last_known_elr`` are empty: there is no ELR before replication).
"""

from __future__ import annotations

import datetime
import uuid
from types import ModuleType
from typing import TYPE_CHECKING

from shoal.handlers.metadata import invalid_topic_name, partition_fields, topic_operations
from shoal.handlers.registry import api
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode
from shoal.tenancy.acl import Operation, ResourceType

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse

DESCRIBE_TOPIC_PARTITIONS = 75


def _topic(mod: ModuleType, name: str, code: ErrorCode, *, topic_id: uuid.UUID | None = None, internal: bool = False,
           partitions: tuple[Entity, ...] = (), ops: int | None = None) -> Entity:
    # topic_id None: the zero uuid on the wire (what kio decodes it to)
    fields = {} if ops is None else {"topic_authorized_operations": ops}
    return build(mod.DescribeTopicPartitionsResponseTopic, error_code=code, name=name, topic_id=topic_id,
                 is_internal=internal, partitions=partitions, **fields)


def _response(mod: ModuleType, topics: list[Entity],
              next_cursor: Entity | None = None) -> DescribeTopicPartitionsResponse:
    return build(mod.DescribeTopicPartitionsResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics),
                 next_cursor=next_cursor)


@api(DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def handle_describe_topic_partitions(ctx: RequestContext,
                                           req: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
    mod = response_module(DESCRIBE_TOPIC_PARTITIONS, ctx.api_version)
    scope = ctx.scope
    image = ctx.services.metadata.image
    cursor = req.cursor
    first = cursor.topic_name if cursor is not None else ""
    every = not req.topics
    if every:
        names = sorted(n for n, _ in scope.topics(image) if n >= first)
    else:
        names = sorted({t.name for t in req.topics if t.name >= first})
    if cursor is not None and ((not every and first not in names) or cursor.partition_index < 0):
        # Kafka's InvalidRequestException, answered as DescribeTopicPartitionsRequest.getErrorResponse.
        return _response(mod, [_topic(mod, t.name, ErrorCode.invalid_request) for t in req.topics])

    denied = []
    limit = max(min(ctx.services.config.get("max.request.partition.size.limit"), req.response_partition_limit), 1)
    remaining, topics, next_cursor = limit, [], None
    for name in names:
        if not scope.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
            if not every:
                denied.append(_topic(mod, name, ErrorCode.topic_authorization_failed))
            continue
        if remaining == 0:
            next_cursor = build(mod.Cursor, topic_name=name, partition_index=0)
            break
        info = scope.topic(image, name)
        if info is None:
            if not every:
                code = ErrorCode.invalid_topic_exception if invalid_topic_name(scope, image, name) else (
                    ErrorCode.unknown_topic_or_partition)
                topics.append(_topic(mod, name, code, ops=topic_operations(scope, name)))
            continue
        start = cursor.partition_index if cursor is not None and name == first else 0
        parts = sorted(info.partitions, key=lambda p: p.partition)
        end = min(len(parts), start + remaining)
        page = tuple(
            build(mod.DescribeTopicPartitionsResponsePartition, eligible_leader_replicas=(), last_known_elr=(),
                  **partition_fields(p, image))
            for p in parts[start:end]
        )
        topics.append(_topic(mod, name, ErrorCode.none, topic_id=info.topic_id, internal=info.internal,
                             partitions=page, ops=topic_operations(scope, name)))
        if end < len(parts):
            next_cursor = build(mod.Cursor, topic_name=name, partition_index=end)
            break
        remaining -= len(page)
    return _response(mod, topics + denied, next_cursor)
