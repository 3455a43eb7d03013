"""The authorization matrix (issue 4, ACLs "applied by every handler"), over SASL/SCRAM.

One broker with an authorizer (``authorizer.class.name`` set). In tenant A, ``ada`` (a tenant
administrator) makes the tenant's resources beforehand: topics (``orders`` holds records and a
config, ``retention.ms``; others are there to be deleted, trimmed, grown or to live in namespace
``ns``), groups with committed offsets (``billing``, ``g-doomed``, ``g-trim``), a KIP-848 group
whose member is assigned ``orders`` (``g-848``) and ACLs (``User:reporter`` may READ ``orders``).
``mallory`` is a user of the same tenant, not an administrator, with no ACLs.

For every API the broker registers (``ROWS``; :func:`test_matrix_covers_every_api` fails when an
API has no row) one or more rows, each a request and what Kafka's ``KafkaApis`` answers it:

- :func:`test_denied`: mallory's request with no ACLs gets the row's refusal
  (TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a Metadata or ListGroups listing
  nothing, ...). ApiVersions, SaslHandshake and SaslAuthenticate are exempt (Kafka checks no ACL
  for them), and so is DescribeCluster (its authorized operations are 0). ``carol``, a user of the
  physical cluster with no tenant and no ACLs, sends the same request for the same resources by
  their physical names and gets the same answer, field by field once the names are swapped.
- :func:`test_allowed`: the row's ``ladder`` grants mallory ACLs step by step (written by ada over
  the wire); each step shows which check the new binding passes, and the last holds Kafka's minimal
  bindings for the API, with which the same request succeeds. Her bindings are removed afterwards.
- :func:`test_deny_wins`: a DENY beside those ALLOWs refuses the request again;
  :func:`test_namespace_deny_blocks_topic_allow`: a DENY on namespace ``ns`` refuses a topic
  ``ns:t`` that has its own ALLOW (KIP-37 gate); :func:`test_replica_fetch_needs_cluster_action`:
  a replica's fetch needs CLUSTER_ACTION, and only the physical view has replicas.

Kafka references (apache/kafka ``KafkaApis``, ``AuthHelper``, ``ConfigHelper``,
``ControllerApis``/``ReplicationControlManager`` for CreateTopics' configs). Transactions
(``shoal.txn``): a transactional id with no producer passes its authorization and then meets
INVALID_PRODUCER_ID_MAPPING (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) or
TRANSACTIONAL_ID_NOT_FOUND (DescribeTransactions), which is noted per row; WriteTxnMarkers and the
brokers' AddPartitionsToTxn v4 need CLUSTER_ACTION in the physical view, which a tenant never has.

Requests and helpers are the isolation matrix's (``test_isolation``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import pytest

from shoal.broker import handler_modules
from shoal.client import AdminClient
from shoal.handlers.registry import Registry
from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import build_batch
from shoal.tenancy.acl import CLUSTER_NAME, Operation, PatternType, Permission, ResourceType
from tenancy_fixtures import MECHANISM, TenantCluster, tenant_cluster
from test_isolation import namespaces_as_dicts  # txn: DescribeTransactions' fallback decoding
from test_isolation import (
    CLUSTER_FIELDS,
    ZERO_ID,
    Principal,
    acl_filter,
    cg_heartbeat,
    classic,
    commit_fields,
    config_resource,
    fetch_fields,
    metadata_fields,
    ok,
    plain,
    scram_upsert,
    send,
    swap,
    topic_fields,
)

CAROL = ("carol", "carol-secret")
OVERRIDES = {
    "authorizer.class.name": "shoal",
    "shoal.sasl.bootstrap.users": ":".join(CAROL),  # a user of the physical cluster
    "group.consumer.session.timeout.ms": "600000",  # g-848's member lives as long as the module
}

T, G = "orders", "billing"
NS, NS_TOPIC = "ns", "ns:t"
DOOMED, DOOMED_BY_ID, TRIMMED, GROWN = "doomed", "doomed2", "trimmed", "grown"
G_DOOMED, G_TRIM, G_848 = "g-doomed", "g-trim", "g-848"
TXN = "tx-m"
RETENTION = "86400000"
M848 = "7f1c2b8e-6a43-4c1d-9a51-2f0e8d3c4b5a"  # mallory's KIP-848 member id

NONE = ErrorCode.none
TOPIC_DENIED = ErrorCode.topic_authorization_failed
GROUP_DENIED = ErrorCode.group_authorization_failed
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
TXN_DENIED = ErrorCode.transactional_id_authorization_failed

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TXN_ID, NAMESPACE = ResourceType.TRANSACTIONAL_ID, ResourceType.NAMESPACE
READ, WRITE, CREATE = Operation.READ, Operation.WRITE, Operation.CREATE
DELETE, ALTER = Operation.DELETE, Operation.ALTER
DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS = Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS


# -- who asks, and how they name the tenant's resources -------------------------------------------


@dataclass(frozen=True)
class Caller:
    p: Principal
    prefix: str = ""  # "" in the tenant (mallory); the tenant's prefix in the physical view (carol)

    def n(self, name: str) -> str:
        """The caller's name of the tenant's ``name``."""
        return self.prefix + name

    @property
    def principal(self) -> str:
        return f"User:{self.p.user}"


@dataclass
class Env:
    cluster: TenantCluster
    ada: Principal  # tenant A's administrator
    mallory: Caller
    carol: Caller  # the physical view
    operator: Principal  # super user, physical view (PLAINTEXT)
    ids: dict[str, uuid.UUID]  # A's topics (as A names them) -> topic id
    node: int  # the broker's node id


def sasl_principal(broker, user: str, password: str) -> Principal:
    return Principal(MECHANISM, user, {
        "bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM, "sasl.username": user, "sasl.password": password})


# -- expectations ---------------------------------------------------------------------------------


def codes(x: Any) -> list[int]:
    """Every ``error_code`` in a plain response."""
    if isinstance(x, dict):
        return [c for k, v in x.items() for c in ([int(v)] if k == "error_code" else codes(v))]
    if isinstance(x, list):
        return [c for v in x for c in codes(v)]
    return []


@dataclass(frozen=True)
class Expect:
    """``code`` is the only error in the response (NONE: no error at all), and ``holds`` is true of it."""

    code: int = NONE
    holds: Callable[[dict], Any] | None = None

    def check(self, resp: dict, what: str) -> None:
        got = sorted(set(codes(resp)) - {0})
        want = [int(self.code)] if self.code else []
        assert got == want, (f"{what}: error codes {[ErrorCode(c).name for c in got]}, expected "
                             f"{ErrorCode(self.code).name}: {resp}")
        if self.holds is not None:
            assert self.holds(resp), f"{what}: {resp}"


OK = Expect()


def topic_names(r: dict) -> list[str]:
    return sorted(t["name"] for t in r["topics"])


# -- the rows -------------------------------------------------------------------------------------

Grant = tuple[int, str, int, int, int]  # resource type, name, operation, permission, pattern type
Cell = Callable[[Env, Caller, AdminClient], Awaitable[Any]]


def allow(rt: int, name: str, op: int, pattern: int = PatternType.LITERAL) -> Grant:
    return (rt, name, op, Permission.ALLOW, pattern)


def deny(rt: int, name: str, op: int, pattern: int = PatternType.LITERAL) -> Grant:
    return (rt, name, op, Permission.DENY, pattern)


def on_cluster(op: int) -> Grant:
    return allow(CLUSTER, CLUSTER_NAME, op)


@dataclass(frozen=True)
class Row:
    key: int
    case: str
    cell: Cell
    denied: Expect  # mallory (and carol) without ACLs
    ladder: tuple[tuple[tuple[Grant, ...], Expect], ...] = ()  # bindings added step by step
    note: str = ""  # why a row has no ladder, or what its last step shows

    @property
    def id(self) -> str:
        return f"{self.key}-{self.case}"


ROWS: list[Row] = []


def row(key: int, case: str, denied: Expect, *ladder: tuple[tuple[Grant, ...], Expect], note: str = ""):
    """Register ``cell`` as a row of api ``key``."""
    def register(cell: Cell) -> Cell:
        ROWS.append(Row(key, case, cell, denied, tuple(ladder), note))
        return cell
    return register


def produce_fields(topic: str, value: bytes = b"m") -> dict[str, Any]:
    batch = build_batch([(int(time.time() * 1000), None, value, ())])
    return {"transactional_id": None, "acks": -1, "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}


@row(0, "topic", Expect(TOPIC_DENIED), ((allow(TOPIC, T, WRITE),), OK))
async def produce(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 0, produce_fields(c.n(T)))


def has_records(r: dict) -> bool:
    return any(p["records"] for t in r["responses"] for p in t["partitions"])


@row(1, "by name", Expect(TOPIC_DENIED), ((allow(TOPIC, T, READ),), Expect(holds=has_records)))
async def fetch_by_name(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 1, fetch_fields(c.n(T)), version=12)


@row(1, "by id", Expect(TOPIC_DENIED), ((allow(TOPIC, T, READ),), Expect(holds=has_records)))
async def fetch_by_id(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 1, fetch_fields(topic_id=env.ids[T]))


def replica_fetch_fields(topic_id: uuid.UUID) -> dict[str, Any]:
    """A replica's fetch (replica id 1; in replica_state from v15)."""
    return {**fetch_fields(topic_id=topic_id), "replica_id": 1, "replica_state": {"replica_id": 1, "replica_epoch": 0}}


@row(1, "as a replica", Expect(TOPIC_DENIED),
     note="a tenant has no replicas: see test_replica_fetch_needs_cluster_action")
async def fetch_as_replica(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 1, replica_fetch_fields(env.ids[T]))


@row(2, "topic", Expect(TOPIC_DENIED), ((allow(TOPIC, T, DESCRIBE),), Expect(
    holds=lambda r: r["topics"][0]["partitions"][0]["offset"] >= 3)))
async def list_offsets(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 2, {"replica_id": -1, "isolation_level": 0, "timeout": 5000, "topics": [
        topic_fields(c.n(T), {"current_leader_epoch": -1, "timestamp": -1})]})


@row(3, "by name", Expect(TOPIC_DENIED), ((allow(TOPIC, T, DESCRIBE),), Expect(
    holds=lambda r: r["topics"][0]["topic_authorized_operations"] == 1 << DESCRIBE)))
async def metadata_by_name(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 3, metadata_fields([{"name": c.n(T), "topic_id": ZERO_ID}]))


@row(3, "by id", Expect(TOPIC_DENIED, lambda r: r["topics"][0]["name"] is None),
     ((allow(TOPIC, T, DESCRIBE),), Expect(holds=lambda r: topic_names(r) == [T])))
async def metadata_by_id(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 3, metadata_fields([{"name": None, "topic_id": env.ids[T]}]), version=12)


@row(3, "all topics", Expect(holds=lambda r: r["topics"] == [] and r["cluster_authorized_operations"] == 0),
     ((allow(TOPIC, T, DESCRIBE),), Expect(holds=lambda r: topic_names(r) == [T])),
     ((on_cluster(DESCRIBE),), Expect(holds=lambda r: r["cluster_authorized_operations"] == 1 << DESCRIBE)))
async def metadata_all(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 3, metadata_fields(None), version=10)  # the cluster's operations: v8-v10


@row(3, "auto-creation", Expect(TOPIC_DENIED),
     ((allow(TOPIC, "fresh", DESCRIBE),), Expect(TOPIC_DENIED)),  # exists for it, but may not create it
     ((allow(TOPIC, "fresh", CREATE),), Expect(holds=lambda r: topic_names(r) == ["fresh"])))
async def metadata_auto_create(env: Env, c: Caller, cl: AdminClient) -> Any:
    fields = metadata_fields([{"name": c.n("fresh"), "topic_id": ZERO_ID}])
    return await send(cl, 3, {**fields, "allow_auto_topic_creation": True})


@row(8, "simple commit", Expect(GROUP_DENIED),
     ((allow(GROUP, G, READ),), Expect(TOPIC_DENIED)),
     ((allow(TOPIC, T, READ),), OK))
async def offset_commit(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 8, commit_fields(c.n(G), -1, "", {c.n(T): 2}), version=9)


def committed(r: dict) -> list[tuple[str, int]]:
    return [(t["name"], p["committed_offset"]) for g in r["groups"] for t in g["topics"] for p in t["partitions"]]


def offset_fetch_fields(group: str, topics: list[str] | None) -> dict[str, Any]:
    return {"group_id": group, "require_stable": False, "groups": [
        {"group_id": group, "member_id": None, "member_epoch": -1,
         "topics": None if topics is None else [{"name": t, "partition_indexes": [0]} for t in topics]}]}


@row(9, "named topic", Expect(GROUP_DENIED),
     ((allow(GROUP, G, DESCRIBE),), Expect(TOPIC_DENIED)),
     ((allow(TOPIC, T, DESCRIBE),), Expect(holds=lambda r: committed(r) == [(T, 2)])))
async def offset_fetch(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 9, offset_fetch_fields(c.n(G), [c.n(T)]), version=9)


@row(9, "all topics", Expect(GROUP_DENIED),
     ((allow(GROUP, G, DESCRIBE),), Expect(holds=lambda r: committed(r) == [])),  # T's offsets left out
     ((allow(TOPIC, T, DESCRIBE),), Expect(holds=lambda r: committed(r) == [(T, 2)])))
async def offset_fetch_all(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 9, offset_fetch_fields(c.n(G), None), version=9)


@row(10, "group", Expect(GROUP_DENIED), ((allow(GROUP, G, DESCRIBE),), OK))
async def find_group_coordinator(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 10, {"key": c.n(G), "key_type": 0, "coordinator_keys": [c.n(G)]})


@row(10, "transactional id", Expect(TXN_DENIED), ((allow(TXN_ID, TXN, DESCRIBE),), OK))
async def find_txn_coordinator(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 10, {"key": c.n(TXN), "key_type": 1, "coordinator_keys": [c.n(TXN)]})


async def classic_member(cl: AdminClient, group: str, key: int) -> Any:
    """JoinGroup (again with the member id the broker asks for: KIP-394), SyncGroup, then api
    ``key`` of the new member; the response to ``key``."""
    fields = classic(group, "", -1)
    r = await send(cl, 11, fields)
    if r.error_code == ErrorCode.member_id_required:
        r = await send(cl, 11, {**fields, "member_id": r.member_id})
    if key == 11:
        return r
    member = classic(group, r.member_id, r.generation_id)
    s = await send(cl, 14, {**member, "assignments": [{"member_id": r.member_id, "assignment": b""}]})
    return s if key == 14 else await send(cl, key, member)


def classic_row(key: int, group: str) -> None:
    async def cell(env: Env, c: Caller, cl: AdminClient) -> Any:
        return await classic_member(cl, c.n(group), key)

    cell.__name__ = f"classic_{key}"
    row(key, "member", Expect(GROUP_DENIED), ((allow(GROUP, group, READ),), OK))(cell)


for _key, _group in ((11, "g-join"), (14, "g-sync"), (12, "g-heartbeat"), (13, "g-leave")):
    classic_row(_key, _group)


def group_state(r: dict) -> tuple[str, int]:
    return r["groups"][0]["group_state"], r["groups"][0]["authorized_operations"]


@row(15, "group", Expect(GROUP_DENIED), ((allow(GROUP, G, DESCRIBE),), Expect(
    holds=lambda r: group_state(r) == ("Empty", 1 << DESCRIBE))))
async def describe_groups(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 15, {"groups": [c.n(G)], "include_authorized_operations": True})


def listed(r: dict) -> set[str]:
    return {g["group_id"] for g in r["groups"]}


@row(16, "all groups", Expect(holds=lambda r: r["groups"] == []),
     ((allow(GROUP, G, DESCRIBE),), Expect(holds=lambda r: listed(r) == {G})),
     ((on_cluster(DESCRIBE),), Expect(holds=lambda r: {G, G_DOOMED, G_TRIM, G_848} <= listed(r))))
async def list_groups(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 16, {"states_filter": [], "types_filter": []})


EXEMPT = "no ACL is checked (Kafka neither)"
OPERATORS = "an operator action: refused to tenants even with ALTER (test_placement_is_the_operators)"


async def unauthenticated(env: Env, c: Caller, keys: tuple[int, ...]) -> Any:
    """A new connection to the SASL listener: SaslHandshake (PLAIN), then SaslAuthenticate with the
    caller's own password if asked; the last response."""
    raw = Principal("PLAINTEXT", "", {"bootstrap.servers": env.cluster.broker.sasl_bootstrap,
                                      "security.protocol": "PLAINTEXT"})
    async with raw.client() as cl:
        r = await send(cl, 17, {"mechanism": "PLAIN"})
        if 36 in keys:
            token = f"\x00{c.p.user}\x00{c.p.props['sasl.password']}".encode()
            r = await send(cl, 36, {"auth_bytes": token})
        return r


@row(17, "exempt", Expect(holds=lambda r: "PLAIN" in r["mechanisms"]), note=EXEMPT)
async def sasl_handshake(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await unauthenticated(env, c, (17,))


@row(36, "exempt", OK, note=EXEMPT + ": the caller logs in as itself")
async def sasl_authenticate(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await unauthenticated(env, c, (17, 36))


@row(18, "exempt", Expect(holds=lambda r: {a["api_key"] for a in r["api_keys"]} == registered_keys()), note=EXEMPT)
async def api_versions(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 18, {"client_software_name": "authz", "client_software_version": "1"})


def created(r: dict) -> dict:
    return r["topics"][0]


@row(19, "topic", Expect(TOPIC_DENIED),
     # created, but its configs are not the caller's to see (Kafka: topic_config_error_code)
     ((allow(TOPIC, "m-new", CREATE),), Expect(holds=lambda r: (
         created(r)["topic_config_error_code"], created(r)["configs"], created(r)["num_partitions"]) == (
         TOPIC_DENIED, [], -1))),
     ((allow(TOPIC, "m-new", DESCRIBE_CONFIGS),), Expect(holds=lambda r: (
         created(r)["topic_config_error_code"], created(r)["num_partitions"]) == (0, 1) and created(r)["configs"])),
     note="validate_only, so every step may create it")
async def create_topics(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 19, {"topics": [{"name": c.n("m-new"), "num_partitions": 1, "replication_factor": 1,
                                           "assignments": [], "configs": []}],
                               "timeout": 5000, "validate_only": True})


@row(19, "cluster CREATE", Expect(TOPIC_DENIED), ((on_cluster(CREATE),), Expect(
    holds=lambda r: created(r)["topic_id"] is not None)))
async def create_topics_cluster(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 19, {"topics": [{"name": c.n("m-made"), "num_partitions": 1, "replication_factor": 1,
                                           "assignments": [], "configs": []}],
                               "timeout": 5000, "validate_only": False})


@row(20, "by name", Expect(TOPIC_DENIED), ((allow(TOPIC, DOOMED, DELETE),), OK))
async def delete_topics(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 20, {"topic_names": [c.n(DOOMED)], "topics": [{"name": c.n(DOOMED), "topic_id": ZERO_ID}],
                               "timeout": 5000})


@row(20, "by id", Expect(TOPIC_DENIED, lambda r: r["responses"][0]["name"] is None),
     ((allow(TOPIC, DOOMED_BY_ID, DELETE),), OK))
async def delete_topics_by_id(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 20, {"topics": [{"name": None, "topic_id": env.ids[DOOMED_BY_ID]}], "timeout": 5000})


@row(21, "topic", Expect(TOPIC_DENIED), ((allow(TOPIC, TRIMMED, DELETE),), Expect(
    holds=lambda r: r["topics"][0]["partitions"][0]["low_watermark"] == 1)))
async def delete_records(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 21, {"topics": [topic_fields(c.n(TRIMMED), {"offset": 1})], "timeout": 5000})


def init_fields(txn: str | None) -> dict[str, Any]:
    return {"transactional_id": txn, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}


def has_producer(r: dict) -> bool:
    return r["producer_id"] >= 0


@row(22, "idempotent", Expect(CLUSTER_DENIED), ((on_cluster(Operation.IDEMPOTENT_WRITE),), Expect(holds=has_producer)))
async def init_producer_id(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 22, init_fields(None))


@row(22, "idempotent, KIP-679", Expect(CLUSTER_DENIED), ((allow(TOPIC, T, WRITE),), Expect(holds=has_producer)))
async def init_producer_id_by_topic(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 22, init_fields(None))


@row(22, "transactional id", Expect(TXN_DENIED), ((allow(TXN_ID, TXN, WRITE),), Expect(holds=has_producer)))
async def init_txn_producer_id(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 22, init_fields(c.n(TXN)))


def txn_offset_commit_fields(txn: str, group: str, topic: str, pid: int, epoch: int) -> dict[str, Any]:
    return {"transactional_id": txn, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": 2, "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


@row(28, "group and topic", Expect(TXN_DENIED),
     ((allow(TXN_ID, TXN, WRITE),), Expect(GROUP_DENIED)),
     ((allow(GROUP, G, READ),), Expect(TOPIC_DENIED)),
     ((allow(TOPIC, T, READ),), OK),
     note="a real transaction: InitProducerId and AddOffsetsToTxn (as far as the ACLs let them) before, "
          "EndTxn (abort) after, so no step leaves an open transaction")
async def txn_offset_commit(env: Env, c: Caller, cl: AdminClient) -> Any:
    init = await send(cl, 22, init_fields(c.n(TXN)))
    pid, epoch = (init.producer_id, init.producer_epoch) if init.error_code == NONE else (-1, -1)
    if pid >= 0:
        await send(cl, 25, {"transactional_id": c.n(TXN), "producer_id": pid, "producer_epoch": epoch,
                            "group_id": c.n(G)})
    r = await send(cl, 28, txn_offset_commit_fields(c.n(TXN), c.n(G), c.n(T), pid, epoch), version=3)
    if pid >= 0:
        await send(cl, 26, {"transactional_id": c.n(TXN), "producer_id": pid, "producer_epoch": epoch,
                            "committed": False})
    return r


def reporter_binding(r: dict) -> bool:
    return [(res["resource_name"], a["principal"]) for res in r["resources"] for a in res["acls"]
            if a["principal"] == "User:reporter"] == [(T, "User:reporter")]


@row(29, "any", Expect(CLUSTER_DENIED), ((on_cluster(DESCRIBE),), Expect(holds=reporter_binding)))
async def describe_acls(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 29, acl_filter())


@row(30, "topic binding", Expect(CLUSTER_DENIED), ((on_cluster(ALTER),), OK))
async def create_acls(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 30, {"creations": [binding(allow(TOPIC, c.n(T), READ), "User:made-by-mallory")]})


@row(31, "by principal", Expect(CLUSTER_DENIED), ((on_cluster(ALTER),), Expect(
    holds=lambda r: len(r["filter_results"][0]["matching_acls"]) == 1)))
async def delete_acls(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 31, {"filters": [acl_filter(principal_filter="User:doomed")]})


def config_value(name: str, value: str) -> Callable[[dict], bool]:
    return lambda r: {x["name"]: x["value"] for x in r["results"][0]["configs"]}.get(name) == value


def describe_configs_fields(resource_type: int, name: str) -> dict[str, Any]:
    return {"resources": [config_resource(name, resource_type=resource_type)], "include_synonyms": False,
            "include_documentation": False}


@row(32, "topic", Expect(TOPIC_DENIED), ((allow(TOPIC, T, DESCRIBE_CONFIGS),), Expect(
    holds=config_value("retention.ms", RETENTION))))
async def describe_topic_configs(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 32, describe_configs_fields(2, c.n(T)))


@row(32, "broker", Expect(CLUSTER_DENIED), ((on_cluster(DESCRIBE_CONFIGS),), OK),
     note="a tenant's BROKER resource is its topic config defaults")
async def describe_broker_configs(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 32, describe_configs_fields(4, ""))


@row(32, "broker logger", Expect(CLUSTER_DENIED), ((on_cluster(DESCRIBE_CONFIGS),), OK))
async def describe_logger_configs(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 32, describe_configs_fields(8, str(env.node)))


@row(32, "namespace", Expect(TOPIC_DENIED), ((allow(NAMESPACE, NS, DESCRIBE_CONFIGS),), OK),
     note="KIP-37: a TOPIC resource `ns:` is the namespace's configs")
async def describe_namespace_configs(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 32, describe_configs_fields(2, c.n(NS) + ":"))


def alter_fields(resource_type: int, name: str, validate_only: bool, op: int | None = None) -> dict[str, Any]:
    config = {"name": "retention.ms", "value": RETENTION} | ({} if op is None else {"config_operation": op})
    return {"resources": [config_resource(name, resource_type=resource_type, configs=[config])],
            "validate_only": validate_only}


@row(33, "topic", Expect(TOPIC_DENIED), ((allow(TOPIC, T, ALTER_CONFIGS),), OK))
async def alter_topic_configs(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 33, alter_fields(2, c.n(T), False))


@row(33, "broker", Expect(CLUSTER_DENIED), ((on_cluster(ALTER_CONFIGS),), OK))
async def alter_broker_configs(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 33, alter_fields(4, "", True))


@row(44, "topic", Expect(TOPIC_DENIED), ((allow(TOPIC, T, ALTER_CONFIGS),), OK))
async def incremental_alter_topic_configs(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 44, alter_fields(2, c.n(T), False, op=0))


@row(44, "broker logger", Expect(CLUSTER_DENIED), ((on_cluster(ALTER_CONFIGS),), Expect(ErrorCode.invalid_request)),
     note="past authorization: Shoal alters no loggers (INVALID_REQUEST)")
async def incremental_alter_logger_configs(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 44, alter_fields(8, str(env.node), False, op=0))


@row(37, "topic", Expect(TOPIC_DENIED), ((allow(TOPIC, GROWN, ALTER),), OK))
async def create_partitions(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 37, {"topics": [{"name": c.n(GROWN), "count": 2, "assignments": None}], "timeout": 5000,
                               "validate_only": False})


@row(42, "group", Expect(GROUP_DENIED), ((allow(GROUP, G_DOOMED, DELETE),), OK))
async def delete_groups(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 42, {"groups_names": [c.n(G_DOOMED)]})


def epoch_fields(topic: str, replica_id: int = -1) -> dict[str, Any]:
    return {"replica_id": replica_id, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}


@row(23, "topic", Expect(TOPIC_DENIED), ((allow(TOPIC, T, DESCRIBE),), Expect(
    holds=lambda r: r["topics"][0]["partitions"][0]["end_offset"] >= 3)))
async def offsets_for_leader_epoch(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 23, epoch_fields(c.n(T)))


@row(23, "as a replica", Expect(TOPIC_DENIED), note="a tenant has no replicas (CLUSTER_ACTION in the physical view)")
async def offsets_for_leader_epoch_as_replica(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 23, epoch_fields(c.n(T), replica_id=1))


@row(35, "all", Expect(CLUSTER_DENIED), ((on_cluster(DESCRIBE),), Expect(
    holds=lambda r: T in (names := [t["name"] for t in r["results"][0]["topics"]])
    and not any(n.startswith("lkc-") for n in names))))  # its own topics, by their names
async def describe_log_dirs(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 35, {"topics": None})


@row(43, "preferred", Expect(CLUSTER_DENIED), ((on_cluster(ALTER),), Expect(CLUSTER_DENIED)), note=OPERATORS)
async def elect_leaders(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 43, {"election_type": 0, "topic_partitions": [{"topic": c.n(T), "partitions": [0]}],
                               "timeout": 5000})


@row(45, "cancel", Expect(CLUSTER_DENIED), ((on_cluster(ALTER),), Expect(CLUSTER_DENIED)), note=OPERATORS)
async def alter_partition_reassignments(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 45, {"timeout": 5000, "topics": [{"name": c.n(T), "partitions": [
        {"partition_index": 0, "replicas": None}]}]})


@row(57, "validate", Expect(CLUSTER_DENIED), ((on_cluster(ALTER),), Expect(CLUSTER_DENIED)), note=OPERATORS)
async def update_features(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 57, {"timeout": 5000, "validate_only": True, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": 2, "upgrade_type": 1}]})


@row(46, "all", Expect(CLUSTER_DENIED), ((on_cluster(DESCRIBE),), Expect(holds=lambda r: r["topics"] == [])))
async def list_partition_reassignments(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 46, {"timeout": 5000, "topics": None})


@row(47, "group and topic", Expect(GROUP_DENIED),
     ((allow(GROUP, G_TRIM, DELETE),), Expect(TOPIC_DENIED)),
     ((allow(TOPIC, T, READ),), OK))
async def offset_delete(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 47, {"group_id": c.n(G_TRIM),
                               "topics": [{"name": c.n(T), "partitions": [{"partition_index": 0}]}]})


@row(48, "users", Expect(CLUSTER_DENIED), ((on_cluster(DESCRIBE_CONFIGS),), OK))
async def describe_client_quotas(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 48, {"components": [{"entity_type": "user", "match_type": 2, "match": None}],
                               "strict": False})


@row(49, "user", Expect(CLUSTER_DENIED), ((on_cluster(ALTER_CONFIGS),), OK))
async def alter_client_quotas(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 49, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "mallory"}], "ops": [
        {"key": "producer_byte_rate", "value": 1048576.0, "remove": False}]}], "validate_only": True})


@row(50, "all users", Expect(CLUSTER_DENIED), ((on_cluster(DESCRIBE),), Expect(
    holds=lambda r: "mallory" in {u["user"] for u in r["results"]})))
async def describe_scram(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 50, {"users": None})


@row(51, "upsert", Expect(CLUSTER_DENIED), ((on_cluster(ALTER),), OK))
async def alter_scram(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 51, {"deletions": [], "upsertions": [scram_upsert(c.n("m-user"), "m-user-secret")]})


@row(60, "no ACL needed", Expect(holds=lambda r: r["brokers"] and r["cluster_authorized_operations"] == 0),
     ((on_cluster(DESCRIBE),), Expect(holds=lambda r: r["cluster_authorized_operations"] == 1 << DESCRIBE)),
     note="Kafka checks no ACL; the authorized operations are 0 without DESCRIBE on the cluster")
async def describe_cluster(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 60, CLUSTER_FIELDS)


TXN_D = "tx-d"  # no row makes a producer of it
NO_PRODUCER = Expect(ErrorCode.invalid_producer_id_mapping)  # past authorization: no producer for the id


def add_partitions_fields(txn: str, topic: str) -> dict[str, Any]:
    return {"v3_and_below_transactional_id": txn, "v3_and_below_producer_id": 4242, "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": topic, "partitions": [0]}]}


def partition_errors(code: int) -> Expect:
    """AddPartitionsToTxn v0-v3 answers per partition (``partition_error_code``): ``code`` alone."""
    return Expect(holds=lambda r: [p["partition_error_code"] for t in r["results_by_topic_v3_and_below"]
                                   for p in t["results_by_partition"]] == [code])


@row(24, "client", partition_errors(TXN_DENIED),
     ((allow(TXN_ID, TXN_D, WRITE),), partition_errors(TOPIC_DENIED)),
     ((allow(TOPIC, T, WRITE),), partition_errors(ErrorCode.invalid_producer_id_mapping)),
     note="past authorization: the id has no producer")
async def add_partitions_to_txn(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 24, add_partitions_fields(c.n(TXN_D), c.n(T)), version=3)


@row(24, "broker, verify only", Expect(CLUSTER_DENIED),
     note="brokers only: CLUSTER_ACTION in the physical view, which a tenant never has")
async def add_partitions_to_txn_verify(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 24, {"transactions": [{"transactional_id": c.n(TXN_D), "producer_id": 4242,
                                                 "producer_epoch": 0, "verify_only": True,
                                                 "topics": [{"name": c.n(T), "partitions": [0]}]}]}, version=4)


@row(25, "group", Expect(TXN_DENIED),
     ((allow(TXN_ID, TXN_D, WRITE),), Expect(GROUP_DENIED)),
     ((allow(GROUP, G, READ),), NO_PRODUCER), note="past authorization: the id has no producer")
async def add_offsets_to_txn(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 25, {"transactional_id": c.n(TXN_D), "producer_id": 4242, "producer_epoch": 0,
                               "group_id": c.n(G)})


@row(26, "transactional id", Expect(TXN_DENIED), ((allow(TXN_ID, TXN_D, WRITE),), NO_PRODUCER),
     note="past authorization: the id has no producer")
async def end_txn(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 26, {"transactional_id": c.n(TXN_D), "producer_id": 4242, "producer_epoch": 0,
                               "committed": False})


@row(27, "markers", Expect(CLUSTER_DENIED), ((on_cluster(Operation.CLUSTER_ACTION),), Expect(CLUSTER_DENIED)),
     note="brokers only: CLUSTER_ACTION in the physical view, which a tenant never has")
async def write_txn_markers(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 27, {"markers": [{"producer_id": 4242, "producer_epoch": 0, "transaction_result": False,
                                            "coordinator_epoch": 0,
                                            "topics": [{"name": c.n(T), "partition_indexes": [0]}]}]})


@row(65, "transactional id", Expect(TXN_DENIED),
     ((allow(TXN_ID, TXN_D, DESCRIBE),), Expect(ErrorCode.transactional_id_not_found)),
     note="past authorization: the id has no producer")
async def describe_transactions(env: Env, c: Caller, cl: AdminClient) -> Any:
    return namespaces_as_dicts(await send(cl, 65, {"transactional_ids": [c.n(TXN_D)]}))



def listed_txns(r: dict) -> list[str]:
    return [t["transactional_id"] for t in r["transaction_states"]]


@row(66, "all", Expect(holds=lambda r: listed_txns(r) == []),
     ((allow(TXN_ID, TXN, DESCRIBE),), Expect(holds=lambda r: set(listed_txns(r)) <= {TXN})))
async def list_transactions(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 66, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1,
                               "transactional_id_pattern": None})


@row(61, "topic", Expect(TOPIC_DENIED), ((allow(TOPIC, T, READ),), OK))
async def describe_producers(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 61, {"topics": [{"name": c.n(T), "partition_indexes": [0]}]})


@row(68, "join", Expect(GROUP_DENIED),
     ((allow(GROUP, "g-m848", READ),), Expect(TOPIC_DENIED)),  # subscribed to a topic it may not describe
     ((allow(TOPIC, T, DESCRIBE),), Expect(holds=lambda r: r["member_epoch"] >= 1)))
async def consumer_group_heartbeat(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 68, cg_heartbeat(c.n("g-m848"), M848, 0, subscribed_topic_names=[c.n(T)],
                                           topic_partitions=[]))


@row(69, "group", Expect(GROUP_DENIED),
     ((allow(GROUP, G_848, DESCRIBE),), Expect(TOPIC_DENIED)),  # its members are assigned a topic it may not describe
     ((allow(TOPIC, T, DESCRIBE),), Expect(holds=lambda r: len(r["groups"][0]["members"]) == 1)))
async def consumer_group_describe(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 69, {"group_ids": [c.n(G_848)], "include_authorized_operations": True})


def dtp_fields(topics: list[str]) -> dict[str, Any]:
    return {"topics": [{"name": t} for t in topics], "response_partition_limit": 2000, "cursor": None}


@row(75, "by name", Expect(TOPIC_DENIED, lambda r: r["topics"][0]["topic_id"] is None), ((allow(TOPIC, T, DESCRIBE),),
     Expect(holds=lambda r: r["topics"][0]["topic_authorized_operations"] == 1 << DESCRIBE)))
async def describe_topic_partitions(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 75, dtp_fields([c.n(T)]))


@row(75, "all topics", Expect(holds=lambda r: r["topics"] == []),
     ((allow(TOPIC, T, DESCRIBE),), Expect(holds=lambda r: topic_names(r) == [T])))
async def describe_topic_partitions_all(env: Env, c: Caller, cl: AdminClient) -> Any:
    return await send(cl, 75, dtp_fields([]))


ROW = {r.id: r for r in ROWS}
assert len(ROW) == len(ROWS), "two rows with one id"


def registered_keys() -> set[int]:
    return {s.key for s in Registry(handler_modules()).specs()}


# -- bindings -------------------------------------------------------------------------------------


def binding(g: Grant, principal: str) -> dict[str, Any]:
    rt, name, op, permission, pattern = g
    return {"resource_type": rt, "resource_name": name, "resource_pattern_type": pattern, "principal": principal,
            "host": "*", "operation": op, "permission_type": permission}


async def grant(admin: AdminClient, principal: str, grants: tuple[Grant, ...]) -> None:
    if grants:
        ok(await send(admin, 30, {"creations": [binding(g, principal) for g in grants]}))


async def revoke(admin: AdminClient, principal: str) -> None:
    """Every binding of ``principal`` (NAMESPACE ones need a filter that names the type)."""
    ok(await send(admin, 31, {"filters": [acl_filter(principal_filter=principal),
                                          acl_filter(principal_filter=principal, resource_type_filter=NAMESPACE)]}))


async def climb(env: Env, admin: Principal, c: Caller, cell: Cell, steps, what: str) -> None:
    """Grant ``c`` each step's bindings (written by ``admin``) in turn, sending ``cell``'s
    request after each and checking the step's expectation; revoke them all at the end."""
    async with admin.client() as a, c.p.client() as cl:
        try:
            for i, (grants, expect) in enumerate(steps):
                await grant(a, c.principal, grants)
                expect.check(plain(await cell(env, c, cl)), f"{what}, step {i} (+{grants})")
        finally:
            await revoke(a, c.principal)


# -- the world ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def env():
    for cluster in tenant_cluster(OVERRIDES):
        yield build_env(cluster)


def build_env(cluster: TenantCluster) -> Env:
    broker, a = cluster.broker, cluster.a
    a.add_user("ada", admin=True)
    a.add_user("mallory")
    status, body = broker.http("POST", f"/v1/tenants/{a.tenant_id}/namespaces", {"name": NS})
    assert status == 201, body
    env = Env(
        cluster,
        ada=sasl_principal(broker, "ada", a.users["ada"]),
        mallory=Caller(sasl_principal(broker, "mallory", a.users["mallory"])),
        carol=Caller(sasl_principal(broker, *CAROL), a.prefix),
        operator=Principal("PLAINTEXT", "ANONYMOUS", {"bootstrap.servers": broker.bootstrap,
                                                      "security.protocol": "PLAINTEXT"}),
        ids={}, node=-1,
    )
    asyncio.run(populate(env))
    return env


async def populate(env: Env) -> None:
    """The tenant's resources, made by its administrator."""
    async with env.ada.client() as c:
        await c.create_topics([{"name": n, "num_partitions": 1}
                               for n in (T, DOOMED, DOOMED_BY_ID, TRIMMED, GROWN, NS_TOPIC)])
        ok(await send(c, 44, alter_fields(2, T, False, op=0)))
        for topic in (T, TRIMMED, NS_TOPIC):
            for i in range(3):
                ok(await send(c, 0, produce_fields(topic, b"ada-%d" % i)))
        for group, offset in ((G, 2), (G_DOOMED, 1), (G_TRIM, 1)):
            ok(await send(c, 8, commit_fields(group, -1, "", {T: offset}), version=9))
        await grant(c, "User:reporter", (allow(TOPIC, T, READ),))
        await grant(c, "User:doomed", (allow(TOPIC, T, READ),))
        md = ok(await send(c, 3, metadata_fields(None)))
        env.ids = {t.name: t.topic_id for t in md.topics}
        env.node = md.brokers[0].node_id
        for _ in range(200):  # __transaction_state, created at the first FindCoordinator for a transaction
            r = await send(c, 10, {"key": TXN, "key_type": 1, "coordinator_keys": [TXN]})
            if r.coordinators[0].error_code == ErrorCode.none:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("no transaction coordinator")
        member, epoch = str(uuid.uuid4()), 0
        for _ in range(50):  # a KIP-848 member of g-848 that is assigned T
            r = ok(await send(c, 68, cg_heartbeat(G_848, member, epoch, subscribed_topic_names=[T],
                                                  topic_partitions=[])))
            epoch = r.member_epoch
            if r.assignment is not None and r.assignment.topic_partitions:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("g-848's member was never assigned a partition")


# -- the tests ------------------------------------------------------------------------------------


def test_matrix_covers_every_api(env):
    """Every API the broker offers has a row; every one that checks ACLs has a row whose ladder
    ends in success."""
    async def offered() -> set[int]:
        async with env.mallory.p.client() as c:
            return set(c.api_versions)

    registered = registered_keys()
    assert registered == asyncio.run(offered())
    rowless = registered - {r.key for r in ROWS}
    assert rowless == set(), f"APIs without a row: {sorted(rowless)}"
    exempt = {r.key for r in ROWS if r.note.startswith(EXEMPT)}
    assert exempt == {17, 18, 36}
    climbed = {r.key for r in ROWS if r.ladder}
    assert registered - exempt - climbed == set(), f"APIs with no ladder: {sorted(registered - exempt - climbed)}"


@pytest.mark.parametrize("rid", list(ROW))
def test_denied(env, rid):
    """Mallory (tenant, no ACLs) is refused as Kafka refuses; carol (physical view, no tenant, no
    ACLs) asking for the same resources by their physical names is answered the same way."""
    r = ROW[rid]

    async def ask(c: Caller) -> dict:
        async with c.p.client() as cl:
            return plain(await r.cell(env, c, cl))

    mallory, carol = asyncio.run(ask(env.mallory)), asyncio.run(ask(env.carol))
    r.denied.check(mallory, f"{rid} as mallory")
    r.denied.check(carol, f"{rid} as carol")
    for resp in (mallory, carol):
        resp.pop("cluster_id", None)  # each view's own
    assert swap(carol, {env.carol.prefix: ""}) == mallory, f"{rid}: carol {carol}\n mallory {mallory}"


@pytest.mark.parametrize("rid", [r.id for r in ROWS if r.ladder])
def test_allowed(env, rid):
    r = ROW[rid]
    asyncio.run(climb(env, env.ada, env.mallory, r.cell, r.ladder, rid))


def all_grants(r: Row) -> tuple[Grant, ...]:
    return tuple(g for grants, _ in r.ladder for g in grants)


DENY_CASES = {  # row -> a DENY that matches what its ladder allows
    "0-topic": deny(TOPIC, T[:3], WRITE, PatternType.PREFIXED),
    "8-simple commit": deny(GROUP, G, READ),
    "22-idempotent": deny(CLUSTER, CLUSTER_NAME, Operation.ALL),
}


@pytest.mark.parametrize("rid", list(DENY_CASES))
def test_deny_wins(env, rid):
    r = ROW[rid]
    steps = [(all_grants(r), r.ladder[-1][1]), ((DENY_CASES[rid],), r.denied)]
    asyncio.run(climb(env, env.ada, env.mallory, r.cell, steps, f"{rid} with a DENY"))


def test_namespace_deny_blocks_topic_allow(env):
    """KIP-37: a DENY on namespace ``ns`` refuses ``ns:t`` despite the topic's own ALLOW; an ALLOW
    on the namespace alone grants its topics."""
    async def fetch(env: Env, c: Caller, cl: AdminClient) -> Any:
        return await send(cl, 1, fetch_fields(topic_id=env.ids[NS_TOPIC]))

    readable = Expect(holds=has_records)
    asyncio.run(climb(env, env.ada, env.mallory, fetch, [
        ((), Expect(TOPIC_DENIED)),
        ((allow(TOPIC, NS_TOPIC, READ),), readable),
        ((deny(NAMESPACE, NS, READ),), Expect(TOPIC_DENIED)),
    ], "ns:t with a namespace DENY"))
    asyncio.run(climb(env, env.ada, env.mallory, fetch, [((allow(NAMESPACE, NS, READ),), readable)],
                      "ns:t with a namespace ALLOW"))


def test_replica_fetch_needs_cluster_action(env):
    """A replica's fetch (replica id >= 0: exempt from quotas) needs CLUSTER_ACTION on the cluster,
    READ on the topic is not enough (Kafka's isFromFollower); a tenant has no replicas, so its
    principals are refused even with both."""
    async def fetch(env: Env, c: Caller, cl: AdminClient) -> Any:
        return await send(cl, 1, replica_fetch_fields(env.ids[T]))

    action = allow(CLUSTER, CLUSTER_NAME, Operation.CLUSTER_ACTION)
    carol = env.carol
    asyncio.run(climb(env, env.operator, carol, fetch, [
        ((allow(TOPIC, carol.n(T), READ),), Expect(TOPIC_DENIED)),
        ((action,), Expect(holds=has_records)),
    ], "carol's replica fetch"))
    asyncio.run(climb(env, env.ada, env.mallory, fetch, [
        ((allow(TOPIC, T, READ), action), Expect(TOPIC_DENIED)),
    ], "mallory's replica fetch"))


def test_a_sessions_incremental_fetch_that_claims_a_replica_is_a_consumers(env):
    """Who is a replica is decided from the principal, not from ``replica_id``: ada (the tenant's
    administrator, READ on her topics) opens a fetch session as a consumer, then sends its
    incremental fetches (which name no topic, so no per-topic check runs) with replica id 1.
    They are a consumer's: her consumer quota throttles them and they return nothing while
    throttled. (They were a follower's: no quota, metered as replication, the log end.)"""
    async def go() -> tuple[dict, list[dict]]:
        async with env.ada.client() as cl:
            first = plain(await send(cl, 1, fetch_fields(topic_id=env.ids[T], epoch=0)))
            assert has_records(first) and first["session_id"] > 0, first
            async with env.ada.client() as a:  # her own quota, 1 byte/s, set by herself
                ok(await send(a, 49, quota_fields("ada", 1.0)))
            try:
                await asyncio.sleep(0.5)  # the quota reaches the broker's quota manager
                fields = {**fetch_fields(session=first["session_id"], epoch=1),
                          "replica_id": 1, "replica_state": {"replica_id": 1, "replica_epoch": 0}}
                later = await send(cl, 1, fields, version=12)  # a throttled answer mutes cl
            finally:
                async with env.ada.client() as a:
                    ok(await send(a, 49, quota_fields("ada", None)))
        return first, later

    first, later = asyncio.run(go())
    assert later.error_code == 0, later
    assert later.throttle_time.total_seconds() > 0 and not has_records(plain(later)), later


def quota_fields(user: str, rate: float | None) -> dict[str, Any]:
    op = {"key": "consumer_byte_rate", "value": rate or 0.0, "remove": rate is None}
    return {"entries": [{"entity": [{"entity_type": "user", "entity_name": user}], "ops": [op]}],
            "validate_only": False}


PLACEMENT_ROWS = {  # what an operator's ALTER gets, where a tenant's gets CLUSTER_AUTHORIZATION_FAILED
    "43-preferred": Expect(ErrorCode.election_not_needed,
                           holds=lambda r: r["replica_election_results"][0]["topic"].endswith("_" + T)),
    "45-cancel": Expect(ErrorCode.no_reassignment_in_progress,
                        holds=lambda r: r["responses"][0]["name"].endswith("_" + T)),
    "57-validate": Expect(holds=lambda r: [f["feature"] for f in r["results"]] == ["transaction.version"]),
}


@pytest.mark.parametrize("rid", list(PLACEMENT_ROWS))
def test_placement_is_the_operators(env, rid):
    """ElectLeaders and AlterPartitionReassignments decide where a tenant's load lands on the
    shared brokers, UpdateFeatures (validate only here) what every tenant's clients get: a
    physical-view principal with ALTER on the cluster is served (carol, for the tenant's topics by
    their physical names), a tenant's are refused even with ALTER (mallory) and even as the
    tenant's administrator (ada), with a message that says why."""
    r = ROW[rid]
    carol = env.carol
    asyncio.run(climb(env, env.operator, carol, r.cell, [((on_cluster(ALTER),), PLACEMENT_ROWS[rid])],
                      f"{rid} as carol with ALTER"))

    async def as_ada() -> dict:
        async with env.ada.client() as cl:
            return plain(await r.cell(env, Caller(env.ada), cl))

    resp = asyncio.run(as_ada())
    Expect(CLUSTER_DENIED).check(resp, f"{rid} as the tenant's administrator")
    assert "operator actions" in repr(resp), resp


def test_zz_tenant_resources_unchanged(env):
    """What mallory was refused left the tenant's offsets, config and ACL as they were."""
    async def state() -> tuple:
        async with env.ada.client() as c:
            offsets = plain(await send(c, 9, offset_fetch_fields(G, [T]), version=9))
            configs = plain(await send(c, 32, describe_configs_fields(2, T)))
            acls = plain(await send(c, 29, acl_filter(principal_filter="User:reporter")))
            return committed(offsets), config_value("retention.ms", RETENTION)(configs), reporter_binding(acls)

    assert asyncio.run(state()) == ([(T, 2)], True, True)
