"""Transactions on three real brokers on a real etcd (issue 14): the coordinator's markers go to
partition leaders on other brokers (WriteTxnMarkers), the KIP-890 check of a produce goes to the
coordinator broker (AddPartitionsToTxn v4 verify_only), ``__transaction_state`` replicates, and
when the coordinator broker is killed mid-transaction another broker loads the transactions and
finishes them."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient as KafkaAdmin

from cluster_harness import running_cluster, until
from txn_helpers import TXN_TIMEOUT, create_topic, describe_txn, read_all, wire

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "txn-cluster",
                         overrides={"transaction.state.log.num.partitions": "3", "replica.fetch.backoff.ms": "200",
                                    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}) as c:
        yield c


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = KafkaAdmin({"bootstrap.servers": bootstrap, "log_level": 2}).list_topics(topic, timeout=15)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def coordinator_of(bootstrap: str, txn: str) -> int:
    r = wire(bootstrap, 10, {"key": txn, "key_type": 1, "coordinator_keys": [txn]})
    co = r.coordinators[0]
    assert co.error_code == 0, co
    return co.node_id


def producer(bootstrap: str, txn: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn, "linger.ms": 5, "log_level": 2,
                     "transaction.timeout.ms": 120000})


def test_markers_to_other_leaders(cluster):
    bs = cluster.bootstrap()
    topic, txn = f"txc-{uuid.uuid4().hex[:6]}", f"tx-c-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, 3, replication_factor=3)
    p = producer(bs, txn)
    p.init_transactions(TXN_TIMEOUT)
    coordinator = coordinator_of(bs, txn)
    remote = [part for part, leader in until(lambda: leaders(bs, topic), 30, "leaders").items() if leader != coordinator]
    assert remote, "every partition led by the coordinator: the test would not cross brokers"
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=b"c%d" % i, partition=i % 3)
    p.commit_transaction(TXN_TIMEOUT)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=b"a%d" % i, partition=i % 3)
    p.flush(TXN_TIMEOUT)
    p.abort_transaction(TXN_TIMEOUT)
    assert sorted(read_all(bs, topic, 3, "read_committed")) == sorted(b"c%d" % i for i in range(30))
    assert len(read_all(bs, topic, 3, "read_uncommitted")) == 36
    until(lambda: describe_txn(bs, txn).transaction_state == "CompleteAbort", 30, "CompleteAbort")


def test_coordinator_killed_mid_transaction(cluster):
    bs = cluster.bootstrap()
    topic, txn = f"txf-{uuid.uuid4().hex[:6]}", f"tx-f-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, 3, replication_factor=3)
    p = producer(bs, txn)
    p.init_transactions(TXN_TIMEOUT)
    victim = coordinator_of(bs, txn)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=b"f%d" % i, partition=i % 3)
    p.flush(TXN_TIMEOUT)
    assert describe_txn(bs, txn).transaction_state == "Ongoing"
    cluster.kill(victim)
    try:
        others = [n for n in cluster.brokers if n != victim]
        survivors = cluster.bootstrap(*others)
        until(lambda: coordinator_of(survivors, txn) != victim, 60, "a new coordinator")
        # the new coordinator loaded the Ongoing transaction: the producer commits it there
        state = until(lambda: describe_txn(survivors, txn), 30, "the transaction loaded")
        assert state.transaction_state == "Ongoing" and sorted(t.topic for t in state.topics) == [topic]
        try:
            p.commit_transaction(TXN_TIMEOUT)
            committed = True
        except KafkaException as e:  # an abortable error is a client's right: then it aborts
            assert e.args[0].txn_requires_abort(), e
            p.abort_transaction(TXN_TIMEOUT)
            committed = False
        want = sorted(b"f%d" % i for i in range(30)) if committed else []
        until(lambda: sorted(read_all(survivors, topic, 3, "read_committed")) == want, 60, "the outcome")
        final = "CompleteCommit" if committed else "CompleteAbort"
        until(lambda: describe_txn(survivors, txn).transaction_state == final, 30, final)
    finally:
        cluster.start_one(victim)
        cluster.wait_brokers(set(cluster.brokers), 60)
    # the restarted broker serves it again as it was left
    p2 = producer(cluster.bootstrap(), txn)
    p2.init_transactions(TXN_TIMEOUT)
    p2.begin_transaction()
    p2.produce(topic, value=b"after", partition=0)
    p2.commit_transaction(TXN_TIMEOUT)
    assert b"after" in read_all(cluster.bootstrap(), topic, 3, "read_committed")


def remote_leader_txn(cluster, prefix: str):
    """A new topic (3 partitions, RF 3) and transactional id, its producer initialized at the
    coordinator: (bootstrap, topic, id, coordinator's address, producer id, epoch, a partition led
    by another broker, that broker's address)."""
    bs = cluster.bootstrap()
    topic, txn = f"tx{prefix}-{uuid.uuid4().hex[:6]}", f"tx-{prefix}-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, 3, replication_factor=3)
    coordinator = until(lambda: coordinator_of(bs, txn), 30, "a coordinator")
    co = cluster[coordinator].bootstrap
    r = until(lambda: (x := wire(co, 22, {"transactional_id": txn, "transaction_timeout": 60000, "producer_id": -1,
                                           "producer_epoch": -1})).error_code == 0 and x, 30, "InitProducerId")
    part, leader = next((p, l) for p, l in until(lambda: leaders(bs, topic), 30, "leaders").items() if l != coordinator)
    return bs, topic, txn, co, r.producer_id, r.producer_epoch, part, cluster[leader].bootstrap


def test_produce_check_asks_the_coordinator_broker(cluster):
    """KIP-890 on a leader that is not the coordinator: AddPartitionsToTxn v4 verify_only."""
    from test_txn_verification import add, produce

    _bs, topic, txn, co, pid, epoch, part, at_leader = remote_leader_txn(cluster, "v")
    assert produce(at_leader, txn, topic, part, pid, epoch) == 48  # INVALID_TXN_STATE
    assert add(co, txn, pid, epoch, topic, part) == 0
    assert produce(at_leader, txn, topic, part, pid, epoch) == 0
    assert produce(at_leader, txn, topic, part, pid, epoch + 1, seq=0) == 47  # INVALID_PRODUCER_EPOCH


def test_produce_v12_adds_the_partition_at_the_coordinator_broker(cluster):
    """KIP-890 part 2 on a leader that is not the coordinator: AddPartitionsToTxn v5 without
    verify_only adds the partition; EndTxn v5's markers (new epoch) reach that leader."""
    from test_txn_verification import produce

    bs, topic, txn, co, pid, epoch, part, at_leader = remote_leader_txn(cluster, "v2")
    assert produce(at_leader, txn, topic, part, pid, epoch, version=12) == 0
    assert {(t.topic, p) for t in describe_txn(co, txn).topics for p in t.partitions} == {(topic, part)}
    r = wire(co, 26, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "committed": True},
             version=5)
    assert (r.error_code, r.producer_epoch) == (0, epoch + 1)
    assert read_all(bs, topic, 3, "read_committed") == [b"v"]
    assert produce(at_leader, txn, topic, part, pid, epoch, seq=1, version=12) == 47  # INVALID_PRODUCER_EPOCH
