"""The etcd metadata backend: the brokers of a cluster share one image, kept in etcd.

``shoal.metadata.store=etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`` (``shoal.etcd.client.parse_url``). Every broker
holds the whole image in memory, built from the keys under the prefix and kept current by a watch;
a change is decided on it by the shared rules (``shoal.metadata.store.DecidingStore``) and
committed by ``EtcdBackend.commit`` as ONE etcd transaction::

    If(mod_revision(/meta/epoch) == the revision this image saw it at) [+ fence compares]
    Then(put/delete each key the change names, put /meta/epoch = epoch + 1)

A failed ``If`` is a ``CommitConflict``: another broker changed the image first, the store waits
for the watch to bring that change and decides again. So a topic created through two brokers at
once is created once, and the other gets TOPIC_ALREADY_EXISTS.

Key layout (values are the JSON of ``shoal.metadata.codec``, whose documents carry their format
version: topics are written in version 2, compact, once ``shoal.version`` 2 is finalized, and a
value of a version this release does not read is skipped with one error line; see
``docs/cluster.md`` and ``docs/upgrades.md``)::

    /meta/cluster_id          created once, by the first broker (create-if-absent)
    /meta/epoch               {"epoch": N, "by": writer token}: the image epoch, bumped by every change
    /meta/next_producer_id    the first producer id no block was given out for
    /meta/features            the finalized feature levels and the epoch that set them (KIP-584)
    /brokers/<node id>        BrokerInfo, under the broker's lease (shoal.cluster.registration)
    /configs/broker           the dynamic cluster-wide broker configs
    /topics/<name>            a topic with all its partitions (one key: a topic is one put)
    /scram/<user>             the user's SCRAM credentials, by mechanism
    /tenants/<id>             a tenant;  /user_tenants/<user>: its tenant id;  /tenant_admins/<user>
    /namespaces/<name>        a KIP-37 namespace's configs
    /identity_pools/<id>      an OAuth identity pool (SASL/OAUTHBEARER token claims -> a tenant)
    /acls/<binding as JSON>   an ACL binding (value: its index in its change; image order follows
                              the keys' create revisions, i.e. the order they were added)
    /quotas/<entity as JSON>  client quota values
    /renamed_topics/<name>    former name -> topic id

Publishing: the watch (from the load revision + 1) delivers every transaction under the prefix as
one batch of events with one revision; each batch is applied to the image and listeners are told
``(old, new)``, once per batch and in revision order, for this broker's own changes and others'
alike. ``commit`` returns once the watch has delivered its own transaction, and for that one the
change itself (not its decoded keys) is applied, so the image holds the very objects the rules
made. It waits for that at most ``OWN_WATCH_WAIT_S``: if etcd died right after the transaction (or
the watch lags), the commit publishes its change itself (``_apply_ahead``; the transaction's epoch
compare proves no other change lies between), and the watch's later delivery of that revision
only moves the revision; a registration below it is then told after it (registrations touch other
keys). Each change is told once and the image never goes back. Registrations (``/brokers``)
change the image without bumping the epoch (they are
ephemeral). If the watch's start revision has been compacted, the prefix is read again and
listeners are told the difference in one call.

A commit's transaction that fails in transit (a member gone, no leader: requests carry
``hasleader``) is sent again with the same compare, ``TXN_ATTEMPT_S`` an attempt, until
``COMMIT_DEADLINE_S``; an attempt that landed after all is recognised by its token in
``/meta/epoch``, so a change is made once.

etcd unreachable: reads keep the last image; once it has been unreachable for
``UNREACHABLE_GRACE_S``, ``writable`` refuses changes with the retriable REQUEST_TIMED_OUT (and a
commit retrying meanwhile gives up with it). Before that, changes are tried: an etcd leader lost is
an election of 1.5-3 s (the watch fails meanwhile) that a commit's own retries ride out. The watch reconnects with backoff (at most 2 s apart), logging one line every
5 s, and on its return catches up from its revision (or reloads after a compaction). ``start``
waits the same way: a broker starts once etcd answers.

Large changes: etcd refuses a transaction with more than ``--max-txn-ops`` operations (128 by
default) or larger than ``--max-request-bytes`` (1.5 MiB); such a change is refused with
POLICY_VIOLATION saying which limit to raise (``docs/cluster.md`` has the settings Shoal needs).
A batch of ISR changes (``DecidingStore.alter_isrs``) is the one change that may be split: its
commits each stay within those defaults (``txn_budget``: at most 127 topics and ~1.5 MiB).

Fencing: ``EtcdBackend.fence`` may return extra compares for every commit (the controller's
election key's revision, issue 11); when they fail the commit is refused with NOT_CONTROLLER.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
import os
import time
import uuid
from types import MappingProxyType
from typing import Any, Callable, Iterable, Protocol, Sequence

from shoal.etcd.client import DEFAULT_PREFIX, REQUEST_TIMEOUT_S, EtcdClient, parse_url
from shoal.etcd.security import EtcdSecurity, EtcdSecurityError, hint, refusal
from shoal.etcd.client import range_end as _range_end
from shoal.etcd.client import transient as _transient
from shoal.etcd.client import why as _why
from shoal.etcd.session import EtcdSession
from shoal.metadata import (
    AclEntry,
    BrokerInfo,
    MetadataError,
    MetadataImage,
    NamespaceInfo,
    TopicInfo,
)
from shoal.metadata import codec
from shoal.metadata.change import Change
from shoal.metadata.features import SHOAL_VERSION
from shoal.metadata.store import CommitConflict, DecidingStore, MetadataBackend, new_tenant_id

log = logging.getLogger(__name__)

# How long refresh() waits for the watch to bring a newer image before reading the prefix again.
REFRESH_TIMEOUT_S = 10.0
LOG_EVERY_S = 5.0
# How long a commit whose transaction succeeded waits for its watch to deliver it before it
# publishes the change itself (EtcdBackend._apply_ahead).
OWN_WATCH_WAIT_S = 1.0
# A commit's transaction: each attempt waits TXN_ATTEMPT_S (a member that still believes in a dead
# leader holds a proposal until etcd's own timeout); attempts that failed in transit (etcd member
# gone, no leader, election) are made again, with the same compare, until COMMIT_DEADLINE_S.
TXN_ATTEMPT_S = 2.5
COMMIT_DEADLINE_S = 8.0
# How long etcd is unreachable (the watch failing) before changes are refused at once rather than
# tried: longer than an etcd election (election timeout 1.5 s, randomised up to twice that).
UNREACHABLE_GRACE_S = 5.0
MAX_BACKOFF_S = 2.0
# A change that may be split in several commits (a batch of ISR changes: ``EtcdBackend.txn_budget``)
# is split to fit etcd's default limits, whatever the members run with: --max-txn-ops 128 (the
# epoch's put is one of them) and --max-request-bytes 1.5 MiB (less a margin for the compares, the
# epoch and the request's framing). docs/cluster.md asks for larger limits so that one change that
# cannot be split fits; a batch need not be one transaction, and a smaller one is a shorter raft
# entry for every member to write.
BATCH_MAX_OPS = 128
BATCH_MAX_BYTES = 1536 * 1024 - 32 * 1024


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=False).encode()


class BrokerRegistration(Protocol):
    """This broker's registration in etcd, under its session's lease: cluster's
    (``shoal.cluster.registration.Registration``), given to the backend by the composition root."""

    async def register(self, info: BrokerInfo) -> int:
        """Register the node id; the etcd revision it was written at."""


class _Compacted(Exception):
    pass


class _Resync(Exception):
    pass


class EtcdBackend(MetadataBackend):
    """``MetadataBackend`` on etcd. Use from one event loop. See the module docstring."""

    def __init__(
        self,
        endpoints: Sequence[tuple[str, int]],
        prefix: str = DEFAULT_PREFIX,
        *,
        node_id: int,
        session_timeout_ms: int = 9000,
        new_uuid: Callable[[], uuid.UUID] = uuid.uuid4,
        timeout: float = REQUEST_TIMEOUT_S,
        registration: Callable[["EtcdBackend"], BrokerRegistration] | None = None,
        security: EtcdSecurity | None = None,
    ) -> None:
        super().__init__()
        self.client = EtcdClient(endpoints, timeout=timeout, security=security)
        self.prefix = prefix.rstrip("/")
        self._root = (self.prefix + "/").encode()
        self.node_id = node_id
        self.session_timeout_ms = session_timeout_ms
        self._new_uuid = new_uuid
        self.fence: Callable[[], list[Any]] | None = None  # extra compares for every commit (controller)
        self._image: MetadataImage | None = None
        self._revision = 0  # the last etcd revision applied to the image
        self._epoch_mod = 0  # mod revision of /meta/epoch in the image
        self._turn = asyncio.Lock()
        self._closed = False
        self._reachable = False
        self._unreachable_since: float | None = None  # monotonic; None before the first connection
        self._why = "not connected yet"
        self._progress = asyncio.Event()  # set (and replaced) whenever the image moves
        self._ready: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._watch_call: Any = None
        self._reload = True
        self._tokens = itertools.count(1)
        self._token_base = f"{node_id}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        # own commits in flight: token -> (change, future of the image that published it, revision)
        self._own: dict[str, tuple[Change, asyncio.Future[MetadataImage], list[int]]] = {}
        # own changes published before the watch delivered them: etcd revision -> token
        self._ahead: dict[int, str] = {}
        self._last_log = 0.0
        # this broker's etcd session: its lease (broker.session.timeout.ms; etcd's leases are whole
        # seconds, and etcd raises a TTL below its minimum, about 2 s), and the registration under it
        self.session = EtcdSession(self.client, ttl_s=max(1, -(-int(session_timeout_ms) // 1000)))
        # this broker's registration under that lease: cluster's (shoal.cluster.registration), so
        # the composition root wires it; without it the backend registers no broker
        self.registration = registration(self) if registration is not None else None
        self.reloads = 0  # full reads of the prefix after the first (compactions), for tests
        self.batch_max_ops = BATCH_MAX_OPS  # txn_budget's bounds (tests make them small)
        self.batch_max_bytes = BATCH_MAX_BYTES

    # -- keys -------------------------------------------------------------------------------------

    def key(self, section: str, name: str = "") -> bytes:
        return self._root + section.encode() + (b"/" + name.encode() if name else b"")

    @property
    def _epoch_key(self) -> bytes:
        return self.key("meta", "epoch")

    # -- reads and lifecycle ----------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        if self._image is None:
            raise RuntimeError("EtcdBackend.start() has not been awaited")
        return self._image

    @property
    def reachable(self) -> bool:
        return self._reachable

    def writable(self) -> MetadataImage:
        if self._closed:
            raise MetadataError("KAFKA_STORAGE_ERROR", "metadata store is closed")
        if self._refusing():
            raise self._unreachable_error()
        return self.image

    def _refusing(self) -> bool:
        """etcd unreachable for longer than an election takes (or never reached)."""
        since = self._unreachable_since
        return not self._reachable and (since is None or time.monotonic() - since >= UNREACHABLE_GRACE_S)

    def _unreachable_error(self) -> MetadataError:
        return MetadataError(
            "REQUEST_TIMED_OUT", f"the metadata quorum (etcd at {self.client.where}) is unreachable: "
            f"{self._why}; retry")

    def turn(self) -> asyncio.Lock:
        """This process's writers take turns (an optimization: other brokers are fenced by the
        transaction's compare)."""
        return self._turn

    async def start(self) -> None:
        """Read the prefix (creating the cluster id if this is the first broker) and start the
        watch; waits, retrying with backoff and logging, until etcd answers."""
        if self._task is not None:
            return
        self._closed = False
        self._ready = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"etcd-watch {self.prefix}")
        waiter = asyncio.ensure_future(self._ready.wait())
        done, _ = await asyncio.wait([waiter, self._task], return_when=asyncio.FIRST_COMPLETED)
        if self._task in done:
            waiter.cancel()
            self._task.result()  # raises what ended it
            raise MetadataError("KAFKA_STORAGE_ERROR", "the etcd watch ended before the store started")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.session.close()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except BaseException:
                pass
        for _, fut, _ in self._own.values():
            if not fut.done():
                fut.set_exception(MetadataError("KAFKA_STORAGE_ERROR", "metadata store closed"))
        self._own.clear()
        await self.client.close()

    async def refresh(self, epoch: int) -> None:
        """Wait until the image is past ``epoch`` (the watch brings the change that beat us);
        after REFRESH_TIMEOUT_S, read the prefix again."""
        deadline = time.monotonic() + REFRESH_TIMEOUT_S
        while self._image is not None and self._image.epoch <= epoch and not self._closed:
            left = deadline - time.monotonic()
            if left <= 0:
                self._resync()
                deadline = time.monotonic() + REFRESH_TIMEOUT_S
                continue
            ev = self._progress
            try:
                await asyncio.wait_for(ev.wait(), left)
            except asyncio.TimeoutError:
                pass

    def _resync(self) -> None:
        self._reload = True
        call = self._watch_call
        if call is not None:
            call.cancel()

    # -- the watch loop ---------------------------------------------------------------------------

    async def _run(self) -> None:
        self._backoff = 0.0
        try:
            while not self._closed:
                try:
                    if self._reload:
                        await self._load()
                    await self._watch()
                except _Compacted:
                    log.info("etcd compacted past revision %d: reading %s again", self._revision + 1, self.prefix)
                    self._reload = True
                except _Resync:
                    pass
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if self._closed or (task is not None and task.cancelling()):
                        raise
                    # our own _resync cancelled the watch call
                except MetadataError:
                    raise
                except Exception as e:  # grpc.aio.AioRpcError and friends: etcd unreachable
                    refused = refusal(e, self.client.security, self.prefix)
                    if refused is not None and not (self._ready is not None and self._ready.is_set()):
                        # a broker etcd will not serve (certificate, password, permission): starting
                        # fails in one line instead of retrying for ever
                        raise EtcdSecurityError(refused) from None
                    if self._backoff == 0.0 and self._reachable:
                        # the member we watched went away: watch again at once, through another
                        self._backoff = 0.1
                        log.info("etcd watch interrupted (%s); watching again", _why(e))
                        continue
                    self._unreachable(e)
                    await asyncio.sleep(self._backoff)
                    self._backoff = min(max(self._backoff, 0.1) * 2, MAX_BACKOFF_S)
        finally:
            self._reachable = False
            try:
                await self.client.close()
            except Exception:
                pass

    def _unreachable(self, e: BaseException) -> None:
        self._why = _why(e) + hint(e, self.client.security)
        was = self._reachable
        self._reachable = False
        now = time.monotonic()
        if was:
            self._unreachable_since = now
        if was or now - self._last_log >= LOG_EVERY_S:
            self._last_log = now
            log.warning("cannot reach etcd at %s: %s; retrying", self.client.where, self._why)

    async def _load(self) -> None:
        """Create the cluster id if absent, read the whole prefix at one revision, publish."""
        client = self.client
        cid_key, epoch_key = self.key("meta", "cluster_id"), self._epoch_key
        cluster_id = _new_cluster_id(self._new_uuid)
        await client.txn(
            [client.created_at(cid_key, 0)],
            [client.put_op(cid_key, cluster_id.encode()), client.put_op(epoch_key, _json({"epoch": 0, "by": "init"}))],
        )
        resp = await self.client.range(self._root, _range_end(self._root))
        revision = int(resp.header.revision)
        image, epoch_mod = self._decode_all(resp.kvs)
        old = self._image
        if old is not None:
            image = _keeping_unchanged_topics(old, image)
        self._image = image
        self._epoch_mod = epoch_mod
        self._revision = revision
        self._reload = False
        self._ahead = {r: t for r, t in self._ahead.items() if r > revision}
        if old is not None:
            self.reloads += 1
        for token, (_change, fut, rev) in list(self._own.items()):
            if rev and rev[0] <= revision and not fut.done():  # a commit the reload went past
                self._own.pop(token, None)
                fut.set_result(image)
        self._moved()
        if old is not None and old is not image:
            self._tell(old, image)

    async def _watch(self) -> None:
        stop = asyncio.Event()
        call = await self.client.watch(self._root, _range_end(self._root), self._revision + 1, stop)
        self._watch_call = call
        try:
            async for resp in call:
                if resp.compact_revision:
                    raise _Compacted()
                if resp.canceled:
                    self.client.watch_canceled(resp.cancel_reason)
                    raise ConnectionError(resp.cancel_reason or "watch cancelled by etcd")
                if resp.created:
                    self._backoff = 0.0
                    if not self._reachable:
                        if self._ready is not None and self._ready.is_set():
                            log.info("etcd at %s reachable again (image at epoch %d)",
                                     self.client.where, self.image.epoch)
                        self._reachable = True
                        self._unreachable_since = None
                        self._why = ""
                    if self._ready is not None:
                        self._ready.set()
                if resp.events:
                    self._apply_events(resp.events)
            raise ConnectionError("the etcd watch stream ended")
        finally:
            stop.set()
            self._watch_call = None
            call.cancel()

    # -- decoding ---------------------------------------------------------------------------------

    def _empty(self, cluster_id: str) -> MetadataImage:
        empty: Any = MappingProxyType({})
        return MetadataImage(cluster_id, self.node_id, empty, empty, empty, empty)

    def _decode_all(self, kvs: Iterable[Any]) -> tuple[MetadataImage, int]:
        cluster_id = ""
        for kv in kvs:
            if kv.key == self.key("meta", "cluster_id"):
                cluster_id = kv.value.decode()
        change, epoch, epoch_mod, _token = self._decode_events([(True, kv) for kv in kvs])
        image = change.apply(self._empty(cluster_id))
        return dataclasses.replace(image, epoch=epoch or 0, topics_delta=None), epoch_mod

    def _decode_events(self, events: Sequence[tuple[bool, Any]]) -> tuple[Change, int | None, int, str | None]:
        """(put?, kv) events -> the Change they make, the epoch and its mod revision (None, 0 if
        the epoch key is not among them) and the token of the writer."""
        c = Change()
        epoch: int | None = None
        epoch_mod = 0
        token = None
        added: list[tuple[int, int, AclEntry]] = []
        root = len(self._root)
        for put, kv in events:
            section, _, name_b = kv.key[root:].partition(b"/")
            try:
                name = name_b.decode()
                value: Any = json.loads(kv.value) if put and section not in (b"meta", b"user_tenants", b"renamed_topics") else None
                if section == b"topics":
                    c.topics[name] = codec.topic_from_json(value) if put else None
                elif section == b"meta":
                    if name == "epoch" and put:
                        d = json.loads(kv.value)
                        epoch, epoch_mod, token = int(d["epoch"]), int(kv.mod_revision), d.get("by")
                    elif name == "next_producer_id" and put:
                        c.next_producer_id = int(kv.value)
                    elif name == "features" and put:
                        c.features = codec.features_from_json(json.loads(kv.value))
                elif section == b"brokers":
                    c.brokers[int(name)] = codec.broker_from_json(value) if put else None  # type: ignore[assignment]
                elif section == b"configs" and name == "broker":
                    c.broker_configs = MappingProxyType({str(k): str(v) for k, v in (value or {}).items()})
                elif section == b"broker_configs":  # per-broker dynamic configs, by node id
                    c.broker_overrides[int(name)] = MappingProxyType(
                        {str(k): str(v) for k, v in value.items()}) if put else None
                elif section == b"scram":
                    c.scram_credentials[name] = codec.user_credentials_from_json(value) if put else None
                elif section == b"tenants":
                    c.tenants[name] = codec.tenant_from_json(value) if put else None
                elif section == b"user_tenants":
                    c.user_tenants[name] = kv.value.decode() if put else None
                elif section == b"tenant_admins":
                    c.tenant_admins[name] = put
                elif section == b"namespaces":
                    c.namespaces[name] = NamespaceInfo(
                        name, MappingProxyType({str(k): str(v) for k, v in value.items()})) if put else None
                elif section == b"identity_pools":
                    c.identity_pools[name] = codec.identity_pool_from_json(value) if put else None
                elif section == b"acls":
                    entry = codec.acl_from_json(json.loads(name))
                    if put:
                        added.append((int(kv.create_revision), int(value), entry))
                    else:
                        c.acls_removed.add(entry)
                elif section == b"quotas":
                    entity = codec.entity_from_json(json.loads(name))
                    c.client_quotas[entity] = codec.quota_values_from_json(value) if put else None
                elif section == b"renamed_topics":
                    c.renamed_topics[name] = uuid.UUID(kv.value.decode()) if put else None
                # other sections (the controller's election, ...) are not part of the image
            except codec.FormatVersionError as e:  # written by a newer release: never misread
                log.error("skipping etcd key %r: %s", kv.key, e)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                log.error("ignoring undecodable etcd key %r: %s", kv.key, e)
        c.acls_added = [entry for _, _, entry in sorted(added, key=lambda a: (a[0], a[1]))]
        return c, epoch, epoch_mod, token

    def _apply_events(self, events: Sequence[Any]) -> None:
        """Apply watch events, one published image per revision (one transaction)."""
        batch: list[Any] = []
        for ev in events:
            if batch and ev.kv.mod_revision != batch[0].kv.mod_revision:
                self._apply_revision(batch)
                batch = []
            batch.append(ev)
        if batch:
            self._apply_revision(batch)

    def _apply_revision(self, events: list[Any]) -> None:
        revision = int(events[0].kv.mod_revision)
        if revision <= self._revision:
            return
        if self._ahead.pop(revision, None) is not None:  # our own change, published already
            self._revision = revision
            return
        change, epoch, epoch_mod, token = self._decode_events([(self.client.is_put(ev), ev.kv) for ev in events])
        old = self.image
        own = self._own.pop(token, None) if token is not None else None
        if own is not None:
            change = own[0]  # our own commit: the change itself, with the objects the rules made
        new = change.apply(old)
        new = dataclasses.replace(new, epoch=old.epoch if epoch is None else epoch)
        if epoch is not None:
            self._epoch_mod = epoch_mod
        self._image = new
        self._revision = revision
        if own is not None and not own[1].done():
            own[1].set_result(new)
        self._moved()
        self._tell(old, new)

    def _moved(self) -> None:
        ev, self._progress = self._progress, asyncio.Event()
        ev.set()

    # -- commits ----------------------------------------------------------------------------------

    async def commit(self, change: Change, expected_epoch: int) -> MetadataImage:
        old = self.writable()
        if old.epoch != expected_epoch:
            raise CommitConflict(expected_epoch, old.epoch)
        if change.brokers:
            raise ValueError("broker registrations go through EtcdBackend.register()")
        change = change.settle(old)  # persisted with the former names it makes stale
        client = self.client
        token = f"{self._token_base}-{next(self._tokens)}"
        ops = self._ops(change, old)
        ops.append(client.put_op(self._epoch_key, _json({"epoch": expected_epoch + 1, "by": token})))
        compare = [client.modified_at(self._epoch_key, self._epoch_mod)]
        fenced = self.fence() if self.fence is not None else []
        fut: asyncio.Future[MetadataImage] = asyncio.get_running_loop().create_future()
        rev: list[int] = []
        self._own[token] = (change, fut, rev)
        read_epoch = [client.get_op(self._epoch_key)]
        deadline = time.monotonic() + COMMIT_DEADLINE_S
        while True:
            try:
                left = deadline - time.monotonic()
                resp = await self.client.txn(compare + fenced, ops, read_epoch, timeout=min(TXN_ATTEMPT_S, left))
                break
            except BaseException as e:
                if (isinstance(e, asyncio.CancelledError) or not _transient(e) or self._closed
                        or deadline - time.monotonic() < 0.5 or self._refusing()):
                    self._own.pop(token, None)
                    if isinstance(e, asyncio.CancelledError):
                        raise
                    raise self._txn_error(e, len(ops)) from e
                await asyncio.sleep(0.2)  # a member died or etcd is electing: again, maybe elsewhere
        kvs = resp.responses[0].response_range.kvs if not resp.succeeded else []
        if kvs and json.loads(kvs[0].value).get("by") == token:  # an earlier attempt landed after all
            resp.succeeded, resp.header.revision = True, kvs[0].mod_revision
        if not resp.succeeded:
            self._own.pop(token, None)
            actual = int(json.loads(kvs[0].value)["epoch"]) if kvs else -1
            if kvs and int(kvs[0].mod_revision) == self._epoch_mod and fenced:
                raise MetadataError("NOT_CONTROLLER", "this broker is no longer the controller")
            # the watch brings the newer image (refresh waits for it)
            raise CommitConflict(expected_epoch, actual)
        rev.append(int(resp.header.revision))
        if not fut.done() and self._revision >= rev[0]:  # a reload went past it
            self._own.pop(token, None)
            return self.image
        try:
            return await asyncio.wait_for(asyncio.shield(fut), OWN_WATCH_WAIT_S)
        except asyncio.TimeoutError:
            pass
        if fut.done():
            return fut.result()
        return self._apply_ahead(token, rev[0], expected_epoch)

    def txn_budget(self) -> Callable[[TopicInfo], bool]:
        """One transaction's room (``BATCH_MAX_OPS``, ``BATCH_MAX_BYTES``; ``batch_max_ops`` and
        ``batch_max_bytes`` on the instance): a topic is one put of its whole JSON (``_ops``), the
        epoch's put one more."""
        room = {"ops": self.batch_max_ops - 1, "bytes": self.batch_max_bytes}
        version = _topic_version(self.image)

        def admit(topic: TopicInfo) -> bool:
            # (+ a few bytes a partition: the changed ISRs may be longer)
            size = (len(self.key("topics", topic.name)) + len(_json(codec.topic_to_json(topic, version)))
                    + 8 * len(topic.partitions))
            if room["ops"] < 1 or room["bytes"] < size:
                return False
            room["ops"] -= 1
            room["bytes"] -= size
            return True

        return admit

    def _apply_ahead(self, token: str, revision: int, expected_epoch: int) -> MetadataImage:
        """Publish our own committed change before the watch has delivered it (etcd went away
        right after the transaction, or the watch lags): the transaction's success proves that no
        epoch change lies between the image and ``revision`` (its compare), so only registrations
        may be missing below it, and those touch other keys. The image goes to epoch + 1 and the
        watch, when it delivers ``revision``, only moves the revision past it (``_apply_revision``)."""
        change, fut, _rev = self._own.pop(token)
        old = self.image
        if old.epoch != expected_epoch:  # cannot happen (see above); never publish out of order
            raise MetadataError(
                "REQUEST_TIMED_OUT", f"the change was committed to etcd (revision {revision}) but this broker "
                "has not seen it yet; retry")
        new = dataclasses.replace(change.apply(old), epoch=expected_epoch + 1)
        self._image = new
        self._epoch_mod = revision
        self._ahead[revision] = token
        log.info("published this broker's change at etcd revision %d before its watch delivered it "
                 "(the watch is at %d)", revision, self._revision)
        fut.set_result(new)
        self._moved()
        self._tell(old, new)
        return new

    def _txn_error(self, e: BaseException, n_ops: int) -> MetadataError:
        why = _why(e)
        code = getattr(e, "code", None)
        name = getattr(code() if callable(code) else None, "name", "")
        if "too many operations" in why or "request is too large" in why or name == "RESOURCE_EXHAUSTED":
            return MetadataError(
                "POLICY_VIOLATION",
                f"this metadata change is too large for one etcd transaction ({n_ops} operations; {why}): "
                "raise etcd's --max-txn-ops / --max-request-bytes (docs/cluster.md)")
        return MetadataError(
            "REQUEST_TIMED_OUT", f"the metadata quorum (etcd at {self.client.where}) did not answer: {why}; "
            "the change may or may not have been made; retry")

    def _ops(self, c: Change, old: MetadataImage) -> list[Any]:
        """The puts and deletes of a change (not its epoch)."""
        client = self.client
        ops: list[Any] = []

        def put(key: bytes, value: bytes) -> None:
            ops.append(client.put_op(key, value))

        def delete(key: bytes) -> None:
            ops.append(client.delete_op(key))

        def section(name: str, entries: dict[Any, Any], encode: Callable[[Any], bytes]) -> None:
            for k, v in entries.items():
                if v is None:
                    delete(self.key(name, k))
                else:
                    put(self.key(name, k), encode(v))

        version = _topic_version(old)  # the compact form once shoal.version 2 is finalized
        section("topics", c.topics, lambda t: _json(codec.topic_to_json(t, version)))
        section("scram", c.scram_credentials, lambda v: _json(codec.user_credentials_to_json(v)))
        section("tenants", c.tenants, lambda t: _json(codec.tenant_to_json(t)))
        section("user_tenants", c.user_tenants, lambda t: str(t).encode())
        section("namespaces", c.namespaces, lambda ns: _json(dict(sorted(ns.configs.items()))))
        section("identity_pools", c.identity_pools, lambda p: _json(codec.identity_pool_to_json(p)))
        section("renamed_topics", c.renamed_topics, lambda i: str(i).encode())
        section("broker_configs", {str(n): v for n, v in c.broker_overrides.items()},
                lambda v: _json(dict(sorted(v.items()))))
        for user, admin in c.tenant_admins.items():
            if admin:
                put(self.key("tenant_admins", user), b"1")
            else:
                delete(self.key("tenant_admins", user))
        if c.broker_configs is not None:
            put(self.key("configs", "broker"), _json(dict(sorted(c.broker_configs.items()))))
        if c.next_producer_id is not None:
            put(self.key("meta", "next_producer_id"), str(c.next_producer_id).encode())
        if c.features is not None:
            put(self.key("meta", "features"), _json(codec.features_to_json(c.features)))
        existing = set(old.acls)
        for a in c.acls_removed:
            if a not in c.acls_added:
                delete(self.key("acls", json.dumps(codec.acl_to_json(a), separators=(",", ":"))))
        for i, a in enumerate(c.acls_added):
            if a not in existing or a in c.acls_removed:
                put(self.key("acls", json.dumps(codec.acl_to_json(a), separators=(",", ":"))), str(i).encode())
        for entity, values in c.client_quotas.items():
            key = self.key("quotas", json.dumps([list(e) for e in entity], separators=(",", ":")))
            if values is None:
                delete(key)
            else:
                put(key, _json(dict(sorted(values.items()))))
        return ops

    # -- broker registration ----------------------------------------------------------------------

    def broker_key(self, node_id: int) -> bytes:
        """The key of a node id's registration."""
        return self.key("brokers", str(node_id))

    async def register(self, info: BrokerInfo) -> None:
        """Register this broker under its lease (``self.registration``); returns once the image
        shows it. DUPLICATE_BROKER_REGISTRATION when a live broker holds the id."""
        if self.registration is None:
            raise RuntimeError("this etcd store was built without a broker registration "
                               "(shoal.cluster.registration.Registration.for_backend)")
        self.writable()
        try:
            revision = await self.registration.register(info)
        except MetadataError:
            raise
        except Exception as e:
            raise self._txn_error(e, 1) from e
        await self.wait_revision(revision)

    async def wait_revision(self, revision: int) -> None:
        """Until the image is at ``revision`` or later (or the store closes)."""
        while self._revision < revision and not self._closed:
            await self._progress.wait()


def _topic_version(image: MetadataImage) -> int:
    return codec.topic_version(image.features.levels.get(SHOAL_VERSION, 1))


def _keeping_unchanged_topics(old: MetadataImage, new: MetadataImage) -> MetadataImage:
    """``new`` (read again) holding ``old``'s topic objects where they are equal, so that
    ``changed_topics(old, new)`` names only the topics that changed."""
    topics = {n: old.topics[n] if old.topics.get(n) == t else t for n, t in new.topics.items()}
    return dataclasses.replace(new, topics=MappingProxyType(topics),
                               topics_by_id=MappingProxyType({t.topic_id: t for t in topics.values()}))


def _new_cluster_id(new_uuid: Callable[[], uuid.UUID]) -> str:
    from shoal.metadata.embedded import new_cluster_id

    return new_cluster_id(new_uuid)


class EtcdMetadataStore(DecidingStore):
    """``MetadataStore`` on etcd: the rules over an ``EtcdBackend``; broker registrations go
    under the backend's lease instead of through the rules (they are ephemeral), by the
    ``registration`` the composition root gives (``shoal.cluster.registration``)."""

    backend: EtcdBackend

    def __init__(
        self,
        url: str,
        *,
        node_id: int,
        session_timeout_ms: int = 9000,
        new_uuid: Callable[[], uuid.UUID] = uuid.uuid4,
        new_tenant_id: Callable[[], str] = new_tenant_id,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        registration: Callable[[EtcdBackend], BrokerRegistration] | None = None,
        security: EtcdSecurity | None = None,
    ) -> None:
        endpoints, prefix = parse_url(url)
        if security is None and url.startswith("etcds://"):
            security = EtcdSecurity(tls=True)
        backend = EtcdBackend(endpoints, prefix, node_id=node_id, session_timeout_ms=session_timeout_ms,
                              new_uuid=new_uuid, registration=registration, security=security)
        super().__init__(backend, new_uuid=new_uuid, new_tenant_id=new_tenant_id, now_ms=now_ms)
        self.url = url
        self.node_id = node_id

    async def register_broker(self, info: BrokerInfo) -> None:
        await self.backend.register(info)
