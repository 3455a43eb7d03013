"""ElectLeaders (key 43), v0-v2 (KIP-183 preferred, KIP-460 unclean): move partitions' leadership
to their preferred replica, or give a leaderless partition an out-of-sync one.

As Kafka's ``KafkaApis.handleElectLeaders`` and the controller's ``electLeaders``: ALTER on the
cluster (CLUSTER_AUTHORIZATION_FAILED for the whole request otherwise); a null partition list
means every partition (of the caller's scope); per partition NONE, ELECTION_NOT_NEEDED,
PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION
(``shoal.cluster.controller.election_change``). The change is one compare-and-swap against the
image it was decided on, from whichever broker receives it; leader epochs fence the old leaders.
v0 has no election type (preferred). Scoped: topic names are the tenant's. An operator action: a
tenant's principals are refused even with ALTER on their logical cluster
(``shoal.tenancy.scope.PLACEMENT_IS_OPERATORS``).
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING

from shoal.cluster.controller import PREFERRED, election_change
from shoal.handlers.registry import api
from shoal.metadata import MetadataError
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode, error_code
from shoal.tenancy.acl import Operation
from shoal.tenancy.scope import PLACEMENT_IS_OPERATORS

if TYPE_CHECKING:
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import ElectLeadersRequest, ElectLeadersResponse

KEY = 43
log = logging.getLogger("shoal.admin")


@api(KEY, 0, 2)
async def handle_elect_leaders(ctx: RequestContext, req: ElectLeadersRequest) -> ElectLeadersResponse:
    svc = ctx.services
    mod = response_module(KEY, ctx.api_version)
    scope = ctx.scope
    election_type = getattr(req, "election_type", PREFERRED)
    requested = req.topic_partitions
    if not scope.physical_view or not scope.allowed_cluster(Operation.ALTER):
        code = ErrorCode.cluster_authorization_failed
        message = PLACEMENT_IS_OPERATORS if scope.allowed_cluster(Operation.ALTER) else None
        results = tuple(
            build(mod.ReplicaElectionResult, topic=t.topic, partition_result=tuple(
                      build(mod.PartitionResult, partition_id=i, error_code=code, error_message=message)
                      for i in t.partitions))
            for t in (requested or ())
        )
        return build(mod.ElectLeadersResponse, throttle_time=datetime.timedelta(0), error_code=code,
                     replica_election_results=results)
    if requested is None:
        wanted = [(t.name, p.partition) for _visible, t in scope.topics(svc.metadata.image) for p in t.partitions]
    else:
        wanted = [(scope.physical(t.topic), i) for t in requested for i in t.partitions]
    try:
        outcome = await svc.metadata.decide_and_commit(lambda img: election_change(img, election_type, wanted))
    except MetadataError as e:
        log.warning("ElectLeaders from %s failed: %s", ctx.client_address, e.message)
        outcome = {key: (e.code, e.message) for key in wanted}
    moved = [f"{n}-{i}" for (n, i), (code, _m) in outcome.items() if code == "NONE"]
    if moved:
        log.info("ElectLeaders (%s) by %s: new leaders for %s", "preferred" if election_type == PREFERRED else "unclean",
                 ctx.principal, ", ".join(moved[:20]) + (" ..." if len(moved) > 20 else ""))
    by_topic: dict[str, list] = {}
    for (name, index), (code_name, message) in outcome.items():
        by_topic.setdefault(name, []).append(
            build(mod.PartitionResult, partition_id=index, error_code=error_code(code_name), error_message=message))
    results = tuple(build(mod.ReplicaElectionResult, topic=scope.visible(name), partition_result=tuple(parts))
                    for name, parts in by_topic.items())
    return build(mod.ElectLeadersResponse, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                 replica_election_results=results)
