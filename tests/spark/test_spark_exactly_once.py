"""Transactions through the ``shoal`` data source, against a real broker and real Spark:

- the source with ``kafka.isolation.level=read_committed`` skips aborted records, ends a range
  whose last offsets are transaction markers, and stops at the last stable offset (an open
  transaction) where read_uncommitted reads to the high watermark;
- a streaming query writing through the ``exactlyOnce`` sink, its driver killed -9 in the middle
  of a micro-batch (one task committed, the other's transaction open with rows in it) and
  restarted from its checkpoint: every input record is in the read_committed output exactly once;
- the same query with a UDF failing in the middle of a task (which PySpark lets the writer commit
  as if its input were complete), restarted: the re-run writes only the rest of that task;
- a batch write with one transaction per task.

The checks read the output with their own consumer (not the data source under test).
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from confluent_kafka import Producer
from pyspark.sql.pandas.types import to_arrow_schema
from spark_eo_helpers import (
    cut_short_then_rerun,
    kill,
    name,
    pipeline_topics,
    run_to_end,
    start_job,
    view,
    wait_for,
)
from spark_helpers import OP_TIMEOUT, create_topic

from shoal.spark.kafka import OffsetReader, TaskCommitLog, read_range
from shoal.spark.offsets import OffsetRange
from shoal.spark.sink import task_log_topic
from shoal.spark.source import source_schema

pytestmark = pytest.mark.timeout(300)

TXN_TIMEOUT = 30.0


def txn_producer(bootstrap: str, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 1})
    p.init_transactions(TXN_TIMEOUT)
    return p


def in_txn(p: Producer, topic: str, values: list[bytes], *, end: str | None) -> None:
    """One transaction of ``values`` to partition 0; ``end`` "commit", "abort" or None (left open)."""
    p.begin_transaction()
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(OP_TIMEOUT) == 0
    if end == "commit":
        p.commit_transaction(TXN_TIMEOUT)
    elif end == "abort":
        p.abort_transaction(TXN_TIMEOUT)


# -- the source in read_committed -----------------------------------------------------------------


def test_read_committed_skips_aborted_and_stops_at_the_lso(spark, shoal_opts, uniq):
    bs = shoal_opts["kafka.bootstrap.servers"]
    t = create_topic(bs, uniq, 1)
    p = txn_producer(bs, f"{uniq}-a")
    in_txn(p, t, [b"a%d" % i for i in range(5)], end="commit")
    in_txn(p, t, [b"b%d" % i for i in range(3)], end="abort")
    in_txn(p, t, [b"c%d" % i for i in range(2)], end="commit")
    opener = txn_producer(bs, f"{uniq}-d")
    in_txn(opener, t, [b"d0", b"d1"], end=None)  # open: holds the last stable offset back
    committed = sorted([b"a%d" % i for i in range(5)] + [b"c0", b"c1"])
    try:
        tp = (t, 0)
        lso = OffsetReader({"bootstrap.servers": bs, "isolation.level": "read_committed"}).latest([tp])[tp]
        hw = OffsetReader({"bootstrap.servers": bs}).latest([tp])[tp]
        assert hw - lso == 2, (lso, hw)  # the two records of the open transaction

        # read_range alone: ranges whose last offsets are markers or aborted records end.
        schema = to_arrow_schema(source_schema(False), timezone="UTC")

        def offsets(start, end):
            batches = read_range({"bootstrap.servers": bs, "isolation.level": "read_committed"},
                                 OffsetRange(t, 0, start, end), schema, include_headers=False,
                                 fail_on_data_loss=True, poll_timeout_ms=10_000)
            return [(r["offset"], r["value"]) for b in batches for r in b.to_pylist()]

        everything = offsets(0, lso)
        assert sorted(v for _, v in everything) == committed
        a_end = everything[4][0] + 1  # the commit marker of the first transaction
        assert [v for _, v in offsets(0, a_end + 1)] == [b"a%d" % i for i in range(5)]  # ends on its marker
        c_start = everything[5][0]
        assert offsets(a_end + 1, c_start) == []  # only aborted records and markers

        # Spark: read_committed ends at the LSO and skips the aborted transaction; the default
        # (read_uncommitted, as Spark's) reads every record up to the high watermark.
        def read(**extra):
            df = spark.read.format("shoal").options(**shoal_opts, **extra).option("subscribe", t).load()
            return sorted(r.value for r in df.select("value").collect())

        assert read(**{"kafka.isolation.level": "read_committed"}) == committed
        assert len(read()) == 12
        streamed = (spark.readStream.format("shoal").options(**shoal_opts).option("subscribe", t)
                    .option("kafka.isolation.level", "read_committed").option("startingOffsets", "earliest").load())
        q = streamed.writeStream.format("memory").queryName(uniq.replace("-", "_")).trigger(availableNow=True).start()
        assert q.awaitTermination(90)
        assert sorted(r.value for r in spark.sql(f"select value from {uniq.replace('-', '_')}").collect()) == committed
    finally:
        opener.abort_transaction(TXN_TIMEOUT)
    # Aborted: the LSO passes the abort marker, nothing more to read committed.
    assert read(**{"kafka.isolation.level": "read_committed"}) == committed


# -- the exactly-once sink, its driver killed mid-batch ---------------------------------------------


def test_streaming_exactly_once_survives_kill9_mid_batch(broker, uniq, tmp_path):
    bs = broker.bootstrap
    src, out, names = pipeline_topics(bs, uniq)
    ckpt, flag, log = tmp_path / "ckpt", tmp_path / "hanging", tmp_path / "job.log"
    # 400 records a batch, 200 of each partition: r701 (partition 1, offset 350) is in batch 1, task 1.
    job = start_job(bs, src, out, ckpt, log, "r701", str(flag))
    try:
        wait_for("the task of r701 hangs", flag.exists, 150, job, log)
        query_id = json.loads(next((ckpt / "metadata").open()))["id"]
        tasks = TaskCommitLog({"bootstrap.servers": bs}, task_log_topic(None, query_id), poll_timeout_ms=20_000)
        # Task 0 of batch 1 commits; task 1's transaction holds rows before r701 (from r401 on).
        wait_for("task 0 of batch 1 committed", lambda: tasks.find(1, 0), 60, job, log)
        wait_for("rows of the open transaction on the broker",
                 lambda: {b"r401", b"r403"} <= {name(m) for m in view(bs, out, 3, "read_uncommitted")}, 30, job, log)
        assert tasks.find(1, 1) == []
    finally:
        kill(job)
    assert not (ckpt / "commits" / "1").exists(), "batch 1 was committed: the kill was not mid-batch"

    result = run_to_end(bs, src, out, ckpt, log)
    assert result["id"] == query_id
    assert [b for b, n in result["batches"] if n][:1] == [1], f"batch 1 not re-run: {result}"

    committed = Counter(name(m) for m in view(bs, out, 3, "read_committed"))
    assert committed == Counter(names), {v: n for v, n in committed.items() if n != 1}
    # The control: the killed attempt's rows are in the log, only read_uncommitted sees them twice
    # (its transaction aborted by the re-run's init_transactions). Or, if its writer outlived the
    # JVM and committed what it had (PySpark ends its input as if complete), the re-run wrote the
    # rest: two records for the task, each row once.
    uncommitted = Counter(name(m) for m in view(bs, out, 3, "read_uncommitted"))
    redo = [(d["firstRow"], d["records"]) for d in tasks.find(1, 1)]
    if uncommitted[b"r401"] == 2:
        assert redo == [(0, 200)]
    else:
        assert uncommitted[b"r401"] == 1 and len(redo) == 2 and redo[1] == (redo[0][1], 200 - redo[0][1]), redo
    assert uncommitted[b"r1"] == 1
    # Task 0 of batch 1 was not written again.
    assert [d["records"] for d in tasks.find(1, 0)] == [200]


# -- batch writes: one transaction per task ---------------------------------------------------------


def test_batch_write_exactly_once(spark, shoal_opts, uniq, broker):
    from pyspark.sql import functions as F

    bs = shoal_opts["kafka.bootstrap.servers"]
    out = create_topic(bs, uniq, 2)
    pad = "|" + "x" * 20

    def write(df):
        (df.write.format("shoal").options(**shoal_opts).option("topic", out).option("exactlyOnce", "true")
         .mode("append").save())

    write(spark.range(0, 300, numPartitions=3).select(F.format_string("a%d" + pad, "id").alias("value")))
    assert Counter(name(m) for m in view(bs, out, 2, "read_committed")) == Counter(b"a%d" % i for i in range(300))
    # One transaction per task: three transactional ids of the prefix, each committed once.
    inits = [line for line in broker.log_text().splitlines() if "initialized transactional id shoal-spark-" in line]
    assert len({line.split("transactional id ")[1].split()[0] for line in inits}) >= 3


def test_streaming_exactly_once_task_cut_short_upstream(broker, uniq, tmp_path):
    cut_short_then_rerun(broker.bootstrap, uniq, tmp_path)
