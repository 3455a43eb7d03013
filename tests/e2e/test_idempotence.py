"""Idempotent producers against a real Shoal broker: kafka-python and confluent-kafka with
idempotence on, and a producer whose connections a loopback proxy cuts at random points.

The cutting test runs its own broker, started with ``--advertised-listeners`` pointing at the
proxy, so every connection the client makes (bootstrap and leader) goes through the proxy; the
partitions are read back afterwards straight from the broker's own port with Shoal's client.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from broker_process import BrokerProcess
from e2e_helpers import OP_TIMEOUT, consume, create_topic
from faults.linkproxy import LinkProxy
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from shoal.client import AdminClient
from shoal.protocol.codec import request_type
from shoal.protocol.records import iter_records

pytestmark = pytest.mark.timeout(90)

LINK = "client->broker"  # the proxy link of the cutting test
FETCH, DESCRIBE_PRODUCERS = 1, 61


# -- reading back straight from a broker ---------------------------------------------------------


async def _read_partitions(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    """Every (offset, value) of every partition, by Fetch v4 on the bootstrap connection only."""
    fetch = request_type(FETCH, 4)
    mod = sys.modules[fetch.__module__]
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    async with AdminClient(bootstrap, client_id="readback") as c:
        for p in range(partitions):
            offset = 0
            while True:
                req = fetch(
                    max_wait=datetime.timedelta(0),
                    min_bytes=0,
                    max_bytes=4 << 20,
                    topics=(
                        mod.FetchTopic(
                            topic=topic,
                            partitions=(mod.FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=4 << 20),),
                        ),
                    ),
                )
                resp = await c.request(FETCH, req)
                part = resp.responses[0].partitions[0]
                assert part.error_code == 0, part
                recs = [r for r in iter_records(part.records or b"") if r.offset >= offset]
                out[p].extend((r.offset, r.value) for r in recs)
                if recs:
                    offset = recs[-1].offset + 1
                if offset >= part.high_watermark:
                    break
    return out


async def _describe_producers(bootstrap: str, topic: str, partitions: int):
    async with AdminClient(bootstrap, client_id="describe") as c:
        resp = await c.request(
            DESCRIBE_PRODUCERS, {"topics": [{"name": topic, "partition_indexes": list(range(partitions))}]}
        )
    return resp.topics[0].partitions


# -- kafka-python and confluent-kafka, no faults ---------------------------------------------------


def test_kafka_python_default_settings_are_idempotent(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 3)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=2, request_timeout_ms=15000)
    try:
        assert producer.config["enable_idempotence"]  # kafka-python 3's default
        futures = [producer.send(topic_name, value=b"%d" % i, partition=i % 3) for i in range(300)]
        producer.flush(timeout=15)
        metas = [f.get(timeout=15) for f in futures]
    finally:
        producer.close(timeout=5)
    got = asyncio.run(_read_partitions(broker.bootstrap, topic_name, 3))
    for p in range(3):
        assert [v for _, v in got[p]] == [b"%d" % i for i in range(p, 300, 3)]
        assert [o for o, _ in got[p]] == list(range(100))
    assert sorted((m.partition, m.offset) for m in metas) == sorted((p, o) for p in range(3) for o in range(100))
    described = asyncio.run(_describe_producers(broker.bootstrap, topic_name, 3))
    assert all(p.error_code == 0 and len(p.active_producers) == 1 for p in described)
    assert len({p.active_producers[0].producer_id for p in described}) == 1
    assert [p.active_producers[0].last_sequence for p in described] == [99, 99, 99]

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", consumer_timeout_ms=15000, fetch_max_wait_ms=100,
    )
    try:
        tp = TopicPartition(topic_name, 1)
        consumer.assign([tp])
        seen = []
        deadline = time.monotonic() + 15
        while len(seen) < 100 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                seen.extend(r.value for r in records)
        assert seen == [b"%d" % i for i in range(1, 300, 3)]
    finally:
        consumer.close(autocommit=False)


def test_confluent_kafka_enable_idempotence(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2, "socket.timeout.ms": 10000}
    )
    errors = []
    for i in range(2000):
        producer.produce(topic_name, value=b"%d" % i, partition=i % 2, on_delivery=lambda e, m: e and errors.append(e))
        producer.poll(0)
    assert producer.flush(OP_TIMEOUT) == 0 and not errors
    msgs = consume(broker.bootstrap, topic_name, 2, 2000)
    by_part: dict[int, list[bytes]] = {0: [], 1: []}
    for m in msgs:
        by_part[m.partition()].append(m.value())
    assert by_part == {p: [b"%d" % i for i in range(p, 2000, 2)] for p in (0, 1)}
    described = asyncio.run(_describe_producers(broker.bootstrap, topic_name, 2))
    assert [p.active_producers[0].last_sequence for p in described] == [999, 999]


def test_producer_state_survives_restarts(fresh_broker, topic_name):
    """After a SIGKILL (recovery replays the log) and a clean restart (the snapshot), the broker
    still knows the producer's epoch and last sequence, and the producer carries on."""
    create_topic(fresh_broker.bootstrap, topic_name, 2)
    producer = Producer(
        {
            "bootstrap.servers": fresh_broker.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 2,
            "socket.timeout.ms": 10000,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
        }
    )
    errors = []
    sent = 0

    def send(n: int) -> None:
        nonlocal sent
        for i in range(sent, sent + n):
            producer.produce(topic_name, value=b"%d" % i, partition=i % 2, on_delivery=lambda e, m: e and errors.append(e))
            producer.poll(0)
        assert producer.flush(OP_TIMEOUT) == 0 and not errors
        sent += n

    def producers() -> list[tuple[int, int, int]]:
        described = asyncio.run(_describe_producers(fresh_broker.bootstrap, topic_name, 2))
        return [(s.producer_id, s.producer_epoch, s.last_sequence) for p in described for s in p.active_producers]

    send(600)
    before = producers()
    assert [last for _, _, last in before] == [299, 299]
    fresh_broker.kill9()
    assert producers() == before  # rebuilt by replaying the log
    send(400)
    pid, epoch, _ = before[0]
    assert producers() == [(pid, epoch, 499), (pid, epoch, 499)]
    fresh_broker.restart()
    assert producers() == [(pid, epoch, 499), (pid, epoch, 499)]  # from the shutdown snapshot
    send(200)
    assert producers() == [(pid, epoch, 599), (pid, epoch, 599)]
    got = asyncio.run(_read_partitions(fresh_broker.bootstrap, topic_name, 2))
    for p in range(2):
        assert [v for _, v in got[p]] == [b"%d" % i for i in range(p, sent, 2)]


# -- a proxy that cuts connections ---------------------------------------------------------------


@pytest.fixture
def proxied():
    """A broker of its own advertising a link proxy's port (tests/faults/linkproxy.py), so every
    connection a client makes goes through the link; the test makes the link cut connections at
    random points (``chop``: a byte budget per connection and direction from the seeded proxy)."""
    workdir = Path(tempfile.mkdtemp(prefix="shoal-e2e-proxy-"))
    seed = int(os.environ.get("SHOAL_PROXY_SEED", random.randrange(1 << 30)))
    proxy = LinkProxy(seed)
    # DEBUG: the produce handler logs each duplicate it answers
    broker = BrokerProcess(workdir, log_level="DEBUG")
    port = proxy.add(LINK, (broker.host, broker.port))
    broker.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
    failed = True
    try:
        broker.start()
        yield broker, proxy, seed
        failed = False
    finally:
        proxy.close()
        broker.stop()
        if failed:
            print(f"\nproxy seed {seed}; broker directory kept: {workdir}\n{broker.log_tail()}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def test_cut_connections_deliver_every_message_exactly_once_in_order(proxied):
    broker, proxy, seed = proxied
    topic, partitions, total = "cut-test", 4, 20_000
    create_topic(f"127.0.0.1:{proxy.port(LINK)}", topic, partitions)  # before the cutting starts
    proxy.chop(LINK, up=60_000, down=1_500, max_cuts=20)
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{proxy.port(LINK)}",
            "enable.idempotence": True,
            "linger.ms": 2,
            "batch.num.messages": 100,
            "max.in.flight.requests.per.connection": 5,
            "message.timeout.ms": 60000,
            "request.timeout.ms": 10000,
            "retry.backoff.ms": 10,
            "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 100,
            "socket.timeout.ms": 10000,
        }
    )
    delivered: dict[int, tuple[int, int]] = {}
    errors: list[str] = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            delivered[int(msg.value())] = (msg.partition(), msg.offset())

    for i in range(total):
        while True:
            try:
                producer.produce(topic, value=b"%d" % i, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(60)
    proxy.chop(LINK)
    stats = proxy.stats(LINK)
    cuts, connections = stats["chopped"], stats["connected"]
    assert remaining == 0 and not errors, (remaining, errors[:5], f"seed {seed}")
    assert cuts >= 5, f"only {cuts} cuts in {connections} connections (seed {seed})"

    got = asyncio.run(_read_partitions(broker.bootstrap, topic, partitions))
    for p in range(partitions):
        values = [v for _, v in got[p]]
        want = [b"%d" % i for i in range(p, total, partitions)]
        assert len(values) == len(want), f"partition {p}: {len(values)} records for {len(want)} sent (seed {seed})"
        assert values == want, f"partition {p} differs (seed {seed})"
        assert [o for o, _ in got[p]] == list(range(len(want)))
    assert len(delivered) == total
    for i, (p, offset) in delivered.items():
        assert (p, offset) == (i % partitions, i // partitions), (i, p, offset)
    text = broker.log_text()
    assert "Traceback" not in text and " ERROR " not in text, broker.log_tail()
    duplicates = text.count("duplicate batch to")
    if os.environ.get("SHOAL_SHOW_BROKER_LOG"):
        print("\n".join(l for l in text.splitlines() if " DEBUG " not in l))
    described = asyncio.run(_describe_producers(broker.bootstrap, topic, partitions))
    producers = sorted({(s.producer_id, s.producer_epoch) for p in described for s in p.active_producers})
    print(
        f"seed {seed}: {cuts} cuts over {connections} connections, {duplicates} duplicates; "
        f"producer (id, epoch)s in the partitions: {producers}"
    )
    # Cut responses make the client resend batches the broker already has.
    assert duplicates > 0, f"no retried batch reached the broker (seed {seed})"
