"""``shoal transactions list|describe|describe-producers|abort|find-hanging``: Kafka's
``kafka-transactions.sh`` over the wire protocol, through :mod:`shoal.client` (ListTransactions,
FindCoordinator key type 1, DescribeTransactions, DescribeProducers, WriteTxnMarkers).

Scoped to the tenant of the credentials, as every request is. Output follows kafka-transactions.sh
(its column names; columns as wide as their widest cell):

- ``list``: ListTransactions on every broker: TransactionalId, Coordinator, ProducerId,
  TransactionState. ``--state``, ``--producer-id`` and ``--duration-filter`` pass Kafka's filters
  (Kafka's tool has none; its Admin API does);
- ``describe --transactional-id ID``: FindCoordinator (key type 1), then DescribeTransactions on
  the coordinator: epoch, state, timeout, start time, how long it runs, its partitions;
- ``describe-producers --topic T --partition P [--broker-id N]``: DescribeProducers on the
  partition's leader (or replica N): each active producer, its epoch, the coordinator epoch of its
  last marker, last sequence and timestamp, the start offset of its open transaction (``None``);
- ``abort --topic T --partition P --start-offset N``: the open transaction starting at offset N
  is found with DescribeProducers and ended with an ABORT marker (WriteTxnMarkers to the leader,
  with the producer's epoch and coordinator epoch; -1 is sent as 0), as kafka-transactions.sh.
  ``--producer-id --producer-epoch --coordinator-epoch`` name it directly instead. The broker
  allows WriteTxnMarkers to principals with ClusterAction only (Kafka's rule);
- ``find-hanging (--topic T [--partition P] | --broker-id N) [--max-transaction-timeout MIN]``:
  open transactions older than the maximum transaction timeout (default 15 minutes) whose
  producer has no transactional id any more, or whose coordinator does not list the partition in
  the producer's current transaction: those no coordinator will ever finish.

``--output json`` on list, describe, describe-producers and find-hanging prints one JSON
document. Exit status as every admin command (:mod:`shoal.cli.common`); a transactional id or an
open transaction that does not exist is an error (1) with one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Iterable

from shoal.cli.common import EXIT_ERROR, UsageError, add_connection_args, run_checked, table

LIST_HEADERS = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
DESCRIBE_HEADERS = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions"]
PRODUCER_HEADERS = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                    "CurrentTransactionStartOffset"]
HANGING_HEADERS = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)"]


def add_parser(subparsers: Any) -> None:
    txn = subparsers.add_parser(
        "transactions", help="list and describe transactions and producers; abort hanging transactions "
                             "(kafka-transactions.sh)")
    sub = txn.add_subparsers(dest="transactions_command", required=True)

    def common(p: argparse.ArgumentParser, json_output: bool = True) -> None:
        if json_output:
            p.add_argument("--output", choices=("text", "json"), default="text", help="output format")
        add_connection_args(p)
        p.set_defaults(func=cmd_transactions)

    def partition(p: argparse.ArgumentParser, required: bool = True) -> None:
        p.add_argument("--topic", required=required, help="topic name")
        p.add_argument("--partition", type=int, required=required, help="partition number")

    p = sub.add_parser("list", help="every transactional id and its state (ListTransactions on every broker)")
    p.add_argument("--state", metavar="STATE[,STATE...]",
                   help="only these states (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, "
                        "CompleteAbort, PrepareEpochFence, Dead)")
    p.add_argument("--producer-id", type=int, action="append", default=[], metavar="ID",
                   help="only this producer id (repeatable)")
    p.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                   help="only transactions running longer than MS milliseconds")
    common(p)

    p = sub.add_parser("describe", help="the state of one transactional id, from its coordinator")
    p.add_argument("--transactional-id", required=True, help="transactional id")
    common(p)

    p = sub.add_parser("describe-producers", help="the active producers of a partition")
    p.add_argument("--broker-id", type=int, help="ask this replica instead of the leader")
    partition(p)
    common(p)

    p = sub.add_parser("abort", help="abort a hanging transaction of a partition (an ABORT marker)")
    partition(p)
    p.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    p.add_argument("--producer-id", type=int, help="instead of --start-offset: the producer id")
    p.add_argument("--producer-epoch", type=int, help="with --producer-id: its epoch")
    p.add_argument("--coordinator-epoch", type=int, help="with --producer-id: the coordinator epoch")
    common(p, json_output=False)

    p = sub.add_parser("find-hanging", help="open transactions no coordinator will finish")
    p.add_argument("--broker-id", type=int, help="search the partitions with a replica on this broker")
    partition(p, required=False)
    p.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                   help="only transactions open longer than this (default 15, Kafka's transaction.max.timeout.ms)")
    common(p)


# -- pure helpers -----------------------------------------------------------------------------


def open_transaction_at(producers: Iterable[Any], start_offset: int) -> Any | None:
    """The producer whose open transaction starts at ``start_offset`` (None: no such transaction)."""
    return next((p for p in producers if p.current_txn_start_offset >= 0
                 and p.current_txn_start_offset == start_offset), None)


def abort_spec(args: argparse.Namespace) -> tuple[int, int, int] | None:
    """(producer id, epoch, coordinator epoch) given on the command line, or None when the
    transaction is named by ``--start-offset``. Coordinator epoch -1 (a producer whose first
    transaction hangs: no marker yet) becomes 0, as kafka-transactions.sh sends it."""
    if args.start_offset is not None:
        if args.producer_id is not None:
            raise UsageError("give either --start-offset or --producer-id/--producer-epoch/--coordinator-epoch")
        return None
    if args.producer_id is None:
        raise UsageError("The transaction to abort must be identified either with --start-offset or with "
                         "--producer-id, --producer-epoch, and --coordinator-epoch")
    if args.producer_epoch is None:
        raise UsageError("Missing required argument --producer-epoch")
    if args.coordinator_epoch is None:
        raise UsageError("Missing required argument --coordinator-epoch")
    return args.producer_id, args.producer_epoch, max(0, args.coordinator_epoch)


def candidates(by_partition: dict[tuple[str, int], list[Any]], now_ms: int,
               max_timeout_ms: int) -> list[tuple[tuple[str, int], Any]]:
    """(partition, producer) of each open transaction whose producer wrote nothing for longer
    than ``max_timeout_ms`` (Kafka's find-hanging candidates)."""
    return [(tp, p) for tp, ps in sorted(by_partition.items()) for p in ps
            if p.current_txn_start_offset >= 0 and now_ms - p.last_timestamp > max_timeout_ms]


def hanging(cands: list[tuple[tuple[str, int], Any]], txn_ids: dict[int, str],
            descriptions: dict[str, Any]) -> list[tuple[tuple[str, int], Any]]:
    """The candidates no coordinator will finish: no transactional id has the producer id any
    more, the id is gone, or its current transaction does not include the partition (Kafka's
    rule: a PrepareCommit/PrepareAbort still lists partitions whose markers are not written)."""
    out = []
    for tp, p in cands:
        tid = txn_ids.get(p.producer_id)
        desc = descriptions.get(tid) if tid is not None else None
        if desc is None or tp not in desc.partitions:
            out.append((tp, p))
    return out


def ms_or_none(value: int | None) -> str:
    return "None" if value is None or value < 0 else str(value)


# -- the commands -----------------------------------------------------------------------------


def cmd_transactions(args: argparse.Namespace) -> int:
    command = args.transactions_command
    name = f"shoal transactions {command}"
    return run_checked(args, name, "shoal-transactions", lambda: _jobs[command](args))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _list(args):
    states = [s.strip() for s in (args.state or "").split(",") if s.strip()]
    if args.duration_filter < -1:
        raise UsageError("--duration-filter wants milliseconds (>= 0)")

    async def job(client) -> int:
        found = await client.list_transactions(states, args.producer_id, args.duration_filter)
        if args.output == "json":
            print(json.dumps([{"transactional_id": t.transactional_id, "coordinator": t.coordinator_id,
                               "producer_id": t.producer_id, "state": t.state} for t in found], indent=2))
            return 0
        for line in table(LIST_HEADERS, [[t.transactional_id, t.coordinator_id, t.producer_id, t.state]
                                         for t in found]):
            print(line)
        return 0

    return job


def _describe(args):
    tid = args.transactional_id

    async def job(client) -> int:
        from shoal.client import KafkaError

        got = (await client.describe_transactions([tid], raise_errors=False))[tid]
        if isinstance(got, KafkaError):
            print(f"Failed to describe transaction state of transactional-id `{tid}`: {got.code_name}"
                  + (" (no such transactional id)" if got.code_name == "TRANSACTIONAL_ID_NOT_FOUND" else ""),
                  file=sys.stderr)
            return EXIT_ERROR
        now = _now_ms()
        duration = None if got.start_time_ms is None else now - got.start_time_ms
        if args.output == "json":
            print(json.dumps({
                "coordinator": got.coordinator_id, "transactional_id": got.transactional_id,
                "producer_id": got.producer_id, "producer_epoch": got.producer_epoch, "state": got.state,
                "timeout_ms": got.timeout_ms, "start_time_ms": got.start_time_ms, "duration_ms": duration,
                "partitions": [{"topic": t, "partition": p} for t, p in got.partitions],
            }, indent=2))
            return 0
        for line in table(DESCRIBE_HEADERS, [[
            got.coordinator_id, got.transactional_id, got.producer_id, got.producer_epoch, got.state,
            got.timeout_ms, ms_or_none(got.start_time_ms), ms_or_none(duration),
            ",".join(f"{t}-{p}" for t, p in got.partitions),
        ]]):
            print(line)
        return 0

    return job


def _producer_json(p) -> dict[str, Any]:
    return {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
            "coordinator_epoch": p.coordinator_epoch, "last_sequence": p.last_sequence,
            "last_timestamp": p.last_timestamp,
            "current_transaction_start_offset": p.current_txn_start_offset if p.current_txn_start_offset >= 0
            else None}


def _describe_producers(args):
    tp = (args.topic, args.partition)

    async def job(client) -> int:
        from shoal.client import KafkaError

        got = (await client.describe_producers([tp], broker_id=args.broker_id, raise_errors=False))[tp]
        if isinstance(got, KafkaError):
            where = f"broker {args.broker_id}" if args.broker_id is not None else "leader"
            print(f"Failed to describe producers for partition {tp[0]}-{tp[1]} on {where}: {got.code_name}"
                  + (f" ({got.message})" if got.message else ""), file=sys.stderr)
            return EXIT_ERROR
        if args.output == "json":
            print(json.dumps({"topic": tp[0], "partition": tp[1],
                              "producers": [_producer_json(p) for p in got]}, indent=2))
            return 0
        for line in table(PRODUCER_HEADERS, [[
            p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
            ms_or_none(p.current_txn_start_offset),
        ] for p in got]):
            print(line)
        return 0

    return job


def _abort(args):
    spec = abort_spec(args)
    tp = (args.topic, args.partition)

    async def job(client) -> int:
        from shoal.client import KafkaError

        if spec is None:
            got = (await client.describe_producers([tp], raise_errors=False))[tp]
            if isinstance(got, KafkaError):
                print(f"Failed to validate producer state for partition {tp[0]}-{tp[1]}: {got.code_name}",
                      file=sys.stderr)
                return EXIT_ERROR
            found = open_transaction_at(got, args.start_offset)
            if found is None:
                print(f"Could not find any open transactions starting at offset {args.start_offset} on "
                      f"partition {tp[0]}-{tp[1]}", file=sys.stderr)
                return EXIT_ERROR
            pid, epoch, coord = found.producer_id, found.producer_epoch, max(0, found.coordinator_epoch)
        else:
            pid, epoch, coord = spec
        try:
            await client.abort_transaction(tp[0], tp[1], pid, epoch, coord)
        except KafkaError as e:
            if e.code_name == "NETWORK_EXCEPTION":
                raise
            print(f"Failed to abort transaction of producer {pid} (epoch {epoch}, coordinator epoch {coord}) "
                  f"on partition {tp[0]}-{tp[1]}: {e.code_name}" + (f" ({e.message})" if e.message else ""),
                  file=sys.stderr)
            return EXIT_ERROR
        print(f"Aborted the transaction of producer {pid} (epoch {epoch}, coordinator epoch {coord}) "
              f"on partition {tp[0]}-{tp[1]}"
              + (f" starting at offset {args.start_offset}" if args.start_offset is not None else ""))
        return 0

    return job


def _find_hanging(args):
    if args.topic is None and args.broker_id is None:
        raise UsageError("The `find-hanging` command requires either --topic or --broker-id to limit the scope "
                         "of the search")
    if args.partition is not None and args.topic is None:
        raise UsageError("The --partition argument requires --topic to be provided")
    max_ms = args.max_transaction_timeout * 60_000

    async def job(client) -> int:
        from shoal.client import KafkaError

        if args.topic is not None and args.partition is not None:
            parts = [(args.topic, args.partition)]
        else:
            topics = [args.topic] if args.topic is not None else await client.list_topics(include_internal=False)
            descs = await client.describe_topics(topics)
            parts = sorted((t, p.partition) for t, d in descs.items() for p in d.partitions
                           if args.broker_id is None or args.broker_id in p.replicas)
        got = await client.describe_producers(parts, broker_id=args.broker_id, raise_errors=False)
        failed = {tp: e for tp, e in got.items() if isinstance(e, KafkaError)}
        if failed:
            tp, e = next(iter(sorted(failed.items())))
            raise KafkaError(e.code_name, f"describe producers of {len(failed)} partitions failed",
                             f"{tp[0]}-{tp[1]}")
        now = _now_ms()
        cands = candidates(got, now, max_ms)
        txn_ids: dict[int, str] = {}
        descriptions: dict[str, Any] = {}
        if cands:
            pids = sorted({p.producer_id for _, p in cands})
            txn_ids = {t.producer_id: t.transactional_id for t in await client.list_transactions(producer_ids=pids)
                       if t.producer_id in pids}
            for tid, d in (await client.describe_transactions(sorted(set(txn_ids.values())),
                                                              raise_errors=False)).items():
                if isinstance(d, KafkaError) and d.code_name != "TRANSACTIONAL_ID_NOT_FOUND":
                    raise d
                descriptions[tid] = None if isinstance(d, KafkaError) else d
        found = hanging(cands, txn_ids, descriptions)
        if args.output == "json":
            print(json.dumps([{"topic": t, "partition": p, **_producer_json(s),
                               "duration_min": (now - s.last_timestamp) // 60_000} for (t, p), s in found],
                             indent=2))
            return 0
        for line in table(HANGING_HEADERS, [[t, p, s.producer_id, s.producer_epoch, s.coordinator_epoch,
                                             s.current_txn_start_offset, s.last_timestamp,
                                             (now - s.last_timestamp) // 60_000] for (t, p), s in found]):
            print(line)
        return 0

    return job


_jobs = {
    "list": _list,
    "describe": _describe,
    "describe-producers": _describe_producers,
    "abort": _abort,
    "find-hanging": _find_hanging,
}
