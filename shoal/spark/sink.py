"""The ``shoal`` data source's writers: batch (``df.write``) and streaming (``df.writeStream``).

A DataFrame with a ``value`` column (string or binary) and optionally ``key`` (string or binary),
``topic`` (string), ``partition`` (int) and ``headers`` (array<struct<key string, value binary>>),
as Spark's Kafka sink takes it; other columns are ignored. The ``topic`` option, when given,
overrides the ``topic`` column. Rows are produced from the executors with librdkafka's idempotent
producer (``enable.idempotence``, ``acks=all``): a retried produce request is never written twice.
Rows without a ``partition`` go where Java's partitioner would put them (``murmur2_random``).

Streaming writes and replayed micro-batches
-------------------------------------------
Spark commits a micro-batch in two steps: the sink's ``commit(batchId)`` on the driver, then the
query's own commit log in the checkpoint. A query that dies between the two re-runs that batch
when it restarts. So that such a replay is not written twice, the sink keeps its own commit log:
a one-partition Shoal topic per query, ``__shoal-spark-sink-<query id>`` (the prefix is the
``sinkCommitLogTopicPrefix`` option; the query id is the one stored in the checkpoint, so it is
the same after a restart; a tenant, whose topic names cannot start with ``__``, sets the
prefix). ``commit(batchId)`` appends ``{"queryId", "batchId", "records",
"committedAtMs"}`` to it. Each write task reads the batch id and query id from Spark's task-local
properties (``streaming.sql.batchId``, ``sql.streaming.queryId``) and the last record of the commit
log; if its batch is already committed, it writes nothing. Batches commit in order, so one record
(the last) answers the question. The topic keeps its records forever (``retention.ms=-1``); delete
it together with the checkpoint.

What this does not cover: a batch whose tasks wrote some records but which never committed (the
query died mid-batch, or a task was retried after a partial write) is written again in full when
it is re-run: at-least-once, as Spark's own Kafka sink is. ``exactlyOnce`` closes that gap.

Exactly-once (``exactlyOnce=true``)
-----------------------------------
Each write task of micro-batch B writes its rows in one Kafka transaction of its own, with
``transactional.id = <transactionalIdPrefix><query id>-<task partition id>``
(``transactionalIdPrefix`` defaults to ``shoal-spark-``; the name follows Flink's Kafka sink,
since Spark's own Kafka sink has no such mode; ``kafka.transactional.id`` is refused because one
id shared by all tasks would make them fence each other). The task:

1. calls ``init_transactions()`` first: this fences any earlier attempt of the same task (a
   retried or speculative attempt, or one of the run that crashed) and has the coordinator
   complete that attempt's transaction (abort if open; a commit already decided is finished);
2. then reads, in read_committed, the task log ``__shoal-spark-sink-<query id>-tasks``
   (:class:`~shoal.spark.kafka.TaskCommitLog`) for the records of (B, task): the rows of its
   input that earlier attempts committed (usually all of them: this attempt writes nothing);
3. then, unless every row was committed before, ``begin_transaction()``, produces its rows (those
   not committed before), produces its record (query id, B, task, first row, count) to the task
   log in the SAME transaction, and ``commit_transaction()``.

Why "the rows committed before" and not just "done": when something upstream in the same task
fails (a UDF raises, the source's read times out), PySpark ends the writer's input as if it were
complete (seen with PySpark 4.3: the writer's iterator just ends); the writer cannot tell, and
commits the rows it got. The task then fails. Its next attempt (a task retry, or the re-run
of the batch after a restart) skips the rows its record covers and writes the rest, so each row
is still written once, provided the input comes in the same order (see below).

The driver's ``commit(B)`` keeps the batch-level record above, so a replay of a batch that fully
committed writes nothing whatever its tasks. A replayed batch that was cut off mid-way re-writes
only the tasks that had not committed, and readers with ``kafka.isolation.level=read_committed``
(or any read_committed consumer) see each row exactly once; read_uncommitted readers also see the
rows of aborted attempts.

What it relies on, from Spark: a re-run micro-batch reads the same offsets (Spark takes them from
the offset log of the checkpoint; the ``shoal`` source plans the same input partitions from the
same offsets), and task ``p`` of the re-run gets the same rows as task ``p`` of the first run
(in the same order, for the rare attempt cut short upstream: true without a shuffle, since the
source reads in offset order).
Spark guarantees that for deterministic plans: no shuffle (task ``p`` = input partition ``p``),
hash shuffles (partitioning by the same keys into ``spark.sql.shuffle.partitions``, which a
stateful query keeps from its checkpoint), and ``repartition(n)`` (Spark sorts before the
round-robin, ``spark.sql.execution.sortBeforeRepartition``). It does NOT hold for
non-deterministic expressions (``rand()``, non-deterministic UDFs, ``current_timestamp`` in a
filter) or when the number of shuffle partitions changes between runs: a partially committed
batch could then lose or duplicate rows of the tasks that differ. Fully committed batches are
safe either way (the driver's record).

A task's transaction must end within librdkafka's ``transaction.timeout.ms`` (60 s by default;
``kafka.transaction.timeout.ms``, up to the broker's ``transaction.max.timeout.ms``), or the
coordinator aborts it and the task fails: raise it for tasks that write for longer. A task that
died with its transaction open holds read_committed readers of the partitions it wrote at that
point until its next attempt's ``init_transactions`` or that timeout aborts it.

Batch writes (``df.write``) with ``exactlyOnce`` run one transaction per task too, with an id
made of the prefix, a random id of the write and the task's partition: a task's rows become
visible all at once, and a retried attempt fences and aborts the one before. There is no task
log there: an attempt that committed (in full, or cut short by a failure upstream as above) is
written again by its retry, and a failed job keeps what its tasks committed.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from shoal.spark.kafka import CommitLog, RecordProducer, TaskCommitLog, committed_rows, task_record
from shoal.spark.options import OptionError, SinkOptions

try:  # PySpark >= 4.1
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

    _ARROW_STREAM = True
except ImportError:  # PySpark 4.0: rows only
    from pyspark.sql.datasource import DataSourceStreamWriter as _StreamWriterBase

    _ARROW_STREAM = False

__all__ = [
    "ShoalCommitMessage",
    "ShoalBatchWriter",
    "ShoalStreamWriter",
    "check_sink_schema",
    "commit_log_topic",
    "task_log_topic",
    "transactional_id",
    "write_in_transaction",
]

log = logging.getLogger("shoal.spark")

DEFAULT_COMMIT_LOG_PREFIX = "__shoal-spark-sink-"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def check_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """Spark's Kafka sink checks, with its wording."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("Required attribute 'value' not found")
    text_or_bytes = (StringType(), BinaryType())
    if fields["value"] not in text_or_bytes:
        raise OptionError(f"value attribute type must be a string or binary, not {fields['value'].simpleString()}")
    if "key" in fields and fields["key"] not in text_or_bytes:
        raise OptionError(f"key attribute type must be a string or binary, not {fields['key'].simpleString()}")
    if topic_option is None:
        if "topic" not in fields:
            raise OptionError(
                "topic option required when no 'topic' attribute is present. Use the topic option for setting a topic."
            )
    if "topic" in fields and fields["topic"] != StringType():
        raise OptionError(f"topic attribute type must be a string, not {fields['topic'].simpleString()}")
    if "partition" in fields and fields["partition"] != IntegerType():
        raise OptionError(f"partition attribute type must be an int, not {fields['partition'].simpleString()}")
    if "headers" in fields:
        want = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))
        got = fields["headers"]
        ok = (
            isinstance(got, ArrayType)
            and isinstance(got.elementType, StructType)
            and [(f.name, f.dataType) for f in got.elementType.fields] == [(f.name, f.dataType) for f in want.elementType.fields]
        )
        if not ok:
            raise OptionError(f"headers attribute type must be {want.simpleString()}, not {got.simpleString()}")


def commit_log_topic(prefix: str | None, query_id: str) -> str:
    return (prefix or DEFAULT_COMMIT_LOG_PREFIX) + query_id


def task_log_topic(prefix: str | None, query_id: str) -> str:
    return commit_log_topic(prefix, query_id) + "-tasks"


def transactional_id(prefix: str, run_id: str, task: int) -> str:
    """The transactional id of write task ``task`` of a query (or of a batch write)."""
    return f"{prefix}{run_id}-{task}"


@dataclass
class ShoalCommitMessage(WriterCommitMessage):
    records: int
    query_id: str | None = None
    batch_id: int | None = None
    skipped: bool = False
    task: int | None = None  # exactly-once writes: the task's partition id


def _normalised(batches: Iterator[Any]) -> Iterator[Any]:
    """Arrow batches whose column names are lower case (Spark's columns are case-insensitive)."""
    for b in batches:
        names = [n.lower() for n in b.schema.names]
        yield b if names == b.schema.names else b.rename_columns(names)


def _produce(opts: SinkOptions, batches: Iterator[Any]) -> int:
    producer = RecordProducer(opts.conf, opts.topic)
    for batch in _normalised(batches):
        producer.send_batch(batch)
    producer.flush()
    return producer.count


def _after(batches: Iterator[Any], rows: int, txn_id: str) -> Iterator[Any]:
    """``batches`` without their first ``rows`` rows."""
    left = rows
    for b in batches:
        if left >= b.num_rows:
            left -= b.num_rows
            continue
        yield b.slice(left) if left else b
        left = 0
    if left:
        log.warning("%s: this attempt's input has %d rows fewer than an earlier attempt committed: the query's "
                    "plan is not deterministic, and exactly-once does not hold for it", txn_id, left)


def write_in_transaction(
    opts: SinkOptions,
    txn_id: str,
    batches: Iterator[Any],
    *,
    committed: Callable[[], int | None] = lambda: None,
    last_record: Callable[[int, int], tuple[str, bytes, bytes, int]] | None = None,
    producer_factory: Callable | None = None,
) -> int | None:
    """Produce ``batches`` in one transaction of ``txn_id``; the number of rows written, or None
    when earlier attempts committed every row.

    ``committed()`` is asked after ``init_transactions`` (which fenced every earlier producer of
    ``txn_id`` and completed its transaction): how many rows of this input earlier attempts
    committed (None: none). Those first rows are not written again. ``last_record(rows,
    first_row)`` gives (topic, key, value, partition) of a record produced last in the same
    transaction (the task's commit record). Any failure aborts the transaction.
    """
    kwargs = {"producer_factory": producer_factory} if producer_factory is not None else {}
    producer = RecordProducer(opts.conf, opts.topic, transactional_id=txn_id, **kwargs)
    producer.init_transactions()
    done = committed()
    rows = _normalised(batches)
    if done is not None:
        rows = _after(rows, done, txn_id)
        first = next(rows, None)
        if first is None:
            return None
        log.warning("%s: an earlier attempt committed only the first %d rows of this input (a failure upstream "
                    "in its task ended its input early; PySpark hands a writer such an input as if complete); "
                    "writing the rest", txn_id, done)
        rows = itertools.chain([first], rows)
    producer.begin()
    try:
        for batch in rows:
            producer.send_batch(batch)
        if last_record is not None:
            topic, key, value, partition = last_record(producer.count, done or 0)
            producer.produce_one(topic, value, key, partition)
    except BaseException:
        producer.abort()
        raise
    producer.commit()
    return producer.count


class ShoalBatchWriter(DataSourceArrowWriter):
    """``df.write.format("shoal")``: every row produced once (idempotent producer)."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, opts.topic)
        self.opts = opts
        self.write_id = uuid.uuid4().hex  # made on the driver: the same in every task

    def write(self, iterator: Iterator[Any]) -> ShoalCommitMessage:
        if not self.opts.exactly_once:
            return ShoalCommitMessage(records=_produce(self.opts, iterator))
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx else 0
        n = write_in_transaction(self.opts, transactional_id(self.opts.transactional_id_prefix, self.write_id, task),
                                 iterator)
        return ShoalCommitMessage(records=n or 0, task=task)

    def commit(self, messages: list) -> None:
        n = sum(m.records for m in messages if m is not None)
        log.info("wrote %d records to Shoal", n)

    def abort(self, messages: list) -> None:
        n = sum(m.records for m in messages if m is not None)
        log.warning("write job failed; %d records of its finished tasks were already produced and stay", n)


def _rows_to_batches(rows: Iterator[Any], size: int = 4096) -> Iterator[Any]:
    """PySpark 4.0's stream writers get Rows; group them into Arrow batches."""
    import pyarrow as pa

    chunk: list[dict] = []
    for row in rows:
        d = row.asDict(recursive=True)
        if d.get("headers") is not None:
            d["headers"] = [dict(h) for h in d["headers"]]
        chunk.append(d)
        if len(chunk) >= size:
            yield pa.RecordBatch.from_pylist(chunk)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk)


class ShoalStreamWriter(_StreamWriterBase):  # type: ignore[misc,valid-type]
    """``df.writeStream.format("shoal")``: micro-batches, a replayed committed one written not again."""

    def __init__(self, opts: SinkOptions, schema: StructType, clock: Callable[[], float] = time.time) -> None:
        check_sink_schema(schema, opts.topic)
        self.opts = opts
        self.clock = clock

    def write(self, iterator: Iterator[Any]) -> ShoalCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx else None
        if batch_id is None or query_id is None:
            raise RuntimeError("the Shoal stream writer runs outside a streaming query's task (no batch id)")
        batch = int(batch_id)
        task = ctx.partitionId() if self.opts.exactly_once else None
        commits = CommitLog(self.opts.conf, commit_log_topic(self.opts.commit_log_prefix, query_id))
        last = commits.last_committed()
        if last is not None and batch <= last:
            log.warning("batch %d of query %s is already committed (commit log %s at %d); not writing it again",
                        batch, query_id, commits.topic, last)
            return ShoalCommitMessage(records=0, query_id=query_id, batch_id=batch, skipped=True, task=task)
        batches = iterator if _ARROW_STREAM else _rows_to_batches(iterator)
        if task is None:
            return ShoalCommitMessage(records=_produce(self.opts, batches), query_id=query_id, batch_id=batch)
        n = self._write_task(query_id, batch, task, batches)
        return ShoalCommitMessage(records=n or 0, query_id=query_id, batch_id=batch, skipped=n is None, task=task)

    def _write_task(self, query_id: str, batch: int, task: int, batches: Iterator[Any]) -> int | None:
        """One exactly-once write task (see the module doc); None when an earlier attempt committed it."""
        tasks = TaskCommitLog(self.opts.conf, task_log_topic(self.opts.commit_log_prefix, query_id))
        tasks.ensure_topic()

        def committed() -> int | None:
            rows = committed_rows(tasks.find(batch, task))
            if rows is not None:
                log.warning("task %d of batch %d of query %s: %d rows committed by an earlier attempt; "
                            "not writing them again", task, batch, query_id, rows)
            return rows

        def last_record(rows: int, first_row: int) -> tuple[str, bytes, bytes, int]:
            key, value = task_record(query_id, batch, task, rows, int(self.clock() * 1000), first_row)
            return tasks.topic, key, value, tasks.partition_for(task)

        txn_id = transactional_id(self.opts.transactional_id_prefix, query_id, task)
        return write_in_transaction(self.opts, txn_id, batches, committed=committed, last_record=last_record)

    def commit(self, messages: list, batchId: int) -> None:
        done = [m for m in messages if m is not None]
        if not done:
            return  # nothing ran, nothing written
        query_id = done[0].query_id
        if all(m.skipped and m.task is None for m in done):
            return  # a replay of a committed batch: already in the log
        # (exactly-once tasks also skip when their own task record is there: the batch may still
        # lack its batch-level record, if the query died before this commit)
        commits = CommitLog(self.opts.conf, commit_log_topic(self.opts.commit_log_prefix, query_id))
        commits.ensure_topic()
        last = commits.last_committed()
        if last is not None and batchId <= last:
            return
        commits.record(query_id, batchId, sum(m.records for m in done), int(self.clock() * 1000))

    def abort(self, messages: list, batchId: int) -> None:
        n = sum(m.records for m in messages if m is not None)
        if self.opts.exactly_once:
            log.warning("micro-batch %d failed; %d records of its finished tasks are committed and stay "
                        "(a re-run writes only the tasks that did not commit)", batchId, n)
            return
        log.warning("micro-batch %d failed; %d records of its finished tasks were already produced and stay "
                    "(the batch is written again when re-run)", batchId, n)
