"""Config administration.

  DescribeConfigs (32)          v1-4   (TOPIC, BROKER; BROKER_LOGGER answers an empty list)
  AlterConfigs (33)             v0-2
  IncrementalAlterConfigs (44)  v0-1   (SET, DELETE, APPEND, SUBTRACT)

Handlers only change metadata; the broker follows the new image (applies new LogConfigs). Every
change is one decision run through ``store.decide_and_commit``: the configs an AlterConfigs
replaces or an IncrementalAlterConfigs edits are read and changed on the same image and decided
again when another writer (a coroutine or another broker) committed first, so no update is lost
across brokers. Topics themselves are ``shoal.handlers.topics``'.

Deliberate deviations from Kafka:
- BROKER resources: "" is the cluster-wide dynamic default (DYNAMIC_DEFAULT_BROKER_CONFIG), this
  broker's id its own dynamic configs (DYNAMIC_BROKER_CONFIG, ``MetadataImage.broker_overrides``,
  above the default); both take the keys ``shoal.config`` marks dynamic (others: INVALID_REQUEST
  "Cannot update these configs dynamically"). Another broker's id is INVALID_REQUEST, as Kafka
  (a client sends a broker's resource to that broker). The broker follows a change at once where
  it reads the config per use (quotas, connection limits, log defaults).
- Deprecated topic configs Kafka 3.x accepts and ignores are accepted with one warning line and
  dropped, as by CreateTopics (``shoal.handlers.topics``).
- BROKER_LOGGER resources are described as empty and cannot be altered.

Scoped (``ctx.scope``): a tenant alters only its own topics, named as it names them; another
tenant's topic does not exist for it. Authorization: DESCRIBE_CONFIGS/ALTER_CONFIGS on the topic,
or on the cluster for BROKER and BROKER_LOGGER resources (CLUSTER_AUTHORIZATION_FAILED).

KIP-37 namespaces and tenant defaults (``shoal.tenancy.namespaces``):
- A topic's configs it does not set are inherited (namespace, parents, tenant default, broker):
  DescribeConfigs reports an inherited value as DYNAMIC_DEFAULT_BROKER_CONFIG (3), with one synonym
  per layer that sets it and the layer in ``documentation`` ("inherited from namespace payments:eu").
- A TOPIC resource named ``<namespace>:`` is the namespace's configs (Describe/Alter/Incremental,
  topic config names; DESCRIBE_CONFIGS/ALTER_CONFIGS on the NAMESPACE resource).
- A tenant's BROKER resource "" is its topic config defaults (topic names or their broker synonyms;
  other broker configs POLICY_VIOLATION; DESCRIBE_CONFIGS/ALTER_CONFIGS on the cluster). So is its
  BROKER resource named by this broker's id, since librdkafka refuses an empty resource name; a
  tenant never sees nor alters the physical broker's configs.
- Placement is the operator's (``shoal.tenancy.scope.OPERATOR_TOPIC_CONFIGS``): a tenant's setting,
  changing or removing ``replica.placement`` or a throttled-replicas list (on a topic, a namespace
  or its defaults) answers POLICY_VIOLATION; a tenant's AlterConfigs keeps the operator's values.
"""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Mapping

from shoal.config import (
    ConfigError,
    describe_broker_configs,
    is_list_config,
    topic_config_value,
    validate_dynamic_broker_configs,
    canonical_config_name,
    validate_topic_configs,
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    format_value,
)
from shoal.handlers.registry import api
from shoal.handlers.topics import AdminError, decide
from shoal.metadata import MetadataImage, TopicInfo, inheritance
from shoal.metadata.change import Result, unchanged
from shoal.metadata.rules import configs as config_rules
from shoal.metadata.rules import namespaces as namespace_rules
from shoal.metadata.rules import tenants as tenant_rules
from shoal.metadata.rules import topics as topic_rules
from shoal.cluster import planner
from shoal.cluster.planner import PlacementError
from shoal.placement import cells
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode, error_code
from shoal.tenancy.acl import Operation, ResourceType
from shoal.tenancy import namespaces
from shoal.tenancy.creation import ignored_topic_config, operator_configs_refusal
from shoal.tenancy.scope import OPERATOR_TOPIC_CONFIGS

if TYPE_CHECKING:
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import (
        AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
        IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    )
    from shoal.tenancy.scope import Scope

DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
INCREMENTAL_ALTER_CONFIGS = 44

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

_NO_THROTTLE = datetime.timedelta(0)


# ---------------------------------------------------------------------------------------------
# DescribeConfigs


def validate_topic_name(name: str | None) -> None:
    """Kafka's ``Topic.validate``, with KIP-37 names (``payments:eu:orders``)."""
    why = namespaces.topic_name_error(name)
    if why is not None:
        raise AdminError("INVALID_TOPIC_EXCEPTION", why)


def refuse_operator_configs(scope: Scope, current: Mapping[str, str], new: Mapping[str, str]) -> None:
    """A tenant's topic configs (a topic's, a namespace's or its defaults) may not set, change
    or remove the ones that say where replicas go (``OPERATOR_TOPIC_CONFIGS``): POLICY_VIOLATION.
    The physical view may."""
    if scope.physical_view:
        return
    why = operator_configs_refusal(current, new)
    if why is not None:
        raise AdminError("POLICY_VIOLATION", why)


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
    return cells.topic_defaults(tenant.configs)  # its cell is the operator's (HTTP admin API)


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
        return planner.placement_targets(planner.live_brokers(image, fenced, topic.name), spec,
                                         [p.replicas for p in topic.partitions])
    except PlacementSpecError as e:
        raise AdminError(e.code, f"replica.placement: {e.message}") from None
    except PlacementError as e:
        raise AdminError(e.code, e.message) from None


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
                entries = namespaces.describe_layered(cfg, inheritance.config_layers(image, topic.name),
                                                      names=res.configuration_keys or None)
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
    (``refuse_operator_configs``)."""

    def checked(current: Mapping[str, str], topic: bool, *args: Any) -> dict[str, str]:
        new = compute(current, topic, *args)
        if topic:
            refuse_operator_configs(scope, current, new)
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
            current, new, validate_only,
            lambda c: tenant_rules.update_tenant(image, tenant_id, configs={**c, **cells.cell_configs(image.tenants[tenant_id].configs)})
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

    def compute_for(res: Any) -> Callable[..., dict[str, str]]:
        def compute(current: Mapping[str, str], topic: bool, effective: Callable[[str], str | None],
                    key: Callable[[str, str | None], tuple[str, str | None]] = _same_key) -> dict[str, str]:
            # a tenant's replacement keeps what it may not change (the operator's placement)
            kept = () if ctx.scope.physical_view or not topic else OPERATOR_TOPIC_CONFIGS
            out: dict[str, str] = {k: v for k, v in current.items() if k in kept}
            for c in res.configs:
                if c.value is None:
                    raise AdminError("INVALID_REQUEST", f"Null value not supported for : {c.name}")
                if topic and ignored_topic_config(c.name, res.resource_name):
                    continue
                name, value = key(c.name, c.value)
                if value is None:  # (never: a null was refused above, and a key keeps a value)
                    raise AdminError("INVALID_REQUEST", f"Null value not supported for : {c.name}")
                out[name] = value
            return out

        return compute

    results = await _alter(ctx, mod, req, compute_for)
    return build(mod.AlterConfigsResponse, throttle_time=_NO_THROTTLE, responses=results)


@api(INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def handle_incremental_alter_configs(ctx: RequestContext,
                                           req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    mod = response_module(INCREMENTAL_ALTER_CONFIGS, ctx.api_version)

    def compute_for(res: Any) -> Callable[..., dict[str, str]]:
        def compute(current: Mapping[str, str], topic: bool, effective: Callable[[str], str | None],
                    key: Callable[[str, str | None], tuple[str, str | None]] = _same_key) -> dict[str, str]:
            configs = [c for c in res.configs if not (topic and ignored_topic_config(c.name, res.resource_name))]
            keyed = [key(c.name, c.value) for c in configs]
            names = [name for name, _v in keyed]
            if len(names) != len(set(names)):
                raise AdminError("INVALID_REQUEST", "Error due to duplicate config keys")
            ops = [(name, int(c.config_operation), value) for (name, value), c in zip(keyed, configs)]
            return _apply_incremental(current, ops, topic=topic, effective=effective)

        return compute

    results = await _alter(ctx, mod, req, compute_for)
    return build(mod.IncrementalAlterConfigsResponse, throttle_time=_NO_THROTTLE, responses=results)
