"""The replica manager: every partition this broker hosts, and the one way to reach them.

Kafka's ``ReplicaManager`` is the model. It follows the metadata image: when a partition is
assigned to this node it opens (or creates) its log and a :class:`~shoal.replica.partition.Partition`
for it, when a topic goes away it deletes its logs, when configs change it re-derives the
partitions' ``LogConfig``, when a topic is renamed (a KIP-37 namespace move) its logs move. So
handlers only change metadata; storage follows, on one node as on many. A change that brings many
new logs of a topic (``CREATE_OFF_LOOP_MIN``) has them made in a worker thread, and their
partitions are hosted once they exist (``_create_off_loop``).

Handlers and the group coordinator reach partitions only through it:

- ``leader(name, pinfo)``: the partition when this broker leads it, else None (the caller answers
  NOT_LEADER_OR_FOLLOWER, see ``shoal.cluster.routing``);
- ``Partition.append_as_leader``: the leader's append, which moves the high watermark;
- ``wait_committed``: acks=all, Kafka's ``DelayedProduce`` (a purgatory keyed by partition that
  completes when the high watermark passes the batch, or times out);
- ``wait_for_data``: Fetch's ``DelayedFetch`` (new data or a moved high watermark wakes a
  consumer's fetch; a follower's only when the log end, the leader or its epoch moved: a moved high
  watermark alone does not answer it, so waking it was a wasted re-read on every acks=all batch);
- ``sessions``: the followers' fetch sessions (``shoal.replica.sessions``): a partition's progress
  marks it in the sessions that hold it, so a follower's fetch reads only what changed.

Single-threaded: called on the event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

from shoal.asyncutil import cancel_and_wait
from shoal.config import BrokerConfig, log_config
from shoal.metadata import MetadataImage, PartitionInfo, TopicInfo, changed_topics, topic_renames
from shoal.placement.promotion import promotion_policy
from shoal.protocol.errors import ErrorCode
from shoal.replica.isr import AlterIsrs, IsrChangeQueue
from shoal.replica.partition import Partition
from shoal.replica.racks import enough_racks
from shoal.replica.purgatory import Purgatory
from shoal.replica.sessions import CachedPartition, ReplicaSession, SessionIndex
from shoal.storage import LogConfig, LogManager, LogView
from shoal.metadata.inheritance import changed_config_prefixes, topic_overrides

if TYPE_CHECKING:
    from shoal.clock import Clock

log = logging.getLogger("shoal.replica")
NAMED = 5  # partitions a summary line names (the rest are counted; each is at DEBUG)


CREATE_OFF_LOOP_MIN = 32  # new logs of one topic in one change made in a worker thread (``_create_off_loop``)


def log_removed(removed: list[str]) -> None:
    """One INFO line for the partitions a change took off this broker (a reassignment, a broker
    drained): a line per partition was thousands of lines for one event, which cost the loop
    time and hid everything else in the log."""
    if removed:
        more = f" and {len(removed) - NAMED} more" if len(removed) > NAMED else ""
        log.info("%d partition(s) no longer replicas here, their logs deleted: %s%s", len(removed),
                 ", ".join(removed[:NAMED]), more)

__all__ = ["ReplicaManager"]


def _partition_keys(names: set[str], old: MetadataImage, new: MetadataImage) -> list[tuple[str, int]]:
    """Every partition of the topics ``names``, in either image."""
    keys: list[tuple[str, int]] = []
    for name in names:
        a, b = old.topics.get(name), new.topics.get(name)
        count = max(len(a.partitions) if a is not None else 0, len(b.partitions) if b is not None else 0)
        keys.extend((name, i) for i in range(count))
    return keys


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        logs: LogManager,
        image: Callable[[], MetadataImage],
        config: Callable[[], BrokerConfig],
        clock: "Clock",
        alter_isrs: "AlterIsrs | None" = None,
    ) -> None:
        self.node_id = node_id
        self.logs = logs
        self._image = image
        self._config = config
        self.clock = clock
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._log_configs: dict[str, LogConfig] = {}
        self._unreconciled: set[str] = set()  # topics whose logs failed to follow a change (retried)
        # topic -> partitions whose logs a worker thread creates (``_create_off_loop``)
        self._creating: dict[str, set[int]] = {}
        self._creators: set[asyncio.Task[None]] = set()
        self._started = False
        self.fetch_waiters = Purgatory(clock)  # keyed by (topic, partition): new data or HWM moved
        self.hwm_waiters = Purgatory(clock)  # keyed by (topic, partition): the high watermark moved
        self.replica_waiters = Purgatory(clock)  # keyed by (topic, partition): log end, leader or epoch moved
        self._replica_seen: dict[tuple[str, int], tuple[int, int, int]] = {}  # (leader, epoch, log end) woken for
        # ISR changes in batches to the metadata store's ``alter_isrs`` (Kafka's AlterPartitionManager
        # and AlterPartition); None: ISRs never change
        self.isr_changes = IsrChangeQueue(node_id, alter_isrs) if alter_isrs is not None else None
        self.sessions = SessionIndex(self._forget_session)  # followers' fetch sessions, by partition
        self._isr_task: asyncio.Task[None] | None = None
        from shoal.replica.fetcher import FetcherManager

        self.fetchers = FetcherManager(self, image, config)  # followers: fetch from leaders
        from shoal.replica.throttle import ReplicationThrottle

        self.throttle = ReplicationThrottle(node_id, config, clock.now_ms)  # reassignment: KIP-73 throttles

    # -- lookup ----------------------------------------------------------------------------

    def image(self) -> MetadataImage:
        """The metadata image as of now."""
        return self._image()

    def config(self) -> BrokerConfig:
        """The broker's configuration as of now (static and dynamic)."""
        return self._config()

    def partition(self, name: str, index: int) -> Partition | None:
        """The hosted partition ``index`` of (physical) topic ``name``, whatever its role."""
        return self._partitions.get((name, index))

    def leader(self, name: str, pinfo: PartitionInfo) -> Partition | None:
        """The partition when this broker leads it (per ``pinfo``, the caller's image); None when
        another broker does, none does, or this leader has no log (yet)."""
        if pinfo.leader != self.node_id or pinfo.leader < 0:
            return None
        p = self._partitions.get((name, pinfo.partition))
        return p if p is not None and p.is_leader else None

    def hosted(self) -> Iterator[Partition]:
        return iter(list(self._partitions.values()))

    def partition_logs(self) -> Sequence[LogView]:
        """Every local log (leaders' and followers'), read-only."""
        return self.logs.logs()

    # -- delayed operations ----------------------------------------------------------------

    def _progress(self, p: Partition, hw_moved: bool) -> None:
        """A partition's high watermark moved (or its role changed: ``hw_moved`` too, so that
        acks=all waiters re-check), or data arrived."""
        key = p.key
        if hw_moved:
            self.hwm_waiters.notify(key)
        self.fetch_waiters.notify(key)
        # followers' fetches: not for a high watermark move alone (the other follower's fetch
        # moving it would wake a fetch that re-reads nothing and waits again)
        state = (p.info.leader, p.info.leader_epoch, p.log.log_end_offset)
        wake = self._replica_seen.get(key) != state
        if wake:
            self._replica_seen[key] = state
            self.replica_waiters.notify(key)
        self.sessions.changed(key, wake)  # told at the sessions' next answer; answered now on ``wake``

    def delete_records(self, part: Partition, offset: int) -> int:
        """DeleteRecords on a led partition (:meth:`Partition.delete_records`); returns the low
        watermark. Its followers' sessions tell them at their next answer (they delete up to it
        too). Raises ``OffsetOutOfRange`` above the high watermark."""
        low = part.delete_records(offset)
        self.sessions.changed(part.key, False)
        return low

    def _forget_session(self, session: ReplicaSession, key: tuple[str, int]) -> None:
        part = self._partitions.get(key)
        if part is not None and part.is_leader:
            part.forget_session(session.replica_id, session)

    async def wait_committed(
        self, waits: list[tuple[str, int, int, int]], timeout: float
    ) -> dict[tuple[str, int], ErrorCode]:
        """acks=all, Kafka's ``DelayedProduce``: wait until each partition's high watermark reaches
        its offset. ``waits`` holds ``(topic, partition, offset, min.insync.replicas)``.

        Returns the partitions that failed, with their error: REQUEST_TIMED_OUT when ``timeout``
        seconds passed first; NOT_LEADER_OR_FOLLOWER when this broker stopped leading in the
        epoch of the append (the new leader may or may not have the batch: the producer retries,
        and idempotence keeps it once); NOT_ENOUGH_REPLICAS_AFTER_APPEND when the high watermark
        got there but the ISR had shrunk below ``min.insync.replicas`` (Kafka's
        ``checkEnoughReplicasReachOffset``) or below ``min.insync.racks`` racks (:meth:`enough_racks`).
        """
        clock = self.clock  # the deadline and the purgatory's timers (a ManualClock's in tests)
        deadline = clock.monotonic() + timeout
        epochs = {}
        for topic, index, _offset, _min_isr in waits:
            p = self._partitions.get((topic, index))
            epochs[(topic, index)] = p.leader_epoch if p is not None and p.is_leader else None
        failed: dict[tuple[str, int], ErrorCode] = {}
        pending = list(waits)

        def settle() -> None:
            still = []
            for w in pending:
                topic, index, offset, min_isr = w
                key = (topic, index)
                p = self._partitions.get(key)
                if p is None or not p.is_leader or p.leader_epoch != epochs[key]:
                    failed[key] = ErrorCode.not_leader_or_follower
                elif p.high_watermark >= offset:
                    if not self.enough_replicas(p, min_isr):
                        failed[key] = ErrorCode.not_enough_replicas_after_append
                else:
                    still.append(w)
            pending[:] = still

        settle()
        while pending:
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                break
            await self.hwm_waiters.wait([(t, i) for t, i, _, _ in pending], remaining)
            settle()
        for t, i, _, _ in pending:
            failed[(t, i)] = ErrorCode.request_timed_out
        return failed

    def enough_replicas(self, part: Partition, min_isr: int) -> bool:
        """The one acks=all rule, before the append (NOT_ENOUGH_REPLICAS) and after it
        (NOT_ENOUGH_REPLICAS_AFTER_APPEND): ``min.insync.replicas`` (:meth:`Partition.enough_isr`)
        and ``min.insync.racks`` (:meth:`enough_racks`)."""
        return part.enough_isr(min_isr) and self.enough_racks(part)

    def enough_racks(self, part: Partition) -> bool:
        """``min.insync.racks`` (``shoal.replica.racks``): the partition's ISR spans at least the
        topic's number of racks (always true at the default, 1). The produce handler refuses acks=all
        with NOT_ENOUGH_REPLICAS when it does not, as for ``min.insync.replicas``."""
        min_racks = int(part.log.config.min_insync_racks)
        if min_racks <= 1:
            return True
        brokers = self._image().brokers
        rack_of = {b: info.rack for b, info in brokers.items()}
        return enough_racks(part.info.isr or (self.node_id,), rack_of, min_racks)

    async def wait_for_data(self, keys: Iterable[tuple[str, int]], timeout: float, replica: bool = False) -> bool:
        """Fetch's purgatory: True when one of ``keys`` got data or a new high watermark; for a
        ``replica`` (a follower's fetch, which reads to the log end) data, or a new leader or epoch."""
        return await (self.replica_waiters if replica else self.fetch_waiters).wait(keys, timeout)

    # -- ISR (leader) ----------------------------------------------------------------------

    def follower_fetched(self, replica_id: int, image: MetadataImage,
                         partitions: Iterable[tuple[tuple[str, int], CachedPartition]],
                         now_ms: int, session: ReplicaSession | None = None) -> None:
        """A follower's fetch (``(key, fetch state)`` with ``fetch_offset``) for the partitions
        this broker leads: their high watermarks may move, the follower may join an ISR. In a
        fetch ``session``, only the partitions named or changed: the others keep the session's
        clock (``Partition.update_follower_fetch``), which moves to ``now_ms`` here, after them."""
        for (name, index), sp in partitions:
            topic = image.topic(name)
            if topic is None or not 0 <= index < len(topic.partitions):
                continue
            part = self.leader(name, topic.partitions[index])
            if part is None:
                continue
            proposed = part.update_follower_fetch(replica_id, sp.fetch_offset, now_ms, session)
            if proposed is not None:
                self._propose_isr(part, proposed, f"replica {replica_id} caught up")
            elif part.info.observers:
                self._maybe_promote(part, topic.configs, now_ms)
        if session is not None:
            session.last_fetch_ms = now_ms

    def shrink_isrs(self) -> None:
        """Drop from their ISRs the followers not caught up for ``replica.lag.time.max.ms``."""
        lag = int(self._config().get("replica.lag.time.max.ms"))
        now = self.clock.now_ms()
        for part in list(self._partitions.values()):
            proposed = part.shrink(now, lag)
            if proposed is not None:
                out = [r for r in part.info.isr if r not in proposed]
                self._propose_isr(part, proposed, f"replicas {out} not caught up for {lag} ms")
            elif part.info.observers and part.is_leader:
                topic = self._image().topic(part.topic)
                if topic is not None:
                    self._maybe_promote(part, topic.configs, now)

    def _maybe_promote(self, part: Partition, configs: Mapping[str, str], now_ms: int) -> None:
        """Automatic observer promotion (``shoal.placement.promotion``): a leader whose topic's placement
        has an ``observerPromotionPolicy`` brings caught-up observers into the ISR, or lets them
        go once the sync replicas are back."""
        policy = promotion_policy(configs.get("replica.placement") or "")
        if policy is None:
            return
        lag = int(self._config().get("replica.lag.time.max.ms"))
        min_isr = int(part.log.config.min_insync_replicas)
        proposed = part.promotion(policy, min_isr, now_ms, lag)
        if proposed is None:
            return
        old = part.info.isr
        joined = [r for r in proposed if r not in old]
        why = (f"observers {joined} promoted ({policy}, min.insync.replicas {min_isr})" if joined else
               f"observers {[r for r in old if r not in proposed]} demoted: the sync replicas are back")
        self._propose_isr(part, proposed, why, min_isr=min_isr)

    def _propose_isr(self, part: Partition, isr: tuple[int, ...], why: str, min_isr: int | None = None) -> None:
        """To the ISR change queue (``shoal.replica.isr``): sent with the other partitions' in
        the next batch; one change at a time per partition."""
        if self.isr_changes is not None and part.pending_isr is None:
            self.isr_changes.submit(part, isr, why, min_isr)

    async def run_isr_checks(self) -> None:
        """Every half ``replica.lag.time.max.ms`` (Kafka's isr-expiration task), shrink ISRs."""
        while True:
            await asyncio.sleep(max(0.05, int(self._config().get("replica.lag.time.max.ms")) / 2000.0))
            try:
                self.shrink_isrs()
            except Exception:
                log.exception("ISR check failed")

    def start_background(self) -> None:
        """ISR checks and follower fetchers (once the broker serves: leaders answer followers)."""
        self._isr_task = asyncio.get_running_loop().create_task(self.run_isr_checks())
        self.fetchers.start()

    async def stop_replication(self) -> None:
        """A controlled shutdown's first step (``shoal.cluster.controller.controlled_shutdown``):
        no more ISR changes proposed (a batch in flight cancelled), no replica fetching."""
        if self.isr_changes is not None:
            await self.isr_changes.stop()
        await self.fetchers.stop()

    async def stop(self) -> None:
        await cancel_and_wait(list(self._creators))
        await self.stop_replication()
        await cancel_and_wait([self._isr_task])

    # -- metrics ---------------------------------------------------------------------------

    def metric_values(self) -> Iterator[tuple[str, str, dict[str, str], float]]:
        """Kafka's ReplicaManager gauges and meters, read at scrape time (``shoal.admin.metrics``):
        (name, help, labels, value)."""
        parts = list(self._partitions.values())
        led = [p for p in parts if p.is_leader]
        # a promoted observer does not make up for a missing sync replica
        under = sum(1 for p in led if sum(1 for r in p.info.isr if r not in p.info.observers) < len(p.info.sync_replicas))
        below_min = sum(1 for p in led if len(p.info.isr) < p.log.config.min_insync_replicas)
        lag = max((p.log_end_offset - max(f.log_end_offset, 0) for p in led for r, f in p.followers.items()
                   if r in p.info.isr), default=0)
        yield "shoal_replica_partitions", "partition replicas this broker hosts (leader or follower)", {}, float(len(parts))
        yield "shoal_replica_leader_partitions", "partitions this broker leads", {}, float(len(led))
        yield ("shoal_replica_under_replicated_partitions",
               "partitions this broker leads whose ISR is smaller than their replicas", {}, float(under))
        yield ("shoal_replica_under_min_isr_partitions",
               "partitions this broker leads whose ISR is below min.insync.replicas (acks=all refused)", {},
               float(below_min))
        q = self.isr_changes
        yield ("shoal_replica_isr_shrinks", "ISR shrinks committed by this broker as leader since start", {},
               float(q.shrinks if q else 0))
        yield ("shoal_replica_isr_expands", "ISR expansions committed by this broker as leader since start", {},
               float(q.expands if q else 0))
        yield ("shoal_replica_isr_batches", "batches of ISR changes this broker sent to the metadata store "
               "since start (each a few etcd transactions at most)", {}, float(q.batches if q else 0))
        yield ("shoal_replica_isr_changes_unsent", "ISR changes waiting for the batch in flight to end", {},
               float(q.unsent if q else 0))
        yield ("shoal_replica_max_follower_lag_messages",
               "the largest number of offsets an in-sync follower of this broker's partitions lacks", {}, float(lag))
        for (leader, index), fetcher in self.fetchers.fetchers.items():
            labels = {"leader": str(leader), "fetcher": str(index)}
            yield ("shoal_replica_fetcher_partitions", "partitions a replica fetcher follows", labels,
                   float(len(fetcher.partitions)))
            yield ("shoal_replica_fetcher_requests", "fetches a replica fetcher got answered since start", labels,
                   float(fetcher.fetches))

    # -- log configs -----------------------------------------------------------------------

    def log_config_for(self, topic: TopicInfo) -> LogConfig:
        cfg = self._log_configs.get(topic.name)
        if cfg is None:
            # tenancy: configs the topic does not set come from its namespaces and tenant (KIP-37)
            overrides = topic_overrides(self._image(), topic.name, topic.configs)
            cfg = log_config(self._config(), overrides)
            self._log_configs[topic.name] = cfg
        return cfg

    def config_for_name(self, topic: str) -> LogConfig:
        """The log config of ``topic`` by name (broker defaults for a topic the image lacks)."""
        info = self._image().topic(topic)
        return self.log_config_for(info) if info is not None else log_config(self._config(), {})

    # -- start-up --------------------------------------------------------------------------

    def load(self) -> None:
        """Open the logs on disk (blocking: run in a worker thread), adopting those renamed while
        the broker was down."""
        self.logs.load(self.config_for_name)
        self._adopt_renamed_logs(self._image())

    def start(self) -> None:
        """Host what the current image assigns to this node (after :meth:`load`)."""
        self.reconcile(None, self._image())
        self._started = True

    # -- following metadata ---------------------------------------------------------------

    def on_metadata(self, old: MetadataImage, new: MetadataImage) -> None:
        names = self.reconcile(old, new)
        # the fetchers follow the partitions of the topics that changed, not every partition: a
        # rejoining broker's thousands of ISR changes each walked them all (a third of its time)
        self.fetchers.sync(None if names is None else _partition_keys(names, old, new))

    def reconcile(self, old: MetadataImage | None, new: MetadataImage) -> set[str] | None:
        """Logs follow the topics: created, deleted, moved (renames) and reconfigured. After a
        change (``old`` given) only the topics it touched are visited, plus those whose inherited
        configs it changed (namespace or tenant defaults, broker configs). Returns the names of
        the topics visited or deleted (None without ``old``: all of them)."""
        old_topics = old.topics if old is not None else {}
        changes: dict[str, tuple[TopicInfo | None, TopicInfo | None]]
        if old is None:
            changes = {name: (None, topic) for name, topic in new.topics.items()}
            recheck: Any = ()
        else:
            changes = changed_topics(old, new)
            if any(a is None or b is None for a, b in changes.values()):
                self._follow_renames(old, new)
            recheck = ()
            if (old.broker_configs is not new.broker_configs and old.broker_configs != new.broker_configs) or (
                old.broker_overrides.get(self.node_id) != new.broker_overrides.get(self.node_id)
            ):
                self._log_configs.clear()
                recheck = new.topics
            elif changed := changed_config_prefixes(old, new):  # tenancy: namespace or tenant defaults
                for name in [n for n in self._log_configs if n.startswith(changed)]:
                    del self._log_configs[name]
                recheck = [n for n in new.topics if n.startswith(changed)]
        for name, (topic, current) in changes.items():
            if topic is None:
                continue
            if (current is None or current.topic_id != topic.topic_id) and topic.topic_id not in new.topics_by_id:
                self._log_configs.pop(name, None)
                for p in topic.partitions:
                    self._partitions.pop((name, p.partition), None)
                    if self.node_id in p.replicas:
                        self.logs.delete_partition(name, p.partition)
        visit = dict.fromkeys(n for n, (_, t) in changes.items() if t is not None)
        visit.update(dict.fromkeys(recheck))
        visit.update(dict.fromkeys(n for n in self._unreconciled if n in new.topics))
        self._unreconciled.clear()
        removed: list[str] = []
        for name in visit:
            topic = new.topics[name]
            prev = old_topics.get(name)
            if prev is not None and prev.configs != topic.configs:
                self._log_configs.pop(name, None)
            try:
                self._reconcile_topic(topic, removed)
            except OSError:  # a disk error: retried by the periodic task, and at the next change
                log.exception("cannot create or reconfigure the logs of %s; will retry", name)
                self._unreconciled.add(name)
        log_removed(removed)
        if old is None:
            # Logs on disk for topics that no longer exist (deleted while we were down).
            for name, index in list(self.logs.partitions()):
                topic = new.topics.get(name)
                if topic is None or index >= len(topic.partitions):
                    self._partitions.pop((name, index), None)
                    self.logs.delete_partition(name, index)
            return None
        return set(changes) | set(visit)

    def _reconcile_topic(self, topic: TopicInfo, removed: list[str]) -> None:
        """This broker's logs of ``topic`` exist, have its current config, and each has its
        ``Partition`` following the partition's current state. The partitions no longer hosted
        here go into ``removed`` (``log_removed`` says so in one line)."""
        cfg = self.log_config_for(topic)
        creating = self._creating.get(topic.name)
        if creating is None and self._started:
            creating = self._create_off_loop(topic, cfg)
        for p in topic.partitions:
            if creating and p.partition in creating:
                continue  # its log is being made in a worker thread: reconciled when it is
            key = (topic.name, p.partition)
            if self.node_id not in p.replicas:
                # reassigned away (KIP-455): stop hosting it and delete the log (StopReplica delete=true)
                if self._partitions.pop(key, None) is not None or self.logs.get(topic.name, p.partition) is not None:
                    self.logs.delete_partition(topic.name, p.partition)
                    log.debug("%s-%d: no longer a replica here (replicas %s): log deleted", topic.name, p.partition,
                              list(p.replicas))
                    removed.append(f"{topic.name}-{p.partition}")
                continue
            plog = self.logs.get(topic.name, p.partition)
            if plog is None:
                plog = self.logs.get_or_create(topic.name, p.partition, cfg)
                self.logs.write_topic_id(topic.name, p.partition, topic.topic_id)
            elif plog.config != cfg:
                plog.update_config(cfg)
            part = self._partitions.get(key)
            if part is None:
                self._partitions[key] = Partition(
                    topic.name, p.partition, self.node_id, plog, p, self._progress, self.clock.now_ms
                )
            elif part.info is not p or part.log is not plog:
                isr, replicas = part.info.isr, part.info.replicas
                part.update(p, plog)
                # a follower that left may rejoin, one a reassignment added may join: read at its
                # session's next fetch
                if (p.isr != isr or p.replicas != replicas) and part.is_leader:
                    self.sessions.changed(key, False)

    def _create_off_loop(self, topic: TopicInfo, cfg: LogConfig) -> set[int] | None:
        """When a change brings at least ``CREATE_OFF_LOOP_MIN`` new logs of ``topic`` to this
        broker (a topic of thousands of partitions: each log is a directory and files, ~1 ms of
        system calls, which held the event loop for seconds), a worker thread makes them and the
        partitions are hosted when it is done (``_created``); the partitions whose logs exist are
        reconciled as ever. Returns the partitions being created (None: none, made here)."""
        missing = {p.partition for p in topic.partitions
                   if self.node_id in p.replicas and self.logs.get(topic.name, p.partition) is None}
        if len(missing) < CREATE_OFF_LOOP_MIN:
            return None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        self._creating[topic.name] = missing
        task = loop.create_task(self._created(topic.name, topic.topic_id, sorted(missing), cfg),
                                name=f"create-logs-{topic.name}")
        self._creators.add(task)
        task.add_done_callback(self._creators.discard)
        return missing

    def _make_logs(self, name: str, topic_id: Any, indexes: list[int], cfg: LogConfig) -> None:
        """In a worker thread: the logs of ``name`` (created empty) with their topic id."""
        for index in indexes:
            self.logs.get_or_create(name, index, cfg)
            self.logs.write_topic_id(name, index, topic_id)

    async def _created(self, name: str, topic_id: Any, indexes: list[int], cfg: LogConfig) -> None:
        """Make the logs off the loop, then host them as the image says now: the topic may have
        been deleted (or deleted and created again) meanwhile, its logs then deleted again."""
        failed = False
        try:
            await asyncio.to_thread(self._make_logs, name, topic_id, indexes, cfg)
        except OSError:
            log.exception("cannot create the logs of %s; will retry", name)
            failed = True
        finally:
            self._creating.pop(name, None)
        topic = self._image().topics.get(name)
        if topic is None or topic.topic_id != topic_id:
            for index in indexes:
                if self.partition(name, index) is None:
                    self.logs.delete_partition(name, index)
        if topic is None:
            return
        if failed:
            self._unreconciled.add(name)
            return
        removed: list[str] = []
        try:
            self._reconcile_topic(topic, removed)
        except OSError:
            log.exception("cannot create or reconfigure the logs of %s; will retry", name)
            self._unreconciled.add(name)
        log_removed(removed)
        self.fetchers.sync([(name, i) for i in range(len(topic.partitions))])

    def retry_unreconciled(self) -> None:
        """Topics whose logs could not be created or reconfigured at their change: try again."""
        if not self._unreconciled:
            return
        image = self._image()
        for name in list(self._unreconciled):
            topic = image.topics.get(name)
            self._unreconciled.discard(name)
            if topic is None:
                continue
            removed: list[str] = []
            try:
                self._reconcile_topic(topic, removed)
                log.info("logs of %s created after an earlier failure", name)
                self.fetchers.sync([(name, i) for i in range(len(topic.partitions))])
            except OSError as e:
                log.warning("cannot create or reconfigure the logs of %s yet: %s", name, e)
                self._unreconciled.add(name)
            log_removed(removed)

    def _follow_renames(self, old: MetadataImage, new: MetadataImage) -> None:
        """A topic whose id stayed but whose name changed (a KIP-37 move): its logs move to the
        directories of the new name, data, offsets and producer state kept."""
        for prev_name, name in topic_renames(old, new).items():
            prev, topic = old.topics[prev_name], new.topics[name]
            self._log_configs.pop(prev.name, None)
            for p in prev.partitions:
                self._partitions.pop((prev.name, p.partition), None)
                if self.node_id not in p.replicas:
                    continue
                try:
                    self.logs.rename_partition(prev.name, topic.name, p.partition)
                except (OSError, ValueError):
                    log.exception("cannot move %s-%d to %s", prev.name, p.partition, topic.name)
            log.info("topic %s (%s) is now %s", prev.name, topic.topic_id, topic.name)

    def _adopt_renamed_logs(self, image: MetadataImage) -> None:
        """At start-up: a partition directory whose topic id (``partition.metadata``) now belongs
        to a topic of another name was renamed while we were down, or just before a crash: move it
        to the current name. Directories from before topic ids were written get theirs."""
        for name, index in self.logs.partitions():
            topic = image.topics.get(name)
            topic_id = self.logs.read_topic_id(name, index)
            if topic is not None and topic_id in (None, topic.topic_id):
                if topic_id is None:
                    self.logs.write_topic_id(name, index, topic.topic_id)
                continue
            current = image.topics_by_id.get(topic_id) if topic_id is not None else None
            if current is None or index >= len(current.partitions) or self.logs.get(current.name, index) is not None:
                continue  # not ours any more: reconcile deletes it
            log.info("moving %s-%d to %s (renamed while the broker was down)", name, index, current.name)
            self.logs.rename_partition(name, current.name, index, self.log_config_for(current))

