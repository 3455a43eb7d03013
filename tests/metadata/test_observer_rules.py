"""Observers in the metadata rules (``replica.placement``): created out of the ISR, refused into
it, never elected, stored and read back by both backends, and reassignment of a placed partition
refused (not supported yet)."""

from __future__ import annotations

import json
import uuid
from types import MappingProxyType

import pytest

from shoal.cluster.controller import elect
from shoal.metadata import BrokerInfo, MetadataError, MetadataImage, PartitionInfo, codec
from shoal.metadata.rules import topics


def image(brokers=(1, 2, 3, 4)) -> MetadataImage:
    e = MappingProxyType({})
    return MetadataImage("c", 1, MappingProxyType({b: BrokerInfo(b, "h", 9000 + b) for b in brokers}), e, e, e)


def created(observers=((3,),), replicas=((1, 2, 3),)) -> MetadataImage:
    img = image()
    r = topics.create_topic(img, "t", list(replicas), {}, new_uuid=lambda: uuid.UUID(int=5), observers=observers)
    return r.change.apply(img)


def test_created_with_observers_out_of_the_isr():
    p = created().topics["t"].partitions[0]
    assert (p.replicas, p.isr, p.leader, p.observers, p.sync_replicas) == ((1, 2, 3), (1, 2), 1, (3,), (1, 2))


@pytest.mark.parametrize("observers, replicas, message", [
    (((4,),), ((1, 2, 3),), "are not among replicas"),
    (((1, 2),), ((1, 2),), "at least one replica that is not an observer"),
])
def test_bad_observers_are_refused(observers, replicas, message):
    with pytest.raises(MetadataError, match=message):
        created(observers, replicas)


def test_an_observer_cannot_enter_the_isr():
    img = created()
    with pytest.raises(MetadataError, match="holds an observer") as e:
        topics.alter_isr(img, "t", 0, leader=1, leader_epoch=0, partition_epoch=0, isr=(1, 2, 3))
    assert e.value.code == "INVALID_REQUEST"
    r = topics.alter_isr(img, "t", 0, leader=1, leader_epoch=0, partition_epoch=0, isr=(1,))
    assert r.response.isr == (1,) and r.response.observers == (3,)


def test_an_observer_is_never_elected_even_unclean():
    p = created().topics["t"].partitions[0]
    assert elect(p, alive={3}, unclean=True) == (-1, (1, 2))  # offline rather than an observer leading
    assert elect(p, alive={2, 3}, unclean=False) == (2, (2,))
    out_of_sync = PartitionInfo(0, (1, 2, 3), (1,), 1, observers=(3,))
    assert elect(out_of_sync, alive={2, 3}, unclean=True) == (2, (2,))  # the sync replica, not the observer


def test_codec_round_trip_and_old_records():
    p = created().topics["t"].partitions[0]
    data = json.loads(json.dumps(codec.partition_to_json(p)))
    assert data["observers"] == [3] and codec.partition_from_json(data) == p
    plain = PartitionInfo(0, (1, 2), (1, 2), 1)
    assert "observers" not in codec.partition_to_json(plain)  # what brokers wrote before observers


def test_reassigning_a_placed_partition_is_refused():
    with pytest.raises(MetadataError, match="has observers") as e:
        topics.start_reassignment(created(), "t", 0, (1, 2, 4))
    assert e.value.code == "INVALID_REPLICA_ASSIGNMENT"


def test_added_partitions_keep_their_observers():
    r = topics.add_partitions(created(), "t", [(2, 1, 4)], [(4,)])
    p = r.response.partitions[1]
    assert (p.partition, p.isr, p.observers, p.leader) == (1, (2, 1), (4,), 2)


V2 = json.dumps({"version": 2, "replicas": [{"count": 2, "constraints": {"rack": "dc1"}}],
                 "observers": [{"count": 1, "constraints": {"rack": "dc2"}}]})


def placed(configs) -> MetadataImage:
    img = image()
    r = topics.create_topic(img, "t", [(1, 2, 3)], configs, new_uuid=lambda: uuid.UUID(int=5), observers=((3,),))
    return r.change.apply(img)


def test_a_promoted_observer_enters_the_isr_only_when_the_policy_needs_it():
    img = placed({"replica.placement": V2, "min.insync.replicas": "2"})
    shrunk = topics.alter_isr(img, "t", 0, leader=1, leader_epoch=0, partition_epoch=0, isr=(1,)).change.apply(img)
    # under-min-isr (version 2's default): the ISR (1) is below 2, one observer may stand in
    r = topics.alter_isr(shrunk, "t", 0, leader=1, leader_epoch=0, partition_epoch=1, isr=(1, 3))
    assert r.response.isr == (1, 3) and r.response.observers == (3,)
    # with the ISR at min.insync.replicas, no observer joins
    with pytest.raises(MetadataError, match="does not promote"):
        topics.alter_isr(img, "t", 0, leader=1, leader_epoch=0, partition_epoch=0, isr=(1, 2, 3))
    # the leader's own min.insync.replicas (a broker default) counts: 3 needs the observer
    r = topics.alter_isr(img, "t", 0, leader=1, leader_epoch=0, partition_epoch=0, isr=(1, 2, 3), min_isr=3)
    assert r.response.isr == (1, 2, 3)
    # promoted, the observer stays while the sync replica rejoins; demotion is a plain shrink
    promoted = r.change.apply(img)
    r = topics.alter_isr(promoted, "t", 0, leader=1, leader_epoch=0, partition_epoch=1, isr=(1, 2))
    assert r.response.isr == (1, 2)


def test_version_1_and_leader_is_observer_promote_nothing():
    for configs in ({"replica.placement": V2.replace('"version": 2', '"version": 1')},
                    {"replica.placement": V2[:-1] + ', "observerPromotionPolicy": "leader-is-observer"}'}):
        img = placed({**configs, "min.insync.replicas": "3"})
        with pytest.raises(MetadataError, match="holds an observer"):
            topics.alter_isr(img, "t", 0, leader=1, leader_epoch=0, partition_epoch=0, isr=(1, 2, 3))


def test_a_promoted_observer_may_lead_when_no_sync_isr_member_lives():
    p = PartitionInfo(0, (1, 2, 3), (1, 2, 3), 1, observers=(3,))
    assert elect(p, alive={2, 3}) == (2, (2, 3))  # a sync replica first
    assert elect(p, alive={3}) == (3, (3,))  # the promoted observer has every acknowledged record


def test_leader_is_observer_lets_an_unclean_election_pick_an_observer():
    from shoal.cluster.controller import leadership_change

    p = PartitionInfo(0, (1, 2, 3), (1, 2), 1, observers=(3,))
    assert elect(p, alive={3}, unclean=True, observer_may_lead=True) == (3, (3,))
    assert elect(p, alive={3}, unclean=False, observer_may_lead=True) == (-1, (1, 2))  # clean: never
    assert elect(p, alive={2, 3}, unclean=True, observer_may_lead=True) == (2, (2,))  # a sync replica first
    policy = V2[:-1] + ', "observerPromotionPolicy": "leader-is-observer"}'
    for placement, leader in ((policy, 3), (V2, -1)):
        img = placed({"replica.placement": placement})
        r = leadership_change(img, {3, 4}, unclean=lambda _t: True)
        assert r.change.apply(img).topics["t"].partitions[0].leader == leader
