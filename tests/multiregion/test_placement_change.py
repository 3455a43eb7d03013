"""Changing a topic's ``replica.placement``: the minimal-move targets
(``constraints.reassign_with_constraints``) and the metadata rules that reassign a placed
partition (observers included) and complete it (``topics.change_placement``,
``start_reassignment`` with observers, ``complete_reassignment``)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from types import MappingProxyType

import pytest

from shoal.metadata.change import Change
from shoal.metadata import BrokerInfo, MetadataError, MetadataImage, PartitionInfo
from shoal.metadata.rules import topics
from shoal.placement.constraints import PlacementSpecError, parse_placement, reassign_with_constraints

BROKERS = [(1, "dc1"), (2, "dc1"), (3, "dc2"), (4, "dc2"), (5, "dc3")]


def spec(sync, obs=(), version=1):
    doc = {"version": version, "replicas": [{"count": n, "constraints": {"rack": r}} for r, n in sync]}
    if obs:
        doc["observers"] = [{"count": n, "constraints": {"rack": r}} for r, n in obs]
    return parse_placement(json.dumps(doc))


def test_targets_keep_what_is_already_in_place():
    dc2_heavy = spec([("dc2", 2), ("dc1", 1)])
    # dc1-heavy (1, 2 | 3) -> dc2-heavy: 3 stays and leads, 4 joins, one dc1 replica stays
    assert reassign_with_constraints(dc2_heavy, BROKERS, [(1, 2, 3)]) == [((3, 4, 1), ())]
    assert reassign_with_constraints(dc2_heavy, BROKERS, [(2, 1, 4)]) == [((4, 3, 2), ())]
    # nothing to move: the same replicas, in the spec's order
    assert reassign_with_constraints(dc2_heavy, BROKERS, [(3, 4, 1)]) == [((3, 4, 1), ())]
    # new brokers come from a position that advances with the partition
    one_dc3 = spec([("dc1", 1), ("dc3", 1)])
    assert reassign_with_constraints(one_dc3, BROKERS, [(3, 4), (3, 4)]) == [((1, 5), ()), ((2, 5), ())]


def test_targets_with_observers():
    s = spec([("dc2", 2)], [("dc1", 1)], version=2)
    # dc1 sync + dc2 observer -> dc2 sync + dc1 observer: the old observer becomes a sync replica
    assert reassign_with_constraints(s, BROKERS, [(1, 2, 3)]) == [((3, 4, 1), (1,))]


def test_targets_the_brokers_cannot_hold():
    with pytest.raises(PlacementSpecError, match="rack 'dc3' has 1 broker"):
        reassign_with_constraints(spec([("dc3", 2)]), BROKERS, [(1, 2)])


def image_with(p: PartitionInfo, configs=None) -> MetadataImage:
    img = MetadataImage("c", 1, MappingProxyType({b: BrokerInfo(b, "h", 9000 + b, rack=r) for b, r in BROKERS}),
                        MappingProxyType({}), MappingProxyType({}), MappingProxyType({}))
    r = topics.create_topic(img, "t", [p.replicas], dict(configs or {}), new_uuid=lambda: uuid.UUID(int=7),
                            observers=(p.observers,))
    return r.change.apply(img)


def test_a_placed_partition_moves_observers_included():
    img = image_with(PartitionInfo(0, (1, 2, 3), (1, 2), 1, observers=(3,)))
    r = topics.change_placement(img, "t", {"replica.placement": "x"}, [((3, 4, 1), (1,))])
    p = r.response.partitions[0]
    assert r.response.configs["replica.placement"] == "x"
    # target 3, 4, 1 first, then 2 leaving; 3 (an observer until now) may join the ISR as a sync
    # replica; 1 (a sync replica now, an observer in the target) stays in the ISR for the time being
    assert (p.replicas, p.adding, p.removing, p.observers, p.isr, p.leader) == \
        ((3, 4, 1, 2), (4,), (2,), (1,), (1, 2), 1)
    assert topics.complete_reassignment(p) is None  # 3 and 4 not in the ISR yet
    caught_up = PartitionInfo(0, p.replicas, (1, 2, 3, 4), 1, leader_epoch=0, partition_epoch=p.partition_epoch,
                              adding=p.adding, removing=p.removing, observers=p.observers)
    done = topics.complete_reassignment(caught_up)
    assert (done.replicas, done.observers, done.isr, done.leader, done.leader_epoch) == \
        ((3, 4, 1), (1,), (3, 4), 3, 1)  # the observer leaves the ISR; leadership moves to a sync replica


def test_an_observer_only_target_for_the_isr_is_refused():
    img = image_with(PartitionInfo(0, (1, 2), (1, 2), 1))
    with pytest.raises(MetadataError, match="no in-sync replica would stay a sync replica"):
        topics.change_placement(img, "t", {}, [((1, 2, 3), (1, 2))])


def test_a_manual_reassignment_of_a_placed_partition_is_still_refused():
    img = image_with(PartitionInfo(0, (1, 2, 3), (1, 2), 1, observers=(3,)))
    with pytest.raises(MetadataError, match="change the topic's replica.placement"):
        topics.start_reassignment(img, "t", 0, (3, 4, 1))


def test_cancel_keeps_the_observers_that_stay():
    img = image_with(PartitionInfo(0, (1, 2, 3), (1, 2), 1, observers=(3,)))
    p = topics.change_placement(img, "t", {}, [((1, 2, 4), (4,))]).response.partitions[0]
    assert (p.replicas, p.observers, p.removing) == ((1, 2, 4, 3), (4, 3), (3,))
    back = topics.cancel_reassignment(with_partition(img, p), "t", 0).response
    assert (back.replicas, back.observers, back.isr) == ((1, 2, 3), (3,), (1, 2))


def with_partition(img, p):
    return Change(topics={"t": dataclasses.replace(img.topics["t"], partitions=(p,))}).apply(img)


def test_a_v1_topic_moves_dc1_heavy_to_dc2_heavy():
    img = image_with(PartitionInfo(0, (1, 2, 3), (1, 2, 3), 1))
    targets = reassign_with_constraints(spec([("dc2", 2), ("dc1", 1)]), BROKERS, [(1, 2, 3)])
    p = topics.change_placement(img, "t", {}, targets).response.partitions[0]
    assert (p.replicas, p.adding, p.removing, p.observers) == ((3, 4, 1, 2), (4,), (2,), ())
    done = topics.complete_reassignment(PartitionInfo(0, p.replicas, (1, 2, 3, 4), 1, partition_epoch=2,
                                                      adding=p.adding, removing=p.removing))
    assert (done.replicas, done.isr, done.leader, done.observers) == ((3, 4, 1), (1, 3, 4), 1, ())


def test_the_admin_decision_refuses_tenants_and_placements_the_brokers_cannot_hold():
    from shoal.handlers.configs import _placement_change
    from shoal.handlers.topics import AdminError

    class Scope:
        def __init__(self, physical_view: bool) -> None:
            self.physical_view = physical_view

    img = image_with(PartitionInfo(0, (1, 2, 3), (1, 2, 3), 1))
    topic = img.topics["t"]
    dc2_heavy = spec([("dc2", 2), ("dc1", 1)]).to_json()
    with pytest.raises(AdminError) as e:
        _placement_change(Scope(False), img, topic, dc2_heavy, frozenset())
    assert e.value.code == "POLICY_VIOLATION" and "operator actions" in str(e.value.message)
    assert _placement_change(Scope(True), img, topic, dc2_heavy, frozenset()) == [((3, 4, 1), ())]
    with pytest.raises(AdminError) as e:
        _placement_change(Scope(True), img, topic, spec([("dc3", 2)]).to_json(), frozenset())
    assert e.value.code == "INVALID_REPLICATION_FACTOR" and "rack 'dc3' has 1 broker" in e.value.message
    with pytest.raises(AdminError) as e:
        _placement_change(Scope(True), img, topic, '{"version": 7}', frozenset())
    assert e.value.code == "INVALID_CONFIG"


def test_a_change_of_roles_only_hands_over_and_takes_the_new_observer_out_of_the_isr():
    # dc1 + dc2 sync, a dc2 observer, led by 1 -> two dc2 sync replicas and a dc1 observer: the same
    # replicas, nothing to copy, so nothing would ever complete: the change itself elects a sync
    # replica (a new leader epoch) and the leader it demotes leaves the ISR
    img = image_with(PartitionInfo(0, (1, 3, 4), (1, 3), 1, observers=(4,)))
    targets = reassign_with_constraints(spec([("dc2", 2)], [("dc1", 1)], version=2), BROKERS, [(1, 3, 4)])
    assert targets == [((3, 4, 1), (1,))]
    p = topics.change_placement(img, "t", {}, targets).response.partitions[0]
    assert (p.replicas, p.observers, p.isr, p.leader, p.leader_epoch, p.reassigning) == \
        ((3, 4, 1), (1,), (3,), 3, 1, False)  # 4 joins the ISR as a sync replica once caught up
    # a swap that keeps the leader a sync replica keeps it leading, in the same epoch
    img = image_with(PartitionInfo(0, (1, 2, 3), (1, 2), 1, observers=(3,)))
    p = topics.change_placement(img, "t", {}, [((1, 3, 2), (2,))]).response.partitions[0]
    assert (p.replicas, p.observers, p.isr, p.leader, p.leader_epoch) == ((1, 3, 2), (2,), (1,), 1, 0)


def test_a_new_target_of_the_current_replicas_ends_a_running_reassignment():
    # (1, 2) -> (1, 3) runs; a target naming all of (1, 3, 2) moves nothing: adding and removing clear
    img = image_with(PartitionInfo(0, (1, 2), (1, 2), 1))
    p = topics.start_reassignment(img, "t", 0, (1, 3)).response
    assert (p.replicas, p.adding, p.removing) == ((1, 3, 2), (3,), (2,))
    q = topics.start_reassignment(with_partition(img, p), "t", 0, (1, 3, 2)).response
    assert (q.replicas, q.adding, q.removing, q.isr, q.leader, q.reassigning) == ((1, 3, 2), (), (), (1, 2), 1, False)
