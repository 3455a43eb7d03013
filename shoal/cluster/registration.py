"""A broker's registration in etcd: ``<prefix>/brokers/<node_id>``, held under a lease.

The key is created only if absent (``If(create_revision == 0)``), under a lease of
``broker.session.timeout.ms`` kept alive every third of it; it goes when the lease does: at a clean
shutdown (the lease is revoked) or, when the broker dies, once the lease expires. So the image's
``brokers`` (built from the keys, ``shoal.metadata.etcd``) holds the live brokers only.

A node id held by another lease is refused with ``DUPLICATE_BROKER_REGISTRATION`` (Kafka's
error for it), after waiting up to one session timeout for that lease to expire: a broker restarted
right after a ``kill -9`` finds its former registration still there, and takes the id once it
goes, while a live broker keeps its lease alive and the newcomer is refused.

The lease and its keep-alive are the broker's etcd session's (``shoal.etcd.session``): when the
lease is lost (this broker could not reach etcd for longer than the session, or the lease was
revoked behind its back: the key is gone), the session tells the registration, which creates the
key again under a new lease, retrying every ``shoal.etcd.session.RETRY_S`` until etcd answers, and
logs one line when it is registered again; if another live broker took the id meanwhile, this one
logs that and stays unregistered.

Registrations are ephemeral and outside the metadata epoch: creating or losing one does not bump
``/meta/epoch`` (as in ZooKeeper mode, and as the embedded store, which never persists them).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Awaitable, Callable

from shoal.metadata import BrokerInfo, MetadataError, codec

if TYPE_CHECKING:
    from shoal.etcd.session import EtcdSession
    from shoal.metadata.etcd import EtcdBackend

log = logging.getLogger(__name__)


def describe(b: BrokerInfo) -> str:
    rack = f", rack {b.rack}" if b.rack else ""
    return f"{b.host}:{b.port}{rack}"


class Registration:
    """This broker's registration: the key of its node id, created under the session's lease.

    ``key`` is the etcd key of a node id; ``on_change`` is awaited with the revision of each
    successful re-registration (after a lost lease), so the caller can wait for its watch to show it.
    """

    def __init__(
        self,
        session: "EtcdSession",
        key: Callable[[int], bytes],
        *,
        on_change: Callable[[int], Awaitable[object]] | None = None,
    ) -> None:
        self.session = session
        self.key = key
        self.on_change = on_change
        self.info: BrokerInfo | None = None
        self._held: tuple[int, int] | None = None  # (node id, lease) of the key we created
        self._lost: BrokerInfo | None = None  # a registration whose lease went, to make again
        session.on_lease_lost = self._renew

    @classmethod
    def for_backend(cls, backend: "EtcdBackend") -> "Registration":
        """The registration of an etcd metadata backend's broker, under its session's lease; each
        re-registration waits until the backend's image shows it (what the composition root gives
        ``EtcdMetadataStore(registration=...)``)."""
        return cls(backend.session, backend.broker_key, on_change=backend.wait_revision)

    async def register(self, info: BrokerInfo) -> int:
        """Create (or, with our own lease, replace) the node id's key; the revision it was
        written at. DUPLICATE_BROKER_REGISTRATION when another live lease holds it."""
        key = self.key(info.node_id)
        value = json.dumps(codec.broker_to_json(info), separators=(",", ":")).encode()
        deadline = time.monotonic() + self.session.ttl_s + 2.0
        waited = False
        while True:
            lease = await self.session.lease()
            claim = await self.session.claim(key, value, replace_own=self._held == (info.node_id, lease))
            if claim.succeeded:
                self.info, self._held = info, (info.node_id, lease)
                if waited:
                    log.info("node id %d registered (the former registration expired)", info.node_id)
                return claim.revision
            holder = claim.holder
            if holder is None:
                continue  # it went between the compare and now
            if holder.lease == lease:  # ours after all (a registration whose answer was lost)
                self._held = (info.node_id, lease)
                continue
            try:
                other = describe(codec.broker_from_json(json.loads(holder.value)))
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
                    "for it to expire (a broker that is still alive keeps it)", info.node_id, other,
                    self.session.ttl_s,
                )
                waited = True
            await asyncio.sleep(0.5)

    async def _renew(self) -> None:
        """The session lost its lease (expired while this broker could not reach etcd, or
        revoked): register again under a new one, and say so in one line. An etcd failure is
        raised (the session tries again)."""
        if self.info is not None:
            self._lost, self.info = self.info, None
        lost = self._lost
        if lost is None:  # not registered (refused): a new lease when it tries again
            return
        try:
            rev = await self.register(lost)
        except MetadataError as e:  # another live broker took the node id meanwhile
            log.error("node id %d cannot register again, it stays unregistered: %s", lost.node_id, e.message)
            self._lost = None
            return
        log.warning("node id %d registered again under a new lease (the former lease was lost: "
                    "expired while etcd was out of reach, or revoked)", lost.node_id)
        self._lost = None
        if self.on_change is not None:
            await self.on_change(rev)
