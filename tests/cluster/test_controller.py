"""The controller's pure parts: the clean leader election, the change it commits, the election
transaction's reading, and which brokers a new controller treats as alive."""

from __future__ import annotations

import uuid
from types import MappingProxyType

from shoal.cluster.controller import (
    PREFERRED, UNCLEAN, Observation, assumed_alive, elect, election_change, leadership_change, observe,
    preferred_rebalance, shutdown_change,
)
from shoal.metadata import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo


def P(leader, replicas, isr, epoch=5, pepoch=9, index=0):
    return PartitionInfo(index, tuple(replicas), tuple(isr), leader, epoch, pepoch)


def test_a_live_leader_stays_and_dead_followers_leave_its_isr():
    assert elect(P(1, [1, 2, 3], [1, 2, 3]), {1, 2, 3}) is None
    # a dead follower leaves the ISR at once (acks=all does not wait replica.lag.time.max.ms for it)
    assert elect(P(1, [1, 2, 3], [1, 2, 3]), {1}) == (1, (1,))
    assert elect(P(1, [1, 2, 3], [3, 1, 2]), {1, 3}) == (1, (3, 1))
    assert elect(P(1, [1, 2, 3], [1, 3]), {1, 3}) is None  # 2 is dead but already out


def test_a_dead_leader_gives_way_to_the_first_live_isr_member_in_replica_order():
    assert elect(P(1, [1, 2, 3], [3, 1, 2]), {2, 3}) == (2, (3, 2))
    assert elect(P(1, [1, 2, 3], [1, 3]), {2, 3}) == (3, (3,))  # 2 is alive but not in the ISR


def test_no_live_isr_member_means_offline_keeping_the_isr():
    assert elect(P(1, [1, 2], [1]), {2}) == (-1, (1,))  # clean only: 2 was not in sync
    assert elect(P(-1, [1, 2], [1]), {2}) is None  # already offline
    assert elect(P(-1, [1, 2], [1]), {1, 2}) == (1, (1,))  # the sole ISR member is back: it leads


def _image(brokers, topics) -> MetadataImage:
    infos = MappingProxyType({n: BrokerInfo(n, "h", 9000 + n) for n in brokers})
    ts = MappingProxyType({t.name: t for t in topics})
    return MetadataImage("c", 1, infos, ts, MappingProxyType({t.topic_id: t for t in topics}), MappingProxyType({}))


def test_leadership_change_bumps_epochs_of_changed_partitions_only():
    t = TopicInfo("t", uuid.uuid4(), (P(1, [1, 2], [1, 2], index=0), P(2, [2, 1], [2, 1], index=1),
                                      P(1, [1], [1], index=2)))
    u = TopicInfo("u", uuid.uuid4(), (P(2, [2], [2]),))
    result = leadership_change(_image({2}, [t, u]), {2})
    assert result.response == 3
    assert set(result.change.topics) == {"t"}  # u is untouched
    p0, p1, p2 = result.change.topics["t"].partitions
    assert (p0.leader, p0.isr, p0.leader_epoch, p0.partition_epoch) == (2, (2,), 6, 10)
    assert (p1.leader, p1.isr, p1.leader_epoch, p1.partition_epoch) == (2, (2,), 5, 10)  # only the ISR
    assert (p2.leader, p2.isr, p2.leader_epoch, p2.partition_epoch) == (-1, (1,), 6, 10)
    assert leadership_change(_image({1, 2}, [t, u]), {1, 2}).change is None


def test_observe_the_election_transaction():
    assert observe(Observation(True, revision=42), 3, lease=7) == (3, 42)
    assert observe(Observation(False, revision=40, holder=1, holder_lease=9), 3, lease=7) == (1, None)
    # our own key (the answer of the transaction that created it was lost): still ours, same epoch
    assert observe(Observation(False, revision=40, holder=3, holder_lease=7), 3, lease=7) == (3, 40)
    # our node id under another lease (our former self, before a restart): not ours
    assert observe(Observation(False, revision=40, holder=3, holder_lease=8), 3, lease=7) == (3, None)


def test_a_new_controller_waits_one_session_for_brokers_it_never_saw():
    t = TopicInfo("t", uuid.uuid4(), (P(1, [1], [1]), P(2, [2], [2], index=1), P(3, [3], [3], index=2)))
    image = _image({1}, [t])
    assert assumed_alive(image, seen={1}, in_grace=True) == {1, 2, 3}
    assert assumed_alive(image, seen={1, 2}, in_grace=True) == {1, 3}  # 2 was seen, and went
    assert assumed_alive(image, seen={1}, in_grace=False) == {1}


def test_controlled_shutdown_moves_leaderships_and_leaves_every_isr():
    t = TopicInfo("t", uuid.uuid4(), (P(1, [1, 2, 3], [1, 2, 3], index=0), P(2, [2, 1, 3], [2, 1, 3], index=1),
                                      P(1, [1, 2], [1], index=2), P(3, [3, 2], [3, 2], index=3)))
    result = shutdown_change(_image({1, 2, 3}, [t]), 1)
    assert result.response == 1
    p0, p1, p2, p3 = result.change.topics["t"].partitions
    assert (p0.leader, p0.isr, p0.leader_epoch, p0.partition_epoch) == (2, (2, 3), 6, 10)
    assert (p1.leader, p1.isr, p1.leader_epoch, p1.partition_epoch) == (2, (2, 3), 5, 10)  # only the ISR
    assert p2 == t.partitions[2]  # no other ISR member: it stays (clean election only)
    assert p3 == t.partitions[3]  # not its partition
    assert shutdown_change(_image({1, 2, 3}, [t]), 4).change is None


def test_unclean_election_only_where_the_topic_allows_it():
    p = P(1, [1, 2, 3], [1])  # only the dead leader was in sync
    assert elect(p, {2, 3}) == (-1, (1,))  # clean: offline, nothing acknowledged is lost
    assert elect(p, {2, 3}, unclean=True) == (2, (2,))  # the first live replica, alone in the ISR
    assert elect(P(1, [1, 2, 3], [1, 3]), {2, 3}, unclean=True) == (3, (3,))  # an ISR member first
    t = TopicInfo("t", uuid.uuid4(), (p,))
    u = TopicInfo("u", uuid.uuid4(), (P(1, [1, 2], [1]),))
    result = leadership_change(_image({2, 3}, [t, u]), {2, 3}, unclean=lambda name: name == "t")
    assert result.change.topics["t"].partitions[0].leader == 2
    assert result.change.topics["u"].partitions[0].leader == -1


def test_preferred_election_moves_leadership_to_the_first_replica_when_it_can():
    t = TopicInfo("t", uuid.uuid4(), (P(2, [1, 2, 3], [1, 2, 3], index=0), P(1, [1, 2], [1, 2], index=1),
                                      P(2, [1, 2], [2], index=2), P(2, [3, 2], [3, 2], index=3)))
    result = election_change(_image({1, 2}, [t]), PREFERRED, [("t", 0), ("t", 1), ("t", 2), ("t", 3), ("t", 9),
                                                               ("nope", 0)])
    assert result.response == {
        ("t", 0): ("NONE", None),
        ("t", 1): ("ELECTION_NOT_NEEDED", "Leader election not needed for topic partition."),
        ("t", 2): ("PREFERRED_LEADER_NOT_AVAILABLE", result.response[("t", 2)][1]),  # 1 is not in sync
        ("t", 3): ("PREFERRED_LEADER_NOT_AVAILABLE", result.response[("t", 3)][1]),  # 3 is not alive
        ("t", 9): ("UNKNOWN_TOPIC_OR_PARTITION", "The partition does not exist."),
        ("nope", 0): ("UNKNOWN_TOPIC_OR_PARTITION", "The partition does not exist."),
    }
    p0 = result.change.topics["t"].partitions[0]
    assert (p0.leader, p0.isr, p0.leader_epoch, p0.partition_epoch) == (1, (1, 2, 3), 6, 10)


def test_unclean_election_on_request_gives_a_leaderless_partition_a_live_replica():
    t = TopicInfo("t", uuid.uuid4(), (P(-1, [1, 2], [1], index=0), P(2, [2, 1], [2, 1], index=1),
                                      P(-1, [3], [3], index=2)))
    result = election_change(_image({2}, [t]), UNCLEAN, None)
    assert {k: v[0] for k, v in result.response.items()} == {
        ("t", 0): "NONE", ("t", 1): "ELECTION_NOT_NEEDED", ("t", 2): "ELIGIBLE_LEADERS_NOT_AVAILABLE"}
    p0 = result.change.topics["t"].partitions[0]
    assert (p0.leader, p0.isr) == (2, (2,))


def test_auto_rebalance_picks_brokers_above_the_imbalance_threshold():
    # broker 1 is preferred for 5 partitions, 3 led elsewhere, 2 of them movable; broker 2 for 1, led
    t = TopicInfo("t", uuid.uuid4(), (P(2, [1, 2], [1, 2], index=0), P(2, [1, 2], [2, 1], index=1),
                                      P(1, [1, 2], [1, 2], index=2), P(1, [1, 2], [1, 2], index=3),
                                      P(2, [2, 1], [2, 1], index=4), P(2, [1, 2], [2], index=5)))
    img = _image({1, 2}, [t])
    assert preferred_rebalance(img, 10) == [("t", 0), ("t", 1)]  # not 5: 1 is out of its ISR
    assert preferred_rebalance(img, 50) == []  # 2 of 5 = 40% is under 50%


async def test_a_wake_up_during_a_round_starts_the_next_round_at_once():
    """The election loop runs a round every POLL_S (0.5 s) or when woken: a broker that revokes a
    dead controller's lease (probe_controller) wakes it to campaign at once. The wake-up comes
    during the round; clearing it after the round lost it, and the new controller came half a
    second later (kill -9 of the controller: its partitions moved 1.26 s after the kill)."""
    import asyncio
    from types import SimpleNamespace

    from shoal.cluster.controller import POLL_S, Controller

    store = SimpleNamespace(backend=SimpleNamespace(key=lambda k: k.encode()), image=_image([1, 2], []))
    c = Controller(store, 2, 3000)
    rounds: list[float] = []
    loop = asyncio.get_running_loop()

    async def campaign() -> None:
        rounds.append(loop.time())

    async def probe_controller() -> None:
        if len(rounds) == 1:
            c._wake.set()  # the controller's port refused twice: its lease was revoked

    c.campaign, c.probe_controller = campaign, probe_controller
    task = loop.create_task(c._run())
    try:
        await asyncio.sleep(POLL_S * 0.6)
    finally:
        task.cancel()
    assert len(rounds) == 2  # the woken round, and then none until the next poll
    assert rounds[1] - rounds[0] < POLL_S / 2
