"""A topic's inherited configs (KIP-37 namespaces, tenant defaults): pure functions of the image.

A topic's config that the topic does not set comes from its namespace, then the parent namespaces
(deepest first), then its tenant's defaults (``TenantInfo.configs``), then the broker
(cluster-wide dynamic, static, default). ``config_layers`` lists the layers above the broker,
``inherited_overrides`` flattens them into the overrides ``shoal.config.log_config`` takes,
``topic_overrides`` is one topic's, what its log runs with (``shoal.replica``), and
``changed_config_prefixes`` names the topics whose layers may differ between two images.

Names: a namespace is tiers separated by ``:`` (``payments:eu``); a topic ``a:b:t`` lives in
namespace ``a:b``, a name without ``:`` in the default namespace ``""``. Stored (physical) names
carry the owner's tenant prefix (``tenant_prefix``). Validating names, the hierarchy's plans and
describing layered configs on the wire are tenancy's (``shoal.tenancy.namespaces``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping, Protocol

from shoal.metadata import owner_tenant, tenant_prefix
from shoal.placement.cells import topic_defaults

if TYPE_CHECKING:
    from shoal.metadata import MetadataImage


class HasConfigs(Protocol):
    """A namespace's or tenant's entry in the image (``NamespaceInfo``, ``TenantInfo``)."""

    @property
    def configs(self) -> Mapping[str, str]: ...

NAMESPACE_SEP = ":"

# Origins of a layer (and of an effective value: shoal.tenancy.namespaces adds the broker's)
TOPIC = "TOPIC"
NAMESPACE = "NAMESPACE"
TENANT_DEFAULT = "TENANT_DEFAULT"


def namespace_of(name: str) -> str:
    """The namespace of a topic/group name: everything before the last ``:`` ("" if none)."""
    i = name.rfind(NAMESPACE_SEP)
    return name[:i] if i > 0 else ""


def namespace_chain(namespace: str) -> list[str]:
    """``a:b:c`` -> ``["a", "a:b", "a:b:c"]`` (outermost first); "" -> []."""
    if not namespace:
        return []
    parts = namespace.split(NAMESPACE_SEP)
    return [NAMESPACE_SEP.join(parts[: i + 1]) for i in range(len(parts))]


@dataclass(frozen=True, slots=True)
class ConfigLayer:
    """One source of topic config values above the broker: ``origin`` TOPIC, NAMESPACE (``where``
    = the namespace as its owner names it) or TENANT_DEFAULT."""

    origin: str
    where: str | None
    configs: Mapping[str, str]

    @property
    def label(self) -> str:
        return f"{self.origin} {self.where}" if self.where else self.origin


def namespace_layers(image: "MetadataImage", physical_namespace: str) -> list[ConfigLayer]:
    """The layers a topic in ``physical_namespace`` inherits: that namespace, its parents (deepest
    first), then its tenant's defaults. Namespaces that do not exist contribute nothing."""
    tid = owner_tenant(physical_namespace, image.tenants) if physical_namespace else None
    prefix = tenant_prefix(tid) if tid else ""
    layers: list[ConfigLayer] = []
    if physical_namespace:
        for ns in reversed(namespace_chain(physical_namespace)):
            info = image.namespaces.get(ns)
            if info is not None and ns.startswith(prefix) and len(ns) > len(prefix):
                layers.append(ConfigLayer(NAMESPACE, ns[len(prefix):], info.configs))
    tenant = image.tenants.get(tid) if tid else None
    if tenant is not None:
        layers.append(ConfigLayer(TENANT_DEFAULT, None, topic_defaults(tenant.configs)))
    return layers


def tenant_layers(image: "MetadataImage", tenant_id: str) -> list[ConfigLayer]:
    tenant = image.tenants.get(tenant_id)
    return [ConfigLayer(TENANT_DEFAULT, None, topic_defaults(tenant.configs))] if tenant is not None else []


def config_layers(
    image: "MetadataImage", physical_topic: str, own: Mapping[str, str] | None = None
) -> list[ConfigLayer]:
    """Every layer of ``physical_topic`` above the broker, highest precedence first: the topic's
    own overrides (``own``, else the image's topic's, if it exists), its namespace, the parents,
    the tenant's defaults."""
    layers: list[ConfigLayer] = []
    if own is None:
        topic = image.topics.get(physical_topic)
        own = topic.configs if topic is not None else None
    if own is not None:
        layers.append(ConfigLayer(TOPIC, None, own))
    # The tenant of a topic is its owner even for a topic in the default namespace.
    tid = owner_tenant(physical_topic, image.tenants)
    ns = namespace_of(physical_topic)
    if ns:
        layers += namespace_layers(image, ns)
    elif tid is not None:
        layers += tenant_layers(image, tid)
    return layers


def inherited_overrides(layers: Iterable[ConfigLayer]) -> dict[str, str]:
    """The layers flattened into one overrides mapping (higher layers win): what ``log_config``
    and ``describe_topic_configs`` take for the topic."""
    out: dict[str, str] = {}
    for layer in reversed(list(layers)):
        out.update(layer.configs)
    return out


def topic_overrides(
    image: "MetadataImage", physical_topic: str, own: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``inherited_overrides(config_layers(...))``: the overrides the topic's log runs with."""
    if own is None:
        topic = image.topics.get(physical_topic)
        own = topic.configs if topic is not None else {}
    if not image.namespaces and not image.tenants:
        return dict(own)  # the common untenanted case, without building layers
    return inherited_overrides(config_layers(image, physical_topic, own))


def changed_config_prefixes(old: "MetadataImage", new: "MetadataImage") -> tuple[str, ...]:
    """Name prefixes of the topics whose inherited configs may differ between two images: ``ns:``
    for each namespace whose configs changed (or that came or went), the tenant's prefix for each
    tenant whose defaults changed. Empty when neither changed."""
    out = [name + NAMESPACE_SEP for name in _configs_changed(old.namespaces, new.namespaces)]
    out += [tenant_prefix(tid) for tid in _configs_changed(old.tenants, new.tenants)]
    return tuple(sorted(out))


def _configs_changed(old: Mapping[str, HasConfigs], new: Mapping[str, HasConfigs]) -> list[str]:
    """The keys whose entry's configs differ between two mappings (an absent entry has none)."""
    if old is new or old == new:
        return []
    out = []
    for key in old.keys() | new.keys():
        a, b = old.get(key), new.get(key)
        if a is not b and (a.configs if a else {}) != (b.configs if b else {}):
            out.append(key)
    return out
