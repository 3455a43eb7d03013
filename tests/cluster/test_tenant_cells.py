"""Tenant cells (issue 27 part 5) without broker processes: the cell configs parse or are
refused, ``cell_brokers`` is a tenant's listed brokers plus those in its racks, creation places a
tenant's partitions in its cell only (and says so when the cell is too small), a cell is no topic
config its topics inherit."""

from __future__ import annotations

import random
import uuid
from types import MappingProxyType

import pytest

from shoal.cluster import planner
from shoal.metadata import BrokerInfo, MetadataImage, PartitionInfo, TenantInfo, TopicInfo, inheritance
from shoal.placement.cells import CELL_BROKERS, CELL_RACKS, Cell, CellError, parse_cell

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
