"""Console logins and sessions.

A login is a SASL/SCRAM login to the broker as the user: the console opens its Kafka client
(``shoal.client.AdminClient``) with the user name and password from the login form, so the broker
checks them against the user's stored SCRAM credential as it checks any client's, and binds the
connection to the user's tenant. Before that, the attempt waits its turn in the failed-login
backoff (``shoal.auth.backoff``) keyed by the browser's address and the user name, as HTTP Basic
and SASL logins do; a failure is recorded there and answered after the backoff's delay.

A session is server-side: a random id (256 bits) in a cookie names it; it holds the user, its CSRF
token and its Kafka client. The client keeps the password in memory for the connections it opens
later (to partition leaders and group coordinators on other brokers); nothing is written to disk
or logged, and logout or expiry (``idle_s`` without a request, ``max_s`` in all) closes the client
and forgets it. At most ``max_sessions`` live at once (the least recently used goes first).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Mapping

from shoal.auth.backoff import LoginBackoff, login_key, wait_turn
from shoal.client import AdminClient, ClientSecurity, ConnectionLost, KafkaError
from shoal.logutil import RateLimitedLog

log = logging.getLogger("shoal.console")

AUTH_FAILURES = frozenset({"SASL_AUTHENTICATION_FAILED", "ILLEGAL_SASL_STATE", "UNSUPPORTED_SASL_MECHANISM"})


class LoginFailed(Exception):
    """The user name or password is wrong (or the attempt was refused by the backoff)."""


class BrokerUnavailable(Exception):
    """The console could not reach a broker to check the login."""


@dataclass
class Session:
    sid: str
    user: str
    operator: bool  # a super user: the physical cluster's pages
    csrf: str
    client: AdminClient
    created: float
    seen: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one Kafka conversation at a time
    flashes: list[tuple[str, str]] = field(default_factory=list)  # (ok|error, text) for the next page
    cluster_id: str | None = None  # the cluster id the user's client sees (a tenant's: lkc-...), once asked
    # kept with the client for the operator's calls to the admin API as this user (HTTP Basic)
    password: str = field(default="", repr=False)
    # Whether the user administers its tenant, so the nav shows the usage, users and namespaces
    # pages (shoal.console.tenant_admin.administers): None until the first page of the session
    # asks; an answer the admin API could not give (unreachable) is asked again after
    # ``tenant_admin_until`` (a monotonic time), a real one holds for the session.
    tenant_admin: bool | None = None
    tenant_admin_until: float = float("inf")

    def csrf_ok(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf.encode(), (token or "").encode())

    async def tenant(self) -> str | None:
        """The user's tenant: the cluster id its client sees (``lkc-...``), asked once a session;
        None for the physical cluster's view."""
        if self.cluster_id is None:
            md = await self.client.metadata([])
            self.cluster_id = md.cluster_id or ""
        return self.cluster_id if self.cluster_id.startswith("lkc-") else None


class Sessions:
    """``bootstrap``/``security``: how to reach a SASL listener (its ``security.protocol`` and
    TLS settings; the SASL user and password are each login's; ``resolve``: where to connect for
    an address, TLS checking its name, ``AdminClient``'s); ``is_operator(user)``: whether a
    user gets the operator's pages (the broker answers for what it may see either way)."""

    def __init__(self, bootstrap: str, security: dict[str, str], *, mechanism: str = "SCRAM-SHA-512",
                 is_operator: Callable[[str], bool] = lambda user: False, backoff: LoginBackoff | None = None,
                 idle_s: float = 1800.0, max_s: float = 12 * 3600.0, max_sessions: int = 10_000,
                 clock: Callable[[], float] = time.monotonic, timeout_s: float = 15.0,
                 resolve: Mapping[str, str] | None = None) -> None:
        self.bootstrap = bootstrap
        self.resolve = dict(resolve or {})  # AdminClient's: where an advertised address is reached
        self.security = dict(security)
        self.mechanism = mechanism
        self.is_operator = is_operator
        self.backoff = backoff or LoginBackoff()
        self.idle_s = idle_s
        self.max_s = max_s
        self.max_sessions = max_sessions
        self.clock = clock
        self.timeout_s = timeout_s
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._log = RateLimitedLog(log)

    def __len__(self) -> int:
        return len(self._sessions)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def login(self, user: str, password: str, peer: str) -> Session:
        """A new session for ``user``; LoginFailed or BrokerUnavailable."""
        key = login_key(peer, user)
        if not await wait_turn(self.backoff, key, self._now_ms):
            await asyncio.sleep(self.backoff.delay_ms(self.backoff.failures(key, self._now_ms())) / 1000)
            self._failed(user, peer, key, "refused unchecked")
        props = {**self.security, "sasl.mechanism": self.mechanism, "sasl.username": user, "sasl.password": password}
        client = AdminClient(self.bootstrap, client_id="shoal-console", timeout=self.timeout_s,
                             security=ClientSecurity.from_properties(props), resolve=self.resolve)
        try:
            await client.connect()
        except KafkaError as e:
            await client.close()
            if e.code_name in AUTH_FAILURES:
                await asyncio.sleep(self.backoff.failed(key, self._now_ms()) / 1000)
                self._failed(user, peer, key, "")
            raise BrokerUnavailable(e.code_name if not isinstance(e, ConnectionLost) else "broker unreachable") from None
        self.backoff.succeeded(key)
        now = self.clock()
        session = Session(secrets.token_urlsafe(32), user, self.is_operator(user), secrets.token_urlsafe(32),
                          client, now, now, password=password)
        await self.keep(session)
        log.info("console: %s logged in from %s", user, peer.rpartition(":")[0] or peer)
        return session

    async def keep(self, session: Session) -> None:
        """Hold a new session; beyond ``max_sessions``, the least recently used ends."""
        self._sessions[session.sid] = session
        while len(self._sessions) > self.max_sessions:
            _, old = self._sessions.popitem(last=False)
            await old.client.close()

    def _failed(self, user: str, peer: str, key: str, how: str) -> None:
        n = self.backoff.failures(key, self._now_ms())
        self._log.warning(("console", user), "console: failed login from %s as %r (%d failures in a row from there%s)",
                          peer, user, n, f", {how}" if how else "")
        raise LoginFailed()

    async def get(self, sid: str | None) -> Session | None:
        """The live session ``sid`` names (its idle clock restarted), or None."""
        await self.expire()
        session = self._sessions.get(sid or "")
        if session is None:
            return None
        session.seen = self.clock()
        self._sessions.move_to_end(session.sid)
        return session

    def any_of(self, user: str) -> Session | None:
        """A live session of ``user`` (the most recently used), or None."""
        for s in reversed(self._sessions.values()):
            if s.user == user:
                return s
        return None

    async def logout(self, session: Session) -> None:
        if self._sessions.pop(session.sid, None) is not None:
            await session.client.close()
            log.info("console: %s logged out", session.user)

    async def expire(self) -> None:
        now = self.clock()
        gone = [s for s in self._sessions.values() if now - s.seen > self.idle_s or now - s.created > self.max_s]
        for s in gone:
            del self._sessions[s.sid]
            await s.client.close()

    async def close(self) -> None:
        sessions = list(self._sessions.values())
        self._sessions.clear()
        await asyncio.gather(*(s.client.close() for s in sessions), return_exceptions=True)
