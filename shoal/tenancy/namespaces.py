"""KIP-37 namespaces: names, hierarchy, recursive deletes, moves and config inheritance.

Pure functions over a ``MetadataImage`` (no I/O); the HTTP admin API, the admin handlers and the
broker (LogConfig) all resolve through them, so what DescribeConfigs reports is what the log uses.

Names (KIP-37, 001_67bcc8a044d91908.txt): a namespace is one or more tiers of
``[a-zA-Z0-9._-]`` separated by ``:`` (``payments:eu``); creating ``a:b:c`` creates ``a``, ``a:b``
and ``a:b:c``; there is no auto-creation. A topic ``a:b:t`` lives in namespace ``a:b`` and may only
be created when that namespace exists; a name without ``:`` is in the default namespace ``""``,
which always exists and keeps plain Kafka behaviour. Stored (physical) names carry the owner's
tenant prefix (``lkc-3f9a2c_payments:eu``); functions taking a ``prefix`` work on the names a
scope sees and return physical names where they say so.

Config inheritance: a topic's config that the topic does not set comes from its namespace, then
the parent namespaces (deepest first), then its tenant's defaults (``TenantInfo.configs``), then
the broker (cluster-wide dynamic, static, default). The layers above the broker are a pure
function of the image, so they are metadata's (``shoal.metadata.inheritance``: ``config_layers``,
and the overrides a topic's log runs with); ``effective_topic_config`` here resolves every config
with its origin, the broker's included.

On the Kafka wire (``describe_layered``) a value from a namespace or tenant default is reported as
DYNAMIC_DEFAULT_BROKER_CONFIG (3), since clients map ``config_source`` to a closed enum; each such
layer is also a synonym (name = the config, source 3, in precedence order), and the documentation
says where the value came from ("inherited from namespace payments:eu", "tenant default").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Collection, Iterable, Mapping

from shoal.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    describe_topic_configs,
    format_value,
)
from shoal.metadata import owner_tenant
from shoal.metadata.inheritance import (
    NAMESPACE,
    NAMESPACE_SEP,
    TOPIC,
    ConfigLayer,
    config_layers,
    namespace_chain,
    namespace_of,
)

if TYPE_CHECKING:
    from shoal.config import BrokerConfig
    from shoal.metadata import MetadataImage

MAX_TOPIC_NAME_LENGTH = 249
_TIER = re.compile(r"^[a-zA-Z0-9._-]+$")

# Origins of an effective value above shoal.metadata.inheritance's layers (TOPIC, NAMESPACE,
# TENANT_DEFAULT): the HTTP API and CLI print them.
BROKER_DYNAMIC = "BROKER_DYNAMIC"
BROKER_STATIC = "BROKER_STATIC"
DEFAULT = "DEFAULT"
_BROKER_ORIGIN = {
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: BROKER_DYNAMIC,
    ConfigSource.STATIC_BROKER_CONFIG: BROKER_STATIC,
    ConfigSource.DEFAULT_CONFIG: DEFAULT,
}


class NamespaceError(Exception):
    """A namespace operation refused; ``code`` is the Kafka error name to answer with, or
    NAMESPACE_NOT_EMPTY (a delete that is not recursive, HTTP 409)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# ---------------------------------------------------------------------------------------------
# Names


def namespace_name_error(name: str, max_length: int = MAX_TOPIC_NAME_LENGTH - 2) -> str | None:
    """Why ``name`` is not a legal namespace (None if it is). ``""`` is the default namespace,
    which exists but is never created or deleted, so it is not legal here either."""
    if not isinstance(name, str) or not name:
        return "Namespace name is illegal, it can't be empty"
    if len(name) > max_length:
        return f"Namespace name is illegal, it can't be longer than {max_length} characters"
    for tier in name.split(NAMESPACE_SEP):
        if not tier:
            return f"Namespace name \"{name}\" is illegal, it has an empty tier"
        if tier in (".", ".."):
            return f"Namespace name \"{name}\" is illegal, a tier cannot be \".\" or \"..\""
        if not _TIER.match(tier):
            return (
                f"Namespace name \"{name}\" is illegal, a tier contains a character other than "
                "ASCII alphanumerics, '.', '_' and '-'"
            )
    return None


def topic_name_error(name: str | None, max_length: int = MAX_TOPIC_NAME_LENGTH) -> str | None:
    """Kafka's ``Topic.validate`` with KIP-37 names (``<namespace>:<topic>``): the reason, or None."""
    if name is None or name == "":
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > max_length:
        return f"Topic name is illegal, it can't be longer than {max_length} characters, topic name: {name}"
    namespace, sep, local = name.rpartition(NAMESPACE_SEP)
    if not _TIER.match(local) or (sep and local in (".", "..")):
        allowed = "'.', '_', '-' and the namespace separator ':'" if sep else "'.', '_' and '-'"
        return f'Topic name "{name}" is illegal, it contains a character other than ASCII alphanumerics, {allowed}'
    if sep:
        why = namespace_name_error(namespace, max_length)
        if why is not None:
            return f'Topic name "{name}" is illegal: {why}'
    return None


def ancestors(namespace: str) -> list[str]:
    """``a:b:c`` -> ``["a", "a:b", "a:b:c"]`` (outermost first, the namespace itself last)."""
    return namespace_chain(namespace)


def parent_of(namespace: str) -> str:
    """``a:b:c`` -> ``a:b``; a top-level namespace's parent is the default namespace ``""``."""
    return namespace_of(namespace)


def is_under(name: str, namespace: str) -> bool:
    """Is ``name`` (a namespace or topic) inside ``namespace``, at any depth?"""
    return name.startswith(namespace + NAMESPACE_SEP) if namespace else True


def _visible_namespaces(image: "MetadataImage", prefix: str) -> list[str]:
    n = len(prefix)
    return sorted(p[n:] for p in image.namespaces if p.startswith(prefix) and (prefix or not _owned(image, p)))


def _visible_topics(image: "MetadataImage", prefix: str) -> list[str]:
    n = len(prefix)
    return sorted(p[n:] for p in image.topics if p.startswith(prefix) and (prefix or not _owned(image, p)))


def _owned(image: "MetadataImage", physical: str) -> bool:
    return owner_tenant(physical, image.tenants) is not None


def exists(image: "MetadataImage", prefix: str, namespace: str) -> bool:
    """Does the namespace exist for this scope (the default namespace always does)?"""
    return namespace == "" or (prefix + namespace) in image.namespaces


def children(image: "MetadataImage", prefix: str, parent: str = "", *, recursive: bool = False) -> list[str]:
    """The namespaces directly under ``parent`` ("" = the top level), or all below it (sorted).

    In the physical view (``prefix`` "") the tenants' namespaces are not listed.
    """
    out = []
    for ns in _visible_namespaces(image, prefix):
        if ns == parent or not is_under(ns, parent):
            continue
        if recursive or parent_of(ns) == parent:
            out.append(ns)
    return out


def topics_in(image: "MetadataImage", prefix: str, namespace: str, *, recursive: bool = False) -> list[str]:
    """The topics (visible names) directly in ``namespace``, or in it and below it."""
    return [t for t in _visible_topics(image, prefix)
            if (is_under(t, namespace) if recursive else namespace_of(t) == namespace)]


def plan_create(image: "MetadataImage", prefix: str, namespace: str) -> list[str]:
    """The physical namespaces to create for ``namespace`` (every missing tier, outermost first)."""
    why = namespace_name_error(namespace, MAX_TOPIC_NAME_LENGTH - 2 - len(prefix))
    if why is not None:
        raise NamespaceError("INVALID_REQUEST", why)
    return [prefix + ns for ns in ancestors(namespace) if (prefix + ns) not in image.namespaces]


@dataclass(frozen=True, slots=True)
class DeletePlan:
    """What one ``delete_namespaces`` call removes (physical names, sorted)."""

    namespaces: tuple[str, ...]
    topics: tuple[str, ...]


def plan_delete(image: "MetadataImage", prefix: str, namespace: str, *, recursive: bool = False) -> DeletePlan:
    """KIP-37's delete: the namespace and its topics; with ``recursive`` also every namespace (and
    topic) below it. Without ``recursive``, a namespace with child namespaces is refused."""
    if not namespace or (prefix + namespace) not in image.namespaces:
        raise NamespaceError("RESOURCE_NOT_FOUND", f"Namespace '{namespace}' does not exist.")
    below = children(image, prefix, namespace, recursive=True)
    if below and not recursive:
        raise NamespaceError(
            "NAMESPACE_NOT_EMPTY",
            f"Namespace '{namespace}' has child namespaces ({', '.join(below[:5])}"
            f"{', ...' if len(below) > 5 else ''}); delete them first or delete recursively.",
        )
    topics = topics_in(image, prefix, namespace, recursive=True)
    internal = [t for t in topics if image.topics[prefix + t].internal]
    if internal:
        raise NamespaceError("INVALID_REQUEST", f"Namespace '{namespace}' holds internal topics: {internal}")
    return DeletePlan(
        tuple(prefix + ns for ns in [namespace, *below]),
        tuple(prefix + t for t in topics),
    )


def moved_name(topic: str, target: str) -> str:
    """The name ``topic`` gets in namespace ``target``: its last tier under the new namespace."""
    local = topic.rpartition(NAMESPACE_SEP)[2]
    return f"{target}{NAMESPACE_SEP}{local}" if target else local


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


def plan_move(image: "MetadataImage", prefix: str, topics: Iterable[str], target: str) -> list[tuple[str, str]]:
    """KIP-37's move: ``(old physical, new physical)`` for each topic moved into ``target``.

    Refused (NamespaceError) as a whole when a topic does not exist or is internal, the target
    namespace does not exist, a new name is illegal or taken (or collides, '.' vs '_'), or two
    topics would get the same name. A topic already in ``target`` is left out.
    """
    if target and not exists(image, prefix, target):
        raise NamespaceError("INVALID_TOPIC_EXCEPTION", f"Namespace '{target}' does not exist")
    out: list[tuple[str, str]] = []
    new_names: set[str] = set()
    moving = set()
    for topic in topics:
        info = image.topics.get(prefix + topic)
        if info is None or (not prefix and _owned(image, topic)):
            raise NamespaceError("UNKNOWN_TOPIC_OR_PARTITION", f"Topic '{topic}' does not exist.")
        if info.internal:
            raise NamespaceError("INVALID_REQUEST", f"Topic {topic} is an internal topic and cannot be moved.")
        new = moved_name(topic, target)
        if new == topic:
            continue
        why = topic_name_error(new, MAX_TOPIC_NAME_LENGTH - len(prefix))
        if why is not None:
            raise NamespaceError("INVALID_TOPIC_EXCEPTION", why)
        if new in new_names:
            raise NamespaceError("INVALID_REQUEST", f"Two topics would be named '{new}' in namespace '{target}'.")
        new_names.add(new)
        moving.add(topic)
        out.append((prefix + topic, prefix + new))
    keys = {_collision_key(n) for n in new_names}
    for existing in _visible_topics(image, prefix):
        if existing in moving:
            continue
        if existing in new_names:
            raise NamespaceError("TOPIC_ALREADY_EXISTS", f"Topic '{existing}' already exists.")
        if _collision_key(existing) in keys:
            raise NamespaceError("INVALID_TOPIC_EXCEPTION", f"A moved topic would collide with existing topic: {existing}")
    return out


def missing_namespace_error(image: "MetadataImage", physical_topic: str, prefix: str = "") -> str | None:
    """The KIP-37 InvalidNamespaceException message when a new topic's namespace does not exist."""
    ns = namespace_of(physical_topic)
    if not ns or ns in image.namespaces:
        return None
    return f"Namespace '{ns[len(prefix):] if prefix and ns.startswith(prefix) else ns}' does not exist"


# ---------------------------------------------------------------------------------------------
# Config inheritance


def _normalized(name: str, raw: str) -> str | None:
    d = TOPIC_CONFIGS.get(name)
    if d is None:
        return raw
    try:
        return format_value(d.type, d.parse(raw))
    except ConfigError:
        return raw


@dataclass(frozen=True, slots=True)
class EffectiveConfig:
    """One topic config as resolved: its value, where it came from (``origin``; ``where`` is the
    namespace for NAMESPACE, the broker config's name for BROKER_* and DEFAULT) and every layer that
    sets it, highest first (origin, where, value)."""

    name: str
    value: str | None
    origin: str
    where: str | None
    layers: tuple[tuple[str, str | None, str | None], ...]

    @property
    def label(self) -> str:
        return f"{self.origin} {self.where}" if self.where else self.origin


def resolve_layers(layers: list[ConfigLayer], broker: "BrokerConfig") -> list[EffectiveConfig]:
    """Every topic config resolved through ``layers`` then the broker (sorted by name)."""
    out: list[EffectiveConfig] = []
    for e in describe_topic_configs(broker, {}):
        d = TOPIC_CONFIGS[e.name]
        chain: list[tuple[str, str | None, str | None]] = [
            (layer.origin, layer.where, None if d.sensitive else _normalized(e.name, layer.configs[e.name]))
            for layer in layers if e.name in layer.configs
        ]
        if chain:
            origin, where, value = chain[0]
        else:  # the broker's value, in the topic config's unit (log.retention.hours -> ms)
            origin = _BROKER_ORIGIN.get(e.source, DEFAULT)
            where, value = (e.synonyms[0].name if e.synonyms else None), e.value
        chain += [(_BROKER_ORIGIN.get(s.source, DEFAULT), s.name, s.value) for s in e.synonyms]
        out.append(EffectiveConfig(e.name, value, origin, where, tuple(chain)))
    return out


def effective_topic_config(image: "MetadataImage", physical_topic: str, broker: "BrokerConfig") -> list[EffectiveConfig]:
    """Every config of ``physical_topic``: topic override -> namespace (deepest first) -> parents ->
    tenant defaults -> broker (dynamic, static, default), each with its origin."""
    return resolve_layers(config_layers(image, physical_topic), broker)


def _inherited_doc(layer: ConfigLayer) -> str:
    if layer.origin == NAMESPACE:
        return f"inherited from namespace {layer.where}"
    return "tenant default"


def describe_layered(broker: "BrokerConfig", layers: list[ConfigLayer], *, own: str = TOPIC,
                     names: Collection[str] | None = None) -> list[ConfigEntry]:
    """DescribeConfigs entries for a resource whose own values are the first layer if its origin
    is ``own`` (a topic's overrides, or a namespace's configs when describing the namespace) and
    which inherits the rest (``names``: those configs only). Own values are DYNAMIC_TOPIC_CONFIG
    (1); inherited ones DYNAMIC_DEFAULT_BROKER_CONFIG (3), one synonym per layer that sets them,
    and the documentation names the layer."""
    own_configs: Mapping[str, str] = {}
    inherited = layers
    if layers and layers[0].origin == own and (own != NAMESPACE or layers[0].where is not None):
        own_configs, inherited = layers[0].configs, layers[1:]
    base = describe_topic_configs(broker, own_configs, names)
    if not any(layer.configs for layer in inherited):
        return base
    out: list[ConfigEntry] = []
    for e in base:
        setting = [layer for layer in inherited if e.name in layer.configs]
        if not setting:
            out.append(e)
            continue
        d = TOPIC_CONFIGS[e.name]
        layer_syns = tuple(
            ConfigSynonym(e.name, None if d.sensitive else _normalized(e.name, layer.configs[e.name]),
                          ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
            for layer in setting
        )
        if e.name in own_configs:
            out.append(_replace(e, synonyms=e.synonyms[:1] + layer_syns + e.synonyms[1:]))
            continue
        out.append(_replace(
            e,
            value=layer_syns[0].value,
            source=ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
            is_default=False,
            synonyms=layer_syns + e.synonyms,
            documentation=f"{_inherited_doc(setting[0])}; {d.doc}",
        ))
    return out


def _replace(e: ConfigEntry, **changes: object) -> ConfigEntry:
    import dataclasses

    return dataclasses.replace(e, **changes)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Tenant defaults named as broker configs


def _broker_to_topic() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, d in TOPIC_CONFIGS.items():
        if d.broker in BROKER_CONFIGS and d.broker != name:
            out[d.broker] = name
    return out


_BROKER_TO_TOPIC = _broker_to_topic()


def tenant_default_key(name: str, value: str | None) -> tuple[str, str | None]:
    """A tenant default named as the topic config or as its broker synonym
    (``log.retention.ms``, ``log.retention.hours``...) -> ``(topic config name, value in its unit)``.

    Raises NamespaceError("POLICY_VIOLATION") for a broker config that is no topic default.
    """
    from shoal.config import synonym_factor

    if name in TOPIC_CONFIGS:
        return name, value
    primary, factor = synonym_factor(name)
    topic = _BROKER_TO_TOPIC.get(primary)
    if topic is None:
        raise NamespaceError(
            "POLICY_VIOLATION",
            f"A tenant may only set defaults for topic configs; '{name}' is not one (nor a broker synonym of one).",
        )
    if value is None or factor == 1:
        return topic, value
    try:
        n = int(value.strip())
    except ValueError:
        raise NamespaceError("INVALID_CONFIG", f"Invalid value {value} for configuration {name}") from None
    return topic, str(-1 if n < 0 else n * factor)


def describe_tenant_defaults(configs: Mapping[str, str]) -> list[ConfigEntry]:
    """DescribeConfigs entries of a tenant's defaults (a tenant's BROKER resource ""): each set
    default under its topic config name, DYNAMIC_DEFAULT_BROKER_CONFIG, with its broker synonym."""
    out: list[ConfigEntry] = []
    for name in sorted(configs):
        d = TOPIC_CONFIGS.get(name)
        if d is None:
            continue
        value = None if d.sensitive else _normalized(name, configs[name])
        synonyms = [ConfigSynonym(name, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
        if d.broker != name and d.broker in BROKER_CONFIGS:
            synonyms.append(ConfigSynonym(d.broker, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        out.append(ConfigEntry(
            name=name,
            value=value,
            source=ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
            is_default=False,
            read_only=False,
            is_sensitive=d.sensitive,
            synonyms=tuple(synonyms),
            config_type=d.config_type,
            documentation=f"tenant default; {d.doc}",
        ))
    return out
