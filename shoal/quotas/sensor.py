"""Quota sensors for the broker's hot path: Kafka's quota check at O(1) per request, smoothing
(warm-up pacing, small fetches), and the throttle-time statistics behind the metrics.

:class:`FastRate` is :class:`~shoal.quotas.rate.WindowedRate` (same samples, same purge, same
window) with three aggregates kept up to date: the sum of the sample values, the oldest sample
start and the earliest time a purge can reset anything. While no purge is due, the rate is
``sum / W`` with ``W`` computed in O(1), so :meth:`FastRate.under` answers "is the rate clearly
within the bound?" without walking the samples; anything else (close to the bound, over it, a
purge due, a clock that went back) goes through the exact :class:`WindowedRate` code. Results are
identical to :class:`~shoal.quotas.throttle.QuotaSensor` (a property test replays random
sequences through both); the running sum only decides the fast path, with a 1e-9 relative margin
(it is re-summed exactly at every sample change, and byte counts are exact integers anyway).

:class:`Sensor` is Kafka's quota sensor with optional *smoothing* (``shoal.quota.smoothing``, on
by default; off, the behaviour is Kafka's exactly). Two deliberate deviations, both measured
(``tests/quotas/test_sensor.py`` simulates greedy clients):

* Warm-up pacing. A sensor that starts recording (new, or idle until every sample expired)
  measures over a window padded with ``samples - 1`` empty windows, so Kafka lets a new client
  send ``samples - 1`` windows' worth of quota at once and then throttles it until the window
  has filled — about ten seconds of nothing, after which the burst sample expires and the cycle
  repeats (a greedy producer at 1 MB/s gets 0.6 MB/s over seconds 1-21, in 10 MB bursts every
  ~11 s). With smoothing, during the first ``samples - 1`` windows of activity each record also
  draws on a token bucket one window deep, refilled at the bound; the throttle is the larger of
  Kafka's and the bucket's. Afterwards Kafka's sensor alone decides, so every throttle of a
  client with history is Kafka's (the 2,100 ms example of ``ClientQuotaManagerTest`` holds).
* Small fetches. Kafka caps a fetch at ``samples - 1`` windows of quota and answers a throttled
  fetch empty, its bytes taken back; with fetches of about a window's worth, the consumer then
  gets 0.92-0.95 of its quota (and with Kafka's cap alone 0.55 over seconds 1-21). With
  smoothing a fetch returns at most :data:`FETCH_QUANTUM` of a window's worth (0.99).

Not thread-safe: one event loop owns every sensor.
"""

from __future__ import annotations

import math

from shoal.quotas.rate import RateConfig, WindowedRate, _Sample
from shoal.quotas.throttle import bounded_throttle_time_ms, throttle_time_ms
from shoal.quotas.token_bucket import TokenBucket, token_throttle_time_ms

_MARGIN = 1.0 - 1e-9
FETCH_QUANTUM = 0.125  # with smoothing, one fetch returns at most this many windows of quota


class FastRate(WindowedRate):
    """:class:`WindowedRate` with an O(1) "clearly under the bound" test (see the module doc)."""

    __slots__ = ("_sum", "_oldest_start", "_purge_due", "_window_ms", "_expire_ms", "_min_full")

    def __init__(self, config: RateConfig = RateConfig()) -> None:
        super().__init__(config)
        self._window_ms = config.window_ms
        self._expire_ms = config.samples * config.window_ms
        self._min_full = config.samples - 1
        self._sum = 0.0
        self._oldest_start = 0
        self._purge_due = -math.inf  # nothing recorded yet: take the exact path

    def _refresh(self) -> None:
        samples = self._samples
        self._sum = sum(s.value for s in samples)
        self._oldest_start = min(s.start_ms for s in samples)
        self._purge_due = min(s.last_event_ms for s in samples) + self._expire_ms

    def record(self, value: float, now_ms: int) -> None:
        samples = self._samples
        if samples:
            sample = samples[self._current]
            if now_ms - sample.start_ms >= self._window_ms:
                sample = self._advance(now_ms)
                changed = True
            else:
                changed = False
        else:
            sample = _Sample(now_ms)
            samples.append(sample)
            changed = True
        sample.value += value
        sample.event_count += 1
        sample.last_event_ms = now_ms
        if changed:
            self._refresh()
        else:
            self._sum += value

    def _purge(self, now_ms: int) -> None:
        if now_ms >= self._purge_due:
            super()._purge(now_ms)
            if self._samples:
                self._refresh()

    def under(self, now_ms: int, bound: float) -> bool:
        """True when the rate at ``now_ms`` is certainly at most ``bound``; False means "ask
        :meth:`measure`" (it may still be within)."""
        if now_ms >= self._purge_due:
            return False
        elapsed = now_ms - self._oldest_start
        if elapsed < 0:
            return False
        full = elapsed // self._window_ms
        if full < self._min_full:
            elapsed += (self._min_full - full) * self._window_ms
        return self._sum * 1000.0 <= bound * max(elapsed, 1) * _MARGIN


class Sensor:
    """Kafka's quota sensor (a windowed rate and a bound; see :class:`QuotaSensor`) with
    smoothing, the time of its last record (for expiry) and throttle-time statistics.

    ``bound`` None: unlimited (recorded for metrics, never throttled). ``max_throttle_ms``: the
    cap of request-time quotas (one window). ``pacing``: smoothing, see the module doc.
    """

    __slots__ = ("rate", "bound", "max_throttle_ms", "pacing", "pacer", "last_ms", "active_since",
                 "throttles")

    def __init__(self, bound: float | None, config: RateConfig = RateConfig(), *,
                 max_throttle_ms: int | None = None, pacing: bool = False) -> None:
        self.rate = FastRate(config)
        self.bound = bound
        self.max_throttle_ms = max_throttle_ms
        self.pacing = pacing
        self.pacer: TokenBucket | None = None
        self.last_ms: int | None = None  # last record
        self.active_since = 0  # first record after creation or after a full expiry
        self.throttles = SampledStats(config)

    @property
    def config(self) -> RateConfig:
        return self.rate.config

    def warming(self, now_ms: int) -> bool:
        """In the first ``samples - 1`` windows of activity (where Kafka's window is padded)."""
        cfg = self.rate.config
        return now_ms - self.active_since < (cfg.samples - 1) * cfg.window_ms

    def record(self, value: float, now_ms: int) -> tuple[int, int]:
        """Record ``value``; return ``(quota throttle, pacing throttle)`` in ms, each 0 when not
        violated. The quota throttle is Kafka's exactly."""
        last = self.last_ms
        cfg = self.rate.config
        if last is None or now_ms - last >= cfg.samples * cfg.window_ms:
            self.active_since = now_ms
        self.last_ms = now_ms
        self.rate.record(value, now_ms)
        bound = self.bound
        if bound is None:
            return 0, 0
        quota_ms = 0 if self.rate.under(now_ms, bound) else self.throttle_time_ms(now_ms)
        if not self.pacing or not self.warming(now_ms):
            return quota_ms, 0
        pacer = self.pacer
        if pacer is None or pacer.quota != bound:
            pacer = self._new_pacer(bound, now_ms, pacer)
        pacer.record(value, now_ms)
        tokens = pacer.tokens
        return quota_ms, (token_throttle_time_ms(tokens, bound) if tokens < 0 else 0)

    def _new_pacer(self, bound: float, now_ms: int, old: TokenBucket | None) -> TokenBucket:
        window_ms = self.rate.config.window_ms
        if old is not None:  # the bound changed: keep the level, refill at the new rate
            old.measure(now_ms)
            old.quota = bound
            old.tokens = min(old.tokens, old.burst)
            return old
        self.pacer = TokenBucket(bound, samples=1, window_ms=window_ms,
                                 tokens=bound * window_ms / 1000.0, last_update_ms=now_ms)
        return self.pacer

    def unrecord(self, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch's bytes, as Kafka does)."""
        self.rate.record(-value, now_ms)
        if self.pacer is not None and self.pacing and self.warming(now_ms):
            self.pacer.record(-value, now_ms)

    def throttle_time_ms(self, now_ms: int) -> int:
        """Kafka's throttle now, without recording (0 unless the rate exceeds the bound)."""
        bound = self.bound
        if bound is None:
            return 0
        observed = self.rate.measure(now_ms)
        if observed <= bound:
            return 0
        window_ms = self.rate.window_size_ms(now_ms)
        if self.max_throttle_ms is None:
            return throttle_time_ms(observed, bound, window_ms)
        return bounded_throttle_time_ms(observed, bound, window_ms, self.max_throttle_ms)

    def max_value_in_quota_window(self, now_ms: int) -> float:
        """Kafka's ``getMaxValueInQuotaWindow`` (bound x (samples - 1) windows), with smoothing
        :data:`FETCH_QUANTUM` of a window; caps what one fetch may return."""
        bound = self.bound
        if bound is None:
            return math.inf
        cfg = self.rate.config
        windows = FETCH_QUANTUM if self.pacing else cfg.samples - 1
        return bound * windows * (cfg.window_ms / 1000.0)


class SampledStats:
    """Average and maximum of values recorded over Kafka's sampled window (the ``Avg`` and
    ``Max`` stats of Kafka's throttle-time sensor): ``samples`` samples of ``window_ms``, a
    sample expiring ``samples x window_ms`` after its last value. Without values: 0 and 0."""

    __slots__ = ("window_ms", "expire_ms", "samples", "_buf")

    def __init__(self, config: RateConfig = RateConfig()) -> None:
        self.window_ms = config.window_ms
        self.expire_ms = config.samples * config.window_ms
        self.samples = config.samples
        self._buf: list[list[float]] = []  # [start, last, count, total, max]

    def record(self, value: float, now_ms: int) -> None:
        buf = self._buf
        if not buf or now_ms - buf[-1][0] >= self.window_ms:
            buf.append([now_ms, now_ms, 0, 0.0, -math.inf])
            if len(buf) > self.samples:
                del buf[0]
        s = buf[-1]
        s[1] = now_ms
        s[2] += 1
        s[3] += value
        s[4] = max(s[4], value)

    def _live(self, now_ms: int) -> list[list[float]]:
        live = [s for s in self._buf if now_ms - s[1] < self.expire_ms]
        if len(live) != len(self._buf):
            self._buf = live
        return live

    def avg(self, now_ms: int) -> float:
        live = self._live(now_ms)
        count = sum(s[2] for s in live)
        return sum(s[3] for s in live) / count if count else 0.0

    def max(self, now_ms: int) -> float:
        live = self._live(now_ms)
        return max((s[4] for s in live), default=0.0)
