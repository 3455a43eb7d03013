"""Cheaper replication (issue 29, part 3): broker CPU per record on the leader and on a follower,
RF=3 against RF=1 flat out, and acks=all latency of a plain librdkafka producer paced two ways.

    python bench/bench_follower_cpu.py [--seconds 10] [--rounds 2] [--size 1024] [--rate 5000]
        [--latency-seconds 20] [--phases cpu,latency] [--etcd-members 1] [--override K=V]...

Starts a real etcd on loopback (tests/etcd_cluster.py; one member unless ``--etcd-members``) and
three broker processes on it (tests/cluster_harness.py), all on this machine. Then:

1. **CPU per record, flat out** (``--rounds`` rounds, RF=1 and RF=3 interleaved): two 3-partition
   topics whose every partition is led by broker 1 (replica assignment ``[1, 2, 3]``, RF=3 with
   ``min.insync.replicas=2``; ``[1]``, RF=1), so the roles are clean: broker 1 only leads (takes
   Produce requests, serves its followers' fetches), brokers 2 and 3 only follow (fetch, append).
   Each round produces flat out for ``--seconds`` with two clients in turn: the project's bench
   client (bench/bench_replication.py's producer: idempotent, acks=all, linger.ms 5) and a plain
   confluent-kafka producer (acks=all, every other setting librdkafka's default). Each broker's
   CPU seconds (utime + stime of ``/proc/PID/stat``) before and after, divided by the records
   acknowledged: the leader's and each follower's CPU per record, their ratio (target: a
   follower < 0.5 x the leader), and the RF=3 / RF=1 throughput ratio.
2. **acks=all latency of a plain librdkafka producer** at ``--rate`` records/s of ``--size`` bytes
   for ``--latency-seconds`` to a 3-partition RF=3 topic (min.insync.replicas=2, leaders spread by
   the planner); idempotent, linger.ms 1, as an outside client does, paced two ways:
   ``poll``: produce a record, then ``poll()`` until the next one is due (librdkafka serves its
   delivery reports while the application waits; a wait under 1 ms is ``poll(0)``: librdkafka
   counts whole milliseconds, so such a client spins); ``burst``: every 10 ms the records due (50
   at 5,000/s) together, then ``poll()`` until the next 10 ms. Per record the time from
   ``produce()`` to its delivery report: p50 / p99 / p99.9 / max (target: p99 < 10 ms), after a
   warm-up of 500 records; beside it each broker's and the client's CPU per record, and where the
   brokers' Produce time went (the share of requests over 5 and 10 ms in total, queue, local,
   remote: the acks=all wait for the followers, and send; ``shoal_request_*_time_seconds``).

Prints the machine's load average (``os.getloadavg``) around each phase: on a shared 2-core
machine the times move with it; CPU per record moves less.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE.parent / "tests" / "e2e"), str(HERE)]

import _util  # noqa: E402
from _util import CLK_TCK, _read_stat, percentile  # noqa: E402
from broker_process import free_port  # noqa: E402
from cluster_harness import Cluster, until  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402

PARTITIONS = 3
# Flat out, a round writes up to 4 GB per broker: each partition keeps its last 512 MiB (checked
# every 2 s), so a run of several rounds does not fill the disk.
RETENTION = {"retention.bytes": str(512 << 20), "segment.bytes": str(64 << 20)}


def create(bootstrap: str, name: str, assignment: list[list[int]] | None, configs: dict[str, str]) -> None:
    import asyncio

    from shoal.client import AdminClient

    async def go() -> None:
        async with AdminClient(bootstrap, timeout=30) as a:
            t: dict[str, Any] = {"name": name, "configs": configs}
            if assignment is not None:  # confluent-kafka's NewTopic refuses an assignment (2.16)
                t["assignments"] = dict(enumerate(assignment))
            else:
                t.update(num_partitions=PARTITIONS, replication_factor=3)
            await a.create_topics([t])

    asyncio.run(go())


def isr_whole(bootstrap: str, topic: str, rf: int) -> bool:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2}).list_topics(topic, timeout=15)
    parts = md.topics[topic].partitions.values()
    return len(parts) == PARTITIONS and all(len(p.isrs) == rf and p.leader >= 0 for p in parts)


CLIENTS: dict[str, dict[str, Any]] = {
    # bench/bench_replication.py's producer, flat out (its ``flat_out``)
    "bench": {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "queue.buffering.max.messages": 500000},
    # librdkafka as it comes, asked for acks=all
    "plain": {"acks": "all"},
}


def flat_out(bootstrap: str, topic: str, seconds: float, size: int, settings: dict[str, Any]) -> tuple[int, float]:
    """(records acknowledged, seconds) producing as fast as the producer takes them."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "log_level": 2, **settings})
    p.list_topics(topic, timeout=30)
    for _ in range(100):  # connections and the producer id before the clock starts
        p.produce(topic, b"x" * size)
    p.flush(30)
    return _util.flat_out(p, topic, seconds, size)


def cpu_round(c: Cluster, topic: str, seconds: float, size: int, settings: dict[str, Any],
              profile: Path | None = None) -> dict[str, Any]:
    pids = {n: b.proc.pid for n, b in c.brokers.items() if b.proc is not None}
    spies = []
    if profile is not None:  # py-spy on the leader and one follower (collapsed stacks, for flamegraph.pl)
        profile.mkdir(parents=True, exist_ok=True)
        spies = [subprocess.Popen(["py-spy", "record", "--nonblocking", "-r", "200", "-d", str(int(seconds)), "-f", "raw",
                                   "-o", str(profile / f"b{b}-{topic}.txt"), "-p", str(pids[b])],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for b in (1, 2)]
    before = {n: user_sys(pid) for n, pid in pids.items()}
    counts0 = counters(c)
    n, wall = flat_out(c[1].bootstrap, topic, seconds, size, settings)
    for s in spies:
        s.wait(60)
    after = {n: user_sys(pid) for n, pid in pids.items()}
    counts = {k: v - counts0.get(k, 0) for k, v in counters(c).items()}
    used = {b: (after[b][0] - before[b][0], after[b][1] - before[b][1]) for b in pids}
    return {"records": n, "rate": n / wall, "cpu": used, "us": {b: sum(used[b]) * 1e6 / max(1, n) for b in pids},
            "sys": {b: used[b][1] / max(1e-9, sum(used[b])) for b in pids},
            "per_request": {k: n / max(1, v) for k, v in counts.items()}}


def counters(c: Cluster) -> dict[str, float]:
    """Produce requests broker 1 answered, Fetch answers broker 2's fetchers received (its
    Prometheus endpoint, ``shoal.metrics.listener``)."""
    import urllib.request

    out = {}
    for key, node, name in (("produce", 1, 'shoal_requests_total{api="Produce"'),
                            ("fetch", 2, "shoal_replica_fetcher_fetches_total{")):
        url = c[node].overrides["shoal.metrics.listener"] + "/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        out[key] = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))
    return out


def user_sys(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pid`` (all threads; ``/proc/PID/stat`` utime, stime)."""
    st = _read_stat(pid)
    return (0.0, 0.0) if st is None else (int(st[11]) / CLK_TCK, int(st[12]) / CLK_TCK)


def cpu_phase(c: Cluster, args: argparse.Namespace) -> None:
    print(f"\n== CPU per record, flat out ({args.seconds:.0f} s each; all leaders on broker 1; load average "
          f"{os.getloadavg()[0]:.1f}) ==", flush=True)
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        for client, settings in CLIENTS.items():
            for rf in (1, 3):
                profile = args.profile if args.profile and r == 0 and client == "bench" and rf == 3 else None
                res = cpu_round(c, f"cpu-rf{rf}", args.seconds, args.size, settings, profile)
                results.setdefault((client, rf), []).append(res)
                us = res["us"]
                print(f"  round {r + 1} {client:5s} RF={rf}: {res['rate']:9,.0f} rec/s; CPU per record: leader (b1) "
                      f"{us[1]:5.1f} us, followers b2 {us[2]:5.1f} / b3 {us[3]:5.1f} us; system time "
                      f"{res['sys'][1]:.0%} / {res['sys'][2]:.0%} / {res['sys'][3]:.0%}; records per Produce request "
                      f"{res['per_request']['produce']:.0f}, per b2 fetch {res['per_request']['fetch']:.0f}  (load {os.getloadavg()[0]:.1f})",
                      flush=True)
    print("\n| client | RF=1 rec/s | RF=3 rec/s | RF=3 / RF=1 | leader us/rec RF=1 | leader us/rec RF=3 | "
          "follower us/rec | follower / leader (target < 0.5) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for client in CLIENTS:
        one, three = results[(client, 1)], results[(client, 3)]
        r1 = statistics.median(x["rate"] for x in one)
        r3 = statistics.median(x["rate"] for x in three)
        l1 = statistics.median(x["us"][1] for x in one)
        l3 = statistics.median(x["us"][1] for x in three)
        fo = statistics.median((x["us"][2] + x["us"][3]) / 2 for x in three)
        print(f"| {client} | {r1:,.0f} | {r3:,.0f} | {r3 / r1:.2f} | {l1:.1f} | {l3:.1f} | {fo:.1f} | {fo / l3:.2f} |",
              flush=True)


def latency_run(bootstrap: str, topic: str, rate: int, seconds: float, size: int, pacer: str) -> dict[str, Any]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 1,
                  "log_level": 2})
    p.list_topics(topic, timeout=30)
    value = b"x" * size
    for _ in range(500):
        p.produce(topic, value)
    p.flush(30)
    lat: list[float] = []
    errors = [0]
    clock = time.perf_counter

    def report(t0: float) -> Callable[[Any, Any], None]:
        def done(err, _msg) -> None:
            if err is None:
                lat.append((clock() - t0) * 1000)
            else:
                errors[0] += 1
        return done

    n = int(rate * seconds)
    start = clock()
    if pacer == "poll":
        for i in range(n):
            p.produce(topic, value, on_delivery=report(clock()))
            wait = start + (i + 1) / rate - clock()
            p.poll(max(0.0, wait))
    else:  # burst: the records due every 10 ms together, poll(0), sleep
        tick, per, i, k = 0.010, max(1, int(rate * 0.010)), 0, 0
        while i < n:
            k += 1
            while i < min(n, k * per):
                p.produce(topic, value, on_delivery=report(clock()))
                i += 1
            p.poll(0)
            while (d := start + k * tick - clock()) > 0:  # delivery reports served while waiting
                p.poll(d)
    wall = clock() - start
    p.flush(60)
    lat.sort()
    return {"n": len(lat), "errors": errors[0], "rate": n / wall, "p50": percentile(lat, 50),
            "p99": percentile(lat, 99), "p999": percentile(lat, 99.9), "max": lat[-1] if lat else float("nan")}


PARTS = ("total", "queue", "local", "remote", "send")


def produce_times(c: Cluster) -> dict[tuple[str, str], float]:
    """Over the three brokers, per part of a Produce request's time (``shoal_request_<part>_time_seconds``:
    total, queue, local, remote, send): the requests counted (``count``) and those that took at
    most 5 and 10 ms (``le5``, ``le10``)."""
    import urllib.request

    out = {(part, k): 0.0 for part in PARTS for k in ("count", "le5", "le10")}
    for b in c.brokers.values():
        with urllib.request.urlopen(b.overrides["shoal.metrics.listener"] + "/metrics", timeout=10) as resp:
            for line in resp.read().decode().splitlines():
                if not line.startswith("shoal_request_") or 'api="Produce"' not in line:
                    continue
                part = line[len("shoal_request_"):].split("_", 1)[0]
                if part not in PARTS:
                    continue
                value = float(line.rsplit(" ", 1)[1])
                if "_seconds_count" in line:
                    out[(part, "count")] += value
                elif 'le="0.005"' in line:
                    out[(part, "le5")] += value
                elif 'le="0.01"' in line:
                    out[(part, "le10")] += value
    return out


def latency_phase(c: Cluster, args: argparse.Namespace) -> None:
    print(f"\n== acks=all latency, plain librdkafka producer (idempotent, linger.ms 1), {args.rate}/s of "
          f"{args.size} B, RF=3 min ISR 2, {args.latency_seconds:.0f} s each ==", flush=True)
    every = c.bootstrap()
    out: dict[str, list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        for pacer in ("poll", "burst"):
            load = os.getloadavg()[0]
            pids = {n: b.proc.pid for n, b in c.brokers.items() if b.proc is not None}
            pids["client"] = os.getpid()
            before = {n: sum(user_sys(pid)) for n, pid in pids.items()}
            spies = []
            if args.profile and r == 0:
                args.profile.mkdir(parents=True, exist_ok=True)
                spies = [subprocess.Popen(["py-spy", "record", "--nonblocking", "-r", "200", "-d",
                                           str(int(args.latency_seconds)), "-f", "raw", "-o",
                                           str(args.profile / f"b{b}-lat-{pacer}.txt"), "-p", str(pids[b])],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for b in (1,)]
            times0 = produce_times(c)
            res = latency_run(every, "lat-rf3", args.rate, args.latency_seconds, args.size, pacer)
            times = {k: v - times0[k] for k, v in produce_times(c).items()}
            for s in spies:
                s.wait(60)
            cpu = {n: (sum(user_sys(pid)) - before[n]) * 1e6 / max(1, res["n"]) for n, pid in pids.items()}
            out.setdefault(pacer, []).append(res)
            print(f"  round {r + 1} paced by {pacer:5s}: p50 {res['p50']:.1f}  p99 {res['p99']:.1f}  p99.9 "
                  f"{res['p999']:.1f}  max {res['max']:.0f} ms  ({res['n']} acked at {res['rate']:.0f}/s, "
                  f"{res['errors']} errors; load {load:.1f} -> {os.getloadavg()[0]:.1f}); broker CPU per record "
                  + " / ".join(f"{n if isinstance(n, str) else f'b{n}'} {cpu[n]:.0f}" for n in sorted(cpu, key=str)) + " us", flush=True)
            n = max(1.0, times[("total", "count")])
            print(f"      in the brokers: {n:.0f} Produce requests; over 5 / 10 ms: " + ", ".join(
                f"{part} {1 - times[(part, 'le5')] / n:.1%} / {1 - times[(part, 'le10')] / n:.1%}" for part in PARTS),
                flush=True)
    for pacer, rs in out.items():
        print(f"  {pacer}: p99 per round " + ", ".join(f"{x['p99']:.1f}" for x in rs)
              + f" ms (target < 10 ms: {sum(x['p99'] < 10 for x in rs)} of {len(rs)})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--latency-seconds", type=float, default=20)
    ap.add_argument("--phases", default="cpu,latency")
    ap.add_argument("--etcd-members", type=int, default=1)
    ap.add_argument("--profile", type=Path, default=None,
                    help="py-spy the leader and a follower during the first RF=3 round (bench client), and broker 1 "
                         "during the first latency round of each pacer, into this directory (collapsed stacks; "
                         "py-spy's own sampling adds CPU to those rounds)")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' and etcd's directories (logs)")
    ap.add_argument("--override", action="append", default=[], metavar="K=V", help="a broker config (repeatable)")
    args = ap.parse_args()
    phases = set(args.phases.split(","))
    work = Path(tempfile.mkdtemp(prefix="bench-follower-"))
    etcd = EtcdCluster(work / "etcd", size=args.etcd_members)
    etcd.start()
    extra = dict(o.split("=", 1) for o in args.override)
    c = Cluster(work / "cluster", etcd.url("/bench"), overrides=extra)
    for b in c.brokers.values():  # the harness shortens it for tests; a benchmark runs the default
        b.overrides.pop("broker.session.timeout.ms", None)
        b.overrides.setdefault("shoal.metrics.listener", f"http://127.0.0.1:{free_port()}")
        b.overrides.setdefault("log.retention.check.interval.ms", "2000")  # with RETENTION: the disk stays bounded
    try:
        c.start()
        boot = c[1].bootstrap
        print(f"3 brokers on a {args.etcd_members}-member etcd; {args.size}-byte records; pids "
              + ", ".join(f"b{n} {b.proc.pid}" for n, b in c.brokers.items() if b.proc is not None), flush=True)
        create(boot, "cpu-rf3", [[1, 2, 3]] * PARTITIONS, {"min.insync.replicas": "2", **RETENTION})
        create(boot, "cpu-rf1", [[1]] * PARTITIONS, RETENTION)
        create(boot, "lat-rf3", None, {"min.insync.replicas": "2", **RETENTION})
        until(lambda: isr_whole(boot, "cpu-rf3", 3) and isr_whole(boot, "lat-rf3", 3) and isr_whole(boot, "cpu-rf1", 1),
              60)
        if "cpu" in phases:
            cpu_phase(c, args)
        if "latency" in phases:
            latency_phase(c, args)
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        c.close()
        etcd.close()
        if args.keep:
            print(f"kept {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
