"""``shoal scram set|delete|describe``: SCRAM credentials over the wire (AlterUserScramCredentials,
DescribeUserScramCredentials), like ``kafka-configs.sh --alter --add-config SCRAM-SHA-512=[...]``.

The password is read from stdin (``--password-stdin``, first line) and salted and hashed here
(PBKDF2 with a random salt); only the salted password crosses the wire and the broker keeps only
StoredKey/ServerKey. Without ``--mechanism``, ``set`` stores a SCRAM-SHA-256 and a SCRAM-SHA-512
credential (a listener offers both, and a client using the one a user lacks fails exactly as with a
wrong password), and ``delete`` deletes whichever the user has. ``--command-config`` is a Kafka client properties file for brokers whose
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

    p = sub.add_parser("set", help="create or replace a user's SCRAM credentials")
    p.add_argument("user", metavar="USER")
    p.add_argument("--mechanism", choices=MECHS,
                   help="set only this mechanism's credential (default: SCRAM-SHA-256 and SCRAM-SHA-512)")
    p.add_argument("--iterations", type=int, default=4096)
    p.add_argument("--password-stdin", action="store_true", required=True, help="read the password from stdin")
    common(p)
    p = sub.add_parser("delete", help="delete a user's SCRAM credentials")
    p.add_argument("user", metavar="USER")
    p.add_argument("--mechanism", choices=MECHS, help="delete only this mechanism's credential (default: all it has)")
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
    from shoal.cli.hints import CONNECT_ERRORS, explain, explain_lost
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
        mechs = (args.mechanism,) if args.mechanism else MECHS
        upsertions = []
        for mech in mechs:
            salt = os.urandom(32)
            upsertions.append({"name": args.user, "mechanism": MECHANISMS[mech], "iterations": args.iterations,
                               "salt": salt, "salted_password": salted_password(mech, password, salt, args.iterations)})
        body = {"deletions": [], "upsertions": upsertions}
    client = AdminClient(args.bootstrap_server, client_id="shoal-scram", timeout=args.timeout, security=security)
    await client.connect()
    try:
        if args.scram_command == "delete":
            mechs = (args.mechanism,) if args.mechanism else [m for m, _n in (await _credentials(client, args.user))[args.user]]
            body = {"deletions": [{"name": args.user, "mechanism": MECHANISMS[m]} for m in mechs], "upsertions": []}
        if body is not None:
            resp = await client.request(51, body)
            for r in resp.results:
                if r.error_code != 0:
                    raise KafkaError.from_code(int(r.error_code), r.error_message, r.user)
            verb = "set" if args.scram_command == "set" else "deleted"
            print(f"{', '.join(mechs)} credential{'s' if len(mechs) > 1 else ''} of user {args.user} {verb}")
            return 0
        for user, infos in (await _credentials(client, args.user)).items():
            print(f"{user}: {', '.join(f'{m}(iterations={n})' for m, n in infos)}")
        return 0
    finally:
        await client.close()


async def _credentials(client: Any, user: str | None) -> dict[str, list[tuple[str, int]]]:
    """DescribeUserScramCredentials of ``user`` (None: every user): ``{user: [(mechanism,
    iterations), ...]}``; a KafkaError for a user with no credential (RESOURCE_NOT_FOUND)."""
    from shoal.auth.scram import MECHANISMS
    from shoal.client import KafkaError

    resp = await client.request(50, {"users": [{"name": user}] if user else None})
    if resp.error_code != 0:
        raise KafkaError.from_code(int(resp.error_code), resp.error_message)
    names = {v: k for k, v in MECHANISMS.items()}
    found: dict[str, list[tuple[str, int]]] = {}
    for r in resp.results:
        if r.error_code != 0:
            raise KafkaError.from_code(int(r.error_code), r.error_message, r.user)
        found[r.user] = [(names.get(int(i.mechanism), str(i.mechanism)), int(i.iterations)) for i in r.credential_infos]
    return found
