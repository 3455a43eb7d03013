"""The tenant's usage, users and namespaces pages, and the admin API's GET /v1/tenants/{id}/usage
they read, on one broker (HTTP Basic on its admin API) whose admin listener serves the console.

Tenant A (user ``alice``, administrator ``ann``) and tenant B (``bob``, administrator ``ben``): A's
administrator gets A's usage after producing and never B's (403 for B's, over HTTP and on her
pages), the numbers grow with what she produces, the metering tables win over the live counters
once the pipeline has written them; users are created (with the password typed twice, CSRF) and
deleted, and log in; a tenant user who is no administrator gets 403 on these pages; namespaces
are listed and created, each tenant seeing its own only."""

from __future__ import annotations

import datetime as dt
import re
import time
import subprocess
import sys
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker_process import http_json
from console_harness import ADMIN, ADMIN_PASSWORD, Browser, ConsoleServer
from tenancy_fixtures import TenantBroker, tenant_cluster

TOPIC = "orders"
LAG_INTERVAL_S = 0.3  # the mounted console samples every group's lag this often (the lag plot)


class BasicAuthBroker(TenantBroker):
    """The tenants' broker with ``shoal.admin.authentication=basic``: the fixture's own calls are
    the operator's."""

    def http(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return http_json(self.admin_url, method, path, body, auth=(ADMIN, ADMIN_PASSWORD))


@pytest.fixture(scope="module")
def tc(tmp_path_factory):
    tables = tmp_path_factory.mktemp("usage-tables")
    gen = tenant_cluster({"shoal.sasl.bootstrap.users": f"{ADMIN}:{ADMIN_PASSWORD}",
                          "super.users": f"User:ANONYMOUS;User:{ADMIN}", "shoal.admin.authentication": "basic",
                          "shoal.metering.tables.dir": str(tables),
                          "shoal.console.lag.interval.ms": str(int(LAG_INTERVAL_S * 1000))},
                         broker_class=BasicAuthBroker)
    tc = next(gen)
    tc.tables = tables
    tc.a.add_user("ann", "ann-secret", admin=True)
    tc.b.add_user("ben", "ben-secret", admin=True)
    for t, user in ((tc.a, "alice"), (tc.b, "bob")):
        admin = AdminClient(t.conf(user))
        for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
            f.result(20)
    yield tc
    for _ in gen:
        pass


def usage(tc, tenant, user: str, password: str) -> tuple[int, Any]:
    return http_json(tc.broker.admin_url, "GET", f"/v1/tenants/{tenant.tenant_id}/usage", auth=(user, password))


def produce(tenant, user: str, n: int, size: int = 1000) -> None:
    p = Producer({**tenant.conf(user), "acks": "all", "linger.ms": 0})
    for i in range(n):
        p.produce(TOPIC, b"x" * size, b"k%d" % i)
    assert p.flush(20) == 0


def login(tc, user: str, password: str) -> Browser:
    b = Browser(tc.broker.admin_url + "/ui/")
    r = b.login(user, password)
    assert r.status_code == 200 and r.url.endswith("/ui/topics"), (r.status_code, r.url)
    return b


def fact(page: str, ident: str) -> str:
    m = re.search(rf'id="{ident}">([^<]*)<', page)
    assert m, ident
    return m.group(1)


def test_a_tenant_administrator_gets_its_own_usage_only(tc):
    a, b = tc.a, tc.b
    produce(a, "alice", 20)
    status, got = usage(tc, a, "ann", "ann-secret")
    assert status == 200, got
    assert got["tenant_id"] == a.tenant_id and got["source"] == "live" and got["bill"] is None
    assert got["month"] == dt.datetime.now(dt.timezone.utc).strftime("%Y-%m")
    first = got["usage"]
    assert first["messages_in"] >= 20 and first["bytes_in"] >= 20 * 1000 and first["requests"] > 0
    assert first["partitions_led"] == 1 and first["storage_bytes"] >= 20 * 1000
    # another tenant's administrator, a plain user, a wrong password: refused
    assert usage(tc, a, "ben", "ben-secret")[0] == 403
    assert usage(tc, a, "alice", a.users["alice"])[0] == 403
    assert usage(tc, a, "ann", "wrong")[0] == 401
    # B's numbers are B's: nothing of A's bytes
    status, got_b = usage(tc, b, "ben", "ben-secret")
    assert status == 200 and got_b["tenant_id"] == b.tenant_id and got_b["usage"]["bytes_in"] == 0
    # the operator: any tenant; an unknown one is a 404
    assert usage(tc, a, ADMIN, ADMIN_PASSWORD)[1]["usage"]["bytes_in"] >= first["bytes_in"]
    assert http_json(tc.broker.admin_url, "GET", "/v1/tenants/lkc-zzzzzz/usage", auth=(ADMIN, ADMIN_PASSWORD))[0] == 404
    # the numbers move with what A produces
    produce(a, "alice", 10)
    later = usage(tc, a, "ann", "ann-secret")[1]["usage"]
    assert later["messages_in"] == first["messages_in"] + 10 and later["bytes_in"] >= first["bytes_in"] + 10 * 1000
    assert usage(tc, b, "ben", "ben-secret")[1]["usage"]["bytes_in"] == 0
    # in the OpenAPI document, with its models
    doc = http_json(tc.broker.admin_url, "GET", "/openapi.json")[1]
    op = doc["paths"]["/v1/tenants/{tenant_id}/usage"]["get"]
    assert op["operationId"] == "tenantUsage" and {"200", "403", "404"} <= set(op["responses"])
    assert "TenantUsage" in doc["components"]["schemas"]


def test_the_usage_page_shows_the_tenants_numbers_and_never_anothers(tc):
    a, b = tc.a, tc.b
    produce(b, "bob", 3, size=100)
    ann, ben = login(tc, "ann", "ann-secret"), login(tc, "ben", "ben-secret")
    api = usage(tc, a, "ann", "ann-secret")[1]["usage"]
    page = ann.get("usage")
    assert page.status_code == 200 and "Content-Security-Policy" in page.headers
    assert int(fact(page.text, "messages-in").replace(",", "")) == api["messages_in"]
    assert "own counters since" in page.text and 'id="no-bill"' in page.text
    ben_page = ben.get("usage").text
    assert int(fact(ben_page, "messages-in").replace(",", "")) == 3
    assert a.tenant_id not in ben_page and b.tenant_id not in page.text
    # a plain user of the tenant: not its page
    alice = login(tc, "alice", a.users["alice"])
    r = alice.get("usage")
    assert r.status_code == 403 and "Only the tenant&#39;s administrators may see this page." in r.text
    # the operator: a tenant's page, not the physical cluster's
    op = Browser(tc.broker.admin_url + "/ui/")
    op.login(ADMIN, ADMIN_PASSWORD)
    assert op.get("usage").status_code == 404


def test_the_tenants_quotas_and_how_often_it_was_throttled(tc):
    a, b = tc.a, tc.b
    out = subprocess.run([sys.executable, "-m", "shoal", "quotas", "alter", "--tenant", b.tenant_id, "--add-config",
                          "producer_byte_rate=20000", "--bootstrap-server", tc.broker.bootstrap],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before = usage(tc, b, "ben", "ben-secret")[1]["usage"]
    assert before["throttled_requests"] == 0
    produce(b, "bob", 6, size=10_000)  # 60 kB in a moment: three seconds' worth of its quota
    status, got = usage(tc, b, "ben", "ben-secret")
    assert status == 200 and got["quotas"] == [{"entity": {"tenant": b.tenant_id},
                                                "values": {"producer_byte_rate": 20000.0}}]
    assert got["usage"]["throttled_requests"] >= 1 and got["usage"]["throttle_time_ms"] > 0
    page = login(tc, "ben", "ben-secret").get("usage").text
    assert int(fact(page, "throttled-requests")) == got["usage"]["throttled_requests"]
    assert "producer_byte_rate" in page and f"tenant={b.tenant_id}" in page
    got_a = usage(tc, a, "ann", "ann-secret")[1]
    assert got_a["quotas"] == [] and got_a["usage"]["throttled_requests"] == 0
    page_a = login(tc, "ann", "ann-secret").get("usage").text
    assert 'id="no-quotas"' in page_a and fact(page_a, "throttled-requests") == "0" and b.tenant_id not in page_a


def operator_row(tc, tenant) -> str:
    """The tenant's row on the operator's Tenants page of the console the broker serves."""
    op = Browser(tc.broker.admin_url + "/ui/")
    op.login(ADMIN, ADMIN_PASSWORD)
    r = op.get("operator/tenants")
    assert r.status_code == 200, r.text[-1500:]
    return r.text.split(f'data-tenant="{tenant.tenant_id}"')[1].split("</tr>")[0]


def month_fact(row: str, cls: str) -> str:
    m = re.search(rf'class="{cls}"(?: title="([^"]*)")?>([^<]*)<', row)
    assert m, (cls, row)
    return m.group(1) or m.group(2)


def test_the_operators_tenants_page_shows_each_tenants_usage_this_month(tc):
    """GET /v1/tenants/{id}/usage for each tenant on the page: before the pipeline has run, the
    broker's live counters (no cost); the tables' numbers and bill once written (the next test)."""
    a, b = tc.a, tc.b
    for t in (a, b):
        got = usage(tc, t, ADMIN, ADMIN_PASSWORD)[1]
        row = operator_row(tc, t)
        assert got["source"] == "live" and "live: broker" in month_fact(row, "muted month-source"), row
        assert month_fact(row, "month-in") == f"{got['usage']['bytes_in']:,} bytes"
        assert month_fact(row, "month-stored") == f"{got['usage']['storage_bytes']:,} bytes"
        assert "not priced yet" in row and 'class="month-cost"' not in row
    assert month_fact(operator_row(tc, a), "month-in") != month_fact(operator_row(tc, b), "month-in")


def test_the_metering_tables_win_over_the_live_counters(tc):
    import pyarrow as pa
    import pyarrow.parquet as pq

    a, b = tc.a, tc.b
    now = dt.datetime.now(dt.timezone.utc)
    month = now.strftime("%Y-%m")
    hour = now.replace(minute=0, second=0, microsecond=0)
    (tc.tables / "billing").mkdir()
    (tc.tables / "hourly_usage").mkdir()
    pq.write_table(pa.Table.from_pylist([
        {"tenant": a.tenant_id, "month": month, "gb_in": 2.5, "gb_out": 1.0, "partition_hours": 24.0,
         "gb_months_stored": 0.5, "cost_in": 0.25, "cost_out": 0.05, "cost_partitions": 0.24, "cost_storage": 0.05,
         "total": 0.59, "currency": "USD"},
        {"tenant": b.tenant_id, "month": month, "gb_in": 9.0, "gb_out": 9.0, "partition_hours": 9.0,
         "gb_months_stored": 9.0, "cost_in": 9.0, "cost_out": 9.0, "cost_partitions": 9.0, "cost_storage": 9.0,
         "total": 36.0, "currency": "USD"}]), tc.tables / "billing" / "part-0.parquet")
    row = {"bytes_in": 2_500_000_000, "messages_in": 1000, "bytes_out": 10**9, "requests": 50, "request_time_us": 9000,
           "throttle_time_ms": 1500, "throttled_requests": 7, "partition_hours": 24.0, "gb_months_stored": 0.5,
           "peak_connections": 4, "records": 360}
    last_month = hour.replace(day=1) - dt.timedelta(days=1)
    pq.write_table(pa.Table.from_pylist([
        {"tenant": a.tenant_id, "hour_start": hour, "hour_end": hour + dt.timedelta(hours=1), **row},
        {"tenant": a.tenant_id, "hour_start": last_month, "hour_end": last_month, **row},  # not this month
        {"tenant": b.tenant_id, "hour_start": hour, "hour_end": hour, **row, "throttled_requests": 99}]),
        tc.tables / "hourly_usage" / "part-0.parquet")
    status, got = usage(tc, a, "ann", "ann-secret")
    assert status == 200 and got["source"] == "metering", got
    assert got["bill"]["total"] == pytest.approx(0.59) and got["bill"]["currency"] == "USD"
    assert got["usage"]["bytes_in"] == 2_500_000_000 and got["usage"]["throttled_requests"] == 7
    assert got["usage"]["throttle_time_ms"] == 1500 and got["usage"]["connections"] == 4
    page = login(tc, "ann", "ann-secret").get("usage").text
    assert fact(page, "bill-total") == "0.5900" and fact(page, "throttled-requests") == "7"
    assert "36.0000" not in page and "99" not in fact(page, "throttled-requests")
    # the operator's Tenants page: each tenant's month from the tables, its bill's cost
    row_a, row_b = operator_row(tc, a), operator_row(tc, b)
    assert month_fact(row_a, "muted month-source") == "metering tables"
    assert month_fact(row_a, "month-in") == "2,500,000,000 bytes" and month_fact(row_a, "month-cost") == "0.5900 USD"
    assert month_fact(row_a, "month-stored") == "0.5000 GB-months"
    assert month_fact(row_b, "month-cost") == "36.0000 USD"


ADMIN_LINKS = ("/ui/usage", "/ui/users", "/ui/namespaces")


def nav_links(page: str) -> set[str]:
    """The console pages the nav links to."""
    nav = re.search(r"<nav>.*?</nav>", page, re.S)
    assert nav, page
    return set(re.findall(r'href="([^"]+)"', nav.group(0)))


def test_the_nav_shows_the_tenants_pages_to_its_administrators_only(tc):
    """Decided once a session (the admin API's answer as the user): a plain user of the tenant sees
    no Usage, Users or Namespaces in the nav on any page, its administrator does; the pages still
    refuse the plain user by URL, and the operator (its Tenants page) sees none of them either."""
    alice, ann = login(tc, "alice", tc.a.users["alice"]), login(tc, "ann", "ann-secret")
    for page in ("topics", "groups", "acls", "usage"):
        r = alice.get(page)
        assert not nav_links(r.text) & set(ADMIN_LINKS), (page, nav_links(r.text))
        assert "/ui/topics" in nav_links(r.text)
        assert set(ADMIN_LINKS) <= nav_links(ann.get(page).text), page
    for page in ("usage", "users", "namespaces"):
        assert alice.get(page).status_code == 403
    op = Browser(tc.broker.admin_url + "/ui/")
    op.login(ADMIN, ADMIN_PASSWORD)
    assert not nav_links(op.get("topics").text) & set(ADMIN_LINKS)


def test_a_tenant_administrator_manages_the_tenants_users(tc):
    a = tc.a
    ann = login(tc, "ann", "ann-secret")
    page = ann.get("users").text
    assert "alice" in page and "ann" in page and "bob" not in page and "ben" not in page
    r = ann.post("users", {"user": "carol", "password": "carol-secret", "password2": "carol-secret"})
    assert r.status_code == 200 and f"User {a.tenant_id}_carol created" in r.text
    assert f"{a.tenant_id}_carol" in re.search(r'id="users".*?</table>', r.text, re.S).group(0)
    carol = login(tc, f"{a.tenant_id}_carol", "carol-secret")  # she logs in under that name
    assert carol.get("users").status_code == 403  # and is no administrator
    # refused forms change nothing
    r = ann.post("users", {"user": "dave", "password": "short", "password2": "short"})
    assert "User not created" in r.text and "_dave" not in r.text
    r = ann.post("users", {"user": "dave", "password": "dave-secret", "password2": "other-secret"})
    assert "User not created" in r.text and "_dave" not in r.text
    assert ann.post("users", {"user": "dave", "password": "dave-secret", "password2": "dave-secret",
                              "csrf": "forged"}).status_code == 403
    assert "_dave" not in ann.get("users").text
    # B's administrator sees none of A's users, and cannot delete them
    ben = login(tc, "ben", "ben-secret")
    assert "carol" not in ben.get("users").text
    r = ben.post("users/delete", {"user": f"{a.tenant_id}_carol"})
    assert "User not deleted" in r.text
    assert f"{a.tenant_id}_carol" in ann.get("users").text
    r = ann.post("users/delete", {"user": f"{a.tenant_id}_carol"})
    assert f"User {a.tenant_id}_carol deleted" in r.text and "_carol" not in re.search(
        r'id="users".*?</table>', r.text, re.S).group(0)
    assert Browser(tc.broker.admin_url + "/ui/").login(f"{a.tenant_id}_carol", "carol-secret").url.endswith("/login")
    # a plain user: no users page, no form
    alice = login(tc, "alice", a.users["alice"])
    assert alice.get("users").status_code == 403
    assert alice.post("users", {"user": "eve", "password": "eve-secret1", "password2": "eve-secret1"}).status_code == 403


def test_namespaces_are_listed_and_created_per_tenant(tc):
    ann, ben = login(tc, "ann", "ann-secret"), login(tc, "ben", "ben-secret")
    r = ann.post("namespaces", {"namespace": "payments:eu"})
    assert "Namespace payments:eu created." in r.text
    rows = re.findall(r'<td class="mono">([^<]+)</td>', re.search(r'id="namespaces".*?</table>', r.text, re.S).group(0))
    assert rows == ["payments", "payments:eu"]
    r = ann.post("namespaces", {"namespace": "payments:eu"})
    assert "Namespace not created" in r.text and "already exists" in r.text
    ben_page = ben.get("namespaces").text
    assert 'id="namespaces"' not in ben_page and "No namespaces." in ben_page
    alice = login(tc, "alice", tc.a.users["alice"])
    assert alice.get("namespaces").status_code == 403


def test_the_pages_need_a_session_and_their_forms_a_csrf_token(tc):
    anon = Browser(tc.broker.admin_url + "/ui/")
    for page in ("usage", "users", "namespaces"):
        r = anon.get(page, allow_redirects=False)
        assert r.status_code == 303 and "/ui/login" in r.headers["Location"]
    ann = login(tc, "ann", "ann-secret")
    for path, fields in (("users", {"user": "x", "password": "x-secret-1", "password2": "x-secret-1"}),
                         ("users/delete", {"user": "alice"}), ("namespaces", {"namespace": "forged"})):
        assert ann.post(path, fields, csrf=False).status_code == 403
        assert anon.post(path, fields, csrf=False, allow_redirects=False).status_code in (303, 403)
    assert "alice" in ann.get("users").text and "forged" not in ann.get("namespaces").text
    for page in ("usage", "users", "namespaces"):
        r = ann.get(page)
        assert r.status_code == 200 and "script-src 'self'" in r.headers["Content-Security-Policy"]
        assert "<script>" not in r.text and " style=" not in r.text


def test_shoal_console_calls_the_admin_api_over_http_as_the_user(tc):
    """``shoal console --admin-api URL``: the same pages over HTTP Basic with the user's credentials."""
    server = ConsoleServer(tc.broker.sasl_bootstrap, frozenset({ADMIN}), admin_url=tc.broker.admin_url)
    server.start()
    try:
        ann, ben, alice = Browser(server.url), Browser(server.url), Browser(server.url)
        for b, user, password in ((ann, "ann", "ann-secret"), (ben, "ben", "ben-secret"),
                                  (alice, "alice", tc.a.users["alice"])):
            assert b.login(user, password).url.endswith("/ui/topics")
        page = ann.get("usage")
        api = usage(tc, tc.a, "ann", "ann-secret")[1]["usage"]
        assert page.status_code == 200 and tc.b.tenant_id not in page.text
        assert f'title="{api["bytes_in"]:,} bytes"' in page.text
        assert "alice" in ann.get("users").text and "alice" not in ben.get("users").text
        assert alice.get("usage").status_code == 403 and alice.get("users").status_code == 403
        # the nav, decided over HTTP as the user: the administrator's links only
        assert set(ADMIN_LINKS) <= nav_links(ann.get("topics").text)
        assert not nav_links(alice.get("topics").text) & set(ADMIN_LINKS)
    finally:
        server.stop()


def test_an_admin_api_that_lets_anyone_in_is_refused_for_these_pages():
    """With ``shoal.admin.authentication=none`` the admin API takes every caller for the operator:
    over HTTP, the console cannot let it decide what a tenant's user may see."""
    gen = tenant_cluster()
    cluster = next(gen)
    try:
        server = ConsoleServer(cluster.broker.sasl_bootstrap, frozenset(), admin_url=cluster.broker.admin_url)
        server.start()
        try:
            alice = Browser(server.url)
            assert alice.login("alice", cluster.a.users["alice"]).url.endswith("/ui/topics")
            for page in ("usage", "users", "namespaces"):
                r = alice.get(page)
                assert r.status_code == 502 and "shoal.admin.authentication=basic" in r.text
                assert cluster.a.tenant_id not in r.text.split('id="refused"')[1]
            assert not nav_links(alice.get("topics").text) & set(ADMIN_LINKS)  # pages that cannot work
        finally:
            server.stop()
    finally:
        for _ in gen:
            pass


def test_a_groups_lag_plot_holds_the_time_before_anyone_opened_its_page(tc):
    """The mounted console samples every group of the cluster with the broker's own login
    (``shoal.console.lag.interval.ms``), so the first visit to a group's page already has a
    history; each tenant sees its own group's, although both named it the same: A's group lags
    (committed at the start), B's does not (committed at the end)."""
    group = "plotted-readers"
    produce(tc.a, "alice", 3)
    produce(tc.b, "bob", 3)
    for t, user in ((tc.a, "alice"), (tc.b, "bob")):
        c = Consumer({**t.conf(user), "group.id": group, "enable.auto.commit": False})
        low, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        c.commit(offsets=[TopicPartition(TOPIC, 0, low if t is tc.a else high)], asynchronous=False)
        c.close()
    time.sleep(10 * LAG_INTERVAL_S)  # no one opens the group's page meanwhile
    heights = {}
    for user, password in (("alice", tc.a.users["alice"]), ("bob", tc.b.users["bob"])):
        page = login(tc, user, password).get(f"groups/{group}").text
        points = re.search(r'<polyline points="([^"]+)"', page)
        assert points, f"{user}'s first visit has no plot\n" + tc.broker.log_tail()
        ys = {float(p.split(",")[1]) for p in points.group(1).split()}
        assert len(points.group(1).split()) >= 3, f"{user}'s first visit: {points.group(1)}"
        heights[user] = ys
        assert "samples of the total lag, one every 0.3 s" in page
    assert heights["bob"] == {150.0}  # lag 0 all along: the bottom
    assert max(heights["alice"]) < 150.0  # A's group lags all along
