#!/usr/bin/env python3
"""Durability on one node (issue 10, item 14): what fsync per record costs, and kill -9 cycles.

Phases (real ``shoal serve`` processes, confluent-kafka producers with acks=all):
  throughput  Two brokers side by side: A with Kafka's default (no fsync on append) and B with
              ``log.flush.interval.messages=1`` (fsync before every acknowledgement). For R
              rounds, interleaved A B A B ...: a fresh one-partition topic, N records of S bytes,
              (1) batched: linger.ms=5, as fast as librdkafka sends; (2) one at a time: one
              record in flight (max.in.flight=1, linger.ms=0), the latency a synchronous producer
              sees. Medians of records/s and the B/A ratio.
  kill        A broker with ``log.flush.interval.messages=1``; a producer sends acks=all records
              without pause while the broker is killed with SIGKILL and restarted C times (default
              12); afterwards every acknowledged (offset, value) must be read back. Reported:
              acknowledged records, lost (must be 0), offsets contiguous. With ``--kill-default``
              the same run on a default broker too: kill -9 loses nothing there either, because a
              killed process leaves its writes in the page cache. What fsync protects against is a
              power loss or kernel crash, which this machine cannot simulate.

Run:  python bench/bench_durability.py [--phases throughput,kill] [--rounds 3] [--records 20000]
          [--size 100] [--cycles 12] [--kill-default] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
for p in (HERE, REPO_ROOT, os.path.join(REPO_ROOT, "tests")):
    if p not in sys.path:
        sys.path.insert(0, p)

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from acked_producer import AckedProducer  # noqa: E402
from broker_process import BrokerProcess  # noqa: E402

FSYNC = {"log.flush.interval.messages": "1"}


class Broker(BrokerProcess):
    def __init__(self, overrides: dict[str, str]) -> None:
        super().__init__(Path(tempfile.mkdtemp(prefix="shoal-bench-durability-")))
        self.overrides = overrides

    def serve_args(self) -> list[str]:
        args = super().serve_args()
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        return args

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(30)


def produce(bootstrap: str, topic: str, n: int, size: int, one_at_a_time: bool) -> float:
    """Records per second of ``n`` acknowledged records of ``size`` bytes."""
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000}
    if one_at_a_time:
        conf.update({"linger.ms": 0, "max.in.flight.requests.per.connection": 1})
    p = Producer(conf)
    value = b"x" * size
    errors: list = []
    p.produce(topic, value=value, partition=0)  # connect and fetch metadata outside the timing
    assert p.flush(30) == 0
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value=value, partition=0, on_delivery=lambda e, m: e and errors.append(e))
                break
            except BufferError:
                p.poll(0.01)
        if one_at_a_time:
            p.flush(30)
        else:
            p.poll(0)
    assert p.flush(60) == 0 and not errors, errors[:3]
    return n / (time.perf_counter() - start)


def phase_throughput(args) -> dict:
    a, b = Broker({}), Broker(FSYNC)
    a.start()
    b.start()
    results: dict[str, dict[str, list[float]]] = {"batched": {"A": [], "B": []}, "one_at_a_time": {"A": [], "B": []}}
    try:
        for r in range(args.rounds):
            for mode in ("batched", "one_at_a_time"):
                n = args.records if mode == "batched" else max(200, args.records // 20)
                for label, broker in (("A", a), ("B", b)):
                    topic = f"dur-{mode}-{label}-{r}"
                    create_topic(broker.bootstrap, topic)
                    rate = produce(broker.bootstrap, topic, n, args.size, mode == "one_at_a_time")
                    results[mode][label].append(rate)
                    print(f"  round {r} {mode:14s} {label} ({'fsync per record' if label == 'B' else 'default'}):"
                          f" {rate:,.0f} records/s", flush=True)
    finally:
        a.cleanup()
        b.cleanup()
    out = {}
    for mode, by in results.items():
        ma, mb = statistics.median(by["A"]), statistics.median(by["B"])
        out[mode] = {"default_rps": ma, "fsync_rps": mb, "ratio": mb / ma, "runs": by}
        print(f"{mode}: default {ma:,.0f} records/s, log.flush.interval.messages=1 {mb:,.0f} records/s,"
              f" ratio {mb / ma:.2f}", flush=True)
    return out


def kill_cycles(overrides: dict[str, str], cycles: int, label: str) -> dict:
    b = Broker(overrides)
    b.start()
    topic = "dur-kill"
    try:
        create_topic(b.bootstrap, topic)
        with AckedProducer(b.bootstrap, topic) as p:
            for c in range(cycles):
                p.wait_for_more(200)
                b.kill9()
                print(f"  {label}: kill -9 #{c + 1} after {len(p.acked)} acknowledged records", flush=True)
            p.wait_for_more(200)
        acked, failed = p.acked, p.failed
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "bench-durability", "enable.auto.commit": False})
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        stored: dict[int, bytes] = {}
        deadline = time.monotonic() + 120
        while len(stored) < high - low and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and not m.error():
                stored[m.offset()] = m.value()
        c.close()
    finally:
        b.cleanup()
    lost = len(p.lost(stored))
    result = {
        "config": overrides or "default", "kill9_cycles": cycles, "acknowledged": len(acked), "lost": lost,
        "contiguous": sorted(stored) == list(range(low, high)), "delivery_errors": len(failed),
    }
    print(f"{label}: {cycles} kill -9 cycles, {len(acked)} acknowledged, {lost} lost, "
          f"offsets contiguous: {result['contiguous']}", flush=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phases", default="throughput,kill")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--cycles", type=int, default=12)
    ap.add_argument("--kill-default", action="store_true", help="also run the kill cycles on a default broker")
    ap.add_argument("--json")
    args = ap.parse_args()
    out: dict = {"loadavg": os.getloadavg(), "cpus": os.cpu_count()}
    phases = args.phases.split(",")
    if "throughput" in phases:
        out["throughput"] = phase_throughput(args)
    if "kill" in phases:
        out["kill_fsync"] = kill_cycles(FSYNC, args.cycles, "log.flush.interval.messages=1")
        if args.kill_default:
            out["kill_default"] = kill_cycles({}, args.cycles, "default")
    out["loadavg_end"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    return 0 if all(out[k]["lost"] == 0 for k in out if k.startswith("kill_")) else 1


if __name__ == "__main__":
    sys.exit(main())
