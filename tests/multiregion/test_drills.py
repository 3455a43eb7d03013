"""Datacenter-loss drills on the multi-region harness (tests/region_harness.py,
tests/region_drills.py): 2 datacenters x 3 broker processes + a tie-breaker etcd member (2.5 DC),
30 ms between datacenters, real librdkafka clients in each datacenter."""

from __future__ import annotations

import pytest

from region_drills import promotion_drill, stretch_drill

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


def test_promotion_losing_dc1_promotes_the_dc2_observer_and_acks_all_goes_on(regions):
    """Drill (b): placement v2, 2 sync replicas + 1 observer per DC, min.insync.replicas 3,
    observerPromotionPolicy under-min-isr. Cut dc1: the dc2 observer joins the ISR, acks=all
    goes on in dc2; heal: dc1's replicas rejoin, the observer leaves the ISR; nothing
    acknowledged is missing."""
    r = regions(brokers={"dc1": 3, "dc2": 3}, etcd=("dc1", "dc2", "dc3"), overrides=OVERRIDES)
    out = promotion_drill(r)
    print(out)
    leader, _, isr = out["layout_after_cut"]
    assert r.dc_of[leader] == "dc2" and out["observer"] in isr and len(isr) == 3, out
    assert out["first_acks_all_s"] is not None and out["acked_during_outage"] >= 100, out
    assert out["observer"] not in out["layout_after_heal"][2], out
    assert out["missing_acked_before_cut"] == 0 and out["failed"] == 0 and out["lost"] == 0, out


@pytest.mark.parametrize("racks, refused", [("2", True), ("1", False)])
def test_min_insync_racks_2_refuses_acks_all_when_one_dc_is_left(regions, racks, refused):
    """RF 4 (2+2), min.insync.replicas 2: after losing dc1 the two dc2 replicas satisfy
    min.insync.replicas, so acks=all goes on with every new record in dc2 only, unless
    min.insync.racks is 2 (Shoal's, after KIP-1290): then NOT_ENOUGH_REPLICAS, as with min ISR 3;
    the advisor predicts both. Nothing acknowledged is lost either way."""
    r = regions(brokers={"dc1": 3, "dc2": 3}, etcd=("dc1", "dc2", "dc3"), overrides=OVERRIDES)
    out = stretch_drill(r, topic=f"racks-{racks}", configs={"min.insync.replicas": "2", "min.insync.racks": racks})
    print(out)
    lose_dc1 = next(line for line in out["advisor"].splitlines() if line.startswith("lose dc1:"))
    if refused:
        assert "acks=all fails (NOT_ENOUGH_REPLICAS)" in lose_dc1, out["advisor"]
        assert out["probe_errors"][-1] == "NOT_ENOUGH_REPLICAS" and None not in out["probe_errors"], out
        assert out["acked_during_outage"] == 0, out
    else:
        assert "acks=all works" in lose_dc1 or "acks=all fails" not in lose_dc1, out["advisor"]
        assert None in out["probe_errors"] and out["acked_during_outage"] > 0, out
    assert out["missing_during_outage"] == 0 and out["failed"] == 0 and out["lost"] == 0, out
