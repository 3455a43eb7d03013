"""KIP-402 connection limits and KIP-612 connection creation rates (shoal.quotas.connections):
exact decisions on a ManualClock, and Hypothesis properties of the counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.clock import ManualClock
from shoal.quotas.connections import (
    UNLIMITED,
    Admission,
    ConnectionLimitsConfig,
    ConnectionQuotas,
    ListenerLimits,
    Verdict,
    parse_ip_overrides,
)
from shoal.quotas.rate import RateConfig

ACCEPTED = Admission(Verdict.ACCEPTED)


def test_parse_ip_overrides() -> None:
    assert parse_ip_overrides("hostName:100,127.0.0.1:200") == {"hostName": 100, "127.0.0.1": 200}
    assert parse_ip_overrides(" ::1:5 , [fe80::1]:7 ,") == {"::1": 5, "fe80::1": 7}
    assert parse_ip_overrides("") == {} and parse_ip_overrides(None) == {}
    for bad in ("host", "host:", ":5", "host:-1", "host:x", "h:99999999999"):
        with pytest.raises(ValueError):
            parse_ip_overrides(bad)


def test_connection_rate_throttle_is_kafka_bounded_throttle() -> None:
    """Rate 10/s, 11 samples of 1 s: a first burst is measured over W = 10 s (Kafka assumes the
    missing windows were empty), so 100 connections at once are within the rate; the 101st is
    (10.1 - 10) / 10 * 10000 = 100 ms over; throttles are capped at one window (1000 ms)."""
    clock = ManualClock()
    q = ConnectionQuotas(ConnectionLimitsConfig(max_connection_creation_rate=10,
                                                listeners={"PLAIN": ListenerLimits()}))
    t = clock.now_ms()
    assert [q.connection_rate_throttle_ms("PLAIN", t) for _ in range(100)] == [0] * 100
    assert q.connection_rate_throttle_ms("PLAIN", t) == 100
    assert q.connection_rate_throttle_ms("PLAIN", t) == 200
    for _ in range(8):
        q.connection_rate_throttle_ms("PLAIN", t)
    assert q.connection_rate_throttle_ms("PLAIN", t) == 1000  # 11.1/s would be 1100 ms: capped
    assert q.stats["PLAIN"].rate_throttled == 11
    assert q.stats["PLAIN"].rate_throttle_ms == 100 + 200 + sum(range(300, 1100, 100)) + 1000
    # 1 s later W is still 10 s (1 s elapsed + 9 assumed empty windows): 11.2/s -> 1200, capped
    clock.sleep(1)
    assert q.connection_rate_throttle_ms("PLAIN", clock.now_ms()) == 1000
    clock.sleep(11)  # every sample is now older than 11 windows: purged
    assert q.connection_rate_throttle_ms("PLAIN", clock.now_ms()) == 0


def test_listener_rate_and_broker_rate_take_the_larger() -> None:
    cfg = ConnectionLimitsConfig(
        max_connection_creation_rate=20,
        listeners={"A": ListenerLimits(max_connection_creation_rate=10), "B": ListenerLimits()},
        inter_broker_listener="B",
    )
    q = ConnectionQuotas(cfg)
    t = 1_000_000
    for _ in range(100):
        assert q.connection_rate_throttle_ms("A", t) == 0
    assert q.connection_rate_throttle_ms("A", t) == 100  # listener A: 10.1 over 10
    # B is the inter-broker listener of a two-listener broker: no broker-wide rate for it
    for _ in range(150):
        assert q.connection_rate_throttle_ms("B", t) == 0
    # A again: broker has 101 + 0 (B not recorded) = 102 -> 10.2/s vs 20: fine; listener 10.2 vs 10
    assert q.connection_rate_throttle_ms("A", t) == 200


def test_broker_rate_applies_to_the_only_listener_even_if_inter_broker() -> None:
    q = ConnectionQuotas(ConnectionLimitsConfig(max_connection_creation_rate=1,
                                                listeners={"P": ListenerLimits(max_connection_creation_rate=UNLIMITED)},
                                                inter_broker_listener="P"))
    assert not q.is_protected("P")
    t = 5_000
    assert [q.connection_rate_throttle_ms("P", t) for _ in range(11)] == [0] * 10 + [1000]


def test_per_ip_limit_and_overrides() -> None:
    cfg = ConnectionLimitsConfig(max_connections_per_ip=2, max_connections_per_ip_overrides={"10.0.0.9": 3},
                                 listeners={"P": ListenerLimits()})
    q = ConnectionQuotas(cfg)
    t = 0
    assert q.admit("P", "10.0.0.1", t) == ACCEPTED
    assert q.admit("P", "10.0.0.1", t) == ACCEPTED
    assert q.admit("P", "10.0.0.1", t) == Admission(Verdict.TOO_MANY, 0, 2)
    assert q.admit("P", "10.0.0.2", t) == ACCEPTED  # other IPs are not affected
    assert [q.admit("P", "10.0.0.9", t).verdict for _ in range(4)] == [Verdict.ACCEPTED] * 3 + [Verdict.TOO_MANY]
    assert q.ip_counts == {"10.0.0.1": 2, "10.0.0.2": 1, "10.0.0.9": 3}
    assert q.total == 6 and q.stats["P"].connections == 6 and q.stats["P"].refused_per_ip == 2
    q.release("P", "10.0.0.1")
    assert q.admit("P", "10.0.0.1", t) == ACCEPTED
    with pytest.raises(ValueError):
        q.release("P", "10.9.9.9")


def test_zero_per_ip_blocks_everyone_but_overrides() -> None:
    q = ConnectionQuotas(ConnectionLimitsConfig(max_connections_per_ip=0,
                                                max_connections_per_ip_overrides={"127.0.0.1": 1}))
    assert q.admit("P", "10.0.0.1", 0).verdict is Verdict.TOO_MANY
    assert q.admit("P", "127.0.0.1", 0).verdict is Verdict.ACCEPTED


def test_slots_listener_and_broker_limits_with_protected_inter_broker_listener() -> None:
    cfg = ConnectionLimitsConfig(
        max_connections=2,
        listeners={"EXT": ListenerLimits(max_connections=5), "INT": ListenerLimits(max_connections=3),
                   "SMALL": ListenerLimits(max_connections=1)},
        inter_broker_listener="INT",
    )
    q = ConnectionQuotas(cfg)
    assert q.slot_available("SMALL")
    q.admit("SMALL", "a", 0)
    assert not q.slot_available("SMALL")  # its own limit (1)
    assert q.slot_available("EXT")
    q.admit("EXT", "a", 0)
    assert not q.slot_available("EXT")  # broker-wide: 2 of 2
    assert q.slot_available("INT")  # the inter-broker listener only minds its own limit
    for _ in range(3):
        q.admit("INT", "b", 0)
    assert not q.slot_available("INT")  # 3 of 3 on INT
    assert q.total == 5
    assert q.max_connections_exceeded("EXT") and q.max_connections_exceeded("SMALL")
    assert not q.max_connections_exceeded("INT")
    q.release("EXT", "a")
    q.release("SMALL", "a")
    q.release("INT", "b")
    assert q.total == 2 and not q.max_connections_exceeded("EXT")
    assert not q.slot_available("EXT")  # 2 of 2 (both INT), not above
    q.release("INT", "b")
    assert q.slot_available("EXT")


def test_listener_limits_fall_back_to_broker_values() -> None:
    q = ConnectionQuotas(ConnectionLimitsConfig(max_connections=1, max_connection_creation_rate=7))
    assert q.listener_limits("ANY") == ListenerLimits(max_connections=1, max_connection_creation_rate=7)
    q.admit("ANY", "x", 0)
    assert not q.slot_available("ANY")


def test_ip_connection_rate_throttles_and_unrecords() -> None:
    """An IP over its connection_creation_rate is throttled (closed later) and the attempt is
    taken back from the IP, listener and broker rates (Kafka's updateListenerMetrics)."""
    cfg = ConnectionLimitsConfig(listeners={"P": ListenerLimits()})
    q = ConnectionQuotas(cfg, {"10.0.0.1": 2, None: 5})
    t = 42_000
    assert q.ip_rate_quota("10.0.0.1") == 2 and q.ip_rate_quota("10.0.0.2") == 5
    for _ in range(20):  # 20 / 10 s = 2/s: at the bound, accepted
        q.connection_rate_throttle_ms("P", t)
        assert q.admit("P", "10.0.0.1", t) == ACCEPTED
    q.connection_rate_throttle_ms("P", t)
    assert q.admit("P", "10.0.0.1", t) == Admission(Verdict.THROTTLED, 500, 2.0)  # (2.1-2)/2*10000
    assert q.admit("P", "10.0.0.1", t) == Admission(Verdict.THROTTLED, 500, 2.0)  # un-recorded: same
    assert q.ip_sensor("10.0.0.1").rate.total(t) == 20
    assert q.ip_counts["10.0.0.1"] == 20 and q.stats["P"].ip_throttled == 2
    # broker and listener rates: 21 attempts recorded, 2 taken back (one had no attempt recorded)
    assert q._broker_rate.rate.total(t) == 19 and q._listener_rate["P"].rate.total(t) == 19
    # a quota change applies to the existing sensor, history kept
    q.set_ip_rates({"10.0.0.1": 3})
    assert q.admit("P", "10.0.0.1", t) == ACCEPTED
    q.set_ip_rates({})
    assert q.ip_rate_quota("10.0.0.1") == UNLIMITED
    assert all(q.admit("P", "10.0.0.1", t) == ACCEPTED for _ in range(50))


def test_reconfigure_keeps_counts_and_rate_history() -> None:
    q = ConnectionQuotas(ConnectionLimitsConfig(listeners={"P": ListenerLimits()}))
    t = 0
    for _ in range(30):
        assert q.connection_rate_throttle_ms("P", t) == 0
        q.admit("P", "a", t)
    q.reconfigure(ConnectionLimitsConfig(max_connections=10, max_connection_creation_rate=3,
                                         listeners={"P": ListenerLimits(max_connection_creation_rate=3)}))
    assert q.total == 30 and not q.slot_available("P")
    assert q.connection_rate_throttle_ms("P", t) == 333  # 31 in W = 10 s: (3.1 - 3) / 3 * 10000


def test_forget_idle_ips() -> None:
    q = ConnectionQuotas(ConnectionLimitsConfig(rate=RateConfig(samples=2, window_ms=1000)), {None: 100})
    q.admit("P", "a", 0)
    q.admit("P", "b", 0)
    q.release("P", "b")
    q.forget_idle_ips(0)
    assert q.ip_sensor("a") is not None and q.ip_sensor("b") is not None  # b has a recent attempt
    q.forget_idle_ips(10_000)  # samples expired
    assert q.ip_sensor("a") is not None and q.ip_sensor("b") is None


_OPS = st.lists(
    st.tuples(st.sampled_from(["admit", "release", "tick"]), st.sampled_from(["EXT", "INT"]),
              st.sampled_from(["10.0.0.1", "10.0.0.2", "10.0.0.3"]), st.integers(0, 400)),
    max_size=200,
)


@settings(max_examples=200, deadline=None)
@given(ops=_OPS, per_ip=st.integers(0, 4), broker_max=st.integers(0, 6), ext_max=st.integers(0, 6),
       ip_rate=st.sampled_from([None, 1, 3]))
def test_counts_stay_consistent_and_within_limits(ops, per_ip, broker_max, ext_max, ip_rate) -> None:
    """An acceptor that only admits when a slot is available never exceeds a listener or (outside
    the inter-broker listener) the broker limit, never exceeds a per-IP limit, and the counts
    always add up."""
    cfg = ConnectionLimitsConfig(
        max_connections=broker_max, max_connections_per_ip=per_ip,
        max_connections_per_ip_overrides={"10.0.0.3": 1},
        listeners={"EXT": ListenerLimits(max_connections=ext_max), "INT": ListenerLimits()},
        inter_broker_listener="INT", rate=RateConfig(samples=3, window_ms=100),
    )
    q = ConnectionQuotas(cfg, {None: ip_rate} if ip_rate else {})
    now = 0
    open_conns: list[tuple[str, str]] = []
    for op, listener, ip, dt in ops:
        if op == "tick":
            now += dt
        elif op == "admit":
            q.connection_rate_throttle_ms(listener, now)
            if not q.slot_available(listener):
                continue
            ext_before = q.stats["EXT"].connections
            verdict = q.admit(listener, ip, now).verdict
            if verdict is Verdict.ACCEPTED:
                open_conns.append((listener, ip))
                assert q.ip_counts[ip] <= cfg.max_for_ip(ip)
                if listener == "EXT":
                    assert ext_before < ext_max and q.total - q.stats["INT"].connections <= broker_max
        elif open_conns:
            listener, ip = open_conns.pop(dt % len(open_conns))
            q.release(listener, ip)
        assert q.total == len(open_conns) == sum(q.ip_counts.values())
        assert q.total == q.stats["EXT"].connections + q.stats["INT"].connections
        assert all(v > 0 for v in q.ip_counts.values())
