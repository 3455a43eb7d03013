"""Fault fixtures: an etcd of their own (the nemesis kills its leader: never the session's shared
``etcd_cluster``) and three brokers whose links go through proxies (``ProxiedCluster``)."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def fault_etcd():
    from etcd_cluster import EtcdCluster

    c = EtcdCluster(Path(tempfile.mkdtemp(prefix="shoal-faults-etcd-")))
    c.start()
    yield c
    c.close()


@pytest.fixture(scope="module")
def proxied3(fault_etcd, tmp_path_factory):
    """Three brokers (racks dc1..dc3) on ``fault_etcd`` (each through etcd proxies of its own),
    clients ``producer`` and ``consumer``."""
    from cluster_harness import ProxiedCluster

    c = ProxiedCluster(tmp_path_factory.mktemp("proxied3"), fault_etcd.url(f"/faults-{uuid.uuid4().hex[:8]}"),
                       clients=["producer", "consumer"], etcd=fault_etcd,
                       overrides={"leader.imbalance.check.interval.seconds": "5",  # auto rebalance: often
                                  "replica.lag.time.max.ms": "4000"})  # the ISR checker waits this long
    try:
        c.start()
        yield c
    finally:
        c.close()
