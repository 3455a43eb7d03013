#!/usr/bin/env python3
"""What Kafka transactions cost on Shoal (issue 14): transactional against idempotent produce, and
read_committed against read_uncommitted consume, in the same run on one broker.

Phases:
  produce   R rounds; each round runs both modes, in alternating order (idem first in odd rounds):
            ``idempotent``: one confluent-kafka producer, ``enable.idempotence=true`` (acks=all),
            N records of 1 KiB flat out, flushed; ``transactional``: the same producer settings
            plus a ``transactional.id``: ``init_transactions()`` before the clock starts, then
            ``begin_transaction()``, T records (default 1,000: the size the issue names),
            ``commit_transaction()``, for the same N records. Each run writes a new topic of P
            partitions (default 1). MB/s over the records acknowledged (transactional: committed),
            broker CPU µs per record; per round the ratio transactional / idempotent.
  timeline  (not in the default phases) ``--timeline-txns`` transactions on a new topic with
            librdkafka's ``debug=eos,protocol``: per transaction the round trips librdkafka
            reports for AddPartitionsToTxn, the Produce requests and EndTxn, and how many
            AddPartitionsToTxn / AddOffsetsToTxn answers were CONCURRENT_TRANSACTIONS (each costs
            the producer a retry backoff); medians. Where a transaction's time goes.
  consume   the last transactional round's topic (N records, N / T commit markers) read from
            offset 0 by a fresh consumer, ``isolation.level=read_committed`` and
            ``read_uncommitted`` alternating, R rounds: MB/s and their ratio.

Kafka's guidance (KIP-98's design document, Confluent's "Transactions in Apache Kafka"): with
transactions of this size the producer's throughput overhead is a few percent, and read_committed
consumers lose nothing worth mentioning; the report sets our medians against that.

Run:  python bench/bench_transactions.py [--rounds 5] [--messages 200000] [--txn-size 1000]
          [--partitions 1] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
for p in (HERE, REPO_ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

from _util import machine_info, render_table  # noqa: E402
from bench_brokers import (  # noqa: E402
    BrokerFactory, add_run_args, client_conf, client_cpu, consume_conf, consume_n, create_topic, stop_and_clean,
)
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

MB = 1024 * 1024
SIZE = 1024
MODES = ("idempotent", "transactional")


def producer_conf(bootstrap: str, args, transactional_id: str | None) -> dict:
    conf = client_conf(bootstrap, **{
        "enable.idempotence": True, "acks": "all", "linger.ms": args.linger_ms, "compression.type": "none",
    })
    if transactional_id:
        conf["transactional.id"] = transactional_id
        conf["transaction.timeout.ms"] = 60_000
    return conf


def _produce(p: Producer, topic: str, n: int, payload: bytes, partitions: int, on_delivery) -> None:
    """``n`` records, round robin over the partitions, serving delivery reports on a full queue."""
    for i in range(n):
        while True:
            try:
                p.produce(topic, payload, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.005)
        if not (i & 1023):
            p.poll(0)


def run_produce(broker, mode: str, topic: str, args) -> dict:
    tid = f"bench-txn-{uuid.uuid4().hex[:8]}" if mode == "transactional" else None
    p = Producer(producer_conf(broker.bootstrap, args, tid))
    p.list_topics(topic, timeout=10)  # connection and metadata outside the window
    if tid:
        p.init_transactions(30)
    payload = os.urandom(SIZE)
    ok = errors = 0

    def on_delivery(err, msg):
        nonlocal ok, errors
        if err is None:
            ok += 1
        else:
            errors += 1

    cpu0, ccpu0, t0 = broker.cpu(), client_cpu(), time.perf_counter()
    commits: list[float] = []
    if tid:
        done = 0
        while done < args.messages:
            size = min(args.txn_size, args.messages - done)
            p.begin_transaction()
            _produce(p, topic, size, payload, args.partitions, on_delivery)
            t = time.perf_counter()
            p.commit_transaction(60)  # flushes the transaction's records, then EndTxn
            commits.append(time.perf_counter() - t)
            done += size
        transactions = -(-args.messages // args.txn_size)
    else:
        _produce(p, topic, args.messages, payload, args.partitions, on_delivery)
        p.flush(120)
        transactions = 0
    elapsed = time.perf_counter() - t0
    cpu, ccpu = broker.cpu() - cpu0, client_cpu() - ccpu0
    p.flush(5)
    return {"mode": mode, "topic": topic, "records": args.messages, "acked": ok, "errors": errors,
            "transactions": transactions, "seconds": elapsed, "mb_s": ok * SIZE / MB / elapsed,
            "broker_cpu_us_per_record": cpu * 1e6 / max(ok, 1), "client_cpu_s": ccpu,
            "commit_ms_median": statistics.median(commits) * 1000 if commits else None,
            "ok": ok == args.messages and errors == 0}


def run_consume(broker, topic: str, isolation: str, args) -> dict:
    args.consumer_conf = [f"isolation.level={isolation}"]
    c = Consumer(consume_conf(broker.bootstrap, args))
    try:
        c.list_topics(topic, timeout=10)
        cpu0, t0 = broker.cpu(), time.perf_counter()
        c.assign([TopicPartition(topic, p, 0) for p in range(args.partitions)])
        res = consume_n(c, args.messages, time.perf_counter() + 300)
        elapsed = time.perf_counter() - t0
        cpu = broker.cpu() - cpu0
    finally:
        c.close()
    return {"isolation": isolation, "records": res["consumed"], "seconds": elapsed,
            "mb_s": res["bytes"] / MB / elapsed, "broker_cpu_us_per_record": cpu * 1e6 / max(res["consumed"], 1),
            "ok": res["ok"]}


_RTT = re.compile(r"Received (AddPartitionsToTxn|Produce|EndTxn)Response .*rtt ([\d.]+)ms")


def run_timeline(broker, args) -> dict:
    """Transactions with librdkafka's protocol debug log: the round trips of each step."""
    topic = f"bench-tl-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, args.partitions, 30)
    events: list[tuple[str, float]] = []
    concurrent = [0]

    class _Collect(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            m = _RTT.search(msg)
            if m:
                events.append((m.group(1), float(m.group(2))))
            elif "concurrent operation" in msg:
                concurrent[0] += 1

    lg = logging.getLogger(f"bench-txn-timeline-{uuid.uuid4().hex[:6]}")
    lg.propagate = False
    lg.setLevel(logging.DEBUG)
    lg.addHandler(_Collect())
    conf = producer_conf(broker.bootstrap, args, f"bench-tl-{uuid.uuid4().hex[:8]}")
    conf["debug"] = "eos,protocol"
    p = Producer(conf, logger=lg)
    p.list_topics(topic, timeout=10)
    p.init_transactions(30)
    payload = os.urandom(SIZE)
    steps: dict[str, list[float]] = {"add_partitions_rtt_ms": [], "produce_rtt_ms": [], "produce_requests": [],
                                     "end_txn_rtt_ms": [], "commit_ms": [], "transaction_ms": []}
    for _ in range(args.timeline_txns):
        p.poll(0)
        events.clear()
        t0 = time.perf_counter()
        p.begin_transaction()
        _produce(p, topic, args.txn_size, payload, args.partitions, None)
        t1 = time.perf_counter()
        p.commit_transaction(60)
        t2 = time.perf_counter()
        p.poll(0)  # the log lines of this transaction
        steps["commit_ms"].append((t2 - t1) * 1000)
        steps["transaction_ms"].append((t2 - t0) * 1000)
        by = {"AddPartitionsToTxn": [], "Produce": [], "EndTxn": []}
        for name, rtt in events:
            by[name].append(rtt)
        steps["add_partitions_rtt_ms"].append(sum(by["AddPartitionsToTxn"]))
        steps["produce_rtt_ms"].append(sum(by["Produce"]))
        steps["produce_requests"].append(len(by["Produce"]))
        steps["end_txn_rtt_ms"].append(sum(by["EndTxn"]))
    p.flush(5)
    out = {k: statistics.median(v) for k, v in steps.items() if v}
    out.update({"transactions": args.timeline_txns, "concurrent_transactions": concurrent[0]})
    return out


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rounds", type=int, default=None, help="rounds of each mode (default 5; 2 with --quick)")
    ap.add_argument("--messages", type=int, default=None, help="records per run (default 200000; 20000 with --quick)")
    ap.add_argument("--txn-size", type=int, default=1000, help="records per transaction")
    ap.add_argument("--partitions", type=int, default=1, help="partitions of each run's topic")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--phases", default="produce,consume", help="comma list of: produce, consume, timeline")
    ap.add_argument("--timeline-txns", type=int, default=100, help="transactions of the timeline phase")
    ap.add_argument("--quick", action="store_true", help="smoke run")
    ap.add_argument("--startup-timeout", type=float, default=30.0)
    add_run_args(ap, "--shoal-arg=--override --shoal-arg=log.flush.interval.messages=1000")
    args = ap.parse_args(argv)
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.messages = args.messages or (20_000 if args.quick else 200_000)
    args.producer_conf, args.consumer_conf = [], []
    return args


def _med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    phases = [x for x in args.phases.split(",") if x]
    results: dict = {"machine": machine_info(None, REPO_ROOT), "load_before": os.getloadavg(),
                     "args": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, list))}}
    workdir = tempfile.mkdtemp(prefix="shoal-bench-txn-")
    broker = None
    produce: list[dict] = []
    consume: list[dict] = []
    failed = False
    try:
        broker, _ = BrokerFactory("shoal", args, workdir).start()
        print(f"# bench_transactions: {args.rounds} rounds, {args.messages} x 1 KiB per run, transactions of "
              f"{args.txn_size}, {args.partitions} partition(s), load {os.getloadavg()[0]:.1f}", flush=True)
        last_txn_topic = None
        if "produce" in phases or "consume" in phases:
            rounds = args.rounds if "produce" in phases else 1
            for r in range(rounds):
                order = MODES if r % 2 == 0 else MODES[::-1]
                for mode in order:
                    topic = f"bench-{mode[:4]}-{uuid.uuid4().hex[:6]}"
                    create_topic(broker.bootstrap, topic, args.partitions, 30)
                    res = run_produce(broker, mode, topic, args)
                    res["round"] = r
                    produce.append(res)
                    failed |= not res["ok"]
                    commit = (f", commit_transaction() median {res['commit_ms_median']:.1f} ms"
                              if res["commit_ms_median"] is not None else "")
                    print(f"round {r + 1} {mode:13s} {res['mb_s']:7.2f} MB/s  {res['broker_cpu_us_per_record']:6.1f} "
                          f"µs broker CPU/record  ({res['seconds']:.1f} s{commit}{'' if res['ok'] else ', NOT OK'})",
                          flush=True)
                    if mode == "transactional":
                        last_txn_topic = topic
        if "timeline" in phases:
            results["timeline"] = tl = run_timeline(broker, args)
            print(f"timeline ({tl['transactions']} transactions of {args.txn_size}, medians): transaction "
                  f"{tl['transaction_ms']:.1f} ms, commit_transaction() {tl['commit_ms']:.1f} ms; round trips: "
                  f"AddPartitionsToTxn {tl['add_partitions_rtt_ms']:.2f} ms, {tl['produce_requests']:.0f} Produce "
                  f"{tl['produce_rtt_ms']:.2f} ms, EndTxn {tl['end_txn_rtt_ms']:.2f} ms; CONCURRENT_TRANSACTIONS "
                  f"answers {tl['concurrent_transactions']}", flush=True)
        if "consume" in phases and last_txn_topic:
            for r in range(args.rounds):
                order = ("read_committed", "read_uncommitted") if r % 2 == 0 else ("read_uncommitted", "read_committed")
                for iso in order:
                    res = run_consume(broker, last_txn_topic, iso, args)
                    res["round"] = r
                    consume.append(res)
                    failed |= not res["ok"]
                    print(f"round {r + 1} {iso:16s} {res['mb_s']:7.2f} MB/s  {res['broker_cpu_us_per_record']:6.1f} "
                          f"µs broker CPU/record{'' if res['ok'] else ' NOT OK'}", flush=True)
    finally:
        stop_and_clean(workdir, args.keep_logs)
    results.update({"produce": produce, "consume": consume, "load_after": os.getloadavg()})

    print()
    if produce and "produce" in phases:
        idem = [r for r in produce if r["mode"] == "idempotent"]
        txn = [r for r in produce if r["mode"] == "transactional"]
        paired = [t["mb_s"] / i["mb_s"] for i, t in zip(idem, txn)]
        med_i, med_t = _med(idem, "mb_s"), _med(txn, "mb_s")
        print(render_table(["produce (1 KiB, acks=all)", "MB/s median", "min", "max", "broker CPU µs/record"], [
            [m, f"{_med(rs, 'mb_s'):.2f}", f"{min(r['mb_s'] for r in rs):.2f}", f"{max(r['mb_s'] for r in rs):.2f}",
             f"{_med(rs, 'broker_cpu_us_per_record'):.1f}"]
            for m, rs in (("idempotent", idem), (f"transactional ({args.txn_size}/txn)", txn))]))
        ratio = statistics.median(paired)
        print(f"transactional / idempotent: {med_t / med_i:.3f} (medians), {ratio:.3f} (median of per-round "
              f"ratios: {', '.join(f'{x:.3f}' for x in paired)}); overhead {(1 - ratio) * 100:+.1f}% "
              f"against Kafka's 'a few percent' for transactions of this size")
        per_txn = [(t["seconds"] - i["seconds"]) / t["transactions"] * 1000 for i, t in zip(idem, txn)]
        print(f"time a transaction adds (transactional run less idempotent run of the same round, per "
              f"transaction): median {statistics.median(per_txn):.1f} ms ({', '.join(f'{x:.1f}' for x in per_txn)}); "
              f"commit_transaction() median {statistics.median(t['commit_ms_median'] for t in txn):.1f} ms")
        results["produce_ratio"] = {"medians": med_t / med_i, "paired_median": ratio, "paired": paired,
                                    "ms_per_transaction": per_txn}
    if consume:
        rc = [r for r in consume if r["isolation"] == "read_committed"]
        ru = [r for r in consume if r["isolation"] == "read_uncommitted"]
        paired = [a["mb_s"] / b["mb_s"] for a, b in zip(rc, ru)]
        print(render_table(["consume (same data)", "MB/s median", "min", "max", "broker CPU µs/record"], [
            [m, f"{_med(rs, 'mb_s'):.2f}", f"{min(r['mb_s'] for r in rs):.2f}", f"{max(r['mb_s'] for r in rs):.2f}",
             f"{_med(rs, 'broker_cpu_us_per_record'):.1f}"] for m, rs in (("read_committed", rc),
                                                                           ("read_uncommitted", ru))]))
        ratio = statistics.median(paired)
        print(f"read_committed / read_uncommitted: {ratio:.3f} (median of per-round ratios: "
              f"{', '.join(f'{x:.3f}' for x in paired)})")
        results["consume_ratio"] = {"paired_median": ratio, "paired": paired}
    la = results["load_after"]
    print(f"load average before {results['load_before'][0]:.1f}, after {la[0]:.1f} {la[1]:.1f} {la[2]:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
