"""The metering pipeline end to end (issue 15): two tenants produce and consume over SASL with
real clients, the broker publishes usage windows, ``shoal.metering.pipeline`` runs with
``--once`` (Trigger.AvailableNow) on the session's SparkSession, and the per-tenant totals in its
Parquet tables equal the broker's own counters (``/metrics``) exactly — across a broker restart
(counters back at 0, the sequence going on) and a job restart from its checkpoint (nothing
counted twice). The billing table prices them by the rate card."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from broker_process import free_port  # noqa: E402
from tenancy_fixtures import Tenant, TenantCluster, metric, metrics, tenant_cluster  # noqa: E402

from shoal.metering.pipeline import PipelineOptions, RateCard, run  # noqa: E402
from shoal.metering.publisher import STATE_FILE  # noqa: E402
from shoal.metering.record import USAGE_TOPIC  # noqa: E402

pytestmark = pytest.mark.timeout(900)
COUNTED = ("bytes_in", "messages_in", "bytes_out")
METRIC = {"bytes_in": "shoal_topic_bytes_in_total", "messages_in": "shoal_topic_messages_in_total",
          "bytes_out": "shoal_topic_bytes_out_total"}


@pytest.fixture(scope="module")
def metered():
    yield from tenant_cluster({"shoal.metering.interval.ms": "300",
                               "shoal.metrics.listener": f"http://127.0.0.1:{free_port()}"})


def produce(t: Tenant, n: int, size: int) -> None:
    p = Producer({**t.conf(), "linger.ms": 5, "enable.idempotence": True})
    for i in range(n):
        p.produce("events", bytes([65 + i % 26]) * size, key=str(i).encode())
    assert p.flush(30) == 0


def consume(t: Tenant, n: int) -> None:
    c = Consumer({**t.conf(), "group.id": f"reader-{time.monotonic_ns()}", "auto.offset.reset": "earliest"})
    c.subscribe(["events"])
    got, deadline = 0, time.monotonic() + 60
    while got < n:
        assert time.monotonic() < deadline, f"consumed {got} of {n}"
        got += sum(1 for m in c.consume(500, 0.5) if not m.error())
    c.close()


def counters(cluster: TenantCluster) -> dict[str, dict[str, int]]:
    """Per tenant id: the broker's own counters of topic ``events`` since it started."""
    text = metrics(cluster)
    return {t.tenant_id: {k: int(metric(text, METRIC[k], tenant=t.tenant_id, topic="events") or 0) for k in COUNTED}
            for t in (cluster.a, cluster.b)}


def settle(cluster: TenantCluster) -> None:
    """Wait until a window cut after the last client request is published (no client is
    connected: the counters read before this are final)."""
    state = cluster.broker.data_dir / STATE_FILE

    def seq() -> int:
        try:
            return json.loads(state.read_text())["seq"]
        except (OSError, ValueError):
            return -1

    target, deadline = seq() + 2, time.monotonic() + 30
    while seq() < target:
        assert time.monotonic() < deadline, "usage windows not published"
        time.sleep(0.1)


def add(total: dict, more: dict) -> None:
    for tenant, values in more.items():
        for k, v in values.items():
            total.setdefault(tenant, {}).setdefault(k, 0)
            total[tenant][k] += v


def table_totals(out: Path) -> dict[str, dict[str, int]]:
    rows = pq.read_table(out / "hourly_usage").to_pylist()
    totals: dict[str, dict[str, int]] = {}
    for r in rows:
        add(totals, {r["tenant"]: {k: r[k] for k in COUNTED}})
    return totals


def test_pipeline_totals_equal_the_brokers_counters(spark, metered: TenantCluster):
    a, b = metered.a, metered.b
    out = Path(tempfile.mkdtemp(prefix="shoal-metering-")) / "usage"
    card = RateCard(gb_in=2.0, gb_out=1.0, partition_hour=0.5, gb_month_stored=0.25)
    opts = PipelineOptions(metered.broker.bootstrap, out, card, once=True,
                           client_options={"kafkaConsumer.pollTimeoutMs": "20000"})
    expected: dict = {}
    try:
        produce(a, 300, 200)
        produce(b, 120, 1000)
        consume(b, 120)
        add(expected, counters(metered))
        metered.broker.restart()  # a graceful stop publishes the last window; counters start at 0
        first = run(spark, opts)
        assert first.records > 0
        totals = table_totals(out)
        for t in (a, b):
            assert totals[t.tenant_id] == expected[t.tenant_id], t.tenant_id

        produce(a, 50, 3000)
        consume(a, 350)
        produce(b, 7, 10)
        now = counters(metered)
        assert now[a.tenant_id]["messages_in"] == 50 and now[b.tenant_id]["messages_in"] == 7
        add(expected, now)
        settle(metered)
        second = run(spark, opts)  # from the checkpoint: only what came since
        totals = table_totals(out)
        for t in (a, b):
            assert totals[t.tenant_id] == expected[t.tenant_id], t.tenant_id
        assert expected[a.tenant_id]["messages_in"] == 350 and expected[b.tenant_id]["messages_in"] == 127
        raw = pq.read_table(out / "usage_raw").to_pylist()
        assert len(raw) == first.records + second.records  # every record read once
        assert len({r["incarnation"] for r in raw if r["tenant"] == a.tenant_id}) == 2  # both broker runs

        bill = {r["tenant"]: r for r in pq.read_table(out / "billing").to_pylist()}
        assert set(bill) == {a.tenant_id, b.tenant_id}  # the physical view ("") is not billed
        ra = bill[a.tenant_id]
        assert ra["gb_in"] == pytest.approx(expected[a.tenant_id]["bytes_in"] / 1e9)
        assert ra["cost_in"] == pytest.approx(2.0 * ra["gb_in"])
        assert ra["partition_hours"] > 0 and ra["cost_partitions"] == pytest.approx(0.5 * ra["partition_hours"])
        assert ra["total"] == pytest.approx(ra["cost_in"] + ra["cost_out"] + ra["cost_partitions"] + ra["cost_storage"])
        # tenants do not see the usage topic: not listed, and its name is theirs (prefixed), not the broker's
        for t in (a, b):
            listed = AdminClient(t.conf()).list_topics(timeout=10).topics
            assert USAGE_TOPIC not in listed and not any("usage" in name for name in listed)
        brokers = pq.read_table(out / "broker_usage").to_pylist()
        assert {r["broker"] for r in brokers} == {1}
        assert sum(r["messages_in"] for r in brokers) >= 477  # every tenant's, plus the physical view's
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
