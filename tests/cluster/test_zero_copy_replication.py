"""Zero-copy Fetch between brokers (issue 29, part 1): three real brokers on the real etcd, the
inter-broker listener plaintext, followers fetching with pipelined replication (depth 2). The
leaders send the followers' record sets with sendfile, and every replica's log ends byte for byte
identical to its leader's; a consumer reads everything back. In process and single broker:
tests/server/test_sendfile.py, tests/e2e/test_zero_copy.py."""

from __future__ import annotations

import hashlib
import signal
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster_harness import running_cluster, until

pytestmark = pytest.mark.timeout(180)
MIB = 1 << 20


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "zerocopy", metrics=True,
                         overrides={"shoal.replica.fetch.pipeline.depth": "2"}) as c:
        yield c


def sendfile_bytes(b) -> float:
    with urllib.request.urlopen(b.overrides["shoal.metrics.listener"] + "/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("shoal_fetch_sendfile_bytes_total "):
                return float(line.split()[1])
    raise AssertionError("shoal_fetch_sendfile_bytes_total not in /metrics")


def log_digest(b, topic: str, partition: int) -> tuple[int, str]:
    """(bytes, sha256) of a replica's segment files, in order."""
    d = b.data_dir / f"{topic}-{partition}"
    h, n = hashlib.sha256(), 0
    for seg in sorted(d.glob("*.log")):
        data = seg.read_bytes()
        h.update(data)
        n += len(data)
    return n, h.hexdigest()


def test_followers_fetch_by_sendfile_and_end_identical(cluster) -> None:
    topic = f"zc-{uuid.uuid4().hex[:6]}"
    before = {n: sendfile_bytes(b) for n, b in cluster.brokers.items()}
    a = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 2})
    a.create_topics([NewTopic(topic, 2, 3, config={"segment.bytes": str(2 * MIB)})])[topic].result(30)
    # A follower paused while the records are written catches up with large fetches, which the
    # leaders send by sendfile. (Followers that keep up fetch each small batch as it comes, and
    # reads that fit the first small read are copied: how many depends on the machine's load.)
    until(lambda: all(cluster.leader_of(topic, part) > 0 for part in (0, 1)), 30, "leaders elected")
    leaders = {cluster.leader_of(topic, part) for part in (0, 1)}
    lagging = next(b for node, b in cluster.brokers.items() if node not in leaders)
    # (the producer bootstraps from the leaders: a paused broker answers no metadata request)
    p = Producer({"bootstrap.servers": cluster.bootstrap(*sorted(leaders)),
                  "acks": "1", "linger.ms": 20, "log_level": 2,
                  "batch.size": 256 * 1024, "compression.type": "none"})
    n = 8000
    values = [(b"%06d-" % i).ljust(1000, b"r") for i in range(n)]
    lagging.proc.send_signal(signal.SIGSTOP)
    try:
        for i, v in enumerate(values):
            p.produce(topic, v, partition=i % 2)
            if i % 1000 == 0:
                p.poll(0)
        assert p.flush(60) == 0
    finally:
        lagging.proc.send_signal(signal.SIGCONT)

    def identical() -> bool:
        for part in (0, 1):
            digests = {log_digest(b, topic, part) for b in cluster.brokers.values()}
            if len(digests) != 1 or next(iter(digests))[0] < 3 * MIB:
                return False
        return True

    until(identical, 60, "every replica's log identical to its leader's")
    sent = sum(sendfile_bytes(b) - before[n] for n, b in cluster.brokers.items())
    # the paused follower alone fetched 2 x 4 MB
    assert sent >= 2 * 3 * MIB, f"followers' fetches sent {sent} bytes with sendfile"

    c = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": topic, "enable.auto.commit": False,
                  "log_level": 2})
    c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            got.extend(m.value() for m in c.consume(1000, 0.5) if m.error() is None)
    finally:
        c.close()
    assert sorted(got) == values
