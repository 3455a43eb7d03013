"""The planner's inputs from what the controller knows: the metadata image, which brokers are
alive and since when the others are down, the balancer's settings, and the brokers' load
reports. Pure: the executor calls it once per round.

A broker's state for the planner (:mod:`shoal.cluster.balancer.model`):

- listed in ``shoal.balancer.remove.brokers``: ``EXCLUDED`` (drained: everything moves off);
- alive: ``ACTIVE``;
- down (its registration gone, or the controller treats it as gone) for less than
  ``shoal.balancer.heal.broker.failure.threshold.ms``: ``OFFLINE`` (its replicas wait for it);
  for longer: ``EXCLUDED`` (healed: its replicas are re-created elsewhere). A broker whose
  registration went before the controller saw it die counts as down since the controller first
  saw it missing.

A partition being reassigned is ``moving`` (left alone), counted at its target replicas.
A tenant's partitions may use only its cell's brokers (``allowed``: ``shoal.placement.cells``, by
``shoal.cluster.planner.cell_brokers``): the planner's placement goal moves those outside it in.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Collection, Mapping

from shoal.cluster.balancer.model import (
    ACTIVE,
    EXCLUDED,
    OFFLINE,
    BrokerInfo,
    Capacity,
    PartitionInfo,
    PartitionLoad,
    TopicPartition,
)
from shoal.cluster.balancer.expansion import ExpansionSettings
from shoal.cluster.balancer.planner import BalancerConfig
from shoal.cluster.planner import cell_brokers
from shoal.config import TOPIC_CONFIGS, BrokerConfig, format_value, topic_config_value
from shoal.metadata import MetadataImage, owner_tenant
from shoal.metadata.inheritance import topic_overrides
from shoal.placement.constraints import PlacementSpec, PlacementSpecError, parse_placement

log = logging.getLogger("shoal.cluster.balancer")

__all__ = ["BalancerSettings", "expansion_settings_of", "LoadSource", "Loads", "read_loads", "TopicConfigs", "cluster_inputs", "placement_configs", "settings_of"]

# (image, topic) -> the topic's effective configs (its own over its namespaces' and the broker's)
TopicConfigs = Callable[[MetadataImage, str], Mapping[str, str]]


@dataclass(frozen=True)
class BalancerSettings:
    enabled: bool = True
    paused: bool = False
    remove: frozenset[int] = frozenset()
    heal_threshold_ms: int = 3_600_000  # -1: never
    throttle: int = 10_485_760
    max_moves_per_broker: int = 5
    interval_s: float = 30.0
    planner: BalancerConfig = BalancerConfig()


def settings_of(config: BrokerConfig) -> BalancerSettings:
    """The settings in ``config`` (the broker's, with the cluster's dynamic configs)."""
    get = config.get
    network = float(get("shoal.balancer.network.max.load"))
    return BalancerSettings(
        enabled=bool(get("shoal.balancer.enable")),
        paused=bool(get("shoal.balancer.paused")),
        remove=frozenset(int(b) for b in get("shoal.balancer.remove.brokers") or ()),
        heal_threshold_ms=int(get("shoal.balancer.heal.broker.failure.threshold.ms")),
        throttle=int(get("shoal.balancer.throttle.bytes.per.second")),
        max_moves_per_broker=int(get("shoal.balancer.max.concurrent.moves.per.broker")),
        interval_s=int(get("shoal.balancer.interval.ms")) / 1000.0,
        planner=BalancerConfig(
            disk_max_load=float(get("shoal.balancer.disk.max.load")),
            nw_in_max_load=network,
            nw_out_max_load=network,
            balance_threshold=float(get("shoal.balancer.balance.threshold")),
            min_improvement=float(get("shoal.balancer.min.improvement")),
            max_replica_moves=int(get("shoal.balancer.max.moves.per.plan")),
            trigger=str(get("shoal.balancer.heal.uneven.load.trigger")),
        ),
    )


def expansion_settings_of(config: BrokerConfig) -> ExpansionSettings:
    """The automatic expansion's settings in ``config`` (``shoal.balancer.expand.*``)."""
    get = config.get
    return ExpansionSettings(command=str(get("shoal.balancer.expand.command") or "").strip(),
                             after_ms=int(get("shoal.balancer.expand.after.ms")),
                             headroom=float(get("shoal.balancer.expand.headroom")),
                             timeout_ms=int(get("shoal.balancer.expand.timeout.ms")),
                             wait_ms=int(get("shoal.balancer.expand.wait.ms")),
                             shrink_after_ms=int(get("shoal.balancer.shrink.after.ms")))


# The brokers' load reports as the planner takes them: capacities by broker, loads by partition
Loads = tuple[Mapping[int, Capacity], Mapping[TopicPartition, PartitionLoad]]
LoadSource = Callable[[], Awaitable[Loads]]


async def read_loads(source: LoadSource | None) -> Loads:
    """The load reports from ``source``; none (plan on replica counts and what is known) when there
    is no source or it fails, with one log line."""
    if source is None:
        return {}, {}
    try:
        return await source()
    except Exception as e:
        log.warning("balancer: no load reports (%s): planning without them", e)
        return {}, {}


PLACEMENT_CONFIGS = ("replica.placement", "min.insync.racks")


def placement_configs(config: BrokerConfig, image: MetadataImage, topic: str) -> dict[str, str]:
    """What the placement goal reads of ``topic``: its ``replica.placement`` and
    ``min.insync.racks``, its own or inherited (namespaces, tenant defaults, the broker's)."""
    info = image.topics.get(topic)
    overrides = topic_overrides(image, topic, info.configs) if info is not None else {}
    out = {}
    for key in PLACEMENT_CONFIGS:
        value = format_value(TOPIC_CONFIGS[key].type, topic_config_value(config, overrides, key))
        if value:
            out[key] = value
    return out


def broker_state(node: int, alive: Collection[int], down_since: Mapping[int, float], now: float,
                 settings: BalancerSettings) -> str:
    if node in settings.remove:
        return EXCLUDED
    if node in alive:
        return ACTIVE
    since = down_since.get(node, now)
    threshold = settings.heal_threshold_ms
    if threshold >= 0 and (now - since) * 1000.0 >= threshold:
        return EXCLUDED
    return OFFLINE


def _placement(configs: Mapping[str, str]) -> PlacementSpec | None:
    raw = configs.get("replica.placement")
    if not raw:
        return None
    try:
        return parse_placement(raw)
    except PlacementSpecError:
        return None  # validated when set; an unreadable one places nothing


def cluster_inputs(image: MetadataImage, alive: Collection[int], down_since: Mapping[int, float], now: float,
                   racks: Mapping[int, str | None], settings: BalancerSettings, topic_configs: TopicConfigs,
                   capacities: Mapping[int, Capacity] | None = None,
                   loads: Mapping[TopicPartition, PartitionLoad] | None = None,
                   ) -> tuple[list[BrokerInfo], list[PartitionInfo]]:
    """The brokers and partitions of ``image`` as the planner sees them (see the module doc).
    ``racks``: the last rack known of each broker (a dead broker's registration is gone)."""
    capacities = capacities or {}
    loads = loads or {}
    nodes = set(image.brokers) | set(settings.remove)
    parts: list[PartitionInfo] = []
    known_racks = {**racks, **{n: b.rack for n, b in image.brokers.items()}}
    cells: dict[str, frozenset[int] | None] = {}
    for name, topic in image.topics.items():
        configs = topic_configs(image, name)
        spec = _placement(configs)
        try:
            racks_needed = int(configs.get("min.insync.racks", "1"))
        except ValueError:
            racks_needed = 1
        tenant = owner_tenant(name, image.tenants) or ""
        if tenant not in cells:  # the brokers its tenant's cell may use (shoal.placement.cells)
            cells[tenant] = cell_brokers(image, tenant, known_racks) if tenant else None
        allowed = cells[tenant]
        for p in topic.partitions:
            if p.reassigning:
                replicas = tuple(r for r in p.replicas if r not in p.removing)
                observers = tuple(r for r in p.observers if r in replicas)
                replicas = tuple(r for r in replicas if r not in observers) + observers
            else:
                replicas, observers = p.replicas, p.observers
            if not replicas:
                continue
            nodes.update(replicas)
            parts.append(PartitionInfo(name, p.partition, replicas, observers, loads.get((name, p.partition), PartitionLoad()),
                                       spec, racks_needed, allowed, tenant, p.reassigning))
    brokers = []
    for node in sorted(nodes):
        reg = image.brokers.get(node)
        rack = reg.rack if reg is not None else racks.get(node)
        state = broker_state(node, alive, down_since, now, settings)
        brokers.append(BrokerInfo(node, rack, state, capacities.get(node, Capacity()),
                                  reg.machine if reg is not None else None))
    return brokers, parts
