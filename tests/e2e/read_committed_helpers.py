"""Consumers of partition 0 of a topic from offset 0 with the three clients, for the
read_committed tests: the values they deliver, in order."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Consumer, TopicPartition


def ck_values(bootstrap: str, topic: str, isolation: str, want: int, *, settle: float = 1.5,
              timeout: float = 30) -> list[bytes]:
    """confluent-kafka: poll until ``want`` values (or ``timeout``), then ``settle`` seconds more,
    so that a value that must not come has the time to."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": isolation})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []

    def poll(wait: float) -> None:
        m = c.poll(wait)
        if m is not None and not m.error():
            got.append(m.value())

    try:
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            poll(0.5)
        end = time.monotonic() + settle
        while time.monotonic() < end:
            poll(0.3)
    finally:
        c.close()
    return got


def kp_values(bootstrap: str, topic: str) -> list[bytes]:
    """kafka-python, read_committed: everything it delivers until 4 s pass without a record."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=4000)
    try:
        c.assign([KTP(topic, 0)])
        c.seek(KTP(topic, 0), 0)
        return [m.value for m in c]
    finally:
        c.close()


def aio_values(bootstrap: str, topic: str, want: int) -> tuple[list[bytes], int]:
    """aiokafka, read_committed: the values (``want`` of them, then 1.5 s more) and the end
    offset it lists (the last stable offset)."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    async def run() -> tuple[list[bytes], int]:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            tp = ATP(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < want and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    got.extend(m.value for m in msgs)
            for msgs in (await c.getmany(timeout_ms=1500)).values():
                got.extend(m.value for m in msgs)
            return got, (await c.end_offsets([tp]))[tp]
        finally:
            await c.stop()

    return asyncio.run(run())
