"""Transactional group offsets on three real broker processes on etcd: the group's coordinator is
another broker than the transaction coordinator, so the markers reach ``__consumer_offsets`` as
WriteTxnMarkers and that broker's group coordinator materializes (commit) or drops (abort) the
pending offsets; then the group coordinator's broker is killed (-9) with offsets pending, and the
partition's new leader, which replayed them from the replicated log, commits them when the marker
comes."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cluster_harness import Cluster, until
from shoal.client import AdminClient

pytestmark = pytest.mark.timeout(300)
TXN_TIMEOUT = 90.0


async def coordinator(cluster: Cluster, key: str, key_type: int) -> int:
    async with AdminClient(cluster.bootstrap(*[b.node_id for b in cluster.live]), timeout=20) as a:
        for _ in range(100):  # the internal topics are created at the first lookup
            try:
                return (await a.find_coordinator(key, key_type))[0]
            except Exception:  # noqa: BLE001 - COORDINATOR_NOT_AVAILABLE while it is created
                await asyncio.sleep(0.3)
    raise AssertionError(f"no coordinator for {key}")


def test_offsets_commit_abort_and_survive_the_group_coordinator(cluster3) -> None:
    cluster = cluster3
    tag = uuid.uuid4().hex[:6]
    src, txn = f"txc-in-{tag}", f"txc-{tag}"

    async def create() -> None:
        async with AdminClient(cluster.bootstrap(), timeout=20) as a:
            await a.create_topics([{"name": src, "assignments": {0: [1, 2, 3]}}])

    asyncio.run(create())
    txn_node = asyncio.run(coordinator(cluster, txn, 1))
    group = group_node = None
    for i in range(50):
        g = f"txc-g-{tag}-{i}"
        node = asyncio.run(coordinator(cluster, g, 0))
        if node != txn_node:
            group, group_node = g, node
            break
    assert group is not None

    c = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_committed", "log_level": 2})
    p = Producer({"bootstrap.servers": cluster.bootstrap(), "transactional.id": txn, "log_level": 2})
    tp = TopicPartition(src, 0)

    def committed() -> int:
        # librdkafka asks for stable offsets under read_committed and retries UNSTABLE_OFFSET_COMMIT
        return c.committed([tp], timeout=TXN_TIMEOUT)[0].offset

    def send(offset: int) -> None:
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(src, 0, offset)], c.consumer_group_metadata(), TXN_TIMEOUT)

    try:
        p.init_transactions(TXN_TIMEOUT)
        send(3)
        p.commit_transaction(TXN_TIMEOUT)
        assert committed() == 3
        send(5)
        p.abort_transaction(TXN_TIMEOUT)
        assert committed() == 3
        send(6)
        cluster.kill(group_node)
        p.commit_transaction(TXN_TIMEOUT)
        assert until(lambda: committed() == 6 or None, 60, "the offset committed by the new leader")
    finally:
        c.close()
        if not cluster[group_node].running:
            cluster.start_one(group_node)
            cluster.wait_brokers({1, 2, 3}, timeout=60)
