"""The acceptor's cheap path through the connection-rate sensors (shoal.quotas.connections):
recording an attempt skips the measurement while the attempts alone cannot exceed the bound, and
every verdict is still exactly what measuring every time gives (plain QuotaSensors replayed
alongside as the reference)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.quotas.connections import (
    INT_MAX,
    ConnectionLimitsConfig,
    ConnectionQuotas,
    ListenerLimits,
    Verdict,
    attempts_within_bound,
)
from shoal.quotas.rate import RateConfig
from shoal.quotas.throttle import QuotaSensor


def sensor(bound: float | None, samples: int = 11, window_ms: int = 1000) -> QuotaSensor:
    return QuotaSensor(bound, RateConfig(samples=samples, window_ms=window_ms), max_throttle_ms=window_ms)


def test_attempts_within_bound_examples() -> None:
    # 10/s over at least 9 s (11 samples of 1 s, less one window for a clock that steps back):
    # 90 attempts are at most 10/s; half of that for rounding.
    assert attempts_within_bound(sensor(10.0)) == 45
    assert attempts_within_bound(sensor(float(INT_MAX))) == INT_MAX * 9000 // 2000
    assert attempts_within_bound(sensor(5.0, samples=2)) == 0  # W can be 1 ms: nothing is safe
    assert attempts_within_bound(sensor(0.0)) == 0
    assert attempts_within_bound(sensor(None)) == INT_MAX


@settings(max_examples=300, deadline=None)
@given(bound=st.floats(0.5, 50.0), samples=st.integers(1, 12), window_ms=st.integers(1, 2000),
       steps=st.lists(st.tuples(st.integers(-1500, 3000), st.integers(1, 30)), max_size=40))
def test_no_measurement_needed_while_within_bound(bound, samples, window_ms, steps) -> None:
    """However the clock moves (backwards too), a sensor holding at most
    ``attempts_within_bound`` attempts measures no more than its bound."""
    s = sensor(bound, samples, window_ms)
    safe = attempts_within_bound(s)
    now, recorded = 1_700_000_000_000, 0
    for dt, n in steps:
        now += dt
        for _ in range(n):
            if recorded >= safe:
                return
            recorded += 1
            s.record(1.0, now, check=False)
            assert s.rate.measure(now) <= bound
            assert s.throttle_time_ms(now) == 0


@settings(max_examples=200, deadline=None)
@given(broker_rate=st.sampled_from([3, 10, 40, INT_MAX]), listener_rate=st.sampled_from([2, 7, INT_MAX]),
       ip_rate=st.sampled_from([None, 1.0, 4.0]), samples=st.integers(1, 6),
       window_ms=st.sampled_from([1, 50, 1000]),
       steps=st.lists(st.tuples(st.integers(-200, 2500), st.integers(1, 25)), min_size=1, max_size=25))
def test_verdicts_equal_measuring_every_attempt(broker_rate, listener_rate, ip_rate, samples, window_ms,
                                                steps) -> None:
    rate = RateConfig(samples=samples, window_ms=window_ms)
    q = ConnectionQuotas(
        ConnectionLimitsConfig(max_connection_creation_rate=broker_rate, rate=rate,
                               listeners={"L": ListenerLimits(max_connection_creation_rate=listener_rate)}),
        {"10.0.0.1": ip_rate} if ip_rate is not None else {})
    ref_broker = sensor(float(broker_rate), samples, window_ms)
    ref_listener = sensor(float(listener_rate), samples, window_ms)
    ref_ip = sensor(ip_rate, samples, window_ms)
    now = 1_700_000_000_000
    for dt, n in steps:
        now += dt
        for _ in range(n):
            expected = max(ref_broker.record(1.0, now), ref_listener.record(1.0, now), 0)
            assert q.connection_rate_throttle_ms("L", now) == expected
            verdict = q.admit("L", "10.0.0.1", now).verdict
            if ip_rate is not None and ref_ip.record(1.0, now) > 0:  # taken back everywhere
                assert verdict is Verdict.THROTTLED
                for ref in (ref_ip, ref_broker, ref_listener):
                    ref.record(-1.0, now, check=False)
            else:
                assert verdict is Verdict.ACCEPTED
                q.release("L", "10.0.0.1")


def test_a_lower_limit_later_sees_the_history() -> None:
    """Attempts recorded without measuring are still in the window (Kafka records even under an
    unlimited rate), so lowering the limit throttles at once."""
    q = ConnectionQuotas(ConnectionLimitsConfig(listeners={"L": ListenerLimits()}))
    now = 1_700_000_000_000
    assert [q.connection_rate_throttle_ms("L", now) for _ in range(30)] == [0] * 30
    q.reconfigure(ConnectionLimitsConfig(max_connection_creation_rate=2, listeners={"L": ListenerLimits()}))
    # 31 in W = 10 s is 3.1/s against 2/s: (3.1 - 2) / 2 * 10000 = 5500 ms, capped at one window
    assert q.connection_rate_throttle_ms("L", now) == 1000
