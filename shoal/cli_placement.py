"""``shoal placement assign``: where Kafka's rack-aware placement (KIP-36) puts a topic's replicas.

A calculator, like ``kafka-reassign-partitions.sh --generate``: it talks to no broker. Give the
brokers with their racks (``--brokers 1:dc1,2:dc1,4:dc2``, or ids alone for rack-unaware
placement), the partition count and replication factor; it prints each partition's replicas (the
first is the preferred leader) and their racks. Kafka draws the start index and the replica shift
at random for every topic; ``--start-index`` fixes both (as Kafka's ``fixedStartIndex`` does) and
``--replica-shift`` the shift alone. Without them the drawn values are printed, so a run can be
repeated. ``--json`` prints one JSON document instead.

    $ shoal placement assign --brokers 1:dc1,2:dc1,3:dc1,4:dc2,5:dc2,6:dc2 \\
          --partitions 1 --replication-factor 4 --start-index 0
    start index 0, replica shift 0; 6 brokers in 2 racks
    partition 0: 1,4,2,5  racks dc1,dc2,dc1,dc2

Racks on some brokers only are refused, as AdminUtils refuses them (the broker's planner,
``shoal.cluster.planner``, places such a cluster rack-unaware instead). Exit status: 0, 1 when
placement is impossible (Kafka's error code and message on stderr), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

EXIT_ERROR = 1
EXIT_USAGE = 2


class _UsageError(Exception):
    pass


def add_parser(subparsers: Any) -> None:
    placement = subparsers.add_parser("placement", help="compute Kafka's rack-aware replica placement")
    sub = placement.add_subparsers(dest="placement_command", required=True)
    p = sub.add_parser("assign", help="print the replica assignment of a topic")
    p.add_argument("--brokers", required=True, metavar="ID[:RACK],...",
                   help="the brokers, each with its rack (1:dc1,2:dc1,3:dc2) or none (1,2,3)")
    p.add_argument("--partitions", type=int, default=1, help="partition count (default 1)")
    p.add_argument("--replication-factor", type=int, required=True, help="replicas per partition")
    p.add_argument("--start-index", type=int, metavar="N",
                   help="Kafka's fixedStartIndex: first leader's position (default: random, as Kafka)")
    p.add_argument("--replica-shift", type=int, metavar="N",
                   help="initial shift of the further replicas (default: the start index, or random)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_placement)


def parse_brokers(text: str) -> list[tuple[int, str | None]]:
    """``1:dc1,2:dc1,3`` -> ``[(1, 'dc1'), (2, 'dc1'), (3, None)]`` sorted by id."""
    out: dict[int, str | None] = {}
    for item in text.split(","):
        node, sep, rack = item.strip().partition(":")
        try:
            node_id = int(node)
        except ValueError:
            raise _UsageError(f"--brokers: {item.strip()!r} is not ID or ID:RACK") from None
        if node_id < 0:
            raise _UsageError(f"--brokers: broker id {node_id} is negative")
        if node_id in out:
            raise _UsageError(f"--brokers: broker {node_id} appears twice")
        if sep and not rack.strip():
            raise _UsageError(f"--brokers: broker {node_id} has an empty rack")
        out[node_id] = rack.strip() if sep else None
    return sorted(out.items())


def cmd_placement(args: argparse.Namespace) -> int:
    from shoal.placement import PlacementError, assign_replicas

    try:
        brokers = parse_brokers(args.brokers)
        for flag in ("start_index", "replica_shift"):
            if getattr(args, flag) is not None and getattr(args, flag) < 0:
                raise _UsageError(f"--{flag.replace('_', '-')} must be 0 or more")
    except _UsageError as e:
        print(f"shoal placement assign: {e}", file=sys.stderr)
        return EXIT_USAGE
    rng = random.Random()
    start = args.start_index if args.start_index is not None else rng.randrange(len(brokers))
    if args.replica_shift is not None:
        shift = args.replica_shift
    else:  # AdminUtils: a fixed start index fixes the shift too, else both are drawn
        shift = start if args.start_index is not None else rng.randrange(len(brokers))
    try:
        assignment = assign_replicas(
            brokers, args.partitions, args.replication_factor, start_index=start, replica_shift=shift
        )
    except PlacementError as e:
        print(f"shoal placement assign: {e.code}: {e.message}", file=sys.stderr)
        return EXIT_ERROR
    racks = dict(brokers)
    if args.json:
        print(json.dumps({
            "start_index": start,
            "replica_shift": shift,
            "partitions": [
                {"partition": i, "replicas": list(r), "racks": [racks[b] for b in r]}
                for i, r in enumerate(assignment)
            ],
        }))
        return 0
    rack_names = {r for r in racks.values() if r is not None}
    where = f" in {len(rack_names)} rack{'s' if len(rack_names) != 1 else ''}" if rack_names else " (no racks)"
    print(f"start index {start}, replica shift {shift}; {len(brokers)} brokers{where}")
    for i, replicas in enumerate(assignment):
        line = f"partition {i}: {','.join(map(str, replicas))}"
        if rack_names:
            line += "  racks " + ",".join(str(racks[b]) for b in replicas)
        print(line)
    return 0
