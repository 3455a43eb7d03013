"""Cluster fixtures: real broker processes on the session's real etcd (``tests/cluster_harness.py``)."""

from __future__ import annotations

import uuid

import pytest

from cluster_harness import Cluster


@pytest.fixture(scope="module")
def cluster3(etcd_cluster, tmp_path_factory):
    """Three brokers in racks dc1, dc2, dc3 on a prefix of their own, for the whole module (tests
    that kill brokers bring them back, or run last)."""
    c = Cluster(tmp_path_factory.mktemp("cluster3"), etcd_cluster.url(f"/cluster-{uuid.uuid4().hex[:8]}"))
    try:
        c.start()
        yield c
    finally:
        c.close()
