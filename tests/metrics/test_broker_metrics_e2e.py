"""Kafka's broker metrics on /metrics, against a real broker and real clients (issue 16).

One ``shoal serve`` with tenants ``a`` and ``b`` (tests/e2e/tenancy_fixtures.py) and the metrics
endpoint. Counters are checked exactly against what the clients did: the bytes a tenant's
producer wrote are the bytes a raw Fetch reads back, the messages are the records produced, the
lag is the high watermark minus the committed offset as the consumer reads them, and each
histogram counts every request.
"""

from __future__ import annotations

import datetime
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

from broker_process import free_port  # noqa: E402
from metrics_scrape import Scrape, scrape  # noqa: E402
from polling import until  # noqa: E402
from raw_client import RawClient  # noqa: E402
from tenancy_fixtures import tenant_cluster  # noqa: E402

from shoal.protocol import codec  # noqa: E402
from shoal.protocol.records import build_batch  # noqa: E402

N = 400
VALUE = b"v" * 1000
TIMEOUT = 30.0
PARTS = ("total", "queue", "local", "remote", "throttle", "send")


@pytest.fixture(scope="module")
def mcluster():
    yield from tenant_cluster({"shoal.metrics.listener": f"http://127.0.0.1:{free_port()}"})


def now_scrape(c) -> Scrape:
    return scrape(c.broker.overrides["shoal.metrics.listener"] + "/metrics")


def create(conf: dict, topic: str, config: dict[str, str] | None = None) -> None:
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1, config=config or {})])[topic].result(TIMEOUT)


def produce(conf: dict, topic: str, n: int, value: bytes = VALUE) -> list:
    """Produce ``n`` records, flush; the delivery errors (None for each success)."""
    p = Producer({**conf, "acks": "all", "linger.ms": 20, "compression.type": "none"})
    errors: list = []
    for _ in range(n):
        p.produce(topic, value, on_delivery=lambda err, msg: errors.append(err))
        p.poll(0)
    assert p.flush(TIMEOUT) == 0
    return errors


def raw_fetch_all(bootstrap: str, physical: str) -> bytes:
    """Every record byte of partition 0, read by the operator (physical view) with Fetch v4."""
    mod = sys.modules[codec.request_type(1, 4).__module__]
    with RawClient(bootstrap, client_id="metrics-raw") as r:
        resp = r.call(1, 4, {
            "replica_id": -1, "max_wait": datetime.timedelta(milliseconds=10), "min_bytes": 1,
            "max_bytes": 64 << 20, "isolation_level": 0,
            "topics": (mod.FetchTopic(topic=physical, partitions=(
                mod.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=64 << 20),)),),
        })
    (topic,) = resp.responses
    (part,) = topic.partitions
    assert part.error_code == 0
    return bytes(part.records)


def test_topic_bytes_messages_log_and_lag_are_exact(mcluster):
    a = mcluster.a
    labels = {"tenant": a.tenant_id, "topic": "metered"}
    create(a.conf(), "metered")
    assert produce(a.conf(), "metered", N) == [None] * N
    c = Consumer({**a.conf(), "group.id": "meter-g", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe(["metered"])
        got, deadline = 0, time.monotonic() + TIMEOUT
        while got < N and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got += 1
        assert got == N
        c.commit(asynchronous=False)
    finally:
        c.close()
    first = now_scrape(mcluster)
    stored = raw_fetch_all(mcluster.broker.bootstrap, a.prefix + "metered")  # every batch, as written
    second = now_scrape(mcluster)

    assert first.value("shoal_topic_messages_in_total", **labels) == N
    assert first.value("shoal_topic_bytes_in_total", **labels) == len(stored)
    assert first.value("shoal_topic_bytes_out_total", **labels) == len(stored)  # the consumer read it once
    assert second.value("shoal_topic_bytes_out_total", **labels) == 2 * len(stored)  # and the raw fetch again
    assert first.value("shoal_topic_produce_requests_total", **labels) >= 1
    assert first.value("shoal_topic_fetch_requests_total", **labels) >= 1
    assert first.value("shoal_topic_failed_produce_requests_total", **labels) == 0
    assert first.value("shoal_topic_failed_fetch_requests_total", **labels) == 0
    assert first.get("shoal_topic_bytes_in_total", tenant=mcluster.b.tenant_id, topic="metered") is None
    assert not [k for k in first.samples if dict(k[1]).get("topic", "").startswith(a.prefix)]  # no physical names

    part = {**labels, "partition": "0"}
    assert first.value("shoal_log_end_offset", **part) == N
    assert first.value("shoal_log_high_watermark", **part) == N
    assert first.value("shoal_log_start_offset", **part) == 0
    assert first.value("shoal_log_size_bytes", **part) == len(stored)
    assert first.value("shoal_log_segments", **part) == 1
    lag = {"tenant": a.tenant_id, "group": "meter-g", "topic": "metered", "partition": "0"}
    assert first.value("shoal_consumer_group_committed_offset", **lag) == N
    assert first.value("shoal_consumer_group_lag", **lag) == 0

    assert produce(a.conf(), "metered", 7) == [None] * 7  # not consumed: the lag is 7
    c = Consumer({**a.conf(), "group.id": "meter-g"})
    try:
        (committed,) = c.committed([TopicPartition("metered", 0)], timeout=TIMEOUT)
        _low, high = c.get_watermark_offsets(TopicPartition("metered", 0), timeout=TIMEOUT)
    finally:
        c.close()
    third = now_scrape(mcluster)
    assert (committed.offset, high) == (N, N + 7)
    assert third.value("shoal_consumer_group_lag", **lag) == high - committed.offset
    assert third.value("shoal_topic_messages_in_total", **labels) == N + 7


def test_failed_produce_is_counted_per_topic_and_unknown_topics_make_no_series(mcluster):
    a = mcluster.a
    create(a.conf(), "small", {"max.message.bytes": "1000"})
    before = now_scrape(mcluster)
    errors = produce(a.conf(), "small", 1, b"x" * 5000)
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    # the operator produces to a topic that does not exist (Produce never creates one)
    mod = sys.modules[codec.request_type(0, 9).__module__]
    with RawClient(mcluster.broker.bootstrap) as r:
        resp = r.call(0, 9, {
            "transactional_id": None, "acks": 1, "timeout": datetime.timedelta(seconds=5),
            "topic_data": (mod.TopicProduceData(name="no-such-topic-metrics", partition_data=(
                mod.PartitionProduceData(index=0, records=build_batch([(1, None, b"x", [])])),)),),
        })
    assert resp.responses[0].partition_responses[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    after = now_scrape(mcluster)
    small = {"tenant": a.tenant_id, "topic": "small"}
    assert after.value("shoal_topic_failed_produce_requests_total", **small) == 1
    assert after.value("shoal_topic_produce_requests_total", **small) == 1
    assert after.value("shoal_topic_bytes_in_total", **small) == 0
    assert after.value("shoal_topic_messages_in_total", **small) == 0

    def errs(s: Scrape, error: str) -> float:
        return s.value("shoal_request_errors_total", api="Produce", error=error)

    assert errs(after, "MESSAGE_TOO_LARGE") - errs(before, "MESSAGE_TOO_LARGE") == 1
    assert errs(after, "UNKNOWN_TOPIC_OR_PARTITION") - errs(before, "UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert not [k for k in after.samples if dict(k[1]).get("topic") == "no-such-topic-metrics"]


def test_every_latency_histogram_counts_every_request(mcluster):
    k = 25
    before = now_scrape(mcluster)
    with RawClient(mcluster.broker.bootstrap, client_id="metrics-hist") as r:
        for _ in range(k):
            assert r.call(3, 1, {"topics": ()}).brokers
    after = now_scrape(mcluster)
    total = after.sum("shoal_requests_total", api="Metadata")
    assert after.value("shoal_requests_total", api="Metadata", tenant="") \
        - before.value("shoal_requests_total", api="Metadata", tenant="") == k
    for api in ("Metadata", "Produce", "FetchConsumer", "ApiVersions", "SaslAuthenticate"):
        requests = after.sum("shoal_requests_total", api=api)
        assert requests > 0, api
        for part in PARTS:
            name = f"shoal_request_{part}_time_seconds"
            assert after.value(f"{name}_count", api=api) == requests, (api, part)
            buckets = sorted(((float(dict(ls)["le"]), v) for (n, ls), v in after.samples.items()
                              if n == f"{name}_bucket" and dict(ls)["api"] == api))
            counts = [v for _, v in buckets]
            assert counts == sorted(counts) and counts[-1] == requests, (api, part)
        for name in ("shoal_request_size_bytes", "shoal_response_size_bytes"):
            assert after.value(f"{name}_count", api=api) == requests, (api, name)
    assert total == after.value("shoal_request_total_time_seconds_count", api="Metadata")
    # a Metadata request is tens of bytes, its answer more: the size histograms saw them
    assert 20 < after.value("shoal_request_size_bytes_sum", api="Metadata") / total < 200


def plain_login(address: str, user: str, password: str) -> int:
    with RawClient(address, client_id="metrics-auth", timeout=15) as c:
        assert c.call(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        return int(c.call(36, 2, {"auth_bytes": f"\x00{user}\x00{password}".encode()}).error_code)


def test_authentications_and_connections_are_counted(mcluster):
    a = mcluster.a
    auth = {"listener": "SASL_PLAINTEXT", "mechanism": "PLAIN"}
    scram_client = AdminClient(a.conf())  # librdkafka's SCRAM login: two SaslAuthenticate rounds
    assert scram_client.list_topics(timeout=TIMEOUT).topics is not None
    del scram_client  # (destroyed: it opens no connection in the counted window)
    before = now_scrape(mcluster)
    assert plain_login(mcluster.broker.sasl_bootstrap, a.user, "wrong-password") != 0
    assert plain_login(mcluster.broker.sasl_bootstrap, a.user, a.users[a.user]) == 0
    clients = [RawClient(mcluster.broker.bootstrap, client_id=f"metrics-conn-{i}") for i in range(3)]
    try:
        for c in clients:
            c.call(18, 0, {})
        after = now_scrape(mcluster)
    finally:
        for c in clients:
            c.close()
    assert after.value("shoal_authentications_total", **auth, result="failure") \
        - before.value("shoal_authentications_total", **auth, result="failure") == 1
    assert after.value("shoal_authentications_total", **auth, result="success") \
        - before.value("shoal_authentications_total", **auth, result="success") == 1
    assert after.value("shoal_connections_created_total", listener="PLAINTEXT") \
        - before.value("shoal_connections_created_total", listener="PLAINTEXT") == 3
    assert after.value("shoal_connections_created_total", listener="SASL_PLAINTEXT") \
        - before.value("shoal_connections_created_total", listener="SASL_PLAINTEXT") == 2
    assert after.value("shoal_connections", listener="PLAINTEXT") >= 3
    assert after.get("shoal_connections", listener="SASL_PLAINTEXT") is not None
    # the SCRAM login (and any of the tests before): successes only
    scram = {"listener": "SASL_PLAINTEXT", "mechanism": "SCRAM-SHA-512"}
    assert after.value("shoal_authentications_total", **scram, result="success") >= 1
    assert after.get("shoal_authentications_total", **scram, result="failure") is None


def test_process_and_event_loop(mcluster):
    # the loop's lag is probed every 0.5 s from the start: run first on its own, a scrape can come
    # before the first probe
    s = until(lambda: (x := now_scrape(mcluster)).value("shoal_event_loop_lag_seconds_count") and x, 10,
              "a loop lag probe")
    assert s.value("process_open_fds") > 0
    assert s.value("process_resident_memory_bytes") > 10 << 20
    assert s.value("process_cpu_seconds_total") > 0
    assert s.value("shoal_event_loop_lag_seconds_count") > 0  # a probe every 0.5 s since start
    assert s.value("shoal_event_loop_lag_seconds_count") == s.value("shoal_event_loop_lag_seconds_bucket", le="+Inf")
    assert 0 <= s.value("shoal_event_loop_lag_max_seconds") < 60
