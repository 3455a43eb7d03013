"""Broker and topic configuration, with Kafka's names, types, validators, defaults and synonyms.

Layers, highest precedence first (as Kafka's ``DynamicBrokerConfig``):
  DYNAMIC_BROKER_CONFIG          this broker's dynamic values (``MetadataImage.broker_overrides``)
  DYNAMIC_DEFAULT_BROKER_CONFIG  cluster-wide dynamic values (``MetadataImage.broker_configs``)
  STATIC_BROKER_CONFIG           the properties file and command-line overrides
  DEFAULT_CONFIG                 the definitions below
A topic config resolves to the topic's own override (DYNAMIC_TOPIC_CONFIG), else its broker
fallback (``retention.ms`` <- ``log.retention.ms``), resolved through those layers.

Synonym groups resolve in order inside each layer, e.g. ``log.retention.ms`` > ``.minutes`` >
``.hours``: a dynamic ``log.retention.hours`` beats a static ``log.retention.ms`` (Kafka removes the
static synonyms of a dynamic key), a static ``log.retention.ms`` beats a static ``.hours``.

Deliberate deviations from Kafka:
- ``node.id`` defaults to 1 (Kafka: required in KRaft); ``broker.id`` is its alias and must agree.
- ``log.dir`` defaults to ``./data``; ``listeners`` to ``PLAINTEXT://127.0.0.1:9092``;
  ``offsets.topic.replication.factor`` and ``transaction.state.log.replication.factor`` to 1 on one
  node; on an etcd cluster an unset ``offsets.topic.replication.factor`` is Kafka's 3.
- A per-broker dynamic config (resource name = node id) may set the same keys as the
  cluster-wide default (``ConfigDef.dynamic``); Kafka's per-broker-only keys (listeners, SSL
  keystores) are not dynamic here.
- ``group.initial.rebalance.delay.ms`` defaults to 500 (Kafka: 3000), so a new group's first member
  consumes within a second; members starting together still land in one generation.
- DescribeConfigs on a broker shows the *resolved* value of a synonym group's primary name
  (Kafka shows ``log.retention.ms=null`` when only ``.hours`` is set), and topic configs list
  every broker synonym that has a value (Kafka's ``dropWhile`` hides e.g. ``log.retention.hours``).
- Tiered-storage and deprecated message-format topic configs are not known.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Mapping

if TYPE_CHECKING:
    from shoal.storage import LogConfig

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
SHORT_MAX = 2**15 - 1
SHORT_MIN = -(2**15)


class ConfigError(Exception):
    """A configuration Kafka would refuse. ``code`` is the Kafka error name (INVALID_CONFIG, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ConfigSource(enum.IntEnum):
    """DescribeConfigs' ``config_source`` values, as DescribeConfigsResponse.json numbers them."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    DYNAMIC_CLIENT_METRICS_CONFIG = 7
    DYNAMIC_GROUP_CONFIG = 8


class ConfigType(enum.IntEnum):
    """DescribeConfigs' ``config_type`` values."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


_TYPE_IDS = {
    "boolean": ConfigType.BOOLEAN,
    "string": ConfigType.STRING,
    "int": ConfigType.INT,
    "short": ConfigType.SHORT,
    "long": ConfigType.LONG,
    "double": ConfigType.DOUBLE,
    "list": ConfigType.LIST,
    "class": ConfigType.CLASS,
    "password": ConfigType.PASSWORD,
}

Validator = Callable[[str, Any], None]


# ---------------------------------------------------------------------------------------------
# Types and validators (Kafka's ConfigDef.parseType / Range / ValidString / ValidList)


def _invalid(name: str, value: Any, why: str | None = None) -> ConfigError:
    text = f"Invalid value {value} for configuration {name}"
    return ConfigError("INVALID_CONFIG", text + (f": {why}" if why else ""))


def parse_value(name: str, type_: str, raw: Any) -> Any:
    """A typed value from its string form, as Kafka's ``ConfigDef.parseType`` does."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        return raw
    s = raw.strip()
    if type_ == "boolean":
        low = s.lower()
        if low == "true":
            return True
        if low == "false":
            return False
        raise _invalid(name, raw, "Expected value to be either true or false")
    if type_ in ("int", "long", "short"):
        lo, hi = {"int": (INT_MIN, INT_MAX), "long": (LONG_MIN, LONG_MAX), "short": (SHORT_MIN, SHORT_MAX)}[type_]
        if not re.fullmatch(r"[+-]?\d+", s):
            raise _invalid(name, raw, f"Not a number of type {type_.upper()}")
        v = int(s)
        if not lo <= v <= hi:
            raise _invalid(name, raw, f"Not a number of type {type_.upper()}")
        return v
    if type_ == "double":
        try:
            return float(s)
        except ValueError:
            raise _invalid(name, raw, "Not a number of type DOUBLE") from None
    if type_ == "list":
        if not s:
            return ()
        return tuple(p.strip() for p in s.split(","))
    return s  # string, password, class


def format_value(type_: str, value: Any) -> str | None:
    """A typed value back to its string form (Kafka's ``ConfigDef.convertToString``)."""
    if value is None:
        return None
    if type_ == "boolean":
        return "true" if value else "false"
    if type_ == "list":
        return ",".join(value)
    if type_ == "double":
        return repr(float(value))
    return str(value)


def at_least(lo: float) -> Validator:
    def check(name: str, v: Any) -> None:
        if v is None:
            raise _invalid(name, v, "Value must be non-null")
        if v < lo:
            raise _invalid(name, v, f"Value must be at least {lo}")

    return check


def between(lo: float, hi: float) -> Validator:
    def check(name: str, v: Any) -> None:
        if v is None:
            raise _invalid(name, v, "Value must be non-null")
        if v < lo or v > hi:
            raise _invalid(name, v, f"Value must be no less than {lo} and no more than {hi}")  # noqa

    return check


def one_of(*allowed: str, case_sensitive: bool = True) -> Validator:
    norm = {a if case_sensitive else a.lower() for a in allowed}

    def check(name: str, v: Any) -> None:
        key = v if case_sensitive or v is None else v.lower()
        if key not in norm:
            raise _invalid(name, v, f"String must be one of: {', '.join(allowed)}")

    return check


def _metadata_store(name: str, v: Any) -> None:
    if v == "embedded":
        return
    from shoal.etcd.client import parse_url

    try:
        parse_url(str(v))
    except ValueError as e:
        raise _invalid(name, v, f"embedded or etcd[s]://HOST:PORT[,HOST:PORT...][/PREFIX] ({e})") from None


def list_of(*allowed: str, allow_empty: bool = True) -> Validator:
    def check(name: str, v: Any) -> None:
        if not v and not allow_empty:
            raise _invalid(name, ",".join(v or ()), "Empty list")
        for item in v or ():
            if item not in allowed:
                raise _invalid(name, ",".join(v), f"String must be one of: {', '.join(allowed)}")

    return check


def _broker_ids(name: str, v: Any) -> None:
    for item in v or ():
        if not re.fullmatch(r"\d+", item):
            raise _invalid(name, ",".join(v), f"{item!r} is not a broker id")


def _int_or_range(default_ok: int, lo: int, hi: int) -> Validator:
    def check(name: str, v: Any) -> None:
        if v != default_ok and not lo <= v <= hi:
            raise _invalid(name, v, f"Value must be {default_ok} or between {lo} and {hi}")

    return check


def _throttled_replicas(name: str, v: Any) -> None:
    items = list(v or ())
    if items == ["*"]:
        return
    for item in items:
        if not re.fullmatch(r"\d+:\d+", item):
            raise _invalid(
                name,
                ",".join(items),
                "must be the literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
            )


COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


# ---------------------------------------------------------------------------------------------
# Definitions


class _TypedDef:
    """What broker and topic config definitions share: a typed, validated value."""

    __slots__ = ()
    name: str
    type: str
    validator: "Validator | None"

    @property
    def sensitive(self) -> bool:
        return self.type == "password"

    @property
    def config_type(self) -> ConfigType:
        return _TYPE_IDS[self.type]

    def parse(self, raw: Any) -> Any:
        value = parse_value(self.name, self.type, raw)
        if self.validator is not None and value is not None:
            self.validator(self.name, value)
        return value


@dataclass(frozen=True, slots=True)
class ConfigDef(_TypedDef):
    name: str
    type: str  # int long short double boolean string list password class
    default: Any  # typed; None = no default
    doc: str
    validator: Validator | None = None
    dynamic: bool = False  # may be changed cluster-wide at run time (AlterConfigs on broker "")



def _d(name, type_, default, doc, validator=None, dynamic=False) -> ConfigDef:
    return ConfigDef(name, type_, default, doc, validator, dynamic)


def _placement(name: str, v: Any) -> None:
    """A ``replica.placement`` value: empty/unset, or a valid placement-constraints JSON."""
    if v is None or v == "":
        return
    from shoal.placement.constraints import PlacementSpecError, parse_placement

    try:
        parse_placement(v)
    except PlacementSpecError as e:
        raise _invalid(name, v, e.message) from None


RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
_SELECTOR_KINDS = {RACK_AWARE_SELECTOR: "rack-aware", "rack-aware": "rack-aware", LEADER_SELECTOR: "leader",
                   "leader": "leader"}


def selector_kind(value: str | None) -> str:
    """``rack-aware`` or ``leader`` for a ``replica.selector.class`` value (None: the default);
    ValueError for anything else. The rules are ``shoal.replica.selector``'s."""
    if value is None or value == "":
        return "rack-aware"
    kind = _SELECTOR_KINDS.get(value.strip())
    if kind is None:
        raise ValueError(f"replica.selector.class={value} is not supported: use {RACK_AWARE_SELECTOR} (rack-aware) "
                         f"or {LEADER_SELECTOR} (leader only)")
    return kind


def _replica_selector(name: str, v: Any) -> None:
    try:
        selector_kind(v)
    except ValueError as e:
        raise _invalid(name, v, str(e)) from None


# Other names of topic (and broker) configs, accepted and stored under the canonical one.
CONFIG_ALIASES: dict[str, str] = {"confluent.placement.constraints": "replica.placement"}


def canonical_config_name(name: str) -> str:
    return CONFIG_ALIASES.get(name, name)


_PROTOCOL_MAP_DEFAULT = "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"

BROKER_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        # -- identity and network
        _d("node.id", "int", 1, "The node ID of this broker.", at_least(0)),
        _d("broker.id", "int", None, "Alias of node.id; when both are set they must be equal."),
        _d("broker.rack", "string", None, "Rack of the broker, used for rack-aware replica placement."),
        _d("broker.host", "string", None,
           "Shoal: the machine this broker runs on. Placement never puts two replicas of a partition on one host "
           "while others are free (after spreading over racks). Default: the host of the first advertised "
           "listener; shoal serve --processes gives all its brokers the same one."),
        _d("replica.selector.class", "string", None,
           "Which replica a consumer with client.rack reads from (KIP-392 follower fetching): "
           "org.apache.kafka.common.replica.RackAwareReplicaSelector (rack-aware, Shoal's default when unset) or "
           "org.apache.kafka.common.replica.LeaderSelector (leader, Kafka's default).", _replica_selector),
        # -- cluster: where the metadata lives (shoal.metadata.etcd, docs/cluster.md)
        _d("shoal.metadata.store", "string", "embedded",
           "Shoal: embedded (one node, the metadata in <log.dirs>/__metadata, no etcd) or "
           "etcd://HOST:PORT[,HOST:PORT...][/PREFIX]: brokers sharing a prefix of an etcd cluster form one "
           "cluster (the prefix defaults to /shoal; several clusters may share one etcd); etcds:// is gRPC over "
           "TLS (shoal.etcd.ssl.*).", _metadata_store),
        # etcd in production (shoal.etcd.security, docs/cluster.md): files, never secrets in the config
        _d("shoal.etcd.ssl.cafile", "string", None,
           "Shoal: with etcds://, a PEM file of the CA certificates that verify the etcd members' certificates "
           "(default: the system's)."),
        _d("shoal.etcd.ssl.certfile", "string", None,
           "Shoal: with etcds://, a PEM client certificate (chain) this broker presents to etcd members that run "
           "with --client-cert-auth (with shoal.etcd.ssl.keyfile)."),
        _d("shoal.etcd.ssl.keyfile", "string", None,
           "Shoal: the unencrypted PEM private key of shoal.etcd.ssl.certfile (protect the file: mode 0600)."),
        _d("shoal.etcd.user", "string", None,
           "Shoal: the etcd user this broker authenticates as (etcd RBAC: its role needs readwrite on the "
           "prefix), with its password in shoal.etcd.password.file."),
        _d("shoal.etcd.password.file", "string", None,
           "Shoal: a file holding the password of shoal.etcd.user (one line; never on a command line)."),
        _d("broker.session.timeout.ms", "int", 9000,
           "How long a broker's registration outlives its last heartbeat (the TTL of its etcd lease, in "
           "whole seconds): a broker that dies leaves Metadata this long after. Kafka's default; shorter "
           "means faster failover but a broker stalled that long (a loaded machine) is dropped.",
           at_least(2000)),
        _d(
            "listeners",
            "string",
            "PLAINTEXT://127.0.0.1:9092",
            "Comma-separated list of URIs (NAME://host:port) the broker listens on. "
            "An empty host binds all interfaces; port 0 picks a free port.",
        ),
        _d(
            "advertised.listeners",
            "string",
            None,
            "Listeners published to clients, if different from the listeners. Defaults to listeners.",
        ),
        _d(
            "listener.security.protocol.map",
            "string",
            _PROTOCOL_MAP_DEFAULT,
            "Map between listener names and security protocols (NAME:PROTOCOL,...).",
        ),
        _d("num.network.threads", "int", 3, "Accepted for compatibility; informational.", at_least(1), True),
        _d("num.io.threads", "int", 8, "Accepted for compatibility; informational.", at_least(1), True),
        _d("queued.max.requests", "int", 500,
           "Requests queued before network reads block. Shoal: per tenant (per principal outside tenants), "
           "in the request scheduler's queue (a broker-wide bound would let one tenant block the others' reads).",
           at_least(1)),
        # -- scheduler (shoal.server.scheduler): fair request processing across tenants
        _d("shoal.request.scheduler.enable", "boolean", True,
           "Shoal: when requests arrive faster than the broker runs them, queue them per tenant and run them "
           "by deficit round robin (false: every request runs as soon as it is read)."),
        _d("shoal.request.scheduler.batch.us", "int", 2000,
           "Shoal: the most time (µs) requests run in one event loop iteration before queued ones wait for the "
           "next, letting sockets, timers and other tenants' requests in between.", at_least(50)),
        _d("shoal.request.scheduler.quantum.us", "int", 500,
           "Shoal: a tenant's turn in the request scheduler's round robin (µs of handling time, times its "
           "weight: its request_percentage / 100 when it has a tenant request quota, else 1).", at_least(10)),
        _d("socket.request.max.bytes", "int", 104857600, "Maximum bytes in a socket request.", at_least(1)),
        # -- per-connection bounds and timeouts (shoal.server.bounds, shoal.server.connection)
        _d("connections.max.idle.ms", "long", 600000,
           "Idle connections (nothing read, no request being handled, nothing written) are closed after "
           "this many ms, checked about every quarter of it (at most 1 s). -1: never."),
        _d("queued.max.request.bytes", "long", 268435456,
           "The number of queued bytes (requests read and not yet answered, broker-wide) allowed before no "
           "more requests are read. Shoal's default is 256 MiB (Kafka's, -1, is unbounded); -1: no limit."),
        _d("shoal.queued.max.request.bytes.per.principal", "long", -1,
           "Shoal: the most of queued.max.request.bytes one owner may hold (a tenant, all its principals "
           "together; else one principal of the physical cluster), counting each frame being read at the "
           "size its length announces. An owner at its share reads no further request until its own are "
           "answered; everyone else reads on. One frame may take an owner past it. -1: a quarter of "
           "queued.max.request.bytes (no limit when that has none)."),
        _d("sasl.server.max.receive.size", "int", 524288,
           "The maximum receive size allowed before and during initial SASL authentication; a larger "
           "frame closes the connection.", at_least(1)),
        _d("shoal.sasl.authentication.timeout.ms", "long", 10000,
           "Shoal: a connection to a SASL listener that has not authenticated this long after connecting "
           "is closed. <= 0: never."),
        _d("shoal.request.read.timeout.ms", "long", 30000,
           "Shoal: a connection that has had one request partly received for this long (a frame started "
           "and not finished: slowloris) is closed. <= 0: never."),
        _d("shoal.connection.queued.response.max.bytes", "long", 4194304,
           "Shoal: a connection stops reading requests while this many bytes of its responses wait to be "
           "sent (the client is not reading them) or wait behind an earlier response, and goes on when "
           "they drain.", at_least(1024)),
        _d("shoal.fetch.zero.copy", "boolean", True,
           "Shoal: on plaintext listeners (SASL_PLAINTEXT included) a Fetch's record sets larger than a "
           "small read are sent from the segment files with sendfile, never read into the broker; TLS "
           "connections copy them. false: copy on every listener (new connections)."),
        # -- connection limits (KIP-402, KIP-612; shoal.server.limits). Listener-level values:
        # listener.name.<listener>.max.connections / .max.connection.creation.rate.
        _d("max.connections", "int", INT_MAX,
           "The maximum number of connections we allow in the broker at any time. This limit is applied in "
           "addition to any per-ip limits configured using max.connections.per.ip. Listener-level limits may "
           "also be configured by prefixing the config name with the listener prefix, for example, "
           "listener.name.internal.max.connections. New connections are blocked if either the listener or "
           "broker limit is reached. Connections on the inter-broker listener are permitted even if the "
           "broker-wide limit is reached; the oldest connection on another listener is closed then.",
           at_least(0), True),
        _d("max.connections.per.ip", "int", INT_MAX,
           "The maximum number of connections we allow from each ip address. This can be set to 0 if there "
           "are overrides configured using max.connections.per.ip.overrides property. New connections from "
           "the ip address are dropped if the limit is reached.", at_least(0), True),
        _d("max.connections.per.ip.overrides", "string", "",
           "A comma-separated list of per-ip or hostname overrides to the default maximum number of "
           "connections. An example value is \"hostName:100,127.0.0.1:200\"", None, True),
        _d("max.connection.creation.rate", "int", INT_MAX,
           "The maximum connection creation rate we allow in the broker at any time. Listener-level limits "
           "may also be configured by prefixing the config name with the listener prefix, for example, "
           "listener.name.internal.max.connection.creation.rate. New connections will be throttled (their "
           "accept delayed) if either the listener or the broker limit is reached, with the exception of "
           "the inter-broker listener, throttled only when its listener-level rate limit is reached.",
           at_least(0), True),
        # -- logs
        _d(
            "log.dirs",
            "string",
            None,
            "Comma-separated directories for the log data. If not set, log.dir is used.",
        ),
        _d("log.dir", "string", "./data", "The directory for the log data (see log.dirs)."),
        _d("num.partitions", "int", 1, "Default number of partitions per topic.", at_least(1)),
        _d("default.replication.factor", "int", 1, "Default replication factor of created topics."),
        _d("replica.placement", "string", "",
           "Default replica.placement of created topics (placement-constraints JSON: replicas and observers per "
           "rack; also accepted as confluent.placement.constraints). Unset: rack-aware placement of "
           "default.replication.factor replicas.", _placement, True),
        _d("auto.create.topics.enable", "boolean", True, "Create topics on first metadata request."),
        _d("max.request.partition.size.limit", "int", 2000,
           "The maximum number of partitions can be served in one request (DescribeTopicPartitions).", at_least(1)),
        _d("delete.topic.enable", "boolean", True, "Allow deleting topics."),
        _d(
            "message.max.bytes",
            "int",
            1048588,
            "The largest record batch size allowed by Kafka (after compression if compression is enabled).",
            at_least(0),
            True,
        ),
        _d(
            "log.segment.bytes",
            "int",
            1073741824,
            "The maximum size of a single log file.",
            at_least(14),
            True,
        ),
        _d("log.roll.ms", "long", None, "Time before a new log segment is rolled out (ms); overrides log.roll.hours.", None, True),
        _d("log.roll.hours", "int", 168, "Time before a new log segment is rolled out (hours).", at_least(1), True),
        _d("log.roll.jitter.ms", "long", None, "Maximum jitter subtracted from segment roll time (ms).", None, True),
        _d("log.roll.jitter.hours", "int", 0, "Maximum jitter subtracted from segment roll time (hours).", at_least(0), True),
        _d("log.retention.ms", "long", None, "Time to keep a log file before deleting it (ms); -1: no limit.", None, True),
        _d("log.retention.minutes", "int", None, "Time to keep a log file before deleting it (minutes).", None, True),
        _d("log.retention.hours", "int", 168, "Time to keep a log file before deleting it (hours).", None, True),
        _d("log.retention.bytes", "long", -1, "Maximum size of the log before deleting it.", None, True),
        _d(
            "log.retention.check.interval.ms",
            "long",
            300000,
            "How often the log cleaner checks whether any log is eligible for deletion.",
            at_least(1),
        ),
        _d("log.index.interval.bytes", "int", 4096, "Interval at which an entry is added to the offset index.", at_least(0), True),
        _d("log.index.size.max.bytes", "int", 10485760, "Maximum size of the offset index in bytes.", at_least(4), True),
        _d(
            "log.message.timestamp.type",
            "string",
            "CreateTime",
            "Whether the timestamp in a message is the message create time or the log append time.",
            one_of("CreateTime", "LogAppendTime"),
            True,
        ),
        _d(
            "log.message.timestamp.before.max.ms",
            "long",
            LONG_MAX,
            "Largest allowed difference between the broker time and an earlier record timestamp.",
            at_least(0),
            True,
        ),
        _d(
            "log.message.timestamp.after.max.ms",
            "long",
            LONG_MAX,
            "Largest allowed difference between a later record timestamp and the broker time.",
            at_least(0),
            True,
        ),
        _d("log.message.downconversion.enable", "boolean", True, "Allow down-conversion of message formats.", None, True),
        _d(
            "log.flush.interval.messages",
            "long",
            LONG_MAX,
            "Number of messages accumulated on a log partition before messages are flushed to disk.",
            at_least(1),
            True,
        ),
        _d(
            "log.flush.interval.ms",
            "long",
            None,
            "Maximum time a message stays in memory before being flushed (ms); "
            "if not set, log.flush.scheduler.interval.ms is used.",
            None,
            True,
        ),
        _d(
            "log.flush.scheduler.interval.ms",
            "long",
            LONG_MAX,
            "How often the log flusher checks whether any log needs to be flushed.",
            None,
            True,
        ),
        _d(
            "log.cleanup.policy",
            "list",
            ("delete",),
            "The default cleanup policy for segments beyond the retention window (delete, compact).",
            list_of("compact", "delete"),
            True,
        ),
        _d("log.segment.delete.delay.ms", "long", 60000, "Time to wait before deleting a file.", at_least(0), True),
        _d("log.preallocate", "boolean", False, "Preallocate the file when creating a segment.", None, True),
        _d("log.cleaner.delete.retention.ms", "long", 86400000, "Time to retain delete tombstones on compacted topics.", at_least(0), True),
        _d("log.cleaner.min.compaction.lag.ms", "long", 0, "Minimum time a message stays uncompacted.", at_least(0), True),
        _d("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, "Maximum time a message stays uncompacted.", at_least(1), True),
        _d("log.cleaner.min.cleanable.ratio", "double", 0.5, "Minimum dirty ratio of a log to be cleaned.", between(0, 1), True),
        _d("min.insync.replicas", "int", 1, "Minimum replicas that must acknowledge an acks=all write.", at_least(1), True),
        _d("min.insync.racks", "int", 1, "Shoal (Kafka has only the proposal KIP-1290): minimum racks (broker.rack) the "
           "in-sync replicas holding an acks=all write must span; 1: off.", at_least(1), True),
        _d("unclean.leader.election.enable", "boolean", False, "Allow out-of-ISR replicas to become leader.", None, True),
        _d(
            "compression.type",
            "string",
            "producer",
            "Final compression type for a topic (uncompressed, zstd, lz4, snappy, gzip, producer).",
            one_of(*COMPRESSION_TYPES),
            True,
        ),
        _d("compression.gzip.level", "int", -1, "Compression level for gzip.", _int_or_range(-1, 1, 9), True),
        _d("compression.lz4.level", "int", 9, "Compression level for lz4.", between(1, 17), True),
        _d("compression.zstd.level", "int", 3, "Compression level for zstd.", between(-131072, 22), True),
        # -- groups, offsets, fetch
        # Deviation: Kafka's default is 3000. A new group's first member then waits 3 s before it
        # can consume; 500 ms still gathers members that start together (the delay is extended
        # by another 500 ms, up to the rebalance timeout, each time a new member arrived in it).
        _d(
            "group.initial.rebalance.delay.ms",
            "int",
            500,
            "Delay of the first rebalance of a new group (extended while new members keep joining).",
            at_least(0),
        ),
        _d("group.min.session.timeout.ms", "int", 6000, "Minimum allowed session timeout of members."),
        _d("group.max.session.timeout.ms", "int", 1800000, "Maximum allowed session timeout of members."),
        _d("offsets.topic.replication.factor", "short", 1, "Replication factor of the offsets topic.", at_least(1)),
        _d("offsets.topic.num.partitions", "int", 50, "Number of partitions of the offsets topic.", at_least(1)),
        _d("offsets.retention.minutes", "int", 10080, "Retention of committed offsets of empty groups.", at_least(1)),
        _d("transaction.state.log.replication.factor", "short", 1, "Replication factor of the transaction topic.", at_least(1)),
        _d("transaction.state.log.num.partitions", "int", 50, "Number of partitions of the transaction topic.", at_least(1)),
        _d("transaction.state.log.min.isr", "int", 2, "min.insync.replicas of the transaction topic (capped by its replication factor).", at_least(1)),
        _d("transaction.state.log.segment.bytes", "int", 104857600, "Segment size of the transaction topic.", at_least(1)),
        _d("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
           "How often to abort transactions that timed out.", at_least(1)),
        _d("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000,
           "How often to remove transactional ids that expired.", at_least(1)),
        _d("fetch.max.bytes", "int", 57671680, "Maximum bytes returned for a fetch request.", at_least(1024)),
        _d("replica.fetch.max.bytes", "int", 1048576, "Bytes of messages fetched per partition by followers.", at_least(0)),
        _d(
            "max.incremental.fetch.session.cache.slots",
            "int",
            1000,
            "The maximum number of incremental fetch sessions that we will maintain. Shoal: shared max-min "
            "fairly between tenants (and the physical view): when full, a new session evicts the least recently "
            "used one of the scope holding the most.",
            at_least(0),
        ),
        _d("replica.fetch.wait.max.ms", "int", 500, "Maximum wait time for each fetcher request issued by followers."),
        _d("replica.fetch.min.bytes", "int", 1, "Minimum bytes expected for each follower fetch response."),
        _d("replica.fetch.response.max.bytes", "int", 10485760, "Maximum bytes of one follower fetch response.", at_least(0)),
        _d("replica.fetch.backoff.ms", "int", 1000, "Sleep after a follower fetch error.", at_least(0)),
        _d("replica.lag.time.max.ms", "long", 30000, "A follower not caught up for this long leaves the ISR."),
        _d("replica.socket.timeout.ms", "int", 30000, "Socket timeout for follower requests."),
        _d("num.replica.fetchers", "int", 1, "Number of fetcher threads per source broker.", None, True),
        _d("replica.fetch.max.catchup.partitions", "int", 500,
           "Shoal: partitions this broker fetches at once while they catch up to join the ISR (a restarted "
           "broker rejoining thousands), the least behind first; the others wait their turn. Partitions in the "
           "ISR are always fetched. 0: no cap.", at_least(0), True),
        _d("shoal.replica.fetch.pipeline.depth", "int", 0,
           "Shoal: Fetch requests a follower keeps in flight to one leader (pipelined replication: each answer "
           "carries what came after the one before, so a write reaches a far follower in one round trip, not "
           "up to two). 0: chosen per connection from its measured round trip (1 below "
           "shoal.replica.fetch.pipeline.min.rtt.ms, up to 8 across a WAN link); 1: one at a time, as Kafka.",
           between(0, 16)),
        _d("shoal.replica.fetch.pipeline.min.rtt.ms", "int", 5,
           "Shoal: with shoal.replica.fetch.pipeline.depth 0, a leader this close (round trip in ms) gets one "
           "fetch at a time.", at_least(0)),
        _d("socket.send.buffer.bytes", "int", 102400, "SO_SNDBUF of the socket server sockets; -1: OS default."),
        _d("socket.receive.buffer.bytes", "int", 102400, "SO_RCVBUF of the socket server sockets; -1: OS default."),
        _d("num.recovery.threads.per.data.dir", "int", 2, "Accepted for compatibility; informational.", at_least(1), True),
        _d("log.cleaner.enable", "boolean", True, "Enable the log cleaner for compacted topics."),
        _d("log.cleaner.threads", "int", 1, "Number of log cleaner threads.", at_least(0), True),
        _d("log.cleaner.backoff.ms", "long", 15000, "Sleep when there are no logs to clean.", at_least(0), True),
        # Kafka's cleaner buffers and thread pool sizes, dynamic there (LogCleaner's and
        # DynamicThreadPool's reconfigurable configs): accepted, stored and described so admin
        # tools that set them (librdkafka's 0081 sets background.threads) succeed; Shoal's
        # cleaner and event loop have no such buffers or pool
        _d("log.cleaner.dedupe.buffer.size", "long", 134217728, "Accepted for compatibility; informational.",
           at_least(0), True),
        _d("log.cleaner.io.buffer.size", "int", 524288, "Accepted for compatibility; informational.", at_least(0), True),
        _d("log.cleaner.io.buffer.load.factor", "double", 0.9, "Accepted for compatibility; informational.",
           between(0, 1), True),
        _d("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308,
           "Accepted for compatibility; informational.", at_least(0), True),
        _d("background.threads", "int", 10, "Accepted for compatibility; informational.", at_least(1), True),
        _d("auto.leader.rebalance.enable", "boolean", True, "Move leadership back to preferred replicas."),
        _d("leader.imbalance.check.interval.seconds", "long", 300,
           "How often the controller checks for leaderships away from their preferred replica.", at_least(1)),
        _d("leader.imbalance.per.broker.percentage", "int", 10,
           "The share of a broker's preferred partitions led elsewhere above which they move back.", at_least(0)),
        _d("controlled.shutdown.enable", "boolean", True, "Move leadership away before shutting down."),
        _d("group.max.size", "int", INT_MAX, "Maximum number of members of one consumer group.", at_least(1)),
        _d("group.consumer.session.timeout.ms", "int", 45000, "Session timeout of consumer-protocol members."),
        _d("group.consumer.heartbeat.interval.ms", "int", 5000, "Heartbeat interval of consumer-protocol members."),
        # KIP-848 (shoal.groups.consumer): server-side assignors, first = default; group size cap.
        _d(
            "group.consumer.assignors",
            "list",
            ("uniform", "range"),
            "Server-side assignors of consumer-protocol groups, the first being the default.",
            list_of("uniform", "range", allow_empty=False),
        ),
        _d("group.consumer.max.size", "int", INT_MAX, "Maximum number of members of a consumer-protocol group.", at_least(1)),
        _d(
            "group.coordinator.rebalance.protocols",
            "list",
            ("classic", "consumer"),
            "Rebalance protocols the group coordinator accepts (consumer: KIP-848 ConsumerGroupHeartbeat).",
            list_of("classic", "consumer", allow_empty=False),
        ),
        _d("offsets.commit.timeout.ms", "int", 5000, "Offset commits wait this long for replication.", at_least(1)),
        _d(
            "offsets.retention.check.interval.ms",
            "long",
            600000,
            "How often to check for stale committed offsets.",
            at_least(1),
        ),
        _d("offsets.topic.segment.bytes", "int", 104857600, "Segment size of the offsets topic.", at_least(1)),
        _d("offset.metadata.max.bytes", "int", 4096, "Maximum size of the metadata of an offset commit."),
        _d("transactional.id.expiration.ms", "int", 604800000, "Idle transactional ids expire after this.", at_least(1)),
        _d("transaction.max.timeout.ms", "int", 900000, "Maximum transaction timeout a producer may ask for.", at_least(1)),
        _d("shoal.transaction.version", "int", 2,
           "Shoal: the transaction.version feature level a cluster finalizes when it has none yet (a new "
           "cluster, or one made before feature levels); afterwards the finalized level is the cluster's, "
           "changed with UpdateFeatures (shoal features upgrade|downgrade, kafka-features.sh). 2: KIP-890 part "
           "2 (Produce v12 and TxnOffsetCommit v5 add partitions to the transaction, EndTxn v5 bumps the "
           "epoch); 1 or 0: clients keep transaction version 1.", between(0, 2)),
        _d("producer.id.expiration.ms", "int", 86400000, "Idle producer ids expire after this.", at_least(1), True),
        _d("request.timeout.ms", "int", 30000, "Accepted for compatibility; informational."),
        _d("process.roles", "list", ("broker", "controller"), "Roles of this node (informational: Shoal nodes do both)."),
        _d("controller.listener.names", "list", (), "Accepted for KRaft compatibility; informational."),
        _d("controller.quorum.voters", "list", (), "Accepted for KRaft compatibility; informational."),
        _d("controller.quorum.bootstrap.servers", "list", (), "Accepted for KRaft compatibility; informational."),
        _d("inter.broker.listener.name", "string", None, "Listener used between brokers; defaults to the first one."),
        _d("metadata.log.dir", "string", None, "Accepted for KRaft compatibility; informational."),
        # -- auth: TLS and SASL (shoal.auth). Per listener: listener.name.<name>.<config>.
        _d("ssl.keystore.type", "string", "PEM", "Format of the key store: PEM only (JKS and PKCS12 are refused).",
           one_of("PEM", case_sensitive=False)),
        _d("ssl.keystore.location", "string", None, "PEM file with the server certificate (chain) and its private key."),
        _d("ssl.keystore.password", "password", None, "Accepted for compatibility; a PEM key store has none."),
        _d("ssl.key.password", "password", None, "Password of an encrypted private key."),
        _d("ssl.certificate.location", "string", None,
           "Shoal: PEM certificate (chain) of the server, with ssl.key.location (instead of ssl.keystore.location)."),
        _d("ssl.key.location", "string", None, "Shoal: PEM private key of the server (see ssl.certificate.location)."),
        _d("ssl.truststore.type", "string", "PEM", "Format of the trust store: PEM only.", one_of("PEM", case_sensitive=False)),
        _d("ssl.truststore.location", "string", None, "PEM file of the CA certificates that verify client certificates."),
        _d("ssl.truststore.password", "password", None, "Accepted for compatibility; a PEM trust store has none."),
        _d("ssl.client.auth", "string", "none", "Client certificates: none, requested or required.",
           one_of("none", "requested", "required")),
        _d("ssl.principal.mapping.rules", "string", "DEFAULT",
           "Rules (RULE:pattern/replacement/[LU],...,DEFAULT) mapping a certificate's subject to a user name."),
        _d("ssl.enabled.protocols", "list", ("TLSv1.2", "TLSv1.3"), "TLS versions the broker accepts.",
           list_of("TLSv1.2", "TLSv1.3", allow_empty=False)),
        _d("ssl.cipher.suites", "list", (), "OpenSSL cipher list for TLSv1.2 (empty: OpenSSL's defaults)."),
        _d("sasl.enabled.mechanisms", "list", ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
           "SASL mechanisms the SASL listeners accept (Kafka's default, GSSAPI, is not supported). OAUTHBEARER "
           "needs sasl.oauthbearer.jwks.endpoint.url or the unsecured validator (sasl.server.callback.handler.class).",
           list_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")),
        # -- auth: SASL/OAUTHBEARER (shoal.auth.oauthbearer; KIP-255, KIP-768)
        _d("sasl.server.callback.handler.class", "string", None,
           "OAUTHBEARER's token validator: unset (or Kafka's OAuthBearerValidatorCallbackHandler) validates signed "
           "JWTs against sasl.oauthbearer.jwks.endpoint.url; Kafka's OAuthBearerUnsecuredValidatorCallbackHandler "
           "accepts unsigned tokens (alg none) for development only (anyone can make one for any name).",
           one_of("", "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                  "OAuthBearerUnsecuredValidatorCallbackHandler",
                  "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
                  "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler")),
        _d("sasl.oauthbearer.jwks.endpoint.url", "string", None,
           "OAUTHBEARER: the identity provider's JWKS (https://, http:// or file:), whose keys verify tokens."),
        _d("sasl.oauthbearer.jwks.endpoint.refresh.ms", "long", 3600000,
           "OAUTHBEARER: fetch the JWKS again after this long (also, rate-limited, when a token names an unknown kid).",
           at_least(1000)),
        _d("shoal.sasl.oauthbearer.jwks.refresh.min.interval.ms", "long", 10000,
           "Shoal: at most one JWKS fetch per this long for tokens with an unknown kid (or after a failed fetch).",
           at_least(0)),
        _d("shoal.sasl.oauthbearer.jwks.endpoint.timeout.ms", "long", 5000,
           "Shoal: timeout of one JWKS fetch (done in a worker thread; logins wait for it, other requests do not).",
           at_least(1)),
        _d("sasl.oauthbearer.expected.audience", "list", (),
           "OAUTHBEARER: a token's aud must hold one of these (empty: aud is not checked)."),
        _d("sasl.oauthbearer.expected.issuer", "string", None,
           "OAUTHBEARER: a token's iss must be this (unset: iss is not checked)."),
        _d("sasl.oauthbearer.clock.skew.seconds", "int", 30,
           "OAUTHBEARER: leeway when checking a token's exp, nbf and iat.", at_least(0)),
        _d("sasl.oauthbearer.sub.claim.name", "string", "sub",
           "OAUTHBEARER: the claim naming the principal (a token no identity pool maps)."),
        _d("sasl.oauthbearer.scope.claim.name", "string", "scope", "OAUTHBEARER: the claim holding the token's scopes."),
        _d("shoal.sasl.oauthbearer.identity.pools.required", "boolean", False,
           "Shoal: refuse an OAUTHBEARER token that no identity pool maps to a tenant (false: its principal is its "
           "sub claim in the operator's view, as in Kafka)."),
        # Kafka's Kerberos (GSSAPI) settings, dynamic per listener there: accepted and stored so
        # admin tools that set them (librdkafka's 0081) succeed, with no effect (no GSSAPI here)
        _d("sasl.kerberos.kinit.cmd", "string", "/usr/bin/kinit", "Accepted for compatibility (GSSAPI is not supported).",
           None, True),
        _d("sasl.kerberos.min.time.before.relogin", "long", 60000,
           "Accepted for compatibility (GSSAPI is not supported).", at_least(0), True),
        _d("sasl.kerberos.principal.to.local.rules", "list", ("DEFAULT",),
           "Accepted for compatibility (GSSAPI is not supported).", None, True),
        _d("sasl.kerberos.service.name", "string", None, "Accepted for compatibility (GSSAPI is not supported).",
           None, True),
        _d("sasl.kerberos.ticket.renew.jitter", "double", 0.05, "Accepted for compatibility (GSSAPI is not supported).",
           None, True),
        _d("sasl.kerberos.ticket.renew.window.factor", "double", 0.8,
           "Accepted for compatibility (GSSAPI is not supported).", None, True),
        _d("sasl.mechanism.inter.broker.protocol", "string", "PLAIN",
           "SASL mechanism brokers log in with on a SASL inter.broker.listener.name (Kafka's default, GSSAPI, "
           "is not supported).", one_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
        _d("sasl.jaas.config", "password", None,
           "The broker's own login on a SASL inter-broker listener: a PlainLoginModule or ScramLoginModule entry "
           "with username and password (listener.name.<listener>.<mechanism>.sasl.jaas.config first, as Kafka). "
           "The user needs CLUSTER_ACTION on the cluster (super.users)."),
        _d("ssl.endpoint.identification.algorithm", "string", "https",
           "Brokers connecting to a TLS inter-broker listener check its certificate's host name (https) or "
           "not (empty).", one_of("https", "")),
        _d("connections.max.reauth.ms", "long", 0,
           "SASL sessions expire this long after authenticating; clients re-authenticate (KIP-368). 0: never.",
           at_least(0)),
        _d("shoal.admin.listener", "string", None,
           "Shoal: http://HOST:PORT of the HTTP admin API (tenants and their users, JSON; OpenAPI at "
           "/openapi.json). Unset: no admin API. See shoal.admin.authentication."),
        _d("shoal.console.listener", "string", None,
           "Shoal: the listener (a SASL_PLAINTEXT or SASL_SSL one offering SCRAM) through which the Shoal "
           "Console, served under /ui/ on shoal.admin.listener, logs each user in; unset: the first "
           "SASL_PLAINTEXT such listener, else the first SASL_SSL one (its clients trust the listener's "
           "ssl.truststore.location and check its advertised host name). With none, or "
           "shoal.console.enable=false, the console is not served (docs/console.md)."),
        _d("shoal.console.enable", "boolean", True,
           "Shoal: serve the Shoal Console under /ui/ on shoal.admin.listener (see shoal.console.listener)."),
        _d("shoal.console.lag.interval.ms", "int", 30000,
           "Shoal: how often the Shoal Console samples every consumer group's lag for its plot (with the "
           "broker's inter-broker login; docs/console.md).", at_least(100)),
        _d("shoal.console.secure.cookies", "boolean", False,
           "Shoal: mark the Shoal Console's cookies Secure although shoal.admin.listener serves plain HTTP "
           "(TLS ends in a proxy in front of it)."),
        _d("shoal.admin.authentication", "string", "none",
           "Shoal: none (no authentication: bind shoal.admin.listener to a trusted address) or basic "
           "(HTTP Basic credentials of a SCRAM user; super users may do everything, tenant administrators "
           "manage their own tenant).", one_of("none", "basic")),
        # -- quotas: client quota sensors and metrics (shoal.quotas.manager, shoal.admin.metrics)
        _d("shoal.metrics.listener", "string", None,
           "Shoal: http://HOST:PORT of the Prometheus endpoint (/metrics): byte rates, request time, throttle "
           "time and quotas per tenant, user and client id, and broker-wide usage. HOST may be left out "
           "(http://:PORT or PORT): 127.0.0.1. Unset: no endpoint."),
        _d("shoal.metrics.node.label", "boolean", False,
           "Shoal: label every series on /metrics with node_id (this broker's node.id), for a scraper that "
           "does not tell brokers apart by address. shoal serve --processes turns it on for its brokers. "
           "shoal_broker_info{node_id,host,rack} is there either way."),
        _d("shoal.metrics.authentication", "string", None,
           "Shoal: none or basic (HTTP Basic credentials of a super user) for /metrics. Unset: the same as "
           "shoal.admin.authentication.", one_of("none", "basic")),
        # -- metering: per-tenant usage to __shoal_usage (shoal.metering, docs/metering.md)
        _d("shoal.metering.enable", "boolean", True,
           "Shoal: publish per-tenant usage (bytes in/out, requests, request and throttle time, partitions, "
           "storage, connections) to __shoal_usage every shoal.metering.interval.ms. Counts with the broker "
           "metrics (on while this is, whether or not shoal.metrics.listener is set)."),
        _d("shoal.metering.interval.ms", "long", 10000, "Shoal: the length of a usage window.", at_least(100)),
        _d("shoal.metering.topic.partitions", "int", 3, "Shoal: partitions of __shoal_usage when it is created.",
           at_least(1)),
        _d("shoal.metering.topic.replication.factor", "short", 1,
           "Shoal: replication factor of __shoal_usage when it is created (unset on an etcd cluster: 3).", at_least(1)),
        _d("shoal.metering.topic.retention.ms", "long", 604800000,
           "Shoal: retention of __shoal_usage (the pipeline must read it within this time).", at_least(60000)),
        _d("shoal.metering.tables.dir", "string", None,
           "Shoal: the directory `shoal metering run --output` writes (its billing and hourly_usage Parquet "
           "tables), on a file system this broker reads: GET /v1/tenants/{id}/usage and the console's usage "
           "page answer this month from them. Unset or not yet written: from this broker's live counters.",
           dynamic=True),
        _d("shoal.quota.smoothing", "boolean", True,
           "Shoal: smooth byte-rate quotas: every request also draws on a token bucket one window deep, "
           "refilled at the quota, and the throttle is the larger of Kafka's and the bucket's (instead of "
           "Kafka's burst of quota.window.num - 1 windows followed by a long throttle); one fetch returns at "
           "most an eighth of a window of quota. throttle_time_ms is the throttle applied. false: Kafka's "
           "behaviour exactly."),
        _d("shoal.quota.sensor.expiration.ms", "long", 3600000,
           "Shoal: a client's quota sensors (and its metrics series) are dropped after this long without a "
           "request (Kafka: one hour).", at_least(1000)),
        _d("super.users", "string", None, "Principals with every permission, separated by ';' (User:alice;User:bob)."),
        # -- auth: failed-login backoff per client address and user (shoal.auth.backoff)
        _d("connection.failed.authentication.delay.ms", "int", 100,
           "Delay before the answer to a failed authentication (and the connection's close). Shoal doubles it "
           "with each further failure for the same user from the same address, up to "
           "shoal.login.failure.delay.max.ms, and spaces that address's next attempts on the user as far apart "
           "(SASL PLAIN, SCRAM, HTTP Basic); the account is never locked.", at_least(0)),
        _d("shoal.login.failure.delay.max.ms", "int", 2000,
           "Shoal: the cap of the growing failed-login delay: a user's password is checked at most once per "
           "this long for one client address while that address's logins keep failing.", at_least(0)),
        _d("authorizer.class.name", "string", "",
           "Non-empty: enforce ACLs (Shoal's built-in authorizer answers to any class name, e.g. "
           "org.apache.kafka.metadata.authorizer.StandardAuthorizer). Empty: no authorization, as in Kafka."),
        _d("allow.everyone.if.no.acl.found", "boolean", False,
           "With an authorizer: allow a resource that has no ACL at all to everyone."),
        _d("shoal.sasl.bootstrap.users", "password", None,
           "Shoal: USER:PASSWORD,... whose SCRAM-SHA-256 and SCRAM-SHA-512 credentials are created at start-up "
           "(salted hashes are stored, never the password), so a broker with only SASL listeners can be used."),
        # -- quotas: sample windows (client quotas and connection rates share Kafka's quota.window.*)
        _d("quota.window.num", "int", 11, "The number of samples to retain in memory for client quotas.",
           at_least(1)),
        _d("quota.window.size.seconds", "int", 1, "The time span of each sample for client quotas.", at_least(1)),
        _d("controller.quota.window.num", "int", 11,
           "The number of samples to retain in memory for controller mutation quotas.", at_least(1)),
        _d("controller.quota.window.size.seconds", "int", 1,
           "The time span of each sample for controller mutations quotas.", at_least(1)),
        # -- replication throttles (KIP-73; shoal.replica.throttle): for the replicas the topic
        # configs leader/follower.replication.throttled.replicas name, outside the ISR
        _d("replication.quota.window.num", "int", 11,
           "The number of samples to retain in memory for replication quotas.", at_least(1)),
        _d("replication.quota.window.size.seconds", "int", 1,
           "The time span of each sample for replication quotas.", at_least(1)),
        _d("leader.replication.throttled.rate", "long", LONG_MAX,
           "Bytes/s a leader sends to followers of its throttled replicas (reassignment).", at_least(0), True),
        _d("follower.replication.throttled.rate", "long", LONG_MAX,
           "Bytes/s a follower fetches for its throttled replicas (reassignment).", at_least(0), True),
        # -- broker-wide protection and auto-tuned tenant quotas (shoal.quotas.autotune; the
        # multi-tenancy document, seeds/000)
        _d("shoal.broker.produce.byte.rate.limit", "long", LONG_MAX,
           "Shoal: broker-wide limit on the produce bandwidth of all tenants together (bytes/s). When their "
           "combined usage exceeds it, tenant produce quotas are auto-tuned to weighted fair shares.",
           at_least(1), True),
        _d("shoal.broker.fetch.byte.rate.limit", "long", LONG_MAX,
           "Shoal: broker-wide limit on the consume (fetch) bandwidth of all tenants together (bytes/s), "
           "enforced the same way.", at_least(1), True),
        _d("shoal.broker.request.queue.threshold", "int", 250,
           "Shoal: request queue size (requests in flight on this broker) above which the broker-wide "
           "request quota is reduced every tuning interval; it is raised back once the queue drains.",
           at_least(1), True),
        _d("shoal.broker.request.quota.step", "double", 0.1,
           "Shoal: fraction by which the broker-wide request quota is reduced per interval while the queue is "
           "above the threshold (and of its common-case value by which it is raised back).",
           between(0.001, 1), True),
        _d("shoal.quota.autotune.interval.ms", "long", 5000,
           "Shoal: how often the broker-wide limits are checked and tenant quotas auto-tuned.", at_least(10), True),
        _d("shoal.tenant.active.window.ms", "long", 300000,
           "Shoal: a tenant that produced or fetched within this window is active and takes part in "
           "auto-tuning; an inactive tenant gets its configured quota back.", at_least(0), True),
        _d("shoal.quota.autotune.headroom", "double", 1.1,
           "Shoal: a tenant using less than its fair share gets this multiple of its usage as dynamic quota, "
           "so a rise in its demand is seen next interval.", at_least(1), True),
        _d("shoal.quota.autotune.min.share", "double", 0.01,
           "Shoal: smallest dynamic quota an active tenant is tuned to, as a fraction of its configured quota.",
           between(0, 1), True),
        # -- tenant-wide quotas split over brokers (shoal.quotas.demand; issue 15)
        _d("shoal.quota.tenant.split", "string", "demand",
           "Shoal: how a tenant-wide byte-rate quota is split over the brokers leading the tenant's partitions "
           "(a consumer quota also over the followers that serve its consumers, KIP-392): "
           "equal (the multi-tenancy document's: quota / leaders) or demand (in proportion to each broker's "
           "recent demand from the tenant, exchanged through etcd, max-min fair when it exceeds the quota). "
           "On one node the slice is the whole quota either way.", one_of("equal", "demand"), True),
        _d("shoal.quota.tenant.split.min.fraction", "double", 0.1,
           "Shoal: with split=demand, the smallest slice of a leader broker, as a fraction of its equal share "
           "(so a broker that starts receiving the tenant's traffic is not starved).", between(0, 1), True),
        _d("shoal.quota.tenant.demand.interval.ms", "long", 1000,
           "Shoal: with split=demand, how often each broker publishes its tenants' demand (one etcd key per "
           "broker) and reads the others'.", at_least(100), True),
        _d("shoal.quota.tenant.demand.stale.ms", "long", 10000,
           "Shoal: a broker's demand report unchanged this long counts as missing (equal share); when this "
           "broker cannot reach etcd this long it splits tenant quotas equally.", at_least(1000), True),
        # -- the balancer's inputs: per-partition load and broker capacity (shoal.cluster.load; issue 27)
        _d("shoal.balancer.load.interval.ms", "long", 10000,
           "Shoal: how often each broker computes its partitions' load (rates over shoal.balancer.load.window.ms, "
           "log sizes) and its capacity, and publishes them (one etcd key per broker, under its lease).",
           at_least(100), True),
        _d("shoal.balancer.load.window.ms", "long", 60000,
           "Shoal: the window the per-partition byte rates are measured over (bytes in, bytes out to consumers, "
           "replication bytes out).", at_least(100), True),
        _d("shoal.balancer.capacity.disk.bytes", "long", 0,
           "Shoal: this broker's disk capacity for the balancer, bytes; 0: the size of the file system holding "
           "its log directory (os.statvfs).", at_least(0), True),
        _d("shoal.balancer.capacity.network.in.bytes.per.second", "long", 0,
           "Shoal: this broker's network-in capacity for the balancer, bytes/s; 0: unknown (no limit).",
           at_least(0), True),
        _d("shoal.balancer.capacity.network.out.bytes.per.second", "long", 0,
           "Shoal: this broker's network-out capacity for the balancer, bytes/s; 0: unknown (no limit).",
           at_least(0), True),
        _d("shoal.balancer.capacity.disk.write.bytes.per.second", "long", 0,
           "Shoal: this broker's disk write capacity, bytes/s (shoal capacity report --measure-disk measures "
           "one); 0: unknown. Reported with the load.", at_least(0), True),
        # The balancer (issue 27; shoal.cluster.balancer, docs/balancing.md): the controller's
        # loop that moves leaderships and replicas by goals, drains brokers, heals lost ones.
        _d("shoal.balancer.enable", "boolean", True,
           "Shoal: the controller balances the cluster, drains removed brokers and heals lost ones (etcd "
           "clusters only).", None, True),
        _d("shoal.balancer.paused", "boolean", False,
           "Shoal: the balancer starts no new moves (`shoal cluster balancer pause`); moves in flight finish.",
           None, True),
        _d("shoal.balancer.remove.brokers", "list", (),
           "Shoal: brokers being removed (`shoal cluster remove-broker`): nothing new is placed there and the "
           "balancer moves every replica off them; a listed broker with no replica left is removed.",
           _broker_ids, True),
        _d("shoal.balancer.heal.broker.failure.threshold.ms", "long", 3_600_000,
           "Shoal: a broker unavailable this long is treated as removed: its replicas are re-created on the "
           "others (-1: never).", at_least(-1), True),
        _d("shoal.balancer.heal.uneven.load.trigger", "string", "EMPTY_BROKER",
           "Shoal: what uneven load the balancer corrects: EMPTY_BROKER (fill brokers that joined empty) or "
           "ANY_UNEVEN_LOAD (continuous balancing).", one_of("EMPTY_BROKER", "ANY_UNEVEN_LOAD"), True),
        _d("shoal.balancer.throttle.bytes.per.second", "long", 10_485_760,
           "Shoal: the replication throttle the balancer sets on the brokers of its moves while they run "
           "(leader and follower.replication.throttled.rate).", at_least(1), True),
        _d("shoal.balancer.max.concurrent.moves.per.broker", "int", 5,
           "Shoal: replica moves in flight that one broker may take part in at once.", at_least(1), True),
        _d("shoal.balancer.max.moves.per.plan", "int", 100,
           "Shoal: replica moves one plan may hold (the next plan continues).", at_least(1), True),
        _d("shoal.balancer.disk.max.load", "double", 0.85,
           "Shoal: hard goal: no broker's disk above this fraction of its capacity.", between(0, 1), True),
        _d("shoal.balancer.network.max.load", "double", 0.8,
           "Shoal: hard goal: no broker's network in or out above this fraction of its capacity.",
           between(0, 1), True),
        _d("shoal.balancer.balance.threshold", "double", 1.1,
           "Shoal: soft goals are met when every broker is within this factor of the mean (and of its "
           "inverse below it).", at_least(1), True),
        _d("shoal.balancer.min.improvement", "double", 0.05,
           "Shoal: a plan that only balances is applied when it lowers the imbalance by more than this "
           "fraction.", between(0, 1), True),
        _d("shoal.balancer.interval.ms", "long", 30_000,
           "Shoal: how often the controller plans (and at once after a remove-broker or a resume).",
           at_least(100), True),
        # Automatic expansion (issue 27, part 6; shoal.cluster.balancer.expansion)
        _d("shoal.balancer.expand.command", "string", "",
           "Shoal: the operator's expansion hook: an executable the controller runs once, with the current and "
           "the recommended broker counts as its arguments, when the cluster's p95 utilization stays above "
           "1 - shoal.balancer.expand.headroom for shoal.balancer.expand.after.ms; empty: never. Static (server "
           "properties only): a dynamic config must not name a program to run.", None, False),
        _d("shoal.balancer.expand.after.ms", "long", 600_000,
           "Shoal: how long the cluster's utilization must stay above 1 - headroom before the expansion hook "
           "runs.", at_least(1000), True),
        _d("shoal.balancer.expand.headroom", "double", 0.3,
           "Shoal: the headroom the cluster keeps: it expands when its p95 utilization is above 1 - headroom, "
           "to ceil(load / (1 - headroom)) brokers.", between(0, 0.95), True),
        _d("shoal.balancer.expand.timeout.ms", "long", 300_000,
           "Shoal: the expansion hook is killed if it runs longer than this.", at_least(1000), True),
        _d("shoal.balancer.expand.wait.ms", "long", 1_800_000,
           "Shoal: after the hook ran, how long the controller waits for the recommended brokers to register "
           "before it may run the hook again.", at_least(1000), True),
        _d("shoal.balancer.shrink.after.ms", "long", 86_400_000,
           "Shoal: how long the load must fit fewer brokers (with the headroom) before the balancer status "
           "recommends shrinking (it never removes a broker by itself).", at_least(1000), True),
    ]
}

# Synonym groups in precedence order with each member's factor to the first member's unit.
_SYNONYMS: list[list[tuple[str, int]]] = [
    [("node.id", 1), ("broker.id", 1)],
    [("log.dirs", 1), ("log.dir", 1)],
    [("log.roll.ms", 1), ("log.roll.hours", 3_600_000)],
    [("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)],
    [("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)],
    [("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)],
]
_GROUP_OF: dict[str, list[tuple[str, int]]] = {n: g for g in _SYNONYMS for n, _ in g}


def broker_synonyms(name: str) -> list[str]:
    """Kafka's ``brokerConfigSynonyms``: the names that set ``name``, highest precedence first."""
    group = _GROUP_OF.get(name)
    return [n for n, _ in group] if group else [name]


def synonym_factor(name: str) -> tuple[str, int]:
    """``(primary name, factor)``: a value of ``name`` times ``factor`` is in the primary's unit
    (``log.retention.hours`` -> ``("log.retention.ms", 3600000)``); ``(name, 1)`` if no group."""
    group = _GROUP_OF.get(name)
    if group is None:
        return name, 1
    return group[0][0], dict(group)[name]


@dataclass(frozen=True, slots=True)
class TopicConfigDef(_TypedDef):
    name: str
    type: str
    broker: str  # the broker config it falls back to
    doc: str
    validator: Validator | None = None



def _t(name, type_, broker, doc, validator=None) -> TopicConfigDef:
    return TopicConfigDef(name, type_, broker, doc, validator)


TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in [
        _t(
            "cleanup.policy",
            "list",
            "log.cleanup.policy",
            'A string that is either "delete" or "compact" or both: the retention policy for old segments.',
            list_of("compact", "delete"),
        ),
        _t(
            "compression.type",
            "string",
            "compression.type",
            "Final compression type for the topic; 'producer' keeps the codec the producer set.",
            one_of(*COMPRESSION_TYPES),
        ),
        _t("compression.gzip.level", "int", "compression.gzip.level", "Compression level for gzip.", _int_or_range(-1, 1, 9)),
        _t("compression.lz4.level", "int", "compression.lz4.level", "Compression level for lz4.", between(1, 17)),
        _t("compression.zstd.level", "int", "compression.zstd.level", "Compression level for zstd.", between(-131072, 22)),
        _t(
            "delete.retention.ms",
            "long",
            "log.cleaner.delete.retention.ms",
            "Time to retain delete tombstone markers for log compacted topics.",
            at_least(0),
        ),
        _t("file.delete.delay.ms", "long", "log.segment.delete.delay.ms", "Time to wait before deleting a file.", at_least(0)),
        _t(
            "flush.messages",
            "long",
            "log.flush.interval.messages",
            "Force an fsync after this many messages.",
            at_least(1),
        ),
        _t("flush.ms", "long", "log.flush.interval.ms", "Force an fsync after this much time (ms).", at_least(0)),
        _t(
            "follower.replication.throttled.replicas",
            "list",
            "follower.replication.throttled.replicas",
            "Replicas (partition:broker, or *) whose log replication is throttled on the follower side.",
            _throttled_replicas,
        ),
        _t(
            "index.interval.bytes",
            "int",
            "log.index.interval.bytes",
            "How frequently an entry is added to the offset index.",
            at_least(0),
        ),
        _t(
            "leader.replication.throttled.replicas",
            "list",
            "leader.replication.throttled.replicas",
            "Replicas (partition:broker, or *) whose log replication is throttled on the leader side.",
            _throttled_replicas,
        ),
        _t(
            "max.compaction.lag.ms",
            "long",
            "log.cleaner.max.compaction.lag.ms",
            "Maximum time a message remains ineligible for compaction.",
            at_least(1),
        ),
        _t(
            "max.message.bytes",
            "int",
            "message.max.bytes",
            "The largest record batch size allowed (after compression if compression is enabled).",
            at_least(0),
        ),
        _t(
            "message.downconversion.enable",
            "boolean",
            "log.message.downconversion.enable",
            "Whether down-conversion of message formats is enabled to satisfy consume requests.",
        ),
        _t(
            "message.timestamp.after.max.ms",
            "long",
            "log.message.timestamp.after.max.ms",
            "Allowed difference between a later message timestamp and the broker's timestamp.",
            at_least(0),
        ),
        _t(
            "message.timestamp.before.max.ms",
            "long",
            "log.message.timestamp.before.max.ms",
            "Allowed difference between the broker's timestamp and an earlier message timestamp.",
            at_least(0),
        ),
        _t(
            "message.timestamp.type",
            "string",
            "log.message.timestamp.type",
            "Whether the timestamp in the message is message create time or log append time.",
            one_of("CreateTime", "LogAppendTime"),
        ),
        _t(
            "min.cleanable.dirty.ratio",
            "double",
            "log.cleaner.min.cleanable.ratio",
            "How frequently the log compactor attempts to clean the log.",
            between(0, 1),
        ),
        _t(
            "min.compaction.lag.ms",
            "long",
            "log.cleaner.min.compaction.lag.ms",
            "Minimum time a message remains uncompacted in the log.",
            at_least(0),
        ),
        _t(
            "min.insync.replicas",
            "int",
            "min.insync.replicas",
            "Minimum number of in-sync replicas that must acknowledge a write with acks=all.",
            at_least(1),
        ),
        _t(
            "min.insync.racks",
            "int",
            "min.insync.racks",
            "Shoal: minimum number of racks the in-sync replicas that acknowledge an acks=all write must span "
            "(1: off; KIP-1290 is only a proposal in Kafka).",
            at_least(1),
        ),
        _t("preallocate", "boolean", "log.preallocate", "Preallocate the file on disk when creating a segment."),
        _t(
            "replica.placement",
            "string",
            "replica.placement",
            "Placement constraints (the multi-region JSON): sync replicas and observers per rack, e.g. "
            '{"version":1,"replicas":[{"count":2,"constraints":{"rack":"dc1"}}],'
            '"observers":[{"count":1,"constraints":{"rack":"dc2"}}]}. Also accepted as '
            "confluent.placement.constraints. Set at creation (replication factor -1).",
            _placement,
        ),
        _t(
            "retention.bytes",
            "long",
            "log.retention.bytes",
            "Maximum size a partition can grow to before old segments are discarded; -1: no limit.",
        ),
        _t(
            "retention.ms",
            "long",
            "log.retention.ms",
            "Maximum time a log is retained before old segments are discarded; -1: no limit.",
            at_least(-1),
        ),
        _t("segment.bytes", "int", "log.segment.bytes", "Segment file size for the log.", at_least(14)),
        _t(
            "segment.index.bytes",
            "int",
            "log.index.size.max.bytes",
            "Size of the index that maps offsets to file positions.",
            at_least(4),
        ),
        _t(
            "segment.jitter.ms",
            "long",
            "log.roll.jitter.ms",
            "Maximum random jitter subtracted from the scheduled segment roll time.",
            at_least(0),
        ),
        _t("segment.ms", "long", "log.roll.ms", "Period after which a segment is rolled even if not full.", at_least(1)),
        _t(
            "unclean.leader.election.enable",
            "boolean",
            "unclean.leader.election.enable",
            "Whether replicas not in the ISR may be elected leader as a last resort.",
        ),
    ]
}

# Topic configs Kafka 3.x accepts and ignores (deprecated; gone in Kafka 4). CreateTopics,
# AlterConfigs and IncrementalAlterConfigs accept them with one warning (rate-limited) and drop
# them: never stored, no effect, absent from DescribeConfigs. Name -> why, for the warning.
IGNORED_TOPIC_CONFIGS: dict[str, str] = {
    "message.format.version": "every record batch is v2 (Kafka ignores it since 3.0, removed in 4.0)",
    "message.timestamp.difference.max.ms": "use message.timestamp.before.max.ms and message.timestamp.after.max.ms",
}

# Topic-only configs whose "broker fallback" has no broker config: the default is the empty list.
_TOPIC_ONLY_DEFAULTS: dict[str, Any] = {
    "follower.replication.throttled.replicas": (),
    "leader.replication.throttled.replicas": (),
}


# ---------------------------------------------------------------------------------------------
# Java .properties


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= len(s):
            break
        c = s[i]
        if c == "u":
            hexits = s[i + 1 : i + 5]
            if len(hexits) != 4 or not re.fullmatch(r"[0-9a-fA-F]{4}", hexits):
                raise ConfigError("INVALID_CONFIG", f"Malformed \\uxxxx encoding: \\u{hexits}")
            out.append(chr(int(hexits, 16)))
            i += 5
            continue
        out.append(_ESCAPES.get(c, c))
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Java ``Properties.load`` syntax: ``#``/``!`` comments, ``key=value``, ``key: value``,
    ``key value``, trailing-backslash continuations, backslash escapes and ``\\uXXXX``."""
    lines = re.split(r"\r\n|\r|\n", text)
    props: dict[str, str] = {}
    i = 0
    ws = " \t\f"
    while i < len(lines):
        line = lines[i].lstrip(ws)
        i += 1
        if not line or line[0] in "#!":
            continue
        # join continuation lines (odd number of trailing backslashes)
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 1:
                line = line[:-1]
                if i < len(lines):
                    line += lines[i].lstrip(ws)
                    i += 1
                    continue
            break
        # split key from value at the first unescaped separator
        j = 0
        key_end = len(line)
        value_start = len(line)
        while j < len(line):
            c = line[j]
            if c == "\\":
                j += 2
                continue
            if c in "=:" or c in ws:
                key_end = j
                k = j
                while k < len(line) and line[k] in ws:
                    k += 1
                if c in ws and k < len(line) and line[k] in "=:":
                    k += 1
                elif c in "=:":
                    k = j + 1
                while k < len(line) and line[k] in ws:
                    k += 1
                value_start = k
                break
            j += 1
        props[_unescape(line[:key_end])] = _unescape(line[value_start:])
    return props


# ---------------------------------------------------------------------------------------------
# Broker config


_LISTENER = re.compile(r"^([A-Za-z0-9_]+)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


def parse_listeners(name: str, value: str | None) -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` as (NAME, host, port); an empty host means all interfaces."""
    if not value or not value.strip():
        return []
    out = []
    seen = set()
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        m = _LISTENER.match(item)
        if not m:
            raise _invalid(name, value, f"Unable to parse {item} to a broker endpoint")
        lname, host, port = m.group(1).upper(), m.group(2), int(m.group(3))
        if not 0 <= port <= 65535:
            raise _invalid(name, value, f"Invalid port in {item}")
        if lname in seen:
            raise _invalid(name, value, f"Each listener must have a different name, {lname} is repeated")
        seen.add(lname)
        out.append((lname, host, port))
    return out


def _parse_protocol_map(value: str) -> dict[str, str]:
    out = {}
    for item in (value or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, proto = item.partition(":")
        if not sep:
            raise _invalid("listener.security.protocol.map", value, f"Malformed entry {item}")
        out[name.strip().upper()] = proto.strip().upper()
    return out


@dataclass(frozen=True, slots=True)
class ResolvedValue:
    value: Any  # typed
    source: ConfigSource
    via: str | None  # the name that supplied it (a synonym), None for a default without a key


def _parse_dynamic(raw: Mapping[str, str]) -> dict[str, Any]:
    """Dynamic values were validated when set; one that no longer parses is skipped, not fatal."""
    out: dict[str, Any] = {}
    for k, v in raw.items():
        d = BROKER_CONFIGS.get(k)
        if d is None:
            continue
        try:
            out[k] = d.parse(v)
        except ConfigError as e:
            log.warning("ignoring dynamic broker config %s: %s", k, e.message)
    return out


class BrokerConfig:
    """The effective broker configuration: static layer (file + flags) and dynamic cluster layer.

    Immutable; ``with_dynamic`` returns a new one. Unknown keys are kept (Kafka accepts them) and
    readable as strings with ``get``.
    """

    def __init__(self, static: Mapping[str, str] | None = None, dynamic: Mapping[str, str] | None = None,
                 per_broker: Mapping[str, str] | None = None) -> None:
        self._static: Mapping[str, str] = MappingProxyType({str(k): str(v) for k, v in (static or {}).items()})
        self._dynamic: Mapping[str, str] = MappingProxyType({str(k): str(v) for k, v in (dynamic or {}).items()})
        self._per_broker: Mapping[str, str] = MappingProxyType({str(k): str(v) for k, v in (per_broker or {}).items()})
        # Static values are validated eagerly: a bad file is an error at start-up.
        self._static_typed: dict[str, Any] = {}
        for k, v in self._static.items():
            d = BROKER_CONFIGS.get(k)
            self._static_typed[k] = d.parse(v) if d is not None else v
        self._dynamic_typed = _parse_dynamic(self._dynamic)
        self._broker_typed = _parse_dynamic(self._per_broker)
        self._resolved: dict[str, ResolvedValue] = {}
        for name in BROKER_CONFIGS:
            self._resolved[name] = self._resolve(name)
        self._check()

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: Mapping[str, str] | None = None) -> "BrokerConfig":
        props: dict[str, str] = {}
        if path is not None:
            props.update(parse_properties(Path(path).read_text(encoding="utf-8")))
        props.update({str(k): str(v) for k, v in (overrides or {}).items()})
        for k in props:
            if k not in BROKER_CONFIGS and not k.startswith("listener.name."):
                # Kafka's AbstractConfig.logUnused line, and the known name a typo is closest to
                near = difflib.get_close_matches(k, BROKER_CONFIGS, n=1, cutoff=0.85)
                hint = f" Did you mean '{near[0]}'?" if near else ""
                log.warning("The configuration '%s' was supplied but isn't a known config.%s", k, hint)
        return cls(props)

    def with_dynamic(self, broker_configs: Mapping[str, str], per_broker: Mapping[str, str] | None = None) -> "BrokerConfig":
        """This static layer under the cluster-wide dynamic configs and this broker's own."""
        per_broker = per_broker or {}
        if dict(broker_configs) == dict(self._dynamic) and dict(per_broker) == dict(self._per_broker):
            return self
        return BrokerConfig(self._static, broker_configs, per_broker)

    # -- resolution -----------------------------------------------------------------------

    def _resolve(self, name: str) -> ResolvedValue:
        d = BROKER_CONFIGS[name]
        group = _GROUP_OF.get(name)
        if group is None or group[0][0] != name:
            # A plain config, or a non-primary synonym: its own layers only.
            if name in self._broker_typed:
                return ResolvedValue(self._broker_typed[name], ConfigSource.DYNAMIC_BROKER_CONFIG, name)
            if name in self._dynamic_typed:
                return ResolvedValue(self._dynamic_typed[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, name)
            if name in self._static_typed:
                return ResolvedValue(self._static_typed[name], ConfigSource.STATIC_BROKER_CONFIG, name)
            return ResolvedValue(d.default, ConfigSource.DEFAULT_CONFIG, name if d.default is not None else None)
        for layer, source in (
            (self._broker_typed, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self._dynamic_typed, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self._static_typed, ConfigSource.STATIC_BROKER_CONFIG),
        ):
            for member, factor in group:
                if member in layer and layer[member] is not None:
                    return ResolvedValue(_convert(d.type, layer[member], factor), source, member)
        for member, factor in group:
            default = BROKER_CONFIGS[member].default
            if default is not None:
                return ResolvedValue(_convert(d.type, default, factor), ConfigSource.DEFAULT_CONFIG, member)
        return ResolvedValue(None, ConfigSource.DEFAULT_CONFIG, None)

    def _check(self) -> None:
        node = self._static_typed.get("node.id")
        broker = self._static_typed.get("broker.id")
        if node is not None and broker is not None and node != broker:
            raise ConfigError(
                "INVALID_CONFIG",
                f"If node.id is defined, broker.id must be the same (node.id={node}, broker.id={broker})",
            )
        if broker is not None and broker < 0:
            raise _invalid("broker.id", broker, "Value must be at least 0")
        protocols = self.listener_security_protocols
        for lname, _h, _p in self.listeners + self.advertised_listeners:
            if lname not in protocols:
                raise ConfigError(
                    "INVALID_CONFIG",
                    f"No security protocol defined for listener {lname} in listener.security.protocol.map",
                )
        if not self.listeners:
            raise _invalid("listeners", self.raw("listeners"), "At least one listener is required")

    # -- access ---------------------------------------------------------------------------

    def get(self, name: str) -> Any:
        """Typed effective value (``int`` for int/long/short, ``tuple`` for lists, ...).

        Unknown keys given in the file are returned as strings; other unknown names raise KeyError.
        """
        r = self._resolved.get(name)
        if r is not None:
            return r.value
        if name in self._static:
            return self._static[name]
        raise KeyError(name)

    def resolved(self, name: str) -> ResolvedValue:
        r = self._resolved.get(name)
        if r is None:
            if name in self._static:
                return ResolvedValue(self._static[name], ConfigSource.STATIC_BROKER_CONFIG, name)
            raise KeyError(name)
        return r

    def source(self, name: str) -> ConfigSource:
        return self.resolved(name).source

    def raw(self, name: str) -> str | None:
        """The effective value as Kafka would print it."""
        d = BROKER_CONFIGS.get(name)
        if d is None:
            return self._static.get(name)
        return format_value(d.type, self.get(name))

    def layer_values(self, name: str) -> list[tuple[str, ConfigSource]]:
        """(string value, source) of ``name`` in each layer that has one, highest first."""
        d = BROKER_CONFIGS.get(name)
        out: list[tuple[str, ConfigSource]] = []
        if name in self._broker_typed and d is not None:
            out.append((format_value(d.type, self._broker_typed[name]) or "", ConfigSource.DYNAMIC_BROKER_CONFIG))
        if name in self._dynamic_typed and d is not None:
            out.append((format_value(d.type, self._dynamic_typed[name]) or "", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        if name in self._static:
            v = self._static_typed.get(name)
            out.append((format_value(d.type, v) if d else str(v), ConfigSource.STATIC_BROKER_CONFIG))  # type: ignore[arg-type]
        if d is not None and d.default is not None:
            out.append((format_value(d.type, d.default) or "", ConfigSource.DEFAULT_CONFIG))
        return out

    @property
    def static_configs(self) -> Mapping[str, str]:
        return self._static

    @property
    def dynamic_configs(self) -> Mapping[str, str]:
        return self._dynamic

    @property
    def per_broker_configs(self) -> Mapping[str, str]:
        """This broker's own dynamic configs (``MetadataImage.broker_overrides[node id]``)."""
        return self._per_broker

    @property
    def unknown_keys(self) -> list[str]:
        return sorted(k for k in self._static if k not in BROKER_CONFIGS)

    # -- conveniences ---------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return int(self.get("node.id"))

    @property
    def listeners(self) -> list[tuple[str, str, int]]:
        return parse_listeners("listeners", self.get("listeners"))

    @property
    def advertised_listeners(self) -> list[tuple[str, str, int]]:
        value = self.get("advertised.listeners")
        if value is None:
            return self.listeners
        return parse_listeners("advertised.listeners", value)

    def for_listener(self, listener: str, name: str) -> Any:
        """``listener.name.<listener>.<name>`` if set (auth: per-listener ssl.* / sasl.*), else ``name``."""
        key = f"listener.name.{listener.lower()}.{name}"
        if key in self._static:
            d = BROKER_CONFIGS.get(name)
            return d.parse(self._static[key]) if d is not None else self._static[key]
        return self.get(name)

    @property
    def listener_security_protocols(self) -> dict[str, str]:
        return _parse_protocol_map(self.get("listener.security.protocol.map"))

    @property
    def log_dirs(self) -> list[str]:
        value = self.get("log.dirs")
        return [p.strip() for p in str(value).split(",") if p.strip()]

    @property
    def data_dir(self) -> str:
        return self.log_dirs[0]

    @property
    def rack(self) -> str | None:
        return self.get("broker.rack")

    @property
    def host_id(self) -> str | None:
        """``broker.host``: the machine this broker runs on, None when not set."""
        value = self.get("broker.host")
        return str(value) if value else None

    def __repr__(self) -> str:
        return f"BrokerConfig(static={dict(self._static)!r}, dynamic={dict(self._dynamic)!r})"


def _convert(type_: str, value: Any, factor: int) -> Any:
    if factor == 1 or value is None:
        return value
    v = value * factor
    if type_ == "long" and v < 0:
        return -1  # Kafka: a negative retention in any unit means "no limit"
    return v


# ---------------------------------------------------------------------------------------------
# Describe entries


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    is_default: bool
    read_only: bool
    is_sensitive: bool
    synonyms: tuple[ConfigSynonym, ...]
    config_type: ConfigType
    documentation: str | None


def _broker_synonym_chain(broker: BrokerConfig, names: Iterable[str], sensitive: bool) -> list[ConfigSynonym]:
    """Kafka's ``configSynonyms``: per layer (dynamic default, static, default), per name."""
    names = list(names)
    out: list[ConfigSynonym] = []
    for wanted in (
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        ConfigSource.STATIC_BROKER_CONFIG,
        ConfigSource.DEFAULT_CONFIG,
    ):
        for n in names:
            for value, source in broker.layer_values(n):
                if source == wanted:
                    out.append(ConfigSynonym(n, None if sensitive else value, source))
    return out


def describe_broker_configs(broker: BrokerConfig, *, cluster_default: bool = False) -> list[ConfigEntry]:
    """Every known broker config (``cluster_default``: only the cluster-wide dynamic ones set)."""
    out: list[ConfigEntry] = []
    names = sorted(broker.dynamic_configs) if cluster_default else sorted(BROKER_CONFIGS)
    for name in names:
        d = BROKER_CONFIGS.get(name)
        if d is None:
            continue
        group = _GROUP_OF.get(name)
        if group is not None and group[0][0] == name:
            chain_names = [n for n, _ in group]
        else:
            chain_names = [name]
        synonyms = _broker_synonym_chain(broker, chain_names, d.sensitive)
        if cluster_default:
            synonyms = [s for s in synonyms if s.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
            value = format_value(d.type, broker._dynamic_typed.get(name))
        else:
            value = broker.raw(name)
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        out.append(
            ConfigEntry(
                name=name,
                value=None if d.sensitive else value,
                source=source,
                is_default=source == ConfigSource.DEFAULT_CONFIG,
                read_only=not d.dynamic,
                is_sensitive=d.sensitive,
                synonyms=tuple(synonyms),
                config_type=d.config_type,
                documentation=d.doc,
            )
        )
    return out


def topic_config_value(broker: BrokerConfig, overrides: Mapping[str, str], name: str) -> Any:
    """The effective typed value of topic config ``name``."""
    d = TOPIC_CONFIGS[name]
    if name in overrides:
        return d.parse(overrides[name])
    if d.broker in BROKER_CONFIGS:
        return broker.get(d.broker)
    return _TOPIC_ONLY_DEFAULTS.get(name)


def describe_topic_configs(broker: BrokerConfig, overrides: Mapping[str, str],
                           names: Collection[str] | None = None) -> list[ConfigEntry]:
    """Every topic config (``names``: those only, as DescribeConfigs' configuration_keys ask):
    the override (DYNAMIC_TOPIC_CONFIG) or its broker fallback's source."""
    out: list[ConfigEntry] = []
    for name in sorted(TOPIC_CONFIGS if names is None else TOPIC_CONFIGS.keys() & set(names)):
        d = TOPIC_CONFIGS[name]
        synonyms: list[ConfigSynonym] = []
        if name in overrides:
            try:
                value = format_value(d.type, d.parse(overrides[name]))
            except ConfigError:
                value = overrides[name]
            synonyms.append(ConfigSynonym(name, None if d.sensitive else value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        else:
            value = format_value(d.type, topic_config_value(broker, overrides, name))
        if d.broker in BROKER_CONFIGS:
            synonyms += _broker_synonym_chain(broker, broker_synonyms(d.broker), d.sensitive)
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        out.append(
            ConfigEntry(
                name=name,
                value=None if d.sensitive else value,
                source=source,
                is_default=source == ConfigSource.DEFAULT_CONFIG,
                read_only=False,
                is_sensitive=d.sensitive,
                synonyms=tuple(synonyms),
                config_type=d.config_type,
                documentation=d.doc,
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# Validation


def validate_topic_configs(configs: Mapping[str, str | None]) -> None:
    """Raise ``ConfigError("INVALID_CONFIG", ...)`` for an unknown key or a bad value."""
    typed: dict[str, Any] = {}
    for name, raw in configs.items():
        d = TOPIC_CONFIGS.get(name)
        if d is None:
            raise ConfigError("INVALID_CONFIG", f"Unknown topic config name: {name}")
        if raw is None:
            raise ConfigError("INVALID_CONFIG", f"Null value not supported for topic configs: {name}")
        typed[name] = d.parse(raw)
    lo = typed.get("min.compaction.lag.ms")
    hi = typed.get("max.compaction.lag.ms")
    if lo is not None and hi is not None and lo > hi:
        raise ConfigError(
            "INVALID_CONFIG",
            f"conflict topic config setting min.compaction.lag.ms ({lo}) > max.compaction.lag.ms ({hi})",
        )


def validate_dynamic_broker_configs(configs: Mapping[str, str | None]) -> None:
    """Cluster-wide dynamic broker configs: only dynamic-updatable keys with valid values.

    Raises ``ConfigError("INVALID_REQUEST", "Cannot update these configs dynamically: ...")`` for
    read-only or unknown keys and ``ConfigError("INVALID_CONFIG", ...)`` for bad values.
    """
    bad = sorted(k for k in configs if k not in BROKER_CONFIGS or not BROKER_CONFIGS[k].dynamic)
    if bad:
        raise ConfigError("INVALID_REQUEST", f"Cannot update these configs dynamically: {set(bad)}")
    for name, raw in configs.items():
        if raw is None:
            raise ConfigError("INVALID_CONFIG", f"Null value not supported for broker config {name}")
        BROKER_CONFIGS[name].parse(raw)


def is_list_config(name: str, *, topic: bool) -> bool:
    d: Any = TOPIC_CONFIGS.get(name) if topic else BROKER_CONFIGS.get(name)
    return d is not None and d.type == "list"


# ---------------------------------------------------------------------------------------------
# Storage


def log_config(broker: BrokerConfig, overrides: Mapping[str, str]) -> "LogConfig":
    """The storage layer's ``LogConfig`` for a topic with these overrides."""
    from shoal.storage import LogConfig

    def v(name: str) -> Any:
        try:
            return topic_config_value(broker, overrides, name)
        except ConfigError as e:  # a stored override that no longer parses: use the fallback
            log.warning("ignoring topic config override %s=%r: %s", name, overrides.get(name), e.message)
            return topic_config_value(broker, {}, name)

    values: dict[str, Any] = {
        "segment_bytes": v("segment.bytes"),
        "segment_ms": v("segment.ms"),
        "segment_jitter_ms": v("segment.jitter.ms"),
        "retention_ms": v("retention.ms"),
        "retention_bytes": v("retention.bytes"),
        "index_interval_bytes": v("index.interval.bytes"),
        "segment_index_bytes": v("segment.index.bytes"),
        "max_message_bytes": v("max.message.bytes"),
        "message_timestamp_type": v("message.timestamp.type"),
        "flush_messages": v("flush.messages"),
        "flush_ms": v("flush.ms"),
        "file_delete_delay_ms": v("file.delete.delay.ms"),
        "cleanup_policy": tuple(v("cleanup.policy")),
        "min_insync_replicas": v("min.insync.replicas"),
        "min_insync_racks": v("min.insync.racks"),
        "compression_type": v("compression.type"),
        "preallocate": v("preallocate"),
        "message_timestamp_before_max_ms": v("message.timestamp.before.max.ms"),
        "message_timestamp_after_max_ms": v("message.timestamp.after.max.ms"),
        "min_cleanable_dirty_ratio": v("min.cleanable.dirty.ratio"),
        "min_compaction_lag_ms": v("min.compaction.lag.ms"),
        "max_compaction_lag_ms": v("max.compaction.lag.ms"),
        "delete_retention_ms": v("delete.retention.ms"),
    }
    fields = {f.name: f for f in dataclasses.fields(LogConfig)}
    cp = fields.get("cleanup_policy")
    if cp is not None and isinstance(cp.default, str):
        values["cleanup_policy"] = ",".join(values["cleanup_policy"])
    return LogConfig(**{k: val for k, val in values.items() if k in fields})
