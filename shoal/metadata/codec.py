"""JSON forms of the image's entries, shared by every backend (the embedded store's snapshot and
journal records; an etcd backend's values). Decoders return frozen values (``MappingProxyType``
for every mapping), as images hold them.

Format versions: a document (a JSON object) carries its format version in ``"v"``; one without it
is version 1 (every document 0.14.0 and the builds before it wrote). A decoder meeting a version
newer than it reads raises ``FormatVersionError`` (a ``ValueError``) naming the document, the
version and the versions this release reads, never guessing at fields it does not know; the etcd
backend skips such a key with that error in one log line. A new version is written only once the
``shoal.version`` level that enables it is finalized (``shoal.metadata.features``), so a broker
that cannot read it never meets it (it refuses to start at that level), and the cluster can be
rolled back until then. The versions (docs/upgrades.md has the table):

- topics (``TopicDoc``): 1, a partition an object of named fields; 2 (``shoal.version`` 2), the
  partitions as compact rows ``[partition, replicas, isr, leader, leader_epoch,
  partition_epoch(, {adding, removing, observers})]``, a third to a quarter of version 1's bytes,
  so a topic of several thousand partitions (one etcd value) stays under etcd's request limit.
- every other document: 1.
"""

from __future__ import annotations

import base64
import uuid
from types import MappingProxyType
from typing import Any, Iterable, Mapping, NotRequired, Sequence, TypedDict, cast

from shoal import __version__
from shoal.metadata import (
    AclEntry,
    BrokerInfo,
    FinalizedFeatures,
    IdentityPool,
    PartitionInfo,
    QuotaEntity,
    ScramCredential,
    TenantInfo,
    TopicInfo,
    frozen_topic,
)

# -- the documents, as JSON holds them (keys a reader may not find are NotRequired: data written
# before they existed reads the same) ----------------------------------------------------------


class PartitionDoc(TypedDict):
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: NotRequired[int]
    partition_epoch: NotRequired[int]
    adding: NotRequired[list[int]]
    removing: NotRequired[list[int]]
    observers: NotRequired[list[int]]


class TopicDoc(TypedDict):
    v: NotRequired[int]  # the format version: 1 when absent
    name: str
    topic_id: str
    internal: NotRequired[bool]
    configs: NotRequired[dict[str, str]]
    partitions: NotRequired[list[PartitionDoc]]  # version 1
    p: NotRequired[list[list[Any]]]  # version 2: partition rows


class ScramDoc(TypedDict):
    salt: str  # base64, as the three keys
    stored_key: str
    server_key: str
    iterations: int


class TenantDoc(TypedDict):
    tenant_id: str
    display_name: str
    created_ms: int
    configs: NotRequired[dict[str, str]]
    policy: NotRequired[dict[str, object]]


class QuotaDoc(TypedDict):
    entity: list[list[str | None]]  # (entity type, name) pairs
    values: dict[str, float]


class BrokerDoc(TypedDict):
    node_id: int
    host: str
    port: int
    rack: NotRequired[str | None]
    endpoints: NotRequired[list[list[str | int]]]  # (listener, host, port)
    features: NotRequired[list[list[str | int]]]  # (feature, min level, max level) supported
    host_id: NotRequired[str]  # broker.host, when set


class FeaturesDoc(TypedDict):
    epoch: int
    levels: dict[str, int]


class FormatVersionError(ValueError):
    """A document written in a format version this release does not read."""


# The newest format version of each document this release reads (documents absent here: 1).
READS = {"topic": 2}
TOPIC_COMPACT = 2  # the version whose partitions are rows


def format_version(doc: Mapping[str, object], kind: str) -> int:
    """The format version of ``doc`` (1 without ``"v"``); FormatVersionError for one this release
    does not read."""
    v = doc.get("v", 1) if isinstance(doc, Mapping) else 1
    known = READS.get(kind, 1)
    if type(v) is not int or not 1 <= v <= known:
        raise FormatVersionError(
            f"a {kind} of format version {v!r}, this broker (shoal {__version__}) reads {kind} versions 1 to "
            f"{known}: a newer release wrote it (run one that reads it; see shoal features describe)")
    return v


def topic_version(shoal_version: int) -> int:
    """The topic format a cluster at ``shoal.version`` level ``shoal_version`` writes."""
    return TOPIC_COMPACT if shoal_version >= 2 else 1


AclDoc = list[str | int | None]  # tenant, resource type and name, pattern, principal, host, operation, permission


def partition_to_json(p: PartitionInfo) -> PartitionDoc:
    d: PartitionDoc = {
        "partition": p.partition,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
        "partition_epoch": p.partition_epoch,
    }
    # a reassignment's fields only while one runs: data stored before them reads the same
    if p.reassigning:
        d["adding"], d["removing"] = list(p.adding), list(p.removing)
    if p.observers:
        d["observers"] = list(p.observers)
    return d


def partition_from_json(d: PartitionDoc) -> PartitionInfo:
    return PartitionInfo(
        partition=int(d["partition"]),
        replicas=tuple(int(r) for r in d["replicas"]),
        isr=tuple(int(r) for r in d["isr"]),
        leader=int(d["leader"]),
        leader_epoch=int(d.get("leader_epoch", 0)),
        partition_epoch=int(d.get("partition_epoch", 0)),
        adding=tuple(int(r) for r in d.get("adding", ())),
        removing=tuple(int(r) for r in d.get("removing", ())),
        observers=tuple(int(r) for r in d.get("observers", ())),
    )


PartitionRow = list[Any]  # version 2: [partition, replicas, isr, leader, leader_epoch, partition_epoch(, extras)]


def partition_to_row(p: PartitionInfo) -> PartitionRow:
    row: PartitionRow = [p.partition, list(p.replicas), list(p.isr), p.leader, p.leader_epoch, p.partition_epoch]
    extras = {k: v for k, v in (("adding", list(p.adding)), ("removing", list(p.removing)),
                                ("observers", list(p.observers))) if v}
    if extras:
        row.append(extras)
    return row


def partition_from_row(fields: Sequence[object]) -> PartitionInfo:
    row = cast("Sequence[Any]", fields)
    if not 6 <= len(row) <= 7:
        raise ValueError(f"a partition row of {len(row)} fields")
    extras: Mapping[str, Any] = row[6] if len(row) == 7 else {}
    return PartitionInfo(
        partition=int(row[0]),
        replicas=tuple(int(r) for r in row[1]),
        isr=tuple(int(r) for r in row[2]),
        leader=int(row[3]),
        leader_epoch=int(row[4]),
        partition_epoch=int(row[5]),
        adding=tuple(int(r) for r in extras.get("adding", ())),
        removing=tuple(int(r) for r in extras.get("removing", ())),
        observers=tuple(int(r) for r in extras.get("observers", ())),
    )


def topic_to_json(t: TopicInfo, version: int = 1) -> TopicDoc:
    """Format ``version`` 1 (what 0.14.0 reads) or 2 (``TOPIC_COMPACT``: ``shoal.version`` 2)."""
    d: TopicDoc = {
        "name": t.name,
        "topic_id": str(t.topic_id),
        "internal": t.internal,
        "configs": dict(t.configs),
        "partitions": [],
    }
    if version == TOPIC_COMPACT:
        del d["partitions"]
        d["v"], d["p"] = TOPIC_COMPACT, [partition_to_row(p) for p in t.partitions]
    elif version == 1:
        d["partitions"] = [partition_to_json(p) for p in t.partitions]
    else:
        raise ValueError(f"no topic format version {version}")
    return d


def topic_from_json(d: TopicDoc) -> TopicInfo:
    if format_version(d, "topic") == TOPIC_COMPACT:
        partitions = tuple(partition_from_row(r) for r in d["p"])
    else:
        partitions = tuple(partition_from_json(p) for p in d["partitions"])
    return frozen_topic(
        name=str(d["name"]),
        topic_id=uuid.UUID(d["topic_id"]),
        partitions=partitions,
        configs={str(k): str(v) for k, v in d.get("configs", {}).items()},
        internal=bool(d.get("internal", False)),
    )




# auth: SCRAM credentials
def user_credentials_to_json(by_mech: Mapping[str, ScramCredential]) -> dict[str, ScramDoc]:
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


def credentials_to_json(creds: Mapping[str, Mapping[str, ScramCredential]]) -> dict[str, dict[str, ScramDoc]]:
    return {user: user_credentials_to_json(by_mech) for user, by_mech in sorted(creds.items())}


def user_credentials_from_json(by_mech: Mapping[str, ScramDoc]) -> Mapping[str, ScramCredential]:
    return MappingProxyType(
        {
            str(mech): ScramCredential(
                mechanism=str(mech),
                salt=base64.b64decode(c["salt"]),
                stored_key=base64.b64decode(c["stored_key"]),
                server_key=base64.b64decode(c["server_key"]),
                iterations=int(c["iterations"]),
            )
            for mech, c in by_mech.items() if format_version(c, "SCRAM credential")
        }
    )


def credentials_from_json(d: Mapping[str, Mapping[str, ScramDoc]]) -> dict[str, Mapping[str, ScramCredential]]:
    return {str(user): user_credentials_from_json(by_mech) for user, by_mech in d.items()}



def tenant_to_json(t: TenantInfo) -> TenantDoc:
    return {
        "tenant_id": t.tenant_id,
        "display_name": t.display_name,
        "created_ms": t.created_ms,
        "configs": dict(sorted(t.configs.items())),
        "policy": dict(t.policy),
    }


def tenants_to_json(tenants: Mapping[str, TenantInfo]) -> list[TenantDoc]:
    return [tenant_to_json(t) for _, t in sorted(tenants.items())]


def tenant_from_json(d: TenantDoc) -> TenantInfo:
    format_version(d, "tenant")
    return TenantInfo(
        str(d["tenant_id"]),
        str(d["display_name"]),
        int(d["created_ms"]),
        MappingProxyType({str(k): str(v) for k, v in d.get("configs", {}).items()}),
        MappingProxyType(dict(d.get("policy", {}))),
    )


def tenants_from_json(items: Iterable[TenantDoc]) -> dict[str, TenantInfo]:
    return {t.tenant_id: t for t in map(tenant_from_json, items)}


class IdentityPoolDoc(TypedDict):
    pool_id: str
    tenant_id: str
    issuer: str
    claim_filter: dict[str, str]
    principal_claim: str
    display_name: str


def identity_pool_to_json(p: IdentityPool) -> IdentityPoolDoc:
    return {
        "pool_id": p.pool_id,
        "tenant_id": p.tenant_id,
        "issuer": p.issuer,
        "claim_filter": dict(sorted(p.claim_filter.items())),
        "principal_claim": p.principal_claim,
        "display_name": p.display_name,
    }


def identity_pool_from_json(d: IdentityPoolDoc) -> IdentityPool:
    format_version(d, "identity pool")
    return IdentityPool(
        str(d["pool_id"]), str(d["tenant_id"]), str(d["issuer"]),
        MappingProxyType({str(k): str(v) for k, v in d.get("claim_filter", {}).items()}),
        str(d.get("principal_claim", "sub")), str(d.get("display_name", "")),
    )


def acl_to_json(a: AclEntry) -> AclDoc:
    return [a.tenant, a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host,
            a.operation, a.permission_type]


def acl_from_json(d: Sequence[str | int | None]) -> AclEntry:
    t, rt, rn, pt, pr, h, op, perm = cast("Sequence[Any]", d)
    return AclEntry(None if t is None else str(t), int(rt), str(rn), int(pt), str(pr), str(h), int(op), int(perm))


def quotas_to_json(quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> list[QuotaDoc]:
    return [
        {"entity": [list(e) for e in entity], "values": dict(sorted(values.items()))}
        for entity, values in sorted(quotas.items(), key=lambda kv: repr(kv[0]))
    ]


def entity_from_json(entity: Iterable[Sequence[str | None]]) -> QuotaEntity:
    return tuple((str(t), None if n is None else str(n)) for t, n in entity)


def quota_values_from_json(values: Mapping[str, float]) -> Mapping[str, float]:
    format_version(values, "client quota")
    return MappingProxyType({str(k): float(v) for k, v in values.items()})


def quotas_from_json(items: Iterable[QuotaDoc]) -> dict[QuotaEntity, Mapping[str, float]]:
    return {entity_from_json(d["entity"]): quota_values_from_json(d["values"]) for d in items}


def broker_to_json(b: BrokerInfo) -> BrokerDoc:
    doc: BrokerDoc = {
        "node_id": b.node_id,
        "host": b.host,
        "port": b.port,
        "rack": b.rack,
        "endpoints": [list(e) for e in b.endpoints],
        "features": [list(f) for f in b.features],
    }
    if b.host_id:
        doc["host_id"] = b.host_id
    return doc


def broker_from_json(d: BrokerDoc) -> BrokerInfo:
    format_version(d, "broker registration")
    return BrokerInfo(
        node_id=int(d["node_id"]),
        host=str(d["host"]),
        port=int(d["port"]),
        rack=None if d.get("rack") is None else str(d["rack"]),
        endpoints=tuple((str(n), str(h), int(p)) for n, h, p in d.get("endpoints", [])),
        features=tuple((str(n), int(lo), int(hi)) for n, lo, hi in d.get("features", [])),
        host_id=str(d.get("host_id") or ""),
    )


def features_to_json(f: FinalizedFeatures) -> FeaturesDoc:
    return {"epoch": f.epoch, "levels": dict(sorted(f.levels.items()))}


def features_from_json(d: FeaturesDoc) -> FinalizedFeatures:
    format_version(d, "feature levels")
    return FinalizedFeatures(MappingProxyType({str(k): int(v) for k, v in d["levels"].items()}), int(d["epoch"]))
