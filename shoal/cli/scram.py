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
import os
import sys
from typing import Any

from shoal.cli.common import SCRAM_MECHANISMS, UsageError, add_connection_args, run_checked


def add_parser(subparsers: Any) -> None:
    scram = subparsers.add_parser("scram", help="set, delete and describe SCRAM credentials")
    sub = scram.add_subparsers(dest="scram_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        add_connection_args(p)
        p.set_defaults(func=cmd_scram)

    p = sub.add_parser("set", help="create or replace a user's SCRAM credentials")
    p.add_argument("user", metavar="USER")
    p.add_argument("--mechanism", choices=SCRAM_MECHANISMS,
                   help="set only this mechanism's credential (default: SCRAM-SHA-256 and SCRAM-SHA-512)")
    p.add_argument("--iterations", type=int, default=4096)
    p.add_argument("--password-stdin", action="store_true", required=True, help="read the password from stdin")
    common(p)
    p = sub.add_parser("delete", help="delete a user's SCRAM credentials")
    p.add_argument("user", metavar="USER")
    p.add_argument("--mechanism", choices=SCRAM_MECHANISMS, help="delete only this mechanism's credential (default: all it has)")
    common(p)
    p = sub.add_parser("describe", help="list users with SCRAM credentials (mechanism, iterations)")
    p.add_argument("user", metavar="USER", nargs="?")
    common(p)


def cmd_scram(args: argparse.Namespace) -> int:
    def prepare() -> Any:
        # Check the arguments and read the password before connecting.
        body: dict[str, Any] | None = None
        if args.scram_command == "set":
            body = _upsertions(args)
        return lambda client: _run(client, args, body)

    return run_checked(args, f"shoal scram {args.scram_command}", "shoal-scram", prepare)


def _upsertions(args: argparse.Namespace) -> dict[str, Any]:
    """The AlterUserScramCredentials body of ``set``: the password from stdin, salted and hashed."""
    from shoal.auth.scram import MECHANISMS, check_iterations, salted_password

    why = check_iterations(args.iterations)
    if why:
        raise UsageError(why)
    line = sys.stdin.readline()
    password = line[:-1] if line.endswith("\n") else line
    if not password:
        raise UsageError("empty password on stdin")
    upsertions = []
    for mech in _mechanisms(args):
        salt = os.urandom(32)
        upsertions.append({"name": args.user, "mechanism": MECHANISMS[mech], "iterations": args.iterations,
                           "salt": salt, "salted_password": salted_password(mech, password, salt, args.iterations)})
    return {"deletions": [], "upsertions": upsertions}


def _mechanisms(args: argparse.Namespace) -> tuple[str, ...]:
    return (args.mechanism,) if args.mechanism else SCRAM_MECHANISMS


async def _run(client: Any, args: argparse.Namespace, body: dict[str, Any] | None) -> int:
    from shoal.auth.scram import MECHANISMS
    from shoal.client import KafkaError

    mechs: Any = _mechanisms(args) if args.scram_command == "set" else None
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
