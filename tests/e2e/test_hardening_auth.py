"""Issue 10, tenancy and authentication (items 8-12, 13's names): each attack against a real
broker process (``shoal serve``), with the bound it must now respect and normal clients working.

- a tenant admin creating ``ANONYMOUS`` (or an unassigned mTLS name) through the HTTP API gets a
  user of its own tenant, ``<tenant>_ANONYMOUS``: the operator's PLAINTEXT connections and the
  certificate's connections keep the physical view; names are per tenant, so a 409 tells a tenant
  nothing about other tenants (shoal.tenancy.principals);
- a non-admin tenant user cannot alter (or list) its admin's SCRAM credential over the wire
  (``shoal scram set`` and AlterUserScramCredentials), only its own; nor use the HTTP API;
- brute force: many parallel wrong PLAIN logins on one user get their passwords checked at a few
  per second at most (the ``shoal_login_failures`` metric), while another user's logins from the
  same address keep their speed, and the attacked user's owner gets in (issue 24: the guessing
  address is slowed, never the account); HTTP Basic is backed off the same way (shoal.auth.backoff);
- HTTP Basic answers an unknown user as slowly as a known one with a wrong password (medians);
- ``/metrics`` binds loopback when the listener names no host, and with basic authentication
  answers only super users;
- a tenant cannot create ``__x`` topics (INVALID_TOPIC_EXCEPTION) nor use ``lkc-xxxxxx_`` group
  ids (INVALID_GROUP_ID).
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from broker_process import free_port, http_json
from raw_client import RawClient
from tenancy_fixtures import TenantBroker, TlsTenantBroker

OP = ("op", "op-secret")  # a super user with a SCRAM credential (HTTP Basic, /metrics)
MECH = "SCRAM-SHA-512"


class Hardened:
    """One broker: PLAINTEXT (operator, ANONYMOUS, a super user), SASL_PLAINTEXT, SASL_SSL, MTLS,
    the HTTP admin API with basic authentication, /metrics on loopback; tenant A (admin ``boss``,
    user ``worker``, attack target ``victim``) and tenant B (admin ``bossb``)."""

    def __init__(self, broker: TlsTenantBroker, metrics_port: int) -> None:
        self.broker = broker
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        self.passwords: dict[str, str] = {}
        self.a = self.tenant("A", boss="boss", users=("worker", "victim"))
        self.b = self.tenant("B", boss="bossb", users=())

    def http(self, method: str, path: str, body=None, auth=OP):
        return http_json(self.broker.admin_url, method, path, body, auth=auth)

    def tenant(self, name: str, boss: str, users: tuple[str, ...]) -> str:
        status, t = self.http("POST", "/v1/tenants", {"display_name": name})
        assert status == 201, t
        for user, admin in ((boss, True), *((u, False) for u in users)):
            self.passwords[user] = f"{user}-pw"
            status, body = self.http("POST", f"/v1/tenants/{t['tenant_id']}/users",
                                     {"user": user, "password": self.passwords[user], "admin": admin})
            assert status == 201 and body["user"] == user, body
        return t["tenant_id"]

    def conf(self, user: str, password: str | None = None) -> dict:
        return {"bootstrap.servers": self.broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": MECH, "sasl.username": user,
                "sasl.password": self.passwords[user] if password is None else password}

    def log(self) -> str:
        return self.broker.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def hard():
    workdir = Path(tempfile.mkdtemp(prefix="shoal-hard-auth-"))
    metrics_port = free_port()
    broker = TlsTenantBroker(workdir, {
        "shoal.admin.authentication": "basic",
        "super.users": "User:ANONYMOUS;User:op",
        "shoal.sasl.bootstrap.users": "op:op-secret",
        "shoal.metrics.listener": f"http://:{metrics_port}",  # no host: loopback
    })
    broker.start()
    try:
        yield Hardened(broker, metrics_port)
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def cluster_id(conf: dict) -> str:
    md = AdminClient(conf).list_topics(timeout=15)
    return md.cluster_id


def plain_login(address: str, user: str, password: str, timeout: float = 15.0,
                source: str | None = None) -> tuple[int, float]:
    """One PLAIN login on a fresh connection (from ``source``): (error code, seconds until the answer)."""
    with RawClient(address, client_id="hard-auth", timeout=timeout, source=source) as c:
        assert c.call(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        t0 = time.monotonic()
        r = c.call(36, 2, {"auth_bytes": f"\x00{user}\x00{password}".encode()})
        return int(r.error_code), time.monotonic() - t0


def metrics_text(h: Hardened, auth=OP) -> tuple[int, str]:
    req = urllib.request.Request(h.metrics_url)
    if auth is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric_value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


# -- item 8: reserved principals, names per tenant ------------------------------------------


def test_tenant_admin_cannot_lock_the_operator_out(hard):
    operator = {"bootstrap.servers": hard.broker.bootstrap}
    physical = cluster_id(operator)
    assert physical != hard.a
    boss = ("boss", hard.passwords["boss"])
    # the attack: A's admin creates ANONYMOUS; it gets a user of its own tenant instead
    status, body = hard.http("POST", f"/v1/tenants/{hard.a}/users", {"user": "ANONYMOUS", "password": "x"}, auth=boss)
    assert status == 201 and body["user"] == f"{hard.a}_ANONYMOUS", body
    # the operator's PLAINTEXT connections (User:ANONYMOUS) keep the physical view
    assert cluster_id(operator) == physical
    with RawClient(hard.broker.bootstrap) as c:
        assert c.call(3, 2, {"topics": ()}).cluster_id == physical
    # and the user A made logs in as A's, under its qualified name
    hard.passwords[f"{hard.a}_ANONYMOUS"] = "x"
    assert cluster_id(hard.conf(f"{hard.a}_ANONYMOUS")) == hard.a
    # the operator cannot make ANONYMOUS a user either, nor put a super user in a tenant
    for user in ("ANONYMOUS", "op"):
        status, body = hard.http("POST", f"/v1/tenants/{hard.b}/users", {"user": user, "password": "x"})
        assert status == 400, body
    assert cluster_id(operator) == physical


def test_mtls_name_cannot_be_claimed_by_a_tenant(hard):
    boss = ("boss", hard.passwords["boss"])
    status, body = hard.http("POST", f"/v1/tenants/{hard.a}/users", {"user": "mtls-carol", "password": "x"}, auth=boss)
    assert status == 201 and body["user"] == f"{hard.a}_mtls-carol", body
    cert, key = hard.broker.client_cert("mtls-carol")
    conf = {"bootstrap.servers": f"127.0.0.1:{hard.broker.mtls_port}", "security.protocol": "SSL",
            "ssl.ca.location": str(hard.broker.pki.ca), "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key)}
    # the certificate's principal User:mtls-carol is no member of A: it sees the physical cluster
    assert cluster_id(conf) == cluster_id({"bootstrap.servers": hard.broker.bootstrap}) != hard.a


def test_user_names_are_per_tenant_and_no_oracle(hard):
    bossb = ("bossb", hard.passwords["bossb"])
    # "worker" is A's; B's admin creating it gets B's own worker, answered like any fresh name
    fresh = hard.http("POST", f"/v1/tenants/{hard.b}/users", {"user": "fresh-name", "password": "pw-f"}, auth=bossb)
    taken = hard.http("POST", f"/v1/tenants/{hard.b}/users", {"user": "worker", "password": "pw-b"}, auth=bossb)
    assert fresh[0] == taken[0] == 201
    assert {k: v for k, v in taken[1].items() if k != "user"} == {k: v for k, v in fresh[1].items() if k != "user"}
    assert taken[1]["user"] == f"{hard.b}_worker"
    # a 409 only ever means: your tenant has it
    again = hard.http("POST", f"/v1/tenants/{hard.b}/users", {"user": "worker", "password": "pw-b"}, auth=bossb)
    assert again[0] == 409
    # both workers log in, each to its own tenant
    hard.passwords[f"{hard.b}_worker"] = "pw-b"
    assert cluster_id(hard.conf("worker")) == hard.a
    assert cluster_id(hard.conf(f"{hard.b}_worker")) == hard.b


def test_bootstrap_users_cannot_be_anonymous(tmp_path):
    from shoal.auth import ensure_bootstrap_users
    from shoal.config import BrokerConfig
    from shoal.metadata.embedded import EmbeddedMetadataStore

    async def run() -> str:
        store = EmbeddedMetadataStore(tmp_path / "metadata.json", node_id=1)
        await store.start()
        try:
            with pytest.raises(ValueError) as e:
                await ensure_bootstrap_users(BrokerConfig({"shoal.sasl.bootstrap.users": "ANONYMOUS:x"}), store)
            assert "ANONYMOUS" not in store.image.scram_credentials
            return str(e.value)
        finally:
            await store.close()

    assert "ANONYMOUS" in asyncio.run(run())


# -- item 9: credentials ------------------------------------------------------------------------


def _scram(h: "Hardened", user: str, key: int, body: dict):
    """One AlterUserScramCredentials (51) / DescribeUserScramCredentials (50) as ``user`` over
    SASL_PLAINTEXT (Shoal's wire client, what ``shoal scram`` uses)."""
    from shoal.client import AdminClient as ShoalAdmin, ClientSecurity

    async def run():
        security = ClientSecurity.from_properties({
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": MECH,
            "sasl.username": user, "sasl.password": h.passwords[user]})
        c = ShoalAdmin(h.broker.sasl_bootstrap, security=security, timeout=15)
        await c.connect()
        try:
            return await c.request(key, body)
        finally:
            await c.close()

    return asyncio.run(run())


def _alter(h: "Hardened", as_user: str, user: str, password: str) -> int:
    from shoal.auth.scram import salted_password

    salt = os.urandom(32)
    r = _scram(h, as_user, 51, {"deletions": [], "upsertions": [{
        "name": user, "mechanism": 2, "iterations": 4096, "salt": salt,
        "salted_password": salted_password(MECH, password, salt, 4096)}]})
    return int(r.results[0].error_code)


def test_non_admin_cannot_take_over_the_admin(hard, tmp_path):
    # the attack: no authorizer, the non-admin sets the admin's password (with `shoal scram set`)
    props = tmp_path / "worker.properties"
    props.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={MECH}\n"
                     f"sasl.username=worker\nsasl.password={hard.passwords['worker']}\n")
    import subprocess

    r = subprocess.run([sys.executable, "-m", "shoal", "scram", "set", "boss", "--password-stdin",
                        "--bootstrap-server", hard.broker.sasl_bootstrap, "--command-config", str(props)],
                       input="pwned\n", capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])))
    assert r.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr, (r.stdout, r.stderr)
    assert _alter(hard, "worker", "boss", "pwned") == 31  # CLUSTER_AUTHORIZATION_FAILED
    assert _alter(hard, "worker", "sneaky", "pw") == 31  # nor create users
    # the admin's password is unchanged, and the takeover through the HTTP API fails
    assert plain_login(hard.broker.sasl_bootstrap, "boss", "pwned")[0] != 0
    assert hard.http("GET", f"/v1/tenants/{hard.a}", auth=("boss", "pwned"))[0] == 401
    assert hard.http("GET", f"/v1/tenants/{hard.a}", auth=("boss", hard.passwords["boss"]))[0] == 200
    assert hard.http("GET", f"/v1/tenants/{hard.a}", auth=("worker", hard.passwords["worker"]))[0] == 403
    # others' credentials are not listed to it (the same answer whether they exist or not); its own are
    for names in (None, [{"name": "boss"}], [{"name": "no-such-user"}]):
        assert int(_scram(hard, "worker", 50, {"users": names}).error_code) == 31
    own = _scram(hard, "worker", 50, {"users": [{"name": "worker"}]})
    assert int(own.error_code) == 0 and [r.user for r in own.results] == ["worker"]
    # it changes its own password, over its authenticated connection
    assert _alter(hard, "worker", "worker", "worker-pw2") == 0
    hard.passwords["worker"] = "worker-pw2"
    assert plain_login(hard.broker.sasl_bootstrap, "worker", "worker-pw2")[0] == 0
    # the tenant's admin may set its users' passwords
    assert _alter(hard, "boss", "worker", "worker-pw3") == 0
    hard.passwords["worker"] = "worker-pw3"
    assert plain_login(hard.broker.sasl_bootstrap, "worker", "worker-pw3")[0] == 0


# -- item 10: brute force -------------------------------------------------------------------------


def test_brute_force_is_slowed_per_address_and_user_never_the_account(hard):
    """Issue 10: guesses on one user are checked a few per second at most, another user from the
    same address keeps its speed. Issue 24: keyed per user, an 8-connection attack refused the
    owner's correct password 5 times of 6; now the guessing address is slowed, not the account:
    the owner gets in every time from her own address (a real client, SCRAM)."""
    sasl = hard.broker.sasl_bootstrap
    attacker_host = "127.0.0.2"  # another loopback address: the attacker's host
    worker_pw = hard.passwords["worker"]
    before = [plain_login(sasl, "worker", worker_pw, source=attacker_host) for _ in range(10)]
    assert all(code == 0 for code, _ in before)
    base = statistics.median(t for _, t in before)

    stop = threading.Event()
    answers: list[int] = []
    legit: list[tuple[int, float]] = []
    owner: list[tuple[bool, float]] = []

    def attacker(i: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                answers.append(plain_login(sasl, "victim", f"guess-{i}-{n}", timeout=15, source=attacker_host)[0])
            except (OSError, EOFError):  # the broker stopping at the end
                pass

    def owner_of_another_user() -> None:  # on the attacker's host
        while not stop.is_set():
            legit.append(plain_login(sasl, "worker", worker_pw, source=attacker_host))
            time.sleep(0.05)

    def victims_owner() -> None:  # from 127.0.0.1, with librdkafka and SCRAM-SHA-512
        time.sleep(1.0)
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                ok = cluster_id(hard.conf("victim")) is not None
            except KafkaException:
                ok = False
            owner.append((ok, time.monotonic() - t0))
            time.sleep(0.5)

    threads = [threading.Thread(target=attacker, args=(i,), daemon=True) for i in range(8)]
    threads += [threading.Thread(target=owner_of_another_user, daemon=True),
                threading.Thread(target=victims_owner, daemon=True)]
    failures0 = metric_value(metrics_text(hard)[1], "shoal_login_failures")
    start = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(3.0)  # past the first burst (one check per connection already open)
    failures1, t1 = metric_value(metrics_text(hard)[1], "shoal_login_failures"), time.monotonic()
    time.sleep(8.0)
    failures2, t2 = metric_value(metrics_text(hard)[1], "shoal_login_failures"), time.monotonic()
    stop.set()
    for t in threads:
        t.join(60)
    steady = (failures2 - failures1) / (t2 - t1)
    overall = (failures2 - failures0) / (t2 - start)
    print(f"passwords of one user checked: {steady:.2f}/s steady, {overall:.2f}/s overall "
          f"({len(answers)} answers to 8 connections); other user's login median "
          f"{statistics.median(t for _, t in legit) * 1000:.1f} ms (before {base * 1000:.1f} ms); "
          f"the owner: {sum(ok for ok, _ in owner)}/{len(owner)} in from her host, "
          f"slowest {max(t for _, t in owner):.2f} s")
    assert answers and all(code == 58 for code in answers)  # SASL_AUTHENTICATION_FAILED, every one
    assert steady <= 2.0, steady  # 612/s before issue 10's fix
    assert failures2 - failures0 <= 8 + 2.0 * (t2 - start)
    # the other user, from the same address, logged in all along at its usual speed
    assert len(legit) >= 20 and all(code == 0 for code, _ in legit)
    assert statistics.median(t for _, t in legit) <= max(0.1, 4 * base)
    # the victim's owner got in every time from her host, at once (5 times of 6 refused before)
    assert len(owner) >= 3 and all(ok for ok, _ in owner), owner
    assert max(t for _, t in owner) < 5.0, owner
    # one log line per user per 10 s, not one per attempt
    assert hard.log().count("as 'victim'") <= 4
    assert plain_login(sasl, "victim", hard.passwords["victim"])[1] < 0.5


def test_http_basic_is_backed_off(hard):
    url = f"/v1/tenants/{hard.a}"
    failures0 = metric_value(metrics_text(hard)[1], "shoal_login_failures")
    t0 = time.monotonic()
    for _ in range(5):
        assert hard.http("GET", url, auth=("boss", "wrong"))[0] == 401
    slow = time.monotonic() - t0  # 100 + 200 + 400 + 800 + 1600 ms of answers held back
    # one backoff for SASL and HTTP: the failures count where the SASL listeners' do
    assert metric_value(metrics_text(hard)[1], "shoal_login_failures") - failures0 == 5
    t0 = time.monotonic()
    assert hard.http("GET", url, auth=OP)[0] == 200  # another user: not slowed
    fast = time.monotonic() - t0
    assert slow >= 2.5 and fast < 1.0, (slow, fast)
    # the owner gets in (after the backoff slot), and that clears the state
    assert hard.http("GET", url, auth=("boss", hard.passwords["boss"]))[0] == 200


# -- item 12: /metrics ------------------------------------------------------------------------------


def _non_loopback_address() -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent
            addr = s.getsockname()[0]
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


def test_metrics_loopback_and_super_users_only(hard):
    assert metrics_text(hard, auth=None)[0] == 401
    assert metrics_text(hard, auth=("worker", hard.passwords["worker"]))[0] == 403
    assert metrics_text(hard, auth=("op", "wrong"))[0] == 401
    status, text = metrics_text(hard)
    assert status == 200 and "shoal_login_failures" in text
    # one keep-alive connection, as a Prometheus server scrapes: 401 (with the Basic challenge),
    # then two scrapes, a wrong path and a wrong method, all answered on it
    import base64
    import http.client

    port = int(hard.metrics_url.split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    basic = {"Authorization": "Basic " + base64.b64encode(b"op:op-secret").decode()}
    answers, sockets = [], []
    for method, path, headers in (("GET", "/metrics", {}), ("GET", "/metrics", basic), ("GET", "/metrics", basic),
                                  ("GET", "/nope", basic), ("POST", "/metrics", basic)):
        conn.request(method, path, headers=headers)
        sockets.append(conn.sock)  # http.client opens a new one after an answer that closed the last
        r = conn.getresponse()
        answers.append((r.status, r.getheader("WWW-Authenticate"), r.read()))
    conn.close()
    assert all(s is sockets[0] for s in sockets)  # one connection
    assert [a[0] for a in answers] == [401, 200, 200, 404, 405]
    assert answers[0][1] == 'Basic realm="shoal"' and b"shoal_login_failures" in answers[2][2]
    assert answers[3][2] == b"not found: try /metrics\n" and answers[4][2] == b"GET only\n"
    assert f"Prometheus metrics on http://127.0.0.1:{hard.metrics_url.split(':')[2].split('/')[0]}" in hard.log()
    other = _non_loopback_address()
    if other is not None:  # the machine has another address: the endpoint is not on it
        port = int(hard.metrics_url.split(":")[2].split("/")[0])
        with pytest.raises(OSError):
            socket.create_connection((other, port), timeout=3).close()


# -- item 13 (names): internal topics, tenant-shaped group ids --------------------------------------


def test_tenant_cannot_create_internal_topics_or_tenant_shaped_groups(hard):
    admin = AdminClient(hard.conf("boss"))  # kept alive until the results are in
    futs = admin.create_topics([NewTopic("__x", 1, 1), NewTopic("ok-x", 1, 1)])
    with pytest.raises(KafkaException) as e:
        futs["__x"].result(timeout=15)
    assert e.value.args[0].code() == 17  # INVALID_TOPIC_EXCEPTION (librdkafka: TOPIC_EXCEPTION)
    futs["ok-x"].result(timeout=15)
    assert "__x" not in AdminClient(hard.conf("boss")).list_topics(timeout=15).topics

    from shoal.client import AdminClient as ShoalAdmin, ClientSecurity

    async def join(group: str) -> int:
        security = ClientSecurity.from_properties({
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": MECH,
            "sasl.username": "worker", "sasl.password": hard.passwords["worker"]})
        c = ShoalAdmin(hard.broker.sasl_bootstrap, security=security, timeout=15)
        await c.connect()
        try:
            r = await c.request(11, {"group_id": group, "session_timeout": 30_000, "rebalance_timeout": 30_000,
                                     "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                     "protocols": [{"name": "range", "metadata": b""}], "reason": None})
            return int(r.error_code)
        finally:
            await c.close()

    assert asyncio.run(join(f"{hard.b}_g")) == 24  # INVALID_GROUP_ID
    assert asyncio.run(join("plain-group")) in (0, 79)  # ok / MEMBER_ID_REQUIRED (KIP-394)


# -- item 11: timing of HTTP Basic ------------------------------------------------------------------


@pytest.fixture(scope="module")
def timing_broker():
    """Basic authentication without backoff delays (so only the password check is timed), and
    /metrics given as a bare port (loopback), its authentication turned off on its own."""
    workdir = Path(tempfile.mkdtemp(prefix="shoal-hard-timing-"))
    b = TenantBroker(workdir, {"shoal.admin.authentication": "basic", "super.users": "User:op",
                               "shoal.sasl.bootstrap.users": "op:op-secret",
                               "connection.failed.authentication.delay.ms": "0",
                               "shoal.metrics.listener": str(free_port()),
                               "shoal.metrics.authentication": "none"})
    b.start()
    try:
        yield b
    finally:
        b.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_http_basic_unknown_and_known_users_take_as_long(timing_broker):
    b = timing_broker
    known, unknown = [], []
    for i in range(40):
        for user, out in (("op", known), (f"nobody-{i}", unknown)):
            t0 = time.perf_counter()
            assert http_json(b.admin_url, "GET", "/v1/tenants", auth=(user, "wrong"))[0] == 401
            out.append(time.perf_counter() - t0)
    k, u = statistics.median(known), statistics.median(unknown)
    print(f"HTTP Basic 401: known user {k * 1000:.2f} ms, unknown {u * 1000:.2f} ms (medians of 40)")
    assert 0.6 <= k / u <= 1.6, (k, u)  # before: 2.6 ms vs 0.1-0.2 ms server-side
    assert http_json(b.admin_url, "GET", "/v1/tenants", auth=OP)[0] == 200


def test_metrics_default_is_loopback_without_auth(timing_broker):
    log = timing_broker.log_path.read_text(errors="replace")
    line = next(l for l in log.splitlines() if "Prometheus metrics on" in l)
    assert "http://127.0.0.1:" in line and "authentication: none" in line
    port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=15) as resp:
        assert resp.status == 200
