"""Topic administration.

  CreateTopics (19)             v2-7
  DeleteTopics (20)             v1-6   (by name; by topic id from v6)
  CreatePartitions (37)         v0-3

Handlers only change metadata; the broker follows the new image (creates/deletes partition logs).
Every change is one decision run through ``store.decide_and_commit``: its checks (a topic's
existence, a tenant's create-topic policy and partition limit) and its change are decided on the
same image and decided again when another writer (a coroutine or another broker) committed first,
so no check is bypassed and no update is lost across brokers. A new topic's is the one creation
decision (``shoal.tenancy.creation.CreateTopic``: validation, placement, the tenant's policy),
which auto-creation and the internal topics use too. The configs of topics, brokers, namespaces
and tenants are ``shoal.handlers.configs``'.

Deliberate deviations from Kafka:
- Replica placement and its validation are the cluster's one planner (``shoal.cluster.planner``:
  Kafka's AdminUtils round-robin with a random start, rack-aware when every broker has a rack,
  KRaft's checks and messages); KRaft's striped placer is not used. At most
  ``MAX_PARTITIONS_PER_TOPIC`` partitions per topic (INVALID_PARTITIONS beyond it).
- Internal topics cannot be deleted (INVALID_REQUEST), as ZooKeeper-mode Kafka refused.
- No ``create.topic.policy.class.name``; tenants have their own create-topic policy.
- Deprecated topic configs Kafka 3.x accepts and ignores (``shoal.config.IGNORED_TOPIC_CONFIGS``:
  ``message.format.version``, ``message.timestamp.difference.max.ms``) are accepted by CreateTopics,
  AlterConfigs and IncrementalAlterConfigs with one warning line (rate-limited) and dropped: never
  stored, so DescribeConfigs does not list them (Kafka 3.x lists them, ignored).

Scoped (``ctx.scope``): a tenant creates and deletes only its own topics, named as it names them
(stored with its prefix); another tenant's topic, by name or id, does not exist for it.
Authorization as Kafka's KafkaApis: CreateTopics needs CREATE on the cluster or the topic,
DeleteTopics DELETE, CreatePartitions ALTER on the topic (TOPIC_AUTHORIZATION_FAILED); a created
topic's configs are returned only with DESCRIBE_CONFIGS on it (else topic_config_error_code
TOPIC_AUTHORIZATION_FAILED).

KIP-37 namespaces and tenant policies (``shoal.tenancy.namespaces``, ``shoal.tenancy.policy``):
- Topic names may be ``<namespace>:<topic>``; CreateTopics refuses a topic whose namespace does not
  exist (INVALID_TOPIC_EXCEPTION "Namespace 'a:b' does not exist", KIP-37's InvalidNamespaceException).
- The tenant's create-topic policy: CreateTopics (validate_only too) and CreatePartitions answer
  POLICY_VIOLATION with the limit's message.
- Placement is the operator's (``shoal.tenancy.scope.OPERATOR_TOPIC_CONFIGS``): a tenant's manual
  replica assignment (CreateTopics, CreatePartitions) and its setting ``replica.placement`` or a
  throttled-replicas list at creation answer POLICY_VIOLATION (and so do its changes of them
  later, ``shoal.handlers.configs``).
"""

from __future__ import annotations

import functools
import uuid
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from shoal.config import describe_topic_configs
from shoal.handlers.registry import api
from shoal.metadata import MetadataError, MetadataImage, MetadataStore, TopicInfo, inheritance
from shoal.metadata.change import Result
from shoal.metadata.rules import topics as topic_rules
from shoal.cluster import planner
from shoal.cluster.planner import PlacementError
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import error_code
from shoal.tenancy.acl import Operation, ResourceType
from shoal.tenancy import namespaces
from shoal.tenancy import policy as tenancy_policy
from shoal.tenancy.creation import CreateTopic
from shoal.tenancy.scope import ASSIGNMENT_IS_OPERATORS
from shoal.quotas import mutation

if TYPE_CHECKING:
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import (
        CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
        DeleteTopicsRequest, DeleteTopicsResponse,
    )
    from shoal.tenancy.scope import Scope

_T = TypeVar("_T")

CREATE_TOPICS = 19
DELETE_TOPICS = 20
CREATE_PARTITIONS = 37

_ZERO_UUID = uuid.UUID(int=0)  # kio decodes the zero uuid as None


class AdminError(Exception):
    def __init__(self, code: str, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# ---------------------------------------------------------------------------------------------
# Shared policy


def _metadata_error(e: MetadataError) -> AdminError:
    return AdminError(e.code, e.message)


async def decide(store: MetadataStore, decision: Callable[[MetadataImage], Result[_T]]) -> _T:
    """``store.decide_and_commit(decision)``: the decision's checks and its change are decided on
    one image, again after each lost compare-and-swap; a MetadataError becomes an AdminError."""
    try:
        return await store.decide_and_commit(decision)
    except MetadataError as e:
        raise _metadata_error(e) from None


def _charge_mutations(quota: Any, partitions: int) -> None:
    """KIP-599: charge the caller's controller mutation quota (shoal.quotas.mutation)."""
    try:
        quota.record(partitions)
    except mutation.ThrottlingQuotaExceeded:
        raise AdminError("THROTTLING_QUOTA_EXCEEDED", mutation.THROTTLING_QUOTA_EXCEEDED_MESSAGE) from None


# ---------------------------------------------------------------------------------------------
# CreateTopics


def _partitions_policy_error(image: MetadataImage, scope: Any, name: str, count: int) -> str | None:
    """The tenant's policy on growing ``name`` to ``count`` partitions (CreatePartitions)."""
    tenant = image.tenants.get(scope.tenant_id) if scope.tenant_id else None
    topic = scope.topic(image, name)
    if tenant is None or not tenant.policy or topic is None:
        return None
    state = tenancy_policy.tenant_state(image, tenant.tenant_id)
    return tenancy_policy.check_partitions(tenant.policy, state, name, len(topic.partitions), count)


def _creatable_configs(
    mod: Any, cfg: Any, overrides: Mapping[str, str], image: MetadataImage | None = None, physical: str = ""
) -> tuple:
    if not hasattr(mod, "CreatableTopicConfigs"):  # v5+
        return ()
    if image is not None:  # the new topic's configs with what it inherits (KIP-37)
        entries = namespaces.describe_layered(cfg, inheritance.config_layers(image, physical, overrides))
    else:
        entries = describe_topic_configs(cfg, overrides)
    return tuple(
        build(
            mod.CreatableTopicConfigs,
            name=e.name,
            value=e.value,
            read_only=e.read_only,
            config_source=int(e.source),
            is_sensitive=e.is_sensitive,
        )
        for e in entries
    )


@api(CREATE_TOPICS, 2, 7)
async def handle_create_topics(ctx: RequestContext, req: CreateTopicsRequest) -> CreateTopicsResponse:
    mod = response_module(CREATE_TOPICS, ctx.api_version)
    svc = ctx.services
    store = svc.metadata
    quota = mutation.request_quota(ctx, CREATE_TOPICS)  # quotas: KIP-599
    results = []
    counts: dict[str, int] = {}
    for t in req.topics:
        counts[t.name] = counts.get(t.name, 0) + 1

    def result(name: str, *, code: str = "NONE", message: str | None = None, topic_id: uuid.UUID | None = None,
               partitions: int = -1, rf: int = -1, configs: tuple[Any, ...] = (), config_code: str = "NONE") -> Any:
        return build(
            mod.CreatableTopicResult,
            name=name,
            topic_id=topic_id,
            error_code=error_code(code),
            error_message=message,
            topic_config_error_code=error_code(config_code),
            num_partitions=partitions,
            replication_factor=rf,
            configs=configs,
        )

    for t in req.topics:
        if counts[t.name] > 1:
            results.append(result(t.name, code="INVALID_REQUEST", message="Duplicate topic name."))
            continue
        cfg = svc.config
        scope = ctx.scope
        creation = CreateTopic(
            scope=scope, name=t.name, num_partitions=int(t.num_partitions), replication_factor=int(t.replication_factor),
            assignments=tuple((int(a.partition_index), tuple(int(b) for b in a.broker_ids)) for a in t.assignments),
            configs=tuple((c.name, c.value) for c in t.configs), config=cfg,
            new_uuid=store.new_uuid, rng=svc.random, fenced=lambda: svc.fenced_brokers)
        try:
            if not (
                scope.allowed_cluster(Operation.CREATE)
                or scope.allowed(Operation.CREATE, ResourceType.TOPIC, t.name)
            ):
                raise AdminError("TOPIC_AUTHORIZATION_FAILED", "Authorization failed.")
            try:
                planned = creation.plan(store.image)
            except MetadataError as e:
                raise _metadata_error(e) from None
            topic_id = None
            partitions, rf, configs = len(planned.assignments), planned.replication_factor, planned.configs
            if not req.validate_only:
                _charge_mutations(quota, len(planned.assignments))
                # decided again on the image it commits against: checks, placement and policy
                topic = await decide(store, creation.decide)
                topic_id, configs = topic.topic_id, topic.configs
                partitions, rf = len(topic.partitions), len(topic.partitions[0].replicas) if topic.partitions else 0
        except AdminError as e:
            results.append(result(t.name, code=e.code, message=e.message))
            continue
        if not scope.allowed(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, t.name):
            # Kafka: created, but its configs (and sizes) are not the caller's to see
            results.append(result(t.name, topic_id=topic_id, config_code="TOPIC_AUTHORIZATION_FAILED"))
            continue
        results.append(
            result(
                t.name,
                topic_id=topic_id,
                partitions=partitions,
                rf=rf,
                configs=_creatable_configs(mod, cfg, configs, store.image, scope.physical(t.name)),
            )
        )
    return build(mod.CreateTopicsResponse, throttle_time=mutation.response_throttle(ctx, quota), topics=tuple(results))


# ---------------------------------------------------------------------------------------------
# DeleteTopics


@api(DELETE_TOPICS, 1, 6)
async def handle_delete_topics(ctx: RequestContext, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
    mod = response_module(DELETE_TOPICS, ctx.api_version)
    svc = ctx.services
    store = svc.metadata
    quota = mutation.request_quota(ctx, DELETE_TOPICS)  # quotas: KIP-599
    by_id = ctx.api_version >= 6
    if by_id:
        wanted = [(t.name, t.topic_id if t.topic_id is not None else _ZERO_UUID) for t in getattr(req, "topics")]
    else:
        wanted = [(n, _ZERO_UUID) for n in getattr(req, "topic_names")]

    def result(name: str | None, topic_id: uuid.UUID, code: str = "NONE", message: str | None = None) -> Any:
        return build(
            mod.DeletableTopicResult,
            name=name,
            topic_id=None if topic_id == _ZERO_UUID else topic_id,
            error_code=error_code(code),
            error_message=message,
        )

    names_seen: dict[str, int] = {}
    ids_seen: dict[uuid.UUID, int] = {}
    for name, tid in wanted:
        if name is not None:
            names_seen[name] = names_seen.get(name, 0) + 1
        if tid != _ZERO_UUID:
            ids_seen[tid] = ids_seen.get(tid, 0) + 1

    results = []
    enabled = bool(svc.config.get("delete.topic.enable"))
    for name, tid in wanted:
        try:
            if name is not None and tid != _ZERO_UUID:
                raise AdminError("INVALID_REQUEST", "You may not specify both topic name and topic id.")
            if name is None and tid == _ZERO_UUID:
                raise AdminError("INVALID_REQUEST", "Neither topic name nor id were specified.")
            if (name is not None and names_seen[name] > 1) or (tid != _ZERO_UUID and ids_seen[tid] > 1):
                raise AdminError("INVALID_REQUEST", "Duplicate topic name or id in request.")
            image = store.image
            scope = ctx.scope
            if name is not None:
                if not scope.allowed(Operation.DELETE, ResourceType.TOPIC, name):
                    raise AdminError("TOPIC_AUTHORIZATION_FAILED", "Authorization failed.")
                topic = scope.topic(image, name)
                if topic is None:
                    raise AdminError(
                        "UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition."
                    )
            else:
                topic = scope.topic_by_id(image, tid)
                if topic is None:
                    raise AdminError("UNKNOWN_TOPIC_ID", "This server does not host this topic ID.")
                visible = scope.visible(topic.name)  # (None: not the scope's)
                if visible is None or not scope.allowed(Operation.DELETE, ResourceType.TOPIC, visible):
                    raise AdminError("TOPIC_AUTHORIZATION_FAILED", "Authorization failed.")
            name, tid = scope.visible(topic.name), topic.topic_id
            if not enabled:
                raise AdminError("TOPIC_DELETION_DISABLED", "Topic deletion is disabled.")
            if topic.internal:
                raise AdminError(
                    "INVALID_REQUEST", f"Topic {name} is an internal topic and cannot be deleted."
                )
            _charge_mutations(quota, len(topic.partitions))
            await decide(store, functools.partial(_delete_decision, topic=topic))
        except AdminError as e:
            results.append(result(name, tid, e.code, e.message))
            continue
        results.append(result(name, tid))
    return build(mod.DeleteTopicsResponse, throttle_time=mutation.response_throttle(ctx, quota), responses=tuple(results))


def _delete_decision(image: MetadataImage, topic: TopicInfo) -> Result[TopicInfo]:
    """Delete the topic that was checked (by id: a topic re-created meanwhile under its name is
    another topic and stays)."""
    current = image.topics.get(topic.name)
    if current is None or current.topic_id != topic.topic_id:
        raise AdminError("UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition.")
    return topic_rules.delete_topic(image, topic.name)


# ---------------------------------------------------------------------------------------------
# CreatePartitions


def _plan_partitions(
    image: MetadataImage, t: Any, scope: Any, fenced: frozenset[int]
) -> tuple[list[tuple[int, ...]], Any]:
    topic = scope.topic(image, t.name)
    if topic is None:
        raise AdminError("UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition.")
    if topic.internal:
        # Group and transaction coordinators map ids to partitions by count: it must not change.
        raise AdminError("INVALID_REQUEST", f"Cannot add partitions to internal topic {t.name}.")
    manual = None if t.assignments is None else [tuple(int(b) for b in a.broker_ids) for a in t.assignments]
    if manual is not None and not scope.physical_view:
        raise AdminError("POLICY_VIOLATION", ASSIGNMENT_IS_OPERATORS)
    from shoal.placement.constraints import parse_placement

    placement = topic.configs.get("replica.placement")
    try:
        plan = planner.plan_new_partitions(
            planner.live_brokers(image, fenced, topic.name), t.name, [p.replicas for p in topic.partitions], t.count, manual,
            placement=parse_placement(placement) if placement else None,
        )
    except PlacementError as e:
        raise AdminError(e.code, e.message) from None
    return list(plan.assignments), plan.observers


@api(CREATE_PARTITIONS, 0, 3)
async def handle_create_partitions(ctx: RequestContext, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
    mod = response_module(CREATE_PARTITIONS, ctx.api_version)
    svc = ctx.services
    store = svc.metadata
    quota = mutation.request_quota(ctx, CREATE_PARTITIONS)  # quotas: KIP-599
    counts: dict[str, int] = {}
    for t in req.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    results = []

    def result(name: str, code: str = "NONE", message: str | None = None) -> Any:
        return build(mod.CreatePartitionsTopicResult, name=name, error_code=error_code(code), error_message=message)

    for t in req.topics:
        scope = ctx.scope

        def checked(image: MetadataImage, t: Any = t, scope: Scope = scope) -> tuple[list[tuple[int, ...]], Any]:
            planned = _plan_partitions(image, t, scope, svc.fenced_brokers)
            policy_error = _partitions_policy_error(image, scope, t.name, t.count)
            if policy_error is not None:
                raise AdminError("POLICY_VIOLATION", policy_error)
            return planned

        def grow(image: MetadataImage, t: Any = t, scope: Scope = scope,
                 checked: Callable[[MetadataImage], tuple[list[tuple[int, ...]], Any]] = checked) -> Result[TopicInfo]:
            # decided on the image it commits against: the count and the tenant's partition limit
            # include partitions added meanwhile through any broker
            assignment, observers = checked(image)
            return topic_rules.add_partitions(image, scope.physical(t.name), assignment, observers)

        try:
            if counts[t.name] > 1:
                raise AdminError("INVALID_REQUEST", "Duplicate topic name.")
            if not scope.allowed(Operation.ALTER, ResourceType.TOPIC, t.name):
                raise AdminError("TOPIC_AUTHORIZATION_FAILED", "Authorization failed.")
            assignment, _observers = checked(store.image)
            if not req.validate_only:
                _charge_mutations(quota, len(assignment))
                await decide(store, grow)
        except AdminError as e:
            results.append(result(t.name, e.code, e.message))
            continue
        results.append(result(t.name))
    return build(mod.CreatePartitionsResponse, throttle_time=mutation.response_throttle(ctx, quota), results=tuple(results))
