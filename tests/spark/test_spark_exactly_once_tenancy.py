"""The exactly-once sink and the read_committed source with a tenant's credentials: the task's
transactional ids and the sink's commit-log topics are the tenant's (tests/e2e/tenancy_fixtures.py),
and two tenants running the same job with the same ``transactionalIdPrefix`` do not fence each other."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from spark_helpers import create_topic, produce, run_available_now
from test_spark_tenancy import security, spark_opts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from tenancy_fixtures import tenant_cluster  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def eo_tenants():
    yield from tenant_cluster()


def test_tenants_exactly_once_jobs(spark, eo_tenants, tmp_path):
    bs = eo_tenants.broker.sasl_bootstrap
    for t in (eo_tenants.a, eo_tenants.b):
        create_topic(bs, "in", 2, security=security(t))
        create_topic(bs, "out", 2, security=security(t))
        produce(bs, "in", [{"value": b"%s-%d" % (t.tenant_id.encode(), i), "partition": i % 2} for i in range(40)],
                security=security(t))

    def query(t, ckpt, **extra):
        opts = spark_opts(t)
        w = (spark.readStream.format("shoal").options(**opts).option("subscribe", "in")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "25").load()
             .select("key", "value")
             .writeStream.format("shoal").options(**opts, **extra).option("topic", "out")
             .option("exactlyOnce", "true").option("transactionalIdPrefix", "etl-")
             .option("checkpointLocation", str(tmp_path / ckpt)))
        return run_available_now(w)

    # A tenant's topic names cannot start with '__': the default commit-log prefix fails at once, saying so.
    with pytest.raises(PySparkException, match="set the sink option 'sinkCommitLogTopicPrefix'"):
        query(eo_tenants.a, "default-prefix")
    queries = {t.tenant_id: query(t, t.tenant_id, sinkCommitLogTopicPrefix="spark-sink-")
               for t in (eo_tenants.a, eo_tenants.b)}
    for t in (eo_tenants.a, eo_tenants.b):
        df = (spark.read.format("shoal").options(**spark_opts(t)).option("subscribe", "out")
              .option("kafka.isolation.level", "read_committed").load())
        got = sorted(bytes(r.value) for r in df.select("value").collect())
        assert got == sorted(b"%s-%d" % (t.tenant_id.encode(), i) for i in range(40)), t.tenant_id
    # The commit-log topics are the tenant's own: listed for it, not for the other.
    tasks_topic = f"spark-sink-{queries[eo_tenants.a.tenant_id].id}-tasks"
    from spark_helpers import admin

    assert tasks_topic in admin(bs, security(eo_tenants.a)).list_topics(timeout=15).topics
    assert tasks_topic not in admin(bs, security(eo_tenants.b)).list_topics(timeout=15).topics
