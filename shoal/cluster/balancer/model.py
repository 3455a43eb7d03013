"""The balancer's cluster model: what the planner knows of brokers, partitions and their load,
and a working copy of the assignment that actions change (Cruise Control's ``ClusterModel``).

Inputs are frozen: :class:`BrokerInfo` (rack, state, capacity), :class:`PartitionInfo` (replicas,
observers, placement, tenant cell, load). :class:`ClusterModel` copies the assignment and keeps
each broker's load per :class:`Resource` up to date as actions are applied, so a goal asks what an
action would do in O(1) instead of summing the cluster again.

What a partition costs a broker (rates are bytes per second over the load window):

- ``DISK``: every replica (observers too) holds ``size`` bytes.
- ``NW_IN``: every replica takes ``bytes_in`` (the leader from producers, followers and observers
  from the leader).
- ``NW_OUT``: the leader sends ``bytes_out`` to consumers and ``bytes_in`` to each other replica.
- ``LEADER_IN``: the leader's ``bytes_in`` (what moves with a leadership change).
- ``REPLICAS`` / ``LEADERS``: one per replica / per partition led.

The leader the model counts is the preferred leader, the first replica: the balancer moves
leadership by reordering the replica list, and a preferred election makes it so.

Broker states: ``ACTIVE`` brokers hold replicas and may take more; an ``OFFLINE`` broker (down,
not yet past the healing threshold) keeps its replicas, takes nothing and is left out of the
balance; an ``EXCLUDED`` broker (draining for removal, or down past the threshold) must hold
nothing: every replica on it is a hard-goal violation that the planner moves.
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass, replace
from typing import Iterable, Iterator, Mapping, Sequence

from shoal.placement.constraints import PlacementSpec

__all__ = [
    "ACTIVE",
    "EXCLUDED",
    "OFFLINE",
    "BrokerInfo",
    "Capacity",
    "ClusterModel",
    "LeadershipMove",
    "PartitionInfo",
    "PartitionLoad",
    "ReplicaMove",
    "Resource",
    "TopicPartition",
]

ACTIVE = "active"
OFFLINE = "offline"
EXCLUDED = "excluded"
STATES = (ACTIVE, OFFLINE, EXCLUDED)

TopicPartition = tuple[str, int]


class Resource(enum.IntEnum):
    DISK = 0
    NW_IN = 1
    NW_OUT = 2
    LEADER_IN = 3
    REPLICAS = 4
    LEADERS = 5


RESOURCES = tuple(Resource)


@dataclass(frozen=True)
class Capacity:
    """A broker's capacity: disk bytes and network bytes per second; 0 means not known (then no
    capacity limit applies and balance is by load alone)."""

    disk: float = 0.0
    nw_in: float = 0.0
    nw_out: float = 0.0

    def of(self, r: Resource) -> float:
        if r is Resource.DISK:
            return self.disk
        if r is Resource.NW_IN:
            return self.nw_in
        if r is Resource.NW_OUT:
            return self.nw_out
        return 0.0


@dataclass(frozen=True)
class BrokerInfo:
    id: int
    rack: str | None = None
    state: str = ACTIVE
    capacity: Capacity = Capacity()
    host: str | None = None  # broker.host (several brokers per host: shoal serve --processes); None: its own

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"broker {self.id}: unknown state {self.state!r} ({', '.join(STATES)})")


@dataclass(frozen=True)
class PartitionLoad:
    bytes_in: float = 0.0  # produced to the leader, B/s
    bytes_out: float = 0.0  # read by consumers from the leader, B/s
    size: float = 0.0  # one replica's log size, bytes


@dataclass(frozen=True)
class PartitionInfo:
    """One partition: ``replicas`` is the whole list (sync replicas, preferred leader first, then
    the observers), ``observers`` the observers among them. ``allowed``: the brokers its tenant's
    cell may use (None: any). ``moving``: a reassignment is in flight, so the planner leaves it
    alone (and counts it against the brokers' concurrent moves)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    observers: tuple[int, ...] = ()
    load: PartitionLoad = PartitionLoad()
    placement: PlacementSpec | None = None
    min_insync_racks: int = 1
    allowed: frozenset[int] | None = None
    tenant: str = ""
    moving: bool = False

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def sync_count(self) -> int:
        return len(self.replicas) - len(self.observers)


@dataclass(frozen=True)
class ReplicaMove:
    """Replace ``source``'s replica of ``tp`` with one on ``dest``, at the same place in the list
    (an observer stays an observer; the preferred leader's place moves the leadership too)."""

    tp: TopicPartition
    source: int
    dest: int
    goal: str = ""


@dataclass(frozen=True)
class LeadershipMove:
    """Make ``dest`` (a sync replica of ``tp``) the preferred leader: it swaps places with the
    first replica."""

    tp: TopicPartition
    source: int
    dest: int
    goal: str = ""


Action = ReplicaMove | LeadershipMove


@dataclass
class _Part:
    info: PartitionInfo
    replicas: list[int]

    @property
    def sync(self) -> list[int]:
        return self.replicas[:self.info.sync_count]

    @property
    def leader(self) -> int:
        return self.replicas[0] if self.replicas else -1


class ClusterModel:
    """The assignment being planned and each broker's load. ``apply`` changes both; nothing else
    does."""

    def __init__(self, brokers: Iterable[BrokerInfo], partitions: Iterable[PartitionInfo]) -> None:
        self.brokers: dict[int, BrokerInfo] = {b.id: b for b in sorted(brokers, key=lambda b: b.id)}
        self.parts: dict[TopicPartition, _Part] = {}
        for info in sorted(partitions, key=lambda i: i.tp):
            name = f"partition {info.topic}-{info.partition}"
            if info.tp in self.parts:
                raise ValueError(f"{name} given twice")
            if len(set(info.replicas)) != len(info.replicas) or not set(info.observers) <= set(info.replicas):
                raise ValueError(f"{name}: bad replicas {info.replicas} / observers {info.observers}")
            if tuple(info.replicas[info.sync_count:]) != tuple(info.observers) and info.observers:
                raise ValueError(f"{name}: observers must follow the sync replicas")
            self.parts[info.tp] = _Part(info, list(info.replicas))
        # broker -> resource -> load; brokers named by replicas but unknown are kept (as EXCLUDED
        # would be: nothing can be placed there) so their replicas are counted and moved.
        for p in self.parts.values():
            for r in p.replicas:
                if r not in self.brokers:
                    self.brokers[r] = BrokerInfo(r, None, EXCLUDED)
        self.brokers = dict(sorted(self.brokers.items()))
        # whether some host runs several brokers: only then do hosts constrain placement
        named = [info.host for info in self.brokers.values() if info.host is not None]
        self.hosts_shared = len(set(named)) < len(named)
        self._active = [b for b, info in self.brokers.items() if info.state == ACTIVE]
        self._eligible: dict[frozenset[int] | None, list[int]] = {}
        # resource -> its load summed over the active brokers
        self.active_total = [0.0] * len(RESOURCES)
        self.load: dict[int, list[float]] = {b: [0.0] * len(RESOURCES) for b in self.brokers}
        self.hosted: dict[int, set[TopicPartition]] = {b: set() for b in self.brokers}
        # (broker, resource) -> (-load, tp) of its replicas, ascending (the heaviest first), kept
        # as actions apply once asked for (by_load)
        self._by_load: dict[tuple[int, Resource], list[tuple[float, TopicPartition]]] = {}
        self._sorted_resources: dict[int, list[Resource]] = {}
        # tenant -> broker -> replicas of the tenant's partitions there
        self.tenant_replicas: dict[str, dict[int, int]] = {}
        # tenant -> broker -> the tenant's partitions with a replica there
        self.tenant_hosted: dict[str, dict[int, set[TopicPartition]]] = {}
        for part in self.parts.values():
            self._account(part, +1)
        # tenant -> the active brokers its partitions may use (the union of their cells)
        self.tenant_brokers: dict[str, list[int]] = {}
        cells: dict[str, set[int] | None] = {}
        for part in self.parts.values():
            t, allowed = part.info.tenant, part.info.allowed
            cell = cells.setdefault(t, set())
            if allowed is None:
                cells[t] = None
            elif cell is not None:
                cell.update(allowed)
        active = self.active()
        for t, cell in cells.items():
            self.tenant_brokers[t] = active if cell is None else [b for b in active if b in cell]
        self.tenant_broker_set = {t: frozenset(bs) for t, bs in self.tenant_brokers.items()}
        self.moved: set[TopicPartition] = set()
        self.actions: list[Action] = []
        self.in_flight: dict[int, int] = {b: 0 for b in self.brokers}
        for part in self.parts.values():
            if part.info.moving:
                for r in part.replicas:
                    self.in_flight[r] += 1

    # -- loads ------------------------------------------------------------------------------

    @staticmethod
    def replica_load(info: PartitionInfo, leader: bool) -> list[float]:
        ld = info.load
        out = [ld.size, ld.bytes_in, 0.0, 0.0, 1.0, 0.0]
        if leader:
            out[Resource.NW_OUT] = ld.bytes_out + ld.bytes_in * (len(info.replicas) - 1)
            out[Resource.LEADER_IN] = ld.bytes_in
            out[Resource.LEADERS] = 1.0
        return out

    def _account(self, p: _Part, sign: int) -> None:
        tenant = self.tenant_replicas.setdefault(p.info.tenant, {})
        for i, b in enumerate(p.replicas):
            vec = self.replica_load(p.info, i == 0)
            row = self.load[b]
            active = self.brokers[b].state == ACTIVE
            for k, v in enumerate(vec):
                row[k] += sign * v
                if active:
                    self.active_total[k] += sign * v
            tp = p.info.tp
            if sign > 0:
                self.hosted[b].add(tp)
            else:
                self.hosted[b].discard(tp)
            tenant[b] = tenant.get(b, 0) + sign
            held = self.tenant_hosted.setdefault(p.info.tenant, {}).setdefault(b, set())
            if sign > 0:
                held.add(tp)
            else:
                held.discard(tp)
            for r in self._sorted_resources.get(b, ()):
                entries = self._by_load[(b, r)]
                entry = (-vec[r], tp)
                if sign > 0:
                    bisect.insort(entries, entry)
                else:
                    del entries[bisect.bisect_left(entries, entry)]

    def apply(self, action: Action) -> None:
        p = self.parts[action.tp]
        if action.source not in p.replicas:
            raise ValueError(f"{action}: {action.source} holds no replica of {action.tp}")
        if isinstance(action, ReplicaMove) and action.dest in p.replicas:
            raise ValueError(f"{action}: {action.dest} already holds a replica of {action.tp}")
        after = self.replicas_after(action)
        self._account(p, -1)
        p.replicas[:] = after
        self._account(p, +1)
        self.moved.add(action.tp)
        self.actions.append(action)

    def delta(self, action: Action) -> list[tuple[int, list[float]]]:
        """(broker, its load change per resource) for the two brokers ``action`` changes."""
        p = self.parts[action.tp]
        info = p.info
        if isinstance(action, ReplicaMove):
            vec = self.replica_load(info, p.replicas[0] == action.source)
            return [(action.source, [-v for v in vec]), (action.dest, vec)]
        # leadership: what a leader carries beyond a follower's replica
        lead = self.replica_load(info, True)
        follow = self.replica_load(info, False)
        diff = [a - c for a, c in zip(lead, follow)]
        return [(action.source, [-v for v in diff]), (action.dest, diff)]

    def replicas_after(self, action: Action) -> list[int]:
        p = self.parts[action.tp]
        out = list(p.replicas)
        i = out.index(action.source)
        if isinstance(action, ReplicaMove):
            out[i] = action.dest
        else:
            j = out.index(action.dest)
            out[i], out[j] = out[j], out[i]
        return out

    # -- views ------------------------------------------------------------------------------

    def active(self) -> list[int]:
        """The active brokers, in id order (states do not change while a plan is made)."""
        return self._active

    def by_load(self, b: int, r: Resource) -> list[tuple[float, TopicPartition]]:
        """``b``'s replicas as (-load of ``r``, partition), the heaviest first. The list is kept
        up to date as actions apply: copy it to apply actions while walking it."""
        got = self._by_load.get((b, r))
        if got is None:
            parts = self.parts
            got = sorted((-self.replica_load(parts[tp].info, parts[tp].replicas[0] == b)[r], tp) for tp in self.hosted[b])
            self._by_load[(b, r)] = got
            self._sorted_resources.setdefault(b, []).append(r)
        return got

    def rack(self, b: int) -> str | None:
        return self.brokers[b].rack

    def host(self, b: int) -> str:
        """The host of broker ``b`` (``broker.host``); a broker without one is its own."""
        return self.brokers[b].host or f"\0broker-{b}"

    def eligible(self, info: PartitionInfo) -> list[int]:
        """The brokers that may take a replica of ``info``: active, in its cell."""
        got = self._eligible.get(info.allowed)
        if got is None:
            got = self._eligible[info.allowed] = [b for b in self._active
                                                  if info.allowed is None or b in info.allowed]
        return got

    def assignment(self) -> dict[TopicPartition, tuple[int, ...]]:
        return {tp: tuple(p.replicas) for tp, p in self.parts.items()}

    def partitions(self) -> Iterator[tuple[PartitionInfo, list[int]]]:
        for p in self.parts.values():
            yield p.info, p.replicas


def model_of(brokers: Sequence[BrokerInfo], partitions: Sequence[PartitionInfo],
             assignment: Mapping[TopicPartition, Sequence[int]] | None = None) -> ClusterModel:
    """A model of ``partitions`` with their replicas replaced by ``assignment`` (a plan's result)."""
    if assignment is None:
        return ClusterModel(brokers, partitions)
    return ClusterModel(brokers, [replace(p, replicas=tuple(assignment.get(p.tp, p.replicas)),
                                          observers=tuple(assignment.get(p.tp, p.replicas)[p.sync_count:]))
                                  for p in partitions])

