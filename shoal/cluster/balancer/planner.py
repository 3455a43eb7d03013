"""The balancer's planner, a pure function: ``brokers + partitions (with their load) + goals ->
plan``. No I/O, no clock, no randomness: the same inputs give the same plan.

Goals run in priority order (:data:`DEFAULT_GOALS`); each optimizes the model with actions that
every hard goal and the soft goals before it accept and that lower the weighted objective, so no
action breaks a hard goal or undoes a higher soft one, and every action helps. Leadership moves are tried before replica moves wherever a goal
can use them (they move no data). A plan is kept only if it repairs a hard goal or lowers the
soft goals' weighted imbalance by more than ``min_improvement`` of what it was (moving data for a
rounding error is worse than leaving it).

What the plan says: per partition changed, its replica list before and after (the preferred
leader first), whether data moves (a leadership change only reorders), the bytes to copy, and
the objective before and after, goal by goal; and what it could not repair, one line each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Mapping, Sequence

from shoal.cluster.balancer.goals import (
    EPS,
    Budget,
    CapacityGoal,
    DistributionGoal,
    Goal,
    PlacementGoal,
    TenantSpreadGoal,
)
from shoal.cluster.balancer.model import (
    Action,
    BrokerInfo,
    ClusterModel,
    PartitionInfo,
    Resource,
    TopicPartition,
    model_of,
)

__all__ = [
    "ANY_UNEVEN_LOAD",
    "DEFAULT_GOALS",
    "EMPTY_BROKER",
    "BalancerConfig",
    "Change",
    "Objective",
    "Plan",
    "objective",
    "plan",
]

EMPTY_BROKER = "EMPTY_BROKER"
ANY_UNEVEN_LOAD = "ANY_UNEVEN_LOAD"

# Priority order: hard goals, then the soft ones.
DEFAULT_GOALS = (
    "placement",
    "capacity.disk",
    "capacity.nw_in",
    "capacity.nw_out",
    "disk",
    "leader.bytes.in",
    "leader.bytes.out",
    "replicas",
    "leaders",
    "tenant.spread",
)
HARD_WEIGHT = 1e9
MAX_PASSES = 10


@dataclass(frozen=True)
class BalancerConfig:
    disk_max_load: float = 0.85
    nw_in_max_load: float = 0.80
    nw_out_max_load: float = 0.80
    balance_threshold: float = 1.10
    min_improvement: float = 0.05
    max_replica_moves: int = 100
    max_leader_moves: int = 1000
    trigger: str = ANY_UNEVEN_LOAD
    goals: tuple[str, ...] = DEFAULT_GOALS

    def __post_init__(self) -> None:
        unknown = [g for g in self.goals if g not in DEFAULT_GOALS]
        if unknown:
            raise ValueError(f"unknown balancer goal {unknown[0]!r} ({', '.join(DEFAULT_GOALS)})")
        if self.trigger not in (EMPTY_BROKER, ANY_UNEVEN_LOAD):
            raise ValueError(f"unknown trigger {self.trigger!r} ({EMPTY_BROKER}, {ANY_UNEVEN_LOAD})")
        if self.balance_threshold < 1.0:
            raise ValueError(f"balance threshold {self.balance_threshold} is below 1")


def goals_for(config: BalancerConfig) -> list[Goal]:
    t = config.balance_threshold
    made: dict[str, Goal] = {
        "placement": PlacementGoal(),
        "capacity.disk": CapacityGoal(Resource.DISK, config.disk_max_load),
        "capacity.nw_in": CapacityGoal(Resource.NW_IN, config.nw_in_max_load),
        "capacity.nw_out": CapacityGoal(Resource.NW_OUT, config.nw_out_max_load),
        "disk": DistributionGoal("disk", Resource.DISK, t),
        "leader.bytes.in": DistributionGoal("leader.bytes.in", Resource.LEADER_IN, t),
        "leader.bytes.out": DistributionGoal("leader.bytes.out", Resource.NW_OUT, t),
        "replicas": DistributionGoal("replicas", Resource.REPLICAS, t),
        "leaders": DistributionGoal("leaders", Resource.LEADERS, t),
        "tenant.spread": TenantSpreadGoal(),
    }
    return [made[g] for g in config.goals]


def _weights(goals: Sequence[Goal]) -> list[float]:
    soft = [g for g in goals if not g.hard]
    return [HARD_WEIGHT if g.hard else 10.0 ** (len(soft) - 1 - soft.index(g)) for g in goals]


@dataclass(frozen=True)
class Objective:
    """Each goal's imbalance (hard goals: violations; 0 is met), in priority order."""

    goals: tuple[tuple[str, float], ...]
    weights: tuple[float, ...]

    @property
    def total(self) -> float:
        return sum(w * v for w, (_, v) in zip(self.weights, self.goals))

    @property
    def hard(self) -> float:
        return sum(v for w, (_, v) in zip(self.weights, self.goals) if w == HARD_WEIGHT)

    @property
    def soft(self) -> float:
        return sum(w * v for w, (_, v) in zip(self.weights, self.goals) if w != HARD_WEIGHT)

    def of(self, goal: str) -> float:
        return dict(self.goals)[goal]


def _objective(model: ClusterModel, goals: Sequence[Goal]) -> Objective:
    return Objective(tuple((g.name, g.imbalance(model)) for g in goals), tuple(_weights(goals)))


def objective(brokers: Sequence[BrokerInfo], partitions: Sequence[PartitionInfo], config: BalancerConfig = BalancerConfig(),
              assignment: Mapping[TopicPartition, Sequence[int]] | None = None) -> Objective:
    """The objective of ``partitions`` as they are, or with ``assignment``'s replica lists (a
    plan's), computed from scratch."""
    return _objective(model_of(brokers, partitions, assignment), goals_for(config))


@dataclass(frozen=True)
class Change:
    tp: TopicPartition
    before: tuple[int, ...]
    after: tuple[int, ...]
    observers: tuple[int, ...]
    bytes: float  # to copy: one replica's size per new broker

    @property
    def leadership_only(self) -> bool:
        return set(self.before) == set(self.after)


@dataclass(frozen=True)
class Plan:
    changes: tuple[Change, ...]
    before: Objective
    after: Objective
    unfixable: tuple[str, ...] = ()
    actions: tuple[Action, ...] = field(default=(), repr=False)
    note: str = ""

    @property
    def assignment(self) -> dict[TopicPartition, tuple[int, ...]]:
        return {c.tp: c.after for c in self.changes}

    @property
    def replica_moves(self) -> int:
        return sum(1 for c in self.changes if not c.leadership_only)

    @property
    def leadership_moves(self) -> int:
        return sum(1 for c in self.changes if c.leadership_only)

    @property
    def bytes_to_move(self) -> float:
        return sum(c.bytes for c in self.changes)


def plan(brokers: Sequence[BrokerInfo], partitions: Sequence[PartitionInfo],
         config: BalancerConfig = BalancerConfig(), fill: Collection[int] | None = None) -> Plan:
    """``fill``: with the EMPTY_BROKER trigger, the brokers to fill (those that joined empty and
    have not had their share yet, as the executor tracks them); default, the brokers empty now."""
    model = ClusterModel(brokers, partitions)
    original = model.assignment()
    goals = goals_for(config)
    weights = _weights(goals)
    before = _objective(model, goals)
    empty = frozenset(b for b in model.active() if not model.hosted[b]) if fill is None else frozenset(fill)
    budget = Budget(config.max_replica_moves, config.max_leader_moves)
    hard = [g for g in goals if g.hard]
    # Passes over the goals until one takes no action: a lower goal's moves can open a move to a
    # higher one, and a plan should leave nothing that a second plan would do. Every action lowers
    # the objective, so this ends; MAX_PASSES bounds it all the same.
    for _ in range(MAX_PASSES):
        taken = len(model.actions)
        for k, goal in enumerate(goals):
            # every hard goal vetoes every action (a repair may not overfill a disk); a soft goal
            # is kept by the goals after it
            done = hard + [g for g in goals[:k] if not g.hard]
            budget.dests = empty if not goal.hard and config.trigger == EMPTY_BROKER else None

            def allowed(a: Action, done: Sequence[Goal] = done) -> bool:
                if not all(g.accepts(model, a) for g in done):
                    return False
                return sum(w * g.change(model, a) for w, g in zip(weights, goals)) < -EPS
            goal.optimize(model, allowed, budget)
        if len(model.actions) == taken or budget.exhausted():
            break
    after = _objective(model, goals)
    unfixable = _unfixable(model, goals)
    changes = tuple(_change(model, tp, original[tp]) for tp in sorted(model.moved)
                    if tuple(model.parts[tp].replicas) != original[tp])
    repaired = after.hard < before.hard - EPS
    gain = before.soft - after.soft
    # A fill is not held to min_improvement: the soft objective also counts what no move can fix
    # (racks that hold more than their share), and the last moves onto a new broker gained too
    # little of it, so a fill stopped short (a broker joining a rack of two had a third of it).
    filling = config.trigger == EMPTY_BROKER and bool(empty) and any(
        (set(c.after) - set(c.before)) & empty for c in changes)
    if changes and not repaired and not filling and gain <= config.min_improvement * before.soft + EPS:
        return Plan((), before, before, unfixable, (),
                    f"no plan: the best found lowers the imbalance {gain:.3g} of {before.soft:.3g}, "
                    f"not more than min_improvement {config.min_improvement:g}")
    return Plan(changes, before, after, unfixable, tuple(model.actions))


def _change(model: ClusterModel, tp: TopicPartition, before: tuple[int, ...]) -> Change:
    p = model.parts[tp]
    after = tuple(p.replicas)
    new = [b for b in after if b not in before]
    return Change(tp, before, after, after[p.info.sync_count:], p.info.load.size * len(new))


def _unfixable(model: ClusterModel, goals: Sequence[Goal]) -> tuple[str, ...]:
    out: list[str] = []
    for g in goals:
        if isinstance(g, PlacementGoal):
            out += [g.unfixable[tp] for tp in sorted(g.unfixable)]
        elif isinstance(g, CapacityGoal):
            for b in model.active():
                lim = g.limit(model, b)
                load = model.load[b][g.resource]
                if load > lim + EPS:
                    cap = model.brokers[b].capacity.of(g.resource)
                    out.append(f"broker {b}: {g.resource.name.lower()} at {load / cap:.0%} of its capacity "
                               f"(limit {g.max_load:.0%}) and no replica fits elsewhere")
    return tuple(out)

