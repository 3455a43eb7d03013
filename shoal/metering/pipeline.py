"""``shoal metering run``: the usage pipeline on PySpark Structured Streaming (docs/metering.md).

Reads ``__shoal_usage`` through Shoal's own ``format("shoal")`` source and keeps, under ``--output``:

=====================  ====================================================================
``usage_raw/``         every usage record once (Parquet, one directory per micro-batch)
``hourly_usage/``      per tenant and event-time hour: the counters summed, partition-hours,
                       byte-hours stored, peak connections (Parquet)
``billing/``           per tenant and month: quantities and their price from the rate card
``broker_usage/``      per broker and usage window: the counters summed over tenants, the
                       gauges; what ``shoal capacity report`` reads (Parquet)
``_checkpoint/``       Spark's checkpoint (source offsets and the de-duplication state)
=====================  ====================================================================

The stream: records parsed from JSON (a record of another ``schema_version`` is dropped, as is
what is not JSON), event time ``window_end``, a watermark ``--watermark`` behind the latest event
time, and
``dropDuplicatesWithinWatermark`` on a record's identity ``(broker, incarnation, seq, tenant)`` —
a window a broker had to send again is counted once. Each micro-batch (``foreachBatch``) writes its
records to ``usage_raw/batch=<id>`` (overwritten if Spark runs that batch again after a crash) and
then recomputes the three tables from ``usage_raw`` with event-time windows (``window()`` of one
hour on ``window_end``), de-duplicating by identity once more across batches. A restart goes on
from the checkpoint: the source's offsets say where, the raw table holds what came before, so
nothing is counted twice or lost. ``--once`` is ``Trigger.AvailableNow``: everything in the topic
now, then stop.

Hours are attributed by ``window_end`` (a 10 s window that straddles an hour counts in the later
hour). Storage is billed in GB-months of leaders' log bytes (``storage_bytes`` x time / 30 days,
1 GB = 10^9 bytes); partitions in partition-hours (``partitions_led`` x time).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from shoal.metering.record import COUNTERS, GAUGES, SCHEMA_VERSION, USAGE_TOPIC

log = logging.getLogger("shoal.metering")

HOUR_MS = 3_600_000
MONTH_MS = 30 * 24 * HOUR_MS
GB = 10**9
IDENTITY = ["broker", "incarnation", "seq", "tenant"]


class RateCardError(ValueError):
    pass


@dataclass(frozen=True)
class RateCard:
    """Prices: per GB produced (``gb_in``) and consumed (``gb_out``), per partition-hour, per
    GB-month stored; ``currency`` is a label."""

    gb_in: float = 0.0
    gb_out: float = 0.0
    partition_hour: float = 0.0
    gb_month_stored: float = 0.0
    currency: str = "USD"

    @classmethod
    def parse(cls, text: str) -> "RateCard":
        try:
            d = json.loads(text)
        except ValueError as e:
            raise RateCardError(f"rate card is not JSON: {e}") from None
        if not isinstance(d, dict):
            raise RateCardError("rate card must be a JSON object")
        known = {"gb_in", "gb_out", "partition_hour", "gb_month_stored", "currency"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise RateCardError(f"unknown rate card fields {unknown} (known: {sorted(known)})")
        kwargs: dict[str, Any] = {}
        for k, v in d.items():
            if k == "currency":
                if not isinstance(v, str):
                    raise RateCardError("currency must be a string")
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise RateCardError(f"{k} must be a non-negative number, got {v!r}")
            kwargs[k] = v if k == "currency" else float(v)
        return cls(**kwargs)

    @classmethod
    def load(cls, path: str | None) -> "RateCard":
        if path is None:
            return cls()
        try:
            return cls.parse(Path(path).read_text())
        except OSError as e:
            raise RateCardError(f"cannot read rate card {path}: {e.strerror or e}") from None


def usage_schema() -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    fields = [StructField("schema_version", LongType()), StructField("broker", LongType()),
              StructField("incarnation", LongType()), StructField("seq", LongType()),
              StructField("tenant", StringType()), StructField("window_start", LongType()),
              StructField("window_end", LongType())]
    fields += [StructField(n, LongType()) for n in (*COUNTERS, *GAUGES)]
    return StructType(fields)


@dataclass
class PipelineOptions:
    bootstrap: str
    output: Path
    rate_card: RateCard
    once: bool = False
    client_options: Mapping[str, str] | None = None  # kafka.* options of the source (security)
    watermark: str = "2 hours"
    trigger_interval: str = "10 seconds"
    max_offsets_per_trigger: int | None = None


def source(spark: Any, opts: PipelineOptions) -> Any:
    """The stream of usage records: parsed, event-timed, watermarked, de-duplicated."""
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("shoal")
              .option("kafka.bootstrap.servers", opts.bootstrap)
              .option("subscribe", USAGE_TOPIC)
              .option("startingOffsets", "earliest")
              .option("failOnDataLoss", "false"))  # retention may have removed what was never read
    for k, v in (opts.client_options or {}).items():
        reader = reader.option(k, v)
    if opts.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(opts.max_offsets_per_trigger))
    parsed = reader.load().select(F.from_json(F.col("value").cast("string"), usage_schema()).alias("u"),
                                  F.col("timestamp").alias("published"))
    usage = parsed.select("u.*", "published").where(F.col("schema_version") == SCHEMA_VERSION)
    usage = usage.withColumn("event_time", F.timestamp_millis("window_end"))
    return usage.withWatermark("event_time", opts.watermark).dropDuplicatesWithinWatermark(IDENTITY)


def _replace(df: Any, path: Path) -> None:
    """Write ``df`` as Parquet at ``path`` through a sibling directory, then swap it in."""
    tmp = path.with_name(path.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    df.coalesce(1).write.mode("overwrite").parquet(str(tmp))
    old = path.with_name(path.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def tables(raw: Any, card: RateCard, cached: list[Any] | None = None) -> dict[str, Any]:
    """hourly_usage, billing, broker_usage and tenant_usage from the raw records (a batch
    DataFrame). The de-duplicated records and the hourly table are persisted (all four read the
    first, billing the second); they are appended to ``cached`` for the caller to unpersist."""
    from pyspark.sql import functions as F

    raw = raw.dropDuplicates(IDENTITY)
    dur = (F.col("window_end") - F.col("window_start")).cast("double")
    raw = (raw.withColumn("partition_hours", F.col("partitions_led") * dur / HOUR_MS)
              .withColumn("gb_months_stored", F.col("storage_bytes") * dur / (GB * MONTH_MS))
              .persist())
    sums = [F.sum(c).cast("long").alias(c) for c in COUNTERS]
    if cached is not None:
        cached.append(raw)
    hourly = (raw.groupBy("tenant", F.window("event_time", "1 hour").alias("hour"))
              .agg(*sums, F.sum("partition_hours").alias("partition_hours"),
                   F.sum("gb_months_stored").alias("gb_months_stored"),
                   F.max("connections").alias("peak_connections"),
                   F.count(F.lit(1)).alias("records"))
              .select("tenant", F.col("hour.start").alias("hour_start"), F.col("hour.end").alias("hour_end"),
                      *COUNTERS, "partition_hours", "gb_months_stored", "peak_connections", "records")
              .persist())
    if cached is not None:
        cached.append(hourly)
    billing = (hourly.where(F.col("tenant") != "")
               .groupBy("tenant", F.date_format("hour_start", "yyyy-MM").alias("month"))
               .agg((F.sum("bytes_in") / GB).alias("gb_in"), (F.sum("bytes_out") / GB).alias("gb_out"),
                    F.sum("partition_hours").alias("partition_hours"),
                    F.sum("gb_months_stored").alias("gb_months_stored")))
    billing = (billing.withColumn("cost_in", F.col("gb_in") * card.gb_in)
               .withColumn("cost_out", F.col("gb_out") * card.gb_out)
               .withColumn("cost_partitions", F.col("partition_hours") * card.partition_hour)
               .withColumn("cost_storage", F.col("gb_months_stored") * card.gb_month_stored)
               .withColumn("total", F.col("cost_in") + F.col("cost_out") + F.col("cost_partitions")
                           + F.col("cost_storage"))
               .withColumn("currency", F.lit(card.currency)))
    broker = (raw.groupBy("broker", "incarnation", "seq", "window_start", "window_end")
              .agg(*sums, *[F.sum(g).cast("long").alias(g) for g in GAUGES],
                   F.max("published").alias("published"))
              .orderBy("broker", "window_end"))
    # the tenants' shares of each broker window (for "who drives this broker")
    tenant_windows = raw.select("broker", "window_end", "tenant", "bytes_in", "bytes_out", "throttle_time_ms",
                                "request_time_us")
    return {"hourly_usage": hourly, "billing": billing, "broker_usage": broker, "tenant_usage": tenant_windows}


class Pipeline:
    """The streaming query and its batch function."""

    def __init__(self, spark: Any, opts: PipelineOptions) -> None:
        self.spark = spark
        self.opts = opts
        self.batches = 0
        self.records = 0

    def process(self, batch: Any, batch_id: int) -> None:
        raw_dir = self.opts.output / "usage_raw" / f"batch={batch_id}"
        batch = batch.persist()
        n = batch.count()
        if n:
            batch.write.mode("overwrite").parquet(str(raw_dir))  # a replayed batch rewrites its own files
        batch.unpersist()
        self.batches += 1
        self.records += n
        log.info("batch %d: %d usage records", batch_id, n)
        if n and not self.opts.once:  # --once: the tables once, at the end (run())
            self.recompute()

    def recompute(self) -> None:
        """hourly_usage, billing, broker_usage and tenant_usage from all of usage_raw."""
        out = self.opts.output
        if not (out / "usage_raw").exists():
            return
        raw = self.spark.read.parquet(str(out / "usage_raw"))
        cached: list[Any] = []
        try:
            for name, df in tables(raw, self.opts.rate_card, cached).items():
                _replace(df, out / name)
        finally:
            for df in cached:
                df.unpersist()

    def start(self) -> Any:
        opts = self.opts
        opts.output.mkdir(parents=True, exist_ok=True)
        writer = (source(self.spark, opts).writeStream.foreachBatch(self.process)
                  .option("checkpointLocation", str(opts.output / "_checkpoint")))
        writer = writer.trigger(availableNow=True) if opts.once else writer.trigger(processingTime=opts.trigger_interval)
        return writer.queryName("shoal-metering").start()


def run(spark: Any, opts: PipelineOptions, *, timeout_s: float | None = None) -> Pipeline:
    """Run the pipeline: until done with ``--once``, else until interrupted (or ``timeout_s``)."""
    p = Pipeline(spark, opts)
    query = p.start()
    t0 = time.monotonic()
    try:
        if timeout_s is None:
            query.awaitTermination()
        else:
            query.awaitTermination(timeout_s)
    finally:
        if query.isActive:
            query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"the metering query failed: {query.exception()}")
    if opts.once:
        p.recompute()
    log.info("metering: %d batches, %d records in %.1f s", p.batches, p.records, time.monotonic() - t0)
    return p
