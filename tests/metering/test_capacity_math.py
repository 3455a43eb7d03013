"""Capacity planning and pricing policy (shoal.metering.capacity, shoal.metering.pipeline.RateCard):
pure functions, exact examples."""

from __future__ import annotations

import pytest

from shoal.metering.capacity import (
    Capacity, Move, percentile, plan_moves, reassignment_json, recommended_brokers, utilization,
)
from shoal.metering.pipeline import RateCard, RateCardError

MB = 10**6


def test_producer_capacity_is_disk_write_over_replication_factor():
    """The document: with RF 3 a broker's effective producer capacity is 1/3 of its write capacity."""
    cap = Capacity(disk_write_bps=300 * MB, read_bps=900 * MB, replication_factor=3)
    assert cap.producer_bps == 100 * MB
    # 50 MB/s in for 10 s: half the producer capacity; replication reads 2 x 50 MB/s of the 900
    u = utilization(cap, 10, 500 * MB, 4000 * MB, 2_500_000)
    assert u["produce"] == pytest.approx(0.5)
    assert u["consume"] == pytest.approx(400 / 800)
    assert u["requests"] == pytest.approx(0.25)
    assert u["util"] == pytest.approx(0.5)


def test_percentile_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 95) == 95
    assert percentile(values, 100) == 100
    assert percentile([0.2, 0.9], 95) == 0.9
    assert percentile([], 95) == 0.0


@pytest.mark.parametrize("load, headroom, rf, expected", [
    (2.1, 0.3, 3, 3),     # 2.1 / 0.7 = 3 exactly
    (2.2, 0.3, 3, 4),
    (0.1, 0.3, 3, 3),     # never fewer than the replication factor
    (7.0, 0.0, 1, 7),
])
def test_recommended_brokers(load, headroom, rf, expected):
    assert recommended_brokers(load, headroom, rf) == expected


def test_recommended_brokers_refuses_full_headroom():
    with pytest.raises(ValueError):
        recommended_brokers(1.0, 1.0, 3)


def test_plan_moves_off_the_hot_broker_heaviest_first():
    load = {1: 0.95, 2: 0.30, 3: 0.20}
    parts = [("t", 0, (1, 2), 0.30), ("t", 1, (1, 3), 0.10), ("u", 0, (1, 2), 0.20), ("t", 2, (2, 1), 0.30)]
    moves = plan_moves(load, parts, limit=0.7)
    # t-0 (0.30) cannot go to 2 (a replica already) -> 3 (0.20 -> 0.50); broker 1 at 0.65: done
    assert moves == [Move("t", 0, (1, 2), (3, 2), 0.30)]
    assert reassignment_json(moves) == {"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [3, 2], "log_dirs": ["any", "any"]}]}


def test_plan_moves_nothing_to_do_or_nothing_fits():
    assert plan_moves({1: 0.5, 2: 0.4}, [("t", 0, (1,), 0.5)], limit=0.7) == []
    assert plan_moves({1: 0.9, 2: 0.65}, [("t", 0, (1,), 0.9)], limit=0.7) == []


def test_rate_card():
    card = RateCard.parse('{"gb_in": 0.05, "gb_out": 0.09, "partition_hour": 0.0015, "gb_month_stored": 0.1, '
                          '"currency": "EUR"}')
    assert (card.gb_in, card.gb_out, card.partition_hour, card.gb_month_stored, card.currency) == \
        (0.05, 0.09, 0.0015, 0.1, "EUR")
    assert RateCard.parse("{}") == RateCard()
    for bad, msg in (("[]", "JSON object"), ('{"gb_inn": 1}', "unknown rate card fields"),
                     ('{"gb_in": -1}', "non-negative"), ('{"gb_in": true}', "non-negative"), ("{", "not JSON")):
        with pytest.raises(RateCardError, match=msg):
            RateCard.parse(bad)
