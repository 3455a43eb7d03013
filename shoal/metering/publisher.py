"""The usage publisher: every ``shoal.metering.interval.ms`` a broker writes one window of usage
per tenant to ``__shoal_usage`` (docs/metering.md).

Exactly once, downstream: a window is *cut* once (the sampler's counters minus those at the
previous cut, with the next ``seq``) and then written until it is confirmed — the same records,
same identity, however many attempts it takes; no new window is cut meanwhile (the next one just
grows). A reader drops repeats of ``(broker, incarnation, seq, tenant)``. After a confirmed write
the broker records ``seq`` and ``window_end`` in ``metering-state.json`` in its data dir, so after a
restart the sequence goes on and the first window starts where the last confirmed one ended
(counters start at 0 with the process: the first window's deltas are everything since start).
A graceful stop publishes a last window; what a ``kill -9`` leaves unpublished (at most one
interval) is lost, as the in-memory counters are.

Writing: to a partition of ``__shoal_usage`` this broker leads, appended as the group coordinator
appends to ``__consumer_offsets`` and confirmed at the high watermark; when it leads none, a
Produce (acks=all) to a leader over the inter-broker listener, which only brokers (CLUSTER_ACTION)
may send to this internal topic.

The topic is created on first use: ``shoal.metering.topic.partitions`` partitions,
``shoal.metering.topic.replication.factor`` replicas (unset on an etcd cluster: 3, as
``__consumer_offsets``), ``cleanup.policy=delete`` with ``shoal.metering.topic.retention.ms``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from shoal.metering.counters import Sampler
from shoal.metering.record import USAGE_TOPIC, UsageRecord, window_records

if TYPE_CHECKING:
    from shoal.metering.ports import MeteringHost

log = logging.getLogger("shoal.metering")

STATE_FILE = "metering-state.json"
WRITE_TIMEOUT_S = 10.0


class UsageWriter(Protocol):
    async def write(self, records: Sequence[UsageRecord]) -> str | None:
        """Write and confirm ``records``; None when done, else why not (the caller retries)."""


def load_state(path: Path) -> tuple[int, int] | None:
    """(last confirmed seq, its window_end) from the state file; None if absent or unreadable."""
    try:
        d = json.loads(path.read_text())
        return int(d["seq"]), int(d["window_end"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("ignoring %s: %s", path, e)
        return None


def save_state(path: Path, seq: int, window_end: int) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump({"seq": seq, "window_end": window_end}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class UsagePublisher:
    """Cuts and publishes windows (see the module doc). ``run()`` is the broker's task."""

    def __init__(self, broker: "MeteringHost", writer: UsageWriter | None = None) -> None:
        self.broker = broker
        self.clock = broker.clock
        self.sampler = Sampler(broker)
        self.writer: UsageWriter = writer if writer is not None else BrokerUsageWriter(broker)
        self.state_path = Path(broker.static_config.data_dir) / STATE_FILE
        self.incarnation = self.clock.now_ms()
        state = load_state(self.state_path)
        self.seq = state[0] + 1 if state else 0
        self.window_start = state[1] if state else self.incarnation
        self._before: dict[str, dict[str, int]] = {}
        self.pending: tuple[int, int, list[UsageRecord]] | None = None  # (seq, window_end, records)
        self.windows_published = 0
        self.records_published = 0
        self._last_error = ""

    @property
    def interval_s(self) -> float:
        return int(self.broker.config.get("shoal.metering.interval.ms")) / 1000.0

    def cut(self) -> None:
        """Close the current window (if none is waiting to be written)."""
        if self.pending is not None:
            return
        now = max(self.clock.now_ms(), self.window_start)
        samples = self.sampler.sample()
        records = window_records(self._before, samples, broker=self.broker.node_id, incarnation=self.incarnation,
                                 seq=self.seq, window_start=self.window_start, window_end=now)
        self._before = {t: dict(s.counters) for t, s in samples.items()}
        self.pending = (self.seq, now, records)
        self.seq += 1
        self.window_start = now

    async def flush(self) -> bool:
        """Write the pending window; True when it is confirmed (or there was none)."""
        if self.pending is None:
            return True
        seq, end, records = self.pending
        error = await self.writer.write(records) if records else None
        if error is not None:
            if error != self._last_error:
                log.warning("usage window %d of broker %d not written yet (will retry): %s", seq,
                            self.broker.node_id, error)
                self._last_error = error
            return False
        if self._last_error:
            log.info("usage window %d of broker %d written", seq, self.broker.node_id)
            self._last_error = ""
        self.pending = None
        self.windows_published += 1
        self.records_published += len(records)
        try:
            await asyncio.to_thread(save_state, self.state_path, seq, end)
        except OSError as e:
            log.error("cannot record usage window %d in %s: %s", seq, self.state_path, e)
        return True

    async def tick(self) -> bool:
        self.cut()
        return await self.flush()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("usage publishing failed")

    async def close(self, timeout_s: float = 5.0) -> None:
        """The last window, at a graceful stop (given up after ``timeout_s``)."""
        try:
            await asyncio.wait_for(self.tick(), timeout_s)
        except (asyncio.TimeoutError, Exception) as e:  # noqa: BLE001 - stopping anyway
            log.warning("last usage window of broker %d not written: %s", self.broker.node_id, e or "timed out")


# -- the topic and the writer -----------------------------------------------------------------


def topic_configs(config: Any) -> dict[str, str]:
    return {"cleanup.policy": "delete", "retention.ms": str(int(config.get("shoal.metering.topic.retention.ms")))}


async def ensure_topic(broker: "MeteringHost") -> str | None:
    """Create ``__shoal_usage`` if missing; None when it exists, else why it cannot be created."""
    from shoal.metadata import MetadataError
    from shoal.tenancy.creation import PlacementRefused, create_internal_topic, internal_replication_factor

    cfg = broker.config
    key = "shoal.metering.topic.replication.factor"
    rf = internal_replication_factor(int(cfg.get(key)), cfg, key, broker.controller is not None)
    try:  # the one creation decision: placed on the image it commits against
        created = await create_internal_topic(
            broker.metadata, USAGE_TOPIC, int(cfg.get("shoal.metering.topic.partitions")), rf,
            lambda _rf: topic_configs(cfg), rng=broker.random, fenced=broker.fenced_brokers)
    except PlacementRefused as e:
        return f"cannot create {USAGE_TOPIC} (replication factor {e.replication_factor}): {e.message}"
    except MetadataError as e:
        return f"cannot create {USAGE_TOPIC}: {e}"
    if created is not None:
        log.info("created %s with %d partitions, replication factor %d", USAGE_TOPIC, len(created.partitions),
                 len(created.partitions[0].replicas))
    return None


class BrokerUsageWriter:
    """Writes usage records into ``__shoal_usage`` from inside a broker (see the module doc)."""

    def __init__(self, broker: "MeteringHost") -> None:
        self.broker = broker
        self._conn: Any = None
        self._conn_node = -1

    async def write(self, records: Sequence[UsageRecord]) -> str | None:
        broker = self.broker
        why = await ensure_topic(broker)
        if why is not None:
            return why
        topic = broker.metadata.image.topic(USAGE_TOPIC)
        if topic is None:
            return f"{USAGE_TOPIC} is not in the metadata yet"
        parts = topic.partitions
        n = len(parts)
        order = [(broker.node_id + i) % n for i in range(n)]
        for index in order:  # a partition this broker leads
            part = broker.replicas.leader(USAGE_TOPIC, parts[index])
            if part is not None:
                return await self._append_local(part, index, records)
        for index in order:  # else Produce to a leader
            if parts[index].leader >= 0:
                return await self._produce(parts[index].leader, index, records)
        return f"{USAGE_TOPIC} has no leader"

    async def _append_local(self, part: Any, index: int, records: Sequence[UsageRecord]) -> str | None:
        from shoal.protocol.errors import ErrorCode
        from shoal.protocol.records import InvalidRecords, build_batch

        now = self.broker.clock.now_ms()
        batch = bytearray(build_batch([(now, r.key, r.to_json(), ()) for r in records]))
        try:
            info = part.append_as_leader(batch, now, client=False)
        except (InvalidRecords, OSError) as e:
            return f"cannot append to {USAGE_TOPIC}-{index}: {e}"
        await part.flush_if_due(now)
        end = info.last_offset + 1
        if part.high_watermark >= end:
            return None
        min_isr = int(part.view.config.min_insync_replicas)
        failed = await self.broker.replicas.wait_committed([(USAGE_TOPIC, index, end, min_isr)], WRITE_TIMEOUT_S)
        code = failed.get((USAGE_TOPIC, index), ErrorCode.none)
        return None if code == ErrorCode.none else f"{USAGE_TOPIC}-{index}: {ErrorCode(code).name}"

    async def _produce(self, leader: int, index: int, records: Sequence[UsageRecord]) -> str | None:
        from shoal.protocol.records import build_batch

        now = self.broker.clock.now_ms()
        batch = bytes(build_batch([(now, r.key, r.to_json(), ()) for r in records]))
        try:
            conn = await self._connection(leader)
            from shoal.net.requests import produce

            version = min(conn.version_for(0), 9)
            body = produce(version, USAGE_TOPIC, index, batch, acks=-1, timeout_ms=int(WRITE_TIMEOUT_S * 1000))
            resp = await asyncio.wait_for(conn.send(0, version, body), WRITE_TIMEOUT_S + 5)
        except Exception as e:  # noqa: BLE001 - any failure: retried next tick
            await self.close()
            return f"Produce to broker {leader}: {type(e).__name__}: {e}"
        for tr in resp.responses:
            for pr in tr.partition_responses:
                if pr.error_code:
                    from shoal.protocol.errors import ErrorCode

                    return f"Produce to broker {leader}: {ErrorCode(pr.error_code).name}"
        return None

    async def _connection(self, node: int) -> Any:
        if self._conn is not None and self._conn_node == node and not self._conn.closed:
            return self._conn
        await self.close()
        endpoint = self.broker.replicas.fetchers.endpoint(node)  # on inter.broker.listener.name
        if endpoint is None:
            raise ConnectionError(f"broker {node} has no inter-broker endpoint")
        from shoal.net.interbroker import inter_broker_security
        from shoal.net import Connection

        conn = Connection(endpoint[0], endpoint[1], f"shoal-metering-{self.broker.node_id}", WRITE_TIMEOUT_S,
                          inter_broker_security(self.broker.config))
        await conn.open()
        self._conn, self._conn_node = conn, node
        return conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # noqa: BLE001
                pass
