"""This broker's etcd session: one lease, kept alive, and the keys that ride on it.

The lease (``ttl_s``, etcd's whole seconds) is granted on first use and refreshed from a thread
of its own (``LeaseKeeper``), not the event loop: a broker whose loop is busy
(a restart rejoining thousands of partitions) is alive and keeps its registration, and the
controller's key on the same lease; a refresh from the loop ran late behind the busy loop and the
lease expired (two brokers lost theirs rejoining 6,000 partitions, and the controller moved every
leadership off a live broker and back).

If the lease is lost (this broker could not reach etcd for longer than the session, or the lease
was revoked behind its back), the keeper notices it at its next round (etcd answers TTL 0) and
tells the loop, which forgets the lease and awaits ``on_lease_lost`` (the owner of the ephemeral
keys makes them again under a new lease), retrying every ``RETRY_S`` while that fails. An outage
of the whole quorum loses no lease: etcd's new leader extends every lease by its TTL. A refresh
waits one keep-alive interval at most and carries ``hasleader``, and a failed one is sent again
``RETRY_S`` later: a refresh held by a member while etcd elects (its leader paused or cut off, not
killed) had waited the whole request timeout (5 s), longer than a 3 s session, and brokers in the
surviving datacenter lost their registrations in a datacenter-loss drill. A refresh that failed in
transit moves the client on to the next member (``EtcdClient.move_off``; the loop's channel and
watch follow) and is sent there at once: a member that hangs (paused, black-holed) is left when a
refresh to it times out, a third of the session after it was sent, and the refresh sent to the
next member keeps the lease (issue 28).

What rides on the lease: ephemeral keys (``claim``: created only if absent, or replaced when ours;
``put_ephemeral``), and an election key (``campaign``: its creation revision is the holder's epoch;
``fence`` the compare that a commit holds it still; ``delete_if_created`` to take a dead holder's
key away). ``close`` revokes the lease: its keys go at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from typing import Awaitable, Callable, Sequence

from shoal.etcd.client import Channel, Compare, EtcdClient, KeyValue, range_end, transient, why
from shoal.etcd.security import stale_token

log = logging.getLogger(__name__)

RETRY_S = 0.2  # a failed keep-alive or renewal after a lost lease is tried again this soon


class LeaseKeeper:
    """Keeps one lease alive from a thread of its own, on a channel of its own (gRPC's blocking
    API: the wait for etcd releases the GIL), so that a busy event loop cannot starve it: a
    broker busy with thousands of partitions (a rejoin, a long request) is alive, and must not
    lose its registration, or the controller's key that rides on the same lease, because its
    loop was late. Every ``interval`` it refreshes ``lease_id`` (set with :meth:`keep`), each
    refresh waiting one interval at most and carrying ``hasleader`` (a member without a leader
    answers at once) and the client's etcd token, a failed one sent again ``retry_s`` later (at
    once to the next member when it failed in transit: ``EtcdClient.move_off``), after
    authenticating again when etcd refused the token. When etcd answers TTL 0 (the
    lease expired while etcd was out of reach, or was revoked) it calls ``on_lost(lease)`` from
    its thread (the caller hops to its loop) and refreshes nothing until given a new lease.

    ``max_gap`` is the longest time between two successful refreshes (a metric and the tests'
    proof); ``refreshes`` counts them."""

    def __init__(self, client: EtcdClient, interval: float, on_lost: Callable[[int], object],
                 retry_s: float = 0.2) -> None:
        self._client = client
        self.interval = interval
        self.retry_s = retry_s
        self._on_lost = on_lost
        # a keep-alive waits one interval at most (a third of the TTL): one to a member that does
        # not answer fails, moves the client on and is sent to the next member at once, two
        # intervals after the last refresh at worst. (Half an interval left a loaded machine's
        # slow but live member too often, and a test lost a 3 s lease.)
        self.timeout = interval
        self.lease_id: int | None = None
        self.refreshes = 0
        self.max_gap = 0.0
        self._last = 0.0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def keep(self, lease_id: int | None) -> None:
        """Keep ``lease_id`` alive from now on (None: none), refreshing it at once."""
        self.lease_id = lease_id
        self._last = time.monotonic()
        if self._thread is None and lease_id is not None:
            self._thread = threading.Thread(target=self._run, name="etcd-lease-keepalive", daemon=True)
            self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        """Stop refreshing (blocks up to one interval for the thread; call it off the loop)."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(self.interval + 1.0)

    def _run(self) -> None:
        import grpc

        client = self._client
        rpc = client.rpc
        member = client.member
        channel = client.open_channel(blocking=True, member=member)
        stub = rpc.LeaseStub(channel)
        wait = 0.0
        try:
            while not self._stop.is_set():
                self._wake.wait(wait)
                self._wake.clear()
                wait = self.interval
                lease = self.lease_id
                if self._stop.is_set() or lease is None:
                    continue
                if client.member != member:  # the client moved on (here or on the loop): follow it
                    channel.close()
                    member = client.member
                    channel = client.open_channel(blocking=True, member=member)
                    stub = rpc.LeaseStub(channel)
                token = client.token
                try:
                    replies = stub.LeaseKeepAlive(iter([rpc.LeaseKeepAliveRequest(ID=lease)]), timeout=self.timeout,
                                                  metadata=(("hasleader", "true"),) + ((("token", token),) if token else ()))
                    ttl = next((int(r.TTL) for r in replies), 0)
                except grpc.RpcError as e:  # etcd unreachable or electing: the watch logs it
                    log.debug("lease %x keep-alive failed: %s", lease, e.code() if hasattr(e, "code") else e)
                    wait = min(self.interval, self.retry_s)
                    if stale_token(e):
                        client.token_refused(token)
                        self._authenticate(channel)
                    elif transient(e) and client.move_off(
                            member, f"did not answer a lease keep-alive within {self.timeout:.1f} s ({why(e)})"):
                        wait = 0.0  # a member that does not answer: the next one at once, within the TTL
                    continue
                if ttl > 0:
                    now = time.monotonic()
                    if self._last:
                        self.max_gap = max(self.max_gap, now - self._last)
                    self._last = now
                    self.refreshes += 1
                elif self.lease_id == lease:
                    self.lease_id = None
                    self._on_lost(lease)
        except Exception:  # never silently: a registration without a keeper would expire
            log.exception("the lease keep-alive thread failed")
        finally:
            channel.close()

    def _authenticate(self, channel: Channel) -> None:
        import grpc

        try:
            self._client.authenticate_blocking(channel, self.timeout)
        except grpc.RpcError as e:
            log.debug("authenticating the lease keep-alive failed: %s", why(e))


@dataclasses.dataclass(frozen=True)
class Held:
    """An etcd key as a transaction found it: its value, lease and creation revision."""

    value: bytes
    lease: int
    create_revision: int


@dataclasses.dataclass(frozen=True)
class Claim:
    """What ``EtcdSession.claim`` did: created (or replaced) the key at ``revision``, or found it
    held (``holder``; None when it went between the compare and the read)."""

    succeeded: bool
    revision: int = 0
    holder: Held | None = None


@dataclasses.dataclass(frozen=True)
class Campaign:
    """What one election transaction saw: this session took the key at ``revision``, or
    ``holder`` holds it (None: it went between the compare and the read)."""

    took: bool
    revision: int = 0
    holder: Held | None = None


def _held(kvs: Sequence[KeyValue]) -> Held | None:
    return Held(kvs[0].value, int(kvs[0].lease), int(kvs[0].create_revision)) if kvs else None


class EtcdSession:
    """One lease over an ``EtcdClient`` and the keys under it. Use from one event loop."""

    def __init__(self, client: EtcdClient, *, ttl_s: int,
                 on_lease_lost: Callable[[], Awaitable[None]] | None = None) -> None:
        self.client = client
        self.ttl_s = ttl_s
        self.on_lease_lost = on_lease_lost
        self.lease_id: int | None = None
        self.keeper: LeaseKeeper | None = None
        self._renewing: asyncio.Task[None] | None = None  # awaits on_lease_lost when the keeper says the lease went
        self._lost = asyncio.Event()
        self._closed = False

    async def lease(self) -> int:
        """The lease, granted now if there is none, kept alive from the keeper's thread."""
        if self.lease_id is None:
            self.lease_id = await self.client.lease_grant(self.ttl_s)
            if self.keeper is None:
                loop = asyncio.get_running_loop()
                self.keeper = LeaseKeeper(self.client, max(0.3, self.ttl_s / 3),
                                          lambda lease: loop.call_soon_threadsafe(self._lease_lost, lease), RETRY_S)
                self._renewing = loop.create_task(self._renew())
            self.keeper.keep(self.lease_id)
        return self.lease_id

    def _lease_lost(self, lease: int) -> None:
        """From the keeper (on the loop): etcd says the lease is gone."""
        if self.lease_id == lease:
            self._lost.set()

    async def _renew(self) -> None:
        """When the keeper finds the lease lost (expired while this broker could not reach etcd,
        or revoked), forget it and await ``on_lease_lost``, again until it works."""
        while not self._closed:
            await self._lost.wait()
            self._lost.clear()
            self.lease_id = None
            while not self._closed and self.on_lease_lost is not None:
                try:
                    await self.on_lease_lost()
                    break
                except Exception as e:  # etcd unreachable or electing: the watch logs it; try again soon
                    log.debug("renewal after a lost lease failed: %s", e)
                    self.lease_id = None  # a lease granted meanwhile may expire before the next try
                    await asyncio.sleep(RETRY_S)

    # -- keys under the lease --------------------------------------------------------------------

    async def claim(self, key: bytes, value: bytes, *, replace_own: bool) -> Claim:
        """Create ``key`` under the lease if it is absent (``If(create_revision == 0)``), or,
        with ``replace_own``, put it if it is under our lease already."""
        client = self.client
        lease = await self.lease()
        resp = await client.txn([client.under_lease(key, lease) if replace_own else client.created_at(key, 0)],
                                [client.put_op(key, value, lease)], [client.get_op(key)])
        if resp.succeeded:
            return Claim(True, int(resp.header.revision))
        return Claim(False, holder=_held(resp.responses[0].response_range.kvs))

    async def put_ephemeral(self, key: bytes, value: bytes) -> None:
        """Put ``key`` under the lease as it stands (None: not granted yet, so nothing is put)."""
        if self.lease_id is not None:
            await self.client.txn([], [self.client.put_op(key, value, self.lease_id)])

    async def put_while_held(self, key: bytes, value: bytes, election_key: bytes, revision: int) -> bool:
        """Put ``key`` under the lease only while ``election_key`` still has creation revision
        ``revision`` (this holder's term: the controller's published lists); whether it was put.
        False when this session has no lease."""
        if self.lease_id is None:
            return False
        resp = await self.client.txn(self.fence(election_key, revision), [self.client.put_op(key, value, self.lease_id)])
        return bool(resp.succeeded)

    async def get(self, key: bytes) -> bytes | None:
        """``key``'s value (None: absent)."""
        kvs = (await self.client.range(key, timeout=self.client.timeout)).kvs
        return bytes(kvs[0].value) if kvs else None

    async def read_prefix(self, prefix: bytes) -> list[tuple[bytes, bytes, int]]:
        """``(key, value, mod revision)`` of the keys starting with ``prefix``."""
        resp = await self.client.range(prefix, range_end(prefix))
        return [(kv.key, kv.value, int(kv.mod_revision)) for kv in resp.kvs]

    # -- an election key -------------------------------------------------------------------------

    async def campaign(self, key: bytes, value: bytes) -> Campaign | None:
        """One election round: take ``key`` under the lease if it is free, else learn its holder.
        None when this session has no lease (nothing to campaign with)."""
        lease = self.lease_id
        if lease is None:
            return None
        client = self.client
        # While the key is held (nearly always) a read says by whom: the transaction, which writes
        # (a raft proposal and an fsync on every etcd member, whichever branch it takes), only
        # when it is free. Every broker asks twice a second: 6 etcd writes a second on 3 brokers.
        kvs = (await client.range(key, timeout=client.timeout, require_leader=True)).kvs
        if kvs:
            return Campaign(False, holder=_held(kvs))
        resp = await client.txn([client.created_at(key, 0)], [client.put_op(key, value, lease)], [client.get_op(key)])
        if resp.succeeded:
            return Campaign(True, revision=int(resp.header.revision))
        return Campaign(False, holder=_held(resp.responses[0].response_range.kvs))

    def fence(self, key: bytes, revision: int) -> list[Compare]:
        """The compares that hold ``key`` still has creation revision ``revision`` (the election
        key's holder's epoch: -1 compares false)."""
        return [self.client.created_at(key, revision)]

    async def delete_if_created(self, key: bytes, revision: int) -> None:
        """Delete ``key`` if it still has creation revision ``revision`` (that holder's, not a
        successor's)."""
        await self.client.txn(self.fence(key, revision), [self.client.delete_op(key)])

    # -- lifecycle ---------------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop the keep-alive and revoke the lease: its keys go at once."""
        self._closed = True
        if self.keeper is not None:
            await asyncio.to_thread(self.keeper.stop)
        if self._renewing is not None:
            self._renewing.cancel()
            try:
                await self._renewing
            except BaseException:
                pass
            self._renewing = None
        if self.lease_id is not None:
            try:
                await asyncio.wait_for(self.client.lease_revoke(self.lease_id), 2.0)
            except (Exception, asyncio.CancelledError) as e:  # it will expire by itself
                task = asyncio.current_task()
                if isinstance(e, asyncio.CancelledError) and task is not None and task.cancelling():
                    raise
                log.info("could not revoke the registration lease (it expires by itself): %r", e)
            self.lease_id = None
