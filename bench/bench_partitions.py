"""Thousands of partitions per broker (issue 25): what idle partitions cost, and whether a restarted
broker comes back.

    python bench/bench_partitions.py [--partitions 2000,6000,10000] [--per-topic 100]
        [--restart-timeout 300] [--idle-seconds 20] [--settle 10] [--metadata-samples 5] [--keep]

For each size, a fresh cluster on this machine: a real three-member etcd (tests/etcd_cluster.py)
and three broker processes on it (tests/cluster_harness.py: racks dc1-dc3; the broker's default
9 s session, not the harness's 3 s, unless ``--session-ms``), each with its Prometheus endpoint
(``shoal.metrics.listener``). Then, in order:

1. **create**: ``size / --per-topic`` topics of ``--per-topic`` partitions at RF 3 (CreateTopics,
   eight at a time, spread over the brokers): the time until every create is answered, until
   Metadata lists every partition with a leader and its whole ISR (the image's: full from a
   partition's creation), and until every broker hosts all its partitions (``shoal_replica_partitions``:
   their logs made, which a broker may do after the create is answered);
2. **idle**: after ``--settle`` s, each broker's RSS (``VmRSS``) and its CPU over ``--idle-seconds``
   (``/proc/PID/stat`` deltas, percent of one core; target at 6,000: under 5%), and etcd's;
3. **full Metadata**: ``--metadata-samples`` Metadata requests naming no topic (all of them) to one
   broker, the median and max time to the decoded answer (this client's decoding included), and
   the mean time each spent on the broker's thread (``shoal_request_local_time_seconds``: the
   rest is its wait behind the broker's other work);
4. **leader kill -9**: a broker that is not the controller is killed; the time until the
   controller logs that it moved the leaderships (its log line's time) and until Metadata (polled
   through a live broker: no finer than a full Metadata's answer) names no partition led by it;
5. **restart after kill -9**, then **controlled restart** (SIGTERM, start) of the same broker: the
   time from its start to every partition's ISR full again (target at 6,000: under 60 s; polled
   every second, the count printed every 10 s), with the CPU of the controller, of the restarted
   broker and of etcd (its three members summed) from the restarted broker's first answer to the
   end, the restarted broker's
   event-loop lag (``shoal_event_loop_lag_max_seconds``, since its start) and the other brokers'
   (the largest histogram bucket that counted a measurement during the window).

In every phase the brokers' logs are read for leases lost (``registered again under a new lease``,
target: none) and for the controller moving leaderships because it took a broker for gone
(``brokers gone: [..]``): during a rejoin every broker is alive, so any such move is a leadership
moved off a live broker (target: none). Each number is printed with its ratio to the issue's target
or, where the issue set none, to what the issue measured before (its table). The machine's load
average is printed before and after each size: the numbers mean little without it on a shared
2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE.parent / "tests" / "e2e"), str(HERE)]

from _util import cpu_seconds  # noqa: E402
from broker_process import free_port  # noqa: E402
from cluster_harness import LEASE_LOST, Cluster, leadership_moves, started_at, until  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402

from shoal.client import AdminClient, TopicDescription  # noqa: E402

# What the issue measured before (its table) and its targets; per size where it gave one.
ISSUE_BEFORE = {
    "create_s": {2000: 1.1, 6000: 7.5},
    "rss_mb": {2000: 73.0, 6000: 100.0},
    "idle_cpu_pct": {2000: 28.0, 6000: 50.0},
    "leaders_moved_s": {2000: 0.41, 6000: 0.35},
    "rejoin_s": {2000: 24.0},
}
TARGET_IDLE_CPU_PCT = 5.0  # per broker, at 6,000 partitions
TARGET_REJOIN_S = 60.0  # to every ISR full, at 6,000 partitions


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) {five:.2f} (5 min) on {os.cpu_count()} cores"


def ratio(value: float, key: str, size: int, target: float | None = None) -> str:
    """``value`` against the target (when there is one) or the issue's measurement at ``size``."""
    if target is not None:
        return f"{value / target:.2f}x the target ({target:g})"
    before = ISSUE_BEFORE.get(key, {}).get(size)
    return f"{value / before:.2f}x the issue's {before:g}" if before else "the issue has no number at this size"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Window:
    """CPU seconds of some processes between ``__init__`` and ``pct()``, as percent of one core."""

    def __init__(self, pids: dict[str, list[int]]) -> None:
        self.pids = pids
        self.t0 = time.monotonic()
        self.cpu0 = {k: cpu_seconds(v) for k, v in pids.items()}

    def pct(self) -> dict[str, float]:
        dt = time.monotonic() - self.t0
        return {k: 100 * (cpu_seconds(v) - self.cpu0[k]) / dt for k, v in self.pids.items()}


def metrics(url: str, prefix: str = "shoal_event_loop_lag") -> dict[str, float]:
    """The broker's /metrics lines starting with ``prefix``, as {name{labels}: value}; empty when
    the broker does not answer within 30 s (its loop saturated: the 6,000-partition rejoin's did
    not within 10 s), which the lines printed say."""
    out = {}
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
            text = r.read().decode()
    except OSError as e:
        print(f"    (/metrics of {url} unanswered: {e!r})")
        return out
    for line in text.splitlines():
        if line.startswith(prefix):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def metadata_local(url: str) -> tuple[float, float]:
    """(seconds, requests) of Metadata's local time on the broker's thread (its handler and
    encoding, not the wait for its turn) since it started."""
    m = metrics(url, "shoal_request_local_time_seconds_")
    return (m.get('shoal_request_local_time_seconds_sum{api="Metadata"}', 0.0),
            m.get('shoal_request_local_time_seconds_count{api="Metadata"}', 0.0))


def lag_buckets(url: str) -> dict[float, float]:
    """The cumulative counts of ``shoal_event_loop_lag_seconds`` by bucket bound (+Inf: inf)."""
    return {float(k.split('le="')[1].split('"')[0]): v for k, v in metrics(url).items()
            if k.startswith("shoal_event_loop_lag_seconds_bucket")}


def lag_during(before: dict[float, float], after: dict[float, float]) -> str:
    """The window's worst lag, as the smallest bucket bound that counted every measurement made
    between the two readings of the cumulative counts."""
    if not before or not after:
        return "unknown (/metrics unanswered)"
    new = {le: after[le] - before.get(le, 0) for le in sorted(after)}
    total = new.get(float("inf"), 0)
    if not total:
        return "no measurement"
    top = next(le for le, n in new.items() if n >= total)
    if top == float("inf"):  # above the largest bound
        return f"> {max(le for le in new if le != top):g} s"
    return f"<= {top:g} s"


class Bench:
    def __init__(self, size: int, per_topic: int, work: Path, session_ms: int | None = None) -> None:
        self.size, self.per_topic, self.session_ms = size, per_topic, session_ms
        self.etcd = EtcdCluster(work / "etcd")
        self.work = work
        self.cluster: Cluster | None = None
        self.topics = [f"p{i:04d}" for i in range(size // per_topic)]
        self.marks: dict[int, int] = {}

    # -- the cluster ----------------------------------------------------------------------------

    def start(self) -> None:
        self.etcd.start()
        self.cluster = Cluster(self.work, self.etcd.url("/bench"))
        for b in self.cluster.brokers.values():
            b.metrics_url = f"http://127.0.0.1:{free_port()}"
            b.overrides["shoal.metrics.listener"] = b.metrics_url
            # the harness shortens the session for tests; the benchmark uses the broker's default
            if self.session_ms is None:
                b.overrides.pop("broker.session.timeout.ms", None)
            else:
                b.overrides["broker.session.timeout.ms"] = str(self.session_ms)
        self.cluster.start()

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
        self.etcd.close()

    def etcd_pids(self) -> list[int]:
        return [m.proc.pid for m in self.etcd.members if m.proc is not None]

    def run(self, coro: Any) -> Any:
        return asyncio.run(coro)

    async def _metadata(self, node: int) -> dict[str, TopicDescription]:
        async with AdminClient(self.cluster[node].bootstrap, timeout=60) as c:
            md = await c.metadata(self.topics)
        return {n: t for n, t in md.topics.items() if isinstance(t, TopicDescription)}

    def partitions(self, node: int) -> list[Any]:
        return [p for t in self.run(self._metadata(node)).values() for p in t.partitions]

    def isr_full(self, node: int) -> int:
        """Partitions with a leader and every replica in the ISR, as broker ``node`` says."""
        return sum(1 for p in self.partitions(node) if p.leader >= 0 and len(p.isr) == len(p.replicas))

    # -- logs -----------------------------------------------------------------------------------

    def mark_logs(self) -> None:
        self.marks = self.cluster.log_marks()

    def log_events(self, alive: set[int], restarted: int | None = None) -> tuple[int, list[str]]:
        """(leases lost, leadership moves off a broker in ``alive``) since the mark; the
        ``restarted`` broker counts as alive once it logged that it started (before, it is the
        dead process's registration the controller moves partitions off: a topic created
        meanwhile, the metering's, may name it)."""
        logs = self.cluster.logs_since(self.marks)
        up = started_at(logs[restarted], restarted) if restarted is not None else None
        lost, moved = 0, []
        for n, text in logs.items():
            lost += text.count(LEASE_LOST)
            moved += [f"broker {n}: {count} moved (gone: {sorted(gone)})" for when, count, gone in leadership_moves(text)
                      if gone & (alive - {restarted}) or (restarted in gone and (up is None or when >= up))]
        return lost, moved

    # -- phases ---------------------------------------------------------------------------------

    def hosted(self, node: int) -> int:
        """Partitions ``node`` hosts (``shoal_replica_partitions``: their logs made, -1 unanswered)."""
        return int(metrics(self.cluster[node].metrics_url, "shoal_replica_partitions ").get("shoal_replica_partitions", -1))

    def create(self) -> tuple[float, float, float]:
        """(seconds to every CreateTopics answered, to every ISR full, to every broker hosting
        every partition: its log made; the image's ISR is full from a partition's creation, the
        brokers make the logs after). A create answered
        REQUEST_TIMED_OUT (its etcd transaction unanswered in time: at 8,500 partitions a loop
        saturated by follower fetches read etcd's answers too late) may or may not have been
        made: it is sent again, as a client would, and TOPIC_ALREADY_EXISTS then means done;
        ``self.create_retries`` counts them."""
        from shoal.client import KafkaError

        self.create_retries = 0

        async def go() -> float:
            nodes = list(self.cluster.brokers)
            clients = [AdminClient(self.cluster[n].bootstrap, timeout=120) for n in nodes]
            for c in clients:
                await c.connect()
            sem = asyncio.Semaphore(8)

            async def one(i: int, name: str) -> None:
                async with sem:
                    for attempt in range(5):
                        try:
                            await clients[i % len(clients)].create_topics(
                                [{"name": name, "num_partitions": self.per_topic, "replication_factor": 3}])
                            return
                        except KafkaError as e:
                            if attempt and e.code_name == "TOPIC_ALREADY_EXISTS":
                                return
                            if e.code_name != "REQUEST_TIMED_OUT" or attempt == 4:
                                raise
                            self.create_retries += 1

            t0 = time.monotonic()
            await asyncio.gather(*(one(i, n) for i, n in enumerate(self.topics)))
            elapsed = time.monotonic() - t0
            for c in clients:
                await c.close()
            return elapsed

        before = {n: self.hosted(n) for n in self.cluster.brokers}  # internal topics' partitions
        t0 = time.monotonic()
        answered = self.run(go())
        until(lambda: self.isr_full(1) == self.size, 600, "every partition led, its ISR full")
        full = time.monotonic() - t0
        until(lambda: all(self.hosted(n) >= before[n] + self.size for n in self.cluster.brokers), 600,
              "every log made")
        return answered, full, time.monotonic() - t0

    def full_metadata(self, node: int, samples: int) -> list[float]:
        async def go() -> list[float]:
            out = []
            async with AdminClient(self.cluster[node].bootstrap, timeout=60) as c:
                for _ in range(samples):
                    t0 = time.perf_counter()
                    md = await c.metadata(None)
                    out.append(time.perf_counter() - t0)
                    assert sum(len(t.partitions) for t in md.topics.values()
                               if isinstance(t, TopicDescription)) >= self.size
            return out

        return self.run(go())

    def leaders_moved(self, victim: int, via: int) -> tuple[float, float | None]:
        """kill -9 ``victim``; seconds until Metadata through ``via`` names no leader on it (as
        fine as a full Metadata is fast), and until the controller logged the move (None: no
        such line)."""
        wall, t0 = time.time(), time.monotonic()
        self.cluster.kill(victim)
        until(lambda: not any(p.leader == victim for p in self.partitions(via)), 120, f"no leader on {victim}")
        seen = time.monotonic() - t0
        logged = [when - wall for text in self.cluster.logs_since(self.marks).values()
                  for when, _n, gone in leadership_moves(text) if victim in gone]
        return seen, min(logged, default=None)

    def rejoin(self, node: int, via: int, timeout: float) -> dict[str, Any]:
        """Start ``node`` (stopped or killed); until every ISR is full again through ``via``."""
        others = [n for n in self.cluster.brokers if n != node]
        controller = self.cluster.describe(via)["controller_id"]
        before = {n: lag_buckets(self.cluster[n].metrics_url) for n in others}
        self.mark_logs()
        t0 = time.monotonic()
        self.cluster.start_one(node)
        started = time.monotonic() - t0
        win = Window({"controller": [self.cluster[controller].proc.pid], "restarted": [self.cluster[node].proc.pid],
                      "etcd": self.etcd_pids()})
        full, last_print, progress = 0, t0, []
        while time.monotonic() - t0 < timeout:
            try:
                full = self.isr_full(via)
            except Exception as e:  # a broker busy past the client's timeout: not yet
                print(f"    ({time.monotonic() - t0:.0f} s: Metadata failed: {e!r})")
            if full == self.size:
                break
            if time.monotonic() - last_print >= 10:
                last_print = time.monotonic()
                progress.append(full)
                print(f"    {last_print - t0:.0f} s: {full} of {self.size} ISR full")
            time.sleep(1.0)
        elapsed = time.monotonic() - t0
        cpu = win.pct()
        lost, moved = self.log_events(set(self.cluster.brokers), node)
        lag_restarted = metrics(self.cluster[node].metrics_url).get("shoal_event_loop_lag_max_seconds", -1)
        lag_others = {n: lag_during(before[n], lag_buckets(self.cluster[n].metrics_url)) for n in others}
        return {"done": full == self.size, "seconds": elapsed, "start_s": started, "full": full,
                "cpu": cpu, "controller": controller, "lost": lost, "moved": moved,
                "lag_restarted": lag_restarted, "lag_others": lag_others, "progress": progress}


def report_rejoin(size: int, how: str, r: dict[str, Any], timeout: float) -> None:
    target = TARGET_REJOIN_S if size >= 6000 else None
    if r["done"]:
        print(f"  restart ({how}) to every ISR full: {r['seconds']:.1f} s "
              f"({ratio(r['seconds'], 'rejoin_s', size, target)}; the process answered after {r['start_s']:.1f} s)")
    else:
        print(f"  restart ({how}) to every ISR full: NOT within {timeout:.0f} s ({r['full']} of {size} full; "
              f"every 10 s: {r['progress']})")
    c = r["cpu"]
    print(f"    CPU during it: controller (broker {r['controller']}) {c['controller']:.0f}%, restarted broker "
          f"{c['restarted']:.0f}%, etcd (3 members) {c['etcd']:.0f}% of a core")
    print(f"    event-loop lag: restarted broker max {r['lag_restarted']:.3f} s; others "
          + ", ".join(f"broker {n} {v}" for n, v in r["lag_others"].items()))
    print(f"    leases lost: {r['lost']} (target 0); leaderships moved off a live broker: {len(r['moved'])} (target 0)"
          + "".join(f"\n      {m}" for m in r["moved"][:5]))


def one_size(size: int, args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"bench-partitions-{size}-"))
    print(f"\n== {size} partitions (topics of {args.per_topic}, RF 3), three brokers, 3-member etcd; {load()}")
    b = Bench(size, args.per_topic, work, args.session_ms)
    try:
        b.start()
        b.mark_logs()
        answered, all_full, hosted = b.create()
        print(f"  create: {answered:.1f} s to every answer ({ratio(answered, 'create_s', size)}), "
              f"{all_full:.1f} s to every ISR full, {hosted:.1f} s to every broker hosting all its partitions; "
              f"{b.create_retries} CreateTopics sent again after REQUEST_TIMED_OUT")

        time.sleep(args.settle)
        pids = {n: [br.proc.pid] for n, br in b.cluster.brokers.items()}
        win = Window({**{str(n): p for n, p in pids.items()}, "etcd": b.etcd_pids()})
        time.sleep(args.idle_seconds)
        cpu = win.pct()
        target = TARGET_IDLE_CPU_PCT if size >= 6000 else None
        for n in pids:
            print(f"  broker {n}: RSS {rss_mb(pids[n][0]):.0f} MB ({ratio(rss_mb(pids[n][0]), 'rss_mb', size)}), "
                  f"idle CPU {cpu[str(n)]:.1f}% of a core ({ratio(cpu[str(n)], 'idle_cpu_pct', size, target)})")
        print(f"  etcd idle CPU (3 members): {cpu['etcd']:.1f}% of a core")

        s0, n0 = metadata_local(b.cluster[1].metrics_url)
        md = b.full_metadata(1, args.metadata_samples)
        s1, n1 = metadata_local(b.cluster[1].metrics_url)
        print(f"  full Metadata ({size} partitions): median {statistics.median(md) * 1000:.0f} ms, "
              f"max {max(md) * 1000:.0f} ms to the answer; on the broker's thread "
              f"{(s1 - s0) / max(n1 - n0, 1) * 1000:.1f} ms each (the issue has no number)")

        controller = b.cluster.describe(1)["controller_id"]
        victim = max(n for n in b.cluster.brokers if n != controller)
        via = next(n for n in b.cluster.brokers if n not in (victim,))
        b.mark_logs()
        moved, logged = b.leaders_moved(victim, via)
        lost, off_live = b.log_events(set(b.cluster.brokers) - {victim})
        controller_s = f"{logged:.2f} s" if logged is not None else "no line"
        print(f"  kill -9 of broker {victim} (controller: {controller}): the controller moved its leaderships "
              f"{controller_s} after the kill ({ratio(logged or 0, 'leaders_moved_s', size)}), Metadata showed "
              f"all of them moved after {moved:.2f} s (a poll is a full Metadata); leases lost {lost}, moves off "
              f"a live broker {len(off_live)}")

        r = b.rejoin(victim, via, args.restart_timeout)
        report_rejoin(size, "after kill -9", r, args.restart_timeout)
        if r["done"]:
            b.cluster.stop(victim)
            r = b.rejoin(victim, via, args.restart_timeout)
            report_rejoin(size, "controlled, SIGTERM", r, args.restart_timeout)
        print(f"  after: {load()}")
    finally:
        b.close()
        if args.keep:
            print(f"  logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", default="2000,6000,10000", help="sizes, comma-separated")
    ap.add_argument("--per-topic", type=int, default=100)
    ap.add_argument("--restart-timeout", type=float, default=300.0)
    ap.add_argument("--idle-seconds", type=float, default=20.0)
    ap.add_argument("--settle", type=float, default=10.0, help="seconds between the creation and the idle window")
    ap.add_argument("--metadata-samples", type=int, default=5)
    ap.add_argument("--session-ms", type=int, default=None,
                    help="broker.session.timeout.ms (default: the broker's, 9 s; the tests' harness uses 3 s)")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' logs and data")
    args = ap.parse_args()
    sizes: list[int] = [int(s) for s in args.partitions.split(",") if s]
    for size in sizes:
        one_size(size, args)


if __name__ == "__main__":
    main()
