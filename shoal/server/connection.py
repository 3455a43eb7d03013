"""One client connection: framing, dispatch, and responses in request order.

The asyncio layer only moves bytes: ``data_received`` cuts frames out of the stream and hands each
to ``_dispatch``, which runs the handler in its own task. A frame of ``LARGE_FRAME`` bytes or more
(a Produce of a batch, typically a megabyte) is read straight into a buffer of its own
(``asyncio.BufferedProtocol``: ``get_buffer`` returns the rest of it) and decoded from there, so
its bytes are not copied between the socket and the decoder; smaller reads go through one scratch
buffer per loop thread. Requests on one connection may be
processed concurrently (a long-poll Fetch must not hold back a Heartbeat), but responses leave in
request order: each request takes a slot in ``_pending`` and the head of that queue is written as
soon as it is ready (Redpanda's "processing out of order, responses in order").

Handlers start at once, inside ``data_received`` (an eager start: no Task unless the handler has
to wait), so everything a handler does before its first ``await`` happens in request order;
Produce appends before it awaits anything. Code before that first ``await`` runs outside any Task
(``asyncio.current_task()`` is None there).

Bad input never takes the broker down: a frame that cannot be a request closes this connection with
one log line naming the client and the reason; a known API at a version we do not serve gets that
API's response with UNSUPPORTED_VERSION; everything else on other connections goes on.

Authentication (``shoal.auth``): on an SSL listener the principal comes from the client
certificate when the connection is made; on a SASL listener a ``SaslSession`` gates every request
before it is decoded (only ApiVersions, SaslHandshake and SaslAuthenticate before authentication;
nothing but re-authentication once ``connections.max.reauth.ms`` has expired the session) and
anything it refuses closes the connection with one log line.

Quotas (``shoal.quotas.manager``): handlers record byte rates and leave their throttle in
``ctx.throttle_ms``; when the response is ready the request's handling time is recorded against
the request quota (KIP-124; the time of every step of the handler, not the time it waits), the
larger throttle goes into the response's ``throttle_time_ms``, and the connection is *muted*:
nothing more is read from it until the throttle time has passed (Kafka mutes the channel), which
is what holds back clients that ignore ``throttle_time_ms``. Requests already in the buffer wait
too. A client that throttles itself (KIP-219: Produce v6+, Fetch v8+, ...) gets its response at
once; an older version gets it when the mute ends.

Bounds (``shoal.server.bounds``): a connection stops reading, and stops dispatching the requests
already in its buffer, while any of these holds, and goes on when none does:

- it is muted (quotas, above);
- ``MAX_IN_FLIGHT`` of its requests are unanswered (read, and their responses not yet handed to
  the socket; resumes below half);
- its responses are not being taken: the transport's write buffer is over
  ``shoal.connection.queued.response.max.bytes`` (asyncio's ``pause_writing``; resumes when it
  drains to a quarter), or as many bytes of finished responses wait behind an earlier one or in
  the outbox (zero-copy Fetch on plaintext: file regions waiting for ``sendfile`` and the
  responses behind them, ``shoal.server.sendfile``);
- the broker's request memory (``queued.max.request.bytes``) is used up.

So a client that pipelines requests and reads nothing costs the broker at most about
``shoal.connection.queued.response.max.bytes`` twice over, plus the responses of the requests
being handled when it stopped (at most ``MAX_IN_FLIGHT``; Kafka allows one). Before a SASL
connection has authenticated it may send frames of ``sasl.server.max.receive.size`` at most (a
larger one closes it). Idle, stalled (a frame started and not finished) and unauthenticated
connections are closed by the broker's periodic sweep (``shoal.server.bounds``); the connection
only raises flags for it (``_active``, ``_framed``), no timers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from shoal.handlers.context import RequestContext
from shoal.protocol import codec
from shoal.protocol.errors import ErrorCode, error_response
from shoal.protocol.regions import RegionFrame
from shoal.quotas.manager import client_throttles, with_throttle_time
from shoal.server.bounds import FRAME_TOO_LARGE, ConnectionGuard, Liveness, Timeouts
from shoal.server.sendfile import Outbox

if TYPE_CHECKING:
    from shoal.server.ports import ConnectionHost

log = logging.getLogger("shoal.server")

_I32 = struct.Struct(">i")
# Stop reading from a client that has this many requests unanswered (Kafka's per-connection mute
# is 1; librdkafka pipelines up to max.in.flight, so allow a little more).
MAX_IN_FLIGHT = 32
# scheduler: requests of one connection run back to back in its turn
SCHED_BURST = 8
# A frame from this size on is read straight into a buffer of its own (BufferedProtocol's
# get_buffer) and decoded from it: a megabyte Produce is not copied on its way to the decoder.
LARGE_FRAME = 64 * 1024
READ_SIZE = 64 * 1024  # what one read of smaller frames takes, into the loop thread's scratch buffer
_scratch = threading.local()


def _scratch_buffer() -> memoryview:
    """The loop thread's read buffer: each read is taken out of it (buffer_updated) before the
    next connection's read, so one per thread serves every connection."""
    v: memoryview | None = getattr(_scratch, "view", None)
    if v is None:
        v = _scratch.view = memoryview(bytearray(READ_SIZE))
    return v


class _Slot:
    __slots__ = ("data", "ready", "close_after", "size", "m")

    def __init__(self, size: int = 0) -> None:
        self.data: bytes | None = None
        self.ready = False
        self.close_after = False
        self.size = size  # bounds: the request's bytes, held in the request memory until answered
        self.m: Any = None  # metrics: shoal.observability.requests.RequestRecord


class _Continue:
    """Awaitable that goes on driving a coroutine already started outside any Task.

    The coroutine has yielded ``first`` (the future it waits on); the Task running us sees that
    future, and every later send/throw is passed through, exactly as if the Task had run the
    coroutine from the start.

    quotas: with ``ctx`` given, the time of every step is added to ``ctx.handling_ns`` (KIP-124
    request time: the time the broker works on the request, not the time it waits).
    """

    __slots__ = ("coro", "first", "ctx")

    def __init__(self, coro: Any, first: Any, ctx: RequestContext | None = None) -> None:
        self.coro = coro
        self.first = first
        self.ctx = ctx

    def __await__(self) -> Any:
        coro = self.coro
        yielded = self.first
        ctx = self.ctx
        while True:
            try:
                value = yield yielded
            except BaseException as e:  # cancellation or anything thrown in by the Task
                step, value = coro.throw, e
            else:
                step = coro.send
            if ctx is not None:
                ctx.step_start_ns = ctx.services.clock.nanos()
            try:
                yielded = step(value)
            except StopIteration as stop:
                return stop.value
            finally:
                if ctx is not None:
                    ctx.handling_ns += ctx.services.clock.nanos() - ctx.step_start_ns


async def _finish(coro: Any, first: Any, ctx: RequestContext | None = None) -> Any:
    return await _Continue(coro, first, ctx)


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, broker: "ConnectionHost", listener: str) -> None:
        self.broker = broker
        self.listener = listener
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._buf = bytearray()  # bytes read and not yet framed
        self._large: bytearray | None = None  # a large frame (without its length) being read into place
        self._large_size = 0  # its size
        self._large_len = 0  # how much of it has arrived
        self._pending: deque[_Slot] = deque()
        self._in_flight = 0  # requests whose handler has not finished
        self._paused = False  # reading is paused: one of the reasons in _update_reading holds
        self._pending_full = False  # bounds: MAX_IN_FLIGHT requests unanswered
        self._mute: asyncio.TimerHandle | None = None  # quotas: muted until this fires
        self._mute_until = 0.0  # its loop time (uvloop's call_at of a time past is a Handle without when())
        self._closed = False
        self._max_request = int(broker.config.get("socket.request.max.bytes"))
        # -- bounds (shoal.server.bounds): responses not taken, request memory, the sweep
        guard = self._guard = ConnectionGuard.for_broker(broker)
        self._memory = guard.memory
        self._queue_max = guard.queued_response_max
        self._queued = 0  # bytes of finished responses waiting behind an earlier one
        self._write_paused = False  # the transport's write buffer is over _queue_max
        self._memory_wait = False  # waiting for request memory (queued.max.request.bytes)
        self._reserved = 0  # request memory taken for the frame being read: what has arrived of it
        self._announced = 0  # its size as its length says, charged to the owner's share
        self._held = 0  # request memory held by frames read and not answered
        self._owner: Any = (None, "User:ANONYMOUS")  # whose share of the request memory (bind_principal)
        self._framing = False  # inside _frames
        self._preauth = False  # a SASL connection before authentication: sasl.server.max.receive.size
        self._active = False  # read something since the last sweep
        self._framed = False  # completed a frame since the last sweep
        self._live = Liveness(broker.clock.monotonic())
        self._tasks: set[asyncio.Task[Any]] = set()
        self.principal = "User:ANONYMOUS"
        self.tenant: Any = None
        self.sasl: Any = None  # auth: shoal.auth.SaslSession on SASL listeners
        self._scope: Any = None  # tenancy: the last Scope (reused while the image is the same)
        # state a handler ties to this connection, released when it closes (a follower's fetch
        # session: shoal.replica.sessions)
        self.closers: list[Callable[[], None]] = []
        self.client_software: tuple[str, str] | None = None  # ApiVersions v3+
        self.replica_session: Any = None  # a follower's fetch session (shoal.handlers.fetch)
        self.replica_order: Any = None  # its pipelined fetches' order (shoal.replica.read)
        # zero-copy Fetch (shoal.server.sendfile): plaintext connections send record sets with
        # sendfile; the outbox keeps responses in order behind a region being sent
        self.zero_copy = False
        self._outbox: Outbox | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  (uvloop's is not a subclass)
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"
        self.broker.connections.add(self)
        if self.broker.metrics is not None:  # metrics (shoal.observability)
            self.broker.metrics.connection_opened(self.listener)
        # -- bounds: pause_writing past this many unsent response bytes; the sweep watches us
        transport.set_write_buffer_limits(high=self._queue_max, low=self._queue_max // 4)  # type: ignore[attr-defined]
        self._guard.watch()
        security = self.broker.listener_security.get(self.listener)
        sock = transport.get_extra_info("socket")
        plaintext = (security is None or security.ssl_context is None) and transport.get_extra_info("sslcontext") is None
        self.zero_copy = bool(plaintext and sock is not None and hasattr(os, "sendfile")
                              and self.broker.config.get("shoal.fetch.zero.copy"))
        self._outbox = Outbox(transport, sock.fileno() if self.zero_copy else -1, self._outbox_moved,
                              self._outbox_failed)
        # -- auth: TLS principal (SSL listeners), SASL session (SASL listeners)
        if security is not None:
            if security.sasl:
                self.sasl = security.session(self.broker.metadata)
                self._preauth = True  # bounds: handshake-sized frames until authenticated
                self._max_request = min(self._max_request, self._guard.sasl_max_receive(self.listener))
            elif security.ssl_context is not None:
                from shoal.auth import MappingError

                try:
                    self.principal = security.tls_principal(transport)
                except MappingError as e:
                    self._reject(str(e))
                    return
                self.bind_principal(self.principal)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.broker.connections.discard(self)
        if self._mute is not None:
            self._mute.cancel()
            self._mute = None
        for t in list(self._tasks):
            t.cancel()
        # -- bounds: give back the request memory, drop what was read or waits to be written
        self._memory.forget(self)
        held, reserved, announced = self._held, self._reserved, self._announced
        self._held = self._reserved = self._announced = 0
        if held or reserved or announced:
            self._memory.used -= reserved  # what had arrived of a partial frame
            self._memory.charge(self._owner, -announced)  # and its announced size
            self._memory.release(held, self._owner)
        for s in self._pending:  # zero copy: responses never sent give back their regions
            if isinstance(s.data, RegionFrame):
                s.data.close()
        self._pending.clear()
        self._queued = 0
        if self._outbox is not None:
            self._outbox.close()
        self._buf = bytearray()
        self._large = None
        self._guard.unwatch()
        closers, self.closers = self.closers, []
        for close in closers:
            try:
                close()
            except Exception:
                log.exception("releasing the state of connection %s failed", self.peer)

    def get_buffer(self, sizehint: int) -> memoryview:
        """asyncio.BufferedProtocol: where the next read goes (the rest of a large frame, or the
        scratch buffer)."""
        if self._large is not None and self._large_len < self._large_size:
            return memoryview(self._large_room(self._large_len + 1))[self._large_len :]
        return _scratch_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self._large is not None and self._large_len < self._large_size:  # read in place
            self._large_len += nbytes
            self._active = True
            if not self._paused:
                self._frames()
            return
        self.data_received(_scratch_buffer()[:nbytes])

    def _large_room(self, need: int) -> bytearray:
        """The large frame's buffer, with room for ``need`` bytes: it grows by doubling as the
        frame arrives (one copy of what has arrived each time, less than the frame in all), so
        what a frame's length announces is never allocated before its bytes come (bounds: the
        request memory counts arrived bytes)."""
        large = self._large
        assert large is not None
        if need <= len(large):
            return large
        grown = bytearray(min(self._large_size, max(need, 2 * len(large))))
        grown[: self._large_len] = memoryview(large)[: self._large_len]
        self._large = grown
        return grown

    def data_received(self, data: bytes | memoryview) -> None:
        if self._large is not None and self._large_len < self._large_size:  # the rest of a large frame first
            k = min(len(data), self._large_size - self._large_len)
            self._large_room(self._large_len + k)[self._large_len : self._large_len + k] = data[:k]
            self._large_len += k
            data = data[k:]
        if len(data):
            self._buf += data
        self._active = True
        if not self._paused:
            self._frames()

    def _frames(self) -> None:
        """Dispatch the whole frames in the buffer while reading is not paused (quotas, responses
        not taken, request memory; see _update_reading)."""
        memory = self._memory
        large = self._large
        if large is not None:
            if self._large_len < self._large_size or self._paused:  # bounds: what has arrived of it
                arrived = 4 + self._large_len
                memory.used += arrived - self._reserved
                self._reserved = arrived
                return
            self._large = None  # whole: cut as below, and decoded from where it was read
            size = self._large_size
            memory.used += size - self._reserved
            memory.charge(self._owner, size - self._announced)
            self._held += size
            self._reserved = self._announced = 0
            self._framed = True
            self._framing = True
            try:
                self._dispatch(memoryview(large).toreadonly())  # (its buffer is exactly its size)
            finally:
                self._framing = False
            if self._closed or self._paused:
                return
        buf = self._buf
        pos = 0
        n = len(buf)
        # bounds: request memory is checked once per read, before a frame starts (one that has
        # started reads on to its end: the pool is not strict), and taken as bytes arrive; a SASL
        # connection before authentication never waits for it.
        if not self._reserved and not self._preauth and memory.must_wait(self._owner):
            self._wait_for_memory()
            return
        taken = 0
        self._framing = True
        try:
            while n - pos >= 4 and not self._paused:
                (size,) = _I32.unpack_from(buf, pos)
                if (size < 0 or size > self._max_request) and self._frame_too_large(size):
                    return
                if n - pos - 4 < size:
                    break
                # one copy (a slice of the bytearray would be a second); the view is gone by the
                # time the buffer is resized below
                frame = bytes(memoryview(buf)[pos + 4 : pos + 4 + size])
                pos += 4 + size
                taken += size
                self._dispatch(frame)
                if self._closed:
                    return
        finally:
            self._framing = False
            if taken:  # the first frame cut was the one reserved while partial, if any
                memory.used += taken - self._reserved
                memory.charge(self._owner, taken - self._announced)
                self._held += taken
                self._reserved = self._announced = 0
        if pos:
            self._framed = True
            del buf[:pos]
        if n - pos >= 4 and not self._preauth:  # a frame partly read: what has arrived of it
            if not self._announced:
                (size,) = _I32.unpack_from(buf, 0)
                if not 0 < size <= self._max_request:
                    return
                memory.charge(self._owner, size)  # its owner's share counts it whole
                self._announced = size
            arrived = n - pos
            memory.used += arrived - self._reserved
            self._reserved = arrived
            if self._announced >= LARGE_FRAME and arrived - 4 < self._announced:  # the rest is read into place
                have = arrived - 4
                large = self._large = bytearray(min(self._announced, max(have * 2, LARGE_FRAME)))
                self._large_size = self._announced
                self._large_len = have
                large[:have] = memoryview(buf)[4:arrived]
                self._buf = bytearray()

    def _frame_too_large(self, size: int) -> bool:
        """A frame's size is over this connection's limit: close it (True), unless it has
        authenticated since the pre-authentication limit was set and the size is allowed now."""
        if self._preauth and self.sasl.authenticated:
            self._lift_preauth_limit()
            if 0 <= size <= self._max_request:
                return False
        name = "sasl.server.max.receive.size, before SASL authentication" if self._preauth \
            else "socket.request.max.bytes"
        self._guard.note_close(FRAME_TOO_LARGE, self.peer, self.listener,
                               f"for a request size outside 0..{self._max_request} ({name})")
        self.close()
        return True

    def _lift_preauth_limit(self) -> None:
        self._preauth = False
        self._max_request = int(self.broker.config.get("socket.request.max.bytes"))

    def eof_received(self) -> bool | None:
        return None

    # -- request pipeline -----------------------------------------------------------------

    def bind_principal(self, principal: str) -> None:
        """Authentication is done: this connection acts as ``principal``, in its user's tenant
        (fixed for the connection's life; losing it closes the connection)."""
        from shoal.tenancy.scope import tenant_of

        self.principal = principal
        self.tenant = tenant_of(self.broker.metadata.image, principal)
        self._scope = None
        owner = (self.tenant, None) if self.tenant is not None else (None, principal)  # bounds: its share
        if owner != self._owner:
            mine = self._held + self._announced  # (the SASL exchange's frames, still unanswered)
            self._memory.charge(self._owner, -mine)
            self._memory.charge(owner, mine)
            self._owner = owner
        if self._preauth:
            self._lift_preauth_limit()

    def scope(self) -> Any:
        """This connection's ``Scope`` at the current image; None (and the connection closes)
        when its tenant or its user's membership is gone."""
        image = self.broker.metadata.image
        s = self._scope
        if s is not None and s.epoch == image.epoch:
            return s
        from shoal.tenancy.scope import resolve

        s = resolve(image, self.broker.config, self.principal, self.peer.rpartition(":")[0], self.tenant)
        if s is None:
            self._reject(f"principal {self.principal} no longer belongs to tenant {self.tenant}")
            return None
        self._scope = s
        return s

    def _reject(self, reason: str) -> None:
        """Close this connection because of what the client sent; one log line says why,
        rate-limited per client address and kind of reason (its first word; shoal.logutil)."""
        self.broker.client_log.warning(
            ("reject", self.peer.rpartition(":")[0], reason.partition(" ")[0]),
            "closing connection from %s%s on %s: %s", self.peer, self.software_note(), self.listener, reason,
        )
        self.close()

    def software_note(self) -> str:
        """`` (librdkafka 2.5.0)``: the client software the client named in ApiVersions (KIP-511), for
        the log lines about it; "" before it did."""
        return f" ({self.client_software[0]} {self.client_software[1]})" if self.client_software else ""

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self.transport is not None:
                self.transport.close()

    # -- scheduler (shoal.server.scheduler): a request runs at once while the broker keeps up;
    # otherwise it waits in this connection's queue, and the connection in its tenant's flow.
    _sched_q: deque[tuple[bytes | memoryview, int]] | None = None  # requests waiting for the scheduler, in order
    _sched_key: Any = None  # the flow they are counted in
    _sched_in = False  # in the scheduler's round (False: nothing waits, or parked while muted)
    _sched_full = False  # reading paused: this connection's or its tenant's queue is full

    def _dispatch(self, frame: bytes | memoryview) -> None:
        sched = self.broker.scheduler
        if self._sched_q is None and sched.eager():
            start = sched.nanos()
            self._process(frame)
            sched.ran(sched.nanos() - start)
            return
        q = self._sched_q
        if q is None:
            q = self._sched_q = deque()
            self._sched_key = self.scheduler_key()
        q.append((frame, sched.nanos()))  # metrics: when it started to wait (queue time)
        full = sched.count(self._sched_key, 1)
        if not self._sched_in:
            self._sched_unpark()  # into its flow (or parked, when muted)
        if (full or len(q) >= MAX_IN_FLIGHT) and not self._sched_full:
            self._sched_full = True
            self._update_reading()

    def scheduler_key(self) -> Any:
        """The scheduler's flow: the tenant, or the principal outside any tenant."""
        return self.tenant or self.principal

    def run_next(self) -> bool:
        """The scheduler's turn: run up to ``SCHED_BURST`` waiting requests (a few responses
        written to one socket together cost less than one each to many); True if more wait (see
        shoal.server.scheduler). A muted connection is parked until its mute ends, and its
        tenant waits behind the others meanwhile (the request quota, applied before work)."""
        sched = self.broker.scheduler
        for _ in range(SCHED_BURST):
            q = self._sched_q
            if q is None or self._closed:
                self._sched_drop()
                return False
            if self._mute is not None:
                self._sched_park()
                return False
            if self._responses_blocked():  # bounds: parked until the client takes its responses
                self._sched_in = False
                self._sched_parked_io = True
                return False
            frame, queued_ns = q.popleft()
            sched.count(self._sched_key, -1)
            if not q:
                self._sched_q = None
            self._process(frame, queued_ns)
            if self._mute is not None:
                sched.hold(self.scheduler_key(), self._mute_until - asyncio.get_running_loop().time())
        if self._sched_q is None or self._closed:
            self._sched_drop()
            return False
        if self._mute is not None:
            self._sched_park()
            return False
        if self._sched_full and len(self._sched_q) < MAX_IN_FLIGHT // 2 \
                and self.broker.scheduler.queued.get(self._sched_key, 0) < sched.tenant_queue_max // 2:
            self._sched_full = False
            self._update_reading()
        return self._sched_in

    def _sched_drop(self) -> None:
        """Nothing waits (or the connection closed: forget what did)."""
        q = self._sched_q
        if q:
            self.broker.scheduler.count(self._sched_key, -len(q))
        self._sched_q = None
        self._sched_in = False
        if self._sched_full:
            self._sched_full = False
            self._update_reading()

    def _sched_park(self) -> None:
        assert self._mute is not None
        self._sched_in = False
        asyncio.get_running_loop().call_at(self._mute_until, self._sched_unpark)

    def _sched_unpark(self) -> None:
        if self._sched_in:
            return
        if self._closed or self._sched_q is None:
            self._sched_drop()
        elif self._mute is not None:  # muted again meanwhile
            self._sched_park()
        else:
            self._sched_in = True
            self.broker.scheduler.submit(self, self.scheduler_key())

    def _process(self, frame: bytes | memoryview, queued_ns: int = 0) -> None:
        """Decode and start one request (in request order on this connection); ``queued_ns``:
        when it began to wait in the scheduler's queue (0: it did not)."""
        # quotas: measure the time spent on the request when a request quota may apply (KIP-124);
        # metrics: always while they are on
        measure = self.broker.quotas.request.active
        metrics = self.broker.metrics
        timed = measure or metrics is not None
        start_ns = self.broker.clock.nanos() if timed else 0
        try:
            api_key, api_version, correlation_id = codec.peek_header(frame)
        except codec.MalformedRequest as e:
            self._reject(str(e))
            return
        if self.sasl is not None:  # -- auth gate
            refused = self.sasl.gate(api_key, self.broker.clock.now_ms())
            if refused is not None:
                self._reject(refused)
                return
        spec = self.broker.registry.lookup(api_key)
        if spec is None:
            self._reject(f"unknown api key {api_key} (correlation id {correlation_id})")
            return
        slot = _Slot(len(frame))
        if not spec.min_version <= api_version <= spec.max_version:
            self._unsupported_version(slot, api_key, api_version, correlation_id, frame)
            return
        try:
            header, request = codec.decode_request(api_key, api_version, frame)
        except codec.MalformedRequest as e:
            self._reject(str(e))
            return
        scope = self.scope()
        if scope is None:
            return
        ctx = RequestContext(
            services=self.broker.services,
            header=header,
            client_address=self.peer,
            listener=self.listener,
            principal=self.principal,
            tenant=self.tenant,
            scope=scope,
        )
        ctx.connection = self
        ctx.request_size = len(frame)
        if timed:
            ctx.step_start_ns = start_ns
        if metrics is not None:
            slot.m = metrics.begin(ctx, request, queued_ns or start_ns, start_ns)
        self._pending.append(slot)
        self._track_in_flight(+1)
        # Start the handler right here (an "eager task"): most requests finish without waiting,
        # and then no Task is created at all. One that does wait continues in a Task.
        coro = self._run(spec.handler, ctx, request, slot, measure)
        try:
            awaited = coro.send(None)
        except StopIteration:
            return
        if timed:
            ctx.handling_ns += self.broker.clock.nanos() - start_ns
        task = asyncio.ensure_future(_finish(coro, awaited, ctx if timed else None))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _unsupported_version(
        self, slot: _Slot, api_key: int, api_version: int, correlation_id: int, frame: bytes | memoryview
    ) -> None:
        spec = self.broker.registry.lookup(api_key)
        assert spec is not None
        if api_key == codec.API_VERSIONS_KEY:
            # KIP-511: answer a too-new ApiVersions with v0 carrying UNSUPPORTED_VERSION and our
            # ranges, so the client can retry with a version we know.
            from shoal.handlers.api_versions import api_versions_v0_error

            body = api_versions_v0_error(self.broker.registry)
            self._pending.append(slot)
            self._complete(slot, codec.encode_response(correlation_id, api_key, 0, body))
            return
        known = codec.kio_versions(api_key)
        if known and known[0] <= api_version <= known[1]:
            log.warning(
                "client %s%s sent api %d v%d, outside the supported %d..%d; answering UNSUPPORTED_VERSION",
                self.peer, self.software_note(), api_key, api_version, spec.min_version, spec.max_version,
            )
            body = error_response(codec.response_type(api_key, api_version), ErrorCode.unsupported_version)
            self._pending.append(slot)
            self._complete(slot, codec.encode_response(correlation_id, api_key, api_version, body))
            return
        self._reject(f"api {api_key} v{api_version} is not a version this broker can parse")

    async def _run(self, handler: Any, ctx: RequestContext, request: Any, slot: _Slot, measure: bool) -> None:
        hdr = ctx.header
        throttle_ms = 0
        response: Any = None
        failed = False
        try:
            response = await handler(ctx, request)
            if measure or ctx.throttle_ms:  # quotas: request time and byte-rate throttles
                nanos = ctx.thread_ns(self.broker.clock.nanos()) if measure else None
                throttle_ms = self.broker.quotas.response_throttle(ctx, nanos, self.broker.clock.now_ms())
                if throttle_ms and response is not None:
                    response = with_throttle_time(response, throttle_ms)
            if ctx.no_response:
                data = None
            else:
                data = codec.encode_response(hdr.correlation_id, hdr.api_key, hdr.api_version, response)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.broker.client_log.exception(  # a traceback once per api and error per interval
                ("handler", hdr.api_key, type(e).__name__),
                "handler for api %d v%d failed on a request from %s%s; answering UNKNOWN_SERVER_ERROR",
                hdr.api_key, hdr.api_version, self.peer, self.software_note(),
            )
            failed = True
            try:
                body = error_response(
                    codec.response_type(hdr.api_key, hdr.api_version), ErrorCode.unknown_server_error
                )
                data = codec.encode_response(hdr.correlation_id, hdr.api_key, hdr.api_version, body)
            except Exception:
                log.exception("cannot even build an error response; closing %s", self.peer)
                self.close()
                return
        finally:
            self._track_in_flight(-1)
        if slot.m is not None:  # metrics: sizes, times, errors, per-topic bytes
            self.broker.metrics.answered(slot.m, ctx, request, response, data, throttle_ms, failed)
        close_after = ctx.close_after
        if throttle_ms:
            self._throttle(slot, data, close_after, throttle_ms, client_throttles(hdr.api_key, hdr.api_version))
            return
        self._complete(slot, data, close_after=close_after)

    # -- quotas: muting -----------------------------------------------------------------------

    def _throttle(self, slot: _Slot, data: bytes | None, close_after: bool, throttle_ms: int,
                  client_throttles: bool) -> None:
        """Mute the connection for ``throttle_ms`` (read nothing more from it); a client that
        throttles itself (KIP-219) gets its response now, an older one when the mute ends."""
        self._mute_for(throttle_ms)
        if data is None or client_throttles:
            self._complete(slot, data, close_after=close_after)
        else:
            asyncio.get_running_loop().call_later(throttle_ms / 1000.0, self._complete, slot, data, close_after)

    def _mute_for(self, ms: int) -> None:
        if self._closed or self.transport is None:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + ms / 1000.0
        if self._mute is not None:
            if self._mute_until >= until:
                return
            self._mute.cancel()
        self._mute = loop.call_at(until, self._unmute)
        self._mute_until = until
        self._update_reading()

    def _unmute(self) -> None:
        self._mute = None
        self._update_reading()  # (and the requests that arrived before the mute)

    def _update_reading(self) -> None:
        """Read, and dispatch what is buffered, unless muted, too many requests are unanswered,
        the client does not take its responses, or the request memory is used up."""
        pause = (self._mute is not None or self._pending_full or self._write_paused
                 or self._queued + self._outbox_bytes() >= self._queue_max or self._memory_wait
                 or self._sched_full)  # scheduler: this connection's or its tenant's queue is full
        if pause == self._paused or self._closed or self.transport is None:
            return
        self._paused = pause
        if pause:
            self.transport.pause_reading()
            return
        self.transport.resume_reading()
        if (self._buf or self._large is not None) and not self._framing:
            self._frames()

    def _complete(self, slot: _Slot, data: bytes | None, close_after: bool = False) -> None:
        slot.data = data
        slot.ready = True
        slot.close_after = close_after
        if self._closed:  # connection_lost gives back the request memory
            return
        pending = self._pending
        if pending[0] is not slot:  # waits behind an earlier response
            if data is not None:
                self._queued += len(data)
                if self._queued >= self._queue_max:
                    self._update_reading()
            return
        transport = self.transport
        answered = queued = 0
        while pending and pending[0].ready:
            s = pending.popleft()
            answered += s.size
            if self._closed or transport is None:
                continue
            if s.data is not None:
                if s is not slot:
                    queued += len(s.data)
                self._write(s.data)
            if s.m is not None:  # metrics: the request is done
                self.broker.metrics.sent(s.m)
            if s.close_after:
                self._close_after_sent()
        self._held -= answered
        self._memory.release(answered, self._owner)
        if queued:
            self._queued -= queued
        if self._paused:
            if self._pending_full and len(pending) < MAX_IN_FLIGHT // 2:
                self._pending_full = False
            self._update_reading()
        if self._sched_parked_io:
            self._responses_flow()

    # -- zero copy (shoal.server.sendfile): responses with file regions -----------------------------

    def _write(self, data: Any) -> None:
        outbox = self._outbox
        if outbox is None:
            if isinstance(data, RegionFrame):
                data = data.materialize()
            assert self.transport is not None
            self.transport.write(data)
        else:
            outbox.write(data)
            if outbox.bytes >= self._queue_max and not self._paused:
                self._update_reading()  # the client is not taking them: read nothing more for now

    def _outbox_bytes(self) -> int:
        return self._outbox.bytes if self._outbox is not None else 0

    def _outbox_moved(self) -> None:
        """Part of a response left the outbox: the client is reading (the sweep's liveness), and
        the connection may read requests again."""
        self._active = True
        if self._closed:
            return
        if self._close_when_sent and not self._outbox_bytes():
            self.close()
            return
        if self._paused:
            self._update_reading()
        if self._sched_parked_io:
            self._responses_flow()

    def _outbox_failed(self, reason: str) -> None:
        log.info("closing connection %s: %s", self.peer, reason)
        self.close()

    _close_when_sent = False

    def _close_after_sent(self) -> None:
        """Close once what was written has gone (the outbox may still hold regions)."""
        if self._outbox_bytes():
            self._close_when_sent = True
        else:
            self.close()

    # -- bounds: flow control, request memory, the sweep -----------------------------------------

    def pause_writing(self) -> None:
        """asyncio: the transport holds more than ``_queue_max`` unsent bytes."""
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()
        if self._sched_parked_io:
            self._responses_flow()

    _sched_parked_io = False  # scheduler: parked while _responses_blocked()

    def _responses_blocked(self) -> bool:
        """The client is not taking its responses (or too many are unanswered): run nothing
        more for it, even what the scheduler has queued."""
        return self._write_paused or self._pending_full or self._queued + self._outbox_bytes() >= self._queue_max

    def _responses_flow(self) -> None:
        if not self._responses_blocked():
            self._sched_parked_io = False
            self._sched_unpark()

    def _wait_for_memory(self) -> None:
        self._memory_wait = True
        self._memory.wait(self, self._owner)
        self._update_reading()

    def memory_available(self) -> None:
        """Request memory was given back (RequestMemory.release); try again, from the loop."""
        if not self._closed:
            asyncio.get_running_loop().call_soon(self._retry_memory)

    def _retry_memory(self) -> None:
        self._memory_wait = False
        self._update_reading()

    def sweep(self, now: float, t: Timeouts) -> str | None:
        """The broker's periodic sweep (shoal.server.bounds): why this connection must close."""
        live = self._live
        active = self._active or self._in_flight > 0
        self._active = False
        if self.transport is not None:
            buffered = self.transport.get_write_buffer_size()
            if buffered != live.write_buffered:  # the client took (part of) its responses
                live.write_buffered = buffered
                active = True
        partial = (bool(self._buf) or self._large is not None) and not self._paused and not self._framed
        self._framed = False
        authenticating = self.sasl is not None and not self.sasl.authenticated
        return live.verdict(now, t, active=active, partial=partial, authenticating=authenticating)

    @property
    def queued_response_bytes(self) -> int:
        """Bytes of responses this connection holds: finished and waiting behind an earlier one,
        or handed to the transport and not yet sent."""
        buffered = self.transport.get_write_buffer_size() if self.transport is not None and not self._closed else 0
        return self._queued + buffered + self._outbox_bytes()

    @property
    def paused_because(self) -> str | None:
        """Why reading is paused (for metrics): quota, memory, requests (too many unanswered, or
        the scheduler's queue is full) or responses (not taken); None if it is not."""
        if not self._paused:
            return None
        if self._mute is not None:
            return "quota"
        if self._memory_wait:
            return "memory"
        if self._pending_full or self._sched_full:
            return "requests"
        return "responses"

    @property
    def in_flight(self) -> int:
        """Requests read from this connection whose handling has not finished (its share of the
        broker's request queue, which the broker-wide request quota watches)."""
        return self._in_flight

    def _track_in_flight(self, delta: int) -> None:
        self._in_flight += delta
        if delta > 0 and not self._pending_full and len(self._pending) >= MAX_IN_FLIGHT:
            self._pending_full = True
            self._update_reading()
