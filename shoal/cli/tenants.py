"""``shoal tenants create|list|describe|delete|cell|identity-pools`` and ``shoal users create|delete``: tenants (logical
clusters) and their SCRAM users, through the broker's HTTP admin API (``shoal.admin.listener``).

The password is read from stdin (``--password-stdin``, first line) and sent to the admin API, which
hashes it and stores only the salted keys: a SCRAM-SHA-256 and a SCRAM-SHA-512 credential, so a
client logs in with either mechanism the listener offers, unless ``--mechanism`` names one.

With ``shoal.admin.authentication=basic`` the credentials come from the environment:
``SHOAL_ADMIN_USER`` and ``SHOAL_ADMIN_PASSWORD``; ``SHOAL_ADMIN_URL`` is the default of ``--admin-url``.

Times are printed as ISO-8601 (UTC); ``--output json`` prints the API's JSON (epoch milliseconds).

Exit status: 1 for an error the API returned (unknown tenant, user exists...), 2 for bad arguments,
3 when the admin API cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import quote

from shoal.cli.common import (EXIT_ERROR, EXIT_USAGE, SCRAM_MECHANISMS, AdminApiError, admin_api_arguments,
                              call_admin_api)


def add_parser(subparsers: Any) -> None:
    common = admin_api_arguments

    tenants = subparsers.add_parser("tenants", help="create, list, describe and delete tenants (logical clusters)")
    sub = tenants.add_subparsers(dest="tenants_command", required=True)
    p = sub.add_parser("create", help="create a tenant; prints its id")
    p.add_argument("name", metavar="NAME", help="display name")
    common(p, cmd_tenants)
    p = sub.add_parser("list", help="list tenants (id, name, created, users)")
    output_argument(p)
    common(p, cmd_tenants)
    p = sub.add_parser("describe", help="a tenant and its users")
    p.add_argument("tenant_id", metavar="ID")
    output_argument(p)
    common(p, cmd_tenants)
    p = sub.add_parser("delete", help="delete a tenant with its users")
    p.add_argument("tenant_id", metavar="ID")
    common(p, cmd_tenants)
    p = sub.add_parser("cell", help="confine a tenant's partitions to brokers or racks (the balancer moves them)")
    p.add_argument("tenant_id", metavar="ID")
    p.add_argument("--brokers", metavar="IDS", help="broker ids, comma-separated (shoal.tenant.cell.brokers)")
    p.add_argument("--racks", metavar="RACKS", help="racks, comma-separated (shoal.tenant.cell.racks)")
    p.add_argument("--clear", action="store_true", help="no cell: any broker")
    common(p, cmd_tenants)

    p = sub.add_parser("identity-pools", help="OAuth identity pools: which OAUTHBEARER tokens join a tenant")
    pools = p.add_subparsers(dest="pools_command", required=True)
    p = pools.add_parser("create", help="map tokens of an issuer (whose claims pass a filter) to the tenant")
    p.add_argument("tenant_id", metavar="ID")
    p.add_argument("--issuer", required=True, help="the tokens' iss claim")
    p.add_argument("--claim", help="the claim the filter looks at (with --equals or --contains)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--equals", metavar="VALUE", help="the claim is VALUE (or a list holding it)")
    how.add_argument("--contains", metavar="VALUE", help="the claim is a list (or space-separated words) holding VALUE")
    p.add_argument("--principal-claim", default="sub", help="the claim naming the principal in the tenant (sub)")
    p.add_argument("--name", default="", help="display name")
    output_argument(p)
    common(p, cmd_tenants)
    p = pools.add_parser("list", help="the identity pools of a tenant (of every tenant without ID)")
    p.add_argument("tenant_id", metavar="ID", nargs="?")
    output_argument(p)
    common(p, cmd_tenants)
    p = pools.add_parser("delete", help="delete an identity pool")
    p.add_argument("tenant_id", metavar="ID")
    p.add_argument("pool_id", metavar="POOL")
    common(p, cmd_tenants)

    users = subparsers.add_parser("users", help="create and delete the SCRAM users of tenants")
    sub = users.add_subparsers(dest="users_command", required=True)
    p = sub.add_parser("create", help="create a SCRAM user in a tenant")
    p.add_argument("user", metavar="USER")
    p.add_argument("--tenant", required=True, metavar="ID")
    p.add_argument("--password-stdin", action="store_true", required=True, help="read the password from stdin")
    p.add_argument("--mechanism", choices=SCRAM_MECHANISMS,
                   help="store only this mechanism's credential (default: SCRAM-SHA-256 and SCRAM-SHA-512, so "
                        "clients log in with either)")
    p.add_argument("--admin", action="store_true", help="the user administers its tenant (may do anything in it)")
    common(p, cmd_users)
    p = sub.add_parser("delete", help="delete a user (and its credentials)")
    p.add_argument("user", metavar="USER")
    p.add_argument("--tenant", metavar="ID", help="the user's tenant (default: looked up)")
    common(p, cmd_users)


def output_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", choices=("text", "json"), default="text",
                   help="json: the admin API's answer as it is (times in epoch milliseconds)")


def iso_time(ms: int | None) -> str:
    """Epoch milliseconds as ISO-8601 in UTC, to the millisecond (``2026-11-27T04:56:01.852Z``)."""
    if ms is None:
        return "-"
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _print_tenant(t: dict[str, Any]) -> None:
    print(f"{t['tenant_id']}\t{t['display_name']}\tcreated={iso_time(t.get('created_ms'))}\t"
          f"users={','.join(t.get('users', []))}")


def _cell(args: argparse.Namespace) -> int:
    """``shoal tenants cell ID --brokers 1,2 | --racks a,b | --clear``: sets (or removes) the
    tenant's cell configs; the balancer moves its replicas into the new cell, throttled."""
    from shoal.placement.cells import CELL_BROKERS, CELL_RACKS

    if args.clear == (args.brokers is not None or args.racks is not None):
        print("shoal tenants cell: give --brokers and/or --racks, or --clear", file=sys.stderr)
        return EXIT_USAGE
    if args.clear:
        body: dict[str, Any] = {"delete": [CELL_BROKERS, CELL_RACKS]}
    else:
        given = {CELL_BROKERS: args.brokers, CELL_RACKS: args.racks}
        body = {"set": {k: v for k, v in given.items() if v is not None},
                "delete": [k for k, v in given.items() if v is None]}
    t = call_admin_api(args, "PATCH", f"/v1/tenants/{quote(args.tenant_id, safe='')}/configs", body)
    cell = {k: v for k, v in t["configs"].items() if k in (CELL_BROKERS, CELL_RACKS)}
    print(f"{t['tenant_id']}\t" + ("\t".join(f"{k}={v}" for k, v in sorted(cell.items())) or "no cell"))
    return 0


def _cell_of(args: argparse.Namespace, tenant_id: str) -> str:
    """The tenant's cell as ``describe`` says it: its brokers and racks, or any broker."""
    from shoal.placement.cells import CELL_BROKERS, CELL_RACKS

    configs = call_admin_api(args, "GET", f"/v1/tenants/{quote(tenant_id, safe='')}/configs")["configs"]
    parts = [f"{what} {configs[key]}" for key, what in ((CELL_BROKERS, "brokers"), (CELL_RACKS, "racks"))
             if configs.get(key)]
    return "; ".join(parts) or "any broker (no cell)"


def _print_pool(p: dict[str, Any]) -> None:
    f = p.get("claim_filter") or {}
    how = next((f"{f['claim']} {op} {f[op]}" for op in ("equals", "contains") if op in f), "any token")
    print(f"{p['pool_id']}\t{p['tenant_id']}\tissuer={p['issuer']}\tfilter={how}\t"
          f"principal={p['principal_claim']}" + (f"\tname={p['display_name']}" if p.get("display_name") else ""))


def _identity_pools(args: argparse.Namespace) -> int:
    """``shoal tenants identity-pools create|list|delete`` (the operator's: a tenant administrator gets 403)."""
    cmd = args.pools_command
    if cmd == "create":
        if (args.claim is None) != (args.equals is None and args.contains is None):
            print("shoal tenants identity-pools create: --claim goes with --equals or --contains", file=sys.stderr)
            return EXIT_USAGE
        body: dict[str, Any] = {"issuer": args.issuer, "principal_claim": args.principal_claim,
                                "display_name": args.name, "claim_filter": {}}
        if args.claim is not None:
            op = "equals" if args.equals is not None else "contains"
            body["claim_filter"] = {"claim": args.claim, op: args.equals if op == "equals" else args.contains}
        pool = call_admin_api(args, "POST", f"/v1/tenants/{quote(args.tenant_id, safe='')}/identity_pools", body)
        if args.output == "json":
            print(json.dumps(pool, indent=2))
        else:
            print(pool["pool_id"])
    elif cmd == "list":
        path = (f"/v1/tenants/{quote(args.tenant_id, safe='')}/identity_pools" if args.tenant_id
                else "/v1/identity_pools")
        found = call_admin_api(args, "GET", path)["identity_pools"]
        if args.output == "json":
            print(json.dumps(found, indent=2))
        for p in found if args.output == "text" else ():
            _print_pool(p)
    else:
        call_admin_api(args, "DELETE", f"/v1/tenants/{quote(args.tenant_id, safe='')}/identity_pools/"
                       f"{quote(args.pool_id, safe='')}")
        print(f"identity pool {args.pool_id} deleted")
    return 0


def cmd_tenants(args: argparse.Namespace) -> int:
    try:
        cmd = args.tenants_command
        if cmd == "create":
            t = call_admin_api(args, "POST", "/v1/tenants", {"display_name": args.name})
            print(t["tenant_id"])
            if t.get("warning"):
                print(f"shoal tenants create: warning: {t['warning']}", file=sys.stderr)
        elif cmd == "list":
            tenants = call_admin_api(args, "GET", "/v1/tenants")["tenants"]
            if args.output == "json":
                print(json.dumps(tenants, indent=2))
            for t in tenants if args.output == "text" else ():
                _print_tenant(t)
        elif cmd == "describe":
            t = call_admin_api(args, "GET", f"/v1/tenants/{quote(args.tenant_id, safe='')}")
            if args.output == "json":
                print(json.dumps(t, indent=2))
            else:
                admins = set(t.get("admins", []))
                users = ", ".join(u + (" (admin)" if u in admins else "") for u in t["users"])
                print(f"Tenant: {t['tenant_id']}\nName: {t['display_name']}\nCreated: {iso_time(t.get('created_ms'))}\n"
                      f"Users: {users}\nCell: {_cell_of(args, t['tenant_id'])}")
        elif cmd == "cell":
            return _cell(args)
        elif cmd == "identity-pools":
            return _identity_pools(args)
        else:
            t = call_admin_api(args, "DELETE", f"/v1/tenants/{quote(args.tenant_id, safe='')}")
            print(f"tenant {t['tenant_id']} deleted")
        return 0
    except AdminApiError as e:
        print(f"shoal tenants {args.tenants_command}: {e}", file=sys.stderr)
        return e.status


def cmd_users(args: argparse.Namespace) -> int:
    try:
        if args.users_command == "create":
            line = sys.stdin.readline()
            password = line[:-1] if line.endswith("\n") else line
            if not password:
                print("shoal users create: empty password on stdin", file=sys.stderr)
                return EXIT_USAGE
            body = {"user": args.user, "password": password, "admin": args.admin}
            if args.mechanism:
                body["mechanism"] = args.mechanism
            u = call_admin_api(args, "POST", f"/v1/tenants/{quote(args.tenant, safe='')}/users", body)
            role = ", tenant administrator" if args.admin else ""
            print(f"user {args.user} created in tenant {args.tenant} ({', '.join(u['mechanisms'])}{role})")
        else:
            tenant = args.tenant
            if tenant is None:
                owners = [t["tenant_id"] for t in call_admin_api(args, "GET", "/v1/tenants")["tenants"]
                          if args.user in t.get("users", [])]
                if not owners:
                    raise AdminApiError(EXIT_ERROR, f"user {args.user} belongs to no tenant")
                tenant = owners[0]
            call_admin_api(args, "DELETE", f"/v1/tenants/{quote(tenant, safe='')}/users/{quote(args.user, safe='')}")
            print(f"user {args.user} deleted from tenant {tenant}")
        return 0
    except AdminApiError as e:
        print(f"shoal users {args.users_command}: {e}", file=sys.stderr)
        return e.status
