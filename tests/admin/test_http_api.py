"""The HTTP admin API and ``shoal tenants|users`` end to end: a real broker subprocess, real HTTP
requests (urllib), restart persistence, and a user created through the API authenticating with
confluent-kafka SCRAM over SASL_PLAINTEXT."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from broker_process import REPO, BrokerProcess, free_port, http_json




class AdminBroker(BrokerProcess):
    """A broker whose clients use SASL_PLAINTEXT (``kafka_port``), with the HTTP admin API
    (``url``) and the bootstrap user admin:admin-secret; ``port`` is a PLAINTEXT listener that
    only serves the readiness check."""

    def __init__(self, workdir: Path, overrides: dict[str, str] | None = None) -> None:
        self.kafka_port = free_port()
        self.admin_port = free_port()
        self.url = f"http://127.0.0.1:{self.admin_port}"
        super().__init__(workdir, overrides={
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "shoal.sasl.bootstrap.users": "admin:admin-secret",
            "shoal.admin.listener": self.url,
            **(overrides or {})})

    def listeners(self) -> list[str]:
        return super().listeners() + [f"SASL_PLAINTEXT://{self.host}:{self.kafka_port}"]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def http(b: AdminBroker, method: str, path: str, body=None, raw: bytes | None = None):
    return http_json(b.url, method, path, body, raw)


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory):
    b = AdminBroker(tmp_path_factory.mktemp("shoal-admin"))
    b.start()
    yield b
    b.stop()


def _error(resp, status: int, code: str) -> None:
    assert resp[0] == status, resp
    assert resp[1]["error"] == code and resp[1]["message"], resp


def test_tenant_endpoints_and_errors(admin_broker):
    b = admin_broker
    status, t = http(b, "POST", "/v1/tenants", {"display_name": "Payments"})
    assert status == 201 and re.fullmatch(r"lkc-[0-9a-z]{6}", t["tenant_id"])
    assert t["display_name"] == "Payments" and t["users"] == [] and t["created_ms"] > 0
    tid = t["tenant_id"]
    status, listing = http(b, "GET", "/v1/tenants")
    assert status == 200 and t in listing["tenants"]
    assert http(b, "GET", f"/v1/tenants/{tid}") == (200, t)

    _error(http(b, "GET", "/v1/tenants/lkc-zzzzzz"), 404, "not_found")
    _error(http(b, "DELETE", "/v1/tenants/lkc-zzzzzz"), 404, "not_found")
    _error(http(b, "GET", "/v2/nothing"), 404, "not_found")
    _error(http(b, "POST", "/v1/tenants", raw=b"{not json"), 400, "bad_request")
    _error(http(b, "POST", "/v1/tenants", raw=b"[1]"), 400, "bad_request")
    _error(http(b, "POST", "/v1/tenants", {"display_name": ""}), 400, "bad_request")
    _error(http(b, "POST", "/v1/tenants", {"display_name": 7}), 400, "bad_request")
    _error(http(b, "PUT", "/v1/tenants"), 405, "method_not_allowed")

    users = f"/v1/tenants/{tid}/users"
    _error(http(b, "POST", users, {"user": "u1"}), 400, "bad_request")
    _error(http(b, "POST", users, {"user": "u1", "password": "p", "mechanism": "MD5"}), 400, "bad_request")
    _error(http(b, "POST", "/v1/tenants/lkc-zzzzzz/users", {"user": "u1", "password": "p"}), 404, "not_found")
    assert http(b, "POST", users, {"user": "u1", "password": "p"}) == (
        201, {"user": "u1", "tenant_id": tid, "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"], "admin": False})
    _error(http(b, "POST", users, {"user": "u9", "password": "p", "admin": "yes"}), 400, "bad_request")
    _error(http(b, "POST", users, {"user": "lkc-abcdef_x", "password": "p"}), 400, "bad_request")
    _error(http(b, "POST", users, {"user": "u1", "password": "p"}), 409, "conflict")
    _error(http(b, "POST", users, {"user": "admin", "password": "p"}), 409, "conflict")  # operator user
    assert http(b, "GET", f"/v1/tenants/{tid}")[1]["users"] == ["u1"]
    assert http(b, "POST", users, {"user": "boss", "password": "p", "admin": True})[1]["admin"] is True
    t_now = http(b, "GET", f"/v1/tenants/{tid}")[1]
    assert t_now["users"] == ["boss", "u1"] and t_now["admins"] == ["boss"]
    assert http(b, "DELETE", f"{users}/boss")[0] == 200
    assert http(b, "GET", f"/v1/tenants/{tid}")[1]["admins"] == []
    _error(http(b, "DELETE", f"{users}/nobody"), 404, "not_found")
    assert http(b, "DELETE", f"{users}/u1") == (200, {"user": "u1", "tenant_id": tid})
    _error(http(b, "DELETE", f"{users}/u1"), 404, "not_found")

    assert http(b, "POST", users, {"user": "u2", "password": "p", "mechanism": "SCRAM-SHA-256"})[0] == 201
    status, deleted = http(b, "DELETE", f"/v1/tenants/{tid}")
    assert status == 200 and deleted["users"] == ["u2"]
    _error(http(b, "GET", f"/v1/tenants/{tid}"), 404, "not_found")
    # the deleted tenant's user is gone with it: the name is free again
    status, t2 = http(b, "POST", "/v1/tenants", {"display_name": "Other"})
    assert http(b, "POST", f"/v1/tenants/{t2['tenant_id']}/users", {"user": "u2", "password": "p"})[0] == 201


def test_openapi_describes_the_endpoints(admin_broker):
    status, doc = http(admin_broker, "GET", "/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.0")
    assert {p: sorted(k for k in ops if k != "parameters") for p, ops in doc["paths"].items()} == {
        "/v1/tenants": ["get", "post"],
        "/v1/tenants/{tenant_id}": ["delete", "get"],
        "/v1/tenants/{tenant_id}/users": ["post"],
        "/v1/tenants/{tenant_id}/users/{user}": ["delete"],
        # namespaces, moves, tenant defaults and policy (shoal.admin.http_namespaces)
        "/v1/tenants/{tenant_id}/namespaces": ["get", "post"],
        "/v1/tenants/{tenant_id}/namespaces/{namespace}": ["delete", "get"],
        "/v1/tenants/{tenant_id}/namespaces/{namespace}/configs": ["get", "patch", "put"],
        "/v1/tenants/{tenant_id}/namespaces/{namespace}/move": ["post"],
        "/v1/tenants/{tenant_id}/topics/{topic}/move": ["post"],
        "/v1/tenants/{tenant_id}/topics/{topic}/configs": ["get"],
        "/v1/tenants/{tenant_id}/configs": ["get", "patch", "put"],
        "/v1/tenants/{tenant_id}/policy": ["get", "put"],
        "/v1/cluster/load": ["get"],  # the balancer's inputs (shoal.cluster.load), the operator's
        # OAuth identity pools (the operator's)
        "/v1/tenants/{tenant_id}/identity_pools": ["get", "post"],
        "/v1/tenants/{tenant_id}/identity_pools/{pool_id}": ["delete", "get"],
        "/v1/identity_pools": ["get"],
        # the balancer and broker removal (issue 27): generated from the routes since issue 30
        "/v1/cluster/balancer": ["get"],
        "/v1/cluster/balancer/plan": ["get"],
        "/v1/cluster/balancer/pause": ["post"],
        "/v1/cluster/balancer/resume": ["post"],
        "/v1/cluster/brokers/{node}/remove": ["delete", "post"],
        # a tenant's usage, bill, quotas and throttling (shoal.admin.http_usage)
        "/v1/tenants/{tenant_id}/usage": ["get"],
    }
    schemas = doc["components"]["schemas"]
    refs = {v for v in _refs(doc["paths"]) if v.startswith("#/components/schemas/")}
    assert refs and all(r.rsplit("/", 1)[1] in schemas for r in refs)  # no dangling $ref


def _refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def test_garbage_does_not_crash_the_server(admin_broker):
    b = admin_broker
    for junk in (b"\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/1.1\r\nbroken header\r\n\r\n",
                 b"POST /v1/tenants HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                 b"POST /v1/tenants HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n",
                 b"POST /v1/tenants HTTP/1.1\r\nContent-Length: 4\r\n\r\n\xff\xfe\x00\x01",
                 b"GET /v1/tenants/%ff%fe HTTP/1.1\r\n\r\n", b"\x00" * 70000, b"GET / HTTP/1.1\r\n"):
        with socket.create_connection(("127.0.0.1", b.admin_port), timeout=15) as s:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        # (HTTP/1.0: aiohttp's parser answers a request it could not parse without trusting its version)
        assert reply == b"" or reply.startswith((b"HTTP/1.1 4", b"HTTP/1.0 4")), (junk[:40], reply[:100])
    assert http(b, "GET", "/v1/tenants")[0] == 200


def _confluent_metadata(b: AdminBroker, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{b.kafka_port}", "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    admin.list_topics(timeout=10)


def test_api_user_authenticates_and_everything_survives_restart(admin_broker):
    from confluent_kafka import KafkaException

    b = admin_broker
    tid = http(b, "POST", "/v1/tenants", {"display_name": "Durable"})[1]["tenant_id"]
    assert http(b, "POST", f"/v1/tenants/{tid}/users", {"user": "dora", "password": "dora-pw"})[0] == 201
    _confluent_metadata(b, "dora", "dora-pw")
    with pytest.raises(KafkaException):
        _confluent_metadata(b, "dora", "wrong")
    data = b"".join(p.read_bytes() for p in (b.workdir / "data" / "__metadata").iterdir())
    assert b"dora" in data and b"dora-pw" not in data  # in the snapshot or its journal
    b.stop()
    b.start()
    t = http(b, "GET", f"/v1/tenants/{tid}")[1]
    assert t["display_name"] == "Durable" and t["users"] == ["dora"]
    _confluent_metadata(b, "dora", "dora-pw")


def test_cli(admin_broker):
    b = admin_broker
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def shoal(*args: str, stdin: str = ""):
        return subprocess.run([sys.executable, "-m", "shoal", *args, "--admin-url", b.url], input=stdin,
                              capture_output=True, text=True, timeout=30, env=env)

    r = shoal("tenants", "create", "Cli Co")
    assert r.returncode == 0, r.stderr
    tid = r.stdout.strip()
    assert re.fullmatch(r"lkc-[0-9a-z]{6}", tid)
    r = shoal("users", "create", "carl", "--tenant", tid, "--password-stdin", stdin="carl-pw\n")
    assert r.returncode == 0 and "(SCRAM-SHA-256, SCRAM-SHA-512)" in r.stdout, r.stderr
    _confluent_metadata(b, "carl", "carl-pw", "SCRAM-SHA-256")  # either mechanism the listener offers
    r = shoal("users", "create", "cleo", "--tenant", tid, "--mechanism", "SCRAM-SHA-256", "--password-stdin",
              stdin="cleo-pw\n")
    assert r.returncode == 0 and "(SCRAM-SHA-256)" in r.stdout, r.stderr
    _confluent_metadata(b, "cleo", "cleo-pw", "SCRAM-SHA-256")
    assert shoal("users", "delete", "cleo").returncode == 0
    r = shoal("users", "create", "carl", "--tenant", tid, "--password-stdin", stdin="x\n")
    assert r.returncode == 1 and "already" in r.stderr
    r = shoal("tenants", "list")
    assert r.returncode == 0 and any(re.fullmatch(rf"{tid}\tCli Co\tcreated=\d{{4}}-\d\d-\d\dT[\d:.]+Z\tusers=carl", line)
                                     for line in r.stdout.splitlines()), r.stdout
    r = shoal("tenants", "describe", tid)
    assert r.returncode == 0 and "Users: carl" in r.stdout and "Name: Cli Co" in r.stdout
    assert "Cell: any broker (no cell)" in r.stdout
    _confluent_metadata(b, "carl", "carl-pw")
    assert shoal("users", "delete", "carl").returncode == 0
    assert "Users: \n" in shoal("tenants", "describe", tid).stdout + "\n"
    assert shoal("tenants", "delete", tid).returncode == 0
    r = shoal("tenants", "describe", tid)
    assert r.returncode == 1 and "does not exist" in r.stderr
    r = subprocess.run([sys.executable, "-m", "shoal", "tenants", "list", "--admin-url",
                        f"http://127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 3 and "cannot reach" in r.stderr


@pytest.fixture(scope="module")
def basic_auth_broker(tmp_path_factory):
    b = AdminBroker(tmp_path_factory.mktemp("shoal-admin-auth"),
                    {"shoal.admin.authentication": "basic", "super.users": "User:admin"})
    b.start()
    yield b
    b.stop()


def test_basic_authentication_and_tenant_administrators(basic_auth_broker):
    b = basic_auth_broker
    op = ("admin", "admin-secret")  # the bootstrap user, a super user
    assert http_json(b.url, "GET", "/v1/tenants")[0] == 401  # no credentials
    _error(http_json(b.url, "GET", "/v1/tenants", auth=("admin", "wrong")), 401, "unauthorized")
    _error(http_json(b.url, "GET", "/v1/tenants", auth=("nobody", "x")), 401, "unauthorized")
    status, t = http_json(b.url, "POST", "/v1/tenants", {"display_name": "A"}, auth=op)
    assert status == 201
    tid = t["tenant_id"]
    other = http_json(b.url, "POST", "/v1/tenants", {"display_name": "B"}, auth=op)[1]["tenant_id"]
    assert http_json(b.url, "POST", f"/v1/tenants/{tid}/users",
                     {"user": "boss", "password": "pw", "admin": True}, auth=op)[0] == 201
    assert http_json(b.url, "POST", f"/v1/tenants/{tid}/users", {"user": "worker", "password": "pw"}, auth=op)[0] == 201
    boss = ("boss", "pw")
    # a tenant administrator reads its tenant and manages its users ...
    assert http_json(b.url, "GET", f"/v1/tenants/{tid}", auth=boss)[1]["admins"] == ["boss"]
    assert http_json(b.url, "POST", f"/v1/tenants/{tid}/users", {"user": "w2", "password": "pw"}, auth=boss)[0] == 201
    # ... but not the tenant list, another tenant (existing or not), or deleting its own tenant
    for method, path in (("GET", "/v1/tenants"), ("GET", f"/v1/tenants/{other}"),
                         ("GET", "/v1/tenants/lkc-zzzzzz"), ("DELETE", f"/v1/tenants/{tid}"),
                         ("POST", f"/v1/tenants/{other}/users")):
        _error(http_json(b.url, method, path, {"user": "x", "password": "y"} if method == "POST" else None,
                         auth=boss), 403, "forbidden")
    # an ordinary tenant user may do nothing here
    _error(http_json(b.url, "GET", f"/v1/tenants/{tid}", auth=("worker", "pw")), 403, "forbidden")
    assert "failed authentication" in b.log() and "'nobody'" in b.log()
    # the CLI sends the credentials from the environment
    env = dict(os.environ, SHOAL_ADMIN_USER="admin", SHOAL_ADMIN_PASSWORD="admin-secret")
    out = subprocess.run([sys.executable, "-m", "shoal", "tenants", "list", "--admin-url", b.url],
                         capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 0 and tid in out.stdout, out.stderr
    env["SHOAL_ADMIN_PASSWORD"] = "bad"
    out = subprocess.run([sys.executable, "-m", "shoal", "tenants", "list", "--admin-url", b.url],
                         capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 1 and "authentication failed" in out.stderr


def test_cluster_load_on_the_embedded_store(admin_broker):
    """One node: the broker's own report is the cluster's (shoal.cluster.load)."""
    status, d = http(admin_broker, "GET", "/v1/cluster/load")
    assert status == 200 and d["stale_brokers"] == [], d
    assert len(d["brokers"]) == 1 and d["brokers"][0]["capacity"]["disk_bytes"] > 0, d
    _error(http(admin_broker, "DELETE", "/v1/cluster/load"), 405, "method_not_allowed")
