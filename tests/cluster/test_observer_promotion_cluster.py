"""Automatic observer promotion on six real broker processes over two datacenters (dc1: 1, 2, 3;
dc2: 4, 5, 6) on the real etcd, with confluent-kafka: placement version 2 with 2 sync replicas and
1 observer per datacenter, min.insync.replicas 3, ``observerPromotionPolicy`` under-min-isr (the
issue's drill (b), by killing dc1's brokers instead of cutting links). When dc1 dies, dc2's sync
replicas are 2 < 3: the caught-up dc2 observer joins the ISR and acks=all goes on; when dc1 comes
back its sync replicas rejoin and the observer leaves the ISR; every acknowledged record is read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic

from cluster_harness import running_cluster, until

pytestmark = pytest.mark.timeout(420)

REPO = Path(__file__).resolve().parents[2]
LAG_MS = 2000
DC1, DC2 = (1, 2, 3), (4, 5, 6)
PLACEMENT = {"version": 2,
             "replicas": [{"count": 2, "constraints": {"rack": "dc1"}}, {"count": 2, "constraints": {"rack": "dc2"}}],
             "observers": [{"count": 1, "constraints": {"rack": "dc1"}}, {"count": 1, "constraints": {"rack": "dc2"}}],
             "observerPromotionPolicy": "under-min-isr"}


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "promotion", size=6,
                         racks=["dc1"] * 3 + ["dc2"] * 3,
                         overrides={"replica.lag.time.max.ms": str(LAG_MS), "replica.fetch.backoff.ms": "200"}) as c:
        yield c


def layout(bootstrap: str, topic: str) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    md = KafkaAdmin({"bootstrap.servers": bootstrap, "log_level": 2}).list_topics(topic, timeout=15)
    p = md.topics[topic].partitions[0]
    return p.leader, tuple(p.replicas), tuple(sorted(p.isrs))


def produce(bootstrap: str, topic: str, values: list[bytes], timeout: float = 30) -> dict[bytes, object]:
    """acks=all, idempotent: value -> error (None: acknowledged)."""
    out: dict[bytes, object] = {}
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "log_level": 2,
                  "message.timeout.ms": int(timeout * 1000)})
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, m: out.__setitem__(m.value(), err))
        p.poll(0)
    p.flush(timeout + 10)
    return out


def read_all(bootstrap: str, topic: str, end: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}", "log_level": 2,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and len(got) < end:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def test_the_dc2_observer_stands_in_while_dc1_is_down(cluster):
    b = cluster.bootstrap()
    topic = f"promo-{uuid.uuid4().hex[:6]}"
    a = KafkaAdmin({"bootstrap.servers": b, "log_level": 2})
    a.create_topics([NewTopic(topic, 1, -1, config={"replica.placement": json.dumps(PLACEMENT),
                                                     "min.insync.replicas": "3"})])[topic].result(30)
    leader, replicas, isr = until(lambda: layout(b, topic), 20, "the topic")
    # dc1's sync replicas first (the preferred leader in dc1), dc2's, then an observer in each
    sync, (obs1, obs2) = replicas[:4], replicas[4:]
    assert set(sync[:2]) < set(DC1) and set(sync[2:]) < set(DC2) and obs1 in DC1 and obs2 in DC2
    assert leader == sync[0] and isr == tuple(sorted(sync))
    dc2_sync = tuple(sorted(sync[2:]))
    acked: list[bytes] = []
    before = produce(b, topic, [b"before-%04d" % i for i in range(200)])
    assert all(e is None for e in before.values()), before
    acked += before
    time.sleep(LAG_MS / 1000 + 0.5)
    assert layout(b, topic)[2] == isr  # caught up, but the ISR holds min.insync.replicas: no promotion

    # the advisor reads the topic's observers and policy from its placement, and predicts the drill
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "shoal", "placement", "check", "--topic", topic, "--bootstrap-server",
                        cluster.bootstrap(1)], capture_output=True, text=True, timeout=60, env=env)
    assert "dc1: 2 replicas + 1 observer, dc2: 2 replicas + 1 observer" in r.stdout, r.stdout + r.stderr
    assert "observer promotion under-min-isr" in r.stdout
    assert "lose dc1: acks=all works after promoting 1 observer" in r.stdout, r.stdout

    for n in DC1:
        cluster.kill(n)
    dc2 = cluster.bootstrap(*DC2)
    try:
        # a dc2 sync replica leads, and dc2's observer joins the ISR (never the dead dc1 observer)
        promoted = tuple(sorted(dc2_sync + (obs2,)))
        leader, _r, _isr = until(lambda: (lay := layout(dc2, topic))[2] == promoted and lay, 60,
                                 "the dc2 observer promoted")
        assert leader in dc2_sync
        during = produce(dc2, topic, [b"during-%04d" % i for i in range(200)], timeout=60)
        assert all(e is None for e in during.values()), {k: v for k, v in during.items() if v is not None}
        acked += during
    finally:
        for n in DC1:
            cluster.start_one(n)
    cluster.wait_brokers(set(DC1 + DC2), 90)
    # dc1's sync replicas catch up and rejoin; the observer, no longer needed, is demoted
    until(lambda: layout(b, topic)[2] == isr, 90, "sync replicas back, the observer demoted")
    after = produce(b, topic, [b"after-%04d" % i for i in range(100)])
    assert all(e is None for e in after.values()), after
    acked += after
    got = read_all(b, topic, len(acked))
    missing = set(acked) - set(got)
    assert not missing, sorted(missing)[:10]
    assert len(got) == len(set(got))  # idempotence: no duplicates


def test_without_promotion_dc2_alone_refuses_acks_all(cluster):
    """The same layout in version 1: losing dc1 leaves 2 sync replicas, below min.insync.replicas 3,
    and the observer stays out: NOT_ENOUGH_REPLICAS (the drill (a) behaviour)."""
    b = cluster.bootstrap()
    topic = f"nopromo-{uuid.uuid4().hex[:6]}"
    v1 = {k: v for k, v in PLACEMENT.items() if k != "observerPromotionPolicy"} | {"version": 1}
    a = KafkaAdmin({"bootstrap.servers": b, "log_level": 2})
    a.create_topics([NewTopic(topic, 1, -1, config={"replica.placement": json.dumps(v1),
                                                     "min.insync.replicas": "3"})])[topic].result(30)
    leader, replicas, isr = until(lambda: layout(b, topic), 20, "the topic")
    assert isr == tuple(sorted(replicas[:4])), (leader, replicas, isr)
    dc1_sync = [r for r in replicas[:4] if r in DC1]
    dc2_sync = tuple(sorted(r for r in replicas[:4] if r in DC2))
    for n in dc1_sync:
        cluster.kill(n)
    dc2 = cluster.bootstrap(*(n for n in DC1 + DC2 if n not in dc1_sync))
    try:
        until(lambda: layout(dc2, topic)[2] == dc2_sync, 60, "dc1's sync replicas out of the ISR")
        time.sleep(LAG_MS / 1000 + 0.5)
        assert layout(dc2, topic)[2] == dc2_sync  # the observers stay out
        errors = produce(dc2, topic, [b"x%d" % i for i in range(5)], timeout=6)
        assert all(e is not None and e.code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT)
                   for e in errors.values()), errors
    finally:
        for n in dc1_sync:
            cluster.start_one(n)
    cluster.wait_brokers(set(DC1 + DC2), 90)
