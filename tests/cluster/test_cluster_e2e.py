"""Three real brokers in three racks on a real etcd (``tests/cluster_harness.py``), with real
clients: partitions spread over the brokers, clients routed to each partition's leader whatever
broker they bootstrap from, group coordinators on the broker leading the group's offsets
partition, tenants seen alike on every broker, the controller's failover and a broker's death.

The module shares one cluster (``cluster3``); the tests that kill brokers run last."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic

from cluster_harness import SESSION_MS, run, until
from shoal.client import AdminClient

pytestmark = pytest.mark.timeout(240)

N = 120  # records per client


def admin(bootstrap: str) -> KafkaAdmin:
    return KafkaAdmin({"bootstrap.servers": bootstrap, "log_level": 2})


def create(bootstrap: str, name: str, partitions: int = 6) -> None:
    a = admin(bootstrap)  # kept: a collected handle fails its futures
    a.create_topics([NewTopic(name, partitions, 1)])[name].result(20)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = admin(bootstrap).list_topics(topic, timeout=15)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def poll_values(c: Consumer, expected: int, timeout: float = 40.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    return got


def read_all_confluent(bootstrap: str | dict, topic: str, partitions: int, expected: int) -> list[bytes]:
    conf = bootstrap if isinstance(bootstrap, dict) else {"bootstrap.servers": bootstrap}
    c = Consumer({**conf, "group.id": "unused", "enable.auto.commit": False, "log_level": 2})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = poll_values(c, expected)
    c.close()
    return got


def test_leaders_spread_over_the_brokers_and_every_broker_reports_them(cluster3):
    topic = f"spread-{uuid.uuid4().hex[:6]}"
    create(cluster3[1].bootstrap, topic)
    by_broker = [until(lambda b=b: len(leaders(b.bootstrap, topic)) == 6 and leaders(b.bootstrap, topic), 10)
                 for b in cluster3.brokers.values()]
    assert by_broker[0] == by_broker[1] == by_broker[2]
    assert set(by_broker[0].values()) == {1, 2, 3}  # the planner's rack-alternated round robin
    assert sorted(list(by_broker[0].values()).count(n) for n in (1, 2, 3)) == [2, 2, 2]
    # each broker keeps logs of the partitions it hosts only
    for b in cluster3.brokers.values():
        mine = {p for p, leader in by_broker[0].items() if leader == b.node_id}
        on_disk = {int(d.name.rsplit("-", 1)[1]) for d in b.data_dir.glob(f"{topic}-*")}
        assert on_disk == mine, (b.node_id, on_disk, mine)


def test_a_partition_asked_of_a_broker_that_does_not_lead_it_is_not_leader(cluster3):
    topic = f"route-{uuid.uuid4().hex[:6]}"
    create(cluster3[1].bootstrap, topic, 3)
    lead = until(lambda: len(leaders(cluster3[2].bootstrap, topic)) == 3 and leaders(cluster3[2].bootstrap, topic))

    async def ask(node: int, partition: int):
        async with AdminClient(cluster3[node].bootstrap, timeout=10) as c:
            return await c.request(2, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                 "timestamp": -1, "max_num_offsets": 1}]}], "timeout": 10000})

    async def produce(node: int, partition: int):
        from shoal.protocol.records import build_batch

        batch = build_batch([(int(time.time() * 1000), None, b"x", ())])
        async with AdminClient(cluster3[node].bootstrap, timeout=10) as c:
            return await c.request(0, {"transactional_id": None, "acks": 1, "timeout": 10000, "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})

    for p, leader in lead.items():
        other = next(n for n in (1, 2, 3) if n != leader)
        assert run(ask(leader, p)).topics[0].partitions[0].error_code == 0
        assert run(ask(other, p)).topics[0].partitions[0].error_code == 6  # NOT_LEADER_OR_FOLLOWER
        # KIP-951 (Produce v10+): who leads, with its endpoint, so the client re-routes at once
        r = run(produce(other, p))
        part = r.responses[0].partition_responses[0]
        assert part.error_code == 6
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (leader, 0)
        assert [(e.node_id, e.host, e.port, e.rack) for e in r.node_endpoints] == [
            (leader, "127.0.0.1", cluster3[leader].port, f"dc{leader}")]
        assert run(produce(leader, p)).responses[0].partition_responses[0].error_code == 0


@pytest.mark.parametrize("via", [1, 2, 3])
def test_confluent_kafka_produces_and_consumes_through_any_one_broker(cluster3, via):
    topic = f"ck-{via}-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster3[via].bootstrap  # one broker only: the client finds the leaders from it
    create(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 2})
    for i in range(N):
        p.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 6)
    assert p.flush(30) == 0
    got = read_all_confluent(bootstrap, topic, 6, N)
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(N))


def test_kafka_python_and_aiokafka_through_one_broker(cluster3):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    topic = f"py-{uuid.uuid4().hex[:6]}"
    create(cluster3[1].bootstrap, topic)
    prod = KafkaProducer(bootstrap_servers=cluster3[2].bootstrap)
    for i in range(N):
        prod.send(topic, value=f"k{i}".encode(), partition=i % 6)
    prod.flush(30)
    prod.close()

    async def aio() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka.structs import TopicPartition as ATP

        ap = AIOKafkaProducer(bootstrap_servers=cluster3[3].bootstrap)
        await ap.start()
        try:
            for i in range(N):
                await ap.send(topic, value=f"a{i}".encode(), partition=i % 6)
            await ap.flush()
        finally:
            await ap.stop()
        ac = AIOKafkaConsumer(bootstrap_servers=cluster3[1].bootstrap, auto_offset_reset="earliest")
        await ac.start()
        got: list[bytes] = []
        try:
            ac.assign([ATP(topic, p) for p in range(6)])
            await ac.seek_to_beginning()
            deadline = time.monotonic() + 30
            while len(got) < 2 * N and time.monotonic() < deadline:
                for msgs in (await ac.getmany(timeout_ms=500)).values():
                    got += [m.value for m in msgs]
        finally:
            await ac.stop()
        return got

    want = sorted([f"k{i}".encode() for i in range(N)] + [f"a{i}".encode() for i in range(N)])
    assert sorted(asyncio.run(aio())) == want
    kc = KafkaConsumer(bootstrap_servers=cluster3[3].bootstrap, auto_offset_reset="earliest",
                       consumer_timeout_ms=3000)
    kc.assign([KTP(topic, p) for p in range(6)])
    kc.seek_to_beginning()
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 2 * N and time.monotonic() < deadline:
        for recs in kc.poll(timeout_ms=500).values():
            got += [r.value for r in recs]
    kc.close()
    assert sorted(got) == want


def test_kcat_lists_three_brokers(cluster3):
    out = subprocess.run(["kcat", "-L", "-b", cluster3[2].bootstrap, "-m", "10"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert " 3 brokers:" in out.stdout
    for b in cluster3.brokers.values():
        assert f"broker {b.node_id} at 127.0.0.1:{b.port}" in out.stdout


def coordinator_of(bootstrap: str, group: str) -> int:
    """FindCoordinator through ``bootstrap``: the coordinator's node id (-1 while not available)."""
    async def go() -> int:
        async with AdminClient(bootstrap, timeout=10) as c:
            r = await c.request(10, {"key": group, "key_type": 0, "coordinator_keys": [group]})
        c0 = r.coordinators[0] if getattr(r, "coordinators", None) else r
        return int(c0.node_id) if c0.error_code == 0 else -1

    return run(go())


def test_a_group_coordinated_by_another_broker_commits_and_resumes(cluster3):
    via = 2
    bootstrap = cluster3[via].bootstrap  # the only broker the clients are given
    until(lambda: coordinator_of(bootstrap, "probe") > 0, 20, "__consumer_offsets created")
    group = next(g for g in (f"grp-{i}-{uuid.uuid4().hex[:4]}" for i in range(100))
                 if coordinator_of(bootstrap, g) not in (via, -1))
    coordinator = coordinator_of(bootstrap, group)
    assert all(coordinator_of(b.bootstrap, group) == coordinator for b in cluster3.brokers.values())
    # a group API sent to a broker that is not its coordinator: NOT_COORDINATOR (16)
    async def heartbeat() -> int:
        async with AdminClient(bootstrap, timeout=10) as c:
            r = await c.request(12, {"group_id": group, "generation_id": 1, "member_id": "m"})
        return int(r.error_code)

    assert run(heartbeat()) == 16

    topic = f"grp-{uuid.uuid4().hex[:6]}"
    create(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 2})
    for i in range(60):
        p.produce(topic, value=f"g{i}".encode(), partition=i % 6)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "log_level": 2})
    c.subscribe([topic])
    got = poll_values(c, 60)
    c.commit(asynchronous=False)
    c.close()
    assert sorted(got) == sorted(f"g{i}".encode() for i in range(60))
    for i in range(60, 90):
        p.produce(topic, value=f"g{i}".encode(), partition=i % 6)
    assert p.flush(30) == 0

    from kafka import KafkaConsumer

    kc = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                       enable_auto_commit=False)
    rest: list[bytes] = []
    deadline = time.monotonic() + 40
    while len(rest) < 30 and time.monotonic() < deadline:
        for recs in kc.poll(timeout_ms=500).values():
            rest += [r.value for r in recs]
    kc.close()
    assert sorted(rest) == sorted(f"g{i}".encode() for i in range(60, 90))  # resumed at the commit


def test_a_tenant_created_through_broker_1_logs_in_on_broker_3_and_sees_the_same_cluster(cluster3):
    from cluster_harness import Tenant

    status, body = cluster3[1].http("POST", "/v1/tenants", {"display_name": "Cluster tenant"})
    assert status == 201, body
    on1 = Tenant(cluster3[1], body["tenant_id"])
    on1.add_user(f"carol-{uuid.uuid4().hex[:4]}")
    on3 = Tenant(cluster3[3], on1.tenant_id, dict(on1.users))  # same user and password, broker 3

    def tenant_admin(t: Tenant) -> KafkaAdmin:
        return KafkaAdmin({**t.conf(), "log_level": 2})

    a1 = tenant_admin(on1)
    a1.create_topics([NewTopic("orders", 6, 1)])["orders"].result(20)
    md1 = a1.list_topics(timeout=15)
    md3 = until(lambda: (m := tenant_admin(on3).list_topics(timeout=15)) and "orders" in m.topics and m, 10)
    assert md1.cluster_id == md3.cluster_id and md3.cluster_id.startswith("lkc-")
    assert set(md3.topics) == set(md1.topics) == {"orders"}  # the tenant's own view, on both
    assert {b.id for b in md3.brokers.values()} == {1, 2, 3}
    assert {b.port for b in md3.brokers.values()} == {b.sasl_port for b in cluster3.brokers.values()}
    p = Producer({**on3.conf(), "log_level": 2})
    for i in range(30):
        p.produce("orders", value=f"t{i}".encode(), partition=i % 6)
    assert p.flush(30) == 0
    got = read_all_confluent(on1.conf(), "orders", 6, 30)
    assert sorted(got) == sorted(f"t{i}".encode() for i in range(30))


def test_every_broker_names_the_same_controller(cluster3):
    controller = cluster3.wait_controller()
    assert controller in (1, 2, 3)
    md = admin(cluster3[3].bootstrap).list_topics(timeout=15)
    assert md.controller_id == controller  # Metadata reports it too



def test_shoal_cluster_describe(cluster3):
    import json
    import sys

    topic = f"cli-{uuid.uuid4().hex[:6]}"
    create(cluster3[1].bootstrap, topic)
    lead = until(lambda: len(leaders(cluster3[3].bootstrap, topic)) == 6 and leaders(cluster3[3].bootstrap, topic))
    controller = cluster3.wait_controller()

    def shoal(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "shoal", "cluster", "describe",
                               "--bootstrap-server", cluster3[3].bootstrap, *args],
                              capture_output=True, text=True, timeout=60)

    out = shoal("--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["controller_id"] == controller
    assert [(b["node_id"], b["rack"], b["port"]) for b in d["brokers"]] == [
        (n, f"dc{n}", cluster3[n].port) for n in (1, 2, 3)]
    for b in d["brokers"]:
        assert {tp for tp in b["leader_of"] if tp.startswith(topic + "-")} == {
            f"{topic}-{q}" for q, leader in lead.items() if leader == b["node_id"]}
    text = shoal("--partitions")
    assert text.returncode == 0, text.stderr
    assert f"controller {controller}" in text.stdout and "3 broker(s):" in text.stdout
    assert f"broker 1 at 127.0.0.1:{cluster3[1].port} rack dc1" in text.stdout
    down = subprocess.run([sys.executable, "-m", "shoal", "cluster", "describe", "--bootstrap-server",
                           "127.0.0.1:1", "--timeout", "3"], capture_output=True, text=True, timeout=60)
    assert down.returncode == 3 and down.stderr.startswith("shoal cluster describe:")

# -- the tests below kill brokers (each brings the cluster back to three) ---------------------------


def test_a_controller_stopped_cleanly_hands_over_at_once(cluster3):
    old = cluster3.wait_controller()
    cluster3.stop(old)  # SIGTERM: its lease is revoked, the key goes with it
    t0 = time.monotonic()
    new = cluster3.wait_controller(not_=old, timeout=20)
    took = time.monotonic() - t0
    print(f"SIGTERM of controller {old}: broker {new} elected after {took:.2f} s (session {SESSION_MS} ms)")
    assert took < SESSION_MS / 1000  # not waiting for a lease to expire
    cluster3.start_one(old)
    cluster3.wait_brokers({1, 2, 3})

def test_kill9_the_controller_a_new_one_is_elected_and_topics_can_be_created(cluster3):
    topic = f"ctl-{uuid.uuid4().hex[:6]}"
    old = cluster3.wait_controller()
    create(cluster3[old].bootstrap, topic, 3)
    lead = until(lambda: len(leaders(cluster3[old].bootstrap, topic)) == 3 and leaders(cluster3[old].bootstrap, topic))
    p = Producer({"bootstrap.servers": cluster3.bootstrap(), "log_level": 2})
    for i in range(30):
        p.produce(topic, value=f"c{i}".encode(), partition=i % 3)
    assert p.flush(30) == 0

    cluster3.kill(old)
    t0 = time.monotonic()
    new = cluster3.wait_controller(not_=old, timeout=SESSION_MS / 1000 + 15)
    elected = time.monotonic() - t0
    survivor = cluster3[new].bootstrap
    create(survivor, topic + "-after", 2)  # CreateTopics works again
    created = time.monotonic() - t0
    print(f"kill -9 of controller {old}: broker {new} elected after {elected:.1f} s, CreateTopics ok after "
          f"{created:.1f} s (session {SESSION_MS} ms)")
    assert elected < SESSION_MS / 1000 + 10
    # the dead broker's partitions (RF 1: no other replica) are offline, the others keep their leader
    mine = {p for p, leader in lead.items() if leader == old}
    now = until(lambda: all(leaders(survivor, topic)[q] == -1 for q in mine) and leaders(survivor, topic))
    assert {q: (-1 if q in mine else leader) for q, leader in lead.items()} == now

    cluster3.start_one(old)
    cluster3.wait_brokers({1, 2, 3})
    until(lambda: leaders(survivor, topic) == lead, 20, "leadership back on the returning broker")
    got = read_all_confluent(cluster3.bootstrap(), topic, 3, 30)
    assert sorted(got) == sorted(f"c{i}".encode() for i in range(30))


def test_kill9_a_leader_with_other_replicas_in_sync_leadership_moves_to_one_of_them(cluster3):
    topic = f"rf3-{uuid.uuid4().hex[:6]}"
    a = admin(cluster3[1].bootstrap)
    a.create_topics([NewTopic(topic, 1, 3)])[topic].result(20)

    def partition0(bootstrap: str):
        return admin(bootstrap).list_topics(topic, timeout=15).topics[topic].partitions[0]

    before = until(lambda: partition0(cluster3[1].bootstrap))
    assert sorted(before.replicas) == [1, 2, 3] and before.leader == before.replicas[0]
    old = before.leader
    survivor = cluster3[next(n for n in (1, 2, 3) if n != old)].bootstrap
    cluster3.kill(old)
    after = until(lambda: (q := partition0(survivor)).leader not in (old, -1) and q, SESSION_MS / 1000 + 15,
                  "a new leader")
    assert after.leader == next(r for r in before.replicas if r != old)  # first live ISR member
    assert old not in after.isrs and sorted(after.isrs) == sorted(set(before.isrs) - {old})
    p = Producer({"bootstrap.servers": survivor, "acks": 1, "log_level": 2})  # no replication yet: acks=1
    p.produce(topic, value=b"after failover", partition=0)
    assert p.flush(30) == 0
    cluster3.start_one(old)
    cluster3.wait_brokers({1, 2, 3})
    assert partition0(survivor).leader == after.leader  # leadership does not move back by itself

def test_kill9_a_broker_it_leaves_metadata_after_its_lease_and_comes_back(cluster3):
    controller = cluster3.wait_controller()
    victim = next(n for n in (3, 2, 1) if n != controller)
    cluster3.kill(victim)
    t0 = time.monotonic()
    cluster3.wait_brokers({1, 2, 3} - {victim}, timeout=SESSION_MS / 1000 + 15)
    gone = time.monotonic() - t0
    print(f"broker {victim} left Metadata {gone:.1f} s after kill -9 (session {SESSION_MS} ms)")
    assert gone >= 1.0  # its lease outlived it
    cluster3.start_one(victim)
    cluster3.wait_brokers({1, 2, 3})
    assert cluster3.wait_controller() == controller  # not moved by another broker's death
