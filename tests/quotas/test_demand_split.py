"""Tenant-wide quotas split by demand (shoal.quotas.demand): the policy exactly, its properties,
the exchange codec, staleness, and the quota manager's bounds following the demand table."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import uuid
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.config import BrokerConfig
from shoal.metadata import BrokerInfo, PartitionInfo, TenantInfo, TopicInfo
from shoal.quotas.demand import (
    DemandExchange,
    confirmed_demand_slice,
    DemandTable,
    Freshness,
    build_table,
    decode_reports,
    demand_estimate,
    demand_key_prefix,
    demand_slice,
    encode_reports,
    is_held,
    muted_fraction,
    HELD_MUTED_FRACTION,
    HELD_INTERVALS,
    RECENT_SPAN_MS,
    split_by_demand,
)
from shoal.quotas.manager import ClientQuotaManager, QuotaManagers, QuotaType
from test_manager import image, topic

MB = 1_000_000
T = "lkc-aaaaaa"


# -- the policy -----------------------------------------------------------------------------------

def test_issue_case_b_hot_broker_gets_the_rest() -> None:
    """6 MB/s tenant, 80% of its traffic offered to broker 1 (6 MB/s), 0.75 MB/s each to 2 and
    3: broker 1 is held (bids the whole quota), 2 and 3 ask 1.1 x 0.75; broker 1 gets the rest."""
    d = {1: demand_estimate((2.0 * MB, True), 6 * MB),
         2: demand_estimate((0.75 * MB, False), 6 * MB),
         3: demand_estimate((0.75 * MB, False), 6 * MB)}
    assert d == {1: 6 * MB, 2: pytest.approx(0.825 * MB), 3: pytest.approx(0.825 * MB)}
    s = split_by_demand(6 * MB, d, min_fraction=0.1)
    assert s == {1: pytest.approx(4.35 * MB), 2: pytest.approx(0.825 * MB), 3: pytest.approx(0.825 * MB)}


def test_even_held_demand_is_the_equal_split() -> None:
    d = {b: demand_estimate((2.0 * MB, True), 6 * MB) for b in (1, 2, 3)}
    assert split_by_demand(6 * MB, d) == {1: 2 * MB, 2: 2 * MB, 3: 2 * MB}


def test_demands_that_fit_are_scaled_up_in_proportion_with_the_floor() -> None:
    # floor = 0.1 x 600 / 3 = 20: broker 3 (no demand) is raised to it; 100 + 200 + 20 = 320.
    s = split_by_demand(600.0, {1: 100.0, 2: 200.0, 3: 0.0}, min_fraction=0.1)
    assert s == {1: pytest.approx(600 * 100 / 320), 2: pytest.approx(600 * 200 / 320),
                 3: pytest.approx(600 * 20 / 320)}
    # no demand at all: the floors, i.e. equal
    assert split_by_demand(600.0, {1: 0.0, 2: 0.0}) == {1: 300.0, 2: 300.0}
    assert split_by_demand(600.0, {1: 0.0, 2: 0.0}, min_fraction=0.0) == {1: 300.0, 2: 300.0}
    assert split_by_demand(600.0, {}) == {}
    with pytest.raises(ValueError):
        split_by_demand(600.0, {1: 1.0}, min_fraction=1.5)


def test_two_held_brokers_share_what_the_known_demand_leaves() -> None:
    s = split_by_demand(6.0, {1: 6.0, 2: 6.0, 3: 1.0})
    assert s == {1: 2.5, 2: 2.5, 3: 1.0}


def test_held_means_muted_half_the_time_whatever_the_usage() -> None:
    """Exact: held from half the time muted on, whatever the usage (a bursty cold client's rate
    crosses 0.9545 of its slice without being held back); not held when a broker-wide cap
    below the slice holds it."""
    assert (HELD_MUTED_FRACTION, HELD_INTERVALS, RECENT_SPAN_MS) == (0.5, 4, 4000)
    assert is_held(0.5) and is_held(1.0)
    assert not is_held(0.49) and not is_held(0.0)
    # held by the broker-wide auto-tuner's cap, not by the slice: asks for no more slice
    assert not is_held(1.0, capped_below=True)
    assert demand_estimate((100.0, False), 1000.0, headroom=1.5) == 150.0
    assert demand_estimate((100.0, True), 1000.0) == 1000.0


def test_a_bursty_cold_consumer_does_not_take_the_hot_slice() -> None:
    """Case (b) with consumers, 1 MB/s: the hot broker muted all the time; two cold ones taking
    125 kB/s, one of them reading 164 kB/s (five 64 KiB batches in two seconds, above 0.9545 of
    its 1.1 x 125 kB/s slice) and muted 1.26 s of the last four (a 256 kB prefetch refill, 83 kB
    of pacer, at 137 kB/s): neither is held, and the hot broker keeps quota - 1.1 x (164 + 125)
    kB/s (the usage rule, or half of two intervals muted, made broker 2 bid for the whole quota
    and the hot broker's slice fell to (1 MB - 137.5 kB) / 2)."""
    q = 1_000_000.0
    reports = {1: (725_000.0, is_held(muted_fraction(3900, 100, 4000))),
               2: (164_000.0, is_held(muted_fraction(1260, 0, 4000))),
               3: (125_000.0, is_held(0.0))}
    assert reports[1][1] and not reports[2][1]
    assert is_held(muted_fraction(1260, 0, 2000))  # over two intervals it was
    table = DemandTable(frozenset({1, 2, 3}), {"fetch": {T: reports}})
    d = table.demands("fetch", T, [1, 2, 3], q)
    assert d == {1: q, 2: pytest.approx(180_400.0), 3: pytest.approx(137_500.0)}
    assert split_by_demand(q, d) == {1: pytest.approx(q - 180_400 - 137_500), 2: pytest.approx(180_400.0),
                                     3: pytest.approx(137_500.0)}
    held2 = {**reports, 2: (164_000.0, True)}
    s = split_by_demand(q, DemandTable(frozenset({1, 2, 3}), {"fetch": {T: held2}}).demands("fetch", T, [1, 2, 3], q))
    assert s == {1: pytest.approx(431_250.0), 2: pytest.approx(431_250.0), 3: pytest.approx(137_500.0)}


demand_maps = st.dictionaries(st.integers(1, 6), st.floats(0, 1e9, allow_nan=False), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(quota=st.floats(1.0, 1e9), demands=demand_maps, min_fraction=st.floats(0.0, 1.0))
def test_split_properties(quota: float, demands: dict[int, float], min_fraction: float) -> None:
    s = split_by_demand(quota, demands, min_fraction=min_fraction)
    n = len(demands)
    floor = min_fraction * quota / n
    assert set(s) == set(demands)
    assert math.fsum(s.values()) == pytest.approx(quota, rel=1e-9)  # never more, never less
    raised = {k: max(floor, v) for k, v in demands.items()}
    for k in s:
        assert s[k] >= floor * (1 - 1e-9)
        if math.fsum(raised.values()) <= quota:  # all fit: everyone gets at least its demand
            assert s[k] >= raised[k] * (1 - 1e-9)
        else:  # over: nobody gets more than it asked for
            assert s[k] <= raised[k] * (1 + 1e-9) + 1e-9
        for j in s:  # more demand never means a smaller slice
            if raised[k] <= raised[j]:
                assert s[k] <= s[j] * (1 + 1e-9) + 1e-9


def test_table_demands_known_missing_and_unknown_brokers() -> None:
    table = DemandTable(frozenset({1, 2}), {"produce": {T: {1: (100.0, False)}}})
    # 1: reported; 2: fresh report without the tenant (0)
    assert table.demands("produce", T, [1, 2], 900.0) == {1: pytest.approx(110.0), 2: 0.0}
    assert table.demands("fetch", T, [1, 2], 900.0) == {1: 0.0, 2: 0.0}
    # 3 leads too but has no fresh report: no demand split for the tenant
    assert table.demands("produce", T, [1, 2, 3], 900.0) is None
    assert demand_slice(900.0, [1, 2, 3], 1, table, "produce", T) == 300.0
    assert demand_slice(900.0, [1, 2], 1, table, "produce", T) == pytest.approx(900 * 110 / 155)


def test_demand_slice_edges() -> None:
    table = DemandTable(frozenset({1, 2, 3}), {"produce": {T: {1: (0.0, True), 2: (10.0, False), 3: (10.0, False)}}})
    assert demand_slice(300.0, [], 1, table, "produce", T) == 300.0  # no leaders known: all
    assert demand_slice(300.0, [2, 3], 1, table, "produce", T) == 150.0  # not a leader: equal share
    assert demand_slice(300.0, [1, 2, 3], 1, None, "produce", T) == 100.0  # no table: equal
    assert demand_slice(300.0, [1, 2, 3], 1, table, "produce", T) == pytest.approx(278.0)
    assert demand_slice(300.0, [1, 2, 3], 2, table, "produce", T) == pytest.approx(11.0)


def test_followers_serving_the_tenants_consumers_take_part_in_the_split() -> None:
    """Issue 24 (6): a one-partition tenant led by broker 1, its consumers also read from the
    followers 2 and 3 (KIP-392). A follower leads none of its partitions: it took the equal share
    of the leaders, the whole 900, three times the quota over the three. Every broker that reports
    the tenant's fetch traffic now takes part: held everywhere, 300 each."""
    everywhere = DemandTable(frozenset({1, 2, 3}), {"fetch": {T: {n: (300.0, True) for n in (1, 2, 3)}}})
    args = (900.0, [1])
    for b in (1, 2, 3):
        assert demand_slice(*args, b, everywhere, "fetch", T, followers={1, 2, 3}) == pytest.approx(300)
    assert demand_slice(*args, 2, everywhere, "fetch", T) == 900  # followers not counted: the old bound
    # a follower that serves and is in no report yet: the floor of one more participant (the
    # leader, alone in the split, has all of it until the next table)
    leader_only = DemandTable(frozenset({1, 2, 3}), {"fetch": {T: {1: (300.0, True)}}})
    assert demand_slice(*args, 1, leader_only, "fetch", T, followers={2, 3}) == 900
    assert demand_slice(*args, 2, leader_only, "fetch", T, followers={2, 3}) == pytest.approx(0.1 * 900 / 2)
    # a follower that serves twice the other: water-filled over the three, max-min fair
    skew = DemandTable(frozenset({1, 2, 3}), {"fetch": {T: {1: (100.0, False), 2: (0.0, True), 3: (200.0, False)}}})
    assert {b: demand_slice(*args, b, skew, "fetch", T, followers={2, 3}) for b in (1, 2, 3)} == {
        1: pytest.approx(110), 2: pytest.approx(900 - 110 - 220), 3: pytest.approx(220)}
    # no table, or the leader without a fresh report: equal over the leaders and the followers
    assert demand_slice(*args, 2, None, "fetch", T, followers={2, 3}) == 300
    stale = DemandTable(frozenset({2, 3}), {"fetch": {T: {2: (300.0, True)}}})
    assert confirmed_demand_slice(*args, 3, (stale, stale), "fetch", T, followers={2, 3}) == 300


def test_equal_split_of_a_consumer_quota_counts_the_followers_in_racks() -> None:
    """Issue 24 (6), the equal split: a consumer quota is split over the leaders and the replicas
    a rack-aware leader may send the tenant's consumers to (brokers with a rack), 300 each of a
    one-partition tenant's 900 at RF 3; without racks, or without follower reads (the leader
    selector), only over the leader, as before. A producer quota stays over the leaders."""
    def bound(node: int, racks: bool, follower_reads: bool = True, qtype: QuotaType = QuotaType.FETCH):
        m = ClientQuotaManager(qtype, node_id=node)
        m.follower_reads = follower_reads and qtype is QuotaType.FETCH
        key = "consumer_byte_rate" if qtype is QuotaType.FETCH else "producer_byte_rate"
        img = image({(("tenant", T),): {key: 900}}, brokers=(1, 2, 3))
        t = TopicInfo(f"{T}_t", uuid.uuid4(), (PartitionInfo(0, (1, 2, 3), (1, 2, 3), 1),))
        brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b, f"dc{b}" if racks else None) for b in (1, 2, 3)}
        m.update(dataclasses.replace(img, topics=MappingProxyType({t.name: t}),
                                     topics_by_id=MappingProxyType({t.topic_id: t}),
                                     brokers=MappingProxyType(brokers)))
        return m.quota(T, "u", "c")[1]

    assert [bound(n, racks=True) for n in (1, 2, 3)] == [300, 300, 300]
    assert [bound(n, racks=False) for n in (1, 2, 3)] == [900, 900, 900]  # no follower serves
    assert bound(1, racks=True, follower_reads=False) == 900
    assert bound(1, racks=True, qtype=QuotaType.PRODUCE) == 900


def test_a_slice_rises_only_when_two_tables_in_a_row_grant_it() -> None:
    """The cold-start race, exactly: 600 B/s over brokers 1, 2, 3; traffic starts at all three
    at once, and each reads the table at its own moment of the interval. Broker 1 reads it first,
    where only its own report is there (the others count at the floor, 20): alone it would take
    560, broker 2 next 290, broker 3 last 200, 1,050 in all. Taking the smaller of its last two
    tables' slices, each keeps 200 until the tables agree; a fall applies at once."""
    empty = DemandTable(frozenset({1, 2, 3}), {})
    held = lambda *nodes: DemandTable(frozenset({1, 2, 3}), {"produce": {T: {n: (0.0, True) for n in nodes}}})
    args = (600.0, [1, 2, 3])
    assert demand_slice(*args, 1, held(1), "produce", T) == pytest.approx(560)
    assert demand_slice(*args, 2, held(1, 2), "produce", T) == pytest.approx(290)
    assert confirmed_demand_slice(*args, 1, (empty, held(1)), "produce", T) == pytest.approx(200)
    assert confirmed_demand_slice(*args, 2, (empty, held(1, 2)), "produce", T) == pytest.approx(200)
    assert confirmed_demand_slice(*args, 3, (empty, held(1, 2, 3)), "produce", T) == pytest.approx(200)
    assert confirmed_demand_slice(*args, 3, (None, held(3)), "produce", T) == pytest.approx(200)  # None: equal
    # the tables agree: broker 1 held, the others at 50 B/s: 600 - 2 x 55
    skew = DemandTable(frozenset({1, 2, 3}), {"produce": {T: {1: (0.0, True), 2: (50.0, False), 3: (50.0, False)}}})
    assert confirmed_demand_slice(*args, 1, (skew, skew), "produce", T) == pytest.approx(490)
    # its traffic moves to broker 2: broker 1's slice falls with the first table that says so
    moved = DemandTable(frozenset({1, 2, 3}), {"produce": {T: {1: (10.0, False), 2: (0.0, True), 3: (50.0, False)}}})
    assert confirmed_demand_slice(*args, 1, (skew, moved), "produce", T) == pytest.approx(20)  # the floor
    assert confirmed_demand_slice(*args, 2, (skew, moved), "produce", T) == pytest.approx(55)
    assert confirmed_demand_slice(*args, 2, (moved, moved), "produce", T) == pytest.approx(600 - 20 - 55)


# -- the codec and the table ------------------------------------------------------------------------

reports_st = st.fixed_dictionaries({
    kind: st.dictionaries(st.text(min_size=1, max_size=12),
                          st.tuples(st.integers(0, 2**53).map(float), st.booleans()), max_size=5)
    for kind in ("produce", "fetch")
})


@given(reports_st)
def test_codec_round_trip(reports: dict) -> None:
    assert decode_reports(encode_reports(reports)) == reports


def test_codec_rounds_rates_and_is_compact() -> None:
    value = encode_reports({"produce": {T: (1234.6, True)}})
    assert value == b'{"v":1,"produce":{"lkc-aaaaaa":[1235,1]},"fetch":{}}'
    assert decode_reports(value) == {"produce": {T: (1235.0, True)}, "fetch": {}}
    # a later version's extra kinds are ignored by this one
    assert decode_reports(b'{"v":1,"produce":{},"request":{"x":1}}') == {"produce": {}, "fetch": {}}


@pytest.mark.parametrize("value", [
    b"", b"not json", b"[]", b'{"v":2,"produce":{}}', b'{"produce":{}}', b'{"v":1,"produce":[]}',
    b'{"v":1,"produce":{"t":[1]}}', b'{"v":1,"produce":{"t":[-1,0]}}', b'{"v":1,"produce":{"t":[NaN,0]}}',
    b'{"v":1,"produce":{"t":[Infinity,0]}}', b'{"v":1,"produce":{"t":[true,0]}}',
    b'{"v":1,"produce":{"t":["5",0]}}', b'{"v":1,"produce":{"t":[5,2]}}', b'{"v":1,"produce":{"t":[5,1.0]}}',
    b"\xff\xfe",
])
def test_codec_refuses_anything_else(value: bytes) -> None:
    with pytest.raises(ValueError):
        decode_reports(value)


def test_key_prefix_is_outside_the_metadata_watch() -> None:
    key = demand_key_prefix("/shoal") + b"1"
    assert key == b"/shoal.quota-demand/1"
    assert not (b"/shoal/" <= key < b"/shoal0")  # the watch's range (shoal.etcd.client.range_end)
    assert demand_key_prefix("/a/b/") == b"/a/b.quota-demand/"


def test_build_table_staleness_and_bad_keys() -> None:
    prefix = demand_key_prefix("/p")
    fresh = Freshness()
    v1 = encode_reports({"produce": {T: (100.0, False)}})
    v2 = encode_reports({"produce": {T: (200.0, True)}})
    bad: list[bytes] = []
    kvs = [(prefix + b"1", v1, 10), (prefix + b"2", v2, 11), (prefix + b"x", v1, 12), (prefix + b"3", b"{", 13)]
    table = build_table(kvs, prefix, fresh, 0, 5000, lambda k, why: bad.append(k))
    assert table.nodes == {1, 2}
    assert table.reports["produce"][T] == {1: (100.0, False), 2: (200.0, True)}
    assert bad == [prefix + b"x", prefix + b"3"]
    # node 2 keeps writing (its mod revision moves), node 1 stops: stale after 5 s of our clock
    t = build_table([(prefix + b"1", v1, 10), (prefix + b"2", v2, 20)], prefix, fresh, 5000, 5000)
    assert t.nodes == {1, 2}
    t = build_table([(prefix + b"1", v1, 10), (prefix + b"2", v2, 30)], prefix, fresh, 5001, 5000)
    assert t.nodes == {2} and t.reports["produce"][T] == {2: (200.0, True)}
    # it writes again: fresh again
    t = build_table([(prefix + b"1", v1, 31), (prefix + b"2", v2, 32)], prefix, fresh, 6000, 5000)
    assert t.nodes == {1, 2}


# -- the quota manager follows the table -----------------------------------------------------------

def three_leaders() -> ClientQuotaManager:
    m = ClientQuotaManager(QuotaType.PRODUCE, node_id=1)
    img = image({(("tenant", T),): {"producer_byte_rate": 600}},
                topics={f"{T}_t": topic(f"{T}_t", [1, 2, 3])}, brokers=(1, 2, 3))
    img = dataclasses.replace(img, tenants=MappingProxyType({T: TenantInfo(T, "A", 0)}))
    m.update(img)
    return m


def test_manager_bound_follows_the_split_and_the_demand_table() -> None:
    m = three_leaders()
    assert m.quota(T, "u", "c") == (None, 200)  # equal
    hot = DemandTable(frozenset({1, 2, 3}), {"produce": {T: {1: (190.0, True), 2: (50.0, False), 3: (50.0, False)}}})
    m.set_demand(hot)
    assert m.quota(T, "u", "c") == (None, 200)  # split is still equal
    m.set_split("demand")
    assert m.quota(T, "u", "c") == (None, 200)  # one table alone: a slice rises when two grant it
    m.set_demand(hot)
    assert m.quota(T, "u", "c") == (None, pytest.approx(600 - 2 * 55))
    assert m.tenant_slices() == {T: pytest.approx(490.0)}
    # the moving slice is a paced cap; the windowed (Kafka) bound is the whole tenant quota
    sensor = m._handle(T, "u", "c").tenant
    assert (sensor.bound, sensor.cap) == (600, pytest.approx(490.0))
    m.set_demand(None)  # stale: back to equal
    assert m.quota(T, "u", "c") == (None, 200)
    # a leadership move: broker 3's partition goes to 2; the split follows at once
    m.set_demand(hot)
    m.set_demand(hot)
    old = m._image
    moved = {f"{T}_t": topic(f"{T}_t", [1, 2, 2])}
    m.update(dataclasses.replace(old, topics=MappingProxyType(moved),
                                 topics_by_id=MappingProxyType({t.topic_id: t for t in moved.values()})), old)
    assert m.quota(T, "u", "c") == (None, pytest.approx(600 - 55))


def test_exchange_reports_held_tenants_and_falls_back_to_equal() -> None:
    """The exchange's own reports from real sensors, and its fallback when etcd is out of reach
    (a client whose every call fails as a gRPC call to a dead member does)."""
    config = BrokerConfig({"shoal.quota.tenant.split": "demand", "shoal.quota.tenant.demand.stale.ms": "3000"})
    managers = QuotaManagers(config, 1)
    img = image({(("tenant", T),): {"producer_byte_rate": 600}},
                topics={f"{T}_t": topic(f"{T}_t", [1, 2, 3])}, brokers=(1, 2, 3))
    managers.update(img)
    now = [1_700_000_000_000]

    class UnreachableSession:  # an EtcdSession whose etcd cannot be reached
        lease_id = None

        async def put_ephemeral(self, *a, **k):
            raise ConnectionError("etcd unreachable")

        async def read_prefix(self, *a, **k):
            raise ConnectionError("etcd unreachable")

    ex = DemandExchange(managers, UnreachableSession(), 1, lambda: config, lambda: now[0], "/p")
    # 3000 B at once against a 200 B/s slice: throttled, so held
    assert managers.produce.record(T, "u", "c", 3000, now[0])[0] > 0
    reports = ex.own_reports(now[0], now[0] - 1000, 1.1)
    assert reports["produce"][T][1] is True and reports["fetch"] == {}
    table = DemandTable(frozenset({1, 2, 3}), {"produce": {T: {1: (190.0, True), 2: (50.0, False)}}})
    managers.set_split("demand")
    managers.set_demand(table)
    managers.set_demand(table)
    assert managers.produce.tenant_quota(T) == pytest.approx(600 - 55 - 20)
    ex.last_ok_ms = now[0]
    asyncio.run(ex.step())  # fails, within the staleness bound: the last table is kept
    assert managers.produce.tenant_quota(T) == pytest.approx(600 - 55 - 20)
    now[0] += 3001
    asyncio.run(ex.step())  # fails past it: equal
    assert ex.falling_back and managers.produce.tenant_quota(T) == 200
    # split=equal: nothing is exchanged, the table is dropped
    config2 = BrokerConfig({"shoal.quota.tenant.split": "equal"})
    ex.config = lambda: config2
    managers.set_demand(table)
    asyncio.run(ex.step())
    assert managers.produce.split == "equal" and managers.produce.tenant_quota(T) == 200
    assert json.loads(encode_reports(reports))["produce"][T][1] == 1


def test_a_lowered_demand_slice_paces_instead_of_muting_for_the_window() -> None:
    """A broker whose slice drops from 490 to 110 B/s after running at 490 for 11 s: with the
    slice as a windowed bound Kafka's throttle would be (490 - 110) / 110 x 11 s, ~38 s; paced,
    the tenant waits about one request's worth at the new rate."""
    m = three_leaders()
    m.set_split("demand")
    for _ in range(2):
        m.set_demand(DemandTable(frozenset({1, 2, 3}), {"produce": {T: {1: (1.0, True), 2: (50.0, False),
                                                                         3: (50.0, False)}}}))
    now = 1_700_000_000_000
    for i in range(110):  # 49 B every 100 ms: 490 B/s
        m.record(T, "u", "c", 49, now + 100 * i)
    now += 11_000
    m.set_demand(DemandTable(frozenset({1, 2, 3}), {"produce": {T: {1: (100.0, False), 2: (200.0, False),
                                                                     3: (200.0, False)}}}))
    slice_ = m.tenant_quota(T)
    assert slice_ == pytest.approx(600 * 110 / 550)  # all fit: in proportion, 120
    quota_ms, pace_ms = m.record(T, "u", "c", 49, now)
    assert quota_ms == 0 and pace_ms <= 1000, (quota_ms, pace_ms)


def test_recent_rate_forgets_the_past_within_the_span() -> None:
    """measure_recent: 2 MB/s for 10 s, then 0.5 MB/s for 3 s: the window's rate still remembers
    the 2 MB/s, the recent rate (2 s) is the new one."""
    from shoal.quotas.rate import RateConfig, WindowedRate

    r = WindowedRate(RateConfig())
    t = 1_700_000_000_000
    for i in range(100):
        r.record(200_000, t + 100 * i)
    t += 10_000
    for i in range(30):
        r.record(50_000, t + 100 * i)
    now = t + 3000
    assert r.measure_used(now) > 1.0 * MB
    assert r.measure_recent(now, 2000) == pytest.approx(0.5 * MB, rel=0.05)
    assert r.measure_recent(now + 60_000, 2000) == 0.0  # idle past the window: nothing recent


# -- a cold start over the cluster (the pacer of a tenant-wide quota) -------------------------------

def test_tenant_pacer_starts_empty_a_quarter_window_deep() -> None:
    """Exact: a tenant sensor's pacer starts with no credit and fills to a quarter window of its
    slice or of the tenant's equal share (quota / leaders), whichever is larger; a client
    sensor's starts full, one window deep (Kafka's TokenBucket)."""
    m = three_leaders()  # 600 B/s tenant-wide, equal: 200 B/s here
    now = 1_700_000_000_000
    assert m.record(T, "u", "c", 100, now) == (0, 500)  # 100 B from nothing at 200 B/s
    assert m.record(T, "u", "c", 0, now + 500) == (0, 0)  # back to zero exactly
    now += 10_500  # idle: refilled to the depth, 50 B, not 200
    assert m.record(T, "u", "c", 50, now) == (0, 0)
    assert m.record(T, "u", "c", 1, now) == (0, 5)
    client = ClientQuotaManager(QuotaType.PRODUCE, node_id=1)
    client.update(image({(("user", "u"),): {"producer_byte_rate": 200}}))
    assert client.record(None, "u", "c", 200, now) == (0, 0)  # a full window
    assert client.record(None, "u", "c", 1, now) == (0, 5)
    # the same under the demand split, whose slice is a cap (the pacer alone enforces it)
    m = three_leaders()
    m.set_split("demand")
    for _ in range(2):
        m.set_demand(DemandTable(frozenset({1, 2, 3}), {"produce": {T: {1: (1.0, True), 2: (50.0, False),
                                                                         3: (50.0, False)}}}))
    sensor = m._handle(T, "u", "c").tenant
    assert (sensor.bound, sensor.cap) == (600, pytest.approx(490.0))
    assert m.record(T, "u", "c", 49, now) == (0, 100)
    # deep a quarter window of its slice (122.5 B) ...
    now += 10_000
    assert m.record(T, "u", "c", 120, now) == (0, 0)
    assert m.record(T, "u", "c", 49, now) == (0, 95)  # 46.5 B short at 490 B/s
    # ... or of the equal share (50 B), whichever is larger: broker 2's slice is 55 B/s
    cold = demand_managers(600, {1: (1.0, True), 2: (50.0, False), 3: (50.0, False)})[2]
    assert cold.tenant_quota(T) == pytest.approx(55.0)
    assert cold._handle(T, "u", "c").tenant.pacer_bytes == pytest.approx(50.0)
    # a leadership move to two leaders: broker 1 held, broker 2 at 55: 545 B/s, 136.25 B deep
    old_img = m._image
    moved = {f"{T}_t": topic(f"{T}_t", [1, 2, 2])}
    m.update(dataclasses.replace(old_img, topics=MappingProxyType(moved),
                                 topics_by_id=MappingProxyType({t.topic_id: t for t in moved.values()})), old_img)
    assert m.tenant_quota(T) == pytest.approx(545.0)
    assert m._handle(T, "u", "c").tenant.pacer_bytes == pytest.approx(136.25)
    # the request quota has no pacer
    req = ClientQuotaManager(QuotaType.REQUEST, node_id=1)
    assert req._new_sensor(10.0, tenant=True).pacer_depth == 1.0


def simulate(managers: dict[int, ClientQuotaManager], offered: dict[int, float], seconds: float, *,
             request: int = 262_144, rtt_ms: int = 5, pause: tuple[int, int] = (0, 0),
             old_pacer: bool = False) -> list[int]:
    """One producer per broker offering ``offered[node]`` bytes/s into a queue of 8 MB, sending up
    to ``request`` bytes whenever it is not muted (a response takes ``rtt_ms``), silent during
    ``pause`` (ms); bytes accepted cluster-wide per 10 ms. ``old_pacer``: the pacer every sensor
    had before (full when made, one window deep)."""
    t0 = 1_700_000_000_000
    buckets = [0] * int(seconds * 100)
    for m in managers.values():
        m.sweep(t0)  # (else the first record's sweep drops the sensor made here, never recorded)
        s = m._handle(T, "u", "c").tenant
        if old_pacer:
            s.pacer_depth, s.pacer_start = 1.0, 1.0
            s.set_pacer_bytes(None)
    events = [(0, node, 0.0, 0) for node in managers]  # (time ms, node, queued bytes, offered until)
    while events:
        events.sort()
        now, node, queued, until = events.pop(0)
        if now >= seconds * 1000:
            continue
        queued = min(8e6, queued + offered[node] * (now - until) / 1000.0)
        if pause[0] <= now < pause[1]:
            events.append((pause[1], node, 0.0, pause[1]))
            continue
        size = int(min(queued, request))
        if size <= 0:
            events.append((now + 10, node, queued, now))
            continue
        buckets[now // 10] += size
        throttle = max(managers[node].record(T, "u", "c", size, t0 + now))
        events.append((now + max(throttle, rtt_ms), node, queued - size, now))
    return buckets


def max_window_rate(buckets: list[int], width_ms: int = 10_000) -> float:
    """The largest mean rate (bytes/s) over any ``width_ms`` of the 10 ms buckets."""
    n = width_ms // 10
    run = sum(buckets[:n])
    best = run
    for i in range(n, len(buckets)):
        run += buckets[i] - buckets[i - n]
        best = max(best, run)
    return best / (width_ms / 1000.0)


def demand_managers(quota: float, reports: dict[int, tuple[float, bool]]) -> dict[int, ClientQuotaManager]:
    img = image({(("tenant", T),): {"producer_byte_rate": quota}},
                topics={f"{T}_t": topic(f"{T}_t", [1, 2, 3])}, brokers=(1, 2, 3))
    img = dataclasses.replace(img, tenants=MappingProxyType({T: TenantInfo(T, "A", 0)}))
    out = {}
    for node in (1, 2, 3):
        m = out[node] = ClientQuotaManager(QuotaType.PRODUCE, node_id=node)
        m.update(img)
        m.set_split("demand")
        for _ in range(2):  # settled: the same table twice
            m.set_demand(DemandTable(frozenset({1, 2, 3}), {"produce": {T: reports}}))
    return out


@pytest.mark.parametrize("case", ["a even", "b 80% to broker 1"])
def test_no_10_s_window_over_the_quota_by_5_percent_at_a_cold_start_or_after_a_pause(case: str) -> None:
    """The bench's cases in simulation: 6 MB/s over three brokers, offered 1.25 x, demand slices
    as they settle (a: 2, 2, 2; b: 4.35, 0.825, 0.825). From a cold start and back from a 5 s
    pause, no 10 s window goes above 105% of the quota, and the tenant gets >= 90% of it; with
    the pacer every sensor had before, the cold start alone reaches ~110%."""
    quota = 6 * MB
    if case == "a even":
        offered = {n: 1.25 * quota / 3 for n in (1, 2, 3)}
        reports = {n: (2 * MB, True) for n in (1, 2, 3)}
    else:
        offered = {1: 1.25 * quota * 0.8, 2: 1.25 * quota * 0.1, 3: 1.25 * quota * 0.1}
        reports = {1: (4 * MB, True), 2: (0.75 * MB, False), 3: (0.75 * MB, False)}
    slices = [demand_managers(quota, reports)[n].tenant_quota(T) for n in (1, 2, 3)]
    assert sum(slices) == pytest.approx(quota)
    buckets = simulate(demand_managers(quota, reports), offered, 40, pause=(20_000, 25_000))
    assert max_window_rate(buckets) <= 1.05 * quota, max_window_rate(buckets) / quota
    cold = sum(buckets[:2000]) / 20 / quota
    assert cold >= 0.9 if case == "a even" else cold >= 0.9 * sum(min(o, s) for o, s in zip(offered.values(), slices)) / quota
    old = simulate(demand_managers(quota, reports), offered, 20, old_pacer=True)
    if case == "a even":
        assert max_window_rate(old) >= 1.08 * quota, max_window_rate(old) / quota


def test_held_means_muted_half_the_time_not_any_throttle() -> None:
    """Exact: a tenant's cumulative muted time (overlapping throttles once), the fraction of a
    span, and the exchange's reports: a client that bursts once in two seconds (muted 500 ms of
    2,000) is not held; one its slice holds back (muted whenever it is not sending) is."""
    from shoal.quotas.sensor import Sensor

    s = Sensor(None)
    s._throttled(0, 100, 1000)
    s._throttled(0, 100, 1050)  # until 1150: 50 more
    s._throttled(30, 0, 1300)
    assert (s.muted_ms, s.muted_until_ms) == (180, 1330)
    assert muted_fraction(1500, 500, 2000) == 0.5
    assert muted_fraction(300, None, 2000) == 0.15 and muted_fraction(300, 900, 2000) == 0.15  # sensor new

    config = BrokerConfig({"shoal.quota.tenant.split": "demand"})
    managers = QuotaManagers(config, 1)
    other = "lkc-bbbbbb"
    img = image({(("tenant", T),): {"producer_byte_rate": 600}, (("tenant", other),): {"producer_byte_rate": 600}},
                topics={f"{T}_t": topic(f"{T}_t", [1, 2, 3]), f"{other}_t": topic(f"{other}_t", [1, 2, 3])},
                brokers=(1, 2, 3))
    managers.update(img)
    ex = DemandExchange(managers, None, 1, lambda: config, lambda: 0)
    t0 = 1_700_000_000_000
    p = managers.produce
    for t in (T, other):
        assert p.record(t, "u", "c", 0, t0) == (0, 0)  # the pacers start (empty, 50 B deep at 200 B/s)
    before = {"produce": p.tenant_muted_ms(), "fetch": {}}
    assert p.record(T, "u", "c", 150, t0 + 1000) == (0, 500)  # a burst: 100 B short, 500 ms
    now = t0
    while now < t0 + 2000:  # greedy: 40 B whenever let in (200 ms each at 200 B/s)
        now += max(p.record(other, "u", "c", 40, now))
    reports = ex.own_reports(t0 + 2000, t0, 1.1, 2000, before)["produce"]
    assert reports[T] == (150.0, False)  # 150 B over the last second, muted 0.25 of 2 s
    assert reports[other][1] is True
    # without a snapshot (the first step) the whole muted time counts: the burst is 0.25 of 2 s
    assert ex.own_reports(t0 + 2000, t0, 1.1, 2000)["produce"][T][1] is False
