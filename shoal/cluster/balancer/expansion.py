"""Automatic expansion (issue 27, part 6): when the cluster stays too busy for its brokers, the
controller runs the operator's expansion hook once, and the balancer fills the brokers it brings;
when the load stays low it recommends (never carries out) a shrink.

**Utilization** is the capacity model of ``shoal capacity report`` (docs/metering.md), on the load
reports every broker publishes (:mod:`shoal.cluster.load`). Per broker, the largest of the ratios
it can work out (a capacity of 0 is unknown and its ratio is left out):

* produce: the bytes its led partitions take in, each times its replication factor (every byte a
  leader takes in is written RF times in the cluster), over its disk write capacity
  (``shoal.balancer.capacity.disk.write.bytes.per.second``): the model's "producer capacity =
  disk write / RF";
* consume: the bytes it sends consumers over its read capacity less what it sends followers
  (``...network.out.bytes.per.second`` minus replication out): "consumer capacity = read minus
  replication";
* requests: the share of the time its event loop's thread was busy (one thread serves every
  request: the model's request time over the request threads, 1).

The cluster's **load** at an instant is the sum of its brokers' utilizations, in brokers. Each
new set of reports (one per ``shoal.balancer.load.interval.ms``) is a sample. The hook runs when
the cluster's utilization (load / brokers) stays above ``1 - headroom`` for
``shoal.balancer.expand.after.ms``: samples have been taken for that long and 95% of that window's
are above the line (a short dip does not restart the clock, a short spike does not start it). It
is given the current broker count and the recommended one, ``ceil(p95 load / (1 - headroom))``
over the window (at least the largest replication factor), and runs once: not again until the recommended brokers have registered or
``shoal.balancer.expand.wait.ms`` has passed. New brokers are filled by the balancer (they
register empty: EMPTY_BROKER, or ANY_UNEVEN_LOAD). A **shrink** to the recommended count is
reported when it stays below the current count for ``shoal.balancer.shrink.after.ms``.

:class:`ExpansionWatch` is pure (samples in, a decision out); :class:`Expansion` runs the hook (a
subprocess, never on the controller's round: it may take minutes) and keeps what the status shows.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from shoal.metadata import MetadataImage

if TYPE_CHECKING:
    from shoal.cluster.load import BrokerReport, ClusterLoad

__all__ = ["BrokerUse", "Decision", "Expansion", "ExpansionSettings", "ExpansionWatch", "broker_use",
           "cluster_use", "percentile", "recommended_brokers"]

log = logging.getLogger("shoal.cluster.balancer")

MAX_SAMPLES = 20_000  # a day of samples at the default 10 s interval, with room
OUTPUT_TAIL = 2000  # bytes of the hook's output kept for the status
SUSTAINED = 0.95  # the share of a window's samples above the line that makes it hot


@dataclass(frozen=True)
class ExpansionSettings:
    command: str = ""  # empty: never
    after_ms: int = 600_000
    headroom: float = 0.3
    timeout_ms: int = 300_000
    wait_ms: int = 1_800_000
    shrink_after_ms: int = 86_400_000



# -- the capacity model ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerUse:
    """One broker's ratios (None: its capacity for it is unknown)."""

    produce: float | None
    consume: float | None
    requests: float | None

    @property
    def util(self) -> float | None:
        known = [x for x in (self.produce, self.consume, self.requests) if x is not None]
        return max(known) if known else None


def broker_use(report: "BrokerReport", replication_factor: Callable[[str, int], int]) -> BrokerUse:
    """The capacity model's ratios of one broker's report (see the module doc).
    ``replication_factor(topic, partition)``: its replicas, from the metadata image."""
    cap = report.capacity
    produce = consume = None
    if cap.disk_write > 0:
        written = sum(v.bytes_in * max(1, replication_factor(*tp)) for tp, v in report.led.items())
        produce = written / cap.disk_write
    if cap.network_out > 0:
        consume = report.bytes_out / max(cap.network_out - report.replication_out, 1.0)
    return BrokerUse(produce, consume, report.busy)


def cluster_use(load: "ClusterLoad", image: MetadataImage) -> dict[int, BrokerUse]:
    """Every reporting broker's ratios."""
    def rf(topic: str, partition: int) -> int:
        info = image.topics.get(topic)
        if info is None or not 0 <= partition < len(info.partitions):
            return 1
        return len(info.partitions[partition].replicas)
    return {node: broker_use(r, rf) for node, r in sorted(load.reports.items())}


def percentile(values: Iterable[float], q: float) -> float:
    """The nearest-rank percentile (``q`` in 0..100) of ``values``; 0 for none. (Also
    ``shoal capacity report``'s.)"""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def recommended_brokers(load: float, headroom: float, at_least: int) -> int:
    """The brokers that carry ``load`` (in broker capacities) with ``headroom`` (0..1) to spare:
    ``ceil(load / (1 - headroom))``, at least ``at_least`` (the replication factor) and 1. (Also
    ``shoal capacity report``'s.)"""
    if not 0 <= headroom < 1:
        raise ValueError("headroom must be in [0, 1)")
    return max(at_least, math.ceil(round(load / (1 - headroom), 9)), 1)


# -- the decision (pure) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What a look at the samples found. ``expand_to``: run the hook for that many brokers now;
    ``shrink_to``: the shrink to recommend (None: none)."""

    state: str  # off | watching | hot | expanding | waiting
    brokers: int
    utilization_p95: float  # the mean utilization's p95 over the expansion window
    load_p95: float  # the load's (in brokers)
    recommended: int
    hot_for_ms: int = 0
    expand_to: int | None = None
    shrink_to: int | None = None


@dataclass
class ExpansionWatch:
    """The samples and the hook's last run. :meth:`decide` is a function of them and the time (the one
    thing it changes: a hook run whose brokers have all registered is over)."""

    samples: deque[tuple[int, float, int]] = field(default_factory=deque)  # (ms, load, brokers)
    fired_at_ms: int | None = None
    fired_for: int = 0  # the broker count the hook was asked for

    def observe(self, now_ms: int, utils: Mapping[int, float], brokers: int) -> None:
        """A sample: the utilization of every broker that reported one, of ``brokers`` registered."""
        if self.samples and self.samples[-1][2] != brokers:
            self.samples.clear()  # the cluster changed size: the old load says nothing of the new
        self.samples.append((now_ms, float(sum(utils.values())), brokers))
        while len(self.samples) > MAX_SAMPLES:
            self.samples.popleft()

    def fired(self, now_ms: int, target: int) -> None:
        self.fired_at_ms, self.fired_for = now_ms, target

    def decide(self, now_ms: int, settings: ExpansionSettings, brokers: int, min_brokers: int) -> Decision:
        window = [(t, load, n) for t, load, n in self.samples if t >= now_ms - settings.after_ms]
        loads = [load for _t, load, _n in window]
        load_p95 = percentile(loads, 95)
        util_p95 = percentile((load / max(1, n) for _t, load, n in window), 95)
        recommended = recommended_brokers(load_p95, settings.headroom, min_brokers)
        observed_ms = now_ms - self.samples[0][0] if self.samples else 0
        line = 1.0 - settings.headroom
        above = sum(1 for _t, load, n in window if load / max(1, n) > line)
        hot = bool(window) and above >= SUSTAINED * len(window)
        # how long the mean utilization has been above the line, back from the newest sample
        hot_for = 0
        if hot:
            since = now_ms
            for t, load, n in reversed(self.samples):
                if load / max(1, n) <= line:
                    break
                since = t
            hot_for = now_ms - since
        shrink_to = self._shrink(now_ms, settings, brokers, min_brokers)
        base = Decision("watching", brokers, round(util_p95, 4), round(load_p95, 4), recommended, hot_for,
                        shrink_to=shrink_to)
        if not settings.command:
            return replace(base, state="off")
        if self.fired_at_ms is not None:
            if brokers >= self.fired_for:
                self.fired_at_ms = None  # done: watch the bigger cluster afresh
            elif now_ms - self.fired_at_ms < settings.wait_ms:
                return replace(base, state="waiting")
        if not hot:
            return base
        if observed_ms < settings.after_ms or recommended <= brokers:
            return replace(base, state="hot")
        return replace(base, state="expanding", expand_to=recommended)

    def _shrink(self, now_ms: int, settings: ExpansionSettings, brokers: int, min_brokers: int) -> int | None:
        if not self.samples or now_ms - self.samples[0][0] < settings.shrink_after_ms:
            return None
        window = [load for t, load, _n in self.samples if t >= now_ms - settings.shrink_after_ms]
        fits = recommended_brokers(percentile(window, 95), settings.headroom, min_brokers)
        return fits if fits < brokers else None


# -- the hook and the status ------------------------------------------------------------------------


@dataclass
class HookRun:
    started_ms: int
    current: int
    recommended: int
    exit: int | None = None  # None while it runs; -9 when killed at its timeout
    seconds: float = 0.0
    output: str = ""


class Expansion:
    """The controller's side: a sample per new set of load reports, the hook run in the background.
    ``reports``: the cluster's load as last read (None before any); ``settings``: the current
    settings; ``now_ms``: wall-clock milliseconds."""

    def __init__(self, reports: Callable[[], "ClusterLoad | None"], settings: Callable[[], ExpansionSettings],
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self._reports = reports
        self._settings = settings
        self._now_ms = now_ms
        self.watch = ExpansionWatch()
        self._seen: object = None
        self._rf: tuple[object, int] = (None, 1)  # (image, its largest replication factor)
        self._decided_on: tuple[object, ...] = ()
        self.last: Decision | None = None
        self.hook: HookRun | None = None
        self._task: asyncio.Task[None] | None = None

    def step(self, image: MetadataImage, brokers: int) -> dict[str, object]:
        """Take a sample if the reports are new, decide, start the hook if it is time; the status."""
        settings = self._settings()
        now = self._now_ms()
        load = self._reports()
        if load is not None and load is not self._seen and load.reports:
            self._seen = load
            utils = {b: u for b, use in cluster_use(load, image).items() if (u := use.util) is not None}
            if utils:
                self.watch.observe(now, utils, brokers)
        if self._rf[0] is not image:  # a scan of every partition, once per image (a round is 0.5 s)
            self._rf = (image, max((len(p.replicas) for t in image.topics.values() for p in t.partitions), default=1))
        # decided again on a new sample or a change of the inputs (a day of samples is 8,640 to sort;
        # a round comes every half second, a sample every load interval)
        inputs = (len(self.watch.samples), self.watch.samples[-1][0] if self.watch.samples else 0, brokers,
                  settings, self._rf[1], self.watch.fired_at_ms)
        if self.last is not None and inputs == self._decided_on:
            return self.status()
        self._decided_on = inputs
        decision = self.watch.decide(now, settings, brokers, self._rf[1])
        if decision.expand_to is not None and (self._task is None or self._task.done()):
            self.watch.fired(now, decision.expand_to)
            self.hook = HookRun(now, brokers, decision.expand_to)
            log.warning("balancer: the cluster's p95 utilization is %.0f%% (above %.0f%%) for %.0f s: running the "
                        "expansion hook for %d -> %d brokers", 100 * decision.utilization_p95,
                        100 * (1 - settings.headroom), decision.hot_for_ms / 1000, brokers, decision.expand_to)
            self._task = asyncio.get_running_loop().create_task(self._run(settings, self.hook), name="expand-hook")
        self.last = decision
        return self.status()

    def status(self) -> dict[str, object]:
        d = self.last
        out: dict[str, object] = {}
        if d is not None:
            out = {"state": d.state, "brokers": d.brokers, "utilization_p95": d.utilization_p95,
                   "load_p95": d.load_p95, "recommended": d.recommended, "hot_for_s": round(d.hot_for_ms / 1000),
                   "shrink_to": d.shrink_to}
        if self.hook is not None:
            h = self.hook
            out["hook"] = {"started_ms": h.started_ms, "current": h.current, "recommended": h.recommended,
                           "exit": h.exit, "seconds": h.seconds, "output": h.output}
        return out

    async def _run(self, settings: ExpansionSettings, run: HookRun) -> None:
        t0 = time.monotonic()
        env = {**os.environ, "SHOAL_CURRENT_BROKERS": str(run.current),
               "SHOAL_RECOMMENDED_BROKERS": str(run.recommended)}
        try:
            proc = await asyncio.create_subprocess_exec(
                settings.command, str(run.current), str(run.recommended), env=env,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True)
        except OSError as e:
            run.exit, run.output = 127, f"could not run {settings.command!r}: {e.strerror or e}"
            log.error("balancer: the expansion hook %r could not run: %s", settings.command, e.strerror or e)
            return
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), settings.timeout_ms / 1000.0)
            run.exit = proc.returncode
        except asyncio.TimeoutError:
            proc.kill()
            out, _ = await proc.communicate()
            run.exit = -9
        run.seconds = round(time.monotonic() - t0, 1)
        run.output = out[-OUTPUT_TAIL:].decode(errors="replace") if out else ""
        last = run.output.strip().splitlines()[-1:] or [""]
        if run.exit == 0:
            log.info("balancer: the expansion hook exited 0 after %.1f s (%d -> %d brokers)%s", run.seconds,
                     run.current, run.recommended, f": {last[0][:200]}" if last[0] else "")
        else:
            log.error("balancer: the expansion hook %s after %.1f s (%d -> %d brokers): %s",
                      "was killed at its timeout" if run.exit == -9 else f"exited {run.exit}", run.seconds,
                      run.current, run.recommended, last[0][:200] or "(no output)")

    async def stop(self) -> None:
        from shoal.asyncutil import cancel_and_wait

        task, self._task = self._task, None
        await cancel_and_wait([task])
