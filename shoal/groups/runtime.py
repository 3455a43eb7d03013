"""What the group and the transaction coordinator share: serving the partitions of their internal
topic (``__consumer_offsets``, ``__transaction_state``) that this broker leads. Kafka's
``CoordinatorRuntime`` with its ``CoordinatorLoader``; it sits next to :mod:`shoal.groups.storage`,
the log both write through.

:class:`InternalTopicCoordinator` creates the topic (``request_topic``), follows the metadata image
(unloads the partitions this node no longer leads, then loads those it now leads, in partition
order; all of them go when the topic is deleted or recreated) and keeps each owned partition's
status: LOADING while its log is replayed in a worker thread, then ACTIVE. ``status(key)`` is the
answer for a group or transactional id: COORDINATOR_NOT_AVAILABLE without the topic,
NOT_COORDINATOR for a partition not owned, COORDINATOR_LOAD_IN_PROGRESS while it loads. Every load
has a new load epoch: the late end of an older incarnation (a load, a write) is ignored. Writes are
appended before the first ``await`` and wait for the high watermark, errors mapped as Kafka's.
A subclass sets the class attributes and implements the hooks (the methods that raise
NotImplementedError, and ``_on_loaded``). Not thread-safe: everything runs on the event loop that
called the subclass's ``start``, but ``_read_partition``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, Self, Sequence, TypeVar

from shoal.asyncutil import cancel_and_wait
from shoal.clock import Clock
from shoal.groups.records import partition_for
from shoal.groups.storage import BrokerCoordinatorLog, CoordinatorLog, Record
from shoal.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from shoal.config import BrokerConfig
    from shoal.metadata import MetadataImage, MetadataStore
    from shoal.replica import ReplicaManager


class BrokerSources:
    """``config`` and ``is_cluster`` read through the broker's sources, as of now (the coordinator
    context's and ``shoal.services.Services``')."""

    config_source: Callable[[], "BrokerConfig"]
    cluster_source: Callable[[], bool]

    @property
    def config(self) -> "BrokerConfig":
        return self.config_source()

    @property
    def is_cluster(self) -> bool:
        return self.cluster_source()


@dataclass(frozen=True)
class CoordinatorContext(BrokerSources):
    """What the group and transaction coordinators use of their broker, and nothing else of it:
    this node, the time, the metadata store (the image, its changes, creating their topics), the
    replicas (their logs, markers' partitions, other brokers' endpoints), the configs as of the
    image, whether this is an etcd cluster, and the planner's random start. The composition root
    (``shoal.broker``) builds it before ``Services``, and the coordinators from it."""

    node_id: int
    clock: Clock
    metadata: "MetadataStore"
    replicas: "ReplicaManager"
    config_source: Callable[[], "BrokerConfig"]  # static + dynamic configs as of the image
    cluster_source: Callable[[], bool]  # True on etcd, once the controller election runs
    random: random.Random  # the planner's start index (its topics' placement)
    # registered brokers the controller treats as gone (Controller.fenced_brokers): placement leaves them out
    fenced_source: Callable[[], frozenset[int]] = frozenset

    @property
    def fenced_brokers(self) -> frozenset[int]:
        return self.fenced_source()


HOSTED_POLL_S = 0.01  # how often a load waiting for its partition's log looks again

C = TypeVar("C")  # the coordinator's settings
L = TypeVar("L")  # what the replay of one partition yields


def coordinator_error(code: ErrorCode) -> ErrorCode:
    """Kafka's ``CoordinatorOperationExceptionHelper``: what a client sees when a write failed."""
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas, ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return code


class PartitionStatus(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"


@dataclass
class OwnedPartition:
    status: PartitionStatus
    load_epoch: int  # bumps at every load: late completions of an old incarnation are ignored
    coordinator_epoch: int  # the partition's leader epoch when this node took it


class InternalTopicCoordinator(Generic[C, L]):
    TOPIC: ClassVar[str]
    RF_CONFIG: ClassVar[str]  # its replication factor's setting: left at its default, 3 on a cluster
    KEYS: ClassVar[str]  # what a partition holds, for the log: "groups", "transactional ids"
    NAME: ClassVar[str]  # "group coordinator", ...
    logger: ClassVar[logging.Logger]
    RELOAD_ON_NEW_LEADER_EPOCH: ClassVar[bool] = False  # reload a partition still led whose epoch moved
    # Kafka (KIP-115) waits for enough brokers rather than shrink an internal topic's RF
    SHRINK_RF_TO_LIVE_BROKERS: ClassVar[bool] = False

    def __init__(
        self,
        *,
        clock: Clock,
        log: CoordinatorLog,
        config: C | Callable[[], C],
        num_partitions: int | None = None,
        node_id: int = 0,
    ) -> None:
        self.clock = clock
        self.log = log
        self._config = config
        self.node_id = node_id
        self.num_partitions = num_partitions or 0
        self.active = num_partitions is not None
        self._ctx: CoordinatorContext | None = None  # its broker's (_for_context)
        self._topic_id = None
        self._owned: dict[int, OwnedPartition] = {}
        self._loads = 0
        self._load_tasks: dict[int, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._timers: list[asyncio.Task] = []
        self._creating: asyncio.Task[None] | None = None  # the topic being created
        self._refused = ""  # why the topic could not be created, as last logged

    @classmethod
    def _for_context(cls, ctx: "CoordinatorContext", parse: Callable[[Any], C], **kw: Any) -> Self:
        """The coordinator of a broker: its settings ``parse``-d from the broker's config (again
        only when that object changes), its log the replica manager's partitions of ``TOPIC``."""
        cache: list = [None, None]

        def config() -> C:
            cfg = ctx.config
            if cache[0] is not cfg:
                cache[0], cache[1] = cfg, parse(cfg)
            return cache[1]

        log = BrokerCoordinatorLog(ctx.replicas, lambda: ctx.metadata.image, ctx.clock, topic=cls.TOPIC)
        c = cls(clock=ctx.clock, log=log, config=config, node_id=ctx.node_id, **kw)
        c._ctx = ctx
        return c

    @property
    def config(self) -> C:
        cfg = self._config
        return cfg() if callable(cfg) else cfg

    @property
    def write_timeout_s(self) -> float:
        """How long a write waits for the high watermark."""
        raise NotImplementedError

    # -- lifecycle ------------------------------------------------------------------------------

    def _broker(self) -> "CoordinatorContext":
        assert self._ctx is not None, "start() is for a broker-bound coordinator (for_context)"
        return self._ctx

    def _follow_metadata(self) -> None:
        """Load the partitions this node leads now, and follow the metadata image from then on."""
        broker = self._broker()
        broker.metadata.subscribe(self._on_metadata)
        self.active = True
        self._reconcile(None, broker.metadata.image)

    async def stop(self) -> None:
        self.active = False
        for p in list(self._owned):
            self.unload_partition(p)
        await cancel_and_wait([*self._timers, self._creating, *self._tasks, *self._load_tasks.values()])
        self._timers = []

    async def wait_loaded(self) -> None:
        while self._load_tasks:
            await asyncio.gather(*list(self._load_tasks.values()), return_exceptions=True)

    # -- the topic ------------------------------------------------------------------------------

    def _topic_size(self) -> tuple[int, int]:
        """(partitions, replication factor) to create the topic with, as configured."""
        raise NotImplementedError

    def _topic_configs(self, replication_factor: int) -> dict[str, str]:
        raise NotImplementedError

    def request_topic(self) -> None:
        """Create the topic in the background (once at a time): a FindCoordinator while it is
        missing is answered COORDINATOR_NOT_AVAILABLE, and the client asks again."""
        if self._ctx is None or not self.active or self._creating is not None:
            return
        self._creating = asyncio.get_running_loop().create_task(self._ensure_topic())

        def done(_t: asyncio.Task[None]) -> None:
            self._creating = None

        self._creating.add_done_callback(done)

    async def _ensure_topic(self) -> None:
        from shoal.metadata import MetadataError
        from shoal.tenancy.creation import PlacementRefused, create_internal_topic, internal_replication_factor

        broker = self._broker()
        partitions, rf = self._topic_size()
        rf = internal_replication_factor(rf, broker.config, self.RF_CONFIG, broker.is_cluster)
        try:  # the one creation decision: sized and placed on the image it commits against
            created = await create_internal_topic(
                broker.metadata, self.TOPIC, partitions, rf, self._topic_configs, rng=broker.random,
                fenced=lambda: broker.fenced_brokers, shrink_to_live=self.SHRINK_RF_TO_LIVE_BROKERS)
        except PlacementRefused as e:
            if e.message != self._refused:  # once per reason (FindCoordinator retries it on etcd)
                self._refused = e.message
                self.logger.error("cannot create %s (%s=%d): %s", self.TOPIC, self.RF_CONFIG, e.replication_factor,
                                  e.message)
            return
        except MetadataError as e:
            self.logger.error("cannot create %s: %s", self.TOPIC, e)
            return
        if created is not None:
            self.logger.info("created %s with %d partitions (replication factor %d)", self.TOPIC,
                             len(created.partitions), len(created.partitions[0].replicas))

    # -- following metadata ---------------------------------------------------------------------

    def _on_metadata(self, old: "MetadataImage", new: "MetadataImage") -> None:
        if self.active:
            self._reconcile(old, new)

    def _reconcile(self, old: "MetadataImage | None", new: "MetadataImage") -> None:
        """Own in ``new`` what this node leads: unload the partitions it no longer leads, then
        load those it now leads, in partition order."""
        topic = new.topic(self.TOPIC)
        if topic is None or topic.topic_id != self._topic_id:
            for p in list(self._owned):
                self.unload_partition(p)
            self._topic_id = topic.topic_id if topic is not None else None
        self.num_partitions = len(topic.partitions) if topic is not None else 0
        led = {p.partition: p.leader_epoch for p in topic.partitions if p.leader == self.node_id} if topic else {}
        for p in sorted(self._owned):
            if p not in led or (self.RELOAD_ON_NEW_LEADER_EPOCH and led[p] != self._owned[p].coordinator_epoch):
                self.unload_partition(p)
        for p in sorted(set(led) - set(self._owned)):
            self.start_loading(p, led[p])

    # -- partitions -----------------------------------------------------------------------------

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.num_partitions) if self.num_partitions else 0

    def status(self, key: str) -> ErrorCode:
        """NONE when this coordinator serves ``key`` now, else the error to answer."""
        if not self.active or not self.num_partitions:
            return ErrorCode.coordinator_not_available
        owned = self._owned.get(self.partition_for(key))
        if owned is None:
            return ErrorCode.not_coordinator
        if owned.status is PartitionStatus.LOADING:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none

    def owned_partitions(self) -> dict[int, PartitionStatus]:
        return {p: o.status for p, o in self._owned.items()}

    def serving(self, partition: int) -> OwnedPartition | None:
        """The partition's ownership when it is loaded (ACTIVE), else None."""
        owned = self._owned.get(partition)
        return owned if owned is not None and owned.status is PartitionStatus.ACTIVE else None

    def any_loading(self) -> bool:
        return any(o.status is PartitionStatus.LOADING for o in self._owned.values())

    def start_loading(self, partition: int, coordinator_epoch: int = 0) -> asyncio.Task[None]:
        self._loads += 1
        self._owned[partition] = OwnedPartition(PartitionStatus.LOADING, self._loads, coordinator_epoch)
        task = asyncio.ensure_future(self._load(partition, self._loads))
        self._load_tasks[partition] = task

        def forget(t: asyncio.Task[None], p: int = partition) -> None:
            if self._load_tasks.get(p) is t:
                del self._load_tasks[p]

        task.add_done_callback(forget)
        return task

    async def _load(self, partition: int, load_epoch: int) -> None:
        started = self.clock.monotonic()
        # The image names this broker the leader before the replica manager has the log open (a
        # topic of many partitions has its logs made in a worker thread): wait for it, or the
        # replay would find nothing and the partition would be served empty.
        while not self.log.hosted(partition):
            if not self._still_owned(partition, load_epoch):
                return
            await asyncio.sleep(HOSTED_POLL_S)
        try:
            loaded = await asyncio.to_thread(self._read_partition, partition)
        except Exception:
            self.logger.exception("cannot load %s-%d; its %s stay unavailable", self.TOPIC, partition, self.KEYS)
            return
        owned = self._owned.get(partition)
        if owned is None or owned.load_epoch != load_epoch:
            return  # unloaded (or reloaded) meanwhile
        self._apply_loaded(partition, loaded)
        owned.status = PartitionStatus.ACTIVE
        self._on_loaded(partition, owned, loaded, started)

    def _read_partition(self, partition: int) -> L:
        """Replay one partition's log (runs in a worker thread)."""
        raise NotImplementedError

    def _apply_loaded(self, partition: int, loaded: L) -> None:
        """Install what :meth:`_read_partition` found (the partition is still LOADING)."""
        raise NotImplementedError

    def _on_loaded(self, partition: int, owned: OwnedPartition, loaded: L, started: float) -> None:
        """The partition is ACTIVE now (its load started at ``clock.monotonic()`` ``started``)."""

    def unload_partition(self, partition: int) -> None:
        self._owned.pop(partition, None)
        task = self._load_tasks.pop(partition, None)
        if task is not None:
            task.cancel()
        dropped = self._drop_partition(partition)
        if dropped:
            self.logger.info("unloaded %s-%d: %d %s", self.TOPIC, partition, dropped, self.KEYS)

    def _drop_partition(self, partition: int) -> int:
        """Forget the state of a partition no longer owned; returns how many keys it held."""
        raise NotImplementedError

    def _still_owned(self, partition: int, load_epoch: int) -> bool:
        owned = self._owned.get(partition)
        return owned is not None and owned.load_epoch == load_epoch

    # -- writing --------------------------------------------------------------------------------

    def _append(self, partition: int, records: Sequence[Record], **batch: int) -> tuple[int, int] | ErrorCode:
        """Append now (``batch``: a transactional batch's producer_id and producer_epoch);
        (end offset, load epoch) or the client-facing error."""
        owned = self.serving(partition)
        if owned is None:
            return ErrorCode.not_coordinator
        res = self.log.append(partition, records, self.clock.now_ms(), **batch)
        if isinstance(res, ErrorCode):
            return coordinator_error(res)
        return res, owned.load_epoch

    async def _committed(self, partition: int, end: int, load_epoch: int) -> ErrorCode:
        """Wait until the records before ``end`` are committed; NOT_COORDINATOR when the partition
        was unloaded or reloaded meanwhile."""
        code = await self.log.wait_committed(partition, end, self.write_timeout_s)
        if code != ErrorCode.none:
            return coordinator_error(code)
        if not self._still_owned(partition, load_epoch):
            return ErrorCode.not_coordinator
        return ErrorCode.none

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                self.logger.error("%s task failed", self.NAME, exc_info=t.exception())

        task.add_done_callback(done)
