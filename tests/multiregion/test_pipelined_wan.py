"""Pipelined replication on the multi-region harness (30 ms between DCs, 1 ms inside one), with
``shoal.replica.fetch.pipeline.depth`` at its default (0: chosen per connection): a follower in
the leader's DC fetches one at a time, as Kafka's do; the follower across the WAN measures the
round trip and keeps several fetches in flight; both hold every acknowledged record, and no
pipelined answer ever had to be fetched again. (What the depth buys, one round trip to acks=all
instead of up to two, is measured by bench/bench_multiregion.py, not asserted here.)"""

from __future__ import annotations

import urllib.request
import uuid

import pytest
from confluent_kafka import Producer

from broker_process import free_port
from cluster_harness import until
from faults.run import replicating
from region_drills import create_topic, layout

pytestmark = pytest.mark.timeout(300)


def fetcher_samples(r, node: int, name: str) -> dict[str, float]:
    """``name``'s samples on broker ``node``, by their leader label."""
    url = r[node].overrides["shoal.metrics.listener"] + "/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line.rsplit(" ", 1)
            leader = labels.split('leader="', 1)[1].split('"', 1)[0]
            out[leader] = out.get(leader, 0.0) + float(value)
    return out


def test_a_far_follower_pipelines_its_fetches_and_a_near_one_does_not(tmp_path):
    from etcd_cluster import require_etcd
    from region_harness import Regions

    require_etcd()
    r = Regions(tmp_path / "regions", brokers={"dc1": 2, "dc2": 1}, etcd=("dc1", "dc2", "dc3"))
    for b in r.brokers.values():
        b.overrides["shoal.metrics.listener"] = f"http://127.0.0.1:{free_port()}"
    try:
        r.start(90)
        topic = f"wan-{uuid.uuid4().hex[:6]}"
        create_topic(r, "dc1", topic, assignment=[1, 2, 3])
        until(lambda: len(layout(r, 1, topic)[2]) == 3, 60, "the three replicas in the ISR")
        p = Producer({"bootstrap.servers": r.client_bootstrap("dc1", 1), "acks": "all", "linger.ms": 0,
                      "enable.idempotence": True, "log_level": 2})
        acked: list[int] = []
        for i in range(300):
            p.produce(topic, b"v%04d" % i, on_delivery=lambda err, msg: err is None and acked.append(msg.offset()))
            if i % 10 == 0:
                p.flush(30)
        assert p.flush(60) == 0 and len(acked) == 300

        near, far = (fetcher_samples(r, n, "shoal_replica_fetcher_pipeline_depth").get("1") for n in (2, 3))
        near_rtt, far_rtt = (fetcher_samples(r, n, "shoal_replica_fetcher_round_trip_seconds").get("1")
                             for n in (2, 3))
        print(f"near: depth {near}, rtt {near_rtt}; far: depth {far}, rtt {far_rtt}")
        assert far_rtt is not None and far_rtt >= 0.025  # the 30 ms link, measured
        assert near_rtt is not None and 0 <= near_rtt < 0.025
        assert far == min(8, int(far_rtt * 1000 / 4) + 1) and far >= 7  # ~one fetch per 4 ms of round trip
        # inside the DC: one at a time, unless the loaded machine made even a 1 ms link look slow
        assert near == (1 if near_rtt < 0.005 else min(8, int(near_rtt * 1000 / 4) + 1))
        for node in (2, 3):
            assert fetcher_samples(r, node, "shoal_replica_fetcher_resyncs_total").get("1") == 0
            assert fetcher_samples(r, node, "shoal_replica_fetcher_fetches_total").get("1", 0) > 0
        assert 3 in layout(r, 1, topic)[2], "the far replica kept up: still in the ISR"
        assert replicating(r, topic, 1, 3, timeout=30), "all three logs byte-identical up to the high watermark"
    finally:
        r.close()
