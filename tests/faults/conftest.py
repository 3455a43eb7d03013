"""Fault fixtures: an etcd of their own (the nemesis kills its leader: never the session's shared
``etcd_cluster``) and three brokers whose links go through proxies (``ProxiedCluster``)."""

from __future__ import annotations

import tempfile
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
    from cluster_harness import ProxiedCluster, running_cluster

    with running_cluster(fault_etcd, tmp_path_factory, "proxied3", cls=ProxiedCluster,
                         clients=["producer", "consumer"], etcd=fault_etcd,
                         overrides={"leader.imbalance.check.interval.seconds": "5",  # auto rebalance: often
                                    "replica.lag.time.max.ms": "4000"}) as c:  # the ISR checker waits this long
        yield c
