"""The operator's pages (brokers, tenants, regions, the balancer) on a 3-broker cluster on etcd
(tests/cluster_harness.py, racks dc1..dc3), the console logged in through broker 1 only and calling
broker 1's admin API as the user: what a super user sees, what a tenant's user gets of them
(nothing: 404 for every page and every form, nothing created or changed), creating a tenant and
its first administrator (who then logs in), and the operator's day in headless chromium: three
brokers, then one killed and its partitions under-replicated on the self-refreshing brokers page.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest
import requests

from cluster_harness import running_cluster
from console_harness import ADMIN, ADMIN_PASSWORD, Browser, ConsoleServer, tenant_console, chromium
from tenancy_fixtures import Tenant

from shoal.client import OP_DELETE, OP_SET, RESOURCE_BROKER, AdminClient

pytestmark = pytest.mark.timeout(180)

PLACEMENT = {"version": 1, "replicas": [{"count": 1, "constraints": {"rack": "dc1"}},
                                        {"count": 1, "constraints": {"rack": "dc2"}}],
             "observers": [{"count": 1, "constraints": {"rack": "dc3"}}]}
PAGES = ["operator", "operator?refresh=1", "operator/tenants", "operator/regions", "operator/balancer"]


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "console-operator", size=3, metrics=True,
                         overrides={"shoal.sasl.bootstrap.users": f"{ADMIN}:{ADMIN_PASSWORD}",
                                    "super.users": f"User:ANONYMOUS;User:{ADMIN}",
                                    "shoal.balancer.load.interval.ms": "1000",
                                    # /metrics for super users only: the console reads it as the user
                                    "shoal.metrics.authentication": "basic",
                                    "shoal.balancer.capacity.network.in.bytes.per.second": "10000000",
                                    "shoal.balancer.capacity.network.out.bytes.per.second": "20000000"}) as c:
        yield c


async def _topics(bootstrap: str) -> None:
    async with AdminClient(bootstrap) as c:  # PLAINTEXT: the operator (User:ANONYMOUS)
        await c.create_topics([{"name": "moving", "assignments": {0: [1]},
                                "configs": {"leader.replication.throttled.replicas": "*",
                                            "follower.replication.throttled.replicas": "*"}},
                               {"name": "orders", "num_partitions": 3, "replication_factor": 3},
                               {"name": "placed", "num_partitions": 2, "replication_factor": -1,
                                "configs": {"replica.placement": json.dumps(PLACEMENT), "min.insync.replicas": "2"}}])


@pytest.fixture(scope="module")
def console(cluster):
    asyncio.run(_topics(cluster.bootstrap(1)))
    with tenant_console(cluster[1], admin_api=True) as c:
        yield c


async def _reassign(bootstrap: str, targets: dict, rate: str | None = None) -> dict:
    """Start or cancel reassignments, with broker 1's leader replication throttle at ``rate``
    (bytes/s; None: removed)."""
    async with AdminClient(bootstrap) as c:
        await c.incremental_alter_configs({(RESOURCE_BROKER, "1"): [
            ("leader.replication.throttled.rate", OP_SET if rate else OP_DELETE, rate)]}, node_id=1)
        return await c.alter_partition_reassignments(targets)


def _login(server: ConsoleServer, user: str, password: str) -> Browser:
    b = Browser(server.url)
    assert b.login(user, password).status_code == 200
    return b


def _table(page: str, table_id: str) -> str:
    return page.split(f'id="{table_id}"')[1].split("</table>")[0]


def _until(check, timeout: float = 20.0, what: str = "") -> object:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_a_tenant_gets_none_of_the_operators_pages_or_forms(cluster, console):
    server, tenant = console
    alice = _login(server, "alice", tenant.users["alice"])
    for path in PAGES:
        r = alice.get(path)
        assert r.status_code == 404, (path, r.status_code)
        for secret in ("dc1", "orders", "Tenant A", tenant.tenant_id, "127.0.0.1"):
            assert secret not in r.text, (path, secret)
    before = cluster[1].http("GET", "/v1/tenants")[1]["tenants"]
    for path, data in [("operator/tenants", {"display_name": "by-alice", "admin_user": "mallory", "admin_password": "x"}),
                       ("operator/balancer/pause", {}), ("operator/balancer/resume", {})]:
        r = alice.post(path, data, allow_redirects=False)
        assert r.status_code == 404, (path, r.status_code)
    assert cluster[1].http("GET", "/v1/tenants")[1]["tenants"] == before  # nothing made
    assert cluster[1].http("GET", "/v1/cluster/balancer")[1]["paused"] is False
    topics = alice.get("topics").text
    assert "Brokers</a>" not in topics and "operator" not in topics  # no link to them either


def test_the_operators_pages_carry_the_csp_and_no_inline_script_or_style(cluster, console):
    admin = _login(console[0], ADMIN, ADMIN_PASSWORD)
    for path in PAGES:
        r = admin.get(path)
        assert r.status_code == 200, (path, r.status_code)
        assert "default-src 'self'" in r.headers["Content-Security-Policy"]
        assert not re.search(r"<script(?![^>]*\bsrc=)", r.text), f"inline script on {path}"
        assert not re.search(r"<style|\sstyle=|\son[a-z]+=", r.text), f"inline style or handler on {path}"
        assert "Physical" not in r.text and "placeholder" not in r.text


def test_the_brokers_page(cluster, console):
    server, _tenant = console
    admin = _login(server, ADMIN, ADMIN_PASSWORD)
    assert admin.get("", allow_redirects=False).headers["Location"].endswith("/ui/operator")
    page = admin.get("operator").text
    rows = re.findall(r'<tr data-broker="(\d)">\s*<td class="num">\d</td>\s*<td>([^<]*)</td>\s*<td class="num">(\d+)</td>'
                      r'\s*<td>(dc\d)</td>', _table(page, "brokers"))
    assert [(n, rack) for n, _h, _p, rack in rows] == [("1", "dc1"), ("2", "dc2"), ("3", "dc3")], rows
    assert all(h and int(p) == cluster[int(n)].port or int(p) > 0 for n, h, p, _r in rows)
    controller = cluster.wait_controller()
    brokers = _table(page, "brokers")
    assert brokers.count("controller</span>") == 1
    assert re.search(rf'data-broker="{controller}">(?:(?!</tr>).)*controller</span>', brokers, re.S)
    # leaders and replicas per broker, as Metadata has them (orders: 3 x RF 3; placed: 2 x 3)
    counts = [(int(a), int(b)) for a, b in
              re.findall(r'<td class="num">(\d+)</td>\s*<td class="num nowrap">(\d+)(?: <span|</td>)', brokers)]
    leaders, replicas = [a for a, _ in counts], [b for _, b in counts]
    assert len(counts) == 3, brokers
    assert sum(replicas) >= 15 and sum(leaders) >= 5, (leaders, replicas)
    assert 'id="under-replicated-count">0<' in page and 'id="offline-count">0<' in page
    assert "orders" in _table(page, "physical-topics") and "placed" in _table(page, "physical-topics")
    # utilization against the capacity each broker reports (its load report, GET /v1/cluster/load)
    page = _until(lambda: (p := admin.get("operator").text).count('class="meter') >= 6 and p, 15, "load reports")
    assert "Utilization not available" not in page


def test_tenants_page_and_creating_a_tenant_with_its_administrator(cluster, console):
    server, tenant = console
    admin = _login(server, ADMIN, ADMIN_PASSWORD)
    page = admin.get("operator/tenants").text
    row = _table(page, "tenants")
    assert tenant.tenant_id in row and "Tenant A" in row and "any broker" in row
    # refused forms: no CSRF token (403), a missing password (400, nothing made)
    r = admin.post("operator/tenants", {"display_name": "Tenant C", "admin_user": "carol", "admin_password": "p"},
                   csrf=False, allow_redirects=False)
    assert r.status_code == 403
    r = admin.post("operator/tenants", {"display_name": "Tenant C", "admin_user": "carol", "admin_password": ""})
    assert r.status_code == 400 and 'value="carol"' in r.text
    assert all(t["display_name"] != "Tenant C" for t in cluster[1].http("GET", "/v1/tenants")[1]["tenants"])
    r = admin.post("operator/tenants", {"display_name": "Tenant C", "admin_user": "carol",
                                        "admin_password": "carol-secret-1"})
    assert r.status_code == 200, r.text[-1500:]
    m = re.search(r"Tenant (lkc-[0-9a-z]{6}) \(Tenant C\) created, with its administrator carol\.", r.text)
    assert m, r.text[-1500:]
    assert "carol-secret-1" not in r.text
    made = cluster[1].http("GET", f"/v1/tenants/{m.group(1)}")[1]
    assert made["users"] == ["carol"] and made["admins"] == ["carol"]
    r = admin.post("operator/tenants", {"display_name": "Tenant D", "admin_user": "carol", "admin_password": "pw-2"})
    assert r.status_code == 400 and re.search(r"Partly done: tenant lkc-[0-9a-z]{6} \(Tenant D\) was created, but not "
                                              r"its administrator carol: ", r.text), r.text[-1500:]
    assert "pw-2" not in r.text
    carol = _login(server, "carol", "carol-secret-1")  # the new administrator logs in to its tenant
    assert carol.get("operator").status_code == 404
    assert carol.post("topics", {"name": "first", "partitions": "1"}).status_code == 200
    assert f"{m.group(1)}_first" in admin.get("operator").text


async def _tenant_quota(bootstrap: str, tenant_id: str, rate: float) -> None:
    async with AdminClient(bootstrap) as c:
        await c.alter_client_quotas([([("tenant", tenant_id)], {"producer_byte_rate": rate})])


def test_a_tenant_over_its_quota_shows_its_quota_and_throttle_time(cluster, console):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient as KafkaAdmin, NewTopic

    server, tenant = console
    asyncio.run(_tenant_quota(cluster.bootstrap(1), tenant.tenant_id, 20_000))
    conf = tenant.conf("alice")
    kadmin = KafkaAdmin(conf)
    for f in kadmin.create_topics([NewTopic("busy", 1, 1)]).values():
        f.result(15)
    p = Producer({**conf, "linger.ms": 5})
    for i in range(300):  # 300 KB at 20 KB/s: throttled
        p.produce("busy", b"x" * 1000)
        p.poll(0)
    assert p.flush(30) == 0
    admin = _login(server, ADMIN, ADMIN_PASSWORD)
    row = _table(admin.get("operator/tenants").text, "tenants").split(f'data-tenant="{tenant.tenant_id}"')[1]
    row = row.split("</tr>")[0]
    assert "producer_byte_rate = 19.5 KiB/s" in row
    throttled = re.search(r'class="small nowrap throttle"><div class="bad">produce (\d+) ms</div>', row)
    assert throttled and int(throttled.group(1)) > 0, row
    # read as the logged-in super user: /metrics refuses a request without its credentials
    anonymous = requests.get(cluster[1].overrides["shoal.metrics.listener"] + "/metrics", timeout=10)
    assert anonymous.status_code == 401


def test_regions_page_placement_and_datacenter_loss(cluster, console):
    server, _tenant = console
    admin = _login(server, ADMIN, ADMIN_PASSWORD)
    page = admin.get("operator/regions").text
    dcs = _table(page, "datacenters")
    assert re.findall(r"<td>(dc\d)</td><td>(\d)</td>", dcs) == [("dc1", "1"), ("dc2", "2"), ("dc3", "3")]
    placements = _table(page, "placements")
    orders = placements.split('data-topic="orders"')[1].split("</tr>")[0]
    assert "dc1: 1, dc2: 1, dc3: 1" in orders
    for dc in ("dc1", "dc2", "dc3"):  # RF 3, min ISR 1: any datacenter may go
        assert re.search(rf'data-dc="{dc}"><span class="ok">read ✓</span> · <span class="ok">produce ✓</span>', orders)
    placed = placements.split('data-topic="placed"')[1].split("</tr>")[0]
    assert "dc1: 1, dc2: 1" in placed and "dc3: 1" in placed  # two sync replicas, an observer in dc3
    # min ISR 2 of 2 sync replicas: losing dc1 or dc2 stops acks=all; dc3 holds only the observer
    assert re.search(r'data-dc="dc1"><span class="ok">read ✓</span> · <span class="bad">produce ✗</span>', placed)
    assert re.search(r'data-dc="dc3"><span class="ok">read ✓</span> · <span class="ok">produce ✓</span>', placed)
    observers = _table(page, "observers")
    assert len(re.findall(r'<td class="mono">placed</td>', observers)) == 2


def test_balancer_page(cluster, console):
    server, _tenant = console
    admin = _login(server, ADMIN, ADMIN_PASSWORD)
    page = admin.get("operator/balancer").text
    assert re.search(r"<dt>Enabled</dt><dd>no</dd>", page) and re.search(r"<dt>Paused</dt><dd>no</dd>", page)
    assert 'id="no-reassignments"' in page
    # a reassignment held back by a replication throttle is in flight: the page lists it
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap(1)})
    for _ in range(200):
        p.produce("moving", b"m" * 2000, partition=0)
    assert p.flush(15) == 0
    assert asyncio.run(_reassign(cluster.bootstrap(1), {("moving", 0): [1, 2]}, "1000")) == {("moving", 0): None}
    try:
        row = _table(admin.get("operator/balancer").text, "reassignments").split("<tbody>")[1]
        assert re.search(r'<td class="mono">moving</td><td class="num">0</td><td>1, 2</td><td>2</td><td>—</td>', row), row
    finally:
        assert asyncio.run(_reassign(cluster.bootstrap(1), {("moving", 0): None})) == {("moving", 0): None}
    r = admin.post("operator/balancer/pause", {})
    assert "Balancer paused." in r.text and re.search(r"<dt>Paused</dt><dd>yes</dd>", r.text)
    assert cluster[1].http("GET", "/v1/cluster/balancer")[1]["paused"] is True
    r = admin.post("operator/balancer/resume", {})
    assert "Balancer resumed." in r.text and cluster[1].http("GET", "/v1/cluster/balancer")[1]["paused"] is False


def test_the_console_the_broker_serves_calls_its_admin_api_in_process(cluster, console):
    """The console on broker 2's admin listener (/ui/, shoal.console.enable): its operator pages
    read tenants, load and the balancer through the admin API's handlers in process."""
    _server, tenant = console
    mounted = Browser(cluster[2].admin_url + "/ui/")
    assert mounted.login(ADMIN, ADMIN_PASSWORD).url.endswith("/ui/operator")
    assert tenant.tenant_id in _table(mounted.get("operator/tenants").text, "tenants")
    assert re.search(r"<dt>Enabled</dt><dd>no</dd>", mounted.get("operator/balancer").text)
    page = _until(lambda: (p := mounted.get("operator").text).count('class="meter') >= 6 and p, 15, "load reports")
    assert 'id="load-error"' not in page
    alice = Browser(cluster[2].admin_url + "/ui/")
    assert alice.login("alice", tenant.users["alice"]).url.endswith("/ui/topics")
    assert all(alice.get(path).status_code == 404 for path in PAGES)


def test_the_operators_day_in_a_browser_a_broker_goes_down(cluster, console):
    """Last in the module: it kills broker 3."""
    from selenium.webdriver.common.by import By

    server, _tenant = console
    driver = chromium(fail=pytest.fail)
    try:
        driver.get(server.url + "login")
        driver.find_element(By.ID, "user").send_keys(ADMIN)
        driver.find_element(By.ID, "password").send_keys(ADMIN_PASSWORD)
        driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
        _until(lambda: driver.find_elements(By.ID, "brokers"), 10, "the brokers page")
        rows = driver.find_elements(By.CSS_SELECTOR, "#brokers tbody tr")
        assert [r.get_attribute("data-broker") for r in rows] == ["1", "2", "3"]
        assert driver.find_element(By.ID, "under-replicated-count").text == "0"
        driver.find_element(By.ID, "auto-refresh").click()  # the page reloads itself every 5 s
        cluster.kill(3)

        def down() -> bool:
            try:
                count = driver.find_element(By.ID, "under-replicated-count").text
                state = driver.find_element(By.CSS_SELECTOR, '#brokers tr[data-broker="3"]').text
            except Exception:  # the page is being reloaded
                return False
            return count not in ("0", "") and "offline" in state

        _until(down, 25, "broker 3 offline and its partitions under-replicated")
        urp = driver.find_element(By.ID, "under-replicated").text
        assert "orders" in urp
        assert "dc3" in driver.find_element(By.CSS_SELECTOR, '#brokers tr[data-broker="3"]').text  # as last seen
        assert "orders" in driver.find_element(By.ID, "isr-changes").text  # the ISR shrinks the console saw
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        driver.quit()
