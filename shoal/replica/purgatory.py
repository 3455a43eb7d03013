"""Purgatories: delayed operations keyed by partition (Kafka's DelayedFetch / DelayedProduce).

A waiter registers interest in some keys and gets a future; ``notify(key)`` completes every
waiter on that key, first come first woken (a pipelining follower's fetches on one connection must
be answered in the order they came: the first woken reads the new data). The waiter re-checks its
condition itself: a wake-up is a hint, not a promise.
"""

from __future__ import annotations

import asyncio
from typing import Hashable, Iterable

from shoal.clock import SYSTEM_CLOCK, Clock


_TIMED_OUT = object()


def expire(fut: "asyncio.Future[object]") -> None:
    """A timer's callback: end ``fut``'s wait (a timed-out waiter re-checks what it waits for;
    the future's result is not None: a ``Future[None]`` is woken with None)."""
    if not fut.done():
        fut.set_result(_TIMED_OUT)


class Purgatory:
    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock  # its timers (``ManualClock`` fires them in tests)
        # key -> the waiters on it, as an ordered set (a dict of futures to None)
        self._watchers: dict[Hashable, dict[asyncio.Future[None], None]] = {}

    def watch(self, keys: Iterable[Hashable]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = tuple(keys)
        for k in keys:
            self._watchers.setdefault(k, {})[fut] = None

        def _forget(_f: asyncio.Future[None]) -> None:
            for k in keys:
                s = self._watchers.get(k)
                if s is not None:
                    s.pop(fut, None)
                    if not s:
                        del self._watchers[k]

        fut.add_done_callback(_forget)
        return fut

    def notify(self, key: Hashable) -> None:
        s = self._watchers.get(key)
        if not s:
            return
        for fut in list(s):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, keys: Iterable[Hashable], timeout: float) -> bool:
        """Wait until one of ``keys`` is notified or ``timeout`` seconds pass; True if notified.

        Awaits the watch future itself with a timer beside it, not ``asyncio.wait_for``: a
        notification then resumes the waiter in the next loop iteration (wait_for's inner future
        takes one more, and a task of its own on Python 3.12+), which is one hop less on the
        acks=all path (append -> parked follower fetch; follower's fetch -> delayed produce)."""
        if timeout <= 0:
            return False
        fut = self.watch(keys)
        timer = self._clock.call_later(timeout, expire, fut)
        try:
            await fut
        finally:
            timer.cancel()
            if not fut.done():
                fut.cancel()  # the waiter was cancelled: forget its keys
        return fut.result() is None

    def __len__(self) -> int:
        return sum(len(s) for s in self._watchers.values())
