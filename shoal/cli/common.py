"""What the wire-protocol admin commands share: the connection flags (``--bootstrap-server``,
``--command-config`` with Kafka client properties for SSL/SASL listeners, ``--timeout``), one
admin client per run, and the exit status: 0 done, 1 an error the broker returned, 2 bad
arguments, 3 the broker cannot be reached (or refused our credentials)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Awaitable, Callable

if TYPE_CHECKING:
    from shoal.client import AdminClient

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3


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
        from shoal.cli.scram import _client_props
        from shoal.client import AdminClient, ClientSecurity

        try:
            security = ClientSecurity.from_properties(_client_props(args.command_config))
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
