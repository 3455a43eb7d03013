"""Failed-login backoff per principal: guessing one user's password runs at a few tries a second.

One ``LoginBackoff`` per broker, shared by every SASL listener (PLAIN, SCRAM-SHA-256/512) and the
HTTP admin and metrics endpoints (HTTP Basic), keyed by the user name a login attempt claims.
Pure policy: no I/O and no clock reads (callers pass ``now_ms`` from the broker's clock) and no
sleeping (callers wait with ``asyncio.sleep``, which never blocks the event loop).

Schedule. A user with ``n`` failures (within ``forget_ms`` of each other) has the delay
``delay_ms(n) = min(max_ms, base_ms * 2**(n-1))`` (0 for ``n = 0``): with Kafka's
``connection.failed.authentication.delay.ms`` = 100 and ``max_ms`` = 2000: 100, 200, 400, 800,
1600, 2000, 2000 ... ms. Two things use it:

- ``failed`` records a failure and returns the delay before its answer is sent (and the
  connection closed), as Kafka's ``connection.failed.authentication.delay.ms`` does, but growing;
- ``admit`` is asked before an attempt's password is checked: attempts on a user that has failures
  are *spaced*, each one ``delay_ms(n)`` after the previous one, whatever their outcome. Without
  the spacing a client holding many connections would learn each guess's outcome at once (a
  correct password answers in milliseconds, so "no answer yet" means "wrong"); with it, guesses
  on one user are checked at most once per ``delay_ms(n)`` however many connections try, and at
  most about ``max_ms`` ahead are queued: an attempt that would wait longer is refused without
  being checked (``admit`` returns None; it is answered as a failure).

So other users are never slowed, from the same address too (NAT, a shared client host): the
state is per claimed user, not per address. A user nobody fails against is never delayed; the
owner of an attacked user waits at most ``max_ms`` (or is refused) while the attack goes on, and a
success clears the user's state.

Memory is bounded for an attacker who tries millions of distinct names: at most ``max_entries``
users are tracked (least recently failed forgotten first; states idle for ``forget_ms`` are
dropped as new ones come). Forgetting a user's state early costs the attacker ``max_entries``
failed attempts on other names, each a full login.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["LoginBackoff"]


class _State:
    __slots__ = ("failures", "last_ms", "next_ms")

    def __init__(self) -> None:
        self.failures = 0
        self.last_ms = 0  # time of the last failure
        self.next_ms = 0  # earliest time the next attempt on this user is checked


class LoginBackoff:
    def __init__(self, *, base_ms: int = 100, max_ms: int = 2000, forget_ms: int = 60_000,
                 max_entries: int = 10_000) -> None:
        if base_ms < 0 or max_ms < base_ms or forget_ms < 0 or max_entries < 1:
            raise ValueError("need 0 <= base_ms <= max_ms, forget_ms >= 0, max_entries >= 1")
        self.base_ms = base_ms
        self.max_ms = max_ms
        self.forget_ms = forget_ms
        self.max_entries = max_entries
        self._users: OrderedDict[str, _State] = OrderedDict()
        # counters (the /metrics endpoint shows them)
        self.failures_total = 0
        self.delayed_total = 0  # attempts that waited for their user's slot
        self.refused_total = 0  # attempts refused unchecked (their user's queue was full)

    @classmethod
    def from_config(cls, config: object) -> "LoginBackoff":
        get = config.get  # type: ignore[attr-defined]
        return cls(base_ms=int(get("connection.failed.authentication.delay.ms")),
                   max_ms=int(get("shoal.login.failure.delay.max.ms")))

    def delay_ms(self, failures: int) -> int:
        if failures <= 0:
            return 0
        return min(self.max_ms, self.base_ms << min(failures - 1, 32))

    @property
    def tracked(self) -> int:
        """Users with state now (bounded by ``max_entries``)."""
        return len(self._users)

    def failures(self, user: str, now_ms: int) -> int:
        """The failures that count for ``user`` now."""
        s = self._live(user, now_ms)
        return s.failures if s is not None else 0

    def _live(self, user: str, now_ms: int) -> _State | None:
        s = self._users.get(user)
        if s is not None and now_ms - s.last_ms >= self.forget_ms and now_ms >= s.next_ms:
            del self._users[user]
            return None
        return s

    def admit(self, user: str, now_ms: int) -> int | None:
        """Before checking an attempt on ``user``: how long it must wait first (ms; 0: check it
        now), or None: refuse it unchecked. Reserves the attempt's slot."""
        s = self._live(user, now_ms)
        if s is None or s.failures == 0:
            return 0
        wait = max(0, s.next_ms - now_ms)
        if wait > self.max_ms:
            self.refused_total += 1
            return None
        s.next_ms = max(now_ms, s.next_ms) + self.delay_ms(s.failures)
        if wait:
            self.delayed_total += 1
        return wait

    def failed(self, user: str, now_ms: int) -> int:
        """Record a failed attempt on ``user``; the delay (ms) before its answer is sent."""
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
        """A correct password for ``user``: its failures no longer count."""
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
