"""kafka-python's own test_transactional_producer_offsets, on three brokers (a regression test): on a fresh
cluster, where ``__consumer_offsets`` is created only at the first FindCoordinator for a group,
a transactional producer's send_offsets_to_transaction hung: AddOffsetsToTxn answered
COORDINATOR_NOT_AVAILABLE while the offsets topic was missing and never had it created, and the
client retried for ever. Kafka's AddOffsetsToTxn needs no offsets topic (the group's partition
is a hash over offsets.topic.num.partitions); its TxnOffsetCommit then finds the coordinator,
which creates the topic. Fails before commit f2badaf, passes after."""

from __future__ import annotations

import uuid

import pytest

from cluster_harness import Cluster

pytestmark = pytest.mark.timeout(120)


def test_send_offsets_to_transaction_on_a_fresh_cluster(etcd_cluster, tmp_path):
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata, TopicPartition

    c = Cluster(tmp_path, etcd_cluster.url(f"/txn-repro-{uuid.uuid4().hex[:8]}"),
                overrides={"transaction.state.log.num.partitions": "3"})
    try:
        c.start()
        topic = f"t-{uuid.uuid4().hex[:6]}"
        p = KafkaProducer(bootstrap_servers=c.bootstrap(), transactional_id=f"tx-{uuid.uuid4().hex[:6]}")
        try:
            p.init_transactions()
            p.begin_transaction()
            p.send(topic, partition=0, value=b"m").get(timeout=30)
            # the public send_offsets_to_transaction waits without a bound; the same call, bounded
            result = p._transaction_manager.send_offsets_to_transaction(
                {TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)}, "repro-group")
            p._sender.wakeup()
            assert result.wait(20000), "AddOffsetsToTxn/TxnOffsetCommit did not complete in 20 s"
            p.commit_transaction()
        finally:
            p.close(timeout=5)
    finally:
        c.close()
