"""Pipelined replication, the policy parts: what a leader sends a follower that keeps several
fetches in flight (``Partition.follower_read_offset`` / ``follower_sent``), when such a follower
counts as caught up (the ISR clock), the order in which one connection's fetches may read
(``shoal.replica.read.ReplicaOrder``), and how a fetcher picks its depth from the round trip. The wire and the
brokers are in tests/cluster/test_pipelined_replication.py."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from types import SimpleNamespace

import pytest

from shoal.config import BrokerConfig
from shoal.replica.read import ReplicaOrder
from shoal.metadata import PartitionInfo
from shoal.replica.fetcher import ReplicaFetcher
from shoal.replica.partition import JOIN_WAIT_MIN_MS
from test_replica_manager import WITH_FOLLOWER, batch, image, rm  # noqa: F401  (fixture)

CONN_A, CONN_B = "127.0.0.1:40001", "127.0.0.1:40002"


def leader_with_records(rm, n: int):  # noqa: F811
    rm.publish(image([WITH_FOLLOWER]))
    p = rm.leader("t", WITH_FOLLOWER)
    for _ in range(n):
        p.append_as_leader(batch(1), 0)
    return p


def test_a_pipelined_fetch_reads_past_what_the_connection_was_sent(rm) -> None:  # noqa: F811
    p = leader_with_records(rm, 5)
    assert p.follower_read_offset(2, CONN_A, 0) == 0  # nothing sent yet: its fetch offset
    p.follower_sent(2, CONN_A, 3)  # fetch A (offset 0) was answered with 0..2
    assert p.follower_read_offset(2, CONN_A, 0) == 3  # fetch B, sent before A's answer arrived
    assert p.follower_read_offset(2, CONN_A, 3) == 3  # the fetch sent after A's answer
    assert p.follower_read_offset(2, CONN_A, 4) == 4  # it has more than was sent here: its own offset
    # another connection (the follower reconnected: it dropped what was in flight) starts afresh
    assert p.follower_read_offset(2, CONN_B, 0) == 0
    p.follower_sent(2, CONN_B, 2)
    assert p.follower_read_offset(2, CONN_A, 0) == 0 and p.follower_read_offset(2, CONN_B, 1) == 2
    # never past the log end (a leader's log does not shrink, but the state must not trust it)
    p.follower_sent(2, CONN_A, 9)
    assert p.follower_read_offset(2, CONN_A, 1) == 1
    assert p.follower_read_offset(3, CONN_A, 0) == 0  # not a follower of this partition


def test_a_new_leader_epoch_forgets_what_was_sent(rm) -> None:  # noqa: F811
    p = leader_with_records(rm, 3)
    p.follower_sent(2, CONN_A, 3)
    rm.publish(image([dataclasses.replace(WITH_FOLLOWER, leader_epoch=1)], epoch=2))
    p = rm.leader("t", WITH_FOLLOWER)
    assert p.follower_read_offset(2, CONN_A, 0) == 0


def test_a_pipelining_follower_is_caught_up_as_of_the_fetch_whose_log_end_it_has(rm) -> None:  # noqa: F811
    """Kafka: caught up as of the previous fetch when the follower now has what the log end was
    then. A follower with several fetches in flight answers (with its fetch offset) the state of
    a fetch a round trip back, several fetches ago: the clock follows that one, not the last."""
    p = leader_with_records(rm, 0)
    f = p.followers[2]
    t = f.last_caught_up_ms  # the leadership change (the manual clock's now)
    p.append_as_leader(batch(1), 0)                          # log end 1
    assert p.update_follower_fetch(2, 0, t + 100) is None    # fetch 1 (log end 1)
    p.append_as_leader(batch(1), 0)                          # log end 2
    p.update_follower_fetch(2, 0, t + 110)                   # fetch 2, pipelined (log end 2)
    p.append_as_leader(batch(1), 0)                          # log end 3
    p.update_follower_fetch(2, 1, t + 130)                   # has fetch 1's log end: caught up as of it
    assert f.last_caught_up_ms == t + 100
    p.append_as_leader(batch(1), 0)                          # log end 4
    p.update_follower_fetch(2, 2, t + 150)                   # has fetch 2's
    assert f.last_caught_up_ms == t + 110
    p.update_follower_fetch(2, 2, t + 160)                   # nothing new
    assert f.last_caught_up_ms == t + 110
    p.update_follower_fetch(2, 4, t + 170)                   # the log end: as of now
    assert f.last_caught_up_ms == t + 170 and f.log_end_offset == 4


def test_a_follower_falling_further_behind_stops_being_caught_up(rm) -> None:  # noqa: F811
    p = leader_with_records(rm, 10)
    f = p.followers[2]
    t0 = f.last_caught_up_ms
    p.update_follower_fetch(2, 10, t0)  # caught up now
    for t in range(1, 40):  # the log grows by 2 a fetch, the follower by 1
        p.append_as_leader(batch(2), 0)
        p.update_follower_fetch(2, 10 + t, t0 + t * 100)
    # at fetch t it has what the log end was at fetch t/2 at best: its clock falls ever further
    # behind, to the ISR shrink after replica.lag.time.max.ms
    assert t0 + 100 <= f.last_caught_up_ms <= t0 + 2000
    assert t0 + 3900 - f.last_caught_up_ms >= 1900
    assert len(f.recent) <= 16  # bounded history


async def test_only_the_oldest_unanswered_fetch_of_a_connection_reads() -> None:
    order = ReplicaOrder()
    a, b, c = order.take(), order.take(), order.take()
    assert await order.turn(a, 1.0) is True
    turns: list[int] = []

    async def wait(seq: int) -> None:
        assert await order.turn(seq, 5.0)
        turns.append(seq)

    tb, tc = asyncio.ensure_future(wait(b)), asyncio.ensure_future(wait(c))
    await asyncio.sleep(0.01)
    assert turns == []  # a is still unanswered
    order.done(a)
    await asyncio.sleep(0.01)
    assert turns == [b]  # b, not c
    order.done(b)
    await asyncio.wait_for(asyncio.gather(tb, tc), 1)
    assert turns == [b, c]
    order.done(c)
    d = order.take()
    assert await order.turn(d, 0) is True  # nothing before it


async def test_a_fetch_whose_turn_does_not_come_in_time_answers_without_reading() -> None:
    order = ReplicaOrder()
    a, b = order.take(), order.take()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await order.turn(b, 0.05) is False  # a is parked for longer than b may wait
    assert loop.time() - t0 >= 0.04
    order.done(b)  # b answered (empty): a is still the head, and c comes after a
    c = order.take()
    assert not await order.turn(c, 0)
    order.done(a)
    assert await order.turn(c, 0)


async def test_a_cancelled_fetch_gives_its_turn_away() -> None:
    order = ReplicaOrder()
    a, b = order.take(), order.take()
    task = asyncio.ensure_future(order.turn(b, 10))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    order.done(b)  # the handler's finally
    assert not order.turns
    order.done(a)
    c = order.take()
    assert await order.turn(c, 0)


@pytest.mark.parametrize("setting,rtt_ms,depth", [
    ("0", None, 1),      # not connected yet
    ("0", 0.3, 1),       # loopback / a LAN: one at a time, as Kafka
    ("0", 4.9, 1),
    ("0", 5.0, 2),
    ("0", 12.0, 4),
    ("0", 31.0, 8),      # the region harness' 30 ms WAN link
    ("0", 400.0, 8),
    ("1", 31.0, 1),      # set: as set
    ("6", 0.3, 6),
])
def test_pipeline_depth_follows_the_setting_or_the_round_trip(setting, rtt_ms, depth) -> None:
    cfg = BrokerConfig.load(None, {"shoal.replica.fetch.pipeline.depth": setting})
    f = ReplicaFetcher(SimpleNamespace(), 2, 0)
    f.rtt_ms = rtt_ms
    assert f.pipeline_depth(cfg) == depth


@pytest.mark.parametrize("delay_ms", [0.3, 4.6])
def test_the_round_trip_is_measured_below_a_millisecond_on_uvloop(delay_ms) -> None:
    """The broker runs on uvloop, whose ``loop.time()`` counts whole milliseconds: timed with it
    a 0.3 ms round trip measured 0 (the fastest of three) and a 4.6 ms one 4 or 5 ms, either side
    of the 5 ms threshold (depth 1 or 2)."""
    uvloop = pytest.importorskip("uvloop")

    class Link:  # answers after delay_ms, timed by a thread (uvloop's timers are whole ms too)
        calls = 0

        async def send(self, *_a) -> None:
            Link.calls += 1
            await asyncio.get_running_loop().run_in_executor(None, time.sleep, delay_ms / 1000)

        def version_for(self, _key: int) -> int:
            return 3

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        rtt = runner.run(ReplicaFetcher._round_trip(Link()))
    assert Link.calls == 3
    assert delay_ms <= rtt < delay_ms + 20  # (a loaded machine may add to it, never take away)


def test_the_depth_settings_are_validated() -> None:
    with pytest.raises(Exception):
        BrokerConfig.load(None, {"shoal.replica.fetch.pipeline.depth": "17"})
    with pytest.raises(Exception):
        BrokerConfig.load(None, {"shoal.replica.fetch.pipeline.depth": "-1"})


OUT_OF_ISR = PartitionInfo(1, (1, 2, 3), (1, 3), leader=1, leader_epoch=0)


def steady_load(rm, p, clock, steps: int, *, behind: int, follower_2: bool = True) -> list:  # noqa: F811
    """``steps`` milliseconds of a write a millisecond; replica 3 (in the ISR, close by) fetches
    the log end each time; replica 2 (outside it, a round trip away, 8 fetches in flight: one
    every 4 ms) has what the log end was ``behind`` ms ago. Returns the ISRs proposed for it."""
    proposed = []
    ends: list[int] = []
    for _ in range(steps):
        clock.sleep(0.001)
        p.append_as_leader(batch(1), 0)
        now = clock.now_ms()
        ends.append(p.log_end_offset)
        p.update_follower_fetch(3, p.log_end_offset, now)
        if follower_2 and len(ends) > behind and len(ends) % 4 == 0:
            got = p.update_follower_fetch(2, ends[-1 - behind], now)
            if got is not None:
                proposed.append(got)
    return proposed


def test_a_replica_a_round_trip_behind_a_steady_load_rejoins_the_isr(rm) -> None:  # noqa: F811
    """Kafka's rule alone (in sync when its log end reaches the high watermark) never lets a far
    replica back while the near ones keep the high watermark a millisecond behind the log end:
    the leader holds the high watermark for it, so acks=all waits one round trip more, and it
    joins."""
    rm.publish(image([OUT_OF_ISR]))
    p = rm.leader("t", OUT_OF_ISR)
    clock = rm.clock
    proposed = steady_load(rm, p, clock, 200, behind=30)
    assert proposed and proposed[0] == (1, 3, 2)
    f = p.followers[2]
    assert f.log_end_offset >= p.high_watermark  # Kafka's rule holds when it joins
    # meanwhile the high watermark waited for it: it never passed replica 2's log end by more
    # than what replica 2 had, once held
    assert f.joining_until_ms > clock.now_ms() - 5000


def test_without_the_hold_the_far_replica_would_not_rejoin(rm, monkeypatch) -> None:  # noqa: F811
    """The control: with holding disabled, the same load keeps replica 2 out."""
    rm.publish(image([OUT_OF_ISR]))
    p = rm.leader("t", OUT_OF_ISR)
    monkeypatch.setattr(type(p), "_hold_for", lambda *a, **k: None)
    assert steady_load(rm, p, rm.clock, 200, behind=30) == []


def test_a_joining_replica_that_stops_fetching_holds_the_high_watermark_only_a_while(rm) -> None:  # noqa: F811
    rm.publish(image([OUT_OF_ISR]))
    p = rm.leader("t", OUT_OF_ISR)
    clock = rm.clock
    steady_load(rm, p, clock, 68, behind=30)  # held, not yet caught up
    f = p.followers[2]
    assert f.joining_until_ms > clock.now_ms()
    held = p.high_watermark
    assert f.log_end_offset < held < p.log_end_offset  # it stopped when replica 2 was held for
    steady_load(rm, p, clock, 100, behind=30, follower_2=False)  # replica 2 is cut off
    assert p.high_watermark == held  # acks=all waits for it...
    clock.sleep(JOIN_WAIT_MIN_MS / 1000)
    steady_load(rm, p, clock, 1, behind=30, follower_2=False)
    assert p.high_watermark == p.log_end_offset  # ...only until the wait is over
    # and it is not held for again at once
    steady_load(rm, p, clock, 200, behind=30)
    assert p.high_watermark >= p.log_end_offset - 1


def test_a_replica_far_behind_is_not_held_for(rm) -> None:  # noqa: F811
    rm.publish(image([OUT_OF_ISR]))
    p = rm.leader("t", OUT_OF_ISR)
    clock = rm.clock
    for _ in range(5):
        clock.sleep(0.5)  # a write every 500 ms; replica 2 has what the log end was 3 fetches back
        p.append_as_leader(batch(1), 0)
        p.update_follower_fetch(3, p.log_end_offset, clock.now_ms())
        p.update_follower_fetch(2, max(0, p.log_end_offset - 3), clock.now_ms())
    assert p.followers[2].joining_until_ms < 0
    assert p.high_watermark == p.log_end_offset


async def test_a_fetcher_stopped_while_it_connects_leaves_no_connection_open() -> None:
    """A fetcher cancelled (its leader changed) while it opens its connection or times the round
    trip closes that connection; it was left open, owned by nobody, until the garbage collector
    destroyed its pending read task ("Task was destroyed but it is pending!" in the log)."""
    accepted: asyncio.Queue = asyncio.Queue()

    async def accept(reader, writer) -> None:  # a leader that never answers
        await accepted.put(reader)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    cfg = BrokerConfig.load(None, {})
    manager = SimpleNamespace(node_id=2, config=lambda: cfg, endpoint=lambda _n: ("127.0.0.1", port))
    f = ReplicaFetcher(manager, 1, 0)
    task = asyncio.ensure_future(f._connection())
    try:
        reader = await asyncio.wait_for(accepted.get(), 10)
        await asyncio.sleep(0.05)  # in its first request
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the leader's side sees the connection end: read what was sent, then EOF
        assert await asyncio.wait_for(reader.read(), 5) is not None
        assert reader.at_eof()
    finally:
        server.close()
