"""shoal.server.bounds: the sweep's decisions (exact, on a hand-driven clock), the request memory,
and the summary log lines of closes. The network side is tests/e2e/test_hardening_connections.py."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from shoal.clock import SYSTEM_CLOCK, ManualClock
from shoal.config import BrokerConfig
from shoal.server.bounds import (
    AUTH_TIMEOUT,
    IDLE,
    READ_TIMEOUT,
    ConnectionGuard,
    Liveness,
    RequestMemory,
    Timeouts,
)

T = Timeouts(idle_s=10.0, read_s=4.0, auth_s=3.0)


def test_idle_connection_closes_when_the_idle_time_has_passed_since_its_last_activity():
    live = Liveness(now=0.0)
    assert live.verdict(5.0, T, active=True, partial=False, authenticating=False) is None  # active at 5
    assert live.verdict(14.9, T, active=False, partial=False, authenticating=False) is None
    assert live.verdict(15.0, T, active=False, partial=False, authenticating=False) == IDLE


def test_a_connection_that_keeps_sending_is_never_idle():
    live = Liveness(now=0.0)
    for now in range(1, 100):
        assert live.verdict(float(now), T, active=True, partial=False, authenticating=False) is None


def test_a_partial_frame_times_out_from_when_the_sweep_first_saw_it_even_if_bytes_trickle_in():
    live = Liveness(now=0.0)
    assert live.verdict(1.0, T, active=True, partial=True, authenticating=False) is None  # seen at 1
    assert live.verdict(4.9, T, active=True, partial=True, authenticating=False) is None
    assert live.verdict(5.0, T, active=True, partial=True, authenticating=False) == READ_TIMEOUT


def test_a_completed_frame_restarts_the_read_clock():
    live = Liveness(now=0.0)
    assert live.verdict(1.0, T, active=True, partial=True, authenticating=False) is None
    # a frame completed since (the connection reports partial=False for that sweep)
    assert live.verdict(4.0, T, active=True, partial=False, authenticating=False) is None
    assert live.verdict(5.0, T, active=True, partial=True, authenticating=False) is None  # new frame, seen at 5
    assert live.verdict(8.9, T, active=True, partial=True, authenticating=False) is None
    assert live.verdict(9.0, T, active=True, partial=True, authenticating=False) == READ_TIMEOUT


def test_authentication_timeout_counts_from_the_connection_and_ends_with_authentication():
    live = Liveness(now=0.0)
    assert live.verdict(2.9, T, active=True, partial=False, authenticating=True) is None
    assert live.verdict(3.0, T, active=True, partial=False, authenticating=True) == AUTH_TIMEOUT
    live = Liveness(now=0.0)
    assert live.verdict(30.0, T, active=True, partial=False, authenticating=False) is None


def test_disabled_timeouts_never_close():
    off = Timeouts(idle_s=None, read_s=None, auth_s=None)
    live = Liveness(now=0.0)
    assert live.verdict(1e9, off, active=False, partial=True, authenticating=True) is None


def test_timeouts_from_config_listener_level_and_disabled():
    cfg = BrokerConfig.load(None, {
        "connections.max.idle.ms": "-1",
        "listener.name.idle.connections.max.idle.ms": "3000",
        "shoal.sasl.authentication.timeout.ms": "0",
    })
    assert Timeouts.from_config(cfg, "PLAINTEXT") == Timeouts(idle_s=None, read_s=30.0, auth_s=None)
    assert Timeouts.from_config(cfg, "IDLE") == Timeouts(idle_s=3.0, read_s=30.0, auth_s=None)


def test_sweep_interval_is_a_quarter_of_the_shortest_timeout_within_bounds():
    assert Timeouts(600.0, 30.0, 10.0).interval_s == 1.0
    assert Timeouts(3.0, 3.0, None).interval_s == 0.75
    assert Timeouts(0.1, None, None).interval_s == 0.1
    assert Timeouts(None, None, None).interval_s == 1.0


@given(st.lists(st.tuples(st.floats(0.01, 5.0), st.booleans(), st.booleans()), max_size=50))
def test_never_closed_for_idleness_within_the_idle_time_of_its_last_activity(steps):
    """Whatever the sweeps see, a connection is closed as idle only when ``idle_s`` has passed
    since the last sweep that saw it active (or since it connected), and a partial frame only
    when ``read_s`` has passed since the sweep that first saw it."""
    live = Liveness(now=0.0)
    now, last_active, partial_since = 0.0, 0.0, None
    for dt, active, partial in steps:
        now += dt
        if active:
            last_active = now
        partial_since = (partial_since if partial_since is not None else now) if partial else None
        verdict = live.verdict(now, T, active=active, partial=partial, authenticating=False)
        if verdict == IDLE:
            assert now - last_active >= T.idle_s
        elif verdict == READ_TIMEOUT:
            assert partial_since is not None and now - partial_since >= T.read_s
        else:
            assert verdict is None
            assert now - last_active < T.idle_s
            assert partial_since is None or now - partial_since < T.read_s
        if verdict is not None:
            break


# -- request memory -------------------------------------------------------------------------------

class _Waiter:
    def __init__(self) -> None:
        self.woken = 0

    def memory_available(self) -> None:
        self.woken += 1


def test_request_memory_wakes_waiters_once_memory_is_given_back_below_the_limit():
    m = RequestMemory(100, 1000)
    m.used = 150  # not strict: one frame may take it over
    m.charge("x", 150)
    a, b = _Waiter(), _Waiter()
    m.wait(a, "a")
    m.wait(b, "b")
    m.release(40, "x")  # 110: still over
    assert (a.woken, b.woken) == (0, 0) and len(m.waiters) == 2
    m.release(20, "x")  # 90: both woken, once, and forgotten
    assert (a.woken, b.woken) == (1, 1) and not m.waiters
    m.release(10, "x")
    assert (a.woken, b.woken) == (1, 1)
    assert m.owned == {"x": 80}


def test_request_memory_forgets_a_closed_waiter_and_minus_one_is_unbounded():
    m = RequestMemory(10)
    m.used = 10
    a = _Waiter()
    m.wait(a, "a")
    m.forget(a)
    m.release(10, "a")
    assert a.woken == 0
    unbounded = RequestMemory(-1)
    assert not unbounded.bounded and unbounded.used < unbounded.limit and not unbounded.must_wait("a")


def test_an_owner_at_its_share_waits_while_everyone_else_reads_on():
    """A tenant that announced frames up to its share (a quarter of the pool by default) waits
    for its own requests to be answered; others do not wait for it, and what others give back
    does not wake it."""
    m = RequestMemory(400)
    assert m.share == 100
    assert not m.must_wait("t1")  # the first frame of an owner is always read (not strict)
    m.charge("t1", 150)  # one 150-byte frame announced: over its share by one frame at most
    assert m.must_wait("t1") and not m.must_wait("t2") and m.used == 0
    t1, t2 = _Waiter(), _Waiter()
    m.wait(t1, "t1")
    m.used += 50
    m.charge("t2", 50)
    m.release(50, "t2")  # t2's answered: t1 still at its share
    assert t1.woken == 0 and m.waiters == {t1: "t1"}
    m.used += 150
    m.release(150, "t1")  # t1's frame answered: it may read again
    assert t1.woken == 1 and not m.waiters and m.owned == {}
    m.used = 400  # the pool used up: everyone waits
    assert m.must_wait("t2")
    m.wait(t2, "t2")
    m.charge("t3", 400)
    m.release(1, "t3")
    assert t2.woken == 1
    assert RequestMemory(400, 300).share == 300


# -- closes: counters and summary log lines ---------------------------------------------------------

def _guard(clock: ManualClock) -> ConnectionGuard:
    broker = SimpleNamespace(config=BrokerConfig.load(None, {}), clock=clock, connections=set(),
                             metadata=SimpleNamespace(image=SimpleNamespace(epoch=1)))
    return ConnectionGuard(broker)  # type: ignore[arg-type]


def test_500_closes_at_once_are_two_log_lines_with_the_count(caplog):
    async def run() -> None:  # (a held-back line arms a timer on the running loop)
        clock = ManualClock()
        guard = _guard(clock)
        with caplog.at_level(logging.INFO, logger="shoal.server"):
            for i in range(500):
                guard.note_close(IDLE, f"10.0.0.1:{i}", "PLAINTEXT", "idle for more than x", clock.monotonic())
            clock.sleep(0.5)
            guard.flush_log(now=clock.monotonic())  # within the second: held back
            assert len(caplog.records) == 1  # the first close, at once
            clock.sleep(0.6)
            guard.flush_log(now=clock.monotonic())
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 2, lines
        assert lines[0].startswith("closed 1 connection idle for more than x: 10.0.0.1:0 on PLAINTEXT")
        assert lines[1].startswith("closed 499 connections idle for more than x: 10.0.0.1:1 on PLAINTEXT")
        assert lines[1].endswith("and 496 more")
        assert guard.closed[IDLE] == 500

    asyncio.run(run())


def test_a_held_back_line_is_written_by_a_timer_when_nothing_else_happens(caplog):
    async def run() -> None:
        guard = _guard(SYSTEM_CLOCK)
        with caplog.at_level(logging.INFO, logger="shoal.server"):
            guard.note_close(READ_TIMEOUT, "10.0.0.1:1", "PLAINTEXT", "slow")
            guard.note_close(READ_TIMEOUT, "10.0.0.1:2", "PLAINTEXT", "slow")
            assert len(caplog.records) == 1
            await asyncio.sleep(1.5)
        assert [r.getMessage() for r in caplog.records][1] == "closed 1 connection slow: 10.0.0.1:2 on PLAINTEXT"

    asyncio.run(run())
