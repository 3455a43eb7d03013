#!/usr/bin/env python3
"""What metering costs and how fast its pipeline runs (issue 15).

Phases:
  produce   two `shoal serve` processes of the same build: ``off`` (shoal.metering.enable=false, no
            metrics listener: no per-request hooks at all) and ``on`` (metering on, a window every
            --interval-ms). Runs alternate off/on for R rounds; each run is bench_brokers.py's
            throughput workload: one confluent-kafka producer sends N records of 1 KiB to a new
            one-partition topic flat out (acks=1, linger.ms=5). Medians of MB/s and broker CPU µs
            per record, and the paired ratio (on / off of the same round).
  inprocess produce_path.py's harness (Produce requests fed to a connection, no sockets) on one
            broker with ``broker.metrics`` unset (off), set to metering's own counters (on: what a
            metered broker without shoal.metrics.listener runs) and to the full broker metrics with
            metering's additions (full: a metered broker with the metrics endpoint), interleaved in
            alternating order: broker CPU per request, so the per-request cost is seen without the
            machine's noise; and the CPU of one publisher window (sampling 1,000 topics of 100
            tenants and cutting the records).
  pipeline  one broker; U synthetic usage records (20 tenants x 3 brokers per window) produced into
            __shoal_usage (no authorizer: the PLAINTEXT client may act as a broker), then
            `shoal metering run --once` in process (local[2]): usage records per second of the
            whole run, Spark's start excluded, and the same for a second --once over nothing new.
  lag       the same broker with a window every second and the pipeline running continuously
            (1 s trigger): a burst of records is produced at T; lag = when hourly_usage first shows
            them - T. Median over K bursts.

Run:  python bench/bench_metering.py [--phases produce,inprocess,pipeline,lag] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
for p in (HERE, REPO_ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

from _util import machine_info, render_table  # noqa: E402
from bench_brokers import BrokerFactory, add_run_args, create_topic, csv_list, run_produce, stop_and_clean  # noqa: E402


def _vs(a: float, b: float) -> str:
    return f"{(a / b - 1) * 100:+.1f}%"


def run_produce_phase(args) -> dict:
    workdir = tempfile.mkdtemp(prefix="shoal-bench-metering-")
    base = list(args.shoal_arg)
    modes = {"off": base + ["--override", "shoal.metering.enable=false"],
             "on": base + ["--override", f"shoal.metering.interval.ms={args.interval_ms}"]}
    brokers = {}
    samples: dict[str, list[dict]] = {m: [] for m in modes}
    try:
        for name, extra in modes.items():
            args.shoal_arg = extra
            brokers[name], _ = BrokerFactory("shoal", args, workdir).start()
        for r in range(args.rounds):
            for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
                broker = brokers[mode]
                topic = f"metering-{mode}-{r}"
                create_topic(broker.bootstrap, topic, 1, 30)
                prod = run_produce(broker, topic, args.messages, 1024, "1", args, time.perf_counter() + 300)
                if not prod["ok"]:
                    raise RuntimeError(f"{mode} run {r}: {prod}")
                samples[mode].append({"mb_s": prod["mb_per_s"], "cpu_us_per_msg": prod["broker_cpu_us_per_msg"]})
                print(f"  round {r + 1} {mode:4s} {prod['mb_per_s']:7.1f} MB/s  "
                      f"{prod['broker_cpu_us_per_msg']:6.1f} µs broker CPU/record", flush=True)
    finally:
        for b in brokers.values():
            b.stop()
        stop_and_clean(workdir, args.keep_logs)
    med = {m: {k: statistics.median(s[k] for s in rows) for k in rows[0]} for m, rows in samples.items()}
    paired = {k: statistics.median(a[k] / b[k] for a, b in zip(samples["on"], samples["off"]))
              for k in samples["on"][0]}
    return {"samples": samples, "median": med, "paired": paired}


async def in_process(args) -> dict:
    import asyncio

    from produce_path import produce_frame, time_requests

    from shoal.broker import Broker
    from shoal.config import BrokerConfig
    from shoal.metering.counters import UsageCounters, UsageMetrics
    from shoal.metering.record import window_records

    with tempfile.TemporaryDirectory() as d:
        broker = Broker(BrokerConfig.load(None, {"log.dirs": d, "listeners": "PLAINTEXT://127.0.0.1:0",
                                                 "shoal.metering.interval.ms": "3600000"}))
        await broker.start()
        try:
            from shoal.handlers.metadata import auto_create_topic

            await auto_create_topic(broker.services, "bench")
            while broker.replicas.partition("bench", 0) is None:
                await asyncio.sleep(0.01)
            frames = [produce_frame("bench", i, 1) for i in range(64)]
            assert isinstance(broker.metrics, UsageCounters)  # metering on, no metrics endpoint
            hooks = {"off": None, "on": broker.metrics, "full": UsageMetrics(broker.clock)}
            us: dict[str, list[float]] = {m: [] for m in hooks}
            await time_requests(broker, frames, args.requests // 4)  # warm up
            for r in range(args.rounds * 2):
                for mode in (("off", "on", "full") if r % 2 == 0 else ("full", "on", "off")):
                    broker.metrics = hooks[mode]
                    t = time.process_time()
                    await time_requests(broker, frames, args.requests)
                    us[mode].append((time.process_time() - t) * 1e6 / args.requests)
            # the window's cost is the sampler's: measured on the full hook, whose 1,000 made-up
            # topics stay (metering's own counters drop topics the image does not have)
            metrics = broker.metrics = hooks["full"]
            # one window over many topics: 1,000 topics' counters of 100 tenants
            tenants = {f"lkc-{i:06d}": None for i in range(100)}
            for i in range(1000):
                metrics.topics[f"lkc-{i % 100:06d}_t{i}"] = [1000 + i, 10, 0, 1, 0, 0, 0]
            sampler = broker.metering.sampler
            real_tenants = broker.metadata.image.tenants
            from shoal.metering import counters as counters_mod

            orig = counters_mod.owner_tenant
            counters_mod.owner_tenant = lambda physical, _t: orig(physical, tenants)
            try:
                t = time.process_time()
                for k in range(20):
                    for v in metrics.topics.values():
                        v[0] += 1
                    samples = sampler.sample()
                    recs = window_records({}, samples, broker=1, incarnation=1, seq=k, window_start=0, window_end=1)
                    payload = [r.to_json() for r in recs]
                window_ms = (time.process_time() - t) * 1000 / 20
            finally:
                counters_mod.owner_tenant = orig
            del real_tenants
        finally:
            broker.metrics = None
            await broker.stop()
    med = {m: statistics.median(v) for m, v in us.items()}
    paired = {m: statistics.median(a - b for a, b in zip(us[m], us["off"])) for m in ("on", "full")}
    return {"samples": us, "median": med, "paired_us": paired, "window_cpu_ms": window_ms,
            "window_records": len(payload)}


def _thread_broker(data_dir: str, interval_ms: int):
    sys.path.insert(0, os.path.join(REPO_ROOT, "tests"))
    from broker_thread import ThreadBroker

    return ThreadBroker(data_dir, {"shoal.metering.interval.ms": str(interval_ms)}).start()


def _spark():
    os.environ["PYTHONPATH"] = REPO_ROOT + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    from shoal.spark import spark_session

    return spark_session("shoal-bench-metering")


def run_pipeline_phase(args, spark) -> dict:
    from confluent_kafka import Producer

    from shoal.metering.pipeline import PipelineOptions, RateCard, run
    from shoal.metering.record import USAGE_TOPIC, UsageRecord

    workdir = tempfile.mkdtemp(prefix="shoal-bench-pipeline-")
    tb = _thread_broker(os.path.join(workdir, "broker"), 200)
    try:
        while tb.broker.metadata.image.topic(USAGE_TOPIC) is None:
            time.sleep(0.05)
        p = Producer({"bootstrap.servers": tb.bootstrap, "linger.ms": 20, "batch.num.messages": 5000})
        t_start = int(time.time() * 1000) - 3_600_000
        n = 0
        per_window = 60
        for w in range(args.usage_records // per_window):
            for tenant in range(20):
                for broker in (101, 102, 103):
                    r = UsageRecord(broker=broker, incarnation=1, seq=w, tenant=f"lkc-{tenant:06d}",
                                    window_start=t_start + w * 10_000, window_end=t_start + (w + 1) * 10_000,
                                    bytes_in=1000 + w, bytes_out=2000, requests=10, request_time_us=500,
                                    partitions_led=3, storage_bytes=10**6, connections=2)
                    p.produce(USAGE_TOPIC, r.to_json(), key=r.key)
                    n += 1
            p.poll(0)
        assert p.flush(60) == 0
        out = os.path.join(workdir, "usage")
        opts = PipelineOptions(tb.bootstrap, __import__("pathlib").Path(out), RateCard(gb_in=0.05), once=True)
        t0 = time.perf_counter()
        first = run(spark, opts)
        t1 = time.perf_counter()
        second = run(spark, opts)
        t2 = time.perf_counter()
    finally:
        tb.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return {"records": first.records, "synthetic": n, "seconds": t1 - t0, "records_per_s": first.records / (t1 - t0),
            "second_run_seconds": t2 - t1, "second_run_records": second.records}


def run_lag_phase(args, spark) -> dict:
    import pyarrow.parquet as pq
    from confluent_kafka import Producer

    from shoal.metering.pipeline import Pipeline, PipelineOptions, RateCard

    workdir = tempfile.mkdtemp(prefix="shoal-bench-lag-")
    tb = _thread_broker(os.path.join(workdir, "broker"), args.lag_interval_ms)
    out = __import__("pathlib").Path(workdir) / "usage"
    opts = PipelineOptions(tb.bootstrap, out, RateCard(), once=False, trigger_interval="1 second")
    pipeline = Pipeline(spark, opts)
    query = pipeline.start()
    lags = []

    def seen() -> int:
        try:
            rows = pq.read_table(str(out / "hourly_usage")).to_pylist()
        except Exception:  # noqa: BLE001 - not written yet, or being swapped
            return -1
        return sum(r["messages_in"] for r in rows if r["tenant"] == "")

    try:
        p = Producer({"bootstrap.servers": tb.bootstrap, "linger.ms": 1})
        total = 0
        for k in range(args.bursts):
            time.sleep(1.5)
            for i in range(100):
                p.produce("lag", b"x" * 100)
            assert p.flush(10) == 0
            t0 = time.perf_counter()
            total += 100
            deadline = t0 + 120
            while seen() < total:
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"burst {k}: not in hourly_usage after 120 s")
                time.sleep(0.1)
            lags.append(time.perf_counter() - t0)
            print(f"  burst {k + 1}: {lags[-1]:.1f} s", flush=True)
    finally:
        query.stop()
        tb.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return {"lags_s": lags, "median_s": statistics.median(lags), "max_s": max(lags),
            "interval_ms": args.lag_interval_ms}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--phases", default="produce,inprocess,pipeline,lag",
                    help="comma list of: produce, inprocess, pipeline, lag")
    ap.add_argument("--requests", type=int, default=20000, help="inprocess: Produce requests per run")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 rounds, fewer records")
    ap.add_argument("--rounds", type=int, default=None, help="produce: rounds of off/on (default 5)")
    ap.add_argument("--messages", type=int, default=None, help="produce: records per run (default 300000)")
    ap.add_argument("--interval-ms", type=int, default=1000, help="produce: shoal.metering.interval.ms when on")
    ap.add_argument("--usage-records", type=int, default=None, help="pipeline: synthetic usage records (default 60000)")
    ap.add_argument("--bursts", type=int, default=None, help="lag: bursts (default 5)")
    ap.add_argument("--lag-interval-ms", type=int, default=1000, help="lag: shoal.metering.interval.ms")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--stats-interval-ms", type=int, default=1000)
    ap.add_argument("--startup-timeout", type=float, default=30.0)
    add_run_args(ap, "--shoal-arg=--override --shoal-arg=log.flush.interval.messages=1000")
    args = ap.parse_args(argv)
    args.producer_conf, args.consumer_conf = [], []
    args.phase_list = csv_list(args.phases)
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.messages = args.messages or (30_000 if args.quick else 300_000)
    args.usage_records = args.usage_records or (6_000 if args.quick else 60_000)
    args.bursts = args.bursts or (2 if args.quick else 5)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    results: dict = {"machine": machine_info(None, REPO_ROOT),
                     "args": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, list))}}
    try:
        results["machine"]["loadavg"] = os.getloadavg()
    except OSError:
        pass
    if "produce" in args.phase_list:
        print(f"produce: {args.rounds} rounds of off/on, {args.messages} x 1 KiB each, window {args.interval_ms} ms",
              flush=True)
        results["produce"] = run_produce_phase(args)
    if "inprocess" in args.phase_list:
        import asyncio

        results["inprocess"] = asyncio.run(in_process(args))
    spark = _spark() if {"pipeline", "lag"} & set(args.phase_list) else None
    try:
        if "pipeline" in args.phase_list:
            print(f"pipeline: {args.usage_records} synthetic usage records, shoal metering run --once", flush=True)
            results["pipeline"] = run_pipeline_phase(args, spark)
        if "lag" in args.phase_list:
            print(f"lag: {args.bursts} bursts, window {args.lag_interval_ms} ms, trigger 1 s", flush=True)
            results["lag"] = run_lag_phase(args, spark)
    finally:
        if spark is not None:
            spark.stop()
    if "produce" in results:
        med, paired = results["produce"]["median"], results["produce"]["paired"]
        print("\nProduce flat out (medians): metering off / on")
        print(render_table(["", "off", "on", "on vs off", "paired on/off"], [
            [label, f"{med['off'][k]:.2f}", f"{med['on'][k]:.2f}", _vs(med["on"][k], med["off"][k]),
             _vs(paired[k], 1.0)] for label, k in (("MB/s", "mb_s"), ("broker CPU µs / record", "cpu_us_per_msg"))]))
    if "inprocess" in results:
        r = results["inprocess"]
        med = r["median"]
        print(f"\nIn process, broker CPU per Produce request (1 x 1 KiB): off {med['off']:.1f} µs, on {med['on']:.1f} µs "
              f"({_vs(med['on'], med['off'])}, {med['on'] - med['off']:+.1f} µs), full metrics {med['full']:.1f} µs "
              f"({_vs(med['full'], med['off'])}, {med['full'] - med['off']:+.1f} µs); one window over 1,000 topics / "
              f"{r['window_records']} tenants: {r['window_cpu_ms']:.1f} ms CPU")
        print(f"  paired (median over rounds of the mode's run - the off run beside it): on {r['paired_us']['on']:+.1f} µs, "
              f"full {r['paired_us']['full']:+.1f} µs")
    if "pipeline" in results:
        r = results["pipeline"]
        print(f"\nPipeline --once: {r['records']} usage records in {r['seconds']:.1f} s = {r['records_per_s']:.0f} "
              f"records/s; a second --once with nothing new: {r['second_run_seconds']:.1f} s "
              f"({r['second_run_records']} records)")
    if "lag" in results:
        r = results["lag"]
        print(f"\nLag from produce to hourly_usage: median {r['median_s']:.1f} s, max {r['max_s']:.1f} s "
              f"(window {r['interval_ms']} ms, trigger 1 s)")
    print(f"load average at the end: {os.getloadavg()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
