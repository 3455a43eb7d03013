"""``shoal scram set|delete|describe``: SCRAM credentials over the wire (AlterUserScramCredentials,
DescribeUserScramCredentials), like ``kafka-configs.sh --alter --add-config SCRAM-SHA-512=[...]``.

The password is read from stdin (``--password-stdin``, first line) and salted and hashed here
(PBKDF2 with a random salt); only the salted password crosses the wire and the broker keeps only
StoredKey/ServerKey. ``--command-config`` is a Kafka client properties file for brokers whose
listener needs SASL or TLS (``security.protocol``, ``sasl.mechanism``, ``sasl.username``,
``sasl.password``, ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``; see
``shoal.client.ClientSecurity``). The first user of a
SASL-only broker comes from the broker config ``shoal.sasl.bootstrap.users``.

Exit status: 1 for an error the broker returned, 2 for bad arguments, 3 when the broker cannot be
reached or authentication fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3
MECHS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


class _UsageError(Exception):
    pass


def add_parser(subparsers: Any) -> None:
    scram = subparsers.add_parser("scram", help="set, delete and describe SCRAM credentials")
    sub = scram.add_subparsers(dest="scram_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT")
        p.add_argument("--command-config", metavar="FILE", help="client properties (SASL settings)")
        p.add_argument("--timeout", type=float, default=30.0)
        p.set_defaults(func=cmd_scram)

    p = sub.add_parser("set", help="create or replace a user's SCRAM credential")
    p.add_argument("user", metavar="USER")
    p.add_argument("--mechanism", choices=MECHS, default="SCRAM-SHA-512")
    p.add_argument("--iterations", type=int, default=4096)
    p.add_argument("--password-stdin", action="store_true", required=True, help="read the password from stdin")
    common(p)
    p = sub.add_parser("delete", help="delete a user's SCRAM credential")
    p.add_argument("user", metavar="USER")
    p.add_argument("--mechanism", choices=MECHS, default="SCRAM-SHA-512")
    common(p)
    p = sub.add_parser("describe", help="list users with SCRAM credentials (mechanism, iterations)")
    p.add_argument("user", metavar="USER", nargs="?")
    common(p)


def _client_props(path: str | None) -> dict[str, str]:
    if path is None:
        return {}
    from shoal.config import parse_properties

    with open(path, encoding="utf-8") as f:
        return parse_properties(f.read())


def cmd_scram(args: argparse.Namespace) -> int:
    from shoal.cli_hints import CONNECT_ERRORS, explain, explain_lost
    from shoal.client import ConnectionLost, KafkaError

    try:
        return asyncio.run(_run(args))
    except _UsageError as e:
        print(f"shoal scram {args.scram_command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ConnectionLost as e:
        print(f"shoal scram {args.scram_command}: {explain_lost(e, args)}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KafkaError as e:
        print(f"shoal scram {args.scram_command}: {explain(e, args)}", file=sys.stderr)
        return EXIT_UNREACHABLE if e.code_name in CONNECT_ERRORS else EXIT_ERROR


async def _run(args: argparse.Namespace) -> int:
    from shoal.auth.scram import MECHANISMS, check_iterations, salted_password
    from shoal.client import AdminClient, ClientSecurity, KafkaError

    try:
        security = ClientSecurity.from_properties(_client_props(args.command_config))
    except ValueError as e:
        raise _UsageError(str(e)) from None
    body: dict[str, Any] | None = None
    if args.scram_command == "set":
        why = check_iterations(args.iterations)
        if why:
            raise _UsageError(why)
        line = sys.stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        if not password:
            raise _UsageError("empty password on stdin")
        salt = os.urandom(32)
        body = {
            "deletions": [],
            "upsertions": [
                {
                    "name": args.user,
                    "mechanism": MECHANISMS[args.mechanism],
                    "iterations": args.iterations,
                    "salt": salt,
                    "salted_password": salted_password(args.mechanism, password, salt, args.iterations),
                }
            ],
        }
    elif args.scram_command == "delete":
        body = {"deletions": [{"name": args.user, "mechanism": MECHANISMS[args.mechanism]}], "upsertions": []}
    client = AdminClient(args.bootstrap_server, client_id="shoal-scram", timeout=args.timeout, security=security)
    await client.connect()
    try:
        if body is not None:
            resp = await client.request(51, body)
            for r in resp.results:
                if r.error_code != 0:
                    raise KafkaError.from_code(int(r.error_code), r.error_message, r.user)
            verb = "set" if args.scram_command == "set" else "deleted"
            print(f"{args.mechanism} credential of user {args.user} {verb}")
            return 0
        resp = await client.request(50, {"users": [{"name": args.user}] if args.user else None})
        if resp.error_code != 0:
            raise KafkaError.from_code(int(resp.error_code), resp.error_message)
        names = {v: k for k, v in MECHANISMS.items()}
        for r in resp.results:
            if r.error_code != 0:
                raise KafkaError.from_code(int(r.error_code), r.error_message, r.user)
            infos = ", ".join(f"{names.get(int(i.mechanism), i.mechanism)}(iterations={i.iterations})" for i in r.credential_infos)
            print(f"{r.user}: {infos}")
        return 0
    finally:
        await client.close()
