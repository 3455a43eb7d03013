"""Topic and config administration.

  CreateTopics (19)             v2-7
  DeleteTopics (20)             v1-6   (by name; by topic id from v6)
  CreatePartitions (37)         v0-3
  DescribeConfigs (32)          v1-4   (TOPIC, BROKER; BROKER_LOGGER answers an empty list)
  AlterConfigs (33)             v0-2
  IncrementalAlterConfigs (44)  v0-1   (SET, DELETE, APPEND, SUBTRACT)

Handlers only change metadata; the broker follows the new image (creates/deletes partition logs,
applies new LogConfigs). Every change is one decision run through
``store.decide_and_commit``: its checks (a topic's existence, a tenant's create-topic policy and
partition limit, the configs an AlterConfigs replaces or an IncrementalAlterConfigs edits) and its
change are decided on the same image and decided again when another writer (a coroutine or another
broker) committed first, so no check is bypassed and no update is lost across brokers.

Deliberate deviations from Kafka:
- Replica placement and its validation are the cluster's one planner (``shoal.cluster.planner``:
  Kafka's AdminUtils round-robin with a random start, rack-aware when every broker has a rack,
  KRaft's checks and messages); KRaft's striped placer is not used. At most
  ``MAX_PARTITIONS_PER_TOPIC`` partitions per topic (INVALID_PARTITIONS beyond it).
- BROKER resources: "" is the cluster-wide dynamic default (DYNAMIC_DEFAULT_BROKER_CONFIG), this
  broker's id its own dynamic configs (DYNAMIC_BROKER_CONFIG, ``MetadataImage.broker_overrides``,
  above the default); both take the keys ``shoal.config`` marks dynamic (others: INVALID_REQUEST
  "Cannot update these configs dynamically"). Another broker's id is INVALID_REQUEST, as Kafka
  (a client sends a broker's resource to that broker). The broker follows a change at once where
  it reads the config per use (quotas, connection limits, log defaults).
- Internal topics cannot be deleted (INVALID_REQUEST), as ZooKeeper-mode Kafka refused.
- No ``create.topic.policy.class.name``; tenants have their own create-topic policy.
- Deprecated topic configs Kafka 3.x accepts and ignores (``shoal.config.IGNORED_TOPIC_CONFIGS``:
  ``message.format.version``, ``message.timestamp.difference.max.ms``) are accepted by CreateTopics,
  AlterConfigs and IncrementalAlterConfigs with one warning line (rate-limited) and dropped: never
  stored, so DescribeConfigs does not list them (Kafka 3.x lists them, ignored).

Scoped (``ctx.scope``): a tenant creates, deletes and alters only its own topics, named as it
names them (stored with its prefix); another tenant's topic, by name or id, does not exist for it.
Authorization as Kafka's KafkaApis: CreateTopics needs CREATE on the cluster or the topic,
DeleteTopics DELETE, CreatePartitions ALTER on the topic (TOPIC_AUTHORIZATION_FAILED); a created
topic's configs are returned only with DESCRIBE_CONFIGS on it (else topic_config_error_code
TOPIC_AUTHORIZATION_FAILED). Configs: DESCRIBE_CONFIGS/ALTER_CONFIGS on the topic, or on the
cluster for BROKER and BROKER_LOGGER resources (CLUSTER_AUTHORIZATION_FAILED).
- BROKER_LOGGER resources are described as empty and cannot be altered.

KIP-37 namespaces and tenant defaults (``shoal.tenancy.namespaces``, ``shoal.tenancy.policy``):
- Topic names may be ``<namespace>:<topic>``; CreateTopics refuses a topic whose namespace does not
  exist (INVALID_TOPIC_EXCEPTION "Namespace 'a:b' does not exist", KIP-37's InvalidNamespaceException).
- A topic's configs it does not set are inherited (namespace, parents, tenant default, broker):
  DescribeConfigs reports an inherited value as DYNAMIC_DEFAULT_BROKER_CONFIG (3), with one synonym
  per layer that sets it and the layer in ``documentation`` ("inherited from namespace payments:eu").
- A TOPIC resource named ``<namespace>:`` is the namespace's configs (Describe/Alter/Incremental,
  topic config names; DESCRIBE_CONFIGS/ALTER_CONFIGS on the NAMESPACE resource).
- A tenant's BROKER resource "" is its topic config defaults (topic names or their broker synonyms;
  other broker configs POLICY_VIOLATION; DESCRIBE_CONFIGS/ALTER_CONFIGS on the cluster). So is its
  BROKER resource named by this broker's id, since librdkafka refuses an empty resource name; a
  tenant never sees nor alters the physical broker's configs.
- The tenant's create-topic policy: CreateTopics (validate_only too) and CreatePartitions answer
  POLICY_VIOLATION with the limit's message.
- Placement is the operator's (``shoal.tenancy.scope.OPERATOR_TOPIC_CONFIGS``): a tenant's manual
  replica assignment (CreateTopics, CreatePartitions) and its setting, changing or removing
  ``replica.placement`` or a throttled-replicas list (at creation, on a topic, a namespace or its
  defaults) answer POLICY_VIOLATION; a tenant's AlterConfigs keeps the operator's values of them.
"""

from __future__ import annotations

import datetime
import functools
import logging
import uuid
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from shoal.config import (
    ConfigError,
    describe_broker_configs,
    describe_topic_configs,
    is_list_config,
    topic_config_value,
    validate_dynamic_broker_configs,
    canonical_config_name,
    validate_topic_configs,
    BROKER_CONFIGS,
    IGNORED_TOPIC_CONFIGS,
    TOPIC_CONFIGS,
    format_value,
)
from shoal.logutil import RateLimitedLog
from shoal.handlers.registry import api
from shoal.metadata import MetadataError, MetadataImage, MetadataStore, TopicInfo, inheritance
from shoal.metadata.change import Result, unchanged
from shoal.metadata.rules import configs as config_rules
from shoal.metadata.rules import namespaces as namespace_rules
from shoal.metadata.rules import tenants as tenant_rules
from shoal.metadata.rules import topics as topic_rules
from shoal.cluster import planner
from shoal.cluster.planner import PlacementError
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode, error_code
from shoal.tenancy.acl import Operation, ResourceType
from shoal.tenancy import namespaces
from shoal.tenancy import policy as tenancy_policy
from shoal.tenancy.scope import ASSIGNMENT_IS_OPERATORS, OPERATOR_TOPIC_CONFIGS, operator_config_refused
from shoal.quotas import mutation

if TYPE_CHECKING:
    from shoal.config import BrokerConfig
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import (
        AlterConfigsRequest, AlterConfigsResponse, CreatePartitionsRequest, CreatePartitionsResponse,
        CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
        DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
    )
    from shoal.tenancy.scope import Scope

_T = TypeVar("_T")

CREATE_TOPICS = 19
DELETE_TOPICS = 20
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
CREATE_PARTITIONS = 37
INCREMENTAL_ALTER_CONFIGS = 44

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

MAX_TOPIC_NAME_LENGTH = 249
_ZERO_UUID = uuid.UUID(int=0)  # kio decodes the zero uuid as None
_NO_THROTTLE = datetime.timedelta(0)


class AdminError(Exception):
    def __init__(self, code: str, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# ---------------------------------------------------------------------------------------------
# Shared policy


def validate_topic_name(name: str | None, max_length: int = MAX_TOPIC_NAME_LENGTH) -> None:
    """Kafka's ``Topic.validate``, with KIP-37 names (``payments:eu:orders``); a tenant's names are
    shorter by its prefix (``max_length``)."""
    why = namespaces.topic_name_error(name, max_length)
    if why is not None:
        raise AdminError("INVALID_TOPIC_EXCEPTION", why)


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


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


def _plan_topic(
    image: MetadataImage, cfg: Any, t: Any, scope: Any, rng: Any, fenced: frozenset[int]
) -> tuple[list[tuple[int, ...]], dict[str, str], tuple[tuple[int, ...], ...]]:
    """Validate one CreatableTopic (``t.name`` as ``scope`` names it); return its replica
    assignment (the cluster's planner, with ``svc.random``), config overrides and each
    partition's observers (``replica.placement``, the topic's or the broker's default)."""
    name = t.name
    validate_topic_name(name, MAX_TOPIC_NAME_LENGTH - len(scope.prefix))
    if scope.topic(image, name) is not None:
        raise AdminError("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
    if scope.reserved_name(image, name):
        raise AdminError("INVALID_TOPIC_EXCEPTION", f"Topic name '{name}' is reserved.")
    missing = namespaces.missing_namespace_error(image, scope.physical(name), scope.prefix)
    if missing is not None:  # KIP-37's InvalidNamespaceException: no auto-creation of namespaces
        raise AdminError("INVALID_TOPIC_EXCEPTION", missing)
    key = _collision_key(name)
    for existing, _info in scope.topics(image):
        if _collision_key(existing) == key:
            raise AdminError("INVALID_TOPIC_EXCEPTION", f"Topic '{name}' collides with existing topic: {existing}")
    configs: dict[str, str] = {}
    for c in t.configs:
        if c.value is None:
            raise AdminError("INVALID_CONFIG", f"Null value not supported for topic configs: {c.name}")
        if not _ignored_topic_config(c.name, name):
            configs[canonical_config_name(c.name)] = c.value
    try:
        validate_topic_configs(configs)
    except ConfigError as e:
        raise AdminError(e.code, e.message) from None
    if not scope.physical_view:  # where replicas go is the operator's
        if t.assignments:
            raise AdminError("POLICY_VIOLATION", ASSIGNMENT_IS_OPERATORS)
        _refuse_operator_configs(scope, {}, configs)

    placement = _placement(configs, cfg)
    if placement is not None:  # recorded with the topic: how it was placed, whatever the default later
        configs["replica.placement"] = configs.get("replica.placement") or placement.to_json()
    request = planner.TopicRequest(
        scope.physical(name),
        int(t.num_partitions),
        int(t.replication_factor),
        tuple((int(a.partition_index), tuple(int(b) for b in a.broker_ids)) for a in t.assignments),
        placement=placement,
    )
    try:
        plan = planner.plan_topic(
            planner.live_brokers(image, fenced), request, planner.Defaults.for_topics(cfg), rng
        )
    except PlacementError as e:
        raise AdminError(e.code, e.message) from None
    return list(plan.assignments), configs, plan.observers


def _placement(configs: Mapping[str, str], cfg: Any) -> Any:
    """The ``replica.placement`` a new topic is placed by: its own, else the broker default
    (validated when set); None for Kafka's rack-aware placement."""
    from shoal.placement.constraints import parse_placement

    text = configs.get("replica.placement", cfg.get("replica.placement"))
    return parse_placement(text) if text else None


def _create_policy_error(image: MetadataImage, scope: Any, name: str, assignment: list, configs: Mapping[str, str]) -> str | None:
    """The tenant's create-topic policy (``shoal.tenancy.policy``) on one planned topic."""
    tenant = image.tenants.get(scope.tenant_id) if scope.tenant_id else None
    if tenant is None or not tenant.policy:
        return None
    request = tenancy_policy.CreateRequest(name, len(assignment), len(assignment[0]) if assignment else 0, configs)
    return tenancy_policy.check_create(tenant.policy, tenancy_policy.tenant_state(image, tenant.tenant_id), request)


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
        physical = scope.physical(t.name)

        def checked(image: MetadataImage, t: Any = t, cfg: BrokerConfig = cfg,
                    scope: Scope = scope) -> tuple[list[tuple[int, ...]], dict[str, str], Any]:
            assignment, configs, observers = _plan_topic(image, cfg, t, scope, svc.random, svc.fenced_brokers)
            policy_error = _create_policy_error(image, scope, t.name, assignment, configs)
            if policy_error is not None:
                raise AdminError("POLICY_VIOLATION", policy_error)
            return assignment, configs, observers

        def create(image: MetadataImage,
                   checked: Callable[[MetadataImage], tuple[list[tuple[int, ...]], dict[str, str], Any]] = checked,
                   physical: str = physical) -> Result[Any]:
            assignment, configs, observers = checked(image)  # the policy counts what exists at commit time
            r = topic_rules.create_topic(image, physical, assignment, configs, new_uuid=store.new_uuid,
                                         observers=observers)
            return Result(r.change, (r.response, assignment, configs))

        try:
            if not (
                scope.allowed_cluster(Operation.CREATE)
                or scope.allowed(Operation.CREATE, ResourceType.TOPIC, t.name)
            ):
                raise AdminError("TOPIC_AUTHORIZATION_FAILED", "Authorization failed.")
            assignment, configs, _observers = checked(store.image)
            if req.validate_only:
                topic_id = None
            else:
                _charge_mutations(quota, len(assignment))
                info, assignment, configs = await decide(store, create)
                topic_id = info.topic_id
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
                partitions=len(assignment),
                rf=len(assignment[0]) if assignment else 0,
                configs=_creatable_configs(mod, cfg, configs, store.image, physical),
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
            planner.live_brokers(image, fenced), t.name, [p.replicas for p in topic.partitions], t.count, manual,
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


# ---------------------------------------------------------------------------------------------
# DescribeConfigs


def _broker_resource(ctx: RequestContext, name: str) -> bool:
    """True for the cluster default (""), False for this node; AdminError otherwise."""
    if name == "":
        return True
    try:
        node = int(name)
    except ValueError:
        raise AdminError("INVALID_REQUEST", f"Broker id must be an integer, but it is: {name}") from None
    if node != ctx.services.node_id:
        raise AdminError(
            "INVALID_REQUEST",
            f"Unexpected broker id, expected {ctx.services.node_id} or empty string, but received {name}",
        )
    return False


def _resource_type_error(resource_type: int) -> AdminError:
    return AdminError("INVALID_REQUEST", f"Unsupported resource type: {resource_type}")


def _is_namespace(resource_type: int, name: str | None) -> bool:
    """A TOPIC resource named ``<namespace>:`` (``payments:eu:``) addresses a KIP-37 namespace."""
    return resource_type == RESOURCE_TOPIC and bool(name) and name.endswith(inheritance.NAMESPACE_SEP)  # type: ignore[union-attr]


def _namespace_resource(scope: Any, image: MetadataImage, resource_name: str, operation: int) -> str:
    """The physical name of the namespace a ``<namespace>:`` resource addresses, authorized for
    ``operation`` on the NAMESPACE resource."""
    ns = resource_name[:-1]
    why = namespaces.namespace_name_error(ns)
    if why is not None:
        raise AdminError("INVALID_TOPIC_EXCEPTION", why)
    if not scope.allowed(operation, ResourceType.NAMESPACE, ns):
        raise AdminError("TOPIC_AUTHORIZATION_FAILED", "Authorization failed.")
    physical = scope.physical(ns)
    if physical not in image.namespaces:
        raise AdminError("INVALID_TOPIC_EXCEPTION", f"Namespace '{ns}' does not exist")
    return physical


def _tenant_configs(scope: Any, image: MetadataImage) -> Mapping[str, str]:
    tenant = image.tenants.get(scope.tenant_id)
    if tenant is None:  # gone meanwhile: the connection is about to be closed
        raise AdminError("CLUSTER_AUTHORIZATION_FAILED", "Cluster authorization failed.")
    return tenant.configs


def _tenant_default_key(name: str, value: str | None) -> tuple[str, str | None]:
    try:
        return namespaces.tenant_default_key(name, value)
    except namespaces.NamespaceError as e:
        raise AdminError(e.code, e.message) from None


def _same_key(name: str, value: str | None) -> tuple[str, str | None]:
    return canonical_config_name(name), value


def _effective_topic_value(cfg: Any, inherited: Mapping[str, str]) -> Callable[[str], str | None]:
    """A topic config's value below the resource being altered (what APPEND/SUBTRACT start from)."""

    def effective(name: str) -> str | None:
        return format_value(TOPIC_CONFIGS[name].type, topic_config_value(cfg, inherited, name))

    return effective


def _placement_change(scope: Any, image: MetadataImage, topic: TopicInfo, placement: str,
                      fenced: frozenset[int]) -> list:
    """A new ``replica.placement`` for an existing topic: where each partition goes (planner;
    the controller completes the reassignments). Moving replicas is the operator's: a tenant's
    principals are refused (``PLACEMENT_IS_OPERATORS``)."""
    from shoal.placement.constraints import PlacementSpecError, parse_placement
    from shoal.tenancy.scope import PLACEMENT_IS_OPERATORS

    if not scope.physical_view:
        raise AdminError("POLICY_VIOLATION", PLACEMENT_IS_OPERATORS)
    try:
        spec = parse_placement(placement)
        return planner.placement_targets(planner.live_brokers(image, fenced), spec, [p.replicas for p in topic.partitions])
    except PlacementSpecError as e:
        raise AdminError(e.code, f"replica.placement: {e.message}") from None
    except PlacementError as e:
        raise AdminError(e.code, e.message) from None


def _refuse_operator_configs(scope: Any, current: Mapping[str, str], new: Mapping[str, str]) -> None:
    """A tenant's topic configs (a topic's, a namespace's or its defaults) may not set, change
    or remove the ones that say where replicas go (``OPERATOR_TOPIC_CONFIGS``): POLICY_VIOLATION.
    The physical view may."""
    if scope.physical_view:
        return
    for name in sorted(OPERATOR_TOPIC_CONFIGS):
        if (new.get(name) or None) != (current.get(name) or None):
            raise AdminError("POLICY_VIOLATION", operator_config_refused(name))


def _topic_configs_decision(current: Mapping[str, str], new: dict[str, str], validate_only: bool,
                            rule: Callable[[dict[str, str]], Result[Any]]) -> Result[Any]:
    """Validate topic configs (of a topic, a namespace or a tenant's defaults); the ``rule``'s
    change storing them unless only validating or nothing changed."""
    try:
        validate_topic_configs(new)
    except ConfigError as e:
        raise AdminError(e.code, e.message) from None
    if validate_only or new == dict(current):
        return unchanged(None)
    return rule(new)


@api(DESCRIBE_CONFIGS, 1, 4)
async def handle_describe_configs(ctx: RequestContext, req: DescribeConfigsRequest) -> DescribeConfigsResponse:
    mod = response_module(DESCRIBE_CONFIGS, ctx.api_version)
    svc = ctx.services
    cfg = svc.config
    image = svc.metadata.image
    include_synonyms = bool(getattr(req, "include_synonyms", False))
    include_docs = bool(getattr(req, "include_documentation", False))
    results = []
    for res in req.resources:
        tenant_defaults = False
        try:
            scope = ctx.scope
            if _is_namespace(res.resource_type, res.resource_name):  # KIP-37 namespace configs
                physical = _namespace_resource(scope, image, res.resource_name, Operation.DESCRIBE_CONFIGS)
                layers = inheritance.namespace_layers(image, physical)
                entries = namespaces.describe_layered(cfg, layers, own=inheritance.NAMESPACE)
            elif res.resource_type == RESOURCE_TOPIC:
                validate_topic_name(res.resource_name)
                if not scope.allowed(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, res.resource_name):
                    raise AdminError("TOPIC_AUTHORIZATION_FAILED", "Authorization failed.")
                topic = scope.topic(image, res.resource_name)
                if topic is None:
                    raise AdminError(
                        "UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition."
                    )
                entries = namespaces.describe_layered(cfg, inheritance.config_layers(image, topic.name))
            elif res.resource_type == RESOURCE_BROKER:
                if not scope.allowed_cluster(Operation.DESCRIBE_CONFIGS):
                    raise AdminError("CLUSTER_AUTHORIZATION_FAILED", "Cluster authorization failed.")
                cluster_default = _broker_resource(ctx, res.resource_name)
                # A tenant's broker resource ("", or this broker's id, as librdkafka refuses an
                # empty name) holds its topic config defaults.
                tenant_defaults = scope.tenant_id is not None
                if tenant_defaults:
                    entries = namespaces.describe_tenant_defaults(_tenant_configs(scope, image))
                else:
                    entries = describe_broker_configs(cfg, cluster_default=cluster_default)
            elif res.resource_type == RESOURCE_BROKER_LOGGER:
                if not scope.allowed_cluster(Operation.DESCRIBE_CONFIGS):
                    raise AdminError("CLUSTER_AUTHORIZATION_FAILED", "Cluster authorization failed.")
                _broker_resource(ctx, res.resource_name)
                entries = []
            else:
                raise _resource_type_error(res.resource_type)
        except AdminError as e:
            results.append(
                build(
                    mod.DescribeConfigsResult,
                    error_code=error_code(e.code),
                    error_message=e.message,
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                    configs=(),
                )
            )
            continue
        keys = res.configuration_keys
        if keys:
            wanted = set(keys)
            # a tenant default is found by its broker synonym too (log.retention.ms: retention.ms)
            entries = [e for e in entries if e.name in wanted or (tenant_defaults and e.synonyms[-1].name in wanted)]
        configs = tuple(
            build(
                mod.DescribeConfigsResourceResult,
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=int(e.source),
                is_default=e.is_default,
                is_sensitive=e.is_sensitive,
                synonyms=tuple(
                    build(mod.DescribeConfigsSynonym, name=s.name, value=s.value, source=int(s.source))
                    for s in e.synonyms
                )
                if include_synonyms
                else (),
                config_type=int(e.config_type),
                documentation=e.documentation if include_docs else None,
            )
            for e in entries
        )
        results.append(
            build(
                mod.DescribeConfigsResult,
                error_code=ErrorCode.none,
                error_message=None,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
                configs=configs,
            )
        )
    return build(mod.DescribeConfigsResponse, throttle_time=_NO_THROTTLE, results=tuple(results))


# ---------------------------------------------------------------------------------------------
# AlterConfigs / IncrementalAlterConfigs


_ignored_log = RateLimitedLog(logging.getLogger("shoal.handlers.admin"))


def _ignored_topic_config(name: str, resource: str) -> bool:
    """True for a deprecated topic config Kafka accepts and ignores (``IGNORED_TOPIC_CONFIGS``),
    with one warning line per config name per interval."""
    why = IGNORED_TOPIC_CONFIGS.get(name)
    if why is not None:
        _ignored_log.log(logging.WARNING, name, "Topic configuration %s is ignored (%s): %s", name, resource or "-", why)
    return why is not None


def _apply_incremental(
    current: Mapping[str, str],
    ops: list[tuple[str, int, str | None]],
    *,
    topic: bool,
    effective: Callable[[str], str | None],
) -> dict[str, str]:
    """Kafka's ``prepareIncrementalConfigs``: SET / DELETE / APPEND / SUBTRACT on ``current``."""
    known = TOPIC_CONFIGS if topic else BROKER_CONFIGS
    out = dict(current)
    for name, op, value in ops:
        if name not in known:
            if topic:
                raise AdminError("INVALID_CONFIG", f"Unknown topic config name: {name}")
            raise AdminError("INVALID_REQUEST", f"Cannot update these configs dynamically: {{'{name}'}}")
        if op == OP_SET:
            if value is None:
                raise AdminError("INVALID_REQUEST", f"Null value not supported for : {name}")
            out[name] = value
        elif op == OP_DELETE:
            out.pop(name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            if not is_list_config(name, topic=topic):
                verb = "append" if op == OP_APPEND else "subtract"
                raise AdminError("INVALID_CONFIG", f"Config value {verb} is not allowed for config key: {name}")
            base = out.get(name)
            if base is None:
                base = effective(name) or ""
            old = [p.strip() for p in base.split(",") if p.strip()]
            new = [p.strip() for p in (value or "").split(",") if p.strip()]
            if op == OP_APPEND:
                merged = list(dict.fromkeys(old + new))
            else:
                merged = [p for p in old if p not in new]
            out[name] = ",".join(merged)
        else:
            raise AdminError("INVALID_REQUEST", f"Unknown alter config operation type: {op}")
    return out


def _without_operator_configs(scope: Any, compute: Callable[..., dict[str, str]]) -> Callable[..., dict[str, str]]:
    """``compute`` for a tenant: topic configs it computes may not change the operator's
    (``_refuse_operator_configs``)."""

    def checked(current: Mapping[str, str], topic: bool, *args: Any) -> dict[str, str]:
        new = compute(current, topic, *args)
        if topic:
            _refuse_operator_configs(scope, current, new)
        return new

    return checked


def _alter_decision(
    ctx: RequestContext,
    resource_type: int,
    resource_name: str,
    compute: Callable[[Mapping[str, str], bool, Callable[[str], str | None]], dict[str, str]],
    validate_only: bool,
) -> Callable[[MetadataImage], Result[Any]]:
    """The decision altering one resource: its new overrides computed from its current ones in
    the image the change commits against (so an AlterConfigs replacing them all, or an
    IncrementalAlterConfigs editing some keys, never undoes a change committed meanwhile)."""
    svc = ctx.services
    scope = ctx.scope
    if not scope.physical_view:
        compute = _without_operator_configs(scope, compute)
    if _is_namespace(resource_type, resource_name):  # KIP-37 namespace configs

        def namespace(image: MetadataImage) -> Result[Any]:
            physical = _namespace_resource(scope, image, resource_name, Operation.ALTER_CONFIGS)
            current = image.namespaces[physical].configs
            inherited = inheritance.inherited_overrides(inheritance.namespace_layers(image, physical)[1:])
            new = compute(current, True, _effective_topic_value(svc.config, inherited))
            return _topic_configs_decision(
                current, new, validate_only, lambda c: namespace_rules.set_namespace_configs(image, physical, c)
            )

        return namespace
    if resource_type == RESOURCE_BROKER and scope.tenant_id is not None:
        return _tenant_defaults_decision(ctx, scope.tenant_id, resource_name, compute, validate_only)
    if resource_type == RESOURCE_TOPIC:
        validate_topic_name(resource_name)
        if not scope.allowed(Operation.ALTER_CONFIGS, ResourceType.TOPIC, resource_name):
            raise AdminError("TOPIC_AUTHORIZATION_FAILED", "Authorization failed.")

        def topic(image: MetadataImage) -> Result[Any]:
            found: TopicInfo | None = scope.topic(image, resource_name)
            if found is None:
                raise AdminError("UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition.")
            inherited = inheritance.topic_overrides(image, found.name, {})  # what APPEND starts from
            new = compute(found.configs, True, _effective_topic_value(svc.config, inherited))
            placement = new.get("replica.placement") or None
            if placement is not None and placement != (found.configs.get("replica.placement") or None):
                targets = _placement_change(scope, image, found, placement, svc.fenced_brokers)  # a reassignment of every partition
                return _topic_configs_decision(
                    found.configs, new, validate_only,
                    lambda c: topic_rules.change_placement(image, found.name, c, targets))
            return _topic_configs_decision(
                found.configs, new, validate_only, lambda c: config_rules.set_topic_configs(image, found.name, c)
            )

        return topic
    if resource_type == RESOURCE_BROKER:
        if not scope.physical_view or not scope.allowed_cluster(Operation.ALTER_CONFIGS):
            # A tenant never alters the physical broker's configs.
            raise AdminError("CLUSTER_AUTHORIZATION_FAILED", "Cluster authorization failed.")
        cluster_default = _broker_resource(ctx, resource_name)
        node = svc.node_id

        def broker_configs(image: MetadataImage) -> Result[Any]:
            cfg = svc.config
            if cluster_default:
                current = dict(image.broker_configs)
            else:  # this broker's own dynamic configs (Kafka's DYNAMIC_BROKER_CONFIG)
                current = dict(image.broker_overrides.get(node, {}))
            new = compute(current, False, cfg.raw)
            try:
                validate_dynamic_broker_configs(new)
            except ConfigError as e:
                raise AdminError(e.code, e.message) from None
            if validate_only or new == current:
                return unchanged(None)
            if cluster_default:
                return config_rules.set_broker_configs(image, new)
            return config_rules.set_broker_overrides(image, node, new)

        return broker_configs
    if resource_type == RESOURCE_BROKER_LOGGER:
        if not scope.allowed_cluster(Operation.ALTER_CONFIGS):
            raise AdminError("CLUSTER_AUTHORIZATION_FAILED", "Cluster authorization failed.")
        raise AdminError("INVALID_REQUEST", "Altering broker loggers is not supported.")
    raise _resource_type_error(resource_type)


def _tenant_defaults_decision(ctx: RequestContext, tenant_id: str, resource_name: str,
                              compute: Callable[..., dict[str, str]],
                              validate_only: bool) -> Callable[[MetadataImage], Result[Any]]:
    """A tenant's BROKER resource "" (or this broker's id: librdkafka refuses an empty resource
    name) holds its topic config defaults, named as topic configs or as their broker synonyms
    (``log.retention.hours`` sets ``retention.ms``); other broker configs are a POLICY_VIOLATION."""
    scope = ctx.scope
    if not scope.allowed_cluster(Operation.ALTER_CONFIGS):
        raise AdminError("CLUSTER_AUTHORIZATION_FAILED", "Cluster authorization failed.")
    _broker_resource(ctx, resource_name)

    def tenant_defaults(image: MetadataImage) -> Result[Any]:
        current = _tenant_configs(scope, image)
        new = compute(current, True, _effective_topic_value(ctx.services.config, {}), _tenant_default_key)
        return _topic_configs_decision(
            current, new, validate_only, lambda c: tenant_rules.update_tenant(image, tenant_id, configs=c)
        )

    return tenant_defaults


async def _alter(ctx: RequestContext, mod: ModuleType, req: AlterConfigsRequest | IncrementalAlterConfigsRequest,
                 compute_for: Callable[[Any], Callable[..., dict[str, str]]]) -> Any:
    seen: dict[tuple[int, str], int] = {}
    for res in req.resources:
        k = (res.resource_type, res.resource_name)
        seen[k] = seen.get(k, 0) + 1
    results = []
    for res in req.resources:
        code, message = "NONE", None
        try:
            if seen[(res.resource_type, res.resource_name)] > 1:
                raise AdminError("INVALID_REQUEST", "Duplicate resource in request.")
            decision = _alter_decision(ctx, res.resource_type, res.resource_name, compute_for(res), req.validate_only)
            await decide(ctx.services.metadata, decision)
        except AdminError as e:
            code, message = e.code, e.message
        results.append(
            build(
                mod.AlterConfigsResourceResponse,
                error_code=error_code(code),
                error_message=message,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
            )
        )
    return tuple(results)


@api(ALTER_CONFIGS, 0, 2)
async def handle_alter_configs(ctx: RequestContext, req: AlterConfigsRequest) -> AlterConfigsResponse:
    """Replace a resource's whole set of overrides with the given configs."""
    mod = response_module(ALTER_CONFIGS, ctx.api_version)

    def compute_for(res):
        def compute(current, topic, effective, key=_same_key):
            # a tenant's replacement keeps what it may not change (the operator's placement)
            kept = () if ctx.scope.physical_view or not topic else OPERATOR_TOPIC_CONFIGS
            out: dict[str, str] = {k: v for k, v in current.items() if k in kept}
            for c in res.configs:
                if c.value is None:
                    raise AdminError("INVALID_REQUEST", f"Null value not supported for : {c.name}")
                if topic and _ignored_topic_config(c.name, res.resource_name):
                    continue
                name, value = key(c.name, c.value)
                out[name] = value
            return out

        return compute

    results = await _alter(ctx, mod, req, compute_for)
    return build(mod.AlterConfigsResponse, throttle_time=_NO_THROTTLE, responses=results)


@api(INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def handle_incremental_alter_configs(ctx: RequestContext,
                                           req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    mod = response_module(INCREMENTAL_ALTER_CONFIGS, ctx.api_version)

    def compute_for(res):
        def compute(current, topic, effective, key=_same_key):
            configs = [c for c in res.configs if not (topic and _ignored_topic_config(c.name, res.resource_name))]
            keyed = [key(c.name, c.value) for c in configs]
            names = [name for name, _v in keyed]
            if len(names) != len(set(names)):
                raise AdminError("INVALID_REQUEST", "Error due to duplicate config keys")
            ops = [(name, int(c.config_operation), value) for (name, value), c in zip(keyed, configs)]
            return _apply_incremental(current, ops, topic=topic, effective=effective)

        return compute

    results = await _alter(ctx, mod, req, compute_for)
    return build(mod.IncrementalAlterConfigsResponse, throttle_time=_NO_THROTTLE, responses=results)
