"""Zero-copy Fetch end to end (issue 29, part 1): one real broker with a PLAINTEXT and an SSL
listener; record sets go out with sendfile on plaintext and are copied on TLS, and real clients
(confluent-kafka, kafka-python with its incremental fetch sessions) read the same records on both.
A segment deleted while a large response is being sent, a client that pipelines fetches and reads
nothing, and connections closed mid-send cost no descriptor after. In process:
tests/server/test_sendfile.py; follower replication: tests/cluster/test_zero_copy_replication.py."""

from __future__ import annotations

import datetime
import hashlib
import os
import socket
import struct
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from broker_process import BrokerProcess, free_port
from raw_client import recv_exactly, recv_frame
from shoal.protocol import codec

pytestmark = pytest.mark.timeout(90)
MIB = 1 << 20
VALUE = 1000  # bytes a record


class ZeroCopyBroker(BrokerProcess):
    """PLAINTEXT (``port``) and SSL (``ssl_port``, a test CA) listeners, metrics on HTTP."""

    def __init__(self, workdir: Path) -> None:
        certs = str(Path(__file__).resolve().parent.parent / "auth")
        if certs not in sys.path:
            sys.path.insert(0, certs)
        from auth_certs import make_pki

        self.pki = make_pki(workdir / "pki")
        self.ssl_port = free_port()
        self.metrics_url = f"http://127.0.0.1:{free_port()}"
        super().__init__(workdir, overrides={
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.pki.server_pem),
            "ssl.truststore.location": str(self.pki.ca),
            "shoal.metrics.listener": self.metrics_url,
            "log.retention.check.interval.ms": "200",
        })

    def listeners(self) -> list[str]:
        return super().listeners() + [f"SSL://{self.host}:{self.ssl_port}"]

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(self.metrics_url + "/metrics", timeout=10) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise AssertionError(f"{name} not in /metrics")

    def fds(self) -> int:
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


@pytest.fixture(scope="module")
def zb(tmp_path_factory):
    b = ZeroCopyBroker(tmp_path_factory.mktemp("zero-copy"))
    b.start()
    yield b
    b.stop()


def values(topic: str, n: int) -> list[bytes]:
    return [(b"%s-%07d-" % (topic.encode(), i)).ljust(VALUE, b"v") for i in range(n)]


def make(b: ZeroCopyBroker, topic: str, n: int, **config: str) -> list[bytes]:
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(20)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "batch.size": 256 * 1024,
                  "compression.type": "none", "acks": "all"})
    vs = values(topic, n)
    for i, v in enumerate(vs):
        p.produce(topic, v)
        if i % 2000 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    return vs


def digest(vs) -> str:
    h = hashlib.sha256()
    for v in vs:
        h.update(v)
    return h.hexdigest()


def confluent_read(bootstrap: str, topic: str, n: int, **conf: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", **conf})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        c.close()
    return got


def test_plaintext_sends_from_the_file_tls_copies_and_clients_read_the_same(zb) -> None:
    topic = "zc-clients"
    vs = make(zb, topic, 6000)  # ~6 MB: every 1 MiB fetch is a long read
    sent = zb.metric("shoal_fetch_sendfile_bytes_total")
    got = confluent_read(zb.bootstrap, topic, len(vs))
    assert len(got) == len(vs) and digest(got) == digest(vs)
    after_plain = zb.metric("shoal_fetch_sendfile_bytes_total")
    assert after_plain - sent >= 4 * MIB, "plaintext fetches did not use sendfile"

    got = confluent_read(f"127.0.0.1:{zb.ssl_port}", topic, len(vs), **{
        "security.protocol": "SSL", "ssl.ca.location": str(zb.pki.ca)})
    assert len(got) == len(vs) and digest(got) == digest(vs)
    assert zb.metric("shoal_fetch_sendfile_bytes_total") == after_plain, "TLS must copy, never sendfile"

    # kafka-python: fetch sessions (KIP-227), incremental after the first fetch
    k = KafkaConsumer(bootstrap_servers=zb.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      max_partition_fetch_bytes=MIB, consumer_timeout_ms=15000)
    try:
        from kafka import TopicPartition as KTP

        k.assign([KTP(topic, 0)])
        kgot = []
        for m in k:
            kgot.append(m.value)
            if len(kgot) == len(vs):
                break
        sessions = [(h.next_metadata.session_id, h.next_metadata.epoch) for h in k._fetcher._session_handlers.values()]
    finally:
        k.close()
    assert len(kgot) == len(vs) and digest(kgot) == digest(vs)
    # a session, and incremental fetches in it (the epoch counts them)
    assert sessions and all(sid and epoch > 2 for sid, epoch in sessions), sessions
    assert zb.metric("shoal_fetch_sendfile_bytes_total") - after_plain >= 4 * MIB
    assert zb.metric("shoal_fetch_regions_open") == 0


def fetch_frame(topic: str, cid: int, offset: int = 0, max_bytes: int = 32 * MIB) -> bytes:
    fetch = codec.request_type(1, 4)
    mod = sys.modules[fetch.__module__]
    body = fetch(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=max_bytes, isolation_level=0,
                 topics=(mod.FetchTopic(topic=topic, partitions=(
                     mod.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=max_bytes),)),))
    return codec.encode_request(1, 4, cid, "zero-copy-test", body)


def stalled(b: ZeroCopyBroker) -> socket.socket:
    """A client connection that will read its responses only later (a tiny receive buffer)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((b.host, b.port))
    return s


def until(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_segment_deleted_while_its_region_is_sent_still_answers_its_bytes(zb) -> None:
    """A 12 MB answer from the first segment is stalled half sent; DeleteRecords then deletes that
    segment's file; the answer still arrives whole: every batch's CRC valid, every value produced."""
    topic = "zc-delete"
    vs = make(zb, topic, 15000, **{"segment.bytes": str(12 * MIB)})
    seg0 = zb.data_dir / f"{topic}-0" / "00000000000000000000.log"
    assert seg0.exists()
    s = stalled(zb)
    try:
        s.sendall(fetch_frame(topic, 1))
        until(lambda: zb.metric("shoal_fetch_regions_open") >= 1, 10, "the region to be sending")
        size = struct.unpack(">i", recv_exactly(s, 4))[0]
        assert size > 8 * MIB
        a = AdminClient({"bootstrap.servers": zb.bootstrap})
        first_kept = len(vs) - 100
        (done,) = a.delete_records([TopicPartition(topic, 0, first_kept)]).values()
        done.result(20)
        until(lambda: not seg0.exists(), 15, "the first segment to be deleted")
        assert zb.metric("shoal_fetch_regions_open") >= 1, "the response was sent before the deletion"
        s.settimeout(30)
        payload = recv_exactly(s, size)
    finally:
        s.close()
    _, resp = codec.decode_response(1, 4, payload)
    records = bytes(resp.responses[0].partitions[0].records)
    parsed = MemoryRecords(records)
    got = []
    while parsed.has_next():
        batch = parsed.next_batch()
        if batch is None:
            break
        assert isinstance(batch, DefaultRecordBatch) and batch.validate_crc()
        got.extend((r.offset, r.value) for r in batch)
    assert len(got) > 8000
    assert got == [(i, vs[i]) for i in range(len(got))]
    until(lambda: zb.metric("shoal_fetch_regions_open") == 0, 10, "the region to be closed")


def test_stalled_and_closed_connections_hold_bounded_regions_and_leak_no_descriptor(zb) -> None:
    """Three clients pipeline 60 fetches of ~2 MB each and read nothing: the broker stops reading
    from them (the outbox counts toward shoal.connection.queued.response.max.bytes), so the
    regions open stay bounded (two or three answers each, not 60); the clients then vanish (RST) mid-send, and 20 more connections
    fetch and close: the broker's descriptors are as before."""
    topic = "zc-fds"
    vs = make(zb, topic, 2200)
    assert len(confluent_read(zb.bootstrap, topic, len(vs))) == len(vs)  # warm: the segment is open
    before = zb.fds()
    socks = [stalled(zb) for _ in range(3)]
    for s in socks:
        s.sendall(b"".join(fetch_frame(topic, i) for i in range(60)))
    time.sleep(1.0)
    opened = zb.metric("shoal_fetch_regions_open")
    # each stops being read once its unsent answers pass queued.response.max.bytes (4 MiB): 2-3 of them
    assert 3 <= opened <= 3 * 4, opened
    for s in socks:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    for i in range(20):
        with socket.create_connection((zb.host, zb.port)) as s:
            s.sendall(fetch_frame(topic, i, max_bytes=MIB))
            if i % 2:
                recv_frame(s)  # half read their answer, half close before it
    until(lambda: zb.metric("shoal_fetch_regions_open") == 0, 10, "every region to be closed")
    until(lambda: zb.fds() <= before, 10, f"the broker's descriptors back to {before} (now {zb.fds()})")
