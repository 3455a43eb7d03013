"""A keyed timer on an injected clock (Kafka's ``CoordinatorTimer``).

``schedule(key, delay_ms, fn)`` replaces whatever was scheduled under ``key``; ``cancel(key)``
forgets it. ``run_due()`` calls every operation whose deadline has passed on the clock, in
deadline order. Production runs :meth:`Timer.drive` as a task (it sleeps on the event loop until
the next deadline or until an earlier one is scheduled); tests move a ``ManualClock`` and call
``run_due()`` themselves, so every timeout in the coordinator is exact and needs no real sleep.

Single-threaded: everything runs on the event loop that owns the coordinator.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from typing import Callable, Hashable

from shoal.clock import Clock

log = logging.getLogger("shoal.groups.timer")


class _Entry:
    __slots__ = ("deadline", "seq", "key", "fn", "live")

    def __init__(self, deadline: float, seq: int, key: Hashable, fn: Callable[[], None]) -> None:
        self.deadline = deadline
        self.seq = seq
        self.key = key
        self.fn = fn
        self.live = True

    def __lt__(self, other: "_Entry") -> bool:
        return (self.deadline, self.seq) < (other.deadline, other.seq)


class Timer:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._heap: list[_Entry] = []
        self._by_key: dict[Hashable, _Entry] = {}
        self._seq = itertools.count()
        self._wakeup: asyncio.Event | None = None

    def _now_ms(self) -> float:
        # Rounded to the microsecond so that sums of float seconds (a test clock moved by 4.999 s
        # and 0.001 s) land exactly on millisecond deadlines.
        return round(self._clock.monotonic() * 1000.0, 3)

    def schedule(self, key: Hashable, delay_ms: float, fn: Callable[[], None]) -> None:
        self.cancel(key)
        entry = _Entry(self._now_ms() + max(0.0, delay_ms), next(self._seq), key, fn)
        self._by_key[key] = entry
        earliest = not self._heap or entry < self._heap[0]
        heapq.heappush(self._heap, entry)
        if earliest and self._wakeup is not None:
            self._wakeup.set()

    def cancel(self, key: Hashable) -> None:
        entry = self._by_key.pop(key, None)
        if entry is not None:
            entry.live = False

    def cancel_matching(self, predicate: Callable[[Hashable], bool]) -> None:
        for key in [k for k in self._by_key if predicate(k)]:
            self.cancel(key)

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._by_key

    def deadline_ms(self, key: Hashable) -> float | None:
        """Milliseconds from now until ``key`` fires (None when nothing is scheduled)."""
        entry = self._by_key.get(key)
        return None if entry is None else entry.deadline - self._now_ms()

    def __len__(self) -> int:
        return len(self._by_key)

    def next_delay(self) -> float | None:
        """Seconds until the earliest live deadline, or None when nothing is scheduled."""
        heap = self._heap
        while heap and not heap[0].live:
            heapq.heappop(heap)
        if not heap:
            return None
        return max(0.0, (heap[0].deadline - self._now_ms()) / 1000.0)

    def run_due(self) -> int:
        """Run every operation whose deadline has passed; returns how many ran."""
        ran = 0
        heap = self._heap
        while heap:
            entry = heap[0]
            if not entry.live:
                heapq.heappop(heap)
                continue
            if entry.deadline > self._now_ms():
                break
            heapq.heappop(heap)
            entry.live = False
            if self._by_key.get(entry.key) is entry:
                del self._by_key[entry.key]
            ran += 1
            try:
                entry.fn()
            except Exception:
                log.exception("timer operation %r failed", entry.key)
        return ran

    async def drive(self) -> None:
        """Run operations as they fall due, until cancelled."""
        self._wakeup = asyncio.Event()
        try:
            while True:
                self._wakeup.clear()
                delay = self.next_delay()
                if delay is None or delay > 0:
                    try:
                        await asyncio.wait_for(self._wakeup.wait(), delay)
                    except asyncio.TimeoutError:
                        pass
                self.run_due()
        finally:
            self._wakeup = None
