"""The purgatory behind acks=all and long-poll fetches: a notification resumes its waiter in the
very next loop iteration, a timeout answers False, a cancelled waiter leaves no watcher behind."""

from __future__ import annotations

import asyncio

from shoal.clock import ManualClock
from shoal.replica.purgatory import Purgatory


def test_notify_resumes_the_waiter_in_the_next_loop_iteration() -> None:
    async def main() -> tuple[bool, int]:
        p = Purgatory()
        loop = asyncio.get_running_loop()
        ticks = [0]

        def tick() -> None:
            ticks[0] += 1
            if ticks[0] < 1000:
                loop.call_soon(tick)

        seen: list[int] = []

        async def waiter() -> bool:
            ok = await p.wait([("t", 0), ("t", 1)], 30.0)
            seen.append(ticks[0])
            return ok

        task = asyncio.ensure_future(waiter())
        while len(p) == 0:
            await asyncio.sleep(0)
        assert len(p) == 2  # one watcher per key
        loop.call_soon(tick)
        await asyncio.sleep(0)  # tick runs once
        start = ticks[0]
        p.notify(("t", 1))
        ok = await task
        return ok, seen[0] - start

    ok, iterations = asyncio.run(main())
    assert ok
    assert iterations == 1


def test_timeout_answers_false_and_forgets_the_keys() -> None:
    async def main() -> tuple[bool, bool, int]:
        p = Purgatory()
        timed_out = await p.wait([("t", 0)], 0.02)
        not_waited = await p.wait([("t", 0)], 0)
        await asyncio.sleep(0)  # the done callback that forgets the keys
        p.notify(("t", 0))  # nobody waits: nothing happens
        return timed_out, not_waited, len(p)

    assert asyncio.run(main()) == (False, False, 0)


def test_a_cancelled_waiter_leaves_nothing_behind() -> None:
    async def main() -> int:
        p = Purgatory()
        task = asyncio.ensure_future(p.wait([("t", 0)], 30.0))
        while len(p) == 0:
            await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        await asyncio.sleep(0)
        p.notify(("t", 0))
        return len(p)

    assert asyncio.run(main()) == 0


def test_a_notification_before_the_timeout_wins_and_the_timer_is_harmless() -> None:
    async def main() -> list[bool]:
        p = Purgatory()
        results = []
        for _ in range(3):
            task = asyncio.ensure_future(p.wait([("t", 0)], 0.05))
            while len(p) == 0:
                await asyncio.sleep(0)
            p.notify(("t", 0))
            results.append(await task)
        await asyncio.sleep(0.1)  # the cancelled timers would have fired by now
        return results

    assert asyncio.run(main()) == [True, True, True]


def test_a_manual_clock_drives_the_timers() -> None:
    """On a ManualClock a waiter times out when the clock passes its timeout, not before, and
    whatever the real time; a notified waiter's timer is cancelled and fires nothing later."""
    async def main() -> None:
        clock = ManualClock()
        p = Purgatory(clock)
        task = asyncio.ensure_future(p.wait([("t", 0)], 5.0))
        await asyncio.sleep(0.05)  # real time passes: nothing happens
        clock.sleep(4.9)
        await asyncio.sleep(0)
        assert not task.done()
        clock.sleep(0.2)
        assert await asyncio.wait_for(task, 1) is False and len(p) == 0
        fired = []
        clock.call_later(1.0, fired.append, "b")
        clock.call_later(0.5, fired.append, "a")
        clock.call_later(0.7, fired.append, "x").cancel()
        task = asyncio.ensure_future(p.wait([("t", 0)], 0.6))
        await asyncio.sleep(0)
        p.notify(("t", 0))
        assert await task is True
        clock.sleep(2.0)
        assert fired == ["a", "b"]  # in order, the cancelled one not at all

    asyncio.run(main())
