"""The usage publisher in a real broker (ThreadBroker) with a real client: windows in
``__shoal_usage`` add up to the broker's own counters exactly, are contiguous, and go on across a
restart with the next sequence number; a broker that sends its usage by Produce is let through,
a client is not (with an authorizer)."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)

from broker_thread import ThreadBroker
from polling import until
from shoal.metering.publisher import STATE_FILE
from shoal.metering.record import USAGE_TOPIC, UsageRecord

FAST = {"shoal.metering.interval.ms": "200"}


def produce(bootstrap: str, topic: str, n: int, size: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, b"v" * size, key=str(i).encode())
    assert p.flush(15) == 0


def read_usage(bootstrap: str, timeout: float = 15.0) -> list[UsageRecord]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "usage-reader", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        n = len(c.list_topics(USAGE_TOPIC, timeout=10).topics[USAGE_TOPIC].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(USAGE_TOPIC, p), timeout=10)[1] for p in range(n)}
        c.assign([TopicPartition(USAGE_TOPIC, p, 0) for p in range(n)])
        got = {p: 0 for p in range(n)}
        out = []
        deadline = time.monotonic() + timeout
        while any(got[p] < ends[p] for p in range(n)):
            assert time.monotonic() < deadline, (got, ends)
            for m in c.consume(500, 0.2):
                if m.error():
                    continue
                got[m.partition()] = m.offset() + 1
                out.append(UsageRecord.from_json(m.value()))
                assert m.key() == out[-1].key
        return out
    finally:
        c.close()


def wait_published(tb: ThreadBroker, windows: int, timeout: float = 15.0) -> None:
    start = tb.broker.metering.windows_published
    until(lambda: tb.broker.metering.windows_published >= start + windows, timeout, "usage windows published",
          every=0.05, retry=())


def topic_bytes_in(tb: ThreadBroker, topic: str) -> tuple[int, int]:
    counters = tb.call(lambda: list(tb.broker.metrics.topics[topic]))
    return counters[0], counters[1]  # BYTES_IN, MESSAGES_IN


def test_windows_add_up_to_the_counters_across_a_restart(tmp_path):
    totals = [0, 0]
    with ThreadBroker(tmp_path, FAST) as tb:
        produce(tb.bootstrap, "metered", 200, 100)
        wait_published(tb, 2)
        produce(tb.bootstrap, "metered", 50, 1000)
        b, m = topic_bytes_in(tb, "metered")
        totals[0] += b
        totals[1] += m
        incarnation1 = tb.broker.metering.incarnation
    # stopped gracefully: the last window went out; the state file says which it was
    state = json.loads((tmp_path / STATE_FILE).read_text())
    with ThreadBroker(tmp_path, FAST) as tb:
        assert tb.broker.metering.seq == state["seq"] + 1
        produce(tb.bootstrap, "metered", 30, 10)
        b, m = topic_bytes_in(tb, "metered")
        totals[0] += b
        totals[1] += m
        wait_published(tb, 2)
        usage = read_usage(tb.bootstrap)
    assert totals[1] == 280
    physical = [r for r in usage if r.tenant == ""]
    runs = sorted({r.incarnation for r in physical})
    assert runs[0] == incarnation1 and len(runs) == 2
    windows = sorted({(r.seq, r.window_start, r.window_end) for r in physical})
    seqs = [w[0] for w in windows]
    assert seqs == sorted(set(seqs))
    # contiguous, across the restart too (a window with no usage has no record: skip to the next seen)
    for (s1, _a, end), (s2, start, _b) in zip(windows, windows[1:]):
        if s2 == s1 + 1:
            assert start == end
    # the metering topic's own traffic is not produced by clients: bytes in are the topic's exactly
    assert sum(r.messages_in for r in physical) == 280
    assert sum(r.bytes_in for r in physical) == totals[0]


def test_disabled_means_no_publisher_and_no_topic(tmp_path):
    with ThreadBroker(tmp_path, {**FAST, "shoal.metering.enable": "false"}) as tb:
        assert tb.broker.metering is None and tb.broker.metrics is None
        produce(tb.bootstrap, "quiet", 5, 10)
        time.sleep(0.6)
        assert tb.broker.metadata.image.topic(USAGE_TOPIC) is None


def test_usage_by_produce_only_from_brokers(tmp_path):
    """The path of a broker that leads no partition of __shoal_usage: Produce over the inter-broker
    listener (here to itself). A client without CLUSTER_ACTION is refused, as for any internal topic."""
    props = {**FAST, "authorizer.class.name": "shoal", "super.users": "User:ANONYMOUS",
             "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
             "sasl.enabled.mechanisms": "PLAIN", "shoal.sasl.bootstrap.users": "mallory:pw",
             "inter.broker.listener.name": "PLAINTEXT", "allow.everyone.if.no.acl.found": "true"}
    with ThreadBroker(tmp_path, props) as tb:
        wait_published(tb, 1)
        writer = tb.broker.metering.writer
        rec = UsageRecord(broker=77, incarnation=1, seq=0, tenant="", window_start=0, window_end=1, bytes_in=5)
        assert tb.run(writer._produce(tb.broker.node_id, 0, [rec])) is None
        assert rec in read_usage(tb.bootstrap)
        # mallory may write topics (no ACLs there) but not act as a broker (the cluster has ACLs)
        admin = AdminClient({"bootstrap.servers": tb.bootstrap})
        binding = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                             AclOperation.CLUSTER_ACTION, AclPermissionType.ALLOW)
        for f in admin.create_acls([binding]).values():
            f.result(10)
        errors: list = []
        p = Producer({"bootstrap.servers": f"127.0.0.1:{tb.port('SASL_PLAINTEXT')}", "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": "PLAIN", "sasl.username": "mallory", "sasl.password": "pw",
                      "message.timeout.ms": 5000})
        p.produce(USAGE_TOPIC, rec.to_json(), partition=0, on_delivery=lambda e, m: errors.append(e))
        p.flush(10)
        assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_EXCEPTION, errors


class FlakyWriter:
    """Fails the first ``failures`` writes; records every attempt."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts: list[list[UsageRecord]] = []

    async def write(self, records):
        self.attempts.append(list(records))
        if self.failures:
            self.failures -= 1
            return "not now"
        return None

    async def close(self) -> None:
        pass


def test_a_failed_window_is_sent_again_unchanged_and_nothing_is_cut_meanwhile(tmp_path):
    with ThreadBroker(tmp_path, {"shoal.metering.interval.ms": "3600000"}) as tb:  # ticks by hand only
        pub = tb.broker.metering
        flaky = FlakyWriter(failures=2)
        pub.writer = flaky
        produce(tb.bootstrap, "retried", 10, 100)
        assert tb.run(pub.tick()) is False
        produce(tb.bootstrap, "retried", 5, 100)  # after the cut: belongs to the next window
        assert tb.run(pub.tick()) is False
        assert tb.run(pub.tick()) is True
        first, second, third = flaky.attempts
        assert first == second == third  # same identity, same content
        assert sum(r.messages_in for r in first) == 10
        assert tb.run(pub.tick()) is True
        assert sum(r.messages_in for r in flaky.attempts[3]) == 5
        assert {r.seq for r in flaky.attempts[3]} == {first[0].seq + 1}
        assert flaky.attempts[3][0].window_start == first[0].window_end
        assert json.loads((tmp_path / STATE_FILE).read_text())["seq"] == first[0].seq + 1
