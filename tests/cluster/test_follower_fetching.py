"""Follower fetching (KIP-392) on three real broker processes (racks dc1, dc2, dc3) on etcd: the
leader sends a consumer with ``client.rack`` to the replica in its rack; that follower serves it
up to its high watermark; librdkafka consumers with ``client.rack`` read everything, from their
rack's replica, and fall back to the leader when it dies."""

from __future__ import annotations

import asyncio
import dataclasses
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cluster_harness import Cluster, running_cluster, until
from raw_client import RawClient
from shoal.client import AdminClient, build_entity
from shoal.protocol import codec

pytestmark = pytest.mark.timeout(300)

FETCH = 1


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "ff", metrics=True) as c:
        yield c


def topic_on(cluster: Cluster, leader: int) -> str:
    """An RF 3 topic of one partition led by ``leader``, with 200 records acknowledged by all."""
    topic = f"ff-{uuid.uuid4().hex[:6]}"
    others = [n for n in (1, 2, 3) if n != leader]

    async def create() -> None:
        async with AdminClient(cluster.bootstrap(), timeout=20) as a:
            await a.create_topics([{"name": topic, "assignments": {0: [leader, *others]}}])

    asyncio.run(create())
    p = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "log_level": 2})
    for i in range(200):
        p.produce(topic, b"r%03d" % i)
    assert p.flush(30) == 0
    return topic


def fetch(cluster: Cluster, node: int, topic: str, rack: str, offset: int = 0):
    fields = {"replica_id": -1,
              "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
              "session_epoch": -1, "forgotten_topics_data": [], "rack_id": rack,
              "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                          "fetch_offset": offset, "last_fetched_epoch": -1,
                                                          "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
    entity = build_entity(codec.request_type(FETCH, 12), fields)
    with RawClient(cluster[node].bootstrap) as c:
        top = {f.name: getattr(entity, f.name) for f in dataclasses.fields(entity)}
        return c.call(FETCH, 12, top).responses[0].partitions[0]


def metric(cluster: Cluster, node: int, name: str, *labels: str) -> float:
    """The sum of ``name``'s samples on broker ``node`` whose labels hold every ``labels`` text."""
    url = cluster[node].overrides["shoal.metrics.listener"] + "/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and all(lb in line for lb in labels))


def bytes_out(cluster: Cluster, node: int, topic: str) -> float:
    return metric(cluster, node, "shoal_topic_bytes_out_total", f'topic="{topic}"')


def test_the_leader_points_a_consumer_to_its_racks_replica(cluster):
    topic = topic_on(cluster, 1)
    until(lambda: fetch(cluster, 1, topic, "dc2").preferred_read_replica == 2, 20, "dc2's replica preferred")
    p = fetch(cluster, 1, topic, "dc2")
    assert p.error_code == 0 and not p.records and p.high_watermark == 200  # sent elsewhere, no records
    p = fetch(cluster, 1, topic, "dc1")  # the leader's own rack: it serves
    assert p.preferred_read_replica == -1 and p.records
    p = fetch(cluster, 1, topic, "")  # no client.rack: the leader serves
    assert p.preferred_read_replica == -1 and p.records
    p = until(lambda: (r := fetch(cluster, 2, topic, "dc2")) and r.high_watermark == 200 and r, 20)
    assert p.error_code == 0 and p.records  # the follower serves a consumer, up to its HW
    assert fetch(cluster, 2, topic, "dc2", offset=500).error_code == 1  # OFFSET_OUT_OF_RANGE: back to the leader


def test_a_consumer_with_client_rack_reads_from_its_rack(cluster):
    topic = topic_on(cluster, 1)
    c = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": f"g-{topic}", "client.rack": "dc3",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 2,
                  "topic.metadata.refresh.interval.ms": 1000})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        until(lambda: got.extend(m.value() for m in c.consume(100, 0.5) if m.error() is None) or len(got) >= 200,
              60, "200 records")
    finally:
        c.close()
    assert got == [b"r%03d" % i for i in range(200)]  # every record once, in order
    assert bytes_out(cluster, 3, topic) > 0  # served by dc3's follower
    assert bytes_out(cluster, 1, topic) < bytes_out(cluster, 3, topic)
    # and counted by client rack: dc3's consumer bytes came from a follower in dc3
    by_rack = "shoal_consumer_bytes_out_by_rack_total"
    assert metric(cluster, 3, by_rack, 'client_rack="dc3"', 'served_as="follower"') >= bytes_out(cluster, 3, topic)
    assert metric(cluster, 1, by_rack, 'client_rack="dc3"', 'served_as="leader"') == bytes_out(cluster, 1, topic)


def test_the_consumer_falls_back_to_the_leader_when_its_replica_dies(cluster):
    topic = topic_on(cluster, 1)
    c = Consumer({"bootstrap.servers": cluster.bootstrap(1), "group.id": f"g-{topic}", "client.rack": "dc3",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 2,
                  "topic.metadata.refresh.interval.ms": 1000, "socket.connection.setup.timeout.ms": 2000})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        until(lambda: got.extend(m.value() for m in c.consume(100, 0.5) if m.error() is None) or len(got) >= 200,
              60, "the first 200 records")
        assert bytes_out(cluster, 3, topic) > 0
        cluster.kill(3)
        p = Producer({"bootstrap.servers": cluster.bootstrap(1), "acks": 1, "log_level": 2})
        for i in range(200, 300):
            p.produce(topic, b"r%03d" % i)
        assert p.flush(30) == 0
        until(lambda: got.extend(m.value() for m in c.consume(100, 0.5) if m.error() is None) or len(got) >= 300,
              90, "the next 100 records, from the leader")
    finally:
        c.close()
        cluster.start_one(3)
        cluster.wait_brokers({1, 2, 3}, 60)
    assert got == [b"r%03d" % i for i in range(300)]
