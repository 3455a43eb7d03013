"""Where usage comes from: the broker metrics' own counters (``shoal.observability``), read, not
counted again; or, when the metrics endpoint is off, :class:`UsageCounters`, a hook that counts
only what metering reads.

Two hooks, chosen by the broker (:func:`usage_hook`), both in ``Broker.metrics`` where the
connection calls them (``begin``, ``answered``, ``sent``; ``shoal.server.connection``):

* ``shoal.metrics.listener`` set: :class:`UsageMetrics`, the broker metrics (every histogram of
  every request) plus two dict additions per request;
* not set: :class:`UsageCounters`, the same per-topic bytes and messages and the same per-tenant
  requests, request time and throttle time, and nothing else (no histogram, no per-API
  statistics, no errors): a few µs per request where the full metrics cost ~15.

Both count the same things the same way (the same helpers of ``shoal.observability.requests``
for Produce and Fetch; a test feeds both the same requests and compares):

* Bytes in and out and messages per tenant: the per-topic counters of
  :class:`~shoal.observability.requests.BrokerMetrics` (``topics``), folded into their owning
  tenant. A topic's counters may disappear (the topic was deleted, and a scrape dropped them):
  :class:`Sampler` keeps per-tenant totals that only grow, from each topic's increase since the
  previous sample.
* Requests per tenant: ``BrokerMetrics.requests`` (per API and tenant).
* Request time and throttle time per tenant: :class:`UsageMetrics` adds them where
  ``BrokerMetrics.sent`` finishes a request (two dict additions; the metrics keep them per API
  only). Request time is what Kafka's request quota (KIP-124) charges and what the broker's
  capacity is spent on: the request's time on the broker's thread, its ``local`` time in the
  metrics (decoding, the handler's steps, encoding; ``RequestContext.thread_ns``). Not the time it
  waited in the scheduler's queue, in a purgatory or a long poll (``queue`` and ``remote``), nor
  for its turn on the socket: a long-polling consumer, or a follower, has a Fetch outstanding all
  the time, and counting frame read to response sent made an idle broker look 100% busy per
  consumer (an idle three-broker cluster 200% each, from its followers' fetches; the capacity
  report then asked for 9 brokers).
* Gauges, sampled: partitions this broker leads, the bytes of their logs (what the tenant stores;
  ``replica_storage_bytes``: every replica this broker hosts), open connections.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shoal.metadata import owner_tenant
from shoal.metering.record import Sample
from shoal.observability.requests import (BYTES_IN, BYTES_OUT, FETCH, MESSAGES_IN, PRODUCE, R_KEY, R_LOCAL,
                                         R_THROTTLE, TOPIC_FIELDS, BrokerMetrics, RequestRecord, batch_messages,
                                         fetched_topic, is_follower_fetch, produce_failures)

if TYPE_CHECKING:
    from shoal.metering.ports import SamplerHost


class UsageMetrics(BrokerMetrics):
    """The broker metrics plus request time (the requests' local time) and throttle time per
    tenant (ns and ms, cumulative)."""

    def __init__(self, clock: Any, client_throttles: Any = None) -> None:
        super().__init__(clock, client_throttles)
        self.tenant_time_ns: dict[str, int] = {}
        self.tenant_throttle_ms: dict[str, int] = {}

    def sent(self, rec: RequestRecord) -> None:
        super().sent(rec)
        t, throttle_ns = rec[R_KEY][1], rec[R_THROTTLE]
        self.tenant_time_ns[t] = self.tenant_time_ns.get(t, 0) + rec[R_LOCAL]
        if throttle_ns:
            self.tenant_throttle_ms[t] = self.tenant_throttle_ms.get(t, 0) + throttle_ns // 1_000_000


class UsageCounters:
    """Metering's own per-request hook, for a broker without the metrics endpoint (see the module
    doc): per physical topic bytes and messages in and bytes out (lists of ``TOPIC_FIELDS``, as
    :attr:`BrokerMetrics.topics`, only those three used); per tenant responses sent, request time
    (the time on the broker's thread, ns: the metrics' local time), throttle time (ms) and
    throttled responses.
    The connection's interface of :class:`BrokerMetrics`. Not thread-safe: the event loop owns it."""

    def __init__(self, clock: Any) -> None:
        self.nanos = clock.nanos
        self.topics: dict[str, list[int]] = {}
        self.tenant_requests: dict[str, int] = {}
        self.tenant_time_ns: dict[str, int] = {}
        self.tenant_throttle_ms: dict[str, int] = {}
        self.tenant_throttled: dict[str, int] = {}

    def connection_opened(self, listener: str) -> None:
        pass  # connections are a gauge, sampled

    def begin(self, ctx: Any, request: Any, arrived: int, started: int) -> list:
        return [ctx.tenant or "", 0, 0]  # tenant, time on the thread (ns), throttle (ms)

    def answered(self, rec: list, ctx: Any, request: Any, response: Any, data: bytes | None, throttle_ms: int,
                 failed: bool) -> None:
        rec[1] = ctx.thread_ns(self.nanos())  # (as BrokerMetrics.answered takes its local time)
        if throttle_ms:  # (counted here, as BrokerMetrics does; its time when sent)
            rec[2] = throttle_ms
            tenant = rec[0]
            self.tenant_throttled[tenant] = self.tenant_throttled.get(tenant, 0) + 1
        if failed:
            return
        key = ctx.header.api_key
        if key == PRODUCE:
            self._produce(ctx, request, response)
        elif key == FETCH and response is not None and not is_follower_fetch(ctx, request):
            self._fetch(ctx, response)

    def sent(self, rec: list) -> None:
        tenant = rec[0]
        self.tenant_requests[tenant] = self.tenant_requests.get(tenant, 0) + 1
        self.tenant_time_ns[tenant] = self.tenant_time_ns.get(tenant, 0) + rec[1]
        if rec[2]:
            self.tenant_throttle_ms[tenant] = self.tenant_throttle_ms.get(tenant, 0) + rec[2]

    def _counters(self, physical: str) -> list[int]:
        t = self.topics.get(physical)
        if t is None:
            t = self.topics[physical] = [0] * TOPIC_FIELDS
        return t

    def _produce(self, ctx: Any, request: Any, response: Any) -> None:
        failed = produce_failures(response)
        topics = ctx.services.metadata.image.topics
        prefix = ctx.scope.prefix
        for td in request.topic_data:
            physical = prefix + td.name if prefix else td.name
            if physical not in topics:
                continue
            t = None
            for pd in td.partition_data:
                records = pd.records
                if not records or (failed is not None and (td.name, pd.index) in failed):
                    continue
                if t is None:
                    t = self._counters(physical)
                t[BYTES_IN] += len(records)
                t[MESSAGES_IN] += batch_messages(records)

    def _fetch(self, ctx: Any, response: Any) -> None:
        image = ctx.services.metadata.image
        for tr in response.responses:
            size = 0
            for pd in tr.partitions:
                if pd.records:
                    size += len(pd.records)
            if size:
                physical, exists = fetched_topic(image, ctx.scope, tr)
                if exists:
                    self._counters(physical)[BYTES_OUT] += size

    def forget_topics(self, keep: Any) -> None:
        """Drop the counters of topics no longer in ``keep`` (the sampler, once it has read them)."""
        for name in [n for n in self.topics if n not in keep]:
            del self.topics[name]


def usage_hook(clock: Any, metrics_endpoint: bool) -> "UsageMetrics | UsageCounters":
    """The per-request hook of a metered broker: the full metrics when their endpoint is on, else
    metering's own counters."""
    return UsageMetrics(clock) if metrics_endpoint else UsageCounters(clock)


def is_usage_hook(metrics: Any) -> bool:
    """Does this broker's hook count usage (is metering on)?"""
    return isinstance(metrics, (UsageMetrics, UsageCounters))


class Sampler:
    """Reads a broker's usage per tenant (:meth:`sample`); its counters never go down while the
    broker runs. Runs on the broker's event loop."""

    def __init__(self, broker: "SamplerHost") -> None:
        self.broker = broker
        self._topic_seen: dict[str, tuple[int, int, int]] = {}  # physical topic -> (in, msgs, out)
        self._bytes: dict[str, list[int]] = {}  # tenant -> [bytes in, messages in, bytes out]

    def _fold_topics(self, m: "BrokerMetrics | UsageCounters", tenants: Any) -> None:
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
        if isinstance(m, UsageCounters):  # (the metrics' scrape drops deleted topics of the other)
            m.forget_topics(self.broker.metadata.image.topics)

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
            if isinstance(m, UsageCounters):
                requests, throttled = m.tenant_requests.items(), m.tenant_throttled.items()
            else:  # per (api, tenant)
                requests = ((t, n) for (_api, t), n in m.requests.items())
                throttled = ((t, n) for (_api, t), n in m.throttled.items())
            for tenant, n in requests:
                d = c(tenant)
                d["requests"] = d.get("requests", 0) + n
            for tenant, n in getattr(m, "tenant_time_ns", {}).items():
                c(tenant)["request_time_us"] = n // 1000
            for tenant, n in getattr(m, "tenant_throttle_ms", {}).items():
                c(tenant)["throttle_time_ms"] = n
            for tenant, n in throttled:
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
            size = p.view.size_bytes
            d["replica_storage_bytes"] += size
            if p.is_leader:
                d["partitions_led"] += 1
                d["storage_bytes"] += size
        for conn in list(broker.connections):
            tenant = getattr(conn, "tenant", None) or ""
            g(tenant)["connections"] += 1
        return {t: Sample(counters.get(t, {}), gauges.get(t, {})) for t in set(counters) | set(gauges)}
