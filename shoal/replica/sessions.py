"""Leader side of the fetch sessions between brokers (KIP-227): an idle partition costs nothing.

A follower's fetcher opens one session on its connection to the leader with a full fetch (every
partition it follows from this leader, ``session_epoch`` 0); from then on each fetch names only
the partitions whose fetch state changed on the follower (its log end, its last epoch, the leader
epoch it knows) and those it stops fetching (``forgotten_topics_data``), and the leader answers
only the partitions with something new: records, a moved high watermark or log start, an error
or a divergence. Kafka walks every partition of the session on every fetch (``IncrementalFetchContext``
updates each one's follower state and reads each); here the leader touches only what changed:

- **Changed partitions, pushed.** The replica manager keeps, per partition, the sessions that hold
  it (:class:`SessionIndex`); a partition's progress (an append, a moved high watermark or log
  start, a new leader or epoch: ``ReplicaManager._progress``; an ISR change) marks it in each of
  those sessions' ``dirty`` set, and wakes a session's parked fetch when the follower has something to fetch
  (the log end, the leader or its epoch moved: not for a high watermark alone, as
  ``replica_waiters``). A fetch reads the partitions it names plus the dirty ones, never the rest;
  the parked fetch waits on the session, not on one purgatory entry per partition. A partition
  stays dirty while the follower has not confirmed the leader's log end (its fetch offset behind
  it: records sent but not yet acknowledged, or held back by a byte limit or a throttle), while
  the follower is a sync replica outside the ISR (each fetch may let it rejoin, as Kafka's walk
  would: an idle follower paused out of the ISR names nothing when it is back), and while its
  follower state does not follow the session's clock (reset by a new leader epoch, or not led
  here yet when the fetch came): so such a partition is read at every fetch until it is normal.
- **The ISR clock without a walk.** A follower that fetched an idle partition up to the log end
  is caught up for as long as the partition stays idle and the session keeps fetching: its
  ``FollowerState.session`` points at the session, whose ``last_fetch_ms`` each fetch moves, and
  ``FollowerState.caught_up_ms`` is the later of its own clock and that one. The first append
  after that (``Partition.update_follower_fetch`` / ``Partition._end_moved``) or the partition
  leaving the session stops it: the follower was caught up as of the session's last fetch, and
  from then on Kafka's rule applies as for a named partition. So an idle follower never leaves the
  ISR and a lagging one still does after ``replica.lag.time.max.ms``; a follower whose fetches stop
  (its broker down, its connection gone) stops the session's clock with them.

Sessions are per connection, not in the consumers' ``FetchSessionCache``: one session per
follower connection (a fetcher keeps one connection per leader; ``num.replica.fetchers`` gives a
follower that many), created by the connection's full fetch and closed with it, so tenants'
consumer sessions can neither evict a replica's session nor be evicted by one, and a session never
outlives the connection that its pipelined answers (``Partition.follower_read_offset``) depend on.
A follower that reconnects starts a new session with a full fetch. A full fetch with
``session_epoch`` -1 (no session: a follower from before sessions) is served as before, every
partition read and answered.

Single-threaded: called on the event loop only.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable

from shoal.clock import SYSTEM_CLOCK, Clock
from shoal.replica.purgatory import expire

Key = tuple[str, int]


@dataclass
class CachedPartition:
    """What a fetch asks of one partition, kept in its fetch session (a consumer's, in the Fetch
    handler's cache, or a follower's ``ReplicaSession``): Kafka's ``FetchSession.CachedPartition``.
    The replica layer's read path (``shoal.replica.read``) reads by it."""

    fetch_offset: int
    max_bytes: int
    topic_id: uuid.UUID | None
    current_leader_epoch: int = -1  # v9+: the leader epoch the client knows (KIP-320)
    last_fetched_epoch: int = -1  # v12+: the epoch of the last batch a follower has (KIP-595)
    # What the client last saw, so an incremental response can leave unchanged partitions out.
    last_hwm: int = -1
    last_log_start: int = -1
    # a follower's session: the number of the fetch that last named it; an earlier fetch still
    # parked on the session does not read it (its answer would carry a partition the follower
    # did not ask that fetch for)
    since: int = 0


class ReplicaSession:
    """One follower connection's fetch session at the leader. ``partitions`` maps each partition
    to the fetch state the follower last named (``fetch_offset``, ``max_bytes``, epochs: a
    ``CachedPartition``); ``dirty`` (an ordered set) holds those that changed since the
    follower was last told, ``last_fetch_ms`` when its latest fetch arrived (the ISR clock of its
    caught-up idle partitions)."""

    __slots__ = ("session_id", "epoch", "seq", "replica_id", "partitions", "dirty", "last_fetch_ms", "_waiters",
                 "closed")

    def __init__(self, replica_id: int) -> None:
        self.session_id = secrets.randbits(31) or 1
        self.epoch = 1  # the epoch the next incremental fetch must carry
        self.seq = 0  # fetches in the session so far (never wraps, unlike the epoch)
        self.replica_id = replica_id
        self.partitions: dict[Key, CachedPartition] = {}
        self.dirty: dict[Key, None] = {}
        self.last_fetch_ms = -1
        self._waiters: list[asyncio.Future[Any]] = []
        self.closed = False

    def __repr__(self) -> str:
        return (f"ReplicaSession(id={self.session_id}, replica={self.replica_id}, partitions={len(self.partitions)}, "
                f"dirty={len(self.dirty)})")

    def next_epoch(self) -> None:
        self.epoch = self.epoch + 1 if self.epoch < 0x7FFFFFFF else 1

    def changed(self, key: Key, wake: bool) -> None:
        """``key`` progressed at the leader: tell the follower at its next answer, and answer a
        parked fetch now when ``wake`` (there is something to fetch)."""
        self.dirty[key] = None
        if wake and self._waiters:
            self.wake()

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, timeout: float, clock: Clock = SYSTEM_CLOCK) -> bool:
        """Park until a partition of the session has something to fetch (:meth:`changed` with
        ``wake``) or ``timeout`` s of ``clock`` pass; True when woken."""
        if timeout <= 0 or self.closed:
            return False
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        timer = clock.call_later(timeout, expire, fut)
        try:
            await fut
        finally:
            timer.cancel()
            if not fut.done():
                fut.cancel()
            if fut in self._waiters:
                self._waiters.remove(fut)
        return fut.result() is None

    def take_dirty(self) -> list[Key]:
        """The dirty partitions of the session, no longer dirty (a change from now on marks
        them again); the caller puts back those still to be told (:meth:`keep_dirty`)."""
        dirty, self.dirty = self.dirty, {}
        partitions = self.partitions
        return [k for k in dirty if k in partitions]

    def keep_dirty(self, key: Key) -> None:
        self.dirty[key] = None


class SessionIndex:
    """Which replica sessions hold each partition (key -> sessions, an ordered set), so that a
    partition's progress reaches only the sessions that fetch it. Owned by the replica manager;
    ``forget`` is called for each partition leaving a session (with the session) so the leader's
    follower state stops using the session's clock (``Partition.forget_session``)."""

    def __init__(self, forget: Callable[[ReplicaSession, Key], None]) -> None:
        self._holders: dict[Hashable, dict[ReplicaSession, None]] = {}
        self._forget = forget

    def add(self, session: ReplicaSession, keys: Iterable[Key]) -> None:
        holders = self._holders
        for k in keys:
            s = holders.get(k)
            if s is None:
                s = holders[k] = {}
            s[session] = None

    def remove(self, session: ReplicaSession, keys: Iterable[Key]) -> None:
        holders = self._holders
        for k in keys:
            s = holders.get(k)
            if s is not None:
                s.pop(session, None)
                if not s:
                    del holders[k]
            self._forget(session, k)

    def close(self, session: ReplicaSession) -> None:
        """The session's connection closed: it holds nothing any more."""
        if session.closed:
            return
        session.closed = True
        self.remove(session, list(session.partitions))
        session.partitions = {}
        session.dirty = {}
        session.wake()  # a fetch still parked on it answers now

    def changed(self, key: Key, wake: bool) -> None:
        s = self._holders.get(key)
        if s:
            for session in s:
                session.changed(key, wake)

    def holders(self, key: Key) -> int:
        """How many sessions hold ``key`` (tests, metrics)."""
        return len(self._holders.get(key, ()))

    def __len__(self) -> int:
        return len({s for holders in self._holders.values() for s in holders})
