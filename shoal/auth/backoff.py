"""Failed-login backoff per source address and user: a guesser is slowed, the account never locked.

One ``LoginBackoff`` per broker, shared by every SASL listener (PLAIN, SCRAM-SHA-256/512) and the
HTTP admin and metrics endpoints (HTTP Basic), keyed by :func:`login_key`: the address a login
attempt comes from (an IPv6 address by its /64, what one host is usually given) and the user name
it claims. Pure policy: no I/O and no clock reads (callers pass ``now_ms`` from the broker's clock)
and no sleeping (callers wait with ``asyncio.sleep``, which never blocks the event loop).

Schedule. A key with ``n`` failures (within ``forget_ms`` of each other) has the delay
``delay_ms(n) = min(max_ms, base_ms * 2**(n-1))`` (0 for ``n = 0``): with Kafka's
``connection.failed.authentication.delay.ms`` = 100 and ``max_ms`` = 2000: 100, 200, 400, 800,
1600, 2000, 2000 ... ms. Two things use it:

- ``failed`` records a failure and returns the delay before its answer is sent (and the
  connection closed), as Kafka's ``connection.failed.authentication.delay.ms`` does per
  connection, but growing;
- ``admit`` is asked before an attempt's password is checked: attempts with a key that has
  failures are *spaced*, each checked ``delay_ms(n)`` after the previous check, whatever their
  outcome. Without the spacing a client holding many connections would learn each guess's
  outcome at once (a correct password answers in milliseconds, so "no answer yet" means
  "wrong"); with it, one address's guesses on one user are checked at most once per
  ``delay_ms(n)`` however many connections it opens. ``admit`` answers 0 (check it now: the slot
  is taken) or how long until the next slot; the caller waits that long and asks again
  (:func:`wait_turn`), so an attempt whose connection closes while it waits (the listener's
  authentication timeout) holds no slot. (Slots reserved ahead in a line were held by abandoned
  attempts: a broker that had failed with a wrong password, restarted with the right one, retried
  faster than its line moved and was never checked again.) An attempt that has waited
  ``queue_ms`` in all is refused without being checked (answered as a failure).

Whom it slows (issue 24: keyed per user, an 8-connection attack refused the owner's correct
password 5 times in 6):

- the guessing address, on the user it guesses: at most one check per ``max_ms`` at the cap;
- never the account: its owner logging in from another address is checked at once, and gets in;
- the owner on the attacker's own address (one NAT, one host) cannot be told from the attacker:
  her attempt competes with the attacker's for each slot, up to ``queue_ms`` (8 s, under the
  listeners' ``shoal.sasl.authentication.timeout.ms`` of 10 s, which closes a connection still
  waiting then), else is refused like the attacker's; a correct login clears the key's state;
- never other users, from the same address too (a shared client host): the key has the user.

A guesser spread over many addresses gets one line per address: that is the cost of never
locking an account out, the trade Kafka makes too (it delays each failed connection only).

Memory is bounded for an attacker who tries millions of distinct names or addresses: at most
``max_entries`` keys are tracked (least recently failed forgotten first; states idle for
``forget_ms`` are dropped as new ones come). Forgetting a key's state early costs the attacker
``max_entries`` failed attempts on other keys, each a full login.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Callable

import ipaddress

__all__ = ["LoginBackoff", "login_key", "wait_turn"]


def login_key(peer: str, user: str) -> str:
    """The backoff's key for a login attempt claiming ``user`` from ``peer``, the ``host:port``
    the listeners name a connection by (``::1:51234`` for IPv6, unbracketed): IPv4 by address,
    IPv6 by its /64 prefix (one host's usual allocation, so a guesser cannot rotate through it)."""
    host = peer.rpartition(":")[0] or peer
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return f"{host}|{user}"
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped
        host = str(mapped) if mapped is not None else str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return f"{host}|{user}"


class _State:
    __slots__ = ("failures", "last_ms", "next_ms")

    def __init__(self) -> None:
        self.failures = 0
        self.last_ms = 0  # time of the last failure
        self.next_ms = 0  # earliest time the next attempt on this user is checked


class LoginBackoff:
    def __init__(self, *, base_ms: int = 100, max_ms: int = 2000, queue_ms: int = 8_000,
                 forget_ms: int = 60_000, max_entries: int = 10_000) -> None:
        if base_ms < 0 or max_ms < base_ms or queue_ms < max_ms or forget_ms < 0 or max_entries < 1:
            raise ValueError("need 0 <= base_ms <= max_ms <= queue_ms, forget_ms >= 0, max_entries >= 1")
        self.base_ms = base_ms
        self.max_ms = max_ms
        # How far ahead attempts queue for their key's slot: under the listeners' authentication
        # timeout (shoal.sasl.authentication.timeout.ms, 10 s), which would close a connection
        # still waiting; longer lines are refused unchecked.
        self.queue_ms = queue_ms
        self.forget_ms = forget_ms
        self.max_entries = max_entries
        self._users: OrderedDict[str, _State] = OrderedDict()
        # counters (the /metrics endpoint shows them)
        self.failures_total = 0
        self.delayed_total = 0  # attempts that waited for their key's slot
        self.refused_total = 0  # attempts refused unchecked (their key's queue was full)

    @classmethod
    def from_config(cls, config: object) -> "LoginBackoff":
        get = config.get  # type: ignore[attr-defined]
        max_ms = int(get("shoal.login.failure.delay.max.ms"))
        return cls(base_ms=int(get("connection.failed.authentication.delay.ms")), max_ms=max_ms,
                   queue_ms=max(8_000, max_ms))

    def delay_ms(self, failures: int) -> int:
        if failures <= 0:
            return 0
        return min(self.max_ms, self.base_ms << min(failures - 1, 32))

    @property
    def tracked(self) -> int:
        """Keys (address and user) with state now (bounded by ``max_entries``)."""
        return len(self._users)

    def failures(self, user: str, now_ms: int) -> int:
        """The failures that count for ``user`` (a :func:`login_key`) now."""
        s = self._live(user, now_ms)
        return s.failures if s is not None else 0

    def _live(self, user: str, now_ms: int) -> _State | None:
        s = self._users.get(user)
        if s is not None and now_ms - s.last_ms >= self.forget_ms and now_ms >= s.next_ms:
            del self._users[user]
            return None
        return s

    def admit(self, user: str, now_ms: int) -> int:
        """Before checking an attempt with key ``user`` (a :func:`login_key`): 0 when it may be
        checked now (it takes the slot: the next check of the key waits ``delay_ms(n)``), else
        how long (ms) until the next slot, to wait and ask again. Reserves nothing ahead."""
        s = self._live(user, now_ms)
        if s is None or s.failures == 0:
            return 0
        wait = s.next_ms - now_ms
        if wait > 0:
            return wait
        s.next_ms = now_ms + self.delay_ms(s.failures)
        return 0

    def refused(self) -> None:
        """An attempt gave up waiting (``queue_ms``) and is refused unchecked (counted)."""
        self.refused_total += 1

    def failed(self, user: str, now_ms: int) -> int:
        """Record a failed attempt with key ``user``; the delay (ms) before its answer is sent."""
        self.failures_total += 1
        s = self._live(user, now_ms)
        if s is None:
            s = self._users[user] = _State()
        else:
            self._users.move_to_end(user)
        s.failures += 1
        s.last_ms = now_ms
        self._evict(now_ms)
        d = self.delay_ms(s.failures)
        s.next_ms = max(s.next_ms, now_ms + d)
        return d

    def succeeded(self, user: str) -> None:
        """A correct password with key ``user``: its failures no longer count."""
        self._users.pop(user, None)

    def _evict(self, now_ms: int) -> None:
        users = self._users
        while len(users) > self.max_entries:
            users.popitem(last=False)
        # drop idle states from the front (least recently failed), a few per insert
        for _ in range(2):
            if not users:
                break
            user, s = next(iter(users.items()))
            if now_ms - s.last_ms >= self.forget_ms and now_ms >= s.next_ms:
                del users[user]
            else:
                break


async def wait_turn(backoff: LoginBackoff, key: str, now_ms: Callable[[], int]) -> bool:
    """Wait until an attempt with ``key`` may be checked (``admit`` answers 0): True then, False
    when that would take more than ``queue_ms`` in all (refuse it unchecked). Cancelled with its
    connection, it holds no slot."""
    start = now_ms()
    waited = False
    while True:
        now = now_ms()
        wait = backoff.admit(key, now)
        if not wait:
            return True
        if now + wait - start > backoff.queue_ms:
            backoff.refused()
            return False
        if not waited:
            backoff.delayed_total += 1
            waited = True
        await asyncio.sleep(wait / 1000)
