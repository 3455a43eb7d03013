"""Listeners with connection limits: Kafka's ``Acceptor`` + ``ConnectionQuotas`` on asyncio.

Each listener has its own accept loop (``ListenerServer``) instead of ``loop.create_server``, so
that it can *stop accepting*: while the listener or the broker is at its connection limit, or
while a connection-creation-rate delay runs, the loop holds the socket it just accepted and
accepts nothing more; clients wait in the kernel's backlog, exactly as behind Kafka's blocked
acceptor thread (KIP-402, KIP-612). The decisions are :mod:`shoal.quotas.connections`.

Configs (broker-wide, cluster-wide dynamic; listener-level ones static, as
``listener.name.<l>.<config>``): ``max.connections``, ``max.connections.per.ip``,
``max.connections.per.ip.overrides``, ``max.connection.creation.rate``, ``quota.window.num``,
``quota.window.size.seconds``; per-IP ``connection_creation_rate`` client quotas (entity
``("ip", address)`` or the default ``("ip", None)`` in ``MetadataImage.client_quotas``).

Every refusal and delay is logged (one line per listener and reason per second at most, with the
number of others since). Counters for metrics: ``ConnectionLimits.stats`` (per listener, see
:class:`shoal.quotas.connections.ListenerStats`) and ``ConnectionLimits.total``.

Deliberate deviations from Kafka:
- When inter-broker connections take the broker over ``max.connections``, the *oldest*
  connection of another listener is closed (Kafka closes the least recently used one).
- A hostname in ``max.connections.per.ip.overrides`` is resolved (to one address) when the
  config is loaded or changed; until then it does not apply.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from typing import TYPE_CHECKING, Any, Callable

from shoal.metadata import MetadataImage
from shoal.quotas.connections import (
    ConnectionLimitsConfig,
    ConnectionQuotas,
    ListenerLimits,
    Verdict,
    parse_ip_overrides,
)
from shoal.quotas.entities import CONNECTION_RATE_KEY
from shoal.quotas.rate import RateConfig

if TYPE_CHECKING:
    from shoal.server.ports import LimitsHost
    from shoal.config import BrokerConfig

log = logging.getLogger("shoal.server.limits")

LISTEN_BACKLOG = 128
LOG_INTERVAL_S = 1.0
MAX_IP_SENSORS = 1024  # beyond this many per-IP rate sensors, drop the idle ones


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def limits_config(cfg: "BrokerConfig", listeners: list[str],
                  resolved: dict[str, str | None] | None = None) -> ConnectionLimitsConfig:
    """The connection limits of ``cfg``. ``resolved`` maps override hostnames to an address
    (hostnames missing from it are skipped). Raises ``ConfigError`` on a bad value."""
    from shoal.config import ConfigError

    try:
        overrides = parse_ip_overrides(cfg.get("max.connections.per.ip.overrides"))
    except ValueError as e:
        raise ConfigError("INVALID_CONFIG", f"max.connections.per.ip.overrides: {e}") from None
    if int(cfg.get("max.connections.per.ip")) == 0 and not overrides:
        raise ConfigError("INVALID_CONFIG", "max.connections.per.ip can be set to zero only if "
                          "max.connections.per.ip.overrides property is set.")
    by_ip: dict[str, int] = {}
    for host, count in overrides.items():
        address = host if _is_ip(host) else (resolved or {}).get(host)
        if address is not None:
            by_ip[address] = count
    per_listener = {
        name: ListenerLimits(
            max_connections=int(cfg.for_listener(name, "max.connections")),
            max_connection_creation_rate=int(cfg.for_listener(name, "max.connection.creation.rate")),
        )
        for name in listeners
    }
    inter_broker = cfg.get("inter.broker.listener.name") or (listeners[0] if listeners else None)
    try:
        return ConnectionLimitsConfig(
            max_connections=int(cfg.get("max.connections")),
            max_connections_per_ip=int(cfg.get("max.connections.per.ip")),
            max_connections_per_ip_overrides=by_ip,
            max_connection_creation_rate=int(cfg.get("max.connection.creation.rate")),
            listeners=per_listener,
            inter_broker_listener=inter_broker,
            rate=RateConfig(samples=int(cfg.get("quota.window.num")),
                            window_ms=int(cfg.get("quota.window.size.seconds")) * 1000),
        )
    except ValueError as e:
        raise ConfigError("INVALID_CONFIG", str(e)) from None


def ip_connection_rates(image: MetadataImage) -> dict[str | None, float]:
    """``connection_creation_rate`` of every ("ip", address) entity; None = the default."""
    out: dict[str | None, float] = {}
    for entity, values in image.client_quotas.items():
        if len(entity) == 1 and entity[0][0] == "ip" and CONNECTION_RATE_KEY in values:
            out[entity[0][1]] = float(values[CONNECTION_RATE_KEY])
    return out


class _LogLimiter:
    """At most one log line per key per interval; the next one says how many were skipped."""

    def __init__(self, interval_s: float = LOG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._last: dict[Any, tuple[float, int]] = {}

    def log(self, key: Any, now: float, level: int, msg: str, *args: Any) -> None:
        if len(self._last) > 4096:  # keys name IPs: forget the quiet ones
            self._last = {k: v for k, v in self._last.items() if now - v[0] < self.interval_s}
        last, skipped = self._last.get(key, (-1e18, 0))
        if now - last < self.interval_s:
            self._last[key] = (last, skipped + 1)
            return
        self._last[key] = (now, 0)
        if skipped:
            msg += " (%d more since the last line)"
            args = (*args, skipped)
        log.log(level, msg, *args)


class ConnectionLimits:
    """The broker's connection accounting, shared by its listeners; follows config and quota
    changes in the metadata image. Lives on the broker as ``broker.connection_limits``."""

    def __init__(self, broker: "LimitsHost", listeners: list[str]) -> None:
        self.broker = broker
        self.listener_names = list(listeners)
        self._resolved: dict[str, str | None] = {}
        self.quotas = ConnectionQuotas(limits_config(broker.config, self.listener_names),
                                       ip_connection_rates(broker.metadata.image))
        self._changed = asyncio.Event()
        self._waiting = 0  # acceptors in wait_for_slot: only they need _wake
        self._open: dict[str, dict[Any, None]] = {name: {} for name in listeners}  # oldest first
        self._closing: set[Any] = set()  # closed by close_excess, not yet gone
        self._logs = _LogLimiter()
        self._resolving: asyncio.Task[None] | None = None
        self._image_key: tuple[Any, Any] = (None, None)
        self._follow(broker.metadata.image)

    # -- metrics hooks -------------------------------------------------------------------------
    @property
    def stats(self):  # -> dict[str, ListenerStats]
        return self.quotas.stats

    @property
    def total(self) -> int:
        return self.quotas.total

    # -- following config ----------------------------------------------------------------------
    def on_metadata(self, old: MetadataImage, new: MetadataImage) -> None:
        self._follow(new)

    def _follow(self, image: MetadataImage) -> None:
        key = (image.broker_configs, image.broker_overrides.get(self.broker.node_id), image.client_quotas)
        if key == self._image_key:
            return
        self._image_key = key
        try:
            config = limits_config(self.broker.config, self.listener_names, self._resolved)
        except Exception as e:  # a dynamic value that does not parse: keep the old limits
            log.warning("connection limits unchanged: %s", getattr(e, "message", e))
            return
        self.quotas.reconfigure(config)
        self.quotas.set_ip_rates(ip_connection_rates(image))
        self._resolve_hostnames()
        self._wake()

    def _resolve_hostnames(self) -> None:
        try:
            hosts = [h for h in parse_ip_overrides(self.broker.config.get("max.connections.per.ip.overrides"))
                     if not _is_ip(h) and h not in self._resolved]
        except ValueError:
            return
        if hosts and self._resolving is None:
            self._resolving = asyncio.get_running_loop().create_task(self._resolve(hosts))

    async def _resolve(self, hosts: list[str]) -> None:
        loop = asyncio.get_running_loop()
        for host in hosts:
            try:
                infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
                self._resolved[host] = infos[0][4][0] if infos else None
            except OSError as e:
                log.warning("max.connections.per.ip.overrides: cannot resolve %s: %s", host, e)
                self._resolved[host] = None
        self._resolving = None
        self._image_key = (None, None)
        self._follow(self.broker.metadata.image)

    def _wake(self) -> None:
        if not self._waiting:  # (every close calls this; the Event stays unset for the next one)
            return
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # -- the acceptor's steps ------------------------------------------------------------------
    def try_slot(self, listener: str) -> int | None:
        """The first half of Kafka's ``waitForConnectionSlot``, which never waits: record the
        attempt; None when the connection may be served now, else the creation-rate delay in ms
        (0: only a free slot is missing) to pass to :meth:`wait_for_slot`. Logs why it waits."""
        q = self.quotas
        throttle_ms = q.connection_rate_throttle_ms(listener, self.broker.clock.now_ms())
        if throttle_ms <= 0 and q.slot_available(listener):
            return None
        loop = asyncio.get_running_loop()
        if throttle_ms > 0:
            self._logs.log(("rate", listener), loop.time(), logging.INFO,
                           "listener %s: connection creation rate over its limit, delaying accept by %d ms",
                           listener, throttle_ms)
        else:
            q.note_blocked(listener)
            self._logs.log(("slots", listener), loop.time(), logging.INFO,
                           "listener %s: at its connection limit (%d open, %d on the broker); "
                           "not accepting until one closes", listener, q.stats[listener].connections, q.total)
        return throttle_ms

    async def wait_for_slot(self, listener: str, throttle_ms: int) -> None:
        """The second half: wait out ``throttle_ms`` (from :meth:`try_slot`), then until the
        listener and the broker have a free slot."""
        loop = asyncio.get_running_loop()
        q = self.quotas
        end = loop.time() + throttle_ms / 1000.0
        self._waiting += 1
        try:
            while True:
                remaining = end - loop.time()
                if remaining <= 0 and q.slot_available(listener):
                    return
                changed = self._changed
                try:
                    await asyncio.wait_for(changed.wait(), remaining if remaining > 0 else None)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._waiting -= 1

    def admit(self, listener: str, sock: socket.socket, ip: str) -> bool:
        """Per-IP checks on an accepted socket: True if counted (the caller serves it); else the
        socket is closed (now, or after the IP's throttle time)."""
        now_ms = self.broker.clock.now_ms()
        if self.quotas.ip_sensor_count > MAX_IP_SENSORS:
            self.quotas.forget_idle_ips(now_ms)
        verdict, throttle_ms, limit = self.quotas.admit(listener, ip, now_ms)
        if verdict is Verdict.ACCEPTED:
            return True
        loop = asyncio.get_running_loop()
        if verdict is Verdict.TOO_MANY:
            self._logs.log(("ip", listener, ip), loop.time(), logging.INFO,
                           "listener %s: refused a connection from %s, which already has the configured "
                           "maximum of %d connections", listener, ip, int(limit))
            sock.close()
            return False
        self._logs.log(("ip-rate", listener, ip), loop.time(), logging.INFO,
                       "listener %s: %s is over its connection creation rate of %g/s; closing the "
                       "connection after %d ms", listener, ip, limit, throttle_ms)
        loop.call_later(throttle_ms / 1000.0, sock.close)
        return False

    def track(self, listener: str, ip: str, protocol: Any) -> Callable[[], None]:
        """Count ``protocol`` as open; returns its (idempotent) release."""
        self._open.setdefault(listener, {})[protocol] = None
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._open.get(listener, {}).pop(protocol, None)
            self._closing.discard(protocol)
            self.quotas.release(listener, ip)
            self._wake()

        return release

    def close_excess(self) -> None:
        """Close the oldest connections of listeners over the broker limit (KIP-402: made room
        for inter-broker connections). A closing connection counts until it is gone."""
        q = self.quotas
        for listener, conns in self._open.items():
            while conns and q.max_connections_exceeded(listener) and \
                    q.total - len(self._closing) > q.config.max_connections:
                victim = next(iter(conns))
                conns.pop(victim)
                self._closing.add(victim)
                q.stats[listener].closed_excess += 1
                log.info("listener %s: closing its oldest connection to stay within max.connections=%d "
                         "(inter-broker connections are always accepted)", listener, q.config.max_connections)
                close = getattr(victim, "close", None)
                if close is not None:
                    close()

    def close(self) -> None:
        if self._resolving is not None:
            self._resolving.cancel()


class ListenerServer:
    """One listener: its listening sockets and their acceptor (quacks like ``asyncio.Server`` for
    what the broker uses: ``sockets``, ``start_serving``, ``close``, ``wait_closed``).

    The acceptor is a readiness callback on each listening socket, as in asyncio's own server: on
    a wake-up it accepts what the backlog holds (at most ``LISTEN_BACKLOG``), passing each socket
    through the limits and handing it to ``connect_accepted_socket``, all without a Task of its
    own. A connection that has to wait (creation-rate delay, no free slot) stops the callback: a
    Task waits, serves that connection, and only then is the socket watched again, so nothing
    more is accepted meanwhile and clients queue in the kernel's backlog (Kafka's blocked
    acceptor). An accept loop awaiting ``sock_accept`` costs a future, a Task step and a poll
    registered and removed per connection (docs/benchmarks.md, SASL logins).
    """

    def __init__(self, limits: ConnectionLimits, name: str, sockets: list[socket.socket],
                 protocol_factory: Callable[[], asyncio.Protocol], ssl_context: Any) -> None:
        self.limits = limits
        self.name = name
        self.sockets = sockets
        self._factory = protocol_factory
        self._ssl = ssl_context
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()  # connections starting; acceptors waiting
        self._watched: set[socket.socket] = set()  # listening sockets with the callback on
        self._closed = False

    async def start_serving(self) -> None:
        self._loop = asyncio.get_running_loop()
        for lsock in self.sockets:
            self._watch(lsock)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for lsock in list(self._watched):
            self._unwatch(lsock)
        for task in list(self._tasks):
            task.cancel()
        for sock in self.sockets:
            sock.close()

    async def wait_closed(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _watch(self, lsock: socket.socket) -> None:
        if not self._closed and lsock not in self._watched and self._loop is not None:
            self._watched.add(lsock)
            self._loop.add_reader(lsock, self._on_readable, lsock)

    def _unwatch(self, lsock: socket.socket) -> None:
        if lsock in self._watched and self._loop is not None:
            self._watched.discard(lsock)
            self._loop.remove_reader(lsock)

    def _spawn(self, coro: Any) -> None:
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_readable(self, lsock: socket.socket) -> None:
        limits = self.limits
        for _ in range(LISTEN_BACKLOG):
            try:
                sock, peer = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:  # gone before it was accepted
                continue
            except OSError as e:  # EMFILE and friends: back off as asyncio's own server does
                log.warning("listener %s: accept failed: %s; retrying in 1 s", self.name, e)
                self._unwatch(lsock)
                assert self._loop is not None
                self._loop.call_later(1.0, self._watch, lsock)
                return
            try:
                throttle_ms = limits.try_slot(self.name)
                if throttle_ms is not None:  # wait, accepting nothing more meanwhile
                    self._unwatch(lsock)
                    self._spawn(self._serve_when_allowed(lsock, sock, peer, throttle_ms))
                    return
                self._admit(sock, peer)
            except Exception:  # a bug, not the client's doing: this connection only
                log.exception("listener %s: cannot serve a connection from %s", self.name, peer)
                sock.close()

    async def _serve_when_allowed(self, lsock: socket.socket, sock: socket.socket, peer: Any,
                                  throttle_ms: int) -> None:
        try:
            await self.limits.wait_for_slot(self.name, throttle_ms)
            self._admit(sock, peer)
        except BaseException:
            sock.close()
            raise
        finally:
            self._watch(lsock)  # (not once closed)

    def _admit(self, sock: socket.socket, peer: Any) -> None:
        """The per-IP checks, then serve ``sock`` (or it is closed)."""
        ip = peer[0] if isinstance(peer, tuple) else str(peer)
        limits = self.limits
        if not limits.admit(self.name, sock, ip):
            return
        self._spawn(self._serve(sock, ip))
        if limits.quotas.is_protected(self.name):
            limits.close_excess()

    async def _serve(self, sock: socket.socket, ip: str) -> None:
        loop = asyncio.get_running_loop()
        protocol = self._factory()
        release = self.limits.track(self.name, ip, protocol)
        lost = protocol.connection_lost

        def connection_lost(exc: Exception | None) -> None:
            try:
                lost(exc)
            finally:
                release()

        protocol.connection_lost = connection_lost  # type: ignore[method-assign]
        try:
            await loop.connect_accepted_socket(lambda: protocol, sock, ssl=self._ssl)
        except asyncio.CancelledError:
            release()
            sock.close()
            raise
        except Exception as e:  # TLS handshake failure, peer gone: nothing was served
            if getattr(e, "reason", None) in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL"):
                # not a ClientHello: a plaintext client on a TLS listener (rate-limited as the lines above)
                self.limits._logs.log(("plaintext-on-tls", self.name, ip), loop.time(), logging.INFO,
                                      "listener %s speaks TLS but a client at %s sent plaintext (%s): the "
                                      "client needs security.protocol=SSL, or SASL_SSL with SASL",
                                      self.name, ip, e.reason)
            elif isinstance(e, ConnectionError):
                # closed by the peer before (or during) the TLS handshake: a port check (a load
                # balancer's, the controller's liveness probe) or a client that gave up; not news
                log.debug("listener %s: connection from %s closed before the TLS handshake: %r", self.name, ip, e)
            else:
                log.info("listener %s: connection from %s failed before it started: %s", self.name, ip, e)
            release()
            sock.close()


async def _listening_sockets(host: str, port: int) -> list[socket.socket]:
    """Bind like ``loop.create_server``: every address ``host`` resolves to ("" = all)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host or None, port, family=socket.AF_UNSPEC,
                                   type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, type_, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, type_, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as err:  # the message asyncio's create_server gives
                raise OSError(err.errno, f"error while attempting to bind on address {address!r}: "
                                         f"{(err.strerror or str(err)).lower()}") from None
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


async def create_listener(limits: ConnectionLimits, name: str, host: str, port: int,
                          protocol_factory: Callable[[], asyncio.Protocol], ssl_context: Any) -> ListenerServer:
    """A bound, not yet serving listener (call ``start_serving``)."""
    return ListenerServer(limits, name, await _listening_sockets(host, port), protocol_factory, ssl_context)
