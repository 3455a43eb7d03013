"""Broker-wide produce limit with auto-tuned tenant quotas, end to end: two tenants with
tenant-wide quotas 1 : 3 produce as fast as they can (confluent-kafka) into a broker whose
combined produce limit is well below their demand; they settle on shares 1 : 3 within it."""

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


def test_two_saturating_tenants_settle_on_weighted_shares_within_the_limit(cluster):
    a, b = cluster.a, cluster.b

    async def set_quotas() -> None:
        async with ShoalAdmin(cluster.broker.bootstrap, client_id="operator") as admin:
            await admin.alter_client_quotas([
                ([("tenant", a.tenant_id)], {"producer_byte_rate": 4 * MB}),
                ([("tenant", b.tenant_id)], {"producer_byte_rate": 12 * MB}),
            ])

    asyncio.run(set_quotas())
    for t in (a, b):
        admin = AdminClient(t.conf())
        admin.create_topics([NewTopic("load", 1, 1)])["load"].result(15)
    seconds = 40
    t0 = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        futures = {t.tenant_id: pool.submit(produce_flat_out, t.conf(), "load", seconds, 10_000, t0) for t in (a, b)}
        series = {k: f.result(seconds + 60) for k, f in futures.items()}
    tail = {k: sum(v[-22:]) / 22 for k, v in series.items()}  # the last two quota windows
    ra, rb = tail[a.tenant_id], tail[b.tenant_id]
    # fair shares of 6 MB/s by weights 4 : 12 are 1.5 and 4.5 MB/s (both tenants saturated)
    per_second = {k: [round(x / MB, 1) for x in v] for k, v in series.items()}
    assert 2.4 <= rb / ra <= 3.6, (tail, per_second)
    assert 0.6 * LIMIT <= ra + rb <= 1.15 * LIMIT, (tail, per_second)
