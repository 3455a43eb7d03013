"""The pure parts of the exactly-once sink and the read_committed source, without a broker:
options, the end of a read whose last offsets are transaction markers (a scripted consumer), the
task log's scan rule, and the order of a task's transactional calls (a recording producer)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException

from shoal.spark.kafka import _TASK_LOG_SCHEMA, committed_rows, consumer_conf, find_task_records, read_range, task_record
from shoal.spark.offsets import OffsetRange
from shoal.spark.options import OptionError, parse_sink_options, parse_source_options
from shoal.spark.sink import task_log_topic, transactional_id, write_in_transaction

BS = {"kafka.bootstrap.servers": "h:9092"}


# -- options --------------------------------------------------------------------------------------


def test_sink_exactly_once_options():
    s = parse_sink_options(BS)
    assert not s.exactly_once and s.transactional_id_prefix == "shoal-spark-"
    s = parse_sink_options({**BS, "exactlyOnce": "TRUE", "transactionalIdPrefix": " etl-"})
    assert s.exactly_once and s.transactional_id_prefix == "etl-"
    with pytest.raises(OptionError, match="'exactlyOnce' must be 'true' or 'false'"):
        parse_sink_options({**BS, "exactlyOnce": "yes"})
    with pytest.raises(OptionError, match="only used with 'exactlyOnce'"):
        parse_sink_options({**BS, "transactionalIdPrefix": "etl-"})
    with pytest.raises(OptionError, match="without spaces"):
        parse_sink_options({**BS, "exactlyOnce": "true", "transactionalIdPrefix": "a b"})
    with pytest.raises(OptionError, match="'transactional.id' is not supported.*'exactlyOnce'"):
        parse_sink_options({**BS, "kafka.transactional.id": "x"})
    with pytest.raises(OptionError, match="idempotent producer"):
        parse_sink_options({**BS, "exactlyOnce": "true", "kafka.enable.idempotence": "false"})


def test_ids_and_topics():
    assert transactional_id("shoal-spark-", "q-1", 7) == "shoal-spark-q-1-7"
    assert task_log_topic(None, "q-1") == "__shoal-spark-sink-q-1-tasks"
    assert task_log_topic("_c-", "q-1") == "_c-q-1-tasks"


def test_source_isolation_level():
    opts = parse_source_options({**BS, "subscribe": "t"}, streaming=False)
    assert not opts.read_committed and "isolation.level" not in opts.conf
    # Spark's (Java's) default, not librdkafka's read_committed
    assert consumer_conf(opts.conf)["isolation.level"] == "read_uncommitted"
    opts = parse_source_options({**BS, "subscribe": "t", "kafka.isolation.level": " READ_COMMITTED"}, streaming=True)
    assert opts.read_committed and consumer_conf(opts.conf)["isolation.level"] == "read_committed"
    with pytest.raises(OptionError, match="'kafka.isolation.level' must be"):
        parse_source_options({**BS, "subscribe": "t", "kafka.isolation.level": "committed"}, streaming=False)


# -- read_range: the end of a range is a position ---------------------------------------------------


class Msg:
    def __init__(self, offset, value=b"v", err=None):
        self._offset, self._value, self._err = offset, value, err

    def offset(self):
        return self._offset

    def error(self):
        return self._err

    def key(self):
        return None

    def value(self):
        return self._value

    def timestamp(self):
        return (1, 1_700_000_000_000)

    def headers(self):
        return None


def eof(at):
    return Msg(at, None, KafkaError(KafkaError._PARTITION_EOF))


class ScriptedConsumer:
    """Hands out one scripted poll result per consume(); then nothing."""

    def __init__(self, polls, watermarks=(0, 0)):
        self.polls = list(polls)
        self.watermarks = watermarks
        self.confs = []
        self.closed = 0

    def factory(self, conf):
        self.confs.append(conf)
        return self

    def assign(self, tps):
        pass

    def consume(self, num_messages, timeout):
        return self.polls.pop(0) if self.polls else []

    def get_watermark_offsets(self, tp, timeout):
        return self.watermarks

    def close(self):
        self.closed += 1


def read(consumer, r, conf=None, poll_timeout_ms=1500):
    batches = read_range(conf or {"bootstrap.servers": "h", "isolation.level": "read_committed"}, r, _TASK_LOG_SCHEMA,
                         include_headers=False, fail_on_data_loss=True, poll_timeout_ms=poll_timeout_ms,
                         consumer_factory=consumer.factory)
    return [row["offset"] for b in batches for row in b.to_pylist()]


def test_range_ending_in_markers_ends_on_the_eof_position():
    # Records 10..12 committed, 13 their commit marker, 14..15 aborted, 16 the abort marker: the
    # consumer gets 10..12, then the end-of-partition event at 17 (its fetch position).
    c = ScriptedConsumer([[Msg(10), Msg(11), Msg(12)], [eof(17)]])
    assert read(c, OffsetRange("t", 0, 10, 17)) == [10, 11, 12]


def test_range_ending_in_markers_ends_on_the_next_record():
    # The range [10, 14) ends with a marker at 13; the next record delivered is 15.
    c = ScriptedConsumer([[Msg(10), Msg(11), Msg(12), Msg(15)]])
    assert read(c, OffsetRange("t", 0, 10, 14)) == [10, 11, 12]


def test_range_of_only_aborted_records_is_empty():
    c = ScriptedConsumer([[eof(8)]])
    assert read(c, OffsetRange("t", 0, 3, 8)) == []


def test_eof_below_the_end_waits_for_an_open_transaction():
    # The LSO (5) is below the end (8) planned from the high watermark (read_uncommitted: 8):
    # not data loss; the records come when the transaction commits.
    c = ScriptedConsumer([[Msg(3), Msg(4), eof(5)], [], [Msg(5), Msg(6), eof(8)]], watermarks=(0, 8))
    assert read(c, OffsetRange("t", 0, 3, 8)) == [3, 4, 5, 6]
    # The watermark was asked by a read_uncommitted consumer (a read_committed one gets the LSO).
    assert [conf["isolation.level"] for conf in c.confs] == ["read_committed", "read_uncommitted"]


def test_open_transaction_that_never_ends_times_out_with_the_reason():
    c = ScriptedConsumer([[Msg(3), eof(4)]], watermarks=(0, 8))
    with pytest.raises(TimeoutError, match="read_committed: a transaction still open"):
        read(c, OffsetRange("t", 0, 3, 8), poll_timeout_ms=600)


# -- the task log -----------------------------------------------------------------------------------


def test_find_task_records():
    recs = [task_record("q", b, t, 10 * b + t, 1)[1] for b, t in [(3, 1), (3, 17), (4, 1), (4, 17)]]
    recs.append(task_record("q", 4, 17, 5, 2, first_row=57)[1])  # a second attempt wrote the rest
    assert task_record("q", 4, 1, 41, 5)[0] == b"4/1"
    found, earlier = find_task_records(recs, 4, 17)
    assert [(d["firstRow"], d["records"], d["task"]) for d in found] == [(0, 57, 17), (57, 5, 17)] and earlier
    assert committed_rows(found) == 62
    assert committed_rows([]) is None and committed_rows([{"records": 0}]) == 0
    assert find_task_records(recs, 5, 1) == ([], True)
    assert find_task_records(recs[2:], 4, 33) == ([], False)  # may be further back: keep scanning
    assert find_task_records([b"junk", json.dumps({"x": 1}).encode()], 4, 1) == ([], False)


# -- one task's transaction -------------------------------------------------------------------------


class RecordingProducer:
    def __init__(self, calls, fail_on=None):
        self.calls = calls
        self.fail_on = fail_on

    def __call__(self, conf):
        self.calls.append(("new", conf["transactional.id"], conf["enable.idempotence"]))
        return self

    def _do(self, name, *args):
        self.calls.append((name, *args))
        if name == self.fail_on:
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced"))

    def init_transactions(self, timeout):
        self._do("init")

    def begin_transaction(self):
        self._do("begin")

    def produce(self, topic, value, key=None, partition=-1, **kw):
        self._do("produce", topic, value)

    def poll(self, timeout):
        return 0

    def flush(self, timeout):
        self._do("flush")
        return 0

    def commit_transaction(self, timeout):
        self._do("commit")

    def abort_transaction(self, timeout):
        self._do("abort")


def batches(n):
    yield pa.RecordBatch.from_pydict({"value": [b"r%d" % i for i in range(n)]})


def test_task_transaction_order():
    calls = []
    opts = parse_sink_options({**BS, "topic": "out", "exactlyOnce": "true"})
    checked = []

    def done():
        checked.append(len(calls))
        return None

    n = write_in_transaction(opts, "p-q-1", batches(2), committed=done,
                             last_record=lambda rows, first: ("log", b"0/1", b"%d+%d" % (first, rows), 1),
                             producer_factory=RecordingProducer(calls))
    assert n == 2
    assert calls == [("new", "p-q-1", True), ("init",), ("begin",), ("produce", "out", b"r0"), ("produce", "out", b"r1"),
                     ("produce", "log", b"0+2"), ("flush",), ("commit",)]
    assert checked == [2]  # asked after init_transactions (which fenced the earlier attempt), before begin


def test_task_already_committed_writes_nothing():
    calls = []
    opts = parse_sink_options({**BS, "topic": "out", "exactlyOnce": "true"})
    n = write_in_transaction(opts, "p-q-1", batches(2), committed=lambda: 2, producer_factory=RecordingProducer(calls))
    assert n is None and calls == [("new", "p-q-1", True), ("init",)]


def test_task_cut_short_before_writes_the_rest(caplog):
    # An earlier attempt committed rows 0..2 of 5 (its input ended early: a failure upstream).
    calls = []
    opts = parse_sink_options({**BS, "topic": "out", "exactlyOnce": "true"})

    def two_batches():
        yield pa.RecordBatch.from_pydict({"value": [b"r0", b"r1"]})
        yield pa.RecordBatch.from_pydict({"value": [b"r2", b"r3", b"r4"]})

    n = write_in_transaction(opts, "p-q-1", two_batches(), committed=lambda: 3,
                             last_record=lambda rows, first: ("log", b"k", b"%d+%d" % (first, rows), 1),
                             producer_factory=RecordingProducer(calls))
    assert n == 2
    assert [c for c in calls if c[0] == "produce"] == [("produce", "out", b"r3"), ("produce", "out", b"r4"),
                                                        ("produce", "log", b"3+2")]
    assert "committed only the first 3 rows" in caplog.text
    # Fewer rows than committed (a plan that is not deterministic): nothing written, a warning.
    calls.clear()
    assert write_in_transaction(opts, "p-q-1", two_batches(), committed=lambda: 9,
                                producer_factory=RecordingProducer(calls)) is None
    assert "4 rows fewer than an earlier attempt committed" in caplog.text


def test_task_failure_aborts():
    calls = []
    opts = parse_sink_options({**BS, "topic": "out", "exactlyOnce": "true"})
    with pytest.raises(KafkaException, match="fenced"):
        write_in_transaction(opts, "p-q-1", batches(2), producer_factory=RecordingProducer(calls, fail_on="produce"))
    assert calls[-1] == ("abort",) and ("commit",) not in calls
    calls.clear()
    with pytest.raises(KafkaException, match="fenced"):
        write_in_transaction(opts, "p-q-1", batches(1), producer_factory=RecordingProducer(calls, fail_on="commit"))
    assert ("abort",) not in calls  # fenced is fatal for this producer: not abortable, just raised
