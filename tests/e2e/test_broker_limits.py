"""Broker-wide produce limit with auto-tuned tenant quotas, end to end: four tenants with
tenant-wide quotas 1 : 2 : 3 : 4 produce as fast as they can (confluent-kafka) into a broker whose
combined produce limit is well below their demand; they settle on shares 1 : 2 : 3 : 4 within it
(Jain's index over the weighted shares)."""

from __future__ import annotations

import asyncio
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from shoal.client import AdminClient as ShoalAdmin
from tenancy_fixtures import tenant_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_fairness import produce_flat_out  # noqa: E402  (the benchmark's greedy producer)

MB = 1_000_000
LIMIT = 6 * MB


@pytest.fixture(scope="module")
def cluster():
    yield from tenant_cluster({
        "shoal.broker.produce.byte.rate.limit": str(LIMIT),
        "shoal.quota.autotune.interval.ms": "1000",
    })


def test_four_saturating_tenants_settle_on_weighted_shares_within_the_limit(cluster):
    tenants = [cluster.a, cluster.b, cluster.create_tenant("C", "carol"), cluster.create_tenant("D", "dave")]
    weights = [1, 2, 3, 4]

    async def set_quotas() -> None:
        async with ShoalAdmin(cluster.broker.bootstrap, client_id="operator") as admin:
            await admin.alter_client_quotas([
                ([("tenant", t.tenant_id)], {"producer_byte_rate": 2 * w * MB}) for t, w in zip(tenants, weights)
            ])

    asyncio.run(set_quotas())
    for t in tenants:
        admin = AdminClient(t.conf())
        admin.create_topics([NewTopic("load", 1, 1)])["load"].result(15)
    seconds = 40
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(tenants)) as pool:
        futures = {t.tenant_id: pool.submit(produce_flat_out, t.conf(), "load", seconds, 10_000, t0) for t in tenants}
        series = {k: f.result(seconds + 60) for k, f in futures.items()}
    tail = {k: sum(v[-22:]) / 22 for k, v in series.items()}  # the last two quota windows
    rates = [tail[t.tenant_id] for t in tenants]
    per_second = {k: [round(x / MB, 1) for x in v] for k, v in series.items()}
    # Every tenant wants more than its fair share of the limit, so the shares follow the weights
    # (their configured quotas 2 : 4 : 6 : 8 MB/s): 0.6, 1.2, 1.8, 2.4 MB/s of 6 MB/s.
    shares = [r / w for r, w in zip(rates, weights)]
    jain = sum(shares) ** 2 / (len(shares) * sum(x * x for x in shares))
    assert jain >= 0.95, (jain, tail, per_second)
    assert 0.6 * LIMIT <= sum(rates) <= 1.15 * LIMIT, (tail, per_second)
