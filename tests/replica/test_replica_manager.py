"""The replica layer on one broker: which partitions it hosts and leads, where the high watermark
is, and when acks=all completes. Real partition logs in a temporary directory; the metadata image
is set by hand, as a store would publish it."""

from __future__ import annotations

import asyncio
import uuid
from types import MappingProxyType

import pytest

from shoal.clock import ManualClock
from shoal.config import BrokerConfig
from shoal.metadata import IsrChange, MetadataImage, PartitionInfo, TopicInfo
from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import build_batch
from shoal.replica import ReplicaManager
from shoal.storage import LogManager

NODE = 1
TOPIC_ID = uuid.uuid4()


def image(partitions: list[PartitionInfo], epoch: int = 1, *, topic: bool = True) -> MetadataImage:
    empty = MappingProxyType({})
    topics = {}
    if topic:
        t = TopicInfo("t", TOPIC_ID, tuple(partitions))
        topics = {"t": t}
    return MetadataImage("c", NODE, empty, MappingProxyType(topics),
                         MappingProxyType({t.topic_id: t for t in topics.values()}), empty, epoch=epoch)


def batch(n: int = 1) -> bytearray:
    return bytearray(build_batch([(0, None, b"v%d" % i, ()) for i in range(n)]))


@pytest.fixture
def rm(tmp_path):
    clock = ManualClock()
    logs = LogManager(tmp_path, clock=clock)
    holder = {"image": image([])}
    m = ReplicaManager(NODE, logs, lambda: holder["image"], lambda: BrokerConfig.load(None, {}), clock)
    m.load()

    def publish(new: MetadataImage) -> None:
        old, holder["image"] = holder["image"], new
        m.on_metadata(old, new)

    m.publish = publish  # type: ignore[attr-defined]
    m.start()
    yield m
    logs.close()


async def wait_out(rm, waits, timeout: float) -> dict:
    """``rm.wait_committed(waits, timeout)`` on the manager's ManualClock: still waiting just
    before the deadline, answered once the clock passes it (the purgatory's timer fires)."""
    waiter = asyncio.ensure_future(rm.wait_committed(waits, timeout))
    await asyncio.sleep(0)
    rm.clock.sleep(timeout * 0.99)
    await asyncio.sleep(0)
    assert not waiter.done()
    rm.clock.sleep(timeout * 0.02)
    return await asyncio.wait_for(waiter, 1)


SOLE = PartitionInfo(0, (1,), (1,), leader=1, leader_epoch=0)
WITH_FOLLOWER = PartitionInfo(1, (1, 2), (1, 2), leader=1, leader_epoch=0)
FOLLOWING = PartitionInfo(2, (2, 1), (2, 1), leader=2, leader_epoch=0)
ELSEWHERE = PartitionInfo(3, (2,), (2,), leader=2, leader_epoch=0)
OFFLINE = PartitionInfo(4, (1, 2), (2,), leader=-1, leader_epoch=3)


def test_hosts_its_replicas_and_leads_only_where_the_image_says(rm) -> None:
    rm.publish(image([SOLE, WITH_FOLLOWER, FOLLOWING, ELSEWHERE, OFFLINE]))
    assert sorted(p.index for p in rm.hosted()) == [0, 1, 2, 4]  # the replicas on node 1
    assert rm.leader("t", SOLE) is not None and rm.leader("t", WITH_FOLLOWER) is not None
    assert rm.leader("t", FOLLOWING) is None  # a follower does not answer for the leader
    assert rm.leader("t", ELSEWHERE) is None and rm.partition("t", 3) is None
    assert rm.leader("t", OFFLINE) is None  # no leader: nobody serves it
    assert rm.logs.get("t", 3) is None and rm.logs.get("t", 2) is not None


async def test_a_sole_isr_member_commits_at_once(rm) -> None:
    rm.publish(image([SOLE]))
    p = rm.leader("t", SOLE)
    info = p.append_as_leader(batch(3), 0)
    assert (info.base_offset, p.log_end_offset, p.high_watermark) == (0, 3, 3)
    assert await rm.wait_committed([("t", 0, 3, 1)], 0.01) == {}


async def test_acks_all_waits_for_every_isr_member(rm) -> None:
    rm.publish(image([WITH_FOLLOWER]))
    p = rm.leader("t", WITH_FOLLOWER)
    p.append_as_leader(batch(2), 0)
    assert p.high_watermark == 0  # follower 2 has not fetched in this epoch
    assert await wait_out(rm, [("t", 1, 2, 1)], 30) == {("t", 1): ErrorCode.request_timed_out}
    waiter = asyncio.ensure_future(rm.wait_committed([("t", 1, 2, 2)], 5))
    await asyncio.sleep(0)
    p.update_follower_fetch(2, 1, now_ms=10)  # has offset 0 only: HW 1, not yet 2
    assert p.high_watermark == 1 and not waiter.done()
    p.update_follower_fetch(2, 2, now_ms=20)
    assert p.high_watermark == 2
    assert await asyncio.wait_for(waiter, 1) == {}
    assert p.followers[2].last_caught_up_ms == 20


async def test_acks_all_fails_when_leadership_moves_or_the_isr_shrinks_meanwhile(rm) -> None:
    rm.publish(image([WITH_FOLLOWER]))
    p = rm.leader("t", WITH_FOLLOWER)
    p.append_as_leader(batch(2), 0)
    # the ISR shrank to the leader while the batch waited: committed, but below min.insync.replicas=2
    waiter = asyncio.ensure_future(rm.wait_committed([("t", 1, 2, 2)], 5))
    await asyncio.sleep(0)
    rm.publish(image([PartitionInfo(1, (1, 2), (1,), leader=1, leader_epoch=0, partition_epoch=1)], epoch=2))
    assert await asyncio.wait_for(waiter, 1) == {("t", 1): ErrorCode.not_enough_replicas_after_append}
    rm.publish(image([PartitionInfo(1, (1, 2), (1, 2), leader=1, leader_epoch=0, partition_epoch=2)], epoch=3))
    p.append_as_leader(batch(1), 0)
    assert (p.log_end_offset, p.high_watermark) == (3, 2)
    waiter = asyncio.ensure_future(rm.wait_committed([("t", 1, 3, 1)], 5))
    await asyncio.sleep(0)
    # leadership moves before the follower has it: the producer must retry elsewhere, at once
    rm.publish(image([PartitionInfo(1, (1, 2), (2,), leader=2, leader_epoch=1, partition_epoch=3)], epoch=4))
    assert await asyncio.wait_for(waiter, 1) == {("t", 1): ErrorCode.not_leader_or_follower}


async def test_an_empty_isr_is_not_enough_replicas_before_or_after_the_append(rm) -> None:
    """Kafka's rule (inSyncReplicaCount < minIsr) with no ISR member: acks=all is refused before
    the append and, had it got in, answered NOT_ENOUGH_REPLICAS_AFTER_APPEND (the produce handler
    and the acks=all purgatory once disagreed here: the purgatory counted the leader)."""
    empty = PartitionInfo(0, (1,), (), leader=1, leader_epoch=0)
    rm.publish(image([empty]))
    p = rm.leader("t", empty)
    assert not p.enough_isr(1) and not rm.enough_replicas(p, 1)
    p.append_as_leader(batch(1), 0)
    assert p.high_watermark == 1  # the leader alone commits (metadata from before ISRs were kept)
    assert await rm.wait_committed([("t", 0, 1, 1)], 1) == {("t", 0): ErrorCode.not_enough_replicas_after_append}
    rm.publish(image([SOLE], epoch=2))
    assert p.enough_isr(1) and not p.enough_isr(2)


def test_the_leader_epoch_check_fences_older_and_refuses_newer(rm) -> None:
    rm.publish(image([PartitionInfo(0, (1,), (1,), leader=1, leader_epoch=5)]))
    p = rm.partition("t", 0)
    assert [p.check_leader_epoch(k) for k in (-1, 5, 4, 6)] == [
        ErrorCode.none, ErrorCode.none, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch]
    assert p.check_leader_epoch(5, 6) == ErrorCode.fenced_leader_epoch  # judged by the caller's image


async def test_isr_expands_when_a_follower_catches_up_and_shrinks_when_it_lags(tmp_path) -> None:
    clock = ManualClock()
    logs = LogManager(tmp_path, clock=clock)
    holder = {"image": image([SOLE, PartitionInfo(1, (1, 2), (1,), leader=1, leader_epoch=0)])}
    proposals = []

    async def alter_isrs(changes):  # accepted; the test publishes the image that follows
        proposals.extend((c.topic, c.partition, c.leader, c.leader_epoch, c.partition_epoch, c.isr) for c in changes)
        return [committed(c) for c in changes]

    cfg = BrokerConfig.load(None, {"replica.lag.time.max.ms": "1000"})
    m = ReplicaManager(NODE, logs, lambda: holder["image"], lambda: cfg, clock, alter_isrs=alter_isrs)
    m.load()
    m.start()
    p = m.partition("t", 1)
    p.append_as_leader(batch(3), 0)
    assert p.high_watermark == 3  # the leader alone is the ISR
    m.follower_fetched(2, holder["image"], [(("t", 1), FetchAt(1))], clock.now_ms())
    await asyncio.sleep(0)
    assert proposals == []  # behind the high watermark: not in sync
    m.follower_fetched(2, holder["image"], [(("t", 1), FetchAt(3))], clock.now_ms())
    await asyncio.sleep(0)
    assert proposals == [("t", 1, 1, 0, 0, (1, 2))] and p.pending_isr == (1, 2)
    old, holder["image"] = holder["image"], image([SOLE, PartitionInfo(1, (1, 2), (1, 2), leader=1, leader_epoch=0,
                                                                       partition_epoch=1)], epoch=2)
    m.on_metadata(old, holder["image"])
    assert p.pending_isr is None and p.info.isr == (1, 2)
    clock.sleep(0.9)
    p.append_as_leader(batch(1), clock.now_ms())
    m.shrink_isrs()
    assert len(proposals) == 1  # caught up 900 ms ago: still in sync
    clock.sleep(0.2)
    m.shrink_isrs()
    await asyncio.sleep(0)
    assert proposals[-1] == ("t", 1, 1, 0, 1, (1,))
    assert p.high_watermark == 3  # the pending shrink does not move it: the ISR is still (1, 2)
    values = {name: v for name, _help, _labels, v in m.metric_values()}
    assert values["shoal_replica_leader_partitions"] == 2 and values["shoal_replica_under_replicated_partitions"] == 0
    assert values["shoal_replica_max_follower_lag_messages"] == 1  # follower 2 has 3 of 4
    assert values["shoal_replica_isr_expands"] == 1  # committed (the fake store accepted it)
    logs.close()


def committed(c: IsrChange) -> PartitionInfo:
    """What a store answers for an ISR change it committed: the partition at the next epoch."""
    return PartitionInfo(c.partition, (), c.isr, c.leader, c.leader_epoch, c.partition_epoch + 1)


class FetchAt:
    def __init__(self, offset: int) -> None:
        self.fetch_offset = offset


async def test_the_high_watermark_never_goes_back(rm) -> None:
    rm.publish(image([WITH_FOLLOWER]))
    p = rm.leader("t", WITH_FOLLOWER)
    p.append_as_leader(batch(4), 0)
    p.update_follower_fetch(2, 4, now_ms=1)
    assert p.high_watermark == 4
    p.update_follower_fetch(2, 1, now_ms=2)  # a stale or reordered fetch
    assert p.high_watermark == 4


def test_new_leader_epoch_forgets_what_followers_had(rm) -> None:
    rm.publish(image([WITH_FOLLOWER]))
    p = rm.leader("t", WITH_FOLLOWER)
    p.append_as_leader(batch(1), 0)
    p.update_follower_fetch(2, 1, now_ms=1)
    rm.publish(image([PartitionInfo(1, (1, 2), (1, 2), leader=1, leader_epoch=1, partition_epoch=1)], epoch=2))
    assert rm.partition("t", 1) is p and p.followers[2].log_end_offset == -1


def test_leadership_moving_away_stops_serving_but_keeps_the_log(rm) -> None:
    rm.publish(image([WITH_FOLLOWER]))
    rm.leader("t", WITH_FOLLOWER).append_as_leader(batch(2), 0)
    moved = PartitionInfo(1, (1, 2), (2,), leader=2, leader_epoch=1, partition_epoch=1)
    rm.publish(image([moved], epoch=2))
    assert rm.leader("t", moved) is None
    assert rm.partition("t", 1).log_end_offset == 2 and not rm.partition("t", 1).is_leader


def test_topic_deletion_deletes_the_logs(rm) -> None:
    rm.publish(image([SOLE, WITH_FOLLOWER]))
    rm.publish(image([], epoch=2, topic=False))
    assert list(rm.hosted()) == [] and rm.logs.get("t", 0) is None


def test_a_restarted_sole_leader_commits_its_whole_log(tmp_path) -> None:
    clock = ManualClock()
    logs = LogManager(tmp_path, clock=clock)
    img = image([SOLE])
    m = ReplicaManager(NODE, logs, lambda: img, lambda: BrokerConfig.load(None, {}), clock)
    m.load()
    m.start()
    m.leader("t", SOLE).append_as_leader(batch(5), 0)
    logs.get("t", 0).high_watermark = 2  # as if the checkpoint were older than the log
    logs.close()
    logs = LogManager(tmp_path, clock=clock)
    m = ReplicaManager(NODE, logs, lambda: img, lambda: BrokerConfig.load(None, {}), clock)
    m.load()
    m.start()
    assert m.leader("t", SOLE).high_watermark == 5
    logs.close()


async def test_a_followers_parked_fetch_wakes_for_data_or_a_new_leader_not_for_the_high_watermark(rm) -> None:
    """acks=all with RF=3: the second follower's fetch moves the high watermark; the first
    follower's fetch parked at the log end would re-read nothing (a follower's fetch is answered
    for data, not for the HW), so it is not woken. A consumer's fetch is; new data or a new
    leader epoch wakes both."""
    three = PartitionInfo(1, (1, 2, 3), (1, 2, 3), leader=1, leader_epoch=0)
    rm.publish(image([three]))
    p = rm.leader("t", three)
    p.append_as_leader(batch(2), 0)
    p.update_follower_fetch(2, 2, now_ms=1)  # follower 2 has both records, follower 3 none yet
    assert p.high_watermark == 0
    key = ("t", 1)
    follower = asyncio.ensure_future(rm.wait_for_data([key], 5, replica=True))
    consumer = asyncio.ensure_future(rm.wait_for_data([key], 5))
    await asyncio.sleep(0)
    p.update_follower_fetch(3, 2, now_ms=2)  # the HW moves to 2, the log end stays
    assert p.high_watermark == 2
    await asyncio.sleep(0)
    assert consumer.done() and consumer.result() is True
    assert not follower.done()
    p.append_as_leader(batch(1), 3)  # data: the follower's fetch answers
    assert await asyncio.wait_for(follower, 1) is True
    follower = asyncio.ensure_future(rm.wait_for_data([key], 5, replica=True))
    await asyncio.sleep(0)
    rm.publish(image([PartitionInfo(1, (1, 2, 3), (1, 2, 3), leader=1, leader_epoch=1, partition_epoch=1)], epoch=2))
    assert await asyncio.wait_for(follower, 1) is True  # a new epoch: it must answer FENCED / re-check


def test_partitions_moved_away_are_one_log_line(rm, caplog) -> None:
    """A change that takes 300 partitions off this broker (a reassignment, a drained broker) says
    so in one INFO line with the count and a few names, each partition at DEBUG only."""
    here = [PartitionInfo(i, (1, 2), (1, 2), leader=1, leader_epoch=0) for i in range(300)]
    rm.publish(image(here, 1))
    assert len(list(rm.hosted())) == 300
    caplog.set_level("DEBUG", logger="shoal.replica")
    rm.publish(image([PartitionInfo(i, (2, 3), (2, 3), leader=2, leader_epoch=1) for i in range(300)], 2))
    assert list(rm.hosted()) == [] and rm.logs.get("t", 299) is None
    info = [r.getMessage() for r in caplog.records if r.levelname == "INFO" and r.name == "shoal.replica"]
    assert info == ["300 partition(s) no longer replicas here, their logs deleted: t-0, t-1, t-2, t-3, t-4 "
                    "and 295 more"]
    assert len([r for r in caplog.records if r.levelname == "DEBUG" and "no longer a replica" in r.getMessage()]) == 300


def many(n: int) -> list[PartitionInfo]:
    return [PartitionInfo(i, (1,), (1,), leader=1, leader_epoch=0) for i in range(n)]


async def test_a_topic_of_many_partitions_gets_its_logs_from_a_worker_thread(rm) -> None:
    """Issue 25: a change bringing CREATE_OFF_LOOP_MIN or more new logs of a topic has them made
    off the event loop; the partitions are hosted (and lead) once they exist."""
    from shoal.replica.manager import CREATE_OFF_LOOP_MIN

    n = CREATE_OFF_LOOP_MIN + 8
    rm.publish(image(many(n)))
    assert rm.partition("t", 0) is None  # not made on the loop...
    rm.publish(image(many(n), epoch=2))  # a change meanwhile: the partitions being made wait
    for _ in range(500):
        if len(list(rm.hosted())) == n:
            break
        await asyncio.sleep(0.01)
    assert sorted(p.index for p in rm.hosted()) == list(range(n))  # ...but soon after
    assert all(rm.leader("t", p) is not None for p in many(n))
    assert rm.logs.read_topic_id("t", 3) == TOPIC_ID
    p = rm.leader("t", many(n)[5])
    p.append_as_leader(batch(2), 0)
    assert p.high_watermark == 2


async def test_a_topic_deleted_while_its_logs_are_made_leaves_no_log(rm, tmp_path) -> None:
    from shoal.replica.manager import CREATE_OFF_LOOP_MIN

    n = CREATE_OFF_LOOP_MIN + 8
    rm.publish(image(many(n)))
    rm.publish(image([], epoch=2, topic=False))  # deleted before the thread is done
    for _ in range(500):
        if not rm._creators:
            break
        await asyncio.sleep(0.01)
    assert not rm._creators and list(rm.hosted()) == []
    assert rm.logs.partitions() == [] and not any(d.name.startswith("t-") for d in tmp_path.iterdir())


def test_a_topic_of_a_few_partitions_is_hosted_at_once(rm) -> None:
    rm.publish(image(many(3)))
    assert sorted(p.index for p in rm.hosted()) == [0, 1, 2]
