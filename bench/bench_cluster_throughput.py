"""Aggregate produce and consume throughput: three brokers on etcd against one broker (embedded).

    python bench/bench_cluster_throughput.py [--seconds 10] [--rounds 2] [--size 512] [--partitions 6]

Starts a real three-member etcd on loopback (tests/etcd_cluster.py), three broker processes on one
etcd prefix and one broker on the embedded store (``python -m shoal serve``, bench_cluster_metadata's
``Broker``), all on this machine. Each round, for each setup (embedded first, then the cluster):

1. a topic of ``--partitions`` partitions, RF 1 (on the cluster the planner spreads the leaders:
   two partitions per broker with 6);
2. produce: three confluent-kafka producer processes, started together, each writing
   ``--size``-byte records round-robin to its own third of the partitions for ``--seconds`` and
   then flushing (acks=all, linger.ms=5). On the cluster producer k takes the partitions broker k
   leads and bootstraps to broker k; on the embedded broker the same split by partition index.
   Throughput = acknowledged records / (last flush - common start);
3. consume: three consumer processes, each assigned the same partitions from offset 0, read to the
   high watermark; throughput = records / (last finish - common start).

Prints each round and the sums, the cluster/embedded ratio, and where the CPU went (brokers,
clients, everything else on the machine: etcd and other users of a shared machine), since three
brokers and six client processes share the machine's cores.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE)]

from _util import descendants, user_process_cpu  # noqa: E402
from bench_cluster_metadata import Broker  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402

def produce_worker(bootstrap: str, topic: str, parts: list[int], seconds: float, size: int, start_at: float,
                   out) -> None:
    from confluent_kafka import Producer

    errors = 0

    def delivered(err, _msg) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                  "queue.buffering.max.messages": 200000, "message.max.bytes": 1000000})
    p.list_topics(topic, timeout=30)  # connections and metadata before the clock starts
    value = os.urandom(size)
    time.sleep(max(0.0, start_at - time.time()))
    end, sent, i = start_at + seconds, 0, 0
    while time.time() < end:
        for _ in range(1000):
            try:
                p.produce(topic, value, partition=parts[i % len(parts)], on_delivery=delivered)
            except BufferError:
                p.poll(0.005)
                continue
            i += 1
            sent += 1
        p.poll(0)
    left = p.flush(120)
    out.put(("produce", sent - errors - left, time.time() - start_at))


def consume_worker(bootstrap: str, topic: str, parts: list[int], start_at: float, out) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts}
    want = sum(ends.values())
    c.assign([TopicPartition(topic, p, 0) for p in parts if ends[p] > 0])
    time.sleep(max(0.0, start_at - time.time()))
    got, deadline = 0, time.time() + 300
    while got < want and time.time() < deadline:
        for m in c.consume(10000, timeout=1.0):
            if m.error() is None:
                got += 1
    out.put(("consume", got, time.time() - start_at))
    c.close()


def run_clients(target, jobs: list[tuple]) -> tuple[int, float, list[int], dict[int, float], dict[int, float]]:
    """Run one process per job (args after ``target``'s first), started together 3 s from now;
    records, wall seconds to the last one's end, the client pids, and every process's CPU
    seconds at the common start and after the last result."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    start_at = time.time() + 3.0
    procs = [ctx.Process(target=target, args=(*job, start_at, out)) for job in jobs]
    for p in procs:
        p.start()
    time.sleep(max(0.0, start_at - time.time()))
    at_start = user_process_cpu()
    results = [out.get(timeout=600) for _ in procs]
    at_end = user_process_cpu()  # the clients are still there (not joined): their CPU counts
    for p in procs:
        p.join(30)
    return sum(r[1] for r in results), max(r[2] for r in results), [p.pid for p in procs], at_start, at_end


def run_phase(target, jobs: list[tuple], broker_pids: list[int]) -> tuple[int, float, float, float, float]:
    """``run_clients``, then where the CPU went: records, wall seconds, and the CPU seconds of the
    brokers (``broker_pids``), of the clients and of everything else on the machine."""
    records, wall, clients, at_start, at_end = run_clients(target, jobs)
    used = {pid: cpu - at_start.get(pid, 0.0) for pid, cpu in at_end.items() if pid != os.getpid()}
    b_cpu = sum(used.get(pid, 0.0) for pid in broker_pids)
    client_cpu = sum(used.get(pid, 0.0) for pid in clients)
    return records, wall, b_cpu, client_cpu, sum(used.values()) - b_cpu - client_cpu


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def create(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures die with it
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)


def measure(name: str, brokers: list[Broker], topic: str, args) -> dict[str, float]:
    """One setup, one round: create the topic, produce, consume; returns rates and CPU seconds."""
    create(brokers[0].bootstrap, topic, args.partitions)
    lead = leaders(brokers[0].bootstrap, topic)
    # Client k takes the k-th of ``--clients`` runs of the partitions ordered by leader: with 3
    # clients on the cluster, the partitions of one broker each (bootstrapping to that broker).
    order = sorted(lead, key=lambda p: (lead[p], p))
    n = args.clients
    chunks = [order[k * len(order) // n:(k + 1) * len(order) // n] for k in range(n)]
    bootstrap = {b.node_id: b.bootstrap for b in brokers}
    groups = [(bootstrap.get(lead[c[0]], brokers[0].bootstrap), c) for c in chunks if c]
    broker_pids = [pid for b in brokers for pid in descendants(b.proc.pid)]
    res: dict[str, float] = {"partitions per client": max(len(g[1]) for g in groups)}
    for phase, target, jobs in (
        ("produce", produce_worker, [(b, topic, parts, args.seconds, args.size) for b, parts in groups]),
        ("consume", consume_worker, [(b, topic, parts) for b, parts in groups]),
    ):
        records, wall, b_cpu, client_cpu, others = run_phase(target, jobs, broker_pids)
        res[phase] = records / wall
        res[f"{phase} MB/s"] = records * args.size / wall / 1e6
        res[f"{phase} cpu"] = (b_cpu, client_cpu, others, wall)
        print(f"  {name:9} {phase}: {records:>9,} records in {wall:5.1f} s = {records / wall:>9,.0f} rec/s "
              f"({records * args.size / wall / 1e6:6.1f} MB/s); CPU s: brokers {b_cpu:5.1f} "
              f"({b_cpu / max(records, 1) * 1e6:.1f} µs/record), clients "
              f"{client_cpu:5.1f}, rest of machine {others:5.1f} ({(b_cpu + client_cpu + others) / wall:.2f} "
              f"of {os.cpu_count()} cores busy)", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0, help="produce time per setup and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", type=int, default=512, help="record value bytes")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--clients", type=int, default=3, help="producer (and consumer) processes")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-cluster-tp-"))
    etcd = EtcdCluster(work / "etcd")
    etcd.start()
    started: list[Broker] = []
    try:
        url = etcd.url("/bench")
        cluster = [Broker(work / f"b{n}", n, url) for n in (1, 2, 3)]
        embedded = Broker(work / "embedded", 1)
        for b in (*cluster, embedded):
            b.start()
            started.append(b)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the start; "
              f"{args.partitions} partitions RF 1, {args.clients} producer and {args.clients} consumer processes, "
              f"{args.size}-byte records, produce {args.seconds:.0f} s per setup and round", flush=True)
        sums: dict[str, dict[str, float]] = {"embedded": {}, "cluster": {}}
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}", flush=True)
            for name, brokers in (("embedded", [embedded]), ("cluster", cluster)):
                r = measure(name, brokers, f"tp-{name}-{rnd}", args)
                for k in ("produce", "consume", "produce MB/s", "consume MB/s"):
                    sums[name][k] = sums[name].get(k, 0.0) + r[k] / args.rounds
        e, c = sums["embedded"], sums["cluster"]
        for k in ("produce", "consume"):
            print(f"{k} (mean of {args.rounds} rounds): 1 broker embedded {e[k]:,.0f} rec/s "
                  f"({e[k + ' MB/s']:.1f} MB/s), 3 brokers on etcd {c[k]:,.0f} rec/s ({c[k + ' MB/s']:.1f} MB/s); "
                  f"cluster/embedded {c[k] / e[k]:.2f}")
    finally:
        for b in started:
            b.stop()
        etcd.close()


if __name__ == "__main__":
    main()
