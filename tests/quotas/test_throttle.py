"""Throttle time: exact examples from Kafka's QuotaUtilsTest, ClientQuotaManagerTest and
ClientRequestQuotaManagerTest on a ManualClock, plus properties of the formula."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.clock import ManualClock
from shoal.quotas.rate import RateConfig
from shoal.quotas.throttle import (
    QuotaSensor,
    RequestQuotaSensor,
    bounded_throttle_time_ms,
    java_round,
    nanos_to_percentage,
    throttle_time_ms,
)


def test_issue_example_500_bytes_per_second_gives_2100_ms() -> None:
    """ClientQuotaManagerTest.testQuotaViolation, the example quoted in issue 5."""
    clock = ManualClock()
    sensor = QuotaSensor(500)
    for _ in range(10):
        assert sensor.record(400, clock.now_ms()) == 0
        clock.sleep(1.0)
    # 400*10 + 2300 = 6300 bytes over 10.5 s = 600 B/s; (600-500)/500 * 10500 = 2100
    clock.sleep(0.5)
    throttle = sensor.record(2300, clock.now_ms())
    assert throttle == 2100
    assert sensor.rate.window_size_ms(clock.now_ms()) == 10_500
    clock.sleep(throttle / 1000)
    # "Could continue to see delays until the bursty sample disappears"
    for _ in range(10):
        sensor.record(400, clock.now_ms())
        clock.sleep(1.0)
    assert sensor.record(0, clock.now_ms()) == 0


def test_request_quota_example_210_ms_and_cap_at_one_window() -> None:
    """ClientRequestQuotaManagerTest.testRequestPercentageQuotaViolation."""
    clock = ManualClock()
    sensor = RequestQuotaSensor(1.0)  # 1% of a thread = 10 ms per second

    def millis_to_percent(ms: float) -> float:
        return nanos_to_percentage(ms * 1000 * 1000)

    for _ in range(10):
        assert sensor.record(millis_to_percent(4), clock.now_ms()) == 0
        clock.sleep(1.0)
    # 4*10 + 67.1 = 107.1 ms / 10.5 s = 10.2 ms/s; (10.2-10)/10 * 10500 = 210
    clock.sleep(0.5)
    throttle = sensor.record(millis_to_percent(67.1), clock.now_ms())
    assert throttle == 210
    clock.sleep(throttle / 1000)
    for _ in range(11):
        sensor.record(millis_to_percent(4), clock.now_ms())
        clock.sleep(1.0)
    assert sensor.record(0, clock.now_ms()) == 0
    # a spike needing more than one window is capped at the window (1000 ms) ...
    assert sensor.record(millis_to_percent(500), clock.now_ms()) == 1000
    for _ in range(10):
        clock.sleep(1.0)
        assert sensor.record(0, clock.now_ms()) == 1000
    clock.sleep(1.0)
    # ... until the bursty sample has rolled over
    assert sensor.record(0, clock.now_ms()) == 0


def test_record_thread_time_ns() -> None:
    sensor = RequestQuotaSensor(1.0)
    assert sensor.record_thread_time_ns(4_000_000, 0) == 0
    assert sensor.rate.total(0) == pytest.approx(0.4)


# QuotaUtilsTest: its Rate metric has no samples, so W = (numSamples - 1) windows of 1 s.
def test_quota_utils_examples() -> None:
    assert throttle_time_ms(16.5, 16.5, 9_000) == 0
    assert throttle_time_ms(16.5, 16.5, 10_000) == 0
    assert throttle_time_ms(16.5, 20.4, 9_000) < 0
    assert throttle_time_ms(100.0, 50.0, 2_000) == 2000
    assert bounded_throttle_time_ms(18.2, 18.2, 9_000, 500) == 0
    assert bounded_throttle_time_ms(16.5, 22.4, 9_000, 500) < 0
    assert bounded_throttle_time_ms(55.0, 50.0, 1_000, 500) == 100
    assert bounded_throttle_time_ms(100.0, 50.0, 9_000, 500) == 500


def test_java_round_is_half_up_not_bankers() -> None:
    assert java_round(2.5) == 3 and round(2.5) == 2
    assert java_round(0.5) == 1
    assert java_round(-0.5) == 0
    assert java_round(-1.5) == -1
    assert java_round(0.49999999999999994) == 0  # Java 7+ Math.round
    assert java_round(1.4999) == 1
    # a half-millisecond case through the formula: (501-500)/500 * 1250 = 2.5 -> 3
    assert throttle_time_ms(501, 500, 1250) == 3


def test_bound_must_be_positive() -> None:
    with pytest.raises(ValueError):
        throttle_time_ms(1.0, 0.0, 1000)


def test_unlimited_sensor_never_throttles() -> None:
    sensor = QuotaSensor(None)
    assert sensor.record(1e12, 0) == 0
    assert sensor.max_value_in_quota_window() == math.inf


def test_quota_change_keeps_history_and_unrecord() -> None:
    # ClientQuotaManagerTest.testQuotaParsing shape: 2500*11 at one instant over a 2000 quota
    sensor = QuotaSensor(2000)
    assert sensor.record(2500 * 11, 0) > 0
    sensor.bound = 3000  # raised: 27500 / 10 s = 2750 <= 3000
    assert sensor.record(0, 0) == 0
    sensor.bound = 500
    assert sensor.record(0, 0) > 0
    sensor.unrecord(2500 * 11, 0)
    assert sensor.throttle_time_ms(0) == 0


def test_max_value_in_quota_window() -> None:
    # getMaxValueInQuotaWindow: bound * (samples - 1) * window seconds
    assert QuotaSensor(10).max_value_in_quota_window() == 100.0
    cfg = RateConfig(samples=11, window_ms=2000)
    assert QuotaSensor(10, cfg).max_value_in_quota_window() == 200.0


@settings(max_examples=300, deadline=None)
@given(st.floats(0.01, 1e9), st.floats(1.0, 1e6), st.integers(1, 100_000))
def test_throttle_restores_the_bound(bound: float, excess: float, window_ms: int) -> None:
    """Waiting the (unrounded) throttle X brings O*W/(W+X) back to T; the rounded one is within
    half a millisecond of it, and it is positive exactly when O > T."""
    observed = bound * (1 + excess / 1e3)
    x = (observed - bound) / bound * window_ms
    assert observed * window_ms / (window_ms + x) == pytest.approx(bound, rel=1e-9)
    t = throttle_time_ms(observed, bound, window_ms)
    assert abs(t - x) <= 0.5 + 1e-9 * max(1.0, x)
    assert t >= 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1500), st.integers(0, 5000)), min_size=1, max_size=40),
       st.integers(100, 5000))
def test_sensor_throttles_only_over_the_bound(events: list[tuple[int, int]], bound: int) -> None:
    sensor = QuotaSensor(bound)
    now = 0
    for gap, value in events:
        now += gap
        throttle = sensor.record(value, now)
        over = sensor.rate.measure(now) > bound
        assert (throttle > 0) <= over  # a tiny excess may round to 0 ms
        assert throttle >= 0
