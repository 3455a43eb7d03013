"""The balancer's planner (issue 27, part 4) as pure policy: the issue's scenarios (a hot spot, a
drain, a heal, a lost rack and its return, placement constraints with observers, tenant cells,
a full disk) exactly, and Hypothesis properties: a plan never breaks a hard goal, applying it
lowers the objective (recomputed from scratch), a balanced cluster gives an empty plan, a second
plan after the first finds nothing, and the planner is deterministic."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shoal.cluster.balancer import (
    ACTIVE,
    EMPTY_BROKER,
    EXCLUDED,
    OFFLINE,
    BalancerConfig,
    BrokerInfo,
    Capacity,
    PartitionInfo,
    PartitionLoad,
    objective,
    plan,
)
from shoal.cluster.balancer.goals import placement_violations
from shoal.cluster.balancer.model import ClusterModel, Resource, model_of
from shoal.placement.constraints import parse_placement

MB = 1e6


def applied(parts, p):
    """``parts`` with the plan's replica lists."""
    return [dataclasses.replace(x, replicas=p.assignment[x.tp], observers=p.assignment[x.tp][x.sync_count:])
            if x.tp in p.assignment else x for x in parts]


def loads(brokers, parts, resource):
    m = ClusterModel(brokers, parts)
    return {b: m.load[b][resource] for b in m.active()}


def hot_spot():
    """4 brokers; broker 1 leads the partitions that take 60% of the bytes in."""
    brokers = [BrokerInfo(b) for b in (1, 2, 3, 4)]
    parts = []
    for i in range(24):
        lead = 1 if i < 8 else 2 + i % 3
        others = [b for b in (1, 2, 3, 4) if b != lead]
        rate = 6 * MB if i < 8 else 2 * MB  # 48 of 80 MB/s on broker 1
        parts.append(PartitionInfo("t", i, (lead, others[i % 3], others[(i + 1) % 3]),
                                   load=PartitionLoad(rate, rate, rate * 600)))
    return brokers, parts


def test_a_hot_spot_is_spread_by_leadership_first():
    brokers, parts = hot_spot()
    leader_in = loads(brokers, parts, Resource.LEADER_IN)
    assert leader_in[1] / (sum(leader_in.values()) / 4) == pytest.approx(2.4)
    p = plan(brokers, parts)
    after = applied(parts, p)
    for r in (Resource.LEADER_IN, Resource.NW_OUT):
        got = loads(brokers, after, r)
        assert max(got.values()) / (sum(got.values()) / 4) <= 1.15, (r, got)
    assert p.leadership_moves >= 1 and p.leadership_moves >= p.replica_moves
    assert objective(brokers, after).total == pytest.approx(p.after.total)
    assert p.after.total < p.before.total


def test_draining_a_broker_moves_every_replica_off_it_and_keeps_racks():
    brokers = [BrokerInfo(b, f"r{b % 3}", EXCLUDED if b == 6 else ACTIVE) for b in range(1, 7)]
    parts = [PartitionInfo("t", i, (1 + i % 6, 1 + (i + 1) % 6, 1 + (i + 2) % 6), load=PartitionLoad(MB, MB, 100 * MB))
             for i in range(30)]
    p = plan(brokers, parts, BalancerConfig(max_replica_moves=1000))
    after = applied(parts, p)
    assert not p.unfixable
    m = ClusterModel(brokers, after)
    assert not m.hosted[6]
    for info, reps in m.partitions():
        assert len(reps) == 3 and len({m.rack(b) for b in reps}) == 3, (info.tp, reps)
    assert p.bytes_to_move == pytest.approx(15 * 100 * MB)  # 15 replicas were on broker 6
    assert all(6 not in c.after for c in p.changes)


def test_a_drain_that_cannot_fit_says_why():
    brokers = [BrokerInfo(b, None, EXCLUDED if b == 3 else ACTIVE) for b in (1, 2, 3)]
    parts = [PartitionInfo("t", 0, (1, 2, 3))]
    p = plan(brokers, parts)
    assert p.unfixable == ("t-0: 3 replicas need 3 usable brokers, 2 left (1, 2)",)
    assert p.after.hard == p.before.hard == 1


def test_a_dead_broker_past_the_threshold_is_healed_and_an_offline_one_is_left():
    parts = [PartitionInfo("t", i, (1 + i % 4, 1 + (i + 1) % 4), load=PartitionLoad(size=MB)) for i in range(8)]
    offline = [BrokerInfo(b, None, OFFLINE if b == 2 else ACTIVE) for b in (1, 2, 3, 4)]
    assert all(2 in c.before for c in plan(offline, parts).changes) is True
    assert all(2 in plan(offline, parts).assignment.get(x.tp, x.replicas) for x in parts if 2 in x.replicas)
    healed = plan([dataclasses.replace(b, state=EXCLUDED if b.id == 2 else b.state) for b in offline], parts)
    after = applied(parts, healed)
    assert all(2 not in x.replicas and len(x.replicas) == 2 for x in after)


def test_a_lost_rack_breaks_spread_to_keep_replicas_and_the_spread_returns_with_it():
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    parts = [PartitionInfo("t", i, (1 + i % 2, 3 + i % 2, 5 + i % 2)) for i in range(6)]
    lost = [BrokerInfo(b, r, EXCLUDED if r == "c" else ACTIVE) for b, r in racks.items()]
    p = plan(lost, parts, BalancerConfig(max_replica_moves=100))
    moved = applied(parts, p)
    assert not p.unfixable
    assert all(len(x.replicas) == 3 and not {5, 6} & set(x.replicas) for x in moved)
    back = [BrokerInfo(b, r) for b, r in racks.items()]
    m = ClusterModel(back, moved)
    assert sum(placement_violations(m, info, reps) for info, reps in m.partitions()) == 6
    returned = applied(moved, plan(back, moved, BalancerConfig(max_replica_moves=100)))
    m = ClusterModel(back, returned)
    assert all(len({racks[b] for b in reps}) == 3 for _, reps in m.partitions())


def test_placement_constraints_with_observers_keep_their_racks_and_leader_rack():
    spec = parse_placement('{"version": 1, "replicas": [{"count": 2, "constraints": {"rack": "dc1"}}],'
                           ' "observers": [{"count": 1, "constraints": {"rack": "dc2"}}]}')
    racks = {1: "dc1", 2: "dc1", 3: "dc1", 4: "dc2", 5: "dc2"}
    brokers = [BrokerInfo(b, r, EXCLUDED if b == 1 else ACTIVE) for b, r in racks.items()]
    parts = [PartitionInfo("s", i, (1, 2, 4 + i % 2), (4 + i % 2,), placement=spec,
                           load=PartitionLoad(MB, MB, MB)) for i in range(4)]
    after = applied(parts, plan(brokers, parts))
    for x in after:
        assert [racks[b] for b in x.replicas] == ["dc1", "dc1", "dc2"] and 1 not in x.replicas
        assert x.observers == x.replicas[2:]


def test_a_tenant_cell_is_kept():
    brokers = [BrokerInfo(b) for b in range(1, 7)]
    cell = frozenset({1, 2, 3})
    hot = [PartitionInfo("a", i, (1, 2), load=PartitionLoad(5 * MB, 5 * MB, 50 * MB), allowed=cell, tenant="A")
           for i in range(6)]
    other = [PartitionInfo("b", i, (4, 5), load=PartitionLoad(MB, MB, MB), tenant="B") for i in range(6)]
    p = plan(brokers, hot + other)
    assert p.changes
    for x in applied(hot, p):
        assert set(x.replicas) <= cell


def test_a_full_disk_sheds_replicas_below_its_limit():
    cap = Capacity(disk=1000 * MB)
    brokers = [BrokerInfo(b, capacity=cap) for b in (1, 2, 3)]
    parts = [PartitionInfo("t", i, (1,), load=PartitionLoad(size=100 * MB)) for i in range(9)]  # 90% of broker 1
    p = plan(brokers, parts, BalancerConfig(goals=("placement", "capacity.disk")))
    disk = loads(brokers, applied(parts, p), Resource.DISK)
    assert disk[1] <= 850 * MB and p.replica_moves == 1
    assert p.before.of("capacity.disk") > 0 and p.after.of("capacity.disk") == 0


def test_empty_broker_trigger_fills_only_new_brokers():
    brokers, parts = hot_spot()
    config = BalancerConfig(trigger=EMPTY_BROKER)
    assert not plan(brokers, parts, config).changes  # uneven, but no empty broker
    with_new = brokers + [BrokerInfo(5)]
    p = plan(with_new, parts, config)
    assert p.changes and all(5 in c.after or c.leadership_only for c in p.changes)
    assert loads(with_new, applied(parts, p), Resource.REPLICAS)[5] > 0


def fill_rounds(brokers, parts, fill, cap=5):
    """The executor's fill, round by round: each plan's leadership moves and its first ``cap``
    replica moves applied; a broker stays filling while a plan moves replicas onto it."""
    for _ in range(60):
        p = plan(brokers, parts, BalancerConfig(trigger=EMPTY_BROKER), fill=fill)
        if not p.changes:
            break
        started = [c for c in p.changes if c.leadership_only] + [c for c in p.changes if not c.leadership_only][:cap]
        after = {c.tp: c.after for c in started}
        parts = [dataclasses.replace(x, replicas=after[x.tp], observers=after[x.tp][x.sync_count:])
                 if x.tp in after else x for x in parts]
        fill = fill & {b for c in p.changes if not c.leadership_only for b in set(c.after) - set(c.before)}
        if not fill:
            break
    return parts


@pytest.mark.parametrize("seed", range(6))
def test_a_broker_joining_a_rack_of_two_gets_half_of_the_racks_replicas_and_bytes(seed):
    # Racks dc1 (brokers 1 and the new 4), dc2, dc3; one replica per rack: dc2's and dc3's brokers
    # hold every partition, more than the mean, and can give nothing to dc1. The fill stopped at a
    # third of dc1's replicas before: each soft goal refused a move between two brokers both below
    # its band, a plan of the last few moves gained too little of an objective mostly made of what
    # no move fixes, and a partition half the disk gap large was never tried.
    rnd = random.Random(seed)
    racks = {1: "dc1", 2: "dc2", 3: "dc3", 4: "dc1"}
    brokers = [BrokerInfo(b, racks[b]) for b in (1, 2, 3, 4)]
    parts = []
    for name, n, rate in (("__consumer_offsets", 50, 0), ("events", 8, 50_000), ("usage", 3, 100)):
        for i in range(n):
            order = [1, 2, 3]
            rnd.shuffle(order)
            parts.append(PartitionInfo(name, i, tuple(order), load=PartitionLoad(rate, rate, rate * 30 + rnd.randint(0, 1000))))
    after = fill_rounds(brokers, parts, {4})
    m = ClusterModel(brokers, after)
    count, disk = (loads(brokers, after, r) for r in (Resource.REPLICAS, Resource.DISK))
    assert count[1] + count[4] == 61 and abs(count[1] - count[4]) <= 1, count
    assert abs(disk[1] - disk[4]) <= 0.05 * (disk[1] + disk[4]), disk
    assert all(len({m.rack(b) for b in reps}) == 3 for _info, reps in m.partitions())


def test_a_partition_larger_than_half_the_gap_is_moved_when_it_helps():
    # 8.0 MB on broker 1 (five 1.6 MB partitions), 5.2 MB on broker 2 (three and a 0.4 MB one):
    # moving a 1.6 MB partition makes them 6.4 and 6.8, better; the bound on what may help was half
    # the gap (1.4 MB), and no partition was moved
    brokers = [BrokerInfo(b) for b in (1, 2)]
    parts = [PartitionInfo("t", i, (1 if i < 5 else 2,), load=PartitionLoad(size=1.6 * MB)) for i in range(8)]
    parts.append(PartitionInfo("t", 8, (2,), load=PartitionLoad(size=0.4 * MB)))
    p = plan(brokers, parts)
    assert p.replica_moves == 1
    assert loads(brokers, applied(parts, p), Resource.DISK) == {1: pytest.approx(6.4 * MB), 2: pytest.approx(6.8 * MB)}


def test_a_tiny_gain_is_not_worth_a_plan():
    brokers = [BrokerInfo(b) for b in (1, 2)]
    parts = [PartitionInfo("t", 0, (1,), load=PartitionLoad(100.0, 0, 1000.0)),
             PartitionInfo("t", 1, (2,), load=PartitionLoad(100.0, 0, 1001.0))]
    assert not plan(brokers, parts).changes


# -- properties -------------------------------------------------------------------------------


@st.composite
def clusters(draw):
    n = draw(st.integers(2, 7))
    racked = draw(st.booleans())
    nracks = draw(st.integers(1, 3))
    capacity = draw(st.sampled_from([Capacity(), Capacity(disk=10_000.0, nw_in=1000.0, nw_out=3000.0)]))
    states = draw(st.lists(st.sampled_from([ACTIVE] * 6 + [OFFLINE, EXCLUDED]), min_size=n, max_size=n))
    brokers = [BrokerInfo(b, f"r{b % nracks}" if racked else None, states[b - 1], capacity) for b in range(1, n + 1)]
    seed = draw(st.integers(0, 2**32))
    rng = random.Random(seed)
    parts = []
    for t in range(draw(st.integers(1, 4))):
        rf = draw(st.integers(1, min(3, n)))
        tenant = draw(st.sampled_from(["", "A", "B"]))
        cell = None
        if tenant == "A" and n >= 4:
            cell = frozenset(range(1, rf + 2))
        for i in range(draw(st.integers(1, 8))):
            pool = sorted(cell) if cell else list(range(1, n + 1))
            reps = tuple(rng.sample(pool, rf))
            load = PartitionLoad(rng.choice([0.0, rng.random() * 100]), rng.random() * 100, rng.random() * 1000)
            parts.append(PartitionInfo(f"t{t}", i, reps, load=load, tenant=tenant, allowed=cell,
                                       min_insync_racks=draw(st.sampled_from([1, 2]))))
    return brokers, parts


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BIG = BalancerConfig(max_replica_moves=10_000, max_leader_moves=10_000)


@PROPERTY
@given(clusters())
def test_a_plan_never_breaks_a_hard_goal(cluster):
    brokers, parts = cluster
    p = plan(brokers, parts, BIG)
    before, after = model_of(brokers, parts), model_of(brokers, parts, p.assignment)
    for info, reps in after.partitions():
        old = before.parts[info.tp].replicas
        assert len(reps) == len(old) and len(set(reps)) == len(reps)
        assert placement_violations(after, info, reps) <= placement_violations(before, info, old)
        assert info.allowed is None or set(reps) <= info.allowed or set(reps) - info.allowed <= set(old) - info.allowed
    for b in after.active():
        cap = after.brokers[b].capacity
        for r, limit in ((Resource.DISK, 0.85 * cap.disk), (Resource.NW_IN, 0.8 * cap.nw_in),
                         (Resource.NW_OUT, 0.8 * cap.nw_out)):
            if limit:
                assert after.load[b][r] <= max(limit, before.load[b][r]) + 1e-6


@PROPERTY
@given(clusters())
def test_applying_a_plan_lowers_the_objective_and_it_is_what_the_plan_says(cluster):
    brokers, parts = cluster
    p = plan(brokers, parts, BIG)
    scratch = objective(brokers, parts, BIG, p.assignment)
    assert scratch.total == pytest.approx(p.after.total, rel=1e-9, abs=1e-9)
    if p.changes:
        assert scratch.total < objective(brokers, parts, BIG).total
    else:
        assert p.after == p.before


@PROPERTY
@given(clusters())
def test_a_second_plan_finds_nothing_and_plans_are_deterministic(cluster):
    brokers, parts = cluster
    p = plan(brokers, parts, BIG)
    shuffled = list(parts)
    random.Random(7).shuffle(shuffled)
    assert plan(list(reversed(brokers)), shuffled, BIG).changes == p.changes
    again = plan(brokers, applied(parts, p), BIG)
    assume(not p.unfixable)
    assert not again.changes, again.changes


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 6), st.integers(1, 3), st.integers(1, 5), st.floats(1.0, 1e6))
def test_a_balanced_cluster_gives_an_empty_plan(n, rf, per_broker, rate):
    assume(rf <= n)
    brokers = [BrokerInfo(b) for b in range(1, n + 1)]
    parts = [PartitionInfo("t", i, tuple(1 + (i + k) % n for k in range(rf)), load=PartitionLoad(rate, rate, rate * 10))
             for i in range(n * per_broker)]
    p = plan(brokers, parts)
    assert not p.changes and p.before.total == pytest.approx(0.0, abs=1e-9)
