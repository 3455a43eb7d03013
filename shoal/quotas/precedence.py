"""Quota *selection* — which configured quota applies to a (user, client-id) — kept apart from
rate *tracking* (as Redpanda does). Pure functions over a mapping of configured entities.

Kafka's eight levels, most specific first (``ClientQuotaManager``'s default callback):

====  ===========================================  ===========================
level  config path                                  metric tags (user, client-id)
====  ===========================================  ===========================
1     /config/users/<user>/clients/<client-id>     (user, client-id)
2     /config/users/<user>/clients/<default>       (user, client-id)
3     /config/users/<user>                         (user, "")
4     /config/users/<default>/clients/<client-id>  (user, client-id)
5     /config/users/<default>/clients/<default>    (user, client-id)
6     /config/users/<default>                      (user, "")
7     /config/clients/<client-id>                  ("", client-id)
8     /config/clients/<default>                    ("", client-id)
====  ===========================================  ===========================

The metric tags name the *sensor* (the windowed rate) the usage is recorded in, so they say who
shares a quota: a user quota (3, 6) is shared by all the user's client-ids; a client-id quota
(7, 8) is shared by every user with that client-id; the (user, client-id) levels — including the
defaults 2, 4, 5 — give each pair its own sensor ("default per-client quota for exclusive use").
With no quota at all the tags are ``("", client-id)`` and the value is ``None`` (unlimited;
Kafka uses ``Long.MAX_VALUE``). These are the tags of Kafka's general multi-level walk; Kafka's
single-level optimisation only changes which sensor an *unlimited* client records into.

Deliberate deviation: the empty client-id is an ordinary client-id value here (Kafka's
``quotaLimit`` takes a user-only branch for it, which can disagree with its own tag walk).

Tenant level (Shoal). A tenant (logical cluster) quota covers every principal of the tenant. It
is *not* a ninth level of this walk: it is a separate, additional bound, selected by
:func:`select_tenant_quota` (the tenant's own entry, else the tenant default), enforced by its
own sensor tagged ``(tenant,)`` that every request of the tenant records into, and sliced per
broker (:func:`shoal.quotas.fairshare.tenant_quota_slice`). A request's throttle is the larger of
the client throttle and the tenant throttle (:func:`combine_throttles`), so the tenant bound and
the eight-level client bound both hold.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping, NamedTuple


class _Default(enum.Enum):
    DEFAULT = "<default>"

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = _Default.DEFAULT
"""The ``<default>`` entity name (distinct from any real user or client-id string)."""

EntityName = str | _Default | None


@dataclass(frozen=True, slots=True)
class QuotaEntityKey:
    """A configured quota entity: ``user`` and/or ``client_id``, each a name, DEFAULT, or None
    (absent). ``QuotaEntityKey(user="alice")`` is /config/users/alice."""

    user: EntityName = None
    client_id: EntityName = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise ValueError("a quota entity needs a user or a client-id")

    @property
    def path(self) -> str:
        parts = []
        if self.user is not None:
            parts.append(f"users/{self.user.value if self.user is DEFAULT else self.user}")
        if self.client_id is not None:
            cid = self.client_id.value if self.client_id is DEFAULT else self.client_id
            parts.append(f"clients/{cid}")
        return "/config/" + "/".join(parts)


class QuotaLevel(enum.IntEnum):
    USER_CLIENT = 1
    USER_DEFAULT_CLIENT = 2
    USER = 3
    DEFAULT_USER_CLIENT = 4
    DEFAULT_USER_DEFAULT_CLIENT = 5
    DEFAULT_USER = 6
    CLIENT = 7
    DEFAULT_CLIENT = 8


def candidate_entities(user: str, client_id: str) -> list[tuple[QuotaLevel, QuotaEntityKey]]:
    """The eight entities that can apply to (user, client_id), in precedence order."""
    return [
        (QuotaLevel.USER_CLIENT, QuotaEntityKey(user, client_id)),
        (QuotaLevel.USER_DEFAULT_CLIENT, QuotaEntityKey(user, DEFAULT)),
        (QuotaLevel.USER, QuotaEntityKey(user, None)),
        (QuotaLevel.DEFAULT_USER_CLIENT, QuotaEntityKey(DEFAULT, client_id)),
        (QuotaLevel.DEFAULT_USER_DEFAULT_CLIENT, QuotaEntityKey(DEFAULT, DEFAULT)),
        (QuotaLevel.DEFAULT_USER, QuotaEntityKey(DEFAULT, None)),
        (QuotaLevel.CLIENT, QuotaEntityKey(None, client_id)),
        (QuotaLevel.DEFAULT_CLIENT, QuotaEntityKey(None, DEFAULT)),
    ]


def level_of(entity: QuotaEntityKey) -> QuotaLevel:
    """The precedence level an entity key belongs to (by its shape)."""
    u, c = entity.user, entity.client_id
    if u is None:
        return QuotaLevel.DEFAULT_CLIENT if c is DEFAULT else QuotaLevel.CLIENT
    if u is DEFAULT:
        if c is None:
            return QuotaLevel.DEFAULT_USER
        return QuotaLevel.DEFAULT_USER_DEFAULT_CLIENT if c is DEFAULT else QuotaLevel.DEFAULT_USER_CLIENT
    if c is None:
        return QuotaLevel.USER
    return QuotaLevel.USER_DEFAULT_CLIENT if c is DEFAULT else QuotaLevel.USER_CLIENT


class QuotaSelection(NamedTuple):
    """``(value, entity)``; both None when no quota applies (unlimited)."""

    value: float | None
    entity: QuotaEntityKey | None

    @property
    def level(self) -> QuotaLevel | None:
        return None if self.entity is None else level_of(self.entity)

    def metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """The (user, client-id) tags of the sensor this usage is recorded in."""
        return metric_tags_for(self.level, user, client_id)


_USER_ONLY = {QuotaLevel.USER, QuotaLevel.DEFAULT_USER}
_CLIENT_ONLY = {QuotaLevel.CLIENT, QuotaLevel.DEFAULT_CLIENT}


def metric_tags_for(level: QuotaLevel | None, user: str, client_id: str) -> tuple[str, str]:
    if level in _USER_ONLY:
        return (user, "")
    if level is None or level in _CLIENT_ONLY:
        return ("", client_id)
    return (user, client_id)


def select_quota(entities: Mapping[QuotaEntityKey, float], user: str,
                 client_id: str) -> QuotaSelection:
    """The most specific configured quota for (user, client_id), and the entity it came from."""
    for _level, key in candidate_entities(user, client_id):
        value = entities.get(key)
        if value is not None:
            return QuotaSelection(value, key)
    return QuotaSelection(None, None)


# -- tenant level -----------------------------------------------------------------------------

def select_tenant_quota(tenant_quotas: Mapping[str | _Default, float],
                        tenant: str) -> tuple[float | None, str | _Default | None]:
    """The tenant-wide quota of ``tenant``: its own entry, else the DEFAULT entry, else None."""
    for key in (tenant, DEFAULT):
        value = tenant_quotas.get(key)
        if value is not None:
            return value, key
    return None, None


def combine_throttles(*throttles_ms: int) -> int:
    """A request subject to several bounds (client quota, tenant slice, broker-wide dynamic
    quota) waits for the longest: each bound then holds."""
    return max((0, *throttles_ms))
