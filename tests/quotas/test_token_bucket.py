"""KIP-599 token bucket: exact examples from Kafka's TokenBucketTest and
ControllerMutationQuotaManagerTest (strict and permissive) on a ManualClock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.clock import ManualClock
from shoal.quotas.token_bucket import (
    MutationQuota,
    ThrottlingQuotaExceeded,
    TokenBucket,
    check_and_record,
    token_throttle_time_ms,
)


def test_kafka_token_bucket_record() -> None:
    """TokenBucketTest.testRecord: rate 5/s, 10 samples of 2 s -> burst 100."""
    clock = ManualClock()
    tk = TokenBucket(5, samples=10, window_ms=2000)
    assert tk.burst == 100
    assert tk.measure(clock.now_ms()) == 100
    tk.record(60, clock.now_ms())
    assert tk.measure(clock.now_ms()) == 40
    clock.sleep(2)
    tk.record(5, clock.now_ms())
    assert tk.measure(clock.now_ms()) == 45
    clock.sleep(2)
    tk.record(60, clock.now_ms())
    assert tk.measure(clock.now_ms()) == -5
    assert tk.throttle_time_ms(clock.now_ms()) == 1000  # 5 tokens at 5/s


def test_kafka_token_bucket_unrecord() -> None:
    clock = ManualClock()
    tk = TokenBucket(5, samples=10, window_ms=2000)
    tk.record(-60, clock.now_ms())
    assert tk.measure(clock.now_ms()) == 100  # never above the burst
    clock.sleep(2)
    tk.record(60, clock.now_ms())
    assert tk.measure(clock.now_ms()) == 40
    clock.sleep(2)
    tk.record(-60, clock.now_ms())
    assert tk.measure(clock.now_ms()) == 100


def test_kip_599_doc_example() -> None:
    # quota 5, 100 samples of 1 s: burst 500; a burst of 560 leaves -60 -> 12 s
    tk = TokenBucket(5, samples=100, window_ms=1000)
    t = 1_700_000_000_000
    tk.record(560, t)
    assert tk.measure(t) == -60
    assert tk.throttle_time_ms(t) == 12_000


def test_throttle_time_formula() -> None:
    # ControllerMutationQuotaManagerTest.testThrottleTime
    assert token_throttle_time_ms(0, 10) == 0
    assert token_throttle_time_ms(-5, 10) == 500
    assert token_throttle_time_ms(-10, 10) == 1000
    assert token_throttle_time_ms(-0.0025, 5) == 1  # 0.5 ms rounds half up


def test_strict_quota() -> None:
    """StrictControllerMutationQuotaTest: quota 10/s, 10 samples of 1 s (burst 100)."""
    clock = ManualClock()
    quota = MutationQuota(TokenBucket(10, samples=10), strict=True)
    quota.record(90, clock.now_ms())  # tokens 10
    assert not quota.is_exceeded and quota.throttle_time_ms(clock.now_ms()) == 0
    quota.record(90, clock.now_ms())  # tokens -80, still accepted
    assert not quota.is_exceeded and quota.throttle_time_ms(clock.now_ms()) == 0
    with pytest.raises(ThrottlingQuotaExceeded) as err:
        quota.record(90, clock.now_ms())  # rejected, not recorded
    assert err.value.throttle_time_ms == 8000
    assert quota.is_exceeded
    assert quota.bucket.measure(clock.now_ms()) == -80
    clock.sleep(5)
    assert quota.throttle_time_ms(clock.now_ms()) == 3000


def test_permissive_quota() -> None:
    clock = ManualClock()
    quota = MutationQuota(TokenBucket(10, samples=10), strict=False)
    quota.record(90, clock.now_ms())
    assert quota.throttle_time_ms(clock.now_ms()) == 0
    quota.record(90, clock.now_ms())
    assert not quota.is_exceeded and quota.throttle_time_ms(clock.now_ms()) == 8000
    quota.record(90, clock.now_ms())
    assert not quota.is_exceeded and quota.throttle_time_ms(clock.now_ms()) == 17000
    clock.sleep(5)
    assert quota.throttle_time_ms(clock.now_ms()) == 12000


def test_manager_strict_record() -> None:
    """ControllerMutationQuotaManagerTest.testControllerMutationQuotaViolation (config 10 x 1 s)."""
    clock = ManualClock()
    bucket = TokenBucket(10, samples=10)
    for _ in range(10):
        assert check_and_record(bucket, 10, clock.now_ms()) == 0
        clock.sleep(1)
    assert check_and_record(bucket, 110, clock.now_ms()) == 0  # 100 tokens: accepted -> -10
    throttle = check_and_record(bucket, 110, clock.now_ms())
    assert throttle == 1000  # rejected: 10 / 10 s
    clock.sleep(throttle / 1000)
    assert check_and_record(bucket, 110, clock.now_ms()) == 0  # tokens back to 0


@settings(max_examples=200, deadline=None)
@given(st.floats(0.1, 1e4), st.lists(st.tuples(st.integers(0, 5000), st.floats(0, 1e4)), max_size=40))
def test_bucket_properties(quota: float, events: list) -> None:
    """Tokens never exceed the burst; waiting the throttle brings them back to >= 0."""
    tk = TokenBucket(quota)
    now = 1_700_000_000_000
    for gap, value in events:
        now += gap
        tk.record(value, now)
        assert tk.tokens <= tk.burst
        wait = tk.throttle_time_ms(now)
        assert wait >= 0
        assert tk.measure(now + wait + 1) >= 0
        tk = TokenBucket(quota, tokens=tk.tokens, last_update_ms=now)  # measure moved time
