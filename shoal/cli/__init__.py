"""The ``shoal`` command: ``serve`` runs a broker; admin commands talk to one over the wire."""

from __future__ import annotations

import argparse
import os
import signal
import sys

# kio registers Hypothesis strategies for its types whenever Hypothesis is importable, which costs
# the broker seconds at start-up and slows type checks on the hot path. The command-line process
# never needs them (tests that do import kio in their own process).
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    from shoal import __version__

    parser = argparse.ArgumentParser(prog="shoal", description=__doc__)
    parser.add_argument("--version", action="version", version=f"shoal {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    from shoal.cli import (acls, capacity, cluster, configs, console, features, groups, metering, namespaces, placement,
                           quotas, scram, serve, tenants, topics, transactions)

    serve.add_parser(sub)  # shoal serve
    topics.add_parser(sub)  # shoal topics create|list|describe|alter|delete
    scram.add_parser(sub)  # shoal scram set|delete|describe
    tenants.add_parser(sub)  # shoal tenants ...|users create|delete
    namespaces.add_parser(sub)  # shoal namespaces create|...|move
    acls.add_parser(sub)  # shoal acls add|list|remove
    quotas.add_parser(sub)  # shoal quotas describe|alter
    placement.add_parser(sub)  # shoal placement assign
    cluster.add_parser(sub)  # shoal cluster describe
    configs.add_parser(sub)  # shoal configs describe|alter --broker N
    groups.add_parser(sub)  # shoal groups list|describe|delete|reset-offsets|...
    transactions.add_parser(sub)  # shoal transactions list|describe|abort|...
    metering.add_parser(sub)  # shoal metering run
    capacity.add_parser(sub)  # shoal capacity report
    features.add_parser(sub)  # shoal features describe|upgrade|downgrade
    console.add_parser(sub)  # shoal console: the web console, beside any broker
    try:
        args = parser.parse_args(argv)
        rc = int(args.func(args) or 0)
        sys.stdout.flush()
    except BrokenPipeError:
        # `shoal ... | head`: the reader has gone; stop quietly, as a command killed by SIGPIPE
        # does (and keep Python from failing again when it flushes stdout at exit).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return rc

