"""The broker's client quota managers (Kafka's ``ClientQuotaManager`` and
``ClientRequestQuotaManager``): one per quota type, fed by the metadata image, asked once per
request.

* :class:`ClientQuotaManager` — produce (``producer_byte_rate``), fetch (``consumer_byte_rate``)
  or request time (``request_percentage``, KIP-124). For a request of ``(tenant, user,
  client-id)`` it finds the configured quota with Kafka's eight levels in the caller's scope
  (:mod:`shoal.quotas.entities`), records the value in the sensor named by the metric tags of
  that level (so a user quota is shared by the user's client ids, a (user, client-id) quota is
  not, ...), and for a tenant also in the tenant's sensor, whose bound is this broker's slice of
  the tenant-wide quota over the brokers leading the tenant's partitions (``split`` "equal":
  :func:`~shoal.quotas.fairshare.tenant_quota_slice`, a pure function of metadata; "demand":
  :func:`~shoal.quotas.demand.confirmed_demand_slice` of the demand tables the brokers exchange,
  :meth:`ClientQuotaManager.set_demand`; on one node the whole quota; a consumer quota also over
  the followers that may serve the tenant's consumers, :attr:`ClientQuotaManager.follower_reads`),
  lowered to the auto-tuner's dynamic quota when one is set. Bounds are cached per tenant and recomputed when
  quotas, leaders, the split or the demand table change. The throttle is the larger of the
  client's and the tenant's (:func:`~shoal.quotas.precedence.combine_throttles`).
* Sensors are the hot-path :class:`~shoal.quotas.sensor.Sensor` (Kafka-exact, O(1) while
  clearly within the quota, smoothing for byte rates). A quota change keeps a sensor's
  history (its bound is updated in place, as Kafka updates the metric config); a change of metric
  tags starts a new sensor, as in Kafka. Sensors idle for ``shoal.quota.sensor.expiration.ms``
  are dropped (Kafka: one hour), which also bounds the label sets of the metrics.
* As Kafka's ``quotasEnabled``, nothing is recorded while no quota of the type exists, unless
  ``record_usage`` is set (the Prometheus endpoint and the auto-tuner want usage anyway).
* :class:`QuotaManagers` holds the three for a broker, with Kafka's request-quota exemptions and
  KIP-219's per-version rule for who throttles (:func:`client_throttles`).

Interface for the broker-wide auto-tuner: :meth:`ClientQuotaManager.tenant_usage`,
:meth:`ClientQuotaManager.tenant_quota` (the configured per-broker slice),
:meth:`ClientQuotaManager.set_dynamic_tenant_quota`; :attr:`ClientQuotaManager.broker_sensor`
(broker-wide usage) and, for the request quota, :attr:`QuotaManagers.exempt_sensor` (time of
requests exempt from throttling, in percent of a thread).

Not thread-safe: the broker's event loop owns every manager and sensor.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from shoal.quotas.entities import (
    FETCH_KEY,
    PRODUCE_KEY,
    REQUEST_KEY,
    QuotaIndex,
    quota_index,
    quota_user,
    tenant_leaders,
    tenant_read_replicas,
)
from shoal.quotas.demand import DemandTable, confirmed_demand_slice
from shoal.quotas.fairshare import DEFAULT_HEADROOM, tenant_quota_slice
from shoal.quotas.precedence import select_quota, select_tenant_quota
from shoal.quotas.rate import RateConfig
from shoal.quotas.sensor import _NONE, TENANT_PACER_DEPTH, Sensor
from shoal.quotas.throttle import NANOS_TO_PERCENTAGE_PER_SECOND

if TYPE_CHECKING:
    from shoal.config import BrokerConfig
    from shoal.metadata import MetadataImage

DEFAULT_EXPIRATION_MS = 3_600_000  # Kafka's InactiveSensorExpirationTimeSeconds
SWEEP_INTERVAL_MS = 30_000


class QuotaType(enum.Enum):
    """Quota type: (quota key, Kafka's metric group, Kafka's metric name)."""

    PRODUCE = (PRODUCE_KEY, "produce", "byte-rate")
    FETCH = (FETCH_KEY, "fetch", "byte-rate")
    REQUEST = (REQUEST_KEY, "request", "request-time")

    @property
    def key(self) -> str:
        return self.value[0]

    @property
    def group(self) -> str:
        return self.value[1]

    @property
    def metric(self) -> str:
        return self.value[2]


@dataclass(slots=True)
class _Handle:
    """What one (tenant, user, client-id) records into, valid for one manager epoch."""

    client: Sensor
    tenant: Sensor | None
    epoch: int


class ClientQuotaManager:
    """One quota type's sensors and configured quotas (see the module doc)."""

    def __init__(self, qtype: QuotaType, *, node_id: int, config: RateConfig = RateConfig(),
                 pacing: bool = True, expiration_ms: int = DEFAULT_EXPIRATION_MS) -> None:
        self.qtype = qtype
        self.node_id = node_id
        self.config = config
        self.byte_rate = qtype is not QuotaType.REQUEST
        self.pacing = pacing and self.byte_rate
        self.max_throttle_ms = None if self.byte_rate else config.window_ms
        self.expiration_ms = expiration_ms
        self._enabled = False  # some quota of this type is configured (Kafka's quotasEnabled)
        self._record_usage = False  # record even without quotas (metrics, auto-tuner)
        self.active = False  # enabled or record_usage: requests must be recorded
        self.broker_sensor = Sensor(None, config)  # everything recorded here: broker-wide usage
        self._index = QuotaIndex()
        self._image: MetadataImage | None = None
        self._epoch = 0
        self._clients: dict[tuple[str | None, str, str], Sensor] = {}
        self._tenants: dict[str, Sensor] = {}
        self._handles: dict[tuple[str | None, str, str], _Handle] = {}
        self._tenant_bounds: dict[str, tuple[float | None, float | None]] = {}  # (bound, cap)
        self._dynamic: dict[str, float] = {}
        self._last_sweep_ms = 0
        # tenant-wide slices: the split policy and, for "demand", the brokers' demand table
        self.split = "equal"
        self.split_min_fraction = 0.1
        self.split_headroom = DEFAULT_HEADROOM
        self._demand: DemandTable | None = None
        self._demand_prev: DemandTable | None = None  # the table before it: a slice rises when both grant it
        self._leaders: dict[str, set[int]] = {}  # tenant -> leaders, for the current image
        # fetch: followers may serve consumers (KIP-392's rack-aware replica selector; the broker
        # sets it): the tenant-wide consumer quota is split over every broker that serves them
        self.follower_reads = False
        self._servers: dict[str, set[int]] = {}  # tenant -> leaders and read replicas

    # -- configuration --------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """Some quota of this type is configured (Kafka's ``quotasEnabled``)."""
        return self._enabled

    @enabled.setter
    def enabled(self, on: bool) -> None:
        self._enabled = on
        self.active = on or self._record_usage

    @property
    def has_tenant_quotas(self) -> bool:
        """Some tenant-wide quota of this type is configured."""
        return bool(self._index.tenants)

    @property
    def record_usage(self) -> bool:
        """Record usage even without quotas (the metrics endpoint, the auto-tuner)."""
        return self._record_usage

    @record_usage.setter
    def record_usage(self, on: bool) -> None:
        self._record_usage = on
        self.active = self._enabled or on

    def update(self, image: "MetadataImage", old: "MetadataImage | None" = None) -> None:
        """Follow a new metadata image: quotas may have changed, and tenant slices follow
        partition leadership."""
        quotas_changed = old is None or (  # a store shares an unchanged section: no compare
            old.client_quotas is not image.client_quotas and old.client_quotas != image.client_quotas)
        if quotas_changed:
            self._index = quota_index(image.client_quotas, self.qtype.key)
            self.enabled = not self._index.empty
        leaders_may_move = old is None or old.topics is not image.topics or old.brokers is not image.brokers
        self._image = image
        if leaders_may_move:
            self._leaders.clear()
            self._servers.clear()
        if quotas_changed or (leaders_may_move and self._index.tenants):
            self._invalidate()

    def _invalidate(self) -> None:
        self._epoch += 1
        self._tenant_bounds.clear()

    def set_split(self, split: str, *, min_fraction: float = 0.1, headroom: float = DEFAULT_HEADROOM) -> None:
        """How tenant-wide quotas are split over their leaders: "equal" or "demand"."""
        if (split, min_fraction, headroom) != (self.split, self.split_min_fraction, self.split_headroom):
            self.split, self.split_min_fraction, self.split_headroom = split, min_fraction, headroom
            self._invalidate()

    def set_demand(self, table: DemandTable | None) -> None:
        """The brokers' demand table just read (None: unknown, split equally); used under split
        "demand", with the one read before it (:func:`~shoal.quotas.demand.confirmed_demand_slice`)."""
        prev = self._demand
        if (prev, table) != (self._demand_prev, self._demand):
            self._demand_prev, self._demand = prev, table
            if self.split == "demand" and self.byte_rate:
                self._invalidate()

    def _tenant_leaders(self, tenant: str) -> set[int]:
        leaders = self._leaders.get(tenant)
        if leaders is None and self._image is not None:
            leaders = self._leaders[tenant] = tenant_leaders(self._image, tenant)
        return leaders or set()

    def _tenant_servers(self, tenant: str) -> set[int]:
        """The brokers that serve the tenant's traffic of this quota type: its leaders, and for
        the consumer quota with :attr:`follower_reads` its partitions' replicas that may serve
        its consumers (:func:`~shoal.quotas.entities.tenant_read_replicas`)."""
        if not self.follower_reads:
            return self._tenant_leaders(tenant)
        servers = self._servers.get(tenant)
        if servers is None and self._image is not None:
            servers = self._servers[tenant] = self._tenant_leaders(tenant) | tenant_read_replicas(self._image, tenant)
        return servers or set()

    def tenant_slices(self) -> dict[str, float]:
        """tenant -> this broker's slice of its tenant-wide quota, for every tenant of the image
        with one (byte rates; the metrics)."""
        if not self.byte_rate or self._image is None or not self._index.tenants:
            return {}
        out = {}
        for tenant in self._image.tenants:
            value = self.tenant_quota(tenant)
            if value is not None:
                out[tenant] = value
        return out

    def set_dynamic_tenant_quota(self, tenant: str, value: float | None) -> None:
        """The auto-tuner's dynamic quota of ``tenant`` on this broker (None: back to the
        configured one). The tenant's bound is the smaller of the two."""
        if value is None:
            if self._dynamic.pop(tenant, None) is None:
                return
        elif self._dynamic.get(tenant) == value:
            return
        else:
            self._dynamic[tenant] = value
        self._invalidate()

    def dynamic_tenant_quotas(self) -> dict[str, float]:
        """tenant -> the auto-tuner's dynamic quota, for tenants that have one."""
        return dict(self._dynamic)

    def tenant_quota(self, tenant: str) -> float | None:
        """This broker's slice of the tenant-wide quota as configured (no dynamic quota)."""
        value, _key = select_tenant_quota(self._index.tenants, tenant)
        if value is None or not self.byte_rate or self._image is None:
            return value
        leaders = self._tenant_leaders(tenant)
        if self.split == "demand" and self._demand is not None:
            return confirmed_demand_slice(value, leaders, self.node_id, (self._demand_prev, self._demand),
                                          self.qtype.group, tenant, headroom=self.split_headroom,
                                          min_fraction=self.split_min_fraction,
                                          followers=self._tenant_servers(tenant) if self.follower_reads else None)
        return tenant_quota_slice(value, self._tenant_servers(tenant), self.node_id)

    def _tenant_bound(self, tenant: str) -> tuple[float | None, float | None]:
        """(bound, cap) of the tenant's sensor: for byte rates the configured slice, checked the
        Kafka way, and the dynamic quota as a cap enforced by pacing (shoal.quotas.sensor: a
        lowered windowed bound would mute for most of a window of samples); for request time
        (Kafka's bounded throttle, no pacer) the smaller of the two as the bound. Under the
        demand split the slice moves every interval, so it is a cap too (with the dynamic quota,
        the smaller), and the windowed bound is the whole tenant quota."""
        cached = self._tenant_bounds.get(tenant)
        if cached is not None:
            return cached
        bound = self.tenant_quota(tenant)
        cap = self._dynamic.get(tenant)
        if bound is not None and self.byte_rate and self.split == "demand" and self._demand is not None:
            whole, _key = select_tenant_quota(self._index.tenants, tenant)
            cap = bound if cap is None else min(cap, bound)
            bound = whole
        if cap is not None and bound is not None and cap >= bound:
            cap = None
        if cap is not None and not self.byte_rate:
            bound, cap = cap, None
        self._tenant_bounds[tenant] = (bound, cap)
        return bound, cap

    def _tenant_pacer_bytes(self, tenant: str, pace: float | None) -> float | None:
        """The depth of a tenant-wide quota's pacer here: :data:`~shoal.quotas.sensor.
        TENANT_PACER_DEPTH` of a window of its rate ``pace`` (its slice, or a smaller dynamic
        quota) or of the tenant's equal share, whichever is larger (shoal.quotas.sensor: over n
        brokers the depths sum to at most twice that much of the quota). None without a
        tenant-wide quota (a pacer then follows its rate)."""
        whole, _key = select_tenant_quota(self._index.tenants, tenant)
        if whole is None:
            return None
        servers = self._tenant_servers(tenant) if self._image is not None else set()
        share = whole / len(servers) if servers else whole
        if pace is not None and pace > share:
            share = pace
        return share * TENANT_PACER_DEPTH * self.config.window_ms / 1000.0

    def quota(self, tenant: str | None, user: str, client_id: str) -> tuple[float | None, float | None]:
        """(client quota, tenant bound) that apply to a request now; None is unlimited. The
        tenant bound is the smaller of its slice and its dynamic quota."""
        h = self._handle(tenant, user, client_id)
        return h.client.bound, (effective_bound(h.tenant) if h.tenant is not None else None)

    # -- sensors ------------------------------------------------------------------------------

    def _new_sensor(self, bound: float | None, *, tenant: bool = False) -> Sensor:
        """A client's sensor, or (``tenant``) a tenant's: for byte rates its pacer starts empty
        and is a quarter window deep, so the brokers' slices together never let a cold start (or
        a return from a pause) through above the tenant-wide quota (shoal.quotas.sensor)."""
        if tenant and self.byte_rate:
            return Sensor(bound, self.config, max_throttle_ms=self.max_throttle_ms, pacing=self.pacing,
                          pacer_depth=TENANT_PACER_DEPTH, pacer_start=0.0)
        return Sensor(bound, self.config, max_throttle_ms=self.max_throttle_ms, pacing=self.pacing)

    def _handle(self, tenant: str | None, user: str, client_id: str) -> _Handle:
        key = (tenant, user, client_id)
        h = self._handles.get(key)
        if h is not None and h.epoch == self._epoch:
            return h
        selection = select_quota(self._index.scopes.get(tenant, {}), user, client_id)
        tags = (tenant, *selection.metric_tags(user, client_id))
        client = self._clients.get(tags)
        if client is None:
            client = self._clients[tags] = self._new_sensor(selection.value)
        else:
            client.bound = selection.value
        tenant_sensor = None
        if tenant is not None:
            bound, cap = self._tenant_bound(tenant)
            tenant_sensor = self._tenants.get(tenant)
            if tenant_sensor is None:
                tenant_sensor = self._tenants[tenant] = self._new_sensor(bound, tenant=True)
            else:
                tenant_sensor.bound = bound
            tenant_sensor.cap = cap
            if self.byte_rate:
                tenant_sensor.set_pacer_bytes(self._tenant_pacer_bytes(tenant, effective_bound(tenant_sensor)))
        h = self._handles[key] = _Handle(client, tenant_sensor, self._epoch)
        return h

    def record(self, tenant: str | None, user: str, client_id: str, value: float, now_ms: int) -> tuple[int, int]:
        """Record ``value`` for a request; return ``(quota throttle, pacing throttle)`` in ms,
        each the larger of the client's and the tenant's (Kafka's throttle, and the warm-up
        pacer's; see :mod:`shoal.quotas.sensor`)."""
        if now_ms - self._last_sweep_ms >= SWEEP_INTERVAL_MS:
            self.sweep(now_ms)
        h = self._handles.get((tenant, user, client_id))
        if h is None or h.epoch != self._epoch:
            h = self._handle(tenant, user, client_id)
        if self._record_usage:
            self.broker_sensor.record(value, now_ms)
        result = h.client.record(value, now_ms)
        t = h.tenant
        if t is not None:
            tenant_result = t.record(value, now_ms)
            if tenant_result is not _NONE:
                result = (max(result[0], tenant_result[0]), max(result[1], tenant_result[1]))
        return result

    def record_and_get_throttle_ms(self, tenant: str | None, user: str, client_id: str, value: float,
                                   now_ms: int) -> int:
        """Kafka's ``recordAndGetThrottleTimeMs``, with the tenant bound and pacing: the time
        the request must be throttled (0 when within every bound)."""
        return max(self.record(tenant, user, client_id, value, now_ms))

    def unrecord(self, tenant: str | None, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (Kafka's ``unrecordQuotaSensor``: a throttled fetch)."""
        h = self._handle(tenant, user, client_id)
        self.broker_sensor.unrecord(value, now_ms)
        h.client.unrecord(value, now_ms)
        if h.tenant is not None:
            h.tenant.unrecord(value, now_ms)

    def max_value_in_quota_window(self, tenant: str | None, user: str, client_id: str, now_ms: int) -> float:
        """The most one fetch may return (Kafka's ``getMaxValueInQuotaWindow``), over both
        the client and the tenant bounds."""
        h = self._handle(tenant, user, client_id)
        cap = h.client.max_value_in_quota_window(now_ms)
        if h.tenant is not None:
            cap = min(cap, h.tenant.max_value_in_quota_window(now_ms))
        return cap

    def record_throttle(self, tenant: str | None, user: str, client_id: str, throttle_ms: int, now_ms: int) -> None:
        """Note a throttle applied for this quota type (the throttle-time metrics)."""
        self._handle(tenant, user, client_id).client.throttles.record(throttle_ms, now_ms)

    def sweep(self, now_ms: int) -> None:
        """Drop sensors idle for ``expiration_ms`` (and the lookup cache, which is rebuilt as
        requests come)."""
        self._last_sweep_ms = now_ms
        horizon = now_ms - self.expiration_ms
        for table in (self._clients, self._tenants):
            for k in [k for k, s in table.items() if s.last_ms is None or s.last_ms < horizon]:
                del table[k]
        self._handles.clear()

    # -- what the metrics and the auto-tuner read -----------------------------------------------

    def client_sensors(self) -> Iterator[tuple[tuple[str | None, str, str], Sensor]]:
        """((tenant, user tag, client-id tag), sensor) of every live client sensor."""
        return iter(list(self._clients.items()))

    def tenant_sensors(self) -> Iterator[tuple[str, Sensor]]:
        return iter(list(self._tenants.items()))

    def tenant_usage(self, now_ms: int) -> dict[str, tuple[float, int | None]]:
        """tenant -> (rate used lately, time of its last request) for every tenant with a sensor
        (the rate over the time its samples cover: a new tenant's burst is not diluted over
        Kafka's padded window)."""
        return {t: (s.rate.measure_used(now_ms), s.last_ms) for t, s in list(self._tenants.items())}

    def tenant_muted_ms(self) -> dict[str, int]:
        """tenant -> how long its tenant bound has muted it so far (cumulative ms; a sensor made
        anew starts from 0)."""
        return {t: s.muted_ms for t, s in list(self._tenants.items())}

    def tenants_muted_since(self, since_ms: int) -> set[str]:
        """Tenants whose tenant bound (slice or dynamic quota) throttled them at some time after
        ``since_ms``: their demand is above it."""
        return {t for t, s in list(self._tenants.items()) if s.muted_until_ms > since_ms}


def effective_bound(sensor: Sensor) -> float | None:
    """The rate a sensor holds its client to: the smaller of its bound and its cap."""
    bound, cap = sensor.bound, sensor.cap
    if cap is None:
        return bound
    return cap if bound is None else min(bound, cap)


# -- the broker's three managers -------------------------------------------------------------------

# Requests never throttled by the request quota, only recorded as exempt (Kafka: ApiVersions,
# SASL, and the cluster actions; a follower fetch is exempt too).
EXEMPT_APIS = frozenset({
    17, 18, 36,  # SaslHandshake, ApiVersions, SaslAuthenticate
    4, 5, 6, 7, 27, 52, 53, 54, 56, 57, 58, 62, 63, 67,  # LeaderAndIsr ... AllocateProducerIds
})

# KIP-219: from these versions on the client throttles itself, so the broker answers at once
# (throttle_time_ms set) and then mutes the connection; for older versions, and for APIs not
# listed, the broker holds the response for the throttle time. (Kafka's
# ``AbstractResponse.shouldClientThrottle`` overrides.)
_CLIENT_THROTTLES_FROM = {
    0: 6, 1: 8, 2: 3, 3: 6, 8: 4, 9: 4, 10: 2, 11: 3, 12: 2, 13: 2, 14: 2, 15: 2, 16: 2, 18: 2,
    19: 3, 20: 2, 21: 1, 22: 1, 23: 1, 24: 1, 25: 1, 26: 1, 28: 1, 29: 1, 30: 1, 31: 1, 32: 2,
    33: 1, 34: 1, 35: 1, 37: 1, 38: 1, 39: 1, 40: 1, 41: 1, 42: 1, 43: 0, 44: 0, 45: 0, 46: 0,
    47: 0, 50: 0, 51: 0, 62: 0, 63: 0, 64: 0, 75: 0,
}


def client_throttles(api_key: int, version: int) -> bool:
    """KIP-219: does a client at this version throttle itself (Kafka's ``shouldClientThrottle``)?"""
    first = _CLIENT_THROTTLES_FROM.get(api_key)
    return first is not None and version >= first


class QuotaManagers:
    """Produce, fetch and request quota managers of one broker, following its metadata."""

    def __init__(self, config: "BrokerConfig", node_id: int) -> None:
        rate = RateConfig(samples=int(config.get("quota.window.num")),
                          window_ms=int(config.get("quota.window.size.seconds")) * 1000)
        pacing = bool(config.get("shoal.quota.smoothing"))
        expiration = int(config.get("shoal.quota.sensor.expiration.ms"))
        self.rate_config = rate
        self.produce = ClientQuotaManager(QuotaType.PRODUCE, node_id=node_id, config=rate, pacing=pacing,
                                          expiration_ms=expiration)
        self.fetch = ClientQuotaManager(QuotaType.FETCH, node_id=node_id, config=rate, pacing=pacing,
                                        expiration_ms=expiration)
        self.request = ClientQuotaManager(QuotaType.REQUEST, node_id=node_id, config=rate,
                                          expiration_ms=expiration)
        # Kafka's exempt-request-time sensor: never expires, never throttles.
        self.exempt_sensor = Sensor(None, rate)

    def managers(self) -> tuple[ClientQuotaManager, ...]:
        return (self.produce, self.fetch, self.request)

    def set_split(self, split: str, *, min_fraction: float = 0.1, headroom: float = DEFAULT_HEADROOM) -> None:
        """``shoal.quota.tenant.split`` (shoal.quotas.demand) for the byte-rate managers."""
        for m in (self.produce, self.fetch):
            m.set_split(split, min_fraction=min_fraction, headroom=headroom)

    def set_demand(self, table: DemandTable | None) -> None:
        for m in (self.produce, self.fetch):
            m.set_demand(table)

    def has_tenant_byte_quotas(self) -> bool:
        """Some tenant-wide produce or fetch quota exists (else there is no demand to exchange)."""
        return any(m.has_tenant_quotas for m in (self.produce, self.fetch))

    def scheduling_weight(self, key: Any) -> float:
        """The request scheduler's weight of a flow (shoal.server.scheduler): a tenant with a
        tenant-wide request quota weighs its ``request_percentage`` / 100 (at most 1), anything
        else 1."""
        if not self.request.enabled or not isinstance(key, str) or key.startswith("User:"):
            return 1.0
        quota = self.request.tenant_quota(key)
        return 1.0 if quota is None else min(1.0, quota / 100.0)

    def update(self, image: "MetadataImage", old: "MetadataImage | None" = None) -> None:
        for m in self.managers():
            m.update(image, old)

    def on_metadata(self, old: "MetadataImage", new: "MetadataImage") -> None:
        self.update(new, old)

    def set_record_usage(self, on: bool) -> None:
        for m in self.managers():
            m.record_usage = on

    def record_request_time(self, tenant: str | None, user: str, client_id: str, api_key: int,
                            nanos: int, now_ms: int, *, exempt: bool = False) -> int:
        """KIP-124: record a request's handling time; its throttle (0 if exempt or within)."""
        value = nanos * NANOS_TO_PERCENTAGE_PER_SECOND
        if exempt or api_key in EXEMPT_APIS:
            self.exempt_sensor.record(value, now_ms)
            return 0
        return max(self.request.record(tenant, user, client_id, value, now_ms))

    # -- per request (handlers and the connection) ---------------------------------------------

    @staticmethod
    def identity(ctx: Any) -> tuple[str | None, str, str]:
        """(tenant, user, client-id) a request's quotas are looked up for (kept in the ctx)."""
        who = ctx.quota_id
        if who is None:
            who = ctx.quota_id = (ctx.scope.tenant_id, quota_user(ctx.principal), ctx.header.client_id or "")
        return who

    @staticmethod
    def _throttle_ctx(ctx: Any, manager: ClientQuotaManager, throttle_ms: int) -> None:
        if throttle_ms > ctx.throttle_ms:
            ctx.throttle_ms = throttle_ms
            ctx.throttle_quota = manager

    def record_produce(self, ctx: Any, now_ms: int) -> None:
        """Produce: record the request's size (Kafka counts the whole request) and leave the
        throttle, if any, in ``ctx.throttle_ms``."""
        if self.produce.active:
            result = self.produce.record(*self.identity(ctx), ctx.request_size, now_ms)
            if result is not _NONE:
                self._throttle_ctx(ctx, self.produce, max(result))

    def fetch_cap(self, ctx: Any, now_ms: int) -> int | None:
        """The most a consumer's fetch may return now (Kafka caps ``max_bytes`` with
        ``getMaxValueInQuotaWindow``), or None when no fetch quota applies."""
        if not self.fetch.active:
            return None
        cap = self.fetch.max_value_in_quota_window(*self.identity(ctx), now_ms)
        return None if cap == math.inf else max(int(cap), 1)

    def record_fetch(self, ctx: Any, size: int, now_ms: int) -> bool:
        """Fetch: record the response's size; True when the fetch is throttled by the quota
        (Kafka then takes the bytes back and answers an empty response). A throttle from the
        warm-up pacer alone keeps the data and only mutes. The throttle is left in
        ``ctx.throttle_ms``."""
        if not self.fetch.active:
            return False
        who = self.identity(ctx)
        quota_ms, pace_ms = self.fetch.record(*who, size, now_ms)
        if quota_ms:
            self.fetch.unrecord(*who, size, now_ms)
        throttle = max(quota_ms, pace_ms)
        if throttle:
            self._throttle_ctx(ctx, self.fetch, throttle)
        return quota_ms > 0

    def response_throttle(self, ctx: Any, nanos: int | None, now_ms: int) -> int:
        """A request whose response is ready: record its handling time (when measured; a
        Produce with acks=0 counts as exempt, as in Kafka) and return the throttle to apply, the
        larger of the handler's byte-rate throttle and the request-time throttle, noted in the
        throttle-time metrics of the quota it came from."""
        tenant, user, client = self.identity(ctx)
        request_ms = 0
        if nanos is not None:
            value = nanos * NANOS_TO_PERCENTAGE_PER_SECOND
            if ctx.no_response or ctx.header.api_key in EXEMPT_APIS:
                self.exempt_sensor.record(value, now_ms)
            else:
                result = self.request.record(tenant, user, client, value, now_ms)
                if result is not _NONE:
                    request_ms = max(result)
        if request_ms > ctx.throttle_ms:
            self.request.record_throttle(tenant, user, client, request_ms, now_ms)
            return request_ms
        if ctx.throttle_ms:
            (ctx.throttle_quota or self.produce).record_throttle(tenant, user, client, ctx.throttle_ms,
                                                                          now_ms)
        return ctx.throttle_ms


def with_throttle_time(response: Any, throttle_ms: int) -> Any:
    """The response with ``throttle_time_ms`` set (responses without the field are unchanged)."""
    if not hasattr(response, "throttle_time"):
        return response
    return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=throttle_ms))

