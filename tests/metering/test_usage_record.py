"""The usage record and the window arithmetic (shoal.metering.record): exact, pure."""

from __future__ import annotations

import json

import pytest

from shoal.metering.record import COUNTERS, GAUGES, SCHEMA_VERSION, RecordError, Sample, UsageRecord, window_records


def _sample(**values: int) -> Sample:
    return Sample({k: v for k, v in values.items() if k in COUNTERS}, {k: v for k, v in values.items() if k in GAUGES})


def test_window_is_counters_delta_and_gauges_now():
    before = {"lkc-aaaaaa": {"bytes_in": 100, "requests": 3}}
    after = {"lkc-aaaaaa": _sample(bytes_in=350, requests=5, partitions_led=2, storage_bytes=4096),
             "lkc-bbbbbb": _sample(bytes_out=7)}
    recs = window_records(before, after, broker=2, incarnation=9, seq=4, window_start=1000, window_end=2000)
    assert [r.tenant for r in recs] == ["lkc-aaaaaa", "lkc-bbbbbb"]
    a, b = recs
    assert (a.bytes_in, a.requests, a.partitions_led, a.storage_bytes, a.bytes_out) == (250, 2, 2, 4096, 0)
    assert (b.bytes_out, b.bytes_in) == (7, 0)
    assert all((r.broker, r.incarnation, r.seq, r.window_start, r.window_end) == (2, 9, 4, 1000, 2000) for r in recs)
    assert a.key == b"lkc-aaaaaa|2"


def test_idle_tenant_has_no_record_and_sums_are_exact():
    steps = [{"t": _sample(bytes_in=n)} for n in (0, 10, 10, 25, 40)]
    before: dict = {}
    total = 0
    for seq, after in enumerate(steps):
        recs = window_records(before, after, broker=1, incarnation=1, seq=seq, window_start=seq, window_end=seq + 1)
        total += sum(r.bytes_in for r in recs)
        if seq in (0, 2):
            assert recs == []
        before = {t: dict(s.counters) for t, s in after.items()}
    assert total == 40


def test_counter_that_went_down_counts_from_zero():
    recs = window_records({"t": {"bytes_in": 500}}, {"t": _sample(bytes_in=30)}, broker=1, incarnation=1, seq=0,
                          window_start=0, window_end=1)
    assert recs[0].bytes_in == 30


def test_json_round_trip_and_schema():
    r = UsageRecord(broker=1, incarnation=5, seq=7, tenant="lkc-aaaaaa", window_start=10, window_end=20,
                    bytes_in=2**40, connections=3)
    data = r.to_json()
    d = json.loads(data)
    assert d["schema_version"] == SCHEMA_VERSION and list(d)[0] == "schema_version"
    assert set(d) == {"schema_version", "broker", "incarnation", "seq", "tenant", "window_start", "window_end",
                      *COUNTERS, *GAUGES}
    assert UsageRecord.from_json(data) == r


@pytest.mark.parametrize("data, message", [
    (b"{", "not JSON"),
    (b"[1]", "not a JSON object"),
    (b'{"schema_version": 2}', "schema_version 2"),
    (b'{"schema_version": 1, "broker": 1}', "missing field"),
    (b'{"schema_version": 1, "broker": "1", "incarnation": 1, "seq": 0, "tenant": "", "window_start": 0,'
     b' "window_end": 1}', "broker must be an integer"),
    (b'{"schema_version": 1, "broker": 1, "incarnation": 1, "seq": 0, "tenant": 5, "window_start": 0,'
     b' "window_end": 1}', "tenant must be a string"),
])
def test_bad_records_are_refused_clearly(data, message):
    with pytest.raises(RecordError, match=message):
        UsageRecord.from_json(data)
