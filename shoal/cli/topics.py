"""``shoal topics create|list|describe|alter|delete``: kafka-topics.sh over the wire protocol.

Talks to a broker through :mod:`shoal.client` only (never reads storage). Every failure ends with
one line on stderr (``shoal topics <command>: <reason>``) and a non-zero exit status:
1 for an error the broker returned, 2 for bad arguments, 3 when the broker cannot be reached
(or refuses the credentials). A refusal for who the caller is adds what to do (:mod:`shoal.cli.hints`).

Output follows kafka-topics.sh: ``--describe`` prints a topic line (TopicId, PartitionCount,
ReplicationFactor, Configs with the topic's overrides) and one line per partition with its
leader, replicas and ISR.
"""

from __future__ import annotations

import argparse
from typing import Any

from shoal.cli.common import UsageError, add_connection_args, observer_count, run_checked


def add_parser(subparsers: Any) -> None:
    topics = subparsers.add_parser("topics", help="create, list, describe, alter and delete topics")
    sub = topics.add_subparsers(dest="topics_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        add_connection_args(p)
        p.set_defaults(func=cmd_topics)

    p = sub.add_parser("create", help="create a topic")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--partitions", type=int, default=-1, help="partition count (default: broker's num.partitions)")
    p.add_argument(
        "--replication-factor", type=int, default=-1,
        help="replicas per partition (default: broker's default.replication.factor)",
    )
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="topic config (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="succeed when the topic already exists")
    p.add_argument("--validate-only", action="store_true", help="check the request but create nothing")
    common(p)

    p = sub.add_parser("list", help="list topic names")
    p.add_argument("--exclude-internal", action="store_true")
    common(p)

    p = sub.add_parser("describe", help="describe one topic or all")
    p.add_argument("name", metavar="NAME", nargs="?")
    p.add_argument("--exclude-internal", action="store_true")
    common(p)

    p = sub.add_parser("alter", help="add partitions or change topic configs")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--partitions", type=int, help="new partition count (can only grow)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="set a config (repeatable)")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY", help="remove an override (repeatable)")
    common(p)

    p = sub.add_parser("delete", help="delete a topic")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--if-exists", action="store_true", help="succeed when the topic does not exist")
    common(p)


def _parse_configs(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--config wants KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def cmd_topics(args: argparse.Namespace) -> int:
    handler = {
        "create": _create,
        "list": _list,
        "describe": _describe,
        "alter": _alter,
        "delete": _delete,
    }[args.topics_command]

    def prepare() -> Any:
        # Check arguments before connecting, so a typo does not wait on the network.
        if args.topics_command in ("create", "alter"):
            _parse_configs(args.config)
        if args.topics_command == "alter" and args.partitions is None and not args.config and not args.delete_config:
            raise UsageError("nothing to alter: give --partitions, --config or --delete-config")
        return lambda client: handler(client, args)

    return run_checked(args, f"shoal topics {args.topics_command}", "shoal-topics", prepare)


async def _create(client, args) -> int:
    from shoal.client import KafkaError

    configs = _parse_configs(args.config)
    result = await client.create_topics(
        [
            {
                "name": args.name,
                "num_partitions": args.partitions,
                "replication_factor": args.replication_factor,
                "configs": configs,
            }
        ],
        validate_only=args.validate_only,
        timeout_ms=int(args.timeout * 1000),
        raise_errors=False,
    )
    outcome = result.get(args.name)
    if isinstance(outcome, KafkaError):
        if outcome.code_name == "TOPIC_ALREADY_EXISTS" and args.if_not_exists:
            return 0
        raise outcome
    if args.validate_only:
        print(f"Topic {args.name} can be created (validate only, nothing was created).")
    else:
        print(f"Created topic {args.name}.")
    return 0


async def _list(client, args) -> int:
    for name in await client.list_topics(include_internal=not args.exclude_internal):
        print(name)
    return 0


async def _describe(client, args) -> int:
    from shoal.client import RESOURCE_TOPIC, KafkaError, TopicDescription

    if args.name:
        md = await client.metadata([args.name])
        found = md.topics.get(args.name)
        if isinstance(found, KafkaError):
            raise found
        if found is None:
            raise KafkaError("UNKNOWN_TOPIC_OR_PARTITION", None, args.name)
        topics = [found]
    else:
        md = await client.metadata(None)
        topics = [
            t for _, t in sorted(md.topics.items())
            if isinstance(t, TopicDescription) and not (args.exclude_internal and t.internal)
        ]
    if not topics:
        return 0
    configs = await client.describe_configs(
        [(RESOURCE_TOPIC, t.name) for t in topics], raise_errors=False
    )
    for t in topics:
        entries = configs.get((RESOURCE_TOPIC, t.name))
        observers = 0
        if isinstance(entries, KafkaError) or entries is None:
            overrides = "?"
        else:
            observers = observer_count(entries)
            overrides = ",".join(
                f"{e.name}={'<sensitive>' if e.sensitive else e.value}"
                for e in sorted(entries.values(), key=lambda e: e.name)
                if e.source == "DYNAMIC_TOPIC_CONFIG"
            )
        topic_id = t.topic_id if t.topic_id is not None else "-"
        print(
            f"Topic: {t.name}\tTopicId: {topic_id}\tPartitionCount: {len(t.partitions)}\t"
            f"ReplicationFactor: {t.replication_factor}\tConfigs: {overrides}"
        )
        for p in t.partitions:
            line = (
                f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else 'none'}\t"
                f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
            )
            if p.offline_replicas:
                line += f"\tOffline: {','.join(map(str, p.offline_replicas))}"
            if observers:  # placement puts them last (Confluent's describe prints them too)
                line += f"\tObservers: {','.join(map(str, p.replicas[-observers:]))}"
            print(line)
    return 0


async def _alter(client, args) -> int:
    from shoal.client import OP_DELETE, OP_SET, RESOURCE_TOPIC

    configs = _parse_configs(args.config)
    if args.partitions is not None:
        await client.create_partitions({args.name: args.partitions}, timeout_ms=int(args.timeout * 1000))
    if configs or args.delete_config:
        ops = [(k, OP_SET, v) for k, v in configs.items()]
        ops += [(k.strip(), OP_DELETE, None) for k in args.delete_config]
        await client.incremental_alter_configs({(RESOURCE_TOPIC, args.name): ops})
    print(f"Altered topic {args.name}.")
    return 0


async def _delete(client, args) -> int:
    from shoal.client import KafkaError

    result = await client.delete_topics([args.name], timeout_ms=int(args.timeout * 1000), raise_errors=False)
    outcome = result.get(args.name)
    if isinstance(outcome, KafkaError):
        if outcome.code_name == "UNKNOWN_TOPIC_OR_PARTITION" and args.if_exists:
            return 0
        raise outcome
    print(f"Deleted topic {args.name}.")
    return 0
