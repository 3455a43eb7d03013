"""The balancer with real brokers under load (issue 27's benchmark): a hot spot balanced, a broker
removed under load, a broker lost for good healed; with the checker for lost, duplicated and
misordered records.

    python bench/bench_balancer.py [--rate 2000] [--throttle 4000000] [--heal-ms 8000]

Starts a real three-member etcd and four real brokers (tests/cluster_harness.py; racks dc1, dc2,
dc3, dc4), the balancer on with the ANY_UNEVEN_LOAD trigger, load reported every second over a
10 s window. Idempotent acks=all producers (confluent-kafka) write numbered 1 KiB records all the
time, to a topic "hot" whose 6 partitions broker 1 leads (60% of the bytes in) and a topic "cold"
of 12 partitions spread over the brokers (40%); a consumer reads everything at the end and the
checker counts lost (acknowledged, never read), duplicated (read twice) and misordered (a
partition's values out of order) records.

1. **Hot spot:** until the largest broker's leader bytes in over the mean is at most 1.15 (the
   issue's bar), from `shoal cluster load`; the time it took, and the largest replication rate
   out of any broker seen meanwhile against the throttle.
2. **Remove a broker under load:** `shoal cluster remove-broker 4 --wait`; the drain time against
   the bytes broker 4 held / the throttle.
3. **Heal:** broker 4's removal cancelled (it serves again), then kill -9 broker 3 (threshold
   ``--heal-ms``); the time until every partition has 3 in-sync replicas and none on broker 3.

Prints each step's numbers and the producers' non-retriable errors (the issue: none).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "bench")]

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from cluster_harness import Cluster  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402

BAR = 1.15
VALUE = b"x" * 1000


def shoal(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shoal", *args], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


class Writer(threading.Thread):
    """An idempotent acks=all producer writing ``rate`` records a second to ``topic``, each value
    a sequence number (per writer) and padding; keeps what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str, rate: int, name: str) -> None:
        super().__init__(daemon=True)
        self.p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                           "linger.ms": 5, "log_level": 2})
        self.topic, self.rate, self.name = topic, rate, name
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def _done(self, err, msg) -> None:
        if err is None:
            self.acked.append(msg.value()[:24])
        else:
            self.errors.append(str(err))

    def run(self) -> None:
        i, t0 = 0, time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while i < due:
                key = f"{self.name}-{i:09d}".encode()
                self.p.produce(self.topic, key.ljust(24) + VALUE, key=key[:8], on_delivery=self._done)
                i += 1
            self.p.poll(0.01)
        self.p.flush(120)


def load(admin_url: str) -> dict:
    r = shoal("cluster", "load", "--output", "json", "--admin-url", admin_url)
    if r.returncode:
        raise RuntimeError(r.stderr)
    return json.loads(r.stdout)


def leader_in_spread(doc: dict) -> tuple[float, dict[int, float]]:
    by: dict[int, float] = {}
    for p in doc.get("partitions", []):
        if p["topic"] in ("hot", "cold"):
            by[p["leader"]] = by.get(p["leader"], 0.0) + p["bytes_in_per_second"]
    live = [b["node_id"] for b in doc.get("brokers", [])]
    vals = [by.get(b, 0.0) for b in live]
    mean = sum(vals) / len(vals) if vals else 0.0
    return (max(vals) / mean if mean else 0.0), by


def replication_rates(doc: dict) -> dict[int, float]:
    return {b["node_id"]: b["replication_bytes_out_per_second"] for b in doc.get("brokers", [])}


def partitions(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], tuple[int, list[int], list[int]]]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15)
    return {(t, p.id): (p.leader, list(p.replicas), list(p.isrs)) for t in topics if t in md.topics
            for p in md.topics[t].partitions.values()}


def check(bootstrap: str, writers: list[Writer], topics: dict[str, int]) -> tuple[int, int, int, int]:
    """(acked, lost, duplicated, misordered) over everything the writers had acknowledged."""
    acked = {v for w in writers for v in w.acked}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "log_level": 2})
    c.assign([TopicPartition(t, p, 0) for t, n in topics.items() for p in range(n)])
    seen: dict[bytes, int] = {}
    last: dict[tuple[str, int, str], int] = {}
    misordered = 0
    deadline = time.monotonic() + 180
    idle = 0
    while time.monotonic() < deadline and idle < 10:
        msgs = c.consume(2000, 1.0)
        if not msgs:
            idle += 1
            continue
        idle = 0
        for m in msgs:
            if m.error():
                continue
            v = m.value()[:24]
            seen[v] = seen.get(v, 0) + 1
            name, _, n = v.decode().strip().rpartition("-")
            k = (m.topic(), m.partition(), name)
            if int(n) < last.get(k, -1):
                misordered += 1
            last[k] = int(n)
    c.close()
    lost = len(acked - set(seen))
    dup = sum(1 for v, n in seen.items() if n > 1)
    return len(acked), lost, dup, misordered


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=2000, help="records/s in all (1 KiB each)")
    ap.add_argument("--throttle", type=int, default=4_000_000, help="shoal.balancer.throttle.bytes.per.second")
    ap.add_argument("--heal-ms", type=int, default=8000)
    ap.add_argument("--timeout", type=float, default=300.0, help="per step")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-balancer-"))
    etcd = EtcdCluster(work / "etcd")
    etcd.start()
    overrides = {"shoal.balancer.enable": "true", "shoal.balancer.interval.ms": "2000",
                 "shoal.balancer.heal.uneven.load.trigger": "ANY_UNEVEN_LOAD",
                 "shoal.balancer.heal.broker.failure.threshold.ms": str(args.heal_ms),
                 "shoal.balancer.throttle.bytes.per.second": str(args.throttle),
                 "shoal.balancer.load.interval.ms": "1000", "shoal.balancer.load.window.ms": "10000",
                 "shoal.balancer.paused": "true",  # until the load is on
                 "replica.lag.time.max.ms": "5000", "broker.session.timeout.ms": "6000"}
    c = Cluster(work, etcd.url("/balancer"), size=4, overrides=overrides)
    writers: list[Writer] = []
    try:
        c.start()
        boot = c.bootstrap(1, 2, 3)
        admin_url = c[1].admin_url
        from kafka.admin import KafkaAdminClient
        from kafka.admin import NewTopic as KNewTopic

        ka = KafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=60000)
        ka.create_topics([KNewTopic("hot", -1, -1, replica_assignments={i: [1, 2 + i % 3, 2 + (i + 1) % 3] for i in range(6)}),
                          KNewTopic("cold", 12, 3)])
        ka.close()
        topics = {"hot": 6, "cold": 12}
        writers = [Writer(boot, "hot", int(args.rate * 0.6), "h"), Writer(boot, "cold", int(args.rate * 0.4), "c")]
        for w in writers:
            w.start()
        time.sleep(15)  # a load window
        spread, by = leader_in_spread(load(admin_url))
        print(f"hot spot: leader bytes in max/mean {spread:.2f} ({ {b: round(v / 1e6, 2) for b, v in sorted(by.items())} } MB/s)")
        shoal("cluster", "balancer", "resume", "--admin-url", admin_url)
        t0 = time.monotonic()
        peak_repl = 0.0
        while time.monotonic() - t0 < args.timeout:
            doc = load(admin_url)
            spread, by = leader_in_spread(doc)
            peak_repl = max([peak_repl, *replication_rates(doc).values()])
            if spread <= BAR:
                break
            time.sleep(2)
        took = time.monotonic() - t0
        print(f"  balanced to {spread:.2f} (bar {BAR}) in {took:.1f} s; peak replication out of a broker "
              f"{peak_repl / 1e6:.2f} MB/s (throttle {args.throttle / 1e6:.2f} MB/s for moving replicas, plus the "
              f"in-sync followers' own traffic)")
        status = json.loads(shoal("cluster", "balancer", "status", "--output", "json", "--admin-url", admin_url).stdout)
        print(f"  ratio to the bar: {spread / BAR:.2f}; controller state {status['controller']['state']}")

        held = sum(p["replica_sizes"].get("4", 0) for p in load(admin_url).get("partitions", [])
                   if isinstance(p.get("replica_sizes"), dict))
        t0 = time.monotonic()
        r = shoal("cluster", "remove-broker", "4", "--wait", "--wait-timeout", str(args.timeout), "--admin-url", admin_url)
        drain = time.monotonic() - t0
        print(f"remove broker 4 under load: {'done' if r.returncode == 0 else 'NOT DONE: ' + r.stderr.strip()} in "
              f"{drain:.1f} s; it held {held / 1e6:.1f} MB; held / throttle = {held / args.throttle:.1f} s "
              f"(ratio {drain / max(held / args.throttle, 1e-9):.2f})")

        # broker 4 back in service (filled again), then broker 3 lost for good
        shoal("cluster", "remove-broker", "4", "--cancel", "--admin-url", admin_url)
        time.sleep(10)
        names = list(topics)
        t0 = time.monotonic()
        c.kill(3)
        while time.monotonic() - t0 < args.timeout + args.heal_ms / 1000:
            try:
                ps = partitions(c.bootstrap(1, 2, 4), names)
            except Exception:
                ps = {}
            if ps and all(len(reps) == 3 and 3 not in reps and sorted(isr) == sorted(reps) for _l, reps, isr in ps.values()):
                break
            if int(time.monotonic() - t0) % 20 == 0:  # what the operator sees meanwhile
                st = shoal("cluster", "balancer", "status", "--admin-url", c[1].admin_url).stdout.strip().splitlines()
                left = sum(3 in reps for _l, reps, _i in ps.values())
                print(f"  {time.monotonic() - t0:.0f} s: {left} partition(s) still list broker 3; " + " | ".join(st[1:6]))
            time.sleep(1)
        print(f"heal: kill -9 broker 3 -> every partition at 3 in-sync replicas without it in "
              f"{time.monotonic() - t0:.1f} s (threshold {args.heal_ms / 1000:g} s)")
        for w in writers:
            w.stop.set()
        for w in writers:
            w.join(180)
        acked, lost, dup, mis = check(c.bootstrap(1, 2, 4), writers, topics)
        errors = [e for w in writers for e in w.errors]
        print(f"checker: {acked} acked, {lost} lost, {dup} duplicated, {mis} misordered; producer errors: {len(errors)}"
              + (f" (first: {errors[0]})" if errors else ""))
    finally:
        for w in writers:
            w.stop.set()
        c.close()
        etcd.close()


if __name__ == "__main__":
    main()
