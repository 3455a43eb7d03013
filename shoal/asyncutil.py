"""Small asyncio helpers shared by the broker's services."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, Iterable


RECANCEL_S = 0.5  # cancel_and_wait: a task not ended this long after its cancellation is cancelled again


async def cancel_and_wait(tasks: Iterable[asyncio.Task | None]) -> None:
    """Cancel every task (None skipped) and wait for each to end, whatever it raised: a service
    stopping leaves nothing running behind it."""
    pending = [t for t in tasks if t is not None]
    for t in pending:
        t.cancel()
    for t in pending:
        # Python 3.11's wait_for returns an inner result that is ready when the cancellation
        # arrives and drops the cancellation: a task looping over such waits (a sampler) would go
        # on for ever. Cancel it again until it ends.
        while not t.done():
            try:
                await asyncio.wait({t}, timeout=RECANCEL_S)
            except asyncio.CancelledError:
                pass  # the caller cancelled too: the tasks still end first (as awaiting them did)
            if not t.done():
                t.cancel()
        try:
            await t
        except (asyncio.CancelledError, Exception):
            pass


async def every(interval_s: Callable[[], float], step: Callable[[], Awaitable[None]], log: logging.Logger,
                what: str) -> None:
    """Run ``step`` every ``interval_s()`` seconds (from one start to the next; at least 50 ms
    apart) until cancelled; a step that raises is logged (``<what> step failed``), never fatal."""
    while True:
        t0 = time.monotonic()
        try:
            await step()
        except Exception:
            log.exception("%s step failed", what)
        await asyncio.sleep(max(0.05, interval_s() - (time.monotonic() - t0)))
