"""Failed-login backoff (shoal.auth.backoff): exact schedule on a manual clock, bounded state, keyed
by client address and user (the guesser slowed, never the account)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.auth.backoff import LoginBackoff, login_key
from shoal.clock import ManualClock as _ManualClock


def ms(clock: ManualClock) -> int:
    return int(clock.monotonic() * 1000)


def ManualClock() -> _ManualClock:  # noqa: N802  (a monotonic clock far from 0, as a real one is)
    clock = _ManualClock()
    clock.sleep(123_456.789)
    return clock


def test_delay_doubles_up_to_the_cap():
    b = LoginBackoff(base_ms=100, max_ms=2000)
    assert [b.delay_ms(n) for n in range(8)] == [0, 100, 200, 400, 800, 1600, 2000, 2000]
    assert b.delay_ms(10_000) == 2000
    assert LoginBackoff(base_ms=0, max_ms=0).delay_ms(5) == 0
    assert LoginBackoff(base_ms=0, max_ms=2000).delay_ms(40) == 0  # no delay configured: none, ever


def test_sequential_guesser_waits_for_each_answer():
    clock = ManualClock()
    b = LoginBackoff(base_ms=100, max_ms=2000)
    answers = []
    for _ in range(7):
        assert b.admit("bob", ms(clock)) == 0  # it waited for the previous answer
        d = b.failed("bob", ms(clock))
        answers.append(d)
        clock.sleep(d / 1000)
    assert answers == [100, 200, 400, 800, 1600, 2000, 2000]


def test_parallel_attempts_are_spaced_and_reserve_nothing_ahead():
    clock = ManualClock()
    b = LoginBackoff(base_ms=100, max_ms=2000, queue_ms=7000)
    for _ in range(6):
        b.failed("bob", ms(clock))
    assert b.failures("bob", ms(clock)) == 6
    now = ms(clock)  # next slot: now + 2000
    # 5 connections try at once: each is told to come back at the next slot, none reserves it
    assert [b.admit("bob", now) for _ in range(5)] == [2000] * 5
    clock.sleep(2.0)
    # at the slot the first to ask is checked; the others wait for the next one, 2 s on
    assert [b.admit("bob", ms(clock)) for _ in range(3)] == [0, 2000, 2000]
    # an attempt abandoned while waiting (its connection closed) held nothing: once a slot has
    # passed unclaimed, the next attempt is checked at once
    clock.sleep(5.0)
    assert b.admit("bob", ms(clock)) == 0


def test_a_client_retrying_faster_than_the_delay_still_gets_checked():
    """A broker that failed with a wrong password, restarted with the right one, and retries
    every 1.5 s (its connections closed by a 1.5 s authentication timeout while they wait) is
    checked at a slot, not pushed behind slots its own abandoned attempts reserved."""
    clock = ManualClock()
    b = LoginBackoff(base_ms=100, max_ms=2000)
    for _ in range(10):
        b.failed("broker", ms(clock))
    checked = None
    for attempt in range(10):
        started = ms(clock)
        while True:
            wait = b.admit("broker", ms(clock))
            if wait == 0:
                checked = attempt
                break
            if ms(clock) + wait - started > 1500:  # it would be closed before its turn
                clock.sleep(1.5 - (ms(clock) - started) / 1000)
                break
            clock.sleep(wait / 1000)
        if checked is not None:
            break
        clock.sleep(0.2)  # the client's reconnect backoff
    assert checked is not None and checked <= 2


def test_the_guesser_is_slowed_not_the_account():
    """Issue 24: keyed by user, an 8-connection guesser got the owner's correct password refused
    5 times of 6. Keyed by address and user, the owner elsewhere is checked at once; on the
    guesser's own address she waits in its line, or is refused when it is longer than queue_ms."""
    clock = ManualClock()
    b = LoginBackoff.from_config({"connection.failed.authentication.delay.ms": 100,
                                  "shoal.login.failure.delay.max.ms": 2000})
    guesser, owner = login_key("10.0.0.66:40000", "alice"), login_key("10.0.0.7:51000", "alice")
    for _ in range(10):  # the guesser is at the cap
        clock.sleep(b.failed(guesser, ms(clock)) / 1000)
    waits = [b.admit(guesser, ms(clock)) for _ in range(8)]  # eight connections of the guesser
    assert waits == [0] + [2000] * 7  # one checked now, the others at the next slots, one a slot
    assert b.admit(owner, ms(clock)) == 0  # the owner, from her address: checked at once
    b.succeeded(owner)
    assert b.admit(login_key("10.0.0.66:40001", "alice"), ms(clock)) == 2000  # behind the guesser's NAT: one of them
    assert b.admit(login_key("10.0.0.66:40002", "bob"), ms(clock)) == 0  # another user there: never slowed


def test_login_key_is_the_address_and_the_user():
    assert login_key("127.0.0.1:5555", "u") == login_key("127.0.0.1:6666", "u") == "127.0.0.1|u"
    assert login_key("127.0.0.1:5555", "v") != login_key("127.0.0.1:5555", "u")
    # IPv6 by its /64 (one host's allocation), the port after the last colon, unbracketed
    assert login_key("2001:db8:1:2:3:4:5:6:9092", "u") == login_key("2001:db8:1:2:ffff::1:1", "u") == "2001:db8:1:2::/64|u"
    assert login_key("2001:db8:1:3::1:9092", "u") != login_key("2001:db8:1:2::1:9092", "u")
    assert login_key("::ffff:10.0.0.1:3", "u") == "10.0.0.1|u"  # an IPv4 client on a dual-stack socket
    assert login_key("?", "u") == "?|u"


def test_other_users_are_never_slowed():
    clock = ManualClock()
    b = LoginBackoff()
    for _ in range(20):
        b.failed("bob", ms(clock))
    assert b.admit("alice", ms(clock)) == 0
    assert b.failures("alice", ms(clock)) == 0


def test_success_clears_and_quiet_time_forgets():
    clock = ManualClock()
    b = LoginBackoff(base_ms=100, max_ms=2000, forget_ms=60_000)
    for _ in range(3):
        b.failed("bob", ms(clock))
    b.succeeded("bob")
    assert b.admit("bob", ms(clock)) == 0 and b.failed("bob", ms(clock)) == 100
    for _ in range(4):
        b.failed("bob", ms(clock))
    clock.sleep(59.9)
    assert b.failures("bob", ms(clock)) == 5
    clock.sleep(0.1)
    assert b.failures("bob", ms(clock)) == 0 and b.tracked == 0
    assert b.admit("bob", ms(clock)) == 0


def test_millions_of_names_keep_memory_bounded():
    clock = ManualClock()
    b = LoginBackoff(max_entries=1000)
    for i in range(50_000):
        b.failed(f"user-{i}", ms(clock))
    assert b.tracked == 1000
    assert b.failures_total == 50_000


def test_idle_states_are_dropped_as_new_ones_come():
    clock = ManualClock()
    b = LoginBackoff(forget_ms=1000, max_entries=100)
    for i in range(10):
        b.failed(f"old-{i}", ms(clock))
    clock.sleep(5)
    for i in range(10):
        b.failed(f"new-{i}", ms(clock))
    assert b.tracked == 10


@settings(deadline=None, max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(["admit", "fail", "ok"]), st.integers(0, 3000)), max_size=60))
def test_checked_attempts_on_one_user_are_spaced(steps):
    """Property: however attempts arrive, two password checks on one user with failures between
    them are at least the delay of the failures seen at the first apart, and no attempt is told to
    wait longer than the largest delay."""
    b = LoginBackoff(base_ms=100, max_ms=2000)
    now = 987_654_321
    checks: list[tuple[int, int]] = []  # (time checked, failures before it)
    for op, dt in steps:
        now += dt
        if op == "admit":
            n = b.failures("u", now)
            wait = b.admit("u", now)
            assert 0 <= wait <= b.max_ms
            if wait == 0:  # checked now
                checks.append((now, n))
        elif op == "fail":
            b.failed("u", now)
        else:
            b.succeeded("u")
            checks.clear()
    checks.sort()
    for (t0, n0), (t1, _n1) in zip(checks, checks[1:]):
        assert t1 - t0 >= b.delay_ms(n0)
