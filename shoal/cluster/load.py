"""Per-partition load and broker capacity: the balancer's inputs (issue 27, part 1).

What each broker measures. Every hosted ``Partition`` counts, as plain ints on the hot path, the
bytes it appended as leader (``bytes_in``: produce, and the coordinators' own writes), the bytes
it sent to consumers (``bytes_out``: a leader's, or a follower's serving consumers in its rack,
KIP-392) and the bytes it sent to followers and observers (``bytes_replicated``). Every
``shoal.balancer.load.interval.ms`` (10 s) the :class:`LoadReporter` samples those counters
(:class:`LoadMeter`) and computes each partition's rates over the last
``shoal.balancer.load.window.ms`` (60 s; until a window has passed since the broker started, over
the time since then), with the log size of every replica it hosts, and its own capacity
(:func:`measure_capacity`): disk size and use (``os.statvfs`` of its log directory's file system,
or ``shoal.balancer.capacity.disk.bytes`` when set: then the use is the size of its logs), the
configured network in/out and disk write rates (``shoal.balancer.capacity.*``, 0: unknown).

Exchange (the tenant-quota demand exchange's, :mod:`shoal.quotas.demand`). Each broker of an etcd
cluster puts one key, ``<prefix>.balancer-load/<node id>``, under its registration lease (it goes
when the broker does), beside the cluster prefix and outside the metadata watch's range, then reads
all brokers' keys with one range and keeps the :class:`ClusterLoad` they make
(:func:`read_cluster_load`): per broker its capacity, per partition its leader's rates and size, and
every replica's size. A report whose key has not changed for :data:`STALE_INTERVALS` intervals (by
this broker's clock) is left out, with one log line; an undecodable one too. On the embedded store
(one node) the broker's own report is the cluster's.

Encoding (:func:`encode_report`): versioned JSON, per topic (a topic's name once, then rows of
integers: a led partition ``[partition, leader epoch, bytes in/s, bytes out/s, replication out/s,
size]``, any other replica ``[partition, size, bytes out/s]``), compressed with zlib. 10,000
partitions take about 100 kB; a value that would still exceed :data:`MAX_VALUE_BYTES` (etcd refuses
requests over 1.5 MiB) keeps the led partitions with the most traffic and is marked truncated.

Single-threaded: the event loop (statvfs, encoding and decoding run in a thread, one at a time).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Mapping, Protocol, Sequence

from shoal.cluster.balancer.model import Capacity, PartitionLoad, TopicPartition
from shoal.etcd.client import DEFAULT_PREFIX
from shoal.etcd.client import why as etcd_why
from shoal.quotas.demand import Freshness, fresh_reports

if TYPE_CHECKING:
    from shoal.config import BrokerConfig
    from shoal.etcd.session import EtcdSession

log = logging.getLogger("shoal.cluster.load")

CODEC_VERSION = 1
# etcd refuses a request over 1.5 MiB (--max-request-bytes); a report stays well under it
MAX_VALUE_BYTES = 1_000_000
MAX_DECODED_BYTES = 64 * 1024 * 1024  # what a report may inflate to (zlib bombs are refused)
STALE_INTERVALS = 3  # a report unchanged this many intervals is stale
LOG_EVERY_S = 60.0


# -- what is measured -----------------------------------------------------------------------------

class _LogSize(Protocol):
    @property
    def size_bytes(self) -> int: ...


class HostedPartition(Protocol):
    """What the meter reads of a hosted partition (``shoal.replica.partition.Partition``)."""

    topic: str
    index: int
    bytes_in: int
    bytes_out: int
    bytes_replicated: int

    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def view(self) -> _LogSize | None: ...


@dataclass(frozen=True, slots=True)
class LedLoad:
    """A partition this broker leads: its rates (bytes/s over the window) and log size."""

    epoch: int
    bytes_in: float
    bytes_out: float
    replication_out: float
    size: int


@dataclass(frozen=True, slots=True)
class BrokerCapacity:
    """A broker's capacity as it reports it: 0 means unknown."""

    disk_bytes: int = 0
    disk_used: int = 0
    network_in: int = 0  # bytes/s
    network_out: int = 0
    disk_write: int = 0

    def capacity(self) -> Capacity:
        """The balancer's view (:class:`~shoal.cluster.balancer.model.Capacity`)."""
        return Capacity(disk=float(self.disk_bytes), nw_in=float(self.network_in), nw_out=float(self.network_out))


@dataclass(frozen=True)
class BrokerReport:
    """One broker's report. ``window_ms``: the span its rates cover; ``led``: the partitions it
    leads; ``sizes``: every replica it hosts (led ones too), bytes; ``follower_out``: bytes/s it
    served consumers from replicas it does not lead (KIP-392)."""

    node: int
    window_ms: int
    capacity: BrokerCapacity
    led: Mapping[TopicPartition, LedLoad] = field(default_factory=dict)
    sizes: Mapping[TopicPartition, int] = field(default_factory=dict)
    follower_out: Mapping[TopicPartition, float] = field(default_factory=dict)
    truncated: bool = False
    # the share of the window its event loop's thread was busy (CPU time of that thread per second:
    # the request-handling time the capacity model counts; 1.0 = the whole thread); None: unknown
    busy: float | None = None

    @property
    def bytes_in(self) -> float:
        return sum(v.bytes_in for v in self.led.values())

    @property
    def bytes_out(self) -> float:
        return sum(v.bytes_out for v in self.led.values()) + sum(self.follower_out.values())

    @property
    def replication_out(self) -> float:
        return sum(v.replication_out for v in self.led.values())

    @property
    def log_bytes(self) -> int:
        return sum(self.sizes.values())


class LoadMeter:
    """Rates from the partitions' counters: a sample per interval, the rates over the span from the
    newest sample at least ``window_ms`` old (or the oldest kept) to now. A partition missing from
    that sample was created after it, and one whose counters went down was made again: either way
    all of its counts fall in the span."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self._samples: deque[tuple[int, dict[TopicPartition, tuple[int, int, int]], float | None]] = deque()
        # a partition led here since a sample inside the window: (leader epoch, that sample's time,
        # its counts then); its rates are over the time since, not the whole window
        self._led_since: dict[TopicPartition, tuple[int, int, tuple[int, int, int]]] = {}

    def sample(self, now_ms: int, partitions: Iterable[HostedPartition], node: int, capacity: BrokerCapacity,
               busy_s: float | None = None) -> BrokerReport:
        """``busy_s``: the CPU seconds the event loop's thread has used so far (``time.thread_time``
        on it), for the report's ``busy``."""
        counts: dict[TopicPartition, tuple[int, int, int]] = {}
        led: dict[TopicPartition, LedLoad] = {}
        sizes: dict[TopicPartition, int] = {}
        follower_out: dict[TopicPartition, float] = {}
        samples = self._samples
        while len(samples) >= 2 and samples[1][0] <= now_ms - self.window_ms:
            samples.popleft()
        base_ms, base, base_busy = samples[0] if samples else (now_ms, {}, busy_s)
        last_ms, last = (samples[-1][0], samples[-1][1]) if samples else (now_ms, {})
        span_s = (now_ms - base_ms) / 1000.0
        led_since: dict[TopicPartition, tuple[int, int, tuple[int, int, int]]] = {}
        for p in partitions:
            view = p.view
            if view is None:
                continue
            key = (p.topic, p.index)
            now = counts[key] = (p.bytes_in, p.bytes_out, p.bytes_replicated)
            before, span = base.get(key, (0, 0, 0)), span_s
            if p.is_leader:
                # A leadership that began after the window's base sample: its counts from the
                # sample before the one that first saw it, over the time since (over the whole
                # window, a leadership moved here a second ago read as a tenth of its rate for a
                # window, and the balancer moved it, or others, again)
                # (one hosted here at that sample: a partition new here counts from zero over the
                # window, as before, so that rate x window is what it took in)
                since = self._led_since.get(key)
                if since is None or since[0] != p.leader_epoch:
                    since = (p.leader_epoch, last_ms, last[key]) if key in last else (p.leader_epoch, -1, (0, 0, 0))
                led_since[key] = since
                if since[1] > base_ms:
                    before, span = since[2], (now_ms - since[1]) / 1000.0
            if any(n < b for n, b in zip(now, before)):
                before = (0, 0, 0)
            rates = tuple((n - b) / span if span > 0 else 0.0 for n, b in zip(now, before))
            size = sizes[key] = view.size_bytes
            if p.is_leader:
                led[key] = LedLoad(p.leader_epoch, rates[0], rates[1], rates[2], size)
            elif rates[1] > 0:
                follower_out[key] = rates[1]
        samples.append((now_ms, counts, busy_s))
        self._led_since = led_since
        busy = None
        if busy_s is not None and base_busy is not None and span_s > 0:
            busy = max(0.0, busy_s - base_busy) / span_s
        return BrokerReport(node, now_ms - base_ms, capacity, led, sizes, follower_out, busy=busy)


def measure_capacity(config: BrokerConfig, log_dirs: Sequence[str], log_bytes: int) -> BrokerCapacity:
    """This broker's capacity: ``shoal.balancer.capacity.*``; the disk from ``os.statvfs`` of the
    log directories' file systems (each counted once) unless ``...disk.bytes`` is set, when the
    use is ``log_bytes`` (what its logs hold). A directory that cannot be read counts nothing."""
    configured = int(config.get("shoal.balancer.capacity.disk.bytes") or 0)
    total = used = 0
    if configured > 0:
        total, used = configured, log_bytes
    else:
        seen: set[int] = set()
        for d in log_dirs:
            try:
                dev = os.stat(d).st_dev
                st = os.statvfs(d)
            except OSError:
                continue
            if dev in seen:
                continue
            seen.add(dev)
            total += st.f_blocks * st.f_frsize
            used += (st.f_blocks - st.f_bfree) * st.f_frsize
    return BrokerCapacity(total, used, int(config.get("shoal.balancer.capacity.network.in.bytes.per.second") or 0),
                          int(config.get("shoal.balancer.capacity.network.out.bytes.per.second") or 0),
                          int(config.get("shoal.balancer.capacity.disk.write.bytes.per.second") or 0))


# -- the codec ------------------------------------------------------------------------------------

def _body(report: BrokerReport, led: Collection[TopicPartition], replicas: bool) -> bytes:
    topics: dict[str, dict[str, list[list[int]]]] = {}
    for key in sorted(led):
        v = report.led[key]
        topics.setdefault(key[0], {}).setdefault("l", []).append(
            [key[1], v.epoch, round(v.bytes_in), round(v.bytes_out), round(v.replication_out), v.size])
    if replicas:
        for key in sorted(report.sizes):
            if key not in report.led:
                topics.setdefault(key[0], {}).setdefault("r", []).append(
                    [key[1], report.sizes[key], round(report.follower_out.get(key, 0.0))])
    c = report.capacity
    body = {"v": CODEC_VERSION, "n": report.node, "w": report.window_ms,
            "c": [c.disk_bytes, c.disk_used, c.network_in, c.network_out, c.disk_write], "t": topics}
    if not replicas or len(led) < len(report.led):
        body["x"] = 1  # truncated
    if report.busy is not None:
        body["q"] = round(report.busy * 1e6)  # millionths of the loop's thread
    return zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 6)


def encode_report(report: BrokerReport, max_bytes: int = MAX_VALUE_BYTES) -> bytes:
    """A report -> the value of its broker's load key (see the module doc). Over ``max_bytes``:
    the other replicas' sizes go first, then the led partitions with the least traffic."""
    led: list[TopicPartition] = list(report.led)
    value = _body(report, led, True)
    if len(value) <= max_bytes:
        return value
    led.sort(key=lambda k: -(report.led[k].bytes_in + report.led[k].bytes_out))
    while True:
        value = _body(report, led, False)
        if len(value) <= max_bytes or not led:
            log.warning("the load report of %d partitions is over %d bytes: %d of %d led partitions reported",
                        len(report.sizes), max_bytes, len(led), len(report.led))
            return value
        led = led[:len(led) // 2]


def _ints(row: Any, n: int, what: str) -> list[int]:
    if not isinstance(row, list) or len(row) != n or any(type(x) is not int or x < 0 for x in row):
        raise ValueError(f"{what}: expected {n} non-negative integers, got {row!r}")
    return row


def decode_report(value: bytes) -> BrokerReport:
    """The inverse of :func:`encode_report`; ValueError for anything else (not zlib, not JSON,
    another version, wrong shapes, negative numbers)."""
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(value, MAX_DECODED_BYTES)
        if inflater.unconsumed_tail:
            raise ValueError(f"inflates to over {MAX_DECODED_BYTES} bytes")
        body = json.loads(raw)
    except (zlib.error, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"not a load report: {e}") from None
    if not isinstance(body, dict) or body.get("v") != CODEC_VERSION:
        raise ValueError(f"not a version {CODEC_VERSION} load report")
    node, window = body.get("n"), body.get("w")
    if type(node) is not int or type(window) is not int or window < 0:
        raise ValueError("bad node or window")
    capacity = BrokerCapacity(*_ints(body.get("c"), 5, "capacity"))
    topics = body.get("t")
    if not isinstance(topics, dict):
        raise ValueError("t: expected an object")
    led: dict[TopicPartition, LedLoad] = {}
    sizes: dict[TopicPartition, int] = {}
    follower_out: dict[TopicPartition, float] = {}
    for topic, entry in topics.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{topic}: expected an object")
        for row in entry.get("l", []):
            p, epoch, bin_, bout, repl, size = _ints(row, 6, topic)
            led[(topic, p)] = LedLoad(epoch, float(bin_), float(bout), float(repl), size)
            sizes[(topic, p)] = size
        for row in entry.get("r", []):
            p, size, out = _ints(row, 3, topic)
            sizes[(topic, p)] = size
            if out:
                follower_out[(topic, p)] = float(out)
    busy = body.get("q")
    if busy is not None and (type(busy) is not int or busy < 0):
        raise ValueError(f"q: expected a non-negative integer, got {busy!r}")
    return BrokerReport(node, window, capacity, led, sizes, follower_out, truncated=body.get("x") == 1,
                        busy=None if busy is None else busy / 1e6)


def load_key_prefix(cluster_prefix: str) -> bytes:
    """Where the brokers' load keys live: beside the cluster prefix (``/shoal`` ->
    ``/shoal.balancer-load/``), outside the metadata watch's range."""
    return (cluster_prefix.rstrip("/") + ".balancer-load/").encode()


# -- the cluster's load ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ClusterLoad:
    """The fresh reports, by broker, and the brokers whose reports are stale."""

    reports: Mapping[int, BrokerReport] = field(default_factory=dict)
    stale: frozenset[int] = frozenset()

    def capacities(self) -> dict[int, Capacity]:
        return {n: r.capacity.capacity() for n, r in sorted(self.reports.items())}

    def leaders(self) -> dict[TopicPartition, int]:
        """Each partition's leader as the reports say: the one with the highest leader epoch
        (two claim it for an interval after a leadership change)."""
        best: dict[TopicPartition, tuple[int, int]] = {}
        for node, r in sorted(self.reports.items()):
            for key, v in r.led.items():
                if key not in best or v.epoch > best[key][0]:
                    best[key] = (v.epoch, node)
        return {k: node for k, (_e, node) in best.items()}

    def partition_loads(self) -> dict[TopicPartition, PartitionLoad]:
        """The balancer's per-partition load: the leader's rates, size the leader's log size."""
        out: dict[TopicPartition, PartitionLoad] = {}
        for key, node in sorted(self.leaders().items()):
            v = self.reports[node].led[key]
            out[key] = PartitionLoad(bytes_in=v.bytes_in, bytes_out=v.bytes_out, size=float(v.size))
        return out

    def replica_sizes(self) -> dict[TopicPartition, dict[int, int]]:
        out: dict[TopicPartition, dict[int, int]] = {}
        for node, r in sorted(self.reports.items()):
            for key, size in r.sizes.items():
                out.setdefault(key, {})[node] = size
        return out


def read_cluster_load(kvs: Iterable[tuple[bytes, bytes, int]], key_prefix: bytes, freshness: Freshness, now_ms: int,
                      stale_ms: int, on_bad: Callable[[bytes, str], None] = lambda k, why: None) -> ClusterLoad:
    """(key, value, mod revision) of the load keys -> the fresh reports (a key whose revision has
    not moved for ``stale_ms`` by this broker's clock is stale; an undecodable one is passed to
    ``on_bad`` and left out)."""
    reports, stale = fresh_reports(kvs, key_prefix, decode_report, freshness, now_ms, stale_ms, on_bad)
    return ClusterLoad(reports, frozenset(stale))


def cluster_load_json(load: ClusterLoad) -> dict[str, object]:
    """The operator's view (the HTTP admin API's ``GET /v1/cluster/load``, ``shoal cluster load``):
    per broker its capacity and totals, per partition its leader's rates and size and every
    replica's size. Rates in bytes per second over each report's ``window_ms``."""
    brokers = []
    for node, r in sorted(load.reports.items()):
        c = r.capacity
        brokers.append({
            "node_id": node, "window_ms": r.window_ms, "truncated": r.truncated,
            "capacity": {"disk_bytes": c.disk_bytes, "disk_used_bytes": c.disk_used,
                         "network_in_bytes_per_second": c.network_in, "network_out_bytes_per_second": c.network_out,
                         "disk_write_bytes_per_second": c.disk_write},
            "bytes_in_per_second": round(r.bytes_in), "bytes_out_per_second": round(r.bytes_out),
            "replication_bytes_out_per_second": round(r.replication_out), "log_bytes": r.log_bytes,
            "leaders": len(r.led), "replicas": len(r.sizes),
            "loop_busy": None if r.busy is None else round(r.busy, 4)})
    sizes = load.replica_sizes()
    partitions = []
    for key, node in sorted(load.leaders().items()):
        v = load.reports[node].led[key]
        partitions.append({
            "topic": key[0], "partition": key[1], "leader": node, "window_ms": load.reports[node].window_ms,
            "bytes_in_per_second": round(v.bytes_in), "bytes_out_per_second": round(v.bytes_out),
            "replication_bytes_out_per_second": round(v.replication_out), "size_bytes": v.size,
            "replica_sizes": {str(n): s for n, s in sorted(sizes.get(key, {}).items())}})
    return {"brokers": brokers, "partitions": partitions, "stale_brokers": sorted(load.stale)}


# -- the broker's reporter ------------------------------------------------------------------------

class LoadReporter:
    """A broker's side (see the module doc). ``partitions``: the hosted partitions (the replica
    manager's); ``session``: the broker's etcd session (its registration lease) and ``prefix`` the
    cluster's etcd prefix, or None on the embedded store. :attr:`latest` is the cluster's load as
    last read (this broker's own report alone on the embedded store)."""

    def __init__(self, node_id: int, partitions: Callable[[], Iterable[HostedPartition]], log_dirs: Sequence[str],
                 config: Callable[[], BrokerConfig], now_ms: Callable[[], int],
                 session: "EtcdSession | None" = None, prefix: str = DEFAULT_PREFIX) -> None:
        self.node_id = node_id
        self.partitions = partitions
        self.log_dirs = list(log_dirs)
        self.config = config
        self.now_ms = now_ms
        self.session = session
        self.key_prefix = load_key_prefix(prefix)
        self.meter = LoadMeter(self._window_ms())
        self.freshness = Freshness()
        self.latest = ClusterLoad()
        self.own: BrokerReport | None = None
        self.steps = 0
        self._stale_logged: frozenset[int] = frozenset()
        self._last_log = 0.0
        self._task: asyncio.Task[None] | None = None

    def _interval_ms(self) -> int:
        return int(self.config().get("shoal.balancer.load.interval.ms"))

    def _window_ms(self) -> int:
        return int(self.config().get("shoal.balancer.load.window.ms"))

    async def measure(self) -> BrokerReport:
        """This broker's report now (the statvfs calls in a thread)."""
        self.meter.window_ms = self._window_ms()
        parts = list(self.partitions())
        log_bytes = sum(v.size_bytes for p in parts if (v := p.view) is not None)
        capacity = await asyncio.to_thread(measure_capacity, self.config(), self.log_dirs, log_bytes)
        # on the event loop's thread: its own CPU time (the worker threads' statvfs and encoding not in it)
        return self.meter.sample(self.now_ms(), parts, self.node_id, capacity, time.thread_time())

    async def step(self) -> None:
        """Measure, publish, read everyone's."""
        self.own = report = await self.measure()
        if self.session is None:
            self.latest = ClusterLoad({self.node_id: report})
            self.steps += 1
            return
        value = await asyncio.to_thread(encode_report, report)  # 0.2 s of CPU at 10,000 partitions
        interval_ms = self._interval_ms()
        try:
            kvs = await asyncio.wait_for(self._put_and_read(value), max(1.0, 2.0 * interval_ms / 1000.0))
        except Exception as e:  # etcd unreachable, a lost lease, a timeout
            if time.monotonic() - self._last_log >= LOG_EVERY_S:
                self._last_log = time.monotonic()
                log.info("balancer load exchange failed (%s); keeping the load last read",
                         "timed out" if isinstance(e, asyncio.TimeoutError) else etcd_why(e))
            return
        load = await asyncio.to_thread(read_cluster_load, kvs, self.key_prefix, self.freshness, self.now_ms(),
                                       STALE_INTERVALS * interval_ms, self._bad_key)
        if load.stale != self._stale_logged and load.stale - self._stale_logged:
            log.warning("ignoring the stale load reports of broker(s) %s (unchanged for %d intervals)",
                        ", ".join(map(str, sorted(load.stale - self._stale_logged))), STALE_INTERVALS)
        self._stale_logged = load.stale
        self.latest = load
        self.steps += 1

    async def _put_and_read(self, value: bytes) -> list[tuple[bytes, bytes, int]]:
        assert self.session is not None
        await self.session.put_ephemeral(self.key_prefix + str(self.node_id).encode(), value)
        return await self.session.read_prefix(self.key_prefix)

    def _bad_key(self, key: bytes, why: str) -> None:
        if time.monotonic() - self._last_log >= LOG_EVERY_S:
            self._last_log = time.monotonic()
            log.warning("ignoring undecodable load report %r: %s", key, why)

    async def cluster_load(self) -> ClusterLoad:
        """The cluster's load for an operator: as last read (measured now if never yet)."""
        if self.steps == 0:
            await self.step()
        return self.latest

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Every interval until :meth:`stop`; a failing step is logged, never fatal."""
        from shoal.asyncutil import every

        self._task = asyncio.get_running_loop().create_task(
            every(lambda: self._interval_ms() / 1000.0, self.step, log, "balancer load"), name="balancer-load")

    async def stop(self) -> None:
        from shoal.asyncutil import cancel_and_wait

        task, self._task = self._task, None
        await cancel_and_wait([task])
