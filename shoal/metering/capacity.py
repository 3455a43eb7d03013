"""``shoal capacity report``: how close each broker is to its capacity, who drives it, how many
brokers the load needs, and which partitions to move (docs/metering.md).

Input: the pipeline's tables (``shoal metering run --output DIR``): ``broker_usage`` (per broker and
usage window), ``tenant_usage`` (per broker window and tenant) and ``hourly_usage``.

Capacity, per broker (the multi-tenancy document's "Capacity planning" model):

* producer: the sustained disk write capacity divided by the replication factor — every byte a
  leader takes in is written RF times in the cluster, so on a balanced cluster a broker can take
  ``write / RF`` from producers;
* consumer: the read capacity less what replication reads (``bytes_in x (RF - 1)`` of the window:
  followers fetch what the leader took in);
* requests: request time per second of window, against the request-handling time the broker has
  (``request_threads``: 1 for Shoal's one event loop). Request time is the requests' time on the
  broker's thread (what the KIP-124 request quota charges; ``shoal.metering.counters``), not the
  time they were outstanding: a long-polling Fetch waits most of its life, and counted whole, an
  idle cluster's followers made every broker look twice over capacity.

A window's utilization is the largest of the three ratios; a broker's peak and p95 are taken over
its windows. Headroom is ``1 - p95``. A broker is *hot* when its p95 is above ``1 - target
headroom``. The recommended broker count carries the cluster's p95 load (the sum over brokers, per
instant, in broker-capacities) with the target headroom: ``ceil(load / (1 - headroom))``, at least
the replication factor.

The move plan (with ``--bootstrap-server``: the partitions and their replicas from a live cluster)
moves leaders' load from hot brokers to the least loaded ones: a partition's load is its tenant's
bytes on that broker split evenly over the tenant's partitions the broker leads (usage is metered
per tenant and broker, not per partition). Greedy, heaviest first, until the hot broker is under
the target or nothing fits. The plan is Kafka's reassignment JSON (``kafka-reassign-partitions.sh
--execute`` / ``shoal`` AlterPartitionReassignments): the target replaces the hot broker in the
replica list and comes first (the preferred leader).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from shoal.cluster.balancer.expansion import percentile, recommended_brokers

MB = 10**6


@dataclass(frozen=True)
class Capacity:
    """One broker's capacity. Rates in bytes/s."""

    disk_write_bps: float
    read_bps: float
    replication_factor: int = 3
    request_threads: float = 1.0

    @property
    def producer_bps(self) -> float:
        return self.disk_write_bps / max(1, self.replication_factor)

    def consumer_bps(self, bytes_in_bps: float) -> float:
        return max(self.read_bps - bytes_in_bps * (max(1, self.replication_factor) - 1), 1.0)


def utilization(cap: Capacity, seconds: float, bytes_in: int, bytes_out: int, request_time_us: int) -> dict[str, float]:
    """The three ratios and their maximum (``util``) of one broker window."""
    s = max(seconds, 1e-3)
    b_in, b_out = bytes_in / s, bytes_out / s
    produce = b_in / cap.producer_bps
    consume = b_out / cap.consumer_bps(b_in)
    requests = request_time_us / 1e6 / s / cap.request_threads
    return {"produce": produce, "consume": consume, "requests": requests, "util": max(produce, consume, requests)}


@dataclass
class Move:
    topic: str
    partition: int
    replicas_before: tuple[int, ...]
    replicas: tuple[int, ...]
    load: float


def plan_moves(
    broker_load: Mapping[int, float],
    partitions: Iterable[tuple[str, int, tuple[int, ...], float]],
    limit: float,
) -> list[Move]:
    """Moves of led partitions ``(topic, index, replicas (leader first), load)`` off brokers whose
    load is above ``limit`` onto the least loaded broker that is not yet a replica and stays at or
    under ``limit`` with it. Pure; deterministic (heaviest partition first, ties by name)."""
    load = dict(broker_load)
    by_leader: dict[int, list[tuple[str, int, tuple[int, ...], float]]] = {}
    for p in partitions:
        if p[2]:
            by_leader.setdefault(p[2][0], []).append(p)
    moves: list[Move] = []
    for hot in sorted(load, key=lambda b: (-load[b], b)):
        if load[hot] <= limit:
            continue
        for topic, index, replicas, pl in sorted(by_leader.get(hot, []), key=lambda p: (-p[3], p[0], p[1])):
            if load[hot] <= limit or pl <= 0:
                break
            targets = sorted((b for b in load if b not in replicas and load[b] + pl <= limit),
                             key=lambda b: (load[b], b))
            if not targets:
                continue
            to = targets[0]
            new = (to, *(r for r in replicas if r != hot))
            moves.append(Move(topic, index, replicas, new, pl))
            load[hot] -= pl
            load[to] += pl
    return moves


def reassignment_json(moves: Sequence[Move]) -> dict[str, Any]:
    return {"version": 1, "partitions": [{"topic": m.topic, "partition": m.partition, "replicas": list(m.replicas),
                                          "log_dirs": ["any"] * len(m.replicas)} for m in moves]}


def measure_disk_write(directory: str, size_mb: int = 64) -> float:
    """Sequential write + fsync throughput of ``directory`` in bytes/s (a measured capacity)."""
    block = os.urandom(1 << 20)
    fd, path = tempfile.mkstemp(prefix="shoal-capacity-", dir=directory)
    try:
        t0 = time.perf_counter()
        with os.fdopen(fd, "wb") as f:
            for _ in range(size_mb):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        return size_mb * (1 << 20) / (time.perf_counter() - t0)
    finally:
        os.unlink(path)


# -- the report ----------------------------------------------------------------------------


def _read(path: Path) -> list[dict[str, Any]]:
    from shoal.metering.tables import read_rows

    return read_rows(path)


@dataclass
class BrokerStats:
    broker: int
    windows: int = 0
    peak: float = 0.0
    p95: float = 0.0
    peak_produce: float = 0.0
    peak_consume: float = 0.0
    peak_requests: float = 0.0
    partitions_led: int = 0
    top_tenants: list[tuple[str, float]] = field(default_factory=list)  # (tenant, share of its bytes)

    @property
    def headroom(self) -> float:
        return 1.0 - self.p95


@dataclass
class Report:
    brokers: list[BrokerStats]
    series: dict[int, list[tuple[int, float]]]  # broker -> [(window_end ms, util)]
    tenant_hours: dict[str, list[tuple[Any, int]]]  # tenant -> [(hour, bytes in + out)]
    throttle: dict[str, int]  # tenant -> throttle time ms
    throttle_hours: dict[str, list[tuple[Any, int]]]
    cluster_p95: float
    recommended: int
    capacity: Capacity
    headroom: float
    moves: list[Move]
    plan_note: str
    hosts: dict[str, list[int]] | None = None  # host (broker.host) -> its brokers (processes); None: unknown

    def hosts_line(self) -> str:
        """``2 hosts: a 2 processes, b 2 processes`` (processes per host), or why it is not known."""
        if self.hosts is None:
            return "processes per host unknown (give --bootstrap-server)"
        per = ", ".join(f"{h} {len(b)} process{'es' * (len(b) != 1)}" for h, b in sorted(self.hosts.items()))
        return f"{len(self.hosts)} host{'s' * (len(self.hosts) != 1)}: {per}"


def analyse(usage_dir: Path, cap: Capacity, headroom: float,
            partitions: Iterable[tuple[str, int, tuple[int, ...]]] | None = None,
            tenant_of: Any = None, hosts: Mapping[int, str] | None = None) -> Report:
    """The report's numbers from the pipeline's tables (``partitions``: a live cluster's led
    partitions for the move plan; ``tenant_of(topic)`` gives a topic's tenant id or "";
    ``hosts``: each live broker's host, to count the broker processes per host)."""
    windows = _read(usage_dir / "broker_usage")
    tenant_rows = _read(usage_dir / "tenant_usage")
    hourly = _read(usage_dir / "hourly_usage")
    series: dict[int, list[tuple[int, float]]] = {}
    stats: dict[int, BrokerStats] = {}
    at: dict[int, float] = {}  # window end (s) -> summed utilization over brokers
    for w in sorted(windows, key=lambda r: (r["broker"], r["window_end"])):
        seconds = (w["window_end"] - w["window_start"]) / 1000
        if seconds <= 0:
            continue
        u = utilization(cap, seconds, w["bytes_in"] or 0, w["bytes_out"] or 0, w["request_time_us"] or 0)
        b = w["broker"]
        s = stats.setdefault(b, BrokerStats(b))
        s.windows += 1
        s.peak_produce = max(s.peak_produce, u["produce"])
        s.peak_consume = max(s.peak_consume, u["consume"])
        s.peak_requests = max(s.peak_requests, u["requests"])
        s.partitions_led = w["partitions_led"] or 0
        series.setdefault(b, []).append((w["window_end"], u["util"]))
        key = round(w["window_end"] / 1000 / 10)  # brokers' windows are not aligned: 10 s buckets
        at[key] = at.get(key, 0.0) + u["util"]
    for b, s in stats.items():
        values = [v for _t, v in series[b]]
        s.peak = max(values)
        s.p95 = percentile(values, 95)
    # who drives each broker: tenants' share of its bytes
    per_broker: dict[int, dict[str, int]] = {}
    for r in tenant_rows:
        d = per_broker.setdefault(r["broker"], {})
        d[r["tenant"]] = d.get(r["tenant"], 0) + (r["bytes_in"] or 0) + (r["bytes_out"] or 0)
    for b, s in stats.items():
        d = per_broker.get(b, {})
        total = sum(d.values()) or 1
        s.top_tenants = sorted(((t, n / total) for t, n in d.items() if n), key=lambda x: -x[1])[:5]
    tenant_hours: dict[str, list[tuple[Any, int]]] = {}
    throttle_hours: dict[str, list[tuple[Any, int]]] = {}
    throttle: dict[str, int] = {}
    for r in sorted(hourly, key=lambda r: r["hour_start"]):
        t = r["tenant"]
        if t == "":
            continue
        tenant_hours.setdefault(t, []).append((r["hour_start"], (r["bytes_in"] or 0) + (r["bytes_out"] or 0)))
        throttle_hours.setdefault(t, []).append((r["hour_start"], r["throttle_time_ms"] or 0))
        throttle[t] = throttle.get(t, 0) + (r["throttle_time_ms"] or 0)
    cluster_p95 = percentile(list(at.values()), 95)
    recommended = recommended_brokers(cluster_p95, headroom, cap.replication_factor)
    limit = 1.0 - headroom
    moves: list[Move] = []
    if partitions is None:
        note = "no move plan: give --bootstrap-server to plan partition moves on the live cluster"
    else:
        parts = list(partitions)
        loads = _partition_loads(parts, per_broker, stats, cap, tenant_of or (lambda t: ""))
        broker_load = {b: s.p95 for b, s in stats.items()}
        for _t, _i, replicas in parts:
            for r in replicas:
                broker_load.setdefault(r, 0.0)
        moves = plan_moves(broker_load, loads, limit)
        note = (f"{len(moves)} partition move{'s bring' if len(moves) > 1 else ' brings'} the hot brokers to at most "
                f"{limit:.0%} p95 utilization"
                if moves else "no move needed (or none fits under the target)")
    return Report(sorted(stats.values(), key=lambda s: s.broker), series, tenant_hours, throttle, throttle_hours,
                  cluster_p95, recommended, cap, headroom, moves, note, processes_per_host(hosts))


def processes_per_host(hosts: Mapping[int, str] | None) -> dict[str, list[int]] | None:
    """host -> the brokers on it (``shoal serve --processes`` runs several per host), ids sorted."""
    if hosts is None:
        return None
    out: dict[str, list[int]] = {}
    for b, h in sorted(hosts.items()):
        out.setdefault(h, []).append(b)
    return out


def _partition_loads(parts, per_broker, stats, cap, tenant_of) -> list[tuple[str, int, tuple[int, ...], float]]:
    """A led partition's share of its leader's p95 utilization: the tenant's byte share on that
    broker, split over the tenant's partitions the broker leads."""
    counts: dict[tuple[int, str], int] = {}
    for topic, _i, replicas in parts:
        if replicas:
            k = (replicas[0], tenant_of(topic))
            counts[k] = counts.get(k, 0) + 1
    out = []
    for topic, index, replicas in parts:
        if not replicas or replicas[0] not in stats:
            out.append((topic, index, tuple(replicas), 0.0))
            continue
        leader, tenant = replicas[0], tenant_of(topic)
        d = per_broker.get(leader, {})
        share = d.get(tenant, 0) / (sum(d.values()) or 1)
        out.append((topic, index, tuple(replicas), stats[leader].p95 * share / counts[(leader, tenant)]))
    return out


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _line_figure(lines: Mapping[str, Sequence[tuple[Any, float]]], title: str, ylabel: str, *,
                 marker: str | None = "o", target: float | None = None, pad: Any = None,
                 empty: str = "no data") -> Any:
    """A matplotlib figure of ``lines`` (label -> [(datetime, value)]). The time axis runs from the
    first point to the last, ``pad`` (a timedelta) either side: matplotlib widens a date axis whose
    points are all one instant to four years (one hour of hourly data was drawn over 2025-2029).
    With no point at all the axes say ``empty`` instead of being blank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.set_title(title)
    drawn = {label: pts for label, pts in lines.items() if pts}
    if not drawn:
        ax.text(0.5, 0.5, empty, transform=ax.transAxes, ha="center", va="center", fontsize=14, color="#777")
        ax.set_xticks([])
        ax.set_yticks([])
        return fig
    for label, pts in drawn.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=label, linewidth=1)
    if target is not None:
        ax.axhline(target, color="red", linestyle="--", linewidth=1, label="target")
    xs = [p[0] for pts in drawn.values() for p in pts]
    if pad is not None:
        ax.set_xlim(min(xs) - pad, max(xs) + pad)
    ax.set_ylabel(ylabel)
    ax.legend(loc="upper left", fontsize=8)
    fig.autofmt_xdate()
    return fig


def figures(r: Report) -> dict[str, Any]:
    """The report's three plots as matplotlib figures: usage per tenant over time (a point per
    hour, half an hour of margin), broker utilization (a point per usage window), throttle time."""
    import datetime as dt

    def utc(ms: int) -> Any:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)

    half_hour, minute = dt.timedelta(minutes=30), dt.timedelta(minutes=1)
    no_tenants = "no data: no tenant usage yet"
    return {
        "usage": _line_figure({t: [(h, n / MB) for h, n in pts] for t, pts in sorted(r.tenant_hours.items())},
                              "Usage per tenant (MB in + out per hour)", "MB", pad=half_hour, empty=no_tenants),
        "utilization": _line_figure({f"broker {b}": [(utc(t), u * 100) for t, u in pts]
                                     for b, pts in sorted(r.series.items())},
                                    "Broker utilization (% of capacity, per usage window)", "%", marker=None,
                                    target=(1 - r.headroom) * 100, pad=minute, empty="no data: no broker usage yet"),
        "throttle": _line_figure({t: [(h, ms / 1000) for h, ms in pts] for t, pts in sorted(r.throttle_hours.items())},
                                 "Throttle time per tenant (s per hour)", "s", pad=half_hour, empty=no_tenants),
    }


def plots(r: Report) -> dict[str, str]:
    """The three plots of ``figures`` as PNGs (base64)."""
    return {name: _png(fig) for name, fig in figures(r).items()}


def render_html(r: Report) -> str:
    esc = html.escape
    imgs = plots(r)
    limit = 1 - r.headroom
    rows = []
    for s in r.brokers:
        hot = s.p95 > limit
        tenants = ", ".join(f"{esc(t or '(physical)')} {share:.0%}" for t, share in s.top_tenants) or "-"
        rows.append(
            f"<tr class='{'hot' if hot else ''}'><td>{s.broker}</td><td>{s.windows}</td><td>{s.peak:.1%}</td>"
            f"<td>{s.p95:.1%}</td><td>{s.headroom:.1%}</td><td>{s.peak_produce:.1%}</td><td>{s.peak_consume:.1%}</td>"
            f"<td>{s.peak_requests:.1%}</td><td>{s.partitions_led}</td><td>{'HOT' if hot else 'ok'}</td>"
            f"<td>{tenants}</td></tr>")
    throttle_rows = "".join(f"<tr><td>{esc(t)}</td><td>{ms / 1000:.1f}</td></tr>"
                            for t, ms in sorted(r.throttle.items(), key=lambda x: -x[1])) or \
        "<tr><td colspan='2'>no tenant usage yet</td></tr>"
    plan = json.dumps(reassignment_json(r.moves), indent=2)
    cap = r.capacity
    p95 = {s.broker: s.p95 for s in r.brokers}
    host_rows = "".join(
        f"<tr><td>{esc(h)}</td><td>{len(bs)}</td><td>{', '.join(map(str, bs))}</td>"
        f"<td>{sum(p95.get(b, 0.0) for b in bs):.2f}</td></tr>" for h, bs in sorted((r.hosts or {}).items())) or \
        "<tr><td colspan='4'>unknown: give --bootstrap-server</td></tr>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Shoal capacity report</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; margin: 8px 0 16px; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
th {{ background: #f0f0f0; }} td:last-child, td:first-child {{ text-align: left; }}
tr.hot td {{ background: #fde2e2; }}
pre {{ background: #f6f6f6; padding: 8px; max-height: 320px; overflow: auto; }}
.summary {{ font-size: 1.1em; }}
</style></head><body>
<h1>Shoal capacity report</h1>
<p class="summary">Cluster p95 load: <b>{r.cluster_p95:.2f}</b> broker-capacities over {len(r.brokers)} brokers.
Recommended broker count for {r.headroom:.0%} headroom: <b id="recommended">{r.recommended}</b>.</p>
<p>Capacity per broker: disk write {cap.disk_write_bps / MB:.0f} MB/s / replication factor {cap.replication_factor}
= producer {cap.producer_bps / MB:.1f} MB/s; read {cap.read_bps / MB:.0f} MB/s less replication reads;
request handling {cap.request_threads:g} thread(s).</p>
<h2>Brokers</h2>
<table id="brokers"><tr><th>broker</th><th>windows</th><th>peak</th><th>p95</th><th>headroom</th><th>peak produce</th>
<th>peak consume</th><th>peak requests</th><th>partitions led</th><th>state</th><th>tenants driving it (share of bytes)</th></tr>
{''.join(rows)}</table>
<h2>Hosts</h2>
<p>Brokers on one host (<code>shoal serve --processes</code>) share its disks, network and cores: the capacities
above are per broker, so give each the host's capacity divided by its processes.</p>
<table id="hosts"><tr><th>host</th><th>processes</th><th>brokers</th><th>p95 load (broker-capacities)</th></tr>
{host_rows}</table>
<h2>Broker utilization</h2><img id="plot-utilization" alt="broker utilization" src="data:image/png;base64,{imgs['utilization']}">
<h2>Usage per tenant</h2><img id="plot-usage" alt="usage per tenant" src="data:image/png;base64,{imgs['usage']}">
<h2>Throttling per tenant</h2><img id="plot-throttle" alt="throttle time per tenant" src="data:image/png;base64,{imgs['throttle']}">
<table id="throttle"><tr><th>tenant</th><th>throttle time (s)</th></tr>{throttle_rows}</table>
<h2>Partition moves</h2><p>{esc(r.plan_note)}</p>
<pre id="plan">{esc(plan)}</pre>
</body></html>
"""
