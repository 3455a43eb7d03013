"""The exactly-once sink's task log against a real broker (no Spark): created once with its 16
partitions, and found back by (batch, task) through the backward scan, however far back."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from shoal.spark.kafka import TASK_LOG_PARTITIONS, TaskCommitLog, task_record
from spark_helpers import OP_TIMEOUT, admin

pytestmark = pytest.mark.timeout(120)


def test_task_log_scan(broker, uniq):
    log = TaskCommitLog({"bootstrap.servers": broker.bootstrap}, f"__{uniq}-tasks", poll_timeout_ms=10_000)
    log.ensure_topic()
    log.ensure_topic()  # exists: fine
    md = admin(broker.bootstrap).list_topics(log.topic, timeout=OP_TIMEOUT).topics[log.topic]
    assert len(md.partitions) == TASK_LOG_PARTITIONS
    assert log.find(0, 0) == []  # empty

    # 100 batches of tasks 0 and 16 (both in partition 0), task 1 only in batch 3.
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for b in range(100):
        for t in (0, 16) if b != 3 else (0, 1, 16):
            key, value = task_record("q", b, t, 1000 * b + t, 1)
            p.produce(log.topic, value, key, log.partition_for(t))
    assert p.flush(OP_TIMEOUT) == 0

    def records(batch, task):
        return [d["records"] for d in log.find(batch, task)]

    assert records(99, 16) == [99016]
    assert records(10, 16) == [10016]  # 180 records back: windows of 64, then 128
    assert records(0, 0) == [0]  # back to the log start
    assert records(100, 0) == []  # a batch after the last: stops at the first window
    assert records(3, 1) == [3001] and records(4, 1) == [] and records(3, 17) == []
