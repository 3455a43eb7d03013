"""Broker-wide protection (the multi-tenancy document, seeds/000): broker-wide produce and fetch
bandwidth limits and the broker-wide request quota, enforced by auto-tuning tenant quotas.

Every ``shoal.quota.autotune.interval.ms`` the broker runs :meth:`BrokerProtection.step`:

* :class:`AutoTuner` (one per resource: produce bytes/s, fetch bytes/s, request time %) reads the
  tenants' recent usage (``UsageSource.usage_by_tenant()``: the windowed rate over the time its
  samples cover, not padded as Kafka's quota check pads it), marks tenants with
  usage as active (:class:`TenantActivity`: active = produced or fetched within
  ``shoal.tenant.active.window.ms``), and — when the active tenants' combined usage exceeds the
  broker-wide limit — computes every active tenant's dynamic quota with
  :func:`shoal.quotas.fairshare.dynamic_quotas` (weighted max-min fair share, weights = the
  tenants' configured per-broker quotas; a tenant below its share keeps ``headroom`` x its usage;
  the sum stays within the limit; nobody above its configured quota). Inactive tenants get their
  configured quota back. ``dynamic_tenant_quota(tenant)`` publishes the result: a rate, or None
  when the tenant's configured quota applies.
* A tenant *held* by its bound — its tenant sensor throttled it during the last interval
  (``UsageSource.muted_since``), or its usage reached :attr:`AutoTuner.saturation` of its
  dynamic quota — wants more than it gets, so its usage says nothing about its demand: it bids
  for its full fair share (as if it used its configured quota) instead of ``headroom`` x usage.
  Otherwise a tenant held too low — measured during the first seconds of its sensor's window,
  which Kafka pads with empty samples, or muted by a throttle — would only grow by ``headroom``
  per interval, and would look idle while muted.
* A dynamic quota takes effect at once: the quota managers enforce it by pacing (a token bucket
  one window deep, :class:`shoal.quotas.sensor.Sensor` ``cap``), not by Kafka's windowed check,
  which would remember up to 11 windows sent under the old quota and mute the tenant for most of
  that (cutting 8 MB/s to 2 MB/s: ~33 s), after which it would look idle, be released and burst:
  the whole broker would oscillate with a period of about one window of samples.
* Hysteresis: once engaged, tuning goes on while some tenant is held or ``headroom x combined
  usage`` exceeds the limit (releasing held tenants as soon as usage is within the limit makes
  the quotas flap). Demand that falls is released gradually: a tenant's quota follows
  ``headroom x usage``.
* :class:`BrokerRequestQuota` recomputes the broker-wide request quota each interval with
  :func:`shoal.quotas.fairshare.broker_request_quota`: thread capacity minus the time taken by
  requests exempt from throttling, reduced by ``shoal.broker.request.quota.step`` per interval
  while the request queue is above ``shoal.broker.request.queue.threshold``, raised back once it
  drains. It is the limit of the request-time tuner.

A tenant without a configured quota weighs (and is capped) as the broker-wide limit itself.
Usage is read (and the managers record it) only for resources with a broker-wide limit.

Deliberate deviations: Shoal serves requests on one event loop, so the request capacity is 100
(% of one thread; ``num.network.threads`` and ``num.io.threads`` are informational); and the
request-time tuner runs only while some request quota is configured (request time is measured
then anyway; measuring every request costs throughput).

Wiring (:meth:`BrokerProtection.for_broker`): usage comes from the quota managers' tenant sensors
(``ClientQuotaManager.tenant_usage``), the configured per-broker slices from
``ClientQuotaManager.tenant_quota``, and every change of a dynamic quota is pushed with
``ClientQuotaManager.set_dynamic_tenant_quota`` (the tenant's bound becomes the smaller of the
two). ``broker.protection.produce.dynamic_tenant_quota(tenant)`` (likewise ``.fetch``,
``.request``) reads it back; ``set_sources`` replaces a source (tests, other backends).

Pure apart from :meth:`BrokerProtection.run` (the asyncio loop); time is always passed in.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from shoal.quotas.fairshare import DEFAULT_HEADROOM, TenantUsage, broker_request_quota, dynamic_quotas

if TYPE_CHECKING:
    from shoal.quotas.ports import ProtectionHost

log = logging.getLogger("shoal.quotas.autotune")

NO_LIMIT = float(2**63 - 1)  # LONG_MAX: the configs' "no limit"
REQUEST_CAPACITY = 100.0  # one event loop thread, in KIP-124 percent
REQUEST_QUOTA_FLOOR = 0.05  # the broker request quota never drops below 5% of the capacity


class UsageSource(Protocol):
    def usage_by_tenant(self) -> Mapping[str, float]:
        """Each tenant's usage now (bytes/s, or % of a thread for requests)."""

    def muted_since(self, since_ms: int) -> set[str]:
        """Tenants their tenant bound throttled at some time after ``since_ms``."""


class LoadSource(Protocol):
    def exempt_time(self) -> float:
        """Time taken by requests exempt from throttling in the last interval (% of a thread)."""

    def request_queue_size(self) -> int:
        """Requests waiting or in progress now."""


class _NoUsage:
    def usage_by_tenant(self) -> Mapping[str, float]:
        return {}

    def muted_since(self, since_ms: int) -> set[str]:
        return set()


class _NoLoad:
    def exempt_time(self) -> float:
        return 0.0

    def request_queue_size(self) -> int:
        return 0


NO_USAGE, NO_LOAD = _NoUsage(), _NoLoad()


class TenantActivity:
    """When each tenant last produced or fetched; shared by the tuners."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self.last_seen_ms: dict[str, int] = {}

    def saw(self, tenant: str, now_ms: int) -> None:
        self.last_seen_ms[tenant] = now_ms

    def active(self, now_ms: int) -> list[str]:
        """Active tenants (forgetting the others)."""
        horizon = now_ms - self.window_ms
        for tenant in [t for t, seen in self.last_seen_ms.items() if seen < horizon]:
            del self.last_seen_ms[tenant]
        return list(self.last_seen_ms)


@dataclass(frozen=True, slots=True, kw_only=True)
class TuningResult:
    limit: float
    usage: float  # combined usage of the active tenants
    engaged: bool
    dynamic: Mapping[str, float]  # tenants held below their configured quota


class AutoTuner:
    """Dynamic tenant quotas for one resource under a broker-wide limit."""

    def __init__(self, name: str, configured_quota: Callable[[str], float | None],
                 activity: TenantActivity, usage: UsageSource = NO_USAGE, *,
                 headroom: float = DEFAULT_HEADROOM, min_share: float = 0.01) -> None:
        self.name = name
        self.configured_quota = configured_quota
        self.activity = activity
        self.usage = usage
        self.headroom = headroom
        self.min_share = min_share
        self.limit = NO_LIMIT
        self.engaged = False
        self._dynamic: dict[str, float] = {}
        self.target: dict[str, float] = {}  # the fair allocation of the last step
        self._muted: set[str] = set()  # tenants held by their bound since the previous reading
        self._last_read_ms: int | None = None

    @property
    def saturation(self) -> float:
        """Usage at or above this fraction of its dynamic quota means the tenant is held by it
        (halfway between 1 / headroom — where an unconstrained tenant sits — and 1)."""
        return (1.0 + 1.0 / self.headroom) / 2.0

    def dynamic_tenant_quota(self, tenant: str) -> float | None:
        """The tenant's dynamic quota, or None when its configured quota applies."""
        return self._dynamic.get(tenant)

    @property
    def limited(self) -> bool:
        """A broker-wide limit is set (else usage is not even read)."""
        return math.isfinite(self.limit) and self.limit < NO_LIMIT

    @property
    def dynamic(self) -> Mapping[str, float]:
        return dict(self._dynamic)

    def record_activity(self, now_ms: int) -> Mapping[str, float]:
        """Read usage and mark tenants that used something as active; returns the usage. Also
        reads which tenants were held by their bound since the previous reading."""
        usage = dict(self.usage.usage_by_tenant())
        since = now_ms - 1 if self._last_read_ms is None else self._last_read_ms
        self._muted = set(self.usage.muted_since(since))
        self._last_read_ms = now_ms
        for tenant, value in usage.items():
            if value > 0:
                self.activity.saw(tenant, now_ms)
        return usage

    def tune(self, now_ms: int, usage: Mapping[str, float], limit: float | None = None) -> TuningResult:
        """One interval (``usage`` from :meth:`record_activity`, after every tuner recorded)."""
        if limit is not None:
            self.limit = limit
        limit = self.limit
        active = self.activity.active(now_ms)
        total = math.fsum(max(0.0, usage.get(t, 0.0)) for t in active)
        if not self.limited:
            return self._publish(False, {}, limit, total)
        # Held by its bound: throttled by it during the interval, or using (nearly) all of it.
        held = {t for t in active if t in self._muted}
        held.update(t for t, q in self._dynamic.items() if usage.get(t, 0.0) >= self.saturation * q)
        engaged = total > limit or (self.engaged and (bool(held) or total * self.headroom > limit))
        if not engaged:
            return self._publish(False, {}, limit, total)
        tenants: dict[str, TenantUsage] = {}
        for t in active:
            quota = self.configured_quota(t)
            if quota is None or not math.isfinite(quota) or quota >= NO_LIMIT:
                quota = limit
            if quota <= 0:
                continue  # nothing to share with a tenant that may not use anything
            used = max(0.0, usage.get(t, 0.0))
            if t in held:
                used = quota  # held by its bound: its demand is unknown, let it bid for a share
            # the demand floor (min.share of its own quota), so an idle active tenant is not at 0
            used = max(used, self.min_share * quota / self.headroom)
            tenants[t] = TenantUsage(quota=quota, usage=used)
        self.target = dynamic_quotas(limit, tenants, headroom=self.headroom, engaged=True)
        dynamic = {t: q for t, q in self.target.items() if q < tenants[t].quota}
        return self._publish(True, dynamic, limit, total)

    def _publish(self, engaged: bool, dynamic: dict[str, float], limit: float, total: float) -> TuningResult:
        if engaged != self.engaged:
            log.info("%s: combined tenant usage %.0f %s the broker-wide limit %.0f; tenant quotas %s",
                     self.name, total, "exceeds" if engaged else "is back within", limit,
                     "auto-tuned" if engaged else "restored")
        self.engaged = engaged
        self._dynamic = dynamic
        return TuningResult(limit=limit, usage=total, engaged=engaged, dynamic=dict(dynamic))


class BrokerRequestQuota:
    """The broker-wide request quota, recomputed each interval from the load."""

    def __init__(self, load: LoadSource = NO_LOAD, *, capacity: float = REQUEST_CAPACITY,
                 threshold: int = 250, step: float = 0.1) -> None:
        self.load = load
        self.capacity = capacity
        self.threshold = threshold
        self.step = step
        self.value: float | None = None

    def tune(self) -> float:
        queue = self.load.request_queue_size()
        previous = self.value
        self.value = broker_request_quota(self.capacity, self.load.exempt_time(), queue, self.threshold,
                                          previous, self.step, floor=REQUEST_QUOTA_FLOOR * self.capacity)
        if previous is not None and self.value < previous and queue > self.threshold:
            log.info("request queue at %d (threshold %d): broker request quota reduced to %.1f%%",
                     queue, self.threshold, self.value)
        return self.value


# -- the broker's protection -----------------------------------------------------------------

class BrokerProtection:
    """The three tuners and the broker request quota; ``broker.protection``.

    ``configured_quota(kind, tenant)`` is the tenant's configured per-broker quota of ``kind``
    ("produce", "fetch", "request"); ``apply(kind, tenant, value)`` is called after each step
    for every tenant whose dynamic quota changed (None: back to the configured one)."""

    KINDS = ("produce", "fetch", "request")

    def __init__(self, config: Callable[[], Any], configured_quota: Callable[[str, str], float | None],
                 apply: Callable[[str, str, float | None], None] | None = None) -> None:
        self._config = config
        self._apply = apply
        # Whether to tune request quotas (for_broker: while some request quota exists, so request
        # time is measured anyway; measuring it for every request has a cost).
        self.request_tuning: Callable[[], bool] = lambda: True
        cfg = config()
        self.activity = TenantActivity(int(cfg.get("shoal.tenant.active.window.ms")))
        self.request_quota = BrokerRequestQuota()
        self.produce = AutoTuner("produce", lambda t: configured_quota("produce", t), self.activity)
        self.fetch = AutoTuner("fetch", lambda t: configured_quota("fetch", t), self.activity)
        self.request = AutoTuner("request", lambda t: configured_quota("request", t), self.activity)
        self._apply_config(cfg)

    @classmethod
    def for_broker(cls, broker: "ProtectionHost") -> "BrokerProtection":
        """Wired to the broker's quota managers (``broker.quotas``, shoal.quotas.manager): usage
        from their tenant sensors, configured slices from them, dynamic quotas pushed to them."""
        managers = broker.quotas

        def configured(kind: str, tenant: str) -> float | None:
            return getattr(managers, kind).tenant_quota(tenant)

        def apply(kind: str, tenant: str, value: float | None) -> None:
            getattr(managers, kind).set_dynamic_tenant_quota(tenant, value)

        protection = cls(lambda: broker.config, configured, apply)
        protection.request_tuning = lambda: managers.request.enabled
        protection.set_sources(
            produce=ManagerUsage(managers.produce, broker.clock),
            fetch=ManagerUsage(managers.fetch, broker.clock),
            request=ManagerUsage(managers.request, broker.clock),
            load=BrokerLoad(broker),
        )
        return protection

    def set_sources(self, *, produce: UsageSource | None = None, fetch: UsageSource | None = None,
                    request: UsageSource | None = None, load: LoadSource | None = None) -> None:
        """The quota manager's hook: where usage and load come from."""
        if produce is not None:
            self.produce.usage = produce
        if fetch is not None:
            self.fetch.usage = fetch
        if request is not None:
            self.request.usage = request
        if load is not None:
            self.request_quota.load = load

    def _apply_config(self, cfg: Any) -> None:
        self.activity.window_ms = int(cfg.get("shoal.tenant.active.window.ms"))
        for tuner in (self.produce, self.fetch, self.request):
            tuner.headroom = float(cfg.get("shoal.quota.autotune.headroom"))
            tuner.min_share = float(cfg.get("shoal.quota.autotune.min.share"))
        self.produce.limit = float(cfg.get("shoal.broker.produce.byte.rate.limit"))
        self.fetch.limit = float(cfg.get("shoal.broker.fetch.byte.rate.limit"))
        self.request_quota.threshold = int(cfg.get("shoal.broker.request.queue.threshold"))
        self.request_quota.step = float(cfg.get("shoal.broker.request.quota.step"))

    def interval_ms(self) -> int:
        return int(self._config().get("shoal.quota.autotune.interval.ms"))

    def step(self, now_ms: int) -> dict[str, TuningResult]:
        """One tuning interval: every tuner records activity first, then all tune, then the
        changed dynamic quotas are applied."""
        self._apply_config(self._config())
        tuners = {kind: getattr(self, kind) for kind in self.KINDS}
        before = {kind: t.dynamic for kind, t in tuners.items()}
        limits = {"request": self.request_quota.tune() if self.request_tuning() else NO_LIMIT}
        usages = {kind: t.record_activity(now_ms) if (limits.get(kind) or t.limit) < NO_LIMIT else {}
                  for kind, t in tuners.items()}
        results = {kind: t.tune(now_ms, usages[kind], limits.get(kind)) for kind, t in tuners.items()}
        if self._apply is not None:
            for kind, result in results.items():
                for tenant in before[kind].keys() | result.dynamic.keys():
                    if before[kind].get(tenant) != result.dynamic.get(tenant):
                        self._apply(kind, tenant, result.dynamic.get(tenant))
        return results

    async def run(self, clock: Any) -> None:
        """Every interval, until cancelled; a failing step is logged, never fatal."""
        while True:
            await asyncio.sleep(self.interval_ms() / 1000.0)
            try:
                self.step(clock.now_ms())
            except Exception:
                log.exception("quota auto-tuning step failed")


class ManagerUsage:
    """Tenant usage from a quota manager's tenant sensors (``ClientQuotaManager.tenant_usage``).
    Turns on the manager's usage recording, which it skips while no quota of its type exists."""

    def __init__(self, manager: Any, clock: Any) -> None:
        self.manager = manager
        self.clock = clock

    def usage_by_tenant(self) -> Mapping[str, float]:
        self.manager.record_usage = True
        return {t: rate for t, (rate, _last_ms) in self.manager.tenant_usage(self.clock.now_ms()).items()}

    def muted_since(self, since_ms: int) -> set[str]:
        return self.manager.tenants_muted_since(since_ms)


class BrokerLoad:
    """Load of a running broker: the time of throttling-exempt requests (the quota managers'
    exempt sensor, % of a thread) and the requests in flight on its connections or waiting in its
    request scheduler."""

    def __init__(self, broker: "ProtectionHost") -> None:
        self.broker = broker

    def exempt_time(self) -> float:
        sensor = getattr(getattr(self.broker, "quotas", None), "exempt_sensor", None)
        return 0.0 if sensor is None else float(sensor.rate.measure(self.broker.clock.now_ms()))

    def request_queue_size(self) -> int:
        """Requests being handled, and those waiting in the request scheduler (read, not started)."""
        scheduler = getattr(self.broker, "scheduler", None)
        waiting = scheduler.waiting if scheduler is not None else 0
        return sum(conn.in_flight for conn in self.broker.connections) + waiting
