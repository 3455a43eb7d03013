"""Transaction markers: the commit/abort control batches written into each partition of a
finished transaction (Kafka's ``TransactionMarkerChannelManager`` and the broker side of
WriteTxnMarkers).

- :func:`write_local_markers` appends markers to partitions this broker leads
  (``Partition.append_marker``) and waits until each is committed (HW past it); for partitions of
  ``__consumer_offsets`` it then tells the group coordinator (``on_txn_completed``) so transactional
  offsets become visible (commit) or are dropped (abort). The WriteTxnMarkers handler and the
  local path of the writer both use it.
- :class:`MarkerWriter` sends a transaction's markers to the leaders of its partitions: locally, or
  with WriteTxnMarkers (key 27, v1) to the leader broker. Retriable errors (leader moved, not
  enough replicas, timeouts, connections) are retried with a backoff until every partition has its
  marker; a partition of a deleted topic is dropped; INVALID_PRODUCER_EPOCH or
  TRANSACTION_COORDINATOR_FENCED stop the sending (a newer coordinator or producer epoch owns the
  transaction now), as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from shoal.protocol.errors import ErrorCode, error_code
from shoal.tenancy.internal_topics import OFFSETS_TOPIC

if TYPE_CHECKING:
    from shoal.clock import Clock
    from shoal.config import BrokerConfig
    from shoal.metadata import MetadataStore
    from shoal.replica import ReplicaManager

log = logging.getLogger("shoal.txn")

WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1
MAX_BACKOFF_S = 2.0

RETRIABLE = {
    ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out, ErrorCode.kafka_storage_error,
    ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator,
    ErrorCode.unknown_server_error, ErrorCode.network_exception, ErrorCode.leader_not_available,
}
FENCED = {ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced, ErrorCode.producer_fenced}


class MarkerHost(Protocol):
    """What writing markers uses of the broker: the coordinators' context
    (``shoal.groups.runtime.CoordinatorContext``) or, for WriteTxnMarkers, ``shoal.services``."""

    @property
    def node_id(self) -> int: ...

    @property
    def clock(self) -> "Clock": ...

    @property
    def metadata(self) -> "MetadataStore": ...

    @property
    def replicas(self) -> "ReplicaManager": ...

    @property
    def config(self) -> "BrokerConfig": ...


class OffsetsCompletion(Protocol):
    """The group coordinator, told of the ``__consumer_offsets`` markers written."""

    def on_txn_completed(self, producer_id: int, partitions: list[int], commit: bool) -> None: ...


async def write_local_markers(
    svc: MarkerHost, groups: "OffsetsCompletion | None", producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
    partitions: Iterable[tuple[str, int]], timeout_s: float,
) -> dict[tuple[str, int], ErrorCode]:
    """Append one marker to each partition (physical names) this broker leads, wait for acks=all,
    and return each partition's error (NONE when its marker is committed)."""
    image = svc.metadata.image
    now_ms = svc.clock.now_ms()
    out: dict[tuple[str, int], ErrorCode] = {}
    waits = []
    for topic, index in partitions:
        t = image.topic(topic)
        if t is None or not 0 <= index < len(t.partitions):
            out[(topic, index)] = ErrorCode.unknown_topic_or_partition
            continue
        part = svc.replicas.leader(topic, t.partitions[index])
        if part is None:
            out[(topic, index)] = ErrorCode.not_leader_or_follower
            continue
        try:
            info = part.append_marker(producer_id, producer_epoch, coordinator_epoch, commit, now_ms)
        except OSError as e:
            log.error("cannot write a transaction marker to %s-%d: %s", topic, index, e)
            out[(topic, index)] = ErrorCode.kafka_storage_error
            continue
        except Exception as e:  # ProducerStateError / InvalidRecords carry Kafka's error name
            code = getattr(e, "code", None)
            if not isinstance(code, str):
                log.exception("transaction marker for producer %d to %s-%d failed", producer_id, topic, index)
                out[(topic, index)] = ErrorCode.unknown_server_error
                continue
            log.info("transaction marker for producer %d epoch %d to %s-%d refused: %s",
                     producer_id, producer_epoch, topic, index, e)
            out[(topic, index)] = error_code(code)
            continue
        waits.append((topic, index, info.last_offset + 1, 1))
    if waits:
        failed = await svc.replicas.wait_committed(waits, timeout_s)
        for topic, index, _o, _m in waits:
            out[(topic, index)] = failed.get((topic, index), ErrorCode.none)
    offsets = [i for (t, i), code in out.items() if t == OFFSETS_TOPIC and code == ErrorCode.none]
    if offsets and groups is not None:
        try:
            groups.on_txn_completed(producer_id, offsets, commit)
        except Exception:
            log.exception("group coordinator failed to complete the offsets of producer %d", producer_id)
    return out


class BrokerChannel:
    """Connections to the other brokers (inter-broker listener and security), one per broker,
    opened at first use and replaced when it broke or the broker moved."""

    def __init__(self, services: MarkerHost, timeout_s: Callable[[], float]) -> None:
        self.services = services
        self.timeout_s = timeout_s
        self._conns: dict[int, tuple[tuple[str, int], Any]] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def close(self) -> None:
        conns, self._conns = self._conns, {}
        for _ep, conn in conns.values():
            try:
                await conn.close()
            except Exception:
                pass

    async def _connection(self, node: int) -> Any:
        svc = self.services
        endpoint = svc.replicas.fetchers.endpoint(node)
        if endpoint is None:
            raise ConnectionError(f"broker {node} is not registered")
        cached = self._conns.get(node)
        if cached is not None and cached[0] == endpoint and not cached[1].closed:
            return cached[1]
        from shoal.net.interbroker import inter_broker_security
        from shoal.net import Connection

        conn = Connection(endpoint[0], endpoint[1], f"shoal-txn-{svc.node_id}", self.timeout_s() + 5,
                          inter_broker_security(svc.config))
        await conn.open()
        self._conns[node] = (endpoint, conn)
        return conn

    async def send(self, node: int, api_key: int, version: int, body: Any) -> Any:
        """The response of broker ``node``; raises on a connection failure (and forgets it)."""
        try:
            async with self._locks.setdefault(node, asyncio.Lock()):
                conn = await self._connection(node)
            return await conn.send(api_key, version, body)
        except asyncio.CancelledError:
            raise
        except Exception:
            cached = self._conns.pop(node, None)
            if cached is not None:
                try:
                    await cached[1].close()
                except Exception:
                    pass
            raise


class MarkerWriter:
    """Sends the markers of finished transactions; one task per transaction."""

    def __init__(self, services: MarkerHost, groups: "OffsetsCompletion | None" = None, *, backoff_s: float = 0.1, timeout_s: Callable[[], float] = lambda: 30.0,
                 channel: "BrokerChannel | None" = None) -> None:
        self.services = services
        self.groups = groups
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.channel = channel or BrokerChannel(services, timeout_s)

    async def close(self) -> None:
        await self.channel.close()

    async def send(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
        partitions: Iterable[tuple[str, int]], still_valid: Callable[[], bool],
    ) -> bool:
        """Write the markers until every partition has one. False when it stopped early: the
        coordinator lost the transaction (``still_valid`` false) or a partition fenced it."""
        svc = self.services
        pending = set(partitions)
        delay = self.backoff_s
        while pending:
            if not still_valid():
                return False
            image = svc.metadata.image
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for topic, index in sorted(pending):
                t = image.topic(topic)
                if t is None or not 0 <= index < len(t.partitions):
                    log.info("transaction of producer %d: %s-%d no longer exists, no marker for it", producer_id,
                             topic, index)
                    pending.discard((topic, index))
                    continue
                leader = t.partitions[index].leader
                if leader >= 0:
                    by_leader.setdefault(leader, []).append((topic, index))
            before = len(pending)
            results: dict[tuple[str, int], ErrorCode] = {}
            jobs = []
            for leader, parts in by_leader.items():
                if leader == svc.node_id:
                    jobs.append(write_local_markers(svc, self.groups, producer_id, producer_epoch, coordinator_epoch, commit,
                                                    parts, self.timeout_s()))
                else:
                    jobs.append(self._remote(leader, producer_id, producer_epoch, coordinator_epoch, commit, parts))
            for r in await asyncio.gather(*jobs):
                results.update(r)
            for tp, code in results.items():
                if code == ErrorCode.none:
                    pending.discard(tp)
                elif code in FENCED:
                    log.info("transaction marker of producer %d epoch %d for %s-%d fenced (%s): stop sending",
                             producer_id, producer_epoch, tp[0], tp[1], code.name)
                    return False
                elif code in (ErrorCode.unsupported_for_message_format, ErrorCode.unsupported_version):
                    pending.discard(tp)
                elif code not in RETRIABLE:
                    log.warning("transaction marker of producer %d for %s-%d failed with %s; retrying",
                                producer_id, tp[0], tp[1], code.name)
            if pending:
                # retry, backing off to MAX_BACKOFF_S while nothing moves (a leader being elected)
                delay = self.backoff_s if len(pending) < before else min(delay * 2, MAX_BACKOFF_S)
                await asyncio.sleep(delay)
        return True

    async def _remote(
        self, node: int, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
        parts: list[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        from shoal.net.requests import write_txn_markers

        body = write_txn_markers(WRITE_TXN_MARKERS_VERSION, producer_id, producer_epoch, coordinator_epoch, commit, parts)
        try:
            resp = await self.channel.send(node, WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.info("cannot send transaction markers to broker %d: %s", node, e)
            return {tp: ErrorCode.network_exception for tp in parts}
        out = {tp: ErrorCode.unknown_server_error for tp in parts}
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    out[(t.name, p.partition_index)] = ErrorCode(p.error_code)
        return out
