"""SCRAM and PLAIN servers (shoal.auth.sasl, shoal.auth.scram) with RFC test vectors."""

from __future__ import annotations

import base64

import pytest
import scramp

from shoal.auth.sasl import AuthenticationFailed, PlainServer, ScramServer, decode_saslname, failure_message
from shoal.auth.scram import (
    check_iterations,
    credential_from_salted_password,
    make_credential,
    parse_bootstrap_users,
    salted_password,
    verify_password,
)

# RFC 7677 section 3: user "user", password "pencil".
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credential():
    return credential_from_salted_password(
        "SCRAM-SHA-256", RFC7677_SALT, salted_password("SCRAM-SHA-256", "pencil", RFC7677_SALT, 4096), 4096
    )


def lookup_for(creds):
    return lambda user, mech: creds.get((user, mech))


def test_rfc7677_exchange_exact_bytes():
    cred = rfc_credential()
    server = ScramServer("SCRAM-SHA-256", lookup_for({("user", "SCRAM-SHA-256"): cred}), b"k",
                         nonce=lambda: RFC7677_SERVER_NONCE)
    assert server.evaluate(RFC7677_CLIENT_FIRST) == RFC7677_SERVER_FIRST
    assert not server.complete
    assert server.evaluate(RFC7677_CLIENT_FINAL) == RFC7677_SERVER_FINAL
    assert server.complete and server.user == "user"


def test_rfc7677_wrong_proof_fails():
    cred = rfc_credential()
    server = ScramServer("SCRAM-SHA-256", lookup_for({("user", "SCRAM-SHA-256"): cred}), b"k",
                         nonce=lambda: RFC7677_SERVER_NONCE)
    server.evaluate(RFC7677_CLIENT_FIRST)
    bad = RFC7677_CLIENT_FINAL[:-6] + b"AAAAA="
    with pytest.raises(AuthenticationFailed) as e:
        server.evaluate(bad)
    assert str(e.value) == failure_message("SCRAM-SHA-256")
    assert not server.complete


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_round_trip_with_scramp_client(mech):
    cred = make_credential(mech, "s3cret", salt=b"0123456789abcdef")
    server = ScramServer(mech, lookup_for({("al,i=ce", mech): cred}), b"k")
    client = scramp.ScramClient([mech], "al,i=ce", "s3cret")
    first = client.get_client_first()
    assert "n=al=2Ci=3Dce" in first  # saslname escaping
    client.set_server_first(server.evaluate(first.encode()).decode())
    client.set_server_final(server.evaluate(client.get_client_final().encode()).decode())
    assert server.complete and server.user == "al,i=ce"


def _attempt(mech, server, user, password):
    client = scramp.ScramClient([mech], user, password)
    server_first = server.evaluate(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    try:
        server.evaluate(client.get_client_final().encode())
    except AuthenticationFailed as e:
        return server_first, str(e)
    return server_first, None


def test_unknown_user_and_wrong_password_look_the_same():
    mech = "SCRAM-SHA-512"
    creds = {("alice", mech): make_credential(mech, "right")}
    _, wrong = _attempt(mech, ScramServer(mech, lookup_for(creds), b"k"), "alice", "wrong")
    first1, unknown = _attempt(mech, ScramServer(mech, lookup_for(creds), b"k"), "mallory", "x")
    first2, _ = _attempt(mech, ScramServer(mech, lookup_for(creds), b"k"), "mallory", "y")
    assert wrong == unknown == failure_message(mech)
    # The fake salt of an unknown user is stable, like a real one.
    salt = lambda m: dict(p.split("=", 1) for p in m.decode().split(","))["s"]  # noqa: E731
    assert salt(first1) == salt(first2)
    assert "i=4096" in first1.decode()


@pytest.mark.parametrize(
    "first",
    [b"", b"garbage", b"p=tls-unique,,n=user,r=abc", b"n,a=bob,n=user,r=abc", b"n,a=user,n=user,r=abc", b"n,,n=us=41er,r=abc", b"n,,n=user,r=abc,tokenauth=true", b"\xff\xfe"],
)
def test_bad_client_first_fails(first):
    server = ScramServer("SCRAM-SHA-256", lookup_for({("user", "SCRAM-SHA-256"): rfc_credential()}), b"k")
    with pytest.raises(AuthenticationFailed):
        server.evaluate(first)


def test_saslname():
    assert decode_saslname("a=2Cb=3Dc") == "a,b=c"
    with pytest.raises(ValueError):
        decode_saslname("a=41")


# -- PLAIN


def plain_server(password="pw", mech="SCRAM-SHA-512"):
    cred = make_credential(mech, password)
    return PlainServer(lookup_for({("alice", mech): cred}), make_credential("SCRAM-SHA-512", "dummy"))


@pytest.mark.parametrize("token", [b"\x00alice\x00pw", b"alice\x00alice\x00pw"])
def test_plain_ok(token):
    s = plain_server()
    assert s.evaluate(token) == b""
    assert s.complete and s.user == "alice"


def test_plain_against_sha256_credential():
    s = plain_server(mech="SCRAM-SHA-256")
    s.evaluate(b"\x00alice\x00pw")
    assert s.user == "alice"


@pytest.mark.parametrize(
    "token",
    [b"\x00alice\x00wrong", b"\x00bob\x00pw", b"bob\x00alice\x00pw", b"alice\x00pw", b"\x00alice\x00pw\x00x",
     b"\x00\x00pw", b"\x00alice\x00", b"\xff\x00alice\x00pw"],
)
def test_plain_refused_with_one_message(token):
    with pytest.raises(AuthenticationFailed) as e:
        plain_server().evaluate(token)
    assert str(e.value) == failure_message("PLAIN")


def test_credentials_hold_no_password():
    cred = make_credential("SCRAM-SHA-512", "hunter2")
    assert b"hunter2" not in repr(cred).encode() and verify_password(cred, "hunter2")
    assert not verify_password(cred, "hunter3")


def test_iteration_limits_and_bootstrap_users():
    assert check_iterations(4095) and check_iterations(16385) and check_iterations(4096) is None
    assert parse_bootstrap_users("alice:se:cret, bob:pw") == [("alice", "se:cret"), ("bob", "pw")]
    with pytest.raises(ValueError):
        parse_bootstrap_users("alice")


def _client_final(mech, password, client_first_bare, server_first, nonce):
    """RFC 5802 client proof for a client-final carrying ``nonce`` (whatever the client sends)."""
    import hashlib
    import hmac

    h = hashlib.sha512 if mech == "SCRAM-SHA-512" else hashlib.sha256
    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(h().name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", h).digest()
    without_proof = f"c=biws,r={nonce}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(h(client_key).digest(), auth, h).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_client_nonce_repeated_in_client_final_is_accepted_as_kafka_does(mech):
    """Older librdkafka (Debian's kcat) sends r=<client nonce><client nonce><server nonce>; Kafka
    checks only that the nonce ends with the combined one, and the proof covers what was sent."""
    cred = make_credential(mech, "pw", salt=b"0123456789abcdef")
    server = ScramServer(mech, lookup_for({("alice", mech): cred}), b"k")
    server_first = server.evaluate(b"n,,n=alice,r=cnonce").decode()
    combined = server_first.split(",")[0][2:]
    final = _client_final(mech, "pw", "n=alice,r=cnonce", server_first, "cnonce" + combined)
    assert server.evaluate(final.encode()).startswith(b"v=")
    assert server.complete
    # A nonce that does not end with the server's is still refused.
    server = ScramServer(mech, lookup_for({("alice", mech): cred}), b"k")
    server_first = server.evaluate(b"n,,n=alice,r=cnonce").decode()
    with pytest.raises(AuthenticationFailed):
        server.evaluate(_client_final(mech, "pw", "n=alice,r=cnonce", server_first, "cnonce-other").encode())
