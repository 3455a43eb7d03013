#!/usr/bin/env python3
"""Screenshots of the console's tenant administration pages (usage and bill, users, namespaces)
for docs/console.md (docs/console/usage*.png, users.png, namespaces.png).

These pages call the admin API in process, so they are taken from the console a broker serves on
its admin listener (``/ui/``): one ``shoal serve`` with tenants ``a`` and ``b``
(tests/e2e/tenancy_fixtures.py), tenant a's administrator ``ann``, a few users and namespaces made
through the pages' own forms, a tenant quota that throttles a burst of produce; the usage page
first from the live counters, then from metering tables written where ``shoal.metering.tables.dir``
points (the shape ``shoal metering run`` writes: a month of hourly rows and its billing row).

Run:  PYTHONPATH=$PWD python bench/console_screenshots_tenant_admin.py [--out docs/console]
"""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "console"))
sys.path.insert(0, str(REPO / "bench"))

from console_harness import ADMIN, ADMIN_PASSWORD, Browser, chromium  # noqa: E402
from console_screenshots import WIDTH, login, shoot  # noqa: E402
from tenancy_fixtures import tenant_cluster  # noqa: E402

USER, PASSWORD = "ann", "ann-secret"
GB = 10**9


def tables(out: Path, tenant: str) -> None:
    """A month so far of hourly usage and its bill, as the pipeline writes them (rate card:
    0.10/GB in, 0.05/GB out, 0.0015/partition-hour, 0.10/GB-month)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    now = dt.datetime.now(dt.timezone.utc).replace(minute=0, second=0, microsecond=0)
    start = now.replace(day=1, hour=0)
    rows = []
    hour = start
    i = 0
    while hour < now:
        load = 1 + (i % 24 in range(8, 20))  # busier by day
        rows.append({"tenant": tenant, "hour_start": hour, "hour_end": hour + dt.timedelta(hours=1),
                     "bytes_in": 180_000_000 * load, "messages_in": 210_000 * load, "bytes_out": 410_000_000 * load,
                     "requests": 52_000 * load, "request_time_us": 31_000_000 * load,
                     "throttle_time_ms": 2_400 if i % 37 == 5 else 0, "throttled_requests": 6 if i % 37 == 5 else 0,
                     "partition_hours": 12.0, "gb_months_stored": 0.0118 / 24, "peak_connections": 9, "records": 360})
        hour += dt.timedelta(hours=1)
        i += 1
    (out / "hourly_usage").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), out / "hourly_usage" / "part-0.parquet")
    gb_in = sum(r["bytes_in"] for r in rows) / GB
    gb_out = sum(r["bytes_out"] for r in rows) / GB
    ph = sum(r["partition_hours"] for r in rows)
    gbm = sum(r["gb_months_stored"] for r in rows)
    cost = {"cost_in": gb_in * 0.10, "cost_out": gb_out * 0.05, "cost_partitions": ph * 0.0015,
            "cost_storage": gbm * 0.10}
    (out / "billing").mkdir()
    pq.write_table(pa.Table.from_pylist([{"tenant": tenant, "month": now.strftime("%Y-%m"), "gb_in": gb_in,
                                          "gb_out": gb_out, "partition_hours": ph, "gb_months_stored": gbm, **cost,
                                          "total": sum(cost.values()), "currency": "USD"}]),
                   out / "billing" / "part-0.parquet")


def seed(cluster, base: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    a = cluster.a
    ann = Browser(base)
    ann.login(USER, PASSWORD)
    for name in ("billing-svc", "shop-web", "analytics"):
        ann.post("users", {"user": name, "password": f"{name}-pw-1", "password2": f"{name}-pw-1"})
    ann.post("users", {"user": "ops-lead", "password": "ops-lead-pw", "password2": "ops-lead-pw", "admin": "on"})
    for ns in ("payments:eu", "payments:us", "shop", "shop:checkout"):
        ann.post("namespaces", {"namespace": ns})
    status, _ = cluster.broker.http("PATCH", f"/v1/tenants/{a.tenant_id}/namespaces/payments/configs",
                                    {"set": {"retention.ms": "604800000", "min.insync.replicas": "1"}})
    assert status == 200, status
    admin = AdminClient(a.conf(USER))
    for f in admin.create_topics([NewTopic(t, 3, 1) for t in ("payments:eu:orders", "payments:eu:refunds",
                                                               "shop:checkout:carts")]).values():
        f.result(15)
    for args in (("--tenant", a.tenant_id, "--add-config", "producer_byte_rate=250000,consumer_byte_rate=1000000"),
                 ("--tenant", a.tenant_id, "--user", f"{a.tenant_id}_billing-svc", "--add-config",
                  "producer_byte_rate=100000")):
        out = subprocess.run([sys.executable, "-m", "shoal", "quotas", "alter", *args, "--bootstrap-server",
                              cluster.broker.bootstrap], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            print(f"  (quota {args}: {out.stderr.strip()})")
    p = Producer({**a.conf(USER), "acks": "all", "linger.ms": 5})
    for i in range(400):
        p.produce("payments:eu:orders", b'{"order": %d, "amount": 12.5}' % i + b" " * 2000, b"o%d" % i)
    assert p.flush(60) == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "docs" / "console"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    usage_dir = Path(tempfile.mkdtemp(prefix="shoal-usage-"))
    gen = tenant_cluster({"shoal.sasl.bootstrap.users": f"{ADMIN}:{ADMIN_PASSWORD}",
                          "super.users": f"User:ANONYMOUS;User:{ADMIN}", "shoal.metering.tables.dir": str(usage_dir)})
    cluster = next(gen)
    cluster.a.add_user(USER, PASSWORD, admin=True)
    base = cluster.broker.admin_url + "/ui/"
    driver = chromium(WIDTH, 900)
    try:
        seed(cluster, base)
        login(driver, base, USER, PASSWORD)
        shoot(driver, base + "usage", out / "usage-live.png")
        shoot(driver, base + "users", out / "users.png")
        shoot(driver, base + "namespaces", out / "namespaces.png")
        tables(usage_dir, cluster.a.tenant_id)
        shoot(driver, base + "usage", out / "usage.png")
    finally:
        driver.quit()
        for _ in gen:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
