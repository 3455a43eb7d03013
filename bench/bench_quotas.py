#!/usr/bin/env python3
"""Client quota benchmark (issue 5): how closely quotas hold, and what accounting costs.

Phases (Shoal only; a fresh broker per phase):
  accuracy  for each rate (default 0.1, 1 and 10 MB/s, 10^6 B): a confluent-kafka producer
            sends 1 KiB records as fast as librdkafka takes them for D s (default 20) under a
            client-id ``producer_byte_rate`` of that rate; then a consumer reads a topic holding
            more than it can read in D s (64 KiB batches) under ``consumer_byte_rate``.
            achieved = payload bytes delivered (delivery reports / consumed records) from the
            first second on, per second; reported as achieved / configured. Payload is ~1% less
            than the bytes a quota counts (record and batch headers).
  cost      bench_brokers.py's throughput workloads (N records of 1 KiB, acks=1, one partition;
            produce, then consume it back) on a broker without quotas (A) and with
            producer/consumer byte-rate and request-percentage quotas for the client set far
            above what it uses (B), interleaved A B A B ... for R rounds; medians and the B/A
            ratio of MB/s and of broker CPU per message.
  inprocess produce_path.py's harness (Produce requests of 1 and of 100 records of 1 KiB fed
            to a connection, no sockets) with and without the same quotas: broker CPU
            (process time) per request, interleaved rounds, medians.

Run:  python bench/bench_quotas.py [--phases accuracy,cost,inprocess] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
for p in (HERE, REPO_ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

from _util import machine_info, render_table  # noqa: E402
from bench_brokers import (  # noqa: E402
    BrokerFactory,
    add_run_args,
    client_conf,
    create_topic,
    csv_list,
    produce_n,
    run_consume,
    run_produce,
    stop_and_clean,
)
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

MB = 1_000_000
VALUE = b"q" * 1024
NEVER_HIT = {"producer_byte_rate": 1e12, "consumer_byte_rate": 1e12, "request_percentage": 1e6}


def alter_quotas(bootstrap: str, client_id: str, values: dict[str, float | None]) -> None:
    """Set (or with None remove) quota values of a client-id entity, over the wire."""
    from shoal.client import AdminClient

    async def run() -> None:
        async with AdminClient(bootstrap, client_id="bench-quotas") as admin:
            await admin.alter_client_quotas([((("client-id", client_id),), values)])

    asyncio.run(run())


def per_second(events: list[tuple[float, int]], seconds: float) -> float:
    """Bytes per second in [1 s, seconds) after the first event."""
    if not events:
        return 0.0
    t0 = events[0][0]
    return sum(n for t, n in events if t0 + 1.0 <= t < t0 + seconds) / (seconds - 1.0)


def produce_accuracy(bootstrap: str, rate: float, seconds: float) -> float:
    client_id = topic = f"acc-produce-{int(rate)}"
    create_topic(bootstrap, topic, 1, 30)
    alter_quotas(bootstrap, client_id, {"producer_byte_rate": float(int(rate))})
    delivered: list[tuple[float, int]] = []

    def on_delivery(err, msg) -> None:
        if err is None:
            delivered.append((time.monotonic(), len(msg.value())))

    p = Producer(client_conf(bootstrap, **{"client.id": client_id, "linger.ms": 5, "batch.size": 65536,
                                           "queue.buffering.max.kbytes": 16384}))
    produce_n(p, topic, 1 << 40, VALUE, on_delivery, time.perf_counter() + seconds + 1.0)
    p.purge(in_queue=True)
    p.flush(10)
    return per_second(delivered, seconds)


def fetch_accuracy(bootstrap: str, rate: float, seconds: float) -> float:
    topic = client_id = f"acc-fetch-{int(rate)}"
    create_topic(bootstrap, topic, 1, 30)
    loader = Producer(client_conf(bootstrap, **{"client.id": "loader", "linger.ms": 20, "batch.size": 65536}))
    produce_n(loader, topic, int(1.3 * rate * seconds / len(VALUE)) + 100, VALUE, None, time.perf_counter() + 300)
    loader.flush(120)
    alter_quotas(bootstrap, client_id, {"consumer_byte_rate": float(int(rate))})
    c = Consumer(client_conf(bootstrap, **{"client.id": client_id, "group.id": client_id,
                                           "enable.auto.commit": False}))
    got: list[tuple[float, int]] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        end = None
        while end is None or time.monotonic() < end:
            for m in c.consume(num_messages=1000, timeout=0.2):
                if m.error() is None:
                    got.append((time.monotonic(), len(m.value())))
            if got and end is None:
                end = got[0][0] + seconds
    finally:
        c.close()
    return per_second(got, seconds)


def run_accuracy(factory: BrokerFactory, args) -> list[dict]:
    broker, _ready = factory.start()
    out = []
    try:
        for rate in args.rate_list:
            for kind, fn in (("produce", produce_accuracy), ("fetch", fetch_accuracy)):
                achieved = fn(broker.bootstrap, rate * MB, args.seconds)
                out.append({"kind": kind, "rate_mb_s": rate, "achieved_mb_s": achieved / MB,
                            "ratio": achieved / (rate * MB)})
                print(f"  {kind:7s} {rate:g} MB/s: achieved {achieved / MB:.4f} MB/s "
                      f"({achieved / (rate * MB):.3f})", flush=True)
    finally:
        broker.stop()
    return out


def run_cost(factory: BrokerFactory, args) -> dict:
    broker, _ready = factory.start()
    samples: dict[str, list[dict]] = {"none": [], "quotas": []}
    try:
        for r in range(args.rounds):
            for mode in ("none", "quotas"):
                alter_quotas(broker.bootstrap, "shoal-bench",
                             NEVER_HIT if mode == "quotas" else dict.fromkeys(NEVER_HIT))
                topic = f"cost-{mode}-{r}"
                create_topic(broker.bootstrap, topic, 1, 30)
                deadline = time.perf_counter() + 300
                prod = run_produce(broker, topic, args.messages, 1024, "1", args, deadline)
                cons = run_consume(broker, topic, 1, prod["delivered_ok"], args, deadline)
                samples[mode].append({"produce_mb_s": prod["mb_per_s"],
                                      "produce_cpu_us_per_msg": prod["broker_cpu_us_per_msg"],
                                      "consume_mb_s": cons["mb_per_s"],
                                      "consume_cpu_us_per_msg": cons["broker_cpu_s"] * 1e6 / max(1, cons["consumed"])})
                print(f"  round {r + 1} {mode:6s}: produce {prod['mb_per_s']:.1f} MB/s, "
                      f"consume {cons['mb_per_s']:.1f} MB/s", flush=True)
    finally:
        broker.stop()
    med = {mode: {k: statistics.median(s[k] for s in rows) for k in rows[0]} for mode, rows in samples.items()}
    return {"samples": samples, "median": med,
            "ratio": {k: med["quotas"][k] / med["none"][k] for k in med["none"]}}


async def in_process_cost(args) -> dict:
    """produce_path.py's harness: µs of broker CPU per Produce request of 1 and of 100 records
    of 1 KiB, without and with quotas for its client id (interleaved rounds, medians)."""
    from produce_path import produce_frame, time_requests

    from shoal.broker import Broker
    from shoal.config import BrokerConfig

    with tempfile.TemporaryDirectory() as d:
        broker = Broker(BrokerConfig.load(None, {"log.dirs": d, "listeners": "PLAINTEXT://127.0.0.1:0"}))
        await broker.start()
        try:
            await broker.auto_create_topic("bench")
            us: dict[str, list[float]] = {}
            for records in (1, 100):
                frames = [produce_frame("bench", i, records) for i in range(64)]
                n = args.requests // records * 5 if records > 1 else args.requests
                for _round in range(args.rounds):
                    for mode in ("none", "quotas"):
                        values = NEVER_HIT if mode == "quotas" else dict.fromkeys(NEVER_HIT)
                        await broker.metadata.alter_client_quotas([((("client-id", "bench"),), values)])
                        cpu = time.process_time()  # the broker's CPU: robust when the machine is busy
                        await time_requests(broker, frames, n)
                        us.setdefault(f"{mode} x{records}", []).append((time.process_time() - cpu) / n * 1e6)
        finally:
            await broker.stop()
    med = {m: statistics.median(v) for m, v in us.items()}
    return {"us_per_request": us, "median": med,
            "ratio": {r: med[f"quotas x{r}"] / med[f"none x{r}"] for r in (1, 100)}}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--phases", default="accuracy,cost,inprocess", help="comma list of: accuracy, cost, inprocess")
    ap.add_argument("--quick", action="store_true", help="smoke run: 8 s per rate, 2 rounds, fewer records")
    ap.add_argument("--rates", default="0.1,1,10", help="quota rates of the accuracy phase, MB/s")
    ap.add_argument("--seconds", type=float, default=None, help="accuracy: seconds per run (default 20)")
    ap.add_argument("--rounds", type=int, default=None, help="cost: A/B rounds (default 5)")
    ap.add_argument("--messages", type=int, default=None, help="cost: records per run (default 300000)")
    ap.add_argument("--requests", type=int, default=20000, help="cost: in-process Produce requests per run")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--stats-interval-ms", type=int, default=1000)
    ap.add_argument("--startup-timeout", type=float, default=30.0)
    add_run_args(ap, "--shoal-arg=--override --shoal-arg=shoal.quota.smoothing=false")
    args = ap.parse_args(argv)
    args.producer_conf, args.consumer_conf = [], []
    args.phase_list = csv_list(args.phases)
    args.rate_list = [float(r) for r in csv_list(args.rates)]
    args.seconds = args.seconds or (8.0 if args.quick else 20.0)
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.messages = args.messages or (30_000 if args.quick else 300_000)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="shoal-bench-quotas-")
    factory = BrokerFactory("shoal", args, workdir)
    results: dict = {"machine": machine_info(None, REPO_ROOT), "args": {k: v for k, v in vars(args).items()
                                                                      if isinstance(v, (int, float, str, list))}}
    try:
        if "accuracy" in args.phase_list:
            print(f"accuracy: {args.seconds:g} s per run", flush=True)
            results["accuracy"] = run_accuracy(factory, args)
        if "cost" in args.phase_list:
            print(f"cost: {args.rounds} rounds of {args.messages} records", flush=True)
            results["cost"] = run_cost(factory, args)
        if "inprocess" in args.phase_list:
            results["inprocess"] = asyncio.run(in_process_cost(args))
    finally:
        stop_and_clean(workdir, args.keep_logs)
    if "accuracy" in results:
        print("\nQuota accuracy (achieved / configured, payload bytes from the first second on)")
        print(render_table(["kind", "quota MB/s", "achieved MB/s", "ratio"], [
            [r["kind"], f"{r['rate_mb_s']:g}", f"{r['achieved_mb_s']:.4f}", f"{r['ratio']:.3f}"]
            for r in results["accuracy"]]))
    rows = []
    if "cost" in results:
        c = results["cost"]
        rows += [[k, f"{c['median']['none'][k]:.2f}", f"{c['median']['quotas'][k]:.2f}", f"{c['ratio'][k]:.3f}"]
                 for k in c["median"]["none"]]
    if "inprocess" in results:
        ip = results["inprocess"]
        for r in (1, 100):
            rows.append([f"in-process µs per Produce request of {r} x 1 KiB", f"{ip['median'][f'none x{r}']:.1f}",
                         f"{ip['median'][f'quotas x{r}']:.1f}", f"{ip['ratio'][r]:.3f}"])
    if rows:
        print("\nCost of quota accounting (quotas configured, never hit / none; medians)")
        print(render_table(["metric", "no quotas", "quotas", "ratio"], rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
