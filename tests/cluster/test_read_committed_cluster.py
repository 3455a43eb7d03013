"""read_committed on three real broker processes on etcd (racks dc1..dc3): a transactional
producer commits and aborts on an RF 3 partition whose leader is another broker than the
transaction coordinator may be, so the markers may travel as WriteTxnMarkers; the followers learn
the transactions from the replicated batches, so a follower serving a consumer (KIP-392) answers
read_committed with the same last stable offset and aborted transactions as the leader, and a
librdkafka read_committed consumer with ``client.rack`` reads exactly the committed records."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cluster_harness import Cluster, until
from raw_client import RawClient
from shoal.client import AdminClient, build_entity
from shoal.protocol import codec

pytestmark = pytest.mark.timeout(300)

FETCH = 1


def fetch(cluster: Cluster, node: int, topic: str, rack: str, isolation: int):
    fields = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": isolation,
              "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": rack,
              "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                          "fetch_offset": 0, "last_fetched_epoch": -1,
                                                          "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
    entity = build_entity(codec.request_type(FETCH, 12), fields)
    with RawClient(cluster[node].bootstrap) as c:
        top = {f.name: getattr(entity, f.name) for f in dataclasses.fields(entity)}
        return c.call(FETCH, 12, top).responses[0].partitions[0]


def view(p) -> tuple:
    aborted = sorted((a.producer_id, a.first_offset) for a in (p.aborted_transactions or ()))
    return p.error_code, p.high_watermark, p.last_stable_offset, aborted, bytes(p.records or b"")


def test_followers_answer_read_committed_like_the_leader(cluster3) -> None:
    cluster = cluster3
    topic = f"rcc-{uuid.uuid4().hex[:6]}"

    async def create() -> None:
        async with AdminClient(cluster.bootstrap(), timeout=20) as a:
            await a.create_topics([{"name": topic, "assignments": {0: [1, 2, 3]}}])

    asyncio.run(create())
    p = Producer({"bootstrap.servers": cluster.bootstrap(), "transactional.id": f"tx-{topic}", "log_level": 2})
    p.init_transactions(60)
    committed = []
    for i in range(6):
        p.begin_transaction()
        vals = [b"v%d-%d" % (i, j) for j in range(3)]
        for v in vals:
            p.produce(topic, v, partition=0)
        if i % 2 == 0:
            p.commit_transaction(60)
            committed += vals
        else:
            p.flush(60)
            p.abort_transaction(60)
    # six transactions of three records and their markers: 24 offsets
    leader = until(lambda: (r := fetch(cluster, 1, topic, "dc1", 1)) and r.last_stable_offset == 24 and r, 30,
                   "the leader's LSO past the last marker")
    assert leader.high_watermark == 24 and len(leader.aborted_transactions) == 3
    for node, rack in ((2, "dc2"), (3, "dc3")):
        got = until(lambda n=node, r=rack: (x := fetch(cluster, n, topic, r, 1)) and x.last_stable_offset == 24 and x,
                    30, f"follower {node} caught up")
        assert view(got) == view(leader)
    c = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": f"g-{topic}", "client.rack": "dc3",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "log_level": 2, "topic.metadata.refresh.interval.ms": 1000})
    c.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        until(lambda: values.extend(m.value() for m in c.consume(100, 0.5) if m.error() is None)
              or len(values) >= len(committed), 60, "the committed records")
        values.extend(m.value() for m in c.consume(100, 1.0) if m.error() is None)
    finally:
        c.close()
    assert values == committed
