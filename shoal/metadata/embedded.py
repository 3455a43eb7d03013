"""The embedded metadata store: one node, a JSON snapshot and its journal, no quorum.

State lives in ``<data_dir>/__metadata/metadata.json`` (or the ``.json`` path given): a snapshot,
plus ``metadata.journal`` beside it, the changes made since. The rules decide each change
(``shoal.metadata.rules``: a ``Change``, per section key -> new value or removal) against the
current image; ``EmbeddedBackend.commit`` takes it if the image is still at the epoch it was
decided on (else ``CommitConflict``, and the store decides again: ``shoal.metadata.store``), and,
under one ``asyncio.Lock`` that serializes the file I/O, appends one journal record of just that
and makes it durable (``fdatasync``, in a worker thread so the event loop keeps serving), and only
then publishes a new immutable ``MetadataImage`` with ``epoch + 1`` and tells subscribers
``(old, new)``. The new image shares every unchanged
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

Producer ids: ``next_producer_id`` in the file (and the image) is the first id no block has been
given out for; ``allocate_producer_ids`` moves it with a change like every other (its record also
carries the new ``epoch``; records of older stores without one load as they are).

SCRAM credentials (auth) are part of the image and the file, as base64 salted hashes
(``scram_credentials``: user -> mechanism -> salt, stored_key, server_key, iterations); the
password is never stored.

Tenants (logical clusters) are part of the image and the file too: ``tenants`` (a list of
``tenant_id``, ``display_name``, ``created_ms``) and ``user_tenants`` (SCRAM user -> tenant id).
Tenant ids are ``lkc-`` + 6 random lowercase base36 characters, unique within the store. Deleting
a tenant removes everything it owns in the same write (``shoal.metadata.rules.tenants``).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import os
import time
import uuid
import zlib
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from shoal.metadata import (
    BrokerInfo,
    MetadataError,
    MetadataImage,
    NO_FEATURES,
    NamespaceInfo,
    ScramCredential,
    TenantInfo,
    TopicInfo,
)
from shoal.metadata import codec
from shoal.metadata.change import Change
from shoal.metadata.store import CommitConflict, DecidingStore, MetadataBackend, new_tenant_id

__all__ = [
    "EmbeddedBackend", "EmbeddedMetadataStore", "MetadataFiles", "journal_path", "new_cluster_id",
    "new_tenant_id", "read_document", "resolve_path",
]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
METADATA_DIR = "__metadata"
METADATA_FILE = "metadata.json"
JOURNAL_SUFFIX = ".journal"
# The journal is compacted into the snapshot once it holds more than this and more than the snapshot.
COMPACT_BYTES = 1 << 20

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



def _snapshot_doc(image: MetadataImage, node_id: int, seq: int) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "cluster_id": image.cluster_id,
        "node_id": node_id,
        "epoch": image.epoch,
        "journal_seq": seq,
        "next_producer_id": image.next_producer_id,
        "broker_configs": dict(sorted(image.broker_configs.items())),
        "features": codec.features_to_json(image.features),
        "topics": [codec.topic_to_json(image.topics[n]) for n in sorted(image.topics)],
        "scram_credentials": codec.credentials_to_json(image.scram_credentials),  # auth
        "tenants": codec.tenants_to_json(image.tenants),
        "user_tenants": dict(sorted(image.user_tenants.items())),
        "tenant_admins": sorted(image.tenant_admins),
        "namespaces": {n: dict(sorted(ns.configs.items())) for n, ns in sorted(image.namespaces.items())},
        "identity_pools": {i: codec.identity_pool_to_json(p) for i, p in sorted(image.identity_pools.items())},
        "acls": [codec.acl_to_json(a) for a in image.acls],
        "client_quotas": codec.quotas_to_json(image.client_quotas),
        "renamed_topics": {n: str(i) for n, i in sorted(image.renamed_topics.items())},
        "broker_overrides": {str(n): dict(sorted(c.items())) for n, c in sorted(image.broker_overrides.items())},
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


# Snapshot sections that are lists of objects, keyed for replay by the field that names them.
_KEYED_LISTS = {"topics": "name", "tenants": "tenant_id"}
_KEYED_MAPS = ("scram_credentials", "user_tenants", "namespaces", "identity_pools", "renamed_topics", "broker_overrides")


def _replay(doc: dict[str, Any], records: Sequence[Mapping[str, Any]]) -> None:
    """Apply journal records, in order, to a snapshot document (in place)."""
    if not records:
        return
    keyed: dict[str, dict[Any, Any]] = {
        section: {d[key]: d for d in doc.get(section, [])} for section, key in _KEYED_LISTS.items()
    }
    keyed.update({section: dict(doc.get(section, {})) for section in _KEYED_MAPS})
    admins = dict.fromkeys(doc.get("tenant_admins", []))
    acls = {tuple(a): a for a in doc.get("acls", [])}  # ordered: removals, then appends
    quotas = {codec.entity_from_json(q["entity"]): q for q in doc.get("client_quotas", [])}
    for rec in records:
        for key in ("epoch", "next_producer_id", "broker_configs", "features"):
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
                quotas.pop(codec.entity_from_json(entity), None)
            else:
                quotas[codec.entity_from_json(entity)] = {"entity": entity, "values": values}
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


def read_document(path: str | Path) -> dict[str, object]:
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


class EmbeddedBackend(MetadataBackend):
    """The single-node, file-backed ``MetadataBackend``. Use from one event loop.

    ``commit`` is the compare-and-swap of the decide/commit loop: under ``_lock``, which
    serializes the file I/O (journal appends, snapshots, compactions), it refuses a change decided
    on an image that is not the current one (``CommitConflict``), else appends its journal record,
    makes it durable and publishes the next image. ``turn`` has this process's writers decide one
    at a time, so they do not lose swaps to each other in vain (an optimization, see
    ``MetadataBackend.turn``).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        node_id: int,
        cluster_id: str | None = None,
        new_uuid: Callable[[], uuid.UUID] = uuid.uuid4,
        files: MetadataFiles | None = None,
        compact_bytes: int = COMPACT_BYTES,
    ) -> None:
        super().__init__()
        self.path = resolve_path(path)
        self.journal = journal_path(self.path)
        self._compact_bytes = compact_bytes
        self.node_id = node_id
        self._wanted_cluster_id = cluster_id
        self._new_uuid = new_uuid  # the cluster id of a new store
        self._files = files or MetadataFiles()
        self._lock = asyncio.Lock()  # the file I/O: appends, snapshots, compactions
        self._turn = asyncio.Lock()  # this process's writers take turns deciding (``turn``)
        self._image: MetadataImage | None = None
        self._closed = False
        # the journal: last durable record, its size, and the snapshot's size
        self._seq = 0
        self._journal_bytes = 0
        self._snapshot_bytes = 0
        # an append failed, so a torn record may end the journal: the next change writes a snapshot
        self._repair = False
        self._compaction: asyncio.Task[None] | None = None

    @property
    def image(self) -> MetadataImage:
        if self._image is None:
            raise RuntimeError("EmbeddedMetadataStore.start() has not been awaited")
        return self._image

    def writable(self) -> MetadataImage:
        if self._closed:
            raise MetadataError("KAFKA_STORAGE_ERROR", "metadata store is closed")
        return self.image

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
                await self._write_snapshot(image, 0)
                log.info("created metadata store %s for cluster %s", self.path, cluster_id)
            else:
                journal = await asyncio.to_thread(self._files.read, self.journal) or b""
                image = self._load(raw, journal)
                self._snapshot_bytes, self._journal_bytes = len(raw), len(journal)
                if journal:  # fold it into the snapshot (and drop a torn end before any append)
                    try:
                        await self._write_snapshot(image, self._seq)
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
                    await self._write_snapshot(self._image, self._seq)
                except MetadataError as e:
                    log.warning("metadata journal not compacted at close: %s", e.message)
            self._closed = True
        await self.compaction_done()  # a background compaction sees the store closed: nothing to do

    async def compact(self) -> None:
        """Fold the journal into the snapshot now. It also happens by itself: at start, at close,
        and in the background once the journal outgrows the snapshot and ``compact_bytes``."""
        async with self._lock:
            image = self.writable()
            if self._journal_bytes or self._repair:
                await self._write_snapshot(image, self._seq)

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
            topics = [codec.topic_from_json(t) for t in doc.get("topics", [])]
            broker_configs = {str(k): str(v) for k, v in doc.get("broker_configs", {}).items()}
            epoch = int(doc.get("epoch", 0))
            next_producer_id = int(doc.get("next_producer_id", 0))
            credentials = codec.credentials_from_json(doc.get("scram_credentials", {}))  # auth
            tenants = codec.tenants_from_json(doc.get("tenants", []))
            user_tenants = {str(u): str(t) for u, t in doc.get("user_tenants", {}).items()}
            extra: dict[str, Any] = {
                "tenant_admins": frozenset(str(u) for u in doc.get("tenant_admins", [])),
                "namespaces": MappingProxyType({
                    str(n): NamespaceInfo(str(n), MappingProxyType({str(k): str(v) for k, v in c.items()}))
                    for n, c in doc.get("namespaces", {}).items()
                }),
                "identity_pools": MappingProxyType({
                    str(i): codec.identity_pool_from_json(p) for i, p in doc.get("identity_pools", {}).items()
                }),
                "acls": tuple(codec.acl_from_json(a) for a in doc.get("acls", [])),
                "client_quotas": MappingProxyType(codec.quotas_from_json(doc.get("client_quotas", []))),
                "renamed_topics": MappingProxyType({
                    str(n): uuid.UUID(str(i)) for n, i in doc.get("renamed_topics", {}).items()
                }),
                "next_producer_id": max(next_producer_id, 0),
                "features": codec.features_from_json(doc["features"]) if "features" in doc else NO_FEATURES,
                "broker_overrides": MappingProxyType({
                    int(n): MappingProxyType({str(k): str(v) for k, v in c.items()})
                    for n, c in doc.get("broker_overrides", {}).items()
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
        image = self._make_image(
            cluster_id, {}, by_name, broker_configs, epoch=epoch, by_id=by_id, credentials=credentials,
            tenants=tenants, user_tenants=user_tenants,
        )
        return dataclasses.replace(image, **extra)

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

    # -- commits --------------------------------------------------------------------------------

    def turn(self) -> asyncio.Lock:
        """One decide-and-commit attempt at a time: a writer decides on the image the commit
        before it published, so writers of this process never lose a swap to each other (the
        swap in ``commit`` is still checked)."""
        return self._turn

    async def commit(self, change: Change, expected_epoch: int) -> MetadataImage:
        """Publish the current image with ``change`` applied (``epoch + 1``), once its journal
        record is durable; ``CommitConflict`` when the current image is not at ``expected_epoch``."""
        if self._image is not None and self._image.epoch != expected_epoch:
            raise CommitConflict(expected_epoch, self._image.epoch)  # stale already: skip the queue
        async with self._lock:
            old = self.writable()
            if old.epoch != expected_epoch:
                raise CommitConflict(expected_epoch, old.epoch)
            change = change.settle(old)  # its record drops the former names it makes stale
            new = change.apply(old)
            record = {"epoch": new.epoch, **change.to_json()}
            # The write runs to completion even if the caller is cancelled, and the image follows
            # the disk: memory and disk never disagree. A failed write publishes nothing.
            cancelled = await _uncancellable(self._persist(new, record))
            self._image = new
            self._tell(old, new)
            self._maybe_compact()
        if cancelled:
            raise asyncio.CancelledError()
        return new

    async def _persist(self, image: MetadataImage, record: dict[str, Any]) -> None:
        """Make one change durable: its journal record (``image`` is the state after it), or a
        whole snapshot after a failed append, whose torn end may close the journal."""
        seq = self._seq + 1
        if self._repair:
            await self._write_snapshot(image, seq)
        else:
            line = _journal_line({"seq": seq, **record})
            try:
                await asyncio.to_thread(self._files.append, self.journal, line)
            except OSError as e:
                self._repair = True
                raise MetadataError("KAFKA_STORAGE_ERROR", f"cannot write {self.journal}: {e}") from e
            self._journal_bytes += len(line)
        self._seq = seq

    async def _write_snapshot(self, image: MetadataImage, seq: int) -> None:
        """Write the snapshot of ``image`` (journal records up to ``seq`` included) atomically, then
        empty the journal; serialized and written in a worker thread, and to completion even if
        the caller is cancelled (the lock must not be released while the journal is being cut)."""

        def write() -> tuple[int, bool]:
            data = _encode_doc(_snapshot_doc(image, self.node_id, seq))
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


class EmbeddedMetadataStore(DecidingStore):
    """Single-node, file-backed ``MetadataStore``: the rules over an ``EmbeddedBackend``. Use from
    one event loop.

    ``path`` is either the JSON file or a data directory (then ``<dir>/__metadata/metadata.json``).
    ``new_uuid``, ``new_tenant_id``, ``now_ms``, ``files`` and ``compact_bytes`` (the journal size
    that may start a compaction) are injectable for tests.
    """

    backend: EmbeddedBackend

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
        backend = EmbeddedBackend(
            path, node_id=node_id, cluster_id=cluster_id, new_uuid=new_uuid, files=files,
            compact_bytes=compact_bytes,
        )
        super().__init__(backend, new_uuid=new_uuid, new_tenant_id=new_tenant_id, now_ms=now_ms)
        self.path = backend.path
        self.journal = backend.journal
        self.node_id = node_id

    @property
    def _lock(self) -> asyncio.Lock:
        """The backend's file lock: held, no change or compaction is being written."""
        return self.backend._lock

    @property
    def _next_producer_id(self) -> int:
        return self.image.next_producer_id

    async def compact(self) -> None:
        await self.backend.compact()

    async def compaction_done(self) -> None:
        await self.backend.compaction_done()
