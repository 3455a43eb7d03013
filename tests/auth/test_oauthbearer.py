"""SASL/OAUTHBEARER's pure parts: the client's message, the validators, the JWKS cache's refresh
rules, identity pool filters and matching, the session (lifetime, error challenge), and identity
pools in the embedded metadata store (journal and snapshot). No broker: see
tests/e2e/test_oauth_clients.py for real clients."""

from __future__ import annotations

import base64
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

jwt = pytest.importorskip("jwt")
from cryptography.hazmat.primitives.asymmetric import ec, rsa  # noqa: E402

from shoal.auth.oauthbearer import (  # noqa: E402
    JwksCache, JwksValidator, OAuthBearerServer, TokenRejected, UnsecuredValidator, parse_client_initial,
)
from shoal.auth.sasl import AuthenticationFailed, SaslSession  # noqa: E402
from shoal.metadata import IdentityPool, MetadataError  # noqa: E402
from shoal.metadata.embedded import EmbeddedMetadataStore  # noqa: E402
from shoal.metadata.rules.identity_pools import check_filter  # noqa: E402
from shoal.tenancy.identity_pools import NoIdentity, filter_matches, resolve_principal  # noqa: E402

ISS = "https://idp.example"
RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC = ec.generate_private_key(ec.SECP256R1())


def message(token: str, *, header: str = "n,,", ext: str = "") -> bytes:
    return f"{header}\x01auth=Bearer {token}\x01{ext}\x01".encode()


def unsecured(claims: dict, alg: str = "none") -> str:
    def part(d):
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")

    return f"{part({'alg': alg})}.{part(claims)}."


# -- the client's message -----------------------------------------------------------------------


def test_parse_client_initial():
    m = parse_client_initial(message("abc.def.ghi", ext="identityPoolId=pool-abcdef\x01traceId=x y\x01"))
    assert (m.authzid, m.token, dict(m.extensions)) == ("", "abc.def.ghi", {"identityPoolId": "pool-abcdef",
                                                                            "traceId": "x y"})
    assert parse_client_initial(message("t", header="n,a=bob,")).authzid == "bob"
    assert parse_client_initial(b"n,,\x01auth=bearer   tok-1_2.3\x01\x01").token == "tok-1_2.3"


@pytest.mark.parametrize("raw", [
    b"", b"n,,", b"\x01", b"n,,\x01\x01", b"y,,\x01auth=Bearer t\x01\x01", b"p=tls,,\x01auth=Bearer t\x01\x01",
    b"n,a=a,b,\x01auth=Bearer t\x01\x01", b"n,,\x01auth=Bearer t\x01", b"n,,\x01auth=Basic dXNlcg==\x01\x01",
    b"n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01", b"n,,\x01auth=Bearer\x01\x01", b"n,,\x01noequals\x01\x01",
    b"n,,\x01k3y=v\x01auth=Bearer t\x01\x01", b"n,,\x01auth=Bearer t\x01k=\x00\x01\x01", b"\xff\xfe\x01\x01",
    b"n,,\x01auth=Bearer t t\x01\x01",
])
def test_malformed_client_messages_are_refused(raw):
    with pytest.raises(TokenRejected) as e:
        parse_client_initial(raw)
    assert e.value.status == "invalid_request"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200),
                 st.lists(st.sampled_from(["n,,", "n,a=x,", "\x01", "auth=", "Bearer ", "a.b.", "=", ",",
                                           "eyJhbGciOiJub25lIn0", "k=v", "\x00", "é"]), max_size=12)
                 .map(lambda parts: "".join(parts).encode())))
def test_no_client_message_crashes_the_server(raw):
    """Whatever a client sends: the error challenge (then failure), or success; nothing else."""
    server = OAuthBearerServer(UnsecuredValidator(), lambda claims, ext: "u")
    try:
        out = server.evaluate(raw)
    except AuthenticationFailed:
        return
    if not server.complete:
        assert json.loads(out)["status"] in ("invalid_token", "invalid_request", "insufficient_scope")
        with pytest.raises(AuthenticationFailed):
            server.evaluate(b"\x01")


# -- validators ---------------------------------------------------------------------------------


def test_unsecured_validator():
    v = UnsecuredValidator(skew_s=2, required_scope=("kafka",))
    now = time.time()
    ok = {"sub": "alice", "exp": now + 60, "iat": now, "scope": "kafka other"}
    assert v.validate(unsecured(ok))["sub"] == "alice"
    for claims, alg, why in (
        ({**ok, "exp": now - 10}, "none", "expired"),
        ({k: x for k, x in ok.items() if k != "exp"}, "none", "no 'exp'"),
        ({**ok, "iat": now + 60}, "none", "'iat' is in the future"),
        ({**ok, "scope": "other"}, "none", "required scope"),
        ({**ok, "exp": "soon"}, "none", "not a number"),
        (ok, "RS256", "expected 'none'"),
    ):
        with pytest.raises(TokenRejected, match=why):
            v.validate(unsecured(claims, alg))
    with pytest.raises(TokenRejected):
        v.validate(unsecured(ok) + "sig")  # a signature: not an unsecured token
    with pytest.raises(TokenRejected):
        v.validate("a.b")


class FixedKeys(JwksCache):
    """A JwksCache over a dict of JWKs (no HTTP): counts the fetches its rules ask for."""

    def __init__(self, keys: list[dict], **kw) -> None:
        self.now = 0.0
        super().__init__("memory:", refresh_ms=kw.pop("refresh_ms", 3_600_000), timeout_s=1,
                         min_interval_s=kw.pop("min_interval_s", 10), clock=lambda: self.now)
        self.published = keys

    def _fetch(self) -> None:
        self._tried_at = self._clock()
        self.fetches += 1
        self._keys = {k["kid"]: jwt.PyJWK(k) for k in self.published}
        self._fetched_at = self._clock()


def jwk(key, kid: str) -> dict:
    alg = jwt.algorithms.ECAlgorithm if isinstance(key, ec.EllipticCurvePrivateKey) else jwt.algorithms.RSAAlgorithm
    d = alg.to_jwk(key.public_key(), as_dict=True)
    d["kid"] = kid
    return d


def signed(key, kid: str, **claims) -> str:
    now = time.time()
    base = {"sub": "svc", "iss": ISS, "aud": "kafka", "iat": int(now), "exp": now + 60}
    alg = "ES256" if isinstance(key, ec.EllipticCurvePrivateKey) else "RS256"
    return jwt.encode({**base, **claims}, key, algorithm=alg, headers={"kid": kid})


def test_jwks_validator_checks_signature_audience_issuer_and_times():
    keys = FixedKeys([jwk(RSA, "r1"), jwk(EC, "e1")])
    v = JwksValidator(keys, audience=("kafka", "other"), issuer=ISS, skew_s=5)
    assert v.validate(signed(RSA, "r1"))["sub"] == "svc"
    assert v.validate(signed(EC, "e1", aud=["x", "other"]))["sub"] == "svc"
    assert v.validate(signed(RSA, "r1", exp=time.time() - 3))  # within the clock skew
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = time.time()
    for token, why in (
        (signed(stranger, "r1"), "bad signature"),
        (signed(RSA, "r1", exp=now - 60), "expired"),
        (signed(RSA, "r1", nbf=now + 60), "not valid yet"),
        (signed(RSA, "r1", iat=now + 60), "not valid yet"),
        (signed(RSA, "r1", aud="billing"), "wrong audience"),
        (signed(RSA, "r1", iss="https://evil.example"), "wrong issuer"),
        (jwt.encode({"sub": "x", "exp": now + 60}, "secret-hmac-key-of-32-bytes-at-least!", algorithm="HS256",
                    headers={"kid": "r1"}), "not allowed"),
        (unsecured({"sub": "x", "exp": now + 60}), "not allowed"),
        (signed(RSA, "nope"), "no key with kid 'nope'"),
        ("garbage", "not a JWT"),
    ):
        with pytest.raises(TokenRejected, match=why):
            v.validate(token)
    no_exp = jwt.encode({"sub": "x", "iss": ISS, "aud": "kafka"}, RSA, algorithm="RS256", headers={"kid": "r1"})
    with pytest.raises(TokenRejected, match="required claim"):
        v.validate(no_exp)


def test_jwks_refresh_on_an_unknown_kid_is_rate_limited():
    keys = FixedKeys([jwk(RSA, "r1")], min_interval_s=10, refresh_ms=60_000)
    v = JwksValidator(keys)
    v.validate(signed(RSA, "r1"))
    assert keys.fetches == 1
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    keys.published = [jwk(RSA, "r1"), jwk(rotated, "r2")]  # the provider rotates
    keys.now = 1.0
    with pytest.raises(TokenRejected, match="no key with kid 'r2'"):
        v.validate(signed(rotated, "r2"))  # fetched less than 10 s ago: not again
    for kid in ("x1", "x2", "x3"):  # made-up kids do not make it fetch either
        with pytest.raises(TokenRejected):
            v.validate(signed(rotated, kid))
    assert keys.fetches == 1
    keys.now = 11.0
    assert v.validate(signed(rotated, "r2"))  # an unknown kid, 10 s on: one fetch finds it
    assert keys.fetches == 2
    keys.now = 30.0
    v.validate(signed(RSA, "r1"))
    assert keys.fetches == 2  # known kid, keys younger than refresh_ms
    keys.now = 75.0
    v.validate(signed(RSA, "r1"))
    assert keys.fetches == 3  # keys older than refresh_ms


def test_jwks_cache_fetches_over_http_with_a_timeout_and_keeps_keys_when_the_endpoint_fails(tmp_path):
    doc = tmp_path / "jwks.json"
    doc.write_text(json.dumps({"keys": [jwk(RSA, "r1"), {"kty": "bogus", "kid": "b"}]}))
    cache = JwksCache(doc.as_uri(), refresh_ms=1000, timeout_s=1, min_interval_s=0)
    assert len(cache.keys_for("r1")) == 1 and cache.keys_for("b") == []
    doc.unlink()
    cache.refresh()  # fails (logged): the old keys stay
    assert len(cache.keys_for("r1")) == 1
    unreachable = JwksCache("http://127.0.0.1:9/jwks", refresh_ms=1000, timeout_s=0.5, min_interval_s=60)
    t0 = time.monotonic()
    assert unreachable.keys_for("r1") == [] and unreachable.keys_for("r1") == []
    assert unreachable.fetches == 1 and time.monotonic() - t0 < 2


# -- identity pools -----------------------------------------------------------------------------


def pool(pid: str, tenant: str, flt: dict, issuer: str = ISS, claim: str = "sub") -> IdentityPool:
    return IdentityPool(pid, tenant, issuer, check_filter(flt), claim)


def test_claim_filters():
    claims = {"groups": ["a", "b"], "scope": "read write", "client_id": "billing", "n": 3}
    assert filter_matches({}, claims)
    assert filter_matches({"claim": "groups", "contains": "b"}, claims)
    assert filter_matches({"claim": "scope", "contains": "write"}, claims)
    assert not filter_matches({"claim": "scope", "contains": "rea"}, claims)
    assert filter_matches({"claim": "client_id", "equals": "billing"}, claims)
    assert filter_matches({"claim": "groups", "equals": "a"}, claims)
    assert not filter_matches({"claim": "client_id", "contains": "bill"}, claims)
    assert not filter_matches({"claim": "n", "equals": "3"}, claims)
    assert not filter_matches({"claim": "missing", "equals": "x"}, claims)
    for bad in ({"claim": "g"}, {"equals": "x"}, {"claim": "g", "equals": "x", "contains": "y"},
                {"claim": "g", "equals": ""}, {"claim": "g", "equals": 3}, "g", ["g"], {"claim": "g", "like": "x"}):
        with pytest.raises(MetadataError) as e:
            check_filter(bad)
        assert e.value.code == "INVALID_REQUEST"


def test_resolve_principal():
    pools = {p.pool_id: p for p in (
        pool("pool-aaaaaa", "lkc-aaaaaa", {"claim": "groups", "contains": "team-a"}),
        pool("pool-bbbbbb", "lkc-bbbbbb", {"claim": "groups", "contains": "team-b"}, claim="client_id"),
        pool("pool-cccccc", "lkc-cccccc", {}, issuer="https://other.example"),
    )}
    a = {"iss": ISS, "sub": "svc-1", "groups": ["team-a"]}
    assert resolve_principal(pools, a) == "lkc-aaaaaa_svc-1"
    assert resolve_principal(pools, {"iss": ISS, "sub": "s", "client_id": "billing", "groups": ["team-b"]}) \
        == "lkc-bbbbbb_billing"
    assert resolve_principal(pools, {"iss": "https://other.example", "sub": "z"}) == "lkc-cccccc_z"
    both = {**a, "groups": ["team-a", "team-b"], "client_id": "c"}
    with pytest.raises(NoIdentity, match="2 identity pools match"):
        resolve_principal(pools, both)
    assert resolve_principal(pools, both, extensions={"identityPoolId": "pool-bbbbbb"}) == "lkc-bbbbbb_c"
    with pytest.raises(NoIdentity, match="does not match identity pool"):
        resolve_principal(pools, a, extensions={"identityPoolId": "pool-bbbbbb"})
    with pytest.raises(NoIdentity, match="does not match identity pool"):
        resolve_principal(pools, a, extensions={"identityPoolId": "pool-zzzzzz"})
    with pytest.raises(NoIdentity, match="no usable 'client_id'"):
        resolve_principal(pools, {"iss": ISS, "sub": "s", "groups": ["team-b"]})
    nobody = {"iss": ISS, "sub": "alice", "groups": ["team-z"]}
    with pytest.raises(NoIdentity, match="no identity pool matches"):
        resolve_principal(pools, nobody, required=True)
    assert resolve_principal(pools, nobody) == "alice"  # Kafka's behaviour when pools are optional
    assert resolve_principal(pools, {**nobody, "email": "a@x"}, principal_claim="email") == "a@x"
    for name in ("ANONYMOUS", "lkc-aaaaaa_svc-1", "", "tab\there"):  # never a name no one may log in as
        with pytest.raises(NoIdentity):
            resolve_principal(pools, {**nobody, "sub": name})


# -- the session ----------------------------------------------------------------------------------


def session(validator, resolve=lambda claims, ext: claims["sub"], max_reauth_ms: int = 0) -> SaslSession:
    s = SaslSession(("OAUTHBEARER",), lambda u, m: None, max_reauth_ms=max_reauth_ms,
                    oauth=lambda: OAuthBearerServer(validator, resolve))
    assert s.handshake("OAUTHBEARER") is None
    return s


def test_session_lifetime_is_bounded_by_the_token():
    v = UnsecuredValidator()
    now_ms = int(time.time() * 1000)
    s = session(v, max_reauth_ms=60_000)
    out, lifetime = s.authenticate(message(unsecured({"sub": "al", "exp": now_ms / 1000 + 5})), now_ms)
    assert out == b"" and 4900 <= lifetime <= 5000 and s.principal == "User:al"
    assert s.gate(3, now_ms + lifetime + 1) == "SASL session expired (the OAUTHBEARER credential's lifetime ended) " \
                                               "without re-authentication"
    s = session(v, max_reauth_ms=2_000)
    assert s.authenticate(message(unsecured({"sub": "al", "exp": now_ms / 1000 + 5})), now_ms)[1] == 2000
    # re-authentication with a fresh token keeps the session; another principal ends it
    assert s.handshake("OAUTHBEARER") is None
    assert s.authenticate(message(unsecured({"sub": "al", "exp": now_ms / 1000 + 9})), now_ms + 1500)[1] == 2000
    assert s.gate(3, now_ms + 3000) is None
    assert s.handshake("OAUTHBEARER") is None
    with pytest.raises(AuthenticationFailed):
        s.authenticate(message(unsecured({"sub": "bob", "exp": now_ms / 1000 + 9})), now_ms + 3000)


def test_refused_token_error_challenge_then_failure():
    s = session(UnsecuredValidator(), resolve=lambda claims, ext: (_ for _ in ()).throw(TokenRejected("no pool")))
    out, lifetime = s.authenticate(message(unsecured({"sub": "al", "exp": time.time() + 60})), 0)
    assert (json.loads(out), lifetime, s.authenticated) == ({"status": "invalid_token"}, 0, False)
    assert s.server is not None and s.server.rejection == "no pool"  # type: ignore[attr-defined]
    with pytest.raises(AuthenticationFailed) as e:
        s.authenticate(b"\x01", 0)
    assert str(e.value) == '{"status":"invalid_token"}' and e.value.logged
    assert s.gate(3, 0) == "request after a failed authentication"
    s = session(UnsecuredValidator())  # an authorization id must be the principal
    out, _ = s.authenticate(message(unsecured({"sub": "al", "exp": time.time() + 60}), header="n,a=bob,"), 0)
    assert json.loads(out) == {"status": "invalid_token"}
    s = session(UnsecuredValidator())
    out, _ = s.authenticate(message(unsecured({"sub": "al", "exp": time.time() + 60}), header="n,a=al,"), 0)
    assert out == b"" and s.principal == "User:al"


def test_oauthbearer_is_refused_where_not_configured():
    s = SaslSession(("PLAIN", "OAUTHBEARER"), lambda u, m: None)  # enabled, but no validator
    assert s.handshake("OAUTHBEARER") == "UNSUPPORTED_SASL_MECHANISM"


# -- identity pools in the store ---------------------------------------------------------------


async def test_identity_pools_persist_and_go_with_their_tenant(tmp_path):
    s = EmbeddedMetadataStore(tmp_path, node_id=1)
    await s.start()
    a = await s.create_tenant("a")
    b = await s.create_tenant("b")
    pa = await s.create_identity_pool(a.tenant_id, ISS, {"claim": "groups", "contains": "team-a"})
    pb = await s.create_identity_pool(b.tenant_id, ISS, None, principal_claim="client_id", display_name="all of b")
    assert pa.pool_id.startswith("pool-") and pa.pool_id != pb.pool_id
    with pytest.raises(MetadataError) as e:  # the same mapping twice
        await s.create_identity_pool(a.tenant_id, ISS, {"claim": "groups", "contains": "team-a"})
    assert e.value.code == "INVALID_REQUEST"
    with pytest.raises(MetadataError) as e:
        await s.create_identity_pool("lkc-zzzzzz", ISS, None)
    assert e.value.code == "RESOURCE_NOT_FOUND"
    await s.close()
    s = EmbeddedMetadataStore(tmp_path, node_id=1)  # from the journal
    await s.start()
    assert s.image.identity_pools == {pa.pool_id: pa, pb.pool_id: pb}
    await s.delete_tenant(b.tenant_id)
    assert list(s.image.identity_pools) == [pa.pool_id]
    await s.compact()  # into the snapshot
    await s.close()
    s = EmbeddedMetadataStore(tmp_path, node_id=1)
    await s.start()
    assert s.image.identity_pools == {pa.pool_id: pa}
    assert (await s.delete_identity_pool(pa.pool_id)) == pa and not s.image.identity_pools
    with pytest.raises(MetadataError):
        await s.delete_identity_pool(pa.pool_id)
    await s.close()


# -- an https JWKS endpoint behind a private CA ---------------------------------------------------


@pytest.fixture
def https_jwks(tmp_path):
    """A JWKS over HTTPS on 127.0.0.1 with a certificate from a private CA naming localhost only
    (no address); (its https URL on localhost, the Pki)."""
    import ssl

    from auth_certs import make_pki, make_server_cert
    from jwks_server import JwksServer

    pki = make_pki(tmp_path / "pki")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(make_server_cert(pki, "jwks", ["localhost"])))
    server = JwksServer(json.dumps({"keys": [jwk(RSA, "r1")]}).encode(), ctx, host="localhost")
    try:
        yield server.url, pki
    finally:
        server.close()


def _oauth_listener_config(url: str, jaas: str | None) -> "BrokerConfig":
    from shoal.config import BrokerConfig

    values = {"listeners": "OAUTH://127.0.0.1:0", "listener.security.protocol.map": "OAUTH:SASL_PLAINTEXT",
              "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
              "sasl.oauthbearer.jwks.endpoint.url": url}
    if jaas is not None:
        values["listener.name.oauth.oauthbearer.sasl.jaas.config"] = jaas
    return BrokerConfig(values)


MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"


def test_an_https_jwks_endpoint_is_checked_against_the_listeners_jaas_truststore(https_jwks):
    """As Kafka reads them for the JWKS endpoint: the ``ssl.*`` options of the listener's
    OAuthBearerLoginModule entry. Without them the system's CAs, which do not know the private
    CA: no keys (and one warning); with ``ssl.truststore.location`` the keys; the host name is
    checked unless ``ssl.endpoint.identification.algorithm`` is empty."""
    from shoal.auth import listener_security
    from shoal.config import ConfigError

    url, pki = https_jwks

    def keys(jaas: str | None, at: str = url) -> int:
        sec = listener_security(_oauth_listener_config(at, jaas))["OAUTH"]
        return len(sec.oauth_validator.keys.keys_for("r1"))

    assert keys(None) == 0  # the system's CAs: refused
    assert keys(f'{MODULE} ssl.truststore.location="{pki.ca}";') == 1
    by_ip = url.replace("localhost", "127.0.0.1")  # the same server, by a name its certificate does not carry
    assert keys(f'{MODULE} ssl.truststore.location="{pki.ca}";', by_ip) == 0
    assert keys(f'{MODULE} ssl.truststore.location="{pki.ca}" ssl.endpoint.identification.algorithm="";', by_ip) == 1
    with pytest.raises(ConfigError, match="ssl.truststore.location"):
        keys(f'{MODULE} ssl.truststore.location="{pki.ca}.missing";')
    with pytest.raises(ConfigError, match="must be PEM"):
        keys(f'{MODULE} ssl.truststore.location="{pki.ca}" ssl.truststore.type="JKS";')
