"""Tenancy as a scope: who is asking, which logical cluster they see, and what they may do.

Every request carries a ``Scope`` (``ctx.scope``), resolved from the connection's principal:

- a principal whose user belongs to a tenant (``user_tenants``, or a user the tenant created
  itself, stored as ``<tenant>_<name>``) is scoped to that tenant: every name it sends is qualified
  with the tenant's prefix (``lkc-3f9a2c_users``) and every name it gets back is unqualified; a
  physical name without the prefix does not exist for it;
- any other principal sees the physical cluster (``tenant_id`` None). The operator is a super user
  (``super.users``) there.

Authorization (``allowed``): super users and a tenant's administrators may do anything within their
view. Otherwise, with ``authorizer.class.name`` set, the ACLs of the caller's own scope decide
(``shoal.tenancy.acl.authorize``); without an authorizer everything in the view is allowed, as
Kafka allows everything without one. Decisions are cached per metadata image.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterator

from shoal.metadata import owner_tenant, tenant_prefix
from shoal.tenancy.acl import CLUSTER_NAME, Operation, ResourceType, authorize

if TYPE_CHECKING:
    from shoal.config import BrokerConfig
    from shoal.metadata import AclEntry, MetadataImage, TopicInfo

INTERNAL_TOPIC_PREFIX = "__"
_TENANT_SHAPED = re.compile(r"lkc-[0-9a-z]{6}_")


def principal_user(principal: str) -> str | None:
    return principal[5:] if principal.startswith("User:") else None


def tenant_of(image: "MetadataImage", principal: str) -> str | None:
    user = principal_user(principal)
    if user is None:
        return None
    tid = image.user_tenants.get(user)
    if tid is None:
        tid = owner_tenant(user, image.tenants)
    return tid


def super_users(config: "BrokerConfig") -> frozenset[str]:
    raw = config.get("super.users") or ""
    return frozenset(s.strip() for s in raw.split(";") if s.strip())


_acl_index: tuple[object, dict[str | None, tuple["AclEntry", ...]]] = ((), {})


def acls_of(acls: tuple["AclEntry", ...], tenant_id: str | None) -> tuple["AclEntry", ...]:
    """The bindings of one tenant (None: the physical view's), from an index built once per ACL
    table: a scope is made per connection and per metadata change, and scanning every tenant's
    ACLs each time costs ACLs x connections. Images share an unchanged table."""
    global _acl_index
    table, index = _acl_index
    if table is not acls:
        index = {}
        for a in acls:
            index.setdefault(a.tenant, []).append(a)
        index = {t: tuple(v) for t, v in index.items()}
        _acl_index = (acls, index)
    return index.get(tenant_id, ())


# Where a tenant's replicas live and which of them lead decides how the brokers' load is shared
# between tenants, so moving them (AlterPartitionReassignments, ElectLeaders) is the platform
# operator's, as in Confluent's multi-tenant cloud: a tenant's principals are refused with
# CLUSTER_AUTHORIZATION_FAILED and this message, even a tenant administrator.
PLACEMENT_IS_OPERATORS = ("Reassigning partitions and electing leaders are operator actions: a tenant's principals "
                          "cannot move its replicas (ask the platform operator)")

# For the same reason a tenant does not choose where its replicas go when it creates them: a
# manual replica assignment in CreateTopics or CreatePartitions, and the topic configs that name
# brokers or racks (these), set, changed or removed by a tenant through CreateTopics, AlterConfigs
# or IncrementalAlterConfigs (on a topic, a namespace or its topic defaults), are refused with
# POLICY_VIOLATION and these messages; the cluster's placement (the broker's
# ``replica.placement``, else rack-aware round robin) places the tenant's topics. The physical
# view (the operator) keeps them.
OPERATOR_TOPIC_CONFIGS = frozenset({
    "replica.placement", "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"})
ASSIGNMENT_IS_OPERATORS = ("Replica placement is the platform operator's: a tenant's principals cannot assign "
                           "replicas to brokers (leave the assignment out: the cluster places the partitions)")


def operator_config_refused(name: str) -> str:
    """The POLICY_VIOLATION message for a tenant setting one of ``OPERATOR_TOPIC_CONFIGS``."""
    return (f"Replica placement is the platform operator's: a tenant's principals cannot set or change {name} "
            "(the cluster places the tenant's topics)")


class Scope:
    """One principal's view of the cluster at one metadata image."""

    __slots__ = (
        "tenant_id", "prefix", "principal", "visible_principal", "host", "superuser", "epoch",
        "_enforce", "_allow_if_none", "_acls", "_cache", "_image",
    )

    def __init__(
        self,
        image: "MetadataImage",
        config: "BrokerConfig",
        principal: str,
        host: str,
        tenant_id: str | None,
    ) -> None:
        self.tenant_id = tenant_id
        self.prefix = tenant_prefix(tenant_id) if tenant_id else ""
        self.principal = principal
        self.host = host
        self.epoch = image.epoch
        self._image = image
        user = principal_user(principal)
        if tenant_id and user and user.startswith(self.prefix):
            self.visible_principal = "User:" + user[len(self.prefix):]
        else:
            self.visible_principal = principal
        if tenant_id is None:
            self.superuser = principal in super_users(config)
        else:
            self.superuser = user in image.tenant_admins
        self._enforce = bool(config.get("authorizer.class.name")) and not self.superuser
        self._allow_if_none = bool(config.get("allow.everyone.if.no.acl.found"))
        self._acls = acls_of(image.acls, tenant_id) if self._enforce else ()
        self._cache: dict[tuple[int, int, str], bool] = {}

    # -- names ------------------------------------------------------------------------------

    @property
    def physical_view(self) -> bool:
        return self.tenant_id is None

    def physical(self, name: str) -> str:
        """The stored name of a resource this scope calls ``name``."""
        return self.prefix + name if self.prefix else name

    def visible(self, physical: str) -> str | None:
        """What this scope calls a stored resource, or None when it is not this scope's."""
        if not self.prefix:
            return physical
        if physical.startswith(self.prefix):
            return physical[len(self.prefix):]
        return None

    def reserved_name(self, image: "MetadataImage", name: str) -> bool:
        """Topic names a tenant may not create: internal ones (``__…``, Kafka's internal topics)
        and ones shaped like another tenant's physical names (``lkc-xxxxxx_…``; they would only
        confuse); nor may the physical view's non-super users create a tenant's physical name
        when that tenant exists."""
        if self.prefix:
            return name.startswith(INTERNAL_TOPIC_PREFIX) or _TENANT_SHAPED.match(name) is not None
        return not self.superuser and owner_tenant(name, image.tenants) is not None

    def reserved_group(self, name: str) -> bool:
        """Group ids a tenant may not create or join: ids shaped like a tenant's physical names
        (``lkc-xxxxxx_…``; Kafka's error: INVALID_GROUP_ID). The physical view may use any."""
        return bool(self.prefix) and _TENANT_SHAPED.match(name) is not None

    def topics(self, image: "MetadataImage") -> Iterator[tuple[str, "TopicInfo"]]:
        """(visible name, topic) of every topic this scope can see exists (not yet authorized)."""
        prefix = self.prefix
        if not prefix:
            yield from image.topics.items()
            return
        n = len(prefix)
        for name, t in image.topics.items():
            if name.startswith(prefix):
                yield name[n:], t

    def topic(self, image: "MetadataImage", name: str) -> "TopicInfo | None":
        return image.topics.get(self.physical(name))

    def topic_by_id(self, image: "MetadataImage", topic_id: object) -> "TopicInfo | None":
        t = image.topics_by_id.get(topic_id)  # type: ignore[call-overload]
        if t is None or (self.prefix and not t.name.startswith(self.prefix)):
            return None
        return t

    def physical_user(self, image: "MetadataImage", name: str) -> str:
        """The stored name of a SCRAM user this scope calls ``name``: a user the control plane
        put in this tenant keeps its name; any other name is one the tenant creates itself,
        qualified (``shoal.tenancy.principals``; its administrator's HTTP creations too)."""
        if not self.prefix or image.user_tenants.get(name) == self.tenant_id:
            return name
        return self.prefix + name

    def visible_user(self, image: "MetadataImage", physical: str) -> str | None:
        if not self.prefix:
            return physical
        if image.user_tenants.get(physical) == self.tenant_id and not physical.startswith(self.prefix):
            return physical
        return self.visible(physical)

    def cluster_id(self, image: "MetadataImage") -> str:
        """The id of the cluster this scope sees: its tenant's logical cluster id, else the
        physical cluster's."""
        return self.tenant_id or image.cluster_id

    # -- authorization ----------------------------------------------------------------------

    def allowed(self, operation: int, resource_type: int, name: str) -> bool:
        """May this principal do ``operation`` on the resource this scope calls ``name``?"""
        if not self._enforce:
            return True
        key = (operation, resource_type, name)
        hit = self._cache.get(key)
        if hit is None:
            hit = authorize(
                self._acls, self.visible_principal, self.host, operation, resource_type, name,
                allow_if_no_acls=self._allow_if_none,
            )
            if len(self._cache) < 4096:
                self._cache[key] = hit
        return hit

    def allowed_cluster(self, operation: int) -> bool:
        return self.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def allowed_any_topic(self, operation: int) -> bool:
        """Is ``operation`` allowed on at least one topic (KIP-679's IDEMPOTENT_WRITE rule)?"""
        if not self._enforce:
            return True
        for name, _t in self.topics(self._image):
            if self.allowed(operation, ResourceType.TOPIC, name):
                return True
        return any(
            a.resource_type == ResourceType.TOPIC and a.permission_type == 3
            and a.operation in (operation, Operation.ALL)
            and a.principal in (self.visible_principal, "User:*")
            for a in self._acls
        )


def resolve(image: "MetadataImage", config: "BrokerConfig", principal: str, host: str,
            bound_tenant: str | None) -> Scope | None:
    """The scope of a request, or None when the connection's tenant (or its user's membership)
    is gone: the caller closes such a connection."""
    tid = tenant_of(image, principal)
    if tid != bound_tenant or (tid is not None and tid not in image.tenants):
        return None
    return Scope(image, config, principal, host, tid)
