"""Fetch sessions between brokers (KIP-227, ``shoal.replica.sessions``), the policy parts: the
leader's ISR clock for partitions a session's fetches do not name (an idle follower stays in
sync, one behind an append still leaves), which sessions a partition's progress reaches and when
it answers a parked fetch, which changed partitions a pipelined fetch may read, and what the
follower's fetcher names. The wire and the brokers are in tests/cluster/test_pipelined_replication.py
and tests/cluster/test_replication.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from shoal.config import BrokerConfig
from shoal.replica.read import changed
from shoal.metadata import PartitionInfo
from shoal.protocol.errors import ErrorCode
from shoal.replica.fetcher import ReplicaFetcher, _Fetching
from shoal.replica.sessions import ReplicaSession
from test_replica_manager import SOLE, WITH_FOLLOWER, batch, image, rm  # noqa: F401  (fixture)

KEY = ("t", WITH_FOLLOWER.partition)
LAG_MS = 30000


def at(offset: int, since: int = 0) -> SimpleNamespace:
    """A session's fetch state of a partition (the fetch handler's ``_SessionPartition``)."""
    return SimpleNamespace(fetch_offset=offset, since=since)


def caught_up_in_session(rm, records: int):  # noqa: F811
    """A leader of KEY with ``records``, follower 2 caught up in session ``s`` by its full
    fetch; returns (partition, follower state, session, the time of that fetch)."""
    rm.publish(image([SOLE, WITH_FOLLOWER]))  # partitions by position, as a real image's
    p = rm.leader("t", WITH_FOLLOWER)
    for _ in range(records):
        p.append_as_leader(batch(1), 0)
    s = ReplicaSession(2)
    s.partitions = {KEY: at(records)}
    rm.sessions.add(s, [KEY])
    t0 = p.followers[2].last_caught_up_ms + 10
    rm.follower_fetched(2, rm._image(), [(KEY, at(records))], t0, s)  # the session's full fetch
    return p, p.followers[2], s, t0


def idle_fetches(rm, s, start: int, end: int, every: int = 500) -> None:  # noqa: F811
    """The session's incremental fetches from ``start`` to ``end`` ms, naming nothing."""
    for t in range(start, end + 1, every):
        rm.follower_fetched(2, rm._image(), [], t, s)


def test_an_idle_follower_stays_in_sync_by_its_sessions_fetches_alone(rm) -> None:  # noqa: F811
    p, f, s, t0 = caught_up_in_session(rm, 3)
    now = t0 + 2 * LAG_MS
    idle_fetches(rm, s, t0 + 500, now)
    assert f.last_caught_up_ms == t0  # nothing walked the partition...
    assert f.caught_up_ms == now  # ...yet it is caught up as of the session's latest fetch
    assert p.shrink(now, LAG_MS) is None  # in sync: it would have left at t0 + LAG_MS without the session


def test_an_append_stops_the_session_clock_and_a_follower_that_does_not_fetch_it_leaves(rm) -> None:  # noqa: F811
    p, f, s, t0 = caught_up_in_session(rm, 3)
    idle_fetches(rm, s, t0 + 500, t0 + 1000)
    p.append_as_leader(batch(1), 0)  # the log end moves: caught up as of the session's last fetch, no later
    assert f.caught_up_ms == t0 + 1000 and f.session is None
    end = t0 + 1000 + LAG_MS + 500
    idle_fetches(rm, s, t0 + 1500, end)  # the session fetches on but never gets the new record
    assert f.caught_up_ms == t0 + 1000
    assert p.shrink(end, LAG_MS) == (1,)  # out of the ISR after replica.lag.time.max.ms
    # once it names the new log end it is caught up again, and by the session's clock after
    rm.follower_fetched(2, rm._image(), [(KEY, at(4))], end + 100, s)
    idle_fetches(rm, s, end + 600, end + 600 + 2 * LAG_MS)
    assert f.caught_up_ms == end + 600 + 2 * LAG_MS


def test_a_follower_that_fetches_the_new_records_at_once_stays_in_sync(rm) -> None:  # noqa: F811
    """Kafka's rule for a changed partition: the fetch that has the log end of an earlier one is
    caught up as of that one. A pipelined fetch that reads the partition (dirty, not named) counts
    as such an earlier fetch with the session's fetch offset, as Kafka's walk would."""
    p, f, s, t0 = caught_up_in_session(rm, 3)
    p.append_as_leader(batch(1), 0)  # log end 4
    rm.follower_fetched(2, rm._image(), [(KEY, at(3))], t0 + 500, s)  # the dirty partition, read
    rm.follower_fetched(2, rm._image(), [(KEY, at(4))], t0 + 600, s)  # named: it has the log end
    assert f.caught_up_ms == t0 + 600
    idle_fetches(rm, s, t0 + 1100, t0 + 2 * LAG_MS)
    assert p.shrink(t0 + 2 * LAG_MS, LAG_MS) is None


def test_a_partition_that_leaves_the_session_stops_its_clock(rm) -> None:  # noqa: F811
    p, f, s, t0 = caught_up_in_session(rm, 3)
    idle_fetches(rm, s, t0 + 500, t0 + 2000)
    rm.sessions.remove(s, [KEY])  # forgotten by the follower (delayed after an error, moved away)
    idle_fetches(rm, s, t0 + 2500, t0 + 2 * LAG_MS)
    assert f.caught_up_ms == t0 + 2000
    assert p.shrink(t0 + 2 * LAG_MS, LAG_MS) == (1,)
    assert rm.sessions.holders(KEY) == 0


def test_a_closed_session_stops_the_clock_of_everything_it_held(rm) -> None:  # noqa: F811
    p, f, s, t0 = caught_up_in_session(rm, 3)
    idle_fetches(rm, s, t0 + 500, t0 + 2000)
    rm.sessions.close(s)  # its connection closed
    assert f.session is None and f.caught_up_ms == t0 + 2000
    assert s.partitions == {} and rm.sessions.holders(KEY) == 0


async def test_progress_reaches_the_sessions_holding_the_partition_and_answers_only_for_new_data(rm) -> None:  # noqa: F811
    rm.publish(image([SOLE, WITH_FOLLOWER]))
    p = rm.leader("t", WITH_FOLLOWER)
    s1, s2 = ReplicaSession(2), ReplicaSession(2)
    s1.partitions, s2.partitions = {KEY: at(0)}, {("t", 0): at(0)}
    rm.sessions.add(s1, [KEY])
    rm.sessions.add(s2, [("t", 0)])
    parked = asyncio.ensure_future(s1.wait(5))
    other = asyncio.ensure_future(s2.wait(0.2))
    await asyncio.sleep(0)
    p.append_as_leader(batch(1), 0)  # new data: the parked fetch answers now
    assert await asyncio.wait_for(parked, 1) is True
    assert list(s1.dirty) == [KEY] and s2.dirty == {}
    assert await other is False  # another partition's data is not its business
    assert s1.take_dirty() == [KEY] and s1.dirty == {}
    # the follower's fetch moves the high watermark: to tell at the next answer, not worth one now
    parked = asyncio.ensure_future(s1.wait(0.2))
    await asyncio.sleep(0)
    p.update_follower_fetch(2, 1, 0)
    assert p.high_watermark == 1 and list(s1.dirty) == [KEY]
    assert await parked is False
    # DeleteRecords moving the log start: told at the next answer too
    s1.take_dirty()
    assert rm.delete_records(p, 1) == 1 == p.log_start_offset
    assert list(s1.dirty) == [KEY]
    # a closed session answers its parked fetch at once and holds nothing
    parked = asyncio.ensure_future(s1.wait(5))
    await asyncio.sleep(0)
    rm.sessions.close(s1)
    assert await asyncio.wait_for(parked, 1) is True
    assert rm.sessions.holders(KEY) == 0 and s1.take_dirty() == []


def test_a_parked_fetch_does_not_read_what_a_later_fetch_named() -> None:
    """Pipelined fetches of one session: fetch 1 is parked when fetch 2 names partition b (new to
    the session, or at a new offset). b is fetch 2's to read: fetch 1's answer would carry a
    partition the follower did not ask that fetch for (and start the pipeline again)."""
    a, b, c = ("t", 0), ("t", 1), ("t", 2)
    s = ReplicaSession(2)
    s.partitions = {a: at(0, since=0), b: at(0, since=2), c: at(0, since=1)}
    s.dirty = dict.fromkeys([a, b, c])
    assert changed(s, {c: s.partitions[c]}, 1) == {a: s.partitions[a]}  # c it reads already
    assert list(s.dirty) == [b]  # left for fetch 2
    assert changed(s, {}, 2) == {b: s.partitions[b]} and s.dirty == {}


FOLLOWING = PartitionInfo(2, (2, 1), (2, 1), leader=2, leader_epoch=0)
FOLLOWING_TOO = PartitionInfo(3, (2, 1), (2, 1), leader=2, leader_epoch=0)


def named(request) -> dict[tuple[str, int], int]:
    return {(t.topic, p.partition): p.fetch_offset for t in request.topics for p in t.partitions}


def forgotten(request) -> list[tuple[str, int]]:
    return [(t.topic, i) for t in request.forgotten_topics_data for i in t.partitions]


async def test_the_fetcher_names_only_what_changed_in_its_session(rm) -> None:  # noqa: F811
    cfg = BrokerConfig.load(None, {})
    rm.publish(image([FOLLOWING, FOLLOWING_TOO]))
    fetcher = ReplicaFetcher(rm.fetchers, 2, 0)
    p2, p3 = rm.partition("t", 2), rm.partition("t", 3)
    ready = {p2.key: _Fetching(p2, 0), p3.key: _Fetching(p3, 0)}
    fetcher.partitions.update(ready)
    first = fetcher._request(cfg, ready)
    assert (first.session_id, first.session_epoch) == (0, 0)  # a full fetch that opens a session
    assert named(first) == {p2.key: 0, p3.key: 0} and fetcher.full_fetches == 1
    assert fetcher._handle(SimpleNamespace(error_code=0, session_id=77, responses=()), ready, 0.0)
    idle = fetcher._request(cfg, ready)
    assert (idle.session_id, idle.session_epoch) == (77, 1)
    assert named(idle) == {} and forgotten(idle) == []  # nothing changed: nothing named
    records = SimpleNamespace(partition_index=3, error_code=0, diverging_epoch=None, records=bytes(batch(2)),
                              high_watermark=0, log_start_offset=0)
    answer = SimpleNamespace(error_code=0, session_id=77, responses=(SimpleNamespace(topic="t", partitions=(records,)),))
    assert fetcher._handle(answer, ready, 0.0)  # an answer brought records
    assert p3.log_end_offset == 2
    moved = fetcher._request(cfg, ready)
    assert moved.session_epoch == 2 and named(moved) == {p3.key: 2}
    p2.append_as_follower(batch(1), now_ms=0)  # a change no answer reported (there is none)...
    assert named(fetcher._request(cfg, ready)) == {}  # ...is not looked for at every request...
    fetcher._recheck_at = 0.0
    assert named(fetcher._request(cfg, ready)) == {p2.key: 1}  # ...but every RECHECK_S
    renewed = dict(ready)
    renewed[p2.key] = _Fetching(p2, 1)  # a new leader epoch: FetcherManager.sync puts a new fetch state
    fetcher.touched(p2.key)
    del renewed[p3.key]  # delayed after an error: not fetched until then
    after = fetcher._request(cfg, renewed)
    assert named(after) == {p2.key: 1} and forgotten(after) == [p3.key]
    fetcher.touched(p2.key)  # (the test puts the old one back)
    assert named(fetcher._request(cfg, ready)) == {p2.key: 1, p3.key: 2}  # both changed again
    assert fetcher.named == 2 + 1 + 1 + 1 + 2 and fetcher.full_fetches == 1
    # an answer the session does not fit (the leader lost it): start again with a new connection
    assert not fetcher._handle(SimpleNamespace(error_code=ErrorCode.fetch_session_id_not_found, session_id=0,
                                               responses=()), ready, 0.0)
    assert not fetcher._handle(SimpleNamespace(error_code=0, session_id=78, responses=()), ready, 0.0)


def test_a_leader_that_opens_no_session_is_sent_full_fetches(rm) -> None:  # noqa: F811
    cfg = BrokerConfig.load(None, {})
    rm.publish(image([FOLLOWING]))
    fetcher = ReplicaFetcher(rm.fetchers, 2, 0)
    p2 = rm.partition("t", 2)
    ready = {p2.key: _Fetching(p2, 0)}
    fetcher._request(cfg, ready)
    assert fetcher._handle(SimpleNamespace(error_code=0, session_id=0, responses=()), ready, 0.0)
    for _ in range(2):
        r = fetcher._request(cfg, ready)
        assert (r.session_id, r.session_epoch) == (0, -1) and named(r) == {p2.key: 0}


def leader_proposing(tmp_path):
    """A started ReplicaManager leading KEY (follower 2) on a manual clock, whose image the test
    publishes itself; the ISRs it proposes are collected (never committed). Returns (manager, log
    manager, clock, {"image": the image}, proposals)."""
    from shoal.clock import ManualClock
    from shoal.replica import ReplicaManager
    from shoal.storage import LogManager

    clock = ManualClock()
    logs = LogManager(tmp_path, clock=clock)
    holder = {"image": image([SOLE, WITH_FOLLOWER])}
    proposals: list = []

    async def alter_isrs(changes):
        proposals.extend(c.isr for c in changes)
        return [Exception("not committed: the test publishes the image itself")] * len(changes)

    m = ReplicaManager(1, logs, lambda: holder["image"], lambda: BrokerConfig.load(None, {}), clock, alter_isrs=alter_isrs)
    m.load()
    m.start()
    return m, logs, clock, holder, proposals


async def test_an_idle_follower_that_left_the_isr_is_read_at_each_fetch_until_it_rejoins(tmp_path) -> None:
    """Kafka's leader walks every partition of a session at every fetch, so an idle follower that
    left the ISR (paused past replica.lag.time.max.ms, or removed by the controller while its
    lease lapsed) rejoins at its next fetch. Here its fetches name nothing (its log did not
    change): the ISR change marks the partition in its session, and the partition stays marked,
    read at each fetch, until the follower is back in the ISR."""
    from shoal.replica.read import ReadResult, keep_pending

    m, logs, clock, holder, proposals = leader_proposing(tmp_path)

    def publish(isr: tuple[int, ...], epoch: int) -> None:
        old, holder["image"] = holder["image"], image(
            [SOLE, PartitionInfo(1, (1, 2), isr, leader=1, leader_epoch=0, partition_epoch=epoch)], epoch=epoch + 1)
        m.on_metadata(old, holder["image"])

    p = m.partition("t", 1)
    p.append_as_leader(batch(2), 0)
    s = ReplicaSession(2)
    s.partitions = {KEY: at(2)}
    m.sessions.add(s, [KEY])
    m.follower_fetched(2, holder["image"], [(KEY, at(2))], clock.now_ms(), s)  # the full fetch: caught up

    def fetch() -> list:
        """One of the session's fetches naming nothing: what it reads (``changed``), then what
        stays marked after (``keep_pending``)."""
        more = changed(s, {}, s.seq)
        m.follower_fetched(2, holder["image"], more.items(), clock.now_ms(), s)
        keep_pending(s, more, {k: ReadResult(ErrorCode.none, part=p) for k in more})
        return list(more)

    assert fetch() == [KEY]  # the high watermark its full fetch moved, to tell it
    assert fetch() == []  # in the ISR and idle: nothing to read
    publish((1,), 1)  # it left the ISR
    assert list(s.dirty) == [KEY]
    p.pending_isr = (1, 0)  # another ISR change in flight: it cannot rejoin yet...
    assert fetch() == [KEY] and list(s.dirty) == [KEY]  # ...so it stays marked
    await asyncio.sleep(0)
    assert proposals == []
    p.pending_isr = None
    assert fetch() == [KEY]  # read again: it rejoins
    await asyncio.sleep(0)
    assert proposals == [(1, 2)]
    publish((1, 2), 2)
    fetch()
    assert fetch() == [] and s.dirty == {}  # back in the ISR: idle again
    logs.close()


async def test_a_follower_a_reassignment_adds_joins_though_its_fetch_came_before_the_leader_knew_it(tmp_path) -> None:
    """Images reach brokers apart: the new replica's fetcher, at the log end of an idle partition,
    named it once in its session before the leader's image listed the replica, so the leader had
    no follower state to update; its later fetches name nothing. The partition stays marked until
    the leader knows the replica, and is read then: the replica joins the ISR and the reassignment
    can complete (it never did: the balancer's refill and a placement change waited for ever on
    idle __consumer_offsets partitions under load)."""
    from shoal.replica.read import ReadResult, keep_pending

    m, logs, clock, holder, proposals = leader_proposing(tmp_path)
    p = m.partition("t", 1)
    p.append_as_leader(batch(2), 0)
    s = ReplicaSession(3)  # broker 3: being added, not a replica in the leader's image yet
    s.partitions = {KEY: at(2)}
    m.sessions.add(s, [KEY])

    def fetch(named: dict) -> list:
        """One of the session's fetches naming ``named``: what it reads (those and ``changed``)."""
        read = {**named, **changed(s, named, s.seq)}
        m.follower_fetched(3, holder["image"], read.items(), clock.now_ms(), s)
        keep_pending(s, read, {k: ReadResult(ErrorCode.none, part=p) for k in read})
        return list(read)

    assert fetch({KEY: at(2)}) == [KEY]  # the full fetch, at the log end: no follower state for 3 here
    assert fetch({}) == [KEY]  # still marked: read at each fetch...
    await asyncio.sleep(0)
    assert proposals == []
    old, holder["image"] = holder["image"], image(
        [SOLE, PartitionInfo(1, (1, 2, 3), (1, 2), leader=1, leader_epoch=0, partition_epoch=1, adding=(3,))], epoch=2)
    m.on_metadata(old, holder["image"])  # ...until the reassignment reaches the leader
    assert fetch({}) == [KEY]
    await asyncio.sleep(0)
    assert proposals == [(1, 2, 3)]  # it joins
    logs.close()


def test_a_partition_whose_follower_state_does_not_follow_the_session_stays_marked(rm) -> None:  # noqa: F811
    """A follower state reset (a new leader epoch here) or not updated (the partition was not led
    here yet when the fetch arrived) would leave an idle follower's ISR clock standing: the
    partition is read again at the next fetch, which attaches it."""
    from shoal.replica.read import ReadResult, keep_pending

    p, f, s, t0 = caught_up_in_session(rm, 3)
    read = {KEY: ReadResult(ErrorCode.none, part=p)}
    s.dirty.clear()  # (the high watermark its full fetch moved)
    keep_pending(s, {KEY: at(3)}, read)
    assert s.dirty == {}  # attached, at the log end, in the ISR: told
    keep_pending(s, {KEY: at(2)}, read)
    assert list(s.dirty) == [KEY]  # behind the log end: records on their way
    s.dirty.clear()
    p.followers[2].session = None  # reset
    keep_pending(s, {KEY: at(3)}, read)
    assert list(s.dirty) == [KEY]
    s.dirty.clear()
    keep_pending(s, {KEY: at(3)}, {KEY: ReadResult(ErrorCode.not_leader_or_follower)})
    assert s.dirty == {}  # an error is told once; the follower names it again after


_TOPICS: dict = {}


def two_topics(t: list[PartitionInfo], u: list[PartitionInfo] | None, epoch: int):
    """An image of topics t and u; a topic given the same partitions as before is the same
    object, as in the images the metadata store publishes (an unchanged topic is shared)."""
    import uuid
    from types import MappingProxyType

    from shoal.metadata import MetadataImage, TopicInfo

    def topic(name: str, n: int, parts: list[PartitionInfo]) -> TopicInfo:
        info = TopicInfo(name, uuid.UUID(int=n), tuple(parts))
        return _TOPICS.setdefault((name, info.partitions), info)

    empty = MappingProxyType({})
    topics = {"t": topic("t", 1, t)}
    if u is not None:
        topics["u"] = topic("u", 2, u)
    return MetadataImage("c", 1, empty, MappingProxyType(topics),
                         MappingProxyType({x.topic_id: x for x in topics.values()}), empty, epoch=epoch)


async def test_the_fetchers_follow_only_the_topics_a_metadata_change_touched(rm) -> None:  # noqa: F811
    """A rejoining broker's thousands of ISR changes each changed one partition's metadata, and
    each walked every hosted partition to re-place its fetchers (a third of its time): now only
    the partitions of the topics that changed are looked at."""
    from shoal.replica.fetcher import _Fetching

    def led_by(leader: int, index: int, epoch: int = 0) -> PartitionInfo:
        return PartitionInfo(index, (leader, 1), (leader, 1), leader=leader, leader_epoch=epoch)

    manager = rm.fetchers
    manager.start()
    try:
        rm.publish(two_topics([led_by(2, 0), led_by(3, 1)], [led_by(2, 0)], epoch=2))
        assert {fid: sorted(f.partitions) for fid, f in manager.fetchers.items()} == {
            (2, 0): [("t", 0), ("u", 0)], (3, 0): [("t", 1)]}
        fetcher_2 = manager.fetchers[(2, 0)]
        marker = fetcher_2.partitions[("t", 0)] = _Fetching(rm.partition("t", 0), -5)  # what a walk would replace
        # topic u changes (its leader moves to broker 3): t is not looked at
        rm.publish(two_topics([led_by(2, 0), led_by(3, 1)], [led_by(3, 0, epoch=1)], epoch=3))
        assert fetcher_2.partitions == {("t", 0): marker}
        assert sorted(manager.fetchers[(3, 0)].partitions) == [("t", 1), ("u", 0)]
        # t changes: its partitions follow (the marker's epoch is not the image's: a new fetch state)
        rm.publish(two_topics([led_by(2, 0), led_by(1, 1)], [led_by(3, 0, epoch=1)], epoch=4))
        assert fetcher_2.partitions[("t", 0)] is not marker and fetcher_2.partitions[("t", 0)].leader_epoch == 0
        assert sorted(manager.fetchers[(3, 0)].partitions) == [("u", 0)]  # t-1 is led here now
        # u goes away: its fetcher, empty, stops
        rm.publish(two_topics([led_by(2, 0), led_by(1, 1)], None, epoch=5))
        assert sorted(manager.fetchers) == [(2, 0)]
    finally:
        await manager.stop()
