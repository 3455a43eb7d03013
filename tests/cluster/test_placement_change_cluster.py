"""Changing a topic's ``replica.placement`` on four real broker processes (dc1: 1, 2; dc2: 3, 4) on
the real etcd, with confluent-kafka: IncrementalAlterConfigs with a new placement starts a
reassignment of every partition to a placement-valid assignment, the controller completes it
when the target's sync replicas are in sync, and every acknowledged record is read back from the
new replicas. Observers move too (version 2: an observer becomes a sync replica and a sync replica
an observer; a change of roles only hands the leadership over at once)."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from cluster_harness import running_cluster, until

pytestmark = pytest.mark.timeout(300)

RACK = {1: "dc1", 2: "dc1", 3: "dc2", 4: "dc2"}


def placement(version, sync, obs=()):
    doc = {"version": version, "replicas": [{"count": n, "constraints": {"rack": r}} for r, n in sync]}
    if obs:
        doc["observers"] = [{"count": n, "constraints": {"rack": r}} for r, n in obs]
    return json.dumps(doc)


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "placechange", size=4,
                         racks=[RACK[i] for i in range(1, 5)],
                         overrides={"replica.lag.time.max.ms": "2000", "replica.fetch.backoff.ms": "200"}) as c:
        yield c


def layout(a: KafkaAdmin, topic: str) -> dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]]:
    md = a.list_topics(topic, timeout=15)
    return {p.id: (p.leader, tuple(p.replicas), tuple(sorted(p.isrs))) for p in md.topics[topic].partitions.values()}


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "log_level": 2})
    for v in values:
        p.produce(topic, v, partition=int(v[-1:]) % 2, on_delivery=lambda err, _m: errors.append(err))
        p.poll(0)
    p.flush(30)
    assert len(errors) == len(values) and all(e is None for e in errors), errors


def read_all(bootstrap: str, topic: str, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}", "log_level": 2,
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, i, 0) for i in range(2)])
    got: list[bytes] = []

    def read() -> bool:  # a batch a poll: one record a poll slept 0.1 s each, 30 s for 300 records
        got.extend(m.value() for m in c.consume(1000, 0.5) if m.error() is None)
        return len(got) >= n
    try:
        until(read, 60, lambda: f"{n} records (got {len(got)})", every=0)
    finally:
        c.close()
    return got


def change(a: KafkaAdmin, topic: str, value: str) -> None:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("replica.placement", value, incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res])[res].result(30)


def moves_logged(cluster, topic: str) -> dict[int, list[str]]:
    """Each broker's log lines about ``topic`` and the controller's (for a failure's message)."""
    return {n: [line for line in text.splitlines() if topic in line or "controller" in line][-15:]
            for n, text in cluster.logs_since({}).items()}


def racks(replicas) -> list[str]:
    return [RACK[r] for r in replicas]


def test_v1_dc1_heavy_to_dc2_heavy_moves_the_replicas(cluster):
    b = cluster.bootstrap()
    a = KafkaAdmin({"bootstrap.servers": b, "log_level": 2})
    topic = f"pc-{uuid.uuid4().hex[:6]}"
    a.create_topics([NewTopic(topic, 2, -1, config={"replica.placement": placement(1, [("dc1", 2), ("dc2", 1)]),
                                                     "min.insync.replicas": "2"})])[topic].result(30)
    before = until(lambda: (lay := layout(a, topic)) and len(lay) == 2 and lay, 20, "the topic")
    assert all(sorted(racks(r)) == ["dc1", "dc1", "dc2"] and len(isr) == 3 for _l, r, isr in before.values())
    values = [b"v%04d" % i for i in range(300)]
    produce(b, topic, values)

    change(a, topic, placement(1, [("dc2", 2), ("dc1", 1)]))

    def moved():
        lay = layout(a, topic)
        ok = all(racks(r) == ["dc2", "dc2", "dc1"] and len(isr) == 3 for _l, r, isr in lay.values())
        return ok and lay
    after = until(moved, 90, lambda: f"every partition dc2-heavy, in sync: {layout(a, topic)}; the logs: "
                  f"{moves_logged(cluster, topic)}")
    for i, (_leader, replicas, isr) in after.items():
        assert set(isr) == set(replicas)
        assert len(set(replicas) & set(before[i][1])) == 2  # one dc1 replica and the dc2 one stayed
    got = read_all(b, topic, len(values))
    assert sorted(got) == sorted(values)
    produce(b, topic, [b"w%04d" % i for i in range(50)])  # and it takes writes in its new place
    # the replica that left dropped its log; the new one holds the data
    for i, (_l, replicas, _isr) in after.items():
        gone = set(before[i][1]) - set(replicas)
        for n in gone:
            until(lambda: not (cluster[n].data_dir / f"{topic}-{i}").exists(), 30, f"broker {n} drops {topic}-{i}")


def test_observers_move_with_the_placement(cluster):
    b = cluster.bootstrap()
    a = KafkaAdmin({"bootstrap.servers": b, "log_level": 2})
    topic = f"pco-{uuid.uuid4().hex[:6]}"
    a.create_topics([NewTopic(topic, 2, -1, config={
        "replica.placement": placement(2, [("dc1", 2)], [("dc2", 1)])})])[topic].result(30)
    before = until(lambda: (lay := layout(a, topic)) and len(lay) == 2 and lay, 20, "the topic")
    assert all(racks(r) == ["dc1", "dc1", "dc2"] and racks(isr) == ["dc1", "dc1"] for _l, r, isr in before.values())
    values = [b"o%04d" % i for i in range(200)]
    produce(b, topic, values)

    change(a, topic, placement(2, [("dc2", 2)], [("dc1", 1)]))

    def moved():
        lay = layout(a, topic)
        ok = all(racks(r) == ["dc2", "dc2", "dc1"] and racks(isr) == ["dc2", "dc2"] and RACK[leader] == "dc2"
                 for leader, r, isr in lay.values())
        return ok and lay
    after = until(moved, 90, "sync replicas in dc2, the observer in dc1, out of the ISR")
    for i, (_l, replicas, _isr) in after.items():
        assert replicas[2] in before[i][1]  # a former sync replica observes now: nothing to copy
    assert sorted(read_all(b, topic, len(values))) == sorted(values)
    produce(b, topic, [b"p%04d" % i for i in range(50)])


def test_a_change_of_roles_only_hands_the_leadership_over(cluster):
    # dc1 + dc2 sync and a dc2 observer, led from dc1 -> two dc2 sync replicas and a dc1 observer:
    # the same three replicas, so there is nothing to copy; the dc1 leader, an observer now, hands
    # over to a dc2 sync replica and leaves the ISR at once (the old code kept it leading, in the
    # ISR, until an election)
    b = cluster.bootstrap()
    a = KafkaAdmin({"bootstrap.servers": b, "log_level": 2})
    topic = f"pcr-{uuid.uuid4().hex[:6]}"
    a.create_topics([NewTopic(topic, 2, -1, config={
        "replica.placement": placement(2, [("dc1", 1), ("dc2", 1)], [("dc2", 1)])})])[topic].result(30)
    before = until(lambda: (lay := layout(a, topic)) and len(lay) == 2 and all(len(isr) == 2 for *_x, isr in lay.values())
                   and lay, 20, "the topic, its sync replicas in sync")
    assert all(RACK[leader] == "dc1" and racks(r) == ["dc1", "dc2", "dc2"] for leader, r, _isr in before.values())
    values = [b"r%04d" % i for i in range(200)]
    produce(b, topic, values)

    change(a, topic, placement(2, [("dc2", 2)], [("dc1", 1)]))

    def swapped():
        lay = layout(a, topic)
        ok = all(racks(r) == ["dc2", "dc2", "dc1"] and RACK[leader] == "dc2" and "dc1" not in racks(isr)
                 for leader, r, isr in lay.values())
        return ok and lay
    after = until(swapped, 10, "a dc2 leader, the dc1 observer out of the ISR")
    for i, (_l, replicas, _isr) in after.items():
        assert set(replicas) == set(before[i][1])  # no replica moved
    until(lambda: all(len(isr) == 2 for *_x, isr in layout(a, topic).values()), 30, "the former observer in sync")
    assert sorted(read_all(b, topic, len(values))) == sorted(values)
    produce(b, topic, [b"s%04d" % i for i in range(50)])
