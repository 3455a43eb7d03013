"""``shoal cluster describe``: the cluster as its brokers report it, over the wire protocol
(Metadata, through :mod:`shoal.client`): the cluster id, the controller, the live brokers with
their racks and endpoints, and per broker the partitions it leads and hosts; partitions without a
leader (offline) and under-replicated partitions (an ISR smaller than the replicas: a follower is
down or behind) are listed apart. ``--json`` prints the same as one JSON document.

Exit status as every admin command (:mod:`shoal.cli_admin`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from shoal.cli_admin import add_connection_args, run_admin


def add_parser(subparsers: Any) -> None:
    cluster = subparsers.add_parser("cluster", help="the brokers of a cluster, its controller and leaders")
    sub = cluster.add_subparsers(dest="cluster_command", required=True)
    p = sub.add_parser("describe", help="brokers, racks, controller, partitions and leaders per broker")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.add_argument("--partitions", action="store_true", help="name every partition a broker leads")
    add_connection_args(p)
    p.set_defaults(func=cmd_cluster)


def summarize(md: Any) -> dict[str, Any]:
    """The cluster's description from a ``ClusterMetadata`` (pure; the command prints it)."""
    brokers: dict[int, dict[str, Any]] = {
        node: {"node_id": node, "host": host, "port": port, "rack": rack, "leader_of": [], "replicas": 0}
        for node, (host, port, rack) in sorted(md.brokers.items())
    }
    offline, under = [], []
    for name, topic in sorted(md.topics.items()):
        if not hasattr(topic, "partitions"):
            continue  # an error for this topic
        for p in topic.partitions:
            tp = f"{name}-{p.partition}"
            if p.leader in brokers:
                brokers[p.leader]["leader_of"].append(tp)
            else:
                offline.append({"partition": tp, "leader": p.leader, "replicas": list(p.replicas)})
            if p.leader in brokers and len(p.isr) < len(p.replicas):
                under.append({"partition": tp, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isr)})
            for r in p.replicas:
                if r in brokers:
                    brokers[r]["replicas"] += 1
    return {"cluster_id": md.cluster_id, "controller_id": md.controller_id,
            "brokers": list(brokers.values()), "offline_partitions": offline, "under_replicated_partitions": under}


def render(d: dict[str, Any], partitions: bool = False) -> str:
    lines = [f"cluster id {d['cluster_id']}", f"controller {d['controller_id']}",
             f"{len(d['brokers'])} broker(s):"]
    for b in d["brokers"]:
        mark = " (controller)" if b["node_id"] == d["controller_id"] else ""
        rack = f" rack {b['rack']}" if b["rack"] else ""
        lines.append(f"  broker {b['node_id']} at {b['host']}:{b['port']}{rack}{mark}: "
                     f"leads {len(b['leader_of'])} partition(s), hosts {b['replicas']}")
        if partitions and b["leader_of"]:
            lines.append("    " + ", ".join(b["leader_of"]))
    if d["offline_partitions"]:
        lines.append(f"{len(d['offline_partitions'])} offline partition(s) (no live leader):")
        for p in d["offline_partitions"]:
            lines.append(f"  {p['partition']} replicas {','.join(map(str, p['replicas']))}")
    if d["under_replicated_partitions"]:
        lines.append(f"{len(d['under_replicated_partitions'])} under-replicated partition(s) (ISR smaller than the replicas):")
        for p in d["under_replicated_partitions"]:
            lines.append(f"  {p['partition']} leader {p['leader']} replicas {','.join(map(str, p['replicas']))} "
                         f"isr {','.join(map(str, p['isr']))}")
    return "\n".join(lines)


def cmd_cluster(args: argparse.Namespace) -> int:
    async def job(client: Any) -> int:
        d = summarize(await client.metadata(None))
        print(json.dumps(d) if args.json else render(d, args.partitions))
        return 0

    return run_admin(args, f"shoal cluster {args.cluster_command}", "shoal-cluster", job)
