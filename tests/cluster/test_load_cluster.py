"""Per-partition load on three real brokers on etcd (shoal.cluster.load): confluent-kafka produces
a known amount to a replicated partition and a consumer reads it back; ``shoal cluster load
--output json`` (a real subprocess, over the HTTP admin API with basic authentication) shows the
partition's leader taking those bytes in and sending them out, twice that to its two followers,
its size on all three replicas and every broker's capacity. A tenant's administrator is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker_process import http_json
from cluster_harness import running_cluster

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
WINDOW_MS = 300_000  # all of the test's traffic stays in the window
NET_IN, NET_OUT = 125_000_000, 250_000_000
ADMIN = ("admin", "admin-secret")
OVERRIDES = {
    "shoal.balancer.load.interval.ms": "300",
    "shoal.balancer.load.window.ms": str(WINDOW_MS),
    "shoal.balancer.capacity.network.in.bytes.per.second": str(NET_IN),
    "shoal.balancer.capacity.network.out.bytes.per.second": str(NET_OUT),
    "shoal.admin.authentication": "basic",
    "super.users": "User:ANONYMOUS;User:admin",  # the PLAINTEXT listener's clients, the admin API's operator
    "shoal.sasl.bootstrap.users": f"{ADMIN[0]}:{ADMIN[1]}",
}
RECORDS, VALUE_BYTES = 2000, 1000


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "load", overrides=OVERRIDES) as c:
        yield c


def shoal_load(admin_url: str, user: tuple[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_ADMIN_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(SHOAL_ADMIN_USER=user[0], SHOAL_ADMIN_PASSWORD=user[1])
    return subprocess.run([sys.executable, "-m", "shoal", "cluster", "load", "--output", "json",
                           "--admin-url", admin_url, "--timeout", "10"], capture_output=True, text=True, timeout=60,
                          env=env)


def partition_of(d: dict[str, Any], topic: str) -> dict[str, Any] | None:
    return next((p for p in d["partitions"] if p["topic"] == topic and p["partition"] == 0), None)


def test_load_of_a_produced_and_consumed_partition(cluster):
    topic = f"load-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "linger.ms": 20,
                         "compression.type": "none"})
    delivered: list[Any] = []
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(topic, value=bytes([97 + i % 26]) * VALUE_BYTES,
                                 on_delivery=lambda err, msg: delivered.append(err))
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0
    assert len(delivered) == RECORDS and not any(delivered)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got, deadline = 0, time.monotonic() + 60
    while got < RECORDS and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got += 1
    consumer.close()
    assert got == RECORDS
    payload = RECORDS * VALUE_BYTES

    # the reports follow within a few intervals: the leader's bytes in over its window cover what
    # was produced, and the followers have fetched all of it
    url = cluster[1].admin_url
    deadline, d, p = time.monotonic() + 30, None, None
    while time.monotonic() < deadline:
        r = shoal_load(url, ADMIN)
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        p = partition_of(d, topic)
        if (p is not None and len(d["brokers"]) == 3 and len(p["replica_sizes"]) == 3
                and p["bytes_in_per_second"] * p["window_ms"] / 1000 >= payload
                and p["replication_bytes_out_per_second"] * p["window_ms"] / 1000 >= 2 * payload
                and p["bytes_out_per_second"] * p["window_ms"] / 1000 >= payload):
            break
        time.sleep(0.5)
    assert d is not None and p is not None, d
    window_s = p["window_ms"] / 1000
    assert 0 < window_s <= WINDOW_MS / 1000
    bytes_in = p["bytes_in_per_second"] * window_s
    bytes_out = p["bytes_out_per_second"] * window_s
    replicated = p["replication_bytes_out_per_second"] * window_s
    # record batches: the values plus a few bytes per record and 61 per batch; rates are whole B/s
    assert payload <= bytes_in + window_s <= payload * 1.05, (bytes_in, payload, p)
    assert bytes_in * 0.95 <= bytes_out <= bytes_in * 1.05 + window_s, (bytes_out, bytes_in, p)
    assert 2 * bytes_in * 0.95 <= replicated <= 2 * bytes_in * 1.05 + window_s, (replicated, bytes_in, p)
    # the log holds the batches: every replica the same size, the leader's too
    assert set(p["replica_sizes"]) == {"1", "2", "3"}
    assert all(payload <= s <= payload * 1.05 for s in p["replica_sizes"].values()), p
    assert p["size_bytes"] == p["replica_sizes"][str(p["leader"])]
    assert p["leader"] == admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    brokers = {b["node_id"]: b for b in d["brokers"]}
    assert set(brokers) == {1, 2, 3} and d["stale_brokers"] == []
    for b in brokers.values():
        c = b["capacity"]
        assert 0 < c["disk_used_bytes"] <= c["disk_bytes"], b
        assert (c["network_in_bytes_per_second"], c["network_out_bytes_per_second"]) == (NET_IN, NET_OUT), b
        assert b["log_bytes"] >= payload and b["replicas"] >= 1, b  # every broker holds a replica
    lb = brokers[p["leader"]]
    assert lb["bytes_in_per_second"] >= p["bytes_in_per_second"] and lb["leaders"] >= 1
    assert lb["replication_bytes_out_per_second"] >= p["replication_bytes_out_per_second"]

    # the table, as an operator reads it
    r = subprocess.run([sys.executable, "-m", "shoal", "cluster", "load", "--admin-url", url],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO), "SHOAL_ADMIN_USER": ADMIN[0],
                            "SHOAL_ADMIN_PASSWORD": ADMIN[1]})
    assert r.returncode == 0 and r.stdout.splitlines()[0].split()[:4] == ["BROKER", "BYTES-IN", "BYTES-OUT",
                                                                          "REPL-OUT"], r
    assert any(line.startswith(f"{topic}-0 ") for line in r.stdout.splitlines()), r.stdout


def test_a_tenant_administrator_is_refused(cluster):
    status, tenant = http_json(cluster[2].admin_url, "POST", "/v1/tenants", {"display_name": "load"}, auth=ADMIN)
    assert status == 201, tenant
    status, user = http_json(cluster[2].admin_url, "POST", f"/v1/tenants/{tenant['tenant_id']}/users",
                             {"user": "alice", "password": "alice-secret", "admin": True}, auth=ADMIN)
    assert status == 201, user
    r = shoal_load(cluster[2].admin_url, ("alice", "alice-secret"))
    assert r.returncode == 1 and r.stdout == "", r
    assert r.stderr.startswith("shoal cluster load: not allowed"), r.stderr
    status, body = http_json(cluster[3].admin_url, "GET", "/v1/cluster/load", auth=("alice", "alice-secret"))
    assert status == 403 and body["error"] == "forbidden"
    status, body = http_json(cluster[3].admin_url, "GET", "/v1/cluster/load")
    assert status == 401
