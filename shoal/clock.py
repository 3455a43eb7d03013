"""Injected clocks. Nothing in handlers, storage or quotas reads the time directly, and the replica
layer's timers (the purgatories, the acks=all and long-poll deadlines, a follower's fetch session
and its pipelined fetches' turns) run on it: a ``ManualClock`` fires them when moved."""

from __future__ import annotations

import asyncio
import heapq
import time
from typing import Any, Callable


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

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> Any:
        """Call ``callback(*args)`` in ``delay`` s of :meth:`monotonic` time; returns a handle
        with ``cancel()``. The system clock's is the running event loop's timer."""
        return asyncio.get_running_loop().call_later(delay, callback, *args)


class _ManualTimer:
    __slots__ = ("when", "seq", "callback", "args", "cancelled")

    def __init__(self, when: float, seq: int, callback: Callable[..., None], args: tuple) -> None:
        self.when, self.seq, self.callback, self.args, self.cancelled = when, seq, callback, args, False

    def __lt__(self, other: "_ManualTimer") -> bool:
        return (self.when, self.seq) < (other.when, other.seq)

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock(Clock):
    """A clock tests move by hand: ``clock.sleep(0.5)`` advances both readings and fires, in
    order, the timers (:meth:`call_later`) that fall due."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms
        self._mono = 0.0
        self._timers: list[_ManualTimer] = []
        self._seq = 0

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> _ManualTimer:
        self._seq += 1
        timer = _ManualTimer(self._mono + max(delay, 0.0), self._seq, callback, args)
        heapq.heappush(self._timers, timer)
        return timer

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic(self) -> float:
        return self._mono

    def nanos(self) -> int:
        return round(self._mono * 1e9)

    def sleep(self, seconds: float) -> None:
        self._now_ms += int(round(seconds * 1000))
        self._mono += seconds
        timers = self._timers
        while timers and timers[0].when <= self._mono:
            timer = heapq.heappop(timers)
            if not timer.cancelled:
                timer.callback(*timer.args)


SYSTEM_CLOCK = Clock()
