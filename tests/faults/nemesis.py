"""Fault schedules and the nemesis that plays them on a ``ProxiedCluster`` (tests/cluster_harness.py)
and its ``EtcdCluster``.

A schedule is a list of :class:`Op`, one fault at a time (each is applied, held, healed, then a
gap): random but drawn from a seed, printed one line each, and replayable — either the same
``Schedule.random(seed, ...)`` call or ``Schedule.parse`` of the printed lines::

    s = Schedule.random(seed=7, duration=30, brokers=[1, 2, 3], clients=["producer", "consumer"])
    print(s)                      # "seed=7 op=0 at=1.52 kind=pause target=leader hold=2.31 mode=-" ...
    assert Schedule.parse(str(s)) == s
    events = Nemesis(cluster, etcd, topic, partitions=6).run(s)   # blocking; heals everything at the end

Kinds (``KINDS``) and targets:

- ``kill``: SIGKILL a broker, restart it after ``hold`` (same port and data dir);
- ``pause``: SIGSTOP a broker, SIGCONT after ``hold`` (a long GC pause);
- ``partition``: cut a broker's links to every other broker (both ways) for ``hold``, mode
  ``stall`` or ``reset`` (linkproxy's modes; new connections refused);
- ``cut-client``: cut one client's links (target ``<client>`` all, or ``<client>->b<n>`` one);
- ``etcd-leader``: SIGKILL the etcd raft leader member, restart it after ``hold``;
- ``slow``: 50-200 ms delay (+ jitter) on a broker's links to the others, for ``hold``;
- ``isolate``: ``partition`` and the broker cut off from every etcd member too (its lease expires
  after ``broker.session.timeout.ms``; needs ``ProxiedCluster(..., etcd=...)``);
- ``elect-preferred``: a PREFERRED ElectLeaders of every partition of the run's topics (the
  workload's and the idle one), as an operator's ``shoal cluster elect-leaders`` or the
  controller's auto rebalance does: leadership moves back to brokers that came back, onto logs
  whose last epochs may be empty (issue 24's follower livelock hid here). Nothing to heal.

Broker targets are roles resolved when the op runs (the event log says which broker it was):
``leader`` (of a partition drawn by the schedule, ``leader:<p>``), ``follower`` (a replica of that
partition that is not its leader; with RF=1, any other broker), ``controller``, ``other`` (not the
controller), ``idle-leader`` (of a partition of the idle topic, which nobody writes:
``idle-leader:<p>``), or ``b<n>``. So a replay draws the same faults on the same roles; which node holds a
role depends on the run. Every op logs wall time at apply and at heal (``Event``).
"""

from __future__ import annotations

import random
import re
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable

KINDS = ("kill", "pause", "partition", "cut-client", "etcd-leader", "slow", "isolate", "elect-preferred")
ROLES = ("leader", "follower", "controller", "other", "idle-leader")


@dataclass(frozen=True, slots=True)
class Op:
    at: float      # seconds after the schedule starts
    kind: str
    target: str
    hold: float    # seconds the fault lasts
    mode: str = "-"

    def line(self, seed: int, i: int) -> str:
        return f"seed={seed} op={i} at={self.at:.2f} kind={self.kind} target={self.target} hold={self.hold:.2f} mode={self.mode}"


@dataclass(frozen=True)
class Schedule:
    seed: int
    ops: tuple[Op, ...]

    @classmethod
    def random(cls, seed: int, duration: float, brokers: list[int], clients: list[str],
               kinds: tuple[str, ...] = KINDS, partitions: int = 1, max_hold: float = 4.0,
               gap: tuple[float, float] = (1.0, 3.0)) -> "Schedule":
        """Ops drawn from ``random.Random(seed)`` until ``duration``: one at a time, each held
        0.5..``max_hold`` s, separated by a gap drawn from ``gap``."""
        rng = random.Random(seed)
        ops, t = [], rng.uniform(*gap)
        while True:
            kind = rng.choice(kinds)
            hold = round(rng.uniform(0.5, max_hold), 2)
            at = round(t, 2)  # as the op keeps it: rounding t up must not carry the op past the end
            if at + hold > duration:
                break
            mode = "-"
            if kind in ("kill", "pause"):
                role = rng.choice(ROLES + ("broker",))
                target = (f"{role}:{rng.randrange(partitions)}" if role in ("leader", "follower", "idle-leader")
                          else f"b{rng.choice(brokers)}" if role == "broker" else role)
            elif kind in ("partition", "slow", "isolate"):
                target = f"b{rng.choice(brokers)}"
                mode = (str(rng.choice((50, 100, 200))) if kind == "slow" else rng.choice(("stall", "reset")))
            elif kind == "cut-client":
                c = rng.choice(clients)
                target = c if rng.random() < 0.5 else f"{c}->b{rng.choice(brokers)}"
                mode = rng.choice(("stall", "reset"))
            elif kind == "elect-preferred":
                target, hold = "all", 0.5
            else:
                target = "etcd"
            ops.append(Op(at, kind, target, hold, mode))
            t += hold + rng.uniform(*gap)
        return cls(seed, tuple(ops))

    def lines(self) -> list[str]:
        """One line per op; an empty schedule is one line with its seed."""
        return [op.line(self.seed, i) for i, op in enumerate(self.ops)] or [f"seed={self.seed} ops=0"]

    def __str__(self) -> str:
        return "\n".join(self.lines())

    @classmethod
    def parse(cls, text: str) -> "Schedule":
        """The schedule of printed lines (``str(schedule)``)."""
        seed, ops = 0, []
        for line in text.splitlines():
            kv = dict(re.findall(r"(\w+)=(\S+)", line))
            if not kv:
                continue
            seed = int(kv["seed"])
            if "kind" in kv:
                ops.append(Op(float(kv["at"]), kv["kind"], kv["target"], float(kv["hold"]),
                              kv.get("mode", "-")))
        return cls(seed, tuple(ops))

    @property
    def duration(self) -> float:
        return max((op.at + op.hold for op in self.ops), default=0.0)


@dataclass
class Event:
    op: Op
    resolved: str
    applied: float   # wall time (time.time())
    healed: float = 0.0
    error: str = ""


@dataclass
class Nemesis:
    """Plays schedules on ``cluster`` (a ProxiedCluster) and ``etcd`` (an EtcdCluster, or None:
    ``etcd-leader`` ops are then skipped and say so). ``log`` gets one line per apply and heal."""

    cluster: Any
    etcd: Any = None
    topic: str = ""
    idle_topic: str = ""  # a topic of the run that nobody writes (``idle-leader``, ``elect-preferred``)
    log: Callable[[str], None] = print
    events: list[Event] = field(default_factory=list)

    # -- roles ------------------------------------------------------------------------------------

    def resolve(self, target: str) -> int:
        live = sorted(b.node_id for b in self.cluster.live)
        if target.startswith("b") and target[1:].isdigit():
            return int(target[1:])
        if target == "controller":
            return self.cluster.controller()
        if target == "other":
            ctrl = self.cluster.controller()
            return next(n for n in live if n != ctrl)
        role, _, p = target.partition(":")
        if role == "idle-leader":
            if not self.idle_topic:
                raise RuntimeError(f"{target}: the run has no idle topic")
            leader = self._leader(self.idle_topic, int(p or 0))
            if leader < 0:
                raise RuntimeError(f"{target}: partition {p} of the idle topic has no leader")
            return leader
        leader = self._leader(self.topic, int(p or 0))
        if role == "leader":
            if leader < 0:
                raise RuntimeError(f"{target}: partition {p} has no leader")
            return leader
        if role == "follower":
            replicas = self._replicas(int(p or 0))
            others = [r for r in replicas if r != leader and r in live] or [n for n in live if n != leader]
            return others[0]
        raise ValueError(f"unknown target {target}")

    def _leader(self, topic: str, partition: int, wait: float = 10.0) -> int:
        """The partition's leader, waiting up to ``wait`` seconds for one: right after a fault
        healed (an isolated broker back, an RF 1 partition's only replica re-registering) it may
        have none for a moment; -1 if it still has none."""
        deadline = time.monotonic() + wait
        while True:
            leader = self.cluster.leader_of(topic, partition)
            if leader >= 0 or time.monotonic() > deadline:
                return leader
            time.sleep(0.2)

    def _replicas(self, partition: int) -> list[int]:
        import asyncio

        from shoal.client import AdminClient

        async def go() -> list[int]:
            async with AdminClient(self.cluster.live[0].bootstrap, timeout=10) as c:
                t = (await c.describe_topics([self.topic]))[self.topic]
                return list(next(p.replicas for p in t.partitions if p.partition == partition))

        return asyncio.run(go())

    # -- ops --------------------------------------------------------------------------------------

    def _client_links(self, target: str) -> list[str]:
        if "->" in target:
            return [target]
        return [f"{target}->b{n}" for n in self.cluster.brokers]

    def apply(self, op: Op) -> tuple[str, Callable[[], None]]:
        """Start the fault; (what it hit, the function that heals it)."""
        c = self.cluster
        if op.kind == "kill":
            n = self.resolve(op.target)
            c.kill(n)
            return f"b{n}", lambda: c.start_one(n)
        if op.kind == "pause":
            n = self.resolve(op.target)
            proc = c[n].proc
            proc.send_signal(signal.SIGSTOP)
            return f"b{n}", lambda: proc.send_signal(signal.SIGCONT)
        if op.kind in ("partition", "slow", "isolate"):
            n = self.resolve(op.target)
            others = set(c.brokers) - {n}
            names = c.broker_links({n}, others)
            if op.kind == "isolate":
                if not c.etcd_links:
                    raise RuntimeError("isolate needs a ProxiedCluster made with etcd=")
                c.partition({n}, others, mode=op.mode)
                c.cut_etcd(n)
                return (f"b{n} from {sorted(others)} and etcd",
                        lambda: ([c.links.heal(x) for x in names], c.etcd_links[n].restore()))
            if op.kind == "partition":
                c.partition({n}, others, mode=op.mode)
                return f"b{n} from {sorted(others)}", lambda: [c.links.heal(x) for x in names]
            for x in names:
                c.links.delay(x, float(op.mode), jitter_ms=float(op.mode) / 4)
            return f"b{n} +{op.mode}ms", lambda: [c.links.delay(x, 0) for x in names]
        if op.kind == "cut-client":
            names = self._client_links(op.target)
            for x in names:
                c.links.cut(x, mode=op.mode)
            return ",".join(names), lambda: [c.links.heal(x) for x in names]
        if op.kind == "elect-preferred":
            moved = self._elect_preferred()
            return f"preferred leaders of {moved} partition(s)", lambda: None
        if op.kind == "etcd-leader":
            if self.etcd is None:
                return "skipped (no etcd handle)", lambda: None
            i = self.etcd.leader()
            self.etcd.kill_member(i)
            return f"etcd m{i}", lambda: self.etcd.start_member(i)
        raise ValueError(f"unknown op kind {op.kind}")

    def _elect_preferred(self) -> int:
        """PREFERRED ElectLeaders for every partition of the run's topics; how many moved
        (ELECTION_NOT_NEEDED and a preferred replica not in the ISR are not errors of the op)."""
        import asyncio

        from shoal.client import AdminClient

        topics = [t for t in (self.topic, self.idle_topic) if t]

        async def go() -> int:
            async with AdminClient(self.cluster.live[0].bootstrap, timeout=30) as c:
                described = await c.describe_topics(topics)
                parts = [(t, p.partition) for t in topics for p in described[t].partitions]
                results = await c.elect_leaders(0, parts)
                return sum(1 for err in results.values() if err is None)

        return asyncio.run(go())

    def run(self, schedule: Schedule, stop: Callable[[], bool] = lambda: False) -> list[Event]:
        """Play ``schedule`` (blocking); every fault healed at the end, whatever happened."""
        t0 = time.monotonic()
        try:
            for i, op in enumerate(schedule.ops):
                wait = t0 + op.at - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if stop():
                    break
                ev = Event(op, "", time.time())
                self.events.append(ev)
                try:
                    ev.resolved, heal = self.apply(op)
                except Exception as e:  # a role no broker holds right now, a cluster mid-restart...
                    ev.error, heal = repr(e), (lambda: None)
                self.log(f"{_wall(ev.applied)} nemesis apply {op.line(schedule.seed, i)} -> {ev.resolved or ev.error}")
                time.sleep(op.hold)
                try:
                    heal()
                except Exception as e:
                    ev.error += f" heal: {e!r}"
                ev.healed = time.time()
                self.log(f"{_wall(ev.healed)} nemesis heal  op={i} {ev.resolved}{' ' + ev.error if ev.error else ''}")
        finally:
            self.heal_everything()
        return self.events

    def heal_everything(self) -> None:
        """Every broker running and not paused, every link healed and undelayed, etcd whole."""
        c = self.cluster
        for b in c.brokers.values():
            if b.proc is not None and b.proc.poll() is None:
                b.proc.send_signal(signal.SIGCONT)
        c.heal()
        for name in c.links.names:
            c.links.delay(name, 0)
        for n, b in c.brokers.items():
            if not b.running:
                c.start_one(n)
        if self.etcd is not None:
            for i, m in enumerate(self.etcd.members):
                if not m.running:
                    self.etcd.start_member(i)

    @property
    def faults(self) -> int:
        return sum(1 for e in self.events if not e.error)


def _wall(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"
