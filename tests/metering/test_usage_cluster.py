"""Metering on a three-broker cluster (real processes on the session's etcd): ``__shoal_usage`` is
created with replication factor 3 (unset on a cluster, as ``__consumer_offsets``); with one
partition only, two brokers lead none of it and send their windows to its leader by Produce over
the inter-broker listener; a tenant's records, spread over partitions led by all three brokers,
add up exactly to what it produced."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster_harness import Cluster, Tenant, until
from shoal.metering.record import USAGE_TOPIC, UsageRecord

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def metered3(etcd_cluster, tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("metered3"), etcd_cluster.url(f"/metered-{uuid.uuid4().hex[:8]}"),
                overrides={"shoal.metering.interval.ms": "300", "shoal.metering.topic.partitions": "1"})
    try:
        c.start()
        yield c
    finally:
        c.close()


def usage(bootstrap: str) -> list[UsageRecord]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"u-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        end = c.get_watermark_offsets(TopicPartition(USAGE_TOPIC, 0), timeout=10)[1]
        c.assign([TopicPartition(USAGE_TOPIC, 0, 0)])
        out: list[UsageRecord] = []
        deadline = time.monotonic() + 20
        while len(out) < end:
            assert time.monotonic() < deadline
            out += [UsageRecord.from_json(m.value()) for m in c.consume(500, 0.3) if not m.error()]
        return out
    finally:
        c.close()


def test_every_broker_publishes_and_a_tenant_adds_up(metered3: Cluster):
    admin_node = metered3[1]
    status, body = admin_node.http("POST", "/v1/tenants", {"display_name": "Metered"})
    assert status == 201, body
    tenant = Tenant(admin_node, body["tenant_id"])
    tenant.add_user("alice")
    admin = AdminClient(tenant.conf())
    admin.create_topics([NewTopic("spread", 3, 3)])["spread"].result(20)
    p = Producer({**tenant.conf(), "enable.idempotence": True, "linger.ms": 5})
    for i in range(600):
        p.produce("spread", b"x" * 50, partition=i % 3)
    assert p.flush(30) == 0
    leaders = {pm.leader for pm in admin.list_topics("spread", timeout=10).topics["spread"].partitions.values()}

    boot = metered3.bootstrap()
    md = AdminClient({"bootstrap.servers": boot}).list_topics(USAGE_TOPIC, timeout=10).topics[USAGE_TOPIC]
    assert len(md.partitions) == 1 and len(md.partitions[0].replicas) == 3  # RF 3 on a cluster when unset

    def counted() -> int:  # once per identity, as the pipeline counts (a retried window may come twice)
        recs = list({(r.broker, r.incarnation, r.seq): r for r in usage(boot) if r.tenant == tenant.tenant_id}.values())
        return sum(r.messages_in for r in recs) if {r.broker for r in recs if r.messages_in} == leaders else -1

    until(lambda: counted() == 600, 30, "the tenant's 600 records in the usage windows of its leaders")
    records = usage(boot)
    assert {r.broker for r in records} == {1, 2, 3}  # the two that lead no usage partition sent theirs by Produce
    assert any(r.tenant == "" and r.broker == 1 for r in records)
