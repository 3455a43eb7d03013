"""Observers placed by ``replica.placement`` on three real broker processes (racks dc1, dc2, dc3)
on the real etcd, with confluent-kafka: they replicate the leader's bytes but never join the ISR,
never count for acks=all, and are shown apart; a placement the brokers cannot hold (at creation
or as a change), and a replication factor given with it, are refused with clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic

from cluster_harness import Cluster, running_cluster, until

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
LAG_MS = 2000
PLACEMENT = {"version": 1, "replicas": [{"count": 1, "constraints": {"rack": "dc1"}},
                                        {"count": 1, "constraints": {"rack": "dc2"}}],
             "observers": [{"count": 1, "constraints": {"rack": "dc3"}}]}


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "observers",
                         overrides={"replica.lag.time.max.ms": str(LAG_MS), "replica.fetch.backoff.ms": "200"}) as c:
        yield c


def admin(bootstrap: str) -> KafkaAdmin:
    return KafkaAdmin({"bootstrap.servers": bootstrap, "log_level": 2})


def create(bootstrap: str, name: str, partitions: int = 1, rf: int = -1, configs: dict | None = None) -> None:
    a = admin(bootstrap)  # alive until the result: a destroyed handle fails its futures
    a.create_topics([NewTopic(name, partitions, rf, config=configs or {})])[name].result(20)


def layout(bootstrap: str, topic: str) -> dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]]:
    md = admin(bootstrap).list_topics(topic, timeout=15)
    return {p.id: (p.leader, tuple(p.replicas), tuple(sorted(p.isrs))) for p in md.topics[topic].partitions.values()}


def produce(bootstrap: str, topic: str, n: int, timeout: float = 20) -> list:
    results: list = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "log_level": 2,
                  "message.timeout.ms": int(timeout * 1000)})
    for i in range(n):
        p.produce(topic, b"v%05d" % i, on_delivery=lambda err, _m: results.append(err))
        p.poll(0)
    p.flush(timeout + 10)
    return results


def log_bytes(cluster: Cluster, node: int, topic: str) -> bytes:
    d = cluster[node].data_dir / f"{topic}-0"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def shoal(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "shoal", *args], capture_output=True, text=True, timeout=60, env=env)


def test_an_observer_replicates_but_never_joins_the_isr(cluster):
    b = cluster.bootstrap()
    topic = f"obs-{uuid.uuid4().hex[:6]}"
    create(b, topic, configs={"replica.placement": json.dumps(PLACEMENT), "min.insync.replicas": "2"})
    leader, replicas, isr = until(lambda: layout(b, topic).get(0), 15, "the topic")
    assert replicas == (1, 2, 3) and isr == (1, 2) and leader == 1  # the observer (dc3) last, out of the ISR
    assert all(e is None for e in produce(b, topic, 300))
    until(lambda: log_bytes(cluster, 3, topic) == log_bytes(cluster, 1, topic) != b"", 20, "the observer's copy")
    time.sleep(LAG_MS / 1000 + 1)  # caught up for longer than replica.lag.time.max.ms: still not in the ISR
    assert layout(b, topic)[0][2] == (1, 2)
    r = shoal("topics", "describe", topic, "--bootstrap-server", cluster.bootstrap(1))
    assert r.returncode == 0 and "Isr: 1,2\tObservers: 3" in r.stdout, r.stdout + r.stderr
    r = shoal("cluster", "describe", "--json", "--bootstrap-server", cluster.bootstrap(1))
    assert r.returncode == 0, r.stderr
    assert not [u for u in json.loads(r.stdout)["under_replicated_partitions"] if u["partition"].startswith(topic)]

    # the observer does not count for acks=all: losing it changes nothing, losing a sync
    # follower leaves one ISR member, below min.insync.replicas=2, observer or not
    cluster.kill(3)
    try:
        assert all(e is None for e in produce(cluster.bootstrap(1, 2), topic, 50))
        cluster.kill(2)
        until(lambda: layout(cluster.bootstrap(1), topic)[0][2] == (1,), 30, "broker 2 out of the ISR")
        errors = produce(cluster.bootstrap(1), topic, 5, timeout=5)
        assert errors and all(e is not None and e.code() in (KafkaError.NOT_ENOUGH_REPLICAS,
                                                              KafkaError._MSG_TIMED_OUT) for e in errors), errors
    finally:
        cluster.start_one(2)
        cluster.start_one(3)
        cluster.wait_brokers({1, 2, 3}, 60)
    until(lambda: layout(b, topic)[0][2] == (1, 2), 60, "broker 2 back in the ISR, the observer still out")


def test_new_partitions_follow_the_placement(cluster):
    b = cluster.bootstrap()
    topic = f"obs-{uuid.uuid4().hex[:6]}"
    create(b, topic, configs={"confluent.placement.constraints": json.dumps(PLACEMENT)})  # Confluent's name
    a = admin(b)
    a.create_partitions([NewPartitions(topic, 3)])[topic].result(20)
    got = until(lambda: (lay := layout(b, topic)) and len(lay) == 3 and lay, 15, "3 partitions")
    for _leader, replicas, isr in got.values():
        assert replicas[2] == 3 and sorted(replicas[:2]) == [1, 2] and isr == tuple(sorted(replicas[:2]))
    desc = a.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    (configs,) = [f.result(15) for f in desc.values()]
    assert json.loads(configs["replica.placement"].value) == PLACEMENT


@pytest.mark.parametrize("rf, placement, message", [
    (3, PLACEMENT, "give replication factor -1"),
    (-1, {"version": 1, "replicas": [{"count": 2, "constraints": {"rack": "dc1"}}]},
     "rack 'dc1' has 1 broker, fewer than the 2 replicas"),
    (-1, {"version": 1, "replicas": [{"count": 1, "constraints": {"rack": "dc9"}}]}, "rack 'dc9' has no broker"),
    (-1, {"version": 9, "replicas": []}, "unknown version 9"),
])
def test_placements_that_cannot_be_used_are_refused(cluster, rf, placement, message):
    topic = f"obs-{uuid.uuid4().hex[:6]}"
    with pytest.raises(Exception) as e:
        create(cluster.bootstrap(), topic, rf=rf, configs={"replica.placement": json.dumps(placement)})
    assert message in str(e.value)


def test_a_placement_change_the_brokers_cannot_hold_is_refused(cluster):
    """(A placement change that fits reassigns the topic: tests/cluster/test_placement_change_cluster.py.)"""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    b = cluster.bootstrap()
    topic = f"obs-{uuid.uuid4().hex[:6]}"
    create(b, topic, configs={"replica.placement": json.dumps(PLACEMENT)})
    a = admin(b)
    other = json.dumps({"version": 1, "replicas": [{"count": 3, "constraints": {"rack": "dc1"}}]})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("replica.placement", other, incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception) as e:
        a.incremental_alter_configs([res])[res].result(20)
    assert "rack 'dc1' has 1 broker, fewer than the 3 replicas" in str(e.value)
    assert layout(b, topic)[0][1] == (1, 2, 3)  # nothing moved
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res])[res].result(20)  # other configs still change


def test_a_plain_topic_describes_an_empty_placement_that_can_be_written_back(cluster):
    """librdkafka's 0092 reads a topic's configs and writes them back: no config may be null."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    b = cluster.bootstrap()
    topic = f"plain-{uuid.uuid4().hex[:6]}"
    create(b, topic, rf=3)
    a = admin(b)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = a.describe_configs([res])[res].result(15)
    assert configs["replica.placement"].value == ""
    assert all(e.value is not None for e in configs.values()), [n for n, e in configs.items() if e.value is None]
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("replica.placement", "", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res])[res].result(20)
