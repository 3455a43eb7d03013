"""What one connection, or all of them together, may hold: request memory and connection timeouts.

One ``ConnectionGuard`` per broker (``ConnectionGuard.for_broker``), shared by its connections
(``shoal.server.connection``):

- **Request memory** (``queued.max.request.bytes``, Kafka's request ``MemoryPool``): the bytes
  of requests read but not yet answered, broker-wide. A connection takes memory for a frame as
  its bytes arrive (not the size its 4-byte length announces: Kafka's pool reserves that at once,
  so a client that sent only the lengths of three 100 MB frames held the whole pool and stalled
  every connection of the broker, replication included), and gives it back when the response is
  handed to the socket (or the connection closes). While the pool is used up, a connection
  about to start a frame stops reading (as Kafka mutes the channel) until memory is given back;
  one in the middle of a frame reads on to its end, so that every frame that started can finish.
  The pool is not strict (Kafka's ``SimpleMemoryPool`` neither): one frame may take it over the
  limit by at most ``socket.request.max.bytes``.
  **Shares**: each owner (a tenant, all its principals together; a principal of the physical
  cluster on its own) may hold at most ``shoal.queued.max.request.bytes.per.principal`` (a
  quarter of the pool by default), counting a frame being read at its announced size. An owner
  at its share reads no further frame until its own requests are answered; everyone else reads
  on. So one tenant's partial frames, announced or sent, hold at most its share (plus one
  frame) and never the pool: other tenants and the brokers' replication keep being read.
  Frames of a SASL connection before it has authenticated are counted once read but never wait
  for memory nor reserve it while partial (Kafka's authenticator reads them outside the pool
  too): they are bounded by ``sasl.server.max.receive.size`` and the authentication timeout.
  ``shoal.request.read.timeout.ms`` bounds how long any frame may stay partial.
- **Timeouts**, checked by one sweep over the connections every ``Timeouts.interval_s`` (no timer
  per connection or per request; a connection only raises flags the sweep reads and clears):

  ========================================  ==========  ====================================
  config                                    default     closes a connection that...
  ========================================  ==========  ====================================
  ``connections.max.idle.ms`` (Kafka)       600000      read nothing, had no request being
                                                        handled and wrote nothing that long
  ``shoal.request.read.timeout.ms``         30000       has had one frame partly read that
                                                        long (slowloris)
  ``shoal.sasl.authentication.timeout.ms``  10000       has not authenticated that long after
                                                        connecting (SASL listeners)
  ========================================  ==========  ====================================

  Each is listener-level too (``listener.name.<l>.<config>``); a value <= 0 disables it. A
  connection that stopped reading because of the broker (a quota mute, its responses not being
  taken, the request memory used up) is not timed out for a partial frame, only for idleness.

Closes are logged as one line per reason per second at most, with the number of connections and
a few of their addresses ("closed 500 connections idle for more than ..."), so that 500
connections timing out together, or an attacker opening connections in a loop, writes a line a
second, not 500. Counters of closes per reason are metrics (``shoal.admin.metrics``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shoal.server.ports import GuardHost
    from shoal.config import BrokerConfig

log = logging.getLogger("shoal.server")

IDLE = "idle"
READ_TIMEOUT = "read_timeout"
AUTH_TIMEOUT = "auth_timeout"
FRAME_TOO_LARGE = "frame_too_large"
REASONS = (IDLE, READ_TIMEOUT, AUTH_TIMEOUT, FRAME_TOO_LARGE)

LOG_INTERVAL_S = 1.0
LOG_EXAMPLES = 3
MIN_SWEEP_S = 0.1
MAX_SWEEP_S = 1.0


def _ms_to_s(ms: Any) -> float | None:
    return ms / 1000.0 if ms is not None and int(ms) > 0 else None


@dataclass(frozen=True)
class Timeouts:
    """A listener's connection timeouts in seconds (None: disabled)."""

    idle_s: float | None
    read_s: float | None
    auth_s: float | None

    @classmethod
    def from_config(cls, config: "BrokerConfig", listener: str) -> "Timeouts":
        return cls(
            idle_s=_ms_to_s(config.for_listener(listener, "connections.max.idle.ms")),
            read_s=_ms_to_s(config.for_listener(listener, "shoal.request.read.timeout.ms")),
            auth_s=_ms_to_s(config.for_listener(listener, "shoal.sasl.authentication.timeout.ms")),
        )

    @property
    def interval_s(self) -> float:
        """How often to sweep: a quarter of the shortest timeout, within 0.1..1 s (so a connection
        is closed at most about a quarter of its timeout late)."""
        enabled = [t for t in (self.idle_s, self.read_s, self.auth_s) if t is not None]
        if not enabled:
            return MAX_SWEEP_S
        return max(MIN_SWEEP_S, min(MAX_SWEEP_S, min(enabled) / 4))

    def describe(self, reason: str) -> str:
        if reason == IDLE:
            return f"idle for more than connections.max.idle.ms={self.idle_s * 1000:.0f}"  # type: ignore[operator]
        if reason == READ_TIMEOUT:
            return (f"with a request not fully received within shoal.request.read.timeout.ms="
                    f"{self.read_s * 1000:.0f}")  # type: ignore[operator]
        if reason == AUTH_TIMEOUT:
            return (f"not authenticated within shoal.sasl.authentication.timeout.ms="
                    f"{self.auth_s * 1000:.0f}")  # type: ignore[operator]
        return reason


class Liveness:
    """The sweep's view of one connection: since when it is idle, since when its current partial
    frame is waiting. The connection reports what happened since the last sweep; no I/O here."""

    __slots__ = ("connected_at", "idle_since", "partial_since", "write_buffered")

    def __init__(self, now: float) -> None:
        self.connected_at = now
        self.idle_since = now
        self.partial_since: float | None = None
        self.write_buffered = 0  # the transport's write buffer at the last sweep

    def verdict(self, now: float, t: Timeouts, *, active: bool, partial: bool, authenticating: bool) -> str | None:
        """Why the connection must close now, or None.

        ``active``: it read, wrote or worked on a request since the last sweep. ``partial``: it is
        reading and holds the start of a frame, and no frame was completed since the last sweep
        (a new partial frame starts its clock now). ``authenticating``: a SASL connection not yet
        authenticated."""
        if active:
            self.idle_since = now
        if not partial:
            self.partial_since = None
        elif self.partial_since is None:
            self.partial_since = now
        if authenticating and t.auth_s is not None and now - self.connected_at >= t.auth_s:
            return AUTH_TIMEOUT
        if self.partial_since is not None and t.read_s is not None and now - self.partial_since >= t.read_s:
            return READ_TIMEOUT
        if t.idle_s is not None and now - self.idle_since >= t.idle_s:
            return IDLE
        return None


class RequestMemory:
    """``queued.max.request.bytes``: bytes of requests read and not yet answered, broker-wide,
    and each owner's share of it.

    ``used`` counts the bytes held (frames read and unanswered, and what has arrived of the
    frame being read); ``owned`` counts per owner the frames it holds and the announced size of
    those it is reading. Connections add to both themselves (``charge``) and give back with
    ``release``; a connection that must wait (``must_wait``: the pool is used up, or its owner
    is at its ``share``) registers with ``wait`` and has ``memory_available()`` called once it
    need not any more (each one checks again when woken)."""

    __slots__ = ("limit", "share", "used", "owned", "waiters")

    def __init__(self, limit: int, share: int = -1) -> None:
        self.limit = limit if limit > 0 else sys.maxsize  # Kafka: -1 = unbounded
        if share <= 0:
            share = max(1, self.limit // 4) if self.bounded else sys.maxsize
        self.share = share
        self.used = 0
        self.owned: dict[Any, int] = {}
        self.waiters: dict[Any, Any] = {}  # conn -> its owner; ordered: the first to wait is woken first

    @property
    def bounded(self) -> bool:
        return self.limit != sys.maxsize

    def must_wait(self, owner: Any) -> bool:
        """May a connection of ``owner`` not start reading another frame now?"""
        return self.used >= self.limit or self.owned.get(owner, 0) >= self.share

    def charge(self, owner: Any, n: int) -> None:
        """``owner`` holds ``n`` more bytes (fewer, when negative)."""
        owned = self.owned
        left = owned.get(owner, 0) + n
        if left:
            owned[owner] = left
        else:
            owned.pop(owner, None)

    def wait(self, conn: Any, owner: Any) -> None:
        self.waiters[conn] = owner

    def forget(self, conn: Any) -> None:
        self.waiters.pop(conn, None)

    def release(self, n: int, owner: Any) -> None:
        """Give back ``n`` bytes ``owner`` held."""
        self.used -= n
        self.charge(owner, -n)
        if self.waiters:
            self.wake()

    def wake(self) -> None:
        """Tell the waiting connections that need not wait any more (an owner at its share keeps
        waiting however much others give back)."""
        if self.used >= self.limit:
            return
        ready = [conn for conn, owner in self.waiters.items() if not self.must_wait(owner)]
        for conn in ready:
            del self.waiters[conn]
            conn.memory_available()


class ConnectionGuard:
    """A broker's request memory, connection sweep, close counters and close log lines."""

    def __init__(self, broker: "GuardHost") -> None:
        self.broker = broker
        config = broker.config
        self.memory = RequestMemory(int(config.get("queued.max.request.bytes")),
                                    int(config.get("shoal.queued.max.request.bytes.per.principal")))
        self.queued_response_max = int(config.get("shoal.connection.queued.response.max.bytes"))
        self._sasl_max_receive: dict[str, int] = {}
        self.closed: dict[str, int] = dict.fromkeys(REASONS, 0)
        self._timeouts: tuple[int, dict[str, Timeouts]] = (-1, {})
        self._sweeper: asyncio.Task[None] | None = None
        self._unlogged: dict[tuple[str, str], tuple[int, list[str]]] = {}  # (reason, text) -> (count, peers)
        self._last_log = -1e18
        self._log_timer: asyncio.TimerHandle | None = None

    @classmethod
    def for_broker(cls, broker: "GuardHost") -> "ConnectionGuard":
        guard = getattr(broker, "connection_guard", None)
        if guard is None:
            guard = broker.connection_guard = cls(broker)  # type: ignore[attr-defined]
        return guard

    def timeouts(self, listener: str) -> Timeouts:
        """The listener's timeouts at the current config (dynamic ``connections.max.idle.ms``)."""
        epoch = self.broker.metadata.image.epoch
        cached_epoch, by_listener = self._timeouts
        if cached_epoch != epoch:
            by_listener = {}
            self._timeouts = (epoch, by_listener)
        t = by_listener.get(listener)
        if t is None:
            t = by_listener[listener] = Timeouts.from_config(self.broker.config, listener)
        return t

    def sasl_max_receive(self, listener: str) -> int:
        """``sasl.server.max.receive.size`` of the listener: the largest frame before SASL
        authentication has completed."""
        size = self._sasl_max_receive.get(listener)
        if size is None:
            size = self._sasl_max_receive[listener] = int(
                self.broker.config.for_listener(listener, "sasl.server.max.receive.size"))
        return size

    # -- the sweep ------------------------------------------------------------------------------

    def watch(self) -> None:
        """A connection exists: make sure the sweep runs (it stops when none is left)."""
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_while_connected())

    def unwatch(self) -> None:
        """A connection is gone: stop the sweep when it was the last one."""
        if self._sweeper is not None and not self.broker.connections:
            self._sweeper.cancel()
            self._sweeper = None  # (a connection made meanwhile starts another)

    async def _sweep_while_connected(self) -> None:
        try:
            while self.broker.connections:
                listeners = {c.listener for c in self.broker.connections}
                await asyncio.sleep(min(self.timeouts(name).interval_s for name in listeners))
                self.sweep(self.broker.clock.monotonic())
        finally:
            if self._sweeper is asyncio.current_task():
                self._sweeper = None

    def sweep(self, now: float) -> int:
        """Close every connection whose time is up; how many were closed."""
        closed = 0
        for conn in list(self.broker.connections):
            t = self.timeouts(conn.listener)
            reason = conn.sweep(now, t)
            if reason is not None:
                conn.close()
                self.note_close(reason, conn.peer, conn.listener, t.describe(reason), now)
                closed += 1
        self.flush_log(now=now)
        return closed

    # -- closes: counters and one log line per reason per second ---------------------------------

    def _flush_later(self) -> None:
        self._log_timer = None
        self.flush_log()

    def note_close(self, reason: str, peer: str, listener: str, text: str, now: float | None = None) -> None:
        self.closed[reason] = self.closed.get(reason, 0) + 1
        count, peers = self._unlogged.get((reason, text), (0, []))
        if len(peers) < LOG_EXAMPLES:
            peers.append(f"{peer} on {listener}")
        self._unlogged[(reason, text)] = (count + 1, peers)
        self.flush_log(now=now)

    def flush_log(self, now: float | None = None) -> None:
        """Log the closes not logged yet, unless a line was written less than a second ago (then
        a timer writes them when the second is over)."""
        if not self._unlogged:
            return
        if now is None:
            now = self.broker.clock.monotonic()
        wait = self._last_log + LOG_INTERVAL_S - now
        if wait > 0:
            if self._log_timer is None:
                self._log_timer = asyncio.get_running_loop().call_later(wait, self._flush_later)
            return
        self._last_log = now
        unlogged, self._unlogged = self._unlogged, {}
        for (reason, text), (count, peers) in unlogged.items():
            more = f" and {count - len(peers)} more" if count > len(peers) else ""
            log.log(logging.INFO if reason == IDLE else logging.WARNING, "closed %d connection%s %s: %s%s", count, "" if count == 1 else "s", text,
                        ", ".join(peers), more)


# -- metrics (shoal.admin.metrics registers this collector) ---------------------------------------

class ConnectionCollector:
    """A prometheus_client collector: what connections hold, which are paused and why, the request
    memory, and the connections the broker closed, by reason (see shoal.admin.metrics)."""

    def __init__(self, broker: "GuardHost") -> None:
        self.broker = broker

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        queued = 0
        paused = dict.fromkeys(("quota", "requests", "responses", "memory"), 0)
        for conn in list(self.broker.connections):
            queued += conn.queued_response_bytes
            reason = conn.paused_because
            if reason is not None:
                paused[reason] += 1
        yield GaugeMetricFamily("shoal_connection_queued_response_bytes",
                                "bytes of responses connections hold: not yet sent, or waiting behind an earlier one",
                                value=queued)
        fam = GaugeMetricFamily("shoal_connections_paused", "connections the broker does not read, by reason",
                                labels=["reason"])
        for reason, n in paused.items():
            fam.add_metric([reason], n)
        yield fam
        guard = ConnectionGuard.for_broker(self.broker)
        yield GaugeMetricFamily("shoal_queued_request_bytes",
                                "bytes of requests read and not yet answered (queued.max.request.bytes)",
                                value=guard.memory.used)
        if guard.memory.bounded:
            yield GaugeMetricFamily("shoal_queued_request_bytes_limit", "queued.max.request.bytes",
                                    value=guard.memory.limit)
        closed = CounterMetricFamily("shoal_connections_closed", "connections closed by the broker, by reason",
                                     labels=["reason"])
        for reason in REASONS:
            closed.add_metric([reason], guard.closed.get(reason, 0))
        yield closed
