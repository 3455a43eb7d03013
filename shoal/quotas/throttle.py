"""Throttle-time math (Kafka's ``QuotaUtils``) and quota sensors that return it on ``record``.

Derivation (from Kafka's ``QuotaUtils.throttleTime``): if O is the observed rate and T the bound
over a measured window of W ms, delaying by X brings the rate back to T when
``O * W / (W + X) = T``, i.e. ``X = (O - T) / T * W``. Kafka rounds with ``Math.round`` —
half up (toward +inf), *not* Python's banker's rounding — see :func:`java_round`.

A bound is violated only when ``O > T`` (Kafka's ``Quota.acceptable`` is ``value <= bound``).

* :class:`QuotaSensor` — produce/fetch byte-rate quota: records, measures, returns the throttle.
* :class:`RequestQuotaSensor` — KIP-124 request quota: values are percentages of one thread's
  time (``nanos * 100 / 1e9`` per second, :func:`nanos_to_percentage`), and the throttle is
  capped at one quota window (``QuotaUtils.boundedThrottleTime`` with the window size).

Sensors are not thread-safe; the broker owns one per metric-tag set (see
:mod:`shoal.quotas.precedence`) and calls them from its event loop with the injected clock's
``now_ms()``.
"""

from __future__ import annotations

import math

from shoal.quotas.rate import RateConfig, WindowedRate

NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1_000_000_000  # ClientRequestQuotaManager's constant


def java_round(x: float) -> int:
    """``java.lang.Math.round(double)``: nearest integer, ties toward positive infinity.

    ``floor(x + 0.5)`` is wrong for 0.49999999999999994 (the addition rounds up); this form is
    exact because ``x - floor(x)`` is computed without error.
    """
    if math.isnan(x):
        return 0
    floor = math.floor(x)
    return int(floor) + 1 if x - floor >= 0.5 else int(floor)


def throttle_time_ms(observed_rate: float, bound: float, window_ms: float) -> int:
    """``round((O - T) / T * W)``; negative when O < T (Kafka returns that too; callers only
    compute it on violation). ``bound`` must be positive."""
    if bound <= 0:
        raise ValueError(f"quota bound must be positive, got {bound}")
    return java_round((observed_rate - bound) / bound * window_ms)


def bounded_throttle_time_ms(observed_rate: float, bound: float, window_ms: float,
                             max_throttle_ms: int) -> int:
    """:func:`throttle_time_ms` capped at ``max_throttle_ms`` (``QuotaUtils.boundedThrottleTime``)."""
    return min(throttle_time_ms(observed_rate, bound, window_ms), max_throttle_ms)


def nanos_to_percentage(nanos: int | float) -> float:
    """Thread time in ns -> request-quota units (percent of one thread over one second)."""
    return nanos * NANOS_TO_PERCENTAGE_PER_SECOND


class QuotaSensor:
    """A windowed rate with an upper bound: Kafka's quota ``Sensor`` with one ``Rate`` metric.

    ``bound`` is mutable (a quota change keeps the recorded history, as Kafka updates the metric
    config in place). ``bound=None`` means unlimited: values are recorded, never throttled.
    """

    __slots__ = ("rate", "bound", "max_throttle_ms")

    def __init__(self, bound: float | None, config: RateConfig = RateConfig(), *,
                 max_throttle_ms: int | None = None) -> None:
        self.rate = WindowedRate(config)
        self.bound = bound
        self.max_throttle_ms = max_throttle_ms

    @property
    def config(self) -> RateConfig:
        return self.rate.config

    def record(self, value: float, now_ms: int, *, check: bool = True) -> int:
        """Record ``value`` at ``now_ms``; return the throttle in ms (0 if within the quota or
        ``check`` is false — Kafka's ``recordNoThrottle``)."""
        self.rate.record(value, now_ms)
        return self.throttle_time_ms(now_ms) if check else 0

    def unrecord(self, value: float, now_ms: int) -> None:
        """Take back a recorded value (Kafka does this for a throttled fetch's bytes)."""
        self.rate.record(-value, now_ms)

    def throttle_time_ms(self, now_ms: int) -> int:
        """Throttle needed now, without recording: 0 unless the measured rate exceeds the bound."""
        if self.bound is None:
            return 0
        observed = self.rate.measure(now_ms)
        if observed <= self.bound:
            return 0
        window_ms = self.rate.window_size_ms(now_ms)
        if self.max_throttle_ms is None:
            return throttle_time_ms(observed, self.bound, window_ms)
        return bounded_throttle_time_ms(observed, self.bound, window_ms, self.max_throttle_ms)

    def max_value_in_quota_window(self) -> float:
        """Largest value that can be recorded at once without certain throttling (Kafka's
        ``getMaxValueInQuotaWindow``: bound * (samples - 1) * window seconds); caps fetch size."""
        if self.bound is None:
            return math.inf
        return self.bound * (self.config.samples - 1) * (self.config.window_ms / 1000.0)


class RequestQuotaSensor(QuotaSensor):
    """KIP-124 request quota: the bound is a percentage of thread time (e.g. 200 = two threads'
    worth), values are recorded with :meth:`record_thread_time_ns`, and the throttle never exceeds
    one quota window (``ClientRequestQuotaManager.maxThrottleTimeMs``)."""

    __slots__ = ()

    def __init__(self, bound: float | None, config: RateConfig = RateConfig()) -> None:
        super().__init__(bound, config, max_throttle_ms=config.window_ms)

    def record_thread_time_ns(self, nanos: int, now_ms: int, *, check: bool = True) -> int:
        return self.record(nanos_to_percentage(nanos), now_ms, check=check)
