"""``shoal features describe|upgrade|downgrade``: the cluster's feature levels as
``kafka-features.sh`` shows and changes them (KIP-584), over the wire: ApiVersions v3+ (what the
broker supports, what the cluster finalized) and UpdateFeatures (an operator's: ALTER on the
cluster, the physical view).

- ``describe``: one line per feature, kafka-features' ``Feature: transaction.version
  SupportedMinVersion: 0  SupportedMaxVersion: 2  FinalizedVersionLevel: 2  Epoch: 5``.
- ``upgrade --feature NAME=LEVEL`` (repeatable): raise levels, once every broker of the cluster
  supports them (a broker of an older release would refuse to start afterwards); ``upgrade
  --latest``: every feature to the highest level the answering broker's release supports (Kafka's
  ``--release-version``, for the release the brokers were rolled onto).
- ``downgrade --feature NAME=LEVEL [--unsafe]``: lower levels of the families whose downgrade
  loses nothing (``transaction.version``); ``shoal.version`` is never lowered once finalized.
- ``--dry-run``: the broker decides and answers, changing nothing (UpdateFeatures' validate_only).

Exit status as every admin command (:mod:`shoal.cli.common`): 1 when the broker refuses.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from shoal.cli.common import EXIT_ERROR, UsageError, add_connection_args, run_checked
from shoal.metadata.rules.features import SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, UPGRADE


def add_parser(subparsers: Any) -> None:
    features = subparsers.add_parser("features", help="describe, upgrade and downgrade feature levels (kafka-features.sh)")
    sub = features.add_subparsers(dest="features_command", required=True)
    p = sub.add_parser("describe", help="the features brokers support and the levels the cluster finalized")
    add_connection_args(p)
    p.set_defaults(func=cmd_features)
    for name, verb in (("upgrade", "raise"), ("downgrade", "lower")):
        p = sub.add_parser(name, help=f"{verb} finalized feature levels")
        which = p.add_mutually_exclusive_group(required=True)
        which.add_argument("--feature", action="append", default=[], metavar="NAME=LEVEL",
                           help=f"a feature and the level to {verb} it to, e.g. transaction.version=2 (repeatable)")
        if name == "upgrade":
            which.add_argument("--latest", action="store_true",
                               help="every feature to the highest level the answering broker's release supports "
                                    "(after rolling every broker onto a release: refused while one does not)")
        if name == "downgrade":
            p.add_argument("--unsafe", action="store_true", help="an unsafe (lossy) downgrade, as Kafka's")
        p.add_argument("--dry-run", action="store_true", help="validate only: change nothing")
        add_connection_args(p)
        p.set_defaults(func=cmd_features)


def parse_features(items: list[str]) -> dict[str, int]:
    """``NAME=LEVEL`` items; UsageError for anything else or a feature named twice."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, level = item.partition("=")
        name = name.strip()
        if not sep or not name or not level.strip().lstrip("-").isdigit():
            raise UsageError(f"--feature wants NAME=LEVEL (e.g. transaction.version=2), got {item!r}")
        if name in out:
            raise UsageError(f"{name} is given twice")
        out[name] = int(level)
    return out


def describe_lines(fm: Any) -> list[str]:
    """kafka-features.sh describe's lines, one per feature the broker supports or the cluster finalized."""
    lines = []
    for name in sorted(set(fm.supported) | set(fm.finalized)):
        lo, hi = fm.supported.get(name, ("-", "-"))
        lines.append(f"Feature: {name}\tSupportedMinVersion: {lo}\tSupportedMaxVersion: {hi}\t"
                     f"FinalizedVersionLevel: {fm.finalized.get(name, 0)}\tEpoch: {fm.epoch if fm.epoch >= 0 else '-'}")
    return lines


def cmd_features(args: argparse.Namespace) -> int:
    command = args.features_command
    name = f"shoal features {command}"

    def prepare():
        if command == "describe":
            async def describe(client) -> int:
                print("\n".join(describe_lines(await client.describe_features())))
                return 0
            return describe
        latest = getattr(args, "latest", False)
        levels = {} if latest else parse_features(args.feature)
        kind = UPGRADE if command == "upgrade" else UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE

        async def update(client) -> int:
            from shoal.client import KafkaError

            if latest:
                fm = await client.describe_features()
                levels.update({n: hi for n, (_lo, hi) in sorted(fm.supported.items()) if fm.finalized.get(n, 0) < hi})
                if not levels:
                    print("Every feature is finalized at the highest level this broker's release supports.")
                    return 0
            try:
                await client.update_features({n: (v, kind) for n, v in levels.items()}, validate_only=args.dry_run)
            except KafkaError as e:
                for n, v in levels.items():
                    print(f"Could not {command} {n} to {v}. {e.code_name}: {e.message}", file=sys.stderr)
                return EXIT_ERROR
            done = "can be" if args.dry_run else "was"
            for n, v in levels.items():
                print(f"{n} {done} {command}d to {v}.")
            return 0
        return update

    return run_checked(args, name, "shoal-features", prepare)
