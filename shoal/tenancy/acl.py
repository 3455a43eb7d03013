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
and every namespace under it, both as the gate of step 3 and when the resource asked about is a
namespace itself. Only a binding that could decide the operation gates it: an ALLOW that grants it
(implications included) or a DENY that hits it.

Binding filters (DescribeAcls, DeleteAcls) are Kafka's ``AclBindingFilter``, except that resource
type ANY leaves NAMESPACE bindings out: standard clients cannot parse Shoal's type code, so those
bindings are returned only to a filter that names NAMESPACE.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING

from shoal.metadata.inheritance import NAMESPACE_SEP, namespace_chain, namespace_of

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
    entity_matches = _namespace_binding_matches if resource_type == ResourceType.NAMESPACE else pattern_matches
    for a in acls:
        rt = a.resource_type
        if rt == resource_type:
            if not entity_matches(a.pattern_type, a.resource_name, name):
                continue
            entity_any = True
        elif rt == ResourceType.NAMESPACE and chain:
            if not any(_namespace_binding_matches(a.pattern_type, a.resource_name, ns) for ns in chain):
                continue
            # Only a binding that could decide this operation gates it: a DENY of READ says nothing
            # about DESCRIBE, though an ALLOW of READ would grant it.
            if a.permission_type == Permission.DENY:
                relevant = _deny_hits(a.operation, operation)
            else:
                relevant = _allow_grants(a.operation, operation)
            if not relevant:
                continue
            ns_bindings = True
        else:
            continue
        if not _who_matches(a, principal, host):
            continue
        if a.permission_type == Permission.DENY:
            if _deny_hits(a.operation, operation):
                return False
        elif a.permission_type == Permission.ALLOW and _allow_grants(a.operation, operation):
            if rt == resource_type:
                entity_allow = True
            else:
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

    ANY matches every value (but resource type ANY no NAMESPACE binding); a None
    name/principal/host matches any; pattern MATCH selects the bindings that would apply to
    ``resource_name``: the literal name, ``*``, and prefixes of it (for a namespace, also the
    namespaces above it).
    """
    if resource_type == ResourceType.ANY:
        if acl.resource_type == ResourceType.NAMESPACE:
            return False
    elif acl.resource_type != resource_type:
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
        if acl.resource_type == ResourceType.NAMESPACE:
            return _namespace_binding_matches(acl.pattern_type, acl.resource_name, resource_name)
        if acl.pattern_type == PatternType.LITERAL:
            return acl.resource_name == resource_name or acl.resource_name == WILDCARD
        if acl.pattern_type == PatternType.PREFIXED:
            return resource_name.startswith(acl.resource_name)
        return False
    if pattern_type != PatternType.ANY and acl.pattern_type != pattern_type:
        return False
    return resource_name is None or acl.resource_name == resource_name


# -- validation of what clients send (CreateAcls bindings, DescribeAcls/DeleteAcls filters) ---------


def code_name(enum_cls: type[enum.IntEnum], code: int) -> str:
    """The enum member's name for ``code``, or the number when it is not one."""
    try:
        return enum_cls(code).name
    except ValueError:
        return str(code)


def format_pattern(resource_type: int, name: str, pattern_type: int) -> str:
    """Kafka's ``ResourcePattern.toString`` (as ``kafka-acls.sh`` prints it)."""
    return (
        f"ResourcePattern(resourceType={code_name(ResourceType, resource_type)}, name={name}, "
        f"patternType={code_name(PatternType, pattern_type)})"
    )


def format_entry(principal: str, host: str, operation: int, permission_type: int) -> str:
    """Kafka's ``AccessControlEntry.toString``."""
    return (
        f"(principal={principal}, host={host}, operation={code_name(Operation, operation)}, "
        f"permissionType={code_name(Permission, permission_type)})"
    )


def binding_error(binding: "AclEntry") -> str | None:
    """Why a binding cannot be created (the INVALID_REQUEST message), or None when it can.

    Kafka's checks (``AclControlManager.validateNewAcl``, ``AclCommand``): a concrete resource type,
    pattern LITERAL or PREFIXED, a concrete operation that the resource type supports (or ALL),
    ALLOW or DENY, a non-empty name (``kafka-cluster`` for CLUSTER), a ``Type:name`` principal, a
    non-empty host. PREFIXED ``*`` is refused: ``*`` is a wildcard only as a LITERAL.
    """
    b = binding
    if b.resource_type not in SUPPORTED_OPERATIONS:
        return f"Invalid resource type {code_name(ResourceType, b.resource_type)}"
    rt = ResourceType(b.resource_type)
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid pattern type {code_name(PatternType, b.pattern_type)}"
    if b.operation != Operation.ALL and b.operation not in SUPPORTED_OPERATIONS[rt]:
        return f"Operation {code_name(Operation, b.operation)} is not supported for resource type {rt.name}"
    if b.permission_type not in (Permission.ALLOW, Permission.DENY):
        return f"Invalid permission type {code_name(Permission, b.permission_type)}"
    if not b.resource_name:
        return "Resource name should not be empty"
    if rt == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if b.pattern_type == PatternType.PREFIXED and b.resource_name == WILDCARD:
        return "A PREFIXED pattern cannot name the wildcard '*' (use LITERAL '*' for every resource)"
    kind, sep, who = (b.principal or "").partition(":")
    if not sep or not kind or not who:
        return f"Could not parse principal {b.principal!r}: expected Type:name (e.g. User:alice)"
    if not b.host:
        return "Host should not be empty (use '*' for any host)"
    return None


def filter_error(resource_type: int, pattern_type: int, operation: int, permission_type: int) -> str | None:
    """Why a DescribeAcls/DeleteAcls filter is invalid (UNKNOWN or unknown codes), or None."""
    for what, enum_cls, code in (
        ("resource type", ResourceType, resource_type),
        ("pattern type", PatternType, pattern_type),
        ("operation", Operation, operation),
        ("permission type", Permission, permission_type),
    ):
        name = code_name(enum_cls, code)
        if name in ("UNKNOWN", str(code)):
            return f"Invalid {what} {name} in the filter"
    return None
