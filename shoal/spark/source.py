"""The ``shoal`` data source's readers: batch (``spark.read``) and streaming (``spark.readStream``).

Planning runs in Spark's driver-side Python workers and only asks the broker for metadata and
offsets; records are read in the executors, one input partition per topic-partition range (split
further for ``minPartitions`` / ``maxRecordsPerPartition``), by :func:`shoal.spark.kafka.read_range`.

Streaming offsets are Spark's Kafka offsets JSON, ``{"topic":{"partition":next offset}}``: the
offset checkpointed for a batch is the first offset the next batch reads, so a restart from the
checkpoint re-plans exactly the batch that was not committed and then goes on from its end, with
no record lost or read twice. Partitions that appear later (new partitions, new topics matching
``subscribePattern``) are read from their earliest offset. ``Trigger.AvailableNow`` reads up to the
latest offsets of the moment the query starts, in as many batches as ``maxOffsetsPerTrigger``
asks, then stops.

Data loss (records removed by retention or DeleteRecords before the query read them, partitions
that disappeared, offsets that went backwards) fails the query with :class:`DataLossError` when
``failOnDataLoss`` is true (the default), and is skipped with a warning in the ``shoal.spark``
logger otherwise. It is checked when a batch is planned and again while reading.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator, Mapping

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from shoal.spark.kafka import OffsetReader, read_range, report_data_loss, unknown_topic
from shoal.spark.offsets import (
    TP,
    DataLoss,
    OffsetRange,
    clamp_ranges,
    from_spark_json,
    rate_limit,
    split_ranges,
    to_spark_json,
)
from shoal.spark.options import EARLIEST, LATEST, OffsetSpec, OptionError, SourceOptions

try:  # PySpark >= 4.1: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # PySpark 4.0: latestOffset() without arguments; AvailableNow by Spark's wrapper
    ReadAllAvailable = ReadLimit = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


__all__ = ["source_schema", "ShoalInputPartition", "ShoalBatchReader", "ShoalStreamReader"]

log = logging.getLogger("shoal.spark")

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def source_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (every field nullable, as there)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def check_schema(schema: StructType, opts: SourceOptions) -> None:
    expected = source_schema(opts.include_headers)
    if schema is not None and schema != expected:
        raise OptionError(
            "the Shoal source has a fixed schema and cannot be set with a custom one "
            f"(expected {expected.simpleString()}, got {schema.simpleString()})"
        )


class ShoalInputPartition(InputPartition):
    """One executor task: records ``[start, end)`` of one topic-partition."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__((r.topic, r.partition, r.start, r.end))
        self.range = r

    def __repr__(self) -> str:
        r = self.range
        return f"ShoalInputPartition({r.topic}-{r.partition} [{r.start}, {r.end}))"


def _fmt(offsets: Mapping[TP, int]) -> str:
    return "{" + ", ".join(f"{t}-{p}: {o}" for (t, p), o in sorted(offsets.items())) + "}"


def resolve(
    spec: OffsetSpec,
    tps: list[TP],
    earliest: Mapping[TP, int],
    latest: Mapping[TP, int],
    reader: OffsetReader,
    *,
    option: str,
    no_match: str,
) -> dict[TP, int]:
    """Concrete offsets of ``tps`` for a starting or ending spec.

    ``no_match`` says what a timestamp after the last record gives: "error" (fail) or "latest".
    """
    if spec.kind == "earliest":
        return {tp: earliest[tp] for tp in tps}
    if spec.kind == "latest":
        return {tp: latest[tp] for tp in tps}
    if spec.kind in ("offsets", "timestamps"):
        if set(spec.offsets) != set(tps):
            raise OptionError(
                f"if '{option}' has specific offsets or timestamps, they must name all the "
                f"topic-partitions read (use -1 for latest, -2 for earliest). "
                f"Specified: {sorted(spec.offsets)}; assigned: {sorted(tps)}"
            )
    if spec.kind == "offsets":
        return {
            tp: earliest[tp] if o == EARLIEST else latest[tp] if o == LATEST else o
            for tp, o in spec.offsets.items()
        }
    stamps = {tp: spec.timestamp for tp in tps} if spec.kind == "timestamp" else dict(spec.offsets)
    found = reader.for_timestamps(stamps)
    out: dict[TP, int] = {}
    for tp in tps:
        offset = found.get(tp, -1)
        if offset is None or offset < 0:
            if no_match == "error":
                raise OptionError(
                    f"no record of {tp[0]}-{tp[1]} has a timestamp at or after {stamps[tp]} "
                    f"('{option}'); set 'startingOffsetsByTimestampStrategy' to 'latest' to start "
                    "from the latest offset in that case"
                )
            offset = latest[tp]
        out[tp] = offset
    return out


class _Planner:
    """What both readers share: the subscription resolved against the broker, and splitting."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        check_schema(schema, opts)
        self.opts = opts
        self.schema = schema
        self.offsets = OffsetReader(opts.conf)

    def current_partitions(self) -> list[TP]:
        cluster = self.offsets.partition_counts()
        sub = self.opts.subscription
        if sub.kind == "assign":
            # Spark's assign strategy describes the assigned topics first: a topic the broker does
            # not show (missing, or another tenant's) fails at once, not after a ListOffsets timeout.
            missing = sorted({t for t, _ in sub.partitions if t not in cluster})
            if missing:
                raise unknown_topic(missing[0])
        return sub.select(cluster)

    def plan(self, ranges: list[OffsetRange], earliest: Mapping[TP, int], latest: Mapping[TP, int],
             extra_losses: list[DataLoss] = ()) -> list[ShoalInputPartition]:
        kept, lost = clamp_ranges(ranges, earliest, latest)
        report_data_loss(list(extra_losses) + lost, fail=self.opts.fail_on_data_loss)
        pieces = split_ranges(kept, self.opts.min_partitions, self.opts.max_records_per_partition)
        return [ShoalInputPartition(r) for r in pieces]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        r = getattr(partition, "range", None)
        if r is None:  # Spark's placeholder when there is nothing to read
            return iter(())
        from pyspark.sql.pandas.types import to_arrow_schema

        return read_range(
            self.opts.conf,
            r,
            to_arrow_schema(self.schema, timezone="UTC"),
            include_headers=self.opts.include_headers,
            fail_on_data_loss=self.opts.fail_on_data_loss,
            poll_timeout_ms=self.opts.poll_timeout_ms,
        )


class ShoalBatchReader(DataSourceReader):
    """``spark.read.format("shoal")``: the records between startingOffsets and endingOffsets."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self._planner = _Planner(opts, schema)

    def partitions(self) -> list[InputPartition]:
        p, opts = self._planner, self._planner.opts
        try:
            tps = p.current_partitions()
            earliest, latest = p.offsets.earliest(tps), p.offsets.latest(tps)
            tps = [tp for tp in tps if tp in earliest and tp in latest]
            start = resolve(opts.starting, tps, earliest, latest, p.offsets,
                            option="startingOffsets", no_match=opts.by_timestamp_strategy)
            assert opts.ending is not None
            end = resolve(opts.ending, tps, earliest, latest, p.offsets, option="endingOffsets", no_match="latest")
            for tp in tps:
                if end[tp] < start[tp]:
                    raise OptionError(
                        f"starting offset {start[tp]} is after the ending offset {end[tp]} of "
                        f"{tp[0]}-{tp[1]}: either the offsets given are invalid or the topic has been damaged"
                    )
            ranges = [OffsetRange(t, n, start[(t, n)], end[(t, n)]) for t, n in tps]
            return p.plan(ranges, earliest, latest)
        finally:
            p.offsets.close()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return self._planner.read(partition)


class ShoalStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("shoal")``: micro-batches between checkpointed offsets."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self._planner = _Planner(opts, schema)
        self._target: dict[TP, int] | None = None  # Trigger.AvailableNow: stop here
        self._latest: dict[TP, int] | None = None  # for reportLatestOffset
        self._last_end: dict[TP, int] | None = None  # PySpark 4.0: latestOffset() gets no start

    def initialOffset(self) -> dict:
        p, opts = self._planner, self._planner.opts
        tps = p.current_partitions()
        earliest, latest = p.offsets.earliest(tps), p.offsets.latest(tps)
        tps = [tp for tp in tps if tp in earliest and tp in latest]
        start = resolve(opts.starting, tps, earliest, latest, p.offsets,
                        option="startingOffsets", no_match=opts.by_timestamp_strategy)
        self._last_end = start
        return to_spark_json(start)

    def getDefaultReadLimit(self) -> Any:
        n = self._planner.opts.max_offsets_per_trigger
        if ReadMaxRows is None:
            return None
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        p = self._planner
        tps = p.current_partitions()
        self._target = p.offsets.latest(tps)
        log.info("Trigger.AvailableNow: reading up to %s", _fmt(self._target))

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        p, opts = self._planner, self._planner.opts
        # PySpark 4.0 calls latestOffset() without the start: use the last end we returned; right
        # after a restart there is none, and that batch is then not rate-limited.
        known = start is not None or self._last_end is not None
        begin = from_spark_json(start) if start is not None else dict(self._last_end or {})
        if self._target is not None:
            latest = dict(self._target)
        else:
            tps = p.current_partitions()
            latest = p.offsets.latest(tps)
        self._latest = dict(latest)
        losses = []
        gone = sorted(tp for tp in begin if tp not in latest)
        for t, n in gone:
            losses.append(DataLoss(t, n, begin[(t, n)], begin[(t, n)], "the partition is gone"))
        for tp, end in latest.items():
            if tp in begin and end < begin[tp]:
                losses.append(DataLoss(tp[0], tp[1], begin[tp], begin[tp],
                                       f"the partition's latest offset went back from {begin[tp]} to {end} "
                                       "(truncated, or deleted and created again)"))
        report_data_loss(losses, fail=opts.fail_on_data_loss)
        max_rows = getattr(limit, "max_rows", None) if limit is not None else opts.max_offsets_per_trigger
        if max_rows and known:
            new = [tp for tp in latest if tp not in begin]
            from_ = {**p.offsets.earliest(new), **begin}  # new partitions start at their earliest
            end = rate_limit(from_, latest, max_rows)
        else:
            end = latest
        self._last_end = end
        return to_spark_json(end)

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else to_spark_json(self._latest)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        p = self._planner
        begin, until = from_spark_json(start), from_spark_json(end)
        tps = sorted(until)
        earliest, latest = p.offsets.earliest(tps), p.offsets.latest(tps)
        losses = []
        for tp in tps:
            if tp not in begin:
                begin[tp] = earliest.get(tp, 0)
                if begin[tp] != 0:
                    losses.append(DataLoss(tp[0], tp[1], 0, begin[tp],
                                           f"added partition starts from {begin[tp]} instead of 0"))
        ranges = [OffsetRange(t, n, begin[(t, n)], until[(t, n)]) for t, n in tps]
        return p.plan(ranges, earliest, latest, losses)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return self._planner.read(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, never in a consumer group."""

    def stop(self) -> None:
        self._planner.offsets.close()
