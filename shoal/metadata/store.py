"""Decide, then commit: the one place metadata changes are made, over any backend.

A ``DecidingStore`` carries out each ``MetadataStore`` command in a loop (``decide_and_commit``):

1. read the backend's image (``backend.writable()``: the newest image this node knows, or
   ``MetadataError`` when the backend refuses changes, e.g. closed);
2. decide with the pure rules (``shoal.metadata.rules``): ``Result(change, response)`` or
   ``MetadataError``; nothing to change ends the command there;
3. ``backend.commit(change, image.epoch)``: the backend applies the change only if its image is
   still at that epoch (compare-and-swap), makes it durable and publishes the new image to
   listeners; if another writer got there first it raises ``CommitConflict`` and the loop
   catches up (``backend.refresh``) and decides again, against the newer image.

So no update is lost however commands interleave (within a process, or across brokers sharing a
quorum), and the rules need no lock. A backend may serialize its own I/O, and may have the
writers of one process take turns (``MetadataBackend.turn``) so they do not race each other in
vain; neither is what makes the rules right.

A backend (``MetadataBackend``) is what a new store plugs in: the embedded one
(``shoal.metadata.embedded``: local files), the in-memory one (``shoal.metadata.memory``: tests),
an etcd one (a transaction ``If(version == expected)`` per commit, a watch for other brokers'
changes). See ``docs/metadata.md``.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import logging
import secrets
import string
import time
import uuid
from typing import AsyncContextManager, Callable, Mapping, Sequence, TypeVar

from shoal.metadata import (
    AclEntry,
    BrokerInfo,
    IdentityPool,
    IsrChange,
    MetadataError,
    MetadataImage,
    MetadataStore,
    NamespaceInfo,
    PartitionInfo,
    QuotaEntity,
    ScramCredential,
    TenantInfo,
    TopicInfo,
)
from shoal.metadata.change import Change, Result
from shoal.metadata.rules import acls as acl_rules
from shoal.metadata.rules import cluster as cluster_rules
from shoal.metadata.rules import configs as config_rules
from shoal.metadata.rules import features as feature_rules
from shoal.metadata.rules import identity_pools as pool_rules
from shoal.metadata.rules import namespaces as namespace_rules
from shoal.metadata.rules import quotas as quota_rules
from shoal.metadata.rules import tenants as tenant_rules
from shoal.metadata.rules import topics as topic_rules
from shoal.metadata.rules import users as user_rules

log = logging.getLogger(__name__)

T = TypeVar("T")
Listener = Callable[[MetadataImage, MetadataImage], None]

# A command that loses this many compare-and-swaps in a row gives up with a retriable error.
MAX_ATTEMPTS = 1000

_TENANT_ALPHABET = string.digits + string.ascii_lowercase


def new_tenant_id(choice: Callable[[str], str] = secrets.choice) -> str:
    """``lkc-`` + 6 random lowercase base36 characters."""
    return "lkc-" + "".join(choice(_TENANT_ALPHABET) for _ in range(6))


def new_pool_id(choice: Callable[[str], str] = secrets.choice) -> str:
    """``pool-`` + 6 random lowercase base36 characters (an OAuth identity pool)."""
    return "pool-" + "".join(choice(_TENANT_ALPHABET) for _ in range(6))


class CommitConflict(Exception):
    """The backend's image moved past the epoch a change was decided on: decide again."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(f"change decided on epoch {expected}, the store is at {actual}")
        self.expected = expected
        self.actual = actual


class MetadataBackend(abc.ABC):
    """Where images are committed. Implementations must be safe to call from one event loop.

    Contract (``tests/metadata`` runs it against every backend):
    - ``image`` is the newest committed image this node knows; images are immutable.
    - ``commit(change, expected_epoch)`` applies ``change`` to the image at ``expected_epoch``
      (``change.apply``: epoch + 1), durably, and only then makes it ``image`` and calls each
      listener with ``(old, new)``; it returns the new image. If the committed state is past
      ``expected_epoch`` it raises ``CommitConflict`` and changes nothing. A failure to make it
      durable raises ``MetadataError`` and publishes nothing.
    - after a ``CommitConflict``, ``refresh(epoch)`` returns once ``image`` is newer than
      ``epoch`` (a backend fed by a watch waits for it, or re-reads).
    - changes committed by other writers (other brokers) are published to listeners too.
    """

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    @property
    @abc.abstractmethod
    def image(self) -> MetadataImage: ...

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    def writable(self) -> MetadataImage:
        """The image to decide a change on; MetadataError when this backend takes no changes."""

    @abc.abstractmethod
    async def commit(self, change: Change, expected_epoch: int) -> MetadataImage: ...

    async def refresh(self, epoch: int) -> None:
        """Return once ``image`` is newer than ``epoch`` (a local backend already is)."""

    def turn(self) -> AsyncContextManager[None]:
        """Held around each decide-and-commit attempt of this process; by default nothing.

        Only an optimization: writers of one process that take turns do not decide against an
        image that a commit in flight is about to replace, and so do not lose swaps to each other
        (a burst of N concurrent commands would otherwise decide O(N^2) times). Correctness never
        rests on it: the compare-and-swap in ``commit`` does, against writers that do not share
        the turn (other brokers; the tests' backends that take none).
        """
        return contextlib.nullcontext()

    def txn_budget(self) -> Callable[[TopicInfo], bool]:
        """A fresh bound on one commit of a change that may be split in several (a batch of ISR
        changes, ``DecidingStore.alter_isrs``): called with each topic the change would write, in
        turn, it answers False once that one would not fit besides those before it. By default
        there is no bound (the etcd backend's is its transaction limits)."""
        return lambda topic: True

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        try:
            self._listeners.remove(listener)
        except ValueError:
            pass

    def _tell(self, old: MetadataImage, new: MetadataImage) -> None:
        """Call every listener with ``(old, new)``; a broken one must not undo a committed change."""
        for listener in list(self._listeners):
            try:
                listener(old, new)
            except Exception:
                log.exception("metadata listener %r failed", listener)


class DecidingStore(MetadataStore):
    """``MetadataStore`` over a ``MetadataBackend``: every command is a rule decided on the
    backend's image and committed by compare-and-swap, again on conflict.

    ``new_uuid`` (topic ids), ``new_tenant_id`` and ``now_ms`` are the randomness and clock the
    rules are given; injectable for tests.
    """

    def __init__(
        self,
        backend: MetadataBackend,
        *,
        new_uuid: Callable[[], uuid.UUID] = uuid.uuid4,
        new_tenant_id: Callable[[], str] = new_tenant_id,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.backend = backend
        self._new_uuid = new_uuid
        self._new_tenant_id = new_tenant_id
        self._now_ms = now_ms
        self.conflicts = 0  # compare-and-swaps lost (and decided again), for tests and metrics

    async def decide_and_commit(self, decide: Callable[[MetadataImage], Result[T]]) -> T:
        """Run ``decide`` on the newest image and commit its change, deciding again after each
        lost compare-and-swap; the decision's response once its change is committed."""
        backend = self.backend
        for _ in range(MAX_ATTEMPTS):
            async with backend.turn():
                image = backend.writable()
                result = decide(image)
                if result.change is None:
                    return result.response
                try:
                    await backend.commit(result.change, image.epoch)
                    return result.response
                except CommitConflict:
                    self.conflicts += 1
            await backend.refresh(image.epoch)
        raise MetadataError("REQUEST_TIMED_OUT", f"metadata change lost {MAX_ATTEMPTS} races in a row; retry")

    @property
    def new_uuid(self) -> Callable[[], uuid.UUID]:
        """The topic-id source the rules are given (for callers' own decisions)."""
        return self._new_uuid

    # -- reads and lifecycle --------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self.backend.image

    async def start(self) -> None:
        await self.backend.start()

    async def close(self) -> None:
        await self.backend.close()

    def subscribe(self, listener: Listener) -> None:
        self.backend.subscribe(listener)

    def unsubscribe(self, listener: Listener) -> None:
        self.backend.unsubscribe(listener)

    # -- commands -------------------------------------------------------------------------------

    async def register_broker(self, info: BrokerInfo) -> None:
        await self.decide_and_commit(lambda img: cluster_rules.register_broker(img, info))

    async def allocate_producer_ids(self, count: int) -> tuple[int, int]:
        return await self.decide_and_commit(lambda img: cluster_rules.allocate_producer_ids(img, count))

    async def create_topic(
        self,
        name: str,
        assignments: list[tuple[int, ...]],
        configs: Mapping[str, str],
        *,
        internal: bool = False,
        observers: Sequence[tuple[int, ...]] | None = None,
    ) -> TopicInfo:
        planned = list(assignments)  # a command may be decided more than once
        return await self.decide_and_commit(
            lambda img: topic_rules.create_topic(img, name, planned, configs, internal=internal, new_uuid=self._new_uuid,
                                                 observers=observers)
        )

    async def delete_topic(self, name: str) -> TopicInfo:
        return await self.decide_and_commit(lambda img: topic_rules.delete_topic(img, name))

    async def add_partitions(self, name: str, assignments: list[tuple[int, ...]]) -> TopicInfo:
        planned = list(assignments)
        return await self.decide_and_commit(lambda img: topic_rules.add_partitions(img, name, planned))

    async def rename_topic(self, old: str, new: str) -> TopicInfo:
        return await self.decide_and_commit(lambda img: topic_rules.rename_topic(img, old, new))

    async def update_partition(
        self,
        name: str,
        partition: int,
        *,
        leader: int | None = None,
        isr: tuple[int, ...] | None = None,
        replicas: tuple[int, ...] | None = None,
    ) -> PartitionInfo:
        """Change a partition's leader/ISR/replicas. A leader change bumps ``leader_epoch``; any
        change bumps ``partition_epoch`` (as KRaft's PartitionChangeRecord does)."""
        return await self.decide_and_commit(
            lambda img: topic_rules.update_partition(img, name, partition, leader=leader, isr=isr, replicas=replicas)
        )

    async def alter_isr(
        self, name: str, partition: int, *, leader: int, leader_epoch: int, partition_epoch: int,
        isr: tuple[int, ...], min_isr: int | None = None,
    ) -> PartitionInfo:
        """A leader's ISR change, fenced by its leader epoch and the partition epoch it decided on
        (``topic_rules.alter_isr``: Kafka's AlterPartition; ``min_isr``: the leader's
        min.insync.replicas, for observer promotion)."""
        return await self.decide_and_commit(
            lambda img: topic_rules.alter_isr(img, name, partition, leader=leader, leader_epoch=leader_epoch,
                                              partition_epoch=partition_epoch, isr=isr, min_isr=min_isr)
        )

    async def alter_isrs(self, changes: Sequence[IsrChange]) -> list[PartitionInfo | MetadataError]:
        """Many partitions' ISR changes, as few commits as the backend allows (Kafka's
        AlterPartition request, one per broker, carries many partitions): per change, in order, the
        partition after it or the ``MetadataError`` refusing it.

        Each change is decided as ``alter_isr`` decides it (``topic_rules.alter_isrs``), so a stale
        or fenced one is refused alone and the others commit. The changes are committed in as few
        changes as ``backend.txn_budget`` lets them (one etcd transaction holds at most etcd's
        default operations and bytes), one after the other; a compare-and-swap lost to another
        writer decides that commit's changes again on the newer image. A commit that fails (the
        store unreachable) answers its changes and those not committed yet with its error."""
        answers: list[PartitionInfo | MetadataError | None] = [None] * len(changes)
        todo = list(range(len(changes)))
        while todo:
            batch = [changes[i] for i in todo]
            try:
                got = await self.decide_and_commit(functools.partial(
                    self._alter_isrs_decision, batch=batch))
            except MetadataError as e:
                for i in todo:
                    answers[i] = e
                break
            for i, answer in zip(todo, got):
                answers[i] = answer
            todo = [i for i, answer in zip(todo, got) if answer is None]
        return answers  # type: ignore[return-value]  # (every one answered)

    def _alter_isrs_decision(self, img: MetadataImage, batch: Sequence[IsrChange]) -> Result[list[topic_rules.IsrAnswer]]:
        return topic_rules.alter_isrs(img, batch, self.backend.txn_budget())

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        return await self.decide_and_commit(lambda img: config_rules.set_topic_configs(img, name, configs))

    async def alter_topic_configs(self, name: str, updates: Mapping[str, str | None]) -> TopicInfo:
        return await self.decide_and_commit(lambda img: config_rules.alter_topic_configs(img, name, updates))

    async def set_broker_configs(self, configs: Mapping[str, str]) -> None:
        await self.decide_and_commit(lambda img: config_rules.set_broker_configs(img, configs))

    async def update_features(self, updates: Sequence[tuple[str, int, int]], validate_only: bool = False) -> None:
        await self.decide_and_commit(lambda img: feature_rules.update_features(img, updates, validate_only))

    async def finalize_missing_features(self, defaults: Mapping[str, int]) -> None:
        await self.decide_and_commit(lambda img: feature_rules.finalize_missing(img, defaults))

    # auth: SCRAM credentials
    async def set_scram_credential(
        self,
        user: str,
        mechanism: str,
        salt: bytes,
        stored_key: bytes,
        server_key: bytes,
        iterations: int,
    ) -> None:
        cred = ScramCredential(mechanism, bytes(salt), bytes(stored_key), bytes(server_key), int(iterations))
        await self.decide_and_commit(lambda img: user_rules.set_scram_credential(img, user, cred))

    async def delete_scram_credential(self, user: str, mechanism: str) -> None:
        await self.decide_and_commit(lambda img: user_rules.delete_scram_credential(img, user, mechanism))

    async def assign_user(
        self,
        user: str,
        tenant_id: str,
        credential: ScramCredential | tuple[ScramCredential, ...] | None = None,
        *,
        new_user: bool = False,
    ) -> None:
        await self.decide_and_commit(
            lambda img: user_rules.assign_user(img, user, tenant_id, credential, new_user=new_user)
        )

    async def remove_user(self, user: str) -> None:
        await self.decide_and_commit(lambda img: user_rules.remove_user(img, user))

    # tenants: logical clusters
    async def create_tenant(self, display_name: str) -> TenantInfo:
        now = int(self._now_ms())
        return await self.decide_and_commit(
            lambda img: tenant_rules.create_tenant(img, display_name, new_tenant_id=self._new_tenant_id, now_ms=now)
        )

    async def delete_tenant(self, tenant_id: str) -> TenantInfo:
        return await self.decide_and_commit(lambda img: tenant_rules.delete_tenant(img, tenant_id))

    async def update_tenant(
        self,
        tenant_id: str,
        *,
        display_name: str | None = None,
        configs: Mapping[str, str] | None = None,
        policy: Mapping[str, object] | None = None,
    ) -> TenantInfo:
        return await self.decide_and_commit(
            lambda img: tenant_rules.update_tenant(img, tenant_id, display_name=display_name, configs=configs, policy=policy)
        )

    async def set_tenant_admin(self, user: str, admin: bool) -> None:
        await self.decide_and_commit(lambda img: tenant_rules.set_tenant_admin(img, user, admin))

    async def create_identity_pool(
        self, tenant_id: str, issuer: str, claim_filter: Mapping[str, str] | None, *,
        principal_claim: str = "sub", display_name: str = "",
    ) -> IdentityPool:
        return await self.decide_and_commit(lambda img: pool_rules.create_identity_pool(
            img, tenant_id, issuer, claim_filter, principal_claim=principal_claim, display_name=display_name,
            new_pool_id=new_pool_id))

    async def delete_identity_pool(self, pool_id: str) -> IdentityPool:
        return await self.decide_and_commit(lambda img: pool_rules.delete_identity_pool(img, pool_id))

    # namespaces (KIP-37)
    async def create_namespaces(self, names: list[str]) -> None:
        names = list(names)
        await self.decide_and_commit(lambda img: namespace_rules.create_namespaces(img, names))

    async def delete_namespaces(self, names: list[str], topics: list[str]) -> None:
        names, topics = list(names), list(topics)
        await self.decide_and_commit(lambda img: namespace_rules.delete_namespaces(img, names, topics))

    async def set_namespace_configs(self, name: str, configs: Mapping[str, str]) -> NamespaceInfo:
        return await self.decide_and_commit(lambda img: namespace_rules.set_namespace_configs(img, name, configs))

    # ACLs and client quotas
    async def alter_acls(self, add: list[AclEntry], remove: list[AclEntry]) -> None:
        add, remove = list(add), list(remove)
        await self.decide_and_commit(lambda img: acl_rules.alter_acls(img, add, remove))

    async def alter_client_quotas(self, changes: list[tuple[QuotaEntity, Mapping[str, float | None]]]) -> None:
        changes = list(changes)
        await self.decide_and_commit(lambda img: quota_rules.alter_client_quotas(img, changes))
