"""Tenant-wide quotas split by demand (``shoal.quota.tenant.split=demand``; issue 15).

The multi-tenancy document splits a tenant's tenant-wide byte-rate quota equally over the brokers
that lead at least one of its partitions (``split=equal``, :func:`shoal.quotas.fairshare.
tenant_quota_slice`). Its known weakness: a tenant whose traffic goes mostly to one broker's
partitions is held to ``quota / n`` there while the other slices lie unused (80% of the traffic to
one of three brokers: ~2 + 1 + 1 of 6 MB/s). With ``split=demand`` every broker publishes, per
tenant and quota type, what it saw of the tenant lately, and every broker computes the same split
from the same table:

Policy (:func:`split_by_demand`, pure). Each leader broker *i* of the tenant has a demand ``d_i``:

* ``headroom x rate`` (the tenant's byte rate there over the last :data:`RECENT_SPAN_MS`, 4 s;
  ``shoal.quota.autotune.headroom``, 1.1, so a rise is seen next interval: a slice below the
  rate lets 1.1 x itself through next time, and so on up) when the broker is not holding the
  tenant back;
* the whole tenant quota when it is *held* there: its bound muted it for at least half of the
  last :data:`HELD_INTERVALS` (4) intervals (:func:`is_held`). It wants more than it gets and its
  rate says nothing about how much more, so it bids for everything (as the auto-tuner's held
  tenants bid for their full share). Robust to bursts: usage alone (at least ``saturation`` of
  the slice, the auto-tuner's rule) counted as held before, and a consumer taking 125 kB/s in
  64 KiB batches moves its rate over 2 s by a whole batch, far more than the 4.5% between a cold
  broker's rate and that line; and a consumer refilling a 256 kB prefetch queue at once is
  muted ~1.3 s by a 137 kB/s slice, over half of two intervals, a quarter of four. Either way
  a cold broker bid for the whole quota now and then and took the hot broker's slice away for
  two intervals (1 MB/s consumer quota, case (b): 71-79% of it; 89% with the 2 s span);
* never less than the floor ``min_fraction x quota / n`` (``shoal.quota.tenant.split.min.
  fraction``), so a broker that starts receiving traffic has some room and is seen as held two
  intervals later (half of four muted).

If the demands fit in the quota, slices are proportional to them (everyone gets its demand and
the same fraction more: ``s_i = d_i x quota / sum d``); otherwise the quota is water-filled over
them with equal weights (``s_i = min(d_i, lam)``, max-min fair: brokers whose demand is known
and small get it, held brokers share the rest equally). Either way the slices sum to the quota,
every leader gets at least the floor. While some leader of the tenant has no fresh report (it just
started, or died and still leads until the controller moves its partitions) the tenant's quota is
split equally: every broker computes its slice alone, and only a split of the same table by all
of them sums to the quota.

Followers (the consumer quota, issue 24): with KIP-392 follower fetching a follower serves the
tenant's consumers in its rack, and before it enforced the equal share of the tenant's leaders
(the whole quota for a one-partition tenant: three consumers in three racks read at 2.6-3x the
quota). Every broker whose fresh report names the tenant's fetch traffic now takes part in the
split with its demand, a leader or not; one that serves the tenant but is in no report yet gets
the floor of one more participant, and the equal fallback is over the leaders and the replicas a
leader may send the tenant's consumers to (:func:`demand_slice` ``followers``). A producer quota
is split over the leaders only: nothing else takes the tenant's writes.

Exchange (:class:`DemandExchange`). Every ``shoal.quota.tenant.demand.interval.ms`` (1 s) each
broker of an etcd cluster puts one key, ``<prefix>.quota-demand/<node id>``, under its registration
lease (it goes when the broker does), holding its reports for the tenants that have a tenant-wide
byte-rate quota and recent traffic here (:func:`encode_reports`), then reads all brokers' keys with
one range and hands the table to the quota managers, which recompute their cached tenant bounds
(the hot path reads a cached bound, as before). The keys sit *beside* the cluster prefix, outside
the metadata watch's range: demand is not metadata, and a put a second per broker must not wake
every broker's metadata listeners. Leadership changes need no exchange: the managers recompute the
slices over the new leaders as soon as the image shows them.

Failures: a report whose key has not changed for ``shoal.quota.tenant.demand.stale.ms`` (its
broker cannot reach etcd, or hangs) counts as missing; if this broker cannot reach etcd it keeps
the last table it read, and after the same bound goes back to the equal split (one log line each
way). Undecodable keys are ignored with one log line. On the embedded store (one node) there is
nothing to exchange: the slice is the whole quota.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Collection, Hashable, Iterable, Mapping, TypeVar

from shoal.etcd.client import DEFAULT_PREFIX
from shoal.etcd.client import why as etcd_why
from shoal.quotas.fairshare import DEFAULT_HEADROOM, water_fill

if TYPE_CHECKING:
    from shoal.quotas.ports import DemandHost
    from shoal.etcd.session import EtcdSession

log = logging.getLogger("shoal.quotas.demand")

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")

SPLITS = ("equal", "demand")
CODEC_VERSION = 1
KINDS = ("produce", "fetch")  # the byte-rate quota types (QuotaType.group)
LOG_EVERY_S = 10.0
# A broker's demand is its rate over the last few seconds (WindowedRate.measure_recent), not the
# quota window's 11: a broker whose traffic moved away gives up its slice in seconds. Four, not
# two: a consumer fetching 64 KiB batches at 125 kB/s reads +-25% over 2 s, +-13% over 4.
RECENT_SPAN_MS = 4000
# A tenant muted by its slice for HELD_MUTED_FRACTION of this many intervals is held. Four, not
# two: a burst (a consumer refilling its prefetch queue) is muted for one interval or so.
HELD_INTERVALS = 4
# ... of the time: a client its bound holds back is muted nearly all the time (each request's
# throttle ends as the next is let in), one that only bursts now and then (a producer catching up
# after a stall, a consumer refilling its prefetch queue) for a fraction of it. Any throttle at
# all counted as held before, and such bursts made cold brokers bid for the whole quota.
HELD_MUTED_FRACTION = 0.5

Report = tuple[float, bool]  # (recent byte rate, held by its bound)


# -- policy ---------------------------------------------------------------------------------------

def is_held(muted: float, *, capped_below: bool = False) -> bool:
    """Does this broker hold the tenant back with its slice? ``muted``: the fraction of the last
    :data:`HELD_INTERVALS` intervals the tenant's bound muted it (:func:`muted_fraction`), held
    from :data:`HELD_MUTED_FRACTION` on; a client its slice holds back is muted nearly all the
    time (its pacer is a cap). Not its usage: see the module doc. ``capped_below``: a broker-wide
    dynamic quota below the slice is what holds it (a larger slice would not help, so it does not
    ask for one)."""
    return not capped_below and muted >= HELD_MUTED_FRACTION


def muted_fraction(muted_ms: int, muted_before_ms: int | None, span_ms: int) -> float:
    """The fraction of ``span_ms`` a tenant's bound muted it, from its cumulative muted time now
    and at the span's start (None, or more than now: its sensor is new, all of it counts)."""
    if muted_before_ms is None or muted_before_ms > muted_ms:
        muted_before_ms = 0
    return (muted_ms - muted_before_ms) / max(span_ms, 1)


def demand_estimate(report: Report, quota: float, *, headroom: float = DEFAULT_HEADROOM) -> float:
    """One broker's demand from its report: the whole quota when held, else headroom x rate."""
    rate, held = report
    return quota if held else headroom * rate


def split_by_demand(quota: float, demands: Mapping[K, float], *, min_fraction: float = 0.1) -> dict[K, float]:
    """The slices of ``quota`` over the brokers in ``demands`` (see the module doc): each demand
    raised to the floor ``min_fraction x quota / n``; proportional to the demands when they fit
    in the quota, else max-min fair (equal weights). The slices sum to the quota."""
    if not 0.0 <= min_fraction <= 1.0:
        raise ValueError(f"min_fraction must be in [0, 1], got {min_fraction}")
    if not demands:
        return {}
    n = len(demands)
    floor = min_fraction * quota / n
    d = {k: max(floor, v if math.isfinite(v) and v > 0 else 0.0) for k, v in demands.items()}
    total = math.fsum(d.values())
    if total <= 0:  # quota 0 (or floor 0 and no demand): equal
        return {k: quota / n for k in d}
    if total <= quota:
        scale = quota / total
        if math.isfinite(scale):
            return {k: v * scale for k, v in d.items()}
        return {k: quota * (v / total) for k, v in d.items()}  # the share first: quota / tiny overflowed
    return water_fill(quota, d, {k: 1.0 for k in d})


@dataclass(frozen=True, slots=True)
class DemandTable:
    """What the brokers reported: ``nodes`` with a fresh report, and per quota type and tenant
    each of those brokers' :data:`Report` (a fresh broker without an entry saw nothing of it)."""

    nodes: frozenset[int] = frozenset()
    reports: Mapping[str, Mapping[str, Mapping[int, Report]]] = field(default_factory=dict)

    def demands(self, kind: str, tenant: str, leaders: Collection[int], quota: float, *,
                headroom: float = DEFAULT_HEADROOM, reporters: bool = False) -> dict[int, float] | None:
        """Each leader's demand: estimated from its report, 0 when its fresh report does not
        name the tenant; None when some leader has no fresh report (split equally). With
        ``reporters``, also every other broker whose fresh report names the tenant (a follower
        serving its consumers, KIP-392)."""
        if any(b not in self.nodes for b in leaders):
            return None
        seen = self.reports.get(kind, {}).get(tenant, {})
        out = {b: demand_estimate(seen[b], quota, headroom=headroom) if b in seen else 0.0 for b in leaders}
        if reporters:
            for b, report in seen.items():
                if b not in out:
                    out[b] = demand_estimate(report, quota, headroom=headroom)
        return out


def demand_slice(quota: float, leaders: Collection[int], broker: int, table: DemandTable | None, kind: str,
                 tenant: str, *, headroom: float = DEFAULT_HEADROOM, min_fraction: float = 0.1,
                 followers: Collection[int] | None = None) -> float:
    """This broker's slice under ``split=demand``. As :func:`~shoal.quotas.fairshare.
    tenant_quota_slice`: no known leaders -> the whole quota; a broker leading none of the
    tenant's partitions -> the equal share (no zero bound while metadata catches up); no table
    (nothing read yet, or stale) or a leader without a fresh report -> the equal split.

    ``followers`` (the consumer quota, where followers may serve the tenant's consumers: KIP-392):
    the brokers besides the leaders that may serve them (replicas the leaders may send a consumer
    to). Then every broker whose fresh report names the tenant takes part in the split with its
    demand, a leader or not: a follower serving the tenant's consumers enforced the equal share
    of the leaders before, the whole quota for a one-partition tenant, and with two followers the
    tenant read at 2.58x its quota. A broker that serves the tenant but is in no report yet (it
    just began) gets the floor of one more participant (it reports two intervals later, held if
    it wants more; so does any other broker in no report, the fetches that find no leader there
    bring nothing); the equal split is over the leaders and ``followers``."""
    leaders = sorted(set(leaders))
    if not leaders:
        return quota
    servers = len(set(leaders).union(followers or ()))
    demands = table.demands(kind, tenant, leaders, quota, headroom=headroom,
                            reporters=followers is not None) if table is not None else None
    if demands is None:
        return quota / servers
    if broker not in demands:
        return quota / servers if followers is None else min_fraction * quota / (len(demands) + 1)
    return split_by_demand(quota, demands, min_fraction=min_fraction)[broker]


def confirmed_demand_slice(quota: float, leaders: Collection[int], broker: int,
                           tables: tuple[DemandTable | None, DemandTable | None], kind: str, tenant: str, *,
                           headroom: float = DEFAULT_HEADROOM, min_fraction: float = 0.1,
                           followers: Collection[int] | None = None) -> float:
    """This broker's slice from the last two tables it read (``(previous, latest)``): the smaller
    of :func:`demand_slice` of each, so a slice falls at once and rises only when two tables in a
    row grant it. Why: the brokers read the table at different moments of an interval, so when
    the tenant's traffic changes at several brokers at once (it starts, everywhere), one broker
    can read a table where it alone is held while the others, not yet reporting, count at the
    floor; it takes nearly the whole quota, the next one half of it, and the slices sum to well
    over the quota for an interval (measured: 7.5, 7.1, 6.7 MB/s in the first seconds of a 6 MB/s
    tenant, 105% of the first 10 s). One interval later every broker's report shows its traffic."""
    return min(demand_slice(quota, leaders, broker, t, kind, tenant, headroom=headroom, min_fraction=min_fraction,
                            followers=followers) for t in tables)


# -- the exchange codec ---------------------------------------------------------------------------

def encode_reports(reports: Mapping[str, Mapping[str, Report]]) -> bytes:
    """``{kind: {tenant: (rate, held)}}`` -> the value of a broker's demand key (versioned JSON,
    rates in whole bytes/s)."""
    body: dict[str, Any] = {"v": CODEC_VERSION}
    for kind in KINDS:
        entries = reports.get(kind) or {}
        body[kind] = {t: [int(round(rate)), 1 if held else 0] for t, (rate, held) in sorted(entries.items())}
    return json.dumps(body, separators=(",", ":")).encode()


def decode_reports(value: bytes) -> dict[str, dict[str, Report]]:
    """The inverse of :func:`encode_reports`; ValueError for anything else (another version,
    wrong types, a negative or non-finite rate). Kinds it does not know are ignored."""
    try:
        body = json.loads(value)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(body, dict) or body.get("v") != CODEC_VERSION:
        raise ValueError(f"not a version {CODEC_VERSION} demand report")
    out: dict[str, dict[str, Report]] = {}
    for kind in KINDS:
        entries = body.get(kind, {})
        if not isinstance(entries, dict):
            raise ValueError(f"{kind}: expected an object")
        parsed: dict[str, Report] = {}
        for tenant, entry in entries.items():
            if (not isinstance(entry, list) or len(entry) != 2 or isinstance(entry[0], bool)
                    or not isinstance(entry[0], (int, float)) or entry[1] not in (0, 1) or isinstance(entry[1], float)):
                raise ValueError(f"{kind}/{tenant}: expected [rate, 0|1], got {entry!r}")
            rate = float(entry[0])
            if not math.isfinite(rate) or rate < 0:
                raise ValueError(f"{kind}/{tenant}: bad rate {entry[0]!r}")
            parsed[tenant] = (rate, bool(entry[1]))
        out[kind] = parsed
    return out


def demand_key_prefix(cluster_prefix: str) -> bytes:
    """Where the brokers' demand keys live: beside the cluster prefix (``/shoal`` ->
    ``/shoal.quota-demand/``), outside the metadata watch's range (``/shoal/`` ...)."""
    return (cluster_prefix.rstrip("/") + ".quota-demand/").encode()


class Freshness:
    """Which brokers' reports are fresh: a key whose mod revision has not moved for ``stale_ms``
    (by this broker's clock, so no clock is compared across brokers) is stale."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[int, int]] = {}  # node -> (mod revision, first seen at)

    def fresh(self, node: int, mod_revision: int, now_ms: int, stale_ms: int) -> bool:
        seen = self._seen.get(node)
        if seen is None or seen[0] != mod_revision:
            self._seen[node] = (mod_revision, now_ms)
            return True
        return now_ms - seen[1] <= stale_ms

    def forget_except(self, nodes: Collection[int]) -> None:
        for n in [n for n in self._seen if n not in nodes]:
            del self._seen[n]


def fresh_reports(kvs: Iterable[tuple[bytes, bytes, int]], key_prefix: bytes, decode: Callable[[bytes], R],
                  freshness: Freshness, now_ms: int, stale_ms: int,
                  on_bad: Callable[[bytes, str], None] = lambda k, why: None) -> tuple[dict[int, R], set[int]]:
    """(key, value, mod revision) of per-broker keys ``<key_prefix><node id>`` -> the fresh ones'
    decoded values by node, and the nodes whose keys are stale (:class:`Freshness`). A key
    ``decode`` refuses (ValueError), or whose name is not a node id, goes to ``on_bad``. Shared
    with the balancer's load exchange (``shoal.cluster.load``)."""
    fresh: dict[int, R] = {}
    stale: set[int] = set()
    for key, value, mod_revision in kvs:
        try:
            node = int(key[len(key_prefix):].decode())
            decoded = decode(value)
        except ValueError as e:
            on_bad(key, str(e))
            continue
        if freshness.fresh(node, mod_revision, now_ms, stale_ms):
            fresh[node] = decoded
        else:
            stale.add(node)
    freshness.forget_except(fresh.keys() | stale)
    return fresh, stale


def build_table(kvs: Collection[tuple[bytes, bytes, int]], key_prefix: bytes, freshness: Freshness, now_ms: int,
                stale_ms: int, on_bad: Callable[[bytes, str], None] = lambda k, why: None) -> DemandTable:
    """(key, value, mod revision) of the demand keys -> the table of fresh reports."""
    fresh, _stale = fresh_reports(kvs, key_prefix, decode_reports, freshness, now_ms, stale_ms, on_bad)
    reports: dict[str, dict[str, dict[int, Report]]] = {k: {} for k in KINDS}
    for node, decoded in fresh.items():
        for kind, entries in decoded.items():
            for tenant, report in entries.items():
                reports[kind].setdefault(tenant, {})[node] = report
    return DemandTable(frozenset(fresh), reports)


# -- the broker's exchange ------------------------------------------------------------------------

class DemandExchange:
    """A broker's side of the exchange (see the module doc). ``managers``: the broker's
    :class:`shoal.quotas.manager.QuotaManagers`; ``session``: its etcd session
    (:class:`shoal.etcd.session.EtcdSession`: the registration lease) and ``prefix`` the cluster's
    etcd prefix, or None on the embedded store, where only the split config is followed."""

    def __init__(self, managers: Any, session: "EtcdSession | None", node_id: int, config: Callable[[], Any],
                 now_ms: Callable[[], int], prefix: str = DEFAULT_PREFIX) -> None:
        self.managers = managers
        self.session = session
        self.node_id = node_id
        self.config = config
        self.now_ms = now_ms
        self.freshness = Freshness()
        self.key_prefix = demand_key_prefix(prefix) if session is not None else b""
        self.last_ok_ms: int | None = None
        self.last_step_ms: int | None = None
        self._steps_ms: list[int] = []  # times of the last HELD_INTERVALS steps
        self._muted_hist: list[dict[str, dict[str, int]]] = []  # the tenants' muted times at those steps
        self.falling_back = False
        self.steps = 0  # successful exchanges (tests, metrics)
        self._last_log = 0.0
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def for_broker(cls, broker: "DemandHost") -> "DemandExchange":
        backend = getattr(broker.metadata, "backend", None)
        session = getattr(backend, "session", None)  # None: the embedded store, one node
        return cls(broker.quotas, session, broker.node_id, lambda: broker.config, broker.clock.now_ms,
                   getattr(backend, "prefix", DEFAULT_PREFIX))

    # -- settings ----------------------------------------------------------------------------------

    def _settings(self) -> tuple[str, float, float, int, int]:
        cfg = self.config()
        return (str(cfg.get("shoal.quota.tenant.split")), float(cfg.get("shoal.quota.tenant.split.min.fraction")),
                float(cfg.get("shoal.quota.autotune.headroom")), int(cfg.get("shoal.quota.tenant.demand.interval.ms")),
                int(cfg.get("shoal.quota.tenant.demand.stale.ms")))

    # -- one interval --------------------------------------------------------------------------

    def own_reports(self, now_ms: int, since_ms: int, headroom: float, span_ms: int = RECENT_SPAN_MS,
                    muted_before: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, dict[str, Report]]:
        """This broker's reports: per byte-rate manager, the tenants with a tenant-wide quota and
        a sensor here, their rate over the last ``span_ms`` and whether their slice holds them
        (:func:`is_held` of the fraction of the time since ``since_ms`` their bound muted them;
        the tenants' cumulative muted times were ``muted_before[kind]`` then)."""
        out: dict[str, dict[str, Report]] = {}
        for kind in KINDS:
            m = getattr(self.managers, kind)
            entries: dict[str, Report] = {}
            if m.enabled:
                before = (muted_before or {}).get(kind, {})
                muted = {t: muted_fraction(ms, before.get(t), now_ms - since_ms)
                         for t, ms in m.tenant_muted_ms().items()}
                dynamic = m.dynamic_tenant_quotas()
                for tenant, sensor in m.tenant_sensors():
                    rate = sensor.rate.measure_recent(now_ms, span_ms)
                    slice_ = m.tenant_quota(tenant)
                    if slice_ is None:
                        continue
                    cap = dynamic.get(tenant)
                    f = muted.get(tenant, 0.0)
                    held = is_held(f, capped_below=cap is not None and cap < slice_)
                    if rate > 0 or held:
                        entries[tenant] = (rate, held)
            out[kind] = entries
        return out

    async def step(self) -> None:
        """Publish this broker's reports, read everyone's, hand the table to the managers."""
        split, min_fraction, headroom, interval_ms, stale_ms = self._settings()
        self.managers.set_split(split, min_fraction=min_fraction, headroom=headroom)
        now_ms = self.now_ms()
        # held: muted by its slice for half of the last four intervals (one alone flaps: a held
        # producer is not throttled in every interval, and each flap moves the others' slices)
        since = self._steps_ms[0] if self._steps_ms else now_ms - interval_ms
        before = self._muted_hist[0] if self._muted_hist else None
        self._steps_ms = (self._steps_ms + [now_ms])[-HELD_INTERVALS:]
        snapshot = {kind: getattr(self.managers, kind).tenant_muted_ms() for kind in KINDS}
        self._muted_hist = (self._muted_hist + [snapshot])[-HELD_INTERVALS:]
        self.last_step_ms = now_ms
        if split != "demand" or self.session is None or not self.managers.has_tenant_byte_quotas():
            self.managers.set_demand(None)
            return
        value = encode_reports(self.own_reports(now_ms, since, headroom, max(RECENT_SPAN_MS, 2 * interval_ms),
                                                before))
        timeout = max(0.5, 2.0 * interval_ms / 1000.0)
        try:
            kvs = await asyncio.wait_for(self._put_and_read(value), timeout)
        except Exception as e:  # etcd unreachable, a lost lease, a timeout
            self._failed(e, now_ms, stale_ms)
            return
        table = build_table(kvs, self.key_prefix, self.freshness, self.now_ms(), stale_ms, self._bad_key)
        if self.falling_back:
            log.info("tenant quota demand exchange works again (%d brokers reporting)", len(table.nodes))
        self.falling_back = False
        self.last_ok_ms = now_ms
        self.steps += 1
        self.managers.set_demand(table)

    async def _put_and_read(self, value: bytes) -> list[tuple[bytes, bytes, int]]:
        assert self.session is not None
        # under the registration lease; not registered (yet): read only
        await self.session.put_ephemeral(self.key_prefix + str(self.node_id).encode(), value)
        return await self.session.read_prefix(self.key_prefix)

    def _failed(self, e: BaseException, now_ms: int, stale_ms: int) -> None:
        stale = self.last_ok_ms is None or now_ms - self.last_ok_ms > stale_ms
        if stale and not self.falling_back:
            self.falling_back = True
            self.managers.set_demand(None)
            log.warning("tenant quota demand exchange failing for over %d ms (%s): tenant quotas split "
                        "equally until it works again", stale_ms, _why(e))
        elif time.monotonic() - self._last_log >= LOG_EVERY_S:
            self._last_log = time.monotonic()
            log.info("tenant quota demand exchange failed (%s); keeping the last demand read", _why(e))

    def _bad_key(self, key: bytes, why: str) -> None:
        if time.monotonic() - self._last_log >= LOG_EVERY_S:
            self._last_log = time.monotonic()
            log.warning("ignoring undecodable tenant demand key %r: %s", key, why)

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Every interval until cancelled; a failing step is logged, never fatal."""
        from shoal.asyncutil import every

        await every(lambda: int(self.config().get("shoal.quota.tenant.demand.interval.ms")) / 1000.0, self.step,
                    log, "tenant quota demand exchange")

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run(), name="tenant-quota-demand")

    async def stop(self) -> None:
        from shoal.asyncutil import cancel_and_wait

        task, self._task = self._task, None
        await cancel_and_wait([task])


def _why(e: BaseException) -> str:
    return "timed out" if isinstance(e, asyncio.TimeoutError) else etcd_why(e)
