"""Replica placement: exact examples (Kafka's AdminUtils tests, the stretch-cluster seed) and
Hypothesis properties."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.placement.assignment import (
    PlacementError,
    assign_replicas,
    rack_alternated,
    start_index_for_new_partitions,
)


def test_stretch_cluster_seed_example():
    # /work/shared/seeds/004: 6 brokers in 2 DCs; RF 4 -> [1,4,2,5], RF 5 -> [1,4,2,5,3].
    brokers = [(1, "DC1"), (2, "DC1"), (3, "DC1"), (4, "DC2"), (5, "DC2"), (6, "DC2")]
    assert assign_replicas(brokers, 1, 4, start_index=0) == [(1, 4, 2, 5)]
    assert assign_replicas(brokers, 1, 5, start_index=0) == [(1, 4, 2, 5, 3)]


def test_rack_alternated_list():
    # Kafka's doc: racks a:{0,1,2}, b:{3,4}, c:{5} -> 0,3,5,1,4,2
    brokers = [(0, "a"), (1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c")]
    assert rack_alternated(brokers) == [0, 3, 5, 1, 4, 2]


def test_rack_unaware_matches_kafka_doc_table():
    # AdminUtils doc comment: 5 brokers, 10 partitions, RF 3, start index 0.
    got = assign_replicas([(b, None) for b in range(5)], 10, 3, start_index=0)
    assert got[0] == (0, 1, 2)
    assert got[1] == (1, 2, 3)
    assert got[4] == (4, 0, 1)
    assert got[5] == (0, 2, 3)  # the shift grows after a full round
    assert got[9] == (4, 1, 2)


def test_kafka_unit_test_rack_unaware():
    # AdminRackAwareTest/ AdminUtilsTest.testReplicaAssignment: brokers 0..4, 10 partitions, RF 3,
    # fixed start index 0.
    expected = {
        0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1),
        5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0), 8: (3, 0, 1), 9: (4, 1, 2),
    }
    got = assign_replicas([(b, None) for b in range(5)], 10, 3, start_index=0)
    assert dict(enumerate(got)) == expected


def test_rack_aware_one_replica_per_rack_and_even_leaders():
    # In the spirit of AdminRackAwareTest.testAssignmentWithRackAware: brokers 0..5 in racks
    # {0:rack1, 1:rack3, 2:rack3, 3:rack2, 4:rack2, 5:rack1}, 6 partitions, RF 3, start 2 shift 0.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    got = assign_replicas(sorted(racks.items()), 6, 3, start_index=2, replica_shift=0)
    for replicas in got:
        assert len({racks[b] for b in replicas}) == 3  # one replica per rack
    leaders = Counter(r[0] for r in got)
    assert all(v == 1 for v in leaders.values())


def test_new_partitions_continue_the_round_robin():
    brokers = [(b, None) for b in range(3)]
    all_at_once = assign_replicas(brokers, 6, 2, start_index=0)
    first = assign_replicas(brokers, 3, 2, start_index=0)
    start = start_index_for_new_partitions([0, 1, 2], first[0])
    rest = assign_replicas(brokers, 3, 2, start_index=start, start_partition_id=3)
    assert first + rest == all_at_once


def test_errors():
    with pytest.raises(PlacementError) as e:
        assign_replicas([(1, None)], 0, 1)
    assert e.value.code == "INVALID_PARTITIONS"
    with pytest.raises(PlacementError) as e:
        assign_replicas([(1, None)], 1, 2)
    assert e.value.code == "INVALID_REPLICATION_FACTOR"
    with pytest.raises(PlacementError) as e:
        assign_replicas([(1, None)], 1, 0)
    assert e.value.code == "INVALID_REPLICATION_FACTOR"
    with pytest.raises(PlacementError) as e:
        assign_replicas([(1, "a"), (2, None)], 1, 1)
    assert e.value.code == "INVALID_REQUEST"


@st.composite
def clusters(draw):
    n = draw(st.integers(1, 9))
    racked = draw(st.booleans())
    ids = draw(st.lists(st.integers(0, 1000), min_size=n, max_size=n, unique=True))
    if racked:
        racks = draw(st.lists(st.sampled_from("abcd"), min_size=n, max_size=n))
        brokers = sorted(zip(ids, racks))
    else:
        brokers = sorted((i, None) for i in ids)
    rf = draw(st.integers(1, n))
    parts = draw(st.integers(1, 40))
    start = draw(st.integers(0, n - 1))
    shift = draw(st.integers(0, n - 1))
    return brokers, parts, rf, start, shift


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_properties(c):
    brokers, parts, rf, start, shift = c
    got = assign_replicas(brokers, parts, rf, start_index=start, replica_shift=shift)
    ids = {b for b, _ in brokers}
    assert len(got) == parts
    for replicas in got:
        assert len(replicas) == rf
        assert len(set(replicas)) == rf  # never two replicas on one broker
        assert set(replicas) <= ids
    # leaders are spread evenly: counts differ by at most one
    leaders = Counter(r[0] for r in got)
    counts = [leaders.get(b, 0) for b in ids]
    assert max(counts) - min(counts) <= 1
    racks = {b: r for b, r in brokers}
    if brokers[0][1] is not None:
        n_racks = len(set(racks.values()))
        for replicas in got:
            # as many racks covered as possible
            assert len({racks[b] for b in replicas}) == min(rf, n_racks)
