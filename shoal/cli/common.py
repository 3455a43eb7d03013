"""What the command modules share (they import this module, never each other): the connection
flags (``--bootstrap-server``, ``--command-config`` with Kafka client properties for SSL/SASL
listeners, ``--timeout``; ``--admin-url`` for the commands that speak the HTTP admin API), one
admin client per run, usage errors, and the exit status: 0 done, 1 an error the broker returned,
2 bad arguments, 3 the broker cannot be reached (or refused our credentials)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from shoal.cli.hints import client_props  # noqa: F401  (the commands take it from here)

if TYPE_CHECKING:
    from shoal.client import AdminClient

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_ADMIN_URL = "http://127.0.0.1:9644"
EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


class UsageError(Exception):
    """Bad arguments: the command prints the message and exits with 2, before connecting."""


def add_connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                   help=f"broker to connect to (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties for SSL/SASL listeners (security.protocol, sasl.*, ssl.*)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the broker")


def run_admin(args: argparse.Namespace, name: str, client_id: str,
              job: Callable[["AdminClient"], Awaitable[int]]) -> int:
    """Connect as ``args`` says, ``await job(client)``, close; errors become one line on stderr
    (prefixed with ``name``, e.g. ``shoal quotas alter``) and an exit status."""
    from shoal.cli.hints import CONNECT_ERRORS, explain, explain_lost
    from shoal.client import ConnectionLost, KafkaError

    async def run() -> int:
        from shoal.client import AdminClient, ClientSecurity

        try:
            security = ClientSecurity.from_properties(client_props(args.command_config))
        except (OSError, ValueError) as e:
            raise UsageError(f"--command-config: {e}") from None
        client = AdminClient(args.bootstrap_server, client_id=client_id, timeout=args.timeout, security=security)
        await client.connect()
        try:
            return await job(client)
        finally:
            await client.close()

    try:
        return asyncio.run(run())
    except UsageError as e:
        return usage_error(name, e)
    except ConnectionLost as e:
        print(f"{name}: {explain_lost(e, args)}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KafkaError as e:
        print(f"{name}: {explain(e, args)}", file=sys.stderr)
        return EXIT_UNREACHABLE if e.code_name in CONNECT_ERRORS else EXIT_ERROR
    except KeyboardInterrupt:
        return 130


def usage_error(name: str, e: Exception) -> int:
    print(f"{name}: {e}", file=sys.stderr)
    return EXIT_USAGE


def run_checked(args: argparse.Namespace, name: str, client_id: str,
                prepare: Callable[[], Callable[["AdminClient"], Awaitable[int]]]) -> int:
    """``prepare()`` checks the arguments before connecting (a UsageError exits with 2) and returns
    the job that :func:`run_admin` then runs."""
    try:
        job = prepare()
    except UsageError as e:
        return usage_error(name, e)
    return run_admin(args, name, client_id, job)


# -- the HTTP admin API (shoal.admin.listener) -----------------------------------------------------


class AdminApiError(Exception):
    """A request to the admin API failed; ``status`` is the exit status it means."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def admin_api_arguments(p: argparse.ArgumentParser, func: Any) -> None:
    """``--admin-url`` and ``--timeout`` of a command that speaks the HTTP admin API, which runs ``func``."""
    p.add_argument("--admin-url", default=os.environ.get("SHOAL_ADMIN_URL") or DEFAULT_ADMIN_URL,
                   help=f"the broker's shoal.admin.listener (default $SHOAL_ADMIN_URL or {DEFAULT_ADMIN_URL})")
    p.add_argument("--timeout", type=float, default=30.0)
    p.set_defaults(func=func)


def call_admin_api(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    """One request to the admin API at ``args.admin_url``; its JSON answer, or AdminApiError."""
    url = args.admin_url.rstrip("/") + path
    data = None if body is None else json.dumps(body).encode("utf-8")
    headers = {"Content-Type": "application/json"}
    user = os.environ.get("SHOAL_ADMIN_USER")
    if user:  # shoal.admin.authentication=basic
        token = f"{user}:{os.environ.get('SHOAL_ADMIN_PASSWORD', '')}".encode("utf-8")
        headers["Authorization"] = "Basic " + base64.b64encode(token).decode("ascii")
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=args.timeout) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read()).get("message") or str(e)
        except (ValueError, AttributeError):
            message = str(e)
        from shoal.cli.hints import http_hint

        found = http_hint(e.code, user)
        raise AdminApiError(EXIT_ERROR, f"{message}: {found}" if found else message) from None
    except (urllib.error.URLError, OSError) as e:
        raise AdminApiError(
            EXIT_UNREACHABLE, f"cannot reach the admin API at {args.admin_url}: {getattr(e, 'reason', e)}: "
            f"start the broker with shoal.admin.listener={args.admin_url} (make serve, i.e. shoal serve "
            f"--quickstart, has it on {DEFAULT_ADMIN_URL}), or point --admin-url or SHOAL_ADMIN_URL at it") from None


# -- output shared by several commands -------------------------------------------------------------


def table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    """Columns as wide as their widest cell, one space apart (kafka-consumer-groups' layout)."""
    cells = [headers] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return [" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]


def observer_count(entries: Any) -> int:
    """Observers per partition of a topic placed by ``replica.placement`` (recorded at creation)."""
    from shoal.placement.constraints import PlacementSpecError, parse_placement

    entry = entries.get("replica.placement")
    if entry is None or not entry.value or entry.source != "DYNAMIC_TOPIC_CONFIG":
        return 0
    try:
        return parse_placement(entry.value).observer_count
    except PlacementSpecError:
        return 0


async def broker_hosts(client: Any, brokers: dict[int, Any]) -> dict[int, str]:
    """Each broker's host: its ``broker.host`` (DescribeConfigs), else its advertised host."""
    from shoal.client import RESOURCE_BROKER

    out = {node: str(host) for node, (host, _p, _r) in brokers.items()}
    for node in brokers:
        try:
            configs = await client.describe_configs([(RESOURCE_BROKER, str(node))], keys=["broker.host"],
                                                    raise_errors=False, node_id=node)
        except Exception:  # unreachable, an older broker: its advertised host stands for it
            continue
        entries = configs.get((RESOURCE_BROKER, str(node)))
        entry = entries.get("broker.host") if isinstance(entries, dict) else None
        if entry is not None and entry.value:
            out[node] = entry.value
    return out
