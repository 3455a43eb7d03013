"""The stretch-cluster advisor: what a topic's layout over datacenters guarantees, and what losing
each datacenter does to it.

A layout is, for one partition, how many synchronous replicas and observers each datacenter
(``broker.rack``) holds. With ``min.insync.replicas`` = m, acks=all completes once m ISR members
have a record, so in the worst case those m are packed into the datacenters with the most
replicas: every acknowledged record is in at least ``guaranteed_dcs`` datacenters, the number of
the largest datacenters needed to reach m. The stretch-cluster document's formula for M
datacenters, ``replicas_per_dc * (M - 1) + 1``, is the even case of ``min_isr_for`` (the sum of
the M - 1 largest datacenters' replicas, plus one). ``min.insync.racks`` (Shoal, KIP-1290's
proposal) adds a floor of racks directly.

For the loss of each datacenter, ``dc_loss`` says (in steady state: every replica in sync before
the loss, clean election only):

- whether a leader remains (a surviving sync replica; with ``leader-is-observer`` promotion, a
  surviving observer), hence whether consumers keep reading;
- whether acks=all produce keeps working: surviving sync replicas >= m and spanning
  ``min.insync.racks``; or after observer promotion (placement version 2), counting the
  observers the policy promotes;
- whether an acknowledged record can exist only in the lost datacenter (it holds m or more sync
  replicas and fewer than 2 datacenters are guaranteed): then clean election keeps the partition
  offline until the datacenter returns; only an unclean election would lose those records.
- whether records acknowledged during the outage are in fewer datacenters than before (promotion
  trades multi-datacenter durability for availability).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence


@dataclass(frozen=True)
class Layout:
    """One partition's replicas per datacenter: dc -> sync replicas, dc -> observers."""

    sync: Mapping[str, int]
    observers: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, replicas: Iterable[int], observers: Iterable[int], racks: Mapping[int, str | None]) -> "Layout":
        obs = set(observers)
        sync: dict[str, int] = {}
        ob: dict[str, int] = {}
        for r in replicas:
            d = ob if r in obs else sync
            rack = racks.get(r) or "(no rack)"
            d[rack] = d.get(rack, 0) + 1
        return cls(sync, ob)

    @property
    def dcs(self) -> list[str]:
        return sorted(set(self.sync) | set(self.observers))

    @property
    def sync_total(self) -> int:
        return sum(self.sync.values())

    def key(self) -> tuple:
        return (tuple(sorted(self.sync.items())), tuple(sorted(self.observers.items())))


def guaranteed_dcs(sync: Mapping[str, int], min_isr: int) -> int:
    """The fewest datacenters any ``min_isr`` of the sync replicas can span (0 when there are
    fewer sync replicas than ``min_isr``: acks=all never completes)."""
    counts = sorted((c for c in sync.values() if c > 0), reverse=True)
    if min_isr > sum(counts):
        return 0
    total = 0
    for i, c in enumerate(counts, 1):
        total += c
        if total >= min_isr:
            return i
    return len(counts)


def guaranteed(sync: Mapping[str, int], min_isr: int, min_racks: int = 1) -> int:
    """Datacenters every acknowledged record is in, with ``min.insync.racks`` too (0: acks=all
    cannot complete)."""
    spanned = len([c for c in sync.values() if c > 0])
    if sum(sync.values()) < min_isr or min_racks > spanned:
        return 0
    return max(guaranteed_dcs(sync, min_isr), min_racks)


def min_isr_for(sync: Mapping[str, int], dcs: int) -> int | None:
    """The smallest ``min.insync.replicas`` that puts every acknowledged record in at least
    ``dcs`` datacenters (None when fewer datacenters hold sync replicas)."""
    counts = sorted((c for c in sync.values() if c > 0), reverse=True)
    if dcs < 1 or dcs > len(counts):
        return None
    return sum(counts[:dcs - 1]) + 1


@dataclass(frozen=True)
class LossOutcome:
    dc: str
    leader: bool  # a replica can lead (consumers keep reading)
    produce: bool  # acks=all works without promotion
    produce_promoted: bool  # acks=all works once the policy promoted observers
    promoted: int  # observers the policy promotes
    acked_only_there: bool  # an acknowledged record may exist only in the lost datacenter
    dcs_during: int  # datacenters each record acknowledged during the outage is in (0: none acked)


def dc_loss(layout: Layout, dc: str, min_isr: int, min_racks: int = 1, promotion: str | None = None) -> LossOutcome:
    sync = {d: c for d, c in layout.sync.items() if d != dc and c > 0}
    obs = {d: c for d, c in layout.observers.items() if d != dc and c > 0}
    s, o = sum(sync.values()), sum(obs.values())
    lost_sync = layout.sync.get(dc, 0)
    leader = s >= 1
    produce = leader and s >= min_isr and len(sync) >= min_racks
    promoted = 0
    if promotion and o and not produce:
        if promotion == "under-min-isr" and leader:
            promoted = min(o, max(0, min_isr - s))
        elif promotion == "under-replicated" and leader:
            promoted = min(o, lost_sync)
        elif promotion == "leader-is-observer" and not leader:
            promoted = o
    members = dict(sync)
    if promoted:
        left = promoted
        for d, c in sorted(obs.items(), key=lambda kv: (kv[0] in sync, -kv[1], kv[0])):  # new racks first
            take = min(c, left)
            members[d] = members.get(d, 0) + take
            left -= take
            if not left:
                break
    m_total = sum(members.values())
    produce_promoted = m_total >= 1 and m_total >= min_isr and len(members) >= min_racks
    can_ack = produce or produce_promoted
    during = guaranteed(members if produce_promoted and not produce else sync, min_isr, min_racks) if can_ack else 0
    acked_only_there = guaranteed(layout.sync, min_isr, min_racks) < 2 and lost_sync >= min_isr
    return LossOutcome(dc, leader or (promotion == "leader-is-observer" and o > 0), produce, produce_promoted,
                       promoted, acked_only_there, during)


@dataclass(frozen=True)
class Advice:
    layout: Layout
    min_isr: int
    min_racks: int
    promotion: str | None
    guaranteed: int  # datacenters every acknowledged record is in (0: acks=all cannot complete)
    losses: tuple[LossOutcome, ...]
    warnings: tuple[str, ...]

    def as_dict(self) -> dict:
        return {
            "replicas_per_dc": dict(sorted(self.layout.sync.items())),
            "observers_per_dc": dict(sorted(self.layout.observers.items())),
            "min_insync_replicas": self.min_isr,
            "min_insync_racks": self.min_racks,
            "observer_promotion_policy": self.promotion,
            "acked_records_in_at_least_dcs": self.guaranteed,
            "min_insync_replicas_for_dcs": {str(m): min_isr_for(self.layout.sync, m)
                                            for m in range(1, len([c for c in self.layout.sync.values() if c]) + 1)},
            "dc_loss": [{"dc": o.dc, "consume": o.leader, "produce_acks_all": o.produce,
                         "produce_after_promotion": o.produce_promoted, "observers_promoted": o.promoted,
                         "acked_may_exist_only_there": o.acked_only_there, "dcs_of_writes_during_loss": o.dcs_during}
                        for o in self.losses],
            "warnings": list(self.warnings),
        }


def advise(layout: Layout, min_isr: int, min_racks: int = 1, promotion: str | None = None) -> Advice:
    at_least = guaranteed(layout.sync, min_isr, min_racks)
    losses = tuple(dc_loss(layout, dc, min_isr, min_racks, promotion) for dc in layout.dcs)
    warnings: list[str] = []
    if at_least == 0:
        warnings.append(f"acks=all can never complete: min.insync.replicas={min_isr} (min.insync.racks={min_racks}) "
                        f"is more than the {layout.sync_total} sync replicas in "
                        f"{len([c for c in layout.sync.values() if c])} datacenters can give")
    elif at_least < 2 and len(layout.dcs) > 1:
        need = min_isr_for(layout.sync, 2)
        hint = (f"min.insync.replicas={need} puts every acknowledged record in 2 datacenters" if need
                else "only one datacenter holds sync replicas")
        warnings.append(f"an acknowledged record may be in one datacenter only: {hint}")
    for o in losses:
        if not o.leader:
            warnings.append(f"losing {o.dc} leaves no replica that can lead: the partition is offline until it returns")
        elif not (o.produce or o.produce_promoted):
            why = (f"by design: every acknowledged record must be in {at_least} datacenters" if at_least >= 2 else
                   f"fewer sync replicas survive than min.insync.replicas={min_isr}")
            warnings.append(f"losing {o.dc} stops acks=all produce ({why}); consumers keep reading")
        if o.acked_only_there:
            warnings.append(f"losing {o.dc} may hide acknowledged records: if the ISR had shrunk to its replicas "
                            "before the loss, only it holds them and the partition waits offline for it (clean election)")
        if o.produce_promoted and not o.produce and 0 < o.dcs_during < at_least:
            warnings.append(f"while {o.dc} is lost, promoted observers keep acks=all working but records acknowledged "
                            f"then are in {o.dcs_during} datacenter{'s' * (o.dcs_during != 1)}, not {at_least}")
    return Advice(layout, min_isr, min_racks, promotion, at_least, losses, tuple(warnings))


def render(advice: Advice, title: str = "") -> list[str]:
    """The human report, one line each."""
    lay = advice.layout
    lines = [title] if title else []
    per_dc = ", ".join(f"{d}: {lay.sync.get(d, 0)} replica{'s' * (lay.sync.get(d, 0) != 1)}"
                       + (f" + {lay.observers[d]} observer{'s' * (lay.observers[d] != 1)}" if lay.observers.get(d) else "")
                       for d in lay.dcs)
    lines.append(f"datacenters: {per_dc}")
    racks = f", min.insync.racks={advice.min_racks}" if advice.min_racks > 1 else ""
    promo = f", observer promotion {advice.promotion}" if advice.promotion else ""
    lines.append(f"min.insync.replicas={advice.min_isr}{racks}{promo}: every acknowledged record is in at least "
                 f"{advice.guaranteed} datacenter{'s' * (advice.guaranteed != 1)}")
    formula = [f"{m} DC{'s' * (m != 1)}: min.insync.replicas={min_isr_for(lay.sync, m)}"
               for m in range(1, len([c for c in lay.sync.values() if c]) + 1)]
    lines.append("to guarantee " + "; ".join(formula))
    for o in advice.losses:
        if o.produce:
            produce = "acks=all works"
        elif o.produce_promoted:
            produce = f"acks=all works after promoting {o.promoted} observer{'s' * (o.promoted != 1)}"
        else:
            produce = "acks=all fails (NOT_ENOUGH_REPLICAS)" if o.leader else "acks=all fails (offline)"
        consume = "consumers read" if o.leader else "offline"
        lost = "acknowledged records may be only there (if the ISR had shrunk to it)" if o.acked_only_there \
            else "no acknowledged record lost"
        lines.append(f"lose {o.dc}: {produce}; {consume}; {lost}")
    lines += [f"WARNING: {w}" for w in advice.warnings]
    return lines


@dataclass(frozen=True)
class HostSpread:
    """How a topic's partitions spread over hosts (``broker.host``: ``shoal serve --processes``
    runs several brokers on one): the hosts of the brokers, and the partitions with two replicas
    on one host."""

    hosts: int  # distinct hosts of the brokers that may hold replicas
    brokers: int
    spans: Mapping[int, int]  # partition -> hosts its replicas are on
    shared: Mapping[int, tuple[str, ...]]  # partition -> the hosts holding two replicas or more of it
    rf: int

    @classmethod
    def of(cls, partitions: Mapping[int, Sequence[int]], hosts: Mapping[int, str]) -> "HostSpread":
        spans: dict[int, int] = {}
        shared: dict[int, tuple[str, ...]] = {}
        for p, replicas in partitions.items():
            held = [hosts.get(b, f"broker {b}") for b in replicas]
            spans[p] = len(set(held))
            twice = sorted({h for h in held if held.count(h) > 1})
            if twice:
                shared[p] = tuple(twice)
        rf = max((len(r) for r in partitions.values()), default=0)
        return cls(len(set(hosts.values())), len(hosts), spans, shared, rf)

    def _shared(self) -> tuple[str, str]:
        parts = sorted(self.shared)
        which = ",".join(map(str, parts[:10])) + ("..." if len(parts) > 10 else "")
        return which, ", ".join(sorted({h for p in parts for h in self.shared[p]}))

    @property
    def warning(self) -> str | None:
        """Replicas sharing a host while the hosts could hold them apart: a placement to repair."""
        if not self.shared or self.hosts < self.rf:
            return None
        which, where = self._shared()
        return (f"partitions {which} have two replicas on one host ({where}) while {self.hosts} hosts could hold "
                f"them apart: reassign them (shoal cluster balancer, or kafka-reassign-partitions)")

    @property
    def note(self) -> str | None:
        """Fewer hosts than replicas: placed as well as the hosts allow (as with fewer racks)."""
        if not self.shared or self.hosts >= self.rf:
            return None
        which, where = self._shared()
        return (f"replication factor {self.rf} over {self.hosts} host{'s' * (self.hosts != 1)}: partitions {which} "
                f"have two replicas on one host ({where}), losing it loses both; add hosts to spread them")

    def line(self) -> str:
        counts = sorted(set(self.spans.values()))
        on = (f"every partition on {counts[0]} host{'s' * (counts[0] != 1)}" if len(counts) == 1
              else f"partitions on {counts[0]}-{counts[-1]} hosts")
        return f"hosts: {on} ({self.brokers} brokers on {self.hosts} host{'s' * (self.hosts != 1)})"

    def as_dict(self) -> dict:
        return {"hosts": self.hosts, "brokers": self.brokers,
                "partition_hosts": {str(p): n for p, n in sorted(self.spans.items())},
                "shared": {str(p): list(h) for p, h in sorted(self.shared.items())}, "warning": self.warning,
                "note": self.note}
