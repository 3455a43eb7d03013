"""Offset arithmetic of the Shoal Spark source: Spark's offsets JSON, rate limiting, range splitting
and data-loss clamping. Exact examples from Spark's Kafka source, and Hypothesis properties."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.spark.offsets import (
    OffsetRange,
    clamp_ranges,
    from_spark_json,
    rate_limit,
    split_ranges,
    to_spark_json,
)


def test_spark_json_is_sorted_and_round_trips():
    offsets = {("b", 10): 5, ("a", 2): 7, ("b", 2): 1, ("a", 0): 3}
    doc = to_spark_json(offsets)
    assert json.dumps(doc) == '{"a": {"0": 3, "2": 7}, "b": {"2": 1, "10": 5}}'
    assert from_spark_json(json.loads(json.dumps(doc))) == offsets
    assert from_spark_json(None) == {}


def test_rate_limit_spark_examples():
    # Proportional to lag, floored; a share below one rounds up (no starving).
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 1000, ("t", 1): 3, ("t", 2): 100}
    assert rate_limit(start, latest, 100) == {("t", 0): 99, ("t", 1): 1, ("t", 2): 100}
    assert rate_limit(start, latest, 10_000) == latest
    assert rate_limit({("t", 0): 5}, {("t", 0): 5}, 10) == {("t", 0): 5}


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)), min_size=1, max_size=8),
       st.integers(1, 20_000))
def test_rate_limit_properties(pairs, limit):
    start = {("t", i): s for i, (s, _) in enumerate(pairs)}
    latest = {("t", i): s + lag for i, (s, lag) in enumerate(pairs)}
    end = rate_limit(start, latest, limit)
    assert set(end) == set(latest)
    for tp in latest:
        assert start[tp] <= end[tp] <= latest[tp]
        if latest[tp] > start[tp]:
            assert end[tp] > start[tp]  # every partition with records makes progress
    lagging = sum(1 for tp in latest if latest[tp] > start[tp])
    assert sum(end[tp] - start[tp] for tp in latest) <= max(limit, 0) + lagging


def test_split_one_range_per_partition_by_default():
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5), OffsetRange("u", 0, 3, 4)]
    assert split_ranges(ranges) == [OffsetRange("t", 0, 0, 10), OffsetRange("u", 0, 3, 4)]
    assert split_ranges(ranges, min_partitions=2) == [OffsetRange("t", 0, 0, 10), OffsetRange("u", 0, 3, 4)]


def test_split_min_partitions_goes_to_the_largest():
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 10)]
    out = split_ranges(ranges, min_partitions=5)
    assert out == [OffsetRange("t", 0, 0, 25), OffsetRange("t", 0, 25, 50), OffsetRange("t", 0, 50, 75),
                   OffsetRange("t", 0, 75, 100), OffsetRange("t", 1, 0, 10)]


def test_split_max_records_per_partition():
    out = split_ranges([OffsetRange("t", 0, 0, 10)], max_records_per_partition=4)
    assert out == [OffsetRange("t", 0, 0, 3), OffsetRange("t", 0, 3, 6), OffsetRange("t", 0, 6, 10)]


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 300)), min_size=0, max_size=6),
       st.none() | st.integers(1, 40), st.none() | st.integers(1, 100))
def test_split_properties(pairs, min_parts, max_records):
    ranges = [OffsetRange("t", i, s, s + n) for i, (s, n) in enumerate(pairs)]
    out = split_ranges(ranges, min_parts, max_records)
    # Pieces are non-empty, contiguous, and cover each range exactly, in order.
    for r in ranges:
        pieces = [o for o in out if o.tp == r.tp]
        if r.size == 0:
            assert pieces == []
            continue
        assert pieces[0].start == r.start and pieces[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))
        assert all(p.size > 0 for p in pieces)
        if max_records:
            assert len(pieces) >= -(-r.size // max_records)
    total = sum(r.size for r in ranges)
    live = sum(1 for r in ranges if r.size)
    if min_parts:
        assert len(out) >= min(min_parts, total)
    if not min_parts and not max_records:
        assert len(out) == live


def test_clamp_ranges():
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 20), OffsetRange("t", 2, 0, 5),
              OffsetRange("gone", 0, 0, 5)]
    earliest = {("t", 0): 4, ("t", 1): 0, ("t", 2): 8}
    latest = {("t", 0): 10, ("t", 1): 15, ("t", 2): 8}
    kept, lost = clamp_ranges(ranges, earliest, latest)
    assert kept == [OffsetRange("t", 0, 4, 10), OffsetRange("t", 1, 5, 15), OffsetRange("t", 2, 5, 5)]
    assert [(d.topic, d.partition, d.start, d.end) for d in lost] == [
        ("t", 0, 0, 4), ("t", 1, 15, 20), ("t", 2, 0, 5), ("gone", 0, 0, 5)]
    assert "log start offset is now 4" in lost[0].describe()
