"""Host-aware placement (issue 29, part 2): several brokers per host (``broker.host``) never hold two
replicas of a partition while the hosts allow it; racks still spread first; one broker per host is
Kafka's placement exactly. Pure: shoal.placement.assignment and shoal.cluster.planner."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.cluster import planner
from shoal.metadata import BrokerInfo, MetadataImage
from shoal.placement.assignment import assign_replicas


@st.composite
def clusters(draw):
    """Brokers on hosts, each host in one rack (or no racks at all), and an RF they can hold."""
    racked = draw(st.booleans())
    n_hosts = draw(st.integers(1, 6))
    host_rack = {f"h{h}": (f"r{draw(st.integers(0, 2))}" if racked else None) for h in range(n_hosts)}
    brokers, hosts = [], {}
    node = draw(st.integers(0, 5))
    for h, rack in host_rack.items():
        for _ in range(draw(st.integers(1, 4))):
            node += draw(st.integers(1, 3))
            brokers.append((node, rack))
            hosts[node] = h
    rf = draw(st.integers(1, len(brokers)))
    return brokers, hosts, rf


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 12), st.integers(0, 50), st.integers(0, 50))
def test_two_replicas_share_a_host_only_when_hosts_run_out(cluster, partitions, start, shift) -> None:
    brokers, hosts, rf = cluster
    placed = assign_replicas(brokers, partitions, rf, start_index=start % len(brokers),
                             replica_shift=shift % len(brokers), hosts=hosts)
    rack = dict(brokers)
    n_hosts = len(set(hosts.values()))
    n_racks = len({r for _, r in brokers})
    plain = assign_replicas(brokers, partitions, rf, start_index=start % len(brokers),
                            replica_shift=shift % len(brokers))
    for replicas in placed:
        assert len(set(replicas)) == rf  # distinct brokers
        assert len({hosts[b] for b in replicas}) == min(rf, n_hosts), (replicas, hosts)
        assert len({rack[b] for b in replicas}) == min(rf, n_racks)  # racks spread as before
    # leaders round-robin over the brokers (host-alternated): each leads as many as Kafka's would
    leads = [sum(1 for r in placed if r[0] == b) for b, _ in brokers]
    assert max(leads) - min(leads) <= 1 and sorted(leads) == sorted(sum(1 for r in plain if r[0] == b) for b, _ in brokers)


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 9), st.booleans(), st.integers(1, 12), st.integers(0, 20), st.integers(0, 20))
def test_one_broker_per_host_or_one_host_for_all_is_kafkas_placement(n, racked, partitions, start, shift) -> None:
    brokers = [(i + 1, f"r{i % 3}" if racked else None) for i in range(n)]
    rf = min(3, n)
    kafka = assign_replicas(brokers, partitions, rf, start_index=start % n, replica_shift=shift % n)
    for hosts in ({b: f"host-{b}" for b, _ in brokers}, {b: "127.0.0.1" for b, _ in brokers}):  # (loopback: one)
        assert assign_replicas(brokers, partitions, rf, start_index=start % n, replica_shift=shift % n,
                               hosts=hosts) == kafka


def test_followers_spread_evenly_over_two_hosts_of_two() -> None:
    brokers = [(1, None), (2, None), (3, None), (4, None)]
    hosts = {1: "a", 2: "a", 3: "b", 4: "b"}
    placed = assign_replicas(brokers, 8, 2, start_index=0, replica_shift=0, hosts=hosts)
    assert all({hosts[r] for r in reps} == {"a", "b"} for reps in placed)
    assert sorted(r[1] for r in placed) == [1, 1, 2, 2, 3, 3, 4, 4]
    assert sorted(r[0] for r in placed) == [1, 1, 2, 2, 3, 3, 4, 4]


def _image(hosts: dict[int, str]) -> MetadataImage:
    brokers = {n: BrokerInfo(n, "127.0.0.1", 9000 + n, host_id=h) for n, h in hosts.items()}
    return MetadataImage("cluster", 1, brokers, {}, {}, {})


def test_planner_places_over_registered_hosts_and_says_when_short() -> None:
    image = _image({1: "a", 2: "a", 3: "b", 4: "b"})
    live = planner.live_brokers(image)
    assert planner.hosts_of(live) == {1: "a", 2: "a", 3: "b", 4: "b"}
    for seed in range(20):
        plan = planner.plan_topic(live, planner.TopicRequest("t", 6, 2), planner.Defaults(1, 1), random.Random(seed))
        assert all(len({"ab"[r > 2] for r in reps}) == 2 for reps in plan.assignments), plan
        assert planner.host_shortfall(live, plan) is None
    grown = planner.plan_new_partitions(live, "t", [(1, 3)], 5)
    assert all(len({"ab"[r > 2] for r in reps}) == 2 for reps in grown.assignments), grown
    plan = planner.plan_topic(live, planner.TopicRequest("t3", 4, 3), planner.Defaults(1, 1), random.Random(1))
    assert all(len({"ab"[r > 2] for r in reps}) == 2 for reps in plan.assignments)  # as best it can
    said = planner.host_shortfall(live, plan)
    assert said is not None and "replication factor 3 over 2 host(s)" in said


def test_advertised_host_stands_for_an_unset_broker_host() -> None:
    assert BrokerInfo(1, "10.0.0.1", 9092).machine == "10.0.0.1"
    assert BrokerInfo(1, "10.0.0.1", 9092, host_id="rack7-host3").machine == "rack7-host3"


def test_placement_check_reports_host_spread(capsys) -> None:
    from shoal.cli import main

    rc = main(["placement", "check", "--replication-factor", "2", "--brokers", "1:r1,2:r1,3:r1,4:r1",
               "--hosts", "1:a,2:a,3:b,4:b", "--partitions", "8"])
    out = capsys.readouterr().out
    assert "hosts: every partition on 2 hosts (4 brokers on 2 hosts)" in out, out  # (rc: the one rack warns)
    rc = main(["placement", "check", "--replication-factor", "3", "--brokers", "1:r1,2:r1,3:r1,4:r1",
               "--hosts", "1:a,2:a,3:b,4:b", "--partitions", "4"])
    out = capsys.readouterr().out
    assert "NOTE: replication factor 3 over 2 hosts: partitions 0,1,2,3 have two replicas" in out, out
    assert "WARNING: partitions" not in out  # as spread as the hosts allow
    rc = main(["placement", "check", "--replication-factor", "2", "--brokers", "1:r1,2:r1",
               "--hosts", "1:a,9:b"])
    assert rc == 2 and "--hosts: broker 9 is not in --brokers" in capsys.readouterr().err


# -- the balancer's PlacementGoal -----------------------------------------------------------------


def _balancer_cluster(hosts: dict[int, str], layouts: list[tuple[int, ...]], racks: dict[int, str] | None = None):
    from shoal.cluster.balancer import BrokerInfo as Node, Capacity, PartitionInfo as Part, PartitionLoad

    nodes = [Node(b, (racks or {}).get(b), capacity=Capacity(disk=1e9), host=h) for b, h in hosts.items()]
    parts = [Part("t", i, reps, load=PartitionLoad(1e5, 1e5, 1e6)) for i, reps in enumerate(layouts)]
    return nodes, parts


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_balancer_moves_replicas_off_a_shared_host(data) -> None:
    from shoal.cluster.balancer import plan
    from shoal.cluster.balancer.goals import placement_violations
    from shoal.cluster.balancer.model import ClusterModel

    n_hosts = data.draw(st.integers(2, 4))
    per_host = data.draw(st.integers(1, 3))
    hosts = {h * per_host + i + 1: f"h{h}" for h in range(n_hosts) for i in range(per_host)}
    rf = data.draw(st.integers(1, min(3, len(hosts))))
    layouts = [tuple(data.draw(st.permutations(sorted(hosts))))[:rf] for _ in range(data.draw(st.integers(1, 8)))]
    nodes, parts = _balancer_cluster(hosts, layouts)
    p = plan(nodes, parts)
    after = {x.tp: p.assignment.get(x.tp, x.replicas) for x in parts}
    assert not p.unfixable, p.unfixable
    for reps in after.values():
        assert len({hosts[b] for b in reps}) == min(rf, n_hosts), (reps, hosts, p)
    m = ClusterModel(nodes, [dataclasses.replace(x, replicas=after[x.tp]) for x in parts])
    assert all(placement_violations(m, info, reps) == 0 for info, reps in m.partitions())


def test_balancer_keeps_racks_before_hosts() -> None:
    from shoal.cluster.balancer import plan

    # racks r1 {1@a, 2@b}, r2 {3@a}: [1, 2] spans one rack; the fix is rack r2 even on host a
    nodes, parts = _balancer_cluster({1: "a", 2: "b", 3: "a"}, [(1, 2)], racks={1: "r1", 2: "r1", 3: "r2"})
    p = plan(nodes, parts)
    reps = p.assignment.get(("t", 0), (1, 2))
    assert 3 in reps and len(reps) == 2


def test_one_broker_per_host_changes_nothing_for_the_balancer() -> None:
    from shoal.cluster.balancer import plan

    nodes, parts = _balancer_cluster({1: "a", 2: "b", 3: "c", 4: "d"}, [(1, 2), (3, 4), (1, 3), (2, 4)])
    with_hosts = plan(nodes, parts)
    without = plan([dataclasses.replace(n, host=None) for n in nodes], parts)
    assert with_hosts.assignment == without.assignment


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(0, 10), st.integers(1, 6))
def test_placement_constraints_spread_over_hosts_within_a_rack(hosts_dc1, per_host, count, start, partitions) -> None:
    from shoal.placement.constraints import assign_with_constraints, parse_placement

    brokers, hosts = [], {}
    for h in range(hosts_dc1):
        for i in range(per_host):
            node = 1 + h * per_host + i
            brokers.append((node, "dc1"))
            hosts[node] = f"h{h}"
    brokers.append((100, "dc2"))
    hosts[100] = "h-dc2"
    count = min(count, len(brokers) - 1)
    spec = parse_placement('{"version":1,"replicas":[{"count":%d,"constraints":{"rack":"dc1"}},'
                           '{"count":1,"constraints":{"rack":"dc2"}}]}' % count)
    placed = assign_with_constraints(spec, brokers, partitions, start_index=start, hosts=hosts)
    plain = assign_with_constraints(spec, brokers, partitions, start_index=start)
    for (reps, _obs), (kafka, _o) in zip(placed, plain):
        dc1 = [b for b in reps if b != 100]
        assert len(set(reps)) == len(reps) == count + 1 and reps[-1] == 100
        assert len({hosts[b] for b in dc1}) == min(count, hosts_dc1), (reps, hosts)
        if per_host == 1:
            assert reps == kafka  # one broker per host: as without hosts
