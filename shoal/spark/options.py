"""Option parsing of the ``shoal`` Spark data source, named and checked as Spark's Kafka source does.

Pure functions over the option map Spark hands a data source (keys are case-insensitive; we
lower-case them); no Spark, no Kafka client and no I/O here, so every rule is a plain unit test.

Source options (``spark.read`` / ``spark.readStream``)::

    kafka.bootstrap.servers      required
    subscribe | subscribePattern | assign     exactly one
    startingOffsets              earliest | latest | {"t":{"0":23,"1":-2}}   (-2 earliest, -1 latest)
    endingOffsets                latest | {"t":{"0":50,"1":-1}}              (batch only)
    startingTimestamp            ms, for every partition (wins over the two above)
    startingOffsetsByTimestamp   {"t":{"0":1700000000000}}                   (wins over startingOffsets)
    endingTimestamp, endingOffsetsByTimestamp                                (batch only)
    startingOffsetsByTimestampStrategy   error (default) | latest
    maxOffsetsPerTrigger, minPartitions, maxRecordsPerPartition
    includeHeaders (false), failOnDataLoss (true), kafkaConsumer.pollTimeoutMs (120000)
    kafka.*                      librdkafka client settings (SASL included)

``kafka.isolation.level`` is ``read_uncommitted`` (Java's and Spark's default; librdkafka's own
default is read_committed) or ``read_committed``: then the consumers skip aborted transactions and
"latest" is the last stable offset (ListOffsets in read_committed), as Spark's Kafka source does.

Sink options: ``topic`` (overrides a ``topic`` column), ``kafka.*``, and Shoal's own
``sinkCommitLogTopicPrefix``, ``exactlyOnce`` (false) and ``transactionalIdPrefix``
(``shoal-spark-``; see :mod:`shoal.spark.sink`). ``kafka.transactional.id`` is refused: every write
task needs its own transactional id, which ``exactlyOnce`` derives from the prefix.

``kafka.*`` settings go to librdkafka, whose property names are Kafka's for everything common
(``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ``ssl.ca.location``, ...).
The Java ``sasl.jaas.config`` of a PLAIN or SCRAM login module is translated into
``sasl.username`` / ``sasl.password`` so jobs written for Spark's Kafka source keep working.
The settings Spark's Kafka source refuses (``auto.offset.reset``, deserializers, ...) are refused
here with the same advice; unknown names are left for librdkafka to reject by name.

Deviations from Spark's Kafka source: no consumer group is ever joined or committed to; reading is
by ``assign`` and explicit offsets (``kafka.group.id`` is passed on, librdkafka wants one, and
defaults to ``shoal-spark``; ``groupIdPrefix`` is accepted and unused);
``minOffsetsPerTrigger`` and ``maxTriggerDelay`` are refused as not supported yet;
``subscribePattern`` leaves out topics whose names start with ``__`` (Kafka's and Shoal's
internal topics) as the Java consumer's ``exclude.internal.topics`` does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from shoal.net.jaas import JaasError
from shoal.net.jaas import parse_jaas as _parse_jaas

__all__ = [
    "EARLIEST",
    "LATEST",
    "OptionError",
    "Subscription",
    "OffsetSpec",
    "SourceOptions",
    "SinkOptions",
    "parse_source_options",
    "parse_sink_options",
    "kafka_client_conf",
]

# Kafka's ListOffsets sentinels, as Spark's offsets JSON uses them.
LATEST = -1
EARLIEST = -2

DEFAULT_POLL_TIMEOUT_MS = 120_000
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
DEFAULT_TRANSACTIONAL_ID_PREFIX = "shoal-spark-"


class OptionError(ValueError):
    """A data source option is missing, malformed or not allowed here."""


# -- subscription ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions a query reads: exactly one of the three strategies."""

    kind: str  # "subscribe" | "subscribePattern" | "assign"
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[tuple[str, int], ...] = ()

    def select(self, cluster: Mapping[str, int]) -> list[tuple[str, int]]:
        """The topic-partitions this subscription reads, given ``{topic: partition count}``.

        Assigned partitions are returned even when the broker does not know them yet (Spark's
        ``assign`` does the same); subscribed topics that do not exist contribute nothing.
        """
        if self.kind == "assign":
            return sorted(self.partitions)
        if self.kind == "subscribe":
            names = [t for t in self.topics if t in cluster]
        else:
            rx = re.compile(self.pattern or "")
            names = [t for t in cluster if not t.startswith("__") and rx.fullmatch(t)]
        return sorted((t, p) for t in set(names) for p in range(cluster[t]))


def _parse_subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be given"
            + (f" (got {', '.join(given)})" if given else "")
        )
    key = given[0]
    value = opts[key].strip()
    if key == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(f"no topics to subscribe to in 'subscribe' = {opts[key]!r}")
        return Subscription("subscribe", topics=topics)
    if key == "subscribepattern":
        if not value:
            raise OptionError("pattern to subscribe is empty ('subscribePattern')")
        try:
            re.compile(value)
        except re.error as exc:
            raise OptionError(f"'subscribePattern' is not a valid regular expression: {exc}") from exc
        return Subscription("subscribePattern", pattern=value)
    try:
        doc = json.loads(value)
        parts = tuple(sorted({(str(t), int(p)) for t, ps in doc.items() for p in ps}))
    except (ValueError, TypeError, AttributeError) as exc:
        raise OptionError(
            f"'assign' must be JSON like {{\"topicA\":[0,1],\"topicB\":[2,4]}}, got {value!r}"
        ) from exc
    if not parts:
        raise OptionError("no topic-partitions to assign in 'assign'")
    return Subscription("assign", partitions=parts)


# -- offsets --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends.

    ``kind`` is "earliest", "latest", "offsets" (``offsets`` maps (topic, partition) to an offset
    or a sentinel), "timestamp" (one ``timestamp`` for every partition) or "timestamps"
    (``offsets`` maps (topic, partition) to a timestamp in ms).
    """

    kind: str
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int | None = None


def parse_partition_json(text: str, option: str) -> dict[tuple[str, int], int]:
    """``{"topicA":{"0":23,"1":-1}}`` (Spark's offsets JSON) as ``{(topic, partition): value}``."""
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise TypeError("not an object")
        out: dict[tuple[str, int], int] = {}
        for topic, parts in doc.items():
            if not isinstance(parts, dict):
                raise TypeError(f"{topic!r} does not map to an object")
            for p, v in parts.items():
                if isinstance(v, bool) or not isinstance(v, int):
                    raise TypeError(f"{topic}-{p}: {v!r} is not an integer")
                out[(str(topic), int(p))] = v
        return out
    except (ValueError, TypeError) as exc:
        raise OptionError(
            f"'{option}' must be 'earliest', 'latest' or JSON like "
            f"{{\"topicA\":{{\"0\":23,\"1\":-1}}}}: {exc} (got {text!r})"
        ) from exc


def _long(opts: Mapping[str, str], key: str, name: str, *, minimum: int | None = None) -> int | None:
    if key not in opts:
        return None
    try:
        value = int(str(opts[key]).strip())
    except ValueError:
        raise OptionError(f"'{name}' must be an integer, got {opts[key]!r}") from None
    if minimum is not None and value < minimum:
        raise OptionError(f"'{name}' must be at least {minimum}, got {value}")
    return value


def _bool(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    if key not in opts:
        return default
    value = str(opts[key]).strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"'{name}' must be 'true' or 'false', got {opts[key]!r}")
    return value == "true"


def _offset_spec(
    opts: Mapping[str, str],
    *,
    prefix: str,
    default: str,
    streaming: bool,
) -> OffsetSpec:
    """Resolve startingX / endingX; the global timestamp wins, then per-partition timestamps."""
    ts_key, by_ts_key, off_key = f"{prefix}timestamp", f"{prefix}offsetsbytimestamp", f"{prefix}offsets"
    name_ts, name_by_ts, name_off = f"{prefix}Timestamp", f"{prefix}OffsetsByTimestamp", f"{prefix}Offsets"
    if ts_key in opts:
        ts = _long(opts, ts_key, name_ts, minimum=0)
        return OffsetSpec("timestamp", timestamp=ts)
    if by_ts_key in opts:
        stamps = parse_partition_json(opts[by_ts_key], name_by_ts)
        bad = {tp: v for tp, v in stamps.items() if v < 0}
        if bad:
            raise OptionError(f"'{name_by_ts}' timestamps must be >= 0: {_fmt(bad)}")
        return OffsetSpec("timestamps", offsets=stamps)
    text = opts.get(off_key, default).strip()
    low = text.lower()
    if low in ("earliest", "latest"):
        spec = OffsetSpec(low)
    else:
        spec = OffsetSpec("offsets", offsets=parse_partition_json(text, name_off))
        bad = {tp: v for tp, v in spec.offsets.items() if v < EARLIEST}
        if bad:
            raise OptionError(f"'{name_off}': offsets must be >= 0, -1 (latest) or -2 (earliest): {_fmt(bad)}")
    if prefix == "starting" and not streaming:
        if spec.kind == "latest" or LATEST in spec.offsets.values():
            raise OptionError("starting offset can't be latest for batch queries on Shoal ('startingOffsets')")
    if prefix == "ending":
        if spec.kind == "earliest" or EARLIEST in spec.offsets.values():
            raise OptionError("ending offset can't be earliest for batch queries on Shoal ('endingOffsets')")
    return spec


def _fmt(offsets: Mapping[tuple[str, int], int]) -> str:
    return ", ".join(f"{t}-{p}={v}" for (t, p), v in sorted(offsets.items()))


# -- kafka.* client settings ----------------------------------------------------------------------

# Spark's Kafka source refuses these; so do we, with the same advice.
_REFUSED_SOURCE = {
    "auto.offset.reset": "Instead set the source option 'startingOffsets' to 'earliest' or 'latest' "
    "to specify where to start; the source manages offsets itself.",
    "key.deserializer": "Keys are always read as bytes (binary column 'key'); cast them in the DataFrame.",
    "value.deserializer": "Values are always read as bytes (binary column 'value'); cast them in the DataFrame.",
    "enable.auto.commit": "The source never commits offsets to the broker; the query's checkpoint holds them.",
    "interceptor.classes": "Consumer interceptors are not supported.",
}
_REFUSED_SINK = {
    "transactional.id": "Set the sink option 'exactlyOnce' to 'true' instead (and 'transactionalIdPrefix' "
    "if you like): each write task then gets its own transactional id; one id shared by every task "
    "would fence them against each other.",
    "key.serializer": "Keys are always written as bytes; use a binary or string column 'key'.",
    "value.serializer": "Values are always written as bytes; use a binary or string column 'value'.",
    "interceptor.classes": "Producer interceptors are not supported.",
}

def parse_jaas(text: str) -> dict[str, str]:
    """username/password of ``org.apache.kafka...PlainLoginModule required username="u" password="p";``."""
    try:
        return _parse_jaas(text)
    except JaasError:
        raise OptionError(
            "only a PlainLoginModule or ScramLoginModule 'kafka.sasl.jaas.config' can be translated; "
            "set 'kafka.sasl.username' and 'kafka.sasl.password' (and 'kafka.sasl.mechanism') instead"
        ) from None


def kafka_client_conf(opts: Mapping[str, str], *, sink: bool = False) -> dict[str, str]:
    """librdkafka settings from the ``kafka.*`` options (prefix removed)."""
    conf: dict[str, str] = {}
    for key, value in opts.items():
        low = key.lower()
        if not low.startswith("kafka."):
            continue
        name = low[len("kafka."):]
        refused = (_REFUSED_SINK if sink else _REFUSED_SOURCE)
        if name in refused:
            raise OptionError(f"Kafka option '{name}' is not supported. {refused[name]}")
        conf[name] = str(value)
    if not conf.get("bootstrap.servers", "").strip():
        raise OptionError("option 'kafka.bootstrap.servers' must be specified for the Shoal source and sink")
    jaas = conf.pop("sasl.jaas.config", None)
    if jaas is not None:
        creds = parse_jaas(jaas)
        if "username" in creds:
            conf.setdefault("sasl.username", creds["username"])
        if "password" in creds:
            conf.setdefault("sasl.password", creds["password"])
    return conf


# -- whole option sets ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceOptions:
    conf: Mapping[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None  # None in streaming queries
    by_timestamp_strategy: str = "error"  # error | latest
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS

    @property
    def read_committed(self) -> bool:
        """``kafka.isolation.level=read_committed``: no aborted records; "latest" is the LSO."""
        return self.conf.get("isolation.level") == "read_committed"


_UNSUPPORTED = {
    "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
}


def _lower(opts: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in opts.items()}


def parse_source_options(options: Mapping[str, Any], *, streaming: bool) -> SourceOptions:
    """Check and resolve the reader options; raises :class:`OptionError` with the option's name."""
    opts = _lower(options)
    for key, name in _UNSUPPORTED.items():
        if key in opts:
            raise OptionError(f"option '{name}' is not supported by the Shoal source yet")
    conf = kafka_client_conf(opts)
    isolation = conf.get("isolation.level")
    if isolation is not None:
        isolation = isolation.strip().lower()
        if isolation not in ISOLATION_LEVELS:
            raise OptionError(f"'kafka.isolation.level' must be 'read_uncommitted' or 'read_committed', got {isolation!r}")
        conf["isolation.level"] = isolation
    subscription = _parse_subscription(opts)
    starting = _offset_spec(opts, prefix="starting", default="latest" if streaming else "earliest", streaming=streaming)
    ending: OffsetSpec | None = None
    if streaming:
        for key, name in (("endingoffsets", "endingOffsets"), ("endingtimestamp", "endingTimestamp"),
                          ("endingoffsetsbytimestamp", "endingOffsetsByTimestamp")):
            if key in opts:
                raise OptionError(f"'{name}' is not valid in streaming queries (use it with spark.read)")
    else:
        ending = _offset_spec(opts, prefix="ending", default="latest", streaming=False)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got {strategy!r}")
    return SourceOptions(
        conf=conf,
        subscription=subscription,
        starting=starting,
        ending=ending,
        by_timestamp_strategy=strategy,
        max_offsets_per_trigger=_long(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger", minimum=1),
        min_partitions=_long(opts, "minpartitions", "minPartitions", minimum=1),
        max_records_per_partition=_long(opts, "maxrecordsperpartition", "maxRecordsPerPartition", minimum=1),
        include_headers=_bool(opts, "includeheaders", "includeHeaders", False),
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        poll_timeout_ms=_long(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs", minimum=1)
        or DEFAULT_POLL_TIMEOUT_MS,
    )


@dataclass(frozen=True)
class SinkOptions:
    conf: Mapping[str, str]
    topic: str | None
    commit_log_prefix: str | None = None
    exactly_once: bool = False
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX


def parse_sink_options(options: Mapping[str, Any]) -> SinkOptions:
    """Check the writer options: ``topic``, ``kafka.*``, ``sinkCommitLogTopicPrefix``,
    ``exactlyOnce``, ``transactionalIdPrefix``."""
    opts = _lower(options)
    conf = kafka_client_conf(opts, sink=True)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic' is empty")
    prefix = opts.get("sinkcommitlogtopicprefix")
    if prefix is not None and not re.fullmatch(r"[A-Za-z0-9._-]+", prefix.strip()):
        raise OptionError(f"'sinkCommitLogTopicPrefix' must be a valid topic name prefix, got {prefix!r}")
    exactly_once = _bool(opts, "exactlyonce", "exactlyOnce", False)
    txn_prefix = opts.get("transactionalidprefix")
    if txn_prefix is not None:
        if not exactly_once:
            raise OptionError("'transactionalIdPrefix' is only used with 'exactlyOnce' = 'true'")
        if not txn_prefix.strip() or any(c.isspace() for c in txn_prefix.strip()):
            raise OptionError(f"'transactionalIdPrefix' must be a non-empty string without spaces, got {txn_prefix!r}")
    if exactly_once and conf.get("enable.idempotence", "true").strip().lower() == "false":
        raise OptionError("'exactlyOnce' needs the idempotent producer; remove 'kafka.enable.idempotence' = 'false'")
    return SinkOptions(conf=conf, topic=topic.strip() if topic else None,
                       commit_log_prefix=prefix.strip() if prefix else None,
                       exactly_once=exactly_once,
                       transactional_id_prefix=txn_prefix.strip() if txn_prefix else DEFAULT_TRANSACTIONAL_ID_PREFIX)
