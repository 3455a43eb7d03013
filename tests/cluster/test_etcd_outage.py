"""Three real brokers when etcd fails (``docs/cluster.md``, *When etcd is unreachable*), with real
clients running throughout: the whole quorum down for 10 s, one member killed, one broker cut off
from etcd alone.

A three-member etcd of this module's own (``tests/etcd_cluster.py``), since the tests stop it;
broker 3 reaches etcd through a TCP proxy to each member (``ProxiedEtcd``), transparent until cut.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic

from cluster_harness import SESSION_MS, run, running_cluster, until
from etcd_cluster import EtcdCluster, ProxiedEtcd
from shoal.client import AdminClient

pytestmark = pytest.mark.timeout(120)

OUTAGE_S = 10.0


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    c = EtcdCluster(tmp_path_factory.mktemp("etcd"))
    c.start()
    yield c
    c.close()


@pytest.fixture(scope="module")
def proxies(etcd):
    p = ProxiedEtcd(etcd)
    yield p
    p.close()


@pytest.fixture(scope="module")
def cluster(etcd, proxies, tmp_path_factory):
    with running_cluster(etcd, tmp_path_factory, "outage", proxied=proxies, through=(3,)) as c:
        c.wait_controller()
        yield c


@pytest.fixture
def healthy(etcd, proxies, cluster):
    """Every member up, broker 3 not cut off, every broker registered (a failed test may have
    left it otherwise)."""
    etcd.start_all()
    proxies.restore()
    cluster.wait_brokers({1, 2, 3})
    return cluster


def admin(bootstrap: str) -> KafkaAdmin:
    return KafkaAdmin({"bootstrap.servers": bootstrap, "log_level": 2})


def create(bootstrap: str, name: str, partitions: int = 6, timeout: float = 20) -> None:
    a = admin(bootstrap)  # kept: a collected handle fails its futures
    a.create_topics([NewTopic(name, partitions, 1)], request_timeout=timeout)[name].result(timeout + 5)


async def _metadata(bootstrap: str, topics: list[str] | None = None):
    async with AdminClient(bootstrap, timeout=10) as c:
        return await c.metadata(topics)


async def _create_on(bootstrap: str, name: str):
    """CreateTopics sent to this very broker (a Kafka client sends it to the controller)."""
    async with AdminClient(bootstrap, timeout=20) as c:
        return (await c.create_topics([{"name": name, "num_partitions": 1, "replication_factor": 1}],
                                      raise_errors=False))[name]


async def _produce_on(bootstrap: str, topic: str, partition: int) -> int:
    """One acks=-1 Produce sent to this very broker; its error code."""
    from shoal.protocol.records import build_batch

    batch = build_batch([(int(time.time() * 1000), None, b"isolated", ())])
    async with AdminClient(bootstrap, timeout=10) as c:
        r = await c.request(0, {"transactional_id": None, "acks": -1, "timeout": 10000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return int(r.responses[0].partition_responses[0].error_code)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = run(_metadata(bootstrap, [topic]))
    return {p.partition: p.leader for p in md.topics[topic].partitions}


class Traffic:
    """A confluent-kafka producer (acks=all, ~100 records/s over every partition) and a consumer
    group member, each in a thread, recording what was acknowledged and what was read, and when."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = 6) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.acked: list[tuple[bytes, float]] = []
        self.errors: list[KafkaError] = []
        self.read: list[tuple[bytes, float]] = []
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]
        for t in self._threads:
            t.start()

    def _produce(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5, "log_level": 2})

        def delivered(err, msg) -> None:
            if err is not None:
                self.errors.append(err)
            else:
                self.acked.append((msg.value(), time.monotonic()))

        i = 0
        while not self._stop_producing.is_set():
            p.produce(self.topic, str(i).encode(), partition=i % self.partitions, on_delivery=delivered)
            i += 1
            p.poll(0.01)
        p.flush(60)

    def _consume(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"outage-{uuid.uuid4().hex[:6]}",
                      "auto.offset.reset": "earliest", "log_level": 2})
        c.subscribe([self.topic])
        try:
            while not self._stop_consuming.is_set():
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    self.read.append((m.value(), time.monotonic()))
        finally:
            c.close()

    @staticmethod
    def between(records: list[tuple[bytes, float]], t0: float, t1: float) -> int:
        return sum(1 for _, t in records if t0 <= t < t1)

    def finish(self) -> None:
        """Stop producing (every record delivered or failed), read everything acknowledged, stop."""
        self._stop_producing.set()
        self._threads[0].join(90)
        acked = {v for v, _ in self.acked}
        until(lambda: acked <= {v for v, _ in self.read}, 60, "every acknowledged record read")
        self._stop_consuming.set()
        self._threads[1].join(30)


def test_quorum_down_for_10s_clients_go_on_admin_refused_retriably_then_converges(healthy, etcd):
    cluster = healthy
    topic = f"live-{uuid.uuid4().hex[:6]}"
    create(cluster.bootstrap(), topic)
    before = leaders(cluster[1].bootstrap, topic)
    assert set(before.values()) == {1, 2, 3}
    traffic = Traffic(cluster.bootstrap(), topic)
    try:
        until(lambda: len(traffic.read) > 50, 40, "the consumer reading")

        t_down = time.monotonic()
        etcd.stop_all()
        # an admin change fails, retriably, within a few seconds: it does not hang
        t0 = time.monotonic()
        with pytest.raises(KafkaException) as e:
            create(cluster[2].bootstrap, f"during-{uuid.uuid4().hex[:6]}", timeout=20)
        refused_in = time.monotonic() - t0
        err = e.value.args[0]
        # Kafka's RetriableException (librdkafka flags retriable() only for its own retries)
        assert err.code() == KafkaError.REQUEST_TIMED_OUT, err
        # refused once etcd has been unreachable for UNREACHABLE_GRACE_S (5 s; an etcd election is
        # ridden out), at most the commit's own 8 s: not a hang
        assert refused_in < 10, refused_in
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - t_down)))
        t_up = time.monotonic()
        etcd.start_all()
        back = time.monotonic()

        acked_during = Traffic.between(traffic.acked, t_down, t_up)
        read_during = Traffic.between(traffic.read, t_down, t_up)
        assert acked_during > 100 and read_during > 100, (acked_during, read_during)

        # converged: a controller, every broker registered, the same leaders as before
        cluster.wait_controller()
        cluster.wait_brokers({1, 2, 3})
        after = f"after-{uuid.uuid4().hex[:6]}"
        until(lambda: create(cluster[1].bootstrap, after) is None, 30, "CreateTopics after the outage")
        created = time.monotonic()
        until(lambda: all(after in run(_metadata(b.bootstrap, [after])).topics
                          and not isinstance(run(_metadata(b.bootstrap, [after])).topics[after], Exception)
                          for b in cluster.live), 10, f"{after} on every broker")
        seen_in = time.monotonic() - created
        assert seen_in < 2.0, seen_in
        for b in cluster.live:
            assert leaders(b.bootstrap, topic) == before  # nothing moved, nothing went offline
            assert "moved the leadership" not in b.log_text()
        traffic.finish()
    finally:
        traffic._stop_producing.set()
        traffic._stop_consuming.set()
    assert traffic.errors == []  # librdkafka retried whatever was retriable; nothing failed
    counts = Counter(v for v, _ in traffic.read)
    acked = [v for v, _ in traffic.acked]
    assert all(counts[v] == 1 for v in acked), [v for v in acked if counts[v] != 1][:10]
    print(f"quorum down {t_up - t_down:.1f} s: {acked_during} records acknowledged and {read_during} read "
          f"meanwhile; CreateTopics refused (REQUEST_TIMED_OUT) in {refused_in:.2f} s; etcd healthy "
          f"{back - t_up:.1f} s after restart; a topic created after it was on all 3 brokers in {seen_in:.3f} s; "
          f"{len(acked)} acknowledged records each read once")


def test_one_member_killed_no_client_visible_error(healthy, etcd):
    cluster = healthy
    topic = f"one-{uuid.uuid4().hex[:6]}"
    create(cluster.bootstrap(), topic)
    traffic = Traffic(cluster.bootstrap(), topic)
    try:
        until(lambda: len(traffic.read) > 50, 40, "the consumer reading")
        leader = json_leader(etcd)
        etcd.kill_member(leader)  # the etcd leader: an election, too
        t0 = time.monotonic()
        for i in range(3):
            create(cluster[i + 1].bootstrap, f"{topic}-{i}")  # through each broker, first try
        created_in = time.monotonic() - t0
        time.sleep(2)
        n = len(traffic.acked)
        until(lambda: len(traffic.acked) > n + 50, 20, "producing on")
        traffic.finish()
    finally:
        traffic._stop_producing.set()
        traffic._stop_consuming.set()
        etcd.start_member(leader)
    assert traffic.errors == []
    assert all(c == 1 for c in Counter(v for v, _ in traffic.read).values())
    print(f"etcd member {leader} (the leader) killed: 3 CreateTopics in {created_in:.2f} s, no error")


def json_leader(etcd: EtcdCluster) -> int:
    """The index of the member that leads etcd's raft."""
    import json

    out = json.loads(etcd.etcdctl("endpoint", "status", "-w", "json"))
    leader = out[0]["Status"]["leader"]
    return next(i for i, s in enumerate(out) if s["Status"]["header"]["member_id"] == leader)


def test_a_broker_cut_off_from_etcd_loses_its_registration_and_comes_back(healthy, proxies):
    """RF=1: the cut-off broker's partitions go offline in the cluster's view (there is no other
    replica); it keeps serving them itself (fencing an isolated leader is replication's job)."""
    cluster = healthy
    topic = f"cut-{uuid.uuid4().hex[:6]}"
    create(cluster.bootstrap(), topic)
    before = leaders(cluster[1].bootstrap, topic)
    log_from = len(cluster[3].log_text())  # (the quorum test before may have cost it a lease too)
    mine = sorted(p for p, leader in before.items() if leader == 3)
    assert mine
    # broker 3 must have seen the topic before its link to etcd is cut (a whole-suite run saw it
    # cut first, under load: UNKNOWN_TOPIC_OR_PARTITION from it for its own partitions)
    until(lambda: leaders(cluster[3].bootstrap, topic) == before, 15, "broker 3 sees the topic")
    proxies.cut()
    t0 = time.monotonic()
    until(lambda: set(run(_metadata(cluster[1].bootstrap, [])).brokers) == {1, 2}, 30, "broker 3 gone")
    gone_in = time.monotonic() - t0
    until(lambda: all(leaders(cluster[1].bootstrap, topic)[p] == -1 for p in mine), 15, "its partitions offline")
    assert {p: leader for p, leader in leaders(cluster[2].bootstrap, topic).items() if p not in mine} == \
        {p: leader for p, leader in before.items() if p not in mine}
    # CreateTopics sent to the cut-off broker itself: refused retriably (a client that asks it for
    # the controller goes to broker 1 or 2, which take it)
    refused = run(_create_on(cluster[3].bootstrap, f"{topic}-x"))
    assert refused.code_name == "REQUEST_TIMED_OUT", refused
    # it still leads its partitions in its own image and takes writes for them (a Produce sent to it;
    # a client that asks broker 1 or 2 for metadata finds them offline and waits)
    assert [run(_produce_on(cluster[3].bootstrap, topic, part)) for part in mine] == [0] * len(mine)

    proxies.restore()
    t1 = time.monotonic()
    until(lambda: set(run(_metadata(cluster[1].bootstrap, [])).brokers) == {1, 2, 3}, 30, "broker 3 back")
    back_in = time.monotonic() - t1
    until(lambda: leaders(cluster[1].bootstrap, topic) == before, 15, "its partitions led by it again")
    cluster.wait_controller()
    assert cluster[3].log_text()[log_from:].count("registered again under a new lease") == 1
    create(cluster[3].bootstrap, f"{topic}-y")  # and it takes admin changes again
    print(f"broker 3 cut off: gone from the cluster in {gone_in:.1f} s (session {SESSION_MS} ms), "
          f"back {back_in:.1f} s after the cut was lifted")
