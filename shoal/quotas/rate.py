"""Kafka's windowed rate (``Rate`` over a ``WindowedSum`` ``SampledStat``), with injected time.

The rate is the sum of the values recorded in the retained samples divided by the measured
window W. There are ``samples`` (``quota.window.num``, 11) samples of ``window_ms``
(``quota.window.size.seconds``, 1 s) each, plus one spare slot (Kafka keeps ``samples + 1``
so a sample that started before the monitored window but overlaps it is not lost).

Semantics reproduced from Kafka (clients ``SampledStat`` and ``stats.Rate``):

* ``record(v, t)``: if the current sample is complete (``t - start >= window_ms``), move to the
  next slot (round robin over ``samples + 1`` slots), resetting it to start at ``t``; add ``v``.
* Purge: a sample whose *last event* is ``samples * window_ms`` or more before ``now`` is reset
  (value 0, start = last event = ``now``). Purging happens on every measure.
* Window: ``W = now - start of the oldest sample``; if that holds fewer than ``samples - 1`` full
  windows, the missing full windows are added (Kafka assumes zero-valued prior windows, so a
  first burst is not measured over a tiny window); finally ``W >= 1`` ms.
* ``measure(now) = sum / (W / 1000)`` per second.

Not thread-safe: the owner (one quota manager on the event loop) serialises access.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_NUM_SAMPLES = 11  # quota.window.num
DEFAULT_WINDOW_MS = 1000  # quota.window.size.seconds = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class RateConfig:
    """``quota.window.num`` samples of ``quota.window.size.seconds`` (in ms)."""

    samples: int = DEFAULT_NUM_SAMPLES
    window_ms: int = DEFAULT_WINDOW_MS

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"samples must be >= 1, got {self.samples}")
        if self.window_ms < 1:
            raise ValueError(f"window_ms must be >= 1, got {self.window_ms}")


class _Sample:
    __slots__ = ("value", "event_count", "start_ms", "last_event_ms")

    def __init__(self, now_ms: int) -> None:
        self.reset(now_ms)

    def reset(self, now_ms: int) -> None:
        self.value = 0.0
        self.event_count = 0
        self.start_ms = now_ms
        self.last_event_ms = now_ms

    def __repr__(self) -> str:
        return (f"_Sample(value={self.value}, events={self.event_count}, "
                f"start_ms={self.start_ms}, last_event_ms={self.last_event_ms})")


class WindowedRate:
    """Sum of recorded values per second over Kafka's sampled window. Time is always passed in."""

    __slots__ = ("config", "_samples", "_current")

    def __init__(self, config: RateConfig = RateConfig()) -> None:
        self.config = config
        self._samples: list[_Sample] = []
        self._current = 0

    # -- recording -------------------------------------------------------------------------
    def record(self, value: float, now_ms: int) -> None:
        """Add ``value`` at ``now_ms`` (a negative value "unrecords", as Kafka does for fetch)."""
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.config.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.event_count += 1
        sample.last_event_ms = now_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        max_slots = self.config.samples + 1
        self._current = (self._current + 1) % max_slots
        if self._current >= len(self._samples):
            sample = _Sample(now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    # -- measuring -------------------------------------------------------------------------
    def _purge(self, now_ms: int) -> None:
        expire_age = self.config.samples * self.config.window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(now_ms)

    def _oldest(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        oldest = self._samples[0]
        for sample in self._samples[1:]:
            if sample.start_ms < oldest.start_ms:
                oldest = sample
        return oldest

    def total(self, now_ms: int) -> float:
        """Sum of the values in the non-obsolete samples (Kafka's ``WindowedSum.measure``)."""
        self._purge(now_ms)
        return sum(s.value for s in self._samples)

    def measure_recent(self, now_ms: int, span_ms: int) -> float:
        """The rate over the samples that started within the last ``span_ms`` (divided by the
        time since the oldest of them started, at least one window): usage that forgets a past
        rate within ``span_ms``, where :meth:`measure_used` remembers the whole window of samples
        (the demand split's estimate, shoal.quotas.demand)."""
        self._purge(now_ms)
        horizon = now_ms - span_ms
        recent = [s for s in self._samples if s.start_ms > horizon]
        if not recent:
            return 0.0
        elapsed = now_ms - min(s.start_ms for s in recent)
        return sum(s.value for s in recent) / (max(elapsed, self.config.window_ms) / 1000.0)

    def window_size_ms(self, now_ms: int) -> int:
        """The measured window W in ms, exactly as Kafka's ``Rate.windowSize``."""
        self._purge(now_ms)
        elapsed = now_ms - self._oldest(now_ms).start_ms
        # Java long division truncates toward zero (matters only if the clock went backwards).
        full_windows = int(elapsed / self.config.window_ms) if elapsed < 0 else elapsed // self.config.window_ms
        min_full_windows = self.config.samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * self.config.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        """Observed rate per second at ``now_ms``."""
        total = self.total(now_ms)
        return total / (self.window_size_ms(now_ms) / 1000.0)

    def measure_used(self, now_ms: int) -> float:
        """The rate over the time the retained samples really cover (at least one window): what
        was used lately. Unlike :meth:`measure` a young window is not padded with empty ones
        (Kafka pads so a first burst is not throttled as measured over a tiny window; a reader
        of usage wants the burst at its real rate)."""
        total = self.total(now_ms)
        elapsed = now_ms - self._oldest(now_ms).start_ms
        return total / (max(elapsed, self.config.window_ms) / 1000.0)

    def __repr__(self) -> str:
        return f"WindowedRate({self.config}, current={self._current}, samples={self._samples})"
