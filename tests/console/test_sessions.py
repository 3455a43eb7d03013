"""The console's session store on an injected clock, without a broker: sessions end after
``idle_s`` without a request and ``max_s`` in all, the least recently used goes first beyond
``max_sessions``, each ending closes its Kafka client, and a CSRF token compares exactly."""

from __future__ import annotations

import asyncio

from shoal.console.sessions import Session, Sessions


class FakeClient:
    """Stands in for the session's AdminClient: only ``close`` is called by the store."""

    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


def _store(now: list[float], **kw) -> Sessions:
    return Sessions("127.0.0.1:1", {"security.protocol": "SASL_PLAINTEXT"}, clock=lambda: now[0], **kw)


async def _add(store: Sessions, sid: str, now: float) -> Session:
    """A session as login() keeps it once the broker accepted the user."""
    s = Session(sid, "alice", False, "token-" + sid, FakeClient(), now, now)  # type: ignore[arg-type]
    await store.keep(s)
    return s


def test_idle_and_absolute_expiry_close_the_client():
    async def run() -> None:
        now = [1000.0]
        store = _store(now, idle_s=60, max_s=300)
        a, b = await _add(store, "a", now[0]), await _add(store, "b", now[0])
        for _ in range(6):  # a is used every 50 s, b never
            now[0] += 50
            assert await store.get("a") is a
        assert await store.get("b") is None and b.client.closed and not a.client.closed
        now[0] += 50  # 350 s after login: past max_s although a was just used
        assert await store.get("a") is None and a.client.closed and len(store) == 0
        assert await store.get(None) is None and await store.get("") is None

    asyncio.run(run())


def test_logout_closes_and_forgets():
    async def run() -> None:
        now = [0.0]
        store = _store(now)
        a = await _add(store, "a", 0)
        await store.logout(a)
        await store.logout(a)  # twice: nothing more
        assert a.client.closed and await store.get("a") is None

    asyncio.run(run())


def test_beyond_max_sessions_the_least_recently_used_ends():
    async def run() -> None:
        now = [0.0]
        store = _store(now, max_sessions=2)
        a, b = await _add(store, "a", 0), await _add(store, "b", 0)
        assert await store.get("a") is a  # a used after b
        c = await _add(store, "c", 0)
        assert b.client.closed and not a.client.closed and not c.client.closed
        assert await store.get("b") is None and await store.get("a") is a and len(store) == 2

    asyncio.run(run())


def test_csrf_token_compares_exactly():
    s = Session("x", "alice", False, "secret-token", FakeClient(), 0, 0)  # type: ignore[arg-type]
    assert s.csrf_ok("secret-token")
    assert not any(s.csrf_ok(t) for t in (None, "", "secret-toke", "secret-token ", "SECRET-TOKEN"))
