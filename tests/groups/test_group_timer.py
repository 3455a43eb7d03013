"""The coordinator's keyed timer: exact firing on a manual clock, and the asyncio driver."""

from __future__ import annotations

import asyncio

import pytest

from shoal.clock import SYSTEM_CLOCK, ManualClock
from shoal.groups.timer import Timer

pytestmark = pytest.mark.timeout(10)


def test_fires_in_deadline_order_exactly_when_due():
    clock = ManualClock()
    t = Timer(clock)
    fired: list[str] = []
    t.schedule("b", 200, lambda: fired.append("b"))
    t.schedule("a", 100, lambda: fired.append("a"))
    t.schedule("c", 100, lambda: fired.append("c"))  # same deadline: scheduling order
    clock.sleep(0.099)
    assert t.run_due() == 0
    clock.sleep(0.001)
    assert t.run_due() == 2 and fired == ["a", "c"]
    assert t.next_delay() == pytest.approx(0.1)
    clock.sleep(0.1)
    t.run_due()
    assert fired == ["a", "c", "b"] and len(t) == 0 and t.next_delay() is None


def test_schedule_replaces_and_cancel_forgets():
    clock = ManualClock()
    t = Timer(clock)
    fired: list[int] = []
    t.schedule("k", 100, lambda: fired.append(1))
    t.schedule("k", 300, lambda: fired.append(2))
    assert t.deadline_ms("k") == 300
    clock.sleep(0.2)
    t.run_due()
    assert fired == []
    t.schedule(("x", 1), 0, lambda: fired.append(3))
    t.schedule(("x", 2), 0, lambda: fired.append(4))
    t.cancel_matching(lambda k: isinstance(k, tuple) and k[1] == 2)
    t.cancel("k")
    clock.sleep(1)
    t.run_due()
    assert fired == [3] and not t.is_scheduled("k")


def test_an_operation_may_reschedule_itself_and_errors_do_not_stop_others():
    clock = ManualClock()
    t = Timer(clock)
    fired: list[str] = []

    def again() -> None:
        fired.append("again")
        if len(fired) < 3:
            t.schedule("again", 50, again)

    def boom() -> None:
        raise RuntimeError("boom")

    t.schedule("again", 50, again)
    t.schedule("boom", 50, boom)
    for _ in range(4):
        clock.sleep(0.05)
        t.run_due()
    assert fired == ["again"] * 3


async def test_drive_runs_operations_on_time():
    t = Timer(SYSTEM_CLOCK)
    done = asyncio.Event()
    task = asyncio.create_task(t.drive())
    try:
        await asyncio.sleep(0)
        start = asyncio.get_running_loop().time()
        t.schedule("late", 5000, lambda: None)
        t.schedule("soon", 30, done.set)  # earlier than what the driver sleeps on: it wakes up
        await asyncio.wait_for(done.wait(), 2)
        assert asyncio.get_running_loop().time() - start < 1.0
    finally:
        task.cancel()
