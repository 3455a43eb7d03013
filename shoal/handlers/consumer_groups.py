"""The KIP-848 consumer group protocol: ConsumerGroupHeartbeat (68) v0-1, ConsumerGroupDescribe (69)
v0-1.

The handlers translate between kio entities and ``shoal.groups.consumer.ConsumerGroupManager``
(``svc.groups.consumer``), which knows nothing of the wire. A heartbeat is answered once the
records it wrote to ``__consumer_offsets`` are committed.

Heartbeat v1 (KIP-1082) requires the client to name itself (a non-empty member id even when
joining) and may carry ``subscribed_topic_regex``; v0 members may join with an empty member id and
get one from the coordinator. Errors carry Kafka's messages.

Deviations from Kafka:
- with ``consumer`` missing from ``group.coordinator.rebalance.protocols`` the APIs are still listed
  in ApiVersions (the registry is static) and answer UNSUPPORTED_VERSION (Kafka hides them);
- ConsumerGroupDescribe v1 reports ``member_type`` 1 (consumer) for every member: no classic
  members live in consumer groups (no online migration);

Tenancy (``ctx.scope``): the group id and subscribed topic names reach the coordinator qualified;
a regex subscription matches only the scope's topics, by the names the client sees
(``ConsumerGroupManager.resolve_regex``); owned partitions and assignments carry topic ids, and
only the scope's topics are passed either way. ConsumerGroupDescribe answers with the client's
names; another tenant's group is exactly a group that does not exist. Coordinator messages lose
the tenant prefix.

Authorization, as Kafka's ``KafkaApis``: a heartbeat needs READ on the group, and DESCRIBE on every
subscribed topic name (else TOPIC_AUTHORIZATION_FAILED); a regex resolves only to the topics the
member may describe. ConsumerGroupDescribe needs DESCRIBE on each group; a group whose assignments
name a topic the caller may not describe is answered TOPIC_AUTHORIZATION_FAILED without members.
``authorized_operations`` is Kafka's bit field of the group operations the caller may do.
"""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from shoal.groups.consumer import HeartbeatRequest
from shoal.handlers.groups import NOT_PROVIDED, client_host, group_operations, visible_message
from shoal.handlers.registry import api
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode
from shoal.tenancy.acl import Operation, ResourceType

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from shoal.groups.consumer import ConsumerGroupManager, TopicPartitions
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import (
        ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse,
    )
    from shoal.tenancy.scope import Scope

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
ZERO = datetime.timedelta(0)
MEMBER_TYPE_CONSUMER = 1


def _ms(td: datetime.timedelta) -> int:
    return int(td / datetime.timedelta(milliseconds=1))


def _heartbeat_error(mod: ModuleType, code: ErrorCode) -> ConsumerGroupHeartbeatResponse:
    return build(
        mod.ConsumerGroupHeartbeatResponse, throttle_time=ZERO, error_code=code, member_epoch=0, heartbeat_interval=ZERO,
    )


def _topic_filter(scope: Scope) -> tuple[tuple[str, str], Callable[[str], bool]]:
    """The member's view for regex resolution: which topics (by visible name) it may describe."""
    return (scope.principal, scope.host), lambda name: scope.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name)


@api(CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def handle_consumer_group_heartbeat(ctx: RequestContext,
                                          req: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    v = ctx.api_version
    mod = response_module(CONSUMER_GROUP_HEARTBEAT, v)
    coord = ctx.services.groups
    scope = ctx.scope
    names = req.subscribed_topic_names
    if coord.consumer.config.enabled:  # disabled: UNSUPPORTED_VERSION first, as Kafka
        if not scope.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
            return _heartbeat_error(mod, ErrorCode.group_authorization_failed)
        if names and not all(scope.allowed(Operation.DESCRIBE, ResourceType.TOPIC, n) for n in set(names)):
            return _heartbeat_error(mod, ErrorCode.topic_authorization_failed)
        if scope.reserved_group(req.group_id):  # tenancy: a tenant's ids are not lkc-xxxxxx_ shaped
            return _heartbeat_error(mod, ErrorCode.invalid_group_id)
    image = ctx.services.metadata.image
    # (kio decodes a zero topic id as None: such a key goes on, as a topic this broker does not know)
    owned: dict[Any, frozenset[int]] | None = None
    if req.topic_partitions is not None:
        owned = {}
        for tp in req.topic_partitions:
            if tp.partitions and (scope.topic_by_id(image, tp.topic_id) is not None or tp.topic_id not in image.topics_by_id):
                owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    r = await coord.consumer.heartbeat(
        HeartbeatRequest(
            group_id=scope.physical(req.group_id),
            member_id=req.member_id,
            member_epoch=req.member_epoch,
            instance_id=req.instance_id,
            rack_id=req.rack_id,
            rebalance_timeout_ms=_ms(req.rebalance_timeout),
            subscribed_topic_names=tuple(scope.physical(n) for n in names) if names is not None else None,
            subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None),
            server_assignor=req.server_assignor,
            owned=owned,
            client_id=ctx.client_id or "",
            client_host=client_host(ctx),
            topic_filter=_topic_filter(scope),
        ),
        v,
    )
    assignment = None
    if r.assignment is not None:
        image = ctx.services.metadata.image
        assignment = build(
            mod.Assignment,
            topic_partitions=tuple(
                build(mod.TopicPartitions, topic_id=t, partitions=tuple(sorted(ps)))
                for t, ps in sorted(r.assignment.items(), key=lambda kv: str(kv[0]))
                if not scope.prefix or scope.topic_by_id(image, t) is not None
            ),
        )
    return build(
        mod.ConsumerGroupHeartbeatResponse,
        throttle_time=ZERO,
        error_code=r.error,
        error_message=visible_message(scope, r.message),
        member_id=r.member_id,
        member_epoch=r.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=r.heartbeat_interval_ms),
        assignment=assignment,
    )


def _assignment(mod: ModuleType, manager: ConsumerGroupManager, tps: TopicPartitions,
                scope: Scope) -> tuple[object, set[str]]:
    """(the assignment as the scope names it, its topic names)."""
    rows = []
    for t, ps in sorted(tps.items(), key=lambda kv: str(kv[0])):
        physical = manager.topic_name(t)
        name = scope.visible(physical) if physical is not None else None
        if name is None:
            continue  # a topic deleted meanwhile (Kafka skips those too), or not the scope's
        rows.append(build(mod.TopicPartitions, topic_id=t, topic_name=name, partitions=tuple(sorted(ps))))
    return build(mod.Assignment, topic_partitions=tuple(rows)), {r.topic_name for r in rows}


@api(CONSUMER_GROUP_DESCRIBE, 0, 1)
async def handle_consumer_group_describe(ctx: RequestContext,
                                         req: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    mod = response_module(CONSUMER_GROUP_DESCRIBE, ctx.api_version)
    coord = ctx.services.groups
    scope = ctx.scope

    def error_row(gid: str, code: ErrorCode, message: str | None = None) -> Entity:
        return build(
            mod.DescribedGroup, error_code=code, error_message=message, group_id=gid, group_state="",
            group_epoch=0, assignment_epoch=0, assignor_name="", members=(),
        )

    denied, ids = [], []
    for gid in req.group_ids:
        if scope.allowed(Operation.DESCRIBE, ResourceType.GROUP, gid):
            ids.append(gid)
        else:
            denied.append(error_row(gid, ErrorCode.group_authorization_failed))  # first, as Kafka
    out = []
    described = coord.consumer.describe([scope.physical(g) for g in ids])
    for gid, d in zip(ids, described):
        members = []
        topics: set[str] = set()
        for dm in d.members:
            m = dm.member
            assigned, t1 = _assignment(mod, coord.consumer, m.assigned, scope)
            target, t2 = _assignment(mod, coord.consumer, dm.target, scope)
            topics |= t1 | t2
            members.append(build(
                mod.Member,
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=tuple(n for n in map(scope.visible, m.subscribed_topic_names) if n is not None),
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=assigned,
                target_assignment=target,
                member_type=MEMBER_TYPE_CONSUMER,
            ))
        if not all(scope.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t) for t in topics):
            out.append(error_row(
                gid, ErrorCode.topic_authorization_failed,
                "The group has described topic(s) that the client is not authorized to describe.",
            ))
            continue
        ok = d.error == ErrorCode.none
        out.append(build(
            mod.DescribedGroup,
            error_code=d.error,
            error_message=visible_message(scope, d.message),
            group_id=gid,
            group_state=d.state,
            group_epoch=d.group_epoch,
            assignment_epoch=d.assignment_epoch,
            assignor_name=d.assignor,
            members=tuple(members),
            authorized_operations=group_operations(scope, gid) if ok and req.include_authorized_operations else NOT_PROVIDED,
        ))
    return build(mod.ConsumerGroupDescribeResponse, throttle_time=ZERO, groups=tuple(denied + out))
