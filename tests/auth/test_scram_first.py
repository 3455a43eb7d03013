"""The SCRAM server's first step (shoal.auth.sasl.parse_client_first and ScramServer) against
``scramp``'s server, the reference it replaced on the login path: for any client-first message,
both accept it with the same server-first message and user, or both refuse it."""

from __future__ import annotations

import string

import pytest
import scramp
import scramp.utils
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shoal.auth.sasl import AuthenticationFailed, ScramServer, base36, parse_client_first, saslprep
from shoal.auth.scram import make_credential
from shoal.metadata import ScramCredential

S_NONCE = "3rfcqzx0vq4fxwj3vtbwjmtn1"
MECH = "SCRAM-SHA-256"


def scramp_verdict(msg: str, cred: ScramCredential):
    """(server-first, user) from scramp's server, or None when it refuses ``msg``."""
    seen: list[str] = []

    def auth_fn(user: str):
        seen.append(user)
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    server = scramp.ScramMechanism(MECH).make_server(auth_fn, s_nonce=S_NONCE)
    try:
        server.set_client_first(msg)
        return server.get_server_first(), seen[-1]
    except scramp.ScramException:
        return None


def shoal_verdict(msg: str, cred: ScramCredential):
    server = ScramServer(MECH, lambda user, mech: cred, b"k", nonce=lambda: S_NONCE)
    try:
        first = server.evaluate(msg.encode("utf-8", "surrogatepass"))
    except AuthenticationFailed:
        return None
    return first.decode(), server.user


CRED = make_credential(MECH, "pw", salt=b"0123456789abcdef")

# pieces that exercise every rule: gs2 headers, attribute keys (RFC 5802 ones, extensions,
# malformed), saslnames (escapes, non-ASCII, SASLprep-prohibited), nonces
HEADERS = ["n,,", "y,,", "p=tls-unique,,", "n,a=user,", "x,,", "n,", "", "n,,,"]
KEYS = ["n", "r", "m", "a", "c", "s", "x", "z", "tokenauth", "N", "é", "", "1"]
NAMES = ["user", "al=2Ci=3Dce", "us=41er", "=", "a b", "ünïcode", "Ⅸ", "x\u00ady", "\u00ad", "\u0627a",
         "\u0627\u0628", "tab\there", "ctl\x7f", "\ufb01", "nul\x00l", "ac\u0301", " "]
NONCES = ["rOprNGfwEbeRWgbNEkqO", "abc", "has space", "tilde~ok", "é", "\x7f", "a\x00b", "%hvY)$"]


@st.composite
def client_firsts(draw):
    header = draw(st.sampled_from(HEADERS) | st.text(max_size=6))
    attrs = [("n", draw(st.sampled_from(NAMES) | st.text(max_size=8))),
             ("r", draw(st.sampled_from(NONCES) | st.text(max_size=8)))]
    for _ in range(draw(st.integers(0, 3))):
        attrs.insert(draw(st.integers(0, len(attrs))),
                     (draw(st.sampled_from(KEYS)), draw(st.sampled_from(["1", "", "true", "v=1", "a\x00"]))))
    if draw(st.booleans()):
        attrs = draw(st.permutations(attrs))
    parts = [f"{k}={v}" for k, v in attrs]
    if draw(st.integers(0, 9)) == 0:
        parts.append(draw(st.sampled_from(["", "n", "=x", "r"])))
    return header + ",".join(parts)


@settings(max_examples=1500, deadline=None)
@given(client_firsts())
@example("n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
@example("y,,n=al=2Ci=3Dce,r=abc,x=1,z=2")
@example("n,,n=user,r=abc,tokenauth=true")
@example("n,,n=user,r=abc,m=1")
@example("n,,r=abc,n=user")
@example("n,,n=\u00ad,r=abc")
@example("n,,n=user,r=abc,x=a\x00")
def test_same_verdict_as_scramp(msg: str) -> None:
    assert shoal_verdict(msg, CRED) == scramp_verdict(msg, CRED)


@pytest.mark.parametrize("salt, iterations", [(b"short", 4096), (b"0123456789abcdef", 4095),
                                              (b"0123456789abcdef", 10_000_001),
                                              (b"0123456789abcdef", 10_000_000)])
def test_credentials_outside_scramps_limits_fail_as_with_scramp(salt, iterations) -> None:
    cred = ScramCredential(MECH, salt, b"s" * 32, b"k" * 32, iterations)
    msg = "n,,n=user,r=abc"
    assert shoal_verdict(msg, cred) == scramp_verdict(msg, cred)


def saslprep_or_none(prep, name: str) -> str | None:
    try:
        return prep(name)
    except scramp.ScramException:
        return None


def test_saslprep_of_every_ascii_character_and_some_others() -> None:
    for c in map(chr, range(128)):
        for name in (c, f"a{c}b"):
            assert saslprep_or_none(saslprep, name) == saslprep_or_none(scramp.utils.saslprep, name), repr(name)
    assert saslprep("\ufb01le") == "file" and saslprep("x\u00ady") == "xy"


@given(st.text(alphabet=string.printable + "\u00a0\u00ad\u0627\u05d0\ufb01\u2168é", max_size=12))
def test_saslprep_equals_scramps(name: str) -> None:
    assert saslprep_or_none(saslprep, name) == saslprep_or_none(scramp.utils.saslprep, name)


def test_parse_client_first_parts() -> None:
    assert parse_client_first("n,,n=al=2Ci=3Dce,r=abc,x=1") == ("n,,", "n=al=2Ci=3Dce,r=abc,x=1", "abc", "al,i=ce")


def reference_base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return out or "0"


@given(st.integers(0, 2**130 - 1) | st.sampled_from([0, 1, 35, 36, 1295, 1296, 36**25, 36**26 - 1]))
def test_base36(n: int) -> None:
    assert base36(n) == reference_base36(n)
    assert int(base36(n), 36) == n
