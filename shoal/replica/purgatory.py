"""Purgatories: delayed operations keyed by partition (Kafka's DelayedFetch / DelayedProduce).

A waiter registers interest in some keys and gets a future; ``notify(key)`` completes every
waiter on that key. The waiter re-checks its condition itself: a wake-up is a hint, not a promise.
"""

from __future__ import annotations

import asyncio
from typing import Hashable, Iterable


class Purgatory:
    def __init__(self) -> None:
        self._watchers: dict[Hashable, set[asyncio.Future[None]]] = {}

    def watch(self, keys: Iterable[Hashable]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = tuple(keys)
        for k in keys:
            self._watchers.setdefault(k, set()).add(fut)

        def _forget(_f: asyncio.Future[None]) -> None:
            for k in keys:
                s = self._watchers.get(k)
                if s is not None:
                    s.discard(fut)
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
        """Wait until one of ``keys`` is notified or ``timeout`` seconds pass; True if notified."""
        if timeout <= 0:
            return False
        fut = self.watch(keys)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            if not fut.done():
                fut.cancel()

    def __len__(self) -> int:
        return sum(len(s) for s in self._watchers.values())
