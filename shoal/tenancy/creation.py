"""Topic creation: the one decision every path that creates a topic commits.

Callers: CreateTopics (``shoal.handlers.topics``, validate_only too), Metadata's auto-creation
(``shoal.handlers.metadata.auto_create_topic``), the coordinators' internal topics
(``shoal.groups.runtime``: ``__consumer_offsets``, ``__transaction_state``) and metering's usage
topic (``shoal.metering.publisher``). Each builds one decision and runs its ``decide`` through the
store's ``decide_and_commit``: the checks, the placement and the new topic are decided on the image
the commit is decided on, and decided again on the newer image when another writer (a coroutine,
another broker) committed first. So a tenant's limits count the topics created meanwhile, the
replicas go to the brokers live now (``shoal.cluster.planner``, leaving out those the controller
treats as gone), and a topic of the same name created meanwhile is found: auto-creation and the
internal topics answer with it, CreateTopics with TOPIC_ALREADY_EXISTS.

What each decision checks, in this order (so a request with several faults gets the first):

- :class:`CreateTopic`, a topic as the caller's scope (``shoal.tenancy.scope``) names it: the name
  (Kafka's ``Topic.validate`` with KIP-37 names, shorter by a tenant's prefix), that no topic has
  it, reserved names, that its namespace exists, no collision (``.`` and ``_`` alike), the configs
  (no null value; deprecated ones Kafka ignores dropped with a warning; validated), for a tenant no
  manual assignment and none of the operator's configs, then placement (the topic's
  ``replica.placement``, else the broker's, recorded with the topic), then the tenant's
  create-topic policy on the placed topic. ``plan(image)`` is all of that without creating
  (CreateTopics' validate_only).
- :class:`AutoCreateTopic`, a physical name with the broker's defaults: an existing topic of that
  name is the answer; else the namespace, the tenant's policy on the default sizes, placement.
- :class:`InternalTopic`: an existing topic of that name is the answer (None); else its size, the
  replication factor lowered to the live brokers where its coordinator says so, placement,
  created ``internal``.

A refusal is a ``MetadataError`` with Kafka's code and message; the planner's is a
:class:`PlacementRefused`. Pure but for the planner's random start and the warning on an ignored
config: no I/O.
"""

from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping, Sequence

from shoal.cluster import planner
from shoal.config import (
    IGNORED_TOPIC_CONFIGS,
    ConfigError,
    ConfigSource,
    canonical_config_name,
    validate_topic_configs,
)
from shoal.logutil import RateLimitedLog
from shoal.metadata import MetadataError, MetadataImage, TopicInfo, owner_tenant, tenant_prefix
from shoal.metadata.change import Result, unchanged
from shoal.metadata.rules import topics as topic_rules
from shoal.placement.constraints import PlacementSpec, parse_placement
from shoal.tenancy import namespaces
from shoal.tenancy import policy as tenancy_policy
from shoal.tenancy.scope import ASSIGNMENT_IS_OPERATORS, OPERATOR_TOPIC_CONFIGS, operator_config_refused

if TYPE_CHECKING:
    from shoal.config import BrokerConfig
    from shoal.metadata import MetadataStore
    from shoal.tenancy.scope import Scope

# an internal topic's replication factor left at its default, on an etcd cluster (one node: 1)
CLUSTER_REPLICATION_FACTOR = 3


class PlacementRefused(MetadataError):
    """The planner cannot place the topic (its code and message); ``replication_factor`` is the
    one an internal topic was to have."""

    def __init__(self, code: str, message: str, replication_factor: int = -1) -> None:
        super().__init__(code, message)
        self.replication_factor = replication_factor


@dataclass(frozen=True, slots=True)
class Planned:
    """A topic checked and placed on one image: its physical name, one replica list per
    partition, the observers among them, and its config overrides."""

    name: str
    assignments: tuple[tuple[int, ...], ...]
    observers: tuple[tuple[int, ...], ...]
    configs: Mapping[str, str]

    @property
    def replication_factor(self) -> int:
        return len(self.assignments[0]) if self.assignments else 0


@dataclass(frozen=True, kw_only=True)
class TopicCreation:
    """What every creation decision is given besides its topic: the store's topic-id source,
    the planner's random start, and the brokers the controller treats as gone (read at each
    decision, ``Controller.fenced_brokers``)."""

    new_uuid: Callable[[], uuid.UUID]
    rng: random.Random
    fenced: Callable[[], Collection[int]] = frozenset

    def decide(self, image: MetadataImage) -> Result[TopicInfo | None]:
        raise NotImplementedError

    def _live(self, image: MetadataImage, name: str) -> list[planner.Broker]:
        """The live brokers topic ``name`` (physical) may be placed on: its tenant's cell's."""
        return planner.live_brokers(image, self.fenced(), name)

    def _create(self, image: MetadataImage, planned: Planned, *, internal: bool = False) -> Result[TopicInfo]:
        return topic_rules.create_topic(image, planned.name, list(planned.assignments), planned.configs,
                                        internal=internal, new_uuid=self.new_uuid, observers=planned.observers)


def _place(brokers: Sequence[planner.Broker], request: planner.TopicRequest, defaults: planner.Defaults,
           rng: random.Random, replication_factor: int = -1) -> planner.Plan:
    try:
        plan = planner.plan_topic(brokers, request, defaults, rng)
    except planner.PlacementError as e:
        raise PlacementRefused(e.code, e.message, replication_factor) from None
    shortfall = planner.host_shortfall(brokers, plan)
    if shortfall:  # placed as well as the hosts allow: say so (shoal placement check too); a warning
        # when the cluster spans hosts, a note when it is one machine (a laptop's, a test's)
        hosts = planner.hosts_of(brokers) or {}
        level = logging.WARNING if len(set(hosts.values())) > 1 else logging.INFO
        _ignored_log.log(level, ("hosts", plan.name), "%s", shortfall)
    return plan


# ---------------------------------------------------------------------------------------------
# CreateTopics


@dataclass(frozen=True, kw_only=True)
class CreateTopic(TopicCreation):
    """One CreatableTopic of a CreateTopics, named as ``scope`` names it (``configs`` as sent:
    name and value, None for a null value; ``assignments`` as ``(partition index, broker ids)``)."""

    scope: "Scope"
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: tuple[tuple[int, tuple[int, ...]], ...] = ()
    configs: tuple[tuple[str, str | None], ...] = ()
    config: "BrokerConfig"

    def plan(self, image: MetadataImage) -> Planned:
        """Every check, placement and the tenant's policy on ``image``; MetadataError when refused."""
        scope, name = self.scope, self.name
        why = namespaces.topic_name_error(name, namespaces.MAX_TOPIC_NAME_LENGTH - len(scope.prefix))
        if why is not None:
            raise MetadataError("INVALID_TOPIC_EXCEPTION", why)
        if scope.topic(image, name) is not None:
            raise MetadataError("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
        if scope.reserved_name(image, name):
            raise MetadataError("INVALID_TOPIC_EXCEPTION", f"Topic name '{name}' is reserved.")
        missing = namespaces.missing_namespace_error(image, scope.physical(name), scope.prefix)
        if missing is not None:  # KIP-37's InvalidNamespaceException: no auto-creation of namespaces
            raise MetadataError("INVALID_TOPIC_EXCEPTION", missing)
        key = _collision_key(name)
        for existing, _info in scope.topics(image):
            if _collision_key(existing) == key:
                raise MetadataError("INVALID_TOPIC_EXCEPTION", f"Topic '{name}' collides with existing topic: {existing}")
        configs: dict[str, str] = {}
        for config_name, value in self.configs:
            if value is None:
                raise MetadataError("INVALID_CONFIG", f"Null value not supported for topic configs: {config_name}")
            if not ignored_topic_config(config_name, name):
                configs[canonical_config_name(config_name)] = value
        try:
            validate_topic_configs(configs)
        except ConfigError as e:
            raise MetadataError(e.code, e.message) from None
        if not scope.physical_view:  # where replicas go is the operator's
            if self.assignments:
                raise MetadataError("POLICY_VIOLATION", ASSIGNMENT_IS_OPERATORS)
            why = operator_configs_refusal({}, configs)
            if why is not None:
                raise MetadataError("POLICY_VIOLATION", why)

        placement = _placement(configs, self.config)
        if placement is not None:  # recorded with the topic: how it was placed, whatever the default later
            configs["replica.placement"] = configs.get("replica.placement") or placement.to_json()
        request = planner.TopicRequest(scope.physical(name), self.num_partitions, self.replication_factor,
                                       self.assignments, placement=placement)
        plan = _place(self._live(image, request.name), request, planner.Defaults.for_topics(self.config), self.rng)
        planned = Planned(request.name, plan.assignments, plan.observers, configs)
        why = _create_policy_error(image, scope, name, planned)
        if why is not None:
            raise MetadataError("POLICY_VIOLATION", why)
        return planned

    def decide(self, image: MetadataImage) -> Result[TopicInfo]:
        """The topic created as planned on ``image`` (the policy counts what exists at commit time)."""
        return self._create(image, self.plan(image))


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


def _placement(configs: Mapping[str, str], cfg: "BrokerConfig") -> PlacementSpec | None:
    """The ``replica.placement`` a new topic is placed by: its own, else the broker default
    (validated when set); None for Kafka's rack-aware placement."""
    text = configs.get("replica.placement", cfg.get("replica.placement"))
    return parse_placement(text) if text else None


def _create_policy_error(image: MetadataImage, scope: "Scope", name: str, planned: Planned) -> str | None:
    """The tenant's create-topic policy (``shoal.tenancy.policy``) on one planned topic."""
    tenant = image.tenants.get(scope.tenant_id) if scope.tenant_id else None
    if tenant is None or not tenant.policy:
        return None
    request = tenancy_policy.CreateRequest(name, len(planned.assignments), planned.replication_factor, planned.configs)
    return tenancy_policy.check_create(tenant.policy, tenancy_policy.tenant_state(image, tenant.tenant_id), request)


def operator_configs_refusal(current: Mapping[str, str], new: Mapping[str, str]) -> str | None:
    """Why a tenant may not go from topic configs ``current`` to ``new`` (a topic's, a namespace's
    or its defaults): they set, change or remove one that says where replicas go
    (``OPERATOR_TOPIC_CONFIGS``, POLICY_VIOLATION); None when they do not."""
    for name in sorted(OPERATOR_TOPIC_CONFIGS):
        if (new.get(name) or None) != (current.get(name) or None):
            return operator_config_refused(name)
    return None


_ignored_log = RateLimitedLog(logging.getLogger("shoal.tenancy.creation"))


def ignored_topic_config(name: str, resource: str) -> bool:
    """True for a deprecated topic config Kafka accepts and ignores (``IGNORED_TOPIC_CONFIGS``),
    with one warning line per config name per interval (CreateTopics, AlterConfigs,
    IncrementalAlterConfigs)."""
    why = IGNORED_TOPIC_CONFIGS.get(name)
    if why is not None:
        _ignored_log.log(logging.WARNING, name, "Topic configuration %s is ignored (%s): %s", name, resource or "-", why)
    return why is not None


# ---------------------------------------------------------------------------------------------
# Auto-creation (Metadata)


@dataclass(frozen=True, kw_only=True)
class AutoCreateTopic(TopicCreation):
    """A topic Metadata creates with the broker's defaults, as Kafka does with auto-creation
    (``name`` is physical); the answer is the topic, created now or found."""

    name: str
    config: "BrokerConfig"

    def decide(self, image: MetadataImage) -> Result[TopicInfo]:
        found = image.topic(self.name)
        if found is not None:  # created meanwhile (another request, another broker): that one
            return unchanged(found)
        name, cfg = self.name, self.config
        defaults = planner.Defaults.for_topics(cfg)
        refused = auto_create_refusal(image, name, defaults.num_partitions, defaults.replication_factor)
        if refused is not None:
            raise MetadataError(*refused)
        placement = cfg.get("replica.placement")  # the broker's default placement, if any
        # the cluster's one planner, as CreateTopics: too few brokers is refused, never shrunk
        request = planner.TopicRequest(name, placement=parse_placement(placement) if placement else None)
        plan = _place(self._live(image, name), request, defaults, self.rng)
        configs = {"replica.placement": placement} if placement else {}  # recorded: how it was placed
        return self._create(image, Planned(name, plan.assignments, plan.observers, configs))


def auto_create_refusal(image: MetadataImage, physical_topic: str, partitions: int,
                        replication_factor: int) -> tuple[str, str] | None:
    """Why a topic may not be auto-created: ``(error code, message)`` when its namespace does not
    exist or its tenant's policy refuses it, else None."""
    tid = owner_tenant(physical_topic, image.tenants)
    prefix = tenant_prefix(tid) if tid else ""
    why = namespaces.missing_namespace_error(image, physical_topic, prefix)
    if why is not None:
        return "INVALID_TOPIC_EXCEPTION", why
    if tid is not None and image.tenants[tid].policy:
        why = tenancy_policy.check_create(
            image.tenants[tid].policy, tenancy_policy.tenant_state(image, tid),
            tenancy_policy.CreateRequest(physical_topic[len(prefix):], partitions, replication_factor, {}))
        if why is not None:
            return "POLICY_VIOLATION", why
    return None


# ---------------------------------------------------------------------------------------------
# Internal topics


@dataclass(frozen=True, kw_only=True)
class InternalTopic(TopicCreation):
    """An internal topic (``shoal.tenancy.internal_topics``) of ``partitions`` partitions and
    ``replication_factor`` replicas, lowered to the live brokers when ``shrink_to_live`` (Kafka,
    KIP-115, waits for enough brokers instead); ``configs`` by the replication factor it gets.
    The answer is the topic created, None when it exists."""

    name: str
    partitions: int
    replication_factor: int
    configs: Callable[[int], Mapping[str, str]]
    shrink_to_live: bool = False

    def decide(self, image: MetadataImage) -> Result[TopicInfo | None]:
        if image.topic(self.name) is not None:
            return unchanged(None)
        live = self._live(image, self.name)
        rf = self.replication_factor
        if self.shrink_to_live and live:
            rf = max(1, min(rf, len(live)))
        plan = _place(live, planner.TopicRequest(self.name), planner.Defaults(self.partitions, rf), self.rng, rf)
        return self._create(image, Planned(self.name, plan.assignments, plan.observers, self.configs(rf)),
                            internal=True)


def internal_replication_factor(configured: int, config: "BrokerConfig", key: str, is_cluster: bool) -> int:
    """An internal topic's replication factor: as configured (``key``), but left at its default on
    an etcd cluster, ``CLUSTER_REPLICATION_FACTOR`` (a cluster's internal topics replicate, as by
    Kafka's default)."""
    if is_cluster and config.source(key) == ConfigSource.DEFAULT_CONFIG:
        return CLUSTER_REPLICATION_FACTOR
    return configured


async def create_internal_topic(
    store: "MetadataStore",
    name: str,
    partitions: int,
    replication_factor: int,
    configs: Callable[[int], Mapping[str, str]],
    *,
    rng: random.Random,
    fenced: Callable[[], Collection[int]] = frozenset,
    shrink_to_live: bool = False,
) -> TopicInfo | None:
    """Create an internal topic (:class:`InternalTopic`) unless the image has it: the topic
    created, None when it exists (created meanwhile too); PlacementRefused, or another
    MetadataError, when it cannot be."""
    if store.image.topic(name) is not None:
        return None
    deciding: Any = store  # shoal.metadata.store.DecidingStore
    topic = InternalTopic(name=name, partitions=partitions, replication_factor=replication_factor, configs=configs,
                          shrink_to_live=shrink_to_live, new_uuid=deciding.new_uuid, rng=rng, fenced=fenced)
    return await deciding.decide_and_commit(topic.decide)
