"""``shoal quotas describe|alter``: client quotas as ``kafka-configs.sh`` manages them, over the
wire protocol (DescribeClientQuotas, AlterClientQuotas) through :mod:`shoal.client`.

Entities are named with kafka-configs' flags, in order: ``--entity-type users|clients|ips``
(and Shoal's ``tenants``, for the operator) followed by ``--entity-name NAME`` or
``--entity-default``; shortcuts ``--user NAME``, ``--client NAME``, ``--ip ADDRESS``,
``--tenant ID`` and ``--user-defaults``, ``--client-defaults``, ``--ip-defaults``,
``--tenant-defaults``. Two types make one entity (``--entity-type users --entity-name alice
--entity-type clients --entity-default``: alice's default client-id).

- ``describe``: with entities, the quotas of exactly those entities (an entity type without a
  name matches every entity of the type); without, every quota the caller may see. Output is
  kafka-configs': ``Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0``.
- ``alter``: ``--add-config k=v[,k=v...]`` and ``--delete-config k[,k...]`` (repeatable); keys
  ``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``,
  ``controller_mutation_rate`` (``connection_creation_rate`` for ips).

A tenant's user sees and sets only its own logical cluster's quotas, with its own names.
Exit status as every admin command (:mod:`shoal.cli.common`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from shoal.cli.common import EXIT_ERROR, UsageError, add_connection_args, run_admin, usage_error

TYPES = {"users": "user", "clients": "client-id", "ips": "ip", "tenants": "tenant"}
LABELS = {"user": "user-principal", "client-id": "client-id", "ip": "ip", "tenant": "tenant"}
_ANY = object()  # an entity type without a name or --entity-default


class _Entity(argparse.Action):
    """Collects the entity flags in the order given: ``args.entities`` is a list of
    ``[type, name]`` (name None for the default, _ANY when not given)."""

    def __call__(self, parser, namespace, values, option_string=None):
        entities = list(getattr(namespace, "entities", None) or [])
        kind, _, default = self.const
        if kind == "type":
            entities.append([TYPES[values], _ANY])
        elif kind in ("name", "default"):
            if not entities or entities[-1][1] is not _ANY:
                parser.error(f"{option_string} must follow an --entity-type")
            entities[-1][1] = None if kind == "default" else values
        else:
            entities.append([kind, None if default else values])
        namespace.entities = entities


def add_parser(subparsers: Any) -> None:
    quotas = subparsers.add_parser("quotas", help="describe and alter client quotas (kafka-configs.sh)")
    sub = quotas.add_subparsers(dest="quotas_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.set_defaults(entities=[])
        p.add_argument("--entity-type", choices=sorted(TYPES), action=_Entity, const=("type", None, False),
                       help="users, clients, ips or (operator) tenants; repeat for a combined entity")
        p.add_argument("--entity-name", metavar="NAME", action=_Entity, const=("name", None, False),
                       help="the name of the entity of the preceding --entity-type")
        p.add_argument("--entity-default", nargs=0, action=_Entity, const=("default", None, True),
                       help="the <default> entity of the preceding --entity-type")
        for flag, etype in (("user", "user"), ("client", "client-id"), ("ip", "ip"), ("tenant", "tenant")):
            p.add_argument(f"--{flag}", metavar="NAME", action=_Entity, const=(etype, None, False),
                           help=f"shortcut: --entity-type {flag}s --entity-name NAME")
            p.add_argument(f"--{flag}-defaults", nargs=0, action=_Entity, const=(etype, None, True),
                           help=f"shortcut: --entity-type {flag}s --entity-default")
        add_connection_args(p)
        p.set_defaults(func=cmd_quotas)

    p = sub.add_parser("describe", help="show client quotas")
    common(p)
    p = sub.add_parser("alter", help="set or delete client quota values")
    p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V...]",
                   help="quota values to set, e.g. producer_byte_rate=1048576,consumer_byte_rate=2097152")
    p.add_argument("--delete-config", action="append", default=[], metavar="K[,K...]",
                   help="quota keys to delete")
    common(p)


def describe_entity(entity: Any) -> str:
    """kafka-configs' wording: ``user-principal 'alice', client-id 'app'``."""
    parts = []
    for etype, name in entity:
        label = LABELS.get(etype, etype)
        parts.append(f"the default {label}" if name is None else f"{label} '{name}'")
    return ", ".join(parts)


def _changes(args: argparse.Namespace) -> dict[str, float | None]:
    changes: dict[str, float | None] = {}
    for item in args.add_config:
        for pair in filter(None, (p.strip() for p in item.split(","))):
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise UsageError(f"--add-config wants KEY=VALUE, got {pair!r}")
            try:
                changes[key.strip()] = float(value)
            except ValueError:
                raise UsageError(f"--add-config: {key.strip()} wants a number, got {value.strip()!r}") from None
    for item in args.delete_config:
        for key in filter(None, (k.strip() for k in item.split(","))):
            if key in changes:
                raise UsageError(f"{key} is both added and deleted")
            changes[key] = None
    if not changes:
        raise UsageError("nothing to alter: give --add-config or --delete-config")
    return changes


def plan(args: argparse.Namespace) -> Any:
    """What to send, checked before connecting: describe filter components, or the alteration."""
    entities = args.entities
    types = [t for t, _ in entities]
    if len(set(types)) != len(types):
        raise UsageError("each entity type may be given once")
    if args.quotas_command == "describe":
        return [(t, 2, None) if n is _ANY else (t, 1, None) if n is None else (t, 0, n) for t, n in entities]
    if not entities:
        raise UsageError("alter needs an entity: --entity-type with --entity-name or --entity-default")
    for t, n in entities:
        if n is _ANY:
            flag = next(k for k, v in TYPES.items() if v == t)
            raise UsageError(f"--entity-type {flag} needs --entity-name or --entity-default")
    return [(tuple((t, n) for t, n in entities), _changes(args))]


def cmd_quotas(args: argparse.Namespace) -> int:
    command = args.quotas_command
    name = f"shoal quotas {command}"
    try:
        work = plan(args)
    except UsageError as e:
        return usage_error(name, e)

    async def job(client) -> int:
        if command == "describe":
            found = await client.describe_client_quotas(work, strict=bool(work))
            for entity, values in found.items():
                shown = ", ".join(f"{k}={float(v)!r}" for k, v in sorted(values.items()))
                print(f"Quota configs for {describe_entity(entity)} are {shown}")
            return 0
        result = await client.alter_client_quotas(work, raise_errors=False)
        status = 0
        for entity, err in result.items():
            if err is None:
                print(f"Completed updating config for {describe_entity(entity)}.")
            else:
                print(f"{name}: {describe_entity(entity)}: {err.code_name}: {err.message}", file=sys.stderr)
                status = EXIT_ERROR
        return status

    return run_admin(args, name, "shoal-quotas", job)
