"""Partition reassignment (KIP-455) across three real brokers on a real etcd, with real clients:
kafka-python's ``alter_partition_reassignments`` / ``list_partition_reassignments`` move a
partition's data to other brokers (the new replicas catch up as followers, the controller
completes the move once they are in the ISR, the removed brokers delete their logs), change its
replication factor, and cancel a move; ``shoal cluster reassign`` does the same from Kafka's
reassignment JSON, with a replication throttle that measurably slows the move."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import time
import uuid

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.errors import NoReassignmentInProgressError

from cluster_harness import run, running_cluster, until
from shoal.cli import main
from shoal.client import RESOURCE_BROKER, RESOURCE_TOPIC, AdminClient
from test_replication import partitions, produce, read_all, segments

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "reassign",
                         overrides={"replica.lag.time.max.ms": "3000", "replica.fetch.backoff.ms": "200",
                                    # a throttle's granularity: fetches of 64 KiB, a rate measured over 3 s
                                    "replica.fetch.max.bytes": "65536", "replication.quota.window.num": "3"}) as c:
        yield c


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
    # kadmin may ask another broker, whose image can lag broker 3's by a moment
    until(lambda: ongoing(kadmin, topic) == {}, 15, "no reassignment listed")
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


def test_a_new_replica_starts_at_the_leaders_log_start(cluster, kadmin):
    topic = f"start-{uuid.uuid4().hex[:6]}"
    create_on(cluster[1].bootstrap, topic, [1])
    values = [b"s%04d" % i for i in range(300)]
    produce(cluster[1].bootstrap, topic, values)

    async def trim() -> dict:
        async with AdminClient(cluster[1].bootstrap, timeout=15) as c:
            return await c.delete_records({(topic, 0): 120})

    assert run(trim()) == {(topic, 0): 120}
    tp = TopicPartition(topic, 0)
    assert kadmin.alter_partition_reassignments({tp: [3]}) == {tp: None}
    settled(cluster[2].bootstrap, topic, (3,))
    got = read_all(cluster[3].bootstrap, topic, 1, 180)
    assert [(o, v) for _, o, v in got] == list(enumerate(values))[120:]  # offsets kept, nothing below the start


def test_a_replica_removed_while_its_broker_is_down_is_deleted_when_it_returns(cluster):
    topic = f"down-{uuid.uuid4().hex[:6]}"
    controller = cluster.wait_controller()
    gone, kept, added = [n for n in (1, 2, 3) if n != controller][0], controller, [n for n in (1, 2, 3) if n != controller][1]
    create_on(cluster[kept].bootstrap, topic, [kept, gone])
    settled(cluster[kept].bootstrap, topic, (kept, gone))
    produce(cluster[kept].bootstrap, topic, [b"d%03d" % i for i in range(200)])
    until(lambda: segments(cluster[gone].data_dir, topic, 0) == segments(cluster[kept].data_dir, topic, 0), 30,
          "the follower caught up")
    kadmin = KafkaAdminClient(bootstrap_servers=cluster[kept].bootstrap, request_timeout_ms=30000)
    assert ongoing(kadmin, topic) == {}  # (kafka-python learns the controller now, while all brokers are up)
    cluster.kill(gone)
    try:
        tp = TopicPartition(topic, 0)
        try:
            assert kadmin.alter_partition_reassignments({tp: [kept, added]}) == {tp: None}
        finally:
            kadmin.close()
        settled(cluster[kept].bootstrap, topic, (kept, added))
        assert (cluster[gone].data_dir / f"{topic}-0").exists()  # down: nobody deleted it yet
    finally:
        cluster.start_one(gone)
    until(lambda: not (cluster[gone].data_dir / f"{topic}-0").exists(), 60, "deleted at the broker's return")
    assert len(read_all(cluster[gone].bootstrap, topic, 1, 200)) == 200


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


def shoal_cluster(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    """``shoal cluster ARGS``: the CLI's ``main`` in this process."""
    argv = ["cluster", *args, "--bootstrap-server", bootstrap, "--timeout", "15"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse
            rc = e.code
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


def reassignment_file(tmp_path, topic: str, replicas: list[int]):
    f = tmp_path / f"{topic}.json"
    f.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": replicas}]}))
    return str(f)


def produce_kib(bootstrap: str, topic: str, n: int) -> None:
    """``n`` records of 1 KiB, in batches of 16 KiB (a throttled fetch moves a few at a time)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "batch.size": 16384, "linger.ms": 5, "log_level": 2})
    for i in range(n):
        p.produce(topic, b"%06d" % i + bytes(1018))
        p.poll(0)
    assert p.flush(60) == 0


def move_with_the_cli(cluster, tmp_path, topic: str, *throttle: str) -> float:
    """Seconds from ``reassign --execute`` of ``topic`` (on broker 1) to broker 2 until ``--verify``
    says it is complete."""
    f = reassignment_file(tmp_path, topic, [2])
    bootstrap = cluster[3].bootstrap
    t0 = time.monotonic()
    r = shoal_cluster(bootstrap, "reassign", "--reassignment-json-file", f, "--execute", *throttle)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Successfully started partition reassignments for {topic}-0" in r.stdout
    rollback = json.loads(r.stdout.split("\n\n")[1])
    assert rollback["partitions"] == [{"topic": topic, "partition": 0, "replicas": [1], "log_dirs": ["any"]}]

    def verified() -> str | None:
        v = shoal_cluster(bootstrap, "reassign", "--reassignment-json-file", f, "--verify")
        return v.stdout if v.returncode == 0 else None

    out = until(verified, 90, f"{topic} moved")
    elapsed = time.monotonic() - t0
    assert f"Reassignment of partition {topic}-0 is completed." in out and "Clearing broker-level throttles" in out
    return elapsed


def configs(bootstrap: str, node: int, topic: str) -> tuple[dict, dict]:
    async def ask():
        async with AdminClient(bootstrap, timeout=15) as c:
            b = await c.describe_configs([(RESOURCE_BROKER, str(node))], keys=["leader.replication.throttled.rate"])
            t = await c.describe_configs([(RESOURCE_TOPIC, topic)])
        return b[(RESOURCE_BROKER, str(node))], t[(RESOURCE_TOPIC, topic)]

    return run(ask())


def test_the_cli_moves_kafkas_json_and_a_throttle_slows_the_move(cluster, tmp_path):
    records, rate = 1500, 300_000  # 1.5 MB at 300 kB/s: some 5 s throttled
    plain, slow = f"cli-{uuid.uuid4().hex[:6]}", f"throttled-{uuid.uuid4().hex[:6]}"
    for topic in (plain, slow):
        create_on(cluster[1].bootstrap, topic, [1])
        produce_kib(cluster[1].bootstrap, topic, records)
    unthrottled = move_with_the_cli(cluster, tmp_path, plain)
    throttled = move_with_the_cli(cluster, tmp_path, slow, "--throttle", str(rate))
    size = len(segments(cluster[2].data_dir, slow, 0))
    print(f"REASSIGN throttled {throttled:.2f}s unthrottled {unthrottled:.2f}s size {size} rate {rate}")
    assert size > records * 1024
    # bound loosely (a loaded 2-core machine): the throttled move took at least a third of
    # size / rate (Kafka's window lets a burst through), and clearly longer than the free one
    assert throttled >= size / (3 * rate) and throttled > 1.5 * unthrottled, (throttled, unthrottled, size)
    assert len(read_all(cluster[2].bootstrap, slow, 1, records)) == records
    # --verify removed the throttles once the move was complete
    for node in (1, 2, 3):
        rates, topic_cfg = configs(cluster[node].bootstrap, node, slow)
        assert rates["leader.replication.throttled.rate"].source == "DEFAULT_CONFIG"
        assert topic_cfg["leader.replication.throttled.replicas"].source == "DEFAULT_CONFIG"
        assert topic_cfg["follower.replication.throttled.replicas"].source == "DEFAULT_CONFIG"


def test_the_cli_elects_leaders_and_refuses_bad_files(cluster, tmp_path):
    topic = f"elect-{uuid.uuid4().hex[:6]}"
    create_on(cluster[1].bootstrap, topic, [2, 3, 1])
    settled(cluster[1].bootstrap, topic, (2, 3, 1))
    r = shoal_cluster(cluster[1].bootstrap, "elect-leaders", "--election-type", "preferred", "--topic", topic,
                      "--partition", "0")
    assert (r.returncode, r.stdout) == (0, f"Valid replica already elected for partitions {topic}-0\n"), r
    r = shoal_cluster(cluster[1].bootstrap, "elect-leaders", "--election-type", "PREFERRED", "--topic", topic,
                      "--partition", "5")
    assert r.returncode == 1 and f"{topic}-5: UNKNOWN_TOPIC_OR_PARTITION" in r.stdout, r
    r = shoal_cluster(cluster[1].bootstrap, "elect-leaders", "--election-type", "PREFERRED", "--topic", topic)
    assert r.returncode == 2 and "--partition" in r.stderr
    bad = tmp_path / "bad.json"
    for text in ("{", '{"version":1,"partitions":[{"topic":"t","partition":"0","replicas":[1]}]}', '{"partitions":[]}'):
        bad.write_text(text)
        r = shoal_cluster(cluster[1].bootstrap, "reassign", "--reassignment-json-file", str(bad), "--execute")
        assert r.returncode == 2 and "--reassignment-json-file" in r.stderr, r
    r = shoal_cluster(cluster[1].bootstrap, "reassign", "--reassignment-json-file",
                      reassignment_file(tmp_path, topic, [1, 1]), "--execute")
    assert r.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in r.stdout, r
    assert partitions(cluster[1].bootstrap, topic)[0][1] == (2, 3, 1)
    r = shoal_cluster(cluster[1].bootstrap, "reassign", "--reassignment-json-file",
                      reassignment_file(tmp_path, topic, [1]), "--cancel")  # nothing to cancel: throttles cleared
    assert r.returncode == 0 and "Successfully cancelled" not in r.stdout and "Clearing topic-level" in r.stdout, r
    r = shoal_cluster(cluster[1].bootstrap, "reassign", "--reassignment-json-file",
                      reassignment_file(tmp_path, topic, [1]), "--verify")
    assert r.returncode == 1 and "There is no active reassignment" in r.stdout, r
