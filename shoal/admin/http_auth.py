"""Who may call the HTTP admin API (``shoal.admin.authentication``).

- ``none`` (the default): no authentication; bind ``shoal.admin.listener`` to a trusted address.
- ``basic``: every request (but ``GET /openapi.json``) carries ``Authorization: Basic base64(user:password)``, checked against
  the user's SCRAM credential (the password is never stored; a successful check is remembered for
  a minute, keyed by a hash of the password and the credential it matched). Then:

  - a super user (``User:<name>`` in ``super.users``) may call everything;
  - a tenant's administrator may read its own tenant (``GET /v1/tenants/{id}``) and manage
    everything under it (users, namespaces, topic moves, tenant default configs) except its
    create-topic policy, which it may only read;
  - anyone else gets 403, as does an administrator for any other tenant (indistinguishable from
    a tenant that does not exist to it: the same 403 whether the id exists or not).

A missing or wrong credential gets 401 with no detail that helps guessing; a log line names the
client address and the user.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
import time
from typing import Any, Callable

log = logging.getLogger("shoal.admin.http")

_REMEMBER_S = 60.0


class AuthError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class HttpAuth:
    def __init__(self, store: Any, broker_config: Callable[[], Any] | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.broker_config = broker_config
        self.clock = clock
        self._verified: dict[tuple[str, bytes], tuple[float, Any]] = {}

    def _config(self, name: str) -> Any:
        if self.broker_config is None:
            return None
        try:
            return self.broker_config().get(name)
        except KeyError:
            return None

    @property
    def mode(self) -> str:
        return str(self._config("shoal.admin.authentication") or "none").lower()

    async def check(self, headers: dict[str, str], method: str, segs: list[str], peer: str) -> None:
        """Raise AuthError unless the request may proceed."""
        if self.mode != "basic" or segs == ["openapi.json"]:  # the API's description is public
            return
        user = await self._authenticate(headers.get("authorization"), peer)
        supers = {s.strip() for s in str(self._config("super.users") or "").split(";") if s.strip()}
        if f"User:{user}" in supers:
            return
        image = self.store.image
        tenant = image.user_tenants.get(user)
        if tenant is None or user not in image.tenant_admins:
            raise AuthError(403, "forbidden", "not allowed")
        if segs[:2] == ["v1", "tenants"] and len(segs) >= 3 and segs[2] == tenant:
            if len(segs) == 3 and method != "GET":
                raise AuthError(403, "forbidden", "not allowed")
            if len(segs) >= 4 and segs[3] == "policy" and method != "GET":
                raise AuthError(403, "forbidden", "not allowed")
            return
        raise AuthError(403, "forbidden", "not allowed")

    async def _authenticate(self, header: str | None, peer: str) -> str:
        from shoal.auth.scram import verify_password

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
        key = (user, digest)
        now = self.clock()
        hit = self._verified.get(key)
        if hit is not None and hit[0] > now and hit[1] in creds.values():
            return user
        for cred in creds.values():
            if await asyncio.to_thread(verify_password, cred, password):
                if len(self._verified) > 10_000:
                    self._verified.clear()
                self._verified[key] = (now + _REMEMBER_S, cred)
                return user
        log.warning("HTTP admin API: failed authentication from %s as %r", peer, user)
        raise AuthError(401, "unauthorized", "authentication failed")
