"""Server-side partition assignors of the KIP-848 consumer group protocol: ``uniform`` and ``range``.

Pure functions, no I/O, no clock, no randomness: ``assign(members, partitions)`` where

- ``members`` maps a member id to its :class:`MemberSpec` (the topics it subscribes to, by topic
  id; its instance id; its *current target* assignment, which the sticky assignor keeps what it
  can of);
- ``partitions`` maps a topic id to its partition count (the topics that exist; a member's
  subscription to a topic missing here is ignored, as Kafka's subscription metadata only holds
  existing topics);

and the result maps *every* member id to ``{topic id: frozenset(partitions)}`` (possibly empty).
Topic ids are any sortable-by-``str`` hashable (``uuid.UUID`` in the broker, strings in tests).

``uniform`` (Kafka's ``UniformAssignor``), balance first, then stickiness:

- homogeneous subscriptions (every member subscribes to the same topics): every member gets
  ``total // n`` or ``total // n + 1`` partitions. The ``total % n`` members allowed the extra
  partition are those that already hold the most, so the number of partitions that move is the
  least any balanced assignment can achieve (Kafka gives the extra slots in member iteration
  order; this is never worse). A member keeps its current partitions up to its quota; the rest go,
  in (topic, partition) order, to members below quota in member id order.
- heterogeneous subscriptions: current partitions a member still subscribes to stay; unassigned
  partitions go one by one (topics with the fewest subscribers first) to the least loaded
  subscriber; then partitions move from a member to a subscriber of their topic holding at least
  two fewer, until no such move exists (every move lowers the sum of squared loads, so this ends).
  When a balanced assignment exists within the subscription constraints this usually finds one;
  unlike Kafka's ``UniformHeterogeneousAssignmentBuilder`` it does not search further.

``range`` (Kafka's ``RangeAssignor``, group-coordinator flavour): per topic, its subscribers sorted
static members first (by instance id) then the rest by member id; each gets a contiguous range,
the first ``partitions % subscribers`` one partition more. Not sticky (as in Kafka), but
deterministic, and with static members stable across restarts; when every member subscribes to
the same topics and those have equal partition counts, the assignment is co-partitioned.

Deviations from Kafka: no rack awareness (Kafka 4.x uniform prefers rack-matching members when
racks are known); the heterogeneous uniform builder is the simpler local search described above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable, Mapping

TopicId = Hashable
Assignment = Mapping[TopicId, frozenset[int]]
GroupAssignment = dict[str, dict[TopicId, frozenset[int]]]

UNIFORM = "uniform"
RANGE = "range"


@dataclass(frozen=True, slots=True)
class MemberSpec:
    subscribed: frozenset[TopicId]
    instance_id: str | None = None
    rack_id: str | None = None
    assignment: Assignment = field(default_factory=dict)  # the member's current target assignment


def _tkey(t: TopicId) -> str:
    return str(t)


def _finish(owned: dict[str, list[tuple[TopicId, int]]]) -> GroupAssignment:
    out: GroupAssignment = {}
    for mid, tps in owned.items():
        by_topic: dict[TopicId, set[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, set()).add(p)
        out[mid] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out


def _subscriptions(members: Mapping[str, MemberSpec], partitions: Mapping[TopicId, int]) -> dict[str, frozenset]:
    return {mid: frozenset(t for t in spec.subscribed if partitions.get(t, 0) > 0) for mid, spec in members.items()}


def _kept(
    members: Mapping[str, MemberSpec],
    order: list[str],
    subs: Mapping[str, frozenset],
    partitions: Mapping[TopicId, int],
) -> dict[str, list[tuple[TopicId, int]]]:
    """Each member's current partitions that are still valid (subscribed, existing), each
    partition kept by one member only (the first in ``order``), in (topic, partition) order."""
    taken: set[tuple[TopicId, int]] = set()
    out: dict[str, list[tuple[TopicId, int]]] = {}
    for mid in order:
        valid = []
        for t in sorted(members[mid].assignment, key=_tkey):
            if t not in subs[mid]:
                continue
            n = partitions[t]
            for p in sorted(members[mid].assignment[t]):
                if 0 <= p < n and (t, p) not in taken:
                    taken.add((t, p))
                    valid.append((t, p))
        out[mid] = valid
    return out


# -- uniform ------------------------------------------------------------------------------------


def uniform(members: Mapping[str, MemberSpec], partitions: Mapping[TopicId, int]) -> GroupAssignment:
    if not members:
        return {}
    subs = _subscriptions(members, partitions)
    if len(set(subs.values())) == 1:
        return _uniform_homogeneous(members, partitions, subs)
    return _uniform_heterogeneous(members, partitions, subs)


def _uniform_homogeneous(
    members: Mapping[str, MemberSpec], partitions: Mapping[TopicId, int], subs: Mapping[str, frozenset]
) -> GroupAssignment:
    order = sorted(members)
    topics = sorted(next(iter(subs.values())), key=_tkey)
    all_tps = [(t, p) for t in topics for p in range(partitions[t])]
    kept = _kept(members, order, subs, partitions)
    n = len(order)
    quota_min, extra = divmod(len(all_tps), n)
    # The members allowed one more partition: those holding the most already (fewest moves).
    by_holding = sorted(order, key=lambda m: (-len(kept[m]), m))
    quota = {m: quota_min + (1 if i < extra else 0) for i, m in enumerate(by_holding)}
    owned: dict[str, list[tuple[TopicId, int]]] = {}
    held: set[tuple[TopicId, int]] = set()
    for m in order:
        keep = kept[m][: quota[m]]
        owned[m] = list(keep)
        held.update(keep)
    pool = iter(tp for tp in all_tps if tp not in held)
    for m in order:
        while len(owned[m]) < quota[m]:
            owned[m].append(next(pool))
    return _finish(owned)


def _uniform_heterogeneous(
    members: Mapping[str, MemberSpec], partitions: Mapping[TopicId, int], subs: Mapping[str, frozenset]
) -> GroupAssignment:
    order = sorted(members)
    rank = {m: i for i, m in enumerate(order)}
    subscribers: dict[TopicId, list[str]] = {}
    for m in order:
        for t in subs[m]:
            subscribers.setdefault(t, []).append(m)
    kept = _kept(members, order, subs, partitions)
    owner: dict[tuple[TopicId, int], str] = {}
    load = {m: 0 for m in order}
    for m in order:
        for tp in kept[m]:
            owner[tp] = m
            load[m] += 1
    topics = sorted(subscribers, key=lambda t: (len(subscribers[t]), _tkey(t)))
    for t in topics:
        for p in range(partitions[t]):
            if (t, p) in owner:
                continue
            m = min(subscribers[t], key=lambda x: (load[x], rank[x]))
            owner[(t, p)] = m
            load[m] += 1
    # Local search: move a partition to a subscriber of its topic holding two or more fewer.
    # Each pass visits partitions of the most loaded owners first; passes repeat until one
    # moves nothing.
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda tp: (-load[owner[tp]], _tkey(tp[0]), tp[1])):
            m = owner[tp]
            best = min(subscribers[tp[0]], key=lambda x: (load[x], rank[x]))
            if load[best] <= load[m] - 2:
                owner[tp] = best
                load[m] -= 1
                load[best] += 1
                moved = True
    owned: dict[str, list[tuple[TopicId, int]]] = {m: [] for m in order}
    for tp, m in owner.items():
        owned[m].append(tp)
    return _finish(owned)


# -- range --------------------------------------------------------------------------------------


def range_member_order(members: Mapping[str, MemberSpec]) -> list[str]:
    """Static members first, by instance id; then the others by member id (Kafka's order)."""
    return sorted(
        members,
        key=lambda m: (0, members[m].instance_id, m) if members[m].instance_id is not None else (1, "", m),
    )


def range_(members: Mapping[str, MemberSpec], partitions: Mapping[TopicId, int]) -> GroupAssignment:
    subs = _subscriptions(members, partitions)
    order = range_member_order(members)
    out: GroupAssignment = {m: {} for m in members}
    topics = sorted({t for s in subs.values() for t in s}, key=_tkey)
    for t in topics:
        subscribers = [m for m in order if t in subs[m]]
        quota, extra = divmod(partitions[t], len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            end = start + quota + (1 if i < extra else 0)
            if end > start:
                out[m][t] = frozenset(range(start, end))
            start = end
    return out


ASSIGNORS: dict[str, Callable[[Mapping[str, MemberSpec], Mapping[TopicId, int]], GroupAssignment]] = {
    UNIFORM: uniform,
    RANGE: range_,
}
