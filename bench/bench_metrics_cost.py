#!/usr/bin/env python3
"""What Kafka's broker metrics cost (issue 16): produce throughput with /metrics scraped or not.

Phases:
  produce    two `shoal serve` processes of the same build: one without ``shoal.metrics.listener``
             (``off``: no metrics at all, no per-request hooks) and one with it. Runs alternate
             ``off``, ``on`` (metrics counted, never scraped), ``scraped`` (the same broker,
             /metrics fetched every second by a thread meanwhile) for R rounds; each run is
             bench_brokers.py's throughput workload: a confluent-kafka producer sends N records
             of 1 KiB to a new one-partition topic flat out (acks=1, linger.ms=5). Medians of
             MB/s and of broker CPU µs per record, and each mode against ``off`` and ``on``.
  scrape     broker CPU per scrape of a broker with 20 topics: 200 scrapes back to back, less its
             idle CPU over as long.
  inprocess  produce_path.py's harness (Produce requests of 1 and of 100 records of 1 KiB fed to a
             connection, no sockets) on one broker with ``broker.metrics`` set and unset,
             interleaved: broker CPU per request, the per-request hooks' cost without the
             network and the client.
  micro      one request's hooks (begin, answered, sent) in plain ints against the same counts
             made with prometheus_client's labelled Counter and Histogram objects (lock per call).

Run:  python bench/bench_metrics_cost.py [--phases produce,scrape,inprocess,micro] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import multiprocessing
import time
import timeit
import urllib.request
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
for p in (HERE, REPO_ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

from _util import free_port, machine_info, render_table  # noqa: E402
from bench_brokers import BrokerFactory, add_run_args, create_topic, csv_list, run_produce, stop_and_clean  # noqa: E402

MODES = ("off", "on", "scraped")


def _scrape_loop(url: str, interval: float, stop: Any, counts: Any) -> None:
    """The scraper's process: GET ``url`` every ``interval`` s until ``stop`` is set; ``counts``:
    scrapes, failures, bytes, ms spent."""
    while not stop.is_set():
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                counts[2] += len(resp.read())
            counts[0] += 1
        except OSError:
            counts[1] += 1
        dt = time.perf_counter() - t
        counts[3] += dt * 1000
        stop.wait(max(0.0, interval - dt))


class Scraper:
    """Scrapes ``url`` every ``interval`` s from another process, as Prometheus would (a thread in
    this process would take the GIL from the producer's loop and slow the client, not the
    broker: 15% in a first run)."""

    def __init__(self, url: str, interval: float = 1.0) -> None:
        self._stop = multiprocessing.Event()
        self._counts = multiprocessing.Array("d", 4)
        self._proc = multiprocessing.Process(target=_scrape_loop, args=(url, interval, self._stop, self._counts),
                                             name="scraper", daemon=True)

    def start(self) -> None:
        self._proc.start()

    def stop(self) -> None:
        self._stop.set()
        self._proc.join(15)
        self.scrapes, self.errors, self.bytes, ms = (int(c) for c in self._counts[:])
        self.seconds = ms / 1000


def run_produce_phase(args) -> dict:
    workdir = tempfile.mkdtemp(prefix="shoal-bench-metrics-")
    metrics_port = free_port()
    off_args = list(args.shoal_arg)
    on_args = off_args + ["--override", f"shoal.metrics.listener=http://127.0.0.1:{metrics_port}"]
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    brokers = {}
    samples: dict[str, list[dict]] = {m: [] for m in MODES}
    scrape_stats = {"scrapes": 0, "bytes": 0, "seconds": 0.0, "errors": 0}
    try:
        for name, extra in (("off", off_args), ("on", on_args)):
            args.shoal_arg = extra
            brokers[name], _ = BrokerFactory("shoal", args, workdir).start()
        for r in range(args.rounds):
            order = MODES if r % 2 == 0 else tuple(reversed(MODES))  # no mode always first
            for mode in order:
                broker = brokers["off" if mode == "off" else "on"]
                topic = f"cost-{mode}-{r}"
                create_topic(broker.bootstrap, topic, 1, 30)
                scraper = Scraper(url) if mode == "scraped" else None
                if scraper is not None:
                    scraper.start()
                try:
                    prod = run_produce(broker, topic, args.messages, 1024, "1", args, time.perf_counter() + 300)
                finally:
                    if scraper is not None:
                        scraper.stop()
                        for k in scrape_stats:
                            scrape_stats[k] += getattr(scraper, k)
                if not prod["ok"]:
                    raise RuntimeError(f"{mode} run {r}: {prod}")
                samples[mode].append({"mb_s": prod["mb_per_s"], "cpu_us_per_msg": prod["broker_cpu_us_per_msg"]})
                print(f"  round {r + 1} {mode:8s} {prod['mb_per_s']:7.1f} MB/s  "
                      f"{prod['broker_cpu_us_per_msg']:6.1f} µs broker CPU/record"
                      + (f"  ({scraper.scrapes} scrapes)" if scraper is not None else ""), flush=True)
    finally:
        for b in brokers.values():
            b.stop()
        stop_and_clean(workdir, args.keep_logs)
    med = {m: {k: statistics.median(s[k] for s in rows) for k in rows[0]} for m, rows in samples.items()}
    # paired: each round's runs are minutes apart at most, so the machine's drift cancels better
    paired = {m: {k: statistics.median(a[k] / b[k] for a, b in zip(samples[m], samples["off"]))
                  for k in samples[m][0]} for m in ("on", "scraped")}
    return {"samples": samples, "median": med, "paired": paired, "scrapes": scrape_stats}


def run_scrape_phase(args) -> dict:
    """Broker CPU per scrape: a broker with 20 topics that saw produce traffic is scraped
    ``args.scrapes`` times back to back; its CPU time over that, minus its CPU over as long idle
    (measured before and after), per scrape."""
    from confluent_kafka import Producer

    workdir = tempfile.mkdtemp(prefix="shoal-bench-metrics-")
    port = free_port()
    args.shoal_arg = list(args.shoal_arg) + ["--override", f"shoal.metrics.listener=http://127.0.0.1:{port}"]
    url = f"http://127.0.0.1:{port}/metrics"
    broker, _ = BrokerFactory("shoal", args, workdir).start()
    try:
        for i in range(20):
            create_topic(broker.bootstrap, f"scrape-{i}", 1, 30)
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for i in range(20_000):
            p.produce(f"scrape-{i % 20}", b"s" * 1024)
            if i % 1000 == 0:
                p.poll(0)
        p.flush(60)
        time.sleep(1)

        def idle(seconds: float) -> float:
            c0 = broker.cpu()
            time.sleep(seconds)
            return broker.cpu() - c0

        size = len(urllib.request.urlopen(url, timeout=10).read())
        c0, t0 = broker.cpu(), time.perf_counter()
        for _ in range(args.scrapes):
            urllib.request.urlopen(url, timeout=10).read()
        busy, wall = broker.cpu() - c0, time.perf_counter() - t0
        baseline = (idle(wall) + idle(wall)) / 2
    finally:
        broker.stop()
        stop_and_clean(workdir, args.keep_logs)
    per = (busy - baseline) / args.scrapes
    return {"scrapes": args.scrapes, "bytes": size, "wall_s": wall, "cpu_s": busy, "idle_cpu_s": baseline,
            "cpu_ms_per_scrape": per * 1000}


async def in_process(args) -> dict:
    """µs of broker CPU per Produce request of 1 and of 100 records of 1 KiB, broker.metrics
    unset / set, interleaved rounds."""
    from produce_path import produce_frame, time_requests

    from shoal.broker import Broker
    from shoal.config import BrokerConfig
    from shoal.handlers.metadata import auto_create_topic
    from shoal.observability import BrokerMetrics

    us: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as d:
        broker = Broker(BrokerConfig.load(None, {"log.dirs": d, "listeners": "PLAINTEXT://127.0.0.1:0"}))
        await broker.start()
        try:
            await auto_create_topic(broker.services, "bench")
            while broker.replicas.partition("bench", 0) is None:
                await asyncio.sleep(0.01)
            metrics = BrokerMetrics(broker.clock)
            for records in (1, 100):
                frames = [produce_frame("bench", i, records) for i in range(64)]
                n = args.requests if records == 1 else args.requests // 20
                await time_requests(broker, frames, n // 4)  # warm up
                for _round in range(args.rounds * 2):
                    for mode in ("off", "on"):
                        broker.metrics = metrics if mode == "on" else None
                        t = time.process_time()
                        await time_requests(broker, frames, n)
                        us.setdefault(f"{mode} x{records}", []).append((time.process_time() - t) * 1e6 / n)
        finally:
            broker.metrics = None
            await broker.stop()
    med = {m: statistics.median(v) for m, v in us.items()}
    return {"samples": us, "median": med}


def micro(n: int) -> dict:
    """ns per request of the hooks in plain ints vs the same with prometheus_client objects."""
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry, Counter, Histogram

    from shoal.clock import Clock
    from shoal.observability.requests import LATENCY_BUCKETS_S, SIZE_BUCKETS, BrokerMetrics

    m = BrokerMetrics(Clock())
    header = SimpleNamespace(api_key=18, api_version=3)  # ApiVersions: no per-topic work
    ctx = SimpleNamespace(header=header, tenant=None, extra={}, handling_ns=0, step_start_ns=0, request_size=40,
                          listener="PLAINTEXT")
    data = b"x" * 300

    def plain() -> None:
        rec = m.begin(ctx, None, 0, 0)
        m.answered(rec, ctx, None, None, data, 0, False)
        m.sent(rec)

    reg = CollectorRegistry()
    requests = Counter("r", "r", ["api", "tenant"], registry=reg)
    hists = [Histogram(f"h{i}", "h", ["api"], buckets=LATENCY_BUCKETS_S, registry=reg) for i in range(6)]
    sizes = [Histogram(f"s{i}", "s", ["api"], buckets=SIZE_BUCKETS, registry=reg) for i in range(2)]
    nanos = time.perf_counter_ns

    def client_lib() -> None:
        t0 = nanos()
        t1 = nanos()
        for h in hists:
            h.labels("ApiVersions").observe((t1 - t0) / 1e9)
        for h in sizes:
            h.labels("ApiVersions").observe(300)
        requests.labels("ApiVersions", "").inc()

    out = {}
    for name, fn in (("plain ints (BrokerMetrics)", plain), ("prometheus_client objects", client_lib)):
        out[name] = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e9
    return out


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--phases", default="produce,scrape,inprocess,micro",
                    help="comma list of: produce, scrape, inprocess, micro")
    ap.add_argument("--scrapes", type=int, default=200, help="scrape: scrapes back to back")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 rounds, fewer records")
    ap.add_argument("--rounds", type=int, default=None, help="produce: rounds of off/on/scraped (default 5)")
    ap.add_argument("--messages", type=int, default=None, help="produce: records per run (default 300000)")
    ap.add_argument("--requests", type=int, default=20000, help="inprocess: Produce requests per run")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--stats-interval-ms", type=int, default=1000)
    ap.add_argument("--startup-timeout", type=float, default=30.0)
    add_run_args(ap, "--shoal-arg=--override --shoal-arg=log.flush.interval.messages=1000")
    args = ap.parse_args(argv)
    args.producer_conf, args.consumer_conf = [], []
    args.phase_list = csv_list(args.phases)
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.messages = args.messages or (30_000 if args.quick else 300_000)
    return args


def _vs(a: float, b: float) -> str:
    return f"{(a / b - 1) * 100:+.1f}%"


def main(argv=None) -> int:
    args = parse_args(argv)
    results: dict = {"machine": machine_info(None, REPO_ROOT),
                     "args": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, list))}}
    if "produce" in args.phase_list:
        print(f"produce: {args.rounds} rounds of off/on/scraped, {args.messages} x 1 KiB each", flush=True)
        results["produce"] = run_produce_phase(args)
    if "scrape" in args.phase_list:
        results["scrape"] = run_scrape_phase(args)
    if "inprocess" in args.phase_list:
        results["inprocess"] = asyncio.run(in_process(args))
    if "micro" in args.phase_list:
        results["micro"] = micro(50_000)
    if "produce" in results:
        med = results["produce"]["median"]
        print("\nProduce flat out (medians): metrics off / on, not scraped / on, scraped every second")
        print(render_table(["", "off", "on", "scraped", "on vs off", "scraped vs off", "scraped vs on"], [
            [label, f"{med['off'][k]:.2f}", f"{med['on'][k]:.2f}", f"{med['scraped'][k]:.2f}",
             _vs(med["on"][k], med["off"][k]), _vs(med["scraped"][k], med["off"][k]),
             _vs(med["scraped"][k], med["on"][k])]
            for label, k in (("MB/s", "mb_s"), ("broker CPU µs / record", "cpu_us_per_msg"))]))
        paired = results["produce"]["paired"]
        print("paired (median over rounds of mode / off in the same round): " + ", ".join(
            f"{m} {label} {_vs(paired[m][k], 1.0)}" for m in ("on", "scraped")
            for label, k in (("MB/s", "mb_s"), ("CPU/record", "cpu_us_per_msg"))))
        s = results["produce"]["scrapes"]
        if s["scrapes"]:
            print(f"scrapes: {s['scrapes']} ({s['errors']} failed), {s['bytes'] / s['scrapes'] / 1024:.0f} KiB and "
                  f"{s['seconds'] / s['scrapes'] * 1000:.1f} ms each")
    if "scrape" in results:
        r = results["scrape"]
        print(f"\nScrape: {r['bytes'] / 1024:.0f} KiB of text, {r['cpu_ms_per_scrape']:.2f} ms of broker CPU each "
              f"({r['scrapes']} back to back in {r['wall_s']:.1f} s: {r['cpu_s']:.2f} s CPU, idle {r['idle_cpu_s']:.2f} s)")
    if "inprocess" in results:
        med = results["inprocess"]["median"]
        for r in (1, 100):
            off, on = med[f"off x{r}"], med[f"on x{r}"]
            print(f"In process, broker CPU per Produce request of {r} x 1 KiB: off {off:.1f} µs, on {on:.1f} µs "
                  f"({_vs(on, off)}, {on - off:+.1f} µs)")
    if "micro" in results:
        print("\nOne request's metric updates (ns, best of 5):")
        for name, ns in results["micro"].items():
            print(f"  {name:28s} {ns:7.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
