"""The balancer's executor (issue 27) on an in-memory metadata store: a removed broker's
leaderships move first, its replicas move as throttled reassignments within the per-broker cap,
the throttles go when the moves end, the broker is reported removed; a broker down past the
healing threshold is healed and one down for less is waited for; pausing starts nothing."""

from __future__ import annotations

import dataclasses
import uuid
from types import MappingProxyType


from shoal.cluster.balancer.executor import (
    THROTTLE_RATES,
    THROTTLED_REPLICAS,
    Balancer,
    choose,
    cooled,
    leaders_off,
    settle_throttles,
    start_moves,
)
from shoal.cluster.balancer.inputs import BalancerSettings
from shoal.cluster.balancer.planner import BalancerConfig
from shoal.cluster.balancer.planner import Change as PlanChange
from shoal.cluster.controller import PREFERRED, election_change
from shoal.metadata import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from shoal.metadata.change import Change
from shoal.metadata.memory import memory_store
from shoal.metadata.rules import topics as topic_rules

RACKS = {1: "a", 2: "b", 3: "c", 4: "a"}


def image(parts, brokers=(1, 2, 3, 4), configs=None, broker_configs=None) -> MetadataImage:
    t = TopicInfo("t", uuid.uuid4(), tuple(parts), MappingProxyType(configs or {}))
    infos = MappingProxyType({n: BrokerInfo(n, "h", 9000 + n, RACKS[n]) for n in brokers})
    return MetadataImage("c", 1, infos, MappingProxyType({"t": t}), MappingProxyType({t.topic_id: t}),
                         MappingProxyType(broker_configs or {}))


def P(i, replicas, leader=None, isr=None) -> PartitionInfo:
    return PartitionInfo(i, tuple(replicas), tuple(isr or replicas), replicas[0] if leader is None else leader)


def test_leaders_off_moves_a_removed_brokers_leaderships_to_an_in_sync_live_replica():
    img = image([P(0, [4, 1, 2]), P(1, [4, 2, 3], isr=[4, 3]), P(2, [1, 4, 2]), P(3, [4, 1], isr=[4])])
    moves = leaders_off(img, {4}, alive={1, 2, 3, 4})
    assert [(c.tp, c.after) for c in moves] == [(("t", 0), (1, 4, 2)), (("t", 1), (3, 4, 2))]
    assert all(c.leadership_only for c in moves)  # partition 3 has no other ISR member: it stays


def test_choose_caps_the_moves_each_broker_takes_part_in_counting_those_in_flight():
    moving = dataclasses.replace(P(9, [1, 2, 3]), adding=(3,), removing=(4,))
    img = image([P(i, [1, 2]) for i in range(4)] + [moving])
    changes = [PlanChange(("t", i), (1, 2), (1, 3), (), 0.0) for i in range(4)] + [
        PlanChange(("t", 5), (1, 2), (2, 1), (), 0.0)]
    chosen = choose(changes, img, max_per_broker=2)
    # broker 3 takes part in the move in flight already: one more; the leadership move always
    assert [c.tp for c in chosen] == [("t", 0), ("t", 5)]


def test_start_moves_reassigns_and_throttles_and_settling_removes_the_throttles_after():
    img = image([P(0, [1, 4]), P(1, [4, 2]), P(2, [2, 3])], configs={THROTTLED_REPLICAS[0]: "2:3"})
    changes = [PlanChange(("t", 0), (1, 4), (1, 3), (), 100.0), PlanChange(("t", 1), (4, 2), (2, 4), (), 0.0)]
    r = start_moves(img, changes)
    assert [c.tp for c in r.response] == [("t", 0), ("t", 1)]
    img2 = r.change.apply(img)
    p0, p1 = img2.topics["t"].partitions[:2]
    assert (p0.replicas, p0.adding, p0.removing) == ((1, 3, 4), (3,), (4,))
    assert (p1.replicas, p1.reassigning) == ((2, 4), False)  # a reorder applies at once
    cfg = img2.topics["t"].configs
    assert cfg[THROTTLED_REPLICAS[0]] == "2:3,0:1,0:4" and cfg[THROTTLED_REPLICAS[1]] == "0:3"
    # while the throttled move runs, the cluster's rates are set; partition 2's stale entry goes
    s = settle_throttles(img2, 1000)
    img3 = s.change.apply(img2)
    assert s.response == 1 and img3.topics["t"].configs[THROTTLED_REPLICAS[0]] == "0:1,0:4"
    assert all(img3.broker_configs[k] == "1000" for k in THROTTLE_RATES)
    # the move completes: its entries and the rates go
    done = Change(topics={"t": dataclasses.replace(img3.topics["t"], partitions=(
        topic_rules.complete_reassignment(dataclasses.replace(img3.topics["t"].partitions[0], isr=(1, 3, 4))),
        *img3.topics["t"].partitions[1:]))}).apply(img3)
    img4 = settle_throttles(done, 1000).change.apply(done)
    assert not any(k in img4.topics["t"].configs for k in THROTTLED_REPLICAS)
    assert not any(k in img4.broker_configs for k in THROTTLE_RATES)
    assert settle_throttles(img4, 1000).change is None


def test_a_leadership_moved_to_balance_is_not_moved_again_for_the_cooldown():
    led_at = {("t", 0): 100.0, ("t", 1): 10.0}
    changes = [PlanChange(("t", 0), (1, 2), (2, 1), (), 0.0),  # moved 5 s ago: held back
               PlanChange(("t", 1), (1, 2), (2, 1), (), 0.0),  # 95 s ago: free again
               PlanChange(("t", 0), (1, 2), (1, 3), (), 9.0)]  # a replica move is not held back
    got = cooled(changes, led_at, now=105.0, cooldown_s=60.0)
    assert [(c.tp, c.after) for c in got] == [(("t", 1), (2, 1)), (("t", 0), (1, 3))]
    assert led_at == {("t", 0): 100.0}


def test_an_operators_own_rate_is_left_alone():
    img = image([P(0, [1, 2])], broker_configs={THROTTLE_RATES[0]: "5"})
    assert settle_throttles(img, 1000).change is None


class Harness:
    """A Balancer over a memory store of 4 brokers and 8 partitions at RF 2, with the controller's
    duties it relies on done by hand (completing reassignments once their replicas are in sync)."""

    def __init__(self, settings: BalancerSettings) -> None:
        self.settings = settings
        self.now = 1000.0
        self.store = memory_store()

    async def start(self) -> None:
        await self.store.start()
        for n, rack in RACKS.items():
            await self.store.register_broker(BrokerInfo(n, "h", 9000 + n, rack))
        await self.store.create_topic("t", [(1 + i % 4, 1 + (i + 1) % 4) for i in range(8)], {})
        self.balancer = Balancer(self.store, 1, lambda: self.settings, lambda img, name: {},
                                 lambda img, wanted: election_change(img, PREFERRED, wanted),
                                 monotonic=lambda: self.now)

    async def catch_up(self, alive=(1, 2, 3, 4)) -> None:
        """Replicas on dead brokers leave their ISR (as their leader drops them), every adding
        replica on a live broker joins it, and the reassignments that may complete do."""
        def decide(img):
            t = img.topics["t"]
            parts = tuple(dataclasses.replace(p, isr=tuple(r for r in dict.fromkeys(p.isr + p.adding) if r in alive)
                                              or p.isr) for p in t.partitions)
            return topic_rules.Result(Change(topics={"t": dataclasses.replace(t, partitions=parts)}), None)
        await self.store.decide_and_commit(decide)
        await self.store.decide_and_commit(topic_rules.complete_reassignments)

    async def rounds_without_4(self) -> None:
        """Rounds with broker 4 down (its moves never catching up) until it holds nothing, 10 at most."""
        for _ in range(10):
            await self.balancer.round({1, 2, 3}, epoch=1)
            await self.catch_up(alive=(1, 2, 3))
            if self.on(4) == 0:
                break

    def on(self, node: int) -> int:
        return sum(node in p.replicas for p in self.store.image.topics["t"].partitions)


SETTINGS = BalancerSettings(interval_s=0.0, max_moves_per_broker=2, throttle=1000,
                            planner=BalancerConfig(goals=("placement",)))


async def test_removing_a_broker_drains_it_within_the_cap_and_reports_it_removed():
    h = Harness(dataclasses.replace(SETTINGS, remove=frozenset({4})))
    await h.start()
    assert h.on(4) == 4
    alive = {1, 2, 3, 4}
    status = await h.balancer.round(alive, epoch=7)
    img = h.store.image
    led = [p for p in img.topics["t"].partitions if p.leader == 4]
    assert not led  # its leaderships moved first (reorder + preferred election)
    moving = [p for p in img.topics["t"].partitions if p.reassigning]
    assert 0 < len(moving) <= 2 and all(p.removing == (4,) for p in moving)  # broker 4 takes part in 2 at most
    assert all(img.broker_configs[k] == "1000" for k in THROTTLE_RATES)
    assert status.state == "balancing" and status.removing == {"4": 4}
    for _ in range(10):
        await h.catch_up()
        status = await h.balancer.round(alive, epoch=7)
        if h.on(4) == 0 and not status.in_flight:
            break
    assert h.on(4) == 0 and status.removed == [4] and status.removing == {}
    img = h.store.image
    assert all(len(p.replicas) == 2 and len({RACKS[r] for r in p.replicas}) == 2 for p in img.topics["t"].partitions)
    assert not any(k in img.broker_configs for k in THROTTLE_RATES)


async def test_a_broker_down_past_the_threshold_is_healed_and_one_down_for_less_is_waited_for():
    h = Harness(dataclasses.replace(SETTINGS, heal_threshold_ms=60_000))
    await h.start()
    await h.balancer.round({1, 2, 3, 4}, epoch=1)
    await h.balancer.round({1, 2, 3}, epoch=1)  # broker 4 goes down now
    h.now += 59
    status = await h.balancer.round({1, 2, 3}, epoch=1)
    assert h.on(4) == 4 and status.down == {"4": 59.0} and status.healing == []
    h.now += 2
    for _ in range(10):
        status = await h.balancer.round({1, 2, 3}, epoch=1)
        await h.catch_up(alive=(1, 2, 3))
        if h.on(4) == 0:
            break
    assert h.on(4) == 0 and status.healing == [4]
    assert all(len(p.replicas) == 2 for p in h.store.image.topics["t"].partitions)


async def test_a_move_onto_a_broker_gone_for_good_is_cancelled_and_healed():
    """A reassignment adding a replica on a broker that then dies never completes (the replica
    never joins the ISR), and a moving partition is left alone by the planner: past the threshold
    the executor cancels it, and the next plan heals the partition."""
    h = Harness(dataclasses.replace(SETTINGS, heal_threshold_ms=60_000))
    await h.start()
    t = h.store.image.topics["t"]
    p = next(p for p in t.partitions if 4 not in p.replicas)
    target = (p.replicas[0], 4)
    await h.store.decide_and_commit(lambda img: topic_rules.start_reassignment(img, "t", p.partition, target))
    await h.balancer.round({1, 2, 3, 4}, epoch=1)
    await h.balancer.round({1, 2, 3}, epoch=1)  # broker 4 dies with the move in flight
    h.now += 61
    await h.rounds_without_4()
    moved = h.store.image.topics["t"].partitions[p.partition]
    assert not moved.reassigning and 4 not in moved.replicas and len(moved.replicas) == 2
    assert h.on(4) == 0


async def test_a_move_keeping_a_replica_on_a_broker_gone_for_good_is_cancelled_and_healed():
    """The same for a move that keeps a replica on the broker that dies (1 -> 3 while 4 stays)."""
    h = Harness(dataclasses.replace(SETTINGS, heal_threshold_ms=60_000))
    await h.start()
    p = next(p for p in h.store.image.topics["t"].partitions if 4 in p.replicas and 3 not in p.replicas)
    target = tuple(3 if r != 4 else 4 for r in p.replicas)
    await h.store.decide_and_commit(lambda img: topic_rules.start_reassignment(img, "t", p.partition, target))
    await h.balancer.round({1, 2, 3, 4}, epoch=1)
    await h.balancer.round({1, 2, 3}, epoch=1)
    h.now += 61
    await h.rounds_without_4()
    moved = h.store.image.topics["t"].partitions[p.partition]
    assert not moved.reassigning and 4 not in moved.replicas and len(moved.replicas) == 2


async def test_paused_or_disabled_starts_nothing():
    for settings in (dataclasses.replace(SETTINGS, remove=frozenset({4}), paused=True),
                     dataclasses.replace(SETTINGS, remove=frozenset({4}), enabled=False)):
        h = Harness(settings)
        await h.start()
        status = await h.balancer.round({1, 2, 3, 4}, epoch=1)
        assert status.state in ("paused", "disabled") and h.on(4) == 4
        assert not any(p.reassigning for p in h.store.image.topics["t"].partitions)




async def test_a_resumed_balancer_says_so_and_a_disabled_one_touches_no_throttle():
    h = Harness(dataclasses.replace(SETTINGS, paused=True))
    await h.start()
    assert (await h.balancer.round({1, 2, 3, 4}, epoch=1)).state == "paused"
    h.settings = dataclasses.replace(h.settings, paused=False)
    assert (await h.balancer.round({1, 2, 3, 4}, epoch=1)).state in ("idle", "balancing")
    # an operator's throttle on a partition no longer moving is the balancer's to drop only when it runs
    h.settings = dataclasses.replace(h.settings, enabled=False)
    t = h.store.image.topics["t"]
    await h.store.decide_and_commit(lambda img: topic_rules.Result(Change(topics={"t": dataclasses.replace(
        t, configs=MappingProxyType({THROTTLED_REPLICAS[0]: "0:1"}))}), None))
    assert (await h.balancer.round({1, 2, 3, 4}, epoch=1)).state == "disabled"
    assert h.store.image.topics["t"].configs[THROTTLED_REPLICAS[0]] == "0:1"

