"""Catching up at a bounded rate (issue 25, ``replica.fetch.max.catchup.partitions``): which
partitions out of the ISR a follower fetches, in what order and how many at once. The policy is
``catch_up_admissions``; the cluster side (a restarted broker under a small cap still rejoins
every ISR) is in tests/cluster/test_replication.py."""

from __future__ import annotations

from shoal.replica.fetcher import catch_up_admissions


def test_the_least_behind_go_first_ties_in_topic_and_partition_order() -> None:
    waiting = {("b", 0): 5, ("a", 1): 0, ("a", 0): 0, ("c", 2): 100, ("b", 1): 5, ("a", 2): 7}
    assert catch_up_admissions(waiting, 0, 4) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert catch_up_admissions(waiting, 0, 6) == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("a", 2), ("c", 2)]


def test_only_the_places_the_cap_leaves_free_beside_those_in_flight() -> None:
    waiting = {("t", i): 10 - i for i in range(10)}
    assert catch_up_admissions(waiting, 3, 5) == [("t", 9), ("t", 8)]
    assert catch_up_admissions(waiting, 5, 5) == []
    assert catch_up_admissions(waiting, 7, 5) == []  # over the cap (lowered meanwhile): none until below it
    assert catch_up_admissions(waiting, 4, 100) == [("t", i) for i in range(9, -1, -1)]


def test_a_cap_of_zero_lets_every_one_fetch_at_once() -> None:
    waiting = {("t", i): i % 3 for i in range(7)}
    assert catch_up_admissions(waiting, 1000, 0) == [("t", 0), ("t", 3), ("t", 6), ("t", 1), ("t", 4),
                                                     ("t", 2), ("t", 5)]


def test_nothing_waiting_admits_nothing() -> None:
    assert catch_up_admissions({}, 0, 10) == []
    assert catch_up_admissions({}, 0, 0) == []


def test_waves_under_a_cap_admit_every_partition_once() -> None:
    """Admitting, then letting the admitted ones join the ISR, again and again: every partition
    is admitted exactly once, never more than the cap at a time, least behind first overall."""
    behind = {("t", i): (i * 7919) % 13 for i in range(50)}
    waiting = dict(behind)
    in_flight: list[tuple[str, int]] = []
    order: list[tuple[str, int]] = []
    while waiting or in_flight:
        for key in catch_up_admissions(waiting, len(in_flight), 8):
            del waiting[key]
            in_flight.append(key)
            order.append(key)
        assert len(in_flight) <= 8
        in_flight = in_flight[3:]  # three join the ISR per round
    assert sorted(order) == sorted(behind)
    assert order == sorted(behind, key=lambda k: (behind[k], k))
