"""A broker's registration in etcd: ``<prefix>/brokers/<node_id>``, held under a lease.

The key is created only if absent (``If(create_revision == 0)``), under a lease of
``broker.session.timeout.ms`` kept alive every third of it; it goes when the lease does: at a clean
shutdown (the lease is revoked) or, when the broker dies, once the lease expires. So the image's
``brokers`` (built from the keys, ``shoal.metadata.etcd``) holds the live brokers only.

A node id held by another lease is refused with ``DUPLICATE_BROKER_REGISTRATION`` (Kafka's
error for it), after waiting up to one session timeout for that lease to expire: a broker restarted
right after a ``kill -9`` finds its former registration still there, and takes the id once it
goes, while a live broker keeps its lease alive and the newcomer is refused.

The lease is refreshed from a thread of its own (``shoal.etcd.client.LeaseKeeper``), not the
event loop: a broker whose loop is busy (a restart rejoining thousands of partitions) is alive and
keeps its registration, and the controller's key on the same lease; a refresh from the loop ran
late behind the busy loop and the lease expired (two brokers lost theirs rejoining 6,000
partitions, and the controller moved every leadership off a live broker and back).

If the lease is lost (this broker could not reach etcd for longer than the session, or the lease
was revoked behind its back: the key is gone), the keeper notices it at its next round (etcd
answers TTL 0) and tells the loop, which grants a new lease and creates the key again, retrying
every ``RETRY_S`` until etcd answers, and logs one line when it is registered again; if another
live broker took the id meanwhile, this one logs that and stays unregistered. An outage of the
whole quorum loses no lease: etcd's new leader extends every lease by its TTL. A refresh waits one
keep-alive interval at most and carries ``hasleader``, and a failed one is sent again ``RETRY_S``
later: a refresh held by a member while etcd elects (its leader paused or cut off, not killed) had
waited the whole request timeout (5 s), longer than a 3 s session, and brokers in the surviving
datacenter lost their registrations in a datacenter-loss drill.

Registrations are ephemeral and outside the metadata epoch: creating or losing one does not bump
``/meta/epoch`` (as in ZooKeeper mode, and as the embedded store, which never persists them).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from shoal.metadata import BrokerInfo, MetadataError

if TYPE_CHECKING:
    from shoal.etcd.client import EtcdClient, LeaseKeeper

log = logging.getLogger(__name__)

RETRY_S = 0.2  # a failed keep-alive or re-registration is tried again this soon


def broker_to_json(b: BrokerInfo) -> dict[str, Any]:
    return {
        "node_id": b.node_id,
        "host": b.host,
        "port": b.port,
        "rack": b.rack,
        "endpoints": [list(e) for e in b.endpoints],
    }


def broker_from_json(d: dict[str, Any]) -> BrokerInfo:
    return BrokerInfo(
        node_id=int(d["node_id"]),
        host=str(d["host"]),
        port=int(d["port"]),
        rack=None if d.get("rack") is None else str(d["rack"]),
        endpoints=tuple((str(n), str(h), int(p)) for n, h, p in d.get("endpoints", [])),
    )


def describe(b: BrokerInfo) -> str:
    rack = f", rack {b.rack}" if b.rack else ""
    return f"{b.host}:{b.port}{rack}"


class Registration:
    """This broker's registration: one lease, its keep-alive, and the key created under it.

    ``key`` is the etcd key of a node id; ``on_change`` is awaited with the revision of each
    successful (re-)registration, so the caller can wait for its watch to show it.
    """

    def __init__(
        self,
        client: "EtcdClient",
        key: Callable[[int], bytes],
        *,
        session_timeout_ms: int,
        on_change: Callable[[int], Any] | None = None,
    ) -> None:
        self.client = client
        self.key = key
        # etcd's leases are whole seconds, and etcd raises a TTL below its minimum (about 2 s)
        self.ttl_s = max(1, -(-int(session_timeout_ms) // 1000))
        self.on_change = on_change
        self.lease_id: int | None = None
        self.info: BrokerInfo | None = None
        self._held: tuple[int, int] | None = None  # (node id, lease) of the key we created
        self._keepalive: asyncio.Task[None] | None = None  # re-registers when the keeper says the lease went
        self._lost = asyncio.Event()
        self.keeper: "LeaseKeeper | None" = None
        self._closed = False

    async def register(self, info: BrokerInfo) -> int:
        """Create (or, with our own lease, replace) the node id's key; the revision it was
        written at. DUPLICATE_BROKER_REGISTRATION when another live lease holds it."""
        rpc = self.client.rpc
        key = self.key(info.node_id)
        value = json.dumps(broker_to_json(info), separators=(",", ":")).encode()
        deadline = time.monotonic() + self.ttl_s + 2.0
        waited = False
        while True:
            lease = await self._lease()
            mine = rpc.Compare(result=rpc.Compare.EQUAL, target=rpc.Compare.LEASE, key=key, lease=lease)
            absent = rpc.Compare(result=rpc.Compare.EQUAL, target=rpc.Compare.CREATE, key=key, create_revision=0)
            held = self._held == (info.node_id, lease)
            resp = await self.client.txn(
                [mine if held else absent],
                [rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, lease=lease))],
                [rpc.RequestOp(request_range=rpc.RangeRequest(key=key))],
            )
            if resp.succeeded:
                self.info, self._held = info, (info.node_id, lease)
                if waited:
                    log.info("node id %d registered (the former registration expired)", info.node_id)
                return int(resp.header.revision)
            kvs = resp.responses[0].response_range.kvs
            if not kvs:
                continue  # it went between the compare and now
            holder = kvs[0]
            if holder.lease == lease:  # ours after all (a registration whose answer was lost)
                self._held = (info.node_id, lease)
                continue
            try:
                other = describe(broker_from_json(json.loads(holder.value)))
            except (ValueError, KeyError, TypeError):
                other = "unknown"
            if time.monotonic() > deadline:
                raise MetadataError(
                    "DUPLICATE_BROKER_REGISTRATION",
                    f"node.id {info.node_id} is held by a live broker ({other}): stop it or give this "
                    "broker another node.id",
                )
            if not waited:
                log.warning(
                    "node.id %d is registered by %s under a lease that has not expired; waiting up to %d s "
                    "for it to expire (a broker that is still alive keeps it)", info.node_id, other, self.ttl_s,
                )
                waited = True
            await asyncio.sleep(0.5)

    async def _lease(self) -> int:
        if self.lease_id is None:
            self.lease_id = await self.client.lease_grant(self.ttl_s)
            if self.keeper is None:
                from shoal.etcd.client import LeaseKeeper

                loop = asyncio.get_running_loop()
                self.keeper = LeaseKeeper(self.client, max(0.3, self.ttl_s / 3),
                                          lambda lease: loop.call_soon_threadsafe(self._lease_lost, lease), RETRY_S)
                self._keepalive = loop.create_task(self._keep_alive())
            self.keeper.keep(self.lease_id)
        return self.lease_id

    def _lease_lost(self, lease: int) -> None:
        """From the keeper (on the loop): etcd says the lease is gone."""
        if self.lease_id == lease:
            self._lost.set()

    async def _keep_alive(self) -> None:
        """When the keeper finds the lease lost (expired while this broker could not reach
        etcd, or revoked), take a new one and register again, retrying until etcd answers, and
        say so in one line."""
        lost: BrokerInfo | None = None  # a registration whose lease went, to make again
        while not self._closed:
            try:
                if lost is None:
                    await self._lost.wait()
                    self._lost.clear()
                    lost, self.lease_id, self.info = self.info, None, None
                    if lost is None:  # not registered (refused): a new lease when it tries again
                        continue
                rev = await self.register(lost)
                log.warning("node id %d registered again under a new lease (the former lease was lost: "
                            "expired while etcd was out of reach, or revoked)", lost.node_id)
                lost = None
                if self.on_change is not None:
                    await self.on_change(rev)
            except MetadataError as e:  # another live broker took the node id meanwhile
                log.error("node id %d cannot register again, it stays unregistered: %s",
                          lost.node_id if lost else -1, e.message)
                lost = None
            except Exception as e:  # etcd unreachable or electing: the watch logs it; try again soon
                log.debug("registration again failed: %s", e)
                self.lease_id = None  # a lease granted meanwhile may expire before the next try
                await asyncio.sleep(RETRY_S)

    async def close(self) -> None:
        """Stop the keep-alive and revoke the lease: the registration goes at once."""
        self._closed = True
        if self.keeper is not None:
            await asyncio.to_thread(self.keeper.stop)
        if self._keepalive is not None:
            self._keepalive.cancel()
            try:
                await self._keepalive
            except BaseException:
                pass
            self._keepalive = None
        if self.lease_id is not None:
            try:
                await asyncio.wait_for(self.client.lease_revoke(self.lease_id), 2.0)
            except (Exception, asyncio.CancelledError) as e:  # it will expire by itself
                task = asyncio.current_task()
                if isinstance(e, asyncio.CancelledError) and task is not None and task.cancelling():
                    raise
                log.info("could not revoke the registration lease (it expires by itself): %r", e)
            self.lease_id = None
