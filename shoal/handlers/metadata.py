"""Metadata (key 3, v0-v13) and DescribeCluster (key 60, v0-v2).

Scoped (``ctx.scope``): a tenant sees only its own topics, under their unqualified names, and its
logical cluster id; another tenant's topic, by name or by id, is answered exactly as a topic that
does not exist. Authorization as Kafka's: all-topics lists only topics the principal may DESCRIBE;
a named topic without DESCRIBE is TOPIC_AUTHORIZATION_FAILED; auto-creation needs CREATE on the
cluster or the topic. authorized_operations bit sets are computed when asked for (the cluster's
is 0 without DESCRIBE on it). DescribeCluster needs no ACL, as in Kafka.

v10/v11 may send a null topic name (nullable from v10) but topic ids only from v12: a null name or
a topic id there is answered as Kafka's InvalidRequestException, every requested topic
INVALID_REQUEST (a null name as "", which the response's name must be before v12).

Deviations from Kafka:
- Brokers are listed with the endpoint of the listener the request arrived on.
"""

from __future__ import annotations

import datetime
import uuid
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterable

from shoal.handlers.registry import api
from shoal.metadata import MetadataError, MetadataImage, PartitionInfo, TopicInfo
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode, error_code
from shoal.tenancy.acl import CLUSTER_NAME, Operation, ResourceType
from shoal.tenancy.creation import AutoCreateTopic
# Kafka's Topic.validate with KIP-37 names; a namespace that does not exist is refused by
# auto-creation (auto_create_topic below), not here.
from shoal.tenancy.namespaces import topic_name_error

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import (
        DescribeClusterRequest, DescribeClusterResponse, MetadataRequest, MetadataResponse,
    )
    from shoal.services import Services
    from shoal.tenancy.scope import Scope

METADATA = 3
DESCRIBE_CLUSTER = 60
ZERO_UUID = uuid.UUID(int=0)
NOT_PROVIDED = -2147483648
# Kafka's operations on topics / the cluster (AclOperation codes, as AclEntry.supportedOperations):
# topics READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS; the cluster
# CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE (seven:
# never WRITE, which librdkafka's test 0081 checks).
TOPIC_OPS = (3, 4, 5, 6, 7, 8, 10, 11)
CLUSTER_OPS = (5, 7, 8, 9, 10, 11, 12)


def authorized_operations(scope: Scope, resource_type: int, name: str, ops: tuple[int, ...]) -> int:
    """Kafka's authorized_operations bit set of ``name`` for this request's principal."""
    return sum(1 << op for op in ops if scope.allowed(op, resource_type, name))


def cluster_operations(scope: Scope) -> int:
    """Kafka's cluster_authorized_operations: the bit set, or 0 without DESCRIBE on the cluster."""
    if not scope.allowed_cluster(Operation.DESCRIBE):
        return 0
    return authorized_operations(scope, ResourceType.CLUSTER, CLUSTER_NAME, CLUSTER_OPS)


def _brokers(cls: type, image: MetadataImage, listener: str) -> tuple[Entity, ...]:
    """Brokers as ``cls`` entities, each with its endpoint on the listener the client used."""
    out = []
    for b in sorted(image.brokers.values(), key=lambda b: b.node_id):
        host, port = b.endpoint(listener)
        out.append(
            build(cls, node_id=b.node_id, broker_id=b.node_id, host=host, port=port, rack=b.rack, is_fenced=False)
        )
    return tuple(out)


def partition_fields(p: PartitionInfo, image: MetadataImage) -> dict[str, object]:
    """What Metadata and DescribeTopicPartitions say of a partition: a leader that is not a live
    broker is LEADER_NOT_AVAILABLE with no leader id; replicas on brokers not live are offline."""
    leader_ok = p.leader in image.brokers
    return dict(
        error_code=ErrorCode.none if leader_ok else ErrorCode.leader_not_available,
        partition_index=p.partition,
        leader_id=p.leader if leader_ok else -1,
        leader_epoch=p.leader_epoch,
        replica_nodes=p.replicas,
        isr_nodes=p.isr,
        offline_replicas=tuple(r for r in p.replicas if r not in image.brokers),
    )


def invalid_topic_name(scope: Scope, image: MetadataImage, name: str) -> bool:
    """A name no topic of this scope can have: INVALID_TOPIC_EXCEPTION rather than unknown."""
    return bool(topic_name_error(scope.physical(name))) or scope.reserved_name(image, name)


def topic_operations(scope: Scope, name: str) -> int:
    return authorized_operations(scope, ResourceType.TOPIC, name, TOPIC_OPS)


class PartitionEntities:
    """Each topic's Metadata partition entities, built once per state of the topic: a broker of
    thousands of partitions spent most of a full Metadata (22 ms of 35 ms at 6,000 partitions)
    building the same frozen entities again, and clients ask for all of it at every failover.

    An entry is (topic, brokers, entities) by response version and physical topic name, and is
    used only while the image holds that very ``TopicInfo`` (images share the objects of topics
    a change did not touch) and that very ``brokers`` mapping (registrations decide leader errors
    and offline replicas): anything else builds it again. Names of topics no longer in the image
    are dropped once the entries outnumber twice the topics. One per broker (``Services``), read
    and written on its event loop only."""

    def __init__(self) -> None:
        self._by_version: dict[ModuleType, dict[str, tuple[TopicInfo, Any, tuple[Entity, ...]]]] = {}
        self.built = 0  # topics whose entities were built (not found): what the tests count

    def get(self, mod: ModuleType, topic: TopicInfo, image: MetadataImage) -> tuple[Entity, ...]:
        entries = self._by_version.setdefault(mod, {})
        hit = entries.get(topic.name)
        if hit is not None and hit[0] is topic and hit[1] is image.brokers:
            return hit[2]
        parts = _partitions(mod, topic, image)
        self.built += 1
        if len(entries) >= 2 * len(image.topics) + 16:
            for name in [n for n in entries if n not in image.topics]:
                del entries[name]
        entries[topic.name] = (topic, image.brokers, parts)
        return parts


def _partitions(mod: ModuleType, topic: TopicInfo, image: MetadataImage) -> tuple[Entity, ...]:
    return tuple(build(mod.MetadataResponsePartition, **partition_fields(p, image)) for p in topic.partitions)


def _topic(mod: ModuleType, topic: TopicInfo, image: MetadataImage, include_ops: bool, scope: Scope, name: str,
           cache: PartitionEntities) -> Entity:
    return build(
        mod.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=cache.get(mod, topic, image),
        topic_authorized_operations=topic_operations(scope, name) if include_ops else NOT_PROVIDED,
    )


def _missing(mod: ModuleType, name: str | None, topic_id: uuid.UUID | None, code: ErrorCode) -> Entity:
    return build(
        mod.MetadataResponseTopic,
        error_code=code,
        name=name,
        topic_id=topic_id or ZERO_UUID,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=NOT_PROVIDED,
    )


def _invalid_request(mod: ModuleType, requested: Iterable[Any]) -> MetadataResponse:
    """Kafka's answer to v10/v11 naming a topic by null name or by id (only v12+ may): its
    InvalidRequestException's error response, every requested topic INVALID_REQUEST, a null name
    as "" (the response's name is not nullable before v12), no brokers."""
    return build(
        mod.MetadataResponse, error_code=ErrorCode.none, throttle_time=datetime.timedelta(0), brokers=(),
        cluster_id=None, controller_id=-1, cluster_authorized_operations=NOT_PROVIDED,
        topics=tuple(_missing(mod, t.name or "", getattr(t, "topic_id", None), ErrorCode.invalid_request)
                     for t in requested),
    )


@api(METADATA, 0, 13)
async def handle_metadata(ctx: RequestContext, req: MetadataRequest) -> MetadataResponse:
    svc = ctx.services
    v = ctx.api_version
    mod = response_module(METADATA, v)
    include_ops = bool(getattr(req, "include_topic_authorized_operations", False))
    # v0: an empty list means all topics; v1+: null means all, empty means none.
    all_topics = req.topics is None or (v == 0 and not req.topics)
    # Auto-creation: v0-v3 always allow it; v4+ as the request says.
    allow_auto = v < 4 or bool(getattr(req, "allow_auto_topic_creation", True))
    allow_auto = allow_auto and bool(svc.config.get("auto.create.topics.enable"))
    scope = ctx.scope
    requested = () if req.topics is None else req.topics  # (None: all topics)
    if not all_topics and v < 12 and any(
            getattr(t, "name", "") is None or getattr(t, "topic_id", ZERO_UUID) not in (None, ZERO_UUID)
            for t in requested):
        return _invalid_request(mod, requested)
    cache = svc.metadata_partitions
    topics = []
    if all_topics:
        image = svc.metadata.image
        for visible, topic in sorted(scope.topics(image)):
            if scope.allowed(Operation.DESCRIBE, ResourceType.TOPIC, visible):
                topics.append(_topic(mod, topic, image, include_ops, scope, visible, cache))
    else:
        for t in requested:
            name = getattr(t, "name", None)
            topic_id = getattr(t, "topic_id", None)
            if topic_id is not None and topic_id == ZERO_UUID:
                topic_id = None
            image = svc.metadata.image
            if name is None and topic_id is not None:
                info = scope.topic_by_id(image, topic_id)
                if info is None:
                    topics.append(_missing(mod, None, topic_id, ErrorCode.unknown_topic_id))
                    continue
                name = scope.visible(info.name)
                # (name None: not the scope's topic)
                if name is None or not scope.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
                    topics.append(_missing(mod, None, topic_id, ErrorCode.topic_authorization_failed))
                else:
                    topics.append(_topic(mod, info, image, include_ops, scope, name, cache))
                continue
            if name is None:
                topics.append(_missing(mod, None, None, ErrorCode.invalid_request))
                continue
            if not scope.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append(_missing(mod, name, None, ErrorCode.topic_authorization_failed))
                continue
            info = scope.topic(image, name)
            if info is None:
                if invalid_topic_name(scope, image, name):
                    topics.append(_missing(mod, name, None, ErrorCode.invalid_topic_exception))
                    continue
                if allow_auto:
                    if not (
                        scope.allowed_cluster(Operation.CREATE)
                        or scope.allowed(Operation.CREATE, ResourceType.TOPIC, name)
                    ):
                        topics.append(_missing(mod, name, None, ErrorCode.topic_authorization_failed))
                        continue
                    try:
                        await auto_create_topic(svc, scope.physical(name))
                    except MetadataError as e:
                        topics.append(_missing(mod, name, None, error_code(e.code)))
                        continue
                    # Kafka answers LEADER_NOT_AVAILABLE for a topic it just created; our
                    # creation is synchronous, so the topic is ready and we describe it.
                    image = svc.metadata.image
                    info = scope.topic(image, name)
                if info is None:
                    topics.append(_missing(mod, name, None, ErrorCode.unknown_topic_or_partition))
                    continue
            topics.append(_topic(mod, info, image, include_ops, scope, name, cache))
    image = svc.metadata.image
    return build(
        mod.MetadataResponse,
        error_code=ErrorCode.none,  # v13+ (KIP-1102)
        throttle_time=datetime.timedelta(0),
        brokers=_brokers(mod.MetadataResponseBroker, image, ctx.listener),
        cluster_id=scope.cluster_id(image),
        controller_id=ctx.services.controller_id,
        topics=tuple(topics),
        cluster_authorized_operations=cluster_operations(scope)
        if getattr(req, "include_cluster_authorized_operations", False)
        else NOT_PROVIDED,
    )


@api(DESCRIBE_CLUSTER, 0, 2)
async def handle_describe_cluster(ctx: RequestContext, req: DescribeClusterRequest) -> DescribeClusterResponse:
    mod = response_module(DESCRIBE_CLUSTER, ctx.api_version)
    image = ctx.services.metadata.image
    scope = ctx.scope  # no ACL needed (Kafka's computeDescribeClusterResponse)
    endpoint_type = getattr(req, "endpoint_type", 1)
    if endpoint_type != 1:
        # 1 = brokers; 2 = controllers (KIP-919) which a single embedded store does not expose.
        return build(
            mod.DescribeClusterResponse,
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message="Shoal exposes broker endpoints only",
            endpoint_type=endpoint_type,
            cluster_id=scope.cluster_id(image),
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=NOT_PROVIDED,
        )
    return build(
        mod.DescribeClusterResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,
        cluster_id=scope.cluster_id(image),
        controller_id=ctx.services.controller_id,
        brokers=_brokers(mod.DescribeClusterBroker, image, ctx.listener),
        cluster_authorized_operations=cluster_operations(scope)
        if req.include_cluster_authorized_operations
        else NOT_PROVIDED,
    )


async def auto_create_topic(svc: "Services", name: str) -> TopicInfo | None:
    """Create a topic with broker defaults, as Kafka does for Metadata with auto-creation: the one
    creation decision (``shoal.tenancy.creation``: namespace, tenant policy, placement), decided
    on the image it commits against; a topic of that name created meanwhile is the answer."""
    store = svc.metadata
    decision = AutoCreateTopic(name=name, config=svc.config, new_uuid=store.new_uuid, rng=svc.random,
                               fenced=lambda: svc.fenced_brokers)
    return await store.decide_and_commit(decision.decide)
