"""Metering's own per-request hook (shoal.metering.counters.UsageCounters): what a metered broker
without the metrics endpoint runs. Fed the same requests as the full broker metrics (both hooks
on one real broker, real clients: produce under a client quota that throttles, then consume), it
counts the same bytes, messages, requests, throttles and (within the hooks' own call order)
request time; the sampler reads either the same way and keeps a deleted topic's bytes."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from broker_process import free_port
from broker_thread import ThreadBroker
from shoal.metering.counters import UsageCounters, UsageMetrics
from shoal.observability.requests import BYTES_IN, BYTES_OUT, MESSAGES_IN

HOUR = {"shoal.metering.interval.ms": "3600000"}  # windows cut by hand only


class Both:
    """Both hooks, one request record each."""

    def __init__(self, *hooks) -> None:
        self.hooks = hooks

    def connection_opened(self, listener: str) -> None:
        for h in self.hooks:
            h.connection_opened(listener)

    def begin(self, ctx, request, arrived, started):
        return [h.begin(ctx, request, arrived, started) for h in self.hooks]

    def answered(self, recs, ctx, request, response, data, throttle_ms, failed) -> None:
        for h, r in zip(self.hooks, recs):
            h.answered(r, ctx, request, response, data, throttle_ms, failed)

    def sent(self, recs) -> None:
        for h, r in zip(self.hooks, recs):
            h.sent(r)


def test_the_hook_is_metering_own_without_the_endpoint_and_the_full_metrics_with_it(tmp_path):
    with ThreadBroker(tmp_path / "a", HOUR) as tb:
        assert type(tb.broker.metrics) is UsageCounters and tb.broker.metering is not None
    with ThreadBroker(tmp_path / "b", {**HOUR, "shoal.metrics.listener": f"http://127.0.0.1:{free_port()}"}) as tb:
        assert type(tb.broker.metrics) is UsageMetrics and tb.broker.metering is not None


def test_same_counts_as_the_full_metrics(tmp_path):
    with ThreadBroker(tmp_path, HOUR) as tb:
        own, full = tb.broker.metrics, UsageMetrics(tb.broker.clock)
        tb.broker.metrics = Both(own, full)
        tb.run(tb.broker.metadata.alter_client_quotas([((("client-id", "slow"),), {"producer_byte_rate": 40_000.0})]))
        p = Producer({"bootstrap.servers": tb.bootstrap, "client.id": "slow", "linger.ms": 5, "batch.size": 20_000})
        for i in range(120):
            p.produce("counted", b"v" * 1000, key=str(i).encode())
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": tb.bootstrap, "group.id": "g", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.subscribe(["counted"])
        got, deadline = 0, time.monotonic() + 30
        while got < 120:
            assert time.monotonic() < deadline, got
            got += sum(1 for m in c.consume(100, 0.5) if not m.error())
        c.close()

        def compare():
            t_own, t_full = own.topics["counted"], full.topics["counted"]
            return ([t_own[i] for i in (BYTES_IN, MESSAGES_IN, BYTES_OUT)],
                    [t_full[i] for i in (BYTES_IN, MESSAGES_IN, BYTES_OUT)],
                    own.tenant_requests, {t: sum(n for (_a, t2), n in full.requests.items() if t2 == t)
                                          for t in own.tenant_requests},
                    own.tenant_throttled, {t: sum(n for (_a, t2), n in full.throttled.items() if t2 == t)
                                           for t in own.tenant_throttled},
                    own.tenant_throttle_ms, full.tenant_throttle_ms, own.tenant_time_ns, full.tenant_time_ns)

        (c_own, c_full, r_own, r_full, n_own, n_full, ms_own, ms_full, ns_own, ns_full) = tb.call(compare)
    assert c_own == c_full and c_own[1] == 120 and c_own[0] > 120_000 and c_own[2] >= c_own[0] - 120 * 100
    assert r_own == r_full and r_own[""] > 10
    assert n_own == n_full and n_own[""] >= 1 and ms_own == ms_full and ms_own[""] > 500  # throttled by the quota
    # request time: the same intervals, each read a few calls apart
    assert ns_own.keys() == ns_full.keys()
    assert abs(ns_own[""] - ns_full[""]) <= 0.05 * ns_full[""] + 200_000 * r_own[""]


def test_sampler_reads_metering_own_counters_and_keeps_a_deleted_topics_bytes(tmp_path):
    with ThreadBroker(tmp_path, HOUR) as tb:
        p = Producer({"bootstrap.servers": tb.bootstrap, "linger.ms": 5})
        for i in range(50):
            p.produce("gone", b"x" * 200)
        assert p.flush(15) == 0
        sampler = tb.broker.metering.sampler
        first = tb.call(sampler.sample)[""].counters
        in_topic = tb.call(lambda: list(tb.broker.metrics.topics["gone"]))
        assert first["bytes_in"] == in_topic[BYTES_IN] and first["messages_in"] == 50 and first["requests"] >= 1
        admin = AdminClient({"bootstrap.servers": tb.bootstrap})
        admin.delete_topics(["gone"])["gone"].result(15)
        deadline = time.monotonic() + 15
        while tb.broker.metadata.image.topic("gone") is not None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        after = tb.call(sampler.sample)[""].counters
        assert after["bytes_in"] == first["bytes_in"] and after["messages_in"] == 50
        assert "gone" not in tb.call(lambda: dict(tb.broker.metrics.topics))  # dropped once read


def test_request_time_is_time_on_the_thread_not_a_long_polls_wait(tmp_path):
    """Issue 24 (9): request time is what Kafka's request quota charges, the time on the broker's
    thread, not the time a request is outstanding. An idle consumer has a long-polling Fetch
    outstanding all the time (500 ms each): counted from frame read to response sent, it made the
    broker look 100% busy. Both hooks, one consumer idle for 3 s; the request quota charges the
    same time, so a consumer with a request quota of 10% of a thread is not throttled either."""
    with ThreadBroker(tmp_path, HOUR) as tb:
        own, full = tb.broker.metrics, UsageMetrics(tb.broker.clock)
        tb.broker.metrics = Both(own, full)
        tb.run(tb.broker.metadata.alter_client_quotas([((("client-id", "poller"),), {"request_percentage": 10.0})]))
        p = Producer({"bootstrap.servers": tb.bootstrap})
        p.produce("idle", b"one")
        assert p.flush(15) == 0
        c = Consumer({"bootstrap.servers": tb.bootstrap, "group.id": "g", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 500, "client.id": "poller"})
        c.subscribe(["idle"])
        deadline = time.monotonic() + 30
        while not [m for m in c.consume(10, 0.5) if not m.error()]:
            assert time.monotonic() < deadline

        def read():
            return (dict(own.tenant_time_ns), dict(full.tenant_time_ns), dict(own.tenant_requests),
                    sum(own.tenant_throttled.values()))

        before, t0 = tb.call(read), time.monotonic()
        while time.monotonic() - t0 < 3:
            assert not [m for m in c.consume(10, 0.5) if not m.error()]
        after, elapsed_ns = tb.call(read), (time.monotonic() - t0) * 1e9
        c.close()
    answered = after[2][""] - before[2][""]
    assert answered >= 4  # the long polls (and heartbeats) went on
    assert after[3] == before[3] == 0  # within 10% of a thread: no throttle
    for i in (0, 1):  # metering's own hook, the full metrics
        busy = (after[i][""] - before[i][""]) / elapsed_ns
        assert 0 < busy < 0.25, (i, busy, answered)  # was >= 0.8: a Fetch outstanding all along
