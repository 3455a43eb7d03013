"""docs/grafana/shoal-broker.json: valid Grafana 10 dashboard JSON whose every query names series
a live broker exports after ordinary traffic (produce, consume in a group, a failed produce, a
wrong password, a throttled client)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

from broker_process import free_port  # noqa: E402
from metrics_scrape import scrape  # noqa: E402
from raw_client import RawClient  # noqa: E402
from tenancy_fixtures import tenant_cluster  # noqa: E402

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "shoal-broker.json"
SERIES = re.compile(r"\b((?:shoal|process)_[a-z0-9_]+)\b")
TIMEOUT = 30.0


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries(d: dict) -> list[str]:
    """Every PromQL text in the dashboard: panel targets and template variable queries."""
    out = [t["expr"] for p in d["panels"] for t in p.get("targets", ())]
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            out.append(v["query"]["query"] if isinstance(v["query"], dict) else v["query"])
    return out


def test_dashboard_is_grafana_10_json_on_a_prometheus_datasource_variable():
    d = dashboard()
    assert d["schemaVersion"] >= 36 and d["uid"] and d["title"]
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    graphs = [p for p in d["panels"] if p["type"] != "row"]
    assert {p["type"] for p in graphs} <= {"timeseries", "stat"}
    for p in graphs:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
            assert t["expr"].count("(") == t["expr"].count(")") and t["expr"].count("{") == t["expr"].count("}")
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"]["uid"] == "${datasource}"
    titles = " ".join(p["title"] for p in graphs).lower()
    for wanted in ("bytes in per topic", "bytes out per topic", "request rate per api", "latency p99",
                   "under-replicated", "isr shrinks", "connections", "consumer lag", "event-loop lag"):
        assert wanted in titles, wanted


@pytest.fixture(scope="module")
def dash_cluster():
    yield from tenant_cluster({"shoal.metrics.listener": f"http://127.0.0.1:{free_port()}"})


def traffic(c) -> None:
    """Produce and consume in a group as tenant a, a produce the topic refuses, a wrong
    password, and the operator's client held to a tiny produce quota."""
    a = c.a
    admin = AdminClient(a.conf())  # kept until the result is in: GC destroys the handle
    admin.create_topics([NewTopic("dash", 1, 1, config={"max.message.bytes": "100000"})])["dash"].result(TIMEOUT)
    p = Producer({**a.conf(), "linger.ms": 5})
    for i in range(50):
        p.produce("dash", b"d" * 500)
    p.flush(TIMEOUT)
    p.produce("dash", b"x" * 200_000)  # MESSAGE_TOO_LARGE (alone: the limit is on the batch)
    p.flush(TIMEOUT)
    consumer = Consumer({**a.conf(), "group.id": "dash-g", "auto.offset.reset": "earliest"})
    consumer.subscribe(["dash"])
    got, deadline = 0, time.monotonic() + TIMEOUT
    while got < 50 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        got += m is not None and m.error() is None
    consumer.commit(asynchronous=False)
    consumer.close()
    with RawClient(c.broker.sasl_bootstrap) as r:
        r.call(17, 1, {"mechanism": "PLAIN"})
        r.call(36, 2, {"auth_bytes": f"\x00{a.user}\x00wrong".encode()})

    from shoal.client import AdminClient as ShoalAdmin

    async def quota() -> None:
        async with ShoalAdmin(c.broker.bootstrap, client_id="dash-admin") as admin:
            await admin.alter_client_quotas([((("client-id", "dash-throttled"),), {"producer_byte_rate": 1000.0})])

    asyncio.run(quota())
    operator = AdminClient(c.operator_conf())
    operator.create_topics([NewTopic("dash-op", 1, 1)])["dash-op"].result(TIMEOUT)
    throttled: list = []  # librdkafka's throttle events: the broker answered with a throttle time
    slow = Producer({**c.operator_conf(), "client.id": "dash-throttled", "linger.ms": 0,
                     "throttle_cb": throttled.append})
    for _ in range(20):  # until the first throttled answer (each after it waits out its throttle)
        slow.produce("dash-op", b"t" * 1000)
        slow.flush(TIMEOUT)
        if throttled:
            break
    time.sleep(1.1)  # a loop-lag probe or two more


def test_every_series_in_the_dashboard_is_exported(dash_cluster):
    traffic(dash_cluster)
    s = scrape(dash_cluster.broker.overrides["shoal.metrics.listener"] + "/metrics")
    wanted = {name for q in queries(dashboard()) for name in SERIES.findall(q)}
    assert len(wanted) > 30
    missing = sorted(wanted - s.names)
    assert not missing, f"the dashboard queries series the broker does not export: {missing}"
    assert s.sum("shoal_throttled_requests_total", api="Produce") > 0
    assert s.sum("shoal_consumer_group_lag", group="dash-g") == 0
