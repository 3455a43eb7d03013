"""Small asyncio helpers shared by the broker's services."""

from __future__ import annotations

import asyncio
from typing import Iterable


async def cancel_and_wait(tasks: Iterable[asyncio.Task | None]) -> None:
    """Cancel every task (None skipped) and wait for each to end, whatever it raised: a service
    stopping leaves nothing running behind it."""
    pending = [t for t in tasks if t is not None]
    for t in pending:
        t.cancel()
    for t in pending:
        try:
            await t
        except (asyncio.CancelledError, Exception):
            pass
