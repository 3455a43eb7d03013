"""``shoal cluster describe``: the cluster as its brokers report it, over the wire protocol
(Metadata, through :mod:`shoal.client`): the cluster id, the controller, the live brokers with
their racks and endpoints, and per broker the partitions it leads and hosts; partitions without a
leader (offline) and under-replicated partitions (an ISR smaller than the replicas: a follower is
down or behind) are listed apart. ``--json`` prints the same as one JSON document.

``shoal cluster reassign`` is Kafka's ``kafka-reassign-partitions.sh`` over
AlterPartitionReassignments / ListPartitionReassignments, with its reassignment JSON
(``{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}``): ``--execute``
prints the current assignment (the JSON to roll back with) and starts the moves; with
``--throttle BYTES`` it first sets ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` on every broker involved and the topics'
``leader.replication.throttled.replicas`` (the current replicas) and
``follower.replication.throttled.replicas`` (the new ones); ``--verify`` says per partition
whether its move is complete and, once all are, removes those throttles; ``--cancel`` cancels
the moves and removes them. ``shoal cluster elect-leaders`` is ``kafka-leader-election.sh``
(ElectLeaders: PREFERRED or UNCLEAN, one partition or all).

``shoal cluster load`` reads the HTTP admin API's ``GET /v1/cluster/load`` (``--admin-url``; the
operator's only): per broker its capacity and load totals, per partition its leader's byte rates
over the load window and its size (``shoal.cluster.load``); a table, or JSON with ``--output json``.

Exit status as every admin command (:mod:`shoal.cli.common`); elect-leaders exits 1 when a
partition could not get a leader, reassign --verify when a move is not complete.

``shoal cluster remove-broker`` and ``shoal cluster balancer`` (issue 27) speak the HTTP admin API's
``/v1/cluster/...`` (any broker of the cluster; the operator's only): ``remove-broker N`` drains
broker N (its leaderships first, then its replicas, throttled) and removes it, refused with the
reason when the other brokers cannot hold its replicas (``--wait`` follows the drain, ``--cancel``
stops it); ``balancer status`` shows the settings and the controller's last round (goals before
and after its plan, moves in flight and their ETA at the throttle, brokers being removed, removed,
down and healing, what it could not place); ``balancer plan`` makes a plan now and moves nothing;
``balancer pause`` / ``resume``. ``--output json`` prints the API's answer as it is.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from shoal.cli.common import (
    EXIT_ERROR,
    AdminApiError,
    add_connection_args,
    admin_api_arguments,
    call_admin_api,
    run_admin,
    table,
)
from shoal.cluster.balancer.executor import THROTTLE_RATES, THROTTLED_REPLICAS, throttle_plan


def add_parser(subparsers: Any) -> None:
    cluster = subparsers.add_parser("cluster", help="the brokers of a cluster, its controller and leaders")
    sub = cluster.add_subparsers(dest="cluster_command", required=True)
    p = sub.add_parser("describe", help="brokers, racks, controller, partitions and leaders per broker")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.add_argument("--partitions", action="store_true", help="name every partition a broker leads")
    add_connection_args(p)
    p.set_defaults(func=cmd_cluster)
    p = sub.add_parser("reassign", help="move partitions' replicas (Kafka's reassignment JSON)")
    p.add_argument("--reassignment-json-file", required=True, metavar="FILE",
                   help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3]}]}')
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", action="store_true", help="start the reassignments the file describes")
    action.add_argument("--verify", action="store_true",
                        help="report whether they are complete; once all are, remove the throttles")
    action.add_argument("--cancel", action="store_true", help="cancel them and remove the throttles")
    p.add_argument("--throttle", type=int, default=-1, metavar="BYTES",
                   help="with --execute: replication throttle in bytes/s for the moving replicas")
    add_connection_args(p)
    p.set_defaults(func=cmd_reassign)
    p = sub.add_parser("elect-leaders", help="elect preferred (or, unclean, any) leaders (ElectLeaders)")
    p.add_argument("--election-type", required=True, type=str.upper, choices=["PREFERRED", "UNCLEAN"])
    p.add_argument("--topic", help="the topic of --partition")
    p.add_argument("--partition", type=int, help="the partition to elect a leader for")
    p.add_argument("--all-topic-partitions", action="store_true", help="every partition")
    add_connection_args(p)
    p.set_defaults(func=cmd_elect_leaders)
    p = sub.add_parser("load", help="per broker its capacity and load, per partition its leader's rates and size")
    p.add_argument("--output", choices=("text", "json"), default="text", help="output format")
    admin_api_arguments(p, cmd_load)
    _add_balancer_parsers(sub)


def summarize(md: Any, observers: dict[str, int] | None = None) -> dict[str, Any]:
    """The cluster's description from a ``ClusterMetadata`` (pure; the command prints it).
    ``observers``: per topic placed with observers, how many (the last replicas of each
    partition): they are never in the ISR, so they do not make a partition under-replicated."""
    observers = observers or {}
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
            if p.leader in brokers and len(p.isr) < len(p.replicas) - observers.get(name, 0):
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
        md = await client.metadata(None)
        d = summarize(md, await placed_observers(client, md))
        print(json.dumps(d) if args.json else render(d, args.partitions))
        return 0

    return run_admin(args, f"shoal cluster {args.cluster_command}", "shoal-cluster", job)


async def placed_observers(client: Any, md: Any) -> dict[str, int]:
    """topic -> observers per partition, for topics placed by ``replica.placement``."""
    from shoal.cli.common import observer_count
    from shoal.client import RESOURCE_TOPIC

    names = [n for n, t in md.topics.items() if hasattr(t, "partitions")]
    if not names:
        return {}
    configs = await client.describe_configs([(RESOURCE_TOPIC, n) for n in names], keys=["replica.placement"],
                                            raise_errors=False)
    out = {}
    for n in names:
        entries = configs.get((RESOURCE_TOPIC, n))
        if isinstance(entries, dict) and (count := observer_count(entries)):
            out[n] = count
    return out


# -- reassign (kafka-reassign-partitions.sh) -------------------------------------------------------

def parse_reassignment(text: str) -> dict[tuple[str, int], list[int]]:
    """Kafka's reassignment JSON -> {(topic, partition): target replicas}; ValueError says what is
    wrong (``log_dirs`` is accepted and ignored: one log directory per broker)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    parts = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(parts, list) or not parts:
        raise ValueError('expected {"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}, ...]}')
    out: dict[tuple[str, int], list[int]] = {}
    for i, p in enumerate(parts):
        if not (isinstance(p, dict) and isinstance(p.get("topic"), str) and type(p.get("partition")) is int
                and isinstance(p.get("replicas"), list) and all(type(r) is int for r in p["replicas"])):
            raise ValueError(f"partitions[{i}]: expected topic (string), partition (int), replicas (ints): {p}")
        key = (p["topic"], p["partition"])
        if key in out:
            raise ValueError(f"partition {key[0]}-{key[1]} is listed twice")
        out[key] = list(p["replicas"])
    return out


def _name(key: tuple[str, int]) -> str:
    return f"{key[0]}-{key[1]}"


async def _current(client: Any, topics: set[str]) -> dict[tuple[str, int], list[int]]:
    md = await client.metadata(sorted(topics))
    return {(name, p.partition): list(p.replicas) for name, t in md.topics.items() if hasattr(t, "partitions")
            for p in t.partitions}


async def _clear_throttles(client: Any, topics: set[str]) -> None:
    from shoal.client import OP_DELETE, RESOURCE_BROKER, RESOURCE_TOPIC

    md = await client.metadata([])
    brokers = sorted(md.brokers)
    for b in brokers:  # a broker's own configs go to that broker
        await client.incremental_alter_configs({(RESOURCE_BROKER, str(b)): [(k, OP_DELETE, None) for k in THROTTLE_RATES]},
                                               node_id=b)
    print(f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}")
    await client.incremental_alter_configs({(RESOURCE_TOPIC, t): [(k, OP_DELETE, None) for k in THROTTLED_REPLICAS]
                                            for t in sorted(topics)})
    print(f"Clearing topic-level throttles on topic {','.join(sorted(topics))}")


def cmd_reassign(args: argparse.Namespace) -> int:
    from shoal.cli.common import EXIT_ERROR, UsageError

    async def job(client: Any) -> int:
        from shoal.client import OP_SET, RESOURCE_BROKER, RESOURCE_TOPIC

        try:
            with open(args.reassignment_json_file, encoding="utf-8") as f:
                targets = parse_reassignment(f.read())
        except (OSError, ValueError) as e:
            raise UsageError(f"--reassignment-json-file: {e}") from None
        topics = {t for t, _ in targets}
        if args.verify:
            ongoing = await client.list_partition_reassignments(list(targets))
            current = await _current(client, topics)
            print("Status of partition reassignment:")
            done = True
            for key, target in targets.items():
                if key in ongoing:
                    done = False
                    print(f"Reassignment of partition {_name(key)} is still in progress.")
                elif current.get(key) == target:
                    print(f"Reassignment of partition {_name(key)} is completed.")
                else:
                    done = False
                    print(f"There is no active reassignment of partition {_name(key)}, but replica set is "
                          f"{current.get(key)} rather than {target}.")
            if done:
                await _clear_throttles(client, topics)
            return 0 if done else EXIT_ERROR
        if args.cancel:
            results = await client.alter_partition_reassignments({key: None for key in targets})
            cancelled = [_name(k) for k, e in results.items() if e is None]
            if cancelled:
                print(f"Successfully cancelled partition reassignments for: {', '.join(cancelled)}")
            failed = {k: e for k, e in results.items() if e is not None and e.code_name != "NO_REASSIGNMENT_IN_PROGRESS"}
            for k, e in failed.items():
                print(f"Error cancelling partition reassignment for {_name(k)}: {e}")
            await _clear_throttles(client, topics)
            return EXIT_ERROR if failed else 0
        current = await _current(client, topics)
        missing = [_name(k) for k in targets if k not in current]
        if missing:
            print(f"Topic-partitions not found in the cluster: {', '.join(missing)}")
            return EXIT_ERROR
        print("Current partition replica assignment\n")
        print(json.dumps({"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": current[(t, p)], "log_dirs": ["any"] * len(current[(t, p)])}
            for t, p in targets]}))
        print("\nSave this to use as the --reassignment-json-file option during rollback")
        if args.throttle >= 0:
            brokers, topic_configs = throttle_plan(current, targets)
            rate = str(args.throttle)
            for b in sorted(brokers):
                await client.incremental_alter_configs(
                    {(RESOURCE_BROKER, str(b)): [(k, OP_SET, rate) for k in THROTTLE_RATES]}, node_id=b)
            await client.incremental_alter_configs({(RESOURCE_TOPIC, t): [(k, OP_SET, v) for k, v in cfg.items()]
                                                    for t, cfg in topic_configs.items()})
            print("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
                  "throttle is removed.")
            print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
        results = await client.alter_partition_reassignments(targets)
        failed = {k: e for k, e in results.items() if e is not None}
        started = [_name(k) for k, e in results.items() if e is None]
        if started:
            print(f"Successfully started partition reassignments for {','.join(started)}")
        for k, e in failed.items():
            print(f"Error reassigning partition(s): {_name(k)}: {e}")
        return EXIT_ERROR if failed else 0

    return run_admin(args, "shoal cluster reassign", "shoal-reassign", job)


# -- elect-leaders (kafka-leader-election.sh) ------------------------------------------------------


def cmd_elect_leaders(args: argparse.Namespace) -> int:
    from shoal.cli.common import EXIT_ERROR, UsageError

    async def job(client: Any) -> int:
        if args.all_topic_partitions == (args.topic is not None or args.partition is not None):
            raise UsageError("give either --topic and --partition, or --all-topic-partitions")
        if not args.all_topic_partitions and (args.topic is None or args.partition is None):
            raise UsageError("--topic and --partition go together")
        wanted = None if args.all_topic_partitions else [(args.topic, args.partition)]
        kind = args.election_type
        results = await client.elect_leaders(0 if kind == "PREFERRED" else 1, wanted)
        elected = [_name(k) for k, e in sorted(results.items()) if e is None]
        already = [_name(k) for k, e in sorted(results.items()) if e is not None and e.code_name == "ELECTION_NOT_NEEDED"]
        failed = {k: e for k, e in sorted(results.items()) if e is not None and e.code_name != "ELECTION_NOT_NEEDED"}
        if elected:
            print(f"Successfully completed leader election ({kind}) for partitions {', '.join(elected)}")
        if already:
            print(f"Valid replica already elected for partitions {', '.join(already)}")
        for k, e in failed.items():
            print(f"Error completing leader election ({kind}) for partition: {_name(k)}: {e}")
        return EXIT_ERROR if failed else 0

    return run_admin(args, "shoal cluster elect-leaders", "shoal-elect-leaders", job)


# -- load (the balancer's inputs, shoal.cluster.load) ----------------------------------------------


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _rate(n: float | None) -> str:
    return "-" if not n else _bytes(n) + "/s"


def render_load(d: dict[str, Any]) -> str:
    """The text of ``shoal cluster load``: a table of brokers, then one of partitions."""
    rows = []
    for b in d["brokers"]:
        c = b["capacity"]
        rows.append([b["node_id"], _rate(b["bytes_in_per_second"]), _rate(b["bytes_out_per_second"]),
                     _rate(b["replication_bytes_out_per_second"]), _bytes(b["log_bytes"]),
                     f"{_bytes(c['disk_used_bytes'])} / {_bytes(c['disk_bytes'])}" if c["disk_bytes"] else "-",
                     _rate(c["network_in_bytes_per_second"]), _rate(c["network_out_bytes_per_second"]),
                     b["leaders"], b["replicas"], f"{b['window_ms'] / 1000:.0f}s"])
    lines = table(["BROKER", "BYTES-IN", "BYTES-OUT", "REPL-OUT", "LOGS", "DISK-USED/SIZE", "NET-IN-CAP",
                   "NET-OUT-CAP", "LEADERS", "REPLICAS", "WINDOW"], rows)
    if d.get("stale_brokers"):
        lines.append(f"stale reports ignored: broker(s) {', '.join(map(str, d['stale_brokers']))}")
    prows = [[f"{p['topic']}-{p['partition']}", p["leader"], _rate(p["bytes_in_per_second"]),
              _rate(p["bytes_out_per_second"]), _rate(p["replication_bytes_out_per_second"]), _bytes(p["size_bytes"]),
              ",".join(f"{n}:{_bytes(s)}" for n, s in p["replica_sizes"].items())] for p in d["partitions"]]
    lines.append("")
    lines += table(["PARTITION", "LEADER", "BYTES-IN", "BYTES-OUT", "REPL-OUT", "SIZE", "REPLICA-SIZES"], prows)
    return "\n".join(lines)


def cmd_load(args: argparse.Namespace) -> int:
    import sys

    try:
        d = call_admin_api(args, "GET", "/v1/cluster/load")
    except AdminApiError as e:
        print(f"shoal cluster load: {e}", file=sys.stderr)
        return e.status
    print(json.dumps(d, indent=2) if args.output == "json" else render_load(d))
    return 0


# -- remove-broker and the balancer (issue 27) ------------------------------------------------------


def _add_balancer_parsers(sub: Any) -> None:
    """``remove-broker`` and ``balancer``, under ``shoal cluster``'s subparsers ``sub``."""
    p = sub.add_parser("remove-broker", help="drain a broker (its replicas move to the others) and remove it")
    p.add_argument("broker", type=int, help="the broker id")
    p.add_argument("--cancel", action="store_true", help="stop removing it (the moves in flight end)")
    p.add_argument("--wait", action="store_true", help="return once it holds no replica")
    p.add_argument("--wait-timeout", type=float, default=3600.0, metavar="SECONDS")
    p.add_argument("--output", choices=("text", "json"), default="text")
    admin_api_arguments(p, cmd_remove_broker)
    p = sub.add_parser("balancer", help="the balancer: status, plan, pause, resume")
    p.add_argument("action", choices=("status", "plan", "pause", "resume"))
    p.add_argument("--output", choices=("text", "json"), default="text")
    admin_api_arguments(p, cmd_balancer)


def _status_lines(d: dict[str, Any]) -> list[str]:
    state = "disabled" if not d["enabled"] else "paused" if d["paused"] else "enabled"
    lines = [f"balancer {state}, trigger {d['trigger']}, throttle {d['throttle_bytes_per_second']} B/s, heal after "
             + (f"{d['heal_broker_failure_threshold_ms'] / 1000:g} s" if d["heal_broker_failure_threshold_ms"] >= 0 else "never")]
    c = d.get("controller")
    if not c:
        lines.append("the controller has published no round yet")
        return lines
    lines.append(f"controller {c['controller']} (epoch {c['epoch']}): {c['state']}")
    if c["removing"]:
        lines.append("removing: " + ", ".join(f"broker {b} ({n} replicas left)" for b, n in c["removing"].items()))
    if c["removed"]:
        lines.append("removed: " + ", ".join(f"broker {b}" for b in c["removed"]))
    if c["down"]:
        lines.append("down: " + ", ".join(f"broker {b} for {s:g} s" + (" (healing)" if int(b) in c["healing"] else "")
                                          for b, s in c["down"].items()))
    if c["in_flight"]:
        lines.append(f"moves in flight: {len(c['in_flight'])} ({c['in_flight_bytes'] / 1e6:.1f} MB, ETA {c['eta_s']:g} s "
                     f"at the throttle): {', '.join(c['in_flight'][:10])}{' ...' if len(c['in_flight']) > 10 else ''}")
    if c["goals"]:
        lines.append(f"last plan: {c['plan_replica_moves']} replica move(s) ({c['plan_bytes'] / 1e6:.1f} MB), "
                     f"{c['plan_leadership_moves']} leadership move(s), {c['started']} started")
        lines += table(["GOAL", "BEFORE", "AFTER"], [[g, f"{b:.4g}", f"{a:.4g}"] for g, b, a in c["goals"]])
    if c["note"]:
        lines.append(c["note"])
    for u in c["unfixable"]:
        lines.append(f"cannot place: {u}")
    lines += _expansion_lines(c.get("expansion") or {})
    return lines


def _expansion_lines(e: dict[str, Any]) -> list[str]:
    """The automatic expansion's part of the status (shoal.cluster.balancer.expansion)."""
    if not e:
        return []
    state = e["state"]
    said = {"off": "off (no shoal.balancer.expand.command)", "watching": "watching",
            "hot": f"above the headroom for {e['hot_for_s']} s", "expanding": "running the hook",
            "waiting": "waiting for the brokers the hook was asked for"}.get(state, state)
    lines = [f"expansion: {said}; p95 utilization {100 * e['utilization_p95']:.0f}% of {e['brokers']} broker(s) "
             f"({e['load_p95']:.2f} brokers of load), recommended {e['recommended']}"]
    if e.get("shrink_to") is not None:
        lines.append(f"shrink recommended: {e['brokers']} -> {e['shrink_to']} brokers (never done automatically)")
    h = e.get("hook")
    if h:
        ran = "running" if h["exit"] is None else f"exit {h['exit']} after {h['seconds']:g} s"
        out = h["output"].strip().splitlines()[-1:] or [""]
        lines.append(f"expansion hook ({h['current']} -> {h['recommended']} brokers): {ran}"
                     + (f": {out[0][:200]}" if out[0] else ""))
    return lines


def _plan_lines(d: dict[str, Any]) -> list[str]:
    lines = [f"{d['replica_moves']} replica move(s) ({d['bytes_to_move'] / 1e6:.1f} MB), "
             f"{d['leadership_moves']} leadership move(s)"]
    lines += table(["GOAL", "BEFORE", "AFTER"], [[g["goal"], f"{g['before']:.4g}", f"{g['after']:.4g}"] for g in d["goals"]])
    if d["changes"]:
        lines += table(["PARTITION", "REPLICAS", "TO", "KIND"],
                       [[f"{c['topic']}-{c['partition']}", ",".join(map(str, c["before"])), ",".join(map(str, c["after"])),
                         "leadership" if c["leadership_only"] else "replicas"] for c in d["changes"]])
    for u in d["unfixable"]:
        lines.append(f"cannot place: {u}")
    if d["note"]:
        lines.append(d["note"])
    return lines


def _print(args: argparse.Namespace, doc: Any, lines: list[str]) -> None:
    print(json.dumps(doc, indent=2) if args.output == "json" else "\n".join(lines))


def cmd_balancer(args: argparse.Namespace) -> int:
    try:
        if args.action == "status":
            d = call_admin_api(args, "GET", "/v1/cluster/balancer")
            _print(args, d, _status_lines(d))
        elif args.action == "plan":
            d = call_admin_api(args, "GET", "/v1/cluster/balancer/plan")
            _print(args, d, _plan_lines(d))
        else:
            d = call_admin_api(args, "POST", f"/v1/cluster/balancer/{args.action}")
            _print(args, d, [f"balancer {'paused' if d['paused'] else 'resumed'}"])
    except AdminApiError as e:
        print(f"shoal cluster balancer {args.action}: {e}", file=sys.stderr)
        return e.status
    return 0


def cmd_remove_broker(args: argparse.Namespace) -> int:
    path = f"/v1/cluster/brokers/{args.broker}/remove"
    try:
        d = call_admin_api(args, "DELETE" if args.cancel else "POST", path)
        if args.cancel:
            _print(args, d, [f"broker {args.broker}: removal cancelled"])
            return 0
        if args.output == "text":
            print(f"broker {args.broker}: removing (its replicas move to the others; follow with "
                  f"`shoal cluster balancer status`)")
        if not args.wait:
            if args.output == "json":
                _print(args, d, [])
            return 0
        deadline = time.monotonic() + args.wait_timeout
        while True:
            s = call_admin_api(args, "GET", "/v1/cluster/balancer")
            c = s.get("controller") or {}
            if args.broker in c.get("removed", []):
                _print(args, s, [f"broker {args.broker}: removed (it holds no replica)"])
                return 0
            if time.monotonic() > deadline:
                left = (c.get("removing") or {}).get(str(args.broker), "?")
                print(f"shoal cluster remove-broker: broker {args.broker} still holds {left} replica(s) after "
                      f"{args.wait_timeout:g} s", file=sys.stderr)
                return EXIT_ERROR
            time.sleep(1.0)
    except AdminApiError as e:
        print(f"shoal cluster remove-broker: {e}", file=sys.stderr)
        return e.status
