"""A consumer group's lag over the last hour, for the group page's plot.

Kafka keeps no history of a group's lag, so the console samples it: from the first time a user
opens a group's page, every ``interval_s`` (30 s) while that user has a live session and for an
hour after the page was last opened, the group's total lag is read as that user (through one of
its sessions, so what is sampled is what the user may see) and kept for ``window_s`` (an hour).
Histories are per user and group, at most ``max_groups`` groups per user (the least recently
opened forgotten first), in memory: a restarted console starts again.

:func:`plot` turns a history into the coordinates of an SVG polyline (no script: the page draws it
with markup only, which its CSP allows), over the last 5 to 60 minutes, as much as the history holds.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Callable

from shoal.asyncutil import every
from shoal.client import KafkaError
from shoal.console import kafka
from shoal.console.sessions import Sessions

log = logging.getLogger("shoal.console")

Key = tuple[str, str]  # (user, group)


class LagHistory:
    def __init__(self, *, interval_s: float = 30.0, window_s: float = 3600.0, max_groups: int = 20,
                 clock: Callable[[], float] = time.time) -> None:
        self.interval_s = interval_s
        self.window_s = window_s
        self.max_groups = max_groups
        self.clock = clock
        self._samples: dict[Key, deque[tuple[float, int]]] = {}
        self._opened: dict[str, OrderedDict[str, float]] = {}  # user -> group -> when its page was last opened

    def opened(self, user: str, group: str, lag: int | None) -> None:
        """The group's page was opened now and read ``lag`` (recorded as a sample)."""
        groups = self._opened.setdefault(user, OrderedDict())
        groups[group] = self.clock()
        groups.move_to_end(group)
        while len(groups) > self.max_groups:
            old, _ = groups.popitem(last=False)
            self._samples.pop((user, old), None)
        self.record(user, group, lag)

    def record(self, user: str, group: str, lag: int | None) -> None:
        if lag is None:
            return
        now = self.clock()
        samples = self._samples.setdefault((user, group), deque())
        samples.append((now, lag))
        while samples and samples[0][0] < now - self.window_s:
            samples.popleft()

    def samples(self, user: str, group: str) -> list[tuple[float, int]]:
        now = self.clock()
        return [s for s in self._samples.get((user, group), ()) if s[0] >= now - self.window_s]

    def watched(self) -> list[Key]:
        """The (user, group) pairs still sampled: opened within the window."""
        now = self.clock()
        for user in list(self._opened):
            groups = self._opened[user]
            for group in [g for g, t in groups.items() if t < now - self.window_s]:
                del groups[group]
                self._samples.pop((user, group), None)
            if not groups:
                del self._opened[user]
        return [(u, g) for u, groups in self._opened.items() for g in groups]

    async def sample_once(self, sessions: Sessions) -> int:
        """One round: each watched group's lag read through one live session of its user; how
        many were read."""
        read = 0
        for user, group in self.watched():
            session = sessions.any_of(user)
            if session is None:
                continue
            try:
                async with session.lock:
                    detail = await kafka.group_detail(session.client, group)
            except KafkaError as e:  # the broker away, the group gone: try again next round
                log.debug("console: lag of %s for %s not sampled: %s", group, user, e)
                continue
            self.record(user, group, detail.total_lag if detail is not None else None)
            read += 1
        return read

    async def run(self, sessions: Sessions) -> None:
        """Sample every ``interval_s`` until cancelled (a failed round is logged, never fatal)."""
        async def step() -> None:
            await self.sample_once(sessions)

        await every(lambda: self.interval_s, step, log, "console lag sampling")


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
