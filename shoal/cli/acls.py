"""``shoal acls add|list|remove``: kafka-acls.sh over the wire protocol (CreateAcls, DescribeAcls,
DeleteAcls), through :mod:`shoal.client`.

Flags are kafka-acls.sh's where they make sense: ``--allow-principal``/``--deny-principal``,
``--operation``, ``--host``, resources ``--topic``/``--group``/``--cluster``/``--transactional-id``
and Shoal's ``--namespace`` (KIP-37), ``--resource-pattern-type literal|prefixed|match|any``, and the
``--producer``/``--consumer`` conveniences. Operations are named as Kafka names them, in any case,
with or without separators (``Read``, ``DescribeConfigs``, ``describe-configs``, ``IDEMPOTENT_WRITE``).

- ``add``: one binding per resource x principal x host (default ``*``) x operation (default All).
- ``list``: the bindings of the given resources (with ``--resource-pattern-type match``, every
  binding that applies to the name), of ``--principal``, or all of them (NAMESPACE bindings
  included: they are asked for separately, as a filter of type ANY leaves them out).
- ``remove``: the bindings of the given resources; ``--allow-principal``/``--deny-principal``,
  ``--operation`` and ``--host`` narrow it down, and what is not given matches anything.

Output is kafka-acls.sh's: a ``Current ACLs for resource `ResourcePattern(...)`:`` line per resource
and one ``(principal=..., host=..., operation=..., permissionType=...)`` line per binding.

Exit status: 1 for an error the broker returned, 2 for bad arguments, 3 when the broker cannot be
reached.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Iterable

from shoal.cli.common import EXIT_ERROR, UsageError, add_connection_args, run_admin, usage_error

from shoal.tenancy.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    format_entry,
    format_pattern,
)

_OPERATIONS = {op.name.replace("_", ""): op for op in Operation if op not in (Operation.UNKNOWN, Operation.ANY)}
_PATTERNS = {"literal": PatternType.LITERAL, "prefixed": PatternType.PREFIXED, "match": PatternType.MATCH,
             "any": PatternType.ANY}


def add_parser(subparsers: Any) -> None:
    acls = subparsers.add_parser("acls", help="add, list and remove ACLs (kafka-acls.sh)")
    sub = acls.add_subparsers(dest="acls_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--topic", action="append", default=[], metavar="NAME", help="a topic (repeatable)")
        p.add_argument("--group", action="append", default=[], metavar="ID", help="a consumer group (repeatable)")
        p.add_argument("--cluster", action="store_true", help="the cluster resource")
        p.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                       help="a transactional id (repeatable)")
        p.add_argument("--namespace", action="append", default=[], metavar="NAME",
                       help="a KIP-37 namespace, e.g. payments:eu (repeatable)")
        p.add_argument("--resource-pattern-type", choices=sorted(_PATTERNS), default="literal",
                       help="literal (default) or prefixed names; list and remove also take match and any")
        add_connection_args(p)
        p.set_defaults(func=cmd_acls)

    def entries(p: argparse.ArgumentParser, verb: str) -> None:
        p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                       help=f"{verb} ALLOW bindings of this principal, e.g. User:alice or User:* (repeatable)")
        p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
                       help=f"{verb} DENY bindings of this principal (repeatable)")
        p.add_argument("--operation", action="append", default=[], metavar="OP",
                       help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                            "AlterConfigs, IdempotentWrite, All (repeatable)")
        p.add_argument("--host", action="append", default=[], metavar="HOST",
                       help="client address the binding applies to (repeatable; * for any)")
        p.add_argument("--producer", action="store_true",
                       help="the producer set: Write, Describe, Create on topics (Write, Describe on "
                            "transactional ids)")
        p.add_argument("--consumer", action="store_true",
                       help="the consumer set: Read, Describe on topics, Read on groups")

    p = sub.add_parser("add", help="create ACL bindings")
    entries(p, "add")
    common(p)
    p = sub.add_parser("list", help="list ACL bindings")
    p.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                   help="only this principal's bindings (repeatable)")
    common(p)
    p = sub.add_parser("remove", help="delete ACL bindings")
    entries(p, "remove")
    common(p)


# -- arguments to bindings and filters (no network) ----------------------------------------------


def _operation(text: str) -> Operation:
    op = _OPERATIONS.get(text.replace("-", "").replace("_", "").upper())
    if op is None:
        names = ", ".join(n.title().replace("_", "") for n in (o.name for o in _OPERATIONS.values()))
        raise UsageError(f"unknown operation {text!r} (one of {names})")
    return op


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, n) for n in args.topic]
    out += [(ResourceType.GROUP, n) for n in args.group]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    out += [(ResourceType.TRANSACTIONAL_ID, n) for n in args.transactional_id]
    out += [(ResourceType.NAMESPACE, n) for n in args.namespace]
    for _rt, name in out:
        if not name:
            raise UsageError("resource names cannot be empty")
    return out


def _principals(args: argparse.Namespace) -> list[tuple[str, Permission]]:
    out = [(p, Permission.ALLOW) for p in args.allow_principal] + [(p, Permission.DENY) for p in args.deny_principal]
    for principal, _perm in out:
        kind, sep, name = principal.partition(":")
        if not (kind and sep and name):
            raise UsageError(f"principal {principal!r} is not TYPE:NAME (e.g. User:alice)")
    return out


def _operations_for(args: argparse.Namespace, rt: ResourceType) -> list[Operation]:
    """The operations of ``--operation`` (checked against the type), ``--producer``, ``--consumer``."""
    ops = [_operation(o) for o in args.operation]
    for op in ops:
        if op != Operation.ALL and op not in SUPPORTED_OPERATIONS[rt]:
            allowed = ", ".join(sorted(o.name for o in SUPPORTED_OPERATIONS[rt]))
            raise UsageError(f"{rt.name} does not support operation {op.name} (it supports {allowed}, ALL)")
    if args.producer:
        ops += {ResourceType.TOPIC: [Operation.WRITE, Operation.DESCRIBE, Operation.CREATE],
                ResourceType.TRANSACTIONAL_ID: [Operation.WRITE, Operation.DESCRIBE]}.get(rt, [])
    if args.consumer:
        ops += {ResourceType.TOPIC: [Operation.READ, Operation.DESCRIBE],
                ResourceType.GROUP: [Operation.READ]}.get(rt, [])
    return list(dict.fromkeys(ops))


def bindings_to_add(args: argparse.Namespace) -> list[Any]:
    from shoal.client import AclBinding

    pattern = _PATTERNS[args.resource_pattern_type]
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError("add takes --resource-pattern-type literal or prefixed")
    if args.consumer and not args.group:
        raise UsageError("--consumer needs --group as well as --topic")
    resources = _resources(args)
    if not resources:
        raise UsageError("give at least one resource: --topic, --group, --cluster, --transactional-id, --namespace")
    principals = _principals(args)
    if not principals:
        raise UsageError("give --allow-principal or --deny-principal")
    hosts = args.host or ["*"]
    out: list[AclBinding] = []
    for rt, name in resources:
        conveniences = args.producer or args.consumer
        ops = _operations_for(args, rt) or ([] if conveniences else [Operation.ALL])
        out += [
            AclBinding(int(rt), name, int(pattern), principal, host, int(op), int(perm))
            for principal, perm in principals for host in hosts for op in ops
        ]
    if not out:
        raise UsageError("--producer/--consumer give no operation for these resources")
    return out


def filters_to_list(args: argparse.Namespace) -> list[Any]:
    from shoal.client import AclFilter

    pattern = int(_PATTERNS[args.resource_pattern_type])
    resources = _resources(args)
    principals: list[str | None] = list(args.principal) or [None]
    if resources:
        return [AclFilter(int(rt), name, pattern, principal=p) for rt, name in resources for p in principals]
    any_pattern = int(PatternType.ANY)
    return [
        AclFilter(int(rt), None, any_pattern, principal=p)
        for rt in (ResourceType.ANY, ResourceType.NAMESPACE) for p in principals
    ]


def filters_to_remove(args: argparse.Namespace) -> list[Any]:
    from shoal.client import AclFilter

    pattern = int(_PATTERNS[args.resource_pattern_type])
    resources = _resources(args)
    if not resources:
        raise UsageError("give the resources to remove ACLs from: --topic, --group, --cluster, "
                          "--transactional-id, --namespace")
    who: list[tuple[str | None, int]] = [(p, int(perm)) for p, perm in _principals(args)]
    hosts: list[str | None] = list(args.host) or [None]
    out = []
    for rt, name in resources:
        ops: list[int] = [int(op) for op in _operations_for(args, rt)] or [int(Operation.ANY)]
        out += [
            AclFilter(int(rt), name, pattern, principal, host, op, perm)
            for principal, perm in (who or [(None, int(Permission.ANY))]) for host in hosts for op in ops
        ]
    return out


# -- running ---------------------------------------------------------------------------------


def print_bindings(bindings: Iterable[Any], heading: str = "Current ACLs for resource") -> None:
    """kafka-acls.sh's listing: one heading per resource pattern, one line per binding."""
    grouped: dict[tuple[int, str, int], list[Any]] = {}
    for b in bindings:
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    for (rt, name, pt), group in grouped.items():
        print(f"{heading} `{format_pattern(rt, name, pt)}`:")
        for b in group:
            print(f" \t{format_entry(b.principal, b.host, b.operation, b.permission_type)}")
        print()


def cmd_acls(args: argparse.Namespace) -> int:
    name = f"shoal acls {args.acls_command}"
    # Check arguments before connecting, so a typo does not wait on the network.
    try:
        plan = {"add": bindings_to_add, "list": filters_to_list, "remove": filters_to_remove}[args.acls_command](args)
    except UsageError as e:
        return usage_error(name, e)
    return run_admin(args, name, "shoal-acls", lambda client: _run(client, args, plan))


async def _run(client: Any, args: argparse.Namespace, plan: list[Any]) -> int:
    from shoal.client import KafkaError

    if args.acls_command == "add":
        result = await client.create_acls(plan, raise_errors=False)
        failed = {b: e for b, e in result.items() if isinstance(e, KafkaError)}
        print_bindings([b for b in plan if b not in failed], "Adding ACLs for resource")
        for b, e in failed.items():
            print(f"shoal acls add: {format_pattern(b.resource_type, b.resource_name, b.pattern_type)} "
                  f"{format_entry(b.principal, b.host, b.operation, b.permission_type)}: {e}", file=sys.stderr)
        return EXIT_ERROR if failed else 0
    if args.acls_command == "list":
        found: dict[Any, None] = {}
        for f in plan:
            found.update(dict.fromkeys(await client.describe_acls(f)))
        print_bindings(found)
        return 0
    removed = await client.delete_acls(plan)
    gone = dict.fromkeys(b for bs in removed.values() for b in bs)
    if gone:
        print_bindings(gone, "Removed ACLs for resource")
    else:
        print("No ACL matched; nothing removed.")
    return 0
