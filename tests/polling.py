"""Waiting for a condition by polling it, not by sleeping a fixed time: the one helper the tests
share (imported as ``polling``: tests/ is on sys.path).

::

    leader = until(lambda: leader_of(topic), 30, "a leader")      # its value, once truthy
    took = await until_async(lambda: 1 in store.image.brokers)   # in an event loop: seconds it took

Both fail the test with an AssertionError naming ``what`` when ``timeout`` passes first.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable


def until(cond: Callable[[], Any], timeout: float = 30.0, what: str | Callable[[], str] = "condition",
          every: float = 0.1, retry: tuple[type[BaseException], ...] = (Exception,),
          between: Callable[[], Any] | None = None) -> Any:
    """Poll ``cond`` every ``every`` seconds until it is truthy; its value. Exceptions of the
    ``retry`` types count as not yet (a broker going away, a connection refused; the last one is in
    the failure); pass ``retry=()`` to let them fail the test at once. ``between``, when given, runs
    between polls instead of the sleep (clients that must be polled meanwhile: consumers, group
    members); ``what`` may be a function, for a failure that says how things stood."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = cond()
            if value:
                return value
        except retry as e:
            last = e
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"{said}: not within {timeout}s" + (f" (last error: {last!r})" if last else ""))
        if between is None:
            time.sleep(every)
        else:
            between()


async def until_async(cond: Callable[[], Any], timeout: float = 20.0, what: str = "condition",
                      every: float = 0.02) -> float:
    """Poll ``cond`` in the event loop (which goes on running between polls) until it is truthy;
    the seconds it took."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{what}: not within {timeout}s")
        await asyncio.sleep(every)
    return time.monotonic() - t0
