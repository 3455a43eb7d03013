"""Replica placement constraints: the JSON of the multi-region document (Confluent's
``confluent.placement.constraints``; Shoal's topic config ``replica.placement``).

::

    {"version": 1,
     "replicas":  [{"count": 2, "constraints": {"rack": "dc1"}}],
     "observers": [{"count": 1, "constraints": {"rack": "dc2"}}]}

``replicas`` are synchronous replicas (ISR members, leaders); ``observers`` replicate
asynchronously: never in the ISR, never leader, not counted for acks=all or the high watermark.
Version 2 adds ``observerPromotionPolicy`` (automatic observer promotion):

- ``under-min-isr`` (the default in version 2): a caught-up observer joins the ISR while the ISR
  is below the topic's ``min.insync.replicas``, and leaves it when the sync replicas recover;
- ``under-replicated``: while any sync replica is out of the ISR;
- ``leader-is-observer``: only when no sync replica can lead.

The only constraint is ``rack`` (a broker's ``broker.rack``), as in the document.

Pure functions: ``parse_placement`` reads and checks the JSON alone; ``check_against`` checks it
against the brokers (a count above a rack's brokers, a rack with no live broker); and
``assign_with_constraints`` places partitions. Within a rack, brokers are taken in id order
starting at a position that advances with the partition index (so leaders, and load, rotate over
a rack's brokers); the constraints are filled in order, sync replicas first, so the preferred
leader is in the first ``replicas`` constraint's rack: the operator chooses where leaders live.
Observers follow the sync replicas in the replica list, as Confluent's describe output shows them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

VERSIONS = (1, 2)
PROMOTION_POLICIES = ("under-min-isr", "under-replicated", "leader-is-observer")
DEFAULT_PROMOTION = "under-min-isr"


class PlacementSpecError(ValueError):
    """``code``: INVALID_CONFIG for a malformed spec, INVALID_REPLICATION_FACTOR / INVALID_REQUEST
    for one the brokers cannot satisfy (Kafka's codes for CreateTopics)."""

    def __init__(self, message: str, code: str = "INVALID_CONFIG") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True)
class Constraint:
    count: int
    rack: str


@dataclass(frozen=True)
class PlacementSpec:
    version: int
    replicas: tuple[Constraint, ...]
    observers: tuple[Constraint, ...] = ()
    promotion: str | None = None  # version 2: observerPromotionPolicy

    @property
    def replication_factor(self) -> int:
        """Sync replicas plus observers: the length of each partition's replica list."""
        return self.sync_count + self.observer_count

    @property
    def sync_count(self) -> int:
        return sum(c.count for c in self.replicas)

    @property
    def observer_count(self) -> int:
        return sum(c.count for c in self.observers)

    def per_rack(self) -> dict[str, tuple[int, int]]:
        """rack -> (sync replicas, observers) wanted there."""
        out: dict[str, list[int]] = {}
        for i, group in enumerate((self.replicas, self.observers)):
            for c in group:
                out.setdefault(c.rack, [0, 0])[i] += c.count
        return {rack: (s, o) for rack, (s, o) in out.items()}

    def to_json(self) -> str:
        doc: dict[str, Any] = {"version": self.version, "replicas": [_constraint_json(c) for c in self.replicas]}
        if self.observers:
            doc["observers"] = [_constraint_json(c) for c in self.observers]
        if self.promotion is not None:
            doc["observerPromotionPolicy"] = self.promotion
        return json.dumps(doc, separators=(",", ":"))


def _constraint_json(c: Constraint) -> dict[str, Any]:
    return {"count": c.count, "constraints": {"rack": c.rack}}


def _constraints(doc: dict[str, Any], key: str, required: bool) -> tuple[Constraint, ...]:
    value = doc.get(key)
    if value is None:
        if required:
            raise PlacementSpecError(f'"{key}" is missing: give at least one {{"count": N, "constraints": {{"rack": R}}}}')
        return ()
    if not isinstance(value, list) or (required and not value):
        raise PlacementSpecError(f'"{key}" must be a{" non-empty" if required else ""} list of '
                                 '{"count": N, "constraints": {"rack": R}}')
    out = []
    for i, item in enumerate(value):
        where = f"{key}[{i}]"
        if not isinstance(item, dict):
            raise PlacementSpecError(f"{where} must be an object with count and constraints")
        unknown = set(item) - {"count", "constraints"}
        if unknown:
            raise PlacementSpecError(f"{where}: unknown field {sorted(unknown)[0]!r} (count, constraints)")
        count = item.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise PlacementSpecError(f"{where}: count must be a whole number of at least 1, not {count!r}")
        cons = item.get("constraints")
        if not isinstance(cons, dict) or "rack" not in cons:
            raise PlacementSpecError(f'{where}: constraints must name a rack: {{"rack": "dc1"}}')
        other = set(cons) - {"rack"}
        if other:
            raise PlacementSpecError(f"{where}: unknown constraint {sorted(other)[0]!r}: only rack (broker.rack) is supported")
        rack = cons["rack"]
        if not isinstance(rack, str) or not rack.strip():
            raise PlacementSpecError(f"{where}: rack must be a non-empty string, not {rack!r}")
        out.append(Constraint(count, rack))
    return tuple(out)


def parse_placement(text: str) -> PlacementSpec:
    """The spec in ``text``; ``PlacementSpecError`` names the first thing wrong."""
    try:
        doc = json.loads(text)
    except (TypeError, ValueError) as e:
        raise PlacementSpecError(f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise PlacementSpecError("must be a JSON object with version and replicas")
    version = doc.get("version")
    if version not in VERSIONS or isinstance(version, bool):
        raise PlacementSpecError(f"unknown version {version!r}: 1, or 2 for observerPromotionPolicy")
    unknown = set(doc) - {"version", "replicas", "observers", "observerPromotionPolicy"}
    if unknown:
        raise PlacementSpecError(f"unknown field {sorted(unknown)[0]!r} (version, replicas, observers, "
                                 "observerPromotionPolicy)")
    replicas = _constraints(doc, "replicas", True)
    observers = _constraints(doc, "observers", False)
    promotion = doc.get("observerPromotionPolicy")
    if promotion is not None:
        if version < 2:
            raise PlacementSpecError("observerPromotionPolicy needs version 2")
        if promotion not in PROMOTION_POLICIES:
            raise PlacementSpecError(f"unknown observerPromotionPolicy {promotion!r}: {', '.join(PROMOTION_POLICIES)}")
    elif version == 2 and observers:
        promotion = DEFAULT_PROMOTION
    return PlacementSpec(version, replicas, observers, promotion)


def check_against(spec: PlacementSpec, brokers: Iterable[tuple[int, str | None]],
                  live: Iterable[int] | None = None) -> None:
    """``PlacementSpecError`` when ``brokers`` (id, rack) cannot hold ``spec``: a rack with no
    broker, none alive (``live``: the ids alive; default all), or fewer than the replicas and
    observers it must hold."""
    by_rack: dict[str, list[int]] = {}
    for node, rack in brokers:
        if rack is not None:
            by_rack.setdefault(rack, []).append(node)
    alive = None if live is None else set(live)
    for rack, (sync, obs) in sorted(spec.per_rack().items()):
        nodes = by_rack.get(rack, [])
        what = " + ".join(p for p in (f"{sync} replica{'s' * (sync != 1)}" if sync else "",
                                      f"{obs} observer{'s' * (obs != 1)}" if obs else "") if p)
        if not nodes:
            known = ", ".join(sorted(by_rack)) or "none"
            raise PlacementSpecError(f"rack {rack!r} has no broker (racks: {known}); it should hold {what}",
                                     "INVALID_REPLICATION_FACTOR")
        if alive is not None and not alive & set(nodes):
            raise PlacementSpecError(f"rack {rack!r} has no live broker; it should hold {what}",
                                     "INVALID_REPLICATION_FACTOR")
        if sync + obs > len(nodes):
            raise PlacementSpecError(f"rack {rack!r} has {len(nodes)} broker{'s' * (len(nodes) != 1)}, "
                                     f"fewer than the {what} it should hold", "INVALID_REPLICATION_FACTOR")


def _checked_racks(spec: PlacementSpec, brokers: Iterable[tuple[int, str | None]]) -> dict[str, list[int]]:
    """rack -> its brokers in id order, once ``spec`` is checked against ``brokers``."""
    brokers = list(brokers)
    check_against(spec, brokers)
    by_rack: dict[str, list[int]] = {}
    for node, rack in sorted(brokers, key=lambda b: b[0]):
        if rack is not None:
            by_rack.setdefault(rack, []).append(node)
    return by_rack


def assign_with_constraints(spec: PlacementSpec, brokers: Iterable[tuple[int, str | None]], partitions: int,
                            start_index: int = 0, hosts: Mapping[int, str] | None = None,
                            ) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Each partition's (replicas, observers): ``replicas`` is the whole replica list (sync
    replicas in constraint order, the preferred leader first, then the observers), ``observers``
    the observers among them. Checks ``spec`` against ``brokers`` first. ``hosts`` (each
    broker's ``broker.host``, when some host runs several): within a rack, a broker on a host
    without a replica of the partition yet is taken before one on a host with one."""
    by_rack = _checked_racks(spec, brokers)
    out = []
    for p in range(partitions):
        chosen: list[int] = []
        taken: dict[str, int] = {}  # rack -> brokers already taken there for this partition
        for group in (spec.replicas, spec.observers):
            for c in group:
                nodes = by_rack[c.rack]
                n = len(nodes)
                for k in range(c.count):
                    at = start_index + p + taken.get(c.rack, 0)
                    if hosts:  # the next broker on an unused host, else the next one (as without hosts)
                        used = {hosts.get(b) for b in chosen}
                        ahead = [nodes[(at + j) % n] for j in range(n)]
                        pick = next((b for b in ahead if b not in chosen and hosts.get(b) not in used),
                                    next((b for b in ahead if b not in chosen), ahead[0]))
                        chosen.append(pick)
                    else:
                        chosen.append(nodes[at % n])
                    taken[c.rack] = taken.get(c.rack, 0) + 1
        observers = tuple(chosen[spec.sync_count:])
        out.append((tuple(chosen), observers))
    return out


def reassign_with_constraints(spec: PlacementSpec, brokers: Iterable[tuple[int, str | None]],
                              current: Sequence[Sequence[int]]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """A topic's partitions (``current``: each one's replica list) moved to ``spec`` with as few
    replica moves as the spec allows: per partition, each constraint (sync replicas first, then
    observers) takes the brokers of its rack that already hold a replica of the partition (in
    their current order, so the leader stays when its rack still holds sync replicas), then the
    other brokers of the rack from a position that advances with the partition (as
    :func:`assign_with_constraints`). Returns each partition's (replicas, observers) as
    :func:`assign_with_constraints` does. Checks ``spec`` against ``brokers`` first."""
    by_rack = _checked_racks(spec, brokers)
    out = []
    for p, replicas in enumerate(current):
        chosen: list[int] = []
        for group in (spec.replicas, spec.observers):
            for c in group:
                nodes = by_rack[c.rack]
                rotated = nodes[p % len(nodes):] + nodes[:p % len(nodes)]
                ordered = [r for r in replicas if r in nodes] + [r for r in rotated if r not in replicas]
                chosen += [r for r in ordered if r not in chosen][:c.count]
        out.append((tuple(chosen), tuple(chosen[spec.sync_count:])))
    return out


def observers_of(replicas: Sequence[int], observers: Sequence[int]) -> list[bool]:
    """For describe output: which entries of ``replicas`` are observers."""
    obs = set(observers)
    return [r in obs for r in replicas]
