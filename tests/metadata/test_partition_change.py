"""The one place partition epochs are bumped (shoal.metadata.partition_change): KRaft's rules,
exactly, and a property over arbitrary changes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shoal.metadata import PartitionInfo
from shoal.metadata.partition_change import PartitionChange

P = PartitionInfo(0, (1, 2, 3), (1, 2, 3), 1, leader_epoch=4, partition_epoch=9)


def test_a_new_leader_bumps_both_epochs():
    p = PartitionChange(P).leader(2).isr((2, 3)).build()
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, (2, 3), 5, 10)


def test_an_isr_change_bumps_only_the_partition_epoch():
    p = PartitionChange(P).isr((1, 2)).build()
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (1, (1, 2), 4, 10)


def test_setting_what_already_is_changes_nothing():
    assert PartitionChange(P).leader(1).isr((1, 2, 3)).replicas((1, 2, 3)).build() is P
    assert PartitionChange(P).build() is P
    forced = PartitionChange(P).isr((1, 2, 3)).build(always=True)  # an explicit write
    assert (forced.isr, forced.leader_epoch, forced.partition_epoch) == (P.isr, 4, 10)


def test_a_reassignment_and_roles_are_fields_like_the_others():
    p = PartitionChange(P).replicas((4, 1, 2, 3)).reassignment((4,), (3,)).build()
    assert (p.replicas, p.adding, p.removing, p.leader_epoch, p.partition_epoch) == ((4, 1, 2, 3), (4,), (3,), 4, 10)
    done = PartitionChange(p).replicas((4, 1, 2)).reassignment((), ()).observers(()).leader(4).build()
    assert (done.reassigning, done.leader, done.leader_epoch, done.partition_epoch) == (False, 4, 5, 11)


nodes = st.lists(st.integers(0, 5), max_size=4, unique=True).map(tuple)


@given(leader=st.one_of(st.none(), st.integers(-1, 5)), isr=st.one_of(st.none(), nodes),
       replicas=st.one_of(st.none(), nodes))
def test_epochs_follow_what_changed(leader, isr, replicas):
    c = PartitionChange(P)
    if leader is not None:
        c.leader(leader)
    if isr is not None:
        c.isr(isr)
    if replicas is not None:
        c.replicas(replicas)
    p = c.build()
    moved = leader is not None and leader != P.leader
    changed = moved or (isr is not None and isr != P.isr) or (replicas is not None and replicas != P.replicas)
    assert p.leader_epoch == P.leader_epoch + moved
    assert p.partition_epoch == P.partition_epoch + changed
    assert (p is P) == (not changed)
