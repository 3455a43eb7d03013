"""The stretch advisor (``shoal.placement.stretch``): the stretch-cluster document's formula and examples,
the issue's two datacenter-loss drills as the advisor predicts them, and brute-force properties."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.placement.stretch import Layout, advise, dc_loss, guaranteed_dcs, min_isr_for

THREE_DCS = {"DC1": 2, "DC2": 2, "DC3": 2}  # the document: 3 DCs, RF 6


def test_the_documents_formula():
    # replicas_per_dc * (min_dcs - 1) + 1: 2 * (2 - 1) + 1 = 3 and 2 * (3 - 1) + 1 = 5
    assert min_isr_for(THREE_DCS, 2) == 3
    assert min_isr_for(THREE_DCS, 3) == 5
    assert guaranteed_dcs(THREE_DCS, 3) == 2 and guaranteed_dcs(THREE_DCS, 5) == 3
    assert guaranteed_dcs(THREE_DCS, 2) == 1  # two replicas of one DC satisfy min ISR 2
    assert min_isr_for(THREE_DCS, 4) is None


def test_three_dcs_min_isr_3_survives_any_dc():
    a = advise(Layout(THREE_DCS), 3)
    assert a.guaranteed == 2
    assert all(o.leader and o.produce and not o.acked_only_there for o in a.losses)
    assert a.warnings == ()


def test_three_dcs_min_isr_5_stops_writes_on_any_dc_loss():
    # "any DC going down reduces the ISR size to four, which will cause the cluster to fail
    # durable produce requests"
    a = advise(Layout(THREE_DCS), 5)
    assert a.guaranteed == 3
    assert [(o.dc, o.leader, o.produce) for o in a.losses] == [("DC1", True, False), ("DC2", True, False),
                                                              ("DC3", True, False)]
    assert any("losing DC1 stops acks=all produce" in w for w in a.warnings)


def test_drill_a_two_dcs_rf4_min_isr_3():
    # 2 DCs x 3 brokers, RF 4 rack-aware (2 + 2), min ISR 3 (the formula for 2 DCs): losing dc1
    # stops acks=all (NOT_ENOUGH_REPLICAS), consumers keep reading, nothing acknowledged is lost.
    a = advise(Layout({"dc1": 2, "dc2": 2}), 3)
    assert a.guaranteed == 2
    o = a.losses[0]
    assert (o.dc, o.leader, o.produce, o.produce_promoted, o.acked_only_there) == ("dc1", True, False, False, False)


def test_drill_b_observer_promotion():
    # placement v2: 2 replicas + 1 observer per DC, min ISR 3, under-min-isr: losing dc1 promotes
    # the dc2 observer; acks=all continues, but what is acknowledged meanwhile is in dc2 only.
    layout = Layout({"dc1": 2, "dc2": 2}, {"dc1": 1, "dc2": 1})
    a = advise(layout, 3, promotion="under-min-isr")
    o = a.losses[0]
    assert (o.produce, o.produce_promoted, o.promoted, o.dcs_during, o.acked_only_there) == (False, True, 1, 1, False)
    assert any("while dc1 is lost, promoted observers keep acks=all working" in w for w in a.warnings)
    assert not advise(layout, 3).losses[0].produce_promoted  # version 1: no promotion


def test_async_observer_example_and_leader_is_observer():
    # the multi-region document: 2 replicas in region-a, 1 observer in region-b
    layout = Layout({"region-a": 2}, {"region-b": 1})
    a = advise(layout, 2)
    lose_a = a.losses[0]
    assert (lose_a.dc, lose_a.leader, lose_a.produce, lose_a.acked_only_there) == ("region-a", False, False, True)
    assert any("an acknowledged record may be in one datacenter only: only one datacenter holds sync replicas" in w
               for w in a.warnings)
    assert a.losses[1].produce  # losing region-b (the observer) changes nothing
    o = dc_loss(layout, "region-a", 1, promotion="leader-is-observer")
    assert (o.leader, o.produce_promoted, o.promoted) == (True, True, 1)


def test_min_insync_racks():
    layout = Layout({"dc1": 2, "dc2": 1})
    assert guaranteed_dcs(layout.sync, 2) == 1
    a = advise(layout, 2, min_racks=2)
    assert a.guaranteed == 2
    assert not any(o.produce for o in a.losses)  # either loss leaves one rack
    assert advise(layout, 2, min_racks=3).guaranteed == 0


def test_impossible_min_isr_is_a_warning():
    a = advise(Layout({"dc1": 1, "dc2": 1}), 3)
    assert a.guaranteed == 0 and "acks=all can never complete" in a.warnings[0]


layouts = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(1, 4), min_size=1)


@settings(max_examples=300, deadline=None)
@given(layouts, st.integers(1, 16))
def test_guaranteed_dcs_is_the_worst_case_subset(sync, min_isr):
    replicas = [dc for dc, c in sync.items() for _ in range(c)]
    if min_isr > len(replicas):
        assert guaranteed_dcs(sync, min_isr) == 0
        return
    worst = min(len(set(s)) for s in combinations(replicas, min_isr))
    assert guaranteed_dcs(sync, min_isr) == worst


@settings(max_examples=300, deadline=None)
@given(layouts, st.integers(1, 4))
def test_min_isr_for_is_the_smallest_that_guarantees(sync, dcs):
    m = min_isr_for(sync, dcs)
    total = sum(sync.values())
    smallest = next((k for k in range(1, total + 1) if guaranteed_dcs(sync, k) >= dcs), None)
    assert m == smallest
