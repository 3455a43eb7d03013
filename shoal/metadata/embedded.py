"""The embedded metadata store: one node, one JSON file, no quorum.

State lives in ``<data_dir>/__metadata/metadata.json`` (or the ``.json`` path given). Every
mutation runs under one ``asyncio.Lock``: it computes the next state, writes the whole file
atomically (temp file, fsync, rename, fsync of the directory; in a worker thread so the event loop
is never blocked on the disk), and only then publishes a new immutable ``MetadataImage`` with
``epoch + 1`` and tells subscribers ``(old, new)``. A crash at any point leaves either the old file
or the new one, never a torn one.

Invariants:
- the cluster id is generated once (22-char base64url of a uuid4, as Kafka's ``random-uuid``) and
  kept for the life of the data directory; a different ``cluster_id`` given later is refused;
- topic ids are random uuid4s, never the zero uuid, never reused within the store;
- leader = first replica, ISR = all replicas, leader epoch 0 at creation.

Broker registrations are ephemeral (as in ZooKeeper mode): they are not persisted, the broker
registers itself again after each start. The image's ``epoch`` is persisted, so it keeps growing
across restarts.

Producer ids: ``next_producer_id`` in the file is the first id no block has been given out for;
``allocate_producer_ids`` moves it under the same lock and atomic write as every other change
(without publishing a new image: the image does not carry it).

SCRAM credentials (auth) are part of the image and the file, as base64 salted hashes
(``scram_credentials``: user -> mechanism -> salt, stored_key, server_key, iterations); the
password is never stored.

Tenants (logical clusters) are part of the image and the file too: ``tenants`` (a list of
``tenant_id``, ``display_name``, ``created_ms``) and ``user_tenants`` (SCRAM user -> tenant id).
Tenant ids are ``lkc-`` + 6 random lowercase base36 characters, unique within the store. Deleting
a tenant removes its users' credentials and mappings in the same write.

Policy (names, partition counts, replication factors, config values) is the caller's business; the
store only refuses what would corrupt its state (a duplicate name, an unknown topic).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import os
import secrets
import string
import time
import uuid
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from shoal.metadata import (
    AclEntry,
    BrokerInfo,
    NamespaceInfo,
    QuotaEntity,
    MetadataError,
    MetadataImage,
    MetadataStore,
    PartitionInfo,
    ScramCredential,
    TenantInfo,
    TopicInfo,
    owner_tenant,
    tenant_prefix,
)

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
METADATA_DIR = "__metadata"
METADATA_FILE = "metadata.json"

Listener = Callable[[MetadataImage, MetadataImage], None]


def new_cluster_id(new_uuid: Callable[[], uuid.UUID] = uuid.uuid4) -> str:
    """Kafka's ``Uuid.randomUuid().toString()``: url-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(new_uuid().bytes).decode("ascii").rstrip("=")


class MetadataFiles:
    """The store's file operations, injectable so tests can simulate crashes and torn writes."""

    def read(self, path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def write_atomic(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self.fsync_dir(path.parent)

    def fsync_dir(self, directory: Path) -> None:
        try:
            fd = os.open(directory, os.O_RDONLY)
        except OSError:  # platforms without directory fds
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)


def resolve_path(path: str | Path) -> Path:
    """A ``.json`` path is the file itself; anything else is a data dir holding ``__metadata/``."""
    p = Path(path)
    if p.suffix == ".json":
        return p
    return p / METADATA_DIR / METADATA_FILE


# ---------------------------------------------------------------------------------------------
# Serialization


def _partition_to_json(p: PartitionInfo) -> dict[str, Any]:
    return {
        "partition": p.partition,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
        "partition_epoch": p.partition_epoch,
    }


def _partition_from_json(d: Mapping[str, Any]) -> PartitionInfo:
    return PartitionInfo(
        partition=int(d["partition"]),
        replicas=tuple(int(r) for r in d["replicas"]),
        isr=tuple(int(r) for r in d["isr"]),
        leader=int(d["leader"]),
        leader_epoch=int(d.get("leader_epoch", 0)),
        partition_epoch=int(d.get("partition_epoch", 0)),
    )


def _topic_to_json(t: TopicInfo) -> dict[str, Any]:
    return {
        "name": t.name,
        "topic_id": str(t.topic_id),
        "internal": t.internal,
        "configs": dict(t.configs),
        "partitions": [_partition_to_json(p) for p in t.partitions],
    }


def _topic_from_json(d: Mapping[str, Any]) -> TopicInfo:
    return _topic(
        name=str(d["name"]),
        topic_id=uuid.UUID(d["topic_id"]),
        partitions=tuple(_partition_from_json(p) for p in d["partitions"]),
        configs={str(k): str(v) for k, v in d.get("configs", {}).items()},
        internal=bool(d.get("internal", False)),
    )


def _topic(
    *,
    name: str,
    topic_id: uuid.UUID,
    partitions: tuple[PartitionInfo, ...],
    configs: Mapping[str, str],
    internal: bool,
) -> TopicInfo:
    return TopicInfo(
        name=name,
        topic_id=topic_id,
        partitions=partitions,
        configs=MappingProxyType(dict(configs)),
        internal=internal,
    )


def _new_partitions(first: int, assignments: list[tuple[int, ...]]) -> tuple[PartitionInfo, ...]:
    out = []
    for i, replicas in enumerate(assignments):
        replicas = tuple(int(r) for r in replicas)
        out.append(
            PartitionInfo(
                partition=first + i,
                replicas=replicas,
                isr=replicas,
                leader=replicas[0] if replicas else -1,
                leader_epoch=0,
                partition_epoch=0,
            )
        )
    return tuple(out)


# auth: SCRAM credentials
def _credentials_to_json(creds: Mapping[str, Mapping[str, ScramCredential]]) -> dict[str, Any]:
    b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
    return {
        user: {
            mech: {
                "salt": b64(c.salt),
                "stored_key": b64(c.stored_key),
                "server_key": b64(c.server_key),
                "iterations": c.iterations,
            }
            for mech, c in sorted(by_mech.items())
        }
        for user, by_mech in sorted(creds.items())
    }


def _credentials_from_json(d: Mapping[str, Any]) -> dict[str, Mapping[str, ScramCredential]]:
    out: dict[str, Mapping[str, ScramCredential]] = {}
    for user, by_mech in d.items():
        out[str(user)] = MappingProxyType(
            {
                str(mech): ScramCredential(
                    mechanism=str(mech),
                    salt=base64.b64decode(c["salt"]),
                    stored_key=base64.b64decode(c["stored_key"]),
                    server_key=base64.b64decode(c["server_key"]),
                    iterations=int(c["iterations"]),
                )
                for mech, c in by_mech.items()
            }
        )
    return out


# tenants
_TENANT_ALPHABET = string.digits + string.ascii_lowercase


def new_tenant_id(choice: Callable[[str], str] = secrets.choice) -> str:
    return "lkc-" + "".join(choice(_TENANT_ALPHABET) for _ in range(6))


def _tenants_to_json(tenants: Mapping[str, TenantInfo]) -> list[dict[str, Any]]:
    return [
        {
            "tenant_id": t.tenant_id,
            "display_name": t.display_name,
            "created_ms": t.created_ms,
            "configs": dict(sorted(t.configs.items())),
            "policy": dict(t.policy),
        }
        for _, t in sorted(tenants.items())
    ]


def _tenants_from_json(items: Any) -> dict[str, TenantInfo]:
    out: dict[str, TenantInfo] = {}
    for d in items:
        t = TenantInfo(
            str(d["tenant_id"]),
            str(d["display_name"]),
            int(d["created_ms"]),
            MappingProxyType({str(k): str(v) for k, v in d.get("configs", {}).items()}),
            MappingProxyType(dict(d.get("policy", {}))),
        )
        out[t.tenant_id] = t
    return out


def _acl_to_json(a: AclEntry) -> list[Any]:
    return [a.tenant, a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host,
            a.operation, a.permission_type]


def _acl_from_json(d: list[Any]) -> AclEntry:
    t, rt, rn, pt, pr, h, op, perm = d
    return AclEntry(None if t is None else str(t), int(rt), str(rn), int(pt), str(pr), str(h), int(op), int(perm))


def _quotas_to_json(quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> list[Any]:
    return [
        {"entity": [list(e) for e in entity], "values": dict(sorted(values.items()))}
        for entity, values in sorted(quotas.items(), key=lambda kv: repr(kv[0]))
    ]


def _quotas_from_json(items: Any) -> dict[QuotaEntity, Mapping[str, float]]:
    out: dict[QuotaEntity, Mapping[str, float]] = {}
    for d in items:
        entity = tuple((str(t), None if n is None else str(n)) for t, n in d["entity"])
        out[entity] = MappingProxyType({str(k): float(v) for k, v in d["values"].items()})
    return out


async def _uncancellable(write: Any) -> bool:
    """Run ``write`` to completion even if the caller is cancelled meanwhile (its exception, if
    any, is raised); True when the caller was cancelled, which it must then re-raise."""
    cancelled = False
    persist = asyncio.ensure_future(write)
    while True:
        try:
            await asyncio.shield(persist)
            break
        except asyncio.CancelledError:
            if persist.done():
                break
            cancelled = True
    persist.result()
    return cancelled


class EmbeddedMetadataStore(MetadataStore):
    """Single-node, file-backed ``MetadataStore``. Use from one event loop.

    ``path`` is either the JSON file or a data directory (then ``<dir>/__metadata/metadata.json``).
    ``new_uuid`` and ``files`` are injectable for tests.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        node_id: int,
        cluster_id: str | None = None,
        new_uuid: Callable[[], uuid.UUID] = uuid.uuid4,
        files: MetadataFiles | None = None,
        new_tenant_id: Callable[[], str] = new_tenant_id,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.path = resolve_path(path)
        self.node_id = node_id
        self._wanted_cluster_id = cluster_id
        self._new_uuid = new_uuid
        self._files = files or MetadataFiles()
        self._new_tenant_id = new_tenant_id
        self._now_ms = now_ms
        self._lock = asyncio.Lock()
        self._listeners: list[Listener] = []
        self._image: MetadataImage | None = None
        self._closed = False
        self._next_producer_id = 0

    # -- reads ----------------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        if self._image is None:
            raise RuntimeError("EmbeddedMetadataStore.start() has not been awaited")
        return self._image

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        try:
            self._listeners.remove(listener)
        except ValueError:
            pass

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        async with self._lock:
            if self._image is not None:
                return
            raw = await asyncio.to_thread(self._files.read, self.path)
            if raw is None:
                cluster_id = self._wanted_cluster_id or new_cluster_id(self._new_uuid)
                image = self._make_image(cluster_id, {}, {}, {}, epoch=0)
                await self._persist(image)
                log.info("created metadata store %s for cluster %s", self.path, cluster_id)
            else:
                image = self._load(raw)
            self._image = image
            self._closed = False

    async def close(self) -> None:
        async with self._lock:  # waits for an in-flight write
            self._closed = True

    def _load(self, raw: bytes) -> MetadataImage:
        try:
            doc = json.loads(raw)
            version = int(doc.get("version", 0))
            if version != FORMAT_VERSION:
                raise MetadataError(
                    "KAFKA_STORAGE_ERROR", f"{self.path}: unsupported metadata format version {version}"
                )
            cluster_id = str(doc["cluster_id"])
            stored_node = doc.get("node_id")
            topics = [_topic_from_json(t) for t in doc.get("topics", [])]
            broker_configs = {str(k): str(v) for k, v in doc.get("broker_configs", {}).items()}
            epoch = int(doc.get("epoch", 0))
            next_producer_id = int(doc.get("next_producer_id", 0))
            credentials = _credentials_from_json(doc.get("scram_credentials", {}))  # auth
            tenants = _tenants_from_json(doc.get("tenants", []))
            user_tenants = {str(u): str(t) for u, t in doc.get("user_tenants", {}).items()}
            extra = {
                "tenant_admins": frozenset(str(u) for u in doc.get("tenant_admins", [])),
                "namespaces": MappingProxyType({
                    str(n): NamespaceInfo(str(n), MappingProxyType({str(k): str(v) for k, v in c.items()}))
                    for n, c in doc.get("namespaces", {}).items()
                }),
                "acls": tuple(_acl_from_json(a) for a in doc.get("acls", [])),
                "client_quotas": MappingProxyType(_quotas_from_json(doc.get("client_quotas", []))),
                "renamed_topics": MappingProxyType({
                    str(n): uuid.UUID(str(i)) for n, i in doc.get("renamed_topics", {}).items()
                }),
            }
        except MetadataError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise MetadataError("KAFKA_STORAGE_ERROR", f"{self.path}: corrupt metadata file: {e}") from e
        if self._wanted_cluster_id is not None and self._wanted_cluster_id != cluster_id:
            raise MetadataError(
                "INCONSISTENT_CLUSTER_ID",
                f"{self.path} belongs to cluster {cluster_id}, not {self._wanted_cluster_id}",
            )
        if stored_node is not None and int(stored_node) != self.node_id:
            raise MetadataError(
                "INCONSISTENT_CLUSTER_ID",
                f"{self.path} was written by node {stored_node}, this is node {self.node_id}",
            )
        by_name = {t.name: t for t in topics}
        by_id = {t.topic_id: t for t in topics}
        self._next_producer_id = max(next_producer_id, 0)
        image = self._make_image(
            cluster_id, {}, by_name, broker_configs, epoch=epoch, by_id=by_id, credentials=credentials,
            tenants=tenants, user_tenants=user_tenants,
        )
        return dataclasses.replace(image, **extra)

    # -- writes ---------------------------------------------------------------------------------

    async def register_broker(self, info: BrokerInfo) -> None:
        async with self._lock:
            old = self._writable()
            brokers = dict(old.brokers)
            if brokers.get(info.node_id) == info:
                return
            brokers[info.node_id] = info
            await self._publish(old, brokers=brokers)

    async def create_topic(
        self,
        name: str,
        assignments: list[tuple[int, ...]],
        configs: Mapping[str, str],
        *,
        internal: bool = False,
    ) -> TopicInfo:
        async with self._lock:
            old = self._writable()
            if name in old.topics:
                raise MetadataError("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
            topic = _topic(
                name=name,
                topic_id=self._fresh_topic_id(old),
                partitions=_new_partitions(0, list(assignments)),
                configs=configs,
                internal=internal,
            )
            await self._publish(old, topics=self._with_topic(old, topic))
            return topic

    async def delete_topic(self, name: str) -> TopicInfo:
        async with self._lock:
            old = self._writable()
            topic = self._existing(old, name)
            topics = {n: t for n, t in old.topics.items() if n != name}
            await self._publish(old, topics=topics)
            return topic

    async def add_partitions(self, name: str, assignments: list[tuple[int, ...]]) -> TopicInfo:
        async with self._lock:
            old = self._writable()
            topic = self._existing(old, name)
            added = _new_partitions(len(topic.partitions), list(assignments))
            new = _topic(
                name=topic.name,
                topic_id=topic.topic_id,
                partitions=topic.partitions + added,
                configs=topic.configs,
                internal=topic.internal,
            )
            await self._publish(old, topics=self._with_topic(old, new))
            return new

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        async with self._lock:
            old = self._writable()
            topic = self._existing(old, name)
            new = _topic(
                name=topic.name,
                topic_id=topic.topic_id,
                partitions=topic.partitions,
                configs=configs,
                internal=topic.internal,
            )
            await self._publish(old, topics=self._with_topic(old, new))
            return new

    async def set_broker_configs(self, configs: Mapping[str, str]) -> None:
        async with self._lock:
            old = self._writable()
            await self._publish(old, broker_configs={str(k): str(v) for k, v in configs.items()})

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
        async with self._lock:
            old = self._writable()
            cred = ScramCredential(mechanism, bytes(salt), bytes(stored_key), bytes(server_key), int(iterations))
            creds = dict(old.scram_credentials)
            by_mech = dict(creds.get(user, {}))
            if by_mech.get(mechanism) == cred:
                return
            by_mech[mechanism] = cred
            creds[user] = MappingProxyType(by_mech)
            await self._publish(old, credentials=creds)

    async def delete_scram_credential(self, user: str, mechanism: str) -> None:
        async with self._lock:
            old = self._writable()
            by_mech = dict(old.scram_credentials.get(user, {}))
            if mechanism not in by_mech:
                raise MetadataError(
                    "RESOURCE_NOT_FOUND", "Attempt to delete a user credential that does not exist"
                )
            del by_mech[mechanism]
            creds = dict(old.scram_credentials)
            if by_mech:
                creds[user] = MappingProxyType(by_mech)
            else:
                del creds[user]
            await self._publish(old, credentials=creds)

    # tenants: logical clusters
    async def create_tenant(self, display_name: str) -> TenantInfo:
        async with self._lock:
            old = self._writable()
            while True:
                tenant_id = self._new_tenant_id()
                if tenant_id not in old.tenants:
                    break
            tenant = TenantInfo(tenant_id, str(display_name), int(self._now_ms()))
            tenants = dict(old.tenants)
            tenants[tenant_id] = tenant
            await self._publish(old, tenants=tenants)
            return tenant

    async def delete_tenant(self, tenant_id: str) -> TenantInfo:
        async with self._lock:
            old = self._writable()
            tenant = self._existing_tenant(old, tenant_id)
            prefix = tenant_prefix(tenant_id)
            users = {u for u, t in old.user_tenants.items() if t == tenant_id}
            users |= {u for u in old.scram_credentials if u.startswith(prefix)}
            tenants = {k: v for k, v in old.tenants.items() if k != tenant_id}
            user_tenants = {u: t for u, t in old.user_tenants.items() if u not in users}
            creds = {u: c for u, c in old.scram_credentials.items() if u not in users}
            topics = {n: t for n, t in old.topics.items() if not n.startswith(prefix)}
            namespaces = {n: v for n, v in old.namespaces.items() if not n.startswith(prefix)}
            acls = tuple(a for a in old.acls if a.tenant != tenant_id)
            quotas = {
                e: v for e, v in old.client_quotas.items()
                if not any(n is not None and (n == tenant_id or n.startswith(prefix)) for _, n in e)
            }
            await self._publish(
                old, tenants=tenants, user_tenants=user_tenants, credentials=creds, topics=topics,
                namespaces=namespaces, acls=acls, client_quotas=quotas,
                tenant_admins=old.tenant_admins - users,
            )
            return tenant

    async def update_tenant(
        self,
        tenant_id: str,
        *,
        display_name: str | None = None,
        configs: Mapping[str, str] | None = None,
        policy: Mapping[str, Any] | None = None,
    ) -> TenantInfo:
        async with self._lock:
            old = self._writable()
            t = self._existing_tenant(old, tenant_id)
            new = TenantInfo(
                t.tenant_id,
                t.display_name if display_name is None else str(display_name),
                t.created_ms,
                t.configs if configs is None else MappingProxyType({str(k): str(v) for k, v in configs.items()}),
                t.policy if policy is None else MappingProxyType(dict(policy)),
            )
            if new != t:
                tenants = dict(old.tenants)
                tenants[tenant_id] = new
                await self._publish(old, tenants=tenants)
            return new

    async def set_tenant_admin(self, user: str, admin: bool) -> None:
        async with self._lock:
            old = self._writable()
            if user not in old.user_tenants and not (
                admin is False or owner_tenant(user, old.tenants)
            ):
                raise MetadataError("RESOURCE_NOT_FOUND", f"User '{user}' belongs to no tenant.")
            admins = old.tenant_admins | {user} if admin else old.tenant_admins - {user}
            if admins != old.tenant_admins:
                await self._publish(old, tenant_admins=admins)

    # namespaces (KIP-37)
    async def create_namespaces(self, names: list[str]) -> None:
        async with self._lock:
            old = self._writable()
            missing = [n for n in names if n not in old.namespaces]
            if missing:
                namespaces = dict(old.namespaces)
                for n in missing:
                    namespaces[n] = NamespaceInfo(n, MappingProxyType({}))
                await self._publish(old, namespaces=namespaces)

    async def delete_namespaces(self, names: list[str], topics: list[str]) -> None:
        async with self._lock:
            old = self._writable()
            gone_ns, gone_topics = set(names), set(topics)
            await self._publish(
                old,
                namespaces={n: v for n, v in old.namespaces.items() if n not in gone_ns},
                topics={n: t for n, t in old.topics.items() if n not in gone_topics},
            )

    async def set_namespace_configs(self, name: str, configs: Mapping[str, str]) -> NamespaceInfo:
        async with self._lock:
            old = self._writable()
            if name not in old.namespaces:
                raise MetadataError("RESOURCE_NOT_FOUND", f"Namespace '{name}' does not exist.")
            ns = NamespaceInfo(name, MappingProxyType({str(k): str(v) for k, v in configs.items()}))
            namespaces = dict(old.namespaces)
            namespaces[name] = ns
            await self._publish(old, namespaces=namespaces)
            return ns

    async def rename_topic(self, old_name: str, new_name: str) -> TopicInfo:
        async with self._lock:
            old = self._writable()
            topic = self._existing(old, old_name)
            if new_name in old.topics:
                raise MetadataError("TOPIC_ALREADY_EXISTS", f"Topic '{new_name}' already exists.")
            new = dataclasses.replace(topic, name=new_name)
            topics = {n: t for n, t in old.topics.items() if n != old_name}
            topics[new_name] = new
            renamed = {**old.renamed_topics, old_name: topic.topic_id}  # tenancy: offsets follow
            await self._publish(old, topics=topics, renamed_topics=renamed)
            return new

    # ACLs and client quotas
    async def alter_acls(self, add: list[AclEntry], remove: list[AclEntry]) -> None:
        async with self._lock:
            old = self._writable()
            gone = set(remove)
            acls = [a for a in old.acls if a not in gone]
            present = set(acls)
            for a in add:
                if a not in present:
                    acls.append(a)
                    present.add(a)
            if tuple(acls) != old.acls:
                await self._publish(old, acls=tuple(acls))

    async def alter_client_quotas(
        self, changes: list[tuple[QuotaEntity, Mapping[str, float | None]]]
    ) -> None:
        async with self._lock:
            old = self._writable()
            quotas = {e: dict(v) for e, v in old.client_quotas.items()}
            for entity, values in changes:
                current = quotas.setdefault(tuple(entity), {})
                for key, value in values.items():
                    if value is None:
                        current.pop(key, None)
                    else:
                        current[key] = float(value)
                if not current:
                    del quotas[tuple(entity)]
            frozen = {e: MappingProxyType(v) for e, v in quotas.items()}
            if frozen != dict(old.client_quotas):
                await self._publish(old, client_quotas=frozen)

    async def assign_user(
        self,
        user: str,
        tenant_id: str,
        credential: ScramCredential | None = None,
        *,
        new_user: bool = False,
    ) -> None:
        async with self._lock:
            old = self._writable()
            self._existing_tenant(old, tenant_id)
            if new_user and (user in old.user_tenants or user in old.scram_credentials):
                raise MetadataError("DUPLICATE_RESOURCE", f"User '{user}' already exists.")
            current = old.user_tenants.get(user)
            if current is not None and current != tenant_id:
                raise MetadataError(
                    "DUPLICATE_RESOURCE", f"User '{user}' already belongs to tenant {current}."
                )
            creds = None
            if credential is not None:
                by_mech = dict(old.scram_credentials.get(user, {}))
                by_mech[credential.mechanism] = credential
                creds = dict(old.scram_credentials)
                creds[user] = MappingProxyType(by_mech)
            elif current == tenant_id:
                return
            user_tenants = dict(old.user_tenants)
            user_tenants[user] = tenant_id
            await self._publish(old, user_tenants=user_tenants, credentials=creds)

    async def remove_user(self, user: str) -> None:
        async with self._lock:
            old = self._writable()
            if user not in old.user_tenants and user not in old.scram_credentials:
                raise MetadataError("RESOURCE_NOT_FOUND", f"User '{user}' does not exist.")
            user_tenants = {u: t for u, t in old.user_tenants.items() if u != user}
            creds = {u: c for u, c in old.scram_credentials.items() if u != user}
            await self._publish(
                old, user_tenants=user_tenants, credentials=creds, tenant_admins=old.tenant_admins - {user}
            )

    @staticmethod
    def _existing_tenant(image: MetadataImage, tenant_id: str) -> TenantInfo:
        tenant = image.tenants.get(tenant_id)
        if tenant is None:
            raise MetadataError("RESOURCE_NOT_FOUND", f"Tenant '{tenant_id}' does not exist.")
        return tenant

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
        async with self._lock:
            old = self._writable()
            topic = self._existing(old, name)
            if not 0 <= partition < len(topic.partitions):
                raise MetadataError(
                    "UNKNOWN_TOPIC_OR_PARTITION", f"Partition {name}-{partition} does not exist."
                )
            p = topic.partitions[partition]
            new_leader = p.leader if leader is None else leader
            np = PartitionInfo(
                partition=p.partition,
                replicas=p.replicas if replicas is None else tuple(replicas),
                isr=p.isr if isr is None else tuple(isr),
                leader=new_leader,
                leader_epoch=p.leader_epoch + (1 if new_leader != p.leader else 0),
                partition_epoch=p.partition_epoch + 1,
            )
            if np == p:
                return p
            parts = list(topic.partitions)
            parts[partition] = np
            new = _topic(
                name=topic.name,
                topic_id=topic.topic_id,
                partitions=tuple(parts),
                configs=topic.configs,
                internal=topic.internal,
            )
            await self._publish(old, topics=self._with_topic(old, new))
            return np

    async def allocate_producer_ids(self, count: int) -> tuple[int, int]:
        if count <= 0:
            raise ValueError(f"cannot allocate {count} producer ids")
        async with self._lock:
            image = self._writable()
            first = self._next_producer_id
            if first + count > 2**63 - 1:
                raise MetadataError("UNKNOWN_SERVER_ERROR", "producer ids are exhausted")
            # Durable before anyone sees the ids. As in ``_publish``, the write runs to completion
            # (still under the lock) even if the caller is cancelled.
            cancelled = await _uncancellable(self._persist(image, next_producer_id=first + count))
            self._next_producer_id = first + count
            if cancelled:
                raise asyncio.CancelledError()
            return first, count

    # -- internals ------------------------------------------------------------------------------

    def _writable(self) -> MetadataImage:
        if self._closed:
            raise MetadataError("KAFKA_STORAGE_ERROR", "metadata store is closed")
        return self.image

    @staticmethod
    def _existing(image: MetadataImage, name: str) -> TopicInfo:
        topic = image.topics.get(name)
        if topic is None:
            raise MetadataError(
                "UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition."
            )
        return topic

    @staticmethod
    def _with_topic(image: MetadataImage, topic: TopicInfo) -> dict[str, TopicInfo]:
        topics = dict(image.topics)
        topics[topic.name] = topic
        return topics

    def _fresh_topic_id(self, image: MetadataImage) -> uuid.UUID:
        while True:
            tid = self._new_uuid()
            if tid.int != 0 and tid not in image.topics_by_id:
                return tid

    def _make_image(
        self,
        cluster_id: str,
        brokers: Mapping[int, BrokerInfo],
        topics: Mapping[str, TopicInfo],
        broker_configs: Mapping[str, str],
        *,
        epoch: int,
        by_id: Mapping[uuid.UUID, TopicInfo] | None = None,
        credentials: Mapping[str, Mapping[str, ScramCredential]] | None = None,
        tenants: Mapping[str, TenantInfo] | None = None,
        user_tenants: Mapping[str, str] | None = None,
    ) -> MetadataImage:
        if by_id is None:
            by_id = {t.topic_id: t for t in topics.values()}
        return MetadataImage(
            cluster_id=cluster_id,
            controller_id=self.node_id,
            brokers=MappingProxyType(dict(brokers)),
            topics=MappingProxyType(dict(topics)),
            topics_by_id=MappingProxyType(dict(by_id)),
            broker_configs=MappingProxyType(dict(broker_configs)),
            epoch=epoch,
            scram_credentials=MappingProxyType(dict(credentials or {})),
            tenants=MappingProxyType(dict(tenants or {})),
            user_tenants=MappingProxyType(dict(user_tenants or {})),
        )

    async def _publish(
        self,
        old: MetadataImage,
        *,
        brokers: Mapping[int, BrokerInfo] | None = None,
        topics: Mapping[str, TopicInfo] | None = None,
        broker_configs: Mapping[str, str] | None = None,
        credentials: Mapping[str, Mapping[str, ScramCredential]] | None = None,
        tenants: Mapping[str, TenantInfo] | None = None,
        user_tenants: Mapping[str, str] | None = None,
        **other: Any,
    ) -> MetadataImage:
        """Publish ``old`` with the given parts replaced. ``other`` names further image fields
        (``tenant_admins``, ``namespaces``, ``acls``, ``client_quotas``, ``renamed_topics``),
        stored as given; ``renamed_topics`` keeps only names of topics that still exist under
        another name."""
        new = self._make_image(
            old.cluster_id,
            old.brokers if brokers is None else brokers,
            old.topics if topics is None else topics,
            old.broker_configs if broker_configs is None else broker_configs,
            epoch=old.epoch + 1,
            credentials=old.scram_credentials if credentials is None else credentials,
            tenants=old.tenants if tenants is None else tenants,
            user_tenants=old.user_tenants if user_tenants is None else user_tenants,
        )
        new = dataclasses.replace(
            new,
            tenant_admins=frozenset(other.pop("tenant_admins", old.tenant_admins)),
            namespaces=MappingProxyType(dict(other.pop("namespaces", old.namespaces))),
            acls=tuple(other.pop("acls", old.acls)),
            client_quotas=MappingProxyType(dict(other.pop("client_quotas", old.client_quotas))),
            renamed_topics=MappingProxyType({
                n: i for n, i in other.pop("renamed_topics", old.renamed_topics).items()
                if i in new.topics_by_id and n not in new.topics
            }),
        )
        if other:
            raise TypeError(f"unknown image fields {sorted(other)}")
        # The write runs to completion even if the caller is cancelled, and the image follows
        # the file: memory and disk never disagree. A failed write publishes nothing.
        cancelled = await _uncancellable(self._persist(new))
        self._image = new
        for listener in list(self._listeners):
            try:
                listener(old, new)
            except Exception:  # a broken listener must not undo a durable change
                log.exception("metadata listener %r failed", listener)
        if cancelled:
            raise asyncio.CancelledError()
        return new

    async def _persist(self, image: MetadataImage, *, next_producer_id: int | None = None) -> None:
        doc = {
            "version": FORMAT_VERSION,
            "cluster_id": image.cluster_id,
            "node_id": self.node_id,
            "epoch": image.epoch,
            "next_producer_id": self._next_producer_id if next_producer_id is None else next_producer_id,
            "broker_configs": dict(sorted(image.broker_configs.items())),
            "topics": [_topic_to_json(image.topics[n]) for n in sorted(image.topics)],
            "scram_credentials": _credentials_to_json(image.scram_credentials),  # auth
            "tenants": _tenants_to_json(image.tenants),
            "user_tenants": dict(sorted(image.user_tenants.items())),
            "tenant_admins": sorted(image.tenant_admins),
            "namespaces": {n: dict(sorted(ns.configs.items())) for n, ns in sorted(image.namespaces.items())},
            "acls": [_acl_to_json(a) for a in image.acls],
            "client_quotas": _quotas_to_json(image.client_quotas),
            "renamed_topics": {n: str(i) for n, i in sorted(image.renamed_topics.items())},
        }
        data = json.dumps(doc, indent=1, sort_keys=False).encode("utf-8") + b"\n"
        try:
            await asyncio.to_thread(self._files.write_atomic, self.path, data)
        except OSError as e:
            raise MetadataError("KAFKA_STORAGE_ERROR", f"cannot write {self.path}: {e}") from e
