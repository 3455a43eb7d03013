"""Replication across three real brokers on a real etcd, with real clients: followers fetch from
leaders, the high watermark waits for the ISR, acks=all survives the leader's kill -9, a returning
broker catches up byte for byte and rejoins the ISR, and min.insync.replicas refuses writes the
ISR cannot hold.

The module shares one cluster whose ``replica.lag.time.max.ms`` is short (a stalled follower
leaves the ISR within seconds); the tests that kill brokers bring them back."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic

from cluster_harness import Cluster, run, running_cluster, until
from shoal.client import AdminClient
from shoal.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(300)

LAG_MS = 3000
OFFSETS_FOR_LEADER_EPOCH = 23


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "replication", metrics=True,
                         overrides={"replica.lag.time.max.ms": str(LAG_MS), "replica.fetch.backoff.ms": "200"}) as c:
        yield c


def admin(bootstrap: str) -> KafkaAdmin:
    return KafkaAdmin({"bootstrap.servers": bootstrap, "log_level": 2})


def create(bootstrap: str, name: str, partitions: int, rf: int = 3, configs: dict[str, str] | None = None) -> None:
    a = admin(bootstrap)
    a.create_topics([NewTopic(name, partitions, rf, config=configs or {})])[name].result(20)


def partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]]:
    """partition -> (leader, replicas, isr) as Metadata reports them."""
    md = admin(bootstrap).list_topics(topic, timeout=15)
    return {p.id: (p.leader, tuple(p.replicas), tuple(p.isrs)) for p in md.topics[topic].partitions.values()}


def produce(bootstrap: str, topic: str, values: list[bytes], timeout: float = 60) -> dict[bytes, tuple[int, int]]:
    """Idempotent acks=all; value -> (partition, offset) of every acknowledged record."""
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[str] = []

    def done(err, msg) -> None:
        if err is None:
            acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            errors.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "log_level": 2, "message.timeout.ms": int(timeout * 1000)})
    for v in values:
        p.produce(topic, v, key=v, on_delivery=done)  # keyed: spread over the partitions
        p.poll(0)
    assert p.flush(timeout + 10) == 0
    assert not errors, errors[:5]
    return acked


def read_all(bootstrap: str, topic: str, n_partitions: int, expected: int, timeout: float = 60) -> list[tuple[int, int, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "log_level": 2, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(n_partitions)])
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.partition(), m.offset(), m.value()))
    c.close()
    return got


def segments(data_dir: Path, topic: str, partition: int) -> bytes:
    d = data_dir / f"{topic}-{partition}"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def replicas_identical(cluster: Cluster, topic: str, partition: int, nodes) -> bool:
    logs = [segments(cluster[n].data_dir, topic, partition) for n in nodes]
    return len(logs[0]) > 0 and all(x == logs[0] for x in logs)


def partition_sizes(acked: dict[bytes, tuple[int, int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for p, _ in acked.values():
        out[p] = out.get(p, 0) + 1
    return out


def test_acks_all_is_replicated_to_every_isr_member_byte_for_byte(cluster):
    topic = f"rf3-{uuid.uuid4().hex[:6]}"
    create(cluster[1].bootstrap, topic, 3)
    layout = until(lambda: (p := partitions(cluster[2].bootstrap, topic)) and len(p) == 3 and p, 15)
    for leader, replicas, isr in layout.values():
        assert len(replicas) == 3 and sorted(isr) == sorted(replicas) and leader == replicas[0]
    values = [b"v%04d" % i for i in range(300)]
    acked = produce(cluster[3].bootstrap, topic, values)
    assert len(acked) == 300 and sorted(partition_sizes(acked)) == [0, 1, 2]
    got = read_all(cluster[2].bootstrap, topic, 3, 300)
    assert sorted(v for _, _, v in got) == sorted(values)
    for p in range(3):  # followers hold the leader's bytes (appended unchanged)
        until(lambda p=p: replicas_identical(cluster, topic, p, (1, 2, 3)), 20, f"replicas of partition {p}")
    # nobody left the ISR while following
    assert all(sorted(isr) == [1, 2, 3] for _, _, isr in partitions(cluster[1].bootstrap, topic).values())


def fetcher_totals(cluster: Cluster, node: int) -> tuple[float, float]:
    """(Fetch answers, partitions named) over the replica fetchers of ``node``, from its metrics."""
    url = cluster[node].overrides["shoal.metrics.listener"] + "/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()

    def total(name: str) -> float:
        values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
        assert values, f"broker {node} has no {name}"
        return sum(values)

    return total("shoal_replica_fetcher_fetches_total"), total("shoal_replica_fetcher_partitions_named_total")


def test_idle_partitions_are_named_by_no_fetch_and_their_followers_stay_in_the_isr(cluster):
    """Fetch sessions between brokers (KIP-227): 60 idle partitions at RF 3. Once each fetcher's
    session is open, its fetches name no idle partition (each named every one it followed,
    at every fetch), and every follower stays in every ISR for twice replica.lag.time.max.ms,
    kept caught up by its session's fetches alone (the leader no longer walks the partitions)."""
    topic = f"idle-many-{uuid.uuid4().hex[:6]}"
    n = 60
    create(cluster[1].bootstrap, topic, n)
    until(lambda: all(len(isr) == 3 for _, _, isr in partitions(cluster[1].bootstrap, topic).values()), 30,
          "every ISR full")
    produce(cluster[1].bootstrap, topic, [b"once"])  # one partition written once, then idle too
    time.sleep(1.0)
    before = {node: fetcher_totals(cluster, node) for node in (1, 2, 3)}
    time.sleep(2 * LAG_MS / 1000)
    after = {node: fetcher_totals(cluster, node) for node in (1, 2, 3)}
    for node in (1, 2, 3):
        fetches, named = (a - b for a, b in zip(after[node], before[node]))
        assert fetches >= 4, (node, fetches)  # the fetchers fetched on (at their max_wait)...
        assert named <= 10, (node, named, fetches)
    isrs = partitions(cluster[1].bootstrap, topic)
    assert all(len(isr) == 3 for _, _, isr in isrs.values()), isrs


def test_an_idle_follower_paused_out_of_the_isr_rejoins_it(cluster):
    """A follower paused (SIGSTOP) past replica.lag.time.max.ms leaves the ISRs of idle
    partitions; when it runs again its log has not changed, so its fetch session names none of
    them: the leaders must still read them at its fetches (as Kafka's walk of the session does)
    for it to rejoin."""
    import signal

    topic = f"idle-pause-{uuid.uuid4().hex[:6]}"
    create(cluster[1].bootstrap, topic, 6)
    until(lambda: all(len(isr) == 3 for _, _, isr in partitions(cluster[1].bootstrap, topic).values()), 30,
          "every ISR full")
    produce(cluster[1].bootstrap, topic, [b"p%d" % i for i in range(12)])
    until(lambda: all(replicas_identical(cluster, topic, i, (1, 2, 3)) for i in range(6)), 20, "replicated")
    paused = cluster[3].proc
    paused.send_signal(signal.SIGSTOP)
    try:
        until(lambda: all(3 not in isr for _, _, isr in partitions(cluster[1].bootstrap, topic).values()), 30,
              "broker 3 out of every ISR")
    finally:
        paused.send_signal(signal.SIGCONT)
    until(lambda: all(sorted(isr) == [1, 2, 3] for _, _, isr in partitions(cluster[1].bootstrap, topic).values()),
          30, "broker 3 back in every ISR, nothing written")
    cluster.wait_brokers({1, 2, 3})


def test_the_leaders_kill_loses_no_acknowledged_write_and_the_broker_catches_up(cluster):
    topic = f"failover-{uuid.uuid4().hex[:6]}"
    create(cluster[1].bootstrap, topic, 1, configs={"min.insync.replicas": "2"})
    leader = until(lambda: partitions(cluster[2].bootstrap, topic)[0][0], 15)
    first = produce(cluster[1].bootstrap, topic, [b"a%04d" % i for i in range(200)])
    cluster.kill(leader)
    others = [n for n in (1, 2, 3) if n != leader]
    survivor = cluster[others[0]].bootstrap
    # a new leader from the ISR, and the dead broker out of it
    new_leader, _, isr = until(lambda: (p := partitions(survivor, topic)[0]) and p[0] in others and p, 30,
                               "a new leader")
    assert leader not in isr
    second = produce(survivor, topic, [b"b%04d" % i for i in range(200)])
    got = read_all(survivor, topic, 1, 400)
    values = [v for _, _, v in got]
    assert sorted(values) == sorted(list(first) + list(second))  # none lost, none twice
    assert [o for _, o, _ in got] == list(range(400))  # one log, no holes
    # the killed broker returns as a follower, catches up and rejoins the ISR
    cluster.start_one(leader)
    until(lambda: sorted(partitions(survivor, topic)[0][2]) == [1, 2, 3], 60, "the returning broker in the ISR")
    until(lambda: replicas_identical(cluster, topic, 0, (1, 2, 3)), 30, "byte-identical replicas")
    assert partitions(survivor, topic)[0][0] == new_leader  # no leadership bounce on its return
    # OffsetsForLeaderEpoch (KIP-279): epoch 0 (the killed leader's) ends where epoch 1 starts
    assert epoch_end(cluster[new_leader].bootstrap, topic, 0) == ("NONE", 0, 200)
    assert epoch_end(cluster[new_leader].bootstrap, topic, 1) == ("NONE", 1, 400)  # the latest: log end
    assert epoch_end(cluster[new_leader].bootstrap, topic, 1, current=0)[0] == "FENCED_LEADER_EPOCH"
    assert epoch_end(cluster[leader].bootstrap, topic, 1)[0] == "NOT_LEADER_OR_FOLLOWER"


def test_an_idle_partition_led_back_by_its_preferred_leader_keeps_every_follower(cluster):
    """kill -9 the leader A of an idle partition; B leads an epoch and writes nothing in it; A
    returns and the preferred election makes it leader again. B's empty epoch is unknown to A:
    A answers that B diverges at B's log end, and B must drop that epoch (truncating to its log
    end) and fetch on. It used to truncate nothing, keep its empty epoch, and ask again thousands
    of times a second, out of the ISR for good."""
    from kafka import KafkaAdminClient

    topic = f"idle-{uuid.uuid4().hex[:6]}"
    create(cluster[1].bootstrap, topic, 1, configs={"min.insync.replicas": "2"})
    a, _, _ = until(lambda: (p := partitions(cluster[1].bootstrap, topic)[0]) and len(p[2]) == 3 and p, 15)
    produce(cluster[1].bootstrap, topic, [b"i%03d" % i for i in range(20)])
    until(lambda: replicas_identical(cluster, topic, 0, (1, 2, 3)), 20, "replicated before the kill")
    cluster.kill(a)
    others = [n for n in (1, 2, 3) if n != a]
    b = until(lambda: (p := partitions(cluster[others[0]].bootstrap, topic)[0]) and p[0] in others and p[0], 30,
              "a new leader")
    cluster.start_one(a)
    until(lambda: sorted(partitions(cluster[b].bootstrap, topic)[0][2]) == [1, 2, 3], 60, "A back in the ISR")
    marks = {n: len(cluster[n].log_text()) for n in others}
    admin = KafkaAdminClient(bootstrap_servers=cluster[b].bootstrap, request_timeout_ms=30000)
    try:
        r = admin.elect_leaders(0, {topic: [0]})  # preferred: A again
        assert r.replica_election_results[0].partition_result[0].error_code == 0
    finally:
        admin.close()
    until(lambda: partitions(cluster[b].bootstrap, topic)[0][0] == a, 15, "A leading again")
    more = produce(cluster[b].bootstrap, topic, [b"j%03d" % i for i in range(20)])
    assert len(more) == 20
    time.sleep(LAG_MS / 1000 * 1.5)  # a follower that stopped fetching would have left the ISR by now
    assert sorted(partitions(cluster[a].bootstrap, topic)[0][2]) == [1, 2, 3]
    until(lambda: replicas_identical(cluster, topic, 0, (1, 2, 3)), 20, "every replica holds the new records")
    for n in others:
        diverged = cluster[n].log_text()[marks[n]:].count(f"{topic}-0: log diverges")
        assert diverged <= 2, f"broker {n} logged {diverged} divergences"


def epoch_end(bootstrap: str, topic: str, epoch: int, current: int = -1) -> tuple[str, int, int]:
    async def ask():
        async with AdminClient(bootstrap, timeout=10) as c:
            r = await c.request(OFFSETS_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [
                {"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": current,
                                                 "leader_epoch": epoch}]}]})
        p = r.topics[0].partitions[0]
        return ErrorCode(p.error_code).name.upper(), p.leader_epoch, p.end_offset

    return run(ask())


def test_min_insync_replicas_refuses_what_the_isr_cannot_hold(cluster):
    topic = f"minisr-{uuid.uuid4().hex[:6]}"
    create(cluster[1].bootstrap, topic, 1, configs={"min.insync.replicas": "3"})
    leader, replicas, _ = until(lambda: partitions(cluster[1].bootstrap, topic)[0], 15)
    produce(cluster[leader].bootstrap, topic, [b"ok"])
    victim = next(r for r in replicas if r != leader)
    cluster.kill(victim)
    try:
        until(lambda: victim not in partitions(cluster[leader].bootstrap, topic)[0][2], 30, "the ISR shrinks")
        described = subprocess.run([sys.executable, "-m", "shoal", "cluster", "describe", "--json",
                                    "--bootstrap-server", cluster[leader].bootstrap],
                                   capture_output=True, text=True, timeout=60)
        under = {p["partition"]: p for p in json.loads(described.stdout)["under_replicated_partitions"]}
        assert victim not in under[f"{topic}-0"]["isr"] and victim in under[f"{topic}-0"]["replicas"]
        errors: list[KafkaError] = []
        p = Producer({"bootstrap.servers": cluster[leader].bootstrap, "acks": "all", "log_level": 2,
                      "message.timeout.ms": 3000, "retries": 0})
        p.produce(topic, b"refused", on_delivery=lambda err, msg: errors.append(err))
        p.flush(10)
        assert [e.code() for e in errors] == [KafkaError.NOT_ENOUGH_REPLICAS]
        # acks=1 does not need the ISR
        p1 = Producer({"bootstrap.servers": cluster[leader].bootstrap, "acks": 1, "log_level": 2})
        ok: list = []
        p1.produce(topic, b"acks1", on_delivery=lambda err, msg: ok.append(err))
        p1.flush(10)
        assert ok == [None]
    finally:
        cluster.start_one(victim)
    until(lambda: len(partitions(cluster[leader].bootstrap, topic)[0][2]) == 3, 60, "the ISR whole again")
    produce(cluster[leader].bootstrap, topic, [b"again"])


def test_a_controlled_shutdown_moves_leadership_without_a_produce_error(cluster):
    topic = f"sigterm-{uuid.uuid4().hex[:6]}"
    create(cluster[1].bootstrap, topic, 1, configs={"min.insync.replicas": "2"})
    leader = until(lambda: (p := partitions(cluster[1].bootstrap, topic)[0]) and len(p[2]) == 3 and p[0], 15)
    others = [n for n in (1, 2, 3) if n != leader]
    acked: list[bytes] = []
    errors: list[str] = []
    stop = threading.Event()

    def load() -> None:
        p = Producer({"bootstrap.servers": ",".join(cluster[n].bootstrap for n in others), "acks": "all",
                      "enable.idempotence": True, "linger.ms": 2, "log_level": 2, "message.timeout.ms": 30000})
        i = 0
        while not stop.is_set():
            p.produce(topic, b"c%05d" % i, on_delivery=lambda err, msg: (errors if err else acked).append(
                str(err) if err else msg.value()))
            i += 1
            p.poll(0.005)
        assert p.flush(40) == 0

    worker = threading.Thread(target=load)
    worker.start()
    try:
        until(lambda: len(acked) >= 100, 30, "records before the shutdown")
        cluster.stop(leader)  # SIGTERM: a clean stop
        new_leader = until(lambda: (p := partitions(cluster[others[0]].bootstrap, topic)[0]) and p[0] in others
                           and p[0], 30, "a new leader")
        n = len(acked)
        until(lambda: len(acked) >= n + 100, 30, "records after the shutdown")
    finally:
        stop.set()
        worker.join(60)
    assert errors == []
    got = read_all(cluster[new_leader].bootstrap, topic, 1, len(acked))
    assert sorted(v for _, _, v in got) == sorted(acked)
    cluster.start_one(leader)
    until(lambda: len(partitions(cluster[new_leader].bootstrap, topic)[0][2]) == 3, 60, "the ISR whole again")


def test_committed_offsets_survive_the_coordinators_kill(cluster):
    topic, group = f"offsets-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    create(cluster[1].bootstrap, topic, 1)
    produce(cluster[1].bootstrap, topic, [b"r%03d" % i for i in range(100)])
    everyone = ",".join(b.bootstrap for b in cluster.live)
    c = Consumer({"bootstrap.servers": everyone, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "log_level": 2})
    c.subscribe([topic])
    got: list = []
    deadline = time.monotonic() + 60
    while len(got) < 40 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m)
    c.commit(got[39], asynchronous=False)  # committed: offset 40
    c.close()

    node = coordinator_of(cluster[1].bootstrap, group)
    offsets_topic = partitions(cluster[1].bootstrap, "__consumer_offsets")
    assert all(len(replicas) == 3 for _, replicas, _ in offsets_topic.values())  # replicated, as Kafka's
    cluster.kill(node)
    try:
        survivor = next(b.bootstrap for b in cluster.live if b.node_id != node)
        moved = until(lambda: (n := coordinator_of(survivor, group)) != node and n, 60, "a new coordinator")
        assert moved != node
        c = Consumer({"bootstrap.servers": survivor, "group.id": group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "log_level": 2})
        c.subscribe([topic])
        first = None
        deadline = time.monotonic() + 60
        while first is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                first = m
        c.close()
        assert first is not None and (first.offset(), first.value()) == (40, b"r040")
    finally:
        cluster.start_one(node)


def coordinator_of(bootstrap: str, group: str) -> int:
    async def ask() -> int:
        async with AdminClient(bootstrap, timeout=5) as a:
            return (await a.find_coordinator(group))[0]

    return run(ask())


def test_kafka_python_elects_the_preferred_leader_back_and_describes_log_dirs(cluster):
    from kafka import KafkaAdminClient

    topic = f"preferred-{uuid.uuid4().hex[:6]}"
    create(cluster[1].bootstrap, topic, 1)
    preferred, replicas, _ = until(lambda: (p := partitions(cluster[1].bootstrap, topic)[0]) and len(p[2]) == 3 and p, 15)
    assert preferred == replicas[0]
    produce(cluster[1].bootstrap, topic, [b"p%03d" % i for i in range(50)])
    cluster.stop(preferred)  # SIGTERM: leadership moves to another ISR member
    other = next(n for n in (1, 2, 3) if n != preferred)
    until(lambda: partitions(cluster[other].bootstrap, topic)[0][0] not in (-1, preferred), 30, "a new leader")
    cluster.start_one(preferred)
    until(lambda: sorted(partitions(cluster[other].bootstrap, topic)[0][2]) == [1, 2, 3], 60, "back in the ISR")
    assert partitions(cluster[other].bootstrap, topic)[0][0] != preferred
    admin = KafkaAdminClient(bootstrap_servers=cluster[other].bootstrap, request_timeout_ms=30000)
    try:
        r = admin.elect_leaders(0, {topic: [0]})  # preferred
        assert [(x.topic, [(p.partition_id, p.error_code) for p in x.partition_result])
                for x in r.replica_election_results] == [(topic, [(0, 0)])]
        until(lambda: partitions(cluster[other].bootstrap, topic)[0][0] == preferred, 15, "the preferred leader")
        r = admin.elect_leaders(0, {topic: [0]})  # again: nothing to do
        assert r.replica_election_results[0].partition_result[0].error_code == KafkaError.ELECTION_NOT_NEEDED
        dirs = admin.describe_log_dirs()  # every broker's log directory, and the replicas in it
        found = {
            d["broker"]: [(p["partition_index"], p["partition_size"] > 0, p["offset_lag"])
                          for ld in d["log_dirs"] for t in ld["topics"] if t["name"] == topic for p in t["partitions"]]
            for d in dirs
        }
        assert found == {1: [(0, True, 0)], 2: [(0, True, 0)], 3: [(0, True, 0)]}, found
    finally:
        admin.close()


def test_a_restarted_brokers_rejoin_of_many_partitions_goes_in_few_isr_batches(cluster, etcd_cluster):
    """Issue 25: 360 partitions at RF 3; one broker (not the controller) is killed and the
    controller takes it out of every ISR; started again it catches up, and its leaders put it back
    into every ISR in batches (``shoal.replica.isr``): a handful of metadata commits, where one a
    partition made 360 (and, at 6,000 partitions, minutes of saturation)."""
    names = [f"many-{uuid.uuid4().hex[:6]}-{i}" for i in range(3)]
    for name in names:
        create(cluster[1].bootstrap, name, 120)
    controller = cluster.wait_controller()
    survivor = cluster[controller].bootstrap

    def isrs() -> list[tuple[int, ...]]:
        return [isr for name in names for _, _, isr in partitions(survivor, name).values()]

    until(lambda: len(isrs()) == 360 and all(len(isr) == 3 for isr in isrs()), 60, "every ISR full")
    prefix = "/" + cluster.url.split("/", 3)[3]

    def epoch() -> int:
        return int(json.loads(etcd_cluster.etcdctl("get", f"{prefix}/meta/epoch", "--print-value-only"))["epoch"])

    victim = next(n for n in (3, 2, 1) if n != controller)
    cluster.kill(victim)
    until(lambda: all(victim not in isr for isr in isrs()), 60, f"broker {victim} out of every ISR")
    before = epoch()
    cluster.start_one(victim)
    until(lambda: all(len(isr) == 3 for isr in isrs()), 90, "every ISR full again")
    commits = epoch() - before
    batches = [line for n in (1, 2, 3) if n != victim for line in cluster[n].log_text().splitlines()
               if "ISR changes (batch" in line]
    assert commits <= 40, (commits, batches[-10:])
    assert batches, "the leaders log one line per batch"


def metric(cluster: Cluster, node: int, name: str) -> float:
    """An unlabelled metric of ``node``."""
    url = cluster[node].overrides["shoal.metrics.listener"] + "/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " ")]
    assert values, f"broker {node} has no {name}"
    return values[0]


def test_a_restarted_broker_catches_up_a_few_partitions_at_a_time_and_rejoins_every_isr(cluster):
    """Issue 25: a restarted broker under ``replica.fetch.max.catchup.partitions`` 4 rejoins the
    ISR of all 60 partitions it follows or leads, records written while it was down included
    (byte for byte), never fetching more than 4 of those out of its ISR at once."""
    name = f"catchup-{uuid.uuid4().hex[:6]}"
    create(cluster[1].bootstrap, name, 60)
    controller = cluster.wait_controller()
    survivor = cluster[controller].bootstrap
    until(lambda: all(len(isr) == 3 for _, _, isr in partitions(survivor, name).values()), 60, "every ISR full")
    victim = next(n for n in (3, 2, 1) if n != controller)
    cluster.kill(victim)
    until(lambda: all(victim not in isr for _, _, isr in partitions(survivor, name).values()), 60,
          f"broker {victim} out of every ISR")
    acked = produce(survivor, name, [f"v{i}".encode() for i in range(600)])
    cluster[victim].overrides["replica.fetch.max.catchup.partitions"] = "4"
    try:
        cluster.start_one(victim)
        until(lambda: all(len(isr) == 3 for _, _, isr in partitions(survivor, name).values()), 120,
              "every ISR full again")
        # the other tests' topics too (the kill took the victim out of their ISRs as well)
        until(lambda: metric(cluster, victim, "shoal_replica_catching_up_waiting_partitions") == 0
              and metric(cluster, victim, "shoal_replica_catching_up_partitions") == 0, 120, "none catching up")
        peak = metric(cluster, victim, "shoal_replica_catching_up_peak_partitions")
        assert 1 <= peak <= 4, peak
    finally:
        del cluster[victim].overrides["replica.fetch.max.catchup.partitions"]
    for p in sorted(partition_sizes(acked)):
        until(lambda p=p: replicas_identical(cluster, name, p, (1, 2, 3)), 30, f"replicas of partition {p}")
