"""The exactly-once Spark sink on three real brokers (etcd, racks dc1..dc3), every topic RF 3: the
transaction coordinator, the output partitions' leaders and the task log's are spread over the
brokers, so markers travel as WriteTxnMarkers. A UDF fails in the middle of a task (which commits
the rows it got, as PySpark ends its input as if complete); the query is run again from its
checkpoint: each input row is once in the read_committed output (spark_eo_helpers)."""

from __future__ import annotations

import pytest
from spark_eo_helpers import cut_short_then_rerun

from cluster_harness import running_cluster

pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "spark-eo-cluster") as c:
        yield c


def test_exactly_once_sink_on_three_brokers(cluster, uniq, tmp_path):
    cut_short_then_rerun(cluster.bootstrap(), uniq, tmp_path, rf=3)
