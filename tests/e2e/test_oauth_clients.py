"""SASL/OAUTHBEARER end to end with real clients: confluent-kafka (librdkafka, ``oauth_cb``) and
aiokafka (a token provider) against a JWKS endpoint this module serves (http.server in a thread)
from keys it generates; identity pools map tokens into tenants; refused tokens (expired, wrongly
signed, wrong audience, wrong issuer, unmapped) fail at the client with an authentication error
and leave one log line at the broker saying why; KIP-368 re-authentication with fresh tokens keeps
a connection, a connection that does not re-authenticate is closed when its token expires.

One broker for the module: PLAINTEXT (the operator), OAUTH (JWKS validator, identity pools
required), UNSEC (Kafka's unsecured validator) and the HTTP admin API with Basic authentication.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

jwt = pytest.importorskip("jwt")
from cryptography.hazmat.primitives.asymmetric import ec, rsa  # noqa: E402

from broker_process import REPO, BrokerProcess, free_port, http_json  # noqa: E402
from jwks_server import JwksServer  # noqa: E402
from raw_client import RawClient  # noqa: E402

ISSUER = "https://idp.test.example"
AUDIENCE = "kafka"
ADMIN = ("admin", "admin-secret")
UNSECURED = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
             "OAuthBearerUnsecuredValidatorCallbackHandler")


class Idp:
    """The identity provider: an RSA and an EC signing key, published as a JWKS over HTTP."""

    def __init__(self) -> None:
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # not published
        keys = []
        for kid, key, alg in (("rsa-1", self.rsa, jwt.algorithms.RSAAlgorithm),
                              ("ec-1", self.ec, jwt.algorithms.ECAlgorithm)):
            jwk = alg.to_jwk(key.public_key(), as_dict=True)
            jwk.update(kid=kid, use="sig", alg="RS256" if kid == "rsa-1" else "ES256")
            keys.append(jwk)
        self.jwks = JwksServer(json.dumps({"keys": keys}).encode())
        self.server, self.url = self.jwks.server, self.jwks.url

    @property
    def hits(self) -> int:
        return self.jwks.hits

    def token(self, sub: str = "svc-a", *, groups: tuple[str, ...] = ("team-a",), ttl: float = 300,
              aud: str = AUDIENCE, iss: str = ISSUER, kind: str = "rsa", iat_offset: float = 0) -> tuple[str, float]:
        now = time.time()
        claims = {"sub": sub, "iss": iss, "aud": aud, "iat": int(now + iat_offset), "exp": now + ttl,
                  "groups": list(groups), "scope": "kafka"}
        if kind == "ec":
            return jwt.encode(claims, self.ec, algorithm="ES256", headers={"kid": "ec-1"}), now + ttl
        key = self.stranger if kind == "stranger" else self.rsa
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "rsa-1"}), now + ttl


class OAuthBroker(BrokerProcess):
    def __init__(self, idp: Idp) -> None:
        workdir = Path(tempfile.mkdtemp(prefix="shoal-oauth-"))
        self.ports = {"OAUTH": free_port(), "UNSEC": free_port()}
        self.admin_url = f"http://127.0.0.1:{free_port()}"
        super().__init__(workdir, overrides={
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OAUTH:SASL_PLAINTEXT,UNSEC:SASL_PLAINTEXT",
            "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.unsec.sasl.enabled.mechanisms": "OAUTHBEARER",
            # (Kafka's form: the mechanism's prefix after the listener's)
            "listener.name.unsec.oauthbearer.sasl.server.callback.handler.class": UNSECURED,
            "listener.name.unsec.shoal.sasl.oauthbearer.identity.pools.required": "false",
            "sasl.oauthbearer.jwks.endpoint.url": idp.url,
            "sasl.oauthbearer.expected.audience": AUDIENCE,
            "sasl.oauthbearer.expected.issuer": ISSUER,
            "sasl.oauthbearer.clock.skew.seconds": "5",
            "shoal.sasl.oauthbearer.identity.pools.required": "true",
            "shoal.sasl.oauthbearer.jwks.refresh.min.interval.ms": "60000",
            "shoal.admin.listener": self.admin_url,
            "shoal.admin.authentication": "basic",
            "shoal.sasl.bootstrap.users": f"{ADMIN[0]}:{ADMIN[1]}",
            "super.users": f"User:ANONYMOUS;User:{ADMIN[0]}",
            "group.initial.rebalance.delay.ms": "0",
        })

    def listeners(self) -> list[str]:
        return super().listeners() + [f"{n}://{self.host}:{p}" for n, p in self.ports.items()]

    def addr(self, listener: str) -> str:
        return f"{self.host}:{self.ports[listener]}"

    def http(self, method: str, path: str, body=None, auth=ADMIN):
        return http_json(self.admin_url, method, path, body, auth=auth)


@pytest.fixture(scope="module")
def env():
    idp = Idp()
    b = OAuthBroker(idp)
    b.start()
    try:
        tenants = {}
        for name, group in (("a", "team-a"), ("b", "team-b")):
            status, t = b.http("POST", "/v1/tenants", {"display_name": f"oauth-{name}"})
            assert status == 201, t
            status, pool = b.http("POST", f"/v1/tenants/{t['tenant_id']}/identity_pools",
                                  {"issuer": ISSUER, "claim_filter": {"claim": "groups", "contains": group}})
            assert status == 201, pool
            tenants[name] = t["tenant_id"]
        yield idp, b, tenants
    finally:
        b.stop()
        idp.server.shutdown()
        shutil.rmtree(b.workdir, ignore_errors=True)


def oauth_conf(b: OAuthBroker, make_token, listener: str = "OAUTH", *, hide_expiry: bool = False, **extra) -> dict:
    calls = []

    def oauth_cb(_config):
        token, expiry = make_token()
        calls.append(time.time())
        if hide_expiry:  # librdkafka refuses a token it knows to be expired: it is told a later time
            expiry = max(expiry, time.time() + 60)
        return token, expiry, "client", {}

    conf = {"bootstrap.servers": b.addr(listener), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": oauth_cb, **extra}
    return conf, calls


def test_good_tokens_produce_and_consume_as_their_tenant(env):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    idp, b, tenants = env
    conf, calls = oauth_conf(b, lambda: idp.token("svc-a", groups=("staff", "team-a")))
    p = Producer({**conf, "linger.ms": 0})
    errors = []
    for i in range(5):
        p.produce("orders", f"v{i}".encode(), on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(20) == 0 and not errors and calls
    c = Consumer({**conf, "group.id": "g-orders", "auto.offset.reset": "earliest"})
    c.subscribe(["orders"])
    got, deadline = [], time.monotonic() + 20
    while len(got) < 5 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == [f"v{i}".encode() for i in range(5)]

    # aiokafka with a token provider (ES256, tenant b)
    from aiokafka import AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider
    from aiokafka.admin import AIOKafkaAdminClient

    class Provider(AbstractTokenProvider):
        async def token(self):
            return idp.token("svc-b", groups=("team-b",), kind="ec")[0]

    async def as_b() -> list[str]:
        kw = dict(bootstrap_servers=b.addr("OAUTH"), security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Provider())
        prod = AIOKafkaProducer(**kw)
        await prod.start()
        try:
            await prod.send_and_wait("invoices", b"i1")
        finally:
            await prod.stop()
        admin = AIOKafkaAdminClient(**kw)
        await admin.start()
        try:
            return sorted(await admin.list_topics())
        finally:
            await admin.close()

    assert [t for t in asyncio.run(as_b()) if not t.startswith("__")] == ["invoices"]
    a_admin = AdminClient(conf)
    a_admin.poll(0)
    assert "invoices" not in a_admin.list_topics(timeout=10).topics  # tenant a sees only its own
    assert "orders" in a_admin.list_topics(timeout=10).topics
    # the operator's view: each topic under its tenant's prefix
    physical = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).topics
    assert f"{tenants['a']}_orders" in physical and f"{tenants['b']}_invoices" in physical


REFUSALS = {
    "expired": (dict(ttl=-60), "the token has expired"),
    "wrongly-signed": (dict(kind="stranger"), "bad signature"),
    "wrong-audience": (dict(aud="other-service"), "wrong audience"),
    "wrong-issuer": (dict(iss="https://evil.example"), "wrong issuer"),
    "unmapped": (dict(groups=("team-c",)), "no identity pool matches the token"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_bad_tokens_are_refused(env, case):
    from confluent_kafka import KafkaError, Producer

    idp, b, _tenants = env
    kwargs, reason = REFUSALS[case]
    sub = f"svc-{case}"
    conf, _calls = oauth_conf(b, lambda: idp.token(sub, **kwargs), hide_expiry=True)
    errors = []
    p = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        p.poll(0.1)
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, errors
    assert "invalid_token" in auth[0].str()
    del p
    lines = [ln for ln in b.log_text().splitlines()
             if "failed authentication" in ln and "OAUTHBEARER" in ln and reason in ln]
    assert lines, b.log_tail()
    assert "Traceback" not in b.log_text()


def test_reauthentication_with_fresh_tokens_keeps_the_connection(env):
    """Tokens live 8 s; librdkafka fetches a new one at 80% of that (its timer ticks once a second)
    and re-authenticates at 85-95% of each session, whose end the broker puts at the token's exp:
    after 9.5 s of producing, the one connection to the broker has outlived its first token."""
    from confluent_kafka import Producer

    idp, b, _tenants = env
    conf, calls = oauth_conf(b, lambda: idp.token("svc-reauth", ttl=8))
    stats = []
    p = Producer({**conf, "linger.ms": 5, "statistics.interval.ms": 500, "stats_cb": stats.append})
    errors, delivered = [], []
    before = b.log_text().count("SASL session expired")
    deadline = time.monotonic() + 9.5
    while time.monotonic() < deadline:
        p.produce("reauth", b"x", on_delivery=lambda err, _m: (errors if err else delivered).append(err))
        p.poll(0.1)
    assert p.flush(15) == 0, (len(delivered), errors, b.log_tail(30))
    assert not errors and len(delivered) > 40
    assert len(calls) >= 2  # the token was refreshed and used to re-authenticate
    brokers = json.loads(stats[-1])["brokers"]
    leader = [s for s in brokers.values() if s["nodeid"] >= 0]
    assert leader and all(s["connects"] == 1 for s in leader), [(s["name"], s["connects"]) for s in leader]
    expired = [ln for ln in b.log_text().splitlines() if "SASL session expired" in ln]
    assert len(expired) == before, (expired, [(s["name"], s["connects"]) for s in brokers.values()])


class Raw(RawClient):
    def oauth(self, token: str, version: int = 1):
        assert self.call(17, 1, {"mechanism": "OAUTHBEARER"}).error_code == 0
        return self.call(36, version, {"auth_bytes": f"n,,\x01auth=Bearer {token}\x01\x01".encode()})


def test_a_connection_that_does_not_reauthenticate_is_closed(env):
    idp, b, _tenants = env
    with Raw(b.addr("OAUTH")) as r:
        resp = r.oauth(idp.token("svc-a", ttl=1.5)[0])
        assert resp.error_code == 0 and 0 < resp.session_lifetime.total_seconds() <= 1.5
        assert r.call(3, 1, {"topics": ()}).brokers
        time.sleep(1.8)
        r.send(3, 1, {"topics": ()})
        assert r.closed()
    assert "SASL session expired (the OAUTHBEARER credential's lifetime ended)" in b.log_text()
    # the raw exchange of a refused token: the error challenge, then \x01, then the failure
    with Raw(b.addr("OAUTH")) as r:
        resp = r.oauth(idp.token("svc-a", ttl=-60)[0], version=2)
        assert resp.error_code == 0 and json.loads(bytes(resp.auth_bytes)) == {"status": "invalid_token"}
        final = r.call(36, 2, {"auth_bytes": b"\x01"})
        assert final.error_code == 58 and final.error_message == '{"status":"invalid_token"}'
        assert r.closed()


def test_unsecured_validator_listener(env):
    from confluent_kafka import Producer

    _idp, b, _tenants = env
    p = Producer({"bootstrap.servers": b.addr("UNSEC"), "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanisms": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
                  "sasl.oauthbearer.config": "principal=dev-alice scope=kafka lifeSeconds=300"})
    errors = []
    p.produce("dev-topic", b"hello", on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(20) == 0 and not errors
    from confluent_kafka.admin import AdminClient

    assert "dev-topic" in AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).topics
    # an unsigned token is no good on the JWKS listener
    with Raw(b.addr("OAUTH")) as r:
        import base64

        def part(d):
            return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")

        token = f"{part({'alg': 'none'})}.{part({'sub': 'x', 'exp': time.time() + 60})}."
        resp = r.oauth(token)
        assert json.loads(bytes(resp.auth_bytes)) == {"status": "invalid_token"}
    assert "is not allowed" in b.log_text()


def test_identity_pools_admin_api_and_cli(env):
    idp, b, tenants = env
    ta = tenants["a"]
    status, found = b.http("GET", f"/v1/tenants/{ta}/identity_pools")
    assert status == 200 and [p["claim_filter"] for p in found["identity_pools"]] == [
        {"claim": "groups", "contains": "team-a"}]
    # bad filters: one line each, nothing stored
    for bad in ({"claim": "groups"}, {"claim": "g", "equals": "x", "contains": "y"}, {"claim": "", "equals": "x"},
                "groups", {"claim": "g", "matches": "x"}):
        status, err = b.http("POST", f"/v1/tenants/{ta}/identity_pools", {"issuer": ISSUER, "claim_filter": bad})
        assert status == 400 and err["error"] == "bad_request", (bad, err)
    assert b.http("POST", "/v1/tenants/lkc-zzzzzz/identity_pools", {"issuer": ISSUER})[0] == 404
    # a tenant administrator manages its users, not its identity pools
    assert b.http("POST", f"/v1/tenants/{ta}/users", {"user": "boss", "password": "boss-pw", "admin": True})[0] == 201
    boss = ("boss", "boss-pw")  # (the operator maps the name into the tenant as it is)
    for method, path, body in (("GET", f"/v1/tenants/{ta}/identity_pools", None),
                               ("POST", f"/v1/tenants/{ta}/identity_pools", {"issuer": ISSUER}),
                               ("GET", "/v1/identity_pools", None)):
        assert b.http(method, path, body, auth=boss)[0] == 403
    # the CLI: create an equality pool, list, use it, delete it
    cli_env = dict(os.environ, PYTHONPATH=str(REPO), SHOAL_ADMIN_USER=ADMIN[0], SHOAL_ADMIN_PASSWORD=ADMIN[1])

    def shoal(*args):
        return subprocess.run([sys.executable, "-m", "shoal", "tenants", "identity-pools", *args,
                               "--admin-url", b.admin_url], capture_output=True, text=True, env=cli_env, timeout=30)

    r = shoal("create", ta, "--issuer", ISSUER, "--claim", "client_id", "--equals", "billing",
              "--principal-claim", "client_id")
    assert r.returncode == 0, r.stderr
    pool_id = r.stdout.strip()
    r = shoal("list", ta)
    assert r.returncode == 0 and pool_id in r.stdout and "client_id equals billing" in r.stdout
    with Raw(b.addr("OAUTH")) as raw:
        token = jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "exp": time.time() + 60, "sub": "x", "client_id": "billing"},
                           idp.rsa, algorithm="RS256", headers={"kid": "rsa-1"})
        assert raw.oauth(token).error_code == 0 and raw.call(3, 1, {"topics": ()}).brokers
    assert shoal("delete", ta, pool_id).returncode == 0
    r = shoal("delete", ta, pool_id)
    assert r.returncode == 1 and "does not exist" in r.stderr
    r = subprocess.run([sys.executable, "-m", "shoal", "tenants", "identity-pools", "list", "--admin-url", b.admin_url],
                       capture_output=True, text=True, env=dict(cli_env, SHOAL_ADMIN_USER="boss",
                                                                SHOAL_ADMIN_PASSWORD="boss-pw"), timeout=30)
    assert r.returncode != 0 and "not allowed" in r.stderr, r.stderr
