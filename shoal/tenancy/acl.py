"""Kafka's ACL model, and Shoal's authorizer over it.

Codes are Kafka's (``org.apache.kafka.common.acl`` / ``resource``), so bindings travel the wire
unchanged. Shoal adds one resource type, NAMESPACE (KIP-37), which unmodified clients never send.

Decision for (principal, host, operation, resource), as Kafka's ``AclAuthorizer`` decides it, with
KIP-37's namespace check in front:

1. a super user (``super.users``, or an administrator of the caller's tenant) is allowed;
2. a DENY binding that matches wins: on the resource's namespace or any parent namespace, or on
   the resource itself;
3. a namespace that has bindings for this operation gates its entities: without an ALLOW on the
   namespace chain, denied; an ALLOW there grants the entities inside;
4. an ALLOW binding on the resource allows;
5. a resource with no binding at all is allowed only with ``allow.everyone.if.no.acl.found``.

A binding matches a resource when its type is the resource's, and its pattern is LITERAL with the
same name or ``*``, or PREFIXED with a prefix of the name (KIP-290). Principal ``User:*`` and host
``*`` match anyone. Operation implications (Kafka's): ALL matches every operation; an ALLOW of
READ, WRITE, DELETE or ALTER implies DESCRIBE; an ALLOW of ALTER_CONFIGS implies
DESCRIBE_CONFIGS. DENY implies nothing beyond ALL.

A namespace binding (type NAMESPACE) names a namespace (``payments:eu``); it covers that namespace
and every namespace under it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shoal.metadata import AclEntry


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7
    NAMESPACE = 20  # Shoal (KIP-37)


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
NAMESPACE_SEP = ":"

# Which ALLOWed operations grant the asked one (besides itself and ALL).
_IMPLIED_BY: dict[int, frozenset[int]] = {
    Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}

# Operations that make sense per resource type (Kafka's ``AclEntry.supportedOperations``).
SUPPORTED_OPERATIONS: dict[int, frozenset[int]] = {
    ResourceType.TOPIC: frozenset({
        Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
        Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
    }),
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DESCRIBE, Operation.DELETE}),
    ResourceType.CLUSTER: frozenset({
        Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE,
    }),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.DESCRIBE, Operation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({Operation.DESCRIBE}),
    ResourceType.USER: frozenset({Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS}),
    ResourceType.NAMESPACE: frozenset({
        Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
        Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
    }),
}


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


def pattern_matches(pattern_type: int, pattern: str, name: str) -> bool:
    if pattern_type == PatternType.LITERAL:
        return pattern == name or pattern == WILDCARD
    if pattern_type == PatternType.PREFIXED:
        return name.startswith(pattern)
    return False


def _namespace_binding_matches(pattern_type: int, pattern: str, namespace: str) -> bool:
    # A namespace binding covers its namespace and everything under it.
    if pattern_type == PatternType.LITERAL:
        return pattern == WILDCARD or namespace == pattern or namespace.startswith(pattern + NAMESPACE_SEP)
    if pattern_type == PatternType.PREFIXED:
        return namespace.startswith(pattern)
    return False


def _who_matches(acl: "AclEntry", principal: str, host: str) -> bool:
    return (acl.principal == principal or acl.principal == "User:*") and (
        acl.host == host or acl.host == WILDCARD
    )


def _allow_grants(acl_op: int, op: int) -> bool:
    return acl_op == op or acl_op == Operation.ALL or acl_op in _IMPLIED_BY.get(op, ())


def _deny_hits(acl_op: int, op: int) -> bool:
    return acl_op == op or acl_op == Operation.ALL


def authorize(
    acls: Iterable["AclEntry"],
    principal: str,
    host: str,
    operation: int,
    resource_type: int,
    name: str,
    *,
    allow_if_no_acls: bool = False,
) -> bool:
    """The decision for one request, over the bindings of one scope (already tenant-filtered)."""
    chain = namespace_chain(namespace_of(name)) if resource_type in (
        ResourceType.TOPIC, ResourceType.GROUP) else []
    ns_bindings = False
    ns_allow = False
    entity_any = False
    entity_allow = False
    for a in acls:
        rt = a.resource_type
        if rt == resource_type:
            if not pattern_matches(a.pattern_type, a.resource_name, name):
                continue
            entity_any = True
            if not _who_matches(a, principal, host):
                continue
            if a.permission_type == Permission.DENY:
                if _deny_hits(a.operation, operation):
                    return False
            elif a.permission_type == Permission.ALLOW and _allow_grants(a.operation, operation):
                entity_allow = True
        elif rt == ResourceType.NAMESPACE and chain:
            if not any(_namespace_binding_matches(a.pattern_type, a.resource_name, ns) for ns in chain):
                continue
            relevant = _allow_grants(a.operation, operation) or _deny_hits(a.operation, operation)
            if not relevant:
                continue
            ns_bindings = True
            if not _who_matches(a, principal, host):
                continue
            if a.permission_type == Permission.DENY:
                if _deny_hits(a.operation, operation):
                    return False
            elif a.permission_type == Permission.ALLOW and _allow_grants(a.operation, operation):
                ns_allow = True
    if ns_bindings:
        return ns_allow
    if entity_allow:
        return True
    return allow_if_no_acls and not entity_any


def binding_matches_filter(
    acl: "AclEntry",
    resource_type: int,
    resource_name: str | None,
    pattern_type: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission_type: int,
) -> bool:
    """Kafka's ``AclBindingFilter.matches`` (DescribeAcls/DeleteAcls filters).

    ANY matches every value; a None name/principal/host matches any; pattern MATCH selects the
    bindings that would apply to ``resource_name``: the literal name, ``*``, and prefixes of it.
    """
    if resource_type != ResourceType.ANY and acl.resource_type != resource_type:
        return False
    if operation != Operation.ANY and acl.operation != operation:
        return False
    if permission_type != Permission.ANY and acl.permission_type != permission_type:
        return False
    if principal is not None and acl.principal != principal:
        return False
    if host is not None and acl.host != host:
        return False
    if pattern_type == PatternType.MATCH:
        if resource_name is None:
            return True
        if acl.pattern_type == PatternType.LITERAL:
            return acl.resource_name == resource_name or acl.resource_name == WILDCARD
        if acl.pattern_type == PatternType.PREFIXED:
            return resource_name.startswith(acl.resource_name)
        return False
    if pattern_type != PatternType.ANY and acl.pattern_type != pattern_type:
        return False
    return resource_name is None or acl.resource_name == resource_name
