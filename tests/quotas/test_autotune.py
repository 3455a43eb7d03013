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
    def __init__(self, usage=None) -> None:
        self.usage = dict(usage or {})

    def usage_by_tenant(self):
        return dict(self.usage)


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
    share the rest: 200 - 11 - 22 = 167, i.e. 83.5 each. C and D get there in bounded steps."""
    t = tuner({"A": 100, "B": 100, "C": 100, "D": 100}, {"A": 10, "B": 20, "C": 100, "D": 100}, limit=200)
    r = step(t, 0)
    assert r.engaged and r.usage == 230
    assert t.target == pytest.approx({"A": 11, "B": 22, "C": 83.5, "D": 83.5})
    assert r.dynamic == pytest.approx({"A": 11, "B": 22, "C": 83.5, "D": 83.5})  # 83.5 >= 0.7 x 100
    assert t.dynamic_tenant_quota("C") == pytest.approx(83.5)
    assert t.dynamic_tenant_quota("nobody") is None


def test_shares_are_weighted_and_reached_in_bounded_steps() -> None:
    """Weights 100 : 300 share 200 as 50 : 150. A dynamic quota drops by at most 30% of the
    tenant's usage per interval (Kafka's throttle then mutes for at most ~5 s)."""
    t = tuner({"A": 100, "B": 300}, {"A": 100, "B": 300}, limit=200)
    r = step(t, 0)
    assert t.target == pytest.approx({"A": 50, "B": 150})
    assert r.dynamic == pytest.approx({"A": 70, "B": 210})  # 0.7 x usage
    t.usage.usage = {"A": 70, "B": 210}  # held at their dynamic quotas: they bid for full shares
    r = step(t, 5000)
    assert t.target == pytest.approx({"A": 50, "B": 150})
    assert r.dynamic == pytest.approx({"A": 50, "B": 150})


def test_a_tenant_held_too_low_bids_for_its_share() -> None:
    """Measured low (Kafka pads a young window with empty samples), A got 1.1 x 1 = 1.1; at its
    dynamic quota next interval it bids as a saturated tenant and gets its share at once."""
    t = tuner({"A": 100, "B": 100}, {"A": 1, "B": 100}, limit=100)
    assert step(t, 0).dynamic == pytest.approx({"A": 1.1, "B": 98.9})
    t.usage.usage = {"A": 1.1, "B": 98.9}
    assert step(t, 5000).dynamic == pytest.approx({"A": 50, "B": 69.23})  # B: 0.7 x 98.9
    t.usage.usage = {"A": 40, "B": 69.23}  # A's real demand is 40: below its share
    assert step(t, 10_000).dynamic == pytest.approx({"A": 44, "B": 56})


def test_within_the_limit_nothing_is_tuned_and_no_limit_never_tunes() -> None:
    t = tuner({"A": 100, "B": 100}, {"A": 90, "B": 100}, limit=200)
    r = step(t, 0)
    assert not r.engaged and r.dynamic == {} and t.dynamic_tenant_quota("A") is None
    t2 = tuner({"A": 100}, {"A": 1e12}, limit=NO_LIMIT)
    assert step(t2, 0).dynamic == {}


def test_hysteresis_then_release() -> None:
    t = tuner({"A": 200, "B": 200}, {"A": 150, "B": 150}, limit=200)
    assert step(t, 0).dynamic == pytest.approx({"A": 105, "B": 105})  # target 100: bounded step
    t.usage.usage = {"A": 105, "B": 105}
    assert step(t, 5000).dynamic == pytest.approx({"A": 100, "B": 100})
    # held at their dynamic quotas they use the limit: still engaged
    t.usage.usage = {"A": 100, "B": 100}
    r = step(t, 10_000)
    assert r.engaged and r.dynamic == pytest.approx({"A": 100, "B": 100})
    # demand falls below the quotas (85 < 0.955 x 100) and 1.1 x 170 <= 200; one interval later
    # (a single reading may be a dip of a bursty rate) the quotas are restored
    t.usage.usage = {"A": 85, "B": 85}
    assert step(t, 15_000).engaged
    r = step(t, 20_000)
    assert not r.engaged and r.dynamic == {} and t.dynamic_tenant_quota("A") is None


def test_inactive_tenants_get_their_quota_back_and_take_no_share() -> None:
    t = tuner({"A": 200, "B": 200, "C": 200}, {"A": 100, "B": 100, "C": 100}, limit=200, window_ms=60_000)
    assert step(t, 0).dynamic == pytest.approx({"A": 70, "B": 70, "C": 70})  # target 66.7 each
    t.usage.usage = {"A": 70, "B": 70}  # C stopped; still active for a minute (usage 0)
    step(t, 30_000)  # C was at its quota in the previous interval: still bidding this one
    r = step(t, 35_000)
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
@given(st.dictionaries(st.sampled_from("ABCDEFGH"), st.tuples(st.floats(1, 1e6), st.floats(0, 1)), min_size=1),
       st.floats(1, 4e6))
def test_properties_of_a_step(tenants, limit) -> None:
    quotas = {k: q for k, (q, _f) in tenants.items()}
    usage = {k: q * f for k, (q, f) in tenants.items()}  # a tenant uses at most its quota
    t = tuner(quotas, usage, limit=limit, min_share=0.01)
    r = step(t, 0)
    if r.engaged:
        assert sum(t.target.values()) <= limit * (1 + 1e-9)
        assert all(t.target[k] <= quotas[k] for k in t.target)
    for k, q in r.dynamic.items():
        assert t.target[k] <= q < quotas[k]
        assert q <= max(t.target[k], 0.7 * usage[k]) * (1 + 1e-9)


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
    assert r["produce"].dynamic == pytest.approx({"A": 630, "B": 750})  # A: 0.7 x 900 this step
    assert r["fetch"].dynamic == {} and p.fetch.dynamic_tenant_quota("A") is None  # no fetch limit
    # request limit: 100 * (1 - 0.1) = 90 (queue above 5); unconfigured tenants weigh the same;
    # B: 1.1 x 40 = 44 is below its share of 45, A gets the rest (56 = 0.7 x 80 this step)
    assert p.request_quota.value == pytest.approx(90)
    assert p.request.target == pytest.approx({"A": 46, "B": 44})
    assert r["request"].dynamic == pytest.approx({"A": 56, "B": 44})
    assert sorted(applied) == sorted([("produce", "A", pytest.approx(630)), ("produce", "B", 750.0),
                                      ("request", "A", pytest.approx(56)), ("request", "B", pytest.approx(44))])
    applied.clear()
    produce.usage = {"A": 10, "B": 10}  # demand gone: produce quotas restored
    p.request_tuning = lambda: False  # no request quota configured: request tuning off
    p.step(5000)  # the tenants were at their produce quotas one interval ago
    r = p.step(10_000)
    assert r["produce"].dynamic == {} and r["request"].dynamic == {}
    last = {(kind, t): v for kind, t, v in applied}  # every change was pushed; the last one holds
    assert last == {("produce", "A"): None, ("produce", "B"): None, ("request", "A"): None, ("request", "B"): None}


def simulate(quotas, demand, limit, *, intervals=30, headroom=1.1):
    """Usage each interval = min(demand, quota in effect) — enforcement as a perfect throttle;
    returns the allocation history."""
    t = tuner(quotas, {}, limit=limit, headroom=headroom, min_share=0.01)
    history = []
    now = 0
    for _ in range(intervals):
        in_effect = {k: t.dynamic_tenant_quota(k) or quotas[k] for k in quotas}
        t.usage.usage = {k: min(demand[k], in_effect[k]) for k in quotas}
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
