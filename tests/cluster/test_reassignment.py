"""Partition reassignment (KIP-455) across three real brokers on a real etcd, with real clients:
kafka-python's ``alter_partition_reassignments`` / ``list_partition_reassignments`` move a
partition's data to other brokers (the new replicas catch up as followers, the controller
completes the move once they are in the ISR, the removed brokers delete their logs), change its
replication factor, and cancel a move; ``shoal cluster reassign`` does the same from Kafka's
reassignment JSON, with a replication throttle that measurably slows the move."""

from __future__ import annotations

import os
import signal
import uuid

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.errors import NoReassignmentInProgressError

from cluster_harness import Cluster, until
from test_replication import partitions, produce, read_all, segments

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("reassign"), etcd_cluster.url(f"/reassign-{uuid.uuid4().hex[:8]}"),
                overrides={"replica.lag.time.max.ms": "3000", "replica.fetch.backoff.ms": "200"})
    try:
        c.start()
        yield c
    finally:
        c.close()


@pytest.fixture
def kadmin(cluster):
    a = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=30000)
    yield a
    a.close()


def create_on(bootstrap: str, name: str, replicas: list[int]) -> None:
    from kafka.admin import NewTopic

    a = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        a.create_topics([NewTopic(name, -1, -1, replica_assignments={0: replicas})])
    finally:
        a.close()


def settled(bootstrap: str, topic: str, replicas: tuple[int, ...]) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """Until partition 0 has exactly ``replicas``, all in sync, and a leader among them."""
    return until(lambda: (p := partitions(bootstrap, topic)[0]) and p[1] == replicas and sorted(p[2]) == sorted(replicas)
                 and p[0] in replicas and p, 60, f"{topic}-0 on {list(replicas)}")


def ongoing(kadmin: KafkaAdminClient, topic: str) -> dict:
    return {tp.partition: v for tp, v in kadmin.list_partition_reassignments([TopicPartition(topic, 0)]).items()}


def test_move_a_partition_to_another_broker_then_change_its_replication_factor(cluster, kadmin):
    topic = f"move-{uuid.uuid4().hex[:6]}"
    create_on(cluster[1].bootstrap, topic, [1])
    values = [b"m%05d" % i for i in range(2000)]
    produce(cluster[1].bootstrap, topic, values)
    before = segments(cluster[1].data_dir, topic, 0)
    assert before

    tp = TopicPartition(topic, 0)
    assert kadmin.alter_partition_reassignments({tp: [2]}) == {tp: None}
    settled(cluster[3].bootstrap, topic, (2,))
    assert ongoing(kadmin, topic) == {}
    until(lambda: not (cluster[1].data_dir / f"{topic}-0").exists(), 30, "the old replica's log deleted")
    assert segments(cluster[2].data_dir, topic, 0) == before  # the leader's bytes, unchanged
    got = read_all(cluster[3].bootstrap, topic, 1, len(values))
    assert [v for _, _, v in got] == values and [o for _, o, _ in got] == list(range(len(values)))

    # RF 1 -> 3: two replicas added, byte-identical to the leader
    assert kadmin.alter_partition_reassignments({tp: [2, 1, 3]}) == {tp: None}
    settled(cluster[1].bootstrap, topic, (2, 1, 3))
    until(lambda: all(segments(cluster[n].data_dir, topic, 0) == before for n in (1, 3)), 30, "replicas identical")
    more = produce(cluster[1].bootstrap, topic, [b"n%03d" % i for i in range(100)])  # acks=all over the new ISR
    assert len(more) == 100

    # and back to 2, away from the leader: the leadership moves, broker 2's log goes
    assert kadmin.alter_partition_reassignments({tp: [3, 1]}) == {tp: None}
    leader, _, _ = settled(cluster[1].bootstrap, topic, (3, 1))
    assert leader in (3, 1)
    until(lambda: not (cluster[2].data_dir / f"{topic}-0").exists(), 30, "broker 2's log deleted")
    got = read_all(cluster[2].bootstrap, topic, 1, len(values) + 100)
    assert [v for _, _, v in got] == values + sorted(more)


def test_a_stalled_reassignment_is_listed_and_cancelled(cluster):
    topic = f"cancel-{uuid.uuid4().hex[:6]}"
    controller = cluster.wait_controller()
    kadmin = KafkaAdminClient(bootstrap_servers=cluster[controller].bootstrap, request_timeout_ms=30000)
    source, stalled = [n for n in (1, 2, 3) if n != controller][:2]
    create_on(cluster[source].bootstrap, topic, [source])
    produce(cluster[source].bootstrap, topic, [b"c%03d" % i for i in range(100)])
    tp = TopicPartition(topic, 0)
    assert ongoing(kadmin, topic) == {}  # (kafka-python learns the controller now, from a live broker)
    pid = cluster[stalled].proc.pid
    os.kill(pid, signal.SIGSTOP)  # registered, but it cannot catch up (briefer than its session)
    try:
        assert kadmin.alter_partition_reassignments({tp: [stalled]}) == {tp: None}
        listed = ongoing(kadmin, topic)
        assert listed == {0: {"replicas": [stalled, source], "adding_replicas": [stalled],
                              "removing_replicas": [source]}}, listed
        assert partitions(cluster[controller].bootstrap, topic)[0] == (source, (stalled, source), (source,))
        assert kadmin.alter_partition_reassignments({tp: None}) == {tp: None}  # cancel
        assert ongoing(kadmin, topic) == {}
        assert kadmin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
    finally:
        os.kill(pid, signal.SIGCONT)
        kadmin.close()
    settled(cluster[controller].bootstrap, topic, (source,))
    until(lambda: not (cluster[stalled].data_dir / f"{topic}-0").exists(), 30, "no log left on the stalled broker")
    assert len(read_all(cluster[stalled].bootstrap, topic, 1, 100)) == 100


def test_refused_targets_answer_kafkas_errors(cluster, kadmin):
    from kafka.errors import InvalidReplicationAssignmentError, UnknownTopicOrPartitionError

    topic = f"bad-{uuid.uuid4().hex[:6]}"
    create_on(cluster[1].bootstrap, topic, [1])
    r = kadmin.alter_partition_reassignments({TopicPartition(topic, 0): [1, 1], TopicPartition(topic, 1): [2],
                                              TopicPartition(f"nosuch-{topic}", 0): [2]})
    assert r == {TopicPartition(topic, 0): InvalidReplicationAssignmentError,
                 TopicPartition(topic, 1): UnknownTopicOrPartitionError,
                 TopicPartition(f"nosuch-{topic}", 0): UnknownTopicOrPartitionError}
    r = kadmin.alter_partition_reassignments({TopicPartition(topic, 0): [9]})
    assert r == {TopicPartition(topic, 0): InvalidReplicationAssignmentError}
    assert partitions(cluster[1].bootstrap, topic)[0][1] == (1,)
