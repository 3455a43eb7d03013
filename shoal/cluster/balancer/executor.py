"""The balancer's executor: the controller's loop that plans and carries out the plans
(Cruise Control's executor, inside the controller).

Every round of the controller (``Controller._run``) calls :meth:`Balancer.round`, which:

1. **Settles throttles** (:func:`settle_throttles`): a partition no longer being reassigned loses
   its ``*.replication.throttled.replicas`` entries (as ``kafka-reassign-partitions --verify``
   removes them), and the replication rates the balancer set on the cluster
   (``leader``/``follower.replication.throttled.rate``) go when no throttled move is left.
2. **Elects preferred leaders** of the partitions whose replica lists it reordered, once their
   new first replica is in the ISR.
3. Every ``shoal.balancer.interval.ms`` (at once after :meth:`Balancer.wake`), unless disabled or
   paused, **plans** (:func:`shoal.cluster.balancer.planner.plan` on
   :func:`shoal.cluster.balancer.inputs.cluster_inputs`), in a worker thread: a round at 10,000
   partitions is a second or two of CPU. A removed broker's leaderships move first (a leadership
   move each, no data), then the plan's changes start, as many as
   ``shoal.balancer.max.concurrent.moves.per.broker`` allows on each broker counting the moves in
   flight (:func:`choose`): replica moves are reassignments (KIP-455, the same that
   AlterPartitionReassignments starts) with their replicas throttled
   (``shoal.balancer.throttle.bytes.per.second``); leadership moves reorder the replicas and
   elect the new first one.
4. **Automatic expansion** (:mod:`shoal.cluster.balancer.expansion`): a sample of the cluster's
   utilization per new set of load reports; the operator's expansion hook run once when it stays
   above the headroom; a shrink recommended when it stays low.
5. **Publishes its status** (:class:`Status`) under ``<prefix>/controller/balancer`` for
   ``shoal cluster balancer status`` on any broker.

Brokers listed in ``shoal.balancer.remove.brokers`` drain; one that holds no replica any more is
*removed* (status ``removed``): it may be shut down, or its id taken off the list to serve again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Collection, Iterable, Mapping, Protocol, Sequence, TypeVar

from shoal.cluster.balancer.expansion import Expansion
from shoal.cluster.balancer.inputs import (
    BalancerSettings,
    LoadSource,
    TopicConfigs,
    broker_state,
    cluster_inputs,
    read_loads,
)
from shoal.cluster.balancer.model import ACTIVE, EXCLUDED, BrokerInfo, PartitionInfo, TopicPartition
from shoal.cluster.balancer.planner import Change as PlanChange
from shoal.cluster.balancer.planner import Plan, plan
from shoal.metadata import MetadataError, MetadataImage, TopicInfo
from shoal.metadata.change import Change, Result, unchanged
from shoal.metadata.rules.topics import cancel_reassignment, start_reassignment

__all__ = ["THROTTLE_RATES", "THROTTLED_REPLICAS", "Balancer", "ImageFacts", "Status", "choose", "leaders_off",
           "settle_throttles", "start_moves", "throttle_plan"]

log = logging.getLogger("shoal.cluster.balancer")

THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
THROTTLED_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


T = TypeVar("T")


class DecidingStore(Protocol):
    @property
    def image(self) -> MetadataImage: ...

    async def decide_and_commit(self, decide: Callable[[MetadataImage], Result[T]]) -> T: ...


# -- throttles ----------------------------------------------------------------------------------


def throttle_plan(current: Mapping[TopicPartition, Sequence[int]], targets: Mapping[TopicPartition, Sequence[int]]
                  ) -> tuple[set[int], dict[str, dict[str, str]]]:
    """Kafka's throttles for a reassignment: the brokers whose rates are set (every current and
    target replica), and per topic ``leader.replication.throttled.replicas`` (the current replicas
    of its moving partitions, as ``partition:broker``) and ``follower.replication.throttled.replicas``
    (their new replicas)."""
    brokers: set[int] = set()
    leader: dict[str, list[str]] = {}
    follower: dict[str, list[str]] = {}
    for (topic, p), target in sorted(targets.items()):
        now = list(current.get((topic, p), []))
        if list(target) == now:
            continue
        brokers.update(now, target)
        leader.setdefault(topic, []).extend(f"{p}:{b}" for b in now)
        follower.setdefault(topic, []).extend(f"{p}:{b}" for b in target if b not in now)
    return brokers, {t: {THROTTLED_REPLICAS[0]: ",".join(leader[t]), THROTTLED_REPLICAS[1]: ",".join(follower.get(t, []))}
                     for t in leader}


def _entries(raw: str | None) -> list[str]:
    return [e.strip() for e in (raw or "").split(",") if e.strip()]


def _partition_of(entry: str) -> int | None:
    head = entry.split(":", 1)[0]
    return int(head) if head.isdigit() else None


def _with_configs(topic: TopicInfo, updates: Mapping[str, str | None]) -> TopicInfo:
    configs = dict(topic.configs)
    for k, v in updates.items():
        if v:
            configs[k] = v
        else:
            configs.pop(k, None)
    return dataclasses.replace(topic, configs=MappingProxyType(configs))


def settle_throttles(image: MetadataImage, rate: int) -> Result[int]:
    """Drop the throttled-replica entries of partitions no longer being reassigned (``*`` stays),
    and set the cluster's replication rates to ``rate`` while a throttled partition is being
    reassigned, removing them (when still ``rate``) once none is. Response: entries dropped."""
    topics: dict[str, TopicInfo | None] = {}
    dropped = 0
    throttled_moving = False
    for name, topic in image.topics.items():
        updates: dict[str, str | None] = {}
        for key in THROTTLED_REPLICAS:
            entries = _entries(topic.configs.get(key))
            keep = []
            for e in entries:
                p = _partition_of(e)
                if p is not None and 0 <= p < len(topic.partitions) and not topic.partitions[p].reassigning:
                    dropped += 1
                    continue
                keep.append(e)
                throttled_moving |= p is not None
            if keep != entries:
                updates[key] = ",".join(keep) or None
        if updates:
            topics[name] = _with_configs(topic, updates)
    configs = dict(image.broker_configs)
    want = str(rate)
    for key in THROTTLE_RATES:
        if throttled_moving and key not in configs:
            configs[key] = want
        elif not throttled_moving and configs.get(key) == want:
            del configs[key]
    broker_configs = configs if configs != dict(image.broker_configs) else None
    if not topics and broker_configs is None:
        return unchanged(0)
    return Result(Change(topics=topics, broker_configs=broker_configs), dropped)


# -- moves --------------------------------------------------------------------------------------


def choose(changes: Iterable[PlanChange], image: MetadataImage, max_per_broker: int) -> list[PlanChange]:
    """The changes to start now: every leadership move, and the replica moves whose brokers (those
    losing or gaining a replica) take part in fewer than ``max_per_broker`` moves, counting the
    reassignments in flight, in the plan's order."""
    busy: Counter[int] = Counter()
    for topic in image.topics.values():
        for p in topic.partitions:
            if p.reassigning:
                busy.update(set(p.adding) | set(p.removing))
    out = []
    for c in changes:
        if c.leadership_only:
            out.append(c)
            continue
        involved = set(c.before) ^ set(c.after)
        if all(busy[b] < max_per_broker for b in involved):
            busy.update(involved)
            out.append(c)
    return out


def cooled(changes: Sequence[PlanChange], led_at: dict[TopicPartition, float], now: float,
           cooldown_s: float) -> list[PlanChange]:
    """``changes`` without the leadership moves of partitions whose leadership the balancer moved
    less than ``cooldown_s`` ago (and ``led_at`` without the entries older than that): under a load
    whose rates move, balancing alone otherwise moves a few leaderships back and forth every round,
    each a preferred election that clients must follow."""
    for tp in [tp for tp, t in led_at.items() if now - t >= cooldown_s]:
        del led_at[tp]
    return [c for c in changes if not (c.leadership_only and c.tp in led_at)]


def leaders_off(image: MetadataImage, brokers: Collection[int], alive: Collection[int]) -> list[PlanChange]:
    """Leadership moves that take the leaderships of ``brokers`` (being removed) to another
    in-sync, alive sync replica: the replicas reordered with it first."""
    out = []
    for name, topic in image.topics.items():
        for p in topic.partitions:
            if p.leader not in brokers or p.reassigning:
                continue
            sync = [r for r in p.replicas if r not in p.observers]
            to = next((r for r in sync if r in p.isr and r in alive and r not in brokers), None)
            if to is None:
                continue
            after = (to,) + tuple(r for r in sync if r != to) + tuple(r for r in p.replicas if r in p.observers)
            out.append(PlanChange((name, p.partition), p.replicas, after, p.observers, 0.0))
    return out


def start_moves(image: MetadataImage, changes: Sequence[PlanChange]) -> Result[list[PlanChange]]:
    """Each change as a reassignment to its replica list (observers kept), one change for all,
    with the throttled replicas of the replica moves added to their topics' configs. A change
    the image no longer allows (a partition gone or reassigned meanwhile, a broker unregistered)
    is skipped. Response: the changes started."""
    work = image
    started: list[PlanChange] = []
    current: dict[TopicPartition, tuple[int, ...]] = {}
    for c in changes:
        name, index = c.tp
        topic = work.topics.get(name)
        if topic is None or index >= len(topic.partitions):
            continue
        p = topic.partitions[index]
        if p.reassigning or tuple(p.replicas) != tuple(c.before):
            continue
        try:
            r = start_reassignment(work, name, index, tuple(c.after), tuple(c.observers))
        except MetadataError as e:
            log.info("balancer: not moving %s-%d to %s: %s", name, index, list(c.after), e.message)
            continue
        if r.change is not None:
            work = r.change.apply(work)
            started.append(c)
            if not c.leadership_only:
                current[c.tp] = tuple(c.before)
    _brokers, per_topic = throttle_plan(current, {c.tp: c.after for c in started if c.tp in current})
    touched = {c.tp[0] for c in started}
    topics: dict[str, TopicInfo | None] = {}
    for name in touched:
        topic = work.topics[name]
        add = per_topic.get(name)
        if add:
            topic = _with_configs(topic, {k: ",".join(_entries(topic.configs.get(k)) + _entries(v))
                                          for k, v in add.items()})
        topics[name] = topic
    if not topics:
        return unchanged([])
    return Result(Change(topics=topics), started)


# -- status -------------------------------------------------------------------------------------


@dataclass
class Status:
    """What ``shoal cluster balancer status`` shows (JSON under ``<prefix>/controller/balancer``)."""

    controller: int
    epoch: int
    state: str = "idle"  # idle | balancing | paused | disabled
    trigger: str = ""
    planned_at_ms: int = 0
    goals: list[tuple[str, float, float]] = field(default_factory=list)  # (goal, before, after)
    plan_replica_moves: int = 0
    plan_leadership_moves: int = 0
    plan_bytes: float = 0.0
    started: int = 0
    in_flight: list[str] = field(default_factory=list)
    in_flight_bytes: float = 0.0
    eta_s: float = 0.0
    removing: dict[str, int] = field(default_factory=dict)  # broker -> replicas left on it
    removed: list[int] = field(default_factory=list)
    down: dict[str, float] = field(default_factory=dict)  # broker -> seconds down
    healing: list[int] = field(default_factory=list)
    unfixable: list[str] = field(default_factory=list)
    note: str = ""
    expansion: dict[str, object] = field(default_factory=dict)  # Expansion.status(): {} when not wired

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":")).encode()

    def steady_json(self) -> bytes:
        """``to_json`` without what only the clock changes (how long each broker has been down):
        the controller publishes a status that differs only there at most every few seconds."""
        return dataclasses.replace(self, down={b: 0.0 for b in self.down}).to_json()


def cancel_stuck(image: MetadataImage, gone: Collection[int]) -> Result[list[TopicPartition]]:
    """Cancel the reassignments whose target names a broker in ``gone`` (down past the healing
    threshold): its replica, added or kept, never joins the ISR, so the move would never end and
    the partition, moving, would never be healed. Response: the partitions cancelled."""
    work = image
    done: list[TopicPartition] = []
    for name, topic in image.topics.items():
        for p in topic.partitions:
            target = [r for r in p.replicas if r not in p.removing and r not in p.observers]
            if p.reassigning and any(r in gone for r in target):
                r = cancel_reassignment(work, name, p.partition)
                if r.change is not None:
                    work = r.change.apply(work)
                    done.append((name, p.partition))
    if not done:
        return unchanged([])
    return Result(Change(topics={n: work.topics[n] for n in {n for n, _ in done}}), done)


@dataclass(frozen=True)
class ImageFacts:
    """What a round reads of one metadata image, scanned once per image (a round comes every half
    second; a scan of 10,000 partitions costs ~3 ms): every broker a replica list names, replicas
    per broker (current or being added), the partitions being reassigned."""

    counts: Counter[int]
    moving: tuple[TopicPartition, ...]

    @classmethod
    def of(cls, image: MetadataImage) -> "ImageFacts":
        counts: Counter[int] = Counter()
        moving = []
        for name, topic in image.topics.items():
            for p in topic.partitions:
                counts.update(p.replicas)
                if p.reassigning:
                    moving.append((name, p.partition))
        return cls(counts, tuple(moving))

    def drain_progress(self, remove: Collection[int]) -> tuple[dict[str, int], list[int]]:
        """Per broker being removed, the replicas still on it; and those with none (removed)."""
        left = self.counts
        return ({str(b): left[b] for b in sorted(remove) if left[b]}, [b for b in sorted(remove) if not left[b]])


def nearly_empty(brokers: Sequence[BrokerInfo], parts: Sequence[PartitionInfo]) -> set[int]:
    """The active brokers holding less than ``NEARLY_EMPTY`` of the mean replicas per active
    broker: what EMPTY_BROKER fills. Not only those holding nothing: a topic created the moment a
    broker joins (or its removal is cancelled) puts a replica or two there before a round sees it."""
    active = [b.id for b in brokers if b.state == ACTIVE]
    if not active:
        return set()
    count: Counter[int] = Counter(r for p in parts for r in p.replicas)
    mean = sum(count[b] for b in active) / len(active)
    return {b for b in active if count[b] < NEARLY_EMPTY * mean or count[b] == 0}


NEARLY_EMPTY = 0.1


# -- the loop -----------------------------------------------------------------------------------


Elect = Callable[[MetadataImage, list[TopicPartition]], Result[dict[TopicPartition, tuple[str, str | None]]]]


class Balancer:
    """The controller's balancer (see the module doc). Single-threaded: the controller's loop
    calls :meth:`round`; planning runs in a worker thread on immutable inputs."""

    def __init__(self, store: DecidingStore, node_id: int, settings: Callable[[], BalancerSettings],
                 topic_configs: TopicConfigs, elect: Elect,
                 loads: LoadSource | None = None, expansion: Expansion | None = None,
                 monotonic: Callable[[], float] = time.monotonic, wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 ) -> None:
        self.store = store
        self.node_id = node_id
        self._settings = settings
        self._topic_configs = topic_configs
        self._elect_change = elect
        self._loads = loads
        self.expansion = expansion  # automatic expansion (shoal.cluster.balancer.expansion), if wired
        self._monotonic = monotonic
        self._wall_ms = wall_ms
        self.down_since: dict[int, float] = {}
        self.racks: dict[int, str | None] = {}
        self._next_plan = 0.0
        self._elect: dict[TopicPartition, int] = {}  # partitions to elect the first replica of -> tries left
        self._sizes: dict[TopicPartition, float] = {}  # bytes a started replica move copies
        # EMPTY_BROKER: brokers seen empty and usable (joined, or their removal cancelled), filled
        # until a plan moves nothing more onto them
        self.filling: set[int] = set()
        self._led_at: dict[TopicPartition, float] = {}  # when its leadership last moved to balance
        self.last_plan: Plan | None = None
        self.status = Status(node_id, 0)
        self._facts: tuple[MetadataImage, ImageFacts] | None = None
        self._settled: tuple[MetadataImage, int] | None = None  # the image and rate throttles were settled on

    def wake(self) -> None:
        """Plan at the next round (a remove-broker, a resume, a broker that joined)."""
        self._next_plan = 0.0

    def facts(self, image: MetadataImage) -> ImageFacts:
        if self._facts is None or self._facts[0] is not image:
            self._facts = (image, ImageFacts.of(image))
        return self._facts[1]

    def observe(self, image: MetadataImage, alive: Collection[int]) -> None:
        now = self._monotonic()
        for node, info in image.brokers.items():
            if node not in self.racks:
                self.wake()  # a broker joined: fill it
            self.racks[node] = info.rack
        known = set(self.racks) | set(self.facts(image).counts)
        for node in known:
            if node in alive:
                self.down_since.pop(node, None)
            else:
                self.down_since.setdefault(node, now)

    async def round(self, alive: Collection[int], epoch: int) -> Status:
        """One round (see the module doc); the status to publish."""
        settings = self._settings()
        if not settings.enabled:  # nothing at all: not even the throttles of others' moves
            self.status = dataclasses.replace(self.status, controller=self.node_id, epoch=epoch, state="disabled")
            return self.status
        image = self.store.image
        self.observe(image, alive)
        await self._settle(settings)
        await self._elect_preferred()
        now = self._monotonic()
        status = self._status(self.store.image, alive, settings, epoch, now)
        if self.expansion is not None:
            status.expansion = self.expansion.step(self.store.image, len(set(alive) - settings.remove))
        if now >= self._next_plan:
            self._next_plan = now + settings.interval_s
            if not settings.paused:
                await self._plan_and_start(alive, settings, status)
        return status

    async def _settle(self, settings: BalancerSettings) -> None:
        """``settle_throttles``, when the image or the rate changed since it last ran."""
        image = self.store.image
        if self._settled is not None and self._settled[0] is image and self._settled[1] == settings.throttle:
            return
        await self.store.decide_and_commit(lambda img: settle_throttles(img, settings.throttle))
        self._settled = (self.store.image, settings.throttle)

    def _status(self, image: MetadataImage, alive: Collection[int], settings: BalancerSettings, epoch: int,
                now: float) -> Status:
        st = dataclasses.replace(self.status, controller=self.node_id, epoch=epoch)
        st.trigger = settings.planner.trigger
        facts = self.facts(image)
        st.removing, st.removed = facts.drain_progress(settings.remove)
        st.down = {str(b): round(now - t, 1) for b, t in sorted(self.down_since.items())}
        threshold = settings.heal_threshold_ms
        st.healing = [b for b, t in sorted(self.down_since.items())
                      if threshold >= 0 and (now - t) * 1000 >= threshold and b not in settings.remove]
        moving = facts.moving
        st.in_flight = [f"{n}-{i}" for n, i in moving]
        st.in_flight_bytes = sum(self._sizes.get(tp, 0.0) for tp in moving)
        st.eta_s = round(st.in_flight_bytes / settings.throttle, 1) if settings.throttle else 0.0
        st.state = "paused" if settings.paused else "balancing" if moving else "idle"
        still = set(moving)
        self._sizes = {tp: s for tp, s in self._sizes.items() if tp in still}
        self.status = st
        return st

    async def _plan_and_start(self, alive: Collection[int], settings: BalancerSettings, status: Status) -> None:
        now = self._monotonic()
        gone = {n for n in self.down_since if broker_state(n, alive, self.down_since, now, settings) == EXCLUDED}
        if gone:
            cancelled = await self.store.decide_and_commit(lambda img: cancel_stuck(img, gone))
            if cancelled:
                log.warning("balancer: cancelled %d reassignment(s) whose target names a broker gone for good (%s): "
                            "%s; the next plan places them again", len(cancelled), sorted(gone),
                            ", ".join(f"{n}-{i}" for n, i in cancelled[:20]))
        image = self.store.image
        loads = await read_loads(self._loads)
        brokers, parts = cluster_inputs(image, alive, self.down_since, self._monotonic(), self.racks, settings,
                                        self._topic_configs, loads[0], loads[1])
        self.filling |= nearly_empty(brokers, parts)
        self.filling &= {b.id for b in brokers if b.state == ACTIVE}
        result = await asyncio.to_thread(plan, brokers, parts, settings.planner, frozenset(self.filling))
        if result.changes or not result.note:  # a plan dropped as too small leaves them filling
            self.filling &= {b for c in result.changes if not c.leadership_only for b in set(c.after) - set(c.before)}
        self.last_plan = result
        first = leaders_off(image, settings.remove, alive)
        moved = {c.tp for c in first}
        planned = [c for c in result.changes if c.tp not in moved]
        now = self._monotonic()
        if result.after.hard >= result.before.hard:  # a plan that only balances: no leadership ping-pong
            planned = cooled(planned, self._led_at, now, LEADERSHIP_COOLDOWN_INTERVALS * settings.interval_s)
        changes = choose(first + planned, image, settings.max_moves_per_broker)
        status.planned_at_ms = self._wall_ms()
        status.goals = [(g, round(v, 6), round(result.after.of(g), 6)) for g, v in result.before.goals]
        status.plan_replica_moves, status.plan_leadership_moves = result.replica_moves, result.leadership_moves
        status.plan_bytes = result.bytes_to_move
        status.unfixable = list(result.unfixable[:50])
        status.note = result.note
        if not changes:
            return
        started = await self.store.decide_and_commit(lambda img: start_moves(img, changes))
        status.started = len(started)
        for c in started:
            self._elect[c.tp] = ELECT_TRIES
            if c.leadership_only:
                self._led_at[c.tp] = now
            if not c.leadership_only:
                self._sizes[c.tp] = c.bytes
        await self._elect_preferred()  # the reordered partitions' new first replicas lead now
        await self._settle(settings)  # rates on
        if started:
            status.state = "balancing"
            replica = [c for c in started if not c.leadership_only]
            log.info("balancer: started %d replica move(s) (%.1f MB) and %d leadership move(s)%s", len(replica),
                     sum(c.bytes for c in replica) / 1e6, len(started) - len(replica),
                     f"; draining {sorted(settings.remove)}" if settings.remove else "")

    async def _elect_preferred(self) -> None:
        image = self.store.image
        ready = []
        for tp, tries in list(self._elect.items()):
            topic = image.topics.get(tp[0])
            if topic is None or tp[1] >= len(topic.partitions):
                del self._elect[tp]
                continue
            p = topic.partitions[tp[1]]
            if p.reassigning:
                continue
            if p.leader == p.replicas[0]:
                del self._elect[tp]
                continue
            ready.append(tp)
        if not ready:
            return
        results = await self.store.decide_and_commit(lambda img: self._elect_change(img, ready))
        for tp in ready:
            code = results.get(tp, ("",))[0]
            if code in ("NONE", "ELECTION_NOT_NEEDED", "UNKNOWN_TOPIC_OR_PARTITION"):
                self._elect.pop(tp, None)
            else:
                self._elect[tp] -= 1
                if self._elect[tp] <= 0:
                    del self._elect[tp]


ELECT_TRIES = 50
# A partition whose leadership a balancing-only plan moved is not moved again for this many
# planning intervals (removals and heals are not held back)
LEADERSHIP_COOLDOWN_INTERVALS = 10
