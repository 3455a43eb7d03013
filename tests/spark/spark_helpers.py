"""Helpers for the Spark tests (imported as ``spark_helpers``): topics, producing, reading back and
DeleteRecords with confluent-kafka, and running streaming queries with bounded waits."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

REPO = Path(__file__).resolve().parents[2]


def local_spark(app: str, **conf: str):
    """A ``local[2]`` SparkSession for tests, with the ``shoal`` data source registered.

    Two shuffle partitions, no UI; Spark's Python workers run this interpreter (``PYSPARK_PYTHON``)
    and find this checkout first on their path. ``conf``: more Spark settings.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    from pyspark.sql import SparkSession

    from shoal.spark import register

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.network.timeout", "60s")
        .config("spark.executor.heartbeatInterval", "10s")
        # The tests' jobs are small and short: the JIT's first tier only, one GC thread. Half the
        # JVM's CPU of a session (~25 s -> ~13 s measured), the start-up most of it.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


# Every blocking wait in these tests is bounded by one of these (seconds).
OP_TIMEOUT = 15.0
QUERY_TIMEOUT = 90.0


def admin(bootstrap: str, security: dict[str, str] | None = None) -> AdminClient:
    """``security``: librdkafka settings of the client's listener (SASL, TLS), as ``kafka.*`` without the prefix."""
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000, **(security or {})})


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None,
                 security: dict[str, str] | None = None, replication_factor: int = 1) -> str:
    client = admin(bootstrap, security)
    fs = client.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                                        config=config or {})],
                              request_timeout=OP_TIMEOUT)
    fs[name].result(timeout=OP_TIMEOUT)
    return name


def add_partitions(bootstrap: str, name: str, total: int) -> None:
    client = admin(bootstrap)
    fs = client.create_partitions([NewPartitions(name, total)], request_timeout=OP_TIMEOUT)
    fs[name].result(timeout=OP_TIMEOUT)


def delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    client = admin(bootstrap)
    fs = client.delete_records([TopicPartition(topic, partition, before)], request_timeout=OP_TIMEOUT)
    for f in fs.values():
        f.result(timeout=OP_TIMEOUT)


def produce(bootstrap: str, topic: str, records: Iterable[dict[str, Any]],
            security: dict[str, str] | None = None) -> int:
    """Each record: value, and optionally key, partition, headers, timestamp (ms)."""
    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "enable.idempotence": True, **(security or {})})
    n = 0
    for r in records:
        kwargs = {k: r[k] for k in ("key", "partition", "headers", "timestamp") if r.get(k) is not None}
        p.produce(topic, r["value"], on_delivery=lambda err, msg: errors.append(err) if err else None, **kwargs)
        n += 1
    assert p.flush(OP_TIMEOUT) == 0, "records not delivered in time"
    assert not errors, errors
    return n


def consume_all(bootstrap: str, topic: str, partitions: int, *, timeout: float = OP_TIMEOUT) -> list[Any]:
    """Every record now in the partitions of ``topic`` (from the start to the high watermark)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "shoal-spark-tests", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    out: list[Any] = []
    try:
        ends = {}
        for p in range(partitions):
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=OP_TIMEOUT)
            if high > low:
                ends[p] = high
        c.assign([TopicPartition(topic, p, 0) for p in ends] or [TopicPartition(topic, 0, 0)])
        pos = {p: 0 for p in ends}
        deadline = time.monotonic() + timeout
        while any(pos[p] < ends[p] for p in ends):
            assert time.monotonic() < deadline, f"read {len(out)} records of {topic}; positions {pos} < {ends}"
            for m in c.consume(500, 0.2):
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(m.error())
                    continue
                out.append(m)
                pos[m.partition()] = m.offset() + 1
    finally:
        c.close()
    return out


def run_available_now(writer, *, timeout: float = QUERY_TIMEOUT):
    """Start a ``writeStream`` with Trigger.AvailableNow and wait (bounded) until it ends."""
    q = writer.trigger(availableNow=True).start()
    try:
        finished = q.awaitTermination(timeout)
    except BaseException:
        q.stop()
        raise
    if not finished:
        q.stop()
        raise AssertionError(f"streaming query still running after {timeout}s")
    return q
