"""Cluster fixtures: real broker processes on the session's real etcd (``tests/cluster_harness.py``)."""

from __future__ import annotations

import pytest

from cluster_harness import running_cluster


@pytest.fixture(scope="module")
def cluster3(etcd_cluster, tmp_path_factory):
    """Three brokers in racks dc1, dc2, dc3 on a prefix of their own, for the whole module (tests
    that kill brokers bring them back, or run last)."""
    with running_cluster(etcd_cluster, tmp_path_factory, "cluster3") as c:
        yield c
