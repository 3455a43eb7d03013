"""Client quota entities: how they are stored, how each scope names them, which are valid, and
which configured quotas apply to whom. Pure functions over ``MetadataImage.client_quotas``.

Stored form (``QuotaEntity``): a sorted tuple of ``(type, name)``, ``name`` None for the
``<default>`` entity; types ``user``, ``client-id``, ``ip`` (Kafka's) and ``tenant`` (Shoal's).

* The physical view (the operator, ``scope.tenant_id`` None) sees and sets entities exactly as
  stored, ``tenant`` components included:

  - ``(("tenant", T),)`` — tenant T's tenant-wide quota; ``(("tenant", None),)`` — the default
    for every tenant without its own;
  - ``(("tenant", T), ("user", U))`` etc. — a quota inside tenant T (what T itself sets);
  - entities without a ``tenant`` component apply to physical-view clients only.

* A tenant T sees and sets only the ``user``/``client-id`` entities of its own scope. What it
  sends is stored with a ``("tenant", T)`` component added, and user names made physical: a user
  mapped to T (``user_tenants``) keeps its name, any other name ``u`` becomes ``T_u`` (the name
  of a SCRAM user T creates itself). **Client ids are stored as the client sends them: the
  tenant component is their qualification**, so T's ``client-id=app`` is the stored
  ``(("client-id", "app"), ("tenant", T))`` and never applies to tenant B's ``app`` (stored
  with ``("tenant", B)``) nor to a physical-view ``app`` (no tenant component). The ``<default>``
  user or client-id of T is the default *within* T. T never sees the tenant component of its
  entities, other tenants' entities, or ``ip`` entities (broker connection limits are the
  operator's); it sees (DescribeClientQuotas, not Alter) its own tenant-wide quota as
  ``(("tenant", T),)`` with the values that bound it (its own, else the tenant default's).

Precedence (:func:`quota_index`): a request of tenant T resolves its (user, client-id) quota with
Kafka's eight levels over T's entities only; a physical-view request over the entities without a
tenant component. The tenant-wide quota (T's own, else the tenant default) is a separate bound
(see :mod:`shoal.quotas.precedence`). ``delete_tenant`` removes every entity naming T.

Validation follows Kafka's ``ClientQuotaControlManager``: INVALID_REQUEST for an empty entity, a
duplicated type, an unknown type, an empty name, ``ip`` combined with anything or not an IP
address, an unknown key for the entity, a value <= 0, or a fraction for an integral key.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from shoal.metadata import MetadataImage, QuotaEntity, tenant_prefix
from shoal.quotas.precedence import DEFAULT, QuotaEntityKey

USER, CLIENT_ID, IP, TENANT = "user", "client-id", "ip", "tenant"
PRODUCE_KEY = "producer_byte_rate"
FETCH_KEY = "consumer_byte_rate"
REQUEST_KEY = "request_percentage"
MUTATION_KEY = "controller_mutation_rate"
CONNECTION_RATE_KEY = "connection_creation_rate"

# Kafka's QuotaConfig types: integral keys refuse fractions.
CLIENT_KEYS = {PRODUCE_KEY: "long", FETCH_KEY: "long", REQUEST_KEY: "double", MUTATION_KEY: "double"}
IP_KEYS = {CONNECTION_RATE_KEY: "int"}
_INTEGRAL_MAX = {"long": 2.0**63 - 1, "int": 2.0**31 - 1}

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


class EntityError(Exception):
    """An entity, filter or value Kafka would refuse; ``code`` is the error name to answer."""

    def __init__(self, message: str, code: str = "INVALID_REQUEST") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- names -----------------------------------------------------------------------------------


def physical_user(image: MetadataImage, tenant: str, name: str | None) -> str | None:
    """The stored name of the user tenant ``tenant`` calls ``name``."""
    if name is None or image.user_tenants.get(name) == tenant:
        return name
    return tenant_prefix(tenant) + name


def visible_user(tenant: str, name: str | None) -> str | None:
    prefix = tenant_prefix(tenant)
    if name is not None and name.startswith(prefix):
        return name[len(prefix):]
    return name


def quota_user(principal: str) -> str:
    """The user a quota is looked up for: the principal's name (``User:alice`` -> ``alice``,
    ``User:ANONYMOUS`` -> ``ANONYMOUS``), as Kafka uses ``KafkaPrincipal.getName``."""
    return principal.partition(":")[2] or principal


# -- wire entity <-> stored entity --------------------------------------------------------------


def _check_components(components: Sequence[tuple[str, str | None]], types: Iterable[str]) -> dict[str, str | None]:
    allowed = set(types)
    if not components:
        raise EntityError("Invalid empty client quota entity")
    out: dict[str, str | None] = {}
    for etype, name in components:
        if etype in out:
            raise EntityError(f"Invalid client quota entity, duplicate entity entry {etype}")
        if etype not in allowed:
            raise EntityError(f"Unhandled client quota entity type: {etype}")
        if name is not None and name == "":
            raise EntityError(f"Empty {etype} not supported")
        out[etype] = name
    return out


def stored_entity(image: MetadataImage, tenant: str | None,
                  components: Sequence[tuple[str, str | None]]) -> QuotaEntity:
    """The stored form of an entity a scope names (see the module doc). Raises EntityError."""
    types = (USER, CLIENT_ID, IP, TENANT) if tenant is None else (USER, CLIENT_ID)
    entity = _check_components(components, types)
    if IP in entity:
        if len(entity) > 1:
            raise EntityError("Invalid quota entity combination, IP entity should not be combined with "
                              "User or ClientId")
        ip = entity[IP]
        if ip is not None:
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise EntityError(f"{ip} is not a valid IP or resolvable host.") from None
    if TENANT in entity and entity[TENANT] is None and len(entity) > 1:
        raise EntityError("The default tenant entity cannot be combined with User or ClientId")
    if tenant is not None:
        if USER in entity:
            entity[USER] = physical_user(image, tenant, entity[USER])
        entity[TENANT] = tenant
    return tuple(sorted(entity.items()))


def visible_entity(tenant: str | None, stored: QuotaEntity) -> tuple[tuple[str, str | None], ...] | None:
    """How a scope sees a stored entity, or None when it is not that scope's."""
    if tenant is None:
        return stored
    d = dict(stored)
    if d.pop(TENANT, None) != tenant or IP in d or not d:
        return None
    if USER in d:
        d[USER] = visible_user(tenant, d[USER])
    return tuple(sorted(d.items()))


def valid_keys(stored: QuotaEntity) -> Mapping[str, str]:
    return IP_KEYS if any(t == IP for t, _ in stored) else CLIENT_KEYS


def check_value(stored: QuotaEntity, key: str, value: float) -> None:
    """Kafka's ``validateQuotaKeyValue``; raises EntityError."""
    kind = valid_keys(stored).get(key)
    if kind is None:
        raise EntityError(f"Invalid configuration key {key}")
    if not value > 0.0:
        raise EntityError(f"Quota {key} must be greater than 0")
    if kind in _INTEGRAL_MAX:
        if value > _INTEGRAL_MAX[kind]:
            raise EntityError(f"Proposed value for {key} is too large for {'an INT' if kind == 'int' else 'a LONG'}.")
        if abs(value % 1.0) > 1e-6:
            raise EntityError(f"{key} cannot be a fractional value.")


# -- describe ----------------------------------------------------------------------------------


def tenant_wide_values(image: MetadataImage, tenant: str) -> dict[str, float]:
    """The tenant-wide quota values that bound ``tenant``: its own entity's, else (per key) the
    tenant default's."""
    quotas = image.client_quotas
    return {**quotas.get(((TENANT, None),), {}), **quotas.get(((TENANT, tenant),), {})}


def describe(image: MetadataImage, tenant: str | None,
             components: Sequence[tuple[str, int, str | None]], strict: bool
             ) -> list[tuple[tuple[tuple[str, str | None], ...], dict[str, float]]]:
    """DescribeClientQuotas: the (visible entity, values) a scope's filter matches, with Kafka's
    ``ClientQuotasImage.describe`` rules. Raises EntityError for a bad filter.

    A tenant also sees its own tenant-wide quota, as the entity ``(tenant=<its id>)`` (the name
    its clients see as the cluster id) with the values that bound it: its own, else the tenant
    default's, key by key. It never sees the default entity itself nor another tenant's."""
    known = (USER, CLIENT_ID, IP, TENANT)
    exact: dict[str, str | None] = {}
    any_of: set[str] = set()
    for etype, match_type, match in components:
        if not etype:
            raise EntityError("Invalid empty entity type.")
        if etype in exact or etype in any_of:
            raise EntityError(f"Entity type {etype} cannot appear more than once in the filter.")
        if etype not in known:
            raise EntityError(f"Unsupported entity type {etype}", "UNSUPPORTED_VERSION")
        if match_type == MATCH_EXACT:
            if match is None:
                raise EntityError("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[etype] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise EntityError("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[etype] = None
        elif match_type == MATCH_ANY:
            if match is not None:
                raise EntityError("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            any_of.add(etype)
        else:
            raise EntityError(f"Unknown match type {match_type}", "UNSUPPORTED_VERSION")
    named = set(exact) | any_of
    if IP in named and (USER in named or CLIENT_ID in named):
        raise EntityError("Invalid entity filter component combination. IP filter component should not be "
                          "used with user or clientId filter component.")
    out = []
    candidates = [(visible_entity(tenant, stored), values) for stored, values in image.client_quotas.items()]
    if tenant is not None:
        own = tenant_wide_values(image, tenant)
        if own:
            candidates.append((((TENANT, tenant),), own))
    for entity, values in candidates:
        if entity is None:
            continue
        d = dict(entity)
        if strict and len(d) != len(exact) + len(any_of):
            continue
        if all(t in d and d[t] == name for t, name in exact.items()) and all(t in d for t in any_of):
            out.append((entity, dict(values)))
    out.sort(key=lambda ev: repr(ev[0]))
    return out


# -- which quota applies --------------------------------------------------------------------------


@dataclass(frozen=True)
class QuotaIndex:
    """One quota key's configured values, arranged for lookups: per scope (tenant id, None for
    the physical view) the eight-level entities, and the tenant-wide values (tenant id or
    DEFAULT -> value)."""

    scopes: Mapping[str | None, Mapping[QuotaEntityKey, float]] = field(default_factory=dict)
    tenants: Mapping[object, float] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.scopes and not self.tenants


def quota_index(client_quotas: Mapping[QuotaEntity, Mapping[str, float]], key: str) -> QuotaIndex:
    scopes: dict[str | None, dict[QuotaEntityKey, float]] = {}
    tenants: dict[object, float] = {}
    for stored, values in client_quotas.items():
        value = values.get(key)
        if value is None:
            continue
        d = dict(stored)
        if IP in d:
            continue
        scope = d.pop(TENANT, None)
        if not d:
            if TENANT in dict(stored):
                tenants[DEFAULT if scope is None else scope] = value
            continue
        user = DEFAULT if USER in d and d[USER] is None else d.get(USER)
        client = DEFAULT if CLIENT_ID in d and d[CLIENT_ID] is None else d.get(CLIENT_ID)
        scopes.setdefault(scope, {})[QuotaEntityKey(user, client)] = value
    return QuotaIndex(scopes, tenants)


def tenant_leaders(image: MetadataImage, tenant: str) -> set[int]:
    """The brokers leading at least one of the tenant's partitions (its tenant-wide quota is
    split over them)."""
    prefix = tenant_prefix(tenant)
    return {
        p.leader for name, t in image.topics.items() if name.startswith(prefix)
        for p in t.partitions if p.leader >= 0
    }


def tenant_read_replicas(image: MetadataImage, tenant: str) -> set[int]:
    """The brokers that may serve the tenant's consumers without leading the partition: its
    partitions' other replicas (followers and observers) on brokers with a rack, where a leader
    with the rack-aware replica selector sends a consumer of that rack (KIP-392). Its tenant-wide
    consumer quota is split over them and its leaders."""
    prefix = tenant_prefix(tenant)
    brokers = image.brokers
    out: set[int] = set()
    for name, t in image.topics.items():
        if name.startswith(prefix):
            for p in t.partitions:
                for r in p.replicas:
                    if r != p.leader and r not in out:
                        b = brokers.get(r)
                        if b is not None and b.rack:
                            out.add(r)
    return out
