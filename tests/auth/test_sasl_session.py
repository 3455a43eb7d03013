"""The per-connection SASL state machine: gate, handshake, re-authentication (KIP-368)."""

from __future__ import annotations

import pytest

from shoal.auth.sasl import AuthenticationFailed, SaslSession
from shoal.auth.scram import make_credential

ALICE = make_credential("SCRAM-SHA-512", "pw")
BOB = make_credential("SCRAM-SHA-512", "bobpw")
CREDS = {("alice", "SCRAM-SHA-512"): ALICE, ("bob", "SCRAM-SHA-512"): BOB}


def session(max_reauth_ms=0):
    return SaslSession(("PLAIN", "SCRAM-SHA-512"), lambda u, m: CREDS.get((u, m)), max_reauth_ms=max_reauth_ms)


def test_gate_before_authentication():
    s = session()
    assert s.gate(18, 0) is None and s.gate(17, 0) is None
    assert s.gate(3, 0) and s.gate(36, 0)  # Metadata, or SaslAuthenticate before the handshake
    assert s.handshake("PLAIN") is None
    assert s.gate(36, 0) is None and s.gate(3, 0) and s.gate(18, 0)


def test_plain_login_sets_principal_and_lifetime():
    s = session(max_reauth_ms=1000)
    s.handshake("PLAIN")
    out, lifetime = s.authenticate(b"\x00alice\x00pw", now_ms=5000)
    assert (out, lifetime, s.principal, s.authenticated) == (b"", 1000, "User:alice", True)
    assert s.gate(3, 5999) is None
    assert s.gate(3, 6000)  # expired: only a re-authentication handshake may come
    assert s.gate(17, 6000) is None


def test_failure_is_final():
    s = session()
    s.handshake("PLAIN")
    with pytest.raises(AuthenticationFailed):
        s.authenticate(b"\x00alice\x00nope", 0)
    assert s.gate(18, 0) and s.gate(17, 0) and s.gate(36, 0)


def test_unsupported_mechanism():
    s = session()
    assert s.handshake("SCRAM-SHA-256") == "UNSUPPORTED_SASL_MECHANISM"  # not enabled here
    assert s.gate(17, 0)


def test_reauthentication_keeps_mechanism_and_principal():
    s = session(max_reauth_ms=100)
    s.handshake("PLAIN")
    s.authenticate(b"\x00alice\x00pw", 0)
    assert s.handshake("PLAIN") is None
    assert s.gate(3, 50) is None  # the old session still holds while re-authenticating
    _, lifetime = s.authenticate(b"\x00alice\x00pw", 150)
    assert lifetime == 100 and s.expires_at_ms == 250 and s.gate(3, 200) is None
    s.handshake("PLAIN")
    with pytest.raises(AuthenticationFailed):
        s.authenticate(b"\x00bob\x00bobpw", 200)  # another principal
    assert s.gate(3, 200)

    t = session()
    t.handshake("PLAIN")
    t.authenticate(b"\x00alice\x00pw", 0)
    assert t.handshake("SCRAM-SHA-512") == "ILLEGAL_SASL_STATE"
    assert t.gate(3, 0)
