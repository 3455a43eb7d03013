"""The ``shoal`` data source with a tenant's credentials (issue 6 follow-up).

``kafka.security.protocol`` / ``kafka.sasl.*`` (or a Java ``kafka.sasl.jaas.config``) take a Spark
job to the broker's SASL listener as a tenant's user: it reads and writes that tenant's topics by
the names the tenant knows, and never sees another tenant's, even one with the same name or
asked for by its physical (tenant-qualified) name. Two tenants on a broker of this module's own
(tests/e2e/tenancy_fixtures.py), with the session's SparkSession.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from spark_helpers import consume_all, create_topic, produce

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from tenancy_fixtures import Tenant, tenant_cluster  # noqa: E402

pytestmark = pytest.mark.timeout(240)

TOPIC = "events"


@pytest.fixture(scope="module")
def spark_tenants():
    yield from tenant_cluster()


def security(t: Tenant) -> dict[str, str]:
    return {k: v for k, v in t.conf().items() if k != "bootstrap.servers"}


def spark_opts(t: Tenant, *, jaas: bool = False) -> dict[str, str]:
    """Spark Kafka options of ``t``'s user: ``kafka.sasl.username``/``password``, or the Java form."""
    opts = {f"kafka.{k}": str(v) for k, v in t.conf().items()}
    opts["kafkaConsumer.pollTimeoutMs"] = "20000"
    if jaas:
        user = opts.pop("kafka.sasl.username")
        password = opts.pop("kafka.sasl.password")
        opts["kafka.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{password}";'
        )
    return opts


def values(df) -> list[bytes]:
    return sorted(bytes(r.value) for r in df.select("value").collect())


def test_tenant_job_reads_and_writes_its_own_topics_only(spark, spark_tenants):
    a, b = spark_tenants.a, spark_tenants.b
    bs = spark_tenants.broker.sasl_bootstrap
    for t in (a, b):
        create_topic(bs, TOPIC, 2, security=security(t))
    produce(bs, TOPIC, [{"value": b"b-%d" % i} for i in range(5)], security=security(b))

    # A writes with a Java-style JAAS config, and reads its records back.
    a_rows = [(f"k{i}", f"alpha-{i}") for i in range(20)]
    (spark.createDataFrame(a_rows, "key string, value string").write.format("shoal")
     .options(**spark_opts(a, jaas=True)).option("topic", TOPIC).mode("append").save())
    a_values = sorted(f"alpha-{i}".encode() for i in range(20))
    assert values(spark.read.format("shoal").options(**spark_opts(a)).option("subscribe", TOPIC).load()) == a_values
    # Stored under A's prefix (the operator's physical view); B's topic of the same name is B's.
    assert sorted(m.value() for m in consume_all(spark_tenants.broker.bootstrap, a.prefix + TOPIC, 2)) == a_values

    def read_b(**option: str):
        return values(spark.read.format("shoal").options(**spark_opts(b)).options(**option).load())

    b_values = sorted(b"b-%d" % i for i in range(5))
    assert read_b(subscribe=TOPIC) == b_values
    assert read_b(subscribePattern=".*") == b_values
    assert read_b(subscribe=a.prefix + TOPIC) == []
    # assign: A's partitions fail for B exactly as partitions of a topic that does not exist.
    def assign_error(topic: str) -> str:
        with pytest.raises(PySparkException) as e:
            read_b(assign=json.dumps({topic: [0, 1]}))
        found = re.search(r"KafkaError\{.*?\}", str(e.value))
        assert found and "alpha-" not in str(e.value), str(e.value)
        assert "UNKNOWN_TOPIC_OR_PART" in found.group(0), found.group(0)  # at once, not a timeout
        return found.group(0)

    missing = f"lkc-zzzzzz_{TOPIC}"
    assert assign_error(a.prefix + TOPIC).replace(a.prefix + TOPIC, missing) == assign_error(missing)

    # B writing to A's physical name does not reach A's topic (it may make B a topic of that name).
    try:
        (spark.createDataFrame([("x", "from-b")], "key string, value string").write.format("shoal")
         .options(**spark_opts(b)).option("kafka.message.timeout.ms", "5000")
         .option("topic", a.prefix + TOPIC).mode("append").save())
    except PySparkException:
        pass
    assert values(spark.read.format("shoal").options(**spark_opts(a)).option("subscribe", TOPIC).load()) == a_values
