"""Tenant-wide quotas over three real brokers on etcd, split by demand (shoal.quotas.demand):
a tenant with a producer quota, real confluent-kafka producers over SASL, each broker's slice read
from its /metrics. Loose checks only (a loaded 2-core machine): the slices sum to the quota, the
broker that gets most of the traffic gets most of the quota, and after a leader is killed the
survivors' slices sum to the quota again soon after the leadership moves; and a consumer quota
split by demand gives the tenant at least 90% of it cluster-wide, never over 105% in 10 s."""

from __future__ import annotations

import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from cluster_harness import until

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_tenant_split import (consume_paced, make_tenant, max_window, preload, produce_paced,  # noqa: E402
                                scrape, slices, start_cluster)
from tenancy_fixtures import metric  # noqa: E402

QUOTA = 1_000_000  # bytes/s, tenant-wide


@pytest.fixture(scope="module")
def split_cluster(etcd_cluster, tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("split"), etcd_cluster.url(f"/split-{uuid.uuid4().hex[:8]}"),
                      "demand")
    try:
        yield c
    finally:
        c.close()


def leaders(bootstrap: str, names: list[str]) -> dict[str, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {n: md.topics[n].partitions[0].leader for n in names}


def test_consumer_quota_split_by_demand_holds_the_cluster_wide_fetch_rate(split_cluster):
    """A tenant-wide consumer_byte_rate of 1 MB/s over three leaders, consumers taking 80% of
    1.25 x the quota from broker 1's topic and 10% from each of the others (the bench's case b):
    the hot broker gets the largest slice, the tenant's fetch rate over the cluster never goes
    above it (no 10 s window over 105%, the start included), and after the first 8 s it reaches
    the issue's 90% of it (equal gives 1/3 + 0.125 + 0.125 = 58%).

    Measured 92.1-92.9% (windows <= 94.6%) over three runs at load 8-12 on 2 cores
    (docs/benchmarks.md); 71-79% before a cold consumer's bursts (whole 64 KiB batches, a
    256 kB prefetch refill) stopped counting as held (shoal.quotas.demand.is_held)."""
    c = split_cluster
    tenant, topics = make_tenant(c, QUOTA, key="consumer_byte_rate", user="fetcher")
    physical = [f"{tenant.prefix}{t}" for t in topics.values()]
    until(lambda: leaders(c[1].bootstrap, physical) == {physical[0]: 1, physical[1]: 2, physical[2]: 3},
          30, "preferred leaders 1, 2, 3")
    seconds, settled = 24, 8
    rates = {"t1": 1.0 * QUOTA, "t2": 0.125 * QUOTA, "t3": 0.125 * QUOTA}
    preload(tenant.conf(), rates, seconds)  # what each consumer can take in the run, and some; 64 KiB batches
    t0 = time.monotonic() + 1.0
    results: dict[str, list[int]] = {}
    threads = [threading.Thread(target=lambda t=t, r=r: results.__setitem__(
        t, consume_paced(tenant.conf(), t, r, seconds, t0)), daemon=True) for t, r in rates.items()]
    for th in threads:
        th.start()
    mid: dict[int, float] = {}
    time.sleep(max(0.0, t0 + seconds - 3 - time.monotonic()))
    mid.update(slices(c, tenant.tenant_id, quota_type="fetch"))
    for th in threads:
        th.join(seconds + 60)
    total = [sum(v[i] for v in results.values()) for i in range(seconds)]
    steady = sum(total[settled:]) / (seconds - settled) / QUOTA
    per_topic = {t: round(sum(v[settled:]) / (seconds - settled) / QUOTA, 3) for t, v in sorted(results.items())}
    print(f"fetch: {steady:.1%} of the quota after {settled} s; largest 10 s window {max_window(total) / QUOTA:.1%}; "
          f"per topic {per_topic}; slices {mid}; per second {[round(x / QUOTA, 2) for x in total]}")
    # never more than the quota (a slice rises only when two tables grant it, so while demands
    # move the slices may sum to less), the most to the hot broker
    assert len(mid) == 3 and sum(mid.values()) <= 1.02 * QUOTA and mid[1] == max(mid.values()), mid
    assert steady >= 0.9, (steady, per_topic, total)
    assert max_window(total) <= 1.05 * QUOTA, total


def test_a_consumer_quota_holds_across_the_leader_and_followers_serving_the_tenant(split_cluster):
    """Issue 24 (6): a one-partition tenant (RF 3, led by broker 1) with a tenant-wide consumer
    quota, read by three greedy consumers in racks dc1, dc2, dc3: the leader sends two of them to
    its followers (KIP-392). A follower leads none of the tenant's partitions and enforced the
    equal share of its leaders, the whole quota: the tenant read at 2.58x it. Every broker that
    serves the tenant takes part in the demand split, so no 10 s window is over 105% of the quota;
    the followers did serve, and the tenant gets most of its quota."""
    c = split_cluster
    tenant, topics = make_tenant(c, QUOTA, rf=3, key="consumer_byte_rate", user="rack-reader", leaders=(1,))
    topic = f"{tenant.prefix}t1"
    until(lambda: leaders(c[1].bootstrap, [topic]) == {topic: 1}, 30, "broker 1 leading t1")
    seconds = 20
    preload(tenant.conf(), {"t1": 1.5 * QUOTA}, seconds)  # more than the three can take in the run
    t0 = time.monotonic() + 1.0
    results: dict[str, list[int]] = {}
    threads = [threading.Thread(target=lambda r=rack: results.__setitem__(
        r, consume_paced({**tenant.conf(), "client.rack": r}, "t1", QUOTA, seconds, t0)), daemon=True)
        for rack in ("dc1", "dc2", "dc3")]
    for th in threads:
        th.start()
    for th in threads:
        th.join(seconds + 60)
    total = [sum(v[i] for v in results.values()) for i in range(seconds)]
    served = {n: metric(scrape(c[n].overrides["shoal.metrics.listener"]), "shoal_consumer_bytes_out_by_rack_total",
                        client_rack=f"dc{n}", served_as="follower") or 0.0 for n in (2, 3)}
    per_rack = {r: round(sum(v) / seconds / QUOTA, 3) for r, v in sorted(results.items())}
    print(f"read {sum(total) / seconds / QUOTA:.1%} of the quota; largest 10 s window {max_window(total) / QUOTA:.1%}; "
          f"per rack {per_rack}; served by followers {served}; per second {[round(x / QUOTA, 2) for x in total]}")
    assert min(served.values()) > 0, served  # both followers served their rack's consumer
    assert max_window(total) <= 1.05 * QUOTA, total  # was 2.58x: each follower let the whole quota through
    assert sum(total[8:]) / (seconds - 8) >= 0.6 * QUOTA, total


def test_demand_split_follows_traffic_and_leadership(split_cluster):
    c = split_cluster
    tenant, topics = make_tenant(c, QUOTA, rf=3)
    physical = [f"{tenant.prefix}{t}" for t in topics.values()]
    until(lambda: leaders(c[1].bootstrap, physical) == {physical[0]: 1, physical[1]: 2, physical[2]: 3},
          30, "preferred leaders 1, 2, 3")
    # Before any traffic every leader reports no demand: each gets its equal share.
    until(lambda: (v := slices(c, tenant.tenant_id)) and len(v) == 3
          and all(x == pytest.approx(QUOTA / 3, rel=0.01) for x in v.values()), 20, "equal slices on /metrics")

    # 80% of 1.25 x the quota to broker 1's topic, 10% to each of the others, in threads, for
    # up to 60 s: they stop once the checks below are done (or failed).
    seconds = 60
    t0 = time.monotonic() + 1.0
    rates = {"t1": 1.0 * QUOTA, "t2": 0.125 * QUOTA, "t3": 0.125 * QUOTA}
    results: dict[str, list[int]] = {}
    stop = threading.Event()
    threads = [threading.Thread(target=lambda t=t, r=r: results.__setitem__(
        t, produce_paced(tenant.conf(), t, r, seconds, t0, stop=stop)), daemon=True) for t, r in rates.items()]
    for th in threads:
        th.start()
    try:
        # The hot broker's slice grows well past its equal share (1/3): the others keep ~1.1 x
        # their 0.125 plus the floor, so it settles near 0.72 of the quota.
        def hot() -> dict[int, float] | None:
            v = slices(c, tenant.tenant_id)
            ok = len(v) == 3 and v[1] >= 0.5 * QUOTA and sum(v.values()) == pytest.approx(QUOTA, rel=0.02)
            return v if ok else None

        s = until(hot, 40, "broker 1's slice above half the quota, the slices summing to it")
        assert min(s[2], s[3]) >= 0.1 * QUOTA / 3 * 0.99, s  # the floor

        # Kill broker 3 (leader of t3). Once a survivor's Metadata shows t3's new leader, the
        # survivors' slices must sum to the quota within 2 s (they are recomputed on the image
        # change; the exchange only refines them).
        c.kill(3)
        moved_at = until(lambda: leaders(c[1].bootstrap, physical)[physical[2]] in (1, 2) and time.monotonic(),
                         30, "t3's leadership moved")
        summed_at = until(
            lambda: (v := slices(c, tenant.tenant_id, [1, 2])) and len(v) == 2
            and sum(v.values()) == pytest.approx(QUOTA, rel=0.01) and time.monotonic(),
            30, "the survivors' slices summing to the quota")
        print(f"survivors' slices summed to the quota {summed_at - moved_at:.2f} s after the move was seen")
        # The 2 s is measured by bench/bench_tenant_split.py (0.05-0.73 s); here the two
        # polls themselves (Metadata, then every survivor's slices) add up on a loaded machine: a
        # whole-suite run at load 12-19 saw 2.008 s. 3 s still fails a split that waits for the
        # next demand exchange round or a stale report (>= stale.ms).
        assert summed_at - moved_at <= 3.0, (summed_at - moved_at, slices(c, tenant.tenant_id, [1, 2]))
    finally:
        stop.set()
        ran = min(max(time.monotonic() - t0, 0.0), seconds)
        for th in threads:
            th.join(seconds + 60)
    # The tenant got traffic through while its slices were being exchanged (at least 15% of its
    # quota over the time the producers ran).
    assert sum(sum(v) for v in results.values()) > 0.3 * QUOTA * ran / 2, {
        k: [round(x / 1e6, 2) for x in v] for k, v in results.items()}
