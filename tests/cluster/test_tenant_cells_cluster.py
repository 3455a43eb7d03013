"""Tenant cells (issue 27 part 5) on four real brokers on a real etcd, with confluent-kafka over
SASL as each tenant's user: tenant A in cell {1, 2}, tenant B in cell {3, 4}. Each tenant's topics
(CreateTopics, CreatePartitions, auto-created by its producer) land in its cell only; kill -9 of
both brokers of A's cell leaves B's producer and consumer without a single error; with them back,
``shoal tenants cell A --brokers 3,4`` (one command) has the balancer carry every replica of A
over to {3, 4} with throttled moves, every record A wrote still there."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from cluster_harness import running_cluster, until

pytestmark = pytest.mark.timeout(300)

MECHANISM = "SCRAM-SHA-512"


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "cells", size=4,
                         overrides={"shoal.balancer.enable": "true", "shoal.balancer.interval.ms": "1000",
                                    "shoal.balancer.throttle.bytes.per.second": "20000000",
                                    "default.replication.factor": "2", "num.partitions": "2",
                                    "replica.lag.time.max.ms": "3000", "replica.fetch.backoff.ms": "200"}) as c:
        yield c


def shoal(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shoal", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ})


class Tenant:
    """A tenant with one SCRAM user, its cell set by the operator (``shoal tenants cell``)."""

    def __init__(self, cluster, name: str, cell: str) -> None:
        self.cluster = cluster
        status, body = cluster[1].http("POST", "/v1/tenants", {"display_name": name})
        assert status == 201, body
        self.tenant_id = body["tenant_id"]
        self.user, self.password = f"{name}-user", f"{name}-secret"
        status, body = cluster[1].http("POST", f"/v1/tenants/{self.tenant_id}/users",
                                       {"user": self.user, "password": self.password, "mechanism": MECHANISM})
        assert status == 201, body
        self.set_cell(cell)

    def set_cell(self, brokers: str) -> None:
        r = shoal("tenants", "cell", self.tenant_id, "--brokers", brokers, "--admin-url", self.cluster[1].admin_url)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.strip() == f"{self.tenant_id}\tshoal.tenant.cell.brokers={brokers}"
        r = shoal("tenants", "describe", self.tenant_id, "--admin-url", self.cluster[1].admin_url)
        assert f"\nCell: brokers {brokers}\n" in r.stdout + "\n", r.stdout

    def conf(self, *nodes: int) -> dict:
        return {"bootstrap.servers": ",".join(self.cluster[n].sasl_bootstrap for n in nodes),
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": MECHANISM,
                "sasl.username": self.user, "sasl.password": self.password, "log_level": 2}

    def physical(self, topic: str) -> str:
        return f"{self.tenant_id}_{topic}"


def replicas(bootstrap: str, topic: str) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """The operator's view: partition -> (replicas, isr)."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=15)
    t = md.topics[topic]
    if t.error is not None:
        return {}
    return {p.id: (tuple(p.replicas), tuple(p.isrs)) for p in t.partitions.values()}


def brokers_of(bootstrap: str, topic: str) -> set[int]:
    return {b for reps, _isr in replicas(bootstrap, topic).values() for b in reps}


def produce(conf: dict, topic: str, values: list[bytes], errors: list[str]) -> set[bytes]:
    p = Producer({**conf, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    acked: set[bytes] = set()

    def done(err, msg) -> None:
        if err is None:
            acked.add(msg.value())
        else:
            errors.append(str(err))

    for v in values:
        p.produce(topic, v, on_delivery=done)
        p.poll(0)
    assert p.flush(60) == 0
    return acked


def consume(conf: dict, topic: str, partitions: int, expected: int, errors: list[str], timeout: float = 60) -> list[bytes]:
    c = Consumer({**conf, "group.id": "unused", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error() is not None:
            errors.append(str(m.error()))
        else:
            got.append(m.value())
    c.close()
    return got


def test_tenants_in_disjoint_cells_survive_each_others_outage_and_a_tenant_moves_cell_in_one_command(cluster):
    suffix = uuid.uuid4().hex[:4]
    a, b = Tenant(cluster, f"a{suffix}", "1,2"), Tenant(cluster, f"b{suffix}", "3,4")
    operator = cluster.bootstrap(1, 2, 3, 4)

    # creation: CreateTopics, CreatePartitions and auto-creation land in the tenant's cell
    for t in (a, b):
        admin = AdminClient(t.conf(1, 2, 3, 4))
        admin.create_topics([NewTopic("orders", 4, 2)])["orders"].result(30)
        admin.create_partitions([NewPartitions("orders", 6)])["orders"].result(30)
        f = admin.create_topics([NewTopic("wide", 1, 3)])["wide"]
        with pytest.raises(Exception, match="only 2 broker\\(s\\) are registered in tenant"):
            f.result(30)
    errors: list[str] = []
    a_acked = produce(a.conf(1, 2), "orders", [b"a%05d" % i for i in range(2000)], errors)
    a_acked |= produce(a.conf(1, 2), "auto", [b"x%05d" % i for i in range(200)], errors)  # auto-created
    b_acked = produce(b.conf(3, 4), "orders", [b"b%05d" % i for i in range(2000)], errors)
    assert not errors and len(a_acked) == 2200 and len(b_acked) == 2000
    for t, cell in ((a, {1, 2}), (b, {3, 4})):
        for topic, n in (("orders", 6), ("auto", 2 if t is a else 0)):
            if n:
                got = replicas(operator, t.physical(topic))
                assert len(got) == n and {x for reps, _ in got.values() for x in reps} <= cell, (t.tenant_id, got)
    until(lambda: all(len(isr) == 2 for _r, isr in replicas(operator, b.physical("orders")).values()), 30, "B in sync")

    # kill -9 every broker of A's cell: B produces and consumes with 0 errors
    cluster.kill(1)
    cluster.kill(2)
    try:
        more = produce(b.conf(3, 4), "orders", [b"c%05d" % i for i in range(2000)], errors)
        got = consume(b.conf(3, 4), "orders", 6, 4000, errors)
        assert not errors, errors[:5]
        assert len(more) == 2000 and sorted(got) == sorted(b_acked | more)
    finally:
        cluster.start_one(1)
        cluster.start_one(2)
    cluster.wait_brokers({1, 2, 3, 4}, timeout=60)
    until(lambda: all(len(isr) == 2 for topic in ("orders", "auto")
                      for _r, isr in replicas(operator, a.physical(topic)).values()), 60, "A back in sync")

    # one command moves A to {3, 4}: the balancer carries every replica over, throttled
    t0 = time.monotonic()
    a.set_cell("3,4")

    def moved() -> bool:
        return all(brokers_of(operator, a.physical(topic)) <= {3, 4} and
                   all(sorted(reps) == sorted(isr) for reps, isr in replicas(operator, a.physical(topic)).values())
                   for topic in ("orders", "auto"))

    until(moved, 120, "tenant A's replicas in {3, 4} and in sync")
    print(f"tenant A (8 partitions, RF 2, 2200 records) moved to cell {{3, 4}} in {time.monotonic() - t0:.1f}s")
    assert brokers_of(operator, b.physical("orders")) <= {3, 4}
    got = consume(a.conf(3, 4), "orders", 6, 2000, errors) + consume(a.conf(3, 4), "auto", 2, 200, errors)
    assert not errors, errors[:5]
    assert sorted(got) == sorted(a_acked)  # its data intact: every acknowledged record, once
