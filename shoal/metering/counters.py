"""Where usage comes from: the broker metrics' own counters (``shoal.observability``), read, not
counted again.

* Bytes in and out and messages per tenant: the per-topic counters of
  :class:`~shoal.observability.requests.BrokerMetrics` (``topics``), folded into their owning
  tenant. A topic's counters may disappear (the topic was deleted, and a scrape dropped them):
  :class:`Sampler` keeps per-tenant totals that only grow, from each topic's increase since the
  previous sample.
* Requests per tenant: ``BrokerMetrics.requests`` (per API and tenant).
* Request time and throttle time per tenant: :class:`UsageMetrics` adds them where
  ``BrokerMetrics.sent`` finishes a request (two dict additions; the metrics keep them per API
  only).
* Gauges, sampled: partitions this broker leads, the bytes of their logs (what the tenant stores;
  ``replica_storage_bytes``: every replica this broker hosts), open connections.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shoal.metadata import owner_tenant
from shoal.metering.record import Sample
from shoal.observability import requests as _requests
from shoal.observability.requests import BYTES_IN, BYTES_OUT, MESSAGES_IN, BrokerMetrics, RequestRecord

# Positions in the metrics' request record, when it is a list (tenant: the key's second item).
_R_KEY, _R_ARRIVED, _R_THROTTLE = (getattr(_requests, n, i) for n, i in (("R_KEY", 1), ("R_ARRIVED", 2),
                                                                          ("R_THROTTLE", 6)))

if TYPE_CHECKING:
    from shoal.broker import Broker


class UsageMetrics(BrokerMetrics):
    """The broker metrics plus request and throttle time per tenant (ns and ms, cumulative)."""

    def __init__(self, clock: Any, client_throttles: Any = None) -> None:
        super().__init__(clock, client_throttles)
        self.tenant_time_ns: dict[str, int] = {}
        self.tenant_throttle_ms: dict[str, int] = {}

    def sent(self, rec: RequestRecord) -> None:
        super().sent(rec)
        if isinstance(rec, list):  # the metrics' flat request record
            t, arrived, throttle_ns = rec[_R_KEY][1], rec[_R_ARRIVED], rec[_R_THROTTLE]
        else:
            t, arrived, throttle_ns = rec.tenant, rec.arrived, rec.throttle_ns
        self.tenant_time_ns[t] = self.tenant_time_ns.get(t, 0) + (self.nanos() - arrived)
        if throttle_ns:
            self.tenant_throttle_ms[t] = self.tenant_throttle_ms.get(t, 0) + throttle_ns // 1_000_000


class Sampler:
    """Reads a broker's usage per tenant (:meth:`sample`); its counters never go down while the
    broker runs. Runs on the broker's event loop."""

    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self._topic_seen: dict[str, tuple[int, int, int]] = {}  # physical topic -> (in, msgs, out)
        self._bytes: dict[str, list[int]] = {}  # tenant -> [bytes in, messages in, bytes out]

    def _fold_topics(self, m: BrokerMetrics, tenants: Any) -> None:
        seen = self._topic_seen
        for physical, t in list(m.topics.items()):
            now = (t[BYTES_IN], t[MESSAGES_IN], t[BYTES_OUT])
            was = seen.get(physical, (0, 0, 0))
            if now == was:
                continue
            seen[physical] = now
            tenant = owner_tenant(physical, tenants) or ""
            acc = self._bytes.setdefault(tenant, [0, 0, 0])
            for i in range(3):
                d = now[i] - was[i]
                acc[i] += d if d >= 0 else now[i]  # dropped and counted anew
        for gone in [p for p in seen if p not in m.topics]:
            del seen[gone]

    def sample(self) -> dict[str, Sample]:
        broker = self.broker
        image = broker.metadata.image
        m = broker.metrics
        counters: dict[str, dict[str, int]] = {}

        def c(tenant: str) -> dict[str, int]:
            d = counters.get(tenant)
            if d is None:
                d = counters[tenant] = {}
            return d

        if m is not None:
            self._fold_topics(m, image.tenants)
            for tenant, (b_in, msgs, b_out) in self._bytes.items():
                d = c(tenant)
                d["bytes_in"], d["messages_in"], d["bytes_out"] = b_in, msgs, b_out
            for (_api, tenant), n in m.requests.items():
                d = c(tenant)
                d["requests"] = d.get("requests", 0) + n
            for tenant, n in getattr(m, "tenant_time_ns", {}).items():
                c(tenant)["request_time_us"] = n // 1000
            for tenant, n in getattr(m, "tenant_throttle_ms", {}).items():
                c(tenant)["throttle_time_ms"] = n
            for (_api, tenant), n in m.throttled.items():
                d = c(tenant)
                d["throttled_requests"] = d.get("throttled_requests", 0) + n
        gauges: dict[str, dict[str, int]] = {}

        def g(tenant: str) -> dict[str, int]:
            d = gauges.get(tenant)
            if d is None:
                d = gauges[tenant] = {"partitions_led": 0, "storage_bytes": 0, "replica_storage_bytes": 0,
                                      "connections": 0}
            return d

        for p in broker.replicas.hosted():
            tenant = owner_tenant(p.topic, image.tenants) or ""
            d = g(tenant)
            size = p.log.size_bytes
            d["replica_storage_bytes"] += size
            if p.is_leader:
                d["partitions_led"] += 1
                d["storage_bytes"] += size
        for conn in list(broker.connections):
            tenant = getattr(conn, "tenant", None) or ""
            g(tenant)["connections"] += 1
        return {t: Sample(counters.get(t, {}), gauges.get(t, {})) for t in set(counters) | set(gauges)}
