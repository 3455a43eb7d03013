"""Several broker processes per host (issue 29, part 2): aggregate produce and consume throughput and
broker CPU per MB against N, for ``shoal serve --processes N``.

    python bench/bench_processes.py [--processes 1,2] [--rounds 2] [--seconds 10] [--size 1024]
                                    [--partitions-per-process 4] [--clients-per-process 1]

On a 16-core machine, the same script up to N = 16 (leave cores for the clients: with one producer
and one consumer process per broker, N brokers and N clients share the cores)::

    python bench/bench_processes.py --processes 1,2,4,8 --rounds 3
    python bench/bench_processes.py --processes 1,2,4,8,16 --clients-per-process 1 --rounds 2

Starts a real one-member etcd on loopback (tests/etcd_cluster.py; one member, to leave the cores to
the brokers) and, for each N of each round (rounds interleave the N's, so a change in the machine's
load hits all alike), one supervisor ``python -m shoal serve --processes N`` on a fresh etcd prefix
and data directory: nodes 1..N, ports P..P+N-1, log dirs ``<dir>/p<i>``. Then, as
bench_cluster_throughput.py does:

1. a topic of N x ``--partitions-per-process`` partitions, RF 1 (the planner spreads the leaders
   evenly over the N brokers);
2. produce: N x ``--clients-per-process`` confluent-kafka producer processes, started together,
   each writing ``--size``-byte records to the partitions of one broker (bootstrapping to it) for
   ``--seconds``, then flushing (acks=all, linger.ms=5). Throughput = acknowledged records / (last
   flush - common start);
3. consume: as many consumer processes, each reading the same partitions from offset 0 to the high
   watermark.

Broker CPU is the user+sys time of the supervisor and its children over each phase, per MB moved.
The table gives each N's mean throughput, its scaling ratio (throughput(N) / throughput(1)) and
the issue's target, 0.8 x N; the cores the brokers used while producing (below N: something else
held them back, the clients or the machine) and the cores busy in all, since on a small machine the
clients take cores the brokers would use. The ratio measures the brokers only when the brokers are
the bottleneck: raise ``--clients-per-process`` until one broker's cores reach ~1 at N = 1.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(HERE)]

from _util import descendants, render_table  # noqa: E402
from bench_cluster_throughput import consume_worker, create, leaders, produce_worker, run_phase  # noqa: E402
from broker_process import api_versions_ok, free_port  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402


def port_run(n: int) -> int:
    """A port P with P .. P+n-1 all free."""
    for _ in range(200):
        p = free_port()
        ok = True
        for i in range(1, n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p + i))
                except OSError:
                    ok = False
                    break
        if ok:
            return p
    raise RuntimeError(f"no {n} consecutive free ports")


class Supervised:
    """``shoal serve --processes N`` on its own etcd prefix and directory."""

    def __init__(self, work: Path, url: str, n: int) -> None:
        self.n, self.port = n, port_run(n)
        work.mkdir(parents=True, exist_ok=True)
        self.log = open(work / "supervisor.log", "ab")
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shoal", "serve", "--processes", str(n), "--node-id", "1",
             "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}", "--log-dirs", str(work / "data"),
             "-o", f"shoal.metadata.store={url}", "-o", "shoal.balancer.enable=false",
             "-o", "shoal.metering.enable=false", "--log-level", "WARNING"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while not all(api_versions_ok("127.0.0.1", self.port + i, 1.0) for i in range(n)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"supervisor of {n} did not start: see {work / 'supervisor.log'}")
            time.sleep(0.2)

    def bootstrap(self, node: int) -> str:
        return f"127.0.0.1:{self.port + node - 1}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()


def measure(s: Supervised, topic: str, args) -> dict[str, float]:
    n = s.n
    create(s.bootstrap(1), topic, n * args.partitions_per_process)
    lead = leaders(s.bootstrap(1), topic)
    by_broker: dict[int, list[int]] = {}
    for p, b in sorted(lead.items()):
        by_broker.setdefault(b, []).append(p)
    groups = []
    for b, parts in sorted(by_broker.items()):
        k = args.clients_per_process
        groups += [(s.bootstrap(b), parts[j::k]) for j in range(k) if parts[j::k]]
    broker_pids = descendants(s.proc.pid)
    out: dict[str, float] = {}
    for phase, target, jobs in (
        ("produce", produce_worker, [(b, topic, parts, args.seconds, args.size) for b, parts in groups]),
        ("consume", consume_worker, [(b, topic, parts) for b, parts in groups]),
    ):
        records, wall, b_cpu, client_cpu, others = run_phase(target, jobs, broker_pids)
        mb = records * args.size / 1e6
        busy = (b_cpu + client_cpu + others) / wall
        out[f"{phase} MB/s"] = mb / wall
        out[f"{phase} cpu/MB"] = b_cpu / max(mb, 1e-9)
        out[f"{phase} busy"] = busy
        out[f"{phase} broker cores"] = b_cpu / wall
        print(f"  N={n} {phase}: {records:>9,} records in {wall:5.1f} s = {mb / wall:6.1f} MB/s; broker CPU "
              f"{b_cpu:5.1f} s ({b_cpu / max(mb, 1e-9) * 1000:.1f} ms/MB), clients {client_cpu:5.1f} s, rest of "
              f"machine {others:5.1f} s; {busy:.2f} of {os.cpu_count()} cores busy", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", default="1,2", help="the N's to measure, comma-separated (default 1,2)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10.0, help="produce time per N and round")
    ap.add_argument("--size", type=int, default=1024, help="record value bytes")
    ap.add_argument("--partitions-per-process", type=int, default=4)
    ap.add_argument("--clients-per-process", type=int, default=1, help="producer (and consumer) processes per broker")
    args = ap.parse_args()
    ns = [int(x) for x in args.processes.split(",")]
    if 1 not in ns:
        ns = [1, *ns]  # the ratio's base
    work = Path(tempfile.mkdtemp(prefix="bench-processes-"))
    etcd = EtcdCluster(work / "etcd", size=1)
    etcd.start()
    load0 = os.getloadavg()
    print(f"load average {load0[0]:.1f} / {load0[1]:.1f} / {load0[2]:.1f} on {os.cpu_count()} cores at the start; "
          f"N in {ns}, {args.partitions_per_process} partitions RF 1 and {args.clients_per_process} producer + "
          f"consumer process(es) per broker, {args.size}-byte records, produce {args.seconds:.0f} s", flush=True)
    results: dict[int, list[dict[str, float]]] = {n: [] for n in ns}
    try:
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}", flush=True)
            for n in ns:
                s = Supervised(work / f"r{rnd}-n{n}", etcd.url(f"/procs-{uuid.uuid4().hex[:8]}"), n)
                try:
                    results[n].append(measure(s, f"procs-{n}-{rnd}", args))
                finally:
                    s.stop()
    finally:
        etcd.close()
    mean = {n: {k: sum(r[k] for r in rs) / len(rs) for k in rs[0]} for n, rs in results.items()}
    base = mean[1]
    rows = []
    for n in ns:
        m = mean[n]
        rows.append([str(n), f"{m['produce MB/s']:.1f}", f"{m['produce MB/s'] / base['produce MB/s']:.2f}",
                     f"{m['consume MB/s']:.1f}", f"{m['consume MB/s'] / base['consume MB/s']:.2f}", f"{0.8 * n:.1f}",
                     f"{m['produce cpu/MB'] * 1000:.1f}", f"{m['consume cpu/MB'] * 1000:.1f}",
                     f"{m['produce broker cores']:.2f}", f"{m['produce busy']:.2f}"])
    print()
    print(render_table(["N", "produce MB/s", "ratio", "consume MB/s", "ratio", "target", "broker CPU ms/MB produce",
                        "consume", "broker cores (produce)", "all cores busy"], rows, "rrrrrrrrrr"))
    load1 = os.getloadavg()
    print(f"\nmean of {args.rounds} rounds; ratio = throughput(N) / throughput(1), target >= 0.8 x N; "
          f"load average {load1[0]:.1f} at the end on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
