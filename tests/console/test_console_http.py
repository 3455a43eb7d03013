"""The console over HTTP, beside a real broker (tests/console/console_harness.py): tenant A's user
``alice`` and tenant B's ``bob`` each have topics and a consumer group made with confluent-kafka;
every page and every endpoint the pages call shows A nothing of B (B's names never appear, B's
topics and groups are 404 by URL, for reading and for acting), and the operator's brokers page shows
the physical cluster to a super user only. Then the security rules: no session -> the login page,
CSRF token missing or wrong -> 403, the CSP and the cookie flags, no password in a URL or a log
line, the login backoff. Then what the pages do: topics (create with the broker's errors shown,
configs, delete), messages (browse, formats, search by key, produce) and groups (lag, reset only
when empty).
"""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker_process import BrokerProcess, free_port
from console_harness import ADMIN, ADMIN_PASSWORD, Browser, ConsoleCluster, ConsoleServer, console_cluster
from polling import until
from tenancy_fixtures import TlsTenantBroker, tenant_cluster

A_TOPIC, A_GROUP, A_QUIET = "a-orders", "a-readers", "a-quiet"
B_TOPIC, B_GROUP = "b-secret-ledger", "b-secret-auditors"


def _create(conf: dict[str, Any], name: str, partitions: int) -> None:
    admin = AdminClient(conf)
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(15)


def _produce(conf: dict[str, Any], topic: str, records: list[tuple[int, bytes | None, bytes, list]]) -> None:
    p = Producer({**conf, "acks": "all"})
    for partition, key, value, headers in records:
        p.produce(topic, value, key, partition=partition, headers=headers)
    assert p.flush(15) == 0


def _consume_and_commit(conf: dict[str, Any], group: str, topic: str, partition: int, upto: int) -> None:
    """A consumer of ``group`` that commits ``upto`` on ``topic``-``partition`` and leaves."""
    c = Consumer({**conf, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        c.commit(offsets=[TopicPartition(topic, partition, upto)], asynchronous=False)
    finally:
        c.close()


@pytest.fixture(scope="module")
def cc(request) -> ConsoleCluster:
    gen = console_cluster()
    cc = next(gen)
    request.addfinalizer(lambda: [None for _ in gen])
    a, b = cc.cluster.a.conf(), cc.cluster.b.conf()
    _create(a, A_TOPIC, 2)
    _create(a, A_QUIET, 1)
    _create(b, B_TOPIC, 1)
    _produce(a, A_TOPIC, [(0, f"k{i}".encode(), json.dumps({"n": i}).encode(), [("trace", b"t%d" % i)])
                          for i in range(10)] + [(1, b"other", b"\x00\xff\x10", [])])
    _produce(b, B_TOPIC, [(0, b"b-key", b"b-secret-value", [])])
    _consume_and_commit(a, A_GROUP, A_TOPIC, 0, 4)
    _consume_and_commit(b, B_GROUP, B_TOPIC, 0, 1)
    return cc


@pytest.fixture(scope="module")
def alice(cc) -> Browser:
    return cc.login("alice")


def _b_names(cc: ConsoleCluster) -> list[str]:
    b = cc.cluster.b
    return [B_TOPIC, B_GROUP, "b-secret", "bob", b.tenant_id, "b-key"]


# Every page a tenant sees, and every endpoint its forms post to (with fields that would act).
def _pages() -> list[str]:
    return ["", "topics", f"topics/{A_TOPIC}", f"topics/{A_TOPIC}/messages",
            f"topics/{A_TOPIC}/messages?order=oldest&format=hex", f"topics/{A_TOPIC}/messages?key=k1",
            "groups", f"groups/{A_GROUP}", "acls", "operator", "operator/tenants", "operator/regions",
            "operator/balancer", "login"]


def _posts(topic: str, group: str) -> list[tuple[str, dict[str, str]]]:
    return [("topics", {"name": "made-by-a-post", "partitions": "1"}),
            (f"topics/{topic}/config", {"key": "retention.ms", "value": "123456789"}),
            (f"topics/{topic}/delete", {"confirm": topic}),
            (f"topics/{topic}/produce", {"partition": "0", "value": "x"}),
            (f"groups/{group}/reset", {"mode": "to_earliest"}),
            ("operator/tenants", {"display_name": "made-by-a-post", "admin_user": "u", "admin_password": "p"}),
            ("operator/balancer/pause", {}),
            ("logout", {})]


# The ACL forms (no resource of a tenant in their path: the broker scopes what they name)
ACL = {"permission": "ALLOW", "principal": "User:alice", "operation": "READ", "resource_type": "TOPIC",
       "pattern_type": "LITERAL", "resource_name": A_TOPIC}
ACL_POSTS = [("acls", ACL), ("acls/delete", ACL)]


# -- isolation --------------------------------------------------------------------------------------

def test_a_tenant_sees_nothing_of_another_tenant_on_any_page(cc, alice):
    for path in _pages():
        r = alice.get(path)
        assert r.status_code in (200, 404), (path, r.status_code)
        for name in _b_names(cc):
            assert name not in r.text, f"{name} of tenant B on A's page /ui/{path}"
    # ... while A's own things are there
    assert A_TOPIC in alice.get("topics").text and A_GROUP in alice.get("groups").text


def test_another_tenants_topics_and_groups_are_404_by_url_for_reading_and_acting(cc, alice):
    for path in [f"topics/{B_TOPIC}", f"topics/{B_TOPIC}/messages", f"topics/{B_TOPIC}/messages?partition=0",
                 f"groups/{B_GROUP}", "topics/no-such-topic", "groups/no-such-group"]:
        r = alice.get(path)
        assert r.status_code == 404, (path, r.status_code)
        assert "b-secret-value" not in r.text
    for path, data in _posts(B_TOPIC, B_GROUP)[1:-1]:
        r = alice.post(path, data, allow_redirects=False)
        assert r.status_code == 404, (path, r.status_code)
    # B's topic, record and committed offset are untouched
    bob = cc.login("bob")
    page = bob.get(f"topics/{B_TOPIC}/messages").text
    assert "b-secret-value" in page
    assert re.search(r'class="num lag">0<', bob.get(f"groups/{B_GROUP}").text)
    assert "retention.ms" in bob.get(f"topics/{B_TOPIC}").text and "123456789" not in bob.get(f"topics/{B_TOPIC}").text


def test_the_operator_sees_the_physical_cluster_and_a_tenant_does_not(cc, alice):
    admin = cc.login(ADMIN)
    page = admin.get("operator").text
    a, b = cc.cluster.a, cc.cluster.b
    assert f"{a.tenant_id}_{A_TOPIC}" in page and f"{b.tenant_id}_{B_TOPIC}" in page and "__consumer_offsets" in page
    assert 'id="brokers"' in page
    assert admin.get("", allow_redirects=False).headers["Location"].endswith("/ui/operator")
    r = alice.get("operator")
    assert r.status_code == 404 and a.tenant_id + "_" not in r.text and "__consumer_offsets" not in r.text
    assert "Cluster</a>" not in alice.get("topics").text  # no link to it either
    assert alice.get("", allow_redirects=False).headers["Location"].endswith("/ui/topics")


# -- security ---------------------------------------------------------------------------------------

def test_without_a_session_every_page_and_endpoint_redirects_to_the_login_page(cc):
    anonymous = Browser(cc.url)
    for path in _pages()[:-1]:
        r = anonymous.get(path, allow_redirects=False)
        assert r.status_code == 303 and "/ui/login" in r.headers["Location"], (path, r.status_code)
    for path, data in _posts(A_TOPIC, A_GROUP) + ACL_POSTS:
        r = anonymous.post(path, data, csrf=False, allow_redirects=False)
        assert r.status_code == 303 and r.headers["Location"].startswith("/ui/login"), (path, r.status_code)
    r = anonymous.get("login")
    assert r.status_code == 200 and 'type="password"' in r.text and 'method="post"' in r.text
    assert anonymous.get("static/console.css").status_code == 200


def test_a_missing_or_wrong_csrf_token_or_a_foreign_origin_is_403_and_changes_nothing(cc, alice):
    for path, data in ACL_POSTS + _posts(A_TOPIC, A_GROUP):
        assert alice.post(path, data, csrf=False, allow_redirects=False).status_code == 403, path
        assert alice.post(path, {**data, "csrf": "wrong"}, allow_redirects=False).status_code == 403, path
        r = alice.post(path, data, allow_redirects=False, headers={"Origin": "http://evil.example"})
        assert r.status_code == 403, path
    # the token of another session is wrong too
    other = cc.login("alice")
    assert alice.post("topics", {"name": "made-by-a-post", "csrf": other.csrf()}, allow_redirects=False).status_code == 403
    page = alice.get("topics").text
    assert "made-by-a-post" not in page and A_TOPIC in page  # nothing created, nothing deleted
    assert alice.get(f"topics/{A_TOPIC}").status_code == 200
    # the login form has its own token (a cookie and a field)
    fresh = Browser(cc.url)
    r = fresh.http.post(cc.url + "login", data={"user": "alice", "password": cc.password("alice")},
                        allow_redirects=False)
    assert r.status_code == 403 and "shoal_console" not in r.cookies


def test_every_response_carries_the_csp_and_no_inline_script_or_style(cc, alice):
    for path in _pages() + ["topics/nope", "static/console.css", "static/console.js"]:
        r = alice.get(path)
        csp = r.headers.get("Content-Security-Policy", "")
        assert "default-src 'self'" in csp and "unsafe-inline" not in csp, path
        assert r.headers["X-Frame-Options"] == "DENY" and r.headers["X-Content-Type-Options"] == "nosniff"
        if r.headers["Content-Type"].startswith("text/html"):
            assert not re.search(r"<script(?![^>]*\bsrc=)", r.text), f"inline script on {path}"
            assert not re.search(r"<style|\sstyle=|\son[a-z]+=", r.text), f"inline style or handler on {path}"
            assert r.headers["Cache-Control"] == "no-store"


def test_login_sets_a_strict_httponly_cookie_and_logout_ends_the_session(cc):
    b = Browser(cc.url)
    r = b.login("alice", cc.password("alice"))
    assert r.status_code == 200 and r.url.endswith("/ui/topics")
    set_cookie = [h for h in r.history[0].raw.headers.getlist("Set-Cookie") if h.startswith("shoal_console=")][0]
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie and "Path=/ui/" in set_cookie
    assert "Secure" not in set_cookie  # a plain-HTTP listener (TLS ones add it: request.secure)
    sid = b.http.cookies["shoal_console"]
    assert len(sid) >= 40
    assert b.post("logout", {}, allow_redirects=False).status_code == 303
    # the old id names nothing now, even when replayed
    replay = Browser(cc.url)
    replay.http.cookies.set("shoal_console", sid, path="/ui/")
    assert replay.get("topics", allow_redirects=False).status_code == 303


def test_a_wrong_password_is_refused_backed_off_and_never_logged_or_put_in_a_url(cc, caplog):
    caplog.set_level(logging.INFO)
    b = Browser(cc.url)
    wrong = "not-alices-password-x9"
    started = time.monotonic()
    r1 = b.login("alice", wrong)
    r2 = b.login("alice", wrong)
    took = time.monotonic() - started
    for r in (r1, r2):
        assert r.status_code == 401 and "Login failed" in r.text and wrong not in r.text
        assert "shoal_console" not in b.http.cookies
        assert wrong not in r.url
    assert took >= 0.25  # the backoff's 100 ms, then 200 ms
    good = b.login("alice", cc.password("alice"))
    assert good.status_code == 200 and cc.password("alice") not in good.url
    log_text = caplog.text + cc.cluster.broker.log_text()
    assert "failed login" in caplog.text
    assert wrong not in log_text and cc.password("alice") not in log_text


def test_after_login_the_user_goes_where_it_was_going_but_never_off_the_console(cc):
    b = Browser(cc.url)
    r = b.get(f"topics/{A_TOPIC}")
    assert r.url.endswith(f"/ui/login?next=/ui/topics/{A_TOPIC}")
    token = re.search(r'name="csrf" value="([^"]+)"', r.text).group(1)
    done = b.http.post(cc.url + "login", data={"csrf": token, "user": "alice", "password": cc.password("alice"),
                                               "next": f"/ui/topics/{A_TOPIC}"})
    assert done.url.endswith(f"/ui/topics/{A_TOPIC}")
    c = Browser(cc.url)
    token = re.search(r'name="csrf" value="([^"]+)"', c.get("login").text).group(1)
    r = c.http.post(cc.url + "login", data={"csrf": token, "user": "alice", "password": cc.password("alice"),
                                            "next": "//evil.example/x"}, allow_redirects=False)
    assert r.headers["Location"] == "/ui/"


# -- topics -----------------------------------------------------------------------------------------

def test_the_topics_page_shows_partitions_replication_size_retention_and_rates(cc, alice):
    page = alice.get("topics").text
    row = re.search(rf'<tr>\s*<td><a href="/ui/topics/{A_TOPIC}">{A_TOPIC}</a>.*?</tr>', page, re.S).group(0)
    cells = re.findall(r'<td[^>]*>(.*?)</td>', row, re.S)
    assert cells[1] == "2" and cells[2] == "1"  # partitions, replication
    assert cells[4].endswith("B") and cells[4] != "0 B"  # size
    assert cells[5] == "11"  # messages
    assert cells[6] == "7 d"  # retention.ms, the default
    assert float(cells[7]) > 0  # produced within the minute: messages/s
    detail = alice.get(f"topics/{A_TOPIC}").text
    assert 'id="partitions"' in detail and "cleanup.policy" in detail


def test_create_a_topic_with_configs_edit_them_and_delete_it(cc, alice):
    r = alice.post("topics", {"name": "a-new", "partitions": "3", "configs": "retention.ms=3600000\ncleanup.policy=compact"})
    assert r.status_code == 200 and r.url.endswith("/ui/topics/a-new") and "Topic a-new created." in r.text
    assert "1 h" in r.text and re.search(r'aria-label="cleanup.policy"', r.text)
    # the broker's errors are shown, with what was typed
    bad = alice.post("topics", {"name": "a-bad", "configs": "retention.ms=soon"})
    assert bad.status_code == 400 and "Topic a-bad not created: INVALID_CONFIG" in bad.text and "retention.ms=soon" in bad.text
    dup = alice.post("topics", {"name": "a-new"})
    assert dup.status_code == 400 and "TOPIC_ALREADY_EXISTS" in dup.text
    assert alice.post("topics", {"name": "a-x", "partitions": "many"}).status_code == 400
    # configs
    r = alice.post("topics/a-new/config", {"key": "retention.ms", "value": "7200000", "action": "set"})
    assert "retention.ms set." in r.text and "2 h" in r.text
    r = alice.post("topics/a-new/config", {"key": "retention.ms", "value": "nope", "action": "set"})
    assert "retention.ms not changed: INVALID_CONFIG" in r.text
    r = alice.post("topics/a-new/config", {"key": "retention.ms", "action": "reset"})
    assert "retention.ms reset to its default." in r.text and "7 d" in r.text
    # delete: only when its name is typed
    r = alice.post("topics/a-new/delete", {"confirm": "a-ne"})
    assert "not deleted: type its name" in r.text and alice.get("topics/a-new").status_code == 200
    r = alice.post("topics/a-new/delete", {"confirm": "a-new"})
    assert r.url.endswith("/ui/topics") and "Topic a-new deleted." in r.text
    until(lambda: alice.get("topics/a-new").status_code == 404, timeout=10)


def test_a_tenants_create_topic_policy_applies(cc):
    a = cc.cluster.a
    status, body = a.broker.http("PUT", f"/v1/tenants/{a.tenant_id}/policy", {"policy": {"max.partitions.per.topic": 4}})
    assert status == 200, body
    try:
        alice = cc.login("alice")
        r = alice.post("topics", {"name": "a-wide", "partitions": "8"})
        assert r.status_code == 400 and "POLICY_VIOLATION" in r.text
    finally:
        assert a.broker.http("PUT", f"/v1/tenants/{a.tenant_id}/policy", {"policy": {}})[0] == 200


# -- messages ---------------------------------------------------------------------------------------

def _offsets(page: str) -> list[int]:
    table = page.split('id="messages"', 1)[1] if 'id="messages"' in page else ""
    return [int(o) for o in re.findall(r'<tr>\s*<td class="num">(\d+)</td>', table)]


def test_browse_newest_or_oldest_first_from_an_offset_or_a_time(cc, alice):
    base = f"topics/{A_TOPIC}/messages?partition=0"
    assert _offsets(alice.get(base).text) == list(range(9, -1, -1))  # newest first by default
    assert _offsets(alice.get(base + "&order=oldest&limit=3").text) == [0, 1, 2]
    assert _offsets(alice.get(base + "&order=oldest&offset=7").text) == [7, 8, 9]
    assert _offsets(alice.get(base + "&order=newest&offset=5&limit=2").text) == [4, 3]
    assert _offsets(alice.get(base + "&order=oldest&time=2000-01-01T00:00").text)[:1] == [0]
    assert _offsets(alice.get(base + "&order=oldest&time=2999-01-01T00:00").text) == []
    page = alice.get(base + "&order=oldest&limit=1").text
    assert '<pre class="text">k0</pre>' in page and "trace</span>: t0" in page
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z", page)


def test_values_as_text_pretty_json_or_hex(cc, alice):
    base = f"topics/{A_TOPIC}/messages?partition=0&order=oldest&limit=1"
    assert '<pre class="text">{&#34;n&#34;: 0}</pre>' in alice.get(base).text
    assert '<pre class="json">{\n  &#34;n&#34;: 0\n}</pre>' in alice.get(base + "&format=json").text
    assert '<pre class="hex">6b 30</pre>' in alice.get(base + "&format=hex").text  # the key k0
    binary = alice.get(f"topics/{A_TOPIC}/messages?partition=1").text
    assert '<pre class="hex">00 ff 10</pre>' in binary  # not UTF-8: shown as hex


def test_search_by_key_scans_a_bounded_range(cc, alice):
    page = alice.get(f"topics/{A_TOPIC}/messages?partition=0&key=k7").text
    assert _offsets(page) == [7] and "Searched 10 records" in page
    assert _offsets(alice.get(f"topics/{A_TOPIC}/messages?partition=0&key=nope").text) == []


def test_produce_a_test_record_and_see_it(cc, alice):
    r = alice.post(f"topics/{A_QUIET}/produce", {"partition": "0", "key": "hello", "value": '{"x": [1, 2]}',
                                                 "headers": "source=console\nempty"})
    assert r.status_code == 200 and f"Produced a record to {A_QUIET}-0 at offset 0." in r.text
    assert _offsets(r.text) == [0] and '<pre class="text">hello</pre>' in r.text and "source</span>: console" in r.text
    # ... which a real consumer reads as produced
    c = Consumer({**cc.cluster.a.conf(), "group.id": "a-check", "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(A_QUIET, 0, 0)])
        msg = until(lambda: c.poll(0.5), timeout=15)
        assert (msg.key(), msg.value(), msg.headers()) == (b"hello", b'{"x": [1, 2]}', [("source", b"console"), ("empty", None)])
    finally:
        c.close()
    bad = alice.post(f"topics/{A_QUIET}/produce", {"partition": "5", "value": "x"})
    assert "Not produced" in bad.text
    big = alice.post(f"topics/{A_QUIET}/produce", {"partition": "0", "value": "v" * 70_000})
    assert "at offset 1." in big.text and "… (70,000 bytes in all, the first 65,536 shown)" in big.text


# -- consumer groups --------------------------------------------------------------------------------

def test_groups_show_committed_offsets_and_lag_and_reset_only_when_empty(cc, alice):
    page = alice.get("groups").text
    assert re.search(rf'{A_GROUP}</a></td>\s*<td><span class="state empty">Empty</span></td>\s*<td>classic</td>'
                     r'\s*<td class="num">0</td>\s*<td class="num">6</td>', page), page
    detail = alice.get(f"groups/{A_GROUP}").text
    assert re.search(r'<td class="num">0</td>\s*<td class="num">4</td>\s*<td class="num">10</td>\s*<td class="num lag">6</td>',
                     detail)
    # a member: the reset is refused
    c = Consumer({**cc.cluster.a.conf(), "group.id": A_GROUP, "enable.auto.commit": False})
    try:
        c.subscribe([A_TOPIC])
        until(lambda: c.poll(0.2) is not None or bool(c.assignment()), timeout=20)
        page = until(lambda: next((p for p in [alice.get(f"groups/{A_GROUP}").text] if "state stable" in p), None),
                     timeout=20, between=lambda: c.poll(0.2))
        assert 'id="members"' in page and "rdkafka" in page
        r = alice.post(f"groups/{A_GROUP}/reset", {"mode": "to_earliest"})
        assert "Offsets not reset: NON_EMPTY_GROUP" in r.text
    finally:
        c.close()
    until(lambda: "state empty" in alice.get(f"groups/{A_GROUP}").text, timeout=20)
    r = alice.post(f"groups/{A_GROUP}/reset", {"mode": "to_latest"})
    assert "Offsets of a-readers reset on 1 partitions." in r.text and re.search(r'id="total-lag">0<', r.text)
    r = alice.post(f"groups/{A_GROUP}/reset", {"mode": "to_offset", "value": "2"})
    assert re.search(r'id="total-lag">8<', r.text)
    r = alice.post(f"groups/{A_GROUP}/reset", {"mode": "to_offset", "value": ""})
    assert "Offsets not reset: give the offset" in r.text


def test_long_lists_come_in_pages_with_a_filter(cc, alice):
    def names(path: str) -> list[str]:
        return re.findall(r'<tr>\s*<td><a href="/ui/(?:topics|groups)/([^"]+)">', alice.get(path).text)

    every = names("topics")
    assert every == sorted(every) and {A_TOPIC, A_QUIET} <= set(every)
    assert names("topics?per_page=1&page=2") == [every[1]]
    assert names("topics?per_page=1&page=999") == [every[-1]]  # past the end: the last page
    assert names("topics?q=QUIET") == [A_QUIET]
    assert names("topics?q=zzz") == [] and "No topics match." in alice.get("topics?q=zzz").text
    assert names("groups?q=readers") == [A_GROUP] and names("groups?q=zzz") == []
    for bad in ("topics?page=x&per_page=-5", "groups?page=-1&per_page=y"):
        assert alice.get(bad).status_code == 200


def test_shoal_console_serves_the_console_as_a_process_of_its_own(cc, tmp_path):
    props = tmp_path / "listener.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.username=ignored\nsasl.password=ignored\n")
    sampler = tmp_path / "sampler.properties"  # the super user the console samples every group's lag as
    sampler.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username={ADMIN}\n"
                       f"sasl.password={cc.password(ADMIN)}\n")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "shoal", "console", "--bootstrap-server",
                             cc.cluster.broker.sasl_bootstrap, "--command-config", str(props), "--listen",
                             f"http://127.0.0.1:{port}", "--operator", ADMIN, "--admin-api", cc.cluster.broker.admin_url,
                             "--sampler-config", str(sampler), "--lag-interval", "0.3"],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        b = Browser(f"http://127.0.0.1:{port}/ui/")
        until(lambda: b.get("login").status_code == 200, timeout=20)
        assert b.login("alice", cc.password("alice")).url.endswith("/ui/topics")
        assert A_TOPIC in b.get("topics").text and B_TOPIC not in b.get("topics").text
        assert b.http.get(f"http://127.0.0.1:{port}/", timeout=10).url.endswith("/ui/topics")
        op = Browser(f"http://127.0.0.1:{port}/ui/")
        op.login(ADMIN, cc.password(ADMIN))
        assert cc.cluster.a.tenant_id in op.get("operator/tenants").text  # --admin-api, called as admin
        # --sampler-config: the group's first visit already has a history (no one opened it here)
        time.sleep(3)
        plotted = re.search(r'<polyline points="([^"]+)"', b.get(f"groups/{A_GROUP}").text)
        assert plotted and len(plotted.group(1).split()) >= 3
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert f"Shoal Console on http://127.0.0.1:{port}/ui/" in out and "alice logged in" in out
    assert cc.password("alice") not in out
    bad = subprocess.run([sys.executable, "-m", "shoal", "console", "--command-config", str(props.with_name("no")),
                          "--listen", "http://127.0.0.1:1"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and bad.stderr.startswith("shoal console: ") and len(bad.stderr.splitlines()) == 1
    (tmp_path / "nouser.properties").write_text("security.protocol=SASL_PLAINTEXT\n")
    bad = subprocess.run([sys.executable, "-m", "shoal", "console", "--sampler-config", str(tmp_path / "nouser.properties"),
                          "--listen", "http://127.0.0.1:1"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and bad.stderr.startswith("shoal console: --sampler-config: ")
    assert len(bad.stderr.splitlines()) == 1


def test_on_tls_the_cookies_are_secure(cc, tmp_path):
    import ssl

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "auth"))
    from auth_certs import make_pki

    pki = make_pki(tmp_path / "pki")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    server = ConsoleServer(cc.cluster.broker.sasl_bootstrap, frozenset(), ssl_context=context)
    server.start()
    try:
        b = Browser(server.url, ca=str(pki.ca))
        login_page = b.get("login")
        assert "Secure" in login_page.headers["Set-Cookie"]  # the login form's token
        r = b.login("alice", cc.password("alice"))
        assert r.status_code == 200 and r.url.startswith("https://")
        set_cookie = [h for h in r.history[0].raw.headers.getlist("Set-Cookie") if h.startswith("shoal_console=")][0]
        assert "Secure" in set_cookie and "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
    finally:
        server.stop()


def test_a_groups_lag_is_plotted_from_samples_taken_while_its_user_is_logged_in(cc):
    group = "b-watched"  # a group whose page no one opened yet
    _consume_and_commit(cc.cluster.b.conf(), group, B_TOPIC, 0, 1)
    bob = cc.login("bob")
    first = bob.get(f"groups/{group}").text
    assert "from now on" in first and "<polyline" not in first
    page = until(lambda: next((p for p in [bob.get(f"groups/{group}").text] if "<polyline" in p), None), timeout=10)
    points = re.search(r'<polyline points="([^"]+)"', page).group(1).split()
    assert len(points) >= 2 and all(float(p.split(",")[1]) == 150.0 for p in points)  # lag 0 all along: the bottom
    assert re.search(r"\d+ samples of the total lag", page)
    # another tenant's user: a 404, no plot (histories are per user and group)
    r = cc.login("alice").get(f"groups/{group}")
    assert r.status_code == 404 and "<polyline" not in r.text


def test_without_an_authorizer_the_acls_page_says_so(cc, alice):
    page = alice.get("acls").text
    assert 'id="acls-off"' in page and 'id="add-acl"' not in page


def test_the_broker_serves_the_console_under_ui_on_its_admin_listener(cc):
    broker = cc.cluster.broker  # shoal.admin.listener and a SASL_PLAINTEXT listener with SCRAM
    b = Browser(broker.admin_url + "/ui/")
    page = b.get("login")
    assert page.status_code == 200 and "default-src 'self'" in page.headers["Content-Security-Policy"]
    assert b.login("alice", cc.password("alice")).url.endswith("/ui/topics")
    topics = b.get("topics").text
    assert A_TOPIC in topics and B_TOPIC not in topics
    assert b.get("operator").status_code == 404
    admin = Browser(broker.admin_url + "/ui/")
    assert admin.login(ADMIN, cc.password(ADMIN)).url.endswith("/ui/operator")  # super.users: the operator
    assert f"{cc.cluster.b.tenant_id}_{B_TOPIC}" in admin.get("operator").text
    assert "Shoal Console on " in broker.log_text() and cc.password("alice") not in broker.log_text()
    set_cookie = [h for h in admin.get("login").raw.headers.getlist("Set-Cookie")][0]
    assert "HttpOnly" in set_cookie and "Secure" not in set_cookie  # shoal.console.secure.cookies is false
    # the admin API beside it is unchanged
    status, body = broker.http("GET", "/v1/tenants")
    assert status == 200 and {t["tenant_id"] for t in body["tenants"]} >= {cc.cluster.a.tenant_id, cc.cluster.b.tenant_id}


class SaslSslOnlyBroker(TlsTenantBroker):
    """TlsTenantBroker without its SASL_PLAINTEXT and MTLS listeners: PLAINTEXT for the operator
    and SASL_SSL on every address, advertised as localhost, its certificate naming localhost only
    (not 127.0.0.1)."""

    def __init__(self, workdir: Path, overrides: dict[str, str] | None = None) -> None:
        super().__init__(workdir, overrides)
        from auth_certs import make_server_cert  # (tests/auth: on sys.path now)

        self.overrides.pop("listener.name.mtls.ssl.client.auth")
        self.overrides.update({
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port},SASL_SSL://localhost:{self.sasl_ssl_port}",
            "ssl.keystore.location": str(make_server_cert(self.pki, "localhost-only", ["localhost"]))})

    def listeners(self) -> list[str]:
        return BrokerProcess.listeners(self) + [f"SASL_SSL://0.0.0.0:{self.sasl_ssl_port}"]


def test_a_broker_with_only_a_sasl_ssl_listener_serves_the_console():
    """No SASL_PLAINTEXT listener: the console logs users in over TLS to the SASL_SSL one, reached
    on 127.0.0.1 (it listens on every address), its certificate checked against the broker's
    truststore for the advertised name (localhost: the certificate does not name 127.0.0.1)."""
    gen = tenant_cluster({"shoal.sasl.bootstrap.users": f"{ADMIN}:{ADMIN_PASSWORD}",
                          "super.users": f"User:ANONYMOUS;User:{ADMIN}"}, broker_class=SaslSslOnlyBroker)
    cluster = next(gen)
    try:
        broker = cluster.broker
        assert "users log in through listener SASL_SSL, SASL_SSL" in broker.log_text(), broker.log_tail()
        alice = Browser(broker.admin_url + "/ui/")
        assert alice.login("alice", cluster.a.users["alice"]).url.endswith("/ui/topics")
        r = alice.post("topics", {"name": "tls-orders", "partitions": "1"})
        assert r.status_code == 200 and "Topic tls-orders created." in r.text, r.text[-1500:]
        r = alice.post("topics/tls-orders/produce", {"partition": "0", "value": "over TLS"})
        assert "Produced a record to tls-orders-0 at offset 0." in r.text and "over TLS" in r.text
        page = alice.get("topics").text
        assert "tls-orders" in page and cluster.b.tenant_id not in page
        bob = Browser(broker.admin_url + "/ui/")
        assert bob.login("bob", cluster.b.users["bob"]).url.endswith("/ui/topics")
        assert "tls-orders" not in bob.get("topics").text
    finally:
        for _ in gen:
            pass


def _console_log_lines(broker_class: type, overrides: dict[str, str], tmp_path: Path) -> list[str]:
    """The console's start-up lines of a broker of ``broker_class`` (started, then stopped)."""
    broker = broker_class(tmp_path, overrides)
    broker.start()
    try:
        return [line for line in broker.log_text().splitlines() if "Shoal Console" in line]
    finally:
        broker.stop()


def test_the_console_prefers_sasl_plaintext_and_needs_a_truststore_for_sasl_ssl(tmp_path):
    """Both SASL_PLAINTEXT and SASL_SSL: through SASL_PLAINTEXT (no TLS handshakes on loopback).
    Only SASL_SSL and no truststore: not served, and one line says why."""
    lines = _console_log_lines(TlsTenantBroker, {}, tmp_path / "both")
    assert len(lines) == 1 and "users log in through listener SASL_PLAINTEXT, SASL_PLAINTEXT" in lines[0], lines

    class NoTruststore(SaslSslOnlyBroker):
        def __init__(self, workdir: Path, overrides: dict[str, str] | None = None) -> None:
            super().__init__(workdir, overrides)
            del self.overrides["ssl.truststore.location"]

    lines = _console_log_lines(NoTruststore, {}, tmp_path / "no-truststore")
    assert lines == [lines[0]] and lines[0].endswith(
        "Shoal Console not served: listener SASL_SSL is SASL_SSL without an ssl.truststore.location for the "
        "console's clients to check its certificate with"), lines
