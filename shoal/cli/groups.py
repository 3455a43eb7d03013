"""``shoal groups list|describe|delete|reset-offsets|delete-offsets``: ``kafka-consumer-groups.sh``
over the wire protocol, through :mod:`shoal.client` (ListGroups, FindCoordinator, DescribeGroups /
ConsumerGroupDescribe, OffsetFetch, ListOffsets, OffsetCommit, DeleteGroups, OffsetDelete).

Classic and KIP-848 consumer groups alike; scoped to the tenant of the credentials, as every
request is. Output follows kafka-consumer-groups.sh:

- ``list``: one group id a line (``--state``/``--type`` add that column and filter by it);
- ``describe GROUP...`` (or ``--all-groups``): per partition the committed offset, the log end
  offset and LAG (log end minus committed; ``-`` when nothing is committed), with the member that
  holds it, then the group's total lag; ``--members`` (``--verbose``: with assignments) and
  ``--state`` (coordinator, assignor, state, member count) as Kafka prints them;
- ``delete GROUP...``: refused per group while it has members (NON_EMPTY_GROUP);
- ``reset-offsets GROUP --topic T[:P,...] | --all-topics`` with one of ``--to-earliest``,
  ``--to-latest``, ``--to-current``, ``--to-offset N``, ``--to-datetime ISO-8601``, ``--shift-by N``;
  prints the plan, commits it only with ``--execute`` (``--dry-run`` is the default, with a note,
  as Kafka). Refused while the group has members. Targets are clamped to the partition's
  [log start, log end], as Kafka's; a datetime with no record at or after it goes to log end.
- ``delete-offsets GROUP --topic T[:P,...]``: refused per topic while a member subscribes to it.

``--output json`` on list, describe and reset-offsets prints one JSON document (times ISO-8601).
Exit status as every admin command (:mod:`shoal.cli.common`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any

from shoal.cli.common import EXIT_ERROR, UsageError, add_connection_args, run_checked, table

RESET_MODES = ("to_earliest", "to_latest", "to_current", "to_offset", "to_datetime", "shift_by")
INACTIVE = ("Empty", "Dead")


def add_parser(subparsers: Any) -> None:
    groups = subparsers.add_parser(
        "groups", help="list, describe, delete consumer groups and reset their offsets (kafka-consumer-groups.sh)"
    )
    sub = groups.add_subparsers(dest="groups_command", required=True)

    def common(p: argparse.ArgumentParser, json_output: bool = False) -> None:
        if json_output:
            p.add_argument("--output", choices=("text", "json"), default="text", help="output format")
        add_connection_args(p)
        p.set_defaults(func=cmd_groups)

    p = sub.add_parser("list", help="list group ids")
    p.add_argument("--state", nargs="?", const="", metavar="STATE[,STATE...]",
                   help="show each group's state; with states, only groups in them")
    p.add_argument("--type", nargs="?", const="", metavar="TYPE[,TYPE...]",
                   help="show each group's type (classic, consumer); with types, only those")
    common(p, json_output=True)

    p = sub.add_parser("describe", help="committed offsets, log end offsets and lag; members; state")
    p.add_argument("group", metavar="GROUP", nargs="*")
    p.add_argument("--all-groups", action="store_true", help="describe every group")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--members", action="store_true", help="the group's members")
    what.add_argument("--state", action="store_true", help="coordinator, assignor, state and member count")
    p.add_argument("--verbose", action="store_true", help="with --members: each member's assignment")
    common(p, json_output=True)

    p = sub.add_parser("delete", help="delete groups (each must have no members)")
    p.add_argument("group", metavar="GROUP", nargs="+")
    common(p)

    p = sub.add_parser("reset-offsets", help="move a group's committed offsets (the group must have no members)")
    p.add_argument("group", metavar="GROUP")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,...]",
                       help="a topic, or some of its partitions (repeatable)")
    scope.add_argument("--all-topics", action="store_true", help="every topic the group has committed offsets for")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--to-earliest", action="store_true", help="the log start offset")
    mode.add_argument("--to-latest", action="store_true", help="the log end offset")
    mode.add_argument("--to-current", action="store_true", help="the committed offset (as it is)")
    mode.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log's range)")
    mode.add_argument("--to-datetime", metavar="ISO-8601",
                      help="the first offset at or after this time, e.g. 2026-01-31T12:00:00Z "
                           "(without a zone: the local time zone, as Kafka)")
    mode.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (may be negative)")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="only print the new offsets (the default)")
    run.add_argument("--execute", action="store_true", help="commit the new offsets")
    common(p, json_output=True)

    p = sub.add_parser("delete-offsets", help="forget a group's committed offsets of some topics")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,...]",
                   help="a topic, or some of its partitions (repeatable)")
    common(p)


# -- pure helpers -----------------------------------------------------------------------------


def parse_topic_specs(items: list[str]) -> dict[str, list[int] | None]:
    """``["t", "u:0,2"]`` -> ``{"t": None, "u": [0, 2]}`` (None: every partition)."""
    out: dict[str, list[int] | None] = {}
    for item in items:
        topic, sep, parts = item.partition(":")
        topic = topic.strip()
        if not topic:
            raise UsageError(f"--topic wants TOPIC or TOPIC:P,P,...; got {item!r}")
        if not sep or (topic in out and out[topic] is None):
            out[topic] = None
            continue
        try:
            numbers = sorted({int(x) for x in parts.split(",") if x.strip()})
        except ValueError:
            raise UsageError(f"--topic {item!r}: partitions must be numbers") from None
        if not numbers or numbers[0] < 0:
            raise UsageError(f"--topic {item!r}: give partition numbers after the colon")
        out[topic] = sorted(set(out.get(topic) or []) | set(numbers))
    return out


def parse_datetime(text: str) -> int:
    """ISO-8601 to epoch milliseconds; a time without a zone is local time, as Kafka's tool."""
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--to-datetime {text!r} is not ISO-8601 (e.g. 2026-01-31T12:00:00Z)") from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")


def new_offset(mode: str, value: Any, current: int | None, earliest: int, latest: int,
               at_time: int | None = None) -> int:
    """The offset a reset moves a partition to, clamped to [earliest, latest] as Kafka's tool does.
    ``at_time``: ListOffsets' answer for ``--to-datetime`` (-1: no record that late, so latest)."""
    if mode == "to_earliest":
        target = earliest
    elif mode == "to_latest":
        target = latest
    elif mode == "to_offset":
        target = value
    elif mode == "to_datetime":
        target = latest if at_time is None or at_time < 0 else at_time
    else:  # to_current, shift_by: from the committed offset
        if current is None:
            raise ValueError("no committed offset")
        target = current + (value if mode == "shift_by" else 0)
    return max(earliest, min(latest, target))


def lag_rows(desc: Any, committed: dict[tuple[str, int], int],
             ends: dict[tuple[str, int], int | None]) -> list[dict[str, Any]]:
    """Per partition (assigned to a member or committed): committed offset, log end, lag, member."""
    holder = {tp: m for m in desc.members for tp in m.assignment}
    rows = []
    for tp in sorted(set(holder) | set(committed)):
        m = holder.get(tp)
        cur, end = committed.get(tp), ends.get(tp)
        rows.append({
            "topic": tp[0], "partition": tp[1], "current_offset": cur, "log_end_offset": end,
            "lag": None if cur is None or end is None else end - cur,  # as Kafka's: negative past the end
            "member_id": m.member_id if m else None, "host": m.host if m else None,
            "client_id": m.client_id if m else None,
        })
    return rows


# -- the commands -----------------------------------------------------------------------------


def cmd_groups(args: argparse.Namespace) -> int:
    command = args.groups_command
    name = f"shoal groups {command}"
    return run_checked(args, name, "shoal-groups", lambda: _jobs[command](args))


def _list(args):
    states = {s.strip().lower() for s in (args.state or "").split(",") if s.strip()}
    types = {s.strip().lower() for s in (args.type or "").split(",") if s.strip()}

    async def job(client) -> int:
        groups = [
            g for g in await client.list_groups()
            if (not states or g.state.lower() in states) and (not types or g.group_type.lower() in types)
        ]
        if args.output == "json":
            print(json.dumps([
                {"group": g.group_id, "type": g.group_type, "state": g.state, "protocol_type": g.protocol_type}
                for g in groups
            ], indent=2))
            return 0
        if args.state is None and args.type is None:
            for g in groups:
                print(g.group_id)
            return 0
        headers, cols = ["GROUP"], []
        if args.type is not None:
            headers.append("TYPE")
            cols.append(lambda g: g.group_type)
        if args.state is not None:
            headers.append("STATE")
            cols.append(lambda g: g.state)
        for line in table(headers, [[g.group_id, *(c(g) for c in cols)] for g in groups]):
            print(line)
        return 0

    return job


async def _log_ends(client, partitions) -> dict[tuple[str, int], int | None]:
    from shoal.client import LATEST

    if not partitions:
        return {}
    found = await client.list_offsets({tp: LATEST for tp in partitions}, raise_errors=False)
    return {tp: (v[0] if isinstance(v, tuple) else None) for tp, v in found.items()}


def _describe(args):
    if not args.group and not args.all_groups:
        raise UsageError("name a GROUP or give --all-groups")
    if args.verbose and not args.members:
        raise UsageError("--verbose goes with --members")

    async def job(client) -> int:
        ids = list(args.group) or [g.group_id for g in await client.list_groups()]
        out, missing = [], []
        for gid in ids:
            desc = await client.describe_group(gid)
            if desc.state == "Dead":
                missing.append(gid)
                continue
            committed = await client.fetch_offsets(gid)
            rows = lag_rows(desc, committed, {})
            ends = await _log_ends(client, [(r["topic"], r["partition"]) for r in rows])
            rows = lag_rows(desc, committed, ends)
            out.append((desc, rows))
        for gid in missing:
            print(f"Error: Consumer group '{gid}' does not exist.", file=sys.stderr)
        if args.output == "json":
            print(json.dumps([_describe_json(d, rows) for d, rows in out], indent=2))
        else:
            for desc, rows in out:
                _print_describe(args, desc, rows)
        return EXIT_ERROR if missing else 0

    return job


def _describe_json(d, rows) -> dict[str, Any]:
    node, host, port = d.coordinator
    return {
        "group": d.group_id, "type": d.group_type, "state": d.state, "protocol_type": d.protocol_type,
        "assignor": d.assignor, "coordinator": {"id": node, "host": host, "port": port},
        "group_epoch": d.group_epoch if d.group_type == "consumer" else None,
        "members": [
            {"member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id, "host": m.host,
             "assignment": [{"topic": t, "partition": p} for t, p in m.assignment]}
            for m in d.members
        ],
        "offsets": rows,
        "total_lag": sum(r["lag"] or 0 for r in rows),
    }


def _print_describe(args, d, rows) -> None:
    gid = d.group_id
    print()
    if not d.members:
        print(f"Consumer group '{gid}' has no active members.", file=sys.stderr)
    elif d.state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        print(f"Warning: Consumer group '{gid}' is rebalancing.", file=sys.stderr)
    if args.state:
        node, host, port = d.coordinator
        lines = table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                      [[gid, f"{host}:{port} ({node})", d.assignor or "", d.state, len(d.members)]])
    elif args.members:
        headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        if args.verbose:
            headers.append("ASSIGNMENT")
        body = []
        for m in d.members:
            row = [gid, m.member_id, m.host, m.client_id, len(m.assignment)]
            if args.verbose:
                by_topic: dict[str, list[str]] = {}
                for t, p in m.assignment:
                    by_topic.setdefault(t, []).append(str(p))
                row.append(", ".join(f"{t}({','.join(ps)})" for t, ps in by_topic.items()) or "-")
            body.append(row)
        lines = table(headers, body)
    else:
        lines = table(
            ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
             "CLIENT-ID"],
            [[gid, r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"], r["member_id"],
              r["host"], r["client_id"]] for r in rows],
        )
        lines.append(f"TOTAL-LAG {sum(r['lag'] or 0 for r in rows)}")
    for line in lines:
        print(line)


def _delete(args):
    async def job(client) -> int:
        results = await client.delete_groups(args.group)
        failed = {g: e for g, e in results.items() if e is not None}
        done = [g for g in args.group if g in results and results[g] is None]
        if done:
            print(f"Deletion of requested consumer groups ({', '.join(repr(g) for g in done)}) was successful.")
        if failed:
            print("Deletion of some consumer groups failed:", file=sys.stderr)
            for g, e in failed.items():
                why = {
                    "NON_EMPTY_GROUP": "the group has active members: stop its consumers first",
                    "GROUP_ID_NOT_FOUND": "no such group",
                }.get(e.code_name, e.message or "")
                print(f"* Group '{g}' could not be deleted due to: {e.code_name}" + (f" ({why})" if why else ""),
                      file=sys.stderr)
            return EXIT_ERROR
        return 0

    return job


async def _partitions_of(client, specs: dict[str, list[int] | None]) -> list[tuple[str, int]]:
    """The partitions ``--topic`` names: all of a topic's when none are given (the topic must exist)."""
    from shoal.client import KafkaError

    whole = [t for t, ps in specs.items() if ps is None]
    found = await client.describe_topics(whole, raise_errors=False) if whole else {}
    out = []
    for t, ps in specs.items():
        if ps is None:
            desc = found.get(t)
            if isinstance(desc, KafkaError) or desc is None:
                raise KafkaError("UNKNOWN_TOPIC_OR_PARTITION", "no such topic", t)
            ps = [p.partition for p in desc.partitions]
        out += [(t, p) for p in ps]
    return sorted(out)


def _reset(args):
    mode = next(m for m in RESET_MODES if getattr(args, m) is not None and getattr(args, m) is not False)
    value = getattr(args, mode)
    at_ms = parse_datetime(value) if mode == "to_datetime" else None
    specs = parse_topic_specs(args.topic) if args.topic else None

    async def job(client) -> int:
        from shoal.client import EARLIEST, LATEST, KafkaError

        gid = args.group
        desc = await client.describe_group(gid)
        if desc.state not in INACTIVE:
            print(
                f"Error: Assignments can only be reset if the group '{gid}' is inactive, but the current state "
                f"is {desc.state} ({len(desc.members)} members): stop its consumers first, then retry.",
                file=sys.stderr,
            )
            return EXIT_ERROR
        committed = await client.fetch_offsets(gid) if desc.state != "Dead" else {}
        parts = await _partitions_of(client, specs) if specs is not None else sorted(committed)
        if not parts:
            print(f"Error: group '{gid}' has no committed offsets to reset; name the topics with --topic.",
                  file=sys.stderr)
            return EXIT_ERROR
        earliest = await client.list_offsets({tp: EARLIEST for tp in parts})
        latest = await client.list_offsets({tp: LATEST for tp in parts})
        at_time = await client.list_offsets({tp: at_ms for tp in parts}) if at_ms is not None else {}
        plan: dict[tuple[str, int], int] = {}
        for tp in parts:
            try:
                plan[tp] = new_offset(mode, value, committed.get(tp), earliest[tp][0], latest[tp][0],
                                      at_time[tp][0] if tp in at_time else None)
            except ValueError:
                print(f"Error: {tp[0]}-{tp[1]} has no committed offset for group '{gid}' to start from; "
                      f"use --to-earliest, --to-latest, --to-offset or --to-datetime for it.", file=sys.stderr)
                return EXIT_ERROR
        if args.execute:
            failed = {tp: e for tp, e in (await client.commit_offsets(gid, plan, raise_errors=False)).items() if e}
            if failed:
                tp, e = next(iter(failed.items()))
                hint = " (a consumer joined meanwhile: stop it first)" if e.code_name in (
                    "UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS") else ""
                raise KafkaError(e.code_name, f"{len(failed)} partitions not reset{hint}", f"{tp[0]}-{tp[1]}")
        if args.output == "json":
            print(json.dumps({
                "group": gid, "executed": bool(args.execute),
                "datetime": iso(at_ms) if at_ms is not None else None,
                "offsets": [{"topic": t, "partition": p, "previous_offset": committed.get((t, p)), "new_offset": o}
                            for (t, p), o in sorted(plan.items())],
            }, indent=2))
        else:
            if not args.execute and not args.dry_run:
                print("WARN: No action will be performed as the --execute option is missing. "
                      "In a future major release, the default behavior of this command will be to prompt the user "
                      "before executing the reset rather than doing a dry run. You should add the --dry-run option "
                      "explicitly if you are scripting this command and want to keep the current default behavior "
                      "without prompting.", file=sys.stderr)
            print()
            for line in table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                              [[gid, t, p, o] for (t, p), o in sorted(plan.items())]):
                print(line)
        return 0

    return job


def _delete_offsets(args):
    specs = parse_topic_specs(args.topic)

    async def job(client) -> int:
        parts = await _partitions_of(client, specs)
        results = await client.delete_offsets(args.group, parts)
        failed = any(e is not None for e in results.values())
        topics = ", ".join(sorted(specs))
        if failed:
            print("Error: Encounter some partition level error, see the follow-up details:", file=sys.stderr)
        else:
            print(f"Request succeed for deleting offsets with topic {topics} group {args.group}")
        status = []
        for (t, p), e in sorted(results.items()):
            if e is None:
                status.append([t, p, "Successful"])
            elif e.code_name == "GROUP_SUBSCRIBED_TO_TOPIC":
                status.append([t, p, "Error: GROUP_SUBSCRIBED_TO_TOPIC (a member subscribes to it: stop it first)"])
            else:
                status.append([t, p, f"Error: {e.code_name}"])
        print()
        for line in table(["TOPIC", "PARTITION", "STATUS"], status):
            print(line)
        return EXIT_ERROR if failed else 0

    return job


_jobs = {
    "list": _list,
    "describe": _describe,
    "delete": _delete,
    "reset-offsets": _reset,
    "delete-offsets": _delete_offsets,
}
