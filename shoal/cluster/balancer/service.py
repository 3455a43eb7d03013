"""What operators ask of the balancer, on any broker (the HTTP admin API's ``/v1/cluster/...``
and ``shoal cluster balancer`` / ``remove-broker`` over it): the controller's published status,
a plan made here and now (a dry run: nothing moves), pausing and resuming, and removing a broker.

The commands are dynamic cluster-wide broker configs (``shoal.balancer.paused``,
``shoal.balancer.remove.brokers``), committed through the metadata store like any AlterConfigs,
so they survive a controller failover and every broker sees them; the controller's balancer acts
on them at its next round.

Removing a broker is refused, with one line saying why, when the other brokers cannot hold its
replicas: the planner, asked to move everything off it with no move budget, reports what it could
not place (the replication factor above the usable brokers, a rack with none left for a
``replica.placement``, capacity)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Awaitable, Callable, Collection, Mapping

from shoal.cluster.balancer.executor import DecidingStore
from shoal.cluster.balancer.inputs import BalancerSettings, LoadSource, TopicConfigs, cluster_inputs, read_loads, settings_of
from shoal.cluster.balancer.planner import Plan, plan
from shoal.config import BrokerConfig
from shoal.metadata import MetadataError, MetadataImage
from shoal.metadata.change import Change, Result, unchanged

__all__ = ["BalancerService", "RemoveRefused", "plan_json"]

UNLIMITED = 1_000_000_000


class RemoveRefused(Exception):
    """A remove-broker the cluster cannot carry out; the message says why in one line."""


def plan_json(p: Plan, limit: int = 1000) -> dict[str, object]:
    return {
        "replica_moves": p.replica_moves,
        "leadership_moves": p.leadership_moves,
        "bytes_to_move": p.bytes_to_move,
        "goals": [{"goal": g, "before": v, "after": p.after.of(g)} for g, v in p.before.goals],
        "changes": [{"topic": c.tp[0], "partition": c.tp[1], "before": list(c.before), "after": list(c.after),
                     "observers": list(c.observers), "leadership_only": c.leadership_only, "bytes": c.bytes}
                    for c in p.changes[:limit]],
        "unfixable": list(p.unfixable),
        "note": p.note,
    }


def _set_configs(image: MetadataImage, updates: Mapping[str, str | None]) -> Result[None]:
    configs = dict(image.broker_configs)
    for k, v in updates.items():
        if v is None:
            configs.pop(k, None)
        else:
            configs[k] = v
    if configs == dict(image.broker_configs):
        return unchanged(None)
    return Result(Change(broker_configs=configs), None)


class BalancerService:
    def __init__(self, store: DecidingStore, config: Callable[[], BrokerConfig], topic_configs: TopicConfigs,
                 status: Callable[[], Awaitable[dict[str, object] | None]],
                 fenced: Callable[[], Collection[int]] = frozenset,
                 loads: LoadSource | None = None) -> None:
        self.store = store
        self._config = config
        self._topic_configs = topic_configs
        self._status = status
        self._fenced = fenced
        self._loads = loads

    def settings(self) -> BalancerSettings:
        return settings_of(self._config())

    async def status(self) -> dict[str, object]:
        s = self.settings()
        published = await self._status()
        return {"enabled": s.enabled, "paused": s.paused, "trigger": s.planner.trigger,
                "remove_brokers": sorted(s.remove), "throttle_bytes_per_second": s.throttle,
                "heal_broker_failure_threshold_ms": s.heal_threshold_ms, "controller": published}

    async def plan(self, settings: BalancerSettings | None = None) -> Plan:
        """A plan on this broker's view (alive: registered and not fenced; a broker missing counts
        as down for less than the healing threshold: the controller's clock is not known here)."""
        s = settings or self.settings()
        image = self.store.image
        alive = set(image.brokers) - set(self._fenced())
        loads = await read_loads(self._loads)
        brokers, parts = cluster_inputs(image, alive, {}, 0.0, {}, s, self._topic_configs, loads[0], loads[1])
        return await asyncio.to_thread(plan, brokers, parts, s.planner)  # seconds of CPU at 10,000 partitions

    async def set_paused(self, paused: bool) -> None:
        """Pause or resume, as a cluster-wide dynamic config (``false`` written, not deleted, so a
        resume also overrides a broker's static ``shoal.balancer.paused=true``)."""
        value = "true" if paused else "false"
        await self.store.decide_and_commit(lambda img: _set_configs(img, {"shoal.balancer.paused": value}))

    async def remove_broker(self, node: int, cancel: bool = False) -> dict[str, object]:
        image = self.store.image
        s = self.settings()
        known = set(image.brokers) | {r for t in image.topics.values() for p in t.partitions for r in p.replicas}
        if cancel:
            if node not in s.remove:
                raise RemoveRefused(f"broker {node} is not being removed")
            remove = sorted(s.remove - {node})
        else:
            if node not in known:
                raise RemoveRefused(f"broker {node} is neither registered nor holds a replica")
            trial = dataclasses.replace(s, remove=s.remove | {node}, planner=dataclasses.replace(
                s.planner, max_replica_moves=UNLIMITED, goals=("placement", "capacity.disk", "capacity.nw_in",
                                                                "capacity.nw_out")))
            p = await self.plan(trial)
            if p.unfixable:
                more = f" (and {len(p.unfixable) - 1} more)" if len(p.unfixable) > 1 else ""
                raise RemoveRefused(f"cannot remove broker {node}: {p.unfixable[0]}{more}")
            remove = sorted(s.remove | {node})
        value = ",".join(map(str, remove)) or None
        try:
            await self.store.decide_and_commit(lambda img: _set_configs(img, {"shoal.balancer.remove.brokers": value}))
        except MetadataError as e:
            raise RemoveRefused(e.message) from None
        return {"remove_brokers": remove}
