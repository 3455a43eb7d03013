"""Broker-wide produce limit with auto-tuned tenant quotas, end to end: four tenants with
tenant-wide quotas 1 : 2 : 3 : 4 produce as fast as they can (confluent-kafka) into a broker whose
combined produce limit is well below their demand; within a few seconds they settle on shares
1 : 2 : 3 : 4 of it (Jain's index over the weighted shares) and stay there, without the bursts and
long mutes of quotas enforced by Kafka's windowed check alone."""

from __future__ import annotations

import asyncio
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from shoal.client import AdminClient as ShoalAdmin
from broker_process import free_port
from tenancy_fixtures import metric, metrics, tenant_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_fairness import produce_flat_out  # noqa: E402  (the benchmark's greedy producer)

MB = 1_000_000
LIMIT = 6 * MB


@pytest.fixture(scope="module")
def cluster():
    yield from tenant_cluster({
        "shoal.broker.produce.byte.rate.limit": str(LIMIT),
        "shoal.quota.autotune.interval.ms": "1000",
        "shoal.metrics.listener": f"http://127.0.0.1:{free_port()}",
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
    seconds = 30
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(tenants)) as pool:
        futures = {t.tenant_id: pool.submit(produce_flat_out, t.conf(), "load", seconds, 10_000, t0) for t in tenants}
        time.sleep(max(0.0, t0 + seconds / 2 - time.monotonic()))
        text = metrics(cluster)  # mid-run: the tuner's state on the Prometheus endpoint
        series = {k: f.result(seconds + 60) for k, f in futures.items()}
    # The tuner engages within a couple of its 1 s intervals, and the dynamic quotas take effect
    # at once (paced): from second 5 on the rates are the shares. librdkafka sends 1 MB requests,
    # so per-second counts are in whole MB; 25 s smooth that to within ~0.04 MB/s.
    tail = {k: sum(v[5:]) / len(v[5:]) for k, v in series.items()}
    rates = [tail[t.tenant_id] for t in tenants]
    per_second = {k: [round(x / MB, 1) for x in v] for k, v in series.items()}
    # Every tenant wants more than its fair share of the limit, so the shares follow the weights
    # (their configured quotas 2 : 4 : 6 : 8 MB/s): 0.6, 1.2, 1.8, 2.4 MB/s of 6 MB/s.
    shares = [r / w for r, w in zip(rates, weights)]
    jain = sum(shares) ** 2 / (len(shares) * sum(x * x for x in shares))
    assert jain >= 0.99, (jain, tail, per_second)
    assert metric(text, "shoal_broker_produce_byte_rate_limit") == LIMIT
    assert metric(text, "shoal_broker_produce_autotune_engaged") == 1
    dynamic = [metric(text, "shoal_tenant_produce_dynamic_quota", tenant=t.tenant_id) for t in tenants]
    assert dynamic == pytest.approx([0.1 * w * LIMIT for w in weights], rel=1e-6), text
    assert 0.9 * LIMIT <= sum(rates) <= 1.1 * LIMIT, (tail, per_second)
    # no oscillation: after the first seconds nobody is muted for long or let through in a burst
    # (one 1 MB request at 0.6 MB/s is muted 1.7 s; a burst at the configured 8 MB/s would show)
    for t, w in zip(tenants, weights):
        steady = series[t.tenant_id][5:]
        assert max(steady) <= 0.6 * w * MB + 1.5 * MB, (t.tenant_id, per_second)
        assert all(sum(steady[i:i + 3]) > 0 for i in range(len(steady) - 2)), (t.tenant_id, per_second)
