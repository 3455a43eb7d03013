"""Automatic expansion with real brokers under a tenant's load (issue 27's "Expand" benchmark): the
hook fires, the fourth broker takes at least 20% of the bytes in, the tenant the broker-wide
limits held back gets its quota again; the time of each step.

    python bench/bench_expansion.py [--seconds-before 30] [--timeout 180]

Starts a real three-member etcd and three real brokers of a four-broker cluster
(tests/cluster_harness.py), the balancer on (EMPTY_BROKER), load reported every second over a 5 s
window, each broker reporting a disk write capacity of ``--disk-write`` bytes/s and limiting all
tenants' produce to ``--broker-limit`` bytes/s (``shoal.broker.produce.byte.rate.limit``). One
tenant with a tenant-wide ``producer_byte_rate`` of ``--quota`` offers more than that to 12
partitions at RF 3 (confluent-kafka over SASL/SCRAM): three brokers' limits hold it below its
quota and their disk writes above 70% (headroom 0.3). The controller runs the expansion hook
(``shoal.balancer.expand.after.ms`` 10 s); the hook leaves a request and this script, as the
cloud control plane, starts broker 4 at once; the balancer fills it.

Prints: the tenant's rate before and after against its quota, the time from the load to the hook,
from the hook to broker 4 registered, from there to broker 4 taking 20% of the bytes in, and the
balancer's expansion status before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "e2e"), str(REPO / "bench")]

from bench_tenant_split import produce_paced  # noqa: E402
from broker_process import free_port  # noqa: E402
from cluster_harness import Cluster  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402


def shoal(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shoal", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def status(admin_url: str) -> dict:
    r = shoal("cluster", "balancer", "status", "--output", "json", "--admin-url", admin_url)
    return json.loads(r.stdout)["controller"] if r.returncode == 0 else {}


def bytes_in(admin_url: str) -> dict[int, float]:
    r = shoal("cluster", "load", "--output", "json", "--admin-url", admin_url)
    return {b["node_id"]: b["bytes_in_per_second"] for b in json.loads(r.stdout)["brokers"]} if r.returncode == 0 else {}


def make_tenant(c: Cluster, quota: float, topic: str, partitions: int):
    from shoal.client import AdminClient as ShoalAdmin
    from tenancy_fixtures import Tenant

    code, body = c[1].http("POST", "/v1/tenants", {"display_name": "grower"})
    assert code == 201, body
    tenant = Tenant(c[1], body["tenant_id"])
    tenant.add_user("grower")

    async def setup() -> None:
        async with ShoalAdmin(c[1].bootstrap, client_id="bench-expansion") as admin:
            await admin.alter_client_quotas([([("tenant", tenant.tenant_id)], {"producer_byte_rate": float(quota)})])
            await admin.create_topics([{"name": f"{tenant.prefix}{topic}", "num_partitions": partitions,
                                        "replication_factor": 3}])
    asyncio.run(setup())
    return tenant


def mean(xs: list[int]) -> float:
    return sum(xs) / max(1, len(xs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quota", type=int, default=900_000, help="the tenant's producer_byte_rate, bytes/s")
    ap.add_argument("--offered", type=int, default=1_100_000, help="what the tenant's producer offers, bytes/s")
    ap.add_argument("--broker-limit", type=int, default=250_000, help="shoal.broker.produce.byte.rate.limit")
    ap.add_argument("--disk-write", type=int, default=1_000_000,
                    help="shoal.balancer.capacity.disk.write.bytes.per.second of each broker")
    ap.add_argument("--seconds-before", type=int, default=30, help="at most this long before the hook is awaited")
    ap.add_argument("--seconds-after", type=int, default=20, help="the tenant's rate is measured this long after")
    ap.add_argument("--timeout", type=float, default=180.0, help="per step")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-expansion-"))
    hook = work / "expand.sh"
    hook.write_text(f'#!/bin/sh\necho "$1 $2" >> {work / "asked"}\necho "asked the control plane for $2 brokers"\n')
    hook.chmod(hook.stat().st_mode | stat.S_IEXEC)
    etcd = EtcdCluster(work / "etcd")
    etcd.start()
    overrides = {"shoal.balancer.enable": "true", "shoal.balancer.interval.ms": "2000",
                 "shoal.balancer.expand.command": str(hook), "shoal.balancer.expand.after.ms": "10000",
                 "shoal.balancer.load.interval.ms": "1000", "shoal.balancer.load.window.ms": "5000",
                 "shoal.balancer.capacity.disk.write.bytes.per.second": str(args.disk_write),
                 "shoal.balancer.throttle.bytes.per.second": "20000000",
                 "shoal.broker.produce.byte.rate.limit": str(args.broker_limit),
                 "replica.lag.time.max.ms": "5000"}
    c = Cluster(work, etcd.url("/expansion"), size=4, racks=[None] * 4, overrides=overrides)
    for b in c.brokers.values():
        b.overrides["shoal.metrics.listener"] = f"http://127.0.0.1:{free_port()}"
    stop = threading.Event()
    try:
        for n in (1, 2, 3):
            c.start_one(n)
        c.wait_brokers({1, 2, 3})
        admin_url = c[1].admin_url
        tenant = make_tenant(c, args.quota, "events", 12)
        total = args.seconds_before + args.timeout + args.seconds_after + 60
        t0 = time.monotonic() + 1.0
        out: list[int] = []
        th = threading.Thread(target=lambda: out.extend(produce_paced(
            tenant.conf(), "events", args.offered, total, t0, size=10_000, stop=stop)), daemon=True)
        th.start()
        asked = work / "asked"
        while not asked.exists() and time.monotonic() - t0 < args.seconds_before + args.timeout:
            time.sleep(0.2)
        t_hook = time.monotonic() - t0
        if not asked.exists():
            print(f"the hook never ran in {t_hook:.0f} s; status {status(admin_url).get('expansion')}")
            return
        before_status = status(admin_url).get("expansion", {})
        # the tenant's rate before: its per-second acknowledged bytes are known once the producer
        # stops, so note where the window ends
        hook_at = int(t_hook)
        print(f"hook ran {t_hook:.1f} s after the load started, asked for {asked.read_text().split()}; expansion "
              f"status: p95 utilization {before_status.get('utilization_p95')}, load {before_status.get('load_p95')} "
              f"brokers, recommended {before_status.get('recommended')}")
        t1 = time.monotonic()
        c.start_one(4)
        c.wait_brokers({1, 2, 3, 4}, timeout=args.timeout)
        t_reg = time.monotonic() - t1
        t2 = time.monotonic()
        share = 0.0
        while time.monotonic() - t2 < args.timeout:
            b = bytes_in(admin_url)
            share = b.get(4, 0.0) / max(1.0, sum(b.values()))
            if share >= 0.2:
                break
            time.sleep(1.0)
        t_fill = time.monotonic() - t2
        filled_at = int(time.monotonic() - t0)
        print(f"broker 4 registered {t_reg:.1f} s after the hook; took {share:.0%} of the bytes in "
              f"{t_fill:.1f} s later (bar 20%): {bytes_in(admin_url)}")
        time.sleep(args.seconds_after + 10)
        after_status = status(admin_url).get("expansion", {})
        after_in = bytes_in(admin_url)
        stop.set()
        th.join(60)
        before = out[max(0, hook_at - 10):hook_at]
        after = out[filled_at + 10:filled_at + 10 + args.seconds_after]
        print(f"tenant rate: {mean(before) / 1e3:.0f} kB/s before ({mean(before) / args.quota:.0%} of its quota "
              f"{args.quota / 1e3:.0f} kB/s; 3 x the broker limit {3 * args.broker_limit / 1e3:.0f} kB/s), "
              f"{mean(after) / 1e3:.0f} kB/s after ({mean(after) / args.quota:.0%})")
        print(f"bytes in per broker at the end: {after_in}")
        print(f"expansion status after: {after_status.get('state')}, p95 utilization "
              f"{after_status.get('utilization_p95')} of {after_status.get('brokers')} brokers, recommended "
              f"{after_status.get('recommended')}; hook runs: {asked.read_text().count(chr(10))}")
    finally:
        stop.set()
        c.close()
        etcd.close()


if __name__ == "__main__":
    main()
