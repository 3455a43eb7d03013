"""Replication: acks=all latency and throughput with RF=3 on three brokers, failover time after a
leader's kill -9, and the pause of a controlled shutdown (SIGTERM).

    python bench/bench_replication.py [--seconds 10] [--rate 5000] [--size 1024] [--failovers 5] [--latency-only]
        [--runs 1] [--pacer tick|sleep|spin] [--linger-ms 2] [--keep]

Starts a real three-member etcd on loopback (tests/etcd_cluster.py), three broker processes on it
(tests/cluster_harness.py, racks dc1-dc3, ``broker.session.timeout.ms`` as the broker's default
unless ``--session-ms``) and one broker on the embedded store, all on this machine. Then:

1. **latency at a rate**: one idempotent confluent-kafka producer, acks=all, ``linger.ms``
   ``--linger-ms`` (2), ``--rate`` records/s of ``--size`` bytes for ``--seconds`` to a 3-partition
   RF=3 topic, woken once a millisecond to produce the records due (``--pacer tick``; ``sleep``: for
   each record); per record, the time from
   ``produce()`` to its delivery report: p50/p99/max (target: p99 under 10 ms at 5,000 msg/s of
   1 KiB), after a warm-up of 200 records (librdkafka's first batches to each leader wait ~0.5 s
   for connections and the producer id, with RF=1 as with RF=3). The same on RF=1 on the embedded broker, for comparison.
   Under each: librdkafka's own split (a record's wait in the producer's queue, its request's round
   trip, from its statistics), and per process (each broker, this client) its CPU and its mean
   run-queue wait per wake-up (``/proc/PID/task/*/schedstat``: how long a process that has work
   waits for a core), and its CPU time and times scheduled per record (more comparable across
   loads than the latency; but batches grow with the load, so fewer requests per record). Then one
   record at a time (1,000, each produced after the previous one's delivery report): the bare
   replication chain without queueing in the client.
   ``--latency-only`` stops here.
2. **throughput**: the same producer flat out for ``--seconds`` (acks=all): RF=3 on the cluster
   against RF=1 on one broker, and the ratio.
3. **failover** (``--failovers`` times): a producer sends acks=all records every 2 ms to a
   one-partition RF=3 topic (min.insync.replicas=2); the leader is killed with SIGKILL; the time
   from the kill to the first acknowledgement of a record produced after it (target: median
   under 3 s with default settings; Kafka's KRaft detects a dead broker after 9 s). The broker is
   restarted and rejoins the ISR between runs.
4. **controlled shutdown**: the same load, the leader stopped with SIGTERM: produce errors seen by
   the client (target: none) and the longest gap between two acknowledgements (target: < 0.5 s).

Each record passes through three broker processes and the client on two cores: the CPU lines say
where the time went (docs/benchmarks.md, "Replication").
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
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE.parent / "tests" / "e2e"), str(HERE)]

import _util  # noqa: E402
from broker_process import BrokerProcess  # noqa: E402
from cluster_harness import Cluster, until  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402


def create(bootstrap: str, name: str, partitions: int, rf: int, configs: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    a.create_topics([NewTopic(name, partitions, rf, config=configs or {})])[name].result(30)


def layout(bootstrap: str, topic: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2}).list_topics(topic, timeout=15)
    return {p.id: (p.leader, tuple(p.isrs)) for p in md.topics[topic].partitions.values()}


def producer(bootstrap: str, **extra):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": LINGER_MS,
                     "log_level": 2, "queue.buffering.max.messages": 500000, **extra})


def schedstat(pid: int) -> tuple[int, int, int]:
    """(ns on a CPU, ns runnable but waiting for one, times scheduled) over every thread of ``pid``
    (Linux ``/proc/PID/task/TID/schedstat``); zeros when unavailable."""
    cpu = wait = runs = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0, 0
    for tid in tids:
        try:
            a, b, c = map(int, Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split())
        except (OSError, ValueError):
            continue
        cpu, wait, runs = cpu + a, wait + b, runs + c
    return cpu, wait, runs


PACER = "tick"  # --pacer
LINGER_MS = 2.0  # --linger-ms


def at_rate(bootstrap: str, topic: str, rate: int, seconds: float, size: int,
            pids: dict[str, int] | None = None) -> dict[str, Any]:
    """Records at ``rate``/s; latency percentiles (ms) of their acknowledgements. With ``pids``
    (name -> process), each process's CPU and run-queue wait over the run (``sched``), and
    librdkafka's own split of the time (``client``): a record's wait in the producer's queue
    (``int_latency``) and its request's round trip (``rtt``), from its statistics."""
    stats: list[dict[str, Any]] = []
    p = producer(bootstrap, **{"statistics.interval.ms": 1000, "stats_cb": lambda j: stats.append(json.loads(j))})
    p.list_topics(topic, timeout=30)
    value = b"x" * size
    for _ in range(200):  # warm up: connections to every leader, the producer id, each partition's first batch
        p.produce(topic, value)
    p.flush(30)
    lat: list[float] = []
    errors = [0]

    def done(err, msg, t0) -> None:
        if err is None:
            lat.append((time.perf_counter() - t0) * 1000)
        else:
            errors[0] += 1

    pids = {**(pids or {}), "client": os.getpid()}
    before = {name: schedstat(pid) for name, pid in pids.items()}
    stats.clear()
    start = time.perf_counter()
    n = int(rate * seconds)
    tick = 0.001  # --pacer tick: the records due within each millisecond, produced together
    for i in range(n):
        due = start + i / rate
        if PACER == "tick":
            if (now := time.perf_counter()) < due:
                p.poll(0)
                time.sleep(tick - (now - start) % tick if due - now < tick else due - now)
        elif PACER == "spin":  # the first pacer: poll(0) until due (a core of its own at 100%)
            while (now := time.perf_counter()) < due:
                p.poll(0)
                if due - now > 0.001:
                    time.sleep(0.0005)
        elif (now := time.perf_counter()) < due:
            # Wait by sleeping, as an application producing 5,000 records/s does: spinning on
            # poll(0) here took a whole core from the brokers (the client at 100% CPU on 2 cores).
            p.poll(0)
            time.sleep(due - now)
        t0 = time.perf_counter()
        p.produce(topic, value, on_delivery=lambda err, msg, t0=t0: done(err, msg, t0))
        p.poll(0)
    wall = time.perf_counter() - start
    sched = {}
    for name, pid in pids.items():
        (c0, w0, r0), (c1, w1, r1) = before[name], schedstat(pid)
        sched[name] = {"cpu": (c1 - c0) / 1e9 / wall, "wait_ms": (w1 - w0) / 1e6 / max(1, r1 - r0),
                       "us_per_record": (c1 - c0) / 1e3 / n, "wakeups_per_record": (r1 - r0) / n}
    p.flush(60)
    client: dict[str, float] = {}
    windows = [b for st in stats[1:] for b in st.get("brokers", {}).values()
               if b.get("nodeid", -1) >= 0 and b.get("rtt", {}).get("cnt")]
    for key in ("int_latency", "rtt"):  # per statistics window and broker (us): the median p50, the largest p99
        if windows:
            client[key + "_p50"] = statistics.median(b[key]["p50"] for b in windows) / 1000
            client[key + "_p99"] = max(b[key]["p99"] for b in windows) / 1000
    lat.sort()
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] if lat else float("nan")  # noqa: E731
    return {"records": len(lat), "errors": errors[0], "p50": q(0.5), "p99": q(0.99), "max": lat[-1] if lat else 0,
            "achieved": len(lat) / (time.perf_counter() - start), "sched": sched, "client": client,
            "load": os.getloadavg()[0]}


def report(name: str, rate: int, r: dict[str, Any]) -> None:
    print(f"latency at {rate}/s  {name}: p50 {r['p50']:.1f} ms  p99 {r['p99']:.1f} ms  max {r['max']:.0f} ms"
          f"  ({r['records']} acked at {r['achieved']:.0f}/s, {r['errors']} errors; load average {r['load']:.1f})",
          flush=True)
    c = r["client"]
    if c:
        print(f"    librdkafka: in its queue p50 {c['int_latency_p50']:.1f} / p99 {c['int_latency_p99']:.1f} ms, "
              f"request round trip p50 {c['rtt_p50']:.1f} / p99 {c['rtt_p99']:.1f} ms", flush=True)
    print("    CPU (run-queue wait per wake-up; CPU and wake-ups per record): " + ", ".join(
        f"{name} {v['cpu'] * 100:.0f}% ({v['wait_ms']:.2f} ms; {v['us_per_record']:.0f} us, "
        f"{v['wakeups_per_record']:.2f})" for name, v in r["sched"].items()), flush=True)


def one_at_a_time(bootstrap: str, topic: str, count: int, size: int,
                  pids: dict[str, int] | None = None) -> tuple[float, float, dict[str, tuple[float, float]]]:
    """One record in flight at a time (produce, wait for its delivery report, next): p50 / p99 ms.
    No queueing in the client: the bare chain client -> leader -> followers -> leader -> client.
    With ``pids``: each process's CPU (us) and times scheduled per record, the cost of one pass
    along the chain (one batch, one Produce request, each follower one fetch answered), which unlike
    the rate run does not depend on how the load batches the records."""
    p = producer(bootstrap)
    p.list_topics(topic, timeout=30)
    value = b"x" * size
    for _ in range(20):
        p.produce(topic, value)
        p.flush(30)
    lat = []
    pids = pids or {}
    before = {name: schedstat(pid) for name, pid in pids.items()}
    for _ in range(count):
        t0 = time.perf_counter()
        p.produce(topic, value, partition=0)
        p.flush(30)
        lat.append((time.perf_counter() - t0) * 1000)
    cost = {}
    for name, pid in pids.items():
        (c0, _, r0), (c1, _, r1) = before[name], schedstat(pid)
        cost[name] = ((c1 - c0) / 1e3 / count, (r1 - r0) / count)
    lat.sort()
    return lat[len(lat) // 2], lat[min(len(lat) - 1, int(0.99 * len(lat)))], cost


def flat_out(bootstrap: str, topic: str, seconds: float, size: int) -> float:
    p = producer(bootstrap, **{"linger.ms": 5})
    p.list_topics(topic, timeout=30)
    acked, wall = _util.flat_out(p, topic, seconds, size)
    return acked / wall


class Load:
    """acks=all records every ``interval`` seconds from a thread; every ack's time and every error."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 0.002) -> None:
        self.acks: list[tuple[float, float]] = []  # (produced at, acknowledged at)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, args=(bootstrap, topic, interval), daemon=True)
        self._t.start()

    def _run(self, bootstrap: str, topic: str, interval: float) -> None:
        p = producer(bootstrap, **{"message.timeout.ms": 60000})
        i = 0
        while not self._stop.is_set():
            t0 = time.monotonic()
            p.produce(topic, b"%08d" % i, on_delivery=lambda err, msg, t0=t0: (
                self.acks.append((t0, time.monotonic())) if err is None else self.errors.append(str(err))))
            i += 1
            p.poll(interval)
        p.flush(60)

    def stop(self) -> None:
        self._stop.set()
        self._t.join(90)


def failover(c: Cluster, runs: int) -> list[float]:
    out = []
    for r in range(runs):
        topic = f"failover-{r}-{uuid.uuid4().hex[:6]}"
        create(c[1].bootstrap, topic, 1, 3, {"min.insync.replicas": "2"})
        until(lambda: len(layout(c[1].bootstrap, topic)[0][1]) == 3, 30)
        leader = layout(c[1].bootstrap, topic)[0][0]
        others = [n for n in (1, 2, 3) if n != leader]
        load = Load(",".join(c[n].bootstrap for n in (1, 2, 3)), topic)
        until(lambda: len(load.acks) > 200, 30)
        t_kill = time.monotonic()
        c.kill(leader)
        until(lambda: any(t0 > t_kill for t0, _ in load.acks), 60, "an acknowledgement after the kill")
        first = min(t1 for t0, t1 in load.acks if t0 > t_kill)
        load.stop()
        out.append(first - t_kill)
        print(f"  failover {r + 1}: leader {leader} killed; first acks=all produced after it acknowledged "
              f"{out[-1]:.2f} s later; errors at the client: {len(load.errors)}", flush=True)
        c.start_one(leader)
        until(lambda: len(layout(c[others[0]].bootstrap, topic)[0][1]) == 3, 60, "the ISR whole again")
    return out


def controlled(c: Cluster) -> tuple[int, float]:
    topic = f"sigterm-{uuid.uuid4().hex[:6]}"
    create(c[1].bootstrap, topic, 1, 3, {"min.insync.replicas": "2"})
    until(lambda: len(layout(c[1].bootstrap, topic)[0][1]) == 3, 30)
    leader = layout(c[1].bootstrap, topic)[0][0]
    others = [n for n in (1, 2, 3) if n != leader]
    load = Load(",".join(c[n].bootstrap for n in others), topic)
    until(lambda: len(load.acks) > 200, 30)
    t_stop = time.monotonic()
    c.stop(leader)
    until(lambda: sum(1 for t0, _ in load.acks if t0 > t_stop + 1) > 200, 60)
    load.stop()
    acked = sorted(t1 for _, t1 in load.acks if t1 > t_stop - 1)
    gap = max(b - a for a, b in zip(acked, acked[1:]))
    c.start_one(leader)
    until(lambda: len(layout(c[others[0]].bootstrap, topic)[0][1]) == 3, 60)
    return len(load.errors), gap


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--failovers", type=int, default=5)
    ap.add_argument("--session-ms", type=int, default=None, help="broker.session.timeout.ms (default: the broker's)")
    ap.add_argument("--latency-only", action="store_true", help="only the latency at a rate (1.), RF=3 then RF=1")
    ap.add_argument("--runs", type=int, default=1,
                    help="repeat the latency at a rate (RF=3 then RF=1) this many times on the same brokers and "
                         "print the median RF=3 p99: one run's p99 moves with the host (each broker's CPU per "
                         "record, printed with it, rises with it)")
    ap.add_argument("--pacer", choices=("sleep", "tick", "spin"), default="tick",
                    help="how the latency run waits for a record's due time: tick (default): sleep to the next "
                         "millisecond and produce the records due by then (an application that wakes once a "
                         "millisecond: a fifth of the client's wake-ups at 5,000/s, so half its CPU); sleep: "
                         "until each record's own due time; spin: on poll(0) (the client on a core of its own)")
    ap.add_argument("--linger-ms", type=float, default=2.0,
                    help="the producers' linger.ms (librdkafka's default is 5; 2 halves the brokers' requests "
                         "of 1 at 5,000 rec/s)")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' and etcd's directories (logs) after the run")
    ap.add_argument("--override", action="append", default=[], metavar="K=V",
                    help="a broker config for every broker of the run (repeatable), e.g. shoal.metering.enable=false")
    args = ap.parse_args()
    global PACER, LINGER_MS
    PACER, LINGER_MS = args.pacer, args.linger_ms
    work = Path(tempfile.mkdtemp(prefix="bench-repl-"))
    etcd = EtcdCluster(work / "etcd")
    etcd.start()
    extra = dict(o.split("=", 1) for o in args.override)
    overrides = {} if args.session_ms is None else {"broker.session.timeout.ms": str(args.session_ms)}
    c = Cluster(work / "cluster", etcd.url("/bench"), overrides={**overrides, **extra})
    if args.session_ms is None:  # the harness shortens it for tests; the benchmark uses the default
        for b in c.brokers.values():
            b.overrides.pop("broker.session.timeout.ms", None)
    single = BrokerProcess(work / "single")
    if extra:
        plain_args = single.serve_args
        single.serve_args = lambda: plain_args() + [a for k, v in extra.items() for a in ("--override", f"{k}={v}")]
    try:
        c.start()
        single.start()
        print(f"3 brokers on etcd + 1 embedded broker; {args.size}-byte records, acks=all, idempotent", flush=True)
        create(c[1].bootstrap, "lat3", 3, 3)
        create(single.bootstrap, "lat1", 3, 1)
        until(lambda: all(len(isr) == 3 for _, isr in layout(c[1].bootstrap, "lat3").values()), 30)
        every = ",".join(b.bootstrap for b in c.live)
        p99s = []
        for run in range(args.runs):
            if args.runs > 1:
                print(f"run {run + 1} of {args.runs}:", flush=True)
            r3 = at_rate(every, "lat3", args.rate, args.seconds, args.size,
                         {f"b{n}": b.proc.pid for n, b in c.brokers.items() if b.proc is not None})
            r1 = at_rate(single.bootstrap, "lat1", args.rate, args.seconds, args.size,
                         {"single": single.proc.pid} if single.proc is not None else {})
            report("RF=3, 3 brokers", args.rate, r3)
            report("RF=1, 1 broker ", args.rate, r1)
            print(f"  p99 target 10 ms: {r3['p99'] / 10:.2f}x of it", flush=True)
            p99s.append(r3["p99"])
        if args.runs > 1:
            under = sum(1 for v in p99s if v < 10)
            print(f"RF=3 p99 over {args.runs} runs: median {statistics.median(p99s):.1f} ms (target 10 ms: "
                  f"{statistics.median(p99s) / 10:.2f}x), {under} of {args.runs} under 10 ms; each: "
                  + ", ".join(f"{v:.1f}" for v in p99s), flush=True)
        pids3 = {f"b{n}": b.proc.pid for n, b in c.brokers.items() if b.proc is not None}
        s3 = one_at_a_time(every, "lat3", 1000, args.size, pids3)
        s1 = one_at_a_time(single.bootstrap, "lat1", 1000, args.size,
                           {"single": single.proc.pid} if single.proc is not None else {})
        print(f"one record at a time (1,000): RF=3 p50 {s3[0]:.1f} / p99 {s3[1]:.1f} ms, RF=1 one broker p50 {s1[0]:.1f}"
              f" / p99 {s1[1]:.1f} ms (load average {os.getloadavg()[0]:.1f})", flush=True)
        print("    CPU and times scheduled per record: " + ", ".join(
            f"{name} {us:.0f} us, {runs:.1f}" for name, (us, runs) in {**s3[2], **s1[2]}.items()), flush=True)
        if args.latency_only:
            return
        t3 = flat_out(every, "lat3", args.seconds, args.size)
        t1 = flat_out(single.bootstrap, "lat1", args.seconds, args.size)
        print(f"throughput flat out: RF=3 {t3:,.0f} rec/s, RF=1 one broker {t1:,.0f} rec/s: ratio {t3 / t1:.2f}",
              flush=True)
        times = failover(c, args.failovers)
        if times:
            print(f"failover (kill -9 of the leader -> first acks=all acknowledged): median {statistics.median(times):.2f} s"
                  f", max {max(times):.2f} s over {len(times)} (target: median < 3 s)", flush=True)
        errors, gap = controlled(c)
        print(f"controlled shutdown (SIGTERM of the leader): {errors} produce errors at the client, longest gap "
              f"between acknowledgements {gap * 1000:.0f} ms (target: 0 errors, < 500 ms)", flush=True)
    finally:
        single.stop()
        c.close()
        etcd.close()
        if args.keep:
            print(f"kept {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)  # ~200 MB a run (the logs and etcd's data)


if __name__ == "__main__":
    main()
