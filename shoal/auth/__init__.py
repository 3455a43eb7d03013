"""Authentication: TLS listeners, SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) and principals.

- ``scram``: SCRAM credential math (the broker stores salted hashes only) and bootstrap users.
- ``sasl``: SASL servers and the per-connection state machine (gate, handshake, authenticate,
  KIP-368 re-authentication), free of I/O.
- ``oauthbearer``: SASL/OAUTHBEARER, its token validators (JWKS, unsecured) and the JWKS cache.
- ``principal``: ``User:<name>``; certificate subjects in RFC 2253 form and
  ``ssl.principal.mapping.rules``.
- ``tls``: ``SSLContext`` per SSL/SASL_SSL listener from the ``ssl.*`` configs.
- ``backoff``: failed-login backoff per client address and user (one ``LoginBackoff`` per broker, shared by every
  listener's ``ListenerSecurity.backoff`` and the HTTP endpoints).

``ListenerSecurity`` is what the network layer needs to know about one listener; the broker builds
one per listener at start-up (``listener_security``), and each connection asks it for a
``SaslSession`` (SASL listeners) and its TLS principal (SSL listeners).
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from shoal.auth.backoff import LoginBackoff
from shoal.auth.principal import MappingError, PrincipalMapper, principal_from_peercert
from shoal.auth.sasl import AuthenticationFailed, SaslSession
from shoal.logutil import RateLimitedLog

if TYPE_CHECKING:
    from shoal.auth.oauthbearer import JwksCache, Validator
    from shoal.auth.sasl import SaslServer
    from shoal.config import BrokerConfig
    from shoal.metadata import MetadataStore, ScramCredential

log = logging.getLogger("shoal.auth")

ANONYMOUS = "User:ANONYMOUS"

__all__ = [
    "ANONYMOUS",
    "AuthenticationFailed",
    "ListenerSecurity",
    "LoginBackoff",
    "SaslSession",
    "ensure_bootstrap_users",
    "jwks_caches",
    "listener_security",
    "shared_backoff",
]


@dataclass
class ListenerSecurity:
    name: str
    protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    ssl_context: ssl.SSLContext | None = None
    mapper: PrincipalMapper | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    max_reauth_ms: int = 0
    # Keys the fake SCRAM credentials of unknown users (stable per broker run).
    fake_secret: bytes = field(default_factory=lambda: os.urandom(32))
    # PLAIN checks an unknown user's password against this credential (the same PBKDF2 work as a
    # known user's): made once per listener, not per handshake on the event loop.
    plain_dummy: "ScramCredential | None" = None
    # Failed-login backoff per address and user, one for the whole broker (shoal.auth.backoff).
    backoff: LoginBackoff = field(default_factory=LoginBackoff)
    # Failed logins, one line per user per 10 s at most (shared like ``backoff``).
    failure_log: RateLimitedLog = field(default_factory=lambda: RateLimitedLog(log))
    # OAUTHBEARER (when enabled): the token validator, the principal claim of tokens no identity
    # pool maps, and whether such tokens are refused
    oauth_validator: "Validator | None" = None
    oauth_principal_claim: str = "sub"
    oauth_pools_required: bool = False

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def session(self, store: "MetadataStore") -> SaslSession:
        def lookup(user: str, mechanism: str) -> "ScramCredential | None":
            by_mech = store.image.scram_credentials.get(user)
            return by_mech.get(mechanism) if by_mech else None

        return SaslSession(
            self.sasl_mechanisms, lookup, max_reauth_ms=self.max_reauth_ms, fake_secret=self.fake_secret,
            dummy=self.plain_dummy, oauth=self._oauth_factory(store),
        )

    def _oauth_factory(self, store: "MetadataStore") -> "Callable[[], SaslServer] | None":
        validator = self.oauth_validator
        if validator is None:
            return None
        from shoal.auth.oauthbearer import POOL_EXTENSION, OAuthBearerServer, TokenRejected
        from shoal.tenancy.identity_pools import NoIdentity, resolve_principal

        def resolve(claims: Mapping[str, Any], extensions: Mapping[str, str]) -> str:
            try:  # (in a worker thread: images are immutable, reading the current one is safe)
                return resolve_principal(
                    store.image.identity_pools, claims, extensions=extensions, principal_claim=self.oauth_principal_claim,
                    required=self.oauth_pools_required, pool_extension=POOL_EXTENSION)
            except NoIdentity as e:
                raise TokenRejected(str(e)) from None

        return lambda: OAuthBearerServer(validator, resolve)

    def tls_principal(self, transport: Any) -> str:
        """The principal of an SSL listener's connection: its client certificate, else ANONYMOUS.

        Raises ``MappingError`` when no ``ssl.principal.mapping.rules`` rule applies.
        """
        sslobj = transport.get_extra_info("ssl_object")
        if sslobj is None or self.mapper is None:
            return ANONYMOUS
        return principal_from_peercert(sslobj.getpeercert(), self.mapper)


def listener_security(config: "BrokerConfig", backoff: LoginBackoff | None = None) -> dict[str, ListenerSecurity]:
    """One ``ListenerSecurity`` per configured listener, all sharing one ``backoff`` (made from
    the config unless given); raises ``TlsConfigError``/``ConfigError``."""
    from shoal.auth.tls import principal_mapper, server_context

    out: dict[str, ListenerSecurity] = {}
    protocols = config.listener_security_protocols
    backoff = backoff or LoginBackoff.from_config(config)
    failure_log = RateLimitedLog(log)
    jwks: dict[str, "JwksCache"] = {}  # one cache per JWKS URL, shared by the listeners naming it
    for name, _host, _port in config.listeners:
        protocol = protocols[name]
        sec = ListenerSecurity(name, protocol, backoff=backoff, failure_log=failure_log)
        if protocol in ("SSL", "SASL_SSL"):
            sec.ssl_context = server_context(config, name)
            sec.mapper = principal_mapper(config, name)
        if sec.sasl:
            sec.sasl_mechanisms = tuple(config.for_listener(name, "sasl.enabled.mechanisms"))
            sec.max_reauth_ms = int(config.for_listener(name, "connections.max.reauth.ms"))
            if "OAUTHBEARER" in sec.sasl_mechanisms:
                _oauth_settings(sec, config, name, jwks)
            if "PLAIN" in sec.sasl_mechanisms:
                from shoal.auth.scram import make_credential

                sec.plain_dummy = make_credential("SCRAM-SHA-512", os.urandom(16).hex())
        out[name] = sec
    return out


def _oauth_settings(sec: ListenerSecurity, config: "BrokerConfig", listener: str, jwks: dict[str, "JwksCache"]) -> None:
    """OAUTHBEARER's validator of one listener from the ``sasl.oauthbearer.*`` configs, as Kafka
    reads them: ``listener.name.<listener>.oauthbearer.<name>`` first, then
    ``listener.name.<listener>.<name>``, then ``<name>``; ConfigError when neither validator is
    configured."""
    from shoal.auth.oauthbearer import UNSECURED_VALIDATOR_CLASS, JwksCache, JwksValidator, UnsecuredValidator
    from shoal.config import BROKER_CONFIGS, ConfigError

    def get(key: str) -> Any:
        prefixed = config.raw(f"listener.name.{listener.lower()}.oauthbearer.{key}")
        if prefixed is not None:
            return BROKER_CONFIGS[key].parse(prefixed)
        return config.for_listener(listener, key)

    skew = int(get("sasl.oauthbearer.clock.skew.seconds"))
    sec.oauth_principal_claim = str(get("sasl.oauthbearer.sub.claim.name") or "sub")
    sec.oauth_pools_required = bool(get("shoal.sasl.oauthbearer.identity.pools.required"))
    url = get("sasl.oauthbearer.jwks.endpoint.url")
    if get("sasl.server.callback.handler.class") == UNSECURED_VALIDATOR_CLASS:
        sec.oauth_validator = UnsecuredValidator(skew_s=skew, scope_claim=str(get("sasl.oauthbearer.scope.claim.name")))
        log.warning("listener %s accepts unsecured OAUTHBEARER tokens (alg none, no signature): for development only",
                    listener)
        return
    if not url:
        raise ConfigError("INVALID_CONFIG", f"listener {listener} enables OAUTHBEARER but sets no "
                          "sasl.oauthbearer.jwks.endpoint.url (or, for development only, sasl.server.callback.handler.class="
                          f"{UNSECURED_VALIDATOR_CLASS})")
    if not str(url).startswith(("https://", "http://", "file:")):
        raise ConfigError("INVALID_CONFIG", f"sasl.oauthbearer.jwks.endpoint.url {url!r} is not an https://, "
                          "http:// or file: URL")
    trust, ssl_context = _jwks_trust(config, listener, str(url))
    cache = jwks.get(f"{url} {trust}")
    if cache is None:
        cache = jwks[f"{url} {trust}"] = JwksCache(
            str(url), refresh_ms=int(get("sasl.oauthbearer.jwks.endpoint.refresh.ms")),
            timeout_s=int(get("shoal.sasl.oauthbearer.jwks.endpoint.timeout.ms")) / 1000,
            min_interval_s=int(get("shoal.sasl.oauthbearer.jwks.refresh.min.interval.ms")) / 1000,
            ssl_context=ssl_context)
    sec.oauth_validator = JwksValidator(
        cache, audience=tuple(get("sasl.oauthbearer.expected.audience") or ()),
        issuer=get("sasl.oauthbearer.expected.issuer") or None, skew_s=skew, principal_claim=sec.oauth_principal_claim)


def _jwks_trust(config: "BrokerConfig", listener: str, url: str) -> tuple[str, Any]:
    """(what it trusts, an ``SSLContext`` or None) for an https JWKS endpoint, from the ``ssl.*``
    options of the listener's ``OAuthBearerLoginModule`` JAAS entry, where Kafka reads them
    (``listener.name.<listener>.oauthbearer.sasl.jaas.config``, else ``sasl.jaas.config``):
    ``ssl.truststore.location`` (PEM CA certificates; ``ssl.truststore.type`` PEM) and
    ``ssl.endpoint.identification.algorithm`` ("" to skip the host name check). None (the system's
    CAs) without a truststore; ConfigError for one that cannot be read."""
    import ssl

    from shoal.config import ConfigError
    from shoal.net.jaas import JaasError, parse_jaas

    setting = f"listener.name.{listener.lower()}.oauthbearer.sasl.jaas.config"
    text = config.raw(setting)
    if text is None:
        setting, text = "sasl.jaas.config", config.for_listener(listener, "sasl.jaas.config")
    if not url.startswith("https:") or text is None:
        return "system", None
    try:
        options = parse_jaas(str(text), ("OAuthBearerLoginModule",))
    except JaasError:
        return "system", None  # another module's login (the broker's own, for PLAIN or SCRAM)
    location = options.get("ssl.truststore.location")
    if location is None:
        return "system", None
    kind = options.get("ssl.truststore.type", "PEM").upper()
    if kind != "PEM":
        raise ConfigError("INVALID_CONFIG", f"{setting}: ssl.truststore.type={kind}: the JWKS endpoint's truststore "
                          "must be PEM (CA certificates)")
    try:
        ctx = ssl.create_default_context(cafile=location)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError("INVALID_CONFIG", f"{setting}: ssl.truststore.location {location!r}: {e}") from None
    check = options.get("ssl.endpoint.identification.algorithm", "https")
    if check == "":
        ctx.check_hostname = False
    return f"{location} {check}", ctx


def jwks_caches(security: dict[str, ListenerSecurity]) -> list["JwksCache"]:
    """The JWKS caches of the listeners' OAUTHBEARER validators (the broker fetches each once at
    start-up, in a worker thread, so that the first login need not wait)."""
    from shoal.auth.oauthbearer import JwksValidator

    out: list[JwksCache] = []
    for sec in security.values():
        v = sec.oauth_validator
        if isinstance(v, JwksValidator) and all(c is not v.keys for c in out):
            out.append(v.keys)
    return out


def shared_backoff(security: dict[str, ListenerSecurity]) -> LoginBackoff | None:
    """The broker's one ``LoginBackoff`` (every listener shares it), for its HTTP endpoints."""
    return next(iter(security.values())).backoff if security else None


async def ensure_bootstrap_users(config: "BrokerConfig", store: "MetadataStore") -> None:
    """``shoal.sasl.bootstrap.users``: give each listed user SCRAM-SHA-256 and -512 credentials.

    A credential that already matches the configured password is kept (its salt too); otherwise a
    new one is stored. Only salted hashes reach the store. A name no operator may create
    (``shoal.tenancy.principals.operator_user_error``: ANONYMOUS, tenant-qualified) is a
    ``ValueError``.
    """
    import asyncio

    from shoal.auth.scram import MECHANISMS, make_credential, parse_bootstrap_users, verify_password
    from shoal.tenancy.principals import operator_user_error

    users = parse_bootstrap_users(config.get("shoal.sasl.bootstrap.users"))
    for user, _password in users:
        why = operator_user_error(user, frozenset(), into_tenant=False)
        if why is not None:
            raise ValueError(f"shoal.sasl.bootstrap.users: {why}")
    for user, password in users:
        for mechanism in MECHANISMS:
            existing = store.image.scram_credentials.get(user, {}).get(mechanism)
            if existing is not None and await asyncio.to_thread(verify_password, existing, password):
                continue
            cred = await asyncio.to_thread(make_credential, mechanism, password)
            await store.set_scram_credential(
                user, mechanism, cred.salt, cred.stored_key, cred.server_key, cred.iterations
            )
        log.info("bootstrap SCRAM credentials of user %s are in place", user)


__all__ += ["MappingError"]
