#!/usr/bin/env python3
"""What idempotence and transactions cost on Shoal (issues 14 and 29): plain acks=all, idempotent
and transactional produce in interleaved rounds on one broker, with a read_committed consumer
alongside, and read_committed against read_uncommitted consume of the same data.

Phases:
  produce   R rounds; each round runs every mode of ``--modes`` once, in that order (plain,
            idempotent, txn:100, txn:1000, txn:10000, plain, idempotent, ...), each with a new
            confluent-kafka producer writing N records of 1 KiB flat out (``linger.ms=5``,
            acks=all, no compression) to a new topic of P partitions (default 1):
            ``plain``: ``enable.idempotence=false``; ``idempotent``: ``enable.idempotence=true``;
            ``txn:T``: idempotent plus a ``transactional.id``, ``init_transactions()`` before the
            clock starts, then ``begin_transaction()``, T records, ``commit_transaction()``, for
            the same N records. Records/s over the records acknowledged (transactional:
            committed), broker CPU µs per record, per round each mode's ratio to ``plain`` of
            that round, and medians. With ``--consumer`` (default on) a consumer process reads
            each run's topic while it is written, ``isolation.level=read_committed`` (the same
            for every mode: on a topic without transactions it reads up to the high watermark),
            and reports its records/s from the producer's start to its last record and the
            end-to-end lag of its records (receive time - the record's CreateTime, set by the
            producer at ``produce()``; a transaction's records become visible at its commit).
  timeline  (not in the default phases) ``--timeline-txns`` transactions on a new topic with
            librdkafka's ``debug=eos,protocol``: per transaction the round trips librdkafka
            reports for AddPartitionsToTxn, the Produce requests and EndTxn, and how many
            AddPartitionsToTxn / AddOffsetsToTxn answers were CONCURRENT_TRANSACTIONS (each costs
            the producer a retry backoff); medians. Where a transaction's time goes.
  consume   (not in the default phases) the last transactional round's topic (N records, N / T
            commit markers) read from offset 0 by a fresh consumer, ``isolation.level=
            read_committed`` and ``read_uncommitted`` alternating, R rounds: MB/s and their ratio.

Kafka's guidance (KIP-98's design document, Confluent's "Transactions in Apache Kafka"): with
transactions of 1,000 records the producer's throughput overhead is a few percent; issue 29's
target is idempotent and txn:1000 each >= 0.9 of plain in one run.

Run:  python bench/bench_transactions.py [--rounds 5] [--messages 150000]
          [--modes plain,idempotent,txn:100,txn:1000,txn:10000] [--partitions 1] [--no-consumer]
          [--phases produce,timeline,consume] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
for p in (HERE, REPO_ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

from _util import machine_info, percentile, render_table  # noqa: E402
from bench_brokers import (  # noqa: E402
    BrokerFactory, add_run_args, client_conf, client_cpu, consume_conf, consume_n, create_topic, stop_and_clean,
)
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

MB = 1024 * 1024
SIZE = 1024
DEFAULT_MODES = "plain,idempotent,txn:100,txn:1000,txn:10000"


def parse_mode(text: str) -> tuple[str, bool, int]:
    """``plain`` / ``idempotent`` / ``txn:T`` -> (name, idempotent, records per transaction or 0)."""
    if text in ("plain", "idempotent"):
        return text, text == "idempotent", 0
    name, _, size = text.partition(":")
    if name != "txn" or not size.isdigit() or int(size) <= 0:
        raise argparse.ArgumentTypeError(f"unknown mode {text!r}: plain, idempotent or txn:N")
    return text, True, int(size)


def producer_conf(bootstrap: str, args, transactional_id: str | None, idempotent: bool = True) -> dict:
    conf = client_conf(bootstrap, **{
        "enable.idempotence": idempotent, "acks": "all", "linger.ms": args.linger_ms, "compression.type": "none",
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


def _sender(stats: list[str], topic: str, elapsed: float) -> dict | None:
    """What librdkafka's statistics say of its sending: Produce requests to the partitions' leader,
    the time between them over the run, its round trip (from sending a request to its answer) and
    how long records waited in its queue: medians of the p50s of its 100-ms windows that saw any.
    A sender that waits between requests while the round trip is short and records queue is held
    up in the client, not the broker."""
    if not stats:
        return None
    windows = []
    for js in stats:
        st = json.loads(js)
        brokers = [b for b in st["brokers"].values() if b.get("nodeid", -1) >= 0 and b["req"].get("Produce")]
        if brokers:
            windows.append((max(brokers, key=lambda x: x["req"]["Produce"]), st))
    if not windows:
        return None
    last, st = windows[-1]
    n = last["req"]["Produce"]
    rtt = [b["rtt"]["p50"] for b, _ in windows if b["rtt"]["cnt"]]
    queued = [b["int_latency"]["p50"] for b, _ in windows if b["int_latency"]["cnt"]]
    return {"produce_requests": n, "ms_between": elapsed * 1000 / n,
            "rtt_p50_ms": statistics.median(rtt) / 1000 if rtt else None,
            "queue_p50_ms": statistics.median(queued) / 1000 if queued else None,
            "batch_records": st["topics"].get(topic, {}).get("batchcnt", {}).get("avg")}


# -- the consumer alongside: a child process (its Python loop must not share the producer's GIL) --

def consume_child(bootstrap: str, topic: str, partitions: int, n: int, isolation: str, timeout_s: float) -> int:
    """Read ``n`` records of ``topic`` from offset 0 with ``isolation``; print ``ready`` once
    assigned, then one JSON line: records, wall times of the first and last record, lag samples."""
    args = argparse.Namespace(consumer_conf=[f"isolation.level={isolation}"])
    c = Consumer(consume_conf(bootstrap, args))
    c.list_topics(topic, timeout=10)
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    c.consume(num_messages=1, timeout=0.05)  # connected and fetching before the producer starts
    print("ready", flush=True)
    got = errors = 0
    first = last = None
    lags: list[float] = []
    deadline = time.time() + timeout_s
    while got < n and time.time() < deadline:
        msgs = c.consume(num_messages=min(10000, n - got), timeout=0.2)
        if not msgs:
            continue
        now = time.time()
        for m in msgs:
            if m.error() is not None:
                errors += 1
            else:
                got += 1
        if first is None:
            first = now
        last = now
        for m in (msgs[0], msgs[-1]):  # lag: receive time - CreateTime (the producer's produce() call)
            if m.error() is None:
                lags.append(now * 1000.0 - m.timestamp()[1])
    c.close()
    print(json.dumps({"records": got, "errors": errors, "first": first, "last": last, "lags_ms": lags}), flush=True)
    return 0


class Alongside:
    """The consumer child of one run."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, n: int, isolation: str, timeout_s: float):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--consume-child", bootstrap, topic, str(partitions), str(n),
             isolation, str(timeout_s)], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            raise RuntimeError(f"consumer child did not start: {line!r}")

    def result(self, t0_wall: float, produced_wall: float, timeout_s: float) -> dict:
        try:
            out, _ = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        lines = [x for x in out.splitlines() if x.startswith("{")]
        if not lines:
            return {"records": 0, "ok": False}
        r = json.loads(lines[-1])
        lags = sorted(r.pop("lags_ms"))
        last = r.pop("last")
        r.pop("first")
        r.update({
            "msgs_s": r["records"] / (last - t0_wall) if last and last > t0_wall else 0.0,
            "after_producer_ms": (last - produced_wall) * 1000 if last else None,
            "lag_p50_ms": percentile(lags, 50) if lags else None,
            "lag_p99_ms": percentile(lags, 99) if lags else None,
        })
        return r


def run_produce(broker, mode: str, topic: str, args) -> dict:
    name, idempotent, txn_size = parse_mode(mode)
    tid = f"bench-txn-{uuid.uuid4().hex[:8]}" if txn_size else None
    stats: list[str] = []  # librdkafka's own statistics (its round trips and requests), every 100 ms

    def keep(js: str) -> None:
        stats.append(js)

    p = Producer({**producer_conf(broker.bootstrap, args, tid, idempotent), "statistics.interval.ms": 100,
                  "stats_cb": keep})
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

    alongside = (Alongside(broker.bootstrap, topic, args.partitions, args.messages, "read_committed", 300)
                 if args.consumer else None)
    cpu0, ccpu0, t0, t0_wall = broker.cpu(), client_cpu(), time.perf_counter(), time.time()
    commits: list[float] = []
    if tid:
        done = 0
        while done < args.messages:
            size = min(txn_size, args.messages - done)
            p.begin_transaction()
            _produce(p, topic, size, payload, args.partitions, on_delivery)
            t = time.perf_counter()
            p.commit_transaction(60)  # flushes the transaction's records, then EndTxn
            commits.append(time.perf_counter() - t)
            done += size
        transactions = -(-args.messages // txn_size)
    else:
        _produce(p, topic, args.messages, payload, args.partitions, on_delivery)
        p.flush(120)
        transactions = 0
    elapsed = time.perf_counter() - t0
    produced_wall = time.time()
    cpu, ccpu = broker.cpu() - cpu0, client_cpu() - ccpu0
    p.flush(5)
    p.poll(0.25)  # the statistics of the whole run
    sender = _sender(stats, topic, elapsed)
    consumed = alongside.result(t0_wall, produced_wall, 300) if alongside is not None else None
    return {"mode": name, "topic": topic, "records": args.messages, "acked": ok, "errors": errors,
            "transactions": transactions, "seconds": elapsed, "msgs_s": ok / elapsed,
            "mb_s": ok * SIZE / MB / elapsed, "broker_cpu_us_per_record": cpu * 1e6 / max(ok, 1),
            "client_cpu_s": ccpu,
            "commit_ms_median": statistics.median(commits) * 1000 if commits else None,
            "consumer": consumed, "sender": sender,
            "ok": ok == args.messages and errors == 0
            and (consumed is None or (consumed["records"] == args.messages and not consumed.get("errors")))}


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    """Free the disk (and the page cache) of finished runs, outside the measured windows."""
    if not topics:
        return
    admin = AdminClient(client_conf(bootstrap))  # kept alive until the futures are done
    fs = admin.delete_topics(topics, operation_timeout=30, request_timeout=30)
    for f in fs.values():
        try:
            f.result(30)
        except Exception as e:  # a leftover topic costs disk only
            print(f"warning: deleting a topic: {e}", file=sys.stderr)


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
    ap.add_argument("--messages", type=int, default=None,
                    help="records per run (default 150000; 20000 with --quick)")
    ap.add_argument("--modes", default=DEFAULT_MODES,
                    help="comma list, run in this order each round: plain, idempotent, txn:N (N records a transaction)")
    ap.add_argument("--txn-size", type=int, default=1000, help="records per transaction of the timeline phase")
    ap.add_argument("--partitions", type=int, default=1, help="partitions of each run's topic")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--consumer", action=argparse.BooleanOptionalAction, default=True,
                    help="a read_committed consumer process reads each run's topic while it is written")
    ap.add_argument("--phases", default="produce", help="comma list of: produce, timeline, consume")
    ap.add_argument("--timeline-txns", type=int, default=100, help="transactions of the timeline phase")
    ap.add_argument("--quick", action="store_true", help="smoke run")
    ap.add_argument("--startup-timeout", type=float, default=30.0)
    add_run_args(ap, "--shoal-arg=--override --shoal-arg=log.flush.interval.messages=1000")
    args = ap.parse_args(argv)
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.messages = args.messages or (20_000 if args.quick else 150_000)
    args.mode_list = [parse_mode(m)[0] for m in args.modes.split(",") if m]
    args.producer_conf, args.consumer_conf = [], []
    return args


def _med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def _fmt_ms(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def produce_summary(produce: list[dict], modes: list[str]) -> dict:
    """Per mode: medians over rounds, and the median of the per-round ratios to ``plain``."""
    base = {r["round"]: r["msgs_s"] for r in produce if r["mode"] == "plain"}
    out = {}
    for m in modes:
        rs = [r for r in produce if r["mode"] == m]
        if not rs:
            continue
        ratios = [r["msgs_s"] / base[r["round"]] for r in rs if base.get(r["round"])]
        cons = [r["consumer"] for r in rs if r.get("consumer")]
        lag50 = [c["lag_p50_ms"] for c in cons if c.get("lag_p50_ms") is not None]
        lag99 = [c["lag_p99_ms"] for c in cons if c.get("lag_p99_ms") is not None]
        commits = [r["commit_ms_median"] for r in rs if r["commit_ms_median"] is not None]
        out[m] = {
            "msgs_s": _med(rs, "msgs_s"), "min": min(r["msgs_s"] for r in rs), "max": max(r["msgs_s"] for r in rs),
            "ratio_to_plain": statistics.median(ratios) if ratios else None, "ratios": ratios,
            "broker_cpu_us_per_record": _med(rs, "broker_cpu_us_per_record"),
            "commit_ms": statistics.median(commits) if commits else None,
            "consumer_msgs_s": statistics.median(c["msgs_s"] for c in cons) if cons else None,
            "lag_p50_ms": statistics.median(lag50) if lag50 else None,
            "lag_p99_ms": statistics.median(lag99) if lag99 else None,
        }
    return out


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--consume-child":
        b, topic, parts, n, iso, timeout = sys.argv[2:8]
        return consume_child(b, topic, int(parts), int(n), iso, float(timeout))
    args = parse_args(argv)
    phases = [x for x in args.phases.split(",") if x]
    results: dict = {"machine": machine_info(None, REPO_ROOT), "load_before": os.getloadavg(),
                     "args": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, list))}}
    workdir = tempfile.mkdtemp(prefix="shoal-bench-txn-")
    broker = None
    produce: list[dict] = []
    consume: list[dict] = []
    failed = False
    t_start = time.perf_counter()
    try:
        broker, _ = BrokerFactory("shoal", args, workdir).start()
        print(f"# bench_transactions: {args.rounds} rounds of {', '.join(args.mode_list)}; {args.messages} x 1 KiB "
              f"per run, {args.partitions} partition(s), linger.ms={args.linger_ms}, consumer alongside: "
              f"{'read_committed' if args.consumer else 'none'}; load {os.getloadavg()[0]:.1f}", flush=True)
        last_txn_topic = None
        if "produce" in phases or "consume" in phases:
            modes = args.mode_list if "produce" in phases else [f"txn:{args.txn_size}"]
            rounds = args.rounds if "produce" in phases else 1
            for r in range(rounds):
                line = []
                plain = None
                for mode in modes:
                    topic = f"bench-{mode.replace(':', '')}-{uuid.uuid4().hex[:6]}"
                    create_topic(broker.bootstrap, topic, args.partitions, 30)
                    res = run_produce(broker, mode, topic, args)
                    res["round"] = r
                    produce.append(res)
                    failed |= not res["ok"]
                    if mode == "plain":
                        plain = res["msgs_s"]
                    c = res["consumer"]
                    extra = (f", commit_transaction() median {res['commit_ms_median']:.1f} ms"
                             if res["commit_ms_median"] is not None else "")
                    if c:
                        extra += (f"; read_committed {c['msgs_s']:,.0f} msg/s, lag p50 {_fmt_ms(c['lag_p50_ms'])} "
                                  f"p99 {_fmt_ms(c['lag_p99_ms'])} ms, last record +{_fmt_ms(c['after_producer_ms'])} ms")
                    if res["sender"]:
                        sd = res["sender"]
                        extra += (f"; librdkafka: {sd['produce_requests']} Produce, one per {sd['ms_between']:.1f} ms, "
                                  f"round trip p50 {_fmt_ms(sd['rtt_p50_ms'])} ms, queued p50 {_fmt_ms(sd['queue_p50_ms'])} ms")
                    print(f"  round {r + 1} {mode:10s} {res['msgs_s']:9,.0f} msg/s {res['mb_s']:6.1f} MB/s "
                          f"{res['broker_cpu_us_per_record']:5.1f} µs broker CPU/record ({res['seconds']:.1f} s{extra})"
                          f"{'' if res['ok'] else ' NOT OK'}", flush=True)
                    line.append(f"{mode} {res['msgs_s']:,.0f}" + (f" ({res['msgs_s'] / plain:.2f})" if plain else ""))
                    if parse_mode(mode)[2]:
                        if last_txn_topic is not None:
                            delete_topics(broker.bootstrap, [last_txn_topic])
                        last_txn_topic = topic
                    else:
                        delete_topics(broker.bootstrap, [topic])
                print(f"round {r + 1}: " + " | ".join(line) + f"  [load {os.getloadavg()[0]:.1f}]", flush=True)
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
    results.update({"produce": produce, "consume": consume, "load_after": os.getloadavg(),
                    "seconds": time.perf_counter() - t_start})

    print()
    if produce and "produce" in phases:
        summary = results["produce_summary"] = produce_summary(produce, args.mode_list)
        rows = []
        for m, s in summary.items():
            rows.append([m, f"{s['msgs_s']:,.0f}", f"{s['min']:,.0f}", f"{s['max']:,.0f}",
                         "-" if s["ratio_to_plain"] is None else f"{s['ratio_to_plain']:.2f}",
                         f"{s['broker_cpu_us_per_record']:.1f}", _fmt_ms(s["commit_ms"]),
                         "-" if s["consumer_msgs_s"] is None else f"{s['consumer_msgs_s']:,.0f}",
                         _fmt_ms(s["lag_p50_ms"]), _fmt_ms(s["lag_p99_ms"])])
        print(render_table(["mode (1 KiB, acks=all)", "msg/s median", "min", "max", "/ plain (median of rounds)",
                            "broker CPU µs/rec", "commit ms", "read_committed msg/s", "lag p50 ms", "lag p99 ms"],
                           rows))
        for m, s in summary.items():
            if m != "plain" and s["ratios"]:
                print(f"{m} / plain per round: {', '.join(f'{x:.2f}' for x in s['ratios'])}")
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
    print(f"load average before {results['load_before'][0]:.1f}, after {la[0]:.1f} {la[1]:.1f} {la[2]:.1f}; "
          f"{results['seconds']:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
