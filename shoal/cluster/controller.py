"""The controller: one broker of an etcd cluster, elected through etcd, that moves leadership.

**Election.** The key ``<prefix>/controller`` holds the controller's node id, under the broker's
registration lease (the broker's etcd session, ``shoal.etcd.session``). Every broker reads it every ``POLL_S`` and,
when it is absent, tries the transaction ``If(create_revision(key) == 0) Then(put key = node id,
lease = my lease) Else(get key)`` (the read first: the transaction is an etcd write whichever
branch it takes): while the key exists nothing changes and the broker learns who holds it; when it
goes (the controller stopped, and its lease was revoked; or it died and its lease expired, one
``broker.session.timeout.ms`` later) the first broker to try takes it. The key's creation revision
is the **controller epoch**: it changes with every election, and only the holder knows it as its
own. ``controller_id`` (what Metadata and DescribeCluster report) is the last holder seen.

**Fence.** Every change the controller writes is committed with the extra compare
``create_revision(key) == my epoch`` (``EtcdSession.fence`` given to ``EtcdBackend.fence``, only
inside ``fenced()``): a
controller that lost the key (a long pause, a partition from etcd) and has not noticed yet cannot
write; its commit fails inside etcd and answers NOT_CONTROLLER. Changes made by admin requests on
any broker are not controller changes and are not fenced (they are compare-and-swapped against
the metadata epoch, ``docs/metadata.md``).

**Leadership on a broker's death** (``elect``, ``leadership_change``): when a partition's leader is
not registered (its lease went), the controller makes the first replica (in replica order) that is
alive and in the ISR the leader and drops the dead from the ISR, bumping ``leader_epoch``: a clean
election only. A dead follower leaves the ISR of a partition whose leader lives, too. When no ISR member is alive the leader becomes -1 (offline) and the ISR stays as it
was, so that only a member of it may lead again; when one of them comes back, it leads again.
Followers, ISR shrink and expand and truncation are the replica layer's (``shoal.replica``).

A newly elected controller gives the brokers it has never seen registered one session
(``broker.session.timeout.ms``) to register before it treats them as dead: at a whole cluster's
start the first broker up would otherwise take leadership from the others' partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import json
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

from shoal.metadata import BrokerInfo, MetadataError, MetadataImage, PartitionInfo, TopicInfo
from shoal.metadata.change import Change, Result, unchanged
from shoal.metadata.partition_change import PartitionChange
from shoal.metadata.rules import topics as topic_rules
from shoal.placement.promotion import LEADER_IS_OBSERVER, promotion_policy

if TYPE_CHECKING:
    from shoal.cluster.balancer.executor import Balancer
    from shoal.net import ClientSecurity
    from shoal.metadata.etcd import EtcdMetadataStore
    from shoal.metadata.store import DecidingStore

log = logging.getLogger(__name__)

BALANCER_STATUS_REFRESH_S = 5.0  # a published balancer status's "down for" seconds are this fresh at least


class ReplicationStopper(Protocol):
    async def stop_replication(self) -> None:
        """Stop proposing ISR changes (a batch in flight cancelled) and stop every replica fetcher."""

POLL_S = 0.5
PROBE_STRIKES = 2  # refused connections in a row before a registered broker counts as dead
PROBE_TIMEOUT_S = 1.0
# A held connection (``Controller._hold``) sends ApiVersions this often, well inside Kafka's
# ``connections.max.idle.ms`` (10 min), so the broker at the other end does not close it as idle.
HOLD_KEEPALIVE_S = 30.0
HOLD_TIMEOUT_S = 5.0  # for the held connection's login and each keepalive's answer
PROBE_GRACE_S = 5.0  # after a broker (re)registers: it may not accept connections yet
_fencing: contextvars.ContextVar[bool] = contextvars.ContextVar("shoal_controller_fencing", default=False)


# -- pure decisions -------------------------------------------------------------------------------


def elect(p: PartitionInfo, alive: set[int], unclean: bool = False,
          observer_may_lead: bool = False) -> tuple[int, tuple[int, ...]] | None:
    """The (leader, ISR) partition ``p`` should have with ``alive`` brokers, or None when it
    keeps what it has. Clean election: the leader is an alive ISR member (sync replicas first,
    then an observer promoted into the ISR: it has every acknowledged record), else -1 (offline:
    no acknowledged write is lost, the partition waits for an ISR member). ``unclean`` (the
    topic's ``unclean.leader.election.enable``, or ElectLeaders UNCLEAN): with no ISR member
    alive, the first alive sync replica leads alone, and what it lacks is lost; an observer
    outside the ISR leads only when no sync replica is alive and ``observer_may_lead`` (the
    topic's ``observerPromotionPolicy`` is ``leader-is-observer``: it then promotes the other
    caught-up observers)."""
    if p.leader >= 0 and p.leader in alive:
        # the leader lives: the dead leave the ISR at once (Kafka's controller does this when it
        # fences a broker), rather than after replica.lag.time.max.ms of acks=all waiting
        if all(r in alive for r in p.isr):
            return None
        return p.leader, tuple(r for r in p.isr if r in alive)
    alive_isr = tuple(r for r in p.isr if r in alive)
    if not alive_isr:
        if unclean:
            out_of_sync = next((r for r in p.sync_replicas if r in alive), None)
            if out_of_sync is None and observer_may_lead:
                out_of_sync = next((r for r in p.observers if r in alive), None)
            if out_of_sync is not None:
                return out_of_sync, (out_of_sync,)
        return None if p.leader == -1 else (-1, p.isr)
    leader = next((r for r in p.replicas if r in alive_isr), alive_isr[0])
    return leader, alive_isr


def _observer_may_lead(topic: Any) -> bool:
    """An unclean election may pick an observer of this topic (``leader-is-observer``)."""
    return promotion_policy(topic.configs.get("replica.placement") or "") == LEADER_IS_OBSERVER


def leadership_change(image: MetadataImage, alive: set[int],
                      unclean: Callable[[str], bool] = lambda _topic: False) -> Result[int]:
    """The change moving every partition whose leader is not ``alive`` (``elect``; ``unclean``
    says per topic whether it allows an unclean election); its response is the number of
    partitions changed."""
    topics: dict[str, TopicInfo] = {}
    for name, topic in image.topics.items():
        parts = list(topic.partitions)
        moved = False
        observer_may_lead = _observer_may_lead(topic)
        for i, p in enumerate(parts):
            chosen = elect(p, alive, unclean(name) if p.leader not in alive else False, observer_may_lead)
            if chosen is None:
                continue
            leader, isr = chosen
            parts[i] = PartitionChange(p).leader(leader).isr(isr).build()
            moved = True
        if moved:
            topics[name] = dataclasses.replace(topic, partitions=tuple(parts))
    if not topics:
        return unchanged(0)
    n = sum(1 for name in topics for a, b in zip(image.topics[name].partitions, topics[name].partitions) if a != b)
    return Result(Change(topics=dict(topics)), n)


PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types


def election_change(
    image: MetadataImage, election_type: int, wanted: list[tuple[str, int]] | None,
) -> Result[dict[tuple[str, int], tuple[str, str | None]]]:
    """ElectLeaders (KIP-460): the change electing leaders of ``wanted`` partitions (None: every
    partition), and per partition ``(error code name, message)``, as Kafka's controller answers:

    - PREFERRED: the first replica leads when it is alive and in the ISR (ELECTION_NOT_NEEDED when
      it leads already, PREFERRED_LEADER_NOT_AVAILABLE otherwise);
    - UNCLEAN: only a partition without a live leader gets one: an alive ISR member, else the
      first alive replica (ELECTION_NOT_NEEDED when the leader lives; ELIGIBLE_LEADERS_NOT_AVAILABLE
      when no replica is alive).
    Unknown partitions are UNKNOWN_TOPIC_OR_PARTITION."""
    alive = set(image.brokers)
    results: dict[tuple[str, int], tuple[str, str | None]] = {}
    topics: dict[str, Any] = {}
    if wanted is None:
        wanted = [(n, p.partition) for n, t in image.topics.items() for p in t.partitions]
    for name, index in wanted:
        topic = topics.get(name) or image.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            results[(name, index)] = ("UNKNOWN_TOPIC_OR_PARTITION", "The partition does not exist.")
            continue
        p = topic.partitions[index]
        if election_type == PREFERRED:
            preferred = p.replicas[0] if p.replicas else -1
            if p.leader == preferred:
                results[(name, index)] = ("ELECTION_NOT_NEEDED", "Leader election not needed for topic partition.")
                continue
            if preferred not in alive or preferred not in p.isr:
                results[(name, index)] = ("PREFERRED_LEADER_NOT_AVAILABLE",
                                          f"Failed to elect leader for partition {name}-{index} under strategy "
                                          "PreferredReplicaPartitionLeaderElectionStrategy")
                continue
            leader, isr = preferred, p.isr
        else:
            if p.leader >= 0 and p.leader in alive:
                results[(name, index)] = ("ELECTION_NOT_NEEDED", "Leader election not needed for topic partition.")
                continue
            chosen = elect(p, alive, unclean=True, observer_may_lead=_observer_may_lead(topic))
            if chosen is None or chosen[0] < 0:
                results[(name, index)] = ("ELIGIBLE_LEADERS_NOT_AVAILABLE",
                                          f"Failed to elect leader for partition {name}-{index} under strategy "
                                          "UncleanPartitionLeaderElectionStrategy")
                continue
            leader, isr = chosen
        parts = list(topic.partitions)
        parts[index] = PartitionChange(p).leader(leader).isr(isr).build()
        topics[name] = dataclasses.replace(topic, partitions=tuple(parts))
        results[(name, index)] = ("NONE", None)
    return Result(Change(topics=topics) if topics else None, results)


def preferred_rebalance(image: MetadataImage, imbalance_pct: int) -> list[tuple[str, int]]:
    """``auto.leader.rebalance.enable``: the partitions to hand back to their preferred replica,
    for every broker whose share of not-preferred leaderships among the partitions it is
    preferred for exceeds ``leader.imbalance.per.broker.percentage`` (Kafka's
    ``checkAndTriggerAutoLeaderRebalance``); only where the preferred replica is alive and in sync."""
    preferred_of: dict[int, list[tuple[str, int, bool]]] = {}
    for name, topic in image.topics.items():
        for p in topic.partitions:
            if p.replicas:
                preferred_of.setdefault(p.replicas[0], []).append(
                    (name, p.partition, p.leader != p.replicas[0] and p.replicas[0] in p.isr))
    out = []
    for node, parts in preferred_of.items():
        if node not in image.brokers:
            continue
        movable = [(n, i) for n, i, off in parts if off]
        if movable and len(movable) * 100 > imbalance_pct * len(parts):
            out.extend(movable)
    return out


def shutdown_change(image: MetadataImage, node: int) -> Result[int]:
    """Controlled shutdown of ``node`` (Kafka's ``enterControlledShutdown``): every partition it
    leads moves to the first other live ISR member in replica order (a new leader epoch), and it
    leaves every ISR, so that acks=all neither waits for it nor counts it. A partition with no
    other live ISR member keeps it as leader (it goes offline when the broker is gone: clean
    election only). Response: the leaderships moved."""
    alive = set(image.brokers) - {node}
    topics: dict[str, TopicInfo] = {}
    moved_leaders = 0
    for name, topic in image.topics.items():
        parts = list(topic.partitions)
        changed = False
        for i, p in enumerate(parts):
            if node not in p.isr and p.leader != node:
                continue
            others = tuple(r for r in p.isr if r != node and r in alive)
            if p.leader == node:
                if not others:
                    continue
                leader = next((r for r in p.replicas if r in others), others[0])
                parts[i] = PartitionChange(p).leader(leader).isr(others).build()
                moved_leaders += 1
            else:
                parts[i] = PartitionChange(p).isr(tuple(r for r in p.isr if r != node)).build()
            changed = True
        if changed:
            topics[name] = dataclasses.replace(topic, partitions=tuple(parts))
    if not topics:
        return unchanged(0)
    return Result(Change(topics=dict(topics)), moved_leaders)


async def controlled_shutdown(store: DecidingStore, node: int, replication: ReplicationStopper) -> int:
    """Commit ``node``'s ``shutdown_change``; the leaderships moved. Its ISR change queue stops
    first (``IsrChangeQueue.stop``): with thousands of partitions a rejoin's ISR batches hold this
    process's turn at the store for seconds each, and the shutdown's change queued behind them
    (it once timed out after 10 s); Kafka's controller likewise handles a controlled shutdown
    ahead of the shutting-down broker's own AlterPartition requests. Its replica fetchers stop
    too: the change takes it out of every ISR, and a follower still fetching was added back by
    its leaders at once (1,000 partitions at a time), and taken out again by the controller
    when the process went (Kafka's leaders do not add a broker in controlled shutdown, KIP-841).
    ``replication`` is the broker's replica manager (``shoal.replica.ReplicaManager``, a layer
    above this one, seen through the one method used here)."""
    await replication.stop_replication()
    return await store.decide_and_commit(lambda img: shutdown_change(img, node))


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one election transaction saw: ``(holder node id, holder's lease, creation revision)``
    of the key, or None when this broker just created it (at ``revision``)."""

    took: bool
    revision: int = 0
    holder: int = -1
    holder_lease: int = 0


def observe(o: Observation, node_id: int, lease: int) -> tuple[int, int | None]:
    """(controller id, my epoch or None) after an election transaction."""
    if o.took:
        return node_id, o.revision
    if o.holder == node_id and o.holder_lease == lease:  # ours (an earlier answer was lost)
        return node_id, o.revision
    return o.holder, None


def assumed_alive(image: MetadataImage, seen: set[int], in_grace: bool) -> set[int]:
    """The brokers the controller treats as alive: the registered ones, and, during its first
    session, the replicas it has never seen registered (they may still be starting)."""
    alive = set(image.brokers)
    if in_grace:
        for topic in image.topics.values():
            for p in topic.partitions:
                alive.update(r for r in p.replicas if r not in seen)
    return alive


# -- the election loop ----------------------------------------------------------------------------


class Controller:
    """One broker's part in the election, and the controller's work while it holds the key."""

    def __init__(self, store: "EtcdMetadataStore", node_id: int, session_timeout_ms: int,
                 monotonic: Callable[[], float] = time.monotonic,
                 unclean: Callable[[MetadataImage, str], bool] = lambda _image, _topic: False,
                 rebalance: Callable[[], tuple[bool, float, int]] = lambda: (False, 300.0, 10),
                 inter_broker: "Callable[[BrokerInfo], tuple[tuple[str, int], ClientSecurity]] | None" = None,
                 balancer: "Balancer | None" = None,
                 ) -> None:
        self.store = store
        self.backend = store.backend
        self.node_id = node_id
        self.key = self.backend.key("controller")
        self.controller_id = -1
        self.epoch: int | None = None  # the controller epoch while this broker holds the key
        self._monotonic = monotonic
        self._grace_until = monotonic() + session_timeout_ms / 1000.0
        self._seen: set[int] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_error = 0.0
        self._checked: tuple[Any, ...] | None = None  # what maintain() last found nothing to do on
        self._reassignments_checked = -1  # the image epoch complete_reassignments() found none on
        # fast death detection: registered brokers whose port refused the controller's probes
        self._strikes: dict[int, int] = {}
        self.refused: set[int] = set()
        # brokers whose held connection is open and answered its login: their process serves.
        # A refused broker is alive again when it serves or registers anew, not when its port
        # merely accepts (a restarted process accepts while it waits for its old lease)
        self._serving: set[int] = set()
        self._holder_lease = 0  # the controller key's lease, as the last campaign saw it
        self._holder_revision = 0  # and its creation revision (the holder's controller epoch)
        # when each broker last registered anew: a starting broker registers before its listeners
        # accept (its port refuses meanwhile), so a refusal does not count for PROBE_GRACE_S after
        # that, unless its port has accepted a probe since (it is up: a refusal now is a death)
        self._registered_at: dict[int, float] = {}
        self._accepted: set[int] = set()
        # an idle connection held open to each broker probed: a process that dies (kill -9, a
        # crash) has its sockets closed by the kernel, so the connection ends at once; the round
        # it wakes then probes the port, and a refusal right after the drop counts as both strikes
        self._watches: dict[int, tuple[tuple[str, int], asyncio.Task[None]]] = {}
        self._dropped: set[int] = set()
        # a broker's inter-broker endpoint and how to log in there (SASL, TLS), for the held
        # connection: it authenticates as a follower's does, or a SASL listener closes it after
        # its authentication timeout. None: the probed port, plaintext (tests)
        self._inter_broker = inter_broker
        self._hold_failed: dict[int, float] = {}  # when a held connection could not open (not retried for a while)
        # ``refused`` as the controller last published it under ``<prefix>/controller/fenced``
        # (``publish_fenced``), and, on the other brokers, as they last read it (``campaign``):
        # every broker's planner leaves those out (``fenced_brokers``)
        self.fenced_key = self.key + b"/fenced"
        self._published: frozenset[int] = frozenset()
        self._fenced_view: frozenset[int] = frozenset()
        self.backend.fence = self._fence
        self._unclean = unclean  # (image, topic) -> unclean.leader.election.enable for it
        # () -> (auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds,
        #        leader.imbalance.per.broker.percentage)
        self._rebalance = rebalance
        self._next_rebalance = monotonic() + rebalance()[1]
        # the balancer (issue 27): planned and carried out here while this broker is the
        # controller; its status goes to ``balancer_key`` for every broker's admin API
        self.balancer = balancer
        self.balancer_key = self.key + b"/balancer"
        self._balancer_published: tuple[bytes, bytes, float] = (b"", b"", 0.0)  # raw, steady, when

    @property
    def is_controller(self) -> bool:
        return self.epoch is not None

    @property
    def fenced_brokers(self) -> frozenset[int]:
        """Registered brokers the controller treats as gone (a killed broker stays registered
        until its lease expires; its port refusing made the controller move its leaderships
        already): new replicas are not placed there (``shoal.cluster.planner.live_brokers``), as
        KRaft's controller places them on unfenced brokers only. On the controller its own
        ``refused``; on the others what the controller published, read at each campaign (half a
        second at most behind it), and the dead controller they found themselves."""
        if self.is_controller:
            return frozenset(self.refused)
        return self._fenced_view | self.refused

    def start(self) -> None:
        self._seen.update(self.store.image.brokers)
        self.store.subscribe(self._on_metadata)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        # Cancelled until it ends: Python 3.11's wait_for (the round's wait for a wake-up) drops a
        # cancellation that lands as its wait completes, and the loop would go on (seen as a broker
        # stopping for ever "waiting for the controller" when it was elected as it stopped).
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
        if task is not None:
            with contextlib.suppress(BaseException):
                task.result()
        self._unwatch(set(self._watches))
        if self.balancer is not None and self.balancer.expansion is not None:
            await self.balancer.expansion.stop()  # a hook still running goes on, in its own session
        self.epoch = None

    # -- liveness: a connection held open to each probed broker -----------------------------

    def _watch(self, node: int, info: "BrokerInfo") -> None:
        """Hold a connection to ``node``'s inter-broker endpoint (once its port accepted a probe):
        when it ends (the process died and the kernel closed its sockets) the election loop is
        woken and the next probe of its port decides."""
        endpoint, security = (info.host, info.port), None
        if self._inter_broker is not None:
            try:
                endpoint, security = self._inter_broker(info)
            except Exception:  # a setting that start-up checked: the probes decide
                return
        held = self._watches.get(node)
        if held is not None and held[0] == endpoint and not held[1].done():
            return
        if self._monotonic() - self._hold_failed.get(node, float("-inf")) < HOLD_KEEPALIVE_S:
            return  # refused its login (or its listener): not every half second
        if held is not None:
            held[1].cancel()
        task = asyncio.get_running_loop().create_task(self._hold(node, *endpoint, security))
        self._watches[node] = (endpoint, task)

    async def _hold(self, node: int, host: str, port: int, security: "ClientSecurity | None") -> None:
        """An authenticated connection that sends nothing but an ApiVersions every
        ``HOLD_KEEPALIVE_S``; its end (EOF, a reset) is the news. A keepalive that times out (a
        paused broker) is not: its lease decides that."""
        from shoal.net import API_VERSIONS, Connection, ConnectionLost, KafkaError
        from shoal.net.requests import api_versions

        conn = Connection(host, port, f"shoal-controller-{self.node_id}", HOLD_TIMEOUT_S, security)
        try:
            try:
                await conn.open()
            except (KafkaError, OSError, asyncio.TimeoutError) as e:
                if isinstance(e, KafkaError) and e.code_name == "REQUEST_TIMED_OUT":
                    # no answer yet: a restarted broker accepts before it serves (it waits for its
                    # old lease to expire); the next round tries again
                    log.debug("broker %d: broker %d at %s:%d did not answer yet: %s", self.node_id, node, host, port, e)
                    return
                if isinstance(e, KafkaError) and not isinstance(e, ConnectionLost):
                    self._alive_again(node)  # it answered, if only to refuse the login: it serves
                self._hold_failed[node] = self._monotonic()  # not again for a while (a broker alive)
                if isinstance(e, ConnectionLost) and conn.reading is not None:
                    raise  # connected, then the connection ended before the login was done: news too
                log.info("broker %d: cannot hold a connection to broker %d at %s:%d (%s): its death is seen by "
                         "probes alone, trying again in %.0f s", self.node_id, node, host, port, e, HOLD_KEEPALIVE_S)
                return  # the probes decide
            self._serving.add(node)
            self._alive_again(node)
            read = conn.reading
            assert read is not None
            version = conn.version_for(API_VERSIONS)
            body = api_versions(version, "shoal-controller")
            while True:
                done, _ = await asyncio.wait({read}, timeout=HOLD_KEEPALIVE_S)
                if done:
                    break
                try:
                    await conn.send(API_VERSIONS, version, body)
                except ConnectionLost:
                    break
                except KafkaError:  # no answer in time: paused or slow, not dead
                    continue
        except ConnectionLost:
            pass
        finally:
            self._serving.discard(node)
            await conn.close()
        self._dropped.add(node)
        self._wake.set()

    def _alive_again(self, node: int) -> None:
        """A broker taken for gone (``refused``) serves again under the same registration: its
        port refused and then a live process answered (a false alarm). A restarted process is
        not that: it accepts connections while it waits for its old lease to expire, and answers
        only once registered anew (``_on_registration`` then clears it); taking its acceptance
        for life would make it the leader of the partitions only it can lead (offline since its
        death) while it cannot serve them, and the old lease's expiry a moment later would take
        that away again: two leader epochs and two metadata changes each, for nothing."""
        if node in self.refused:
            self.refused.discard(node)
            log.info("controller: broker %d answers again", node)
            self._wake.set()

    def _unwatch(self, nodes: set[int]) -> None:
        for node in nodes:
            held = self._watches.pop(node, None)
            if held is not None:
                held[1].cancel()
            self._dropped.discard(node)
            self._hold_failed.pop(node, None)

    def _on_metadata(self, old: MetadataImage, new: MetadataImage) -> None:
        if old.brokers is not new.brokers:
            self._seen.update(new.brokers)
            self._on_registration(old, new)
            self._wake.set()

    @contextlib.contextmanager
    def fenced(self) -> Iterator[None]:
        token = _fencing.set(True)
        try:
            yield
        finally:
            _fencing.reset(token)

    def _fence(self) -> list[Any]:
        if not _fencing.get():
            return []
        return self.backend.session.fence(self.key, self.epoch if self.epoch is not None else -1)

    async def _run(self) -> None:
        while True:
            # cleared before the round, not after: a wake-up during it (a registration change, a
            # dead controller's lease revoked by probe_controller) starts the next round at once
            self._wake.clear()
            try:
                await self.campaign()
                if self.is_controller:
                    await self.probe()
                    await self.publish_fenced()
                    await self.maintain()
                    await self.complete_reassignments()
                    await self.rebalance_leaders()
                    await self.balance()
                else:
                    await self.probe_controller()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # etcd unreachable (the store logs it), a lost race: next round
                now = self._monotonic()
                if now - self._last_error > 5.0:
                    self._last_error = now
                    log.warning("controller election/maintenance failed (retrying): %s", e)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_S)

    async def campaign(self) -> None:
        """One election transaction: take the key if it is free, else learn its holder."""
        session = self.backend.session
        lease = session.lease_id
        c = await session.campaign(self.key, str(self.node_id).encode())
        if c is None or lease is None:
            return
        if c.took:
            o = Observation(True, revision=c.revision)
        elif c.holder is None:
            return  # it went between the compare and the read: next round
        else:
            o = Observation(False, revision=c.holder.create_revision, holder=int(c.holder.value),
                            holder_lease=c.holder.lease)
        was, before = self.epoch, self.controller_id
        self._holder_lease, self._holder_revision = o.holder_lease, o.revision
        self.controller_id, self.epoch = observe(o, self.node_id, lease)
        if self.epoch is not None and was != self.epoch:
            self._grace_until = self._monotonic() + session.ttl_s
            self._published = frozenset()  # what an earlier controller published names its epoch
            log.info("broker %d is the controller (controller epoch %d)", self.node_id, self.epoch)
        elif self.epoch is None and was is not None:
            log.warning("broker %d is no longer the controller (broker %d is)", self.node_id, self.controller_id)
        elif before != self.controller_id:
            log.info("the controller is broker %d", self.controller_id)
        if self.epoch is None:
            await self._read_fenced()

    async def publish_fenced(self) -> None:
        """The controller: write ``refused`` to ``fenced_key`` when it changed (under this
        broker's lease, only while it holds the controller key), for the other brokers' planners."""
        fenced = frozenset(self.refused)
        if fenced == self._published or self.epoch is None:
            return
        value = json.dumps({"epoch": self.epoch, "brokers": sorted(fenced)}).encode()
        if await self.backend.session.put_while_held(self.fenced_key, value, self.key, self.epoch):
            self._published = fenced

    async def _read_fenced(self) -> None:
        """Another broker: what the controller now holding the key published (an earlier
        controller's list, which names another epoch, counts for nothing)."""
        raw = await self.backend.session.get(self.fenced_key)
        view: frozenset[int] = frozenset()
        if raw is not None:
            try:
                d = json.loads(raw)
                if int(d["epoch"]) == self._holder_revision:
                    view = frozenset(int(n) for n in d["brokers"])
            except (ValueError, KeyError, TypeError) as e:
                log.warning("ignoring an undecodable %r: %s", self.fenced_key, e)
        self._fenced_view = view

    async def probe(self) -> None:
        """Connect to every other registered broker's first endpoint: a port that refuses the
        connection twice in a row (``PROBE_STRIKES`` rounds, ``POLL_S`` apart) belongs to a dead
        process (kill -9, a crash: the kernel closed its listener), so the controller treats that
        broker as gone without waiting for its lease (``broker.session.timeout.ms``). A paused or
        partitioned broker does not refuse (its listener still accepts, or the probe times out):
        it goes with its lease. Moving leadership away from a live broker is never unsafe (clean
        election, leader epochs fence it), only churn; a broker that answers again (its held
        connection logs in: the same process, a false alarm), or that registers anew (a restarted
        one), counts as alive again; a port that only accepts does not (``_alive_again``). A
        broker that registered less than ``PROBE_GRACE_S`` ago and has not accepted a probe
        since may still be starting (it registers before its listeners accept): its refusals
        count once it has accepted one, so a broker killed just after it (re)started goes as fast
        as any other."""
        image = self.store.image
        others = {n: b for n, b in image.brokers.items() if n != self.node_id}
        for n in list(self._strikes):
            if n not in others:
                self._strikes.pop(n, None)
                self.refused.discard(n)
        self._accepted &= others.keys()
        self._unwatch({n for n in self._watches if n not in others})

        async def one(node: int, info: "BrokerInfo") -> None:
            host, port = info.host, info.port
            starting = (node not in self._accepted
                        and self._monotonic() - self._registered_at.get(node, float("-inf")) < PROBE_GRACE_S)
            dropped = node in self._dropped
            self._dropped.discard(node)
            try:
                _r, w = await asyncio.wait_for(asyncio.open_connection(host, port), PROBE_TIMEOUT_S)
            except ConnectionRefusedError:
                if starting:
                    return
                # its held connection just ended and its port refuses: both strikes at once
                self._strikes[node] = max(self._strikes.get(node, 0) + 1, PROBE_STRIKES if dropped else 0)
                if self._strikes[node] >= PROBE_STRIKES and node not in self.refused:
                    self.refused.add(node)
                    log.warning("controller: broker %d refuses connections on %s:%d%s: treating it as gone "
                                "before its session expires", node, host, port,
                                " (the connection held to it ended)" if dropped else "")
                return
            except (OSError, asyncio.TimeoutError):
                return  # unreachable or slow: not proof of death; its lease decides
            w.close()
            self._accepted.add(node)
            self._watch(node, info)
            self._strikes.pop(node, None)
            if node in self._serving:
                self._alive_again(node)

        await asyncio.gather(*(one(n, b) for n, b in others.items()))

    async def rebalance_leaders(self) -> None:
        """``auto.leader.rebalance.enable``: every ``leader.imbalance.check.interval.seconds``,
        hand leadership back to preferred replicas on brokers above the imbalance threshold."""
        enabled, interval, pct = self._rebalance()
        now = self._monotonic()
        if now < self._next_rebalance:
            return
        self._next_rebalance = now + interval
        if not enabled:
            return
        wanted = preferred_rebalance(self.store.image, pct)
        if not wanted:
            return
        with self.fenced():
            results = await self.store.decide_and_commit(lambda img: election_change(img, PREFERRED, wanted))
        moved = [f"{n}-{i}" for (n, i), (code, _m) in results.items() if code == "NONE"]
        if moved:
            log.info("controller: %d leadership(s) back to their preferred replica: %s", len(moved),
                     ", ".join(moved[:20]) + (" ..." if len(moved) > 20 else ""))

    async def balance(self) -> None:
        """A round of the balancer (``shoal.cluster.balancer.executor``) over the brokers the
        controller finds alive, and its status published when it changed."""
        if self.balancer is None or self.epoch is None:
            return
        image = self.store.image
        alive = assumed_alive(image, self._seen, self._monotonic() < self._grace_until) - self.refused
        try:
            status = await self.balancer.round(alive, self.epoch)
        except (asyncio.CancelledError, MetadataError):
            raise
        except Exception:  # a bug in a round must not stop the controller's other work
            log.exception("balancer round failed (next round in %.1f s)", POLL_S)
            return
        raw, steady, now = status.to_json(), status.steady_json(), self._monotonic()
        if raw == self._balancer_published[0]:
            return
        if steady == self._balancer_published[1] and now - self._balancer_published[2] < BALANCER_STATUS_REFRESH_S:
            return  # only the seconds a broker has been down moved: not a put every round
        if await self.backend.session.put_while_held(self.balancer_key, raw, self.key, self.epoch):
            self._balancer_published = (raw, steady, now)

    async def balancer_status(self) -> dict[str, object] | None:
        """The status the controller published (any broker; None before the first)."""
        raw = await self.backend.session.get(self.balancer_key)
        if raw is None:
            return None
        try:
            doc = json.loads(raw)
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None

    async def complete_reassignments(self) -> None:
        """KIP-455: every reassignment whose target replicas are all in the ISR ends (replicas =
        target, the removed replicas leave; ``topic_rules.complete_reassignments``), as one
        fenced change, within a ``POLL_S`` of the leader's AlterPartition adding the last one."""
        image = self.store.image
        if image.epoch == self._reassignments_checked:
            return
        if topic_rules.complete_reassignments(image).change is None:
            self._reassignments_checked = image.epoch
            return
        with self.fenced():
            done = await self.store.decide_and_commit(topic_rules.complete_reassignments)
        if done:
            log.info("controller: reassignment of %s complete", ", ".join(f"{n}-{i}" for n, i in done[:20]))

    async def probe_controller(self) -> None:
        """A dead controller (its port refuses, ``probe``'s rule) holds the key until its lease
        expires, and with it every failover it should run. Any broker that sees its port refuse
        twice (or once, right after the connection it holds to it ended) deletes the key, if it is
        still that holder's (same creation revision), and the next campaign elects a live
        controller, which treats the dead one as gone as its own probes would (its registration
        stays until its lease expires, as any dead broker's: clients then move its partitions
        to their new leaders directly; with the broker gone from Metadata too, librdkafka parked
        them for a second). A controller that was alive after all finds the key gone or another's
        at its next campaign; its fenced writes fail meanwhile."""
        holder, lease = self.controller_id, self._holder_lease
        self._unwatch({n for n in self._watches if n != holder})
        if holder < 0 or holder == self.node_id or not lease:
            return
        info = self.store.image.brokers.get(holder)
        if info is None:
            return
        dropped = holder in self._dropped
        self._dropped.discard(holder)
        try:
            _r, w = await asyncio.wait_for(asyncio.open_connection(info.host, info.port), PROBE_TIMEOUT_S)
        except ConnectionRefusedError:
            # its held connection just ended and its port refuses: both strikes at once
            self._strikes[holder] = max(self._strikes.get(holder, 0) + 1, PROBE_STRIKES if dropped else 0)
            if self._strikes[holder] >= PROBE_STRIKES:
                self._strikes.pop(holder, None)
                log.warning("broker %d: the controller, broker %d, refuses connections on %s:%d%s: deleting its "
                            "key so that a live broker takes over now", self.node_id, holder, info.host, info.port,
                            " (the connection held to it ended)" if dropped else "")
                with contextlib.suppress(Exception):  # only that holder's key: not a successor's
                    await self.backend.session.delete_if_created(self.key, self._holder_revision)
                self.refused.add(holder)  # gone already if this broker is elected next
                self._wake.set()
            return
        except (OSError, asyncio.TimeoutError):
            return
        w.close()
        self._watch(holder, info)
        self._strikes.pop(holder, None)

    def _on_registration(self, old: MetadataImage, new: MetadataImage) -> None:
        for n, b in new.brokers.items():
            if old.brokers.get(n) is not b:  # registered anew
                self._registered_at[n] = self._monotonic()
                self._accepted.discard(n)
                self.refused.discard(n)
                self._fenced_view -= {n}  # a restarted broker: placeable again (the controller says so next)
                self._strikes.pop(n, None)

    async def maintain(self) -> None:
        """Move the leadership of partitions whose leader is gone, as one fenced change."""
        image = self.store.image
        self._seen.update(image.brokers)
        in_grace = self._monotonic() < self._grace_until
        state = (self.epoch, image.epoch, image.brokers, in_grace, frozenset(self.refused))
        if state == self._checked:
            return  # nothing it depends on moved since the last look (2 ms per 6,000 partitions)
        alive = assumed_alive(image, self._seen, in_grace) - self.refused
        if leadership_change(image, alive, lambda t: self._unclean(image, t)).change is None:
            self._checked = state
            return
        with self.fenced():
            try:
                n = await self.store.decide_and_commit(
                    lambda img: leadership_change(img, alive, lambda t: self._unclean(img, t)))
            except MetadataError as e:
                if e.code == "NOT_CONTROLLER":
                    log.warning("broker %d lost the controller key before its change: %s", self.node_id, e.message)
                    self.epoch = None
                    return
                raise
        if n:
            gone = sorted({p.leader for t in image.topics.values() for p in t.partitions} - alive - {-1})
            log.info("controller: moved the leadership of %d partition(s) (brokers gone: %s)", n, gone)
