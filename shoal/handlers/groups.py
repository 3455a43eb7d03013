"""Group coordination: FindCoordinator (10) v0-6, JoinGroup (11) v0-9, Heartbeat (12) v0-4,
LeaveGroup (13) v0-5, SyncGroup (14) v0-5, DescribeGroups (15) v0-6, ListGroups (16) v0-5,
DeleteGroups (42) v0-2.

The handlers translate between kio entities and ``shoal.groups.GroupCoordinator`` (which knows
nothing of the wire); a parked JoinGroup or SyncGroup is an ``await`` on the coordinator's future,
so other requests of the same connection keep flowing (responses still leave in order).

Deviations from Kafka:
- FindCoordinator for transactions (key_type 1) answers the leader of the transactional id's
  ``__transaction_state`` partition (``shoal.txn``), creating the topic at the first request
  (COORDINATOR_NOT_AVAILABLE until it is led); share groups (key_type 2, KIP-932) answer
  INVALID_REQUEST, as Kafka does with share groups off.
- DescribeGroups describes classic groups only: a KIP-848 group reads as Dead with GROUP_ID_NOT_FOUND
  (v6+; no error before), exactly as Kafka answers; ConsumerGroupDescribe (69) describes it.
  ListGroups lists both kinds (v5 ``group_type`` "classic" / "consumer").

Tenancy (``ctx.scope``): group ids arrive as the client sees them and reach the coordinator
qualified (``scope.physical``); responses carry the client's names. ListGroups lists the scope's
groups only; another tenant's group is exactly a group that does not exist. In a classic group of
protocol type "consumer", the topic names inside the members' subscriptions and the leader's
assignments are qualified on the way in and unqualified on the way out
(``shoal.groups.records.rename_subscription``/``rename_assignment``), so the coordinator and the
operator's view see real topics. FindCoordinator qualifies group and transactional ids alike.

Authorization, as Kafka's ``KafkaApis``: READ on the group for JoinGroup, SyncGroup, Heartbeat and
LeaveGroup; DESCRIBE on the group for DescribeGroups and FindCoordinator (DESCRIBE on the
transactional id for key type 1); DELETE on the group for DeleteGroups; ListGroups shows every
group with DESCRIBE on the cluster, else those with DESCRIBE on the group. Denied:
GROUP_AUTHORIZATION_FAILED (TRANSACTIONAL_ID_AUTHORIZATION_FAILED). ``authorized_operations`` is
Kafka's bit field of the group operations the caller may do.
"""

from __future__ import annotations

import datetime
import logging
from types import ModuleType
from typing import TYPE_CHECKING

from shoal.groups import OFFSETS_TOPIC, ClassicGroupState, JoinRequest, JoinResult, partition_for
from shoal.groups.classic import CONSUMER_PROTOCOL_TYPE
from shoal.groups.records import RecordFormatError, rename_assignment, rename_subscription
from shoal.handlers.registry import api
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode
from shoal.tenancy.acl import Operation, ResourceType

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import (
        DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
        FindCoordinatorRequest, FindCoordinatorResponse, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
        JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse,
        SyncGroupRequest, SyncGroupResponse,
    )
    from shoal.services import Services
    from shoal.tenancy.scope import Scope

log = logging.getLogger("shoal.handlers.groups")

FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42

KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, KEY_TYPE_SHARE = 0, 1, 2
ZERO = datetime.timedelta(0)
NOT_PROVIDED = -2147483648


def _ms(td: datetime.timedelta) -> int:
    return int(td / datetime.timedelta(milliseconds=1))


# -- tenancy: names, messages, authorization -------------------------------------------------------


def visible_message(scope: Scope, message: str | None) -> str | None:
    """A coordinator's message as the scope may read it: qualified names lose their prefix."""
    if message and scope.prefix:
        return message.replace(scope.prefix, "")
    return message


def group_operations(scope: Scope, group_id: str) -> int:
    """Kafka's ``authorizedOperations`` of a group: the bit field of READ, DELETE, DESCRIBE as
    allowed to the caller."""
    ops = 0
    for op in (Operation.READ, Operation.DELETE, Operation.DESCRIBE):
        if scope.allowed(op, ResourceType.GROUP, group_id):
            ops |= 1 << op
    return ops


def consumer_protocol_names(scope: Scope, protocol_type: str | None, data: bytes, assignment: bool,
                            inbound: bool) -> bytes:
    """A consumer-protocol subscription (or assignment) with its topic names qualified (inbound)
    or unqualified (outbound) for a tenant's scope. The physical view, other protocol types and
    bytes that are no consumer-protocol payload pass unchanged."""
    if not scope.prefix or protocol_type != CONSUMER_PROTOCOL_TYPE or not data:
        return data
    try:
        rename = rename_assignment if assignment else rename_subscription
        return rename(data, scope.physical if inbound else scope.visible)
    except RecordFormatError as e:
        log.debug("tenant %s: a consumer protocol %s that does not parse (%s) is passed as is",
                  scope.tenant_id, "assignment" if assignment else "subscription", e)
        return data


def client_host(ctx: RequestContext) -> str:
    """Kafka shows the client's address as ``InetAddress.toString()``: "/127.0.0.1"."""
    addr = ctx.client_address or ""
    host = addr.rsplit(":", 1)[0] if ":" in addr else addr
    return "/" + host.strip("[]")


# -- FindCoordinator ---------------------------------------------------------------------------


def find_coordinator(svc: Services, listener: str, key_type: int,
                     key: str) -> tuple[int, str, int, ErrorCode, str | None]:
    """(node id, host, port, error, message) of the coordinator for ``key``."""
    if key_type == KEY_TYPE_TRANSACTION:
        return _transaction_coordinator(svc, listener, key)
    if key_type != KEY_TYPE_GROUP:
        return -1, "", -1, ErrorCode.invalid_request, f"Unsupported coordinator key type {key_type}."
    image = svc.metadata.image
    topic = image.topic(OFFSETS_TOPIC)
    if topic is None or not topic.partitions:
        if topic is None:  # cluster: created at first use
            svc.groups.request_offsets_topic()
        return -1, "", -1, ErrorCode.coordinator_not_available, None
    pinfo = topic.partitions[partition_for(key, len(topic.partitions))]
    node = image.brokers.get(pinfo.leader)
    if node is None:
        return -1, "", -1, ErrorCode.coordinator_not_available, None
    host, port = node.endpoint(listener)
    return node.node_id, host, port, ErrorCode.none, None


def _transaction_coordinator(svc: Services, listener: str, key: str) -> tuple[int, str, int, ErrorCode, str | None]:
    """The leader of ``__transaction_state`` partition ``abs(hashCode(key)) % n``; the topic is
    created at the first request (the client retries COORDINATOR_NOT_AVAILABLE meanwhile)."""
    from shoal.txn import TXN_STATE_TOPIC

    image = svc.metadata.image
    topic = image.topic(TXN_STATE_TOPIC)
    if topic is None or not topic.partitions:
        if topic is None:
            svc.txn.request_topic()
        return -1, "", -1, ErrorCode.coordinator_not_available, None
    pinfo = topic.partitions[partition_for(key, len(topic.partitions))]
    node = image.brokers.get(pinfo.leader)
    if node is None:
        return -1, "", -1, ErrorCode.coordinator_not_available, None
    host, port = node.endpoint(listener)
    return node.node_id, host, port, ErrorCode.none, None


def _scoped_coordinator(ctx: RequestContext, key_type: int, key: str) -> tuple[int, str, int, ErrorCode, str | None]:
    """``find_coordinator`` for a key as the client names it: authorized (Kafka's
    ``getCoordinator``), then qualified."""
    scope = ctx.scope
    if key_type == KEY_TYPE_GROUP and not scope.allowed(Operation.DESCRIBE, ResourceType.GROUP, key):
        return -1, "", -1, ErrorCode.group_authorization_failed, None
    if key_type == KEY_TYPE_TRANSACTION and not scope.allowed(
        Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
    ):
        return -1, "", -1, ErrorCode.transactional_id_authorization_failed, None
    return find_coordinator(ctx.services, ctx.listener, key_type, scope.physical(key))


@api(FIND_COORDINATOR, 0, 6)
async def handle_find_coordinator(ctx: RequestContext, req: FindCoordinatorRequest) -> FindCoordinatorResponse:
    v = ctx.api_version
    mod = response_module(FIND_COORDINATOR, v)
    key_type = getattr(req, "key_type", KEY_TYPE_GROUP)
    if v >= 4:
        coordinators = []
        for key in getattr(req, "coordinator_keys"):
            node_id, host, port, code, message = _scoped_coordinator(ctx, key_type, key)
            coordinators.append(
                build(mod.Coordinator, key=key, node_id=node_id, host=host, port=port, error_code=code, error_message=message)
            )
        return build(mod.FindCoordinatorResponse, throttle_time=ZERO, coordinators=tuple(coordinators))
    node_id, host, port, code, message = _scoped_coordinator(ctx, key_type, getattr(req, "key"))
    return build(
        mod.FindCoordinatorResponse,
        throttle_time=ZERO,
        error_code=code,
        error_message=message,
        node_id=node_id,
        host=host,
        port=port,
    )


# -- JoinGroup -----------------------------------------------------------------------------------


def _join_response(mod: ModuleType, v: int, r: JoinResult, scope: Scope | None = None) -> JoinGroupResponse:
    members = tuple(
        build(
            mod.JoinGroupResponseMember, member_id=m.member_id, group_instance_id=m.group_instance_id,
            metadata=m.metadata if scope is None else consumer_protocol_names(
                scope, r.protocol_type, m.metadata, assignment=False, inbound=False),
        )
        for m in r.members
    )
    return build(
        mod.JoinGroupResponse,
        throttle_time=ZERO,
        error_code=r.error,
        generation_id=r.generation_id,
        protocol_type=r.protocol_type,
        protocol_name=r.protocol_name if v >= 7 else (r.protocol_name or ""),
        leader=r.leader,
        skip_assignment=r.skip_assignment,
        member_id=r.member_id,
        members=members,
    )


@api(JOIN_GROUP, 0, 9)
async def handle_join_group(ctx: RequestContext, req: JoinGroupRequest) -> JoinGroupResponse:
    v = ctx.api_version
    mod = response_module(JOIN_GROUP, v)
    coord = ctx.services.groups
    scope = ctx.scope
    if not scope.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return _join_response(mod, v, JoinResult(ErrorCode.group_authorization_failed, ""))
    if scope.reserved_group(req.group_id):  # tenancy: a tenant's ids are not lkc-xxxxxx_ shaped
        return _join_response(mod, v, JoinResult(ErrorCode.invalid_group_id, req.member_id))
    session_ms = _ms(req.session_timeout)
    rebalance_ms = _ms(getattr(req, "rebalance_timeout")) if v >= 1 else session_ms
    fut = coord.join_group(
        JoinRequest(
            group_id=scope.physical(req.group_id),
            member_id=req.member_id,
            group_instance_id=getattr(req, "group_instance_id", None),
            protocol_type=req.protocol_type,
            protocols=tuple(
                (p.name, consumer_protocol_names(scope, req.protocol_type, p.metadata, assignment=False, inbound=True))
                for p in req.protocols
            ),
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            client_id=ctx.client_id or "",
            client_host=client_host(ctx),
            require_known_member_id=v >= 4,
            supports_skip_assignment=v >= 9,
            reason=getattr(req, "reason", None),
        )
    )
    return _join_response(mod, v, await fut, scope)


# -- SyncGroup -----------------------------------------------------------------------------------


@api(SYNC_GROUP, 0, 5)
async def handle_sync_group(ctx: RequestContext, req: SyncGroupRequest) -> SyncGroupResponse:
    v = ctx.api_version
    mod = response_module(SYNC_GROUP, v)
    coord = ctx.services.groups
    scope = ctx.scope
    if not scope.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return build(mod.SyncGroupResponse, throttle_time=ZERO, error_code=ErrorCode.group_authorization_failed, assignment=b"")
    group_id = scope.physical(req.group_id)
    group = coord.groups.get(group_id)
    protocol_type = group.protocol_type if group is not None else getattr(req, "protocol_type", None)
    fut = coord.sync_group(
        group_id,
        req.generation_id,
        req.member_id,
        getattr(req, "group_instance_id", None),
        getattr(req, "protocol_type", None),
        getattr(req, "protocol_name", None),
        {
            a.member_id: consumer_protocol_names(scope, protocol_type, a.assignment, assignment=True, inbound=True)
            for a in req.assignments
        },
    )
    r = await fut
    return build(
        mod.SyncGroupResponse,
        throttle_time=ZERO,
        error_code=r.error,
        protocol_type=r.protocol_type,
        protocol_name=r.protocol_name,
        assignment=consumer_protocol_names(
            scope, r.protocol_type or protocol_type, r.assignment, assignment=True, inbound=False),
    )


# -- Heartbeat -----------------------------------------------------------------------------------


@api(HEARTBEAT, 0, 4)
async def handle_heartbeat(ctx: RequestContext, req: HeartbeatRequest) -> HeartbeatResponse:
    mod = response_module(HEARTBEAT, ctx.api_version)
    coord = ctx.services.groups
    scope = ctx.scope
    if not scope.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        code = ErrorCode.group_authorization_failed
    else:
        code = coord.heartbeat(
            scope.physical(req.group_id), req.member_id, getattr(req, "group_instance_id", None), req.generation_id
        )
    return build(mod.HeartbeatResponse, throttle_time=ZERO, error_code=code)


# -- LeaveGroup ----------------------------------------------------------------------------------


@api(LEAVE_GROUP, 0, 5)
async def handle_leave_group(ctx: RequestContext, req: LeaveGroupRequest) -> LeaveGroupResponse:
    v = ctx.api_version
    mod = response_module(LEAVE_GROUP, v)
    coord = ctx.services.groups
    if v >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in getattr(req, "members")]
    else:
        leaving = [(getattr(req, "member_id"), None)]
    scope = ctx.scope
    codes: list[ErrorCode]
    if not scope.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        top, codes = ErrorCode.group_authorization_failed, []
    else:
        top, codes = coord.leave_group(scope.physical(req.group_id), leaving)
    if v < 3:
        if top == ErrorCode.none and codes:
            top = codes[0]
        return build(mod.LeaveGroupResponse, throttle_time=ZERO, error_code=top)
    members = tuple(
        build(mod.MemberResponse, member_id=mid, group_instance_id=iid, error_code=code)
        for (mid, iid), code in zip(leaving, codes)
    )
    return build(mod.LeaveGroupResponse, throttle_time=ZERO, error_code=top, members=members)


# -- DescribeGroups ------------------------------------------------------------------------------


@api(DESCRIBE_GROUPS, 0, 6)
async def handle_describe_groups(ctx: RequestContext, req: DescribeGroupsRequest) -> DescribeGroupsResponse:
    v = ctx.api_version
    mod = response_module(DESCRIBE_GROUPS, v)
    coord = ctx.services.groups
    scope = ctx.scope
    want_ops = v >= 3 and getattr(req, "include_authorized_operations", False)

    def error_row(gid: str, code: ErrorCode, state: str, message: str | None) -> Entity:
        return build(
            mod.DescribedGroup, error_code=code, error_message=message, group_id=gid, group_state=state,
            protocol_type="", protocol_data="", members=(), authorized_operations=NOT_PROVIDED,
        )

    denied, out = [], []  # Kafka answers the denied groups first
    for gid in req.groups:
        if not scope.allowed(Operation.DESCRIBE, ResourceType.GROUP, gid):
            denied.append(error_row(gid, ErrorCode.group_authorization_failed, "", None))
            continue
        code, group = coord.describe_group(scope.physical(gid))
        if group is None:
            not_found = code == ErrorCode.group_id_not_found
            out.append(error_row(
                gid,
                code if (not not_found or v >= 6) else ErrorCode.none,
                ClassicGroupState.DEAD.value if not_found else "",
                f"Group {gid} not found." if not_found and v >= 6 else None,
            ))
            continue
        stable = group.state is ClassicGroupState.STABLE
        ptype = group.protocol_type
        members = tuple(
            build(
                mod.DescribedGroupMember,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=consumer_protocol_names(
                    scope, ptype, m.metadata(group.protocol_name), assignment=False, inbound=False
                ) if stable else b"",
                member_assignment=consumer_protocol_names(scope, ptype, m.assignment, assignment=True, inbound=False),
            )
            for m in group.members.values()
        )
        out.append(
            build(
                mod.DescribedGroup,
                error_code=ErrorCode.none,
                error_message=None,
                group_id=gid,
                group_state=group.state_name,
                protocol_type=ptype or "",
                protocol_data=(group.protocol_name or "") if stable else "",
                members=members,
                authorized_operations=group_operations(scope, gid) if want_ops else NOT_PROVIDED,
            )
        )
    return build(mod.DescribeGroupsResponse, throttle_time=ZERO, groups=tuple(denied + out))


# -- ListGroups ----------------------------------------------------------------------------------


@api(LIST_GROUPS, 0, 5)
async def handle_list_groups(ctx: RequestContext, req: ListGroupsRequest) -> ListGroupsResponse:
    v = ctx.api_version
    mod = response_module(LIST_GROUPS, v)
    coord = ctx.services.groups
    scope = ctx.scope
    code, groups = coord.list_groups(getattr(req, "states_filter", ()), getattr(req, "types_filter", ()))
    every = scope.allowed_cluster(Operation.DESCRIBE)  # else only groups it may describe (Kafka)
    named = []
    for g in groups:
        name = scope.visible(g.group_id)
        if name is not None and (every or scope.allowed(Operation.DESCRIBE, ResourceType.GROUP, name)):
            named.append((name, g))
    listed = tuple(
        build(
            mod.ListedGroup,
            group_id=name,
            protocol_type=g.protocol_type or "",
            group_state=g.state_name,
            group_type=g.group_type,
        )
        for name, g in sorted(named, key=lambda ng: ng[0])
    )
    return build(mod.ListGroupsResponse, throttle_time=ZERO, error_code=code, groups=listed)


# -- DeleteGroups --------------------------------------------------------------------------------


@api(DELETE_GROUPS, 0, 2)
async def handle_delete_groups(ctx: RequestContext, req: DeleteGroupsRequest) -> DeleteGroupsResponse:
    mod = response_module(DELETE_GROUPS, ctx.api_version)
    scope = ctx.scope
    names = list(dict.fromkeys(req.groups_names))
    allowed: list[str] = []
    denied: list[str] = []
    for n in names:
        (allowed if scope.allowed(Operation.DELETE, ResourceType.GROUP, n) else denied).append(n)
    by_physical = await ctx.services.groups.delete_groups([scope.physical(n) for n in allowed])
    results = {n: by_physical[scope.physical(n)] for n in allowed}
    results.update((n, ErrorCode.group_authorization_failed) for n in denied)  # after the others, as Kafka
    return build(
        mod.DeleteGroupsResponse,
        throttle_time=ZERO,
        results=tuple(build(mod.DeletableGroupResult, group_id=n, error_code=c) for n, c in results.items()),
    )
