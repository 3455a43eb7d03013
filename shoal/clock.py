"""Injected clocks. Nothing in handlers, storage or quotas reads the time directly."""

from __future__ import annotations

import time


class Clock:
    """Wall-clock milliseconds (for timestamps) and a monotonic clock (for timeouts)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def nanos(self) -> int:
        """A high-resolution monotonic reading in ns, for measuring how long work takes (KIP-124
        request time)."""
        return time.perf_counter_ns()


class ManualClock(Clock):
    """A clock tests move by hand: ``clock.sleep(0.5)`` advances both readings."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms
        self._mono = 0.0

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic(self) -> float:
        return self._mono

    def nanos(self) -> int:
        return round(self._mono * 1e9)

    def sleep(self, seconds: float) -> None:
        self._now_ms += int(round(seconds * 1000))
        self._mono += seconds


SYSTEM_CLOCK = Clock()
