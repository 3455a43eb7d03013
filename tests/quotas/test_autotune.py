"""Auto-tuned tenant quotas and the broker request quota (shoal.quotas.autotune) with an injected
clock and fake usage sources: exact steps, activity, hysteresis, and convergence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.clock import ManualClock
from shoal.config import BrokerConfig
from shoal.quotas.autotune import (
    NO_LIMIT,
    AutoTuner,
    BrokerProtection,
    BrokerRequestQuota,
    TenantActivity,
)
from shoal.quotas.fairshare import jain_index, water_fill


class FakeUsage:
    def __init__(self, usage=None, muted=()) -> None:
        self.usage = dict(usage or {})
        self.muted = set(muted)  # tenants their bound throttled during the interval
        self.asked_since: list[int] = []

    def usage_by_tenant(self):
        return dict(self.usage)

    def muted_since(self, since_ms: int) -> set[str]:
        self.asked_since.append(since_ms)
        return set(self.muted)


class FakeLoad:
    def __init__(self, exempt: float = 0.0, queue: int = 0) -> None:
        self.exempt, self.queue = exempt, queue

    def exempt_time(self) -> float:
        return self.exempt

    def request_queue_size(self) -> int:
        return self.queue


def tuner(quotas, usage, *, limit, window_ms=300_000, headroom=1.1, min_share=0.0):
    t = AutoTuner("produce", quotas.get, TenantActivity(window_ms), FakeUsage(usage),
                  headroom=headroom, min_share=min_share)
    t.limit = limit
    return t


def step(t: AutoTuner, now_ms: int):
    return t.tune(now_ms, t.record_activity(now_ms))


def test_the_documents_picture_equal_quotas() -> None:
    """Tenants A and B use less than the fair share and keep slightly above their usage; C and D
    share the rest: 200 - 11 - 22 = 167, i.e. 83.5 each, at once."""
    t = tuner({"A": 100, "B": 100, "C": 100, "D": 100}, {"A": 10, "B": 20, "C": 100, "D": 100}, limit=200)
    r = step(t, 0)
    assert r.engaged and r.usage == 230
    assert t.target == pytest.approx({"A": 11, "B": 22, "C": 83.5, "D": 83.5})
    assert r.dynamic == pytest.approx({"A": 11, "B": 22, "C": 83.5, "D": 83.5})
    assert t.dynamic_tenant_quota("C") == pytest.approx(83.5)
    assert t.dynamic_tenant_quota("nobody") is None


def test_shares_are_weighted_and_take_effect_at_once() -> None:
    """Weights 100 : 300 share 200 as 50 : 150, from the first interval (the managers pace a
    dynamic quota, so a deep cut mutes nobody for long). Held by their quotas, the tenants keep
    bidding for their full shares while their (windowed) usage still remembers the old rates."""
    t = tuner({"A": 100, "B": 300}, {"A": 100, "B": 300}, limit=200)
    r = step(t, 0)
    assert t.target == pytest.approx({"A": 50, "B": 150})
    assert r.dynamic == pytest.approx({"A": 50, "B": 150})
    t.usage.usage, t.usage.muted = {"A": 90, "B": 270}, {"A", "B"}
    r = step(t, 5000)
    assert r.dynamic == pytest.approx({"A": 50, "B": 150})
    assert t.usage.asked_since == [-1, 0]  # muted since the previous reading


def test_a_tenant_held_too_low_bids_for_its_share() -> None:
    """Measured low (Kafka pads a young window with empty samples), A got 1.1 x 1 = 1.1; muted
    by that quota next interval it bids as a saturated tenant and gets its share at once."""
    t = tuner({"A": 100, "B": 100}, {"A": 1, "B": 100}, limit=100)
    assert step(t, 0).dynamic == pytest.approx({"A": 1.1, "B": 98.9})
    t.usage.usage, t.usage.muted = {"A": 1.05, "B": 98.9}, {"A", "B"}
    assert step(t, 5000).dynamic == pytest.approx({"A": 50, "B": 50})
    t.usage.usage, t.usage.muted = {"A": 40, "B": 50}, {"B"}  # A's real demand is 40: below its share
    assert step(t, 10_000).dynamic == pytest.approx({"A": 44, "B": 56})


def test_within_the_limit_nothing_is_tuned_and_no_limit_never_tunes() -> None:
    t = tuner({"A": 100, "B": 100}, {"A": 90, "B": 100}, limit=200)
    r = step(t, 0)
    assert not r.engaged and r.dynamic == {} and t.dynamic_tenant_quota("A") is None
    t2 = tuner({"A": 100}, {"A": 1e12}, limit=NO_LIMIT)
    assert step(t2, 0).dynamic == {}


def test_hysteresis_then_release() -> None:
    t = tuner({"A": 200, "B": 200}, {"A": 150, "B": 150}, limit=200)
    assert step(t, 0).dynamic == pytest.approx({"A": 100, "B": 100})
    # held at their dynamic quotas they use the limit: still engaged
    t.usage.usage, t.usage.muted = {"A": 100, "B": 100}, {"A", "B"}
    r = step(t, 5000)
    assert r.engaged and r.dynamic == pytest.approx({"A": 100, "B": 100})
    # muted by a throttle they measure low, but they are held: not released (else they would
    # burst at their configured quotas and the quotas would flap)
    t.usage.usage = {"A": 40, "B": 40}
    r = step(t, 10_000)
    assert r.engaged and r.dynamic == pytest.approx({"A": 100, "B": 100})
    # using all of its dynamic quota counts as held even without a throttle in the interval
    t.usage.usage, t.usage.muted = {"A": 96, "B": 96}, set()
    r = step(t, 15_000)
    assert r.engaged and r.dynamic == pytest.approx({"A": 100, "B": 100})
    # demand falls below the quotas (85 < 0.955 x 100), nobody muted, 1.1 x 170 <= 200: restored
    t.usage.usage = {"A": 85, "B": 85}
    r = step(t, 20_000)
    assert not r.engaged and r.dynamic == {} and t.dynamic_tenant_quota("A") is None


def test_inactive_tenants_get_their_quota_back_and_take_no_share() -> None:
    t = tuner({"A": 200, "B": 200, "C": 200}, {"A": 100, "B": 100, "C": 100}, limit=200, window_ms=60_000)
    assert step(t, 0).dynamic == pytest.approx({"A": 66.67, "B": 66.67, "C": 66.67}, rel=1e-3)
    t.usage.usage, t.usage.muted = {"A": 66, "B": 66}, {"A", "B"}  # C stopped; active for a minute
    r = step(t, 30_000)
    assert r.dynamic == pytest.approx({"A": 100, "B": 100, "C": 0})
    t.usage.usage = {"A": 100, "B": 100}
    r = step(t, 61_000)  # C last seen at 0: inactive now
    assert "C" not in r.dynamic and t.dynamic_tenant_quota("C") is None
    assert r.dynamic == pytest.approx({"A": 100, "B": 100})


def test_min_share_floor_and_unconfigured_tenants() -> None:
    # X has no configured quota: it weighs as the limit (1000) against A's 1000
    t = tuner({"A": 1000, "idle": 500}, {"A": 1000, "X": 1000, "idle": 0.0}, limit=1000, min_share=0.01)
    t.activity.saw("idle", 0)
    step(t, 0)
    assert t.target == pytest.approx({"A": 497.5, "X": 497.5, "idle": 5})  # idle: 1% of its quota, not 0


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from("ABCDEFGH"), st.tuples(st.floats(1, 1e6), st.floats(0, 1), st.booleans()),
                       min_size=1),
       st.floats(1, 4e6))
def test_properties_of_a_step(tenants, limit) -> None:
    quotas = {k: q for k, (q, _f, _m) in tenants.items()}
    usage = {k: q * f for k, (q, f, _m) in tenants.items()}  # a tenant uses at most its quota
    muted = {k for k, (_q, _f, m) in tenants.items() if m}
    t = tuner(quotas, usage, limit=limit, min_share=0.01)
    t.usage.muted = muted
    r = step(t, 0)
    if not r.engaged:
        assert r.dynamic == {}
        return
    assert sum(t.target.values()) <= limit * (1 + 1e-9)
    assert all(t.target[k] <= quotas[k] * (1 + 1e-9) for k in t.target)
    # the published quotas are the fair allocation; a tenant given its whole quota has none
    assert r.dynamic == {k: q for k, q in t.target.items() if q < quotas[k]}
    # an unmuted tenant gets at most headroom x its usage (or its floor); a muted one bids as
    # saturated, so it gets at least what an unmuted tenant of its weight could
    for k, q in t.target.items():
        if k not in muted:
            assert q <= max(1.1 * usage[k], 0.01 * quotas[k]) * (1 + 1e-9)
    for k in muted & t.target.keys():
        t2 = tuner(quotas, usage, limit=limit, min_share=0.01)
        t2.usage.muted = muted - {k}
        step(t2, 0)
        assert t.target[k] >= t2.target.get(k, 0.0) * (1 - 1e-9)


def test_broker_request_quota_from_capacity_exempt_time_and_queue() -> None:
    load = FakeLoad(exempt=20.0, queue=0)
    q = BrokerRequestQuota(load, capacity=100, threshold=10, step=0.25)
    assert q.tune() == 80  # capacity - exempt
    load.queue = 11
    assert q.tune() == 60  # reduced while the queue is above the threshold
    assert q.tune() == 45
    load.queue = 10
    assert q.tune() == 65  # raised back by step * base per interval
    assert q.tune() == 80
    assert q.tune() == 80  # never above the common case
    load.queue, load.exempt = 100, 0.0
    for _ in range(40):
        q.tune()
    assert q.value == 5.0  # the floor: 5% of the capacity


def test_broker_protection_step_uses_configs_sources_and_applies_changes() -> None:
    cfg = BrokerConfig.load(None, {"shoal.broker.produce.byte.rate.limit": "1000",
                                   "shoal.broker.request.queue.threshold": "5"})
    quotas = {("produce", "A"): 1000.0, ("produce", "B"): 3000.0}
    applied: list[tuple[str, str, float | None]] = []
    p = BrokerProtection(lambda: cfg, lambda kind, t: quotas.get((kind, t)),
                         lambda kind, t, v: applied.append((kind, t, v)))
    assert p.interval_ms() == 5000
    produce, request = FakeUsage({"A": 900, "B": 900}), FakeUsage({"A": 80, "B": 40})
    fetch = FakeUsage({"A": 1e12})
    p.set_sources(produce=produce, fetch=fetch, request=request, load=FakeLoad(queue=6))
    r = p.step(0)
    assert p.produce.target == pytest.approx({"A": 250, "B": 750})  # weights 1000 : 3000
    assert r["produce"].dynamic == pytest.approx({"A": 250, "B": 750})
    assert r["fetch"].dynamic == {} and p.fetch.dynamic_tenant_quota("A") is None  # no fetch limit
    # request limit: 100 * (1 - 0.1) = 90 (queue above 5); unconfigured tenants weigh the same;
    # B: 1.1 x 40 = 44 is below its share of 45, A gets the rest
    assert p.request_quota.value == pytest.approx(90)
    assert p.request.target == pytest.approx({"A": 46, "B": 44})
    assert r["request"].dynamic == pytest.approx({"A": 46, "B": 44})
    assert sorted(applied) == sorted([("produce", "A", 250.0), ("produce", "B", 750.0),
                                      ("request", "A", pytest.approx(46)), ("request", "B", pytest.approx(44))])
    applied.clear()
    produce.usage = {"A": 10, "B": 10}  # demand gone: produce quotas restored
    p.request_tuning = lambda: False  # no request quota configured: request tuning off
    r = p.step(5000)
    assert r["produce"].dynamic == {} and r["request"].dynamic == {}
    last = {(kind, t): v for kind, t, v in applied}  # every change was pushed; the last one holds
    assert last == {("produce", "A"): None, ("produce", "B"): None, ("request", "A"): None, ("request", "B"): None}


def simulate(quotas, demand, limit, *, intervals=30, headroom=1.1):
    """Usage each interval = min(demand, quota in effect) — enforcement as a perfect throttle,
    which mutes the tenants that want more; returns the allocation history."""
    t = tuner(quotas, {}, limit=limit, headroom=headroom, min_share=0.01)
    history = []
    now = 0
    for _ in range(intervals):
        in_effect = {k: t.dynamic_tenant_quota(k) or quotas[k] for k in quotas}
        t.usage.usage = {k: min(demand[k], in_effect[k]) for k in quotas}
        t.usage.muted = {k for k in quotas if demand[k] > in_effect[k]}
        history.append(dict(t.usage.usage))
        step(t, now)
        now += 5000
    return history


def test_converges_to_weighted_max_min_fair_shares() -> None:
    quotas = {"A": 100, "B": 200, "C": 300, "D": 400}
    demand = {"A": 50, "B": 400, "C": 50, "D": 1000}
    history = simulate(quotas, demand, limit=500)
    ideal = water_fill(500, {k: min(demand[k], quotas[k]) for k in quotas}, quotas)
    assert ideal == pytest.approx({"A": 50, "B": 133.33, "C": 50, "D": 266.67}, rel=1e-3)
    final = history[-1]
    assert sum(final.values()) <= 500
    assert jain_index([final[k] / ideal[k] for k in quotas]) >= 0.99
    # settled after the first tuning interval and stays there
    assert all(h == pytest.approx(final) for h in history[2:])
