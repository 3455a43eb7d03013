"""The Prometheus endpoint: ``GET /metrics`` on ``shoal.metrics.listener`` (``http://HOST:PORT``).

Kafka's broker metrics (per topic and tenant, per API, connections, logs, consumer lag, the process
and its event loop) are listed in docs/metrics.md (``shoal.observability``). Quota metrics, named after Kafka's (metric group ``Produce``/``Fetch``/``Request``, names
``byte-rate``, ``request-time``, ``throttle-time``), as gauges:

==========================================  ==========================  =================================
name                                        labels                      value
==========================================  ==========================  =================================
``shoal_produce_byte_rate``                 tenant, user, client_id     bytes/s in the client's sensor
``shoal_fetch_byte_rate``                   tenant, user, client_id     bytes/s
``shoal_request_request_time``              tenant, user, client_id     % of one thread's time (KIP-124)
``shoal_<type>_throttle_time_avg`` / _max   tenant, user, client_id     ms, over the quota window
``shoal_<type>_quota``                      tenant, user, client_id     the quota that applies (if any)
``shoal_tenant_<type>_byte_rate`` ...       tenant                      the tenant's usage on this broker
``shoal_tenant_<type>_quota``               tenant                      this broker's bound on the tenant
``shoal_broker_<type>_byte_rate`` ...       (none)                      broker-wide usage
``shoal_request_exempt_request_time``       (none)                      time of exempt requests
``shoal_tenant_<type>_dynamic_quota``       tenant                      the auto-tuner's dynamic quota
``shoal_broker_<type>_byte_rate_limit``     (none)                      broker-wide limit (when set)
``shoal_broker_<type>_autotune_engaged``    (none)                      1 while tenant quotas are tuned
``shoal_broker_request_quota``              (none)                      broker-wide request quota (%)
``shoal_connection_queued_response_bytes``  (none)                      response bytes connections hold
``shoal_connections_paused``                reason                      connections not being read
``shoal_queued_request_bytes`` / _limit     (none)                      queued.max.request.bytes pool
``shoal_connections_closed_total``          reason                      closed by the broker (counter)
``shoal_login_failures``                    (none)                      failed logins since start
``shoal_login_backoff_delayed`` / _refused  (none)                      attempts spaced / refused (backoff)
``shoal_login_backoff_users``               (none)                      addresses x users with recent failed logins
==========================================  ==========================  =================================

``shoal_tenant_quota_slice_bytes_per_second{tenant, quota_type}`` is this broker's slice of every
tenant-wide produce/fetch quota (``shoal.quota.tenant.split``, shoal.quotas.demand), whether or not
the tenant has traffic here.

Labels are Kafka's metric tags: ``user``/``client_id`` are "" where the quota's level has none
(a user quota's sensor is shared by all the user's client ids), ``tenant`` is "" for the
physical view. Series exist only for live sensors: a client idle for
``shoal.quota.sensor.expiration.ms`` disappears, which bounds the label sets. While the endpoint
is on, usage is recorded even without quotas. Samples are taken on the event loop (sensors are not
thread-safe), so no prometheus_client HTTP thread is used: an aiohttp application on the broker's
own loop answers (keep-alive, as the admin API).
Throttle times are 0 (not NaN) while nothing was throttled in the window.
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CollectorRegistry, GaugeMetricFamily

from shoal.admin.http_listener import parse_listener
from shoal.admin.http_auth import AuthError
from shoal.quotas.manager import QuotaManagers, QuotaType, effective_bound
from shoal.observability.ports import CollectorHost
from shoal.server.bounds import ConnectionCollector
from shoal.server.ports import GuardHost

if TYPE_CHECKING:
    from shoal.clock import Clock
    from shoal.config import BrokerConfig

log = logging.getLogger("shoal.admin.metrics")


class MetricsHost(CollectorHost, GuardHost, Protocol):
    """What the metrics endpoint uses of its broker (``shoal.broker.Broker``, the composition
    root), and nothing else of it: what the broker metrics (``CollectorHost``) and the connection
    collector (``GuardHost``) read, and the quota managers, the broker-wide protection, the
    listeners' security (login back-off, shared with HTTP auth); it sets ``loop_lag``."""

    clock: "Clock"
    quotas: QuotaManagers
    protection: Any  # shoal.quotas.autotune.BrokerProtection, None before the broker starts it
    listener_security: dict[str, Any]  # listener name -> shoal.auth.ListenerSecurity

    @property
    def config(self) -> "BrokerConfig": ...

MAX_HEADER_BYTES = 16 * 1024


def _base(qtype: QuotaType) -> str:
    return f"{qtype.group}_{qtype.metric.replace('-', '_')}"


def quota_metric_values(managers: QuotaManagers, now_ms: int) -> Iterator[tuple[str, str, Mapping[str, str], float]]:
    """Every sample: (name, help, labels, value); see the module doc."""
    for m in managers.managers():
        q = m.qtype
        unit = "percent of one thread's time" if q is QuotaType.REQUEST else "bytes per second"
        for (tenant, user, client), s in m.client_sensors():
            labels = {"tenant": tenant or "", "user": user, "client_id": client}
            yield f"shoal_{_base(q)}", f"{q.group} {q.metric} per user and client id ({unit})", labels, \
                s.rate.measure(now_ms)
            yield f"shoal_{q.group}_throttle_time_avg", f"average {q.group} throttle time (ms)", labels, \
                s.throttles.avg(now_ms)
            yield f"shoal_{q.group}_throttle_time_max", f"maximum {q.group} throttle time (ms)", labels, \
                s.throttles.max(now_ms)
            if s.bound is not None:
                yield f"shoal_{q.group}_quota", f"{q.key} that applies ({unit})", labels, s.bound
        for tenant, s in m.tenant_sensors():
            labels = {"tenant": tenant}
            yield f"shoal_tenant_{_base(q)}", f"tenant-wide {q.group} {q.metric} ({unit})", labels, \
                s.rate.measure(now_ms)
            bound = effective_bound(s)
            if bound is not None:
                yield f"shoal_tenant_{q.group}_quota", \
                    f"this broker's bound on the tenant: its slice of the tenant quota, or the dynamic quota ({unit})", \
                    labels, bound
        for tenant, value in m.tenant_slices().items():
            yield "shoal_tenant_quota_slice_bytes_per_second", \
                "this broker's slice of the tenant-wide quota (shoal.quota.tenant.split)", \
                {"tenant": tenant, "quota_type": q.group}, value
        for tenant, value in m.dynamic_tenant_quotas().items():
            yield f"shoal_tenant_{q.group}_dynamic_quota", \
                f"the broker-wide auto-tuner's dynamic quota of the tenant ({unit})", {"tenant": tenant}, value
        yield f"shoal_broker_{_base(q)}", f"broker-wide {q.group} {q.metric} of clients ({unit})", {}, \
            m.broker_sensor.rate.measure(now_ms)
    yield "shoal_request_exempt_request_time", \
        "time of requests exempt from throttling (percent of one thread's time)", {}, \
        managers.exempt_sensor.rate.measure(now_ms)


def protection_metric_values(protection: Any) -> Iterator[tuple[str, str, Mapping[str, str], float]]:
    """Broker-wide limits and the auto-tuner's state (``broker.protection``,
    shoal.quotas.autotune.BrokerProtection); nothing before the broker started it."""
    if protection is None:
        return
    for kind in ("produce", "fetch"):
        tuner = getattr(protection, kind)
        if tuner.limited:
            yield f"shoal_broker_{kind}_byte_rate_limit", \
                f"broker-wide {kind} bandwidth limit of all tenants together (bytes per second)", {}, tuner.limit
        yield f"shoal_broker_{kind}_autotune_engaged", \
            f"1 while tenant {kind} quotas are auto-tuned under the broker-wide limit", {}, float(tuner.engaged)
    if protection.request_quota.value is not None:
        yield "shoal_broker_request_quota", \
            "broker-wide request quota: capacity minus exempt time, lowered while the queue is long " \
            "(percent of one thread's time)", {}, protection.request_quota.value


def login_metric_values(backoff: Any) -> Iterator[tuple[str, str, Mapping[str, str], float]]:
    """The failed-login backoff's counters (``shoal.auth.backoff``; SASL and HTTP Basic)."""
    if backoff is None:
        return
    yield "shoal_login_failures", "failed logins (SASL PLAIN, SCRAM, HTTP Basic) since start", {}, \
        float(backoff.failures_total)
    yield "shoal_login_backoff_delayed", "login attempts that waited for their backoff slot (address and user)", {}, \
        float(backoff.delayed_total)
    yield "shoal_login_backoff_refused", "login attempts refused unchecked (their address's line for the user was full)", {}, \
        float(backoff.refused_total)
    yield "shoal_login_backoff_users", "addresses x users with recent failed logins (bounded)", {}, float(backoff.tracked)


class QuotaCollector:
    """A prometheus_client collector reading the broker's quota managers at scrape time."""

    def __init__(self, broker: "MetricsHost") -> None:
        self.broker = broker

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families: dict[str, GaugeMetricFamily] = {}
        replicas = getattr(self.broker, "replicas", None)
        samples = itertools.chain(quota_metric_values(self.broker.quotas, self.broker.clock.now_ms()),
                                  protection_metric_values(getattr(self.broker, "protection", None)),
                                  login_metric_values(_backoff(self.broker)),
                                  replicas.metric_values() if replicas is not None else ())
        for name, doc, labels, value in samples:
            keys = sorted(labels)
            fam = families.get(name)
            if fam is None:
                fam = families[name] = GaugeMetricFamily(name, doc, labels=keys)
            fam.add_metric([labels[k] for k in keys], value)
        yield from families.values()


def _backoff(broker: "MetricsHost") -> Any:
    from shoal.auth import shared_backoff

    return shared_backoff(getattr(broker, "listener_security", None) or {})


def render(broker: "MetricsHost") -> bytes:
    """The text exposition of the broker's metrics."""
    from prometheus_client import ProcessCollector

    from shoal.observability.collector import BrokerCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(QuotaCollector(broker))
    registry.register(ConnectionCollector(broker))  # shoal.server.bounds
    ProcessCollector(registry=registry)  # process_*: CPU, memory, open files
    # Kafka's broker metrics (docs/metrics.md): most of the lines, written without prometheus_client
    text = generate_latest(registry) + BrokerCollector(broker).exposition().encode()
    node_id = getattr(broker, "node_id", None)
    config = getattr(broker, "config", None)
    if node_id is not None and config is not None and bool(config.get("shoal.metrics.node.label")):
        text = with_label(text, "node_id", str(node_id))
    return text + _broker_info(broker)


def _broker_info(broker: "MetricsHost") -> bytes:
    """``shoal_broker_info{node_id, host, rack} 1``: which broker (and machine) this endpoint is,
    as Kafka's app-info; with several brokers per host (shoal serve --processes) the node id
    tells them apart."""
    from shoal.observability.exposition import TextExposition

    node_id = getattr(broker, "node_id", None)
    config = getattr(broker, "static_config", None)
    if node_id is None or config is None:
        return b""
    advertised = config.advertised_listeners
    host = config.host_id or (advertised[0][1] if advertised else "")
    out = TextExposition()
    out.gauge("shoal_broker_info", "this broker: its node.id, broker.host (else advertised host) and broker.rack",
              ("node_id", "host", "rack"), [((str(node_id), host, config.rack or ""), 1.0)])
    return out.text().encode()


def with_label(text: bytes, key: str, value: str) -> bytes:
    """The exposition ``text`` with ``key="value"`` added to every sample (a target label)."""
    label = f'{key}="{value}"'.encode()
    out = []
    for line in text.split(b"\n"):
        if not line or line.startswith(b"#"):
            out.append(line)
            continue
        space = line.find(b" ")
        brace = line.find(b"{", 0, space if space != -1 else len(line))
        if brace != -1:
            rest = line[brace + 1:]
            out.append(line[:brace + 1] + label + (b"" if rest.startswith(b"}") else b",") + rest)
        else:
            out.append(line[:space] + b"{" + label + b"}" + line[space:])
    return b"\n".join(out)


def parse_metrics_listener(value: str) -> tuple[str, int]:
    """``shoal.metrics.listener``: ``http://HOST:PORT``, or without a host (``http://:PORT``,
    ``:PORT``, ``PORT``) for loopback, 127.0.0.1. ValueError for anything else."""
    v = value.strip()
    bare = v[len("http://"):] if v.startswith("http://") else v
    bare = bare.rstrip("/")
    if bare.lstrip(":").isdigit() and not bare.startswith("::"):
        v = f"http://127.0.0.1:{bare.lstrip(':')}"
    return parse_listener(v, "shoal.metrics.listener")


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class MetricsHttpServer:
    """``GET /metrics`` (and ``/``) on aiohttp, as the admin API (``shoal.admin.http``): HTTP/1.1
    keep-alive, so a Prometheus server scrapes over one connection; any other path 404, another
    method 405.

    Every series names tenants and client ids, so the endpoint is loopback-only unless
    ``shoal.metrics.listener`` names another address, and with ``shoal.metrics.authentication``
    (default: ``shoal.admin.authentication``) = basic it answers only super users (HTTP Basic,
    checked as by the admin API, ``shoal.admin.http_auth``: 401 without or with wrong
    credentials, 403 for anyone else). A non-loopback address without authentication is logged
    as a warning at start-up."""

    def __init__(self, broker: "MetricsHost", listener: str) -> None:
        from shoal.admin.http_auth import HttpAuth

        self.broker = broker
        self.host, self.port = parse_metrics_listener(listener)
        self.auth = HttpAuth(broker.metadata, lambda: broker.config, backoff=_backoff(broker),
                             mode_config="shoal.metrics.authentication")
        self.app = web.Application(middlewares=[self._middleware])
        for path in ("/metrics", "/"):
            self.app.router.add_route("*", path, self._metrics)
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        from shoal.admin.http import KEEPALIVE_S, SHUTDOWN_S, _ProtocolLog
        from shoal.observability.loop import LoopLagProbe

        self.broker.quotas.set_record_usage(True)
        self.broker.loop_lag = LoopLagProbe(self.broker.clock)
        self.broker.loop_lag.start()
        self._runner = web.AppRunner(self.app, handle_signals=False, access_log=None, keepalive_timeout=KEEPALIVE_S,
                                     shutdown_timeout=SHUTDOWN_S, logger=_ProtocolLog("metrics endpoint"))
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, self.host, self.port, reuse_address=True).start()
        except BaseException:
            await self._runner.cleanup()
            self._runner = None
            raise
        self.port = self._runner.addresses[0][1]
        log.info("Prometheus metrics on http://%s:%d/metrics (authentication: %s)", self.host, self.port,
                 self.auth.mode)
        if self.auth.mode == "none" and not _loopback(self.host):
            log.warning("shoal.metrics.listener is on %s, not loopback, without authentication: anyone who "
                        "reaches it sees every tenant id and client id (set shoal.metrics.authentication=basic "
                        "or bind it to 127.0.0.1)", self.host)

    async def stop(self) -> None:
        probe = getattr(self.broker, "loop_lag", None)
        if probe is not None:
            await probe.stop()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    @staticmethod
    def _text(status: int, text: str, headers: dict[str, str] | None = None) -> web.Response:
        return web.Response(status=status, text=text, headers=headers)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Authentication first (as before any path or method check), then the route; aiohttp's
        own refusals as plain text."""
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        try:
            await self.auth.check_super_user(request.headers, f"{peer[0]}:{peer[1]}" if peer else "?")
        except AuthError as e:
            auth = {"WWW-Authenticate": 'Basic realm="shoal"'} if e.status == 401 else None
            return self._text(e.status, f"{e.message}\n", auth)
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return self._text(404, "not found: try /metrics\n")
        except web.HTTPException as e:
            return self._text(e.status, f"{e.reason.lower()}\n")
        except Exception:
            log.exception("metrics request failed")
            return self._text(500, "internal error\n")

    async def _metrics(self, request: web.Request) -> web.Response:
        if request.method not in ("GET", "HEAD"):
            return self._text(405, "GET only\n", {"Allow": "GET"})
        return web.Response(body=render(self.broker), headers={"Content-Type": CONTENT_TYPE_LATEST})
