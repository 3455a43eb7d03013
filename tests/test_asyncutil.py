"""shoal.asyncutil.cancel_and_wait ends a task whose cancellation Python 3.11's wait_for dropped."""

from __future__ import annotations

import asyncio
import logging

from shoal.asyncutil import cancel_and_wait, every


def test_cancel_and_wait_ends_a_loop_over_wait_for_of_ready_answers() -> None:
    """A sampler's step waits with wait_for for answers that are ready when the cancellation comes
    (3.11's wait_for then returns the answer and drops the cancellation: one cancel() left such a
    task running in about one trial of seven). Every trial ends, each within a few seconds."""
    async def main() -> int:
        loop = asyncio.get_running_loop()

        async def step() -> None:
            for _ in range(20):
                fut = loop.create_future()
                loop.call_soon(fut.set_result, 1)
                await asyncio.wait_for(fut, 5)

        ended = 0
        for trial in range(50):
            task = asyncio.create_task(every(lambda: 0.0, step, logging.getLogger("test"), "sampler"))
            await asyncio.sleep(0.001 * (trial % 7))
            stopping = asyncio.create_task(cancel_and_wait([task]))
            await asyncio.wait({stopping}, timeout=3)
            ended += task.done()
            task.cancel()  # (a test failing: do not leave it running)
            await asyncio.wait({stopping}, timeout=1)
        return ended

    assert asyncio.run(main()) == 50
