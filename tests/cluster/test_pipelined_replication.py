"""Pipelined replication on three real broker processes (``shoal.replica.fetch.pipeline.depth``
forced to 4 on loopback, where the automatic choice is 1):

- on the wire: a replica's fetches pipelined on one connection are answered in order, each with
  the records after those the previous one carried (not the same records again), and a new
  connection starts from the fetch offset;
- end to end: idempotent acks=all producers over several partitions while the leader of one
  moves (controlled shutdown and restart): every acknowledged record is read back once, in
  order, the replicas' logs are byte-identical, every fetcher ran at depth 4 and no answer ever
  had to be fetched again (``shoal_replica_fetcher_resyncs_total`` 0).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import urllib.request
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cluster_harness import Cluster, running_cluster, until
from faults.run import replicating
from raw_client import RawClient
from shoal.client import AdminClient, build_entity
from shoal.protocol import codec
from shoal.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(300)

FETCH = 1
DEPTH = 4


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "pipelined", metrics=True,
                         overrides={"shoal.replica.fetch.pipeline.depth": str(DEPTH), "shoal.metering.enable": "false"}) as c:
        yield c


def create(cluster: Cluster, topic: str, assignments: dict[int, list[int]], configs: dict[str, str] | None = None):
    async def go() -> None:
        async with AdminClient(cluster.bootstrap(), timeout=20) as a:
            await a.create_topics([{"name": topic, "assignments": assignments, "configs": configs or {}}])

    asyncio.run(go())


def metrics(cluster: Cluster, node: int, name: str) -> list[tuple[str, float]]:
    url = cluster[node].overrides["shoal.metrics.listener"] + "/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return [(line.rsplit(" ", 1)[0], float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
            if line.startswith(name + "{")]


def replica_fetch(topic: str, offset: int, replica: int, max_wait_ms: int = 10000) -> dict:
    return session_fetch(topic, {0: offset}, replica, 0, -1, max_wait_ms)


def session_fetch(topic: str, offsets: dict[int, int], replica: int, session_id: int, epoch: int,
                  max_wait_ms: int = 10000) -> dict:
    """A replica's Fetch v12 of ``offsets`` (partition -> fetch offset); ``epoch`` -1 without a
    session, 0 to open one (``session_id`` 0), else an incremental fetch in ``session_id``."""
    parts = [{"partition": i, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
              "log_start_offset": -1, "partition_max_bytes": 1 << 20} for i, offset in offsets.items()]
    fields = {"replica_id": replica, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
              "isolation_level": 0, "session_id": session_id, "session_epoch": epoch, "forgotten_topics_data": [],
              "rack_id": "", "topics": [{"topic": topic, "partitions": parts}] if parts else []}
    entity = build_entity(codec.request_type(FETCH, 12), fields)
    return {f.name: getattr(entity, f.name) for f in dataclasses.fields(entity)}


def batch_range(partition) -> tuple[int, int]:
    """(first offset, offset after the last) of a fetch answer's records."""
    records = bytes(partition.records or b"")
    assert records, f"no records (error {partition.error_code})"
    first = int.from_bytes(records[0:8], "big", signed=True)
    pos, end = 0, first
    while pos < len(records):
        length = int.from_bytes(records[pos + 8:pos + 12], "big")
        base = int.from_bytes(records[pos:pos + 8], "big", signed=True)
        end = base + int.from_bytes(records[pos + 23:pos + 27], "big", signed=True) + 1
        pos += 12 + length
    return first, end


def produce_one(bootstrap: str, topic: str, value: bytes, partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "log_level": 2, "linger.ms": 0})
    p.produce(topic, value, partition=partition)
    assert p.flush(20) == 0


def test_pipelined_replica_fetches_are_answered_in_order_with_what_follows(cluster):
    """Broker 3 is down; this client fetches as replica 3 of a partition led by broker 1, two
    fetches in flight on one connection, both from the same offset (the second was sent before the
    first's answer arrived). Kafka would answer both with the same records; a pipelining leader
    answers the first with the new record and the second with the one after it."""
    topic = f"pipe-wire-{uuid.uuid4().hex[:6]}"
    create(cluster, topic, {0: [1, 2, 3]}, {"min.insync.replicas": "1"})
    produce_one(cluster[1].bootstrap, topic, b"r0")
    cluster.kill(3)
    try:
        with RawClient(cluster[1].bootstrap, timeout=30) as c:
            a = c.send(FETCH, 12, replica_fetch(topic, 1, 3))
            b = c.send(FETCH, 12, replica_fetch(topic, 1, 3))
            produce_one(cluster[1].bootstrap, topic, b"r1")
            ra = c.recv(FETCH, 12).responses[0].partitions[0]
            assert batch_range(ra) == (1, 2)
            produce_one(cluster[1].bootstrap, topic, b"r2")
            rb = c.recv(FETCH, 12).responses[0].partitions[0]
            assert (a, b) == (a, a + 1)
            assert batch_range(rb) == (2, 3)  # after what the first answer carried, not 1 again
            # the follower appended both answers: its next fetches (offset 3) get what follows
            c.send(FETCH, 12, replica_fetch(topic, 3, 3))
            c.send(FETCH, 12, replica_fetch(topic, 3, 3))
            produce_one(cluster[1].bootstrap, topic, b"r3")
            produce_one(cluster[1].bootstrap, topic, b"r4")
            got = [batch_range(c.recv(FETCH, 12).responses[0].partitions[0]) for _ in range(2)]
            assert got[0][0] == 3 and got[-1][1] == 5 and (len(got) == 1 or got[1][0] == got[0][1])
        # a new connection (a follower that dropped answers reconnects): from its fetch offset
        with RawClient(cluster[1].bootstrap, timeout=30) as c:
            assert batch_range(c.call(FETCH, 12, replica_fetch(topic, 1, 3)).responses[0].partitions[0])[0] == 1
    finally:
        cluster.start_one(3)
    assert replicating(cluster, topic, 1, 3, timeout=60), "broker 3 catches up with its real fetcher"


async def delete_records(cluster: Cluster, topic: str, partition: int, before: int) -> dict:
    async with AdminClient(cluster[1].bootstrap, timeout=20) as a:
        return await a.delete_records({(topic, partition): before})


def answered(response) -> dict[int, Any]:
    return {p.partition_index: p for t in response.responses for p in t.partitions}


def test_a_replicas_fetch_session_answers_only_the_partitions_that_changed(cluster):
    """Fetch sessions between brokers (KIP-227): broker 3 is down; this client fetches as
    replica 3 of 20 idle partitions led by broker 1. Its full fetch opens a session and is
    answered for every partition; then a fetch that names nothing is answered with nothing at its
    max_wait (an idle partition costs nothing), a record produced to one partition answers the
    parked fetch at once with that partition alone (as DeleteRecords moving its log start does at
    the next answer), and the session belongs to its connection
    and its epoch (FETCH_SESSION_ID_NOT_FOUND elsewhere, INVALID_FETCH_SESSION_EPOCH out of turn)."""
    topic = f"pipe-session-{uuid.uuid4().hex[:6]}"
    n = 20
    create(cluster, topic, {i: [1, 2, 3] for i in range(n)}, {"min.insync.replicas": "1"})
    cluster.kill(3)
    try:
        with RawClient(cluster[1].bootstrap, timeout=30) as c:
            full = c.call(FETCH, 12, session_fetch(topic, {i: 0 for i in range(n)}, 3, 0, 0, max_wait_ms=0))
            assert full.error_code == 0 and full.session_id != 0
            assert sorted(answered(full)) == list(range(n))  # a full answer opens the session
            sid = full.session_id
            t0 = time.monotonic()
            idle = c.call(FETCH, 12, session_fetch(topic, {}, 3, sid, 1, max_wait_ms=300))
            assert (idle.error_code, idle.session_id, answered(idle)) == (0, sid, {})
            assert time.monotonic() - t0 >= 0.25  # parked to its max_wait: nothing changed
            c.send(FETCH, 12, session_fetch(topic, {}, 3, sid, 2, max_wait_ms=20000))
            t0 = time.monotonic()
            produce_one(cluster[1].bootstrap, topic, b"s0", partition=7)
            woken = c.recv(FETCH, 12)
            assert time.monotonic() - t0 < 10  # answered by the append, not at its max_wait
            assert list(answered(woken)) == [7] and batch_range(answered(woken)[7]) == (0, 1)
            # the follower appended it and names partition 7 at its new log end, alone
            after = c.call(FETCH, 12, session_fetch(topic, {7: 1}, 3, sid, 3, max_wait_ms=300))
            assert set(answered(after)) <= {7} and not any(p.records for p in answered(after).values())
            # DeleteRecords moves its log start: told at the next answer (the follower deletes too)
            assert asyncio.run(delete_records(cluster, topic, 7, 1)) == {(topic, 7): 1}
            moved = c.call(FETCH, 12, session_fetch(topic, {}, 3, sid, 4, max_wait_ms=300))
            assert list(answered(moved)) == [7] and answered(moved)[7].log_start_offset == 1
            stale = c.call(FETCH, 12, session_fetch(topic, {}, 3, sid, 4, max_wait_ms=0))
            assert stale.error_code == ErrorCode.invalid_fetch_session_epoch
            with RawClient(cluster[1].bootstrap, timeout=30) as other:
                elsewhere = other.call(FETCH, 12, session_fetch(topic, {}, 3, sid, 5, max_wait_ms=0))
                assert elsewhere.error_code == ErrorCode.fetch_session_id_not_found  # not this connection's
    finally:
        cluster.start_one(3)
    # its real fetcher takes over (partition 7's logs now differ below the log start: not compared)
    until(lambda: all(sorted(isr) == [1, 2, 3] for isr in asyncio.run(isrs(cluster, topic))), 60, "broker 3 in sync")


async def isrs(cluster: Cluster, topic: str) -> list[tuple[int, ...]]:
    async with AdminClient(cluster.bootstrap(), timeout=20) as a:
        md = await a.metadata([topic])
    return [p.isr for p in md.topics[topic].partitions]


def test_pipelined_replication_loses_nothing_across_a_leader_move(cluster):
    topic = f"pipe-e2e-{uuid.uuid4().hex[:6]}"
    parts = 3
    create(cluster, topic, {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}, {"min.insync.replicas": "2"})
    acked: dict[int, list[bytes]] = {p: [] for p in range(parts)}
    errors: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def produce(worker: int) -> None:
        p = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "enable.idempotence": True,
                      "linger.ms": 1, "log_level": 2, "message.timeout.ms": 60000})

        def on_ack(err, msg) -> None:
            with lock:
                if err is None:
                    acked[msg.partition()].append(msg.value())
                else:
                    errors.append(str(err))

        i = 0
        while not stop.is_set():
            p.produce(topic, b"w%d-%06d" % (worker, i), partition=i % parts, on_delivery=on_ack)
            p.poll(0)
            i += 1
            if i % 50 == 0:
                stop.wait(0.02)
        assert p.flush(90) == 0

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    until(lambda: sum(map(len, acked.values())) > 1500, 60, "records acknowledged")
    cluster.stop(1)  # controlled shutdown of partition 0's leader, while pipelined fetches are parked on it
    until(lambda: sum(map(len, acked.values())) > 3000, 60, "records acknowledged without broker 1")
    cluster.start_one(1)
    until(lambda: sum(map(len, acked.values())) > 4500, 60, "records acknowledged after broker 1 is back")
    stop.set()
    for t in threads:
        t.join(120)
    assert not errors, errors[:5]

    assert replicating(cluster, topic, parts, 3, timeout=60), "every replica's log is byte-identical"
    c = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "log_level": 2})
    c.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    read: dict[int, list[bytes]] = {p: [] for p in range(parts)}
    want = sum(map(len, acked.values()))
    until(lambda: _poll_into(c, read) >= want, 90, "every acknowledged record read back")
    c.close()
    for p in range(parts):
        assert sorted(read[p]) == sorted(acked[p]), f"partition {p}: lost or duplicated records"
        for w in range(2):  # each producer's records in its order (idempotence keeps it across the move)
            mine = [v for v in read[p] if v.startswith(b"w%d-" % w)]
            assert mine == sorted(mine), f"partition {p}: producer {w}'s records out of order"

    for node in (1, 2, 3):
        depths = metrics(cluster, node, "shoal_replica_fetcher_pipeline_depth")
        assert depths and all(v == DEPTH for _, v in depths), (node, depths)
        assert sum(v for _, v in metrics(cluster, node, "shoal_replica_fetcher_fetches_total")) > 0
        resyncs = metrics(cluster, node, "shoal_replica_fetcher_resyncs_total")
        assert all(v == 0 for _, v in resyncs), (node, resyncs)


def _poll_into(c: Consumer, read: dict[int, list[bytes]]) -> int:
    for m in c.consume(500, 1.0):
        if m.error() is None:
            read[m.partition()].append(m.value())
    return sum(map(len, read.values()))
