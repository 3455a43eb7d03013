"""The embedded metadata store: one node, a JSON snapshot and its journal, no quorum.

State lives in ``<data_dir>/__metadata/metadata.json`` (or the ``.json`` path given): a snapshot,
plus ``metadata.journal`` beside it, the changes made since. Every mutation runs under one
``asyncio.Lock``: it computes what changes (a ``_Change``: per section, key -> new value or
removal), appends one journal record of just that and makes it durable (``fdatasync``, in a worker
thread so the event loop keeps serving), and only then publishes a new immutable ``MetadataImage``
with ``epoch + 1`` and tells subscribers ``(old, new)``. The new image shares every unchanged
section mapping (and entry) with the old one, so a change costs what it changes, not the image.

Journal: one line per change, ``<crc32 hex> <json>``, with a sequence number ``seq`` one above the
previous record's; the snapshot names the last ``seq`` it holds (``journal_seq``). Loading reads the
snapshot and replays the records above its ``seq``. A crash in the middle of an append leaves a
torn last line, which was never acknowledged and is dropped; a bad line followed by good ones, or a
gap in ``seq``, is corruption and refused. Compaction rewrites the snapshot atomically (temp file,
fsync, rename, fsync of the directory) and then empties the journal; it runs at start when the
journal holds anything, at close, and in the background when the journal outgrows both the snapshot
and ``compact_bytes``, so the snapshot bytes written per change stay proportional to the change.
A crash at any point keeps every acknowledged change, and the change being written when it came
whole or not at all. After an append fails (the caller gets KAFKA_STORAGE_ERROR) the next change
writes a snapshot instead, so nothing is ever appended after a torn record. Files written before
the journal existed (a snapshot alone, ``journal_seq`` absent) load as they are; after a clean close
the snapshot alone is the whole state again (what an older Shoal, which ignores the journal, reads).

Invariants:
- the cluster id is generated once (22-char base64url of a uuid4, as Kafka's ``random-uuid``) and
  kept for the life of the data directory; a different ``cluster_id`` given later is refused;
- topic ids are random uuid4s, never the zero uuid, never reused within the store;
- leader = first replica, ISR = all replicas, leader epoch 0 at creation.

Broker registrations are ephemeral (as in ZooKeeper mode): they are not persisted, the broker
registers itself again after each start. The image's ``epoch`` is persisted, so it keeps growing
across restarts.

Producer ids: ``next_producer_id`` in the file is the first id no block has been given out for;
``allocate_producer_ids`` moves it under the same lock and with a journal record like every other
change (without publishing a new image: the image does not carry it).

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
import zlib
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
    TopicsDelta,
    owner_tenant,
    tenant_prefix,
)

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
METADATA_DIR = "__metadata"
METADATA_FILE = "metadata.json"
JOURNAL_SUFFIX = ".journal"
# The journal is compacted into the snapshot once it holds more than this and more than the snapshot.
COMPACT_BYTES = 1 << 20

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
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self.fsync_dir(path.parent)

    def append(self, path: Path, data: bytes) -> None:
        """Append ``data`` and make it durable (data and file size) before returning."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            created = False
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            created = True
        try:
            _write_all(fd, data)
            _fdatasync(fd)
        finally:
            os.close(fd)
        if created:
            self.fsync_dir(path.parent)

    def truncate(self, path: Path) -> None:
        """Empty ``path``, durably (nothing to do when it does not exist)."""
        try:
            fd = os.open(path, os.O_WRONLY)
        except FileNotFoundError:
            return
        try:
            os.ftruncate(fd, 0)
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self, path: Path) -> None:
        """Delete ``path`` durably, if it exists."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
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


_fdatasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def resolve_path(path: str | Path) -> Path:
    """A ``.json`` path is the file itself; anything else is a data dir holding ``__metadata/``."""
    p = Path(path)
    if p.suffix == ".json":
        return p
    return p / METADATA_DIR / METADATA_FILE


def journal_path(snapshot: Path) -> Path:
    """The journal beside a snapshot: ``metadata.json`` -> ``metadata.journal``."""
    return snapshot.with_suffix(JOURNAL_SUFFIX)


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
def _user_credentials_to_json(by_mech: Mapping[str, ScramCredential]) -> dict[str, Any]:
    b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
    return {
        mech: {
            "salt": b64(c.salt),
            "stored_key": b64(c.stored_key),
            "server_key": b64(c.server_key),
            "iterations": c.iterations,
        }
        for mech, c in sorted(by_mech.items())
    }


def _credentials_to_json(creds: Mapping[str, Mapping[str, ScramCredential]]) -> dict[str, Any]:
    return {user: _user_credentials_to_json(by_mech) for user, by_mech in sorted(creds.items())}


def _user_credentials_from_json(by_mech: Mapping[str, Any]) -> Mapping[str, ScramCredential]:
    return MappingProxyType(
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


def _credentials_from_json(d: Mapping[str, Any]) -> dict[str, Mapping[str, ScramCredential]]:
    return {str(user): _user_credentials_from_json(by_mech) for user, by_mech in d.items()}


# tenants
_TENANT_ALPHABET = string.digits + string.ascii_lowercase


def new_tenant_id(choice: Callable[[str], str] = secrets.choice) -> str:
    return "lkc-" + "".join(choice(_TENANT_ALPHABET) for _ in range(6))


def _tenant_to_json(t: TenantInfo) -> dict[str, Any]:
    return {
        "tenant_id": t.tenant_id,
        "display_name": t.display_name,
        "created_ms": t.created_ms,
        "configs": dict(sorted(t.configs.items())),
        "policy": dict(t.policy),
    }


def _tenants_to_json(tenants: Mapping[str, TenantInfo]) -> list[dict[str, Any]]:
    return [_tenant_to_json(t) for _, t in sorted(tenants.items())]


def _tenant_from_json(d: Mapping[str, Any]) -> TenantInfo:
    return TenantInfo(
        str(d["tenant_id"]),
        str(d["display_name"]),
        int(d["created_ms"]),
        MappingProxyType({str(k): str(v) for k, v in d.get("configs", {}).items()}),
        MappingProxyType(dict(d.get("policy", {}))),
    )


def _tenants_from_json(items: Any) -> dict[str, TenantInfo]:
    return {t.tenant_id: t for t in map(_tenant_from_json, items)}


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


def _entity_from_json(entity: Any) -> QuotaEntity:
    return tuple((str(t), None if n is None else str(n)) for t, n in entity)


def _quota_values_from_json(values: Mapping[str, Any]) -> Mapping[str, float]:
    return MappingProxyType({str(k): float(v) for k, v in values.items()})


def _quotas_from_json(items: Any) -> dict[QuotaEntity, Mapping[str, float]]:
    return {_entity_from_json(d["entity"]): _quota_values_from_json(d["values"]) for d in items}


def _snapshot_doc(image: MetadataImage, node_id: int, next_producer_id: int, seq: int) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "cluster_id": image.cluster_id,
        "node_id": node_id,
        "epoch": image.epoch,
        "journal_seq": seq,
        "next_producer_id": next_producer_id,
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


def _encode_doc(doc: Mapping[str, Any]) -> bytes:
    """``doc`` as JSON with one field a line and one item a line in its lists and mappings: as
    readable as ``json.dumps(indent=...)``, but by json's C encoder (``indent`` takes the pure
    Python one: 35 ms for 1,000 tenants)."""
    enc = json.dumps
    fields = []
    for k, v in doc.items():
        if isinstance(v, list) and v:
            body = "[\n" + ",\n".join("  " + enc(x) for x in v) + "\n ]"
        elif isinstance(v, dict) and v:
            body = "{\n" + ",\n".join(f"  {enc(a)}: {enc(b)}" for a, b in v.items()) + "\n }"
        else:
            body = enc(v)
        fields.append(f" {enc(k)}: {body}")
    return ("{\n" + ",\n".join(fields) + "\n}\n").encode("ascii")


def _copy(section: Mapping[Any, Any]) -> dict[Any, Any]:
    """A dict copy of an image section: the copy of its dict when it wraps one (a table copy,
    keys not hashed again: uuid.UUID hashes in Python), else built item by item."""
    out = section.copy() if isinstance(section, (dict, MappingProxyType)) else None
    return out if isinstance(out, dict) else dict(section)


def _patched(section: Mapping[Any, Any], changes: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """``section`` with ``changes`` (key -> value, None: removed); itself when there are none."""
    if not changes:
        return section
    out = _copy(section)
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return MappingProxyType(out)


@dataclasses.dataclass
class _Change:
    """What one mutation changes, section by section: key -> new value, ``None`` for a removal
    (``tenant_admins``: user -> admin or not; ``broker_configs`` replaces them all). ``apply``
    makes the next image, sharing every section and entry it does not touch; ``to_json`` is the
    journal record, which ``_replay`` applies to a snapshot document."""

    brokers: dict[int, BrokerInfo] = dataclasses.field(default_factory=dict)  # ephemeral
    broker_configs: Mapping[str, str] | None = None
    topics: dict[str, TopicInfo | None] = dataclasses.field(default_factory=dict)
    scram_credentials: dict[str, Mapping[str, ScramCredential] | None] = dataclasses.field(default_factory=dict)
    tenants: dict[str, TenantInfo | None] = dataclasses.field(default_factory=dict)
    user_tenants: dict[str, str | None] = dataclasses.field(default_factory=dict)
    tenant_admins: dict[str, bool] = dataclasses.field(default_factory=dict)
    namespaces: dict[str, NamespaceInfo | None] = dataclasses.field(default_factory=dict)
    acls_removed: set[AclEntry] = dataclasses.field(default_factory=set)
    acls_added: list[AclEntry] = dataclasses.field(default_factory=list)
    client_quotas: dict[QuotaEntity, Mapping[str, float] | None] = dataclasses.field(default_factory=dict)
    renamed_topics: dict[str, uuid.UUID | None] = dataclasses.field(default_factory=dict)

    def apply(self, old: MetadataImage) -> MetadataImage:
        """The image after this change, ``epoch + 1``. Former names of renamed topics that no
        longer name their topic (it went, or a topic took the name again) are dropped here, and
        recorded as removals in ``renamed_topics`` so the journal replays them."""
        topics, by_id, delta = old.topics, old.topics_by_id, old.topics_delta
        if self.topics:
            topics = _patched(old.topics, self.topics)
            delta = TopicsDelta(old.topics, topics, frozenset(self.topics))
            ids = _copy(old.topics_by_id)
            for name in self.topics:
                prev = old.topics.get(name)
                if prev is not None and ids.get(prev.topic_id) is prev:
                    del ids[prev.topic_id]
            ids.update((t.topic_id, t) for t in self.topics.values() if t is not None)
            by_id = MappingProxyType(ids)
            current = _patched(old.renamed_topics, self.renamed_topics)
            self.renamed_topics.update(
                (n, None) for n, i in current.items() if n in topics or i not in by_id
            )
        admins = old.tenant_admins
        if self.tenant_admins:
            admins = (admins | {u for u, a in self.tenant_admins.items() if a}) - {
                u for u, a in self.tenant_admins.items() if not a
            }
        acls = old.acls
        if self.acls_removed or self.acls_added:
            kept = [a for a in old.acls if a not in self.acls_removed]
            present = set(kept)
            for a in self.acls_added:
                if a not in present:
                    kept.append(a)
                    present.add(a)
            acls = tuple(kept)
        return dataclasses.replace(
            old,
            epoch=old.epoch + 1,
            brokers=_patched(old.brokers, self.brokers),
            topics=topics,
            topics_by_id=by_id,
            topics_delta=delta,
            broker_configs=old.broker_configs if self.broker_configs is None
            else MappingProxyType(dict(self.broker_configs)),
            scram_credentials=_patched(old.scram_credentials, self.scram_credentials),
            tenants=_patched(old.tenants, self.tenants),
            user_tenants=_patched(old.user_tenants, self.user_tenants),
            tenant_admins=admins,
            namespaces=_patched(old.namespaces, self.namespaces),
            acls=acls,
            client_quotas=_patched(old.client_quotas, self.client_quotas),
            renamed_topics=_patched(old.renamed_topics, self.renamed_topics),
        )

    def to_json(self) -> dict[str, Any]:
        """The persisted part (brokers are ephemeral), only the sections that change."""
        rec: dict[str, Any] = {}
        if self.broker_configs is not None:
            rec["broker_configs"] = dict(sorted(self.broker_configs.items()))
        sections = (
            ("topics", self.topics, _topic_to_json),
            ("scram_credentials", self.scram_credentials, _user_credentials_to_json),
            ("tenants", self.tenants, _tenant_to_json),
            ("user_tenants", self.user_tenants, str),
            ("namespaces", self.namespaces, lambda ns: dict(sorted(ns.configs.items()))),
            ("renamed_topics", self.renamed_topics, str),
        )
        for key, changes, to_json in sections:
            if changes:
                rec[key] = {k: None if v is None else to_json(v) for k, v in changes.items()}
        if self.tenant_admins:
            rec["tenant_admins"] = dict(self.tenant_admins)
        if self.acls_removed:
            rec["acls_removed"] = [_acl_to_json(a) for a in self.acls_removed]
        if self.acls_added:
            rec["acls_added"] = [_acl_to_json(a) for a in self.acls_added]
        if self.client_quotas:
            rec["client_quotas"] = [
                [[list(e) for e in entity], None if v is None else dict(sorted(v.items()))]
                for entity, v in self.client_quotas.items()
            ]
        return rec


# Snapshot sections that are lists of objects, keyed for replay by the field that names them.
_KEYED_LISTS = {"topics": "name", "tenants": "tenant_id"}
_KEYED_MAPS = ("scram_credentials", "user_tenants", "namespaces", "renamed_topics")


def _replay(doc: dict[str, Any], records: list[Mapping[str, Any]]) -> None:
    """Apply journal records, in order, to a snapshot document (in place)."""
    if not records:
        return
    keyed: dict[str, dict[Any, Any]] = {
        section: {d[key]: d for d in doc.get(section, [])} for section, key in _KEYED_LISTS.items()
    }
    keyed.update({section: dict(doc.get(section, {})) for section in _KEYED_MAPS})
    admins = dict.fromkeys(doc.get("tenant_admins", []))
    acls = {tuple(a): a for a in doc.get("acls", [])}  # ordered: removals, then appends
    quotas = {_entity_from_json(q["entity"]): q for q in doc.get("client_quotas", [])}
    for rec in records:
        for key in ("epoch", "next_producer_id", "broker_configs"):
            if key in rec:
                doc[key] = rec[key]
        for section, entries in keyed.items():
            for k, v in rec.get(section, {}).items():
                if v is None:
                    entries.pop(k, None)
                else:
                    entries[k] = v
        for user, admin in rec.get("tenant_admins", {}).items():
            if admin:
                admins[user] = None
            else:
                admins.pop(user, None)
        for a in rec.get("acls_removed", []):
            acls.pop(tuple(a), None)
        for a in rec.get("acls_added", []):
            acls.setdefault(tuple(a), a)
        for entity, values in rec.get("client_quotas", []):
            if values is None:
                quotas.pop(_entity_from_json(entity), None)
            else:
                quotas[_entity_from_json(entity)] = {"entity": entity, "values": values}
    # in the snapshot's order (the loader does not care; readers of read_document may)
    for section in _KEYED_LISTS:
        doc[section] = [v for _, v in sorted(keyed[section].items())]
    doc.update({section: dict(sorted(keyed[section].items())) for section in _KEYED_MAPS})
    doc.update(
        tenant_admins=sorted(admins),
        acls=list(acls.values()),
        client_quotas=[q for _, q in sorted(quotas.items(), key=lambda kv: repr(kv[0]))],
    )


def _journal_line(record: Mapping[str, Any]) -> bytes:
    body = json.dumps(record, separators=(",", ":")).encode("ascii")
    return b"%08x %s\n" % (zlib.crc32(body), body)


def _journal_record(line: bytes) -> dict[str, Any] | None:
    """A journal line's record, None when it does not check (torn or corrupt)."""
    crc, _, body = line.partition(b" ")
    try:
        if len(crc) != 8 or int(crc, 16) != zlib.crc32(body):
            return None
        rec = json.loads(body)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("seq"), int) else None


def _journal_records(raw: bytes) -> tuple[list[dict[str, Any]], int]:
    """The records of a journal and the length of the prefix they fill. The end of a torn append
    (a last line without its newline, or last lines that do not check) is left out; a line that
    does not check followed by one that does is corruption (ValueError)."""
    records: list[dict[str, Any]] = []
    good = pos = 0
    bad: int | None = None
    while (end := raw.find(b"\n", pos)) >= 0:
        rec = _journal_record(raw[pos:end])
        if rec is None:
            bad = pos if bad is None else bad
        elif bad is not None:
            raise ValueError(f"journal record at byte {bad} does not check, but later ones do")
        else:
            records.append(rec)
            good = end + 1
        pos = end + 1
    return records, good


def _replay_journal(doc: dict[str, Any], journal: bytes, where: Path) -> int:
    """Apply to ``doc`` the journal records above its ``journal_seq``; the last seq applied. A torn
    end is dropped (it was never acknowledged); corruption raises ValueError."""
    seq = int(doc.get("journal_seq", 0))
    try:
        records, good = _journal_records(journal)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    fresh = [r for r in records if r["seq"] > seq]
    for expected, r in enumerate(fresh, seq + 1):
        if r["seq"] != expected:
            raise ValueError(f"{where}: record {expected} is missing (next is {r['seq']})")
    if good < len(journal):
        log.warning("%s: dropping the %d-byte torn end of an append that was never acknowledged",
                    where, len(journal) - good)
    _replay(doc, fresh)
    if fresh:
        seq = doc["journal_seq"] = fresh[-1]["seq"]
    return seq


def read_document(path: str | Path) -> dict[str, Any]:
    """A store's whole state as one snapshot document (its journal replayed), read without opening
    the store, also while it runs: for tools and tests. (The journal is read first: a compaction
    between the two reads then only makes the answer newer.)"""
    snapshot = resolve_path(path)
    journal = MetadataFiles().read(journal_path(snapshot)) or b""
    doc = json.loads(snapshot.read_bytes())
    _replay_journal(doc, journal, journal_path(snapshot))
    return doc


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
    ``new_uuid``, ``files`` and ``compact_bytes`` (the journal size that may start a compaction)
    are injectable for tests.
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
        compact_bytes: int = COMPACT_BYTES,
    ) -> None:
        self.path = resolve_path(path)
        self.journal = journal_path(self.path)
        self._compact_bytes = compact_bytes
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
        # the journal: last durable record, its size, and the snapshot's size
        self._seq = 0
        self._journal_bytes = 0
        self._snapshot_bytes = 0
        # an append failed, so a torn record may end the journal: the next change writes a snapshot
        self._repair = False
        self._compaction: asyncio.Task[None] | None = None

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
                # a journal without its snapshot belongs to no store: it must not replay onto this one
                await asyncio.to_thread(self._files.remove, self.journal)
                await self._write_snapshot(image, self._next_producer_id, 0)
                log.info("created metadata store %s for cluster %s", self.path, cluster_id)
            else:
                journal = await asyncio.to_thread(self._files.read, self.journal) or b""
                image = self._load(raw, journal)
                self._snapshot_bytes, self._journal_bytes = len(raw), len(journal)
                if journal:  # fold it into the snapshot (and drop a torn end before any append)
                    try:
                        await self._write_snapshot(image, self._next_producer_id, self._seq)
                    except MetadataError as e:
                        log.warning("metadata journal not compacted at start: %s", e.message)
                        self._repair = True
            self._image = image
            self._closed = False

    async def close(self) -> None:
        """Refuse further changes, after folding the journal into the snapshot: after a clean
        close the snapshot alone is the whole state."""
        async with self._lock:  # waits for an in-flight write
            if not self._closed and self._image is not None and (self._journal_bytes or self._repair):
                try:
                    await self._write_snapshot(self._image, self._next_producer_id, self._seq)
                except MetadataError as e:
                    log.warning("metadata journal not compacted at close: %s", e.message)
            self._closed = True
        await self.compaction_done()  # a background compaction sees the store closed: nothing to do

    async def compact(self) -> None:
        """Fold the journal into the snapshot now. It also happens by itself: at start, at close,
        and in the background once the journal outgrows the snapshot and ``compact_bytes``."""
        async with self._lock:
            image = self._writable()
            if self._journal_bytes or self._repair:
                await self._write_snapshot(image, self._next_producer_id, self._seq)

    async def compaction_done(self) -> None:
        """Wait for the background compaction, if one is under way."""
        if self._compaction is not None:
            await asyncio.wait([self._compaction])

    def _load(self, raw: bytes, journal: bytes = b"") -> MetadataImage:
        """The image of a snapshot and the journal records above its ``journal_seq``."""
        try:
            doc = json.loads(raw)
            version = int(doc.get("version", 0))
            if version != FORMAT_VERSION:
                raise MetadataError(
                    "KAFKA_STORAGE_ERROR", f"{self.path}: unsupported metadata format version {version}"
                )
            self._seq = _replay_journal(doc, journal, self.journal)
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
            if old.brokers.get(info.node_id) == info:
                return
            await self._publish(old, _Change(brokers={info.node_id: info}))

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
            await self._publish(old, _Change(topics={name: topic}))
            return topic

    async def delete_topic(self, name: str) -> TopicInfo:
        async with self._lock:
            old = self._writable()
            topic = self._existing(old, name)
            await self._publish(old, _Change(topics={name: None}))
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
            await self._publish(old, _Change(topics={name: new}))
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
            await self._publish(old, _Change(topics={name: new}))
            return new

    async def set_broker_configs(self, configs: Mapping[str, str]) -> None:
        async with self._lock:
            old = self._writable()
            await self._publish(old, _Change(broker_configs={str(k): str(v) for k, v in configs.items()}))

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
            by_mech = dict(old.scram_credentials.get(user, {}))
            if by_mech.get(mechanism) == cred:
                return
            by_mech[mechanism] = cred
            await self._publish(old, _Change(scram_credentials={user: MappingProxyType(by_mech)}))

    async def delete_scram_credential(self, user: str, mechanism: str) -> None:
        async with self._lock:
            old = self._writable()
            by_mech = dict(old.scram_credentials.get(user, {}))
            if mechanism not in by_mech:
                raise MetadataError(
                    "RESOURCE_NOT_FOUND", "Attempt to delete a user credential that does not exist"
                )
            del by_mech[mechanism]
            creds = {user: MappingProxyType(by_mech) if by_mech else None}
            await self._publish(old, _Change(scram_credentials=creds))

    # tenants: logical clusters
    async def create_tenant(self, display_name: str) -> TenantInfo:
        async with self._lock:
            old = self._writable()
            while True:
                tenant_id = self._new_tenant_id()
                if tenant_id not in old.tenants:
                    break
            tenant = TenantInfo(tenant_id, str(display_name), int(self._now_ms()))
            await self._publish(old, _Change(tenants={tenant_id: tenant}))
            return tenant

    async def delete_tenant(self, tenant_id: str) -> TenantInfo:
        async with self._lock:
            old = self._writable()
            tenant = self._existing_tenant(old, tenant_id)
            prefix = tenant_prefix(tenant_id)
            users = {u for u, t in old.user_tenants.items() if t == tenant_id}
            users |= {u for u in old.scram_credentials if u.startswith(prefix)}
            change = _Change(
                tenants={tenant_id: None},
                user_tenants=dict.fromkeys(users & old.user_tenants.keys()),
                scram_credentials=dict.fromkeys(users & old.scram_credentials.keys()),
                tenant_admins=dict.fromkeys(users & old.tenant_admins, False),
                topics=dict.fromkeys(n for n in old.topics if n.startswith(prefix)),
                namespaces=dict.fromkeys(n for n in old.namespaces if n.startswith(prefix)),
                acls_removed={a for a in old.acls if a.tenant == tenant_id},
                client_quotas=dict.fromkeys(
                    e for e in old.client_quotas
                    if any(n is not None and (n == tenant_id or n.startswith(prefix)) for _, n in e)
                ),
            )
            await self._publish(old, change)
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
                await self._publish(old, _Change(tenants={tenant_id: new}))
            return new

    async def set_tenant_admin(self, user: str, admin: bool) -> None:
        async with self._lock:
            old = self._writable()
            if user not in old.user_tenants and not (
                admin is False or owner_tenant(user, old.tenants)
            ):
                raise MetadataError("RESOURCE_NOT_FOUND", f"User '{user}' belongs to no tenant.")
            if (user in old.tenant_admins) != bool(admin):
                await self._publish(old, _Change(tenant_admins={user: bool(admin)}))

    # namespaces (KIP-37)
    async def create_namespaces(self, names: list[str]) -> None:
        async with self._lock:
            old = self._writable()
            missing = {n: NamespaceInfo(n, MappingProxyType({})) for n in names if n not in old.namespaces}
            if missing:
                await self._publish(old, _Change(namespaces=missing))

    async def delete_namespaces(self, names: list[str], topics: list[str]) -> None:
        async with self._lock:
            old = self._writable()
            change = _Change(
                namespaces=dict.fromkeys(n for n in names if n in old.namespaces),
                topics=dict.fromkeys(t for t in topics if t in old.topics),
            )
            await self._publish(old, change)

    async def set_namespace_configs(self, name: str, configs: Mapping[str, str]) -> NamespaceInfo:
        async with self._lock:
            old = self._writable()
            if name not in old.namespaces:
                raise MetadataError("RESOURCE_NOT_FOUND", f"Namespace '{name}' does not exist.")
            ns = NamespaceInfo(name, MappingProxyType({str(k): str(v) for k, v in configs.items()}))
            await self._publish(old, _Change(namespaces={name: ns}))
            return ns

    async def rename_topic(self, old_name: str, new_name: str) -> TopicInfo:
        async with self._lock:
            old = self._writable()
            topic = self._existing(old, old_name)
            if new_name in old.topics:
                raise MetadataError("TOPIC_ALREADY_EXISTS", f"Topic '{new_name}' already exists.")
            new = dataclasses.replace(topic, name=new_name)
            change = _Change(
                topics={old_name: None, new_name: new},
                renamed_topics={old_name: topic.topic_id},  # tenancy: offsets follow
            )
            await self._publish(old, change)
            return new

    # ACLs and client quotas
    async def alter_acls(self, add: list[AclEntry], remove: list[AclEntry]) -> None:
        async with self._lock:
            old = self._writable()
            present = set(old.acls)
            removed = present.intersection(remove)
            present -= removed
            added = [a for a in dict.fromkeys(add) if a not in present]
            if removed or added:
                await self._publish(old, _Change(acls_removed=removed, acls_added=added))

    async def alter_client_quotas(
        self, changes: list[tuple[QuotaEntity, Mapping[str, float | None]]]
    ) -> None:
        async with self._lock:
            old = self._writable()
            quotas: dict[QuotaEntity, dict[str, float]] = {}
            for entity, values in changes:
                current = quotas.get(tuple(entity))
                if current is None:
                    current = quotas[tuple(entity)] = dict(old.client_quotas.get(tuple(entity), {}))
                for key, value in values.items():
                    if value is None:
                        current.pop(key, None)
                    else:
                        current[key] = float(value)
            change = {
                e: MappingProxyType(v) if v else None for e, v in quotas.items()
                if v != old.client_quotas.get(e, {})
            }
            if change:
                await self._publish(old, _Change(client_quotas=change))

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
            change = _Change(user_tenants={user: tenant_id})
            if credential is not None:
                by_mech = dict(old.scram_credentials.get(user, {}))
                by_mech[credential.mechanism] = credential
                change.scram_credentials[user] = MappingProxyType(by_mech)
            elif current == tenant_id:
                return
            await self._publish(old, change)

    async def remove_user(self, user: str) -> None:
        async with self._lock:
            old = self._writable()
            if user not in old.user_tenants and user not in old.scram_credentials:
                raise MetadataError("RESOURCE_NOT_FOUND", f"User '{user}' does not exist.")
            change = _Change(user_tenants={user: None}, scram_credentials={user: None})
            if user in old.tenant_admins:
                change.tenant_admins[user] = False
            await self._publish(old, change)

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
            await self._publish(old, _Change(topics={name: new}))
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
            cancelled = await _uncancellable(
                self._persist(image, {"next_producer_id": first + count}, next_producer_id=first + count)
            )
            self._next_producer_id = first + count
            self._maybe_compact()
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

    async def _publish(self, old: MetadataImage, change: _Change) -> MetadataImage:
        """Publish ``old`` with ``change`` applied (``epoch + 1``), once its journal record is
        durable."""
        new = change.apply(old)
        record = {"epoch": new.epoch, **change.to_json()}
        # The write runs to completion even if the caller is cancelled, and the image follows
        # the disk: memory and disk never disagree. A failed write publishes nothing.
        cancelled = await _uncancellable(self._persist(new, record))
        self._image = new
        for listener in list(self._listeners):
            try:
                listener(old, new)
            except Exception:  # a broken listener must not undo a durable change
                log.exception("metadata listener %r failed", listener)
        self._maybe_compact()
        if cancelled:
            raise asyncio.CancelledError()
        return new

    async def _persist(
        self, image: MetadataImage, record: dict[str, Any], *, next_producer_id: int | None = None
    ) -> None:
        """Make one change durable: its journal record (``image`` is the state after it), or a
        whole snapshot after a failed append, whose torn end may close the journal."""
        seq = self._seq + 1
        if self._repair:
            npid = self._next_producer_id if next_producer_id is None else next_producer_id
            await self._write_snapshot(image, npid, seq)
        else:
            line = _journal_line({"seq": seq, **record})
            try:
                await asyncio.to_thread(self._files.append, self.journal, line)
            except OSError as e:
                self._repair = True
                raise MetadataError("KAFKA_STORAGE_ERROR", f"cannot write {self.journal}: {e}") from e
            self._journal_bytes += len(line)
        self._seq = seq

    async def _write_snapshot(self, image: MetadataImage, next_producer_id: int, seq: int) -> None:
        """Write the snapshot of ``image`` (journal records up to ``seq`` included) atomically, then
        empty the journal; serialized and written in a worker thread, and to completion even if
        the caller is cancelled (the lock must not be released while the journal is being cut)."""

        def write() -> tuple[int, bool]:
            data = _encode_doc(_snapshot_doc(image, self.node_id, next_producer_id, seq))
            self._files.write_atomic(self.path, data)
            try:
                self._files.truncate(self.journal)
            except OSError as e:  # the snapshot holds everything; records up to seq are skipped
                log.warning("cannot empty %s: %s", self.journal, e)
                return len(data), False
            return len(data), True

        write_task = asyncio.ensure_future(asyncio.to_thread(write))
        try:
            cancelled = await _uncancellable(write_task)
        except OSError as e:
            raise MetadataError("KAFKA_STORAGE_ERROR", f"cannot write {self.path}: {e}") from e
        self._snapshot_bytes, emptied = write_task.result()
        if emptied:
            self._journal_bytes, self._repair = 0, False
        if cancelled:
            raise asyncio.CancelledError()

    def _maybe_compact(self) -> None:
        """Fold the journal into the snapshot in the background once it outgrows both the snapshot
        and ``compact_bytes``: the snapshot bytes written per change then stay below the journal
        bytes, which are what each change wrote."""
        if self._compaction is None and self._journal_bytes > max(self._compact_bytes, self._snapshot_bytes):
            self._compaction = asyncio.get_running_loop().create_task(self._compact())

    async def _compact(self) -> None:
        try:
            if not self._closed:
                await self.compact()
        except MetadataError as e:
            if not self._closed:
                log.warning("metadata journal not compacted: %s", e.message)
        finally:
            self._compaction = None
