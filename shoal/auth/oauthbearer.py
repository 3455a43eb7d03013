"""SASL/OAUTHBEARER (RFC 7628, KIP-255): the client's bearer token, validated as Kafka validates it.

The client's one message is a GS2 header and key/value pairs separated by ``\\x01``::

    n,[a=<authzid>],\\x01auth=Bearer <token>\\x01[<key>=<value>\\x01...]\\x01

(``parse_client_initial``; the other keys are SASL extensions, such as ``identityPoolId``). The
token is validated by one of two validators, as Kafka's broker-side callback handlers do:

- ``JwksValidator`` (Kafka's ``OAuthBearerValidatorCallbackHandler``, KIP-768): a signed JWT
  (RS256/384/512, PS256/384/512, ES256/384/512; never ``none`` or an HMAC), verified with the key
  its ``kid`` names in the JWKS at ``sasl.oauthbearer.jwks.endpoint.url``; ``exp`` required,
  ``exp``/``nbf``/``iat`` checked with ``sasl.oauthbearer.clock.skew.seconds`` of leeway; ``aud``
  one of ``sasl.oauthbearer.expected.audience`` and ``iss`` equal to
  ``sasl.oauthbearer.expected.issuer`` when those are set.
- ``UnsecuredValidator`` (Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``): an unsigned
  JWS (``alg`` ``none``, empty signature) for tests and laptops; off unless
  ``sasl.server.callback.handler.class`` names it.

The principal's name is the ``sasl.oauthbearer.sub.claim.name`` claim (``sub``), unless an
identity pool maps the token into a tenant (``shoal.tenancy.identity_pools``).

A refused token is answered as Kafka's ``OAuthBearerSaslServer`` does: a challenge carrying the
error JSON (``{"status":"invalid_token"}``), which the client acknowledges with ``\\x01``; the
exchange then fails with that JSON as the message. Why the token was refused (expired, bad
signature, wrong audience, no pool...) is in ``rejection`` for the broker's log, never sent.

The JWKS (``JwksCache``) is fetched with a timeout and never on the event loop: the server is
``expensive``, so the SaslAuthenticate handler runs ``evaluate`` in a worker thread. Keys are
fetched again when older than ``sasl.oauthbearer.jwks.endpoint.refresh.ms`` (the old keys stay
if that fails) and when a token names a ``kid`` the keys lack, at most once per
``shoal.sasl.oauthbearer.jwks.refresh.min.interval.ms`` (so tokens with made-up ``kid`` s cannot
make the broker hammer the identity provider). Fetches are serialized: concurrent logins wait for
one fetch, not one each.

Time: token times are wall-clock times, so this module reads the wall clock (``time.time``).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import jwt

from shoal.auth.sasl import AuthenticationFailed

log = logging.getLogger("shoal.auth")

OAUTHBEARER = "OAUTHBEARER"
UNSECURED_VALIDATOR_CLASS = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler")
JWKS_VALIDATOR_CLASSES = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
)
# Asymmetric algorithms only: an HMAC would need a shared secret, ``none`` is the unsecured validator's.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
POOL_EXTENSION = "identityPoolId"

_KVSEP = "\x01"
# Kafka's OAuthBearerClientInitialResponse: keys are letters, values printable ASCII, space and HTAB/CR/LF
_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7E \t\r\n]*")
_AUTH = re.compile(r"([\w]+)[ ]+([-_.a-zA-Z0-9]+)")


class TokenRejected(Exception):
    """A token (or the message carrying it) refused; ``reason`` is for the broker's log only."""

    def __init__(self, reason: str, status: str = "invalid_token") -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(frozen=True)
class ClientInitial:
    authzid: str
    token: str
    extensions: Mapping[str, str] = field(default_factory=dict)


def parse_client_initial(message: bytes) -> ClientInitial:
    """KIP-255's client first message -> its parts; ``TokenRejected`` (invalid_request) when
    malformed: not UTF-8, a GS2 header other than ``n,,``/``n,a=<id>,`` (no channel binding), a
    pair without ``=``, a key that is not letters, a value with a control character, a key
    twice, no ``auth`` pair or one that is not ``Bearer <token>``, or no closing ``\\x01``."""
    try:
        text = bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise TokenRejected("the client's message is not UTF-8", "invalid_request") from None
    header, sep, rest = text.partition(_KVSEP)
    if not sep:
        raise TokenRejected("the client's message has no \\x01 after its GS2 header", "invalid_request")
    if header == "n,,":
        authzid = ""
    elif header.startswith("n,a=") and header.endswith(",") and "," not in header[4:-1]:
        authzid = header[4:-1]
    else:
        raise TokenRejected(f"unsupported GS2 header {header[:40]!r} (expected 'n,,' or 'n,a=<id>,')",
                            "invalid_request")
    if not rest.endswith(_KVSEP + _KVSEP) and rest != _KVSEP:
        raise TokenRejected("the client's message does not end with \\x01\\x01", "invalid_request")
    pairs: dict[str, str] = {}
    for part in rest[:-2].split(_KVSEP) if rest != _KVSEP else ():
        key, eq, value = part.partition("=")
        if not eq or not _KEY.fullmatch(key) or not _VALUE.fullmatch(value):
            raise TokenRejected("malformed key/value pair in the client's message", "invalid_request")
        if key in pairs:
            raise TokenRejected(f"key {key!r} twice in the client's message", "invalid_request")
        pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise TokenRejected("the client's message has no auth=Bearer <token>", "invalid_request")
    m = _AUTH.fullmatch(auth)
    if m is None or m.group(1).lower() != "bearer":
        raise TokenRejected("the client's auth value is not 'Bearer <token>'", "invalid_request")
    return ClientInitial(authzid, m.group(2), pairs)


def error_json(status: str, scope: str | None = None) -> str:
    """Kafka's ``OAuthBearerSaslServer.jsonErrorResponse``: the challenge of a refused token."""
    doc = {"status": status}
    if scope:
        doc["scope"] = scope
    return json.dumps(doc, separators=(",", ":"))


def scopes(claims: Mapping[str, Any], scope_claim: str) -> tuple[str, ...]:
    """The token's scopes: a space-separated string or a list of strings (Kafka takes both)."""
    value = claims.get(scope_claim)
    if isinstance(value, str):
        return tuple(s for s in value.split(" ") if s)
    if isinstance(value, list):
        return tuple(s for s in value if isinstance(s, str))
    return ()


def _b64url_json(part: str, what: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        doc = json.loads(raw)
    except (binascii.Error, ValueError):
        raise TokenRejected(f"the token's {what} is not base64url JSON") from None
    if not isinstance(doc, dict):
        raise TokenRejected(f"the token's {what} is not a JSON object")
    return doc


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    v = claims.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TokenRejected(f"the token's {name!r} claim is not a number")
    return float(v)


class UnsecuredValidator:
    """Kafka's unsecured validator: ``header.payload.`` with ``alg`` ``none``; ``exp`` required,
    ``iat`` (if any) not in the future, both with ``skew_s`` of leeway; a principal claim; the
    ``required_scope`` s among the token's scopes. For development only: anyone can make such a
    token for any name."""

    def __init__(self, *, skew_s: float = 0, scope_claim: str = "scope",
                 required_scope: tuple[str, ...] = ()) -> None:
        self.skew_s = skew_s
        self.scope_claim = scope_claim
        self.required_scope = required_scope

    def validate(self, token: str) -> dict[str, Any]:
        parts = token.split(".")
        if len(parts) != 3 or parts[2] != "":
            raise TokenRejected("not an unsecured JWS (header.payload. with an empty signature)")
        header = _b64url_json(parts[0], "header")
        if header.get("alg") != "none":
            raise TokenRejected(f"unsecured token with alg {header.get('alg')!r} (expected 'none')")
        claims = _b64url_json(parts[1], "payload")
        now = time.time()
        exp = _number(claims, "exp")
        if exp is None:
            raise TokenRejected("the token has no 'exp' claim")
        if now >= exp + self.skew_s:
            raise TokenRejected(f"the token expired {now - exp:.0f} s ago")
        iat = _number(claims, "iat")
        if iat is not None and iat > now + self.skew_s:
            raise TokenRejected("the token's 'iat' is in the future")
        missing = set(self.required_scope) - set(scopes(claims, self.scope_claim))
        if missing:
            raise TokenRejected(f"the token lacks the required scope {', '.join(sorted(missing))}", "insufficient_scope")
        return claims


class JwksCache:
    """The keys of a JWKS endpoint, fetched with a timeout (call from a worker thread, never the
    event loop); see the module docstring for when it fetches."""

    def __init__(self, url: str, *, refresh_ms: int, timeout_s: float, min_interval_s: float,
                 clock: Callable[[], float] = time.monotonic, ssl_context: Any = None) -> None:
        self.url = url
        self.ssl_context = ssl_context  # an https endpoint's trust (None: the system's CAs)
        self.refresh_s = refresh_ms / 1000
        self.timeout_s = timeout_s
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str, jwt.PyJWK] = {}
        self._unnamed: list[jwt.PyJWK] = []  # keys without a kid: tried for tokens without one
        self._fetched_at: float | None = None  # last successful fetch
        self._tried_at = float("-inf")  # last attempt
        self.fetches = 0  # attempts (tests and logs)

    def _fetch(self) -> None:
        """One fetch (the lock held); keeps the old keys when it fails."""
        self._tried_at = self._clock()
        self.fetches += 1
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s,  # noqa: S310 (operator's URL)
                                        context=self.ssl_context if self.url.startswith("https:") else None) as resp:
                body = resp.read(4 * 1024 * 1024)
            doc = json.loads(body)
            keys = [k for k in doc.get("keys", []) if isinstance(k, dict)] if isinstance(doc, dict) else []
        except Exception as e:  # OSError, timeouts, HTTP errors, bad JSON
            log.warning("could not fetch the JWKS from %s: %s", self.url, e)
            return
        named: dict[str, jwt.PyJWK] = {}
        unnamed: list[jwt.PyJWK] = []
        for k in keys:
            if k.get("use", "sig") != "sig":
                continue
            try:
                key = jwt.PyJWK(k)
            except Exception as e:  # an unsupported or malformed key: the others still count
                log.warning("ignoring JWKS key %r from %s: %s", k.get("kid"), self.url, e)
                continue
            if isinstance(k.get("kid"), str):
                named[k["kid"]] = key
            else:
                unnamed.append(key)
        self._keys, self._unnamed = named, unnamed
        self._fetched_at = self._clock()
        log.info("fetched %d signing keys from the JWKS at %s", len(named) + len(unnamed), self.url)

    def refresh(self) -> None:
        """Fetch now (the broker's first fetch at start-up)."""
        with self._lock:
            self._fetch()

    def keys_for(self, kid: str | None) -> list[jwt.PyJWK]:
        """The keys a token with this ``kid`` may be signed with (fetching first if due)."""
        with self._lock:
            now = self._clock()
            stale = self._fetched_at is None or now - self._fetched_at >= self.refresh_s
            unknown = kid is not None and kid not in self._keys
            if (stale or unknown) and now - self._tried_at >= self.min_interval_s:
                self._fetch()
            if kid is None:
                return list(self._unnamed) or list(self._keys.values())
            key = self._keys.get(kid)
            return [key] if key is not None else []


class JwksValidator:
    """Kafka's OIDC validator (KIP-768): a signed JWT checked against a JWKS; see the module docstring."""

    def __init__(self, keys: JwksCache, *, audience: tuple[str, ...] = (), issuer: str | None = None,
                 skew_s: float = 30, principal_claim: str = "sub") -> None:
        self.keys = keys
        self.audience = audience
        self.issuer = issuer or None
        self.skew_s = skew_s
        self.principal_claim = principal_claim

    def validate(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise TokenRejected(f"not a JWT: {e}") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise TokenRejected(f"the token's alg {alg!r} is not allowed (one of {', '.join(ALGORITHMS)})")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenRejected("the token's kid is not a string")
        candidates = self.keys.keys_for(kid)
        if not candidates:
            raise TokenRejected(f"no key with kid {kid!r} in the JWKS at {self.keys.url}" if kid is not None
                                else f"the token has no kid and the JWKS at {self.keys.url} has no key")
        options: Any = {"require": ["exp"], "verify_aud": bool(self.audience), "verify_iss": bool(self.issuer)}
        last: Exception | None = None
        for key in candidates:
            if key.algorithm_name is not None and key.algorithm_name != alg and kid is not None:
                raise TokenRejected(f"the token's alg {alg} does not match the key {kid!r} ({key.algorithm_name})")
            try:
                return jwt.decode(token, key, algorithms=[alg], options=options, leeway=self.skew_s,
                                  audience=list(self.audience) or None, issuer=self.issuer)
            except jwt.InvalidSignatureError as e:
                last = e
                continue
            except jwt.ExpiredSignatureError:
                raise TokenRejected("the token has expired") from None
            except jwt.ImmatureSignatureError as e:
                raise TokenRejected(f"the token is not valid yet ({e})") from None
            except jwt.InvalidAudienceError as e:
                raise TokenRejected(f"wrong audience ({e}; expected one of {', '.join(self.audience)})") from None
            except jwt.InvalidIssuerError:
                raise TokenRejected(f"wrong issuer (expected {self.issuer!r})") from None
            except jwt.MissingRequiredClaimError as e:
                raise TokenRejected(f"the token lacks a required claim ({e})") from None
            except jwt.PyJWTError as e:
                raise TokenRejected(f"invalid token: {e}") from None
        raise TokenRejected(f"bad signature ({last}; kid {kid!r})")


Validator = UnsecuredValidator | JwksValidator
# claims + the client's extensions -> the stored user name (raises TokenRejected)
PrincipalResolver = Callable[[Mapping[str, Any], Mapping[str, str]], str]


class OAuthBearerServer:
    """The OAUTHBEARER SASL server (``SaslServer``): one message from the client, then either
    success (an empty server message) or the error challenge and, after the client's ``\\x01``,
    failure. ``rejection`` says why a token was refused (for one log line); ``expires_at_ms`` is
    the token's ``exp``, which bounds the session (KIP-368)."""

    mechanism = OAUTHBEARER
    expensive = True  # may fetch the JWKS: off the event loop

    def __init__(self, validator: Validator, resolve: PrincipalResolver) -> None:
        self._validator = validator
        self._resolve = resolve
        self.complete = False
        self.user: str | None = None
        self.expires_at_ms: int | None = None
        self.rejection: str | None = None
        self._error: str | None = None

    def claimed(self, token: bytes) -> str | None:
        return None  # no password to guess: no failed-login backoff

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed(OAUTHBEARER)
        if self._error is not None:  # the client's answer to our error challenge
            raise AuthenticationFailed(OAUTHBEARER, self._error if bytes(token) == b"\x01" else None, logged=True)
        try:
            initial = parse_client_initial(token)
            claims = self._validator.validate(initial.token)
            user = self._resolve(claims, initial.extensions)
            if initial.authzid and initial.authzid != user:
                raise TokenRejected(f"authorization id {initial.authzid!r} is not the principal {user!r}")
        except TokenRejected as e:
            self.rejection = e.reason
            self._error = error_json(e.status)
            return self._error.encode("utf-8")
        exp = claims.get("exp")
        self.expires_at_ms = int(float(exp) * 1000) if isinstance(exp, (int, float)) else None
        self.user = user
        self.complete = True
        return b""
