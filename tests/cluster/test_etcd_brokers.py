"""Real broker processes on a real etcd (``--override shoal.metadata.store=etcd://...``): one
broker serves confluent-kafka and keeps its topics across a restart; two brokers with different
node ids share one image and list each other (routing and leadership are later work); a node id
held by a live broker is refused; a killed broker leaves Metadata once its lease expires."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic

from broker_process import BrokerProcess
from polling import until
from shoal.client import AdminClient

SESSION_MS = 3000


class EtcdBroker(BrokerProcess):
    def __init__(self, workdir: Path, url: str, node_id: int, rack: str) -> None:
        super().__init__(workdir, overrides={
            "shoal.metadata.store": url, "broker.session.timeout.ms": str(SESSION_MS),
            # one or two brokers: an unset offsets.topic.replication.factor is a cluster's 3, which
            # they cannot place (Kafka's refusal, KIP-115); an operator sets it as here
            "offsets.topic.replication.factor": "1",
            "shoal.balancer.enable": "false"})  # these tests place replicas themselves
        self.url, self.node_id, self.rack = url, node_id, rack

    def serve_args(self) -> list[str]:
        return super().serve_args() + ["--node-id", str(self.node_id), "--rack", self.rack]


@pytest.fixture
def brokers(etcd_cluster, tmp_path):
    """``brokers(node_id, rack)`` starts a broker on this test's prefix; all stopped at the end."""
    url = etcd_cluster.url(f"/e2e-{uuid.uuid4().hex[:8]}")
    started: list[EtcdBroker] = []

    def make(node_id: int, rack: str = "", start: bool = True) -> EtcdBroker:
        b = EtcdBroker(tmp_path / f"b{node_id}-{len(started)}", url, node_id, rack or f"dc{node_id}")
        started.append(b)
        if start:
            b.start()
        return b

    make.url = url  # type: ignore[attr-defined]
    yield make
    for b in started:
        b.stop()


def kafka_admin(bootstrap: str) -> KafkaAdmin:
    return KafkaAdmin({"bootstrap.servers": bootstrap, "log_level": 2})  # quiet once its broker stops


def cluster_view(bootstrap: str) -> dict:
    async def run() -> dict:
        async with AdminClient(bootstrap, timeout=10) as c:
            return await c.describe_cluster()

    return asyncio.run(run())


def test_one_broker_on_etcd_serves_clients_and_keeps_its_topics_across_a_restart(brokers):
    b = brokers(1)
    admin = kafka_admin(b.bootstrap)
    admin.create_topics([NewTopic("orders", 3, 1)])["orders"].result(15)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "log_level": 2})
    for i in range(300):
        p.produce("orders", key=str(i).encode(), value=f"v{i}".encode())
    assert p.flush(30) == 0

    def consume_all() -> set[bytes]:
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                      "auto.offset.reset": "earliest", "log_level": 2})
        c.subscribe(["orders"])
        got: set[bytes] = set()
        deadline = time.monotonic() + 30
        while len(got) < 300 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.add(m.value())
        c.close()
        return got

    assert consume_all() == {f"v{i}".encode() for i in range(300)}
    cluster_id = cluster_view(b.bootstrap)["cluster_id"]
    b.restart()
    md = kafka_admin(b.bootstrap).list_topics(timeout=15)
    assert len(md.topics["orders"].partitions) == 3
    view = cluster_view(b.bootstrap)
    assert view["cluster_id"] == cluster_id and set(view["brokers"]) == {1}
    assert consume_all() == {f"v{i}".encode() for i in range(300)}


def test_two_brokers_share_one_image_and_list_each_other(brokers):
    b1, b2 = brokers(1, "dc1"), brokers(2, "dc2")
    for b in (b1, b2):
        view = cluster_view(b.bootstrap)
        assert {n: rack for n, (_h, _p, rack) in view["brokers"].items()} == {1: "dc1", 2: "dc2"}
        assert view["brokers"][1][1] == b1.port and view["brokers"][2][1] == b2.port
    assert cluster_view(b1.bootstrap)["cluster_id"] == cluster_view(b2.bootstrap)["cluster_id"]

    a1 = kafka_admin(b1.bootstrap)
    a2 = kafka_admin(b2.bootstrap)
    delays = []
    for i in range(5):
        t0 = time.monotonic()
        a1.create_topics([NewTopic(f"t{i}", 2, 1)])[f"t{i}"].result(15)
        until(lambda: f"t{i}" in a2.list_topics(timeout=10).topics, 5.0)
        delays.append(time.monotonic() - t0)
    print(f"create through broker 1 -> listed by broker 2: max {max(delays) * 1000:.0f} ms (incl. the create)")
    assert max(delays) < 1.0 + 1.0  # within a second of the create's answer, with margin for load

    # the same name through both at once: exactly one wins
    for i in range(3):
        f1 = a1.create_topics([NewTopic(f"race{i}", 1, 1)])[f"race{i}"]
        f2 = a2.create_topics([NewTopic(f"race{i}", 1, 1)])[f"race{i}"]
        outcomes = []
        for f in (f1, f2):
            try:
                f.result(15)
                outcomes.append("ok")
            except Exception as e:  # KafkaException(TOPIC_ALREADY_EXISTS)
                outcomes.append(e.args[0].name())
        assert sorted(outcomes) == ["TOPIC_ALREADY_EXISTS", "ok"], outcomes


def test_a_node_id_held_by_a_live_broker_is_refused(brokers):
    brokers(1)
    dup = brokers(1, start=False)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="exited with status 1"):
        dup.start()
    log = dup.log_path.read_text()
    assert "cannot start: node.id 1 is held by a live broker" in log and "Traceback" not in log
    assert time.monotonic() - t0 < 30


def test_a_killed_broker_leaves_metadata_after_its_session_and_comes_back(brokers):
    b1, b2 = brokers(1), brokers(2)
    assert set(cluster_view(b1.bootstrap)["brokers"]) == {1, 2}
    b2._terminate(9)  # SIGKILL: no clean shutdown, the lease is not revoked
    t0 = time.monotonic()
    until(lambda: set(cluster_view(b1.bootstrap)["brokers"]) == {1}, 15.0)
    gone = time.monotonic() - t0
    print(f"broker 2 left Metadata {gone:.2f} s after kill -9 (session {SESSION_MS} ms)")
    assert gone >= 1.0  # its lease outlived it a while
    b2.start()
    until(lambda: set(cluster_view(b1.bootstrap)["brokers"]) == {1, 2}, 10.0)
