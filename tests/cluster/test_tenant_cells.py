"""Tenant cells (issue 27 part 5) without broker processes: the cell configs parse or are
refused, ``cell_brokers`` is a tenant's listed brokers plus those in its racks, creation places a
tenant's partitions in its cell only (and says so when the cell is too small), a cell is no topic
config its topics inherit, its tenant-wide quota is split over the cell's leaders, the balancer's
inputs confine the tenant's partitions to it, and the executor carries a tenant moved to another
cell over there with throttled moves (on a memory store; the controller's part, replicas catching
up, done by hand)."""

from __future__ import annotations

import dataclasses
import random
import uuid
from types import MappingProxyType

import pytest

from shoal.cluster import planner
from shoal.cluster.balancer.executor import THROTTLE_RATES, THROTTLED_REPLICAS, Balancer
from shoal.cluster.balancer.inputs import BalancerSettings, cluster_inputs
from shoal.cluster.balancer.planner import BalancerConfig
from shoal.cluster.balancer.planner import plan as balance_plan
from shoal.cluster.controller import PREFERRED, election_change
from shoal.metadata import BrokerInfo, MetadataImage, PartitionInfo, TenantInfo, TopicInfo, inheritance
from shoal.metadata.change import Change
from shoal.metadata.memory import memory_store
from shoal.metadata.rules import topics as topic_rules
from shoal.placement.cells import CELL_BROKERS, CELL_RACKS, Cell, CellError, parse_cell
from shoal.quotas.entities import tenant_leaders
from shoal.quotas.fairshare import tenant_quota_slices

RACKS = {1: "a", 2: "b", 3: "a", 4: "b", 5: "c"}
TA, TB = "lkc-aaaaaa", "lkc-bbbbbb"


def image(tenant_configs: dict[str, dict[str, str]], topics: dict[str, list[tuple[int, ...]]] | None = None,
          brokers=(1, 2, 3, 4, 5)) -> MetadataImage:
    infos = MappingProxyType({n: BrokerInfo(n, "h", 9000 + n, RACKS[n]) for n in brokers})
    tenants = MappingProxyType({tid: TenantInfo(tid, tid, 0, MappingProxyType(c)) for tid, c in tenant_configs.items()})
    tops = {name: TopicInfo(name, uuid.uuid4(), tuple(PartitionInfo(i, r, r, r[0]) for i, r in enumerate(reps)))
            for name, reps in (topics or {}).items()}
    return MetadataImage("c", 1, infos, MappingProxyType(tops), MappingProxyType({t.topic_id: t for t in tops.values()}),
                         MappingProxyType({}), tenants=tenants)


def test_cell_configs_parse_and_malformed_ones_are_refused():
    assert parse_cell({}) is None
    assert parse_cell({"retention.ms": "1"}) is None
    assert parse_cell({CELL_BROKERS: "3, 1,2"}) == Cell(frozenset({1, 2, 3}))
    assert parse_cell({CELL_RACKS: "eu-1a,eu-1b"}) == Cell(racks=frozenset({"eu-1a", "eu-1b"}))
    for bad in ("", "1,,2", "1,x", "-1", "1.5"):
        with pytest.raises(CellError, match=CELL_BROKERS):
            parse_cell({CELL_BROKERS: bad})
    with pytest.raises(CellError, match=CELL_RACKS):
        parse_cell({CELL_RACKS: "a,"})


def test_cell_brokers_are_the_listed_brokers_and_those_in_the_listed_racks():
    img = image({TA: {CELL_BROKERS: "1,2"}, TB: {CELL_RACKS: "a", CELL_BROKERS: "5"}, "lkc-cccccc": {}})
    assert planner.cell_brokers(img, TA) == {1, 2}
    assert planner.cell_brokers(img, TB) == {1, 3, 5}
    assert planner.cell_brokers(img, "lkc-cccccc") is None
    assert planner.cell_brokers(img, "lkc-gone00") is None
    # a broker known by its last rack (its registration gone) is still in its rack's cell
    assert planner.cell_brokers(image({TB: {CELL_RACKS: "a"}}, brokers=(1, 2)), TB, {1: "a", 3: "a"}) == {1, 3}


def test_live_brokers_of_a_tenants_topic_are_its_cells_and_other_topics_use_every_broker():
    img = image({TA: {CELL_BROKERS: "1,2"}, TB: {CELL_BROKERS: "3,4"}})
    assert planner.live_brokers(img, (), f"{TA}_orders") == [(1, "a"), (2, "b")]
    assert planner.live_brokers(img, {3}, f"{TB}_orders") == [(4, "b")]
    assert [b for b, _ in planner.live_brokers(img, (), "__consumer_offsets")] == [1, 2, 3, 4, 5]
    assert [b for b, _ in planner.live_brokers(img)] == [1, 2, 3, 4, 5]


def test_creation_places_a_tenants_partitions_in_its_cell_and_refuses_a_cell_too_small():
    img = image({TA: {CELL_BROKERS: "1,2"}, TB: {CELL_RACKS: "a,c"}})
    defaults = planner.Defaults(6, 2)
    for tid, cell in ((TA, {1, 2}), (TB, {1, 3, 5})):
        name = f"{tid}_t"
        plan = planner.plan_topic(planner.live_brokers(img, (), name), planner.TopicRequest(name), defaults,
                                  random.Random(1))
        assert {b for r in plan.assignments for b in r} <= cell and plan.num_partitions == 6
        more = planner.plan_new_partitions(planner.live_brokers(img, (), name), name, plan.assignments, 12)
        assert {b for r in more.assignments for b in r} <= cell
    with pytest.raises(planner.PlacementError) as e:
        planner.plan_topic(planner.live_brokers(img, (), f"{TA}_t"), planner.TopicRequest(f"{TA}_t", 1, 3), defaults,
                           random.Random(1))
    assert e.value.code == "INVALID_REPLICATION_FACTOR"
    assert e.value.message == (
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be reached "
        f"because only 2 broker(s) are registered in tenant {TA}'s cell ({CELL_BROKERS}=1,2).")
    with pytest.raises(planner.PlacementError, match=f"All brokers in tenant {TA}'s cell .* are currently fenced"):
        planner.plan_topic(planner.live_brokers(img, {1, 2}, f"{TA}_t"), planner.TopicRequest(f"{TA}_t"), defaults,
                           random.Random(1))


def test_a_cell_is_no_topic_default_the_tenants_topics_inherit():
    img = image({TA: {CELL_BROKERS: "1,2", "retention.ms": "5"}})
    assert inheritance.topic_overrides(img, f"{TA}_t", {}) == {"retention.ms": "5"}


def test_a_tenant_wide_quota_is_split_over_the_cell_brokers_that_lead_its_partitions():
    img = image({TA: {CELL_BROKERS: "3,4"}})
    name = f"{TA}_t"
    plan = planner.plan_topic(planner.live_brokers(img, (), name), planner.TopicRequest(name), planner.Defaults(8, 2),
                              random.Random(3))
    img = image({TA: {CELL_BROKERS: "3,4"}}, {name: list(plan.assignments), "free": [(1, 2), (5, 1)]})
    assert tenant_leaders(img, TA) == {3, 4}  # leaders are replicas: in the cell
    assert tenant_quota_slices(1000.0, tenant_leaders(img, TA)) == {3: 500.0, 4: 500.0}


def settings(**kw) -> BalancerSettings:
    return BalancerSettings(interval_s=0.0, max_moves_per_broker=2, throttle=1000,
                            planner=BalancerConfig(goals=("placement",)), **kw)


def test_the_balancers_inputs_confine_a_tenants_partitions_to_its_cell_and_its_plan_moves_them_in():
    img = image({TA: {CELL_BROKERS: "3,4"}}, {f"{TA}_t": [(1, 2), (3, 4), (2, 3)], "free": [(1, 2)]})
    brokers, parts = cluster_inputs(img, {1, 2, 3, 4, 5}, {}, 0.0, {}, settings(), lambda i, n: {})
    allowed = {(p.topic, p.partition): p.allowed for p in parts}
    assert allowed == {(f"{TA}_t", 0): {3, 4}, (f"{TA}_t", 1): {3, 4}, (f"{TA}_t", 2): {3, 4}, ("free", 0): None}
    result = balance_plan(brokers, parts, settings().planner)
    after = {c.tp: c.after for c in result.changes}
    assert set(after[(f"{TA}_t", 0)]) == {3, 4} and set(after[(f"{TA}_t", 2)]) == {3, 4}
    assert (f"{TA}_t", 1) not in after and ("free", 0) not in after  # already in place / no cell


async def test_a_tenant_moved_to_another_cell_is_carried_there_by_throttled_moves():
    store = memory_store()
    await store.start()
    for n in (1, 2, 3, 4):
        await store.register_broker(BrokerInfo(n, "h", 9000 + n, RACKS[n]))
    tenant = await store.create_tenant("a")
    await store.update_tenant(tenant.tenant_id, configs={CELL_BROKERS: "1,2"})
    name = f"{tenant.tenant_id}_t"
    await store.create_topic(name, [(1, 2), (2, 1)] * 3, {})
    s = settings()
    balancer = Balancer(store, 1, lambda: s, lambda img, n: {}, lambda img, wanted: election_change(img, PREFERRED, wanted),
                        monotonic=lambda: 1000.0)

    def replicas() -> set[int]:
        return {b for p in store.image.topics[name].partitions for b in p.replicas}

    await balancer.round({1, 2, 3, 4}, epoch=1)
    assert replicas() == {1, 2}  # in its cell: nothing to do
    await store.update_tenant(tenant.tenant_id, configs={CELL_BROKERS: "3,4"})  # the one command

    def catch_up(img: MetadataImage):
        t = img.topics[name]
        parts = tuple(dataclasses.replace(p, isr=tuple(dict.fromkeys(p.isr + p.adding))) for p in t.partitions)
        return topic_rules.Result(Change(topics={name: dataclasses.replace(t, partitions=parts)}), None)

    throttled = False
    for _ in range(20):
        status = await balancer.round({1, 2, 3, 4}, epoch=1)
        img = store.image
        if any(p.reassigning for p in img.topics[name].partitions):
            throttled |= (all(img.broker_configs.get(k) == "1000" for k in THROTTLE_RATES)
                          and bool(img.topics[name].configs.get(THROTTLED_REPLICAS[1])))
        await store.decide_and_commit(catch_up)
        await store.decide_and_commit(topic_rules.complete_reassignments)
        if replicas() == {3, 4} and not status.in_flight:
            break
    parts = store.image.topics[name].partitions
    assert replicas() == {3, 4} and all(len(p.replicas) == 2 for p in parts) and throttled
    await balancer.round({1, 2, 3, 4}, epoch=1)
    assert not any(k in store.image.broker_configs for k in THROTTLE_RATES)  # the moves ended: throttles gone
