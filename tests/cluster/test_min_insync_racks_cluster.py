"""``min.insync.racks`` on three real broker processes (racks dc1, dc1, dc2) on the real etcd, with
confluent-kafka: a topic with RF 3, min.insync.replicas 2 and min.insync.racks 2 takes acks=all
while its ISR spans both racks; with the dc2 broker gone the ISR (two dc1 brokers) still holds
min.insync.replicas, yet acks=all is refused with NOT_ENOUGH_REPLICAS; acks=1 still works; the
rack returns and acks=all resumes. ``shoal placement check --topic`` reports the setting."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic

from cluster_harness import running_cluster, until

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "racks",
                         racks=["dc1", "dc1", "dc2"],
                         overrides={"replica.lag.time.max.ms": "2000", "replica.fetch.backoff.ms": "200"}) as c:
        yield c


def isr(bootstrap: str, topic: str) -> tuple[int, ...]:
    md = KafkaAdmin({"bootstrap.servers": bootstrap, "log_level": 2}).list_topics(topic, timeout=15)
    return tuple(sorted(md.topics[topic].partitions[0].isrs))


def produce(bootstrap: str, topic: str, n: int, acks: str = "all", timeout: float = 20, retries: bool = True) -> list:
    """One error (None: acknowledged) per record; ``retries=False``: the broker's first answer."""
    errors: list = []
    extra = {"enable.idempotence": acks == "all"} if retries else {"enable.idempotence": False, "retries": 0}
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "log_level": 2, "message.timeout.ms": int(timeout * 1000),
                  **extra})
    for i in range(n):
        p.produce(topic, b"v%d" % i, partition=0, on_delivery=lambda err, _m: errors.append(err))
        p.poll(0)
    p.flush(timeout + 10)
    return errors


def test_acks_all_needs_the_isr_over_two_racks(cluster):
    b = cluster.bootstrap()
    topic = f"racks-{uuid.uuid4().hex[:6]}"
    a = KafkaAdmin({"bootstrap.servers": b, "log_level": 2})  # alive until the result
    a.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2", "min.insync.racks": "2"})])[topic].result(30)
    until(lambda: isr(b, topic) == (1, 2, 3), 20, "the topic")
    assert all(e is None for e in produce(b, topic, 50))

    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "shoal", "placement", "check", "--topic", topic,
                        "--bootstrap-server", cluster.bootstrap(1)], capture_output=True, text=True, timeout=60, env=env)
    assert "min.insync.replicas=2, min.insync.racks=2" in r.stdout, r.stdout + r.stderr

    cluster.kill(3)  # the dc2 broker (if it led, a dc1 broker takes over)
    dc1 = cluster.bootstrap(1, 2)
    try:
        until(lambda: isr(dc1, topic) == (1, 2), 30, "the dc2 broker out of the ISR")
        errors = produce(dc1, topic, 5, timeout=6)  # librdkafka retries NOT_ENOUGH_REPLICAS until it times out
        assert errors and all(e is not None and e.code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT)
                              for e in errors), errors
        errors = produce(dc1, topic, 3, timeout=10, retries=False)  # the broker's own answer
        assert [e.code() if e is not None else None for e in errors] == [KafkaError.NOT_ENOUGH_REPLICAS] * 3, errors
        assert all(e is None for e in produce(dc1, topic, 5, acks="1"))  # acks=1 is not concerned
    finally:
        cluster.start_one(3)
    cluster.wait_brokers({1, 2, 3}, 60)
    until(lambda: isr(b, topic) == (1, 2, 3), 60, "the dc2 broker back in the ISR")
    assert all(e is None for e in produce(b, topic, 20))
