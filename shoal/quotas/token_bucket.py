"""KIP-599 controller mutation quota: Kafka's ``TokenBucket`` and strict/permissive quotas.

The bucket refills at ``quota`` tokens per second up to a burst of
``quota * samples * window_seconds`` (``controller.quota.window.num`` x
``controller.quota.window.size.seconds``, 11 x 1 s). Recording removes tokens and may drive the
bucket negative; the quota is violated while tokens < 0, and the throttle is the time to refill
to zero: ``round(-tokens / quota * 1000)`` ms (Kafka's ``Math.round``, half up).

As in Kafka the bucket starts with 0 tokens at time 0, so at any realistic wall-clock time the
first refill fills it to the burst. Kafka's worked example: quota 5/s, 100 samples of 1 s
(burst 500); a burst of 560 leaves -60 tokens, so the wait is 60 / 5 = 12 s.

* Strict (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+, per KIP-599): the quota
  is *checked before* recording; once tokens are negative, further mutations are rejected
  (THROTTLING_QUOTA_EXCEEDED) without being recorded. A request that starts with tokens >= 0 is accepted whole, however big.
* Permissive (older versions): always recorded and accepted; the response carries the throttle.

Not thread-safe; the broker serialises access per sensor.
"""

from __future__ import annotations

from shoal.quotas.rate import DEFAULT_NUM_SAMPLES, DEFAULT_WINDOW_MS
from shoal.quotas.throttle import java_round


def token_throttle_time_ms(tokens: float, quota: float) -> int:
    """``ControllerMutationQuotaManager.throttleTimeMs``: ``round(-tokens / quota * 1000)``."""
    if quota <= 0:
        raise ValueError(f"quota must be positive, got {quota}")
    return java_round(-tokens / quota * 1000)


class TokenBucket:
    """Kafka's ``TokenBucket`` stat. ``quota`` (tokens per second) may be changed in place."""

    __slots__ = ("quota", "samples", "window_ms", "tokens", "last_update_ms")

    def __init__(self, quota: float, *, samples: int = DEFAULT_NUM_SAMPLES,
                 window_ms: int = DEFAULT_WINDOW_MS, tokens: float = 0.0,
                 last_update_ms: int = 0) -> None:
        self.quota = quota
        self.samples = samples
        self.window_ms = window_ms
        self.tokens = tokens
        self.last_update_ms = last_update_ms

    @property
    def burst(self) -> float:
        return self.samples * (self.window_ms / 1000.0) * self.quota

    def _refill(self, now_ms: int) -> None:
        burst = self.burst
        self.tokens = min(burst, self.tokens + self.quota * ((now_ms - self.last_update_ms) / 1000.0))
        self.last_update_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """Tokens available at ``now_ms`` (after refilling)."""
        self._refill(now_ms)
        return self.tokens

    def record(self, value: float, now_ms: int) -> None:
        """Take ``value`` tokens (a negative value gives them back, never above the burst)."""
        self._refill(now_ms)
        self.tokens = min(self.burst, self.tokens - value)

    def throttle_time_ms(self, now_ms: int) -> int:
        """0 while tokens >= 0, else the time to refill to zero."""
        tokens = self.measure(now_ms)
        return 0 if tokens >= 0 else token_throttle_time_ms(tokens, self.quota)


def check_and_record(bucket: TokenBucket, permits: float, now_ms: int) -> int:
    """Strict semantics as ``ControllerMutationQuotaManager.recordAndGetThrottleTimeMs``: if the
    bucket is already negative, return the throttle *without* recording; else record, return 0.

    (A bucket a hair below zero is a rejection whose rounded throttle is 0, as in Kafka; use
    :class:`MutationQuota` when the caller needs to tell the two apart.)"""
    tokens = bucket.measure(now_ms)
    if tokens < 0:
        return token_throttle_time_ms(tokens, bucket.quota)
    bucket.record(permits, now_ms)
    return 0


class ThrottlingQuotaExceeded(Exception):
    """Raised by a strict mutation quota; maps to THROTTLING_QUOTA_EXCEEDED (error code 89)."""

    def __init__(self, throttle_time_ms: int) -> None:
        super().__init__(f"throttling quota exceeded, retry after {throttle_time_ms} ms")
        self.throttle_time_ms = throttle_time_ms


class MutationQuota:
    """The quota of one request (Kafka's Strict/PermissiveControllerMutationQuota): records each
    topic's mutations as the request is processed and remembers the last throttle, which decays
    with time (the request may wait in purgatory before the response is built)."""

    __slots__ = ("bucket", "strict", "_last_throttle_ms", "_last_recorded_ms")

    def __init__(self, bucket: TokenBucket, *, strict: bool) -> None:
        self.bucket = bucket
        self.strict = strict
        self._last_throttle_ms = 0
        self._last_recorded_ms = 0

    @property
    def is_exceeded(self) -> bool:
        """Strict only: a mutation was rejected (later topics of the request are rejected too)."""
        return self.strict and self._last_throttle_ms > 0

    def record(self, permits: float, now_ms: int) -> None:
        """Strict: raise :class:`ThrottlingQuotaExceeded` (nothing recorded) if the bucket is
        negative, else record. Permissive: record, then note the throttle if now negative."""
        if self.strict:
            tokens = self.bucket.measure(now_ms)
            if tokens < 0:
                self._last_throttle_ms = token_throttle_time_ms(tokens, self.bucket.quota)
                self._last_recorded_ms = now_ms
                raise ThrottlingQuotaExceeded(self._last_throttle_ms)
            self.bucket.record(permits, now_ms)
            return
        self.bucket.record(permits, now_ms)
        tokens = self.bucket.measure(now_ms)
        if tokens < 0:
            self._last_throttle_ms = token_throttle_time_ms(tokens, self.bucket.quota)
            self._last_recorded_ms = now_ms

    def throttle_time_ms(self, now_ms: int) -> int:
        return max(0, self._last_throttle_ms - (now_ms - self._last_recorded_ms))
