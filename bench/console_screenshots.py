#!/usr/bin/env python3
"""Screenshots of the Shoal Console's pages for docs/console.md (docs/console/*.png), in headless
Debian chromium (Selenium, Debian's chromedriver) at 1280 px wide, as tall as the page. Three sets
(``--only`` takes one; all three by default):

- ``tenant``: what tests/console uses (tests/console/console_harness.py: one ``shoal serve`` with
  tenants ``a`` and ``b`` and a super user, the console under /ui/); tenant ``a`` gets a few
  topics with records (JSON values, headers), a consumer group with lag and one with a live
  member, ACLs; the billing group's page after a minute of its lag falling (its plot).
- ``tenant-admin``: the usage and bill, users and namespaces pages (usage*.png, users.png,
  namespaces.png). They call the admin API in process, so they are taken from the console a
  broker serves on its admin listener: tenant a's administrator ``ann``, a few users and
  namespaces made through the pages' own forms, a tenant quota that throttles a burst of
  produce; the usage page first from the live counters, then from metering tables written where
  ``shoal.metering.tables.dir`` points (the shape ``shoal metering run`` writes: a month of
  hourly rows and its billing row).
- ``operator``: the operator's pages on three brokers on etcd, one of them then killed.

Run:  PYTHONPATH=$PWD python bench/console_screenshots.py [--out docs/console] [--only tenant|tenant-admin|operator]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "console"))

from console_harness import ADMIN, chromium, console_cluster  # noqa: E402

WIDTH = 1280
USER, PASSWORD = "ann", "ann-secret"  # tenant a's administrator
GB = 10**9


def acls(base: str) -> None:
    """A few ACLs of tenant a, added through the console's own form."""
    from console_harness import Browser

    b = Browser(base)
    b.login(USER, PASSWORD)
    for principal, op, rt, pattern, name in (("User:billing-svc", "READ", "TOPIC", "LITERAL", "orders"),
                                             ("User:billing-svc", "READ", "GROUP", "LITERAL", "billing"),
                                             ("User:shop-web", "WRITE", "TOPIC", "PREFIXED", "orders"),
                                             ("User:shop-web", "IDEMPOTENT_WRITE", "CLUSTER", "LITERAL", "")):
        b.post("acls", {"permission": "ALLOW", "principal": principal, "operation": op, "resource_type": rt,
                        "pattern_type": pattern, "resource_name": name})


def seed(conf: dict) -> object:
    """Topics, records and groups of tenant a; the live consumer (close it at the end)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf)
    topics = [NewTopic("orders", 6, 1, config={"retention.ms": str(3 * 86_400_000)}),
              NewTopic("payments", 3, 1), NewTopic("customers", 2, 1, config={"cleanup.policy": "compact"}),
              NewTopic("audit-log", 1, 1, config={"retention.ms": "-1"})]
    for f in admin.create_topics(topics).values():
        f.result(15)
    p = Producer({**conf, "acks": "all", "linger.ms": 5})
    for i in range(600):
        order = {"order_id": 1000 + i, "customer": f"c-{i % 37}", "items": [{"sku": "kelp-2kg", "qty": 1 + i % 3}],
                 "total": round(9.5 + (i % 7) * 3.25, 2), "currency": "EUR"}
        p.produce("orders", json.dumps(order).encode(), f"c-{i % 37}".encode(), partition=i % 6,
                  headers=[("source", b"web"), ("trace-id", f"{i:08x}".encode())])
        if i % 3 == 0:
            p.produce("payments", json.dumps({"order_id": 1000 + i, "status": "captured"}).encode(),
                      str(1000 + i).encode(), partition=i % 3)
    for i in range(37):
        p.produce("customers", json.dumps({"name": f"Customer {i}", "tier": "gold" if i % 5 == 0 else "standard"}).encode(),
                  f"c-{i}".encode(), partition=i % 2)
    p.produce("audit-log", b"\x00\x01binary\xff", b"evt-1", partition=0)
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": "billing", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("orders", i, 0) for i in range(6)])
        c.commit(offsets=[TopicPartition("orders", i, 60 + 7 * i) for i in range(6)], asynchronous=False)
    finally:
        c.close()
    live = Consumer({**conf, "group.id": "shipping", "auto.offset.reset": "earliest", "client.id": "shipping-svc"})
    live.subscribe(["orders", "payments"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not live.assignment():
        live.poll(0.2)
    read = 0
    while time.monotonic() < deadline and read < 500:
        read += live.poll(0.2) is not None
    live.commit(asynchronous=False)
    return live


def shoot(driver, url: str, path: Path) -> None:
    """The whole page at WIDTH css px: the window made as tall as the page (plus the window's own
    decorations, which headless chromium counts in the window's size)."""
    driver.set_window_size(WIDTH, 600)
    driver.get(url)
    time.sleep(0.3)
    height, extra = driver.execute_script(
        "return [document.documentElement.scrollHeight, window.outerHeight - window.innerHeight]")
    driver.set_window_size(WIDTH, min(int(height) + int(extra), 2600))
    time.sleep(0.2)
    driver.save_screenshot(str(path))
    print(f"  {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")


def watch_lag_fall(driver, base: str, conf: dict, seconds: float) -> None:
    """Open the billing group's page (its lag is sampled from then on, every 0.5 s here), then
    commit its offsets forward bit by bit for ``seconds``, so its plot shows the lag falling."""
    from confluent_kafka import Consumer, TopicPartition

    driver.get(base + "groups/billing")
    c = Consumer({**conf, "group.id": "billing", "enable.auto.commit": False})
    try:
        steps = max(1, int(seconds / 3))
        for step in range(1, steps + 1):
            time.sleep(seconds / steps)
            c.commit(offsets=[TopicPartition("orders", i, 60 + 7 * i + (40 - 7 * i) * step // (steps + 2))
                              for i in range(6)], asynchronous=False)
    finally:
        c.close()
    time.sleep(1)


def login(driver, base: str, user: str, password: str) -> None:
    from selenium.webdriver.common.by import By

    driver.delete_all_cookies()
    driver.get(base + "login")
    driver.find_element(By.ID, "user").send_keys(user)
    driver.find_element(By.ID, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    time.sleep(0.3)


PLACEMENT = {"version": 1, "replicas": [{"count": 1, "constraints": {"rack": "dc1"}},
                                        {"count": 1, "constraints": {"rack": "dc2"}}],
             "observers": [{"count": 1, "constraints": {"rack": "dc3"}}]}


def operator_pages(out: Path) -> None:
    """The operator's pages on a 3-broker cluster on etcd (see the module's docstring)."""
    import asyncio
    import tempfile

    sys.path.insert(0, str(REPO / "tests"))
    from cluster_harness import Cluster
    from confluent_kafka import Producer
    from console_harness import ADMIN_PASSWORD, ConsoleServer
    from etcd_cluster import EtcdCluster
    from tenancy_fixtures import Tenant

    from shoal.client import AdminClient

    work = Path(tempfile.mkdtemp(prefix="shoal-console-shots-"))
    etcd = EtcdCluster(work / "etcd", size=1)
    etcd.start()
    cluster = Cluster(work / "cluster", etcd.url("/shots"), size=3, overrides={
        "shoal.sasl.bootstrap.users": f"{ADMIN}:{ADMIN_PASSWORD}", "super.users": f"User:ANONYMOUS;User:{ADMIN}",
        "shoal.balancer.enable": "true", "shoal.balancer.load.interval.ms": "1000",
        "shoal.balancer.capacity.disk.bytes": str(20 << 30),
        "shoal.balancer.capacity.network.in.bytes.per.second": str(2 << 20),
        "shoal.balancer.capacity.network.out.bytes.per.second": str(4 << 20)})
    from broker_process import free_port

    for b in cluster.brokers.values():
        b.overrides["shoal.metrics.listener"] = f"http://127.0.0.1:{free_port()}"
    server = None
    driver = chromium(WIDTH, 900)
    try:
        cluster.start()
        tenants = []
        for name, user in (("Acme Retail", "acme-app"), ("Globex Logistics", "globex-app")):
            status, body = cluster[1].http("POST", "/v1/tenants", {"display_name": name})
            assert status == 201, body
            t = Tenant(cluster[1], body["tenant_id"])
            t.add_user(user)
            tenants.append(t)
        acme, globex = tenants
        cluster[1].http("PATCH", f"/v1/tenants/{globex.tenant_id}/configs",
                        {"set": {"shoal.tenant.cell.racks": "dc1,dc2"}})

        async def operator_setup() -> None:
            async with AdminClient(cluster.bootstrap(1)) as c:
                await c.alter_client_quotas([([("tenant", acme.tenant_id)], {"producer_byte_rate": 256 << 10,
                                                                              "consumer_byte_rate": 2 << 20})])
                await c.create_topics([{"name": "replicated", "num_partitions": 3, "replication_factor": 3},
                                       {"name": "placed", "num_partitions": 2, "replication_factor": -1,
                                        "configs": {"replica.placement": json.dumps(PLACEMENT),
                                                    "min.insync.replicas": "2"}}])

        asyncio.run(operator_setup())
        for t, topics, rf in ((acme, ("orders", "payments", "clicks"), 3), (globex, ("shipments",), 2)):
            conf = t.conf()
            from confluent_kafka.admin import AdminClient as KAdmin, NewTopic
            kadmin = KAdmin(conf)
            for f in kadmin.create_topics([NewTopic(n, 3, rf) for n in topics]).values():
                f.result(15)
            p = Producer({**conf, "linger.ms": 5})
            deadline = time.monotonic() + 4
            i = 0
            while time.monotonic() < deadline and i < 3000:
                p.produce(topics[i % len(topics) if i % 4 else 0], b"x" * 400, str(i).encode())
                i += 1
                if i % 200 == 0:
                    p.poll(0)
                    time.sleep(0.02)
            assert p.flush(60) == 0
        server = ConsoleServer(cluster[1].sasl_bootstrap, frozenset({ADMIN}), admin_url=cluster[1].admin_url)
        server.start()
        base = server.url
        login(driver, base, ADMIN, ADMIN_PASSWORD)
        time.sleep(2)  # a load report with the traffic above
        shoot(driver, base + "operator", out / "operator.png")
        shoot(driver, base + "operator/tenants", out / "operator-tenants.png")
        shoot(driver, base + "operator/regions", out / "operator-regions.png")
        shoot(driver, base + "operator/balancer", out / "operator-balancer.png")
        cluster.kill(3)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            driver.get(base + "operator")
            if driver.find_element("id", "under-replicated-count").text != "0" and \
                    "offline" in driver.find_element("css selector", '#brokers tr[data-broker="3"]').text:
                break
            time.sleep(1)
        shoot(driver, base + "operator", out / "operator-down.png")
    finally:
        driver.quit()
        if server is not None:
            server.stop()
        cluster.close()
        etcd.close()


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


def seed_tenant_admin(cluster, base: str) -> None:
    """Users, namespaces, topics in them, quotas and a burst of produce of tenant a, through its
    administrator's pages where there are forms."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from console_harness import Browser

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


def tenant_admin_pages(out: Path) -> None:
    """The usage, users and namespaces pages from the console a broker serves (see the module's
    docstring)."""
    from console_harness import ADMIN_PASSWORD
    from tenancy_fixtures import tenant_cluster

    usage_dir = Path(tempfile.mkdtemp(prefix="shoal-usage-"))
    gen = tenant_cluster({"shoal.sasl.bootstrap.users": f"{ADMIN}:{ADMIN_PASSWORD}",
                          "super.users": f"User:ANONYMOUS;User:{ADMIN}", "shoal.metering.tables.dir": str(usage_dir)})
    cluster = next(gen)
    cluster.a.add_user(USER, PASSWORD, admin=True)
    base = cluster.broker.admin_url + "/ui/"
    driver = chromium(WIDTH, 900)
    try:
        seed_tenant_admin(cluster, base)
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "docs" / "console"))
    ap.add_argument("--lag-seconds", type=float, default=60.0, help="how long the billing group's lag falls")
    ap.add_argument("--only", choices=("tenant", "tenant-admin", "operator"),
                    help="only the tenant's pages, its administrator's (usage, users, namespaces) or the operator's")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "operator"):
        operator_pages(out)
    if args.only in (None, "tenant-admin"):
        tenant_admin_pages(out)
    if args.only not in (None, "tenant"):
        return 0
    gen = console_cluster({"broker.rack": "eu-west-1a", "authorizer.class.name": "shoal"})
    cc = next(gen)
    cc.cluster.a.add_user(USER, PASSWORD, admin=True)  # ACLs are on: the tenant's administrator
    driver = chromium(WIDTH, 900)
    live = None
    try:
        live = seed(cc.cluster.a.conf(USER))
        acls(cc.url)
        base = cc.url
        driver.set_window_size(WIDTH, 900)
        driver.get(base + "login")
        shoot(driver, base + "login", out / "login.png")
        login(driver, base, USER, PASSWORD)
        shoot(driver, base + "topics", out / "topics.png")
        shoot(driver, base + "topics/orders", out / "topic.png")
        shoot(driver, base + "topics/orders/messages?partition=0&format=json&limit=4", out / "messages.png")
        shoot(driver, base + "groups", out / "groups.png")
        watch_lag_fall(driver, base, cc.cluster.a.conf(USER), args.lag_seconds)
        shoot(driver, base + "groups/billing", out / "group.png")
        shoot(driver, base + "groups/shipping", out / "group-live.png")
        shoot(driver, base + "acls", out / "acls.png")
    finally:
        if live is not None:
            live.close()
        driver.quit()
        for _ in gen:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
