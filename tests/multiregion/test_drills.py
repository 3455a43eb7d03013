"""Datacenter-loss drills on the multi-region harness (tests/region_harness.py,
tests/region_drills.py): 2 datacenters x 3 broker processes + a tie-breaker etcd member (2.5 DC),
30 ms between datacenters, real librdkafka clients in each datacenter."""

from __future__ import annotations

import pytest

from region_drills import stretch_drill

pytestmark = pytest.mark.timeout(400)

OVERRIDES = {"replica.lag.time.max.ms": "3000", "replica.fetch.backoff.ms": "200"}


def test_stretch_rf4_min_isr3_losing_dc1_stops_acks_all_loses_nothing(regions):
    """Drill (a): RF 4, two replicas per DC, min.insync.replicas 3 (the stretch document's
    formula for 2 DCs). Cut dc1: dc2's producers get NOT_ENOUGH_REPLICAS, dc2's consumers read
    every record acknowledged before the cut, the advisor predicted exactly this; heal: the
    producer's queued records are acknowledged, none acknowledged is missing."""
    r = regions(brokers={"dc1": 3, "dc2": 3}, etcd=("dc1", "dc2", "dc3"), overrides=OVERRIDES)
    out = stretch_drill(r)
    assert "lose dc1: acks=all fails (NOT_ENOUGH_REPLICAS); consumers read; no acknowledged record lost" \
        in out["advisor"], out["advisor"]
    assert out["probe_errors"][-1] == "NOT_ENOUGH_REPLICAS", out
    assert None not in out["probe_errors"], out  # not one acks=all write accepted without dc1
    assert out["acked_during_outage"] == 0, out
    assert out["read_during_outage"] >= out["acked_at_cut"] >= 200 and out["missing_during_outage"] == 0, out
    assert out["failed"] == 0 and out["lost"] == 0 and out["offsets_contiguous"], out
    print(out)
