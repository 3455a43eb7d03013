"""``shoal console``: the Shoal Console (docs/console.md) as a process of its own, beside any
broker or cluster: it serves the web UI under ``/ui/`` on ``--listen`` and logs each user in to
``--bootstrap-server``'s SASL listener (SCRAM) as that user. ``--command-config`` gives the
listener's ``security.protocol`` (SASL_PLAINTEXT or SASL_SSL) and TLS settings; SASL user names
and passwords in it are ignored (each login brings its own). ``--operator USER`` (repeatable):
the users who get the operator's pages (the cluster's super users). ``--admin-api URL``: the HTTP
admin API (``shoal.admin.listener``) those pages call, as the logged-in user (HTTP Basic), for
what only Shoal has (tenants, load, the balancer; a tenant's usage, users and namespaces: those
need ``shoal.admin.authentication=basic`` there); an ``https`` URL is checked against the
``ssl.ca.location`` of ``--command-config`` when it names one. ``--sampler-config FILE``: Kafka
client properties (``bootstrap.servers`` optional, ``security.protocol``, ``sasl.*``, ``ssl.*``) of
a login that sees the physical cluster (a super user), with which the console samples every
consumer group's lag for the group page's plot; without it only the groups users open are sampled,
each as its user, from the first visit on.

Runs until SIGINT or SIGTERM. Errors in the arguments are one line and exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from shoal.cli.common import EXIT_USAGE, SCRAM_MECHANISMS, UsageError, client_props

DEFAULT_LISTEN = "http://127.0.0.1:9646"
DEFAULT_SASL_BOOTSTRAP = "127.0.0.1:9093"  # the quickstart's SASL listener


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("console", help="serve the web console under /ui/, logging users in to a SASL listener")
    p.add_argument("--bootstrap-server", default=DEFAULT_SASL_BOOTSTRAP, metavar="HOST:PORT",
                   help=f"a SASL listener the console logs users in to (default {DEFAULT_SASL_BOOTSTRAP})")
    p.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties of that listener (security.protocol SASL_PLAINTEXT or SASL_SSL, ssl.*)")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="http://HOST:PORT",
                   help=f"where to serve the console (default {DEFAULT_LISTEN})")
    p.add_argument("--operator", action="append", default=[], metavar="USER",
                   help="a user who gets the operator's pages (a super user; repeatable)")
    p.add_argument("--admin-api", metavar="URL",
                   help="the HTTP admin API the operator's pages and a tenant's usage, users and namespaces pages "
                        "call as the user (e.g. http://127.0.0.1:9644)")
    p.add_argument("--sampler-config", metavar="FILE",
                   help="Kafka client properties (with sasl.username/sasl.password) of a super user, with which "
                        "the console samples every group's lag for the lag plot (bootstrap.servers in it, else "
                        "--bootstrap-server)")
    p.add_argument("--lag-interval", type=float, default=30.0, metavar="SECONDS",
                   help="how often the groups' lag is sampled (default 30)")
    p.add_argument("--mechanism", default="SCRAM-SHA-512", choices=SCRAM_MECHANISMS,
                   help="the SCRAM mechanism users log in with (default SCRAM-SHA-512)")
    p.add_argument("--secure-cookies", action="store_true",
                   help="mark cookies Secure although the console serves plain HTTP (TLS ends in front of it)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.set_defaults(func=cmd_console)


def settings(args: argparse.Namespace) -> tuple[str, int, dict[str, str]]:
    """(host, port, listener properties) from the arguments; UsageError when they are wrong."""
    from shoal.admin.http_listener import parse_listener

    try:
        host, port = parse_listener(args.listen, "--listen")
        props = {k: v for k, v in client_props(args.command_config).items() if not k.startswith("sasl.")}
    except (OSError, ValueError) as e:
        raise UsageError(str(e)) from None
    props.setdefault("security.protocol", "SASL_PLAINTEXT")
    if props["security.protocol"].upper() not in ("SASL_PLAINTEXT", "SASL_SSL"):
        raise UsageError(f"--command-config: the console logs users in with SASL/SCRAM: security.protocol must be "
                         f"SASL_PLAINTEXT or SASL_SSL, not {props['security.protocol']}")
    return host, port, props


def lag_client(args: argparse.Namespace) -> Any:
    """``console_app``'s ``lag_client`` from ``--sampler-config`` (None without it); UsageError."""
    if not args.sampler_config:
        return None
    from shoal.client import ClientSecurity
    from shoal.console.lag import sampler_client

    try:
        props = client_props(args.sampler_config)
        security = ClientSecurity.from_properties(props)
    except (OSError, ValueError) as e:
        raise UsageError(f"--sampler-config: {e}") from None
    if args.lag_interval <= 0:
        raise UsageError("--lag-interval must be more than 0")
    bootstrap = props.get("bootstrap.servers") or args.bootstrap_server
    return lambda: sampler_client(bootstrap, security)


def cmd_console(args: argparse.Namespace) -> int:
    from aiohttp import web

    from shoal.console import console_app

    try:
        host, port, props = settings(args)
        sampler = lag_client(args)
    except UsageError as e:
        print(f"shoal console: {e}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    operators = frozenset(args.operator)
    admin_api = None
    if args.admin_api:
        import ssl

        from shoal.console.operator_data import HttpAdminApi

        if not args.admin_api.startswith(("http://", "https://")):
            print(f"shoal console: --admin-api: {args.admin_api!r} is not an http:// or https:// URL", file=sys.stderr)
            return EXIT_USAGE
        ca = props.get("ssl.ca.location")
        admin_api = HttpAdminApi(args.admin_api, ssl.create_default_context(cafile=ca) if ca else None)
    root = web.Application()
    root.add_subapp("/ui/", console_app(args.bootstrap_server, props, mechanism=args.mechanism,
                                        is_operator=operators.__contains__,
                                        force_secure_cookies=args.secure_cookies, admin_api=admin_api,
                                        lag_client=sampler, lag_interval_s=args.lag_interval))

    async def home(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/ui/")

    root.router.add_get("/", home)
    print(f"Shoal Console on http://{host}:{port}/ui/ (users log in to {args.bootstrap_server})", flush=True)
    web.run_app(root, host=host, port=port, access_log=None, print=None, handle_signals=True, shutdown_timeout=5)
    return 0
