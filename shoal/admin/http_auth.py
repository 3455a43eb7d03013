"""Who may call the HTTP admin API (``shoal.admin.authentication``).

- ``none`` (the default): no authentication; bind ``shoal.admin.listener`` to a trusted address.
- ``basic``: every request (but ``GET /openapi.json``) carries ``Authorization: Basic base64(user:password)``, checked against
  the user's SCRAM credential (the password is never stored; a successful check is remembered for
  a minute, keyed by a hash of the password and the credential it matched). Then:

  - a super user (``User:<name>`` in ``super.users``) may call everything;
  - a tenant's administrator may read its own tenant (``GET /v1/tenants/{id}``) and manage
    everything under it (users, namespaces, topic moves, tenant default configs) except its
    create-topic policy, which it may only read, and its OAuth identity pools (the operator's:
    they decide which tokens join the tenant);
  - anyone else gets 403, as does an administrator for any other tenant (indistinguishable from
    a tenant that does not exist to it: the same 403 whether the id exists or not).

A missing or wrong credential gets 401 with no detail that helps guessing, in the same time
whether the user exists or not (an unknown user's password is checked against a dummy credential,
as SASL PLAIN does); a rate-limited log line names the client address and the user. Failed logins
are backed off per client address and user like SASL logins (``shoal.auth.backoff``, shared with the listeners when
the broker passes its ``LoginBackoff``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
import os
import time
from typing import Any, Callable, Mapping, NoReturn

from shoal.auth.backoff import login_key, wait_turn

log = logging.getLogger("shoal.admin.http")

_REMEMBER_S = 60.0


class AuthError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class HttpAuth:
    """``backoff``: the broker's failed-login backoff (``shoal.auth.backoff``), shared with its
    SASL listeners; ``mode_config``: the config that says none/basic (``shoal.metrics`` passes
    its own, falling back to ``shoal.admin.authentication``)."""

    def __init__(self, store: Any, broker_config: Callable[[], Any] | None,
                 clock: Callable[[], float] = time.monotonic, *, backoff: Any = None,
                 mode_config: str = "shoal.admin.authentication") -> None:
        from shoal.auth.backoff import LoginBackoff
        from shoal.logutil import RateLimitedLog

        self.store = store
        self.broker_config = broker_config
        self.clock = clock
        self.mode_config = mode_config
        self._verified: dict[tuple[str, bytes], tuple[float, Any]] = {}
        self.backoff = backoff if backoff is not None else (
            LoginBackoff.from_config(broker_config()) if broker_config is not None else LoginBackoff())
        self._log = RateLimitedLog(log)
        self._dummy: Any = None  # an unknown user's password is checked against this

    def _config(self, name: str) -> Any:
        if self.broker_config is None:
            return None
        try:
            return self.broker_config().get(name)
        except KeyError:
            return None

    @property
    def mode(self) -> str:
        value = self._config(self.mode_config)
        if value is None and self.mode_config != "shoal.admin.authentication":
            value = self._config("shoal.admin.authentication")
        return str(value or "none").lower()

    def super_users(self) -> frozenset[str]:
        """``super.users`` as principals (``User:admin``)."""
        return frozenset(s.strip() for s in str(self._config("super.users") or "").split(";") if s.strip())

    def super_user(self, user: str) -> bool:
        return f"User:{user}" in self.super_users()

    async def check(self, headers: Mapping[str, str], method: str, segs: list[str], peer: str) -> str | None:
        """Raise AuthError unless the request may proceed; the tenant the caller administers, or
        None for the operator (a super user, or anyone when there is no authentication)."""
        if self.mode != "basic" or segs == ["openapi.json"]:  # the API's description is public
            return None
        return self.authorize(await self._authenticate(headers.get("authorization"), peer), method, segs)

    def authorize(self, user: str, method: str, segs: list[str]) -> str | None:
        """What ``user`` (authenticated) may call, whatever the mode: None for a super user, the
        tenant it administers for its own tenant's paths, else AuthError 403. The console calls
        it in process for its logged-in user (``shoal.console.tenant_admin``)."""
        if self.super_user(user):
            return None
        image = self.store.image
        tenant = image.user_tenants.get(user)
        if tenant is None or user not in image.tenant_admins:
            raise AuthError(403, "forbidden", "not allowed")
        if segs[:2] == ["v1", "tenants"] and len(segs) >= 3 and segs[2] == tenant:
            if len(segs) == 3 and method != "GET":
                raise AuthError(403, "forbidden", "not allowed")
            if len(segs) >= 4 and segs[3] == "policy" and method != "GET":
                raise AuthError(403, "forbidden", "not allowed")
            if len(segs) >= 4 and segs[3] == "identity_pools":  # which tokens join a tenant: the operator's
                raise AuthError(403, "forbidden", "not allowed")
            return tenant
        raise AuthError(403, "forbidden", "not allowed")

    async def check_super_user(self, headers: Mapping[str, str], peer: str) -> None:
        """For /metrics: with basic authentication, a super user's credentials; else AuthError."""
        if self.mode != "basic":
            return
        user = await self._authenticate(headers.get("authorization"), peer)
        if not self.super_user(user):
            raise AuthError(403, "forbidden", "not allowed")

    async def _authenticate(self, header: str | None, peer: str) -> str:
        """The user whose correct password ``header`` carries. Constant work whether the user
        exists or not (an unknown user's password is checked against a dummy credential, as
        SASL PLAIN does); failed-login backoff per address and user, as for SASL (``shoal.auth.backoff``)."""
        from shoal.auth.scram import make_credential, verify_password

        if not header or not header.lower().startswith("basic "):
            raise AuthError(401, "unauthorized", "authentication required")
        try:
            user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            user, sep, password = "", "", ""
        if not sep or not user:
            raise AuthError(401, "unauthorized", "authentication failed")
        creds = self.store.image.scram_credentials.get(user) or {}
        digest = hashlib.sha256(password.encode("utf-8")).digest()
        remembered = (user, digest)
        now = self.clock()
        hit = self._verified.get(remembered)
        if hit is not None and hit[0] > now and hit[1] in creds.values():
            return user
        backoff = self.backoff
        key = login_key(peer, user)
        if not await wait_turn(backoff, key, lambda: int(self.clock() * 1000)):  # waited queue_ms: refused unchecked
            await asyncio.sleep(backoff.delay_ms(backoff.failures(key, int(self.clock() * 1000))) / 1000)
            self._failed(user, peer, key, refused=True)
        # The same PBKDF2 work for an unknown user: its password is checked against a dummy.
        cred = creds.get("SCRAM-SHA-512") or creds.get("SCRAM-SHA-256")
        if cred is None and self._dummy is None:
            self._dummy = await asyncio.to_thread(make_credential, "SCRAM-SHA-512", os.urandom(16).hex())
        ok = await asyncio.to_thread(verify_password, cred or self._dummy, password) and cred is not None
        if ok:
            backoff.succeeded(key)
            if len(self._verified) > 10_000:
                self._verified.clear()
            self._verified[remembered] = (now + _REMEMBER_S, cred)
            return user
        delay = backoff.failed(key, int(self.clock() * 1000))
        await asyncio.sleep(delay / 1000)
        self._failed(user, peer, key, refused=False)

    def _failed(self, user: str, peer: str, key: str, *, refused: bool) -> NoReturn:
        n = self.backoff.failures(key, int(self.clock() * 1000))
        self._log.warning(("http", user), "HTTP admin API: failed authentication from %s as %r (%d failures in a "
                          "row from there%s)", peer, user, n, ", refused unchecked" if refused else "")
        raise AuthError(401, "unauthorized", "authentication failed")
