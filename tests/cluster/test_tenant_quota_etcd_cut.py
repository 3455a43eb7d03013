"""Tenant-wide quotas split by demand when a broker is cut off from etcd (shoal.quotas.demand,
"Failures"): three real brokers, broker 3 reaching etcd through a TCP proxy (``ProxiedEtcd``,
as tests/cluster/test_etcd_outage.py), a tenant producing mostly to broker 1's partition.

Cut: broker 3 can neither publish nor read demand; after ``demand.stale.ms`` it goes back to the
equal split (its slice: a third of the quota). Brokers 1 and 2 lose broker 3's report with its
registration (its lease is not renewed): while it still leads the tenant's partition they split
equally too, and once the controller has taken its leadership away they split the quota by demand
over the two of them. Restored: broker 3 registers again, and the three split by demand again.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from cluster_harness import running_cluster, until
# the outage tests' module-scoped fixtures (a three-member etcd of the module's own, since the
# tests cut it; the TCP proxies to it): this module gets its own instances
from test_etcd_outage import etcd, proxies  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_tenant_split import make_tenant, slices  # noqa: E402

pytestmark = pytest.mark.timeout(240)

QUOTA = 1_000_000  # bytes/s, tenant-wide
STALE_MS = 3000


@pytest.fixture(scope="module")
def cluster(etcd, proxies, tmp_path_factory):
    with running_cluster(etcd, tmp_path_factory, "quota-cut", metrics=True, proxied=proxies, through=(3,),
                         overrides={"shoal.quota.tenant.split": "demand",
                                    "shoal.quota.tenant.demand.stale.ms": str(STALE_MS)}) as c:
        try:
            c.wait_controller()
            yield c
        finally:
            proxies.restore()


def producer(conf: dict, topic: str, rate: float, stop: threading.Event) -> None:
    """10 kB records to ``topic`` at ``rate`` bytes/s until ``stop``; what does not fit is dropped."""
    from confluent_kafka import Producer

    p = Producer({"linger.ms": 5, "acks": 1, "queue.buffering.max.kbytes": 4096, "message.timeout.ms": 10000,
                  "log_level": 2, **conf})
    payload = b"q" * 10_000
    t0, sent = time.monotonic(), 0
    while not stop.is_set():
        if sent + len(payload) > rate * (time.monotonic() - t0):
            p.poll(0.005)
            continue
        sent += len(payload)
        try:
            p.produce(topic, payload)
        except BufferError:
            pass
        p.poll(0)
    p.flush(15)


def test_a_broker_cut_off_from_etcd_splits_equally_and_the_others_follow(cluster, proxies):
    c = cluster
    tenant, topics = make_tenant(c, QUOTA, user="cutter")
    tid = tenant.tenant_id
    stop = threading.Event()
    threads = [threading.Thread(target=producer, args=(tenant.conf(), t, r, stop), daemon=True)
               for t, r in (("t1", 1.0 * QUOTA), ("t2", 0.125 * QUOTA))]
    for th in threads:
        th.start()
    try:
        def demand_split(nodes=(1, 2, 3)):
            v = slices(c, tid, list(nodes))
            return v if (len(v) == len(nodes) and v[1] >= 0.5 * QUOTA
                         and sum(v.values()) == pytest.approx(QUOTA, rel=0.02)) else None

        before = until(demand_split, 40, "the demand split, broker 1 with most of the quota")
        assert before[3] < QUOTA / 3, before  # broker 3 sees none of the tenant's traffic: the floor

        proxies.cut()
        cut_at = time.monotonic()
        # broker 3 cannot exchange: it keeps its last table for stale.ms, then splits equally
        fell_at = until(lambda: slices(c, tid, [3]).get(3) == pytest.approx(QUOTA / 3, rel=0.01)
                        and time.monotonic(), 30, "broker 3 back to the equal split")
        # brokers 1 and 2: broker 3's report goes with its registration; once its partition has
        # no leader there, they split the quota by demand over the two of them
        two_at = until(lambda: demand_split((1, 2)) and time.monotonic(), 40,
                       "brokers 1 and 2 splitting the quota by demand between them")
        print(f"cut: broker 3 split equally {fell_at - cut_at:.1f} s after the cut (stale.ms {STALE_MS}); "
              f"brokers 1 and 2 split by demand over two after {two_at - cut_at:.1f} s: "
              f"{slices(c, tid, [1, 2])}")
        assert fell_at - cut_at >= 1.0  # not at once: the last table is kept until it is stale

        proxies.restore()
        restored_at = time.monotonic()
        after = until(demand_split, 60, "the three splitting by demand again")
        print(f"restored: the demand split over three {time.monotonic() - restored_at:.1f} s later: {after}")
    finally:
        stop.set()
        for th in threads:
            th.join(30)
