"""The balancer's goals, in Cruise Control's shape: each goal measures how far the model is from
it (``imbalance``), says whether an action would undo it (``accepts``), and ``optimize``s the
model with actions that every goal optimized before it accepts. Goals run in priority order, so a
lower goal never undoes a higher one; hard goals veto every action that breaks them.

Hard goals:

- :class:`PlacementGoal`: the replication factor holds (an action replaces a replica, never adds
  or drops one); no replica on a broker that must hold nothing (draining, or down past the
  healing threshold) or outside the partition's tenant cell; a topic's ``replica.placement``
  (sync replicas and observers per rack, the preferred leader in the first constraint's rack);
  without one, replicas on as many racks as there are (KIP-36), when every usable broker has a
  rack; ``min.insync.racks`` racks among the sync replicas. A rack with too few usable brokers
  lowers what is asked of it (Redpanda's rule: a partition keeps its replication factor and breaks
  rack spread rather than stay under-replicated), and asks it again when the brokers are back.
- :class:`CapacityGoal` (disk, network in, network out): no broker above ``max_load`` of its
  capacity; an action may not push a broker over, and the goal moves load off brokers that are.

Soft goals, each a :class:`DistributionGoal` over active brokers (their load relative to their
capacity, when every broker's is known, else to the mean): disk use, leader bytes in, leader bytes
out, replica count, leader count; then :class:`TenantSpreadGoal`: each tenant's replicas even
over the brokers it may use. A soft goal is met when every broker is within the balance band
(``threshold``: 1.10 is Cruise Control's default, ±10% of the mean; counts get a band of at
least one).

The objective the planner minimizes is the goals' imbalances weighted by priority (hard goals far
above soft ones): every action the planner takes lowers it.
"""

from __future__ import annotations

import bisect
import math
from typing import Callable, Iterable, Iterator, Sequence

from shoal.cluster.balancer.model import (
    ACTIVE,
    OFFLINE,
    Action,
    ClusterModel,
    LeadershipMove,
    PartitionInfo,
    ReplicaMove,
    Resource,
)

__all__ = [
    "CapacityGoal",
    "DistributionGoal",
    "Goal",
    "PlacementGoal",
    "TenantSpreadGoal",
    "placement_violations",
]

EPS = 1e-12
# How many of a hot broker's partitions a soft goal tries (largest that can help first) before it
# turns to the next broker: bounds a planning round's cost at thousands of partitions.
CANDIDATES_PER_SOURCE = 64
Accept = Callable[[Action], bool]


class Goal:
    name = ""
    hard = False

    def imbalance(self, model: ClusterModel) -> float:
        raise NotImplementedError

    def accepts(self, model: ClusterModel, action: Action) -> bool:
        raise NotImplementedError

    def change(self, model: ClusterModel, action: Action) -> float:
        """How ``action`` changes :meth:`imbalance` (negative: it helps)."""
        raise NotImplementedError

    def optimize(self, model: ClusterModel, allowed: Accept, budget: "Budget") -> None:
        raise NotImplementedError


class Budget:
    """What a plan may still do: replica moves and leadership moves (each partition changed once
    counts once), and the destinations a soft goal may use (``EMPTY_BROKER``: only the brokers
    that were empty)."""

    def __init__(self, replica_moves: int, leader_moves: int, dests: frozenset[int] | None = None) -> None:
        self.replica_moves = replica_moves
        self.leader_moves = leader_moves
        self.dests = dests
        self._replica_tps: set[tuple[str, int]] = set()
        self._leader_tps: set[tuple[str, int]] = set()

    def allows(self, action: Action) -> bool:
        if isinstance(action, ReplicaMove):
            return action.tp in self._replica_tps or len(self._replica_tps) < self.replica_moves
        return action.tp in self._leader_tps or len(self._leader_tps) < self.leader_moves

    def spend(self, action: Action) -> None:
        (self._replica_tps if isinstance(action, ReplicaMove) else self._leader_tps).add(action.tp)

    def exhausted(self) -> bool:
        return len(self._replica_tps) >= self.replica_moves and len(self._leader_tps) >= self.leader_moves


# -- placement (hard) ---------------------------------------------------------------------------


def _holdable(model: ClusterModel, info: PartitionInfo, b: int) -> bool:
    """May ``b`` keep a replica of ``info``: active, or offline (it returns), and in the cell."""
    state = model.brokers[b].state
    return state in (ACTIVE, OFFLINE) and (info.allowed is None or b in info.allowed)


def placement_violations(model: ClusterModel, info: PartitionInfo, replicas: Sequence[int]) -> int:
    """How many replicas of ``info`` are misplaced in ``replicas`` (0: every placement rule holds).
    Each replica on a broker that may not hold it counts one, each replica a rack lacks (of a
    ``replica.placement``, of rack spread, of ``min.insync.racks``) one, a preferred leader outside
    the placement's leader rack one; after racks, each host its replicas lack (when some host runs
    several brokers, ``broker.host``: min(replicas, usable hosts) hosts) one."""
    usable = [b for b in model.brokers if _holdable(model, info, b)
              and (model.brokers[b].state == ACTIVE or b in replicas)]
    bad = sum(1 for b in replicas if not _holdable(model, info, b))
    if model.hosts_shared:
        hosts = {model.host(b) for b in usable}
        held_hosts = {model.host(b) for b in replicas if _holdable(model, info, b)}
        bad += max(0, min(len(replicas), len(hosts)) - len(held_hosts))
    sync = replicas[:info.sync_count]
    obs = replicas[info.sync_count:]
    rack = model.rack
    spec = info.placement
    if spec is not None:
        room: dict[str, int] = {}
        for b in usable:
            r = rack(b)
            if r is not None:
                room[r] = room.get(r, 0) + 1
        for r, (want_sync, want_obs) in spec.per_rack().items():
            n = room.get(r, 0)
            need_sync = min(want_sync, n)
            need_obs = min(want_obs, n - need_sync)
            have_sync = sum(1 for b in sync if rack(b) == r and _holdable(model, info, b))
            have_obs = sum(1 for b in obs if rack(b) == r and _holdable(model, info, b))
            bad += max(0, need_sync - have_sync) + max(0, need_obs - have_obs)
        lead_rack = spec.replicas[0].rack
        if sync and room.get(lead_rack, 0) and rack(sync[0]) != lead_rack:
            bad += 1
        return bad
    racks = {rack(b) for b in usable}
    if racks and None not in racks:
        held = {rack(b) for b in replicas if _holdable(model, info, b)}
        bad += max(0, min(len(replicas), len(racks)) - len(held))
        if info.min_insync_racks > 1:
            held_sync = {rack(b) for b in sync if _holdable(model, info, b)}
            bad += max(0, min(info.min_insync_racks, len(racks), len(sync)) - len(held_sync))
    return bad


class PlacementGoal(Goal):
    name = "placement"
    hard = True

    def __init__(self) -> None:
        self.unfixable: dict[tuple[str, int], str] = {}

    def imbalance(self, model: ClusterModel) -> float:
        return float(sum(placement_violations(model, info, reps) for info, reps in model.partitions()))

    def change(self, model: ClusterModel, action: Action) -> float:
        p = model.parts[action.tp]
        if _same_place(model, p.info, action):
            return 0.0
        return float(placement_violations(model, p.info, model.replicas_after(action))
                     - placement_violations(model, p.info, p.replicas))

    def accepts(self, model: ClusterModel, action: Action) -> bool:
        return self.change(model, action) <= 0

    def optimize(self, model: ClusterModel, allowed: Accept, budget: Budget) -> None:
        for info, reps in list(model.partitions()):
            if info.moving:
                continue
            while (now := placement_violations(model, info, reps)) > 0:
                best: tuple[tuple[float, ...], Action] | None = None
                candidates: list[Action] = [LeadershipMove(info.tp, reps[0], d, self.name)
                                            for d in reps[1:info.sync_count]]
                for d in model.eligible(info):
                    if d not in reps:
                        candidates += [ReplicaMove(info.tp, s, d, self.name) for s in reps]
                over_budget = False
                for a in candidates:
                    after = placement_violations(model, info, model.replicas_after(a))
                    if after >= now:
                        continue
                    if not budget.allows(a):
                        over_budget = True
                        continue
                    if not allowed(a):
                        continue
                    # fewest violations left, then a leadership move before a replica move, then
                    # the emptiest destination (disk, then replicas), then the lowest ids
                    key = (after, isinstance(a, ReplicaMove), *_fill(model, a.dest), a.dest, a.source)
                    if best is None or key < best[0]:
                        best = (key, a)
                if best is None:
                    if not over_budget:  # else the next plan repairs it
                        self.unfixable[info.tp] = _why_unfixable(model, info, reps)
                    break
                model.apply(best[1])
                budget.spend(best[1])


def _same_place(model: ClusterModel, info: PartitionInfo, action: Action) -> bool:
    """Whether ``action`` leaves every placement rule as it is, without counting: a leadership
    move with no ``replica.placement`` (the replicas and the sync replicas' racks stay), or a
    replica moved between two active brokers of the partition's cell in one rack (each rack's
    sync replicas and observers stay, and so do the usable brokers)."""
    if isinstance(action, LeadershipMove):
        return info.placement is None
    brokers = model.brokers
    s, d = brokers[action.source], brokers[action.dest]
    return (s.state == ACTIVE and d.state == ACTIVE and s.rack == d.rack
            and (not model.hosts_shared or s.host == d.host)
            and (info.allowed is None or (s.id in info.allowed and d.id in info.allowed)))


def _fill(model: ClusterModel, b: int) -> tuple[float, float]:
    cap = model.brokers[b].capacity.disk
    disk = model.load[b][Resource.DISK]
    return (disk / cap if cap else 0.0, model.load[b][Resource.REPLICAS])


def _why_unfixable(model: ClusterModel, info: PartitionInfo, reps: Sequence[int]) -> str:
    eligible = model.eligible(info)
    name = f"{info.topic}-{info.partition}"
    if len(eligible) < len(reps):
        where = " in its tenant's cell" if info.allowed is not None else ""
        return (f"{name}: {len(reps)} replicas need {len(reps)} usable brokers{where}, "
                f"{len(eligible)} left ({', '.join(map(str, eligible)) or 'none'})")
    return f"{name}: no broker with room satisfies its placement (replicas {list(reps)})"


# -- capacity (hard) ----------------------------------------------------------------------------


class CapacityGoal(Goal):
    hard = True

    def __init__(self, resource: Resource, max_load: float) -> None:
        self.resource = resource
        self.max_load = max_load
        self.name = f"capacity.{resource.name.lower()}"

    def limit(self, model: ClusterModel, b: int) -> float:
        cap = model.brokers[b].capacity.of(self.resource)
        return cap * self.max_load if cap > 0 else math.inf

    def _over(self, model: ClusterModel, b: int, load: float) -> float:
        lim = self.limit(model, b)
        return max(0.0, load - lim) / lim if lim != math.inf else 0.0

    def imbalance(self, model: ClusterModel) -> float:
        return sum(self._over(model, b, model.load[b][self.resource]) for b in model.active())

    def change(self, model: ClusterModel, action: Action) -> float:
        out = 0.0
        for b, d in model.delta(action):
            if model.brokers[b].state == ACTIVE:
                now = model.load[b][self.resource]
                out += self._over(model, b, now + d[self.resource]) - self._over(model, b, now)
        return out

    def accepts(self, model: ClusterModel, action: Action) -> bool:
        for b, d in model.delta(action):
            if d[self.resource] > EPS and model.load[b][self.resource] + d[self.resource] > self.limit(model, b) + EPS:
                return False
        return True

    def optimize(self, model: ClusterModel, allowed: Accept, budget: Budget) -> None:
        r = self.resource
        for b in sorted(model.active(), key=lambda b: -self._over(model, b, model.load[b][r])):
            for _, info, reps in _hosted_by_load(model, b, r):
                if model.load[b][r] <= self.limit(model, b) + EPS:
                    break
                if info.moving:
                    continue
                for a in _actions_off(model, info, reps, b, leadership=r is Resource.NW_OUT):
                    if budget.allows(a) and self.accepts(model, a) and self.change(model, a) < -EPS and allowed(a):
                        model.apply(a)
                        budget.spend(a)
                        break


def _hosted_by_load(model: ClusterModel, b: int, r: Resource, below: float = math.inf
                    ) -> Iterator[tuple[float, PartitionInfo, list[int]]]:
    """The partitions ``b`` hosts whose replica there gives it less than ``below`` of ``r``, as
    (that load, info, replicas), the heaviest first; a copy, so actions may apply meanwhile."""
    entries = model.by_load(b, r)
    start = bisect.bisect_right(entries, -below, key=lambda e: e[0]) if below != math.inf else 0
    for neg, tp in entries[start:]:
        p = model.parts[tp]
        yield -neg, p.info, p.replicas


def _actions_off(model: ClusterModel, info: PartitionInfo, reps: Sequence[int], b: int, leadership: bool,
                 dests: Iterable[int] | None = None) -> list[Action]:
    """Actions that take load of ``info`` off ``b``: leadership to another sync replica (when ``b``
    leads and ``leadership``), then its replica to every other eligible broker, emptiest first."""
    out: list[Action] = []
    if leadership and reps[0] == b:
        out += [LeadershipMove(info.tp, b, d, "") for d in reps[1:info.sync_count]
                if model.brokers[d].state == ACTIVE]
    pool = model.eligible(info) if dests is None else [d for d in dests if d in set(model.eligible(info))]
    out += [ReplicaMove(info.tp, b, d, "") for d in sorted(pool, key=lambda d: (_fill(model, d), d)) if d not in reps]
    return out


# -- distribution (soft) ------------------------------------------------------------------------


class DistributionGoal(Goal):
    """Even ``resource`` over the active brokers, relative to capacity when every active broker's
    is known."""

    LEADERSHIP = (Resource.LEADER_IN, Resource.NW_OUT, Resource.LEADERS)
    COUNTS = (Resource.REPLICAS, Resource.LEADERS)

    def __init__(self, name: str, resource: Resource, threshold: float) -> None:
        self.name = name
        self.resource = resource
        self.threshold = threshold
        self._cached: tuple[ClusterModel, dict[int, float], float] | None = None

    def _caps(self, model: ClusterModel) -> tuple[dict[int, float], float]:
        """Each active broker's capacity (1 each unless every one's is known), and their sum."""
        if self._cached is not None and self._cached[0] is model:
            return self._cached[1], self._cached[2]
        active = model.active()
        caps = {b: model.brokers[b].capacity.of(self.resource) for b in active}
        if not caps or min(caps.values()) <= 0:
            caps = {b: 1.0 for b in active}
        self._cached = (model, caps, sum(caps.values()))
        return caps, self._cached[2]

    def _frame(self, model: ClusterModel) -> tuple[dict[int, float], float]:
        """Each active broker's capacity, and the load per unit of capacity if even."""
        caps, total_cap = self._caps(model)
        return caps, (model.active_total[self.resource] / total_cap if caps else 0.0)

    def band(self, target: float, cap: float) -> tuple[float, float]:
        even = target * cap
        hi, lo = even * self.threshold, even * (2 - self.threshold)
        if self.resource in self.COUNTS:
            hi, lo = max(math.ceil(hi - EPS), math.floor(even) + 1), min(math.floor(lo + EPS), math.ceil(even) - 1)
        return hi, lo

    @staticmethod
    def _dist(load: float, band: tuple[float, float]) -> float:
        hi, lo = band
        return max(0.0, load - hi - EPS) + max(0.0, lo - load - EPS)

    def _term(self, load: float, cap: float, target: float) -> float:
        return (load / (cap * target) - 1.0) ** 2 if target > 0 else 0.0

    def imbalance(self, model: ClusterModel) -> float:
        caps, target = self._frame(model)
        if not caps or target <= 0:
            return 0.0
        return sum(self._term(model.load[b][self.resource], caps[b], target) for b in caps) / len(caps)

    def change(self, model: ClusterModel, action: Action) -> float:
        caps, target = self._frame(model)
        if target <= 0:
            return 0.0
        out = 0.0
        for b, d in model.delta(action):
            if b in caps:
                now = model.load[b][self.resource]
                out += self._term(now + d[self.resource], caps[b], target) - self._term(now, caps[b], target)
        return out / len(caps)

    def accepts(self, model: ClusterModel, action: Action) -> bool:
        """Whether ``action`` keeps this goal: its brokers end no further outside the band, all
        together. Not each on its own: between two brokers both below the band (a rack's brokers,
        when the other racks hold more than the mean and cannot give any away), a move from the
        fuller to the emptier takes the first as far below as it brings the second up, and each-on-
        its-own refused every one: a broker that joined such a rack was filled to a third of the
        rack's replicas and no further."""
        caps, target = self._frame(model)
        before = after = 0.0
        for b, d in model.delta(action):
            if b in caps and d[self.resource]:
                band = self.band(target, caps[b])
                now = model.load[b][self.resource]
                before += self._dist(now, band)
                after += self._dist(now + d[self.resource], band)
        return after <= before + EPS

    def out_of_band(self, model: ClusterModel) -> tuple[list[int], list[int]]:
        caps, target = self._frame(model)
        if target <= 0:
            return [], []
        hot, cold = [], []
        for b in caps:
            hi, lo = self.band(target, caps[b])
            load = model.load[b][self.resource]
            if load > hi + EPS:
                hot.append((load / (caps[b] * target), b))
            elif load < lo - EPS:
                cold.append((load / (caps[b] * target), b))
        return [b for _, b in sorted(hot, key=lambda x: (-x[0], x[1]))], [b for _, b in sorted(cold)]

    def optimize(self, model: ClusterModel, allowed: Accept, budget: Budget) -> None:
        r = self.resource
        leadership = r in self.LEADERSHIP
        for _ in range(10 * len(model.parts) + 10):
            if budget.exhausted():
                return
            hot, cold = self.out_of_band(model)
            if not hot and not cold:
                return
            if not self._step(model, allowed, budget, hot, cold, leadership):
                return

    def _step(self, model: ClusterModel, allowed: Accept, budget: Budget, hot: list[int], cold: list[int],
              leadership: bool) -> bool:
        """Take one action that moves ``resource`` off a hot broker or onto a cold one."""
        r = self.resource
        caps, target = self._frame(model)
        dests = sorted(set(caps) if budget.dests is None else set(caps) & budget.dests,
                       key=lambda d: (model.load[d][r] / caps[d], d))
        # Hot brokers first; then, while some broker is below the band, every other broker above
        # it (a hot broker may be unable to reach it: racks, cells; and one just in the band, or
        # below it too, may still hold more than a cold one)
        sources = hot + ([b for b in sorted(caps, key=lambda b: (-model.load[b][r] / caps[b], b)) if b not in hot]
                         if cold else [])
        for b in sources:
            targets = [d for d in dests if d != b and model.load[d][r] / caps[d] < model.load[b][r] / caps[b]]
            if b not in hot:
                targets = [d for d in targets if d in cold]
            if not targets:
                continue
            # Moving l from b to d lowers the sum of squares of (load / capacity) only while
            # l (1/cb^2 + 1/cd^2) < 2 (load(b)/cb^2 - load(d)/cd^2) (with equal capacities:
            # l < load(b) - load(d)): larger partitions cannot help. (This bound was half that, the
            # best l, not the largest that helps: a partition as large as half the difference was
            # never tried, and a fill stopped with one broker holding 7.5 MB and the other 4.5 MB.)
            lb, cb = model.load[b][r], caps[b]
            gap = max(2 * (lb / cb ** 2 - model.load[d][r] / caps[d] ** 2) / (1 / cb ** 2 + 1 / caps[d] ** 2)
                      for d in targets)
            tried = 0
            for load, info, reps in _hosted_by_load(model, b, r, below=gap):
                if load <= 0:
                    break
                if info.moving:
                    continue
                tried += 1
                if tried > CANDIDATES_PER_SOURCE:
                    break
                for a in _actions_off(model, info, reps, b, leadership, targets):
                    if budget.allows(a) and self.change(model, a) < -EPS and allowed(a):
                        model.apply(a)
                        budget.spend(a)
                        return True
        return False


# -- tenant spread (soft) -----------------------------------------------------------------------


class TenantSpreadGoal(Goal):
    """Each tenant's replicas even over the active brokers it may use (its cell, or all): no
    broker more than one replica above or below the tenant's mean."""

    name = "tenant.spread"

    def _brokers(self, model: ClusterModel, tenant: str) -> list[int]:
        return model.tenant_brokers.get(tenant, [])

    def _tenant_term(self, model: ClusterModel, tenant: str, counts: dict[int, int]) -> float:
        brokers = self._brokers(model, tenant)
        if not brokers:
            return 0.0
        total = sum(counts.get(b, 0) for b in brokers)
        if total == 0:
            return 0.0
        mean = total / len(brokers)
        return sum((counts.get(b, 0) / mean - 1.0) ** 2 for b in brokers) / len(brokers)

    def imbalance(self, model: ClusterModel) -> float:
        tenants = [t for t, c in model.tenant_replicas.items() if any(c.values())]
        if not tenants:
            return 0.0
        return sum(self._tenant_term(model, t, model.tenant_replicas[t]) for t in tenants) / len(tenants)

    def _after(self, model: ClusterModel, action: Action) -> tuple[str, dict[int, int]] | None:
        if not isinstance(action, ReplicaMove):
            return None
        tenant = model.parts[action.tp].info.tenant
        counts = dict(model.tenant_replicas.get(tenant, {}))
        counts[action.source] = counts.get(action.source, 0) - 1
        counts[action.dest] = counts.get(action.dest, 0) + 1
        return tenant, counts

    def change(self, model: ClusterModel, action: Action) -> float:
        if not isinstance(action, ReplicaMove):
            return 0.0
        tenant = model.parts[action.tp].info.tenant
        now = model.tenant_replicas[tenant]
        brokers = model.tenant_broker_set.get(tenant, frozenset())
        n = max(1, sum(1 for c in model.tenant_replicas.values() if any(c.values())))
        if action.source in brokers and action.dest in brokers:
            # the tenant's total on its brokers stays: only two terms of the sum change
            mean = sum(now.get(b, 0) for b in brokers) / len(brokers)
            cs, cd = now.get(action.source, 0), now.get(action.dest, 0)
            d = (((cs - 1) / mean - 1) ** 2 - (cs / mean - 1) ** 2 + ((cd + 1) / mean - 1) ** 2 - (cd / mean - 1) ** 2)
            return d / len(brokers) / n
        after = self._after(model, action)
        assert after is not None
        return (self._tenant_term(model, tenant, after[1]) - self._tenant_term(model, tenant, now)) / n

    def accepts(self, model: ClusterModel, action: Action) -> bool:
        after = self._after(model, action)
        if after is None:
            return True
        tenant, counts = after
        brokers = self._brokers(model, tenant)
        now = model.tenant_replicas.get(tenant, {})
        total = sum(now.get(b, 0) for b in brokers)
        if not brokers or total == 0:
            return True
        mean = total / len(brokers)
        band = (math.ceil(mean - EPS), math.floor(mean + EPS))

        def dist(c: int) -> float:
            return max(0, c - band[0]) + max(0, band[1] - c)
        return all(dist(counts.get(b, 0)) <= dist(now.get(b, 0)) for b in (action.source, action.dest) if b in brokers)

    def optimize(self, model: ClusterModel, allowed: Accept, budget: Budget) -> None:
        for tenant in sorted(model.tenant_replicas):
            brokers = self._brokers(model, tenant)
            for _ in range(len(model.parts) + 1):
                counts = model.tenant_replicas[tenant]
                total = sum(counts.get(b, 0) for b in brokers)
                if budget.exhausted() or not brokers or total == 0:
                    break
                order = sorted(brokers, key=lambda b: (-counts.get(b, 0), b))
                hi, lo = order[0], order[-1]
                if counts.get(hi, 0) - counts.get(lo, 0) <= 1:
                    break
                if not self._move_one(model, allowed, budget, tenant, order):
                    break

    def _move_one(self, model: ClusterModel, allowed: Accept, budget: Budget, tenant: str, order: list[int]) -> bool:
        counts = model.tenant_replicas[tenant]
        for src in order:
            for dst in reversed(order):
                if counts.get(src, 0) - counts.get(dst, 0) <= 1:
                    break
                if budget.dests is not None and dst not in budget.dests:
                    continue
                tried = 0
                for tp in sorted(model.tenant_hosted[tenant].get(src, ())):
                    p = model.parts[tp]
                    if p.info.moving or dst in p.replicas or dst not in model.eligible(p.info):
                        continue
                    tried += 1
                    if tried > CANDIDATES_PER_SOURCE:
                        break
                    a = ReplicaMove(tp, src, dst, self.name)
                    if budget.allows(a) and self.change(model, a) < -EPS and allowed(a):
                        model.apply(a)
                        budget.spend(a)
                        return True
        return False

