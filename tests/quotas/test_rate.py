"""WindowedRate: Kafka's RateTest cases and the windowSize rule, with a ManualClock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.clock import ManualClock
from shoal.quotas.rate import RateConfig, WindowedRate


@pytest.mark.parametrize("samples,window_s", [(1, 1), (1, 11), (11, 1), (11, 11)])
def test_rate_with_no_prior_samples(samples: int, window_s: int) -> None:
    # RateTest.testRateWithNoPriorAvailableSamples: N-1 zero-valued prior windows are assumed.
    clock = ManualClock()
    rate = WindowedRate(RateConfig(samples=samples, window_ms=window_s * 1000))
    rate.record(50.0, clock.now_ms())
    measurement_ms = window_s * 1000 - 1
    clock.sleep(measurement_ms / 1000)
    expected = 50.0 / (measurement_ms / 1000 + (samples - 1) * window_s)
    assert rate.measure(clock.now_ms()) == pytest.approx(expected, abs=1e-6)


def test_rate_is_consistent_after_the_first_window() -> None:
    # RateTest.testRateIsConsistentAfterTheFirstWindow
    clock = ManualClock()
    rate = WindowedRate(RateConfig(samples=2, window_ms=1000))
    steps = [0, 99, 100, 100, 100, 100, 100, 100, 100, 100, 100]
    for step in steps:
        clock.sleep(step / 1000)
        rate.record(1, clock.now_ms())
    clock.sleep(0.101)
    for step in steps:
        clock.sleep(step / 1000)
        rate.record(1, clock.now_ms())
        observed = rate.measure(clock.now_ms())
        assert 10 <= observed <= 11
        assert rate.measure(clock.now_ms()) == observed


def test_window_size_exact_values() -> None:
    rate = WindowedRate()  # 11 x 1 s
    t0 = 1_000_000
    assert rate.window_size_ms(t0) == 10_000  # nothing yet: 10 assumed full windows + 0
    rate.record(1, t0)
    assert rate.window_size_ms(t0 + 500) == 10_500  # half a window + 10 assumed
    for i in range(1, 11):
        rate.record(1, t0 + i * 1000)
    # oldest sample started at t0: 10.5 s elapsed, >= 10 full windows, nothing added
    assert rate.window_size_ms(t0 + 10_500) == 10_500
    assert rate.total(t0 + 10_500) == 11
    # at +11 s the first sample (last event t0) is obsolete and reset
    assert rate.total(t0 + 11_000) == 10
    assert rate.window_size_ms(t0 + 11_000) == 10_000


def test_samples_expire_after_idle_period() -> None:
    rate = WindowedRate()
    rate.record(1000, 0)
    assert rate.measure(10_999) == pytest.approx(1000 / 10.999)
    assert rate.measure(11_000) == 0.0  # samples * window after the last event
    assert rate.window_size_ms(11_000) == 10_000


def test_minimum_window_is_one_ms() -> None:
    rate = WindowedRate(RateConfig(samples=1, window_ms=1000))
    rate.record(5, 0)
    assert rate.window_size_ms(0) == 1
    assert rate.measure(0) == 5000.0


def test_unrecord_cancels() -> None:
    rate = WindowedRate()
    rate.record(700, 0)
    rate.record(-700, 10)
    assert rate.measure(20) == 0.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3000), st.floats(0, 1e6)), max_size=60),
       st.integers(1, 12), st.integers(1, 2000))
def test_properties(events: list[tuple[int, float]], samples: int, window_ms: int) -> None:
    """The window is never below (samples-1) windows (once >= 1 ms), the rate never negative,
    and the retained total is at most what was recorded in the last samples+1 windows."""
    rate = WindowedRate(RateConfig(samples=samples, window_ms=window_ms))
    now = 0
    recorded: list[tuple[int, float]] = []
    for gap, value in events:
        now += gap
        rate.record(value, now)
        recorded.append((now, value))
        w = rate.window_size_ms(now)
        assert w >= max(1, (samples - 1) * window_ms)
        assert rate.measure(now) >= 0
        horizon = now - (samples + 1) * window_ms
        assert rate.total(now) <= sum(v for t, v in recorded if t > horizon) * (1 + 1e-9) + 1e-9
