"""The ``shoal`` Spark data source's use of confluent-kafka (librdkafka).

- :class:`OffsetReader` (driver): topics and partition counts (Metadata) and offsets (ListOffsets:
  earliest, latest, by timestamp) through one AdminClient.
- :func:`read_range` (executors): the records ``[start, end)`` of one topic-partition as Arrow
  record batches in the source's schema, read by ``assign()`` at an explicit offset. Never joins a
  consumer group nor commits.
- :class:`RecordProducer` (executors): rows of Arrow batches produced with the idempotent producer,
  in a transaction when given a transactional id (the sink's ``exactlyOnce`` mode).
- :class:`CommitLog`: the streaming sink's record of committed batch ids (see :mod:`shoal.spark.sink`).
- :class:`TaskCommitLog`: the exactly-once sink's record of the write tasks that committed.

Isolation: consumers read ``read_uncommitted`` unless ``isolation.level`` says otherwise (Java's and
Spark's default; librdkafka's own is read_committed). In ``read_committed`` the latest offset is
the partition's last stable offset (ListOffsets with isolation level 1) and a read ends on the
consumer's position, not on the offset of the last record it got: the offsets of transaction
markers and aborted records are never delivered.

Every blocking call is bounded: ``timeout`` seconds for driver requests, the source's
``kafkaConsumer.pollTimeoutMs`` for a read that makes no progress.
"""

from __future__ import annotations

import json
import logging
import time
from itertools import repeat
from typing import Any, Callable, Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from shoal.spark.offsets import TP, DataLoss, OffsetRange
from shoal.spark.options import OptionError

__all__ = [
    "DataLossError",
    "OffsetReader",
    "read_range",
    "data_loss_message",
    "RecordProducer",
    "CommitLog",
    "TaskCommitLog",
    "committed_rows",
    "consumer_conf",
    "is_read_committed",
]

log = logging.getLogger("shoal.spark")

DEFAULT_GROUP_ID = "shoal-spark"
_UNKNOWN = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC)
REQUEST_TIMEOUT = 30.0


class DataLossError(RuntimeError):
    """Records a query had to read are gone from the broker and ``failOnDataLoss`` is true."""


def data_loss_message(losses: Iterable[DataLoss], *, fail: bool) -> str:
    """What was lost, and what the user can do about it (Spark's wording, Shoal's names)."""
    what = "; ".join(loss.describe() for loss in losses)
    if fail:
        return (
            f"Data loss: records the query had to read are no longer on the Shoal broker: {what}. "
            "They were removed (by retention, DeleteRecords or topic deletion) before the query "
            "read them. If you don't want the query to fail in such cases, set the source option "
            "'failOnDataLoss' to 'false' (the missing records are then skipped with a warning)."
        )
    return (
        f"Data loss: skipping records that are no longer on the Shoal broker: {what}. "
        "They were removed (by retention, DeleteRecords or topic deletion) before the query read "
        "them. Set the source option 'failOnDataLoss' to 'true' to fail the query instead."
    )


def report_data_loss(losses: list[DataLoss], *, fail: bool) -> None:
    if not losses:
        return
    if fail:
        raise DataLossError(data_loss_message(losses, fail=True))
    log.warning(data_loss_message(losses, fail=False))


def is_read_committed(conf: Mapping[str, Any]) -> bool:
    return str(conf.get("isolation.level", "read_uncommitted")).strip().lower() == "read_committed"


# Consumer-only settings an AdminClient would warn about.
_CONSUMER_ONLY = ("group.id", "isolation.level")


def admin_conf(conf: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in conf.items() if k not in _CONSUMER_ONLY}


def consumer_conf(conf: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "group.id": DEFAULT_GROUP_ID,
        "isolation.level": "read_uncommitted",  # Java's and Spark's default, not librdkafka's
        # librdkafka stops fetching for fetch.queue.backoff.ms (default 1 s) whenever its queue is
        # over queued.min.messages: a pure client-side stall for a reader as fast as ours.
        "fetch.queue.backoff.ms": 1,
    }
    out.update(conf)
    out.update(
        {
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }
    )
    out.update(extra)
    return out


# -- driver: metadata and offsets ---------------------------------------------------------------


def unknown_topic(topic: str) -> KafkaException:
    """What reading a topic the broker does not show raises (the same for a missing topic and for
    another tenant's, whose name the caller's view does not have)."""
    return KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                     f"assigned topic {topic} does not exist (or is not authorized)"))


class OffsetReader:
    """Partition counts and offsets for the driver, through one lazily made AdminClient.

    Not picklable state: the client is dropped when pickled and made again on first use.
    With ``isolation.level=read_committed`` in ``conf``, :meth:`latest` is the last stable offset.
    """

    def __init__(self, conf: Mapping[str, str], timeout: float = REQUEST_TIMEOUT) -> None:
        self.conf = dict(conf)
        self.timeout = timeout
        self._admin: AdminClient | None = None

    def __getstate__(self) -> dict:
        return {"conf": self.conf, "timeout": self.timeout, "_admin": None}

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(admin_conf(self.conf))
        return self._admin

    def partition_counts(self) -> dict[str, int]:
        """``{topic: number of partitions}`` of every topic the broker reports."""
        md = self.admin.list_topics(timeout=self.timeout)
        out = {}
        for name, t in md.topics.items():
            if t.error is not None and t.error.code() != KafkaError.NO_ERROR:
                continue
            out[name] = len(t.partitions)
        return out

    def _list(self, specs: Mapping[TP, OffsetSpec], committed: bool = False) -> dict[TP, int]:
        """One ListOffsets round; partitions the broker does not know are left out of the result."""
        if not specs:
            return {}
        request = {TopicPartition(t, p): spec for (t, p), spec in specs.items()}
        level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        futures = self.admin.list_offsets(request, request_timeout=self.timeout, isolation_level=level)
        out: dict[TP, int] = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = fut.result(timeout=self.timeout + 5).offset
            except KafkaException as exc:
                if exc.args[0].code() in _UNKNOWN:
                    continue  # left out: the partition does not exist (any more)
                raise KafkaException(
                    KafkaError(exc.args[0].code(), f"ListOffsets for {tp.topic}-{tp.partition}: {exc.args[0].str()}")
                ) from exc
        return out

    def earliest(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self._list({tp: OffsetSpec.earliest() for tp in tps})

    def latest(self, tps: Iterable[TP]) -> dict[TP, int]:
        """The high watermarks; the last stable offsets in read_committed."""
        return self._list({tp: OffsetSpec.latest() for tp in tps}, committed=is_read_committed(self.conf))

    def high_watermarks(self, tps: Iterable[TP]) -> dict[TP, int]:
        """The high watermarks, whatever the isolation level."""
        return self._list({tp: OffsetSpec.latest() for tp in tps})

    def for_timestamps(self, stamps: Mapping[TP, int]) -> dict[TP, int]:
        """Offset of the first record at or after each timestamp; -1 where there is none."""
        return self._list({tp: OffsetSpec.for_timestamp(ts) for tp, ts in stamps.items()})

    def close(self) -> None:
        self._admin = None


# -- executors: reading ---------------------------------------------------------------------------


def _messages_to_batch(
    msgs: list, offsets: list[int], topic: str, partition: int, schema: pa.Schema, include_headers: bool
) -> pa.RecordBatch:
    n = len(msgs)
    stamps = [m.timestamp() for m in msgs]
    ts = pa.array([s[1] for s in stamps], pa.int64())
    kinds = pa.array([s[0] for s in stamps], pa.int32())
    columns = [
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        # librdkafka: ms since the epoch; Spark: microseconds.
        pc.multiply(ts, 1000).cast(schema.field("timestamp").type),
        # librdkafka: 0 none, 1 create time, 2 log append time; Spark (Java's ids): -1, 0, 1.
        pc.subtract(kinds, 1),
    ]
    if include_headers:
        headers = [m.headers() for m in msgs]
        columns.append(
            pa.array(
                [None if not h else [{"key": k, "value": v} for k, v in h] for h in headers],
                schema.field("headers").type,
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_range(
    conf: Mapping[str, str],
    r: OffsetRange,
    schema: pa.Schema,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
    batch_records: int = 2048,
    consumer_factory: Callable[[dict], Any] = Consumer,
) -> Iterator[pa.RecordBatch]:
    """The records ``[r.start, r.end)`` of one partition, in batches of up to ``batch_records``.

    Batches are small (2048 records: 2 MiB of 1 KiB values) so that the values, copied from
    librdkafka's messages into Arrow and then by Spark to the JVM, are still in the CPU's cache.

    Records removed before they are read (the fetch is out of range, or the partition ends early)
    fail the read with :class:`DataLossError` when ``fail_on_data_loss``, else are skipped with a
    warning. Gaps inside the range (compaction, transaction markers, aborted records skipped in
    read_committed) are not data loss. The read ends when the consumer's position reaches
    ``r.end``: a record at or after it, or the end-of-partition event at or after it (the range's
    last offsets may be markers or aborted records, which are never delivered).
    """
    if r.size <= 0:
        return
    timeout = poll_timeout_ms / 1000.0
    consumer = consumer_factory(consumer_conf(conf))
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        pos = r.start
        msgs_out: list = []
        offs_out: list[int] = []
        deadline = time.monotonic() + timeout
        while pos < r.end:
            want = min(batch_records - len(msgs_out), r.end - pos)
            msgs = consumer.consume(num_messages=max(want, 1), timeout=0.5)
            if not msgs:
                if time.monotonic() > deadline:
                    waiting = (" (read_committed: a transaction still open below the end of the range "
                               "holds the last stable offset back)") if is_read_committed(conf) else ""
                    raise TimeoutError(
                        f"no record of {r.topic}-{r.partition} at offset {pos} in {timeout:g}s "
                        f"(reading [{r.start}, {r.end}); kafkaConsumer.pollTimeoutMs){waiting}"
                    )
                continue
            deadline = time.monotonic() + timeout
            offs = [m.offset() for m in msgs]
            clean = not [m for m in msgs if m.error() is not None]
            if clean and offs[0] >= pos and offs[-1] < r.end:
                # The usual case: records only, all inside the range.
                msgs_out += msgs
                offs_out += offs
                pos = offs[-1] + 1
            else:
                for m, off in zip(msgs, offs):
                    err = m.error()
                    if err is None:
                        if off < pos:
                            continue
                        if off >= r.end:
                            pos = r.end
                            break
                        msgs_out.append(m)
                        offs_out.append(off)
                        pos = off + 1
                        continue
                    pos, reassign = _handle_read_error(consumer, r, pos, err, m, fail_on_data_loss, timeout,
                                                       lambda: _watermarks(consumer, conf, r, timeout, consumer_factory))
                    if reassign:
                        if pos < r.end:
                            consumer.assign([TopicPartition(r.topic, r.partition, pos)])
                        break
            if len(msgs_out) >= batch_records or (msgs_out and pos >= r.end):
                yield _messages_to_batch(msgs_out, offs_out, r.topic, r.partition, schema, include_headers)
                msgs_out, offs_out = [], []
        if msgs_out:
            yield _messages_to_batch(msgs_out, offs_out, r.topic, r.partition, schema, include_headers)
    finally:
        consumer.close()


def _watermarks(consumer, conf: Mapping[str, str], r: OffsetRange, timeout: float,
                factory: Callable[[dict], Any]) -> tuple[int, int]:
    """(log start offset, high watermark) of ``r``'s partition.

    librdkafka asks ListOffsets with the consumer's isolation level: a read_committed consumer would
    get the last stable offset, which an open transaction holds back without any record being lost.
    """
    tp = TopicPartition(r.topic, r.partition)
    if not is_read_committed(conf):
        return consumer.get_watermark_offsets(tp, timeout=timeout)
    other = factory(consumer_conf(conf, **{"isolation.level": "read_uncommitted"}))
    try:
        return other.get_watermark_offsets(tp, timeout=timeout)
    finally:
        other.close()


def _handle_read_error(
    consumer, r: OffsetRange, pos: int, err: KafkaError, msg, fail: bool, timeout: float,
    watermarks: Callable[[], tuple[int, int]] | None = None,
) -> tuple[int, bool]:
    """(position to go on from, whether to assign it afresh) after an error event at ``pos``.

    Raises what cannot be skipped: data loss when ``fail``, and errors that are not retriable.
    """
    code = err.code()
    if watermarks is None:
        def watermarks() -> tuple[int, int]:
            return consumer.get_watermark_offsets(TopicPartition(r.topic, r.partition), timeout=timeout)
    if code == KafkaError._PARTITION_EOF:
        # The event's offset is the consumer's fetch position: past markers and aborted records.
        at = msg.offset()
        if at >= r.end or pos >= r.end:
            return r.end, False
        # The partition ends before the planned end: check it really is shorter now.
        low, high = watermarks()
        if high >= r.end:
            # More is coming (a fetch raced the end, or in read_committed an open transaction holds
            # the last stable offset back); keep polling from the consumer's position.
            return max(pos, at), False
        losses = []
        if pos < low:
            losses.append(DataLoss(r.topic, r.partition, pos, min(low, r.end),
                                   f"deleted before they were read (log start offset is now {low})"))
        if max(high, pos, low) < r.end:
            losses.append(DataLoss(r.topic, r.partition, max(high, pos, low), r.end,
                                   f"no longer in the log (high watermark is now {high})"))
        report_data_loss(losses, fail=fail)
        return r.end, True
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        low, high = watermarks()
        if pos < low:
            report_data_loss(
                [DataLoss(r.topic, r.partition, pos, min(low, r.end),
                          f"deleted before they were read (log start offset is now {low})")],
                fail=fail,
            )
            return min(low, r.end), True
        if pos >= high and high < r.end:
            report_data_loss(
                [DataLoss(r.topic, r.partition, pos, r.end, f"no longer in the log (high watermark is now {high})")],
                fail=fail,
            )
            return r.end, True
        return pos, True  # in range again (a race with the fetch): fetch it afresh
    if err.retriable() or code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
        log.warning("reading %s-%d at %d: %s (retrying)", r.topic, r.partition, pos, err.str())
        return pos, False
    raise KafkaException(err)


# -- executors: writing ---------------------------------------------------------------------------


def producer_conf(conf: Mapping[str, str], errors: list) -> dict[str, Any]:
    out: dict[str, Any] = {
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 500_000,
        # Java's partitioner, so keyed rows land where Spark's Kafka sink would put them.
        "partitioner": "murmur2_random",
    }
    out.update(conf)
    out.update(
        {
            "enable.idempotence": True,
            "acks": "all",
            "delivery.report.only.error": True,
            "on_delivery": lambda err, msg: errors.append(err) if err is not None else None,
        }
    )
    return out


def _column(batch: pa.RecordBatch, name: str) -> list | None:
    i = batch.schema.get_field_index(name)
    return None if i < 0 else batch.column(i).to_pylist()


class RecordProducer:
    """Produces the rows of Arrow batches (columns key, value, topic, partition, headers).

    With a ``transactional_id``, :meth:`init_transactions`, :meth:`begin`, :meth:`commit` and
    :meth:`abort` drive librdkafka's transactional producer.
    """

    def __init__(self, conf: Mapping[str, str], topic: str | None, *, producer_factory: Callable = Producer,
                 transactional_id: str | None = None, timeout: float = REQUEST_TIMEOUT * 2) -> None:
        self.errors: list[KafkaError] = []
        self.topic = topic
        self.count = 0
        self.timeout = timeout
        pconf = producer_conf(conf, self.errors)
        if transactional_id is not None:
            pconf["transactional.id"] = transactional_id
        self._producer = producer_factory(pconf)

    # -- transactions (librdkafka's error classes: retriable, abortable, fatal) --

    def init_transactions(self) -> None:
        """Fences every earlier producer with the same transactional id and completes its open
        transaction (the coordinator aborts it) before returning."""
        self._txn_call(self._producer.init_transactions, "init_transactions")

    def begin(self) -> None:
        self._producer.begin_transaction()

    def produce_one(self, topic: str, value: bytes, key: bytes | None, partition: int) -> None:
        """One record that is not a row (the task's commit record): not counted."""
        try:
            self._producer.produce(topic, value, key, partition)
        except BufferError:
            self._retry(lambda: self._producer.produce(topic, value, key, partition))

    def commit(self) -> None:
        """Flushes, then commits; an abortable failure aborts the transaction and raises."""
        try:
            self.flush(self.timeout)
            self._txn_call(self._producer.commit_transaction, "commit_transaction")
        except KafkaException as exc:
            err = exc.args[0]
            if getattr(err, "txn_requires_abort", lambda: False)():
                self.abort()
            raise
        except TimeoutError:
            self.abort()
            raise

    def abort(self) -> None:
        """Best effort: the transaction is aborted by the next instance's init_transactions or by
        the coordinator's transaction timeout when this fails."""
        try:
            self._txn_call(self._producer.abort_transaction, "abort_transaction")
        except KafkaException as exc:
            log.warning("aborting the transaction failed: %s", exc)

    def _txn_call(self, call: Callable[[float], None], what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                call(max(1.0, deadline - time.monotonic()))
                return
            except KafkaException as exc:
                err = exc.args[0]
                if err.retriable() and time.monotonic() < deadline:
                    log.info("%s: %s (retrying)", what, err.str())
                    time.sleep(0.2)
                    continue
                raise

    def send_batch(self, batch: pa.RecordBatch, slice_rows: int = 2048) -> None:
        """Produce every row; in slices, so each slice's values are produced while in the CPU cache."""
        for start in range(0, batch.num_rows, slice_rows):
            self._send_slice(batch.slice(start, slice_rows))
        self._producer.poll(0)
        self._raise_errors()

    def _send_slice(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        values = _column(batch, "value")
        keys = _column(batch, "key") or repeat(None, n)
        if self.topic:
            topics: Iterable = repeat(self.topic, n)
        else:
            col = batch.column(batch.schema.get_field_index("topic"))
            if col.null_count:
                raise ValueError("null topic: a row's 'topic' column is null and no 'topic' option is set")
            topics = col.to_pylist()
        i = batch.schema.get_field_index("partition")
        parts: Iterable = repeat(-1, n) if i < 0 else batch.column(i).fill_null(-1).to_pylist()
        i = batch.schema.get_field_index("headers")
        if i >= 0 and batch.column(i).null_count < n:
            headers = [None if not h else [(x["key"], x["value"]) for x in h] for h in batch.column(i).to_pylist()]
            self._send_with_headers(zip(topics, values, keys, parts, headers))
        else:
            self._send(zip(topics, values, keys, parts))
        self.count += n

    def _send(self, rows: Iterator[tuple]) -> None:
        produce = self._producer.produce
        for row in rows:
            try:
                produce(*row)
            except BufferError:  # librdkafka's queue is full: serve it, then go on
                self._retry(lambda: produce(*row))

    def _send_with_headers(self, rows: Iterator[tuple]) -> None:
        produce = self._producer.produce
        for topic, value, key, part, headers in rows:
            try:
                produce(topic, value, key, part, headers=headers)
            except BufferError:
                self._retry(lambda: produce(topic, value, key, part, headers=headers))

    def _retry(self, send: Callable[[], None]) -> None:
        while True:
            self._producer.poll(0.05)
            self._raise_errors()
            try:
                send()
                return
            except BufferError:
                continue

    def flush(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while self._producer.flush(1.0) > 0:
            self._raise_errors()
            if time.monotonic() > deadline:
                raise TimeoutError(f"records still undelivered {timeout:g}s after the last was produced")
        self._raise_errors()

    def _raise_errors(self) -> None:
        if self.errors:
            first = self.errors[0]
            raise KafkaException(
                KafkaError(first.code(), f"{len(self.errors)} record(s) not delivered; first: {first.str()}")
            )


def invalid_log_topic(topic: str) -> OptionError:
    return OptionError(
        f"the Shoal sink's commit-log topic name {topic!r} is not valid on this cluster (a tenant's "
        "topic names cannot start with '__'): set the sink option 'sinkCommitLogTopicPrefix', "
        "e.g. 'spark-sink-'"
    )


def check_log_topic_name(client, topic: str, timeout: float) -> None:
    """Fail at once, with the option to set, when the broker calls ``topic`` invalid (librdkafka
    would retry a ListOffsets of it until its timeout)."""
    t = client.list_topics(topic, timeout=timeout).topics.get(topic)
    err = t.error if t is not None else None
    if err is not None and err.code() == KafkaError.TOPIC_EXCEPTION:
        raise invalid_log_topic(topic)


def ensure_log_topic(conf: Mapping[str, str], topic: str, partitions: int, replication_factor: int,
                     timeout: float) -> None:
    """Create ``topic`` (records kept forever) unless it exists."""
    admin = AdminClient(admin_conf(conf))
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor,
                  config={"retention.ms": "-1", "retention.bytes": "-1"})],
        request_timeout=timeout,
    )
    try:
        futures[topic].result(timeout=timeout + 5)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.TOPIC_EXCEPTION:
            raise invalid_log_topic(topic) from None
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


# -- the streaming sink's commit log --------------------------------------------------------------


class CommitLog:
    """Committed batch ids of one streaming query, as records of a one-partition Shoal topic.

    Each record's value is ``{"queryId", "batchId", "records", "committedAtMs"}`` (JSON), key the
    query id. Batches commit in order, so the last record holds the highest committed batch id.
    """

    def __init__(self, conf: Mapping[str, str], topic: str, timeout: float = REQUEST_TIMEOUT) -> None:
        self.conf = dict(conf)
        self.topic = topic
        self.timeout = timeout

    def last_committed(self) -> int | None:
        """The highest committed batch id; None when the topic is missing or empty."""
        consumer = Consumer(consumer_conf(self.conf))
        try:
            tp = TopicPartition(self.topic, 0)
            check_log_topic_name(consumer, self.topic, self.timeout)
            try:
                low, high = consumer.get_watermark_offsets(tp, timeout=self.timeout)
            except KafkaException as exc:
                if exc.args[0].code() in _UNKNOWN:
                    return None
                raise
            if high <= low:
                return None
            consumer.assign([TopicPartition(self.topic, 0, high - 1)])
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                for m in consumer.consume(num_messages=1, timeout=0.5):
                    if m.error() is None:
                        return int(json.loads(m.value())["batchId"])
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(m.error())
            raise TimeoutError(f"could not read the last record of sink commit log {self.topic!r}")
        finally:
            consumer.close()

    def ensure_topic(self) -> None:
        ensure_log_topic(self.conf, self.topic, 1, 1, self.timeout)

    def record(self, query_id: str, batch_id: int, records: int, now_ms: int) -> None:
        errors: list = []
        producer = Producer(producer_conf(self.conf, errors) | {"linger.ms": 0})
        value = json.dumps({"queryId": query_id, "batchId": batch_id, "records": records, "committedAtMs": now_ms})
        producer.produce(self.topic, value.encode(), query_id.encode(), 0)
        if producer.flush(self.timeout) > 0 or errors:
            reason = errors[0].str() if errors else "timed out"
            raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT if not errors else errors[0].code(),
                                            f"recording batch {batch_id} in {self.topic!r}: {reason}"))


# -- the exactly-once sink's per-task commit records ----------------------------------------------

TASK_LOG_PARTITIONS = 16
_TASK_SCAN_WINDOW = 64

# read_range's Arrow schema for the task log (the source schema without headers).
_TASK_LOG_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
])


def task_record(query_id: str, batch_id: int, task: int, records: int, now_ms: int,
                first_row: int = 0) -> tuple[bytes, bytes]:
    """(key, value) of a task's commit record: rows ``[first_row, first_row + records)`` of the
    task's input are committed."""
    value = {"queryId": query_id, "batchId": batch_id, "task": task, "firstRow": first_row, "records": records,
             "committedAtMs": now_ms}
    return f"{batch_id}/{task}".encode(), json.dumps(value).encode()


def find_task_records(values: Iterable[bytes], batch_id: int, task: int) -> tuple[list[dict], bool]:
    """(the commit records of ``task`` in ``batch_id`` among ``values``, whether the scan may
    stop: a record of an earlier batch was seen).

    Records of one task-log partition are in batch order (batch B+1's tasks start after the driver
    committed B; a replay only ever re-runs the last batch), so once a record of an earlier batch
    is seen, every record of ``batch_id`` is at a later offset.
    """
    found, earlier = [], False
    for raw in values:
        try:
            doc = json.loads(raw)
            b, t = int(doc["batchId"]), int(doc["task"])
            int(doc["records"])
        except (ValueError, TypeError, KeyError):
            continue  # not ours; the log is only ever written by the sink
        if b < batch_id:
            earlier = True
        elif b == batch_id and t == task:
            found.append(doc)
    return found, earlier


def committed_rows(records: Iterable[dict]) -> int | None:
    """How many rows of a task's input its commit records cover (None: no record)."""
    ends = [int(d.get("firstRow", 0)) + int(d["records"]) for d in records]
    return max(ends) if ends else None


class TaskCommitLog:
    """Which write tasks of an exactly-once streaming query committed, per micro-batch.

    Topic ``<commit log topic>-tasks`` with :data:`TASK_LOG_PARTITIONS` partitions; task ``p``'s
    records go to partition ``p % TASK_LOG_PARTITIONS``, each written in the task's own
    transaction together with its rows (key ``"<batch>/<task>"``, value JSON ``{"queryId",
    "batchId", "task", "records", "committedAtMs"}``). :meth:`find` reads it in read_committed up
    to the high watermark: an open transaction of another task on the same partition makes it
    wait (up to ``poll_timeout_ms``), which the spread over partitions makes rare.
    """

    def __init__(self, conf: Mapping[str, str], topic: str, *, timeout: float = REQUEST_TIMEOUT,
                 poll_timeout_ms: int = 120_000, consumer_factory: Callable[[dict], Any] = Consumer) -> None:
        self.conf = {k: v for k, v in conf.items() if k != "isolation.level"}
        self.topic = topic
        self.timeout = timeout
        self.poll_timeout_ms = poll_timeout_ms
        self._consumer_factory = consumer_factory

    @staticmethod
    def partition_for(task: int) -> int:
        return task % TASK_LOG_PARTITIONS

    def ensure_topic(self) -> None:
        # The broker's default replication factor: in a cluster the record of a committed task must
        # survive a broker as the task's rows do.
        ensure_log_topic(self.conf, self.topic, TASK_LOG_PARTITIONS, -1, self.timeout)

    def _bounds(self, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark), waiting out a topic just created."""
        consumer = self._consumer_factory(consumer_conf(self.conf))
        try:
            deadline = time.monotonic() + self.timeout
            while True:
                try:
                    return consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=self.timeout)
                except KafkaException as exc:
                    if exc.args[0].code() not in _UNKNOWN or time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        finally:
            consumer.close()

    def find(self, batch_id: int, task: int) -> list[dict]:
        """The commit records of ``task`` in ``batch_id`` (oldest first): read backwards from the
        high watermark in growing windows until a record of an earlier batch (or the log start)."""
        partition = self.partition_for(task)
        low, end = self._bounds(partition)
        window = _TASK_SCAN_WINDOW
        conf = dict(self.conf, **{"isolation.level": "read_committed"})
        found: list[dict] = []
        while end > low:
            start = max(low, end - window)
            values: list[bytes] = []
            for batch in read_range(conf, OffsetRange(self.topic, partition, start, end), _TASK_LOG_SCHEMA,
                                    include_headers=False, fail_on_data_loss=True,
                                    poll_timeout_ms=self.poll_timeout_ms, consumer_factory=self._consumer_factory):
                values += batch.column(1).to_pylist()
            here, earlier = find_task_records(values, batch_id, task)
            found = here + found
            if earlier:
                break
            end, window = start, window * 2
        return found
