"""The executor side of the Shoal source without Spark: ``read_range`` against a real broker,
including records deleted (DeleteRecords, as retention does) between planning and reading."""

from __future__ import annotations

import logging
import time

import pytest
from spark_helpers import create_topic, delete_records, produce

from shoal.spark.kafka import DataLossError, read_range
from shoal.spark.offsets import OffsetRange

pytestmark = pytest.mark.timeout(60)


def arrow_schema(include_headers: bool):
    from pyspark.sql.pandas.types import to_arrow_schema

    from shoal.spark.source import source_schema

    return to_arrow_schema(source_schema(include_headers), timezone="UTC")


def read(bootstrap, r, *, fail=True, headers=False, batch_records=8192):
    batches = list(read_range({"bootstrap.servers": bootstrap}, r, arrow_schema(headers), include_headers=headers,
                              fail_on_data_loss=fail, poll_timeout_ms=10_000, batch_records=batch_records))
    return [row for b in batches for row in b.to_pylist()], batches


def test_reads_exactly_the_range_in_batches(broker, uniq):
    t = create_topic(broker.bootstrap, uniq, 2)
    base_ts = (int(time.time()) - 3600) * 1000  # recent: older records fall to time-based retention
    produce(broker.bootstrap, t, [{"value": f"v{i}".encode(), "key": f"k{i}".encode(), "partition": 1,
                                  "timestamp": base_ts + i,
                                  "headers": [("a", b"1"), ("b", None)] if i % 2 else None} for i in range(50)])
    rows, batches = read(broker.bootstrap, OffsetRange(t, 1, 7, 31), headers=True, batch_records=10)
    assert [r["offset"] for r in rows] == list(range(7, 31))
    assert [len(b) for b in batches] == [10, 10, 4]
    first = rows[0]
    assert first["key"] == b"k7" and first["value"] == b"v7" and first["topic"] == t and first["partition"] == 1
    assert first["timestampType"] == 0  # CreateTime, Java's id
    assert int(first["timestamp"].timestamp() * 1000) == base_ts + 7
    assert first["headers"] == [{"key": "a", "value": b"1"}, {"key": "b", "value": None}]
    assert rows[1]["headers"] is None  # no headers: null, as Spark's Kafka source gives
    assert read(broker.bootstrap, OffsetRange(t, 0, 0, 0))[0] == []


def test_deleted_records_fail_the_read(broker, uniq):
    t = create_topic(broker.bootstrap, uniq, 1)
    produce(broker.bootstrap, t, [{"value": b"x%d" % i} for i in range(20)])
    delete_records(broker.bootstrap, t, 0, 12)
    with pytest.raises(DataLossError, match=r"offsets \[3, 12\).*log start offset is now 12.*failOnDataLoss"):
        read(broker.bootstrap, OffsetRange(t, 0, 3, 20), fail=True)


def test_deleted_records_skipped_with_a_warning(broker, uniq, caplog):
    t = create_topic(broker.bootstrap, uniq, 1)
    produce(broker.bootstrap, t, [{"value": b"x%d" % i} for i in range(20)])
    delete_records(broker.bootstrap, t, 0, 12)
    with caplog.at_level(logging.WARNING, logger="shoal.spark"):
        rows, _ = read(broker.bootstrap, OffsetRange(t, 0, 3, 20), fail=False)
    assert [r["offset"] for r in rows] == list(range(12, 20))
    assert any("skipping records" in m and "[3, 12)" in m for m in caplog.messages)
    # Everything of the range deleted: nothing read, still no failure.
    delete_records(broker.bootstrap, t, 0, 20)
    assert read(broker.bootstrap, OffsetRange(t, 0, 3, 20), fail=False)[0] == []
