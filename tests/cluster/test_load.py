"""The balancer's per-partition load (shoal.cluster.load), without brokers: the report codec
(round trip, the size of 10,000 partitions, the version, garbage), the rates over the window on a
manual clock, staleness, the reader's view for the balancer, capacity, the embedded store's
reporter and the admin API's route. The real thing, on three brokers with real clients:
tests/cluster/test_load_cluster.py."""

from __future__ import annotations

import asyncio
import json
import random
import zlib
from dataclasses import dataclass

import pytest

from shoal.clock import ManualClock
from shoal.cluster.balancer.model import Capacity, PartitionLoad
from shoal.cluster.load import (
    CODEC_VERSION,
    BrokerCapacity,
    BrokerReport,
    ClusterLoad,
    LedLoad,
    LoadMeter,
    LoadReporter,
    cluster_load_json,
    decode_report,
    encode_report,
    load_key_prefix,
    measure_capacity,
    read_cluster_load,
)
from shoal.config import BrokerConfig
from shoal.quotas.demand import Freshness


@dataclass
class FakeLog:
    size_bytes: int = 0


@dataclass
class FakePartition:
    """What the meter reads of a hosted Partition."""

    topic: str
    index: int
    is_leader: bool = True
    leader_epoch: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    bytes_replicated: int = 0
    view: FakeLog | None = None

    def __post_init__(self) -> None:
        if self.view is None:
            self.view = FakeLog()


CAP = BrokerCapacity(disk_bytes=10**12, disk_used=4 * 10**11, network_in=125_000_000, network_out=250_000_000,
                     disk_write=500_000_000)


def report_of(n_topics: int, per_topic: int, node: int = 1, seed: int = 7, name: str = "lkc-{i:06d}_orders.events") -> BrokerReport:
    rnd = random.Random(seed)
    led, sizes, out = {}, {}, {}
    for i in range(n_topics):
        topic = name.format(i=i)
        for p in range(per_topic):
            key = (topic, p)
            size = rnd.randrange(0, 50 * 2**30)
            sizes[key] = size
            if rnd.random() < 0.5:
                led[key] = LedLoad(rnd.randrange(0, 1000), float(rnd.randrange(0, 10**8)),
                                   float(rnd.randrange(0, 10**8)), float(rnd.randrange(0, 2 * 10**8)), size)
            elif rnd.random() < 0.2:
                out[key] = float(rnd.randrange(1, 10**7))
    return BrokerReport(node, 60_000, CAP, led, sizes, out)


# -- the codec ------------------------------------------------------------------------------------

def test_round_trip():
    r = report_of(5, 7)
    back = decode_report(encode_report(r))
    assert back == r
    assert back.bytes_in == r.bytes_in and back.log_bytes == r.log_bytes and not back.truncated


def test_round_trip_empty_and_odd_names():
    r = BrokerReport(3, 0, BrokerCapacity())
    assert decode_report(encode_report(r)) == r
    odd = BrokerReport(2, 1500, CAP, {("t.with \"quotes\" é", 0): LedLoad(1, 2.0, 3.0, 4.0, 5)},
                       {("t.with \"quotes\" é", 0): 5, ("x", 9): 0})
    assert decode_report(encode_report(odd)) == odd


@pytest.mark.parametrize("n_topics,per_topic,name", [
    (100, 100, "lkc-{i:06d}_orders.events"),
    (10_000, 1, "lkc-{i:06d}_orders.events.v2.{i}"),  # a topic each: names dominate
])
def test_ten_thousand_partitions_fit_well_under_etcds_limit(n_topics, per_topic, name):
    r = report_of(n_topics, per_topic, name=name)
    assert len(r.sizes) == 10_000
    value = encode_report(r)
    assert len(value) < 400_000, len(value)  # etcd: 1.5 MiB per request
    back = decode_report(value)
    assert back == r and not back.truncated


def test_a_report_over_the_bound_keeps_the_busiest_led_partitions():
    r = report_of(100, 100)
    value = encode_report(r, max_bytes=40_000)
    assert len(value) <= 40_000
    back = decode_report(value)
    assert back.truncated
    assert 0 < len(back.led) < len(r.led) and not set(back.sizes) - set(back.led)  # other replicas went first
    kept_min = min(v.bytes_in + v.bytes_out for v in back.led.values())
    dropped_max = max(v.bytes_in + v.bytes_out for k, v in r.led.items() if k not in back.led)
    assert kept_min >= dropped_max
    assert all(r.led[k] == v for k, v in back.led.items())


def _packed(body) -> bytes:
    return zlib.compress(json.dumps(body).encode())


def test_version_check():
    good = json.loads(zlib.decompress(encode_report(report_of(2, 2))))
    assert decode_report(_packed(good)).node == 1
    for v in (CODEC_VERSION + 1, 0, "1", None):
        with pytest.raises(ValueError, match="version"):
            decode_report(_packed({**good, "v": v}))


@pytest.mark.parametrize("value", [
    b"", b"garbage", b"\x78\x9c" + b"\x00" * 10, zlib.compress(b"not json"), zlib.compress(b"[1,2]"),
    zlib.compress("{\"v\":1,\"n\":1,\"w\":0,\"c\":[0,0,0,0,0],\"t\":{\"a\":{\"l\":[[0,0,-5,0,0,0]]}}}".encode()),
    zlib.compress(b'{"v":1,"n":1,"w":0,"c":[0,0,0,0,0],"t":{"a":{"l":[[0,0,1,0,0]]}}}'),
    zlib.compress(b'{"v":1,"n":1,"w":0,"c":[0,0,0,0,0],"t":{"a":{"r":[[0,1.5,0]]}}}'),
    zlib.compress(b'{"v":1,"n":1,"w":0,"c":[0,0,0,0],"t":{}}'),
    zlib.compress(b'{"v":1,"n":"1","w":0,"c":[0,0,0,0,0],"t":{}}'),
    zlib.compress(b'{"v":1,"n":1,"w":0,"c":[0,0,0,0,0],"t":[]}'),
    zlib.compress(b'{"v":1,"n":1,"w":0,"c":[0,0,0,0,0],"t":{"a":[1]}}'),
    zlib.compress(b" " * (70 * 1024 * 1024)),  # inflates past the bound
])
def test_garbage_is_refused(value):
    with pytest.raises(ValueError):
        decode_report(value)


def test_the_reader_ignores_garbage_and_other_keys():
    prefix = load_key_prefix("/shoal")
    assert prefix == b"/shoal.balancer-load/"
    bad: list[bytes] = []
    kvs = [(prefix + b"1", encode_report(report_of(1, 3, node=1)), 10),
           (prefix + b"2", b"\x00garbage", 11),
           (prefix + b"x", encode_report(report_of(1, 3, node=3)), 12)]
    load = read_cluster_load(kvs, prefix, Freshness(), 0, 30_000, lambda k, why: bad.append(k))
    assert set(load.reports) == {1} and bad == [prefix + b"2", prefix + b"x"]


# -- rates ----------------------------------------------------------------------------------------

def test_rates_over_the_window_on_a_manual_clock():
    clock = ManualClock()
    meter = LoadMeter(window_ms=30_000)
    a = FakePartition("t", 0, leader_epoch=4, view=FakeLog(123))
    f = FakePartition("t", 1, is_leader=False)
    first = meter.sample(clock.now_ms(), [a, f], 1, CAP)
    assert first.window_ms == 0 and first.led[("t", 0)].bytes_in == 0.0  # nothing to measure against yet
    for _ in range(3):  # 1000 B/s in, 500 out, 2000 to followers; a follower serving 100 B/s
        clock.sleep(10)
        a.bytes_in += 10_000
        a.bytes_out += 5_000
        a.bytes_replicated += 20_000
        f.bytes_out += 1_000
        r = meter.sample(clock.now_ms(), [a, f], 1, CAP)
        assert r.led[("t", 0)] == LedLoad(4, 1000.0, 500.0, 2000.0, 123)
        assert r.follower_out == {("t", 1): 100.0} and r.sizes == {("t", 0): 123, ("t", 1): 0}
    assert r.window_ms == 30_000 and r.bytes_out == 600.0
    # a burst of 300 kB in one interval: in the window for 30 s, gone after
    clock.sleep(10)
    a.bytes_in += 300_000
    r = meter.sample(clock.now_ms(), [a], 1, CAP)
    assert r.window_ms == 30_000 and r.led[("t", 0)].bytes_in == pytest.approx((20_000 + 300_000) / 30)
    for expected in (310_000 / 30, 300_000 / 30):  # the window slides past the steady bytes, then the burst
        clock.sleep(10)
        assert meter.sample(clock.now_ms(), [a], 1, CAP).led[("t", 0)].bytes_in == pytest.approx(expected)
    clock.sleep(10)
    assert meter.sample(clock.now_ms(), [a], 1, CAP).led[("t", 0)].bytes_in == 0.0


def test_a_new_or_remade_partition_counts_from_zero():
    clock = ManualClock()
    meter = LoadMeter(window_ms=60_000)
    old = FakePartition("t", 0, bytes_in=1_000_000)
    meter.sample(clock.now_ms(), [old], 1, CAP)
    clock.sleep(20)
    new = FakePartition("t", 1, bytes_in=4_000)  # created after the first sample
    remade = FakePartition("t", 0, bytes_in=2_000)  # deleted and made again: its counters restart
    r = meter.sample(clock.now_ms(), [remade, new], 1, CAP)
    assert r.led[("t", 1)].bytes_in == 200.0 and r.led[("t", 0)].bytes_in == 100.0


def test_a_leadership_that_moved_here_is_measured_over_the_time_since():
    clock = ManualClock()
    meter = LoadMeter(window_ms=60_000)
    p = FakePartition("t", 0, is_leader=False, leader_epoch=3)
    for _ in range(4):  # a follower for 30 s
        meter.sample(clock.now_ms(), [p], 1, CAP)
        clock.sleep(10)
    p.is_leader, p.leader_epoch = True, 4  # the leadership moves here; 10 kB/s from then on
    p.bytes_in += 100_000
    r = meter.sample(clock.now_ms(), [p], 1, CAP)
    # over the 10 s since the last sample, not the 40 s window (2,500 B/s: the balancer took the
    # partition for a quarter of its load and moved more, or moved it back)
    assert r.window_ms == 40_000 and r.led[("t", 0)].bytes_in == pytest.approx(10_000)
    clock.sleep(10)
    p.bytes_in += 100_000
    assert meter.sample(clock.now_ms(), [p], 1, CAP).led[("t", 0)].bytes_in == pytest.approx(10_000)
    # ... until the window holds only its leadership: then the window as usual
    for _ in range(6):
        clock.sleep(10)
        p.bytes_in += 100_000
        r = meter.sample(clock.now_ms(), [p], 1, CAP)
    assert r.window_ms == 60_000 and r.led[("t", 0)].bytes_in == pytest.approx(10_000)


def test_a_partition_without_a_log_is_left_out():
    p = FakePartition("t", 0)
    p.view = None
    assert LoadMeter(1000).sample(0, [p], 1, CAP).sizes == {}


# -- the cluster's view ---------------------------------------------------------------------------

def test_stale_reports_are_left_out():
    prefix = load_key_prefix("/c")
    fresh = Freshness()
    kvs = [(prefix + b"1", encode_report(report_of(1, 2, node=1)), 5),
           (prefix + b"2", encode_report(report_of(1, 2, node=2)), 6)]
    assert set(read_cluster_load(kvs, prefix, fresh, 0, 3000).reports) == {1, 2}
    kvs[0] = (kvs[0][0], kvs[0][1], 9)  # broker 1 published again, broker 2 did not
    load = read_cluster_load(kvs, prefix, fresh, 3001, 3000)
    assert set(load.reports) == {1} and load.stale == {2}
    kvs[1] = (kvs[1][0], kvs[1][1], 10)
    assert set(read_cluster_load(kvs, prefix, fresh, 3002, 3000).reports) == {1, 2}


def test_the_balancers_inputs():
    cap2 = BrokerCapacity(disk_bytes=500, disk_used=100)
    old = BrokerReport(1, 60_000, CAP, {("t", 0): LedLoad(3, 10.0, 20.0, 30.0, 400)}, {("t", 0): 400, ("u", 0): 7})
    new = BrokerReport(2, 20_000, cap2, {("t", 0): LedLoad(4, 1.0, 2.0, 3.0, 390), ("u", 0): LedLoad(1, 5.0, 0.0, 0.0, 8)},
                       {("t", 0): 390, ("u", 0): 8})
    load = ClusterLoad({1: old, 2: new})
    assert load.capacities() == {1: Capacity(disk=1e12, nw_in=125e6, nw_out=250e6), 2: Capacity(disk=500.0)}
    assert load.leaders() == {("t", 0): 2, ("u", 0): 2}  # the newer leader epoch
    assert load.partition_loads() == {("t", 0): PartitionLoad(1.0, 2.0, 390.0), ("u", 0): PartitionLoad(5.0, 0.0, 8.0)}
    assert load.replica_sizes() == {("t", 0): {1: 400, 2: 390}, ("u", 0): {1: 7, 2: 8}}
    d = cluster_load_json(load)
    assert [b["node_id"] for b in d["brokers"]] == [1, 2]
    assert d["brokers"][1]["bytes_in_per_second"] == 6 and d["brokers"][1]["log_bytes"] == 398
    assert d["partitions"][0] == {"topic": "t", "partition": 0, "leader": 2, "window_ms": 20_000,
                                  "bytes_in_per_second": 1, "bytes_out_per_second": 2,
                                  "replication_bytes_out_per_second": 3, "size_bytes": 390,
                                  "replica_sizes": {"1": 400, "2": 390}}


def test_capacity(tmp_path):
    cfg = BrokerConfig({"shoal.balancer.capacity.network.in.bytes.per.second": "1000",
                        "shoal.balancer.capacity.network.out.bytes.per.second": "2000"})
    c = measure_capacity(cfg, [str(tmp_path), str(tmp_path / "missing"), str(tmp_path)], 55)
    assert 0 < c.disk_used < c.disk_bytes and (c.network_in, c.network_out, c.disk_write) == (1000, 2000, 0)
    cfg = BrokerConfig({"shoal.balancer.capacity.disk.bytes": "10000000000",
                        "shoal.balancer.capacity.disk.write.bytes.per.second": "300000000"})
    assert measure_capacity(cfg, [str(tmp_path)], 55) == BrokerCapacity(10**10, 55, 0, 0, 300_000_000)
    assert measure_capacity(BrokerConfig({}), [str(tmp_path / "missing")], 0) == BrokerCapacity()


def test_the_embedded_store_reports_its_own_load(tmp_path):
    clock = ManualClock()
    parts = [FakePartition("t", 0, view=FakeLog(10)), FakePartition("t", 1, is_leader=False, view=FakeLog(20))]
    cfg = BrokerConfig({"shoal.balancer.load.interval.ms": "1000"})
    reporter = LoadReporter(7, lambda: parts, [str(tmp_path)], lambda: cfg, clock.now_ms)

    async def go() -> ClusterLoad:
        first = await reporter.cluster_load()  # measured on first use
        assert set(first.reports) == {7}
        clock.sleep(2)
        parts[0].bytes_in += 4000
        await reporter.step()
        return reporter.latest

    load = asyncio.run(go())
    assert load.partition_loads() == {("t", 0): PartitionLoad(2000.0, 0.0, 10.0)}
    assert load.reports[7].sizes == {("t", 0): 10, ("t", 1): 20} and load.reports[7].capacity.disk_bytes > 0


def test_the_admin_route_is_the_operators():
    from shoal.admin.http import AdminHttpServer, openapi
    from shoal.admin.http_errors import HttpError

    load = ClusterLoad({1: report_of(1, 2)})

    async def source() -> ClusterLoad:
        return load

    server = AdminHttpServer(None, "127.0.0.1", 0, cluster_load=source)  # type: ignore[arg-type]
    status, body = asyncio.run(server.route("GET", "/v1/cluster/load", b""))
    assert status == 200 and body == cluster_load_json(load)
    with pytest.raises(HttpError) as e:
        asyncio.run(server.route("GET", "/v1/cluster/load", b"", caller="lkc-abcdef"))
    assert e.value.status == 403
    with pytest.raises(HttpError) as e:
        asyncio.run(server.route("POST", "/v1/cluster/load", b""))
    assert e.value.status == 405
    assert "/v1/cluster/load" in openapi()["paths"]
