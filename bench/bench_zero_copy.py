"""Zero-copy Fetch (issue 29, part 1): broker CPU seconds per GB consumed, copy path against sendfile.

    python bench/bench_zero_copy.py [--mb 128] [--consumers 1,4] [--rounds 1] [--no-follower]

In one run, for each mode (``shoal.fetch.zero.copy=false``: every fetched byte read into the
broker and written out; ``true``: record sets sent from the segment files with sendfile), rounds
interleaved:

1. **consumers**: one broker (PLAINTEXT) holds ``--mb`` MB of 1 KiB records in a 4-partition topic;
   N confluent-kafka consumers (threads, assigned every partition from offset 0, default fetch
   sizes) each read all of it. The broker process's CPU (utime + stime, /proc/PID/stat) over the
   reads, divided by the bytes consumed (N x the log's size).
2. **a follower**: two brokers on a real etcd, a 4-partition RF=2 topic; the follower is stopped,
   ``--mb`` MB are produced (acks=1), the follower is started and catches up over the plaintext
   inter-broker listener. The leader's CPU until the follower's log is as long, per GB.

Prints a table (CPU s/GB per scenario and mode, the time each took, the machine's load average
before and after) and the ratio sendfile / copy against the issue's target (halved: <= 0.5).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE.parent / "tests" / "e2e"), str(HERE)]

from _util import cpu_seconds, render_table  # noqa: E402
from broker_process import BrokerProcess  # noqa: E402
from cluster_harness import Cluster, until  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402

PARTITIONS = 4
VALUE = b"z" * 1024
MODES = {"copy": "false", "sendfile": "true"}


def create(bootstrap: str, topic: str, rf: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    a.create_topics([NewTopic(topic, PARTITIONS, rf, config={"min.insync.replicas": "1"})])[topic].result(30)


def produce(bootstrap: str, topic: str, mb: int) -> int:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "batch.size": 512 * 1024,
                  "compression.type": "none", "log_level": 2, "queue.buffering.max.kbytes": 256 * 1024})
    n = mb * 1024 * 1024 // len(VALUE)
    for i in range(n):
        while True:
            try:
                p.produce(topic, VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return n


def log_bytes(b: BrokerProcess, topic: str) -> int:
    return sum(f.stat().st_size for d in b.data_dir.glob(f"{topic}-*") for f in d.glob("*.log"))


def read_all(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}", "log_level": 2,
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    deadline = time.monotonic() + 600
    try:
        while got < n and time.monotonic() < deadline:
            got += sum(1 for m in c.consume(10000, 1.0) if m.error() is None)
    finally:
        c.close()
    assert got >= n, f"read {got} of {n}"


def consumers(work: Path, mode: str, mb: int, counts: list[int]) -> list[tuple[str, float, float]]:
    b = BrokerProcess(work / f"single-{mode}-{uuid.uuid4().hex[:4]}", overrides={"shoal.fetch.zero.copy": MODES[mode]})
    b.start()
    out = []
    try:
        topic = "zc"
        create(b.bootstrap, topic)
        n = produce(b.bootstrap, topic, mb)
        size = log_bytes(b, topic)
        assert b.proc is not None
        for k in counts:
            cpu0, t0 = cpu_seconds([b.proc.pid]), time.monotonic()
            threads = [threading.Thread(target=read_all, args=(b.bootstrap, topic, n)) for _ in range(k)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            cpu, took = cpu_seconds([b.proc.pid]) - cpu0, time.monotonic() - t0
            out.append((f"{k} consumer{'s' if k > 1 else ''}", cpu / (k * size / 1e9), took))
    finally:
        b.stop()
    return out


def follower(work: Path, etcd: EtcdCluster, mode: str, mb: int) -> tuple[str, float, float]:
    c = Cluster(work / f"cluster-{mode}-{uuid.uuid4().hex[:4]}", etcd.url(f"/zc-{uuid.uuid4().hex[:6]}"), size=2,
                overrides={"shoal.fetch.zero.copy": MODES[mode]})
    c.start()
    try:
        topic = "zcf"
        create(c.bootstrap(), topic, rf=2)
        c.stop(2)
        leader = c[1]
        until(lambda: produce_ready(leader.bootstrap, topic), 30, "broker 1 to lead every partition")
        produce(leader.bootstrap, topic, mb)
        size = log_bytes(leader, topic)
        assert leader.proc is not None
        cpu0, t0 = cpu_seconds([leader.proc.pid]), time.monotonic()
        c.start_one(2)
        until(lambda: log_bytes(c[2], topic) >= size, 600, "the follower to catch up")
        cpu, took = cpu_seconds([leader.proc.pid]) - cpu0, time.monotonic() - t0
        return ("1 follower", cpu / (size / 1e9), took)
    finally:
        c.close()


def produce_ready(bootstrap: str, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2}).list_topics(topic, timeout=10)
    return all(p.leader == 1 for p in md.topics[topic].partitions.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=128, help="MB of records per scenario")
    ap.add_argument("--consumers", default="1,4", help="consumer counts, comma separated")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--no-follower", action="store_true")
    args = ap.parse_args()
    counts = [int(x) for x in args.consumers.split(",") if x]
    work = Path(tempfile.mkdtemp(prefix="bench-zc-"))
    etcd = None if args.no_follower else EtcdCluster(work / "etcd")
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    load = [os.getloadavg()]
    try:
        if etcd is not None:
            etcd.start()
        for r in range(args.rounds):
            for mode in (("copy", "sendfile") if r % 2 == 0 else ("sendfile", "copy")):
                rows = consumers(work, mode, args.mb, counts)
                if etcd is not None:
                    rows.append(follower(work, etcd, mode, args.mb))
                for scenario, per_gb, took in rows:
                    results.setdefault((scenario, mode), []).append((per_gb, took))
                    print(f"round {r + 1} {mode:8} {scenario:12} {per_gb:6.2f} CPU s/GB  {took:5.1f} s", flush=True)
    finally:
        if etcd is not None:
            etcd.close()
    load.append(os.getloadavg())
    scenarios = list(dict.fromkeys(s for s, _ in results))
    table = []
    for s in scenarios:
        copy = sum(v for v, _ in results[(s, "copy")]) / len(results[(s, "copy")])
        zc = sum(v for v, _ in results[(s, "sendfile")]) / len(results[(s, "sendfile")])
        ratio = zc / copy if copy else float("nan")
        table.append([s, f"{copy:.2f}", f"{zc:.2f}", f"{ratio:.2f}", "yes" if ratio <= 0.5 else "no"])
    print()
    print(f"broker CPU seconds per GB consumed ({args.mb} MB of 1 KiB records, {args.rounds} round(s), "
          f"{os.cpu_count()} cores; load average before {load[0][0]:.2f}, after {load[1][0]:.2f})")
    print(render_table(["scenario", "copy", "sendfile", "ratio", "<= 0.5 (target)"], table))


if __name__ == "__main__":
    main()
