"""``df.write`` / ``df.writeStream`` ``.format("shoal")`` against a real broker: columns as Spark's
Kafka sink takes them, read back; and a streaming write whose last micro-batch Spark replays after
a restart, which the sink's commit log keeps from being written twice."""

from __future__ import annotations

from collections import Counter

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import Row
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)
from spark_helpers import consume_all, create_topic, produce, run_available_now

from shoal.spark.kafka import CommitLog

pytestmark = pytest.mark.timeout(240)

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
SCHEMA = StructType([
    StructField("key", StringType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("headers", HEADERS),
    StructField("ignored", StringType()),
])


def test_batch_write_then_read_back(spark, shoal_opts, uniq):
    bs = shoal_opts["kafka.bootstrap.servers"]
    t1, t2 = create_topic(bs, f"{uniq}-1", 3), create_topic(bs, f"{uniq}-2", 1)
    rows = [
        Row(key=None if i % 5 == 0 else f"k{i}", value=b"v%d" % i, topic=t1 if i % 2 else t2,
            partition=(i % 3) if i % 2 else None,
            headers=[Row(key="h", value=b"%d" % i), Row(key="n", value=None)] if i % 4 == 1 else None,
            ignored="x")
        for i in range(60)
    ]
    spark.createDataFrame(rows, SCHEMA).repartition(3).write.format("shoal").options(**shoal_opts).mode("append").save()

    got1 = consume_all(bs, t1, 3)
    got2 = consume_all(bs, t2, 1)
    assert len(got1) == 30 and len(got2) == 30
    by_value = {m.value(): m for m in got1 + got2}
    for i, r in enumerate(rows):
        m = by_value[b"v%d" % i]
        assert m.topic() == r.topic
        assert m.key() == (None if r.key is None else r.key.encode())
        if r.partition is not None:
            assert m.partition() == r.partition
        want_headers = None if r.headers is None else [("h", b"%d" % i), ("n", None)]
        assert m.headers() == want_headers

    # And through the source: the same records.
    back = (spark.read.format("shoal").options(**shoal_opts).option("subscribePattern", f"{uniq}-.*")
            .option("includeHeaders", "true").load())
    assert sorted(r.value for r in back.collect()) == sorted(b"v%d" % i for i in range(60))


def test_topic_option_overrides_the_column_and_keys_partition_like_java(spark, shoal_opts, uniq):
    bs = shoal_opts["kafka.bootstrap.servers"]
    t = create_topic(bs, uniq, 4)
    df = spark.createDataFrame([(f"key-{i % 7}", f"v{i}", "elsewhere") for i in range(70)], "key string, value string, topic string")
    df.write.format("shoal").options(**shoal_opts).option("topic", t).mode("append").save()
    got = consume_all(bs, t, 4)
    assert sorted(m.value() for m in got) == sorted(f"v{i}".encode() for i in range(70))
    # The same key always lands in the same partition (murmur2, Java's partitioner).
    parts = {}
    for m in got:
        parts.setdefault(m.key(), set()).add(m.partition())
    assert all(len(p) == 1 for p in parts.values())


@pytest.mark.parametrize("ddl, options, message", [
    ("key string", {"topic": "x"}, "Required attribute 'value' not found"),
    ("value int", {"topic": "x"}, "value attribute type must be a string or binary"),
    ("value string", {}, "topic option required when no 'topic' attribute is present"),
    ("value string, partition long", {"topic": "x"}, "partition attribute type must be an int"),
    ("value string, headers array<string>", {"topic": "x"}, "headers attribute type must be"),
])
def test_sink_schema_checked(spark, shoal_opts, ddl, options, message):
    df = spark.createDataFrame([], ddl)
    with pytest.raises(PySparkException, match=message):
        df.write.format("shoal").options(**shoal_opts, **options).mode("append").save()


def test_overwrite_refused(spark, shoal_opts):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(PySparkException, match="'overwrite' is not allowed"):
        df.write.format("shoal").options(**shoal_opts).option("topic", "x").mode("overwrite").save()


def _drop_last_commit(ckpt) -> int:
    """Remove the query's last commit-log entry: as if it died after the sink committed."""
    commits = ckpt / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    crc = commits / f".{last}.crc"
    if crc.exists():
        crc.unlink()
    return last


def test_streaming_write_replayed_batch_not_written_twice(spark, shoal_opts, uniq, tmp_path):
    bs = shoal_opts["kafka.bootstrap.servers"]
    src, out = create_topic(bs, f"{uniq}-in", 2), create_topic(bs, f"{uniq}-out", 2)
    produce(bs, src, [{"value": b"r%d" % i, "key": b"k%d" % i, "partition": i % 2} for i in range(30)])
    ckpt = tmp_path / "ckpt"

    def query(prefix=None):
        w = (spark.readStream.format("shoal").options(**shoal_opts).option("subscribe", src)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "10").load()
             .select("key", "value", "partition")
             .writeStream.format("shoal").options(**shoal_opts).option("topic", out)
             .option("checkpointLocation", str(ckpt)))
        if prefix:
            w = w.option("sinkCommitLogTopicPrefix", prefix)
        return run_available_now(w)

    q1 = query()
    values = Counter(m.value() for m in consume_all(bs, out, 2))
    assert values == Counter(b"r%d" % i for i in range(30))
    log = CommitLog({"bootstrap.servers": bs}, f"__shoal-spark-sink-{q1.id}")
    last = log.last_committed()
    assert last == q1.lastProgress["batchId"] or last == max(p["batchId"] for p in q1.recentProgress
                                                             if p["numInputRows"])

    # Spark replays the batch whose commit it did not record; the sink already committed it.
    replayed = _drop_last_commit(ckpt)
    q2 = query()
    assert q2.id == q1.id
    rerun = [p for p in q2.recentProgress if p["batchId"] == replayed]
    assert rerun and rerun[0]["numInputRows"] > 0, "Spark did not re-run the batch"
    assert Counter(m.value() for m in consume_all(bs, out, 2)) == values, "replayed batch written twice"

    # New records after the restart are written once.
    produce(bs, src, [{"value": b"r%d" % i, "key": b"k%d" % i, "partition": i % 2} for i in range(30, 40)])
    query()
    values = Counter(m.value() for m in consume_all(bs, out, 2))
    assert values == Counter(b"r%d" % i for i in range(40))

    # Control: with an empty commit log (another prefix) the same replay is written again.
    replayed = _drop_last_commit(ckpt)
    q4 = query(prefix="__shoal-spark-sink-control-")
    again = sum(p["numInputRows"] for p in q4.recentProgress if p["batchId"] == replayed)
    assert again > 0
    assert sum(Counter(m.value() for m in consume_all(bs, out, 2)).values()) == 40 + again
