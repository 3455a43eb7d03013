"""A consumer group's lag over the last hour, for the group page's plot.

Kafka keeps no history of a group's lag, so the console samples it, every ``interval_s`` (30 s),
and keeps each group's total lag for ``window_s`` (an hour), in memory (a restarted console starts
again). Two samplers fill the history:

- **The cluster sampler** (:class:`ClusterSampler`), when the console has an identity of its own
  that sees the physical cluster: the broker-mounted console uses the broker's inter-broker login
  (``shoal.net.interbroker``), ``shoal console`` the one of ``--sampler-config``. Each round lists
  every group on every broker and reads their committed offsets and the partitions' log ends in a
  few batched requests (``kafka.groups_overview``), up to ``max_groups`` groups. So the plot
  shows the last hour the first time anyone opens a group's page. Histories are keyed by the
  group's physical name (a tenant's groups carry its prefix, ``lkc-3f9a2c_readers``); a user is
  shown the history of the physical group its own view names, and only after its own request for
  the group succeeded (``pages.group_page``): the broker's scoping and ACLs decide what it sees,
  as for every other page.
- **The session sampler** (:class:`SessionSampler`), without such an identity: from the first time
  a user opens a group's page, for an hour after the page was last opened and while that user has
  a live session, the group's lag is read as that user (through one of its sessions), at most
  ``max_groups`` groups per user. The plot then starts from the first visit.

:func:`plot` turns a history into the coordinates of an SVG polyline (no script: the page draws it
with markup only, which its CSP allows), over the last 5 to 60 minutes, as much as the history holds.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Callable, Hashable

from shoal.asyncutil import every
from shoal.client import KafkaError
from shoal.console import kafka
from shoal.console.sessions import Session, Sessions
from shoal.logutil import RateLimitedLog

log = logging.getLogger("shoal.console")


class LagHistory:
    """Samples ``(time, total lag)`` per key, each kept ``window_s``."""

    def __init__(self, *, window_s: float = 3600.0, clock: Callable[[], float] = time.time) -> None:
        self.window_s = window_s
        self.clock = clock
        self._samples: dict[Hashable, deque[tuple[float, int]]] = {}

    def __len__(self) -> int:
        return len(self._samples)

    def record(self, key: Hashable, lag: int | None) -> None:
        if lag is None:
            return
        now = self.clock()
        samples = self._samples.setdefault(key, deque())
        samples.append((now, lag))
        while samples and samples[0][0] < now - self.window_s:
            samples.popleft()

    def samples(self, key: Hashable) -> list[tuple[float, int]]:
        now = self.clock()
        return [s for s in self._samples.get(key, ()) if s[0] >= now - self.window_s]

    def forget(self, key: Hashable) -> None:
        self._samples.pop(key, None)

    def prune(self) -> None:
        """Drop the keys whose newest sample is older than the window (a deleted group)."""
        cutoff = self.clock() - self.window_s
        for key in [k for k, s in self._samples.items() if not s or s[-1][0] < cutoff]:
            del self._samples[key]


def sampler_client(bootstrap: str, security: Any) -> Any:
    """The cluster sampler's client (not connected): an ``AdminClient`` on ``bootstrap`` with
    ``security`` (a ``ClientSecurity``), for ``console_app``'s ``lag_client``."""
    from shoal.client import AdminClient

    return AdminClient(bootstrap, client_id="shoal-console-lag", timeout=15, security=security)


class _Sampler:
    """What both samplers share: the history, its clock and window, the loop."""

    cluster_wide = False

    def __init__(self, *, interval_s: float, window_s: float, max_groups: int, clock: Callable[[], float]) -> None:
        self.interval_s = interval_s
        self.max_groups = max_groups
        self.history = LagHistory(window_s=window_s, clock=clock)

    @property
    def window_s(self) -> float:
        return self.history.window_s

    def clock(self) -> float:
        return self.history.clock()

    async def sample_once(self) -> int:
        raise NotImplementedError

    async def run(self) -> None:
        """Sample every ``interval_s`` until cancelled (a failed round is logged, never fatal)."""
        async def step() -> None:
            await self.sample_once()

        await every(lambda: self.interval_s, step, log, "console lag sampling")

    async def close(self) -> None:
        pass


class SessionSampler(_Sampler):
    """Samples the groups users opened, each as its user (the console has no identity of its own)."""

    def __init__(self, sessions: Sessions, *, interval_s: float = 30.0, window_s: float = 3600.0,
                 max_groups: int = 20, clock: Callable[[], float] = time.time) -> None:
        super().__init__(interval_s=interval_s, window_s=window_s, max_groups=max_groups, clock=clock)
        self.sessions = sessions
        self._opened: dict[str, OrderedDict[str, float]] = {}  # user -> group -> when its page was last opened

    def opened(self, session: Session, group: str, physical: str, lag: int | None) -> list[tuple[float, int]]:
        """The group's page was opened now as ``session``'s user and read ``lag`` (recorded as a
        sample); the group's history for that user."""
        user = session.user
        groups = self._opened.setdefault(user, OrderedDict())
        groups[group] = self.clock()
        groups.move_to_end(group)
        while len(groups) > self.max_groups:
            old, _ = groups.popitem(last=False)
            self.history.forget((user, old))
        self.history.record((user, group), lag)
        return self.history.samples((user, group))

    def watched(self) -> list[tuple[str, str]]:
        """The (user, group) pairs still sampled: opened within the window."""
        cutoff = self.clock() - self.window_s
        for user in list(self._opened):
            groups = self._opened[user]
            for group in [g for g, t in groups.items() if t < cutoff]:
                del groups[group]
                self.history.forget((user, group))
            if not groups:
                del self._opened[user]
        return [(u, g) for u, groups in self._opened.items() for g in groups]

    async def sample_once(self) -> int:
        """One round: each watched group's lag read through one live session of its user; how
        many were read."""
        read = 0
        for user, group in self.watched():
            session = self.sessions.any_of(user)
            if session is None:
                continue
            try:
                async with session.lock:
                    detail = await kafka.group_detail(session.client, group)
            except KafkaError as e:  # the broker away, the group gone: try again next round
                log.debug("console: lag of %s for %s not sampled: %s", group, user, e)
                continue
            self.history.record((user, group), detail.total_lag if detail is not None else None)
            read += 1
        return read


class ClusterSampler(_Sampler):
    """Samples every group of the cluster with the console's own client (see the module's text).

    ``connect``: makes that client (a ``shoal.client.AdminClient`` not yet connected, on a
    listener where its login sees the physical cluster); it is made again after a failed round."""

    cluster_wide = True

    def __init__(self, connect: Callable[[], Any], *, interval_s: float = 30.0, window_s: float = 3600.0,
                 max_groups: int = 10_000, clock: Callable[[], float] = time.time) -> None:
        super().__init__(interval_s=interval_s, window_s=window_s, max_groups=max_groups, clock=clock)
        self.connect = connect
        self._client: Any = None
        self._log = RateLimitedLog(log, interval_s=600.0)
        self.rounds = 0

    def opened(self, session: Session, group: str, physical: str, lag: int | None) -> list[tuple[float, int]]:
        """The group's page was opened and read ``lag`` as the user, who sees the physical group
        ``physical`` as ``group``: that reading is a sample too; the group's history."""
        self.history.record(physical, lag)
        return self.history.samples(physical)

    async def sample_once(self) -> int:
        """One round over every group; how many groups had a lag to record."""
        try:
            if self._client is None:
                self._client = self.connect()
                await self._client.connect()
            listings = await self._client.list_groups()
            if len(listings) > self.max_groups:
                self._log.warning(("lag", "cap"), "console: %d consumer groups; the lag plot samples the first %d "
                                  "(by name)", len(listings), self.max_groups)
                listings = sorted(listings, key=lambda g: g.group_id)[:self.max_groups]
            rows = await kafka.groups_overview(self._client, listings)
        except KafkaError as e:
            # before the first round (the broker starting) one info line; after, a warning
            say = self._log.warning if self.rounds else self._log.info
            say(("lag", "failed"), "console: lag sampling failed (%s); trying again in %g s", e, self.interval_s)
            client, self._client = self._client, None
            if client is not None:
                await client.close()
            return 0
        for row in rows:
            self.history.record(row.group_id, row.lag)
        self.history.prune()
        if self.rounds == 0:
            log.info("console: lag sampler sees %d consumer groups", len(rows))
        self.rounds += 1
        return sum(1 for r in rows if r.lag is not None)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()


@dataclass
class Plot:
    width: int
    height: int
    points: str  # the polyline's "x,y x,y ..."
    top: int  # the lag at the top of the plot
    last: int | None
    samples: int
    span_min: int  # minutes from the left edge to now


SPANS_MIN = (5, 10, 15, 30, 60)


def plot(samples: list[tuple[float, int]], now: float, window_s: float = 3600.0,
         width: int = 720, height: int = 160) -> Plot:
    """SVG coordinates of ``samples`` up to ``now``: x from the left edge (the span: 5, 10, 15,
    30 or 60 minutes ago, the shortest that holds the oldest sample, at most ``window_s``) to the
    right (now), y from the bottom (0) to the top (the largest lag, rounded up to 1, 2 or 5 times
    a power of ten)."""
    oldest = now - min((t for t, _ in samples), default=now)
    span_s = min(window_s, next((m * 60.0 for m in SPANS_MIN if m * 60 >= oldest), window_s))
    peak = max((lag for _, lag in samples), default=0)
    top = _nice(peak)
    coords = []
    for t, lag in samples:
        x = (1 - min(span_s, max(0.0, now - t)) / span_s) * width
        y = height - (max(0, lag) / top) * height
        coords.append(f"{x:.1f},{y:.1f}")
    return Plot(width, height, " ".join(coords), top, samples[-1][1] if samples else None, len(samples),
                max(1, round(span_s / 60)))


def _nice(value: int) -> int:
    """The smallest of 1, 2, 5 x 10^k at or above ``value`` (at least 1)."""
    n = 1
    while True:
        for m in (1, 2, 5):
            if m * n >= value:
                return m * n
        n *= 10
