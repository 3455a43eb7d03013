"""``spark.read`` / ``spark.readStream`` ``.format("shoal")`` against a real broker.

Batch reads of offset ranges (JSON offsets, timestamps, minPartitions, headers, assign); a
streaming read of several topics with Trigger.AvailableNow, stopped and restarted from its
checkpoint with more data, new partitions and a new topic in between (no loss, no duplicates);
failOnDataLoss both ways after DeleteRecords removed records the query had not read yet.

Not here yet: "a tenant's credentials only see that tenant's topics" comes with the tenants issue
(the ``kafka.sasl.*`` options it needs are passed through already; see test_spark_options.py).
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from spark_helpers import add_partitions, create_topic, delete_records, produce, run_available_now

pytestmark = pytest.mark.timeout(240)

# Record timestamps: recent, or the broker's time-based retention (7 days) would remove them.
BASE_TS = (int(time.time()) - 3600) * 1000


def fill(bootstrap, topic, partitions, per_partition, *, start=0):
    produce(bootstrap, topic, [
        {"value": f"{topic}/{p}/{i}".encode(), "key": f"k{i}".encode(), "partition": p,
         "timestamp": BASE_TS + i * 1000, "headers": [("n", str(i).encode())] if i % 3 == 0 else None}
        for p in range(partitions) for i in range(start, start + per_partition)
    ])


def keys(df):
    return sorted((r.topic, r.partition, r.offset) for r in df.select("topic", "partition", "offset").collect())


def test_schema_is_sparks_kafka_schema(spark, shoal_opts, uniq):
    create_topic(shoal_opts["kafka.bootstrap.servers"], uniq, 1)
    df = spark.read.format("shoal").options(**shoal_opts).option("subscribe", uniq).load()
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>")
    df = spark.read.format("shoal").options(**shoal_opts).option("subscribe", uniq).option("includeHeaders", "true").load()
    assert df.schema.simpleString().endswith(",headers:array<struct<key:string,value:binary>>>")


def test_batch_read_offset_ranges(spark, shoal_opts, uniq):
    bs = shoal_opts["kafka.bootstrap.servers"]
    t = create_topic(bs, uniq, 3)
    fill(bs, t, 3, 30)
    def reader():  # a new one each time: DataFrameReader.option() changes the reader it is called on
        return spark.read.format("shoal").options(**shoal_opts).option("subscribe", t)

    everything = reader().load()
    assert everything.count() == 90

    ranged = (reader().option("startingOffsets", json.dumps({t: {"0": 5, "1": -2, "2": 10}}))
              .option("endingOffsets", json.dumps({t: {"0": 15, "1": -1, "2": 20}})).load())
    want = ([(t, 0, o) for o in range(5, 15)] + [(t, 1, o) for o in range(0, 30)] + [(t, 2, o) for o in range(10, 20)])
    assert keys(ranged) == sorted(want)
    row = ranged.where("partition = 2 AND offset = 12").selectExpr(
        "CAST(key AS STRING) k", "CAST(value AS STRING) v", "timestamp", "timestampType").collect()[0]
    assert (row.k, row.v, row.timestampType) == ("k12", f"{t}/2/12", 0)
    assert int(row.timestamp.timestamp()) == (BASE_TS + 12_000) // 1000

    # Reading happens in the executors: one input partition per topic-partition, or more if asked.
    assert ranged.rdd.getNumPartitions() == 3
    split = reader().option("minPartitions", "7").load()
    assert split.rdd.getNumPartitions() == 7
    assert keys(split) == keys(everything)
    assert reader().option("maxRecordsPerPartition", "10").load().rdd.getNumPartitions() == 9

    # Timestamps: the first record at or after them.
    by_ts = reader().option("startingTimestamp", str(BASE_TS + 25_000)).load()
    assert keys(by_ts) == sorted((t, p, o) for p in range(3) for o in range(25, 30))
    by_pts = (reader().option("startingOffsetsByTimestamp", json.dumps({t: {"0": BASE_TS, "1": BASE_TS + 28_000,
                                                                            "2": BASE_TS + 99_000_000}}))
              .option("startingOffsetsByTimestampStrategy", "latest").load())
    assert keys(by_pts) == sorted([(t, 0, o) for o in range(30)] + [(t, 1, 28), (t, 1, 29)])
    until_ts = reader().option("endingTimestamp", str(BASE_TS + 3_000)).load()
    assert keys(until_ts) == sorted((t, p, o) for p in range(3) for o in range(3))
    with pytest.raises(PySparkException, match="no record of .* has a timestamp at or after"):
        reader().option("startingTimestamp", str(BASE_TS + 99_000_000)).load().collect()

    # assign, and headers.
    assigned = (spark.read.format("shoal").options(**shoal_opts).option("assign", json.dumps({t: [1]}))
                .option("includeHeaders", "true").load())
    rows = {r.offset: r.headers for r in assigned.collect()}
    assert sorted(rows) == list(range(30))
    assert [(h.key, h.value) for h in rows[3]] == [("n", b"3")]
    assert rows[4] is None


def test_batch_read_specific_offsets_must_name_every_partition(spark, shoal_opts, uniq):
    t = create_topic(shoal_opts["kafka.bootstrap.servers"], uniq, 2)
    df = (spark.read.format("shoal").options(**shoal_opts).option("subscribe", t)
          .option("startingOffsets", json.dumps({t: {"0": 0}})).load())
    with pytest.raises(PySparkException, match="must name all the topic-partitions"):
        df.collect()


def test_batch_read_fail_on_data_loss(spark, shoal_opts, uniq):
    bs = shoal_opts["kafka.bootstrap.servers"]
    t = create_topic(bs, uniq, 1)
    fill(bs, t, 1, 20)
    delete_records(bs, t, 0, 8)
    def reader():
        return (spark.read.format("shoal").options(**shoal_opts).option("subscribe", t)
                .option("startingOffsets", json.dumps({t: {"0": 2}})))

    with pytest.raises(PySparkException, match=r"Data loss.*offsets \[2, 8\)"):
        reader().load().collect()
    assert keys(reader().option("failOnDataLoss", "false").load()) == [(t, 0, o) for o in range(8, 20)]


def stream(spark, shoal_opts, **options):
    r = spark.readStream.format("shoal").options(**shoal_opts)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def to_parquet(df, out, checkpoint):
    return (df.select("topic", "partition", "offset", F.col("value").cast("string").alias("value"))
            .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint)))


def test_streaming_available_now_restart_no_loss_no_duplicates(spark, shoal_opts, uniq, tmp_path):
    bs = shoal_opts["kafka.bootstrap.servers"]
    a, b = create_topic(bs, f"{uniq}-a", 2), create_topic(bs, f"{uniq}-b", 1)
    fill(bs, a, 2, 40)
    fill(bs, b, 1, 25)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    opts = dict(subscribePattern=f"{uniq}-.*", startingOffsets="earliest", maxOffsetsPerTrigger="30")

    q1 = run_available_now(to_parquet(stream(spark, shoal_opts, **opts), out, ckpt))
    sizes = [p["numInputRows"] for p in q1.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 105 and max(sizes) <= 30 and len(sizes) >= 4
    # The checkpointed offsets are Spark's Kafka offsets JSON: the next offset of each partition.
    assert json.loads(q1.lastProgress["sources"][0]["endOffset"]) == {a: {"0": 40, "1": 40}, b: {"0": 25}}

    # More records, a new partition of a, and a new topic matching the pattern.
    fill(bs, a, 2, 10, start=40)
    add_partitions(bs, a, 3)
    produce(bs, a, [{"value": f"{a}/2/{i}".encode(), "partition": 2} for i in range(7)])
    c = create_topic(bs, f"{uniq}-c", 1)
    fill(bs, c, 1, 5)
    fill(bs, b, 1, 3, start=25)

    q2 = run_available_now(to_parquet(stream(spark, shoal_opts, **opts), out, ckpt))
    assert q2.id == q1.id  # same query, restarted from its checkpoint
    assert sum(p["numInputRows"] for p in q2.recentProgress) == 20 + 7 + 5 + 3

    got = [(r.topic, r.partition, r.offset, r.value) for r in spark.read.parquet(str(out)).collect()]
    assert len(got) == len(set(got)), "duplicates"
    want = ({(a, p, o) for p in (0, 1) for o in range(50)} | {(a, 2, o) for o in range(7)}
            | {(b, 0, o) for o in range(28)} | {(c, 0, o) for o in range(5)})
    assert {g[:3] for g in got} == want
    assert all(v == f"{t}/{p}/{o}" for t, p, o, v in got)


def test_streaming_fail_on_data_loss_both_ways(spark, shoal_opts, uniq, tmp_path):
    bs = shoal_opts["kafka.bootstrap.servers"]
    t = create_topic(bs, uniq, 1)
    fill(bs, t, 1, 10)
    ckpt = tmp_path / "ckpt"
    opts = dict(subscribe=t, startingOffsets="earliest")
    run_available_now(to_parquet(stream(spark, shoal_opts, **opts), tmp_path / "out", ckpt))
    assert spark.read.parquet(str(tmp_path / "out")).count() == 10

    # Ten more records; retention (here DeleteRecords) removes 10..14 before the query reads them.
    fill(bs, t, 1, 10, start=10)
    delete_records(bs, t, 0, 15)
    shutil.copytree(ckpt, tmp_path / "ckpt2")  # the same query, to run once each way

    with pytest.raises(PySparkException, match=r"Data loss.*\[10, 15\).*failOnDataLoss"):
        run_available_now(to_parquet(stream(spark, shoal_opts, **opts, failOnDataLoss="true"), tmp_path / "out", ckpt))

    run_available_now(to_parquet(stream(spark, shoal_opts, **opts, failOnDataLoss="false"),
                                 tmp_path / "out2", tmp_path / "ckpt2"))
    # It went on from offset 10 (its checkpoint), skipping the deleted 10..14.
    got = sorted(r.offset for r in spark.read.parquet(str(tmp_path / "out2" / "part-*")).collect())
    assert got == list(range(15, 20))
