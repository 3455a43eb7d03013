"""Broker-wide protection from the multi-tenancy document: auto-tuned tenant quotas (weighted
max-min fair share), the per-broker slice of a tenant-wide quota, and the broker-wide request
quota. Pure functions: the caller measures usage and calls these once per tuning interval.

Auto-tuner (:func:`dynamic_quotas`). Inputs: a broker-wide limit L and, per tenant, its
configured (per-broker) quota q_i, its usage u_i over the last interval and whether it is active
(produced or fetched in the last few minutes — the caller decides).

* Inactive tenants get q_i back and take no part in the rest.
* If the active tenants' combined usage is at most L, every tenant gets q_i (no tuning).
* Otherwise each active tenant has a demand ``d_i = min(q_i, max(headroom * u_i, min_quota))``
  and weight ``w_i = q_i``, and the dynamic quotas are the weighted max-min fair (water-filling)
  allocation of L: ``a_i = min(d_i, lam * w_i)`` with ``lam`` the level where ``sum a_i = L``
  (or ``a_i = d_i`` if all demands fit). ``lam * w_i`` is the document's fair share; a tenant
  using less gets ``headroom * u_i`` ("slightly above its current usage", default 1.1x, so a rise
  is seen next interval); the capacity it leaves goes to the saturated tenants in proportion to
  their quotas. Hence: ``sum a_i <= L`` (up to float rounding), ``a_i <= q_i``, and
  ``a_i / w_i`` is the same for every saturated tenant.
* ``min_quota`` is a demand floor so an active tenant that was idle for one interval is not
  given a zero quota (a zero bound cannot be enforced by throttling); it is still subject to the
  fair share. Default 0 — the broker wiring should pass a small positive value.

Tenant slice (:func:`tenant_quota_slices`): the document's starting point is an equal split of
the tenant-wide quota over the brokers that lead at least one of the tenant's partitions; with
per-broker demand, a demand-proportional split (each leader keeps a floor of ``min_fraction`` of
its equal share so it can notice new demand). On one node the slice is the whole quota.

Broker request quota (:func:`broker_request_quota`): see its docstring for the exact rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Hashable, Mapping, TypeVar

K = TypeVar("K", bound=Hashable)

DEFAULT_HEADROOM = 1.1


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantUsage:
    """One tenant's configured per-broker quota, last-interval usage and activity."""

    quota: float
    usage: float
    active: bool = True

    def __post_init__(self) -> None:
        if not (self.quota > 0 and math.isfinite(self.quota)):
            raise ValueError(f"configured quota must be positive and finite, got {self.quota}")
        if self.usage < 0:
            raise ValueError(f"usage must be >= 0, got {self.usage}")


def water_fill(limit: float, demands: Mapping[K, float], weights: Mapping[K, float]) -> dict[K, float]:
    """Weighted max-min fair allocation of ``limit``: ``a_i = min(d_i, lam * w_i)``.

    Exact progressive filling: visit tenants by ``d_i / w_i``; while the next tenant's demand is
    below its share of what is left, give it its demand; then split the rest by weight.
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    alloc: dict[K, float] = {}
    remaining = float(limit)
    weight_left = math.fsum(weights[k] for k in demands)
    order = sorted(demands, key=lambda k: demands[k] / weights[k])
    for idx, key in enumerate(order):
        d, w = demands[key], weights[key]
        if d * weight_left <= remaining * w:  # d <= (remaining / weight_left) * w
            alloc[key] = d
            remaining = max(0.0, remaining - d)
            weight_left -= w
            continue
        rest = order[idx:]
        total_w = math.fsum(weights[k] for k in rest)
        for k in rest:
            alloc[k] = min(demands[k], remaining * weights[k] / total_w)
        break
    return alloc


def dynamic_quotas(limit: float, tenants: Mapping[K, TenantUsage], *,
                   headroom: float = DEFAULT_HEADROOM, min_quota: float = 0.0,
                   engaged: bool = False) -> dict[K, float]:
    """One auto-tuning step: the dynamic quota of every tenant (see the module doc).

    ``engaged``: tune even though the combined usage is within the limit — the caller's
    hysteresis (tenants held at their dynamic quotas use no more than the limit, so without it
    every other interval would hand back the configured quotas)."""
    if headroom < 1.0:
        raise ValueError(f"headroom must be >= 1, got {headroom}")
    result = {k: t.quota for k, t in tenants.items()}
    active = {k: t for k, t in tenants.items() if t.active}
    if not engaged and math.fsum(t.usage for t in active.values()) <= limit:
        return result
    demands = {k: min(t.quota, max(headroom * t.usage, min_quota)) for k, t in active.items()}
    weights = {k: t.quota for k, t in active.items()}
    result.update(water_fill(limit, demands, weights))
    return result


def jain_index(values: Collection[float]) -> float:
    """Jain's fairness index ``(sum x)^2 / (n * sum x^2)``: 1 when all equal, 1/n at worst."""
    xs = list(values)
    if not xs:
        return 1.0
    sq = math.fsum(x * x for x in xs)
    if sq == 0:
        return 1.0
    return math.fsum(xs) ** 2 / (len(xs) * sq)


# -- tenant-wide quota slices ------------------------------------------------------------------

def tenant_quota_slices(tenant_quota: float, leader_brokers: Collection[K],
                        demand: Mapping[K, float] | None = None, *,
                        min_fraction: float = 0.1) -> dict[K, float]:
    """Each leader broker's slice of a tenant-wide quota; the slices sum to the quota.

    Without ``demand`` (or with zero total demand): equal split. With ``demand`` (missing
    brokers count as 0): each broker gets ``min_fraction`` of its equal share, and the remaining
    ``1 - min_fraction`` of the quota is split in proportion to demand.
    """
    brokers = list(dict.fromkeys(leader_brokers))
    if not brokers:
        return {}
    if not 0.0 <= min_fraction <= 1.0:
        raise ValueError(f"min_fraction must be in [0, 1], got {min_fraction}")
    equal = tenant_quota / len(brokers)
    total_demand = math.fsum(max(0.0, demand.get(b, 0.0)) for b in brokers) if demand else 0.0
    if total_demand <= 0:
        return {b: equal for b in brokers}
    floor = min_fraction * equal
    spread = (1.0 - min_fraction) * tenant_quota
    # The share (demand / total) first: spread * demand can underflow for tiny demands.
    return {b: floor + spread * (max(0.0, demand.get(b, 0.0)) / total_demand) for b in brokers}


def tenant_quota_slice(tenant_quota: float, leader_brokers: Collection[K], broker: K,
                       demand: Mapping[K, float] | None = None, *,
                       min_fraction: float = 0.1) -> float:
    """This broker's slice. Deliberate choices: with no known leaders (single node, or metadata
    not yet loaded) the slice is the whole quota; a broker that leads none of the tenant's
    partitions gets the equal share, so a leadership move never leaves a zero bound in the window
    before metadata catches up (traffic there is small: metadata, follower fetch)."""
    slices = tenant_quota_slices(tenant_quota, leader_brokers, demand, min_fraction=min_fraction)
    if not slices:
        return tenant_quota
    if broker in slices:
        return slices[broker]
    return tenant_quota / len(slices)


# -- broker-wide request quota ------------------------------------------------------------------

def broker_request_quota(capacity: float, exempt_time: float, queue_len: int, threshold: int,
                         previous: float | None, step: float, *, floor: float = 0.0) -> float:
    """The broker-wide request quota for the next interval (the document's rule, made exact).

    ``capacity``: network + I/O thread time available per interval (e.g. in percent of one
    thread: ``(num.network.threads + num.io.threads) * 100``); ``exempt_time``: time taken in the
    last interval by requests exempt from throttling (follower fetch, ...), same unit;
    ``queue_len``: request queue size observed; ``previous``: last interval's quota (None on the
    first interval); ``step`` in (0, 1].

    Rule (multiplicative decrease, additive return):

    * common case ``base = max(floor, capacity - exempt_time)``;
    * queue above threshold (``queue_len > threshold``):
      ``quota = max(floor, min(base, previous) * (1 - step))`` — reduced every interval while it
      stays above;
    * otherwise: ``quota = min(base, previous + step * base)`` — raised back toward the common
      case by ``step * base`` per interval (at most ``ceil(1 / step)`` intervals), never above it.
    """
    if not 0.0 < step <= 1.0:
        raise ValueError(f"step must be in (0, 1], got {step}")
    base = max(floor, capacity - exempt_time)
    prev = base if previous is None else previous
    if queue_len > threshold:
        return max(floor, min(base, prev) * (1.0 - step))
    return max(floor, min(base, prev + step * base))
