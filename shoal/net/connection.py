"""One connection to a broker, as a client: what brokers use to talk to each other (the replica
fetcher, the controller's liveness hold, transaction markers, usage records) and what the admin
client (:mod:`shoal.client`) is built on."""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any, Callable, Mapping

from kio.schema.errors import ErrorCode

from shoal.net.entities import build_entity
from shoal.net import requests
from shoal.net.errors import ConnectionLost, KafkaError, check
from shoal.net.security import ClientSecurity
from shoal.protocol import codec

API_VERSIONS = 18
_I32 = struct.Struct(">i")
MAX_RESPONSE = 1 << 30


# close(): how long the transport may take to flush what it holds before it is aborted
CLOSE_FLUSH_S = 2.0

class Connection:
    """One TCP connection: requests are pipelined, responses matched by correlation id.

    ``open()`` connects (TLS as ``security`` says), negotiates versions with ApiVersions and logs
    in (SASL); ``version_for(api_key)`` is then the highest version both sides support.
    ``decoders`` maps an api key to a decoder of its response frames for the few responses kio's
    reader cannot take (the admin client's DescribeTransactions) or should not (the replica
    fetcher's Fetch: ``shoal.net.fetch_response``); ``encoders`` an api key to an encoder of its
    request frames (``(version, correlation_id, client_id, body) -> frame``) for bodies that are
    not kio entities (the replica fetcher's: ``shoal.net.fetch_request``)."""

    def __init__(
        self, host: str, port: int, client_id: str, timeout: float, security: "ClientSecurity | None" = None,
        decoders: Mapping[int, Callable[[int, int, bytes], tuple[int, Any]]] | None = None,
        encoders: Mapping[int, Callable[[int, int, str, Any], bytes]] | None = None,
        address: tuple[str, int] | None = None,
    ) -> None:
        self.host, self.port = host, port
        # where to connect, when not host:port (AdminClient's ``resolve``): TLS still checks
        # that the certificate names ``host``
        self.address = address or (host, port)
        self.decoders = decoders or {}
        self.encoders = encoders or {}
        self.security = security or ClientSecurity()
        self.client_id = client_id
        self.timeout = timeout
        self.versions: dict[int, tuple[int, int]] = {}
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, tuple[int, int, asyncio.Future[Any]]] = {}
        self._ids = itertools.count(1)
        # done when the connection has ended (``reading``); made with the connection
        self._lost: asyncio.Future[None] | None = None
        self._write_paused = False
        self._drainers: list[asyncio.Future[None]] = []
        self._closed_reason: str | None = None

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._transport, _ = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Frames(self),
                    *self.address,
                    ssl=self.security.ssl_context(),
                    server_hostname=self.host if self.security.uses_tls else None,
                ),
                self.timeout,
            )
        except (OSError, asyncio.TimeoutError) as e:
            at = "" if self.address == (self.host, self.port) else f" (at {self.address[0]}:{self.address[1]})"
            raise ConnectionLost(f"cannot connect to {self.host}:{self.port}{at}: {e or 'timed out'}") from None
        await self._negotiate()
        if self.security.uses_sasl:
            await self._sasl_login()

    async def _sasl_login(self) -> None:
        """SaslHandshake + SaslAuthenticate (PLAIN or SCRAM-SHA-256/512) on this connection."""
        sec = self.security
        mech = sec.sasl_mechanism
        resp = await self.send(17, self.version_for(17), build_entity(codec.request_type(17, self.version_for(17)), {"mechanism": mech}))
        if resp.error_code != 0:
            raise KafkaError.from_code(int(resp.error_code), f"SASL mechanism {mech} refused")
        auth_version = self.version_for(36)

        async def step(token: bytes) -> bytes:
            body = build_entity(codec.request_type(36, auth_version), {"auth_bytes": token})
            r = await self.send(36, auth_version, body)
            if r.error_code != 0:
                raise KafkaError.from_code(int(r.error_code), r.error_message)
            return bytes(r.auth_bytes)

        if mech == "PLAIN":
            await step(f"\x00{sec.sasl_username}\x00{sec.sasl_password}".encode())
            return
        import scramp

        c = scramp.ScramClient([mech], sec.sasl_username, sec.sasl_password)
        c.set_server_first((await step(c.get_client_first().encode())).decode())
        c.set_server_final((await step(c.get_client_final().encode())).decode())

    async def _negotiate(self) -> None:
        kio_lo, kio_hi = codec.kio_versions(API_VERSIONS) or (0, 0)
        version = min(3, kio_hi)
        while True:
            body = requests.api_versions(version, "shoal-client")
            resp = await self.send(API_VERSIONS, version, body)
            broker = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
            if resp.error_code == ErrorCode.unsupported_version and API_VERSIONS in broker:
                retry = min(broker[API_VERSIONS][1], kio_hi)
                if retry >= version:
                    raise KafkaError("UNSUPPORTED_VERSION", "broker rejected every ApiVersions version")
                version = retry
                continue
            err = check(resp.error_code, None, "ApiVersions")
            if err:
                raise err
            self.versions = broker
            return

    def version_for(self, api_key: int) -> int:
        known = codec.kio_versions(api_key)
        broker = self.versions.get(api_key)
        if known is None or broker is None:
            raise KafkaError("UNSUPPORTED_VERSION", f"the broker does not offer api {api_key}")
        hi = min(known[1], broker[1])
        if hi < max(known[0], broker[0]):
            raise KafkaError(
                "UNSUPPORTED_VERSION",
                f"api {api_key}: broker offers v{broker[0]}-{broker[1]}, this client v{known[0]}-{known[1]}",
            )
        return hi

    async def send(self, api_key: int, version: int, body: Any) -> Any:
        if self._closed_reason is not None or self._transport is None:
            raise ConnectionLost(self._closed_reason or "not connected")
        correlation_id = next(self._ids) & 0x7FFFFFFF
        frame = codec.encode_request(api_key, version, correlation_id, self.client_id, body)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (api_key, version, fut)
        self._transport.write(frame)
        try:
            await self._drain()
            return await asyncio.wait_for(asyncio.shield(fut), self.timeout)
        except asyncio.TimeoutError:
            raise KafkaError(
                "REQUEST_TIMED_OUT", f"no response to api {api_key} v{version} within {self.timeout}s"
            ) from None
        except (ConnectionError, OSError) as e:
            raise ConnectionLost(f"{self.host}:{self.port}: {e}") from None
        finally:
            self._pending.pop(correlation_id, None)

    def request(self, api_key: int, version: int, body: Any) -> "asyncio.Future[Any]":
        """Write a request now; return the future of its decoded response (ConnectionLost when the
        connection ends first). No timeout and no drain, unlike :meth:`send`: for a caller on a hot
        path with one request in flight, which times the answer itself and awaits the future
        directly: it resumes in the loop iteration after the response is decoded, where ``send``'s
        ``wait_for(shield(...))`` takes three (the replica fetcher: docs/benchmarks.md)."""
        if self._closed_reason is not None or self._transport is None:
            raise ConnectionLost(self._closed_reason or "not connected")
        correlation_id = next(self._ids) & 0x7FFFFFFF
        encoder = self.encoders.get(api_key)
        frame = (codec.encode_request(api_key, version, correlation_id, self.client_id, body) if encoder is None
                 else encoder(version, correlation_id, self.client_id, body))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        pending = self._pending
        pending[correlation_id] = (api_key, version, fut)
        fut.add_done_callback(lambda _f: pending.pop(correlation_id, None))
        self._transport.write(frame)
        return fut

    async def _drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark (StreamWriter's
        ``drain``); ConnectionResetError when the connection ends meanwhile."""
        if self._closed_reason is not None:
            raise ConnectionResetError(self._closed_reason)
        if self._write_paused:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._drainers.append(fut)
            await fut

    def _frame(self, frame: bytearray) -> bool:
        """One response frame (without its length prefix): the answer to a pending request.
        False when the connection must end (a frame nobody can decode)."""
        (correlation_id,) = _I32.unpack_from(frame, 0)
        entry = self._pending.get(correlation_id)
        if entry is None:
            return True
        api_key, version, fut = entry
        if api_key == API_VERSIONS and frame[4:6] == b"\x00\x23":
            # KIP-511: UNSUPPORTED_VERSION comes back as a v0 response listing the
            # broker's versions, whatever version we asked in.
            version = 0
        try:
            _, body = self.decoders.get(api_key, codec.decode_response)(api_key, version, frame)
        except Exception as e:  # a response we cannot parse ends this connection
            if not fut.done():
                fut.set_exception(KafkaError("CORRUPT_MESSAGE", f"undecodable response: {e}"))
            self._fail_all(f"undecodable response to api {api_key} v{version}: {e}")
            return False
        if not fut.done():
            fut.set_result(body)
        return True

    def _fail_all(self, reason: str) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
        reason = self._closed_reason
        for _, _, fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(ConnectionLost(f"{self.host}:{self.port}: {reason}"))
        drainers, self._drainers = self._drainers, []
        for d in drainers:
            if not d.done():
                d.set_exception(ConnectionResetError(reason))
        if self._transport is not None:
            self._transport.close()

    @property
    def reading(self) -> "asyncio.Future[None] | None":
        """Done once the connection has ended (an EOF, a reset, ``close()``); None until it is
        made (TCP, TLS)."""
        return self._lost

    @property
    def closed(self) -> bool:
        """The connection has ended (closed, or failed: every later request raises ConnectionLost)."""
        return self._closed_reason is not None

    async def close(self) -> None:
        self._fail_all("connection closed")
        lost = self._lost
        if lost is not None and not lost.done():
            try:  # the transport flushes what it holds, then the connection is lost
                await asyncio.wait_for(asyncio.shield(lost), min(self.timeout, CLOSE_FLUSH_S))
            except asyncio.TimeoutError:
                if self._transport is not None:
                    self._transport.abort()


class _Frames(asyncio.BufferedProtocol):
    """The socket side of a :class:`Connection`: length-prefixed response frames, each handed to
    ``Connection._frame`` as a ``bytearray`` of its own.

    Frames are read into a small staging buffer and copied out; a frame larger than it gets a
    buffer of its size that the socket reads straight into (``get_buffer``): a Fetch response's
    megabyte of records is not copied between the kernel and the decoder (``StreamReader`` copied
    it twice: into its buffer, and out of it)."""

    STAGE = 1 << 16

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._stage = bytearray(self.STAGE)
        self._view = memoryview(self._stage)
        self._have = 0  # bytes in the staging buffer, from its start
        self._big: bytearray | None = None  # a frame larger than the staging buffer, being read
        self._got = 0  # bytes of it read

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.conn._lost = asyncio.get_running_loop().create_future()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return memoryview(self._big)[self._got:]
        return self._view[self._have:]

    def buffer_updated(self, nbytes: int) -> None:
        conn = self.conn
        if conn._closed_reason is not None:
            return
        big = self._big
        if big is not None:
            self._got += nbytes
            if self._got == len(big):
                self._big = None
                conn._frame(big)
            return
        have = self._have + nbytes
        stage, pos = self._stage, 0
        while have - pos >= 4:
            (size,) = _I32.unpack_from(stage, pos)
            if not 4 <= size <= MAX_RESPONSE:
                conn._fail_all(f"response of {size} bytes")
                return
            start = pos + 4
            if have - start >= size:
                pos = start + size
                if not conn._frame(stage[start:pos]):
                    return
                continue
            if 4 + size > self.STAGE:  # read the rest straight into a buffer of its own
                big = bytearray(size)
                got = have - start
                big[:got] = self._view[start:have]
                self._big, self._got = big, got
                pos = have
            break
        if pos:
            stage[:have - pos] = self._view[pos:have]
        self._have = have - pos

    def eof_received(self) -> bool:
        return False  # close the transport: the broker ended the connection

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self.conn
        conn._fail_all(str(exc) if exc is not None else "connection closed by the broker")
        if conn._lost is not None and not conn._lost.done():
            conn._lost.set_result(None)

    def pause_writing(self) -> None:
        self.conn._write_paused = True

    def resume_writing(self) -> None:
        conn = self.conn
        conn._write_paused = False
        drainers, conn._drainers = conn._drainers, []
        for d in drainers:
            if not d.done():
                d.set_result(None)
