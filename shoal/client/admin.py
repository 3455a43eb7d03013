"""A small asyncio Kafka admin client on Shoal's own codec (no other Kafka library).

Used by the ``shoal`` command and by tests. It speaks only the wire protocol:

- ``AdminClient.connect()`` opens a connection to the bootstrap broker and sends ApiVersions
  first; every later request uses, per API, the highest version both sides support.
- ``request(api_key, body)`` takes either a plain ``dict`` of fields — built for the negotiated
  version with :func:`build_entity`, nested entities included — or a ready kio entity, sent at
  that entity's own version. It returns the decoded response entity.
- The typed methods (``create_topics``, ``describe_configs``, ...) take plain Python values and
  return plain per-resource results.

Errors: a failing resource becomes a :class:`KafkaError` (``code_name`` is Kafka's upper-case
name, e.g. ``TOPIC_ALREADY_EXISTS``). By default the methods raise the first one; with
``raise_errors=False`` they return a mapping where failed resources map to their ``KafkaError``
instance instead of a result, so a caller handling several resources sees each outcome.

Partition-level requests (ListOffsets, DeleteRecords) go to each partition's leader, found
through Metadata; everything else goes to the bootstrap broker (a KRaft broker forwards admin
requests to the controller itself).
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import types
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from shoal.net import ClientSecurity, Connection, ConnectionLost, KafkaError, build_entity
from shoal.net.errors import check
from shoal.net.wire import skip_tags, uvarint
from shoal.protocol import codec

__all__ = [
    "AdminClient",
    "KafkaError",
    "build_entity",
    "ConfigEntry",
    "TopicDescription",
    "PartitionDescription",
    "RESOURCE_TOPIC",
    "RESOURCE_BROKER",
    "AclBinding",
    "AclFilter",
    "TransactionListing",
    "TransactionDescription",
    "ProducerState",
]

# Api keys used here.
PRODUCE, LIST_OFFSETS, METADATA = 0, 2, 3
API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 18, 19, 20, 21
DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS = 32, 33, 37
INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 44, 60
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
UPDATE_FEATURES = 57
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, DESCRIBE_GROUPS, LIST_GROUPS = 8, 9, 10, 15, 16
DELETE_GROUPS, OFFSET_DELETE, CONSUMER_GROUP_DESCRIBE = 42, 47, 69
ELECT_LEADERS, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 43, 45, 46
WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 27, 61, 65, 66
# FindCoordinator key types.
COORDINATOR_GROUP, COORDINATOR_TRANSACTION = 0, 1
# DescribeClientQuotas match types: a name, the <default> entity, any entity of the type.
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

# ConfigResource types (DescribeConfigs / AlterConfigs).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
# IncrementalAlterConfigs operations.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
# ListOffsets special timestamps.
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3

CONFIG_SOURCES = {
    -1: "UNKNOWN",
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}

_I32 = struct.Struct(">i")


# -- building entities from plain values ------------------------------------------------------


# -- results ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error: KafkaError | None = None


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    internal: bool
    partitions: tuple[PartitionDescription, ...]

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)


@dataclass(frozen=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, tuple[str, int, str | None]]  # node id -> (host, port, rack)
    topics: dict[str, TopicDescription | KafkaError]


@dataclass(frozen=True)
class FeatureMetadata:
    """ApiVersions v3+'s features (KIP-584): what the answering broker supports and what the
    cluster finalized (a level 0 is not listed), with the epoch of the finalized levels."""

    supported: dict[str, tuple[int, int]]  # feature -> (min, max) level
    finalized: dict[str, int]  # feature -> level
    epoch: int  # -1: none finalized


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str  # DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG, ...
    read_only: bool = False
    sensitive: bool = False
    synonyms: tuple[tuple[str, str | None, str], ...] = ()

    @property
    def is_default(self) -> bool:
        return self.source == "DEFAULT_CONFIG"


@dataclass(frozen=True)
class CreatedTopic:
    name: str
    topic_id: uuid.UUID | None
    num_partitions: int
    replication_factor: int
    configs: dict[str, ConfigEntry] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str  # "" when the broker does not say (ListGroups before v4)
    group_type: str  # "classic" or "consumer" (KIP-848); "" before ListGroups v5


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[tuple[str, int], ...]  # (topic, partition), sorted


@dataclass(frozen=True)
class GroupDescription:
    """A group as DescribeGroups (classic) or ConsumerGroupDescribe (KIP-848) tells it."""

    group_id: str
    group_type: str  # "classic" or "consumer"
    state: str  # Kafka's names: Empty, Stable, PreparingRebalance, ..., Dead (no such group)
    protocol_type: str  # classic groups: "consumer", "connect", "" (offsets only)
    assignor: str  # the chosen protocol (classic) or server assignor (KIP-848)
    coordinator: tuple[int, str, int]  # node id, host, port
    members: tuple[GroupMember, ...]
    group_epoch: int = -1  # KIP-848 only


@dataclass(frozen=True)
class TransactionListing:
    """One transactional id as ListTransactions tells it, with the broker that coordinates it."""

    transactional_id: str
    producer_id: int
    state: str  # Kafka's names: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, ...
    coordinator_id: int


@dataclass(frozen=True)
class TransactionDescription:
    """DescribeTransactions' answer for one transactional id (from its coordinator)."""

    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int | None  # None: no transaction running (Kafka's -1)
    partitions: tuple[tuple[str, int], ...]  # (topic, partition), sorted


@dataclass(frozen=True)
class ProducerState:
    """One active producer of a partition (DescribeProducers); -1 fields are Kafka's "none"."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no open transaction


def consumer_assignment(data: bytes) -> tuple[tuple[str, int], ...]:
    """The (topic, partition) pairs of a ``ConsumerProtocolAssignment`` (a classic consumer
    group member's assignment); ``()`` for empty or unreadable bytes."""
    out = []
    try:
        pos = 2  # version
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        for _ in range(n):
            (ln,) = struct.unpack_from(">h", data, pos)
            topic = data[pos + 2:pos + 2 + ln].decode()
            pos += 2 + ln
            (count,) = _I32.unpack_from(data, pos)
            parts = struct.unpack_from(f">{count}i", data, pos + 4)
            pos += 4 + 4 * count
            out += [(topic, p) for p in parts]
    except (struct.error, UnicodeDecodeError, ValueError):
        return ()
    return tuple(sorted(out))


# -- the connection --------------------------------------------------------------------------


@dataclass(frozen=True)
class AclBinding:
    """An ACL binding with Kafka's codes (``shoal.tenancy.acl`` names them)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True)
class AclFilter:
    """Kafka's AclBindingFilter: codes 1 (ANY) and None match anything; pattern_type 2 (MATCH)
    selects the bindings that apply to ``resource_name``."""

    resource_type: int = 1
    resource_name: str | None = None
    pattern_type: int = 1
    principal: str | None = None
    host: str | None = None
    operation: int = 1
    permission_type: int = 1

    def fields(self) -> dict[str, Any]:
        return {
            "resource_type_filter": self.resource_type,
            "resource_name_filter": self.resource_name,
            "pattern_type_filter": self.pattern_type,
            "principal_filter": self.principal,
            "host_filter": self.host,
            "operation": self.operation,
            "permission_type": self.permission_type,
        }


def _binding(r: Any, resource: Any = None) -> AclBinding:
    """An AclBinding from a DeleteAcls matching ACL, or a DescribeAcls ACL of ``resource``."""
    where = resource if resource is not None else r
    return AclBinding(
        int(where.resource_type), where.resource_name, int(where.pattern_type), r.principal, r.host,
        int(r.operation), int(r.permission_type),
    )


def _split_hostport(address: str, default_port: int = 9092) -> tuple[str, int]:
    address = address.strip()
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, sep, port = address.rpartition(":")
    if not sep:
        return address, default_port
    return host, int(port)


# -- the client ---------------------------------------------------------------------------------


class AdminClient:
    """Admin operations over the Kafka protocol. Use ``async with AdminClient(...) as c:``."""

    def __init__(
        self,
        bootstrap: str,
        client_id: str = "shoal-cli",
        timeout: float = 30,
        security: ClientSecurity | None = None,
        resolve: Mapping[str, str] | None = None,
    ) -> None:
        self.security = security or ClientSecurity()
        self.bootstrap = [_split_hostport(a) for a in bootstrap.split(",") if a.strip()]
        if not self.bootstrap:
            raise ValueError("empty bootstrap address")
        # "host:port" -> the "host:port" to connect to instead, TLS still checking the first
        # host's name (curl's --resolve): the console on a broker reaches its own wildcard
        # SASL_SSL listener on 127.0.0.1 while checking the certificate for the advertised name
        self.resolve = {_split_hostport(k): _split_hostport(v) for k, v in (resolve or {}).items()}
        self.client_id = client_id
        self.timeout = timeout
        self._main: Connection | None = None
        self._nodes: dict[int, Connection] = {}
        self._opening: dict[int, asyncio.Lock] = {}  # one opening of a node's connection at a time
        self._brokers: dict[int, tuple[str, int]] = {}

    async def __aenter__(self) -> "AdminClient":
        await self.connect()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def connect(self) -> None:
        errors = []
        for host, port in self.bootstrap:
            conn = self._connection(host, port)
            try:
                await conn.open()
            except ConnectionLost as e:
                await conn.close()
                errors.append(e.message or str(e))
                continue
            except BaseException:
                await conn.close()
                raise
            self._main = conn
            return
        raise ConnectionLost("; ".join(errors))

    def _connection(self, host: str, port: int) -> Connection:
        return Connection(host, port, self.client_id, self.timeout, self.security, _DECODERS,
                          address=self.resolve.get((host, port)))

    async def close(self) -> None:
        conns = [c for c in (self._main, *self._nodes.values()) if c is not None]
        self._main = None
        self._nodes.clear()
        for c in conns:
            await c.close()

    @property
    def api_versions(self) -> dict[int, tuple[int, int]]:
        """The broker's ApiVersions answer: api key -> (min, max)."""
        return dict(self._conn().versions)

    def _conn(self) -> Connection:
        if self._main is None:
            raise ConnectionLost("not connected (call connect() first)")
        return self._main

    async def _node(self, node_id: int) -> Connection:
        """The connection to ``node_id``, opened once even when concurrent requests ask for it
        together (each would otherwise open its own and all but the last would leak)."""
        conn = self._nodes.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        async with self._opening.setdefault(node_id, asyncio.Lock()):
            conn = self._nodes.get(node_id)
            if conn is not None and not conn.closed:
                return conn
            if node_id not in self._brokers:
                await self.metadata(topics=[])
            if node_id not in self._brokers:
                raise KafkaError("BROKER_NOT_AVAILABLE", f"node {node_id} is not in the cluster metadata")
            host, port = self._brokers[node_id]
            main = self._conn()
            if (host, port) == (main.host, main.port):
                return main
            conn = self._connection(host, port)
            try:
                await conn.open()
            except BaseException:  # its reader may be running: a failed login, a cancelled request
                await conn.close()
                raise
            self._nodes[node_id] = conn
            return conn

    def version_for(self, api_key: int) -> int:
        """The version this client uses for ``api_key`` with this broker."""
        return self._conn().version_for(api_key)

    async def request(
        self, api_key: int, body: Any, *, node_id: int | None = None, max_version: int | None = None
    ) -> Any:
        """Send one request and return the response entity.

        ``body`` is either a dict of fields, built for the highest version both sides support
        (at most ``max_version``; see :func:`build_entity`), or a kio request entity, sent at its
        own version.
        """
        conn = self._conn() if node_id is None else await self._node(node_id)
        if isinstance(body, Mapping):
            version = conn.version_for(api_key)
            if max_version is not None:
                version = min(version, max_version)
            entity = build_entity(codec.request_type(api_key, version), body)
        else:
            entity = body
            version = int(type(body).__version__)
            if int(type(body).__api_key__) != api_key:
                raise ValueError(f"{type(body).__name__} is not a request of api {api_key}")
        return await conn.send(api_key, version, entity)

    # -- metadata ------------------------------------------------------------------------------

    async def metadata(self, topics: Iterable[str] | None = None, *, allow_auto_create: bool = False) -> ClusterMetadata:
        """Cluster metadata; ``topics=None`` means every topic, ``[]`` none."""
        names = None if topics is None else list(topics)
        version = self.version_for(METADATA)
        if names is None and version == 0:
            req_topics: Any = []
        elif names is None:
            req_topics = None
        else:
            req_topics = [{"name": n} for n in names]
        resp = await self.request(
            METADATA,
            {
                "topics": req_topics,
                "allow_auto_topic_creation": allow_auto_create,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )
        brokers = {int(b.node_id): (b.host, int(b.port), b.rack) for b in resp.brokers}
        self._brokers.update({k: (v[0], v[1]) for k, v in brokers.items()})
        result: dict[str, TopicDescription | KafkaError] = {}
        for t in resp.topics:
            name = t.name or str(getattr(t, "topic_id", ""))
            err = check(t.error_code, None, name)
            if err:
                result[name] = err
                continue
            parts = tuple(
                sorted(
                    (
                        PartitionDescription(
                            partition=int(p.partition_index),
                            leader=int(p.leader_id),
                            leader_epoch=int(getattr(p, "leader_epoch", -1)),
                            replicas=tuple(int(r) for r in p.replica_nodes),
                            isr=tuple(int(r) for r in p.isr_nodes),
                            offline_replicas=tuple(int(r) for r in getattr(p, "offline_replicas", ())),
                            error=check(p.error_code, None, f"{name}-{p.partition_index}"),
                        )
                        for p in t.partitions
                    ),
                    key=lambda p: p.partition,
                )
            )
            result[name] = TopicDescription(
                name=name,
                topic_id=getattr(t, "topic_id", None),
                internal=bool(getattr(t, "is_internal", False)),
                partitions=parts,
            )
        return ClusterMetadata(
            cluster_id=getattr(resp, "cluster_id", None),
            controller_id=int(getattr(resp, "controller_id", -1)),
            brokers=brokers,
            topics=result,
        )

    async def list_topics(self, *, include_internal: bool = True) -> list[str]:
        md = await self.metadata(None)
        return sorted(
            name
            for name, t in md.topics.items()
            if isinstance(t, TopicDescription) and (include_internal or not t.internal)
        )

    async def describe_topics(
        self, names: Iterable[str], *, raise_errors: bool = True
    ) -> dict[str, TopicDescription | KafkaError]:
        names = list(names)
        md = await self.metadata(names)
        out = {n: md.topics.get(n, KafkaError("UNKNOWN_TOPIC_OR_PARTITION", None, n)) for n in names}
        return _finish(out, raise_errors)

    async def describe_cluster(self) -> dict[str, Any]:
        """cluster_id, controller_id and brokers ({node_id: (host, port, rack)})."""
        try:
            self.version_for(DESCRIBE_CLUSTER)
        except KafkaError:
            md = await self.metadata(topics=[])
            return {"cluster_id": md.cluster_id, "controller_id": md.controller_id, "brokers": md.brokers}
        resp = await self.request(
            DESCRIBE_CLUSTER,
            {"include_cluster_authorized_operations": False, "endpoint_type": 1, "include_fenced_brokers": False},
        )
        err = check(resp.error_code, resp.error_message, "cluster")
        if err:
            raise err
        return {
            "cluster_id": resp.cluster_id,
            "controller_id": int(resp.controller_id),
            "brokers": {int(b.broker_id): (b.host, int(b.port), b.rack) for b in resp.brokers},
        }

    # -- topics --------------------------------------------------------------------------------

    async def create_topics(
        self,
        topics: Iterable[Mapping[str, Any]],
        *,
        validate_only: bool = False,
        timeout_ms: int = 30000,
        raise_errors: bool = True,
    ) -> dict[str, CreatedTopic | KafkaError]:
        """Create topics; each is ``{"name", "num_partitions"=-1, "replication_factor"=-1,
        "configs": {k: v}, "assignments": {partition: [broker ids]}}``."""
        req_topics = []
        for t in topics:
            configs = t.get("configs") or {}
            assignments = t.get("assignments") or {}
            req_topics.append(
                {
                    "name": t["name"],
                    "num_partitions": t.get("num_partitions", -1) if not assignments else -1,
                    "replication_factor": t.get("replication_factor", -1) if not assignments else -1,
                    "assignments": [
                        {"partition_index": p, "broker_ids": list(b)} for p, b in sorted(assignments.items())
                    ],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            )
        resp = await self.request(
            CREATE_TOPICS, {"topics": req_topics, "timeout": timeout_ms, "validate_only": validate_only}
        )
        out: dict[str, CreatedTopic | KafkaError] = {}
        for r in resp.topics:
            err = check(r.error_code, r.error_message, r.name)
            if err:
                out[r.name] = err
                continue
            configs = {
                c.name: ConfigEntry(
                    c.name,
                    c.value,
                    CONFIG_SOURCES.get(int(c.config_source), "UNKNOWN"),
                    bool(c.read_only),
                    bool(c.is_sensitive),
                )
                for c in (getattr(r, "configs", None) or ())
            }
            out[r.name] = CreatedTopic(
                name=r.name,
                topic_id=getattr(r, "topic_id", None),
                num_partitions=int(getattr(r, "num_partitions", -1)),
                replication_factor=int(getattr(r, "replication_factor", -1)),
                configs=configs,
            )
        return _finish(out, raise_errors)

    async def delete_topics(
        self, names: Iterable[str], *, timeout_ms: int = 30000, raise_errors: bool = True
    ) -> dict[str, None | KafkaError]:
        names = list(names)
        resp = await self.request(
            DELETE_TOPICS,
            {
                "topic_names": names,  # v0-v5
                "topics": [{"name": n, "topic_id": None} for n in names],  # v6+
                "timeout": timeout_ms,
            },
        )
        out: dict[str, None | KafkaError] = {}
        for r in resp.responses:
            name = r.name if r.name is not None else str(getattr(r, "topic_id", ""))
            out[name] = check(r.error_code, getattr(r, "error_message", None), name)
        return _finish(out, raise_errors)

    async def create_partitions(
        self,
        counts: Mapping[str, int],
        *,
        assignments: Mapping[str, list[list[int]]] | None = None,
        validate_only: bool = False,
        timeout_ms: int = 30000,
        raise_errors: bool = True,
    ) -> dict[str, None | KafkaError]:
        """Increase each topic's partition count to ``counts[name]`` (the new total)."""
        assignments = assignments or {}
        topics = [
            {
                "name": name,
                "count": count,
                "assignments": [{"broker_ids": b} for b in assignments[name]] if name in assignments else None,
            }
            for name, count in counts.items()
        ]
        resp = await self.request(
            CREATE_PARTITIONS, {"topics": topics, "timeout": timeout_ms, "validate_only": validate_only}
        )
        out = {r.name: check(r.error_code, r.error_message, r.name) for r in resp.results}
        return _finish(out, raise_errors)

    # -- configs -------------------------------------------------------------------------------

    async def describe_configs(
        self,
        resources: Iterable[tuple[int, str]],
        *,
        keys: Iterable[str] | None = None,
        include_synonyms: bool = False,
        raise_errors: bool = True,
        node_id: int | None = None,
    ) -> dict[tuple[int, str], dict[str, ConfigEntry] | KafkaError]:
        """Configs of ``(resource_type, name)`` resources, e.g. ``(RESOURCE_TOPIC, "t")``;
        ``node_id``: the broker to ask (a broker describes its own configs only)."""
        key_list = None if keys is None else list(keys)
        resources = list(resources)
        resp = await self.request(
            DESCRIBE_CONFIGS,
            {
                "resources": [
                    {"resource_type": rt, "resource_name": rn, "configuration_keys": key_list}
                    for rt, rn in resources
                ],
                "include_synonyms": include_synonyms,
                "include_documentation": False,
            },
            node_id=node_id,
        )
        out: dict[tuple[int, str], dict[str, ConfigEntry] | KafkaError] = {}
        for r in resp.results:
            key = (int(r.resource_type), r.resource_name)
            err = check(r.error_code, r.error_message, r.resource_name)
            if err:
                out[key] = err
                continue
            entries = {}
            for c in r.configs:
                if hasattr(c, "config_source"):
                    source = CONFIG_SOURCES.get(int(c.config_source), "UNKNOWN")
                else:  # v0 has is_default only
                    source = "DEFAULT_CONFIG" if getattr(c, "is_default", False) else "UNKNOWN"
                entries[c.name] = ConfigEntry(
                    name=c.name,
                    value=c.value,
                    source=source,
                    read_only=bool(c.read_only),
                    sensitive=bool(c.is_sensitive),
                    synonyms=tuple(
                        (s.name, s.value, CONFIG_SOURCES.get(int(s.source), "UNKNOWN"))
                        for s in getattr(c, "synonyms", ())
                    ),
                )
            out[key] = entries
        return _finish(out, raise_errors)

    async def incremental_alter_configs(
        self,
        changes: Mapping[tuple[int, str], Iterable[tuple[str, int, str | None]]],
        *,
        validate_only: bool = False,
        raise_errors: bool = True,
        node_id: int | None = None,
    ) -> dict[tuple[int, str], None | KafkaError]:
        """``changes[(type, name)] = [(config, OP_SET|OP_DELETE|OP_APPEND|OP_SUBTRACT, value)]``;
        ``node_id``: the broker to send them to (a broker's own configs go to that broker)."""
        resp = await self.request(
            INCREMENTAL_ALTER_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": rt,
                        "resource_name": rn,
                        "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops],
                    }
                    for (rt, rn), ops in changes.items()
                ],
                "validate_only": validate_only,
            },
            node_id=node_id,
        )
        out = {
            (int(r.resource_type), r.resource_name): check(r.error_code, r.error_message, r.resource_name)
            for r in resp.responses
        }
        return _finish(out, raise_errors)

    async def alter_configs(
        self,
        configs: Mapping[tuple[int, str], Mapping[str, str | None]],
        *,
        validate_only: bool = False,
        raise_errors: bool = True,
    ) -> dict[tuple[int, str], None | KafkaError]:
        """Legacy AlterConfigs: replaces the resource's whole set of overrides with ``configs``."""
        resp = await self.request(
            ALTER_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": rt,
                        "resource_name": rn,
                        "configs": [{"name": k, "value": v} for k, v in values.items()],
                    }
                    for (rt, rn), values in configs.items()
                ],
                "validate_only": validate_only,
            },
        )
        out = {
            (int(r.resource_type), r.resource_name): check(r.error_code, r.error_message, r.resource_name)
            for r in resp.responses
        }
        return _finish(out, raise_errors)

    # -- ACLs ----------------------------------------------------------------------------------

    async def create_acls(
        self, bindings: Iterable[AclBinding], *, raise_errors: bool = True
    ) -> dict[AclBinding, None | KafkaError]:
        """Create ACL bindings; each maps to None or its error (INVALID_REQUEST, ...)."""
        bindings = list(bindings)
        resp = await self.request(
            CREATE_ACLS,
            {
                "creations": [
                    {
                        "resource_type": b.resource_type,
                        "resource_name": b.resource_name,
                        "resource_pattern_type": b.pattern_type,
                        "principal": b.principal,
                        "host": b.host,
                        "operation": b.operation,
                        "permission_type": b.permission_type,
                    }
                    for b in bindings
                ]
            },
        )
        out = {
            b: check(r.error_code, r.error_message, b.resource_name) for b, r in zip(bindings, resp.results)
        }
        return _finish(out, raise_errors)

    async def describe_acls(self, acl_filter: AclFilter = AclFilter()) -> list[AclBinding]:
        """The bindings that match ``acl_filter`` (every binding by default)."""
        resp = await self.request(DESCRIBE_ACLS, acl_filter.fields())
        err = check(resp.error_code, resp.error_message)
        if err:
            raise err
        return [_binding(a, r) for r in resp.resources for a in r.acls]

    async def delete_acls(
        self, filters: Iterable[AclFilter], *, raise_errors: bool = True
    ) -> dict[AclFilter, list[AclBinding] | KafkaError]:
        """Delete the bindings each filter matches; returns them per filter."""
        filters = list(filters)
        resp = await self.request(DELETE_ACLS, {"filters": [f.fields() for f in filters]})
        out: dict[AclFilter, list[AclBinding] | KafkaError] = {}
        for f, r in zip(filters, resp.filter_results):
            err = check(r.error_code, r.error_message)
            out[f] = err if err else [_binding(m) for m in r.matching_acls]
        return _finish(out, raise_errors)

    # -- client quotas -------------------------------------------------------------------------
    # An entity is a tuple of (entity type, name) pairs, name None for <default>: (("user", "alice"),),
    # (("client-id", "app"), ("user", None)); types user, client-id, ip (and Shoal's tenant).

    async def describe_client_quotas(
        self, components: Iterable[tuple[str, int, str | None]] = (), *, strict: bool = False
    ) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
        """The quotas of the entities a filter matches: ``(entity type, MATCH_EXACT|MATCH_DEFAULT|
        MATCH_ANY, name or None)`` per component; ``strict``: entities with no other type."""
        resp = await self.request(DESCRIBE_CLIENT_QUOTAS, {
            "components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
            "strict": strict,
        })
        err = check(resp.error_code, resp.error_message)
        if err:
            raise err
        return {
            tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {v.key: v.value for v in entry.values}
            for entry in resp.entries or ()
        }

    async def alter_client_quotas(
        self,
        alterations: Iterable[tuple[Iterable[tuple[str, str | None]], Mapping[str, float | None]]],
        *,
        validate_only: bool = False,
        raise_errors: bool = True,
    ) -> dict[tuple[tuple[str, str | None], ...], None | KafkaError]:
        """Set (a value) or remove (None) quota keys per entity; each entity maps to None or its
        error (INVALID_REQUEST, CLUSTER_AUTHORIZATION_FAILED, ...)."""
        items = [(tuple((t, n) for t, n in entity), dict(ops)) for entity, ops in alterations]
        resp = await self.request(ALTER_CLIENT_QUOTAS, {
            "entries": [
                {
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                    "ops": [{"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                            for k, v in ops.items()],
                }
                for entity, ops in items
            ],
            "validate_only": validate_only,
        })
        out: dict[tuple[tuple[str, str | None], ...], None | KafkaError] = {}
        for (entity, _ops), r in zip(items, resp.entries):
            out[tuple(sorted(entity))] = check(r.error_code, r.error_message, str(dict(entity)))
        return _finish(out, raise_errors)

    # -- features (KIP-584) ----------------------------------------------------------------------

    async def describe_features(self) -> FeatureMetadata:
        """The broker's supported feature ranges and the cluster's finalized levels (ApiVersions
        v3+, as Kafka's Admin.describeFeatures)."""
        from shoal.net import requests

        resp = await self.request(API_VERSIONS, requests.api_versions(3, "shoal-admin"))
        err = check(resp.error_code)
        if err:
            raise err
        return FeatureMetadata(
            supported={f.name: (int(f.min_version), int(f.max_version)) for f in resp.supported_features},
            finalized={f.name: int(f.max_version_level) for f in resp.finalized_features},
            epoch=int(resp.finalized_features_epoch),
        )

    async def update_features(self, updates: Mapping[str, tuple[int, int]], *, validate_only: bool = False) -> None:
        """Finalize ``{feature: (level, upgrade type)}`` (1 upgrade, 2 safe downgrade, 3 unsafe
        downgrade), all or none; KafkaError (INVALID_UPDATE_VERSION, CLUSTER_AUTHORIZATION_FAILED)."""
        resp = await self.request(UPDATE_FEATURES, {
            "timeout": datetime.timedelta(milliseconds=int(self.timeout * 1000)),
            "feature_updates": [{"feature": n, "max_version_level": level, "upgrade_type": kind,
                                 "allow_downgrade": kind != 1} for n, (level, kind) in updates.items()],
            "validate_only": validate_only,
        })
        err = check(resp.error_code, resp.error_message)
        if err:
            raise err

    # -- partitions ----------------------------------------------------------------------------

    async def _leaders(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int | KafkaError]:
        partitions = list(partitions)
        md = await self.metadata(sorted({t for t, _ in partitions}))
        out: dict[tuple[str, int], int | KafkaError] = {}
        for t, p in partitions:
            desc = md.topics.get(t)
            if isinstance(desc, KafkaError) or desc is None:
                out[(t, p)] = desc or KafkaError("UNKNOWN_TOPIC_OR_PARTITION", None, t)
                continue
            match = [d for d in desc.partitions if d.partition == p]
            if not match:
                out[(t, p)] = KafkaError("UNKNOWN_TOPIC_OR_PARTITION", None, f"{t}-{p}")
            elif match[0].leader < 0:
                out[(t, p)] = KafkaError("LEADER_NOT_AVAILABLE", None, f"{t}-{p}")
            else:
                out[(t, p)] = match[0].leader
        return out

    async def list_offsets(
        self,
        requests: Mapping[tuple[str, int], int],
        *,
        isolation_level: int = 0,
        raise_errors: bool = True,
    ) -> dict[tuple[str, int], tuple[int, int] | KafkaError]:
        """``{(topic, partition): timestamp}`` (or LATEST / EARLIEST / MAX_TIMESTAMP) to
        ``{(topic, partition): (offset, timestamp)}``; offset -1 when no record matches."""
        leaders = await self._leaders(requests)
        out: dict[tuple[str, int], tuple[int, int] | KafkaError] = {}
        by_node: dict[int, dict[str, list[dict[str, Any]]]] = {}
        for tp, ts in requests.items():
            leader = leaders[tp]
            if isinstance(leader, KafkaError):
                out[tp] = leader
                continue
            by_node.setdefault(leader, {}).setdefault(tp[0], []).append(
                {"partition_index": tp[1], "current_leader_epoch": -1, "timestamp": ts, "max_num_offsets": 1}
            )
        for node, topics in by_node.items():
            resp = await self.request(
                LIST_OFFSETS,
                {
                    "replica_id": -1,
                    "isolation_level": isolation_level,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                    "timeout": int(self.timeout * 1000),
                },
                node_id=node,
            )
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.name, int(p.partition_index))
                    err = check(p.error_code, None, f"{t.name}-{p.partition_index}")
                    if err:
                        out[tp] = err
                    elif hasattr(p, "offset"):
                        out[tp] = (int(p.offset), int(p.timestamp))
                    else:  # v0
                        offs = list(getattr(p, "old_style_offsets", ()))
                        out[tp] = (int(offs[0]) if offs else -1, -1)
        return _finish(out, raise_errors)

    async def delete_records(
        self, before: Mapping[tuple[str, int], int], *, timeout_ms: int = 30000, raise_errors: bool = True
    ) -> dict[tuple[str, int], int | KafkaError]:
        """Delete records below ``before[(topic, partition)]`` (-1: the high watermark); returns
        each partition's new low watermark."""
        leaders = await self._leaders(before)
        out: dict[tuple[str, int], int | KafkaError] = {}
        by_node: dict[int, dict[str, list[dict[str, Any]]]] = {}
        for tp, offset in before.items():
            leader = leaders[tp]
            if isinstance(leader, KafkaError):
                out[tp] = leader
                continue
            by_node.setdefault(leader, {}).setdefault(tp[0], []).append(
                {"partition_index": tp[1], "offset": offset}
            )
        for node, topics in by_node.items():
            resp = await self.request(
                DELETE_RECORDS,
                {
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                    "timeout": timeout_ms,
                },
                node_id=node,
            )
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.name, int(p.partition_index))
                    err = check(p.error_code, None, f"{t.name}-{p.partition_index}")
                    out[tp] = err if err else int(p.low_watermark)
        return _finish(out, raise_errors)

    # -- consumer groups -----------------------------------------------------------------------
    # Sent to the group's coordinator (FindCoordinator), as Kafka's admin client does. OffsetFetch
    # and OffsetCommit stay at v9, the last versions that name topics (v10 names them by id).

    async def find_coordinator(self, group_id: str, key_type: int = COORDINATOR_GROUP) -> tuple[int, str, int]:
        """(node id, host, port) of ``group_id``'s coordinator (a transactional id's with
        ``key_type=COORDINATOR_TRANSACTION``); later requests reach it."""
        v = self.version_for(FIND_COORDINATOR)
        resp = await self.request(
            FIND_COORDINATOR, {"key": group_id, "key_type": key_type, "coordinator_keys": [group_id]}
        )
        row = resp.coordinators[0] if v >= 4 else resp
        err = check(row.error_code, getattr(row, "error_message", None), group_id)
        if err:
            raise err
        node = (int(row.node_id), row.host, int(row.port))
        self._brokers[node[0]] = (node[1], node[2])
        return node

    async def list_groups(self) -> list[GroupListing]:
        """Every group of every broker (each lists the groups it coordinates), by id."""
        md = await self.metadata(topics=[])
        found: dict[str, GroupListing] = {}
        for node in sorted(md.brokers) or [None]:
            resp = await self.request(LIST_GROUPS, {"states_filter": [], "types_filter": []}, node_id=node)
            err = check(resp.error_code, None, f"ListGroups on broker {node}")
            if err:
                raise err
            for g in resp.groups:
                found[g.group_id] = GroupListing(
                    g.group_id, g.protocol_type, getattr(g, "group_state", ""), getattr(g, "group_type", "")
                )
        return [found[k] for k in sorted(found)]

    async def describe_group(self, group_id: str) -> GroupDescription:
        """One group: ConsumerGroupDescribe first (KIP-848), DescribeGroups when it is not one;
        a group that does not exist is state ``Dead`` without members, as Kafka reports it."""
        coordinator = await self.find_coordinator(group_id)
        node = coordinator[0]
        if CONSUMER_GROUP_DESCRIBE in self._conn().versions:
            resp = await self.request(
                CONSUMER_GROUP_DESCRIBE, {"group_ids": [group_id], "include_authorized_operations": False},
                node_id=node,
            )
            g = resp.groups[0]
            err = check(g.error_code, g.error_message, group_id)
            if err is None:
                members = tuple(
                    GroupMember(
                        m.member_id, m.instance_id, m.client_id, m.client_host,
                        tuple(sorted((t.topic_name, int(p)) for t in m.assignment.topic_partitions
                                     for p in t.partitions)),
                    )
                    for m in g.members
                )
                return GroupDescription(group_id, "consumer", g.group_state, "consumer", g.assignor_name,
                                        coordinator, members, int(g.group_epoch))
            if err.code_name not in ("GROUP_ID_NOT_FOUND", "UNSUPPORTED_VERSION"):
                raise err
        resp = await self.request(
            DESCRIBE_GROUPS, {"groups": [group_id], "include_authorized_operations": False}, node_id=node
        )
        g = resp.groups[0]
        err = check(g.error_code, getattr(g, "error_message", None), group_id)
        if err is not None and err.code_name != "GROUP_ID_NOT_FOUND":
            raise err
        state = "Dead" if err is not None else g.group_state
        members = tuple(
            GroupMember(
                m.member_id, getattr(m, "group_instance_id", None), m.client_id, m.client_host,
                consumer_assignment(bytes(m.member_assignment)) if g.protocol_type == "consumer" else (),
            )
            for m in g.members
        )
        return GroupDescription(group_id, "classic", state, g.protocol_type, g.protocol_data, coordinator, members)

    async def fetch_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets, every topic (partitions never committed left out)."""
        node = (await self.find_coordinator(group_id))[0]
        resp = await self.request(
            OFFSET_FETCH,
            {
                "group_id": group_id, "topics": None, "require_stable": False,
                "groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1, "topics": None}],
            },
            node_id=node, max_version=9,
        )
        found = resp.groups[0] if hasattr(resp, "groups") else resp
        err = check(getattr(found, "error_code", 0), None, group_id)
        if err:
            raise err
        out: dict[tuple[str, int], int] = {}
        for t in found.topics:
            for p in t.partitions:
                err = check(p.error_code, None, f"{t.name}-{p.partition_index}")
                if err:
                    raise err
                if int(p.committed_offset) >= 0:
                    out[(t.name, int(p.partition_index))] = int(p.committed_offset)
        return out

    async def commit_offsets(
        self, group_id: str, offsets: Mapping[tuple[str, int], int], *, raise_errors: bool = True
    ) -> dict[tuple[str, int], None | KafkaError]:
        """Commit ``offsets`` for ``group_id`` as an admin (no member, generation -1): the group
        must have no members (else UNKNOWN_MEMBER_ID, as Kafka)."""
        node = (await self.find_coordinator(group_id))[0]
        topics: dict[str, list[dict[str, Any]]] = {}
        for (t, p), o in sorted(offsets.items()):
            topics.setdefault(t, []).append({
                "partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                "commit_timestamp": -1, "committed_metadata": "",
            })
        resp = await self.request(
            OFFSET_COMMIT,
            {
                "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "retention_time": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            },
            node_id=node, max_version=9,
        )
        out = {
            (t.name, int(p.partition_index)): check(p.error_code, None, f"{t.name}-{p.partition_index}")
            for t in resp.topics for p in t.partitions
        }
        return _finish(out, raise_errors)

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, None | KafkaError]:
        """Delete groups (each must have no members: else NON_EMPTY_GROUP)."""
        out: dict[str, None | KafkaError] = {}
        for gid in group_ids:
            try:
                node = (await self.find_coordinator(gid))[0]
            except KafkaError as e:
                out[gid] = e
                continue
            resp = await self.request(DELETE_GROUPS, {"groups_names": [gid]}, node_id=node)
            for r in resp.results:
                out[r.group_id] = check(r.error_code, None, r.group_id)
        return out

    async def delete_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], None | KafkaError]:
        """OffsetDelete: forget the group's committed offsets of ``partitions`` (refused per topic
        with GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to it); a group-level error raises."""
        node = (await self.find_coordinator(group_id))[0]
        topics: dict[str, list[dict[str, int]]] = {}
        for t, p in sorted(set(partitions)):
            topics.setdefault(t, []).append({"partition_index": p})
        resp = await self.request(
            OFFSET_DELETE,
            {"group_id": group_id, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            node_id=node,
        )
        err = check(resp.error_code, None, group_id)
        if err:
            raise err
        return {
            (t.name, int(p.partition_index)): check(p.error_code, None, f"{t.name}-{p.partition_index}")
            for t in resp.topics for p in t.partitions
        }

    # -- replicas: reassignment (KIP-455) and leader election (KIP-460) -------------------------

    async def alter_partition_reassignments(
        self, targets: Mapping[tuple[str, int], "list[int] | None"], timeout_ms: int = 30000
    ) -> dict[tuple[str, int], None | KafkaError]:
        """Start (target replicas) or cancel (None) reassignments; per partition None or the error.
        A request-level error (authorization) raises."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for (t, p), replicas in targets.items():
            topics.setdefault(t, []).append({"partition_index": p, "replicas": replicas})
        resp = await self.request(ALTER_PARTITION_REASSIGNMENTS, {"timeout": timeout_ms, "topics": [
            {"name": t, "partitions": ps} for t, ps in topics.items()]})
        err = check(resp.error_code, resp.error_message)
        if err:
            raise err
        return {(t.name, int(p.partition_index)): check(p.error_code, p.error_message, f"{t.name}-{p.partition_index}")
                for t in resp.responses for p in t.partitions}

    async def list_partition_reassignments(
        self, partitions: Iterable[tuple[str, int]] | None = None, timeout_ms: int = 30000
    ) -> dict[tuple[str, int], dict[str, list[int]]]:
        """Ongoing reassignments (of ``partitions``, or all): ``{"replicas", "adding", "removing"}``."""
        topics = None if partitions is None else [
            {"name": t, "partition_indexes": ps} for t, ps in _by_topic(partitions).items()]
        resp = await self.request(LIST_PARTITION_REASSIGNMENTS, {"timeout": timeout_ms, "topics": topics})
        err = check(resp.error_code, resp.error_message)
        if err:
            raise err
        return {(t.name, int(p.partition_index)): {"replicas": list(p.replicas), "adding": list(p.adding_replicas),
                                                   "removing": list(p.removing_replicas)}
                for t in resp.topics for p in t.partitions}

    async def elect_leaders(
        self, election_type: int, partitions: Iterable[tuple[str, int]] | None = None, timeout_ms: int = 30000
    ) -> dict[tuple[str, int], None | KafkaError]:
        """ElectLeaders (0 preferred, 1 unclean) for ``partitions`` (None: every partition); per
        partition None or the error (ELECTION_NOT_NEEDED when the leader is already the one)."""
        topics = None if partitions is None else [
            {"topic": t, "partitions": ps} for t, ps in _by_topic(partitions).items()]
        resp = await self.request(ELECT_LEADERS, {"election_type": election_type, "topic_partitions": topics,
                                                  "timeout": timeout_ms})
        err = check(resp.error_code)
        if err:
            raise err
        return {(r.topic, int(p.partition_id)): check(p.error_code, p.error_message, f"{r.topic}-{p.partition_id}")
                for r in resp.replica_election_results for p in r.partition_result}


    # -- transactions (kafka-transactions.sh's admin calls) ------------------------------------

    async def list_transactions(
        self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), duration_ms: int = -1
    ) -> list[TransactionListing]:
        """ListTransactions on every broker (each lists the transactional ids it coordinates),
        filtered by state names, producer ids and (v1+) a minimum running time; sorted by id."""
        md = await self.metadata(topics=[])
        out: list[TransactionListing] = []
        for node in sorted(md.brokers) or [None]:
            resp = await self.request(
                LIST_TRANSACTIONS,
                {"state_filters": list(states), "producer_id_filters": list(producer_ids),
                 "duration_filter": duration_ms, "transactional_id_pattern": None},
                node_id=node,
            )
            err = check(resp.error_code, None, f"ListTransactions on broker {node}")
            if err:
                raise err
            for t in resp.transaction_states:
                out.append(TransactionListing(t.transactional_id, int(t.producer_id), t.transaction_state,
                                              -1 if node is None else node))
        return sorted(out, key=lambda t: (t.transactional_id, t.coordinator_id))

    async def describe_transactions(
        self, transactional_ids: Iterable[str], *, raise_errors: bool = True
    ) -> dict[str, TransactionDescription | KafkaError]:
        """Each id's transaction from its coordinator (FindCoordinator with key type 1, then
        DescribeTransactions there). An unknown id: TRANSACTIONAL_ID_NOT_FOUND."""
        out: dict[str, TransactionDescription | KafkaError] = {}
        by_node: dict[int, list[str]] = {}
        for tid in transactional_ids:
            try:
                node = (await self.find_coordinator(tid, COORDINATOR_TRANSACTION))[0]
            except ConnectionLost:
                raise
            except KafkaError as e:
                out[tid] = e
                continue
            by_node.setdefault(node, []).append(tid)
        for node, ids in by_node.items():
            resp = await self.request(DESCRIBE_TRANSACTIONS, {"transactional_ids": ids}, node_id=node)
            for t in resp.transaction_states:
                err = check(t.error_code, None, t.transactional_id)
                if err:
                    out[t.transactional_id] = err
                    continue
                start = _millis(t.transaction_start_time)
                out[t.transactional_id] = TransactionDescription(
                    t.transactional_id, node, t.transaction_state, int(t.producer_id), int(t.producer_epoch),
                    _millis(t.transaction_timeout), start if start >= 0 else None,
                    tuple(sorted((x.topic, int(p)) for x in t.topics for p in x.partitions)),
                )
        return _finish(out, raise_errors)

    async def describe_producers(
        self, partitions: Iterable[tuple[str, int]], *, broker_id: int | None = None, raise_errors: bool = True
    ) -> dict[tuple[str, int], list[ProducerState] | KafkaError]:
        """The active producers of each partition, asked of its leader (or of ``broker_id``, any
        replica, as ``kafka-transactions.sh describe-producers --broker-id``)."""
        partitions = list(partitions)
        out: dict[tuple[str, int], Any] = {}
        leaders = await self._leaders(partitions) if broker_id is None else {tp: broker_id for tp in partitions}
        for node, tps in _per_node(leaders, out).items():
            resp = await self.request(
                DESCRIBE_PRODUCERS,
                {"topics": [{"name": t, "partition_indexes": ps} for t, ps in _by_topic(tps).items()]},
                node_id=node,
            )
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.name, int(p.partition_index))
                    err = check(p.error_code, p.error_message, f"{t.name}-{p.partition_index}")
                    out[tp] = err or [
                        ProducerState(int(s.producer_id), int(s.producer_epoch), int(s.last_sequence),
                                      int(s.last_timestamp), int(s.coordinator_epoch),
                                      int(s.current_txn_start_offset))
                        for s in p.active_producers
                    ]
        return _finish(out, raise_errors)

    async def write_txn_markers(
        self, partitions: Iterable[tuple[str, int]], producer_id: int, producer_epoch: int,
        coordinator_epoch: int, commit: bool, *, raise_errors: bool = True,
    ) -> dict[tuple[str, int], None | KafkaError]:
        """WriteTxnMarkers (one marker, COMMIT or ABORT) to each partition's leader; per partition
        None or the error. Brokers allow it with ClusterAction on the cluster only."""
        out: dict[tuple[str, int], None | KafkaError] = {}
        for node, tps in _per_node(await self._leaders(partitions), out).items():
            resp = await self.request(WRITE_TXN_MARKERS, {"markers": [{
                "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
                "coordinator_epoch": coordinator_epoch,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in _by_topic(tps).items()],
            }]}, node_id=node)
            for m in resp.markers:
                for t in m.topics:
                    for p in t.partitions:
                        out[(t.name, int(p.partition_index))] = check(
                            p.error_code, None, f"{t.name}-{p.partition_index}")
        return _finish(out, raise_errors)

    async def abort_transaction(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> None:
        """Abort a hanging transaction of one partition: an ABORT marker written to its leader, as
        Kafka's ``Admin.abortTransaction`` (a coordinator epoch below 0 is sent as 0, as
        kafka-transactions.sh does). Raises the partition's error."""
        got = await self.write_txn_markers([(topic, partition)], producer_id, producer_epoch,
                                           max(0, coordinator_epoch), commit=False, raise_errors=False)
        err = got.get((topic, partition), KafkaError("UNKNOWN_SERVER_ERROR", "no answer for the partition",
                                                     f"{topic}-{partition}"))
        if err is not None:
            raise err


def _compact_str(buf: bytes, pos: int) -> tuple[str | None, int]:
    n, pos = uvarint(buf, pos)
    if n == 0:
        return None, pos
    return buf[pos:pos + n - 1].decode(), pos + n - 1


def _decode_describe_transactions(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """DescribeTransactions v0 by hand: kio's reader refuses the start time -1 Kafka sends for an
    id without a transaction (Empty, Complete*, or not found). Times stay plain milliseconds."""
    frame = bytes(frame)
    (correlation_id,) = _I32.unpack_from(frame, 0)
    pos = skip_tags(frame, 4)
    (throttle,) = _I32.unpack_from(frame, pos)
    n, pos = uvarint(frame, pos + 4)
    states = []
    for _ in range(max(0, n - 1)):
        (error_code,) = struct.unpack_from(">h", frame, pos)
        tid, pos = _compact_str(frame, pos + 2)
        state, pos = _compact_str(frame, pos)
        timeout, start, pid, epoch = struct.unpack_from(">iqqh", frame, pos)
        m, pos = uvarint(frame, pos + 22)
        topics = []
        for _ in range(max(0, m - 1)):
            topic, pos = _compact_str(frame, pos)
            k, pos = uvarint(frame, pos)
            parts = struct.unpack_from(f">{max(0, k - 1)}i", frame, pos)
            pos = skip_tags(frame, pos + 4 * max(0, k - 1))
            topics.append(types.SimpleNamespace(topic=topic, partitions=parts))
        pos = skip_tags(frame, pos)
        states.append(types.SimpleNamespace(
            error_code=error_code, transactional_id=tid, transaction_state=state, transaction_timeout=timeout,
            transaction_start_time=start, producer_id=pid, producer_epoch=epoch, topics=tuple(topics)))
    return correlation_id, types.SimpleNamespace(throttle_time=throttle, transaction_states=tuple(states))


_DECODERS = {DESCRIBE_TRANSACTIONS: _decode_describe_transactions}

def _per_node(leaders: Mapping[tuple[str, int], "int | KafkaError"],
              failed: dict[tuple[str, int], Any]) -> dict[int, list[tuple[str, int]]]:
    """Partitions by the node to ask; those without one go into ``failed`` with their error."""
    by_node: dict[int, list[tuple[str, int]]] = {}
    for tp, node in leaders.items():
        if isinstance(node, KafkaError):
            failed[tp] = node
        else:
            by_node.setdefault(node, []).append(tp)
    return by_node


def _millis(value: Any) -> int:
    """A kio timedelta or datetime (or plain int) as Kafka's milliseconds."""
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return int(round(value.timestamp() * 1000))
    return int(value)


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in partitions:
        out.setdefault(t, []).append(p)
    return out


def _finish(out: dict, raise_errors: bool) -> dict:
    if raise_errors:
        for v in out.values():
            if isinstance(v, KafkaError):
                raise v
    return out
