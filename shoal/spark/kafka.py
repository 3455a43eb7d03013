"""The ``shoal`` Spark data source's use of confluent-kafka (librdkafka).

- :class:`OffsetReader` (driver): topics and partition counts (Metadata) and offsets (ListOffsets:
  earliest, latest, by timestamp) through one AdminClient.
- :func:`read_range` (executors): the records ``[start, end)`` of one topic-partition as Arrow
  record batches in the source's schema, read by ``assign()`` at an explicit offset. Never joins a
  consumer group nor commits.
- :class:`RecordProducer` (executors): rows of Arrow batches produced with the idempotent producer.
- :class:`CommitLog`: the streaming sink's record of committed batch ids (see :mod:`shoal.spark.sink`).

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
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from shoal.spark.offsets import TP, DataLoss, OffsetRange

__all__ = [
    "DataLossError",
    "OffsetReader",
    "read_range",
    "data_loss_message",
    "RecordProducer",
    "CommitLog",
    "consumer_conf",
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


def consumer_conf(conf: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "group.id": DEFAULT_GROUP_ID,
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


class OffsetReader:
    """Partition counts and offsets for the driver, through one lazily made AdminClient.

    Not picklable state: the client is dropped when pickled and made again on first use.
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
            conf = {k: v for k, v in self.conf.items() if k != "group.id"}
            self._admin = AdminClient(conf)
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

    def _list(self, specs: Mapping[TP, OffsetSpec]) -> dict[TP, int]:
        """One ListOffsets round; partitions the broker does not know are left out of the result."""
        if not specs:
            return {}
        request = {TopicPartition(t, p): spec for (t, p), spec in specs.items()}
        futures = self.admin.list_offsets(request, request_timeout=self.timeout)
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
    warning. Gaps inside the range (compaction, transaction markers) are not data loss.
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
                    raise TimeoutError(
                        f"no record of {r.topic}-{r.partition} at offset {pos} in {timeout:g}s "
                        f"(reading [{r.start}, {r.end}); kafkaConsumer.pollTimeoutMs)"
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
                    pos, reassign = _handle_read_error(consumer, r, pos, err, m, fail_on_data_loss, timeout)
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


def _handle_read_error(
    consumer, r: OffsetRange, pos: int, err: KafkaError, msg, fail: bool, timeout: float
) -> tuple[int, bool]:
    """(position to go on from, whether to assign it afresh) after an error event at ``pos``.

    Raises what cannot be skipped: data loss when ``fail``, and errors that are not retriable.
    """
    code = err.code()
    if code == KafkaError._PARTITION_EOF:
        if msg.offset() >= r.end or pos >= r.end:
            return pos, False
        # The partition ends before the planned end: check it really is shorter now.
        low, high = consumer.get_watermark_offsets(TopicPartition(r.topic, r.partition), timeout=timeout)
        if high >= r.end:
            return pos, False  # more is coming (a fetch raced the end); keep polling
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
        low, high = consumer.get_watermark_offsets(TopicPartition(r.topic, r.partition), timeout=timeout)
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
    """Produces the rows of Arrow batches (columns key, value, topic, partition, headers)."""

    def __init__(self, conf: Mapping[str, str], topic: str | None, *, producer_factory: Callable = Producer) -> None:
        self.errors: list[KafkaError] = []
        self.topic = topic
        self.count = 0
        self._producer = producer_factory(producer_conf(conf, self.errors))

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
        admin = AdminClient({k: v for k, v in self.conf.items() if k != "group.id"})
        futures = admin.create_topics(
            [NewTopic(self.topic, num_partitions=1, replication_factor=1,
                      config={"retention.ms": "-1", "retention.bytes": "-1"})],
            request_timeout=self.timeout,
        )
        try:
            futures[self.topic].result(timeout=self.timeout + 5)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    def record(self, query_id: str, batch_id: int, records: int, now_ms: int) -> None:
        errors: list = []
        producer = Producer(producer_conf(self.conf, errors) | {"linger.ms": 0})
        value = json.dumps({"queryId": query_id, "batchId": batch_id, "records": records, "committedAtMs": now_ms})
        producer.produce(self.topic, value.encode(), query_id.encode(), 0)
        if producer.flush(self.timeout) > 0 or errors:
            reason = errors[0].str() if errors else "timed out"
            raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT if not errors else errors[0].code(),
                                            f"recording batch {batch_id} in {self.topic!r}: {reason}"))
