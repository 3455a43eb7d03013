"""read_committed consumers against the partition side of transactions, with real clients.

The transactional batches and the end-transaction markers are written into the partition through
the replica layer of an in-process broker (``Partition.append_as_leader`` / ``append_marker``, as
the produce handler and WriteTxnMarkers do), so this tests the partition side alone: the last
stable offset, the aborted-transaction index and Fetch / ListOffsets with isolation_level=1.
confluent-kafka (librdkafka), kafka-python and aiokafka consumers with ``read_committed`` see
only committed records and stop at the LSO; ``read_uncommitted`` sees every data record.
"""

from __future__ import annotations

import time

import pytest
from broker_thread import ThreadBroker
from confluent_kafka import Consumer, TopicPartition
from read_committed_helpers import aio_values, ck_values, kp_values

from shoal.handlers.metadata import auto_create_topic
from shoal.protocol.records import build_batch

pytestmark = pytest.mark.timeout(180)

TOPIC = "rc"
PA, PB, PC = 101, 202, 303


def plain(*values: bytes) -> bytearray:
    return bytearray(build_batch([(int(time.time() * 1000), None, v, []) for v in values]))


def txn(pid: int, seq: int, *values: bytes) -> bytearray:
    return bytearray(build_batch([(int(time.time() * 1000), None, v, []) for v in values],
                                 producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True))


@pytest.fixture
def tb(tmp_path):
    with ThreadBroker(tmp_path, {"num.partitions": "1"}) as b:
        b.run(auto_create_topic(b.broker.services, TOPIC))
        yield b


def partition(tb: ThreadBroker):
    return tb.broker.services.replicas.partition(TOPIC, 0)


def write(tb: ThreadBroker, *steps) -> None:
    """Each step: a bytearray batch to append as leader, or (pid, commit) for a marker."""
    def go() -> None:
        p = partition(tb)
        now = int(time.time() * 1000)
        for s in steps:
            if isinstance(s, bytearray):
                p.append_as_leader(s, now)
            else:
                p.append_marker(s[0], 0, 0, s[1], now)
    tb.call(go)


def layout(tb: ThreadBroker) -> None:
    write(
        tb,
        plain(b"p0", b"p1"),          # 0-1
        txn(PA, 0, b"a0"),            # 2
        txn(PB, 0, b"b0", b"b1"),     # 3-4
        txn(PA, 1, b"a1"),            # 5
        (PA, True),                   # 6 commit A
        (PB, False),                  # 7 abort B
        txn(PC, 0, b"c0"),            # 8 open
        plain(b"p2"),                 # 9
    )


COMMITTED_BEFORE_C = [b"p0", b"p1", b"a0", b"a1"]
EVERYTHING = [b"p0", b"p1", b"a0", b"b0", b"b1", b"a1", b"c0", b"p2"]


def test_confluent_read_committed_skips_aborted_and_stops_at_the_lso(tb) -> None:
    layout(tb)
    p = partition(tb)
    assert tb.call(lambda: (p.high_watermark, p.last_stable_offset)) == (10, 8)
    assert tb.call(lambda: p.log.aborted_transactions(0, 10)) == [(PB, 3)]
    assert ck_values(tb.bootstrap, TOPIC, "read_committed", 4, settle=2.0) == COMMITTED_BEFORE_C
    assert ck_values(tb.bootstrap, TOPIC, "read_uncommitted", 8, settle=1.0) == EVERYTHING
    write(tb, (PC, True))  # commit C: the LSO moves past p2
    assert tb.call(lambda: p.last_stable_offset) == 11
    assert ck_values(tb.bootstrap, TOPIC, "read_committed", 6, settle=1.0) == COMMITTED_BEFORE_C + [b"c0", b"p2"]


def test_confluent_read_committed_consumer_waiting_at_the_lso_gets_the_commit(tb) -> None:
    write(tb, txn(PA, 0, b"x0"), plain(b"y"))
    c = Consumer({"bootstrap.servers": tb.bootstrap, "group.id": "wait", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "fetch.wait.max.ms": 200})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    try:
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            assert m is None or m.error(), "a record of an open transaction was delivered"
        write(tb, (PA, True))
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        assert got == [b"x0", b"y"]
    finally:
        c.close()


def raw_call(bootstrap: str, key: int, version: int, values: dict):
    """One request on a bare socket, nested fields given as dicts."""
    from raw_client import RawClient, recv_frame

    from shoal.client import build_entity
    from shoal.protocol import codec

    with RawClient(bootstrap) as r:
        body = build_entity(codec.request_type(key, version), values)
        r.sock.sendall(codec.encode_request(key, version, 1, "rc-test", body))
        return codec.decode_response(key, version, recv_frame(r.sock))[1]


def test_list_offsets_read_committed_latest_is_the_lso(tb) -> None:
    layout(tb)

    def latest(isolation: int) -> int:
        resp = raw_call(tb.bootstrap, 2, 5, {"replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        [t] = resp.topics
        [pr] = t.partitions
        assert pr.error_code == 0
        return pr.offset

    assert latest(1) == 8
    assert latest(0) == 10


def test_fetch_answer_carries_lso_and_aborted_transactions(tb) -> None:
    layout(tb)

    def fetch(isolation: int, offset: int = 0):
        resp = raw_call(tb.bootstrap, 1, 11, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": isolation,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                         "fetch_offset": offset, "log_start_offset": -1,
                                                         "partition_max_bytes": 1 << 20}]}]})
        [t] = resp.responses
        [pd] = t.partitions
        return pd

    rc = fetch(1)
    assert (rc.high_watermark, rc.last_stable_offset) == (10, 8)
    assert [(a.producer_id, a.first_offset) for a in rc.aborted_transactions] == [(PB, 3)]
    ru = fetch(0)
    assert (ru.high_watermark, ru.last_stable_offset) == (10, 8)
    assert ru.aborted_transactions is None
    assert len(ru.records) > len(rc.records)
    assert not fetch(1, offset=8).records  # at the LSO: nothing yet


def test_kafka_python_read_committed(tb) -> None:
    layout(tb)
    assert kp_values(tb.bootstrap, TOPIC) == COMMITTED_BEFORE_C


def test_aiokafka_read_committed(tb) -> None:
    layout(tb)
    assert aio_values(tb.bootstrap, TOPIC, 4) == (COMMITTED_BEFORE_C, 8)  # its end offset: the LSO
