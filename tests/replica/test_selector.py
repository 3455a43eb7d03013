"""KIP-392's replica selection (``shoal.replica.selector``), exactly."""

from __future__ import annotations

import pytest

from shoal.config import LEADER_SELECTOR, RACK_AWARE_SELECTOR, selector_kind
from shoal.replica.selector import ReplicaView, select_read_replica

LEADER_DC1 = ReplicaView(1, "dc1", 100)


def test_kinds_accept_kafkas_class_names():
    assert selector_kind(None) == selector_kind(RACK_AWARE_SELECTOR) == selector_kind("rack-aware") == "rack-aware"
    assert selector_kind(LEADER_SELECTOR) == selector_kind("leader") == "leader"
    with pytest.raises(ValueError, match="is not supported"):
        selector_kind("com.example.MySelector")


def test_a_replica_in_the_clients_rack_that_has_the_offset():
    others = [ReplicaView(2, "dc2", 100), ReplicaView(3, "dc3", 100)]
    assert select_read_replica("rack-aware", "dc2", LEADER_DC1, others, 50) == 2
    assert select_read_replica("rack-aware", "dc3", LEADER_DC1, others, 100) == 3  # has everything below 100
    assert select_read_replica("rack-aware", "dc1", LEADER_DC1, others, 50) == 1  # the leader is local
    assert select_read_replica("rack-aware", "dc9", LEADER_DC1, others, 50) == 1  # none local
    assert select_read_replica("rack-aware", "", LEADER_DC1, others, 50) == 1  # no client.rack
    assert select_read_replica("leader", "dc2", LEADER_DC1, others, 50) == 1  # LeaderSelector


def test_behind_replicas_are_not_chosen_and_the_furthest_ahead_wins():
    others = [ReplicaView(2, "dc2", 40), ReplicaView(4, "dc2", 90, 5), ReplicaView(5, "dc2", 90, 7),
              ReplicaView(6, "dc2", -1)]
    assert select_read_replica("rack-aware", "dc2", LEADER_DC1, others, 50) == 5  # 90 >= 50; latest caught up
    assert select_read_replica("rack-aware", "dc2", LEADER_DC1, others[:1] + others[3:], 50) == 1
