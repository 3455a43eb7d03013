"""``shoal namespaces create|list|describe|alter|delete|move``: a tenant's KIP-37 namespaces,
through the broker's HTTP admin API (``shoal.admin.listener``; see ``shoal.admin.http_namespaces``).

    shoal namespaces create payments:eu --tenant lkc-3f9a2c [--config retention.ms=86400000]
    shoal namespaces list --tenant ID [--parent payments] [--recursive]
    shoal namespaces describe payments:eu --tenant ID      configs with their origin, children, topics
    shoal namespaces alter payments:eu --tenant ID --set retention.ms=3600000 --delete segment.ms
    shoal namespaces delete payments --tenant ID [--recursive]
    shoal namespaces move --tenant ID --topic payments:eu:orders --to-namespace payments:us
    shoal namespaces move --tenant ID --from-namespace payments:eu --to-namespace archive

Namespaces are created explicitly, every missing tier with them (``a:b:c`` creates ``a``, ``a:b``);
``delete`` deletes the namespace's topics too and refuses a namespace with child namespaces unless
``--recursive``; ``move`` keeps each topic's id, data and configs (``--to-namespace ""`` is the
default namespace). Exit status as ``shoal tenants``: 1 for an error the API returned, 2 for bad
arguments, 3 when the admin API cannot be reached.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any
from urllib.parse import quote, urlencode

from shoal.cli.common import EXIT_USAGE, AdminApiError, admin_api_arguments, call_admin_api

INHERITABLE = ("TOPIC", "NAMESPACE", "TENANT_DEFAULT")


def add_parser(subparsers: Any) -> None:
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--tenant", required=True, metavar="ID", help="the tenant (lkc-...)")
        admin_api_arguments(p, cmd_namespaces)

    top = subparsers.add_parser("namespaces", help="create, list, describe, alter, delete namespaces; move topics (KIP-37)")
    sub = top.add_subparsers(dest="namespaces_command", required=True)
    p = sub.add_parser("create", help="create a namespace and every missing parent")
    p.add_argument("namespace", metavar="NAMESPACE")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="a topic config its topics inherit")
    common(p)
    p = sub.add_parser("list", help="the namespaces under a namespace (default: the top level)")
    p.add_argument("--parent", default="", metavar="NAMESPACE")
    p.add_argument("--recursive", action="store_true", help="all the namespaces below, not only the children")
    common(p)
    p = sub.add_parser("describe", help="a namespace: configs with their origin, child namespaces, topics")
    p.add_argument("namespace", metavar="NAMESPACE")
    p.add_argument("--all", action="store_true", help="also the configs that come from the broker")
    common(p)
    p = sub.add_parser("alter", help="set or delete a namespace's configs")
    p.add_argument("namespace", metavar="NAMESPACE")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--delete", action="append", default=[], metavar="KEY")
    common(p)
    p = sub.add_parser("delete", help="delete a namespace and its topics")
    p.add_argument("namespace", metavar="NAMESPACE")
    p.add_argument("--recursive", action="store_true", help="also every namespace (and topic) under it")
    common(p)
    p = sub.add_parser("move", help="move a topic, or every topic of a namespace, to another namespace")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--topic", metavar="TOPIC")
    src.add_argument("--from-namespace", metavar="NAMESPACE")
    p.add_argument("--to-namespace", required=True, metavar="NAMESPACE", help='"" for the default namespace')
    common(p)


def _pairs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def _ns_path(args: argparse.Namespace, name: str, rest: str = "") -> str:
    return f"/v1/tenants/{quote(args.tenant, safe='')}/namespaces/{quote(name, safe=':')}{rest}"


def _print_configs(effective: list[dict[str, Any]], everything: bool) -> None:
    shown = [e for e in effective if everything or e["origin"] in INHERITABLE]
    if not shown:
        print("Configs: (none set)")
        return
    print("Configs:")
    width = max(len(f"{e['name']}={e['value']}") for e in shown)
    for e in shown:
        print(f"  {e['name'] + '=' + str(e['value']):<{width}}  ({e['source']})")


def cmd_namespaces(args: argparse.Namespace) -> int:
    cmd = args.namespaces_command
    tenant = f"/v1/tenants/{quote(args.tenant, safe='')}"
    try:
        if cmd == "create":
            out = call_admin_api(args, "POST", f"{tenant}/namespaces", {"name": args.namespace, "configs": _pairs(args.config)})
            print(f"namespace {out['name']} created" + (f" (with {', '.join(out['created'][:-1])})" if len(out["created"]) > 1 else ""))
        elif cmd == "list":
            query = urlencode({"parent": args.parent, "recursive": "true" if args.recursive else "false"})
            for name in call_admin_api(args, "GET", f"{tenant}/namespaces?{query}")["namespaces"]:
                print(name)
        elif cmd == "describe":
            ns = call_admin_api(args, "GET", _ns_path(args, args.namespace))
            cfg = call_admin_api(args, "GET", _ns_path(args, args.namespace, "/configs"))
            print(f"Namespace: {ns['name']}\nNamespaces: {', '.join(ns['namespaces'])}\nTopics: {', '.join(ns['topics'])}")
            _print_configs(cfg["effective"], args.all)
        elif cmd == "alter":
            body = {"set": _pairs(args.set), "delete": args.delete}
            if not body["set"] and not body["delete"]:
                raise ValueError("nothing to alter: give --set KEY=VALUE and/or --delete KEY")
            out = call_admin_api(args, "PATCH", _ns_path(args, args.namespace, "/configs"), body)
            print(f"namespace {out['namespace']} configs: " + (", ".join(f"{k}={v}" for k, v in out["configs"].items()) or "(none)"))
        elif cmd == "delete":
            out = call_admin_api(args, "DELETE", _ns_path(args, args.namespace) + ("?recursive=true" if args.recursive else ""))
            print(f"deleted namespaces: {', '.join(out['deleted_namespaces'])}")
            print(f"deleted topics: {', '.join(out['deleted_topics']) or '(none)'}")
        else:
            if args.topic is not None:
                out = call_admin_api(args, "POST", f"{tenant}/topics/{quote(args.topic, safe=':')}/move",
                            {"namespace": args.to_namespace})
            else:
                out = call_admin_api(args, "POST", _ns_path(args, args.from_namespace, "/move"), {"to": args.to_namespace})
            for m in out["moved"]:
                print(f"moved {m['from']} -> {m['to']} (topic id {m['topic_id']})")
            if not out["moved"]:
                print("nothing to move")
        return 0
    except ValueError as e:
        print(f"shoal namespaces {cmd}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except AdminApiError as e:
        print(f"shoal namespaces {cmd}: {e}", file=sys.stderr)
        return e.status
