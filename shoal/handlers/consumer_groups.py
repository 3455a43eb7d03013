"""The KIP-848 consumer group protocol: ConsumerGroupHeartbeat (68) v0-1, ConsumerGroupDescribe (69)
v0-1.

The handlers translate between kio entities and ``shoal.groups.consumer.ConsumerGroupManager``
(``broker.groups.consumer``), which knows nothing of the wire. A heartbeat is answered once the
records it wrote to ``__consumer_offsets`` are committed.

Heartbeat v1 (KIP-1082) requires the client to name itself (a non-empty member id even when
joining) and may carry ``subscribed_topic_regex``; v0 members may join with an empty member id and
get one from the coordinator. Errors carry Kafka's messages.

Deviations from Kafka:
- with ``consumer`` missing from ``group.coordinator.rebalance.protocols`` the APIs are still listed
  in ApiVersions (the registry is static) and answer UNSUPPORTED_VERSION (Kafka hides them);
- ConsumerGroupDescribe v1 reports ``member_type`` 1 (consumer) for every member: no classic
  members live in consumer groups (no online migration);
- ``authorized_operations`` is the full group operation set when asked for (no authorizer yet).
"""

from __future__ import annotations

import datetime

from shoal.groups.consumer import HeartbeatRequest
from shoal.handlers.groups import GROUP_OPS, NOT_PROVIDED, client_host
from shoal.handlers.registry import api
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
ZERO = datetime.timedelta(0)
MEMBER_TYPE_CONSUMER = 1


def _coordinator(ctx):
    return getattr(ctx.broker, "groups", None)


def _ms(td: datetime.timedelta) -> int:
    return int(td / datetime.timedelta(milliseconds=1))


@api(CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def handle_consumer_group_heartbeat(ctx, req):
    v = ctx.api_version
    mod = response_module(CONSUMER_GROUP_HEARTBEAT, v)
    coord = _coordinator(ctx)
    if coord is None:
        return build(
            mod.ConsumerGroupHeartbeatResponse, throttle_time=ZERO, error_code=ErrorCode.coordinator_not_available,
            member_epoch=0, heartbeat_interval=ZERO,
        )
    owned = None
    if req.topic_partitions is not None:
        owned = {}
        for tp in req.topic_partitions:
            if tp.partitions:
                owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    names = req.subscribed_topic_names
    r = await coord.consumer.heartbeat(
        HeartbeatRequest(
            group_id=req.group_id,
            member_id=req.member_id,
            member_epoch=req.member_epoch,
            instance_id=req.instance_id,
            rack_id=req.rack_id,
            rebalance_timeout_ms=_ms(req.rebalance_timeout),
            subscribed_topic_names=tuple(names) if names is not None else None,
            subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None),
            server_assignor=req.server_assignor,
            owned=owned,
            client_id=ctx.client_id or "",
            client_host=client_host(ctx),
        ),
        v,
    )
    assignment = None
    if r.assignment is not None:
        assignment = build(
            mod.Assignment,
            topic_partitions=tuple(
                build(mod.TopicPartitions, topic_id=t, partitions=tuple(sorted(ps)))
                for t, ps in sorted(r.assignment.items(), key=lambda kv: str(kv[0]))
            ),
        )
    return build(
        mod.ConsumerGroupHeartbeatResponse,
        throttle_time=ZERO,
        error_code=r.error,
        error_message=r.message,
        member_id=r.member_id,
        member_epoch=r.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=r.heartbeat_interval_ms),
        assignment=assignment,
    )


def _assignment(mod, manager, tps):
    rows = []
    for t, ps in sorted(tps.items(), key=lambda kv: str(kv[0])):
        name = manager.topic_name(t)
        if name is None:
            continue  # a topic deleted meanwhile (Kafka skips those too)
        rows.append(build(mod.TopicPartitions, topic_id=t, topic_name=name, partitions=tuple(sorted(ps))))
    return build(mod.Assignment, topic_partitions=tuple(rows))


@api(CONSUMER_GROUP_DESCRIBE, 0, 1)
async def handle_consumer_group_describe(ctx, req):
    mod = response_module(CONSUMER_GROUP_DESCRIBE, ctx.api_version)
    coord = _coordinator(ctx)
    ids = list(req.group_ids)
    out = []
    if coord is None:
        described = []
    else:
        described = coord.consumer.describe(ids)
    for i, gid in enumerate(ids):
        if coord is None:
            out.append(build(
                mod.DescribedGroup, error_code=ErrorCode.coordinator_not_available, group_id=gid, group_state="",
                group_epoch=0, assignment_epoch=0, assignor_name="", members=(),
            ))
            continue
        d = described[i]
        members = tuple(
            build(
                mod.Member,
                member_id=dm.member.member_id,
                instance_id=dm.member.instance_id,
                rack_id=dm.member.rack_id,
                member_epoch=dm.member.member_epoch,
                client_id=dm.member.client_id,
                client_host=dm.member.client_host,
                subscribed_topic_names=tuple(dm.member.subscribed_topic_names),
                subscribed_topic_regex=dm.member.subscribed_topic_regex,
                assignment=_assignment(mod, coord.consumer, dm.member.assigned),
                target_assignment=_assignment(mod, coord.consumer, dm.target),
                member_type=MEMBER_TYPE_CONSUMER,
            )
            for dm in d.members
        )
        ok = d.error == ErrorCode.none
        out.append(build(
            mod.DescribedGroup,
            error_code=d.error,
            error_message=d.message,
            group_id=gid,
            group_state=d.state,
            group_epoch=d.group_epoch,
            assignment_epoch=d.assignment_epoch,
            assignor_name=d.assignor,
            members=members,
            authorized_operations=GROUP_OPS if ok and req.include_authorized_operations else NOT_PROVIDED,
        ))
    return build(mod.ConsumerGroupDescribeResponse, throttle_time=ZERO, groups=tuple(out))
