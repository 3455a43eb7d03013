"""The etcd client: the one place Shoal speaks etcd v3's gRPC (issue 26, part 3).

``etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`` (``parse_url``); ``EtcdClient``, the few calls Shoal
makes over one asyncio gRPC channel to all the endpoints; and the classification of a failed call
(``why``: one line saying why; ``transient``: worth another try). Both channels, the client's and
the blocking one of the session's ``LeaseKeeper``, are made by ``open_channel`` (one place for
their target and options: where TLS goes, issue 28).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, AsyncIterable, AsyncIterator, Protocol, Sequence

DEFAULT_PREFIX = "/shoal"
REQUEST_TIMEOUT_S = 5.0


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


def parse_url(url: str) -> tuple[list[tuple[str, int]], str]:
    """``etcd://h1:p1,h2:p2/prefix`` -> ([(h1, p1), (h2, p2)], "/prefix"); the prefix defaults
    to ``/shoal``. ValueError for anything else."""
    if not url.startswith("etcd://"):
        raise ValueError(f"not an etcd:// URL: {url!r}")
    rest = url[len("etcd://"):]
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
    """The few etcd v3 calls Shoal makes, over one gRPC channel to all endpoints (gRPC's
    pick_first over the list: a member going away moves the channel to the next one). Uses the
    generated stubs of ``aetcd``."""

    def __init__(self, endpoints: Sequence[tuple[str, int]], *, timeout: float = REQUEST_TIMEOUT_S) -> None:
        from aetcd import rpc

        self.rpc = rpc
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self._channel: Any = None
        self.kv: Any = None
        self.watch_stub: Any = None
        self.lease: Any = None

    @property
    def where(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.endpoints)

    def _target(self) -> str:
        addrs = []
        for host, port in self.endpoints:
            try:
                infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
                addrs.append(f"{infos[0][4][0]}:{port}")
            except OSError:
                pass
        if addrs:
            return "ipv4:" + ",".join(addrs)
        host, port = self.endpoints[0]
        return f"{host}:{port}"

    def connect(self) -> None:
        if self._channel is not None:
            return
        self._channel = self.open_channel()
        self.kv = self.rpc.KVStub(self._channel)
        self.watch_stub = self.rpc.WatchStub(self._channel)
        self.lease = self.rpc.LeaseStub(self._channel)

    def open_channel(self, *, blocking: bool = False) -> Channel:
        """A new channel to the endpoints: asyncio's (the client's calls) or, with ``blocking``,
        gRPC's blocking one (``LeaseKeeper``'s thread). The one place channels are made."""
        import grpc

        make = grpc.insecure_channel if blocking else grpc.aio.insecure_channel
        return make(self._target(), options=self.channel_options())

    @staticmethod
    def channel_options() -> list[tuple[str, int]]:
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

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    async def txn(self, compare: Sequence[Compare], success: Sequence[RequestOp],
                  failure: Sequence[RequestOp] | None = None, timeout: float | None = None) -> TxnResponse:
        self.connect()
        req = self.rpc.TxnRequest(compare=compare, success=success, failure=failure or [])
        # hasleader: a member without a leader answers at once instead of holding the request
        return await self.kv.Txn(req, timeout=timeout or self.timeout, metadata=(("hasleader", "true"),))

    async def range(self, key: bytes, range_end: bytes = b"", revision: int = 0, timeout: float | None = None,
                    require_leader: bool = False) -> RangeResponse:
        """A linearizable read (etcd's ReadIndex: no raft proposal, nothing written); with
        ``require_leader`` a member without a leader answers at once instead of holding it."""
        self.connect()
        req = self.rpc.RangeRequest(key=key, range_end=range_end, revision=revision)
        return await self.kv.Range(req, timeout=timeout or max(self.timeout, 30.0),
                                   metadata=(("hasleader", "true"),) if require_leader else None)

    async def lease_grant(self, ttl_s: int) -> int:
        self.connect()
        resp = await self.lease.LeaseGrant(self.rpc.LeaseGrantRequest(TTL=ttl_s), timeout=self.timeout)
        return int(resp.ID)

    async def lease_keepalive(self, lease_id: int, timeout: float | None = None) -> int:
        """Refresh a lease; its TTL after, 0 when it has expired. ``hasleader``: a member without
        a leader (etcd electing) answers at once instead of holding the refresh past ``timeout``."""
        self.connect()
        call = self.lease.LeaseKeepAlive(iter([self.rpc.LeaseKeepAliveRequest(ID=lease_id)]),
                                         timeout=timeout or self.timeout, metadata=(("hasleader", "true"),))
        async for reply in call:
            return int(reply.TTL)
        return 0

    async def lease_revoke(self, lease_id: int) -> None:
        self.connect()
        await self.lease.LeaseRevoke(self.rpc.LeaseRevokeRequest(ID=lease_id), timeout=self.timeout)

    def watch(self, key: bytes, range_end: bytes, start_revision: int, stop: asyncio.Event) -> WatchCall:
        """Watch the range from ``start_revision``: the call (an async iterator of etcd's watch
        responses; cancel it to end it), whose request stream stays open until ``stop`` (an
        ``asyncio.Event``) is set. ``hasleader``: etcd cancels the watch when its member loses the
        quorum's leader."""
        rpc = self.rpc
        self.connect()
        create = rpc.WatchCreateRequest(key=key, range_end=range_end, start_revision=start_revision)

        async def requests() -> AsyncIterator[Any]:
            yield rpc.WatchRequest(create_request=create)
            await stop.wait()

        return self.watch_stub.Watch(requests(), metadata=(("hasleader", "true"),))

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
