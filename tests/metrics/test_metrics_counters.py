"""The per-request metric counters (shoal.observability.requests) without a broker: histogram
buckets, the RequestMetrics breakdown of one request on a manual clock, record counting."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from shoal.clock import ManualClock
from shoal.handlers.context import RequestContext
from shoal.observability.collector import split_name
from shoal.observability.requests import (
    LATENCY_BUCKETS_S, R_KEY, ApiStats, BrokerMetrics, Histogram, api_name, record_count,
)
from shoal.protocol.records import build_batch


def test_histogram_buckets_are_le_and_cumulative():
    h = Histogram((1.0, 2.0, 5.0))
    for v in (0.5, 1.0, 1.5, 2.0, 7.0):
        h.observe(v)
    assert h.cumulative() == [("1.0", 2), ("2.0", 4), ("5.0", 4), ("+Inf", 5)]
    assert h.sum == 12.0
    assert h.count == 5


def test_api_names_are_kafkas_request_names():
    assert [api_name(k) for k in (0, 2, 3, 18, 36, 60)] == [
        "Produce", "ListOffsets", "Metadata", "ApiVersions", "SaslAuthenticate", "DescribeCluster"]
    assert api_name(9999) == "Api9999"


def test_record_count_reads_every_batch_header():
    a = build_batch([(1, None, b"x", [])] * 3)
    b = build_batch([(1, b"k", b"y" * 100, [])] * 17, base_offset=3)
    assert record_count(a) == 3
    assert record_count(a + b) == 20
    assert record_count(a + b[:30]) == 3  # a batch cut short is not counted
    assert record_count(b"") == 0


def test_split_name_strips_only_an_existing_tenants_prefix():
    tenants = {"lkc-abc123": object()}
    assert split_name("lkc-abc123_orders", tenants) == ("lkc-abc123", "orders")
    assert split_name("lkc-zzz999_orders", tenants) == ("", "lkc-zzz999_orders")
    assert split_name("orders", tenants) == ("", "orders")


def _ctx(clock: ManualClock, api_key: int, *, tenant=None, version: int = 0) -> RequestContext:
    return RequestContext(services=None, header=SimpleNamespace(api_key=api_key, api_version=version),
                          client_address="", tenant=tenant, scope=SimpleNamespace())


def _observed(stats: ApiStats, part: str) -> list[tuple[str, float]]:
    """(le, count) of the buckets that hold observations (not cumulative)."""
    h = stats.histogram(part)
    bounds = [repr(float(b)) for b in h.exposed] + ["+Inf"]
    return [(le, n) for le, n in zip(bounds, h.counts) if n]


def test_one_request_is_broken_down_like_kafkas_request_metrics():
    """Queued 3 ms, worked 2 ms, waited 40 ms (acks=all), throttled 100 ms (old client, so its
    response waits that long), then 7 ms behind an earlier response: total 152 ms."""
    clock = ManualClock()
    m = BrokerMetrics(clock, client_throttles=lambda key, version: False)
    ctx = _ctx(clock, 3, tenant="lkc-abc123")  # Metadata: no per-topic work
    arrived = clock.nanos()
    clock.sleep(0.003)
    ctx.step_start_ns = started = clock.nanos()
    rec = m.begin(ctx, None, arrived, started)
    clock.sleep(0.001)
    ctx.handling_ns = 1_000_000  # a first step of 1 ms, then it waits
    clock.sleep(0.040)
    ctx.step_start_ns = clock.nanos()  # the last step: 1 ms more
    clock.sleep(0.001)
    ctx.request_size = 70
    m.answered(rec, ctx, None, SimpleNamespace(), b"r" * 5000, 100, False)
    clock.sleep(0.100 + 0.007)  # the throttle delay, then waiting behind another response
    m.sent(rec)
    s = m.apis["Metadata"]
    assert _observed(s, "queue") == [("0.005", 1)]
    assert _observed(s, "local") == [("0.0025", 1)]
    assert _observed(s, "remote") == [("0.05", 1)]
    assert _observed(s, "throttle") == [("0.1", 1)]  # le: 100 ms is in the 0.1 s bucket
    assert _observed(s, "send") == [("0.01", 1)]
    assert _observed(s, "total") == [("0.25", 1)]
    assert s.histogram("total").sum == pytest.approx(0.152)
    assert s.histogram("local").sum == pytest.approx(0.002)
    assert s.histogram("remote").sum == pytest.approx(0.040)
    assert s.histogram("send").sum == pytest.approx(0.007)
    assert _observed(s, "request") == [("256.0", 1)]
    assert _observed(s, "response") == [("16384.0", 1)]
    assert m.requests == {("Metadata", "lkc-abc123"): 1}
    assert m.throttled == {("Metadata", "lkc-abc123"): 1}
    assert rec[R_KEY] == ("Metadata", "lkc-abc123")


def test_a_self_throttling_client_is_not_charged_send_time_for_the_throttle():
    clock = ManualClock()
    m = BrokerMetrics(clock, client_throttles=lambda key, version: True)  # KIP-219: answered at once
    ctx = _ctx(clock, 3)
    rec = m.begin(ctx, None, clock.nanos(), clock.nanos())
    m.answered(rec, ctx, None, SimpleNamespace(), b"r", 100, False)
    clock.sleep(0.0003)
    m.sent(rec)
    s = m.apis["Metadata"]
    assert _observed(s, "send") == [("0.0005", 1)]
    assert _observed(s, "throttle") == [("0.1", 1)]  # le: 100 ms is in the 0.1 s bucket


def test_every_part_counts_every_request_and_errors_are_named():
    clock = ManualClock()
    m = BrokerMetrics(clock)
    for failed, code in ((False, 0), (False, 15), (True, 0)):
        ctx = _ctx(clock, 10)  # FindCoordinator v0: a top-level error_code
        rec = m.begin(ctx, None, clock.nanos(), clock.nanos())
        clock.sleep(0.0001)
        m.answered(rec, ctx, None, None if failed else _FindCoordinator(code), b"x", 0, failed)
        m.sent(rec)
    s = m.apis["FindCoordinator"]
    for part in ApiStats.PARTS + ApiStats.SIZE_PARTS:
        assert s.histogram(part).count == 3, part
    assert len(LATENCY_BUCKETS_S) + 1 == len(s.histogram("total").counts)
    assert s.errors == {"COORDINATOR_NOT_AVAILABLE": 1, "UNKNOWN_SERVER_ERROR": 1}
    assert m.requests == {("FindCoordinator", ""): 3}


class _FindCoordinator:
    __dataclass_fields__ = {"error_code": None}

    def __init__(self, code: int) -> None:
        self.error_code = code


def test_text_exposition_parses_back_with_escaped_labels():
    from prometheus_client.parser import text_string_to_metric_families

    from shoal.observability.exposition import TextExposition

    out = TextExposition()
    out.counter("shoal_x", "a help\nwith a newline", ("topic",), [(('we"ird\\na\nme',), 3)])
    out.gauge("shoal_g", "g", (), [((), 0.25)])
    out.histogram("shoal_h_seconds", "h", ("api",), (0.1, 1.0), [(("Produce",), [1, 0, 2], 4.5)])
    fams = {f.name: f for f in text_string_to_metric_families(out.text())}
    (s,) = fams["shoal_x"].samples  # (the parser names a counter family without _total)
    assert (s.name, s.labels, s.value) == ("shoal_x_total", {"topic": 'we"ird\\na\nme'}, 3.0)
    assert fams["shoal_x"].documentation == "a help\nwith a newline"
    assert fams["shoal_g"].samples[0].value == 0.25
    h = {(s.name, s.labels.get("le")): s.value for s in fams["shoal_h_seconds"].samples}
    assert h == {("shoal_h_seconds_bucket", "0.1"): 1, ("shoal_h_seconds_bucket", "1.0"): 1,
                 ("shoal_h_seconds_bucket", "+Inf"): 3, ("shoal_h_seconds_count", None): 3,
                 ("shoal_h_seconds_sum", None): 4.5}
    with pytest.raises(ValueError):
        out.gauge("bad-name", "x", (), [])
