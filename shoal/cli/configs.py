"""``shoal configs describe|alter``: broker configs as ``kafka-configs.sh`` manages them, over the
wire protocol (DescribeConfigs, IncrementalAlterConfigs) through :mod:`shoal.client`.

- ``--broker N``: broker N's own dynamic configs (send it to broker N: a broker answers only for
  itself, as Kafka's); ``--broker-defaults``: the cluster-wide dynamic defaults.
- ``--tenant-defaults``: a tenant user's connection (its Metadata names the tenant's ``lkc-`` id as
  the cluster id) sees its tenant's topic config defaults where the broker configs would be
  (``shoal.handlers.configs``): the defaults of every topic of the tenant that does not set a config.
  On such a connection ``--broker``/``--broker-defaults`` are refused (exit 2) and point here: a
  tenant administrator who meant a broker setting would otherwise change every topic of the tenant
  (``retention.ms=1000`` deletes its data) under a message about brokers. ``--tenant-defaults`` on
  the physical cluster's view is refused too; the operator sets a tenant's defaults through the
  admin API (``PUT /v1/tenants/{id}/configs``).
- ``describe``: kafka-configs' output, the dynamic configs of the resource with their synonyms
  (``Dynamic configs for broker 1 are:`` / ``Default configs for brokers in the cluster are:``),
  or with ``--all`` every config of broker N (``All configs for broker 1 are:``).
- ``alter``: ``--add-config k=v[,k=v...]`` (a list value in brackets: ``k=[a,b]``) and
  ``--delete-config k[,k...]``, repeatable; applied by one IncrementalAlterConfigs.

Exit status as every admin command (:mod:`shoal.cli.common`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from shoal.cli.common import EXIT_ERROR, UsageError, add_connection_args, run_admin, usage_error

RESOURCE_BROKER = 4
OP_SET, OP_DELETE = 0, 1


def add_parser(subparsers: Any) -> None:
    configs = subparsers.add_parser("configs", help="describe and alter dynamic broker configs (kafka-configs.sh)")
    sub = configs.add_subparsers(dest="configs_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        which = p.add_mutually_exclusive_group(required=True)
        which.add_argument("--broker", metavar="ID", help="this broker's own dynamic configs (send to broker ID)")
        which.add_argument("--broker-defaults", action="store_true",
                           help="the cluster-wide dynamic default configs of every broker")
        which.add_argument("--tenant-defaults", action="store_true",
                           help="as a tenant's user: the topic config defaults of its tenant (every topic of it "
                                "that does not set the config)")
        add_connection_args(p)
        p.set_defaults(func=cmd_configs)

    p = sub.add_parser("describe", help="show dynamic broker configs")
    p.add_argument("--all", action="store_true", help="every config of the broker, not only the dynamic ones")
    common(p)
    p = sub.add_parser("alter", help="set or delete dynamic broker configs")
    p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V...]",
                   help="configs to set, e.g. log.cleaner.threads=2,message.max.bytes=2000000")
    p.add_argument("--delete-config", action="append", default=[], metavar="K[,K...]",
                   help="configs to delete (back to the next layer: default, static, built-in)")
    common(p)


def _split(item: str) -> list[str]:
    """Split at commas outside square brackets (kafka-configs' ``k=[a,b]``)."""
    parts, depth, cur = [], 0, ""
    for ch in item:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += (ch == "[") - (ch == "]")
        cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def changes(args: argparse.Namespace) -> list[tuple[str, int, str | None]]:
    """The IncrementalAlterConfigs operations an ``alter`` asks for; UsageError when none or bad."""
    ops: dict[str, tuple[str, int, str | None]] = {}
    for item in args.add_config:
        for pair in _split(item):
            key, sep, value = pair.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not key:
                raise UsageError(f"--add-config wants KEY=VALUE, got {pair!r}")
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            ops[key] = (key, OP_SET, value)
    for item in args.delete_config:
        for key in _split(item):
            if key in ops:
                raise UsageError(f"{key} is both added and deleted")
            ops[key] = (key, OP_DELETE, None)
    if not ops:
        raise UsageError("nothing to alter: give --add-config or --delete-config")
    return list(ops.values())


def resource(args: argparse.Namespace) -> tuple[str, str]:
    """(resource name, how kafka-configs names it)."""
    if args.tenant_defaults:
        return "", "the tenant's topics"
    if args.broker_defaults:
        return "", "brokers in the cluster"
    try:
        node = int(args.broker)
    except ValueError:
        raise UsageError(f"--broker wants a broker id, got {args.broker!r}") from None
    return str(node), f"broker {node}"


def format_entry(e: Any) -> str:
    """kafka-configs: ``name=value sensitive=false synonyms={SOURCE:name=value, ...}``."""
    value = "null" if e.sensitive or e.value is None else e.value
    synonyms = ", ".join(f"{src}:{n}={'null' if e.sensitive or v is None else v}" for n, v, src in e.synonyms)
    return f"  {e.name}={value} sensitive={str(e.sensitive).lower()} synonyms={{{synonyms}}}"


def _with_hint(err: Any, keys: list[str]) -> str:
    """``CODE: message``, and what to do about it (shoal.cli.hints.config_hint)."""
    from shoal.cli.hints import config_hint

    found = config_hint(err.code_name, err.message or "", keys)
    return f"{err.code_name}: {err.message}" + (f": {found}" if found else "")


def cmd_configs(args: argparse.Namespace) -> int:
    command = args.configs_command
    name = f"shoal configs {command}"
    try:
        rname, label = resource(args)
        ops = changes(args) if command == "alter" else None
    except UsageError as e:
        return usage_error(name, e)
    key = (RESOURCE_BROKER, rname)

    async def job(client) -> int:
        nonlocal label
        tenant = await _tenant_of(client)
        if tenant is not None and not args.tenant_defaults:
            raise UsageError(f"this connection is a user's of tenant {tenant}, which has no broker configs: here "
                             f"{'--broker-defaults' if args.broker_defaults else '--broker'} would set the topic "
                             f"config defaults of every topic of the tenant (retention.ms=1000 would delete their "
                             f"data); say --tenant-defaults if that is what you mean")
        if tenant is None and args.tenant_defaults:
            raise UsageError("--tenant-defaults wants a tenant user's connection (--command-config with its "
                             "credentials); the operator sets a tenant's topic defaults with the admin API "
                             "(PUT /v1/tenants/ID/configs), and --broker-defaults are the physical cluster's")
        if tenant is not None:
            label = f"the topics of tenant {tenant}"
        if command == "describe":
            found = (await client.describe_configs([key], include_synonyms=True, raise_errors=False))[key]
            if not isinstance(found, dict):
                print(f"{name}: {label}: {_with_hint(found, [])}", file=sys.stderr)
                return EXIT_ERROR
            own = "DYNAMIC_BROKER_CONFIG" if args.broker is not None else "DYNAMIC_DEFAULT_BROKER_CONFIG"
            if args.all and args.broker is not None:
                print(f"All configs for {label} are:")
                shown = list(found.values())
            else:
                print(f"{'Dynamic' if args.broker is not None else 'Default'} configs for {label} are:")
                shown = [e for e in found.values() if e.source == own]
            for e in sorted(shown, key=lambda e: e.name):
                print(format_entry(e))
            return 0
        err = (await client.incremental_alter_configs({key: ops}, raise_errors=False))[key]
        if err is not None:
            print(f"{name}: {label}: {_with_hint(err, [k for k, _op, _v in ops])}", file=sys.stderr)
            return EXIT_ERROR
        if tenant is not None:
            what = ", ".join(k if v is None else f"{k}={v}" for k, _op, v in ops)
            print(f"Completed updating the default config for {label} ({what}): every topic of the tenant that "
                  f"does not set a config itself now has these.")
        else:
            print(f"Completed updating {'config' if args.broker is not None else 'default config'} for {label}.")
        return 0

    return run_admin(args, name, "shoal-configs", job)


async def _tenant_of(client: Any) -> str | None:
    """The tenant whose user this connection is (its Metadata's cluster id is the tenant's
    ``lkc-`` id, ``shoal.tenancy``), None for the physical cluster's view."""
    import re

    cluster_id = (await client.describe_cluster())["cluster_id"] or ""
    return cluster_id if re.fullmatch(r"lkc-[0-9a-z]{6}", cluster_id) else None
