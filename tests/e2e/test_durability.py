"""Restarts: a clean restart keeps every record; a SIGKILL loses nothing that was acknowledged.

These use their own broker (``fresh_broker``) because they stop it.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer, TopicPartition

from e2e_helpers import OP_TIMEOUT, consume, consumer, create_topic

pytestmark = pytest.mark.timeout(90)


def _watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    c = consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=OP_TIMEOUT)
    finally:
        c.close()


def _produce_sync(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> list[int]:
    offsets: list[int] = []
    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, "message.timeout.ms": 15000})
    for v in values:
        p.produce(topic, value=v, partition=partition,
                  on_delivery=lambda err, msg: errors.append(err) if err else offsets.append(msg.offset()))
    assert p.flush(OP_TIMEOUT) == 0
    assert not errors, errors[:3]
    return offsets


def test_restart_keeps_data_and_offsets_continue(fresh_broker, topic_name):
    b = fresh_broker
    create_topic(b.bootstrap, topic_name, partitions=2, config={"segment.bytes": "4096"})  # several segments
    first = [f"before-{i}".encode() * 10 for i in range(200)]
    assert _produce_sync(b.bootstrap, topic_name, first) == list(range(200))
    _produce_sync(b.bootstrap, topic_name, [b"other"], partition=1)

    b.restart()

    assert _watermarks(b.bootstrap, topic_name, 0) == (0, 200)
    assert _watermarks(b.bootstrap, topic_name, 1) == (0, 1)
    more = [f"after-{i}".encode() for i in range(20)]
    assert _produce_sync(b.bootstrap, topic_name, more) == list(range(200, 220))
    got = consume(b.bootstrap, topic_name, [0], expected=220)
    assert [(m.offset(), m.value()) for m in got] == list(enumerate(first + more))


def test_kill9_loses_nothing_acknowledged(fresh_broker, topic_name):
    b = fresh_broker
    create_topic(b.bootstrap, topic_name, partitions=1)
    acked: dict[int, bytes] = {}
    failed: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivery(err, msg):
        with lock:
            if err:
                failed.append(str(err))
            else:
                acked[msg.offset()] = msg.value()

    def produce_loop():
        p = Producer({
            "bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 1,
            "message.timeout.ms": 30000, "retry.backoff.ms": 100, "reconnect.backoff.max.ms": 500,
        })
        i = 0
        while not stop.is_set():
            try:
                p.produce(topic_name, value=f"m{i}".encode(), partition=0, on_delivery=on_delivery)
                i += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0.001)
            if i % 50 == 0:
                time.sleep(0.005)
        p.flush(40)

    t = threading.Thread(target=produce_loop, daemon=True)
    t.start()
    deadline = time.monotonic() + OP_TIMEOUT
    while len(acked) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    with lock:
        assert len(acked) >= 300, f"only {len(acked)} acks before the kill; failures: {failed[:3]}"
    acked_before_kill = len(acked)

    b.kill9()  # SIGKILL while the producer keeps sending, then start again

    deadline = time.monotonic() + OP_TIMEOUT
    while len(acked) < acked_before_kill + 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    t.join(45)
    assert not t.is_alive()
    assert len(acked) >= acked_before_kill + 300, f"producer did not recover after the restart: {failed[:3]}"

    low, high = _watermarks(b.bootstrap, topic_name, 0)
    assert low == 0 and high >= max(acked) + 1
    got = consume(b.bootstrap, topic_name, [0], expected=high, timeout=30)
    offsets = [m.offset() for m in got]
    assert offsets == list(range(high)), "offsets are not contiguous from 0"
    stored = {m.offset(): m.value() for m in got}
    lost = {o: v for o, v in acked.items() if stored.get(o) != v}
    assert not lost, f"{len(lost)} acknowledged records missing or changed, e.g. {sorted(lost.items())[:3]}"


def test_kill9_right_after_acks_everything_is_readable_without_new_writes(fresh_broker, topic_name):
    """The high watermark after a crash covers every logged batch, even if nothing is produced
    after the restart (its checkpoint is written only every few seconds)."""
    b = fresh_broker
    create_topic(b.bootstrap, topic_name, partitions=1)
    values = [f"v{i}".encode() for i in range(200)]
    offsets = _produce_sync(b.bootstrap, topic_name, values)
    assert offsets == list(range(200))
    b.kill9()
    low, high = _watermarks(b.bootstrap, topic_name, 0)
    assert (low, high) == (0, 200)
    got = consume(b.bootstrap, topic_name, [0], expected=200, timeout=30)
    assert [m.value() for m in got] == values
