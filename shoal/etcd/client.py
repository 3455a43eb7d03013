"""The etcd client: the one place Shoal speaks etcd v3's gRPC (issue 26, part 3).

``etcd://HOST:PORT[,HOST:PORT...][/PREFIX]``, or ``etcds://`` for TLS (``parse_url``);
``EtcdClient``, the few calls Shoal makes over one asyncio gRPC channel to the endpoints; and the
classification of a failed call (``why``: one line saying why; ``transient``: worth another try).
Both channels, the client's and the blocking one of the session's ``LeaseKeeper``, are made by
``open_channel``: plain or TLS with the files of ``shoal.etcd.security`` (issue 28), ordered from
the member in use.

The member in use: a channel tries the endpoints in order from ``member`` (gRPC's pick_first: a
member that refuses connections is passed over at once). A member that accepts connections but
does not answer (paused, overloaded, black-holed) is not passed over by gRPC until its keep-alive
ping times out, 15 s; so a request or a lease keep-alive that fails in transit (timed out, or a
member without a leader) moves the client on to the next member (``move_off``): the session's
keeper, whose keep-alive waits one interval (a third of the session), notices it when that times
out, sends it to the next member at once and moves the loop's channel too, and the lease lives
on (see ``shoal.etcd.session``).

With an etcd user (``shoal.etcd.user``) every request carries its token (etcd's Authenticate);
a request etcd refuses because the token expired or is no longer valid is authenticated again
and sent once more.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import threading
import time
from typing import Any, AsyncIterable, AsyncIterator, Awaitable, Callable, Protocol, Sequence, TypeVar

from shoal.etcd.security import PLAIN_SCHEME, TLS_SCHEME, Credentials, EtcdSecurity, stale_token

# gRPC's C core prints its own lines (a failed TLS handshake, a connection reset) on stderr, outside
# the broker's log; Shoal says what failed itself (GRPC_VERBOSITY set by the operator wins).
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_PREFIX = "/shoal"
REQUEST_TIMEOUT_S = 5.0
MOVE_LOG_EVERY_S = 5.0  # moves to another member are logged (WARNING) at most this often


# -- etcd's messages, as far as Shoal reads them (aetcd's generated protobuf classes are untyped) --


class Compare(Protocol):
    """A compare of a transaction (``EtcdClient.created_at``, ``modified_at``, ``under_lease``)."""


class RequestOp(Protocol):
    """An operation of a transaction (``EtcdClient.put_op``, ``delete_op``, ``get_op``)."""


class KeyValue(Protocol):
    key: bytes
    value: bytes
    lease: int
    create_revision: int
    mod_revision: int


class ResponseHeader(Protocol):
    revision: int


class RangeResponse(Protocol):
    header: ResponseHeader
    kvs: Sequence[KeyValue]


class ResponseOp(Protocol):
    response_range: RangeResponse


class TxnResponse(Protocol):
    header: ResponseHeader
    succeeded: bool
    responses: Sequence[ResponseOp]


class Event(Protocol):
    type: int
    kv: KeyValue


class WatchResponse(Protocol):
    header: ResponseHeader
    created: bool
    canceled: bool
    cancel_reason: str
    compact_revision: int
    events: Sequence[Event]


class Channel(Protocol):
    """A gRPC channel (``EtcdClient.open_channel``): asyncio's, whose ``close`` is awaited, or the
    blocking one."""

    def close(self) -> object: ...


class WatchCall(AsyncIterable[WatchResponse], Protocol):
    """A watch in progress: its responses, until it is cancelled."""

    def cancel(self) -> bool: ...


def is_etcd_url(url: str) -> bool:
    """An ``etcd://`` or ``etcds://`` URL (else the store is the embedded one)."""
    return url.startswith((PLAIN_SCHEME, TLS_SCHEME))


def parse_url(url: str) -> tuple[list[tuple[str, int]], str]:
    """``etcd://h1:p1,h2:p2/prefix`` (or ``etcds://``) -> ([(h1, p1), (h2, p2)], "/prefix"); the
    prefix defaults to ``/shoal``. ValueError for anything else."""
    if not is_etcd_url(url):
        raise ValueError(f"not an etcd:// or etcds:// URL: {url!r}")
    rest = url.partition("://")[2]
    hosts, slash, prefix = rest.partition("/")
    endpoints = []
    for hp in hosts.split(","):
        host, colon, port = hp.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{url!r}: expected HOST:PORT, got {hp!r}")
        endpoints.append((host.strip("[]"), int(port)))
    prefix = "/" + prefix.strip("/") if slash and prefix.strip("/") else DEFAULT_PREFIX
    return endpoints, prefix


def why(e: BaseException) -> str:
    """One line saying why an etcd call failed (a gRPC error's details)."""
    details = getattr(e, "details", None)
    why = (details() if callable(details) else None) or str(e) or type(e).__name__
    return why.splitlines()[0][:200]


def transient(e: BaseException) -> bool:
    """An etcd call that failed in transit (member gone, no leader, a timeout): worth another try."""
    code = getattr(e, "code", None)
    name = getattr(code() if callable(code) else None, "name", "")
    return name in ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def range_end(prefix: bytes) -> bytes:
    """The end of etcd's range of keys starting with ``prefix``."""
    b = bytearray(prefix)
    while b:
        if b[-1] < 0xFF:
            b[-1] += 1
            return bytes(b)
        b.pop()
    return b"\0"


class EtcdClient:
    """The few etcd v3 calls Shoal makes, over one gRPC channel to the endpoints, in order from
    the member in use (see the module docstring). ``security``: TLS and the etcd user (the files
    are read here: ``EtcdSecurityError``, one line, when one cannot be used). Uses the generated
    stubs of ``aetcd``. Used from one event loop, but for ``move_off``, ``member`` and the
    keeper's ``authenticate_blocking``, which its thread calls."""

    def __init__(self, endpoints: Sequence[tuple[str, int]], *, timeout: float = REQUEST_TIMEOUT_S,
                 security: EtcdSecurity | None = None) -> None:
        from aetcd import rpc

        self.rpc = rpc
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.security = security or EtcdSecurity()
        self._credentials: Credentials = self.security.load()
        self._channel: Any = None
        self._channel_member = -1
        self._retired: dict[Any, asyncio.Future[None]] = {}  # old channels, closed once their calls are done
        self._watches: set[Any] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self.member = 0  # the endpoint channels try first (move_off)
        self.moves = 0
        self._move_logged = -MOVE_LOG_EVERY_S
        self._token: str | None = None
        self._authenticating: asyncio.Future[str] | None = None
        self.authentications = 0
        self.kv: Any = None
        self.watch_stub: Any = None
        self.lease: Any = None

    @property
    def where(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.endpoints)

    def _target(self, first: int) -> str:
        """gRPC's target: the endpoints from ``first`` on, wrapping (resolved to IPv4 addresses)."""
        addrs = []
        n = len(self.endpoints)
        for host, port in (self.endpoints[(first + k) % n] for k in range(n)):
            try:
                infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
                addrs.append(f"{infos[0][4][0]}:{port}")
            except OSError:
                pass
        if addrs:
            return "ipv4:" + ",".join(addrs)
        host, port = self.endpoints[first % n]
        return f"{host}:{port}"

    def connect(self) -> None:
        """The loop's channel, to the member in use (made again when ``move_off`` moved on)."""
        if self._channel is not None and self._channel_member == self.member:
            return
        self._loop = asyncio.get_running_loop()
        old, self._channel = self._channel, None
        member = self.member
        self._channel = self.open_channel(member=member)
        self._channel_member = member
        self.kv = self.rpc.KVStub(self._channel)
        self.watch_stub = self.rpc.WatchStub(self._channel)
        self.lease = self.rpc.LeaseStub(self._channel)
        if old is not None:
            # Its watches are cancelled (their owner watches again, here); its other calls end by
            # their deadline: closing it now would cancel their awaiting coroutines.
            for call in list(self._watches):
                call.cancel()
            task = asyncio.ensure_future(old.close(grace=max(self.timeout, 30.0) + 5.0))
            self._retired[old] = task
            task.add_done_callback(lambda _: self._retired.pop(old, None))

    def open_channel(self, *, blocking: bool = False, member: int | None = None) -> Channel:
        """A new channel to the endpoints from ``member`` (the one in use) on: asyncio's (the
        client's calls) or, with ``blocking``, gRPC's blocking one (``LeaseKeeper``'s thread).
        The one place channels are made."""
        import grpc

        first = self.member if member is None else member
        target, options = self._target(first), self.channel_options()
        if not self.security.tls:
            make = grpc.insecure_channel if blocking else grpc.aio.insecure_channel
            return make(target, options=options)
        c = self._credentials
        creds = grpc.ssl_channel_credentials(root_certificates=c.ca, private_key=c.key, certificate_chain=c.cert)
        # the certificate must name the host of the URL (the target is its resolved address)
        host = self.endpoints[first % len(self.endpoints)][0]
        options = [*options, ("grpc.ssl_target_name_override", host)]
        secure = grpc.secure_channel if blocking else grpc.aio.secure_channel
        return secure(target, creds, options=options)

    @staticmethod
    def channel_options() -> list[tuple[str, int | str]]:
        return [
            ("grpc.max_receive_message_length", -1),
            ("grpc.max_send_message_length", -1),
            # notice a member that stopped answering; etcd's --grpc-keepalive-min-time is 5 s
            ("grpc.keepalive_time_ms", 10000),
            ("grpc.keepalive_timeout_ms", 5000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
        ]

    def move_off(self, member: int, why: str) -> bool:
        """A call to ``member`` failed in transit: channels try the next member first from now
        on (the loop's at its next call; its watches end, to be made there). Thread-safe;
        nothing when the client moved already or has one endpoint. Whether it moved."""
        if len(self.endpoints) < 2:
            return False
        with self._lock:
            if self.member != member:
                return False
            self.member = (member + 1) % len(self.endpoints)
            self.moves += 1
        a, b = (self.endpoints[i] for i in (member, self.member))
        now = time.monotonic()
        if now - self._move_logged >= MOVE_LOG_EVERY_S:  # the whole quorum down: every call fails
            self._move_logged = now
            log.warning("etcd member %s:%d %s: moving to %s:%d", *a, why, *b)
        else:
            log.debug("etcd member %s:%d %s: moving to %s:%d", *a, why, *b)
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._move_now)
            except RuntimeError:  # the loop closed meanwhile
                pass
        return True

    def _move_now(self) -> None:
        if self._channel is not None:
            self.connect()

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        retired, self._retired = self._retired, {}
        for old, task in retired.items():
            task.cancel()
            await old.close()
        if channel is not None:
            await channel.close()

    def watch_canceled(self, reason: str) -> None:
        """etcd cancelled a watch (``reason``): one refused for its token (etcd says "permission
        denied" for a token it no longer takes) is made again after authenticating again."""
        if "permission denied" in reason or "auth" in reason:
            self.token_refused(self._token)

    # -- authentication (etcd's RBAC) -------------------------------------------------------------

    def _auth_request(self) -> Any:
        """The Authenticate request, with the password as the file has it now: a password rotated
        (the new one written to the file, then ``etcdctl user passwd``, which revokes the tokens)
        is taken up at the next authentication, without a restart."""
        fresh = self.security.reread_password()
        if fresh is not None and fresh != self._credentials.password:
            self._credentials = dataclasses.replace(self._credentials, password=fresh)
            log.info("the password of etcd user %r changed in shoal.etcd.password.file: using the new one",
                     self._credentials.user)
        c = self._credentials
        return self.rpc.AuthenticateRequest(name=c.user or "", password=c.password or "")

    async def _token_now(self) -> str | None:
        """The token to send (authenticating first when there is none); None without a user."""
        if self._credentials.user is None:
            return None
        if self._token is not None:
            return self._token
        if self._authenticating is None:  # one Authenticate for every call waiting on it
            self._authenticating = asyncio.ensure_future(self._authenticate())
        fut = self._authenticating
        try:
            return await asyncio.shield(fut)
        finally:
            if fut.done() and self._authenticating is fut:
                self._authenticating = None

    async def _authenticate(self) -> str:
        self.connect()
        stub = self.rpc.AuthStub(self._channel)
        resp = await stub.Authenticate(self._auth_request(), timeout=self.timeout)
        return self._took(str(resp.token))

    def authenticate_blocking(self, channel: Channel, timeout: float) -> str | None:
        """Authenticate on a blocking channel (the keeper's thread): the token, None without a user."""
        if self._credentials.user is None:
            return None
        resp = self.rpc.AuthStub(channel).Authenticate(self._auth_request(), timeout=timeout)
        return self._took(str(resp.token))

    def _took(self, token: str) -> str:
        self.authentications += 1
        self._token = token
        log.info("authenticated to etcd as user %r%s", self._credentials.user,
                 "" if self.authentications == 1 else " again (etcd refused the token: expired or revoked)")
        return token

    def token_refused(self, token: str | None) -> None:
        """etcd refused ``token``: the next call authenticates again (thread-safe)."""
        if token is not None and self._token == token:
            self._token = None

    @property
    def token(self) -> str | None:
        """The token the last authentication got (the keeper's thread sends it too)."""
        return self._token

    async def _metadata(self, hasleader: bool) -> tuple[tuple[str, str], ...] | None:
        md = [("hasleader", "true")] if hasleader else []
        token = await self._token_now()
        if token is not None:
            md.append(("token", token))
        return tuple(md) or None

    async def _call(self, method: Callable[[Any], Callable[..., Awaitable[T]]], req: Any, timeout: float,
                    hasleader: bool = True) -> T:
        """One unary call (``method(stubs)`` picks it), with the token; authenticated again and
        sent once more when etcd refused the token; a failure in transit moves off the member."""
        for attempt in (1, 2):
            self.connect()
            member = self.member
            md = None
            try:
                md = await self._metadata(hasleader)
                return await method(self)(req, timeout=timeout, metadata=md)
            except Exception as e:
                token = dict(md or ()).get("token")
                if attempt == 1 and token is not None and stale_token(e):
                    self.token_refused(token)
                    continue
                if transient(e):
                    self.move_off(member, f"failed a request in transit ({why(e)})")
                raise
        raise AssertionError("unreachable")

    async def txn(self, compare: Sequence[Compare], success: Sequence[RequestOp],
                  failure: Sequence[RequestOp] | None = None, timeout: float | None = None) -> TxnResponse:
        req = self.rpc.TxnRequest(compare=compare, success=success, failure=failure or [])
        # hasleader: a member without a leader answers at once instead of holding the request
        return await self._call(lambda c: c.kv.Txn, req, timeout or self.timeout)

    async def range(self, key: bytes, range_end: bytes = b"", revision: int = 0, timeout: float | None = None,
                    require_leader: bool = False) -> RangeResponse:
        """A linearizable read (etcd's ReadIndex: no raft proposal, nothing written); with
        ``require_leader`` a member without a leader answers at once instead of holding it."""
        req = self.rpc.RangeRequest(key=key, range_end=range_end, revision=revision)
        return await self._call(lambda c: c.kv.Range, req, timeout or max(self.timeout, 30.0), require_leader)

    async def lease_grant(self, ttl_s: int) -> int:
        resp = await self._call(lambda c: c.lease.LeaseGrant, self.rpc.LeaseGrantRequest(TTL=ttl_s),
                                self.timeout, hasleader=False)
        return int(resp.ID)

    async def lease_keepalive(self, lease_id: int, timeout: float | None = None) -> int:
        """Refresh a lease; its TTL after, 0 when it has expired. ``hasleader``: a member without
        a leader (etcd electing) answers at once instead of holding the refresh past ``timeout``."""
        self.connect()
        md = await self._metadata(True)
        call = self.lease.LeaseKeepAlive(iter([self.rpc.LeaseKeepAliveRequest(ID=lease_id)]),
                                         timeout=timeout or self.timeout, metadata=md)
        async for reply in call:
            return int(reply.TTL)
        return 0

    async def lease_revoke(self, lease_id: int) -> None:
        await self._call(lambda c: c.lease.LeaseRevoke, self.rpc.LeaseRevokeRequest(ID=lease_id),
                         self.timeout, hasleader=False)

    async def watch(self, key: bytes, range_end: bytes, start_revision: int, stop: asyncio.Event) -> WatchCall:
        """Watch the range from ``start_revision``: the call (an async iterator of etcd's watch
        responses; cancel it to end it), whose request stream stays open until ``stop`` (an
        ``asyncio.Event``) is set. ``hasleader``: etcd cancels the watch when its member loses the
        quorum's leader. The client cancels it when it moves to another member."""
        rpc = self.rpc
        self.connect()
        md = await self._metadata(True)
        create = rpc.WatchCreateRequest(key=key, range_end=range_end, start_revision=start_revision)

        async def requests() -> AsyncIterator[Any]:
            yield rpc.WatchRequest(create_request=create)
            await stop.wait()

        call = self.watch_stub.Watch(requests(), metadata=md)
        self._watches.add(call)
        call.add_done_callback(lambda c: self._watches.discard(c))
        return call

    # -- the messages of a transaction ------------------------------------------------------------

    def put_op(self, key: bytes, value: bytes, lease: int = 0) -> RequestOp:
        return self.rpc.RequestOp(request_put=self.rpc.PutRequest(key=key, value=value, lease=lease))

    def delete_op(self, key: bytes) -> RequestOp:
        return self.rpc.RequestOp(request_delete_range=self.rpc.DeleteRangeRequest(key=key))

    def get_op(self, key: bytes) -> RequestOp:
        return self.rpc.RequestOp(request_range=self.rpc.RangeRequest(key=key))

    def created_at(self, key: bytes, revision: int) -> Compare:
        """The compare ``create_revision(key) == revision`` (0: the key is absent)."""
        rpc = self.rpc
        return rpc.Compare(result=rpc.Compare.EQUAL, target=rpc.Compare.CREATE, key=key, create_revision=revision)

    def modified_at(self, key: bytes, revision: int) -> Compare:
        """The compare ``mod_revision(key) == revision``."""
        rpc = self.rpc
        return rpc.Compare(result=rpc.Compare.EQUAL, target=rpc.Compare.MOD, key=key, mod_revision=revision)

    def under_lease(self, key: bytes, lease: int) -> Compare:
        """The compare ``lease(key) == lease``."""
        rpc = self.rpc
        return rpc.Compare(result=rpc.Compare.EQUAL, target=rpc.Compare.LEASE, key=key, lease=lease)

    def is_put(self, event: Event) -> bool:
        """A watch event that puts its key (else it deletes it)."""
        return bool(event.type == self.rpc.Event.PUT)
