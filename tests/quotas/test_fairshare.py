"""Auto-tuner, tenant slices and broker request quota: exact examples and Hypothesis properties,
including a brute-force water-filling (bisection on the fair level) written here."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shoal.quotas.fairshare import (
    TenantUsage as T,
    broker_request_quota,
    dynamic_quotas,
    jain_index,
    tenant_quota_slice,
    tenant_quota_slices,
    water_fill,
)

REL = 1e-9


def brute_force(limit: float, demands: dict, weights: dict) -> dict:
    """Find the fair level lam with sum(min(d_i, lam * w_i)) = limit by bisection."""
    if math.fsum(demands.values()) <= limit:
        return dict(demands)
    lo, hi = 0.0, max(d / weights[k] for k, d in demands.items())
    for _ in range(200):
        mid = (lo + hi) / 2
        if math.fsum(min(d, mid * weights[k]) for k, d in demands.items()) > limit:
            hi = mid
        else:
            lo = mid
    return {k: min(d, lo * weights[k]) for k, d in demands.items()}


# -- exact examples ---------------------------------------------------------------------------

def test_document_example_equal_quotas() -> None:
    """The document's diagram: equal quotas, A and B under the fair share keep a little above
    their usage, C and D split the rest."""
    tenants = {"A": T(quota=100, usage=10), "B": T(quota=100, usage=20),
               "C": T(quota=100, usage=100), "D": T(quota=100, usage=100)}
    assert dynamic_quotas(100, tenants) == pytest.approx({"A": 11.0, "B": 22.0, "C": 33.5, "D": 33.5})


def test_weighted_by_configured_quota() -> None:
    tenants = {"small": T(quota=10, usage=50), "big": T(quota=30, usage=50)}
    # both saturate: 20 split 1:3
    assert dynamic_quotas(20, tenants) == pytest.approx({"small": 5.0, "big": 15.0})


def test_no_tuning_under_the_limit_and_inactive_get_quota_back() -> None:
    tenants = {"a": T(quota=40, usage=30), "b": T(quota=40, usage=30),
               "idle": T(quota=70, usage=0, active=False)}
    assert dynamic_quotas(100, tenants) == {"a": 40, "b": 40, "idle": 70}
    over = {**tenants, "c": T(quota=40, usage=60)}
    got = dynamic_quotas(100, over)
    assert got["idle"] == 70  # inactive: configured quota, not counted against L
    assert got["a"] + got["b"] + got["c"] == pytest.approx(100)
    # a and b use 30 < fair share 33.3: they keep 1.1 x 30 = 33; c gets the remaining 34
    assert got == pytest.approx({"a": 33.0, "b": 33.0, "c": 34.0, "idle": 70})


def test_over_quota_usage_is_capped_at_configured_quota() -> None:
    # usage above the quota (throttling lags): demand is the quota itself
    tenants = {"a": T(quota=10, usage=80), "b": T(quota=50, usage=5)}
    assert dynamic_quotas(50, tenants) == pytest.approx({"a": 10.0, "b": 5.5})


def test_min_quota_floor_for_idle_active_tenant() -> None:
    tenants = {"a": T(quota=100, usage=0), "b": T(quota=100, usage=500)}
    assert dynamic_quotas(100, tenants)["a"] == 0.0
    assert dynamic_quotas(100, tenants, min_quota=5) == pytest.approx({"a": 5.0, "b": 95.0})


def test_validation() -> None:
    with pytest.raises(ValueError):
        T(quota=0, usage=1)
    with pytest.raises(ValueError):
        T(quota=math.inf, usage=1)
    with pytest.raises(ValueError):
        dynamic_quotas(1, {"a": T(quota=1, usage=5)}, headroom=0.9)


def test_jain_index() -> None:
    assert jain_index([3, 3, 3]) == 1.0
    assert jain_index([1, 0, 0, 0]) == 0.25
    assert jain_index([]) == 1.0


# -- properties -------------------------------------------------------------------------------

tenant = st.builds(lambda q, u, a: T(quota=q, usage=u, active=a),
                   st.floats(1.0, 1e6), st.floats(0.0, 2e6), st.booleans())


@settings(max_examples=300, deadline=None)
@given(st.floats(1.0, 5e6), st.dictionaries(st.integers(0, 200), tenant, min_size=1, max_size=30),
       st.floats(1.0, 2.0))
def test_auto_tuner_properties(limit: float, tenants: dict, headroom: float) -> None:
    got = dynamic_quotas(limit, tenants, headroom=headroom)
    assert set(got) == set(tenants)
    active = {k: t for k, t in tenants.items() if t.active}
    for k, t in tenants.items():
        assert 0 <= got[k] <= t.quota * (1 + REL)  # never above the configured quota
        if not t.active:
            assert got[k] == t.quota
    if math.fsum(t.usage for t in active.values()) <= limit:
        assert all(got[k] == t.quota for k, t in tenants.items())
        return
    # the tuner applies: the sum never exceeds L
    assert math.fsum(got[k] for k in active) <= limit * (1 + REL)
    demands = {k: min(t.quota, headroom * t.usage) for k, t in active.items()}
    weights = {k: t.quota for k, t in active.items()}
    # matches a brute-force water-filling
    expected = brute_force(limit, demands, weights)
    for k in active:
        assert got[k] == pytest.approx(expected[k], rel=1e-6, abs=1e-6 * limit)
    # saturated tenants (held below their demand) share in proportion to their weights,
    # and Jain's index over their weighted shares is (essentially) 1
    saturated = [k for k in active if got[k] < demands[k] * (1 - 1e-9)]
    shares = [got[k] / weights[k] for k in saturated]
    if shares:
        assert max(shares) == pytest.approx(min(shares), rel=1e-9)
        assert jain_index(shares) >= 0.99
        # and nobody unsaturated gets a larger weighted share than the fair level
        for k in active:
            assert got[k] / weights[k] <= max(shares) * (1 + 1e-9)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 1e6), st.dictionaries(st.integers(0, 50), st.tuples(st.floats(0, 1e5), st.floats(0.01, 100)),
                                             min_size=1, max_size=20))
def test_water_fill_matches_brute_force(limit: float, spec: dict) -> None:
    demands = {k: d for k, (d, _) in spec.items()}
    weights = {k: w for k, (_, w) in spec.items()}
    got = water_fill(limit, demands, weights)
    expected = brute_force(limit, demands, weights)
    assert math.fsum(got.values()) <= max(limit, math.fsum(demands.values())) * (1 + REL) + 1e-9
    for k in spec:
        assert got[k] <= demands[k]
        assert got[k] == pytest.approx(expected[k], rel=1e-6, abs=1e-6 * max(limit, 1.0))


def test_four_saturating_tenants_with_weights() -> None:
    tenants = {i: T(quota=q, usage=10 * q) for i, q in enumerate([1, 2, 3, 4])}
    got = dynamic_quotas(5, tenants)
    assert got == pytest.approx({0: 0.5, 1: 1.0, 2: 1.5, 3: 2.0})
    assert jain_index([got[i] / tenants[i].quota for i in got]) == pytest.approx(1.0)


# -- tenant slices ----------------------------------------------------------------------------

def test_equal_split_over_leader_brokers() -> None:
    assert tenant_quota_slices(90.0, [1, 2, 3]) == {1: 30.0, 2: 30.0, 3: 30.0}
    assert tenant_quota_slice(90.0, [1, 2, 3], 2) == 30.0
    assert tenant_quota_slice(90.0, [1, 1, 2], 1) == 45.0  # duplicates ignored


def test_single_node_and_unknown_leaders_get_whole_quota() -> None:
    assert tenant_quota_slice(50.0, [0], 0) == 50.0
    assert tenant_quota_slice(50.0, [], 0) == 50.0
    assert tenant_quota_slices(50.0, []) == {}


def test_non_leader_broker_gets_equal_share() -> None:
    assert tenant_quota_slice(90.0, [1, 2, 3], 7) == 30.0


def test_demand_proportional_split() -> None:
    got = tenant_quota_slices(100.0, [1, 2], {1: 3.0, 2: 1.0}, min_fraction=0.0)
    assert got == pytest.approx({1: 75.0, 2: 25.0})
    got = tenant_quota_slices(100.0, [1, 2], {1: 1.0}, min_fraction=0.2)
    # floor 0.2 * 50 = 10 each; the other 80 follows demand
    assert got == pytest.approx({1: 90.0, 2: 10.0})
    assert tenant_quota_slices(100.0, [1, 2], {1: 0.0, 2: 0.0}) == {1: 50.0, 2: 50.0}


@settings(max_examples=200, deadline=None)
@given(st.floats(1.0, 1e9), st.lists(st.integers(0, 20), min_size=1, max_size=15, unique=True),
       st.dictionaries(st.integers(0, 20), st.floats(0, 1e6)), st.floats(0.0, 1.0))
@example(1.5, [0], {0: 5e-324}, 0.0)  # spread * demand underflowed before the division
def test_slices_sum_to_the_quota(quota: float, brokers: list, demand: dict, min_fraction: float) -> None:
    got = tenant_quota_slices(quota, brokers, demand, min_fraction=min_fraction)
    assert set(got) == set(brokers)
    assert math.fsum(got.values()) == pytest.approx(quota, rel=1e-9)
    for b in brokers:
        assert got[b] >= min_fraction * quota / len(brokers) * (1 - 1e-9)


# -- broker request quota ---------------------------------------------------------------------

def test_broker_request_quota_rule() -> None:
    cap = 1100.0  # (3 network + 8 io threads) * 100 %
    # first interval, queue fine: capacity minus exempt time
    q = broker_request_quota(cap, 100.0, queue_len=10, threshold=50, previous=None, step=0.25)
    assert q == 1000.0
    # queue above threshold: reduced by the factor, again while it stays above
    q = broker_request_quota(cap, 100.0, 80, 50, q, 0.25)
    assert q == 750.0
    q = broker_request_quota(cap, 100.0, 60, 50, q, 0.25)
    assert q == 562.5
    # exactly at the threshold counts as drained: raised by step * base per interval
    q = broker_request_quota(cap, 100.0, 50, 50, q, 0.25)
    assert q == 812.5
    q = broker_request_quota(cap, 100.0, 0, 50, q, 0.25)
    assert q == 1000.0  # back to the common case, never above it
    # exempt usage grows: the common case follows immediately
    assert broker_request_quota(cap, 400.0, 0, 50, q, 0.25) == 700.0
    # overload while exempt usage grew: decrease from the lower of the two
    assert broker_request_quota(cap, 400.0, 99, 50, 1000.0, 0.5) == 350.0
    # floor and saturation
    assert broker_request_quota(cap, 2000.0, 0, 50, None, 0.25) == 0.0
    assert broker_request_quota(cap, 2000.0, 0, 50, None, 0.25, floor=50.0) == 50.0
    with pytest.raises(ValueError):
        broker_request_quota(cap, 0, 0, 0, None, 0.0)


@settings(max_examples=200, deadline=None)
@given(st.floats(1, 1e4), st.lists(st.tuples(st.floats(0, 1e4), st.integers(0, 1000)), min_size=1, max_size=30),
       st.integers(0, 500), st.floats(0.01, 1.0))
def test_broker_request_quota_properties(cap: float, intervals: list, threshold: int, step: float) -> None:
    prev = None
    for exempt, queue in intervals:
        q = broker_request_quota(cap, exempt, queue, threshold, prev, step)
        base = max(0.0, cap - exempt)
        assert 0.0 <= q <= base
        if queue > threshold and prev is not None:
            assert q <= prev
        prev = q
    # once the queue drains and exempt load is steady, it returns to the common case
    for _ in range(math.ceil(1 / step) + 1):
        prev = broker_request_quota(cap, 0.0, 0, threshold, prev, step)
    assert prev == cap
