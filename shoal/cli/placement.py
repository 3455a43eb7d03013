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

from shoal.cli.common import EXIT_ERROR, EXIT_USAGE, UsageError, add_connection_args, run_admin, usage_error


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
    c = sub.add_parser(
        "check", help="what a topic's layout over datacenters guarantees, and what losing each one does",
        description="The stretch-cluster advisor (shoal.placement.stretch): the datacenters (broker.rack) holding replicas "
                    "and observers, the min.insync.replicas that puts every acknowledged record in M "
                    "datacenters (replicas_per_dc * (M - 1) + 1 in the even case), and for the loss of each "
                    "datacenter whether acks=all produce and consume still work and whether an acknowledged "
                    "record can exist only there. Exit status 1 when there is a warning.")
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--topic", help="a topic of a running cluster (its replicas, racks and min.insync.replicas)")
    src.add_argument("--spec", metavar="FILE|JSON", help="a placement JSON (replica.placement), with --brokers")
    src.add_argument("--replication-factor", type=int, metavar="N",
                     help="Kafka's rack-aware placement of N replicas, with --brokers")
    c.add_argument("--brokers", metavar="ID:RACK,...", help="the brokers and their racks (with --spec or "
                   "--replication-factor)")
    c.add_argument("--hosts", metavar="ID:HOST,...", help="each broker's host (broker.host; with --brokers): the "
                   "placement spreads over them after racks and the report says how (default: a host per broker)")
    c.add_argument("--partitions", type=int, help="partitions to place (default: as many as brokers)")
    c.add_argument("--min-insync-replicas", type=int, metavar="N",
                   help="default: the topic's (--topic), else 1 (Kafka's default)")
    c.add_argument("--min-insync-racks", type=int, default=None, metavar="N",
                   help="Shoal's min.insync.racks (default: the topic's, else 1)")
    c.add_argument("--json", action="store_true", help="print JSON")
    add_connection_args(c)
    c.set_defaults(func=cmd_check)


def parse_brokers(text: str) -> list[tuple[int, str | None]]:
    """``1:dc1,2:dc1,3`` -> ``[(1, 'dc1'), (2, 'dc1'), (3, None)]`` sorted by id."""
    out: dict[int, str | None] = {}
    for item in text.split(","):
        node, sep, rack = item.strip().partition(":")
        try:
            node_id = int(node)
        except ValueError:
            raise UsageError(f"--brokers: {item.strip()!r} is not ID or ID:RACK") from None
        if node_id < 0:
            raise UsageError(f"--brokers: broker id {node_id} is negative")
        if node_id in out:
            raise UsageError(f"--brokers: broker {node_id} appears twice")
        if sep and not rack.strip():
            raise UsageError(f"--brokers: broker {node_id} has an empty rack")
        out[node_id] = rack.strip() if sep else None
    return sorted(out.items())


def cmd_placement(args: argparse.Namespace) -> int:
    from shoal.placement.assignment import PlacementError, assign_replicas

    try:
        brokers = parse_brokers(args.brokers)
        for flag in ("start_index", "replica_shift"):
            if getattr(args, flag) is not None and getattr(args, flag) < 0:
                raise UsageError(f"--{flag.replace('_', '-')} must be 0 or more")
    except UsageError as e:
        return usage_error("shoal placement assign", e)
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


# -- check: the stretch advisor ----------------------------------------------------------------------


def _read_spec(text: str) -> str:
    from pathlib import Path

    if text.lstrip().startswith("{"):
        return text
    try:
        return Path(text).read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"--spec: cannot read {text}: {e.strerror or e}") from None


def parse_hosts(text: str, brokers: list[tuple[int, str | None]]) -> dict[int, str]:
    """``1:h1,2:h1,3:h2`` -> ``{1: 'h1', 2: 'h1', 3: 'h2'}``; a broker not named is its own host."""
    known = {b for b, _ in brokers}
    out = {b: f"broker-{b}" for b in known}
    for item in text.split(","):
        node, sep, host = item.strip().partition(":")
        if not sep or not host.strip() or not node.strip().isdigit():
            raise UsageError(f"--hosts: {item.strip()!r} is not ID:HOST")
        if int(node) not in known:
            raise UsageError(f"--hosts: broker {int(node)} is not in --brokers")
        out[int(node)] = host.strip()
    return out


def offline_layouts(args: argparse.Namespace) -> tuple[list[tuple[Any, list[int]]], str | None, Any]:
    """(layout, its partitions) for --spec or --replication-factor with --brokers; the placement's
    promotion policy; and the host spread (with --hosts, else None)."""
    from shoal.placement.assignment import PlacementError, assign_replicas
    from shoal.placement.constraints import PlacementSpecError, assign_with_constraints, parse_placement
    from shoal.placement.stretch import Layout

    if not args.brokers:
        raise UsageError("--brokers ID:RACK,... is needed with --spec or --replication-factor")
    from shoal.placement.stretch import HostSpread

    brokers = parse_brokers(args.brokers)
    hosts = parse_hosts(args.hosts, brokers) if args.hosts else None
    racks = dict(brokers)
    partitions = args.partitions or len(brokers)
    if partitions < 1:
        raise UsageError("--partitions must be at least 1")
    promotion = None
    try:
        if args.spec is not None:
            spec = parse_placement(_read_spec(args.spec))
            promotion = spec.promotion
            placed = assign_with_constraints(spec, brokers, partitions)
        else:
            placed = [(r, ()) for r in assign_replicas(brokers, partitions, args.replication_factor, start_index=0,
                                                        hosts=hosts)]
    except (PlacementSpecError, PlacementError) as e:
        raise _CheckError(f"{e.code}: {e.message}") from None
    spread = HostSpread.of({i: r for i, (r, _o) in enumerate(placed)}, hosts) if hosts else None
    return group_layouts([(i, Layout.of(r, o, racks)) for i, (r, o) in enumerate(placed)]), promotion, spread


class _CheckError(Exception):
    pass


def group_layouts(items: list[tuple[int, Any]]) -> list[tuple[Any, list[int]]]:
    groups: dict[tuple, tuple[Any, list[int]]] = {}
    for partition, layout in items:
        groups.setdefault(layout.key(), (layout, []))[1].append(partition)
    return sorted(groups.values(), key=lambda g: g[1][0])


def report(groups: list[tuple[Any, list[int]]], min_isr: int, min_racks: int, promotion: str | None,
           as_json: bool, title: str, hosts: Any = None) -> int:
    """The stretch advice per layout, then (``hosts``, a ``stretch.HostSpread``) the host spread."""
    from shoal.placement.stretch import advise, render

    advice = [(advise(layout, min_isr, min_racks, promotion), parts) for layout, parts in groups]
    host_warning = hosts.warning if hosts is not None else None
    if as_json:
        doc: dict[str, Any] = {"subject": title, "layouts": [{"partitions": parts, **a.as_dict()} for a, parts in advice]}
        if hosts is not None:
            doc["hosts"] = hosts.as_dict()
        print(json.dumps(doc))
    else:
        for a, parts in advice:
            which = "every partition" if len(groups) == 1 else \
                f"partition{'s' * (len(parts) != 1)} {','.join(map(str, parts))}"
            print("\n".join(render(a, f"{title}: {which}")))
        if hosts is not None:
            print(hosts.line())
            if hosts.note:
                print(f"NOTE: {hosts.note}")
            if host_warning:
                print(f"WARNING: {host_warning}")
    return 1 if any(a.warnings for a, _ in advice) or host_warning else 0


def cmd_check(args: argparse.Namespace) -> int:
    name = "shoal placement check"
    for flag in ("min_insync_replicas", "min_insync_racks"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            print(f"{name}: --{flag.replace('_', '-')} must be at least 1", file=sys.stderr)
            return EXIT_USAGE
    if args.topic is None:
        try:
            groups, promotion, spread = offline_layouts(args)
        except UsageError as e:
            return usage_error(name, e)
        except _CheckError as e:
            print(f"{name}: {e}", file=sys.stderr)
            return EXIT_ERROR
        title = "placement" if args.spec is not None else f"rack-aware RF {args.replication_factor}"
        return report(groups, args.min_insync_replicas or 1, args.min_insync_racks or 1, promotion, args.json, title,
                      spread)
    if args.brokers or args.hosts:
        print(f"{name}: --brokers and --hosts are for --spec / --replication-factor; --topic reads the cluster's",
              file=sys.stderr)
        return EXIT_USAGE
    async def job(client: Any) -> int:
        from shoal.client import RESOURCE_TOPIC, KafkaError
        from shoal.placement.stretch import Layout

        md = await client.metadata([args.topic])
        topic = md.topics.get(args.topic)
        if topic is None or isinstance(topic, KafkaError):
            raise topic if isinstance(topic, KafkaError) else KafkaError("UNKNOWN_TOPIC_OR_PARTITION", None, args.topic)
        racks = {node: rack for node, (_h, _p, rack) in md.brokers.items()}
        configs = (await client.describe_configs([(RESOURCE_TOPIC, args.topic)]))[(RESOURCE_TOPIC, args.topic)]
        entry = configs.get("min.insync.replicas")
        min_isr = args.min_insync_replicas or (int(entry.value) if entry is not None and entry.value else 1)
        entry = configs.get("min.insync.racks")
        min_racks = args.min_insync_racks or (int(entry.value) if entry is not None and entry.value else 1)
        # observers: the last ones of each replica list, as many as the topic's placement holds
        entry = configs.get("replica.placement")
        spec = None
        if entry is not None and entry.value:
            from shoal.placement.constraints import PlacementSpecError, parse_placement
            try:
                spec = parse_placement(entry.value)
            except PlacementSpecError:
                spec = None
        n_obs = spec.observer_count if spec is not None else 0
        groups = group_layouts([(p.partition, Layout.of(p.replicas, tuple(p.replicas[len(p.replicas) - n_obs:])
                                                        if n_obs else (), racks)) for p in topic.partitions])
        from shoal.placement.stretch import HostSpread

        from shoal.cli.common import broker_hosts

        hosts = await broker_hosts(client, md.brokers)
        spread = HostSpread.of({p.partition: p.replicas for p in topic.partitions}, hosts)
        return report(groups, min_isr, min_racks, spec.promotion if spec is not None else None, args.json,
                      f"topic {args.topic}", spread)

    return run_admin(args, name, "shoal-placement", job)
