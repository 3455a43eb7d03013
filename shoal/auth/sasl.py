"""SASL servers (PLAIN, SCRAM-SHA-256/512; OAUTHBEARER is ``shoal.auth.oauthbearer``) and a connection's authentication state (KIP-368).

No I/O and no clock reads: a ``SaslServer`` turns client tokens into server tokens, and
``SaslSession`` is the per-connection state machine the network layer consults before each
request (``gate``) and the SaslHandshake/SaslAuthenticate handlers drive. Times come in as
arguments (the connection passes its broker's injected clock).

States of a ``SaslSession``::

    HANDSHAKE --SaslHandshake(ok)--> AUTHENTICATE --SaslAuthenticate(done)--> AUTHENTICATED
        |                                  |                                        |
        +---- anything else: closed        +---- failure: error, then closed        |
                                                                                    v
    AUTHENTICATED --SaslHandshake(same mechanism)--> REAUTHENTICATE --done--> AUTHENTICATED

Before authentication only ApiVersions (before the handshake), SaslHandshake and SaslAuthenticate
are allowed; anything else closes the connection, as Kafka's SaslServerAuthenticator does. With
``connections.max.reauth.ms`` > 0 a session expires that long after it authenticated; after that
only a SaslHandshake that starts re-authentication is accepted, anything else closes the
connection. Re-authentication must keep the mechanism and the principal. A credential that
expires (an OAUTHBEARER token's ``exp``) ends the session then at the latest, as Kafka's
SaslServerAuthenticator does: the lifetime is the smaller of the two (the token's alone when
``connections.max.reauth.ms`` is 0).

Failures never say which part was wrong: an unknown user, a wrong password and a malformed token
all give ``AuthenticationFailed`` with the same message. SCRAM for an unknown user goes through the
whole exchange with a fake credential (a salt derived from the user name and a per-broker secret),
so the server-first message does not reveal whether the user exists.

Deviations from Kafka: no GSSAPI or delegation tokens; a SCRAM authorization id is
refused. As in Kafka, the client-final nonce need only end with the server's combined nonce (the
librdkafka build bundled with Debian's kcat 1.7 repeats its own nonce there).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
from typing import Callable, Protocol

import scramp

from shoal.auth.scram import MECHANISMS, make_credential, verify_password
from shoal.metadata import ScramCredential

log = logging.getLogger("shoal.auth")

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36

# Looks up ``(user, mechanism)``; None when the user has no such credential.
CredentialLookup = Callable[[str, str], ScramCredential | None]


def failure_message(mechanism: str) -> str:
    """Kafka's client-facing message for any failed SASL authentication."""
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


class AuthenticationFailed(Exception):
    """Wrong credentials or a malformed exchange; ``str()`` is safe to send to the client
    (``message``: the mechanism's own, else Kafka's generic one). ``logged``: the server has had
    the reason logged already (OAUTHBEARER's refused token)."""

    def __init__(self, mechanism: str, message: str | None = None, *, logged: bool = False) -> None:
        super().__init__(message or failure_message(mechanism))
        self.mechanism = mechanism
        self.logged = logged


class SaslServer(Protocol):
    mechanism: str
    complete: bool
    user: str | None
    # True when ``evaluate`` burns CPU (PBKDF2); the handler then runs it off the event loop.
    expensive: bool

    def evaluate(self, token: bytes) -> bytes: ...

    def claimed(self, token: bytes) -> str | None:
        """The user whose password ``evaluate(token)`` would check (the failed-login backoff's
        key, ``shoal.auth.backoff``); None when that step checks no password."""
        ...


class PlainServer:
    """RFC 4616 PLAIN: ``[authzid] NUL authcid NUL passwd``, checked against a SCRAM credential.

    The password is hashed with the stored salt and iteration count of the user's SCRAM-SHA-512
    credential (else SCRAM-SHA-256) and compared in constant time. An unknown user costs the same
    PBKDF2 work. As in Kafka, an authorization id must be empty or equal the user name.
    """

    mechanism = PLAIN
    expensive = True

    def __init__(self, lookup: CredentialLookup, dummy: ScramCredential) -> None:
        self._lookup = lookup
        self._dummy = dummy
        self.complete = False
        self.user: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed(PLAIN)
        try:
            authzid, authcid, password = bytes(token).decode("utf-8").split("\x00")
        except ValueError:  # wrong number of parts or not UTF-8
            raise AuthenticationFailed(PLAIN) from None
        if not authcid or not password or (authzid and authzid != authcid):
            raise AuthenticationFailed(PLAIN)
        cred = self._lookup(authcid, "SCRAM-SHA-512") or self._lookup(authcid, "SCRAM-SHA-256")
        ok = verify_password(cred or self._dummy, password) and cred is not None
        if not ok:
            raise AuthenticationFailed(PLAIN)
        self.user = authcid
        self.complete = True
        return b""

    def claimed(self, token: bytes) -> str | None:
        parts = bytes(token).split(b"\x00")
        if len(parts) != 3 or not parts[1] or self.complete:
            return None
        try:
            return parts[1].decode("utf-8")
        except UnicodeDecodeError:
            return None


def decode_saslname(name: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is malformed."""
    out = []
    i = 0
    while i < len(name):
        c = name[i]
        if c == "=":
            code = name[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ValueError("bad saslname escape")
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_BASE36_PAIRS = tuple(a + b for a in _BASE36 for b in _BASE36)  # "00" .. "zz": two digits a step


def base36(n: int) -> str:
    """``n`` >= 0 in base 36, lower case (Java's ``BigInteger.toString(36)``)."""
    out = []
    while n >= 36:
        n, r = divmod(n, 36 * 36)
        out.append(_BASE36_PAIRS[r])
    out.append(_BASE36[n])
    return "".join(reversed(out)).lstrip("0") or "0"


def _kafka_nonce() -> str:
    """Kafka's ScramFormatter.secureRandomString: 130 random bits in base 36 (older librdkafka
    copies the server nonce into a small buffer, so scramp's 64-character default is too long)."""
    return base36(int.from_bytes(os.urandom(17), "big") >> 6)


def _valid_nonce(nonce: str) -> bool:
    """RFC 5802 ``printable``: ASCII 0x21..0x7E except ``,``; not empty."""
    return bool(nonce) and nonce.isascii() and nonce.isprintable() and " " not in nonce and "," not in nonce


def saslprep(name: str) -> str:
    """RFC 4013 SASLprep of a user name (``scramp``'s, which raises on prohibited input).

    Printable ASCII is returned as is without consulting the stringprep tables: SASLprep maps,
    normalizes or prohibits no such character (only the ASCII controls, which are not printable).
    """
    if name.isascii() and name.isprintable():
        return name
    return scramp.utils.saslprep(name)


_SCRAM_ATTRIBUTES = frozenset("anmrcsipve")  # the attribute letters of RFC 5802 messages


def parse_client_first(msg: str) -> tuple[str, str, str, str]:
    """A client-first-message -> (gs2 header, client-first-bare, client nonce, user name).

    Checked as ``scramp``'s server (without channel binding) checks it, so that the same messages
    pass: gs2 header ``n,,`` or ``y,,`` (no channel binding; deviation from Kafka: no
    authorization id, not even one equal to the user name); then ``n=`` and ``r=`` first, each
    once, followed by attributes that are no RFC 5802 attribute (so neither ``m=`` nor a
    delegation token's ``tokenauth=true``); no empty value or NUL; a saslname whose ``=`` only
    starts ``=2C`` or ``=3D``; a nonce of printable ASCII. The user name is unescaped and
    SASLprepped. Raises ValueError (or scramp's exception from SASLprep).
    """
    first = msg.index(",")
    second = msg.index(",", first + 1)
    header, bare = msg[: second + 1], msg[second + 1 :]
    if header != "n,," and header != "y,,":
        raise ValueError("gs2 header")
    attrs: dict[str, str] = {}
    for part in bare.split(","):
        key, value = part[:1], part[2:]
        if part[1:2] != "=" or not (key.isascii() and key.isalpha()) or key in attrs:
            raise ValueError("malformed attribute")
        if not value or "\x00" in value:
            raise ValueError("empty value or NUL")
        attrs[key] = value
    keys = list(attrs)
    if keys[:2] != ["n", "r"] or any(k in _SCRAM_ATTRIBUTES for k in keys[2:]):
        raise ValueError("expected n, r and extensions")
    user = saslprep(decode_saslname(attrs["n"]))
    if not user or not _valid_nonce(attrs["r"]):
        raise ValueError("empty user name or bad nonce")
    return header, bare, attrs["r"], user


class ScramServer:
    """RFC 5802/7677 SCRAM-SHA-256/512 server side (two round trips).

    The messages are checked as ``scramp``'s server checks them (tests hold the two to the same
    verdicts), by code that costs a fraction of scramp's per login: its validation runs the
    stringprep tables over every name and scans every nonce character by character.

    ``nonce`` makes the server nonce (tests pass a fixed one to replay RFC vectors);
    ``fake_secret`` keys the fake credentials of unknown users.
    """

    expensive = False

    def __init__(
        self,
        mechanism: str,
        lookup: CredentialLookup,
        fake_secret: bytes,
        nonce: Callable[[], str] | None = None,
    ) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._lookup = lookup
        self._fake_secret = fake_secret
        self._s_nonce = nonce() if nonce is not None else _kafka_nonce()
        if not _valid_nonce(self._s_nonce):
            raise ValueError(f"invalid server nonce {self._s_nonce!r}")
        self._step = 0
        self._known = False
        self.complete = False
        self.user: str | None = None

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        # ``user`` is decoded (=2C, =3D) and SASLprepped.
        cred = self._lookup(user, self.mechanism) if user else None
        self._known = cred is not None
        if cred is None:
            cred = self._fake(user)
        self.user = user
        salt, stored_key, server_key, iterations = cred.salt, cred.stored_key, cred.server_key, cred.iterations
        # scramp's limits on what its auth function returns: such a credential fails
        if not (type(salt) is bytes and len(salt) >= 12 and isinstance(stored_key, bytes)
                and isinstance(server_key, bytes) and type(iterations) is int
                and 4096 <= iterations <= 10_000_000):
            raise ValueError(f"credential of {user!r} outside scramp's limits")
        self._credential = (salt, stored_key, server_key, iterations)
        return self._credential

    def _fake(self, user: str) -> ScramCredential:
        h = hashlib.sha512 if self.mechanism == "SCRAM-SHA-512" else hashlib.sha256
        digest = hmac.new(self._fake_secret, f"{self.mechanism}\x00{user}".encode(), h).digest()
        # Same salt for the same unknown user every time; keys nobody can match.
        return ScramCredential(self.mechanism, digest[:32], os.urandom(len(digest)), os.urandom(len(digest)), 4096)

    def evaluate(self, token: bytes) -> bytes:
        try:
            msg = bytes(token).decode("utf-8")
            if self._step == 0:
                self._gs2_header, self._client_first_bare, c_nonce, user = parse_client_first(msg)
                salt, _stored_key, _server_key, iterations = self._auth_info(user)
                self._step = 1
                self._server_first = (f"r={c_nonce}{self._s_nonce},s={base64.b64encode(salt).decode('ascii')},"
                                      f"i={iterations}")
                return self._server_first.encode("utf-8")
            if self._step == 1:
                self._step = 2
                final = self._client_final(msg)
                if not self._known:
                    raise AuthenticationFailed(self.mechanism)
                self.complete = True
                return final.encode("utf-8")
        except AuthenticationFailed:
            raise
        except Exception as e:  # ValueError, scramp.ScramException (SASLprep), UnicodeDecodeError
            log.debug("SCRAM step %d failed: %r", self._step, e)
            raise AuthenticationFailed(self.mechanism) from None
        raise AuthenticationFailed(self.mechanism)

    def claimed(self, token: bytes) -> str | None:
        return self.user if self._step == 1 else None  # client-final carries the proof

    def _client_final(self, msg: str) -> str:
        """Check the client proof (RFC 5802 section 3) and answer server-final.

        Done here rather than by scramp because Kafka only requires the client's nonce to END with
        the server's combined nonce (ScramSaslServer), and older librdkafka builds (Debian's kcat)
        send the client nonce twice; the proof covers what the client sent, so it still verifies.
        """
        without_proof, sep, proof_b64 = msg.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed(self.mechanism)
        attrs = dict(a.split("=", 1) for a in without_proof.split(",") if "=" in a)
        combined = self._server_first.split("r=", 1)[1].split(",", 1)[0]
        if base64.b64decode(attrs.get("c", "")) != self._gs2_header.encode("utf-8"):
            raise AuthenticationFailed(self.mechanism)
        if not attrs.get("r", "").endswith(combined):
            raise AuthenticationFailed(self.mechanism)
        salt, stored_key, server_key, _iterations = self._credential
        h = hashlib.sha512 if self.mechanism == "SCRAM-SHA-512" else hashlib.sha256
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode("utf-8")
        client_signature = hmac.new(stored_key, auth_message, h).digest()
        proof = base64.b64decode(proof_b64, validate=True)
        if len(proof) != len(client_signature):
            raise AuthenticationFailed(self.mechanism)
        client_key = (int.from_bytes(proof, "big") ^ int.from_bytes(client_signature, "big")).to_bytes(
            len(proof), "big")
        if not hmac.compare_digest(h(client_key).digest(), stored_key):
            raise AuthenticationFailed(self.mechanism)
        server_signature = hmac.new(server_key, auth_message, h).digest()
        return "v=" + base64.b64encode(server_signature).decode("ascii")


class SaslSession:
    """One connection's authentication state; see the module docstring.

    ``enabled`` are the listener's ``sasl.enabled.mechanisms``; ``max_reauth_ms`` is
    ``connections.max.reauth.ms`` (0: sessions never expire).
    """

    HANDSHAKE, AUTHENTICATE, AUTHENTICATED, REAUTHENTICATE, FAILED = range(5)

    def __init__(
        self,
        enabled: tuple[str, ...],
        lookup: CredentialLookup,
        *,
        max_reauth_ms: int = 0,
        fake_secret: bytes = b"",
        dummy: ScramCredential | None = None,
        oauth: Callable[[], SaslServer] | None = None,
    ) -> None:
        self.enabled = tuple(enabled)
        self._oauth = oauth  # makes OAUTHBEARER servers (None: the mechanism is off)
        self._expiry_cause = f"connections.max.reauth.ms={max_reauth_ms}"
        self._lookup = lookup
        self.max_reauth_ms = max_reauth_ms
        self._fake_secret = fake_secret or os.urandom(32)
        self._dummy = dummy
        self.state = self.HANDSHAKE
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.expires_at_ms: int | None = None
        self.server: SaslServer | None = None

    @property
    def authenticated(self) -> bool:
        return self.state in (self.AUTHENTICATED, self.REAUTHENTICATE)

    def gate(self, api_key: int, now_ms: int) -> str | None:
        """None if a request of ``api_key`` may proceed now, else why the connection must close."""
        s = self.state
        if s == self.HANDSHAKE:
            if api_key in (API_VERSIONS, SASL_HANDSHAKE):
                return None
            return f"unexpected request (api {api_key}) before SASL authentication"
        if s == self.AUTHENTICATE:
            if api_key == SASL_AUTHENTICATE:
                return None
            return f"unexpected request (api {api_key}) during SASL authentication"
        if s == self.FAILED:
            return "request after a failed authentication"
        if s == self.REAUTHENTICATE and api_key == SASL_AUTHENTICATE:
            return None
        expired = self.expires_at_ms is not None and now_ms >= self.expires_at_ms
        if expired and not (api_key == SASL_HANDSHAKE and s == self.AUTHENTICATED):
            return f"SASL session expired ({self._expiry_cause}) without re-authentication"
        return None

    def handshake(self, mechanism: str) -> str | None:
        """Start (re-)authentication with ``mechanism``; an error code name, or None when accepted."""
        if self.state == self.AUTHENTICATED:
            if mechanism != self.mechanism:  # KIP-368: re-authentication keeps the mechanism
                self.state = self.FAILED
                return "ILLEGAL_SASL_STATE"
            self.state = self.REAUTHENTICATE
        elif self.state == self.HANDSHAKE:
            if (mechanism not in self.enabled or mechanism not in SUPPORTED_MECHANISMS
                    or (mechanism == "OAUTHBEARER" and self._oauth is None)):
                self.state = self.FAILED
                return "UNSUPPORTED_SASL_MECHANISM"
            self.mechanism = mechanism
            self.state = self.AUTHENTICATE
        else:
            self.state = self.FAILED
            return "ILLEGAL_SASL_STATE"
        self.server = self._new_server(mechanism)
        return None

    def _new_server(self, mechanism: str) -> SaslServer:
        if mechanism == "OAUTHBEARER" and self._oauth is not None:
            return self._oauth()
        if mechanism == PLAIN:
            if self._dummy is None:
                self._dummy = make_credential("SCRAM-SHA-512", os.urandom(16).hex())
            return PlainServer(self._lookup, self._dummy)
        return ScramServer(mechanism, self._lookup, self._fake_secret)

    def authenticate(self, token: bytes, now_ms: int) -> tuple[bytes, int]:
        """Feed one SaslAuthenticate token; ``(server token, session lifetime ms)``.

        The lifetime is 0 until the exchange completes (and when sessions do not expire). Raises
        ``AuthenticationFailed``; the session is then FAILED and the connection must close.
        A caller that wants ``evaluate`` off the event loop uses the three steps itself:
        ``begin_step``, ``server.evaluate`` anywhere (``fail`` if it raises), ``end_step``.
        """
        server = self.begin_step()
        try:
            out = server.evaluate(token)
        except AuthenticationFailed:
            self.fail()
            raise
        return self.end_step(server, out, now_ms)

    def begin_step(self) -> SaslServer:
        server = self.server
        if server is None or self.state not in (self.AUTHENTICATE, self.REAUTHENTICATE):
            self.fail()
            raise AuthenticationFailed(self.mechanism or "?")
        return server

    def fail(self) -> None:
        self.state = self.FAILED
        self.server = None

    def end_step(self, server: SaslServer, out: bytes, now_ms: int) -> tuple[bytes, int]:
        if server is not self.server:  # the session failed or moved on meanwhile
            self.fail()
            raise AuthenticationFailed(server.mechanism)
        if not server.complete:
            return out, 0
        principal = f"User:{server.user}"
        if self.state == self.REAUTHENTICATE and principal != self.principal:
            self.fail()  # KIP-368: re-authentication must not change the principal
            raise AuthenticationFailed(server.mechanism)
        self.principal = principal
        self.state = self.AUTHENTICATED
        self.server = None
        lifetime = self.max_reauth_ms if self.max_reauth_ms > 0 else 0
        credential_ends: int | None = getattr(server, "expires_at_ms", None)
        self._expiry_cause = f"connections.max.reauth.ms={self.max_reauth_ms}"
        if credential_ends is not None:  # a token's exp bounds the session (Kafka: the smaller)
            left = max(credential_ends - now_ms, 1)
            if not lifetime or left < lifetime:
                lifetime = left
                self._expiry_cause = f"the {server.mechanism} credential's lifetime ended"
        self.expires_at_ms = now_ms + lifetime if lifetime else None
        return out, lifetime
