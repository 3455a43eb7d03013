"""The one topic-creation planner (shoal.cluster.planner): exact plans with an injected random
source, Kafka's messages, and Hypothesis properties."""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.cluster import planner
from shoal.cluster.planner import Defaults, PlacementError, TopicRequest, plan_new_partitions, plan_topic
from shoal.metadata import BrokerInfo
from shoal.placement.assignment import assign_replicas

STRETCH = [(1, "dc1"), (2, "dc1"), (3, "dc1"), (4, "dc2"), (5, "dc2"), (6, "dc2")]
ONE = [(1, None)]
DEFAULTS = Defaults(num_partitions=1, replication_factor=1)


class Scripted(random.Random):
    """A random source whose ``randrange`` answers are given in advance."""

    def __init__(self, *answers: int) -> None:
        super().__init__(0)
        self.answers = list(answers)
        self.calls: list[int] = []

    def randrange(self, n, *rest):  # type: ignore[override]
        self.calls.append(n)
        return self.answers.pop(0)


def error(fn, *args) -> PlacementError:
    with pytest.raises(PlacementError) as e:
        fn(*args)
    return e.value


# -- exact plans ---------------------------------------------------------------------------------


def test_stretch_cluster_document_examples():
    # /work/shared/seeds/004: two DCs of three brokers; RF 4 -> [1,4,2,5], RF 5 -> [1,4,2,5,3]
    a = plan_topic(STRETCH, TopicRequest("Topic_A", 1, 4), DEFAULTS, Scripted(0, 0))
    b = plan_topic(STRETCH, TopicRequest("Topic_B", 1, 5), DEFAULTS, Scripted(0, 0))
    assert a.assignments == ((1, 4, 2, 5),)
    assert b.assignments == ((1, 4, 2, 5, 3),)
    assert (a.num_partitions, a.replication_factor, a.first_partition) == (1, 4, 0)


def test_start_index_and_shift_are_drawn_at_random_over_the_brokers():
    # AdminUtils: startIndex = rand.nextInt(n), then nextReplicaShift = rand.nextInt(n)
    brokers = [(b, None) for b in range(5)]
    rng = Scripted(2, 1)
    plan = plan_topic(brokers, TopicRequest("t", 10, 3), DEFAULTS, rng)
    assert rng.calls == [5, 5]
    assert list(plan.assignments) == assign_replicas(brokers, 10, 3, start_index=2, replica_shift=1)
    assert plan.assignments[0] == (2, 4, 0)  # leader at position 2; 2nd replica shifted 1 + 1


def test_kafka_doc_table_with_start_zero():
    got = plan_topic([(b, None) for b in range(5)], TopicRequest("t", 10, 3), DEFAULTS, Scripted(0, 0))
    assert got.assignments == (
        (0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1),
        (0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2),
    )


def test_defaults_fill_minus_one():
    plan = plan_topic(ONE, TopicRequest("t"), Defaults(3, 1), Scripted(0, 0))
    assert plan.assignments == ((1,), (1,), (1,))
    offsets = Defaults.for_offsets_topic(50, 1)
    plan = plan_topic(ONE, TopicRequest("__consumer_offsets"), offsets, Scripted(0, 0))
    assert plan.num_partitions == 50 and set(plan.assignments) == {(1,)}
    cfg = SimpleNamespace(get={"num.partitions": "4", "default.replication.factor": "2"}.get)
    assert Defaults.for_topics(cfg) == Defaults(4, 2)


def test_single_node_rf1_works_rf2_is_refused_with_kafkas_message():
    assert plan_topic(ONE, TopicRequest("t", 2, 1), DEFAULTS, random.Random(1)).assignments == ((1,), (1,))
    e = error(plan_topic, ONE, TopicRequest("t", 2, 2), DEFAULTS, random.Random(1))
    assert e.code == "INVALID_REPLICATION_FACTOR"
    assert e.message == (
        "Unable to replicate the partition 2 time(s): The target replication factor of 2 "
        "cannot be reached because only 1 broker(s) are registered."
    )
    # a default above the broker count is refused too (never shrunk to fit, as Kafka since KIP-115)
    e = error(plan_topic, ONE, TopicRequest("t"), Defaults(1, 3), random.Random(1))
    assert e.code == "INVALID_REPLICATION_FACTOR" and "replication factor of 3" in e.message


@pytest.mark.parametrize("request_, code, message", [
    (TopicRequest("t", 1, 0), "INVALID_REPLICATION_FACTOR",
     "Replication factor must be larger than 0, or -1 to use the default value."),
    (TopicRequest("t", 1, -2), "INVALID_REPLICATION_FACTOR",
     "Replication factor must be larger than 0, or -1 to use the default value."),
    (TopicRequest("t", 0, 1), "INVALID_PARTITIONS", "Number of partitions was set to an invalid non-positive value."),
    (TopicRequest("t", -5, 1), "INVALID_PARTITIONS", "Number of partitions was set to an invalid non-positive value."),
    (TopicRequest("t", 100_001, 1), "INVALID_PARTITIONS", "A topic may have at most 100000 partitions."),
])
def test_invalid_counts(request_, code, message):
    e = error(plan_topic, ONE, request_, DEFAULTS, random.Random(0))
    assert (e.code, e.message) == (code, message)


def test_no_live_broker():
    e = error(plan_topic, [], TopicRequest("t", 1, 1), DEFAULTS, random.Random(0))
    assert (e.code, e.message) == (
        "INVALID_REPLICATION_FACTOR", "Unable to replicate the partition 1 time(s): All brokers are currently fenced."
    )


def test_some_brokers_without_rack_are_placed_rack_unaware():
    mixed = [(1, "a"), (2, None), (3, "b")]
    plan = plan_topic(mixed, TopicRequest("t", 3, 2), DEFAULTS, Scripted(1, 0))
    assert list(plan.assignments) == assign_replicas([(1, None), (2, None), (3, None)], 3, 2,
                                                     start_index=1, replica_shift=0)


# -- manual assignments (KRaft's validateManualPartitionAssignment) -----------------------------

THREE = [(1, None), (2, None), (3, None)]


def manual(*pairs, partitions=-1, rf=-1) -> TopicRequest:
    return TopicRequest("m", partitions, rf, tuple((i, tuple(r)) for i, r in pairs))


def test_manual_assignment_is_taken_in_partition_order():
    plan = plan_topic(THREE, manual((1, [2, 3]), (0, [3, 1])), DEFAULTS, Scripted())
    assert plan.assignments == ((3, 1), (2, 3))


@pytest.mark.parametrize("request_, code, message", [
    (manual((0, [1]), rf=1), "INVALID_REQUEST",
     "A manual partition assignment was specified, but replication factor was not set to -1."),
    (manual((0, [1]), partitions=1), "INVALID_REQUEST",
     "A manual partition assignment was specified, but numPartitions was not set to -1."),
    (manual((0, [9])), "INVALID_REPLICA_ASSIGNMENT",
     "The manual partition assignment includes broker 9, but no such broker is registered."),
    (manual((0, [2, 1, 2])), "INVALID_REPLICA_ASSIGNMENT",
     "The manual partition assignment includes the broker 2 more than once."),
    (manual((0, [])), "INVALID_REPLICA_ASSIGNMENT", "The manual partition assignment includes an empty replica list."),
    (manual((0, [1]), (1, [1, 2])), "INVALID_REPLICA_ASSIGNMENT",
     "The manual partition assignment includes a partition with 2 replica(s), but this is not consistent with "
     "previous partitions, which have 1 replica(s)."),
    (manual((0, [1]), (2, [2])), "INVALID_REPLICA_ASSIGNMENT",
     "partitions should be a consecutive 0-based integer sequence"),
    (manual((0, [1]), (0, [2])), "INVALID_REPLICA_ASSIGNMENT",
     "Found multiple manual partition assignments for partition 0"),
])
def test_manual_assignment_errors(request_, code, message):
    e = error(plan_topic, THREE, request_, DEFAULTS, Scripted())
    assert (e.code, e.message) == (code, message)


# -- CreatePartitions ----------------------------------------------------------------------------


def test_new_partitions_continue_the_round_robin():
    brokers = [(b, None) for b in range(3)]
    existing = assign_replicas(brokers, 3, 2, start_index=0)
    plan = plan_new_partitions(brokers, "t", existing, 6)
    assert plan.first_partition == 3
    assert existing + list(plan.assignments) == assign_replicas(brokers, 6, 2, start_index=0)


def test_new_partitions_start_after_a_random_first_leader():
    # partition 0 led by broker 2 -> the new ones start at broker 2's position, as AdminZkClient
    brokers = [(b, None) for b in range(4)]
    existing = [(2, 3), (3, 0)]
    plan = plan_new_partitions(brokers, "t", existing, 4)
    assert list(plan.assignments) == assign_replicas(brokers, 2, 2, start_index=2, start_partition_id=2)
    assert [r[0] for r in plan.assignments] == [0, 1]  # the leaders go on round-robin: 2, 3, 0, 1


@pytest.mark.parametrize("count, assignments, code, message", [
    (2, None, "INVALID_PARTITIONS", "Topic already has 2 partition(s)."),
    (1, None, "INVALID_PARTITIONS", "The topic t currently has 2 partition(s); 1 would not be an increase."),
    (100_001, None, "INVALID_PARTITIONS", "A topic may have at most 100000 partitions."),
    (4, [[1, 2]], "INVALID_REPLICA_ASSIGNMENT",
     "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
    (3, [[1]], "INVALID_REPLICA_ASSIGNMENT",
     "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with "
     "previous partitions, which have 2 replica(s)."),
    (3, [[1, 7]], "INVALID_REPLICA_ASSIGNMENT",
     "The manual partition assignment includes broker 7, but no such broker is registered."),
])
def test_new_partitions_errors(count, assignments, code, message):
    e = error(plan_new_partitions, THREE, "t", [(1, 2), (2, 3)], count, assignments)
    assert (e.code, e.message) == (code, message)


def test_new_partitions_manual_and_too_few_brokers():
    plan = plan_new_partitions(THREE, "t", [(1, 2)], 3, [[3, 1], [2, 1]])
    assert plan.assignments == ((3, 1), (2, 1)) and plan.first_partition == 1
    e = error(plan_new_partitions, [(1, None)], "t", [(1, 2)], 2)
    # KRaft's createPartitions lets the placer's exception through unwrapped
    assert (e.code, e.message) == (
        "INVALID_REPLICATION_FACTOR",
        "The target replication factor of 2 cannot be reached because only 1 broker(s) are registered.",
    )


# -- helpers -------------------------------------------------------------------------------------


def test_live_brokers_sorted_by_id_with_racks():
    image = SimpleNamespace(brokers={
        3: BrokerInfo(3, "h", 1, "b"), 1: BrokerInfo(1, "h", 2, "a"), 2: BrokerInfo(2, "h", 3, None),
    })
    assert planner.live_brokers(image) == [(1, "a"), (2, None), (3, "b")]


def test_leaders_of_many_topics_spread_over_brokers():
    # A fixed start would put every single-partition topic's leader on the same broker.
    rng = random.Random(42)
    brokers = [(b, None) for b in (1, 2, 3)]
    leaders = Counter(plan_topic(brokers, TopicRequest(f"t{i}", 1, 2), DEFAULTS, rng).assignments[0][0]
                      for i in range(600))
    assert set(leaders) == {1, 2, 3} and min(leaders.values()) >= 150


# -- properties ----------------------------------------------------------------------------------


@st.composite
def clusters(draw):
    n = draw(st.integers(1, 9))
    ids = draw(st.lists(st.integers(0, 1000), min_size=n, max_size=n, unique=True))
    racked = draw(st.booleans())
    racks = draw(st.lists(st.sampled_from("abcd"), min_size=n, max_size=n)) if racked else [None] * n
    brokers = sorted(zip(ids, racks))
    rf = draw(st.integers(1, n))
    parts = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**32))
    return brokers, parts, rf, seed


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_properties(c):
    brokers, parts, rf, seed = c
    plan = plan_topic(brokers, TopicRequest("t", parts, rf), DEFAULTS, random.Random(seed))
    ids = {b for b, _ in brokers}
    assert plan.num_partitions == parts
    for replicas in plan.assignments:  # RF distinct live brokers
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= ids
    rack = dict(brokers)
    n_racks = len(set(rack.values()))
    if brokers[0][1] is not None and rf >= n_racks:  # every rack holds a replica
        for replicas in plan.assignments:
            assert {rack[b] for b in replicas} == set(rack.values())
    leaders = Counter(r[0] for r in plan.assignments)
    counts = [leaders.get(b, 0) for b in ids]
    assert max(counts) - min(counts) <= 1  # leaders balanced within one
    if parts % len(brokers) == 0:
        assert set(counts) == {parts // len(brokers)}
    # same seed, same plan
    assert plan_topic(brokers, TopicRequest("t", parts, rf), DEFAULTS, random.Random(seed)) == plan


@settings(max_examples=150, deadline=None)
@given(clusters(), st.integers(1, 20))
def test_growing_keeps_replicas_valid_and_leaders_round_robin(c, more):
    brokers, parts, rf, seed = c
    first = plan_topic(brokers, TopicRequest("t", parts, rf), DEFAULTS, random.Random(seed))
    grown = plan_new_partitions(brokers, "t", first.assignments, parts + more)
    ids = {b for b, _ in brokers}
    assert grown.first_partition == parts and grown.num_partitions == more
    for replicas in grown.assignments:
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= ids
