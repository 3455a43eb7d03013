"""Helpers of the transaction tests (imported as ``txn_helpers``): topics, reading a topic to its
end in either isolation level, and a broker's view of its transactions over the wire."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

OP_TIMEOUT = 15.0
TXN_TIMEOUT = 60.0  # a transactional API call of a client, on a loaded machine


def create_topic(bootstrap: str, name: str, partitions: int = 1, replication_factor: int = 1) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
    fs = a.create_topics([NewTopic(name, partitions, replication_factor)], operation_timeout=10,
                         request_timeout=OP_TIMEOUT)
    fs[name].result(timeout=OP_TIMEOUT)


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, *, idle: float = 1.5,
             timeout: float = 30.0) -> list[bytes]:
    """Every value the isolation level shows: polls from the beginning until nothing new has come
    for ``idle`` seconds (and at least once past ``idle``)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "isolation.level": isolation, "fetch.wait.max.ms": 100,
                  "socket.timeout.ms": 10000})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    try:
        while time.monotonic() < deadline and time.monotonic() - last < idle:
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append(m.value())
            last = time.monotonic()
    finally:
        c.close()
    return out


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=OP_TIMEOUT)[1] for p in range(partitions)]
    finally:
        c.close()


def wire(bootstrap: str, key: int, fields: dict[str, Any], version: int | None = None) -> Any:
    """One request with Shoal's own client (plain fields), at ``version`` or the highest common one."""
    from shoal.client import AdminClient as ShoalAdmin, build_entity
    from shoal.protocol import codec

    async def go() -> Any:
        async with ShoalAdmin(bootstrap, client_id="txn-tests", timeout=OP_TIMEOUT) as c:
            v = c.version_for(key) if version is None else version
            return await c.request(key, build_entity(codec.request_type(key, v), fields))

    return asyncio.run(go())


def describe_txn(bootstrap: str, txn: str) -> Any:
    """DescribeTransactions of ``txn`` (to its coordinator: FindCoordinator first)."""
    r = wire(bootstrap, 10, {"key": txn, "key_type": 1, "coordinator_keys": [txn]})
    co = r.coordinators[0]
    assert co.error_code == 0, co
    (state,) = wire(f"{co.host}:{co.port}", 65, {"transactional_ids": [txn]}).transaction_states
    return state
