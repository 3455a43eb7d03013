"""``shoal capacity report``: one self-contained HTML page from the metering pipeline's tables
(``shoal.metering.capacity``; docs/metering.md).

    $ shoal capacity report --usage usage/ --out report.html --disk-write-mbps 300 --read-mbps 900 \\
          --replication-factor 3 --headroom 0.3 --bootstrap-server 127.0.0.1:9092 --plan-out moves.json

Capacity comes from the flags, or is measured: ``--measure-disk DIR`` times a sequential write and
fsync in DIR (a broker's log dir) for the disk write capacity. With ``--bootstrap-server`` the
report plans partition moves on the live cluster's partitions (``--plan-out``: the plan alone, as
Kafka's reassignment JSON). Exit status: 0, 1 when the cluster cannot be reached, 2 for bad
arguments (no tables under --usage among them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from shoal.cli.common import EXIT_ERROR, EXIT_USAGE, client_props


def add_parser(subparsers: Any) -> None:
    capacity = subparsers.add_parser("capacity", help="capacity planning from the metering tables")
    sub = capacity.add_subparsers(dest="capacity_command", required=True)
    p = sub.add_parser("report", help="write the capacity report (one HTML page)")
    p.add_argument("--usage", required=True, metavar="DIR", help="the output dir of `shoal metering run`")
    p.add_argument("--out", required=True, metavar="FILE", help="the HTML file to write")
    p.add_argument("--disk-write-mbps", type=float, default=200.0, metavar="MB/S",
                   help="sustained disk write capacity per broker, MB/s (default 200)")
    p.add_argument("--measure-disk", metavar="DIR", help="measure the disk write capacity in DIR instead")
    p.add_argument("--read-mbps", type=float, default=600.0, metavar="MB/S",
                   help="read capacity per broker, MB/s, replication reads included (default 600)")
    p.add_argument("--replication-factor", type=int, default=3, metavar="N", help="of the tenants' topics (default 3)")
    p.add_argument("--request-threads", type=float, default=1.0, metavar="N",
                   help="request-handling time per second a broker has (default 1: one event loop)")
    p.add_argument("--headroom", type=float, default=0.3, metavar="FRACTION",
                   help="capacity to keep free, 0..1 (default 0.3)")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="a live cluster: plan partition moves on it")
    p.add_argument("--command-config", metavar="FILE", help="Kafka client properties of that connection")
    p.add_argument("--plan-out", metavar="FILE", help="also write the move plan (reassignment JSON) here")
    p.set_defaults(func=cmd_capacity)


def _tenant_of(topic: str) -> str:
    return topic[:10] if len(topic) > 11 and topic.startswith("lkc-") and topic[10] == "_" else ""


async def _partitions(args: argparse.Namespace) -> tuple[list[tuple[str, int, tuple[int, ...]]], dict[int, str]]:
    """The live cluster's led partitions, and each broker's host (broker.host)."""
    from shoal.cli.common import broker_hosts
    from shoal.client import AdminClient, ClientSecurity, TopicDescription

    security = ClientSecurity.from_properties(client_props(args.command_config))
    async with AdminClient(args.bootstrap_server, client_id="shoal-capacity", security=security) as client:
        md = await client.metadata()
        hosts = await broker_hosts(client, md.brokers)
    out = []
    for name, t in sorted(md.topics.items()):
        if isinstance(t, TopicDescription) and not t.internal:
            out.extend((name, p.partition, (p.leader, *(r for r in p.replicas if r != p.leader)))
                       for p in t.partitions if p.leader >= 0)
    return out, hosts


def cmd_capacity(args: argparse.Namespace) -> int:
    from shoal.metering.capacity import MB, Capacity, analyse, measure_disk_write, reassignment_json, render_html

    name = "shoal capacity report"
    usage = Path(args.usage)
    if not (usage / "broker_usage").exists():
        print(f"{name}: no broker_usage table under {usage} (run `shoal metering run --output {usage}` first)",
              file=sys.stderr)
        return EXIT_USAGE
    if not 0 <= args.headroom < 1 or args.replication_factor < 1 or args.disk_write_mbps <= 0 or args.read_mbps <= 0 \
            or args.request_threads <= 0:
        print(f"{name}: --headroom must be in [0, 1); capacities, --replication-factor and --request-threads "
              "must be positive", file=sys.stderr)
        return EXIT_USAGE
    write_bps = args.disk_write_mbps * MB
    if args.measure_disk:
        try:
            write_bps = measure_disk_write(args.measure_disk)
        except OSError as e:
            print(f"{name}: cannot measure {args.measure_disk}: {e.strerror or e}", file=sys.stderr)
            return EXIT_USAGE
    cap = Capacity(write_bps, args.read_mbps * MB, args.replication_factor, args.request_threads)
    parts = hosts = None
    if args.bootstrap_server:
        from shoal.client import ConnectionLost, KafkaError

        try:
            parts, hosts = asyncio.run(_partitions(args))
        except (ConnectionLost, KafkaError, OSError) as e:
            print(f"{name}: {args.bootstrap_server}: {e}", file=sys.stderr)
            return EXIT_ERROR  # (1, not 3: the report's own status for a cluster it cannot plan on)
    report = analyse(usage, cap, args.headroom, parts, _tenant_of, hosts)
    Path(args.out).write_text(render_html(report))
    if args.plan_out:
        Path(args.plan_out).write_text(json.dumps(reassignment_json(report.moves), indent=2) + "\n")
    hot = [s.broker for s in report.brokers if s.p95 > 1 - args.headroom]
    print(f"{len(report.brokers)} brokers, hot: {hot or 'none'}; cluster p95 load {report.cluster_p95:.2f}; "
          f"recommended brokers: {report.recommended}; {len(report.moves)} partition moves; {report.hosts_line()}; "
          f"wrote {args.out}")
    return 0
