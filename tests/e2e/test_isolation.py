"""The tenant isolation matrix (issue 4 "Tests"), with real clients over SASL/SCRAM, PLAIN and TLS.

Tenant A owns topics ``users``, ``secret-a`` and ``payments:ledger`` (in its namespace
``payments``), groups ``g-a`` (a live classic member), ``g-a-idle`` (committed offsets only) and
``g-a2`` (KIP-848), an idempotent producer, a transactional producer ``tx-a`` (one committed
transaction in ``users``), a SCRAM user it made itself (``carl``), ACLs,
client quotas, topic configs, tenant defaults and namespace configs. Tenant B owns its own
``users`` and group ``g-b``. B's principals are tenant administrators, so authorization never
hides a leak: what B gets is what the scoping gives it.

For every API in the broker's ApiVersions (``MATRIX``; ``test_matrix_covers_every_api`` fails when
an API has no row) B tries A's resources by name (``secret-a``), by A's physical name
(``lkc-xxxxxx_secret-a``), by topic id (learned by the operator), by fetch session id, by member id,
by producer id and by pattern (regex subscriptions, listings, ACL and quota filters). Each attempt must answer
exactly as the same request for a resource that exists nowhere (:func:`like_missing`): the same
response field by field once the names are swapped, so no error code or message tells B that A's
resource exists; and no response B gets may contain A's tenant id, topic ids or records
(:func:`assert_no_leak`). ``test_zz_a_is_unchanged`` then checks that A's records, offsets,
configs, group, producer epoch, credentials, ACLs and quotas are what they were.

Set-up: tenant users and everything the wire protocol can do are made by the tenants' own clients;
tenant administrators, ACLs, quotas, namespaces, tenant defaults and the certificate user are
written to the metadata store (``TenantCluster.edit_metadata``); groups are made by the operator
on their physical names (PLAINTEXT listener, super user).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import json
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient as ConfluentAdmin

from e2e_helpers import OP_TIMEOUT, consume
from shoal.broker import handler_modules
from shoal.client import EARLIEST, LATEST, RESOURCE_TOPIC, AdminClient, ClientSecurity, KafkaError, build_entity
from shoal.handlers.registry import Registry
from shoal.metadata.embedded import read_document
from shoal.protocol import codec
from shoal.protocol.records import build_batch
from shoal.tenancy.acl import Operation, PatternType, Permission, ResourceType
from tenancy_fixtures import TenantCluster, TlsTenantBroker, tenant_cluster

OVERRIDES = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}

SECRET, USERS, LEDGER = "secret-a", "users", "payments:ledger"
G_A, G_IDLE, G_848, G_B = "g-a", "g-a-idle", "g-a2", "g-b"
TXN, CARL, CARL_PW = "tx-a", "carl", "carl-secret"
NO_TENANT = "lkc-zzzzzz"  # looks like a tenant id; no such tenant
A_MARK, B_MARK = b"A-SECRET-", b"B-DATA-"
ZERO_ID = uuid.UUID(int=0)
KINDS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN", "mTLS")


# -- principals -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Principal:
    """One way of logging in (``kind``) as ``user``, with settings for every client used here."""

    kind: str
    user: str
    props: dict[str, str]  # Kafka client properties (librdkafka's names), bootstrap included

    def security(self) -> ClientSecurity:
        return ClientSecurity.from_properties({k: v for k, v in self.props.items() if k != "bootstrap.servers"})

    def client(self) -> AdminClient:
        return AdminClient(self.props["bootstrap.servers"], client_id="isolation", timeout=15,
                           security=self.security())

    def confluent(self, **extra: Any) -> dict[str, Any]:
        return {**self.props, "socket.timeout.ms": 10000, **extra}

    def kafka_python(self) -> dict[str, Any]:
        p = self.props
        kw: dict[str, Any] = dict(bootstrap_servers=p["bootstrap.servers"], security_protocol=p["security.protocol"])
        if "sasl.mechanism" in p:
            kw.update(sasl_mechanism=p["sasl.mechanism"], sasl_plain_username=p["sasl.username"],
                      sasl_plain_password=p["sasl.password"])
        if "ssl.ca.location" in p:
            kw.update(ssl_cafile=p["ssl.ca.location"], ssl_certfile=p.get("ssl.certificate.location"),
                      ssl_keyfile=p.get("ssl.key.location"))
        return kw

    def aiokafka(self) -> dict[str, Any]:
        from aiokafka.helpers import create_ssl_context

        kw = self.kafka_python()
        if "ssl_cafile" in kw:
            kw["ssl_context"] = create_ssl_context(cafile=kw.pop("ssl_cafile"), certfile=kw.pop("ssl_certfile"),
                                                   keyfile=kw.pop("ssl_keyfile"))
        return kw

    def kcat(self) -> list[str]:
        args = ["-b", self.props["bootstrap.servers"]]
        for k, v in self.props.items():
            if k != "bootstrap.servers":
                args += ["-X", f"{k}={v}"]
        return args


def principal(broker: TlsTenantBroker, kind: str, user: str, password: str | None) -> Principal:
    host = broker.host
    ca = {"ssl.ca.location": str(broker.pki.ca)}
    if kind == "mTLS":
        cert, key = broker.client_cert(user)
        props = {"bootstrap.servers": f"{host}:{broker.mtls_port}", "security.protocol": "SSL", **ca,
                 "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    else:
        assert password is not None
        props = {"sasl.mechanism": kind, "sasl.username": user, "sasl.password": password}
        if kind == "SCRAM-SHA-512":  # over TLS
            props.update({"bootstrap.servers": f"{host}:{broker.sasl_ssl_port}", "security.protocol": "SASL_SSL", **ca})
        else:
            props.update({"bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT"})
    return Principal(kind, user, props)


# -- the world: what A and B own, as set up once for the module -----------------------------------


@dataclass
class World:
    cluster: TenantCluster
    alice: Principal  # tenant A, SCRAM-SHA-512 over SASL_PLAINTEXT
    bob: dict[str, Principal]  # tenant B, one principal per kind
    operator: Principal
    ids: dict[str, uuid.UUID] = field(default_factory=dict)  # physical topic name -> topic id
    a_member: tuple[str, int] = ("", -1)  # g-a: member id, generation
    a848: tuple[str, int] = ("", -1)  # g-a2: member id, member epoch
    a_producer: tuple[int, int] = (-1, -1)  # A's idempotent producer of secret-a: id, epoch
    a_txn: tuple[int, int] = (-1, -1)  # A's transactional producer tx-a: id, epoch
    before: dict[str, Any] = field(default_factory=dict)

    @property
    def a_tid(self) -> str:
        return self.cluster.a.tenant_id

    @property
    def b_tid(self) -> str:
        return self.cluster.b.tenant_id

    def pa(self, name: str) -> str:
        """A's physical name of ``name``."""
        return self.cluster.a.prefix + name

    def pb(self, name: str) -> str:
        return self.cluster.b.prefix + name

    @property
    def b(self) -> Principal:
        return self.bob["SCRAM-SHA-512"]


async def call(p: Principal, key: int, fields: dict[str, Any], version: int | None = None) -> Any:
    """One request on a fresh connection of ``p`` (at the negotiated version unless given)."""
    async with p.client() as c:
        return await send(c, key, fields, version)


async def send(c: AdminClient, key: int, fields: dict[str, Any], version: int | None = None) -> Any:
    v = c.version_for(key) if version is None else version
    return await c.request(key, build_entity(codec.request_type(key, v), fields))


def produce_values(p: Principal, topic: str, values: list[bytes], partition: int = 0) -> None:
    errors: list = []
    prod = Producer(p.confluent(**{"enable.idempotence": True, "linger.ms": 1}))
    for v in values:
        prod.produce(topic, v, partition=partition, on_delivery=lambda err, msg: err and errors.append(err))
    assert prod.flush(OP_TIMEOUT) == 0 and not errors, errors


def metadata_fields(topics: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {"topics": topics, "allow_auto_topic_creation": False, "include_cluster_authorized_operations": True,
            "include_topic_authorized_operations": True}


CLUSTER_FIELDS = {"include_cluster_authorized_operations": True, "endpoint_type": 1, "include_fenced_brokers": False}


def ok(resp: Any) -> Any:
    """Assert every ``error_code`` in ``resp`` is 0; returns ``resp``."""
    bad = [(where, code) for where, code in _error_codes(resp, "") if code]
    assert not bad, f"errors {bad} in {resp}"
    return resp


def _error_codes(x: Any, where: str):
    if dataclasses.is_dataclass(x):
        for f in dataclasses.fields(x):
            v = getattr(x, f.name)
            if f.name == "error_code":
                yield where, int(v)
            else:
                yield from _error_codes(v, f"{where}.{f.name}")
    elif isinstance(x, tuple):
        for i, v in enumerate(x):
            yield from _error_codes(v, f"{where}[{i}]")


def build_world(cluster: TenantCluster) -> World:
    from shoal.auth.scram import make_credential
    from shoal.metadata import AclEntry

    broker = cluster.broker
    a, b = cluster.a, cluster.b
    a.add_user("alice-ro")
    admins = ("alice", "bob", "bob-tls")

    async def provision(store) -> None:
        await store.assign_user("bob-tls", b.tenant_id)  # certificate only, no password
        for user in admins:
            await store.set_tenant_admin(user, True)
        await store.assign_user("bob", b.tenant_id, make_credential("SCRAM-SHA-256", b.users["bob"]))

        def acl(tid: str, rt: int, name: str, pt: int, who: str, op: int) -> AclEntry:
            return AclEntry(tid, rt, name, pt, who, "*", op, Permission.ALLOW)

        await store.alter_acls([
            acl(a.tenant_id, ResourceType.TOPIC, SECRET, PatternType.LITERAL, "User:alice-ro", Operation.READ),
            acl(a.tenant_id, ResourceType.TOPIC, "secret", PatternType.PREFIXED, "User:alice-ro", Operation.DESCRIBE),
            acl(a.tenant_id, ResourceType.GROUP, G_A, PatternType.LITERAL, "User:alice-ro", Operation.READ),
            acl(a.tenant_id, ResourceType.TRANSACTIONAL_ID, TXN, PatternType.LITERAL, "User:alice-ro", Operation.WRITE),
            acl(b.tenant_id, ResourceType.TOPIC, USERS, PatternType.LITERAL, "User:bob-ro", Operation.READ),
        ], [])
        await store.alter_client_quotas([
            ((("user", "alice"),), {"producer_byte_rate": 1048576.0}),
            ((("tenant", a.tenant_id),), {"consumer_byte_rate": 2097152.0}),
        ])
        await store.update_tenant(a.tenant_id, configs={"retention.ms": "777777"})
        await store.create_namespaces([a.prefix + "payments"])
        await store.set_namespace_configs(a.prefix + "payments", {"retention.bytes": "888888"})

    cluster.edit_metadata(provision)
    w = World(
        cluster,
        alice=Principal("SCRAM-SHA-512", "alice", a.conf("alice")),
        bob={k: principal(broker, k, "bob-tls" if k == "mTLS" else "bob", b.users["bob"]) for k in KINDS},
        operator=Principal("PLAINTEXT", "ANONYMOUS", {"bootstrap.servers": broker.bootstrap,
                                                      "security.protocol": "PLAINTEXT"}),
    )
    asyncio.run(populate(w))
    return w


async def populate(w: World) -> None:
    """A's and B's resources, made by their own clients (groups: by the operator)."""

    # A, through its own clients.
    async with w.alice.client() as c:
        await c.create_topics([{"name": USERS, "num_partitions": 2}, {"name": SECRET, "num_partitions": 1},
                               {"name": LEDGER, "num_partitions": 1}])
        ok(await send(c, 44, {"resources": [{"resource_type": 2, "resource_name": SECRET, "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "86400000"}]}], "validate_only": False}))
        ok(await send(c, 51, {"deletions": [], "upsertions": [scram_upsert(CARL, CARL_PW)]}))
    for part in (0, 1):
        produce_values(w.alice, USERS, [A_MARK + f"users-{part}-{i}".encode() for i in range(3)], part)
    produce_values(w.alice, SECRET, [A_MARK + f"{i}".encode() for i in range(4)])
    async with w.alice.client() as c:
        r = ok(await send(c, 61, {"topics": [{"name": SECRET, "partition_indexes": [0]}]}))
        (producer,) = r.topics[0].partitions[0].active_producers
        w.a_producer = (int(producer.producer_id), int(producer.producer_epoch))
    txn = Producer(w.alice.confluent(**{"transactional.id": TXN, "linger.ms": 1}))  # A's transaction
    txn.init_transactions(OP_TIMEOUT)
    txn.begin_transaction()
    txn.produce(USERS, A_MARK + b"txn", partition=0)
    txn.commit_transaction(OP_TIMEOUT)
    async with w.alice.client() as c:
        (state,) = ok(await send(c, 65, {"transactional_ids": [TXN]})).transaction_states
        w.a_txn = (int(state.producer_id), int(state.producer_epoch))
    # B, through its own.
    async with w.b.client() as c:
        await c.create_topics([{"name": USERS, "num_partitions": 1}])
    produce_values(w.b, USERS, [B_MARK + f"{i}".encode() for i in range(3)])

    # The operator: topic ids, and the groups (on their physical names).
    async with w.operator.client() as c:
        md = ok(await send(c, 3, metadata_fields(None)))
        w.ids = {t.name: t.topic_id for t in md.topics}
        for group, offsets in ((w.pa(G_A), {w.pa(USERS): 3, w.pa(SECRET): 2}), (w.pa(G_IDLE), {w.pa(USERS): 1}),
                               (w.pb(G_B), {w.pb(USERS): 2})):
            ok(await send(c, 8, commit_fields(group, -1, "", offsets), version=9))
        w.a_member = await join_classic(c, w.pa(G_A))
        r = ok(await send(c, 68, cg_heartbeat(w.pa(G_848), str(uuid.uuid4()), 0, topic_partitions=[],
                                              subscribed_topic_names=[w.pa(USERS)])))
        w.a848 = (r.member_id, int(r.member_epoch))
    w.before = await a_state(w)


def scram_upsert(name: str, password: str) -> dict[str, Any]:
    """An AlterUserScramCredentials upsertion (SCRAM-SHA-512)."""
    from shoal.auth.scram import salted_password

    salt = os.urandom(16)
    return {"name": name, "mechanism": 2, "iterations": 4096, "salt": salt,
            "salted_password": salted_password("SCRAM-SHA-512", password, salt, 4096)}


def topic_ref(t: str | uuid.UUID) -> dict[str, Any]:
    """A topic by name (versions that take names) or by id (versions that take ids)."""
    return {"name": t, "topic_id": ZERO_ID} if isinstance(t, str) else {"name": "", "topic_id": t}


def commit_fields(group: str, generation: int, member: str, offsets: dict[Any, int]) -> dict[str, Any]:
    return {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{**topic_ref(t), "partitions": [{"partition_index": 0, "committed_offset": o,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}
                       for t, o in offsets.items()]}


async def join_classic(c: AdminClient, group: str) -> tuple[str, int]:
    """A one-member classic group: JoinGroup (twice: KIP-394) and SyncGroup; (member id, generation)."""
    fields = {"group_id": group, "session_timeout": 300_000, "rebalance_timeout": 300_000, "member_id": "",
              "group_instance_id": None, "protocol_type": "consumer",
              "protocols": [{"name": "range", "metadata": b""}], "reason": None}
    r = await send(c, 11, fields)
    if r.error_code == 79:  # MEMBER_ID_REQUIRED
        r = await send(c, 11, {**fields, "member_id": r.member_id})
    ok(r)
    ok(await send(c, 14, {"group_id": group, "generation_id": r.generation_id, "member_id": r.member_id,
                          "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                          "assignments": [{"member_id": r.member_id, "assignment": b""}]}))
    return r.member_id, int(r.generation_id)


async def a_state(w: World) -> dict[str, Any]:
    """Everything of A's that B must not be able to change, read by the operator and from the
    metadata store's file."""
    a_topics = [w.pa(t) for t in (USERS, SECRET, LEDGER)]
    out: dict[str, Any] = {}
    async with w.operator.client() as c:
        md = ok(await send(c, 3, metadata_fields([{"name": t, "topic_id": ZERO_ID} for t in a_topics])))
        out["topics"] = {t.name: (str(t.topic_id), len(t.partitions)) for t in md.topics}
        configs = await c.describe_configs([(RESOURCE_TOPIC, t) for t in a_topics])
        out["configs"] = {name: {k: v.value for k, v in cfg.items() if not v.is_default}
                          for (_, name), cfg in configs.items()}
        parts = [(t, p) for t, (_, n) in out["topics"].items() for p in range(n)]
        first = await c.list_offsets({tp: EARLIEST for tp in parts})
        last = await c.list_offsets({tp: LATEST for tp in parts})
        out["offsets"] = {f"{t}-{p}": (first[(t, p)][0], last[(t, p)][0]) for t, p in parts}
        r = ok(await send(c, 9, {"groups": [{"group_id": g, "topics": None}
                                            for g in (w.pa(G_A), w.pa(G_IDLE))], "require_stable": False},
                           version=9))
        out["committed"] = {g.group_id: sorted((t.name, p.partition_index, p.committed_offset)
                                               for t in g.topics for p in t.partitions) for g in r.groups}
        r = ok(await send(c, 15, {"groups": [w.pa(G_A)], "include_authorized_operations": False}))
        out["group"] = [(g.group_state, g.protocol_type, sorted(m.member_id for m in g.members)) for g in r.groups]
        r = ok(await send(c, 65, {"transactional_ids": [w.pa(TXN)]}))
        out["transaction"] = [(t.transaction_state, t.producer_id, t.producer_epoch) for t in r.transaction_states]
    out["records"] = {  # every record up to the end offsets (past A's transaction marker)
        t: sorted(bytes(m.value()) for m in consume(w.operator.props["bootstrap.servers"], t, n,
                                                    {p: out["offsets"][f"{t}-{p}"][1] for p in range(n)}))
        for t, (_, n) in out["topics"].items()
    }
    doc = read_document(w.cluster.broker.data_dir)  # the snapshot with its journal replayed

    def mine(name: str | None) -> bool:
        return name is not None and (name.startswith(w.cluster.a.prefix) or name in w.cluster.a.users)

    out["store"] = {
        "acls": sorted(json.dumps(a) for a in doc["acls"] if a[0] == w.a_tid),
        "quotas": [q for q in doc["client_quotas"] if any(n == w.a_tid or mine(n) for _, n in q["entity"])],
        "credentials": {u: c for u, c in doc["scram_credentials"].items() if mine(u)},
        "tenant": [t for t in doc["tenants"] if t["tenant_id"] == w.a_tid],
        "namespaces": {n: v for n, v in doc["namespaces"].items() if mine(n)},
        "users": {u: t for u, t in doc["user_tenants"].items() if t == w.a_tid},
        "admins": [u for u in doc["tenant_admins"] if mine(u)],
        "topics": [t for t in doc["topics"] if mine(t["name"])],
    }
    return out


# -- comparing an attack with a request for nothing -----------------------------------------------

VOLATILE = frozenset({"throttle_time", "throttle_time_ms"})


def plain(x: Any, ignore: frozenset[str] = frozenset()) -> Any:
    """A response entity as plain data (dicts, lists, str, int, bytes), ``ignore``d fields left out."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: plain(getattr(x, f.name), ignore) for f in dataclasses.fields(x)
                if f.name not in VOLATILE and f.name not in ignore}
    if isinstance(x, (tuple, list)):
        return [plain(v, ignore) for v in x]
    if isinstance(x, enum.Enum):
        return x.value
    if isinstance(x, uuid.UUID):
        return str(x)
    if isinstance(x, datetime.timedelta):
        return int(x.total_seconds() * 1000)
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    return x


def swap(x: Any, names: dict[str, str]) -> Any:
    """``x`` with every occurrence of each key of ``names`` in its strings replaced by its value."""
    if isinstance(x, dict):
        return {k: swap(v, names) for k, v in x.items()}
    if isinstance(x, list):
        return [swap(v, names) for v in x]
    if isinstance(x, str):
        for old in sorted(names, key=len, reverse=True):
            x = x.replace(old, names[old])
        return x
    return x


def strings(x: Any, key: str = ""):
    """(field name, value) of every str and bytes in ``x`` (plain)."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from strings(v, k)
    elif isinstance(x, list):
        for v in x:
            yield from strings(v, key)
    elif isinstance(x, (str, bytes)):
        yield key, x


def assert_no_leak(w: World, data: Any, what: str, echoes: tuple[str, ...] = ()) -> None:
    """Nothing in ``data`` (plain) names A's tenant or topic ids or holds A's records; no message
    mentions a tenant prefix, other than in ``echoes`` (names the request gave)."""
    a_ids = [str(w.ids[n]) for n in w.ids if n.startswith(w.cluster.a.prefix)]
    for key, s in strings(data):
        if isinstance(s, bytes):
            assert A_MARK not in s, f"{what}: A's records in {key}: {s[:80]!r}"
            continue
        for echo in echoes:
            s = s.replace(echo, "")
        assert w.a_tid not in s, f"{what}: A's tenant id in {key}: {s!r}"
        leaked = [i for i in a_ids if i in s]
        assert not leaked, f"{what}: A's topic id in {key}: {s!r}"
        if "message" in key:
            assert "lkc-" not in s, f"{what}: a tenant prefix in {key}: {s!r}"


async def like_missing(
    w: World,
    p: Principal,
    key: int,
    make: Callable[..., dict[str, Any]],
    attack: dict[str, Any],
    missing: dict[str, Any],
    *,
    version: int | None = None,
    ignore: frozenset[str] = frozenset(),
    aliases: dict[str, str] | None = None,
) -> Any:
    """Send ``make(**attack)`` and ``make(**missing)`` as ``p``; the two responses must be equal
    once the attack's names (and ``aliases``: parts of them) are swapped for the missing ones,
    and must leak nothing."""
    async with p.client() as c:
        got = plain(await send(c, key, make(**attack), version), ignore)
        want = plain(await send(c, key, make(**missing), version), ignore)
    names = {str(v): str(missing[k]) for k, v in attack.items() if str(v) != str(missing[k])} | (aliases or {})
    swapped = swap(got, names)
    assert swapped == want, (
        f"api {key}: B's request for A's {attack} is answered unlike one for {missing}:\n"
        f"  attack:  {swapped}\n  missing: {want}"
    )
    assert_no_leak(w, swapped, f"api {key} {attack}", tuple(str(v) for v in missing.values()))
    return got


def ways(w: World, name: str, missing: str) -> dict[str, tuple[str, str]]:
    """How B names A's ``name``: as B would (its own scope) and by A's physical name; each with
    the equally shaped name of something that does not exist."""
    return {"name": (name, missing), "physical": (w.pa(name), f"{NO_TENANT}_{missing}")}


# -- the matrix -----------------------------------------------------------------------------------

Cell = Callable[[World, str], Awaitable[None]]
MATRIX: dict[int, dict[str, Cell]] = {}
NO_RESOURCE = "no tenant resource"


def row(key: int, *names: str) -> Callable[[Cell], Cell]:
    """Register a cell of api ``key``, run once per ``name`` (its second argument)."""
    def register(fn: Cell) -> Cell:
        for n in names:
            MATRIX.setdefault(key, {})[f"{fn.__name__}[{n}]"] = lambda w, _n=n, _fn=fn: _fn(w, _n)
        return fn
    return register


def topic_fields(name: str, partitions: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "partitions": [{"partition_index": 0, **partitions}]}


@row(0, "name", "physical")
async def produce(w: World, how: str) -> None:
    batch = build_batch([(int(time.time() * 1000), None, b"from-b", ())])
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 0, lambda t: {
        "transactional_id": None, "acks": -1, "timeout": 5000,
        "topic_data": [{"name": t, "partition_data": [{"index": 0, "records": batch}]}]}, {"t": attack}, {"t": missing})


def fetch_fields(topic: str | None = None, topic_id: uuid.UUID | None = None, *, session: int = 0,
                 epoch: int = -1) -> dict[str, Any]:
    part = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}
    topics = [] if topic is None and topic_id is None else [
        {"topic": topic or "", "topic_id": topic_id or ZERO_ID, "partitions": [part]}]
    return {"cluster_id": None, "replica_id": -1, "replica_state": {"replica_id": -1, "replica_epoch": -1},
            "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session,
            "session_epoch": epoch, "topics": topics, "forgotten_topics_data": [], "rack_id": ""}


@row(1, "name", "physical")
async def fetch_by_name(w: World, how: str) -> None:
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 1, lambda t: fetch_fields(t), {"t": attack}, {"t": missing}, version=12)


@row(1, "topic id")
async def fetch_by_id(w: World, _: str) -> None:
    await like_missing(w, w.b, 1, lambda i: fetch_fields(topic_id=i), {"i": w.ids[w.pa(SECRET)]},
                       {"i": uuid.uuid4()})


@row(1, "session id")
async def fetch_session(w: World, _: str) -> None:
    """A's incremental fetch session (open on A's connection meanwhile), by its id."""
    async with w.alice.client() as c:
        r = ok(await send(c, 1, fetch_fields(topic_id=w.ids[w.pa(SECRET)], session=0, epoch=0)))
        assert r.session_id != 0, "no fetch session was created"
        unknown = (r.session_id + 1) & 0x7FFFFFFF or 1
        await like_missing(w, w.b, 1, lambda s: fetch_fields(session=s, epoch=1), {"s": r.session_id},
                           {"s": unknown}, ignore=frozenset({"session_id"}))


@row(2, "name", "physical")
async def list_offsets(w: World, how: str) -> None:
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 2, lambda t: {"replica_id": -1, "isolation_level": 0, "timeout": 5000, "topics": [
        topic_fields(t, {"current_leader_epoch": -1, "timestamp": -1})]}, {"t": attack}, {"t": missing})


@row(3, "name", "physical")
async def metadata_by_name(w: World, how: str) -> None:
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 3, lambda t: metadata_fields([{"name": t, "topic_id": ZERO_ID}]),
                       {"t": attack}, {"t": missing})


@row(3, "topic id")
async def metadata_by_id(w: World, _: str) -> None:
    await like_missing(w, w.b, 3, lambda i: metadata_fields([{"name": None, "topic_id": i}]),
                       {"i": w.ids[w.pa(SECRET)]}, {"i": uuid.uuid4()}, version=12)


@row(3, "all topics")
async def metadata_all(w: World, _: str) -> None:
    await metadata_all_as(w, w.b)


async def metadata_all_as(w: World, p: Principal) -> None:
    r = plain(await call(p, 3, metadata_fields(None)))
    assert_no_leak(w, r, "Metadata (all topics)")
    names = sorted(t["name"] for t in r["topics"])
    assert names == [USERS], names
    assert r["topics"][0]["topic_id"] == str(w.ids[w.pb(USERS)])
    assert r["cluster_id"] == w.b_tid


def group_and_topic(w: World, how: str) -> tuple[dict[str, Any], dict[str, Any], int]:
    """A's ``g-a`` and its topic ``users`` as ``ways`` names them (by name, ``users`` is B's own
    topic); or A's ``users`` by topic id in B's own group ``g-b``. And the version of
    OffsetCommit/OffsetFetch that takes such topics."""
    if how == "topic id":
        return {"g": G_B, "t": w.ids[w.pa(USERS)]}, {"g": G_B, "t": uuid.uuid4()}, 10
    (g, gm), (t, tm) = ways(w, G_A, "nosuch-g")[how], ways(w, USERS, "nosuch-t")[how]
    if how == "name":  # B has a topic of that name: its own
        tm = t
    return {"g": g, "t": t}, {"g": gm, "t": tm}, 9


@row(8, "name", "physical", "topic id")
async def offset_commit(w: World, how: str) -> None:
    """With A's member id and generation, into A's group and topic; by topic id, a simple commit
    (no member) into B's own group."""
    member, gen = w.a_member if how != "topic id" else ("", -1)
    attack, missing, version = group_and_topic(w, how)
    await like_missing(w, w.b, 8, lambda g, t: commit_fields(g, gen, member, {t: 999}), attack, missing,
                       version=version)


@row(9, "name", "physical", "topic id")
async def offset_fetch(w: World, how: str) -> None:
    """A's group's offsets: all of them (topics null) and for named topics; by topic id: A's
    topic's in B's own group."""
    attack, missing, version = group_and_topic(w, how)
    for every in (True, False):
        await like_missing(w, w.b, 9, lambda g, t: {"group_id": g, "require_stable": False, "groups": [
            {"group_id": g, "member_id": None, "member_epoch": -1,
             "topics": None if every else [{**topic_ref(t), "partition_indexes": [0, 1]}]}]},
            attack, missing, version=version)


@row(10, "name", "physical")
async def find_coordinator(w: World, how: str) -> None:
    for key_type, name in ((0, G_A), (1, TXN)):
        attack, missing = ways(w, name, "nosuch-k")[how]
        await like_missing(w, w.b, 10, lambda k: {"key": k, "key_type": key_type, "coordinator_keys": [k]},
                           {"k": attack}, {"k": missing})


def classic(group: str, member: str, generation: int) -> dict[str, Any]:
    """The fields of every classic group request, with A's member and generation by default."""
    return {"group_id": group, "member_id": member, "generation_id": generation, "group_instance_id": None,
            "session_timeout": 30000, "rebalance_timeout": 30000, "protocol_type": "consumer",
            "protocol_name": "range", "protocols": [{"name": "range", "metadata": b""}], "assignments": [],
            "reason": None, "members": [{"member_id": member, "group_instance_id": None, "reason": None}]}


def as_a_member(key: int, name: str) -> Cell:
    """JoinGroup, Heartbeat, LeaveGroup, SyncGroup in A's group with A's member id and generation
    (a shared group would take them: rebalance, answer, remove, hand out A's assignment)."""
    async def cell(w: World, how: str) -> None:
        attack, missing = ways(w, G_A, "nosuch-g")[how]
        await like_missing(w, w.b, key, lambda g: classic(g, *w.a_member), {"g": attack}, {"g": missing})

    cell.__name__ = name
    return row(key, "name", "physical")(cell)


for _key, _name in ((11, "join_group"), (12, "heartbeat"), (13, "leave_group"), (14, "sync_group")):
    as_a_member(_key, _name)


@row(15, "name", "physical")
async def describe_groups(w: World, how: str) -> None:
    for group in (G_A, G_IDLE, G_848):
        attack, missing = ways(w, group, "nosuch-g")[how]
        await like_missing(w, w.b, 15, lambda g: {"groups": [g], "include_authorized_operations": True},
                           {"g": attack}, {"g": missing})


@row(16, "all groups")
async def list_groups(w: World, _: str) -> None:
    for states in ([], ["Stable"], ["Empty"]):
        r = plain(await call(w.b, 16, {"states_filter": states, "types_filter": []}))
        assert_no_leak(w, r, "ListGroups")
        names = {g["group_id"] for g in r["groups"]}
        assert not names & {G_A, G_IDLE, G_848} and not any(n.startswith("lkc-") for n in names), names
    assert G_B in {g["group_id"] for g in r["groups"]}, "B's own empty group is missing"


@row(17, NO_RESOURCE)
async def sasl_handshake(w: World, _: str) -> None:
    """After authentication: the same answer for A and B."""
    got = [plain(await call(p, 17, {"mechanism": "PLAIN"})) for p in (w.alice, w.b)]
    assert got[0] == got[1], got


@row(18, NO_RESOURCE)
async def api_versions(w: World, _: str) -> None:
    fields = {"client_software_name": "isolation", "client_software_version": "1"}
    got = [plain(await call(p, 18, fields)) for p in (w.alice, w.b)]
    assert got[0] == got[1], got


@row(57, NO_RESOURCE)
async def update_features(w: World, _: str) -> None:
    """Feature levels are the cluster's, so what A's clients are offered: B cannot change them
    (CLUSTER_AUTHORIZATION_FAILED, nothing changed for A)."""
    fields = {"client_software_name": "isolation", "client_software_version": "1"}
    before = plain(await call(w.alice, 18, fields))
    r = plain(await call(w.b, 57, {"timeout": 5000, "validate_only": False, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": 1, "upgrade_type": 2}]}))
    assert r["error_code"] == 31 and [f["error_code"] for f in r["results"]] == [31], r  # CLUSTER_AUTHORIZATION_FAILED
    after = plain(await call(w.alice, 18, fields))
    assert after["finalized_features"] == before["finalized_features"] and after["finalized_features"], after


@row(36, "A's users")
async def sasl_authenticate(w: World, _: str) -> None:
    """Logging in as A's users with a wrong password fails exactly as for users that do not exist."""
    plaintext = Principal("PLAINTEXT", "", {"bootstrap.servers": w.cluster.broker.sasl_bootstrap,
                                            "security.protocol": "PLAINTEXT"})

    async def attempt(user: str) -> Any:
        async with plaintext.client() as c:
            ok(await send(c, 17, {"mechanism": "PLAIN"}))
            return plain(await send(c, 36, {"auth_bytes": f"\x00{user}\x00wrong-password".encode()}))

    for user, nobody in (("alice", "nobody"), (w.pa(CARL), f"{NO_TENANT}_{CARL}"), (CARL, "nosuch-u")):
        got, want = await attempt(user), await attempt(nobody)
        assert got["error_code"] != 0
        assert swap(got, {user: nobody}) == want, (user, got, want)


@row(19, "name", "physical", "namespace")
async def create_topics(w: World, how: str) -> None:
    """validate_only: B would make its own topic; A's existing one must not show."""
    attack, missing = ways(w, SECRET, "nosuch-t")[how] if how != "namespace" else (LEDGER, "nosuchns:ledger")
    await like_missing(w, w.b, 19, lambda t: {"topics": [{"name": t, "num_partitions": 1, "replication_factor": 1,
                                                          "assignments": [], "configs": []}],
                                              "timeout": 5000, "validate_only": True}, {"t": attack}, {"t": missing},
                       ignore=frozenset({"topic_id"}), aliases={"payments": "nosuchns"})


@row(20, "name", "physical")
async def delete_topics(w: World, how: str) -> None:
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 20, lambda t: {"topic_names": [t], "topics": [{"name": t, "topic_id": ZERO_ID}],
                                              "timeout": 5000}, {"t": attack}, {"t": missing})


@row(20, "topic id")
async def delete_topics_by_id(w: World, _: str) -> None:
    await like_missing(w, w.b, 20, lambda i: {"topics": [{"name": None, "topic_id": i}], "timeout": 5000},
                       {"i": w.ids[w.pa(SECRET)]}, {"i": uuid.uuid4()})


@row(21, "name", "physical")
async def delete_records(w: World, how: str) -> None:
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 21, lambda t: {"topics": [topic_fields(t, {"offset": 2})], "timeout": 5000},
                       {"t": attack}, {"t": missing})


@row(22, "name", "physical")
async def init_producer_id(w: World, how: str) -> None:
    attack, missing = ways(w, TXN, "nosuch-x")[how]
    await like_missing(w, w.b, 22, lambda x: {"transactional_id": x, "transaction_timeout": 60000,
                                              "producer_id": -1, "producer_epoch": -1}, {"x": attack}, {"x": missing},
                       ignore=frozenset({"producer_id"}))  # B's own id either way: a producer of its own


def txn_names(w: World, how: str, *more: tuple[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """A's transactional id (and ``more``: (A's name, key)) as B names them, and missing ones."""
    attack, missing = {}, {}
    for name, key in ((TXN, "x"), *more):
        attack[key], missing[key] = ways(w, name, f"nosuch-{key}")[how]
    if how == "name" and "t" in attack:  # B has a topic of that name: its own
        missing["t"] = attack["t"]
    return attack, missing


@row(24, "name", "physical")
async def add_partitions_to_txn(w: World, how: str) -> None:
    """A's transactional id and topic under A's producer id and epoch: as for missing ones."""
    pid, epoch = w.a_txn
    attack, missing = txn_names(w, how, (USERS, "t"))
    await like_missing(w, w.b, 24, lambda x, t: {
        "v3_and_below_transactional_id": x, "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": [0]}]}, attack, missing, version=3)


@row(25, "name", "physical")
async def add_offsets_to_txn(w: World, how: str) -> None:
    pid, epoch = w.a_txn
    attack, missing = txn_names(w, how, (G_A, "g"))
    await like_missing(w, w.b, 25, lambda x, g: {"transactional_id": x, "producer_id": pid, "producer_epoch": epoch,
                                                 "group_id": g}, attack, missing)


@row(26, "name", "physical")
async def end_txn(w: World, how: str) -> None:
    pid, epoch = w.a_txn
    attack, missing = txn_names(w, how)
    for committed in (True, False):
        await like_missing(w, w.b, 26, lambda x: {"transactional_id": x, "producer_id": pid, "producer_epoch": epoch,
                                                  "committed": committed}, attack, missing)


@row(27, "name", "physical")
async def write_txn_markers(w: World, how: str) -> None:
    """Markers are the brokers' (CLUSTER_ACTION in the physical view): refused alike."""
    pid, epoch = w.a_txn
    attack, missing = ways(w, USERS, "nosuch-t")[how]
    await like_missing(w, w.b, 27, lambda t: {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": False, "coordinator_epoch": 0,
        "topics": [{"name": t, "partition_indexes": [0]}]}]}, {"t": attack}, {"t": missing})


def namespaces_as_dicts(x: Any) -> Any:
    """The client's fallback decoding (a transaction start time of -1, which kio's datetime
    cannot hold, comes back as namespaces) as plain dicts."""
    if hasattr(x, "__dict__") and not dataclasses.is_dataclass(x):
        return {k: namespaces_as_dicts(v) for k, v in vars(x).items() if k not in VOLATILE}
    if isinstance(x, (tuple, list)):
        return [namespaces_as_dicts(v) for v in x]
    return x


@row(65, "name", "physical")
async def describe_transactions(w: World, how: str) -> None:
    attack, missing = txn_names(w, how)
    if how == "physical":
        async with w.b.client() as c:
            got = namespaces_as_dicts(await send(c, 65, {"transactional_ids": [attack["x"]]}))
            want = namespaces_as_dicts(await send(c, 65, {"transactional_ids": [missing["x"]]}))
        for r in (got, want):  # row 22 may have made either B's own producer: ids differ
            for t in r["transaction_states"]:
                t.pop("producer_id")
        assert swap(got, {attack["x"]: missing["x"]}) == want, (got, want)
        assert_no_leak(w, got, "api 65", (attack["x"],))
        return
    # by name, tx-a is B's own id (row 22 may have made it a producer): never A's
    r = namespaces_as_dicts(await call(w.b, 65, {"transactional_ids": [TXN]}))
    (state,) = r["transaction_states"]
    assert state["producer_id"] != w.a_txn[0] and state["topics"] == [], r
    assert_no_leak(w, r, "api 65", (TXN,))


@row(66, "all", "producer id")
async def list_transactions(w: World, how: str) -> None:
    """B's listing holds B's ids only; A's producer id as a filter finds nothing."""
    pids = [w.a_txn[0]] if how == "producer id" else []
    r = plain(await call(w.b, 66, {"state_filters": [], "producer_id_filters": pids, "duration_filter": -1,
                                   "transactional_id_pattern": None}))
    assert all(t["producer_id"] != w.a_txn[0] for t in r["transaction_states"]), r
    if pids:
        assert r["transaction_states"] == [], r
    assert_no_leak(w, r, "api 66", (w.pa(TXN),))  # B's own id of that name (row 22 made it)


@row(28, "name", "physical")
async def txn_offset_commit(w: World, how: str) -> None:
    """A's transactional id, group (with A's member and generation) and topic, under A's producer
    id: answered as for ones that do not exist, and nothing reaches A's group."""
    (x, xm), (g, gm), (t, tm) = (ways(w, n, f"nosuch-{k}")[how] for n, k in ((TXN, "x"), (G_A, "g"), (USERS, "t")))
    if how == "name":  # B has a topic of that name: its own
        tm = t
    member, gen = w.a_member
    pid, epoch = w.a_producer
    await like_missing(w, w.b, 28, lambda x, g, t: {
        "transactional_id": x, "group_id": g, "producer_id": pid, "producer_epoch": epoch, "generation_id": gen,
        "member_id": member, "group_instance_id": None, "topics": [{"name": t, "partitions": [
            {"partition_index": 0, "committed_offset": 999, "committed_leader_epoch": -1, "committed_metadata": ""}]}],
    }, {"x": x, "g": g, "t": t}, {"x": xm, "g": gm, "t": tm}, version=3)


@row(22, "producer id")
async def init_producer_id_by_id(w: World, _: str) -> None:
    """B re-initializing A's idempotent producer gets a producer of its own; A's is not fenced
    (test_zz_a_is_unchanged)."""
    pid, epoch = w.a_producer
    fields = lambda i: {"transactional_id": None, "transaction_timeout": 60000,  # noqa: E731
                        "producer_id": i, "producer_epoch": epoch}
    r = await call(w.b, 22, fields(pid))
    assert r.producer_id != pid, f"B was handed A's producer {pid} with epoch {r.producer_epoch}: {r}"
    await like_missing(w, w.b, 22, fields, {"i": pid}, {"i": pid + 1_000_000}, ignore=frozenset({"producer_id"}))


def config_resource(name: str, **more: Any) -> dict[str, Any]:
    return {"resource_type": RESOURCE_TOPIC, "resource_name": name, "configuration_keys": None, **more}


@row(32, "name", "physical")
async def describe_configs(w: World, how: str) -> None:
    for topic in (SECRET, LEDGER):
        attack, missing = ways(w, topic, "nosuch-t")[how]
        await like_missing(w, w.b, 32, lambda t: {"resources": [config_resource(t)], "include_synonyms": True,
                                                  "include_documentation": True}, {"t": attack}, {"t": missing})


@row(32, "inherited configs")
async def describe_own_configs(w: World, _: str) -> None:
    """A's tenant defaults and namespace configs do not reach B's topics."""
    r = plain(await call(w.b, 32, {"resources": [config_resource(USERS)], "include_synonyms": True,
                                   "include_documentation": True}))
    assert_no_leak(w, r, "DescribeConfigs of B's topic")
    values = {c["name"]: c["value"] for res in r["results"] for c in res["configs"]}
    assert values and values.get("retention.ms") != "777777" and values.get("retention.bytes") != "888888", values


@row(33, "name", "physical")
async def alter_configs(w: World, how: str) -> None:
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 33, lambda t: {"resources": [config_resource(t, configs=[
        {"name": "retention.ms", "value": "1"}])], "validate_only": False}, {"t": attack}, {"t": missing})


@row(37, "name", "physical")
async def create_partitions(w: World, how: str) -> None:
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 37, lambda t: {"topics": [{"name": t, "count": 4, "assignments": None}],
                                              "timeout": 5000, "validate_only": False}, {"t": attack}, {"t": missing})


@row(42, "name", "physical")
async def delete_groups(w: World, how: str) -> None:
    for group in (G_IDLE, G_A):
        attack, missing = ways(w, group, "nosuch-g")[how]
        await like_missing(w, w.b, 42, lambda g: {"groups_names": [g]}, {"g": attack}, {"g": missing})


@row(44, "name", "physical")
async def incremental_alter_configs(w: World, how: str) -> None:
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 44, lambda t: {"resources": [config_resource(t, configs=[
        {"name": "retention.ms", "config_operation": 0, "value": "1"}])], "validate_only": False},
        {"t": attack}, {"t": missing})


@row(47, "name", "physical")  # OffsetDelete takes names only
async def offset_delete(w: World, how: str) -> None:
    attack, missing, _ = group_and_topic(w, how)
    attack["g"], missing["g"] = ways(w, G_IDLE, "nosuch-g")[how]
    await like_missing(w, w.b, 47, lambda g, t: {"group_id": g, "topics": [
        {"name": t, "partitions": [{"partition_index": 0}]}]}, attack, missing)


@row(50, "name", "physical", "HTTP user")
async def describe_scram(w: World, how: str) -> None:
    attack, missing = {"HTTP user": ("alice", "nobody")}.get(how) or ways(w, CARL, "nosuch-u")[how]
    await like_missing(w, w.b, 50, lambda u: {"users": [{"name": u}]}, {"u": attack}, {"u": missing})


@row(50, "all users")
async def describe_scram_all(w: World, _: str) -> None:
    r = plain(await call(w.b, 50, {"users": None}))
    assert_no_leak(w, r, "DescribeUserScramCredentials (all)")
    names = {u["user"] for u in r["results"]}
    assert not names & {"alice", "alice-ro", CARL} and not any(n.startswith("lkc-") for n in names), names


@row(51, "name", "physical", "HTTP user")
async def alter_scram(w: World, how: str) -> None:
    """Deleting A's users' credentials (upserting them is B making its own users: checked at the end)."""
    attack, missing = {"HTTP user": ("alice", "nobody")}.get(how) or ways(w, CARL, "nosuch-u")[how]
    await like_missing(w, w.b, 51, lambda u: {"deletions": [{"name": u, "mechanism": 2}], "upsertions": []},
                       {"u": attack}, {"u": missing})
    r = ok(await call(w.b, 51, {"deletions": [], "upsertions": [scram_upsert(attack, "hijacked")]}))
    assert_no_leak(w, plain(r), "AlterUserScramCredentials upsert", echoes=(attack,))


@row(60, NO_RESOURCE)
async def describe_cluster(w: World, _: str) -> None:
    same_listener = w.bob["SCRAM-SHA-256"]  # as A's: SASL_PLAINTEXT
    ra, rb = [plain(await call(p, 60, CLUSTER_FIELDS)) for p in (w.alice, same_listener)]
    assert (ra["cluster_id"], rb["cluster_id"]) == (w.a_tid, w.b_tid)
    assert_no_leak(w, rb, "DescribeCluster")
    assert {**ra, "cluster_id": ""} == {**rb, "cluster_id": ""}


@row(23, "name", "physical")
async def offsets_for_leader_epoch(w: World, how: str) -> None:
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 23, lambda t: {"replica_id": -1, "topics": [{"topic": t, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}, {"t": attack}, {"t": missing})


@row(35, "name", "physical")
async def describe_log_dirs(w: World, how: str) -> None:
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 35, lambda t: {"topics": [{"topic": t, "partitions": [0]}]},
                       {"t": attack}, {"t": missing}, ignore=frozenset({"usable_bytes"}))  # the disk moves


@row(35, "all topics")
async def describe_log_dirs_all(w: World, _: str) -> None:
    """Issue 24: a tenant saw the broker's absolute log directory and its disk's sizes; now its own
    partitions' sizes only, in a directory named by its cluster id (the operator sees the disk)."""
    async with w.b.client() as c:
        r = plain(await send(c, 35, {"topics": None}))
    assert_no_leak(w, r, "DescribeLogDirs of every topic")
    (res,) = r["results"]
    assert (res["log_dir"], res["total_bytes"], res["usable_bytes"]) == (f"/{w.b_tid}", -1, -1), res
    sizes = {t["name"]: [p["partition_size"] for p in t["partitions"]] for t in res["topics"]}
    assert USERS in sizes and all(n >= 0 for ps in sizes.values() for n in ps), sizes
    async with w.operator.client() as c:
        (op,) = plain(await send(c, 35, {"topics": None}))["results"]
    assert os.path.isdir(op["log_dir"]) and op["total_bytes"] > 0, op


@row(43, "name", "physical")
async def elect_leaders(w: World, how: str) -> None:
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 43, lambda t: {"election_type": 0, "topic_partitions": [
        {"topic": t, "partitions": [0]}], "timeout": 5000}, {"t": attack}, {"t": missing})


@row(45, "name", "physical")
async def alter_partition_reassignments(w: World, how: str) -> None:
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    for target in (None, [1]):  # cancel, and a move
        await like_missing(w, w.b, 45, lambda t: {"timeout": 5000, "topics": [{"name": t, "partitions": [
            {"partition_index": 0, "replicas": target}]}]}, {"t": attack}, {"t": missing})


@row(46, "name", "physical")
async def list_partition_reassignments(w: World, how: str) -> None:
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 46, lambda t: {"timeout": 5000, "topics": [{"name": t, "partition_indexes": [0]}]},
                       {"t": attack}, {"t": missing})


@row(46, "all topics")
async def list_partition_reassignments_all(w: World, _: str) -> None:
    async with w.b.client() as c:
        r = plain(await send(c, 46, {"timeout": 5000, "topics": None}))
    assert_no_leak(w, r, "ListPartitionReassignments of every topic")


@row(61, "name", "physical")
async def describe_producers(w: World, how: str) -> None:
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 61, lambda t: {"topics": [{"name": t, "partition_indexes": [0]}]},
                       {"t": attack}, {"t": missing})


def cg_heartbeat(group: str, member: str, epoch: int, **more: Any) -> dict[str, Any]:
    return {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30000, "subscribed_topic_names": None, "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": None, **more}


@row(68, "name", "physical")
async def consumer_group_heartbeat(w: World, how: str) -> None:
    attack, missing = ways(w, G_848, "nosuch-g")[how]
    await like_missing(w, w.b, 68, lambda g: cg_heartbeat(g, *w.a848), {"g": attack}, {"g": missing})


@row(68, "pattern")
async def consumer_group_regex(w: World, _: str) -> None:
    """B's own KIP-848 member subscribed to names and a regex matching A's topics gets B's only."""
    member = str(uuid.uuid4())
    async with w.b.client() as c:
        epoch, assigned = 0, []
        for _ in range(20):
            r = plain(await send(c, 68, cg_heartbeat("g-b-regex", member, epoch, subscribed_topic_names=[
                SECRET, USERS, w.pa(SECRET)], subscribed_topic_regex="secret.*|lkc-.*|users", topic_partitions=[])))
            assert r["error_code"] == 0, r
            assert_no_leak(w, r, "ConsumerGroupHeartbeat assignment")
            epoch = r["member_epoch"]
            if r["assignment"]:
                assigned = [t["topic_id"] for t in r["assignment"]["topic_partitions"]]
                break
            await asyncio.sleep(0.1)
        await send(c, 68, cg_heartbeat("g-b-regex", member, -1))
    assert assigned == [str(w.ids[w.pb(USERS)])], assigned


@row(69, "name", "physical")
async def consumer_group_describe(w: World, how: str) -> None:
    for group in (G_848, G_A):
        attack, missing = ways(w, group, "nosuch-g")[how]
        await like_missing(w, w.b, 69, lambda g: {"group_ids": [g], "include_authorized_operations": True},
                           {"g": attack}, {"g": missing})


def acl_filter(**f: Any) -> dict[str, Any]:
    base = {"resource_type_filter": ResourceType.ANY, "resource_name_filter": None,
            "pattern_type_filter": PatternType.ANY, "principal_filter": None, "host_filter": None,
            "operation": Operation.ANY, "permission_type": Permission.ANY}
    return {**base, **f}


A_ACL_FILTERS = {  # filters that match A's bindings (in A's tenant)
    "principal": ({"principal_filter": "User:alice-ro"}, {"principal_filter": "User:nobody"}),
    "literal": ({"resource_type_filter": ResourceType.TOPIC, "resource_name_filter": SECRET,
                 "pattern_type_filter": PatternType.LITERAL},
                {"resource_type_filter": ResourceType.TOPIC, "resource_name_filter": "nosuch-t",
                 "pattern_type_filter": PatternType.LITERAL}),
    "prefixed": ({"resource_type_filter": ResourceType.TOPIC, "resource_name_filter": "secret",
                  "pattern_type_filter": PatternType.PREFIXED},
                 {"resource_type_filter": ResourceType.TOPIC, "resource_name_filter": "nosuch",
                  "pattern_type_filter": PatternType.PREFIXED}),
    "match": ({"resource_type_filter": ResourceType.ANY, "resource_name_filter": SECRET,
               "pattern_type_filter": PatternType.MATCH},
              {"resource_type_filter": ResourceType.ANY, "resource_name_filter": "nosuch-t",
               "pattern_type_filter": PatternType.MATCH}),
}


@row(29, *A_ACL_FILTERS)
async def describe_acls(w: World, how: str) -> None:
    attack, missing = A_ACL_FILTERS[how]
    await like_missing(w, w.b, 29, lambda **f: acl_filter(**f), attack, missing)


@row(29, "all")
async def describe_acls_all(w: World, _: str) -> None:
    r = plain(await call(w.b, 29, acl_filter()))
    assert r["error_code"] == 0, r
    assert_no_leak(w, r, "DescribeAcls (any)")
    bindings = [(res["resource_name"], a["principal"]) for res in r["resources"] for a in res["acls"]]
    assert bindings == [(USERS, "User:bob-ro")], bindings


@row(30, "A's names")
async def create_acls(w: World, _: str) -> None:
    """B may write bindings naming A's topic and user: they are B's (removed again here)."""
    binding = {"resource_type": ResourceType.TOPIC, "resource_name": SECRET,
               "resource_pattern_type": PatternType.LITERAL, "principal": "User:alice", "host": "*",
               "operation": Operation.READ, "permission_type": Permission.ALLOW}
    await like_missing(w, w.b, 30, lambda n, u: {"creations": [{**binding, "resource_name": n, "principal": u}]},
                       {"n": SECRET, "u": "User:alice"}, {"n": "nosuch-t", "u": "User:nobody"})
    for name, user in ((SECRET, "User:alice"), ("nosuch-t", "User:nobody")):
        r = ok(await call(w.b, 31, {"filters": [acl_filter(resource_type_filter=ResourceType.TOPIC,
                                                           resource_name_filter=name, principal_filter=user,
                                                           pattern_type_filter=PatternType.LITERAL)]}))
        assert [len(f.matching_acls) for f in r.filter_results] == [1], r


@row(31, *A_ACL_FILTERS)
async def delete_acls(w: World, how: str) -> None:
    attack, missing = A_ACL_FILTERS[how]
    await like_missing(w, w.b, 31, lambda **f: {"filters": [acl_filter(**f)]}, attack, missing)


@row(48, "user", "tenant")
async def describe_client_quotas(w: World, how: str) -> None:
    attack, missing = {"user": ("alice", "nobody"), "tenant": (w.a_tid, NO_TENANT)}[how]
    await like_missing(w, w.b, 48, lambda n: {"components": [{"entity_type": how, "match_type": 0, "match": n}],
                                              "strict": False}, {"n": attack}, {"n": missing})


@row(48, "all")
async def describe_client_quotas_all(w: World, _: str) -> None:
    for entity_type in ("user", "tenant", "client-id"):
        r = plain(await call(w.b, 48, {"components": [{"entity_type": entity_type, "match_type": 2, "match": None}],
                                       "strict": False}))
        assert_no_leak(w, r, "DescribeClientQuotas (any)")
        names = [e["entity_name"] for q in r["entries"] or [] for e in q["entity"]]
        assert "alice" not in names, names


@row(48, "own tenant")
async def describe_own_tenant_quota(w: World, _: str) -> None:
    """Issue 24: a tenant asking for its own tenant quota got UNSUPPORTED_VERSION; now it sees the
    tenant-wide quota the operator set for it, and nothing of another tenant's."""
    def alter(tid: str, remove: bool) -> dict[str, Any]:
        return {"entries": [{"entity": [{"entity_type": "tenant", "entity_name": tid}], "ops": [
            {"key": "producer_byte_rate", "value": 1e9, "remove": remove}]}], "validate_only": False}

    def tenant_filter(match_type: int, match: str | None) -> dict[str, Any]:
        return {"components": [{"entity_type": "tenant", "match_type": match_type, "match": match}], "strict": False}

    for tid in (w.a_tid, w.b_tid):
        assert plain(await call(w.operator, 49, alter(tid, False)))["entries"][0]["error_code"] == 0
    try:
        own = [{"entity": [{"entity_type": "tenant", "entity_name": w.b_tid}],
                "values": [{"key": "producer_byte_rate", "value": 1e9}]}]
        for fields in (tenant_filter(0, w.b_tid), tenant_filter(2, None)):
            r = plain(await call(w.b, 48, fields))
            assert (r["error_code"], r["entries"]) == (0, own), r
            assert_no_leak(w, r, "DescribeClientQuotas of its own tenant")
        r = plain(await call(w.b, 48, tenant_filter(0, w.a_tid)))
        assert (r["error_code"], r["entries"]) == (0, []), r
    finally:
        for tid in (w.a_tid, w.b_tid):
            await call(w.operator, 49, alter(tid, True))


@row(49, "user", "tenant")
async def alter_client_quotas(w: World, how: str) -> None:
    attack, missing = {"user": ("alice", "nobody"), "tenant": (w.a_tid, NO_TENANT)}[how]
    await like_missing(w, w.b, 49, lambda n: {"entries": [{"entity": [{"entity_type": how, "entity_name": n}], "ops": [
        {"key": "producer_byte_rate", "value": 1.0, "remove": False}]}], "validate_only": False},
        {"n": attack}, {"n": missing})


def dtp_fields(t: str | None, cursor: str | None = None) -> dict[str, Any]:
    """DescribeTopicPartitions of topic ``t`` (None: all topics), from ``cursor``'s partition 0."""
    return {"topics": [] if t is None else [{"name": t}], "response_partition_limit": 2000,
            "cursor": None if cursor is None else {"topic_name": cursor, "partition_index": 0}}


@row(75, "name", "physical")
async def describe_topic_partitions(w: World, how: str) -> None:
    """A's topic by name, and as the cursor of a named list."""
    attack, missing = ways(w, SECRET, "nosuch-t")[how]
    await like_missing(w, w.b, 75, lambda t: dtp_fields(t), {"t": attack}, {"t": missing})
    await like_missing(w, w.b, 75, lambda t: dtp_fields(t, cursor=t), {"t": attack}, {"t": missing})


@row(75, "all topics")
async def describe_topic_partitions_all(w: World, _: str) -> None:
    """All topics: B's own only, also from a cursor naming A's topic (a name to start after)."""
    for cursor in (None, SECRET, w.pa(SECRET)):
        r = plain(await call(w.b, 75, dtp_fields(None, cursor)))
        assert_no_leak(w, r, f"DescribeTopicPartitions (all topics, cursor {cursor})")
        assert [t["name"] for t in r["topics"]] == [USERS], (cursor, r)  # "users" sorts after both
        assert r["next_cursor"] is None and r["topics"][0]["topic_id"] == str(w.ids[w.pb(USERS)])


CELLS = [pytest.param(key, name, id=f"{key}-{name}")
         for key in sorted(MATRIX) for name in MATRIX[key]
         if key in {s.key for s in Registry(handler_modules()).specs()}]


@pytest.fixture(scope="module")
def cluster():
    yield from tenant_cluster(OVERRIDES, TlsTenantBroker)


@pytest.fixture(scope="module")
def world(cluster) -> World:
    return build_world(cluster)


def test_matrix_covers_every_api(world):
    """Every API the broker offers has a row: a new API must say how B is kept from A's data."""
    async def offered() -> set[int]:
        async with world.b.client() as c:
            return set(c.api_versions)

    registered = {s.key for s in Registry(handler_modules()).specs()}
    assert registered == asyncio.run(offered())
    assert registered - set(MATRIX) == set(), f"APIs without an isolation row: {sorted(registered - set(MATRIX))}"


@pytest.mark.parametrize("key,name", CELLS)
def test_matrix(world, key, name):
    asyncio.run(MATRIX[key][name](world))


# -- each tenant's own view; the operator's ---------------------------------------------------------


@pytest.mark.parametrize("tenant", ["a", "b"])
def test_each_tenant_sees_its_own_cluster(world, tenant):
    """Cluster id, topics and groups by the names the tenant gave them (the groups were made by
    the operator under their physical names)."""
    p, tid, topics, groups = {"a": (world.alice, world.a_tid, [LEDGER, SECRET, USERS], {G_A, G_IDLE, G_848}),
                              "b": (world.b, world.b_tid, [USERS], {G_B})}[tenant]

    async def view() -> tuple[Any, Any, Any]:
        async with p.client() as c:
            return (plain(await send(c, 3, metadata_fields(None))), plain(await send(c, 60, CLUSTER_FIELDS)),
                    plain(await send(c, 16, {"states_filter": [], "types_filter": []})))

    md, cluster, listed = asyncio.run(view())
    assert (md["cluster_id"], cluster["cluster_id"]) == (tid, tid)
    assert sorted(t["name"] for t in md["topics"]) == topics
    assert groups <= {g["group_id"] for g in listed["groups"]}, listed


def test_users_topics_hold_separate_data(world):
    for p, mark, parts, n in ((world.alice, A_MARK, 2, 7), (world.b, B_MARK, 1, 3)):  # A's 7th: its transaction
        got = consume(p.props["bootstrap.servers"], USERS, parts, n, **{k: v for k, v in p.props.items()
                                                                        if k != "bootstrap.servers"})
        assert len(got) == n and all(m.value().startswith(mark) for m in got), [m.value() for m in got]


def test_operator_sees_physical_names(world):
    async def view() -> tuple[Any, Any]:
        async with world.operator.client() as c:
            return (plain(await send(c, 3, metadata_fields(None))),
                    plain(await send(c, 16, {"states_filter": [], "types_filter": []})))

    md, groups = asyncio.run(view())
    names = {t["name"] for t in md["topics"]}
    assert {world.pa(USERS), world.pa(SECRET), world.pa(LEDGER), world.pb(USERS)} <= names, names
    assert not md["cluster_id"].startswith("lkc-")
    assert {world.pa(G_A), world.pa(G_IDLE), world.pb(G_B)} <= {g["group_id"] for g in groups["groups"]}


# -- every kind of B principal, with the Kafka clients ---------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_b_principal_kinds(world, kind):
    """SCRAM-SHA-256 and PLAIN over SASL_PLAINTEXT, SCRAM-SHA-512 over SASL_SSL, mTLS (the
    certificate's CN is a tenant user without a password): B's view, and A's names and ids."""
    p = world.bob[kind]
    asyncio.run(metadata_all_as(world, p))
    asyncio.run(like_missing(world, p, 1, lambda i: fetch_fields(topic_id=i), {"i": world.ids[world.pa(SECRET)]},
                             {"i": uuid.uuid4()}))
    md = ConfluentAdmin(p.confluent()).list_topics(timeout=OP_TIMEOUT)
    assert md.cluster_id == world.b_tid and sorted(md.topics) == [USERS], (md.cluster_id, md.topics)


def test_confluent_regex_consumer(world):
    """A regex subscription matching A's topics (by B's and by A's physical names) gets B's only."""
    c = Consumer(world.bob["SCRAM-SHA-256"].confluent(**{
        "group.id": "g-b-confluent", "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "topic.metadata.refresh.interval.ms": 500}))
    got: list[Any] = []
    try:
        c.subscribe(["^secret.*", "^lkc-.*", f"^{USERS}$"])
        deadline = time.monotonic() + OP_TIMEOUT
        while len(got) < 3 and time.monotonic() < deadline:
            got += [m for m in c.consume(10, 0.2) if not m.error()]
        assert {tp.topic for tp in c.assignment()} == {USERS}
    finally:
        c.close()
    assert sorted(m.value() for m in got) == [B_MARK + b"%d" % i for i in range(3)]


def test_kafka_python_sees_b_only(world):
    from kafka import KafkaConsumer

    c = KafkaConsumer(**world.bob["mTLS"].kafka_python(), request_timeout_ms=15000)
    try:
        assert c.topics() == {USERS}
        for name, missing in ways(world, SECRET, "nosuch-t").values():
            assert c.partitions_for_topic(name) == c.partitions_for_topic(missing)
            assert not c.partitions_for_topic(name)
    finally:
        c.close()


async def test_aiokafka_pattern_subscription(world):
    from aiokafka import AIOKafkaConsumer

    c = AIOKafkaConsumer(**world.bob["PLAIN"].aiokafka(), group_id="g-b-aiokafka", auto_offset_reset="earliest",
                         enable_auto_commit=False, metadata_max_age_ms=500)
    await c.start()
    try:
        c.subscribe(pattern=r"secret.*|lkc-.*|users")
        got: list[Any] = []
        deadline = time.monotonic() + OP_TIMEOUT
        while len(got) < 3 and time.monotonic() < deadline:
            for msgs in (await c.getmany(timeout_ms=200)).values():
                got += msgs
        assert {tp.topic for tp in c.assignment()} == {USERS}
        assert sorted(m.value for m in got) == [B_MARK + b"%d" % i for i in range(3)]
    finally:
        await c.stop()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat_sees_b_only(world):
    p = world.bob["SCRAM-SHA-512"]
    r = subprocess.run(["kcat", "-L", "-J", "-m", "10", *p.kcat()], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert [t["topic"] for t in json.loads(r.stdout)["topics"]] == [USERS]
    assert world.a_tid not in r.stdout

    def consume(topic: str) -> tuple[int, str, str]:
        r = subprocess.run(["kcat", "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-m", "10", *p.kcat()],
                           capture_output=True, text=True, timeout=30)
        return r.returncode, r.stdout, r.stderr

    for name, missing in ways(world, SECRET, "nosuch-t").values():
        got, want = consume(name), consume(missing)
        assert got[0] != 0 and swap(list(got), {name: missing}) == list(want), (got, want)


# -- after all of that ---------------------------------------------------------------------------


def test_zz_a_is_unchanged(world):
    """A's records, offsets, configs, groups, credentials, ACLs and quotas are what they were;
    A's group member was not rebalanced, A's producer was not fenced, A's passwords still work."""
    after = asyncio.run(a_state(world))
    for part in world.before:
        assert after[part] == world.before[part], f"A's {part} changed"

    async def a_still_works() -> None:
        member, generation = world.a_member
        async with world.operator.client() as c:
            ok(await send(c, 12, classic(world.pa(G_A), member, generation)))
        async with world.alice.client() as c:
            pid, epoch = world.a_producer
            r = ok(await send(c, 22, {"transactional_id": None, "transaction_timeout": 60000,
                                      "producer_id": pid, "producer_epoch": epoch}))
            assert (r.producer_id, r.producer_epoch) == (pid, epoch + 1)
        for user, password in (("alice", world.cluster.a.users["alice"]), (world.pa(CARL), CARL_PW)):
            for mech in ("PLAIN", "SCRAM-SHA-512"):
                p = Principal(mech, user, {**world.alice.props, "sasl.mechanism": mech, "sasl.username": user,
                                           "sasl.password": password})
                async with p.client():
                    pass
        hijack = Principal("PLAIN", "alice", {**world.alice.props, "sasl.mechanism": "PLAIN",
                                              "sasl.password": "hijacked"})
        with pytest.raises(KafkaError):
            async with hijack.client():
                pass

    asyncio.run(a_still_works())
