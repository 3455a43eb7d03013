"""What the operator's pages read: the physical cluster, as a super user.

Where Kafka has an API the console asks it over the protocol, as the logged-in super user (the
session's client): Metadata (brokers, racks, the controller, every partition's leader, replicas,
ISR and offline replicas), DescribeConfigs (each broker's ``broker.host``; the topics'
``replica.placement``, ``min.insync.replicas`` and ``min.insync.racks``), DescribeClientQuotas
(the tenants' quotas), ListPartitionReassignments. What only Shoal has (tenants and their cells,
the brokers' load reports against their capacity, the balancer) comes from the admin API, through
an :class:`AdminApi`: over HTTP with the user's own credentials (HTTP Basic, so the admin API
decides what a user may call, as for ``curl``), or in process when the console is mounted on the
broker's admin listener. The stretch advisor (``shoal.placement.stretch``) is computed here from
what Metadata and DescribeConfigs say, as ``shoal placement check --topic`` does.

The functions take an :class:`~shoal.client.AdminClient` and return plain values for the
templates (``shoal.console.operator``); they never see HTTP requests.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol
from urllib.parse import quote, unquote, urlsplit

from shoal.client import RESOURCE_BROKER, RESOURCE_TOPIC, AdminClient, ClusterMetadata, ConfigEntry, KafkaError, TopicDescription
from shoal.cli.common import broker_hosts
from shoal.console import kafka
from shoal.placement.constraints import PlacementSpecError, parse_placement
from shoal.placement.stretch import Advice, Layout, advise

MATCH_ANY = 2  # DescribeClientQuotas: any entity of the type
TOPIC_KEYS = ("replica.placement", "min.insync.replicas", "min.insync.racks")
CELL_KEYS = ("shoal.tenant.cell.brokers", "shoal.tenant.cell.racks")
ISR_CHANGES_KEPT = 200


class AdminApiError(Exception):
    """The admin API refused a call (its status and one line), or could not be reached (status 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class PartlyCreated(AdminApiError):
    """A tenant was created but its first administrator was refused."""


class AdminApi(Protocol):
    async def call(self, user: str, password: str, method: str, path: str, body: Any = None) -> Any:
        """The JSON answer of ``method path`` as ``user``; AdminApiError for an error answer."""

    async def close(self) -> None: ...


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


class HttpAdminApi:
    """The admin API at ``base_url`` (``shoal.admin.listener``), called with HTTP Basic as the
    logged-in user: with ``shoal.admin.authentication=basic`` the admin API checks the user's
    SCRAM credential and lets only super users call the cluster's endpoints."""

    def __init__(self, base_url: str, ssl: Any = None, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.ssl = ssl
        self.timeout_s = timeout_s
        self._http: Any = None

    async def call(self, user: str, password: str, method: str, path: str, body: Any = None) -> Any:
        import aiohttp

        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s), trust_env=False)
        try:
            async with self._http.request(method, self.base_url + path, json=body, ssl=self.ssl,
                                          headers=_basic(user, password)) as r:
                text = await r.text()
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise AdminApiError(0, f"the admin API at {self.base_url} did not answer ({type(e).__name__})") from None
        try:
            answer = json.loads(text) if text.strip() else {}
        except ValueError:
            answer = {"message": text.strip()[:200]}
        if r.status >= 400:
            raise AdminApiError(r.status, str(answer.get("message") or answer.get("error") or r.reason))
        return answer

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None


class InProcessAdminApi:
    """The admin API's own handlers, in process (``AdminHttpServer.route``), for a console mounted
    on the broker's admin listener, as ``user``: the caller is what ``HttpAuth.authorize`` decides
    for that user (authenticated by its console login), whatever ``shoal.admin.authentication``
    says: a super user is the operator, a tenant's administrator may call its own tenant's paths,
    anyone else nothing (403). ``path`` may carry a query string."""

    def __init__(self, server: Any) -> None:
        self.server = server

    async def call(self, user: str, password: str, method: str, path: str, body: Any = None) -> Any:
        from shoal.admin.http_auth import AuthError
        from shoal.admin.http_errors import HttpError

        path, _, query = path.partition("?")
        raw = json.dumps(body).encode() if body is not None else b""
        try:
            caller = self.server.auth.authorize(user, method, [unquote(s) for s in path.strip("/").split("/")])
            _status, answer = await self.server.route(method, path, raw, query, caller)
        except (AuthError, HttpError) as e:
            raise AdminApiError(e.status, e.message) from None
        return answer

    async def close(self) -> None:
        pass


# -- brokers --------------------------------------------------------------------------------------

@dataclass
class BrokerRow:
    node: int
    host: str | None
    port: int | None
    rack: str | None
    online: bool  # registered (in Metadata)
    controller: bool
    leaders: int = 0
    replicas: int = 0
    observers: int = 0
    load: dict[str, Any] | None = None  # its report in GET /v1/cluster/load


@dataclass
class PartitionIssue:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    missing: tuple[int, ...]  # sync replicas out of the ISR
    offline: tuple[int, ...]


@dataclass
class TopicHealth:
    name: str
    internal: bool
    partitions: int
    replication_factor: int
    observers: int
    under_replicated: int
    offline: int


@dataclass
class IsrChange:
    at_ms: int
    topic: str
    partition: int
    before: tuple[int, ...]
    after: tuple[int, ...]


@dataclass
class ClusterView:
    cluster_id: str | None
    controller: int
    brokers: list[BrokerRow]
    topics: list[TopicHealth]
    under_replicated: list[PartitionIssue]
    offline: list[PartitionIssue]
    partitions: int
    load_error: str | None
    stale: list[int] = field(default_factory=list)


@dataclass
class TopicInfo:
    """A topic's partitions and the three configs the operator's pages use."""

    topic: TopicDescription
    configs: Mapping[str, ConfigEntry]

    @property
    def n_observers(self) -> int:
        return kafka.observer_count(self.configs)

    def observers(self, replicas: tuple[int, ...]) -> tuple[int, ...]:
        n = self.n_observers
        return replicas[len(replicas) - n:] if n else ()

    def int_config(self, key: str) -> int:
        entry = self.configs.get(key)
        try:
            return int(entry.value) if entry is not None and entry.value else 1
        except ValueError:
            return 1

    @property
    def promotion(self) -> str | None:
        entry = self.configs.get("replica.placement")
        if entry is None or not entry.value:
            return None
        try:
            return parse_placement(entry.value).promotion
        except PlacementSpecError:
            return None


def physical_topics(md: ClusterMetadata) -> list[TopicDescription]:
    return [t for _, t in sorted(md.topics.items()) if isinstance(t, TopicDescription)]


async def topic_infos(client: AdminClient, md: ClusterMetadata) -> list[TopicInfo]:
    """Every topic with its placement configs (one DescribeConfigs; a topic it refuses has none)."""
    topics = physical_topics(md)
    if not topics:
        return []
    got = await client.describe_configs([(RESOURCE_TOPIC, t.name) for t in topics], keys=TOPIC_KEYS,
                                        raise_errors=False)
    out = []
    for t in topics:
        entries = got.get((RESOURCE_TOPIC, t.name))
        out.append(TopicInfo(t, entries if isinstance(entries, dict) else {}))
    return out


class IsrWatch:
    """ISR changes the console saw between two reads of the cluster's Metadata by an operator's
    page (Kafka keeps no history of them): the last ``ISR_CHANGES_KEPT``, newest first; and each
    broker's host, port and rack as last seen (a broker that is down is not in Metadata)."""

    def __init__(self, clock: Any = time.time) -> None:
        self.clock = clock
        self.last: dict[tuple[str, int], tuple[int, ...]] = {}
        self.changes: deque[IsrChange] = deque(maxlen=ISR_CHANGES_KEPT)
        self.brokers: dict[int, tuple[str, int, str | None]] = {}

    def saw(self, md: ClusterMetadata) -> None:
        now = int(self.clock() * 1000)
        self.brokers.update(md.brokers)
        current = {(t.name, p.partition): tuple(p.isr) for t in physical_topics(md) for p in t.partitions}
        if self.last:
            for key, isr in sorted(current.items()):
                before = self.last.get(key)
                if before is not None and set(before) != set(isr):
                    self.changes.appendleft(IsrChange(now, key[0], key[1], before, isr))
        self.last = current


async def cluster_view(client: AdminClient, admin: AdminApi | None, user: str, password: str,
                       watch: IsrWatch | None = None) -> tuple[ClusterView, list[TopicInfo], ClusterMetadata]:
    md = await client.metadata(None)
    if watch is not None:
        watch.saw(md)
    infos_task = asyncio.ensure_future(topic_infos(client, md))
    hosts_task = asyncio.ensure_future(broker_hosts(client, md.brokers))
    load, load_error = await cluster_load(admin, user, password)
    infos, hosts = await infos_task, await hosts_task
    rows: dict[int, BrokerRow] = {
        n: BrokerRow(n, hosts.get(n, h), p, r, True, n == md.controller_id) for n, (h, p, r) in md.brokers.items()}
    topics, under, offline = [], [], []
    partitions = 0
    for info in infos:
        t = info.topic
        t_under = t_off = 0
        for p in t.partitions:
            partitions += 1
            obs = info.observers(p.replicas)
            for r in p.replicas:
                if r not in rows:  # a replica on a broker that is not registered: down
                    h, port, rack = watch.brokers.get(r, (None, None, None)) if watch is not None else (None, None, None)
                    rows[r] = BrokerRow(r, h, port, rack, False, False)
                row = rows[r]
                row.replicas += 1
                row.observers += r in obs
            if p.leader in rows:
                rows[p.leader].leaders += 1
            missing = tuple(r for r in p.replicas if r not in obs and r not in p.isr)
            issue = PartitionIssue(t.name, p.partition, p.leader, p.replicas, p.isr, missing, p.offline_replicas)
            if p.leader < 0:
                offline.append(issue)
                t_off += 1
            elif missing:
                under.append(issue)
                t_under += 1
        topics.append(TopicHealth(t.name, t.internal, len(t.partitions), t.replication_factor, info.n_observers,
                                  t_under, t_off))
    stale: list[int] = []
    if load is not None:
        for b in load.get("brokers", []):
            if b.get("node_id") in rows:
                rows[b["node_id"]].load = b
        stale = list(load.get("stale_brokers", []))
    return (ClusterView(md.cluster_id, md.controller_id, [rows[n] for n in sorted(rows)], topics, under, offline,
                        partitions, load_error, stale), infos, md)


async def admin_get(admin: AdminApi | None, user: str, password: str,
                    path: str) -> tuple[dict[str, Any] | None, str | None]:
    """The admin API's answer to GET ``path``, or why not (one line) for the page to say."""
    if admin is None:
        return None, "the console was started without the admin API (--admin-api)"
    try:
        return await admin.call(user, password, "GET", path), None
    except AdminApiError as e:
        return None, f"{e.status or 'no answer'}: {e.message}"


async def cluster_load(admin: AdminApi | None, user: str, password: str) -> tuple[dict[str, Any] | None, str | None]:
    return await admin_get(admin, user, password, "/v1/cluster/load")


def utilization(load: Mapping[str, Any] | None) -> dict[str, float | None]:
    """A broker's load over its capacity, each a fraction (None: capacity unknown)."""
    if not load:
        return {}
    cap = load.get("capacity", {})

    def share(used: float, of: float) -> float | None:
        return used / of if of else None

    return {"disk": share(cap.get("disk_used_bytes", 0), cap.get("disk_bytes", 0)),
            "network_in": share(load.get("bytes_in_per_second", 0), cap.get("network_in_bytes_per_second", 0)),
            "network_out": share(load.get("bytes_out_per_second", 0) + load.get("replication_bytes_out_per_second", 0),
                                 cap.get("network_out_bytes_per_second", 0))}


# -- tenants --------------------------------------------------------------------------------------

@dataclass
class TenantRow:
    tenant_id: str
    display_name: str
    created_ms: int
    users: list[str]
    admins: list[str]
    cell: str
    quotas: dict[str, float]
    bytes_in: int = 0  # bytes/s now, summed over its partitions' leaders' reports
    bytes_out: int = 0
    size: int = 0
    topics: int = 0
    top: list[tuple[str, int, int]] = field(default_factory=list)  # (topic, bytes in/s, bytes out/s)
    throttle: dict[str, float] = field(default_factory=dict)  # produce|fetch -> the longest throttle now (ms)
    # this month's usage and cost: GET /v1/tenants/{id}/usage's answer (tenant_usages), or why not
    usage: dict[str, Any] | None = None
    usage_error: str | None = None


def tenant_of(topic: str) -> tuple[str, str] | None:
    """(tenant id, the tenant's name for it) of a stored topic name ``lkc-xxxxxx_name``."""
    if topic.startswith("lkc-"):
        tenant, sep, name = topic.partition("_")
        if sep:
            return tenant, name
    return None


THROTTLE_MAX = re.compile(r'^shoal_(produce|fetch)_throttle_time_max\{([^}]*)\} (\S+)$', re.M)
TENANT_LABEL = re.compile(r'(?:^|,)tenant="([^"]*)"')


async def metrics_urls(client: AdminClient, md: ClusterMetadata) -> dict[int, str]:
    """Each broker's Prometheus endpoint, from its ``shoal.metrics.listener`` (DescribeConfigs
    to the broker); a host left out or 0.0.0.0 is the broker's advertised host."""

    async def one(node: int, host: str) -> tuple[int, str | None]:
        try:
            got = await client.describe_configs([(RESOURCE_BROKER, str(node))], keys=["shoal.metrics.listener"],
                                                raise_errors=False, node_id=node)
        except KafkaError:
            return node, None
        entries = got.get((RESOURCE_BROKER, str(node)))
        entry = entries.get("shoal.metrics.listener") if isinstance(entries, dict) else None
        value = (entry.value or "").strip() if entry is not None else ""
        if not value:
            return node, None
        u = urlsplit(value if "//" in value else f"http://:{value.lstrip(':')}")
        try:
            port = u.port
        except ValueError:
            return node, None
        there = u.hostname if u.hostname not in (None, "", "0.0.0.0", "::") else host
        return node, f"http://{there}:{port}/metrics" if port else None

    found = await asyncio.gather(*(one(n, h) for n, (h, _p, _r) in md.brokers.items()))
    return {n: u for n, u in found if u}


async def tenant_throttles(urls: Mapping[int, str], user: str, password: str,
                           timeout_s: float = 5.0) -> tuple[dict[str, dict[str, float]], list[int]]:
    """Per tenant the longest produce and fetch throttle time now (ms, ``shoal_*_throttle_time_max``
    over every client of the tenant on every broker), read from each broker's /metrics as the user
    (HTTP Basic: ``shoal.metrics.authentication=basic`` lets super users only); and the brokers
    whose endpoint did not answer."""
    import aiohttp

    out: dict[str, dict[str, float]] = {}
    failed: list[int] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s), trust_env=False) as http:
        async def one(node: int, url: str) -> tuple[int, str | None]:
            try:
                async with http.get(url, headers=_basic(user, password)) as r:
                    return node, await r.text() if r.status == 200 else None
            except (aiohttp.ClientError, asyncio.TimeoutError):
                return node, None

        for node, text in await asyncio.gather(*(one(n, u) for n, u in sorted(urls.items()))):
            if text is None:
                failed.append(node)
                continue
            for kind, labels, value in THROTTLE_MAX.findall(text):
                m = TENANT_LABEL.search(labels)
                try:
                    ms = float(value)
                except ValueError:
                    continue
                if m and m.group(1) and ms == ms:  # (not NaN)
                    mine = out.setdefault(m.group(1), {})
                    mine[kind] = max(mine.get(kind, 0.0), ms)
    return out, failed


async def tenants_view(client: AdminClient, admin: AdminApi, user: str,
                       password: str) -> tuple[list[TenantRow], str | None, str | None]:
    listing = await admin.call(user, password, "GET", "/v1/tenants")
    tenants = listing.get("tenants", [])

    async def cell(tid: str) -> str:
        try:
            configs = (await admin.call(user, password, "GET", f"/v1/tenants/{quote(tid, safe='')}/configs"))["configs"]
        except (AdminApiError, KeyError):
            return "—"
        parts = [f"{what} {configs[key]}" for key, what in zip(CELL_KEYS, ("brokers", "racks")) if configs.get(key)]
        return "; ".join(parts) or "any broker"

    cells_task = asyncio.ensure_future(asyncio.gather(*(cell(t["tenant_id"]) for t in tenants)))
    quotas: dict[str, dict[str, float]] = {}
    try:
        found = await client.describe_client_quotas([("tenant", MATCH_ANY, None)])
        for entity, values in found.items():
            names = dict(entity)
            if set(names) == {"tenant"}:
                quotas[str(names["tenant"] if names["tenant"] is not None else "<default>")] = values
    except KafkaError:
        pass
    load, load_error = await cluster_load(admin, user, password)
    urls = await metrics_urls(client, await client.metadata([]))
    throttles, failed = await tenant_throttles(urls, user, password)
    throttle_note = ("no broker serves its metrics (shoal.metrics.listener)" if not urls else
                     f"the metrics of broker(s) {', '.join(map(str, failed))} did not answer" if failed else None)
    cells = await cells_task
    rows = {t["tenant_id"]: TenantRow(t["tenant_id"], t["display_name"], t.get("created_ms", 0), t.get("users", []),
                                      t.get("admins", []), c, quotas.get(t["tenant_id"], quotas.get("<default>", {})))
            for t, c in zip(tenants, cells)}
    by_topic: dict[tuple[str, str], list[int]] = {}
    for p in (load or {}).get("partitions", []):
        owner = tenant_of(p["topic"])
        if owner is None or owner[0] not in rows:
            continue
        acc = by_topic.setdefault(owner, [0, 0, 0])
        acc[0] += p.get("bytes_in_per_second", 0)
        acc[1] += p.get("bytes_out_per_second", 0)
        acc[2] += p.get("size_bytes", 0)
    for (tid, name), (bin_, bout, size) in by_topic.items():
        row = rows[tid]
        row.bytes_in += bin_
        row.bytes_out += bout
        row.size += size
        row.topics += 1
        row.top.append((name, bin_, bout))
    for row in rows.values():
        row.top = sorted(row.top, key=lambda t: (-(t[1] + t[2]), t[0]))[:3]
        row.throttle = throttles.get(row.tenant_id, {})
    return list(rows.values()), load_error, throttle_note


USAGE_CALLS = 16  # GET /v1/tenants/{id}/usage calls in flight at once for a page of tenants


async def tenant_usages(admin: AdminApi, user: str, password: str, rows: Iterable[TenantRow]) -> None:
    """Each row's usage this month, from ``GET /v1/tenants/{id}/usage`` as the operator: the
    metering tables when the pipeline has written them (the bill's cost too), else the answering
    broker's live counters. One call per tenant of the page shown (the page bounds them; each
    may read a month of Parquet tables on a thread of the broker), at most ``USAGE_CALLS`` at a
    time; a refused call leaves the row its reason."""
    gate = asyncio.Semaphore(USAGE_CALLS)

    async def one(row: TenantRow) -> None:
        async with gate:
            try:
                row.usage = await admin.call(user, password, "GET",
                                             f"/v1/tenants/{quote(row.tenant_id, safe='')}/usage")
            except AdminApiError as e:
                row.usage_error = f"{e.status or 'no answer'}: {e.message}"

    await asyncio.gather(*(one(r) for r in rows))


async def create_tenant(admin: AdminApi, user: str, password: str, display_name: str, admin_user: str,
                        admin_password: str) -> tuple[str, str]:
    """A tenant and its first administrator (POST /v1/tenants, then its users): (tenant id, the
    administrator's name as it logs in). The tenant stays if the user is refused (the page says so)."""
    tenant = await admin.call(user, password, "POST", "/v1/tenants", {"display_name": display_name})
    tid = tenant["tenant_id"]
    try:
        made = await admin.call(user, password, "POST", f"/v1/tenants/{quote(tid, safe='')}/users",
                                {"user": admin_user, "password": admin_password, "admin": True})
    except AdminApiError as e:
        raise PartlyCreated(e.status, f"tenant {tid} ({display_name}) was created, but not its administrator "
                                      f"{admin_user}: {e.message}") from None
    return tid, made.get("user", admin_user)


# -- multi-region ---------------------------------------------------------------------------------

@dataclass
class TopicPlacement:
    name: str
    partitions: int
    advice: list[tuple[Advice, list[int]]]  # per distinct layout, the advice and its partitions
    observers: list[tuple[int, tuple[int, ...], tuple[int, ...]]]  # (partition, observers, promoted)


def placements(infos: Iterable[TopicInfo], racks: Mapping[int, str | None]) -> list[TopicPlacement]:
    """Per topic its layouts over datacenters with the stretch advisor's answer for each, and its
    observers (an observer in the ISR is promoted)."""
    out = []
    for info in infos:
        t = info.topic
        groups: dict[tuple, tuple[Layout, list[int]]] = {}
        observers = []
        for p in t.partitions:
            obs = info.observers(p.replicas)
            layout = Layout.of(p.replicas, obs, racks)
            groups.setdefault(layout.key(), (layout, []))[1].append(p.partition)
            if obs:
                observers.append((p.partition, obs, tuple(o for o in obs if o in p.isr)))
        min_isr, min_racks, promotion = info.int_config("min.insync.replicas"), info.int_config("min.insync.racks"), \
            info.promotion
        advice = [(advise(layout, min_isr, min_racks, promotion), parts)
                  for layout, parts in sorted(groups.values(), key=lambda g: g[1][0])]
        out.append(TopicPlacement(t.name, len(t.partitions), advice, observers))
    return out


def datacenters(md: ClusterMetadata, replicas_of: Mapping[int, int]) -> list[tuple[str, list[int], int]]:
    """(rack, its registered brokers, replicas on them) per rack."""
    racks: dict[str, list[int]] = {}
    for node, (_h, _p, rack) in sorted(md.brokers.items()):
        racks.setdefault(rack or "(no rack)", []).append(node)
    return [(rack, nodes, sum(replicas_of.get(n, 0) for n in nodes)) for rack, nodes in sorted(racks.items())]


# -- balancer and reassignments -------------------------------------------------------------------

async def balancer_status(admin: AdminApi | None, user: str, password: str) -> tuple[dict[str, Any] | None, str | None]:
    return await admin_get(admin, user, password, "/v1/cluster/balancer")


async def reassignments(client: AdminClient) -> list[tuple[str, int, list[int], list[int], list[int]]]:
    """The reassignments in flight (ListPartitionReassignments): (topic, partition, replicas,
    adding, removing)."""
    found = await client.list_partition_reassignments()
    return [(t, p, v["replicas"], v["adding"], v["removing"]) for (t, p), v in sorted(found.items())]
