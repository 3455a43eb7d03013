"""Event-loop lag: how late the broker's loop runs a callback it was asked to run on time.

Every request, timer and socket of the broker is served by one asyncio loop, so when something
holds it (a slow handler, a large batch to validate, garbage collection) every client waits. The
probe sleeps ``interval`` seconds over and over and records how much later than asked it woke
(Node's ``eventLoopLag``, Redpanda's reactor stalls). It costs one timer per interval.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from shoal.observability.requests import Histogram

if TYPE_CHECKING:
    from shoal.clock import Clock

# Lag bounds in seconds: 1 ms is a healthy loop, 100 ms is a client-visible stall.
LAG_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class LoopLagProbe:
    """Measures the loop's scheduling delay every ``interval`` s (see the module doc):
    ``histogram`` of every measurement (seconds), ``last`` and ``max`` (since start)."""

    def __init__(self, clock: "Clock", interval: float = 0.5) -> None:
        self.clock = clock
        self.interval = interval
        self.histogram = Histogram(LAG_BUCKETS_S)
        self.last = 0.0
        self.max = 0.0
        self._task: asyncio.Task[None] | None = None

    def record(self, lag: float) -> None:
        lag = max(0.0, lag)
        self.histogram.observe(lag)
        self.last = lag
        if lag > self.max:
            self.max = lag

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="shoal-loop-lag")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        mono = self.clock.monotonic
        while True:
            asked = mono()
            await asyncio.sleep(self.interval)
            self.record(mono() - asked - self.interval)
