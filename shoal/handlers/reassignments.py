"""AlterPartitionReassignments (key 45) and ListPartitionReassignments (key 46), v0 (KIP-455).

As Kafka's ``KafkaApis`` and the KRaft controller's ``alterPartitionReassignments`` /
``listPartitionReassignments``:

- Alter needs ALTER on the cluster, List DESCRIBE (CLUSTER_AUTHORIZATION_FAILED for the whole
  request otherwise; Alter repeats it on every partition, as Kafka's error response does).
- Alter is an operator action: a tenant's principals are refused even with ALTER on their logical
  cluster (and a tenant administrator too), since where replicas live decides how brokers'
  load is shared between tenants (``shoal.tenancy.scope.PLACEMENT_IS_OPERATORS``). List stays
  open to a tenant with DESCRIBE, for its own topics.
- Alter: a partition with replicas starts (or overrides) its reassignment, one with null replicas
  cancels it (``shoal.metadata.rules.topics.alter_reassignments``); per partition NONE,
  UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (empty, duplicate or unregistered
  brokers) or NO_REASSIGNMENT_IN_PROGRESS. The request's partitions are one change, decided and
  compare-and-swapped on whichever broker receives it. The adding replicas then catch up as
  followers; the controller completes the reassignment when every target replica is in the ISR
  (``Controller.complete_reassignments``) and the removed replicas delete their logs.
- List: null topics means every partition being reassigned (of the caller's scope); named
  partitions that are unknown or not being reassigned are left out, as Kafka does.

Deviation: ``timeout`` is not used (the change is durable when the response is sent). Scoped:
topic names are the tenant's.
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING

from shoal.handlers.registry import api
from shoal.metadata import MetadataError
from shoal.metadata.rules.topics import alter_reassignments, ongoing_reassignments
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode, error_code
from shoal.tenancy.acl import Operation
from shoal.tenancy.scope import PLACEMENT_IS_OPERATORS

if TYPE_CHECKING:
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import (
        AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse,
    )

ALTER_KEY, LIST_KEY = 45, 46
log = logging.getLogger("shoal.admin")
_NO_THROTTLE = datetime.timedelta(0)


@api(ALTER_KEY, 0, 0)
async def handle_alter_partition_reassignments(
    ctx: RequestContext, req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse:
    svc = ctx.services
    mod = response_module(ALTER_KEY, ctx.api_version)
    scope = ctx.scope
    if not scope.physical_view or not scope.allowed_cluster(Operation.ALTER):
        code = ErrorCode.cluster_authorization_failed
        message = PLACEMENT_IS_OPERATORS if scope.allowed_cluster(Operation.ALTER) else "Cluster authorization failed."
        return build(mod.AlterPartitionReassignmentsResponse, throttle_time=_NO_THROTTLE, error_code=code,
                     error_message=message, responses=tuple(
                         build(mod.ReassignableTopicResponse, name=t.name, partitions=tuple(
                             build(mod.ReassignablePartitionResponse, partition_index=p.partition_index,
                                   error_code=code, error_message=message) for p in t.partitions))
                         for t in req.topics))
    wanted: list[tuple[str, int, tuple[int, ...] | None]] = [
        (scope.physical(t.name), p.partition_index, None if p.replicas is None else tuple(p.replicas))
              for t in req.topics for p in t.partitions]
    try:
        outcome = await svc.metadata.decide_and_commit(lambda img: alter_reassignments(img, wanted))
    except MetadataError as e:
        log.warning("AlterPartitionReassignments from %s failed: %s", ctx.client_address, e.message)
        outcome = {(n, i): (e.code, e.message) for n, i, _ in wanted}
    accepted = [(n, i, t) for n, i, t in wanted if outcome.get((n, i), ("",))[0] == "NONE"]
    if accepted:
        log.info("AlterPartitionReassignments by %s: %s", ctx.principal, ", ".join(
            f"{n}-{i} {'cancelled' if t is None else '-> ' + str(list(t))}" for n, i, t in accepted[:20])
            + (" ..." if len(accepted) > 20 else ""))
    by_topic: dict[str, list] = {}
    for (name, index), (code_name, why) in outcome.items():
        by_topic.setdefault(name, []).append(build(mod.ReassignablePartitionResponse, partition_index=index,
                                                   error_code=error_code(code_name), error_message=why))
    return build(mod.AlterPartitionReassignmentsResponse, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none,
                 error_message=None, responses=tuple(
                     build(mod.ReassignableTopicResponse, name=scope.visible(name), partitions=tuple(parts))
                     for name, parts in by_topic.items()))


@api(LIST_KEY, 0, 0)
async def handle_list_partition_reassignments(
    ctx: RequestContext, req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse:
    svc = ctx.services
    mod = response_module(LIST_KEY, ctx.api_version)
    scope = ctx.scope
    if not scope.allowed_cluster(Operation.DESCRIBE):
        return build(mod.ListPartitionReassignmentsResponse, throttle_time=_NO_THROTTLE,
                     error_code=ErrorCode.cluster_authorization_failed,
                     error_message="Cluster authorization failed.", topics=())
    image = svc.metadata.image
    if req.topics is None:
        wanted = [(t.name, p.partition) for _visible, t in scope.topics(image) for p in t.partitions]
    else:
        wanted = [(scope.physical(t.name), i) for t in req.topics for i in t.partition_indexes]
    by_topic: dict[str, list] = {}
    for name, p in ongoing_reassignments(image, wanted):
        by_topic.setdefault(name, []).append(build(
            mod.OngoingPartitionReassignment, partition_index=p.partition, replicas=p.replicas,
            adding_replicas=p.adding, removing_replicas=p.removing))
    return build(mod.ListPartitionReassignmentsResponse, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none,
                 error_message=None, topics=tuple(
                     build(mod.OngoingTopicReassignment, name=scope.visible(name), partitions=tuple(parts))
                     for name, parts in by_topic.items()))
