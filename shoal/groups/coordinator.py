"""The group coordinator: groups and committed offsets of the ``__consumer_offsets`` partitions this
broker leads.

One ``GroupCoordinator`` per broker. It owns a *partition* of ``__consumer_offsets`` while this
node leads it: it replays the partition's log to rebuild the groups and offsets stored there
(status LOADING: requests get COORDINATOR_LOAD_IN_PROGRESS), then serves them (ACTIVE); when
leadership moves away it drops them (NOT_COORDINATOR). A group lives in partition
``abs(hashCode(group_id)) % partitions``, Kafka's formula, so Kafka clients and tools agree. That
ownership (and creating the topic) is :class:`~shoal.groups.runtime.InternalTopicCoordinator`'s,
shared with the transaction coordinator; this class says what a partition's replay rebuilds.

Writes go through :class:`~shoal.groups.storage.CoordinatorLog`: the record is appended before
the operation's first ``await`` (operations keep the order the event loop ran them in, which is
the log's order) and the operation completes only when the high watermark passes it (acks=all).
Offsets enter the in-memory store only then. A failed write answers with Kafka's coordinator
error mapping (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, ...).

Group kinds: ``groups`` holds any :class:`~shoal.groups.group.Group`; the classic protocol's
operations are in :class:`~shoal.groups.classic.ClassicGroupManager` (``self.classic``). Another
protocol (KIP-848) adds its group class, its request handlers and its record types
(:meth:`register_record_type`, replayed at load in log order); offsets, ListGroups,
DescribeGroups, DeleteGroups, OffsetDelete and expiry already work on any ``Group``.

Offset expiry runs every ``offsets.retention.check.interval.ms``: offsets older than
``offsets.retention.minutes`` (counted from when an Empty group became empty, from each commit for
simple groups and for topics a Stable consumer group no longer subscribes to) get tombstones; an
Empty group left without offsets is deleted (group tombstone).

After a restart (or when this node becomes leader of a partition) the replay rebuilds every group
from its last GroupMetadataValue, as Kafka does: a group that had members comes back Stable with
its generation, members and assignments, and each member gets a fresh session timeout. Members
that are still running carry on heartbeating with their member id, without a rebalance; those
that are gone expire and the group rebalances (or becomes Empty). Offsets come back as committed.

Transactional offsets (KIP-98, TxnOffsetCommit; KIP-447 generation checks): :meth:`commit_txn_offsets`
appends the offsets in a transactional batch of the producer (producer id and epoch, base sequence
-1, the transactional attribute) and keeps them pending for that producer
(``OffsetStore.add_txn``): OffsetFetch does not show them, and with ``require_stable`` answers
UNSTABLE_OFFSET_COMMIT for their partitions. The transaction coordinator's marker writer, once the
end-transaction marker is committed in a partition of ``__consumer_offsets``, calls
:meth:`on_txn_completed`: COMMIT materializes them (unless a regular commit of the partition is
later in the log), ABORT drops them. The load replays transactional batches and markers the same
way. OffsetDelete, DeleteGroups and deleted topics tombstone pending ones too; expiry spares the
offsets (and the groups) that have a transaction open, as Kafka 4's ``OffsetMetadataManager``.

Tenancy: the coordinator knows only physical names (a tenant's group ``g`` is ``lkc-3f9a2c_g``; the
handlers translate). When a tenant leaves the metadata image, its groups are deleted with their
offsets, whatever their state (:meth:`delete_tenant_groups`); a partition loaded later drops those
of tenants that no longer exist. When a topic is renamed (a KIP-37 move: same topic id, new name),
its committed offsets move to the new name, durably (:meth:`follow_renamed_topics`); a load moves
those a crash or a missed change left under a name the image lists as former (``renamed_topics``).

Everything runs on the event loop that called :meth:`start`; the log replay runs in a worker
thread. Not thread-safe.

Deliberate deviations from Kafka:

- the whole partition is replayed at load, into its final state, as Kafka does; the log cleaner
  (shoal.storage.cleaner) compacts ``__consumer_offsets`` so the replay stays proportional to the
  live groups and offsets;
- OffsetFetch with ``require_stable`` waits (up to offsets.commit.timeout.ms) for commits of the
  group still in flight, then answers UNSTABLE_OFFSET_COMMIT for any still pending (Kafka 2.x
  answers at once, Kafka 4 waits like this but never answers the error);
- DeleteGroups and OffsetDelete change memory before their tombstones are committed (a failed
  write is reported, but the in-memory state is not rolled back as Kafka's timeline structures do).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Container, Iterable, Mapping, Sequence

from shoal.clock import Clock
from shoal.groups.runtime import CoordinatorContext, InternalTopicCoordinator, OwnedPartition, PartitionStatus
from shoal.groups.runtime import coordinator_error  # noqa: F401  (shoal.handlers.offsets imports it from here)
from shoal.groups.classic import ClassicGroup, ClassicGroupManager, JoinRequest, JoinResult, SyncResult
from shoal.groups.config import GroupConfig
from shoal.groups.consumer import ConsumerGroup, ConsumerGroupManager  # KIP-848
from shoal.groups.group import Group, OffsetAndMetadata, tenant_of_group
from shoal.groups.offsets import OffsetStore
from shoal.groups.records import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_offset_commit_value,
    offset_commit_key,
)
from shoal.groups.storage import CoordinatorLog, Record
from shoal.groups.timer import Timer
from shoal.metadata import changed_topics, former_topic_names, topic_renames
from shoal.protocol.errors import ErrorCode
from shoal.replica.purgatory import Purgatory

if TYPE_CHECKING:
    from shoal.metadata import MetadataImage

log = logging.getLogger("shoal.groups")

EXPIRY_TIMER_KEY = ("offsets-expiration",)


@dataclass(frozen=True, slots=True)
class CommitRequest:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode


@dataclass
class _Loaded:
    """The final state of one partition's log, computed in the worker thread."""

    groups: dict[str, GroupMetadataValue | None]
    offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]]
    other: list[tuple[int, bytes, bytes | None]]
    records: int = 0
    skipped: int = 0
    # transactional offsets of transactions without a marker yet: producer id -> key -> value
    txn: dict[int, dict[tuple[str, str, int], OffsetAndMetadata]] = dataclasses.field(default_factory=dict)


# A replay function for a record type (key version) another group protocol owns:
# fn(coordinator, partition, log_offset, key, value_or_None).
RecordReplay = Callable[["GroupCoordinator", int, int, bytes, "bytes | None"], None]


class GroupCoordinator(InternalTopicCoordinator[GroupConfig, _Loaded]):
    TOPIC = OFFSETS_TOPIC
    RF_CONFIG = "offsets.topic.replication.factor"
    KEYS = "groups"
    NAME = "group coordinator"
    logger = log

    def __init__(
        self,
        *,
        clock: Clock,
        log: CoordinatorLog,
        config: GroupConfig | Callable[[], GroupConfig],
        num_partitions: int | None = None,
        node_id: int = 0,
        new_uuid: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        super().__init__(clock=clock, log=log, config=config, num_partitions=num_partitions, node_id=node_id)
        self.new_uuid = new_uuid
        self.timer = Timer(clock)
        self.groups: dict[str, Group] = {}
        self.offsets = OffsetStore()
        self.classic = ClassicGroupManager(self)
        # transactions that ended while a partition was loading: (producer id, commit), in order
        self._txn_ended_while_loading: dict[int, list[tuple[int, bool]]] = {}
        self._record_types: dict[int, RecordReplay] = {}
        # KIP-848: the consumer protocol's groups (registers its record types 3-8 above).
        self.consumer = ConsumerGroupManager(self)
        self._commit_waiters = Purgatory()  # keyed by group id: a commit finished

    @classmethod
    def for_context(cls, ctx: "CoordinatorContext") -> "GroupCoordinator":
        return cls._for_context(ctx, GroupConfig.from_broker_config)

    @property
    def write_timeout_s(self) -> float:
        return self.config.offset_commit_timeout_ms / 1000.0

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Create ``__consumer_offsets`` if missing, load the partitions this node leads, follow
        metadata from then on, and start the timers."""
        broker = self._broker()
        self._timers = [asyncio.create_task(self.timer.drive(), name="group-coordinator-timer")]
        if not broker.is_cluster:
            await self._ensure_topic()
        # cluster: created at the first FindCoordinator instead (request_offsets_topic), as Kafka
        # does, so that it is placed over the brokers up by then, not over the first one alone
        self._follow_metadata()
        await self.wait_loaded()
        self.schedule_expiry()

    async def stop(self) -> None:
        self.timer.cancel(EXPIRY_TIMER_KEY)
        await super().stop()

    def _topic_size(self) -> tuple[int, int]:
        cfg = self.config
        return cfg.offsets_topic_num_partitions, cfg.offsets_topic_replication_factor

    def _topic_configs(self, replication_factor: int) -> dict[str, str]:
        return {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.config.offsets_topic_segment_bytes),
        }

    def request_topic(self) -> None:
        """On a cluster, create ``__consumer_offsets`` in the background (see the base); one
        broker created it at start(), or said once why it cannot."""
        if self._ctx is not None and self._ctx.is_cluster:
            super().request_topic()

    request_offsets_topic = request_topic

    # -- following metadata ---------------------------------------------------------------------

    def _reconcile(self, old: "MetadataImage | None", new: "MetadataImage") -> None:
        super()._reconcile(old, new)
        if old is not None:
            renames = topic_renames(old, new)  # tenancy: KIP-37 moves; their offsets follow
            if renames:
                self.follow_renamed_topics(renames)
            gone = [
                name for name, (t, now) in changed_topics(old, new).items()
                if t is not None and name != OFFSETS_TOPIC and name not in renames
                and (now is None or now.topic_id != t.topic_id)
            ]
            # offsets a move left under a former name (see follow_renamed_topics) of a deleted topic
            gone += [n for n, tid in old.renamed_topics.items() if tid not in new.topics_by_id and n not in new.topics]
            if gone:
                self.on_topics_deleted(gone)
            if old.tenants is not new.tenants and not set(old.tenants) <= set(new.tenants):
                self.delete_tenant_groups(new.tenants)  # tenancy: a tenant was deleted

    # -- partitions -----------------------------------------------------------------------------

    def start_loading(self, partition: int, coordinator_epoch: int = 0) -> asyncio.Task[None]:
        self._txn_ended_while_loading[partition] = []
        return super().start_loading(partition, coordinator_epoch)

    def _on_loaded(self, partition: int, owned: OwnedPartition, loaded: _Loaded, started: float) -> None:
        for producer_id, commit in self._txn_ended_while_loading.pop(partition, ()):
            # a marker the replay may have read already: completing again finds nothing pending
            self.on_txn_completed(producer_id, [partition], commit)
        if self._ctx is not None:  # tenancy: groups of tenants deleted while we did not own them
            self.delete_tenant_groups(self._ctx.metadata.image.tenants, [partition])
            # tenancy: offsets of topics moved while this partition was not loaded, or just
            # before a crash, follow them now
            self.follow_renamed_topics(former_topic_names(self._ctx.metadata.image), [partition])
        n_groups = sum(1 for g in self.groups.values() if g.partition == partition)
        if loaded.records or n_groups:
            log.info(
                "loaded %s-%d: %d records, %d groups, %d offsets in %.3fs%s",
                OFFSETS_TOPIC, partition, loaded.records, n_groups,
                sum(len(v) for v in loaded.offsets.values()), self.clock.monotonic() - started,
                f" ({loaded.skipped} records skipped)" if loaded.skipped else "",
            )

    def _read_partition(self, partition: int) -> _Loaded:
        """Replay one partition's log to its final state (runs in a worker thread).

        Transactional offset commits (a transactional batch of a producer id) wait per producer
        until that producer's next end-transaction marker: COMMIT materializes each of them unless
        the partition's committed offset is later in the log, ABORT drops them (Kafka's
        ``OffsetMetadataManager.replayEndTransactionMarker``); a tombstone drops the pending ones of
        its partition. Those without a marker yet stay pending after the load."""
        out = _Loaded({}, {}, [])
        for batch in self.log.replay_batches(partition):
            if batch.marker is not None:
                out.records += 1
                for (g, t, p), om in out.txn.pop(batch.producer_id, {}).items():
                    if batch.marker:
                        offsets = out.offsets.setdefault(g, {})
                        current = offsets.get((t, p))
                        if current is None or current.record_offset < om.record_offset:
                            offsets[(t, p)] = om
                continue
            txn_producer = batch.producer_id if batch.transactional else -1
            self._replay_records(partition, batch.records, txn_producer, out)
        return out

    def _replay_records(
        self, partition: int, records: Iterable[tuple[int, bytes | None, bytes | None]], txn_producer: int, out: _Loaded
    ) -> None:
        for offset, key, value in records:
            out.records += 1
            if key is None:
                out.skipped += 1
                continue
            try:
                k = decode_key(key)
                if isinstance(k, OffsetCommitKey):
                    offsets = out.offsets.setdefault(k.group, {})
                    if value is None:
                        offsets.pop((k.topic, k.partition), None)
                        for pending in out.txn.values():
                            pending.pop((k.group, k.topic, k.partition), None)
                    else:
                        v = decode_offset_commit_value(value)
                        om = OffsetAndMetadata(
                            v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp, offset
                        )
                        if txn_producer >= 0:
                            out.txn.setdefault(txn_producer, {})[(k.group, k.topic, k.partition)] = om
                        else:
                            offsets[(k.topic, k.partition)] = om
                elif isinstance(k, GroupMetadataKey):
                    out.groups[k.group] = None if value is None else decode_group_metadata_value(value)
                else:
                    out.other.append((offset, key, value))
            except RecordFormatError as e:
                out.skipped += 1
                log.warning("%s-%d offset %d: skipping a record: %s", OFFSETS_TOPIC, partition, offset, e)

    def _apply_loaded(self, partition: int, loaded: _Loaded) -> None:
        for group_id, value in loaded.groups.items():
            if value is None:
                continue
            group = self.classic.load(group_id, value)
            self.add_group(group)
            self.classic.on_loaded(group)
        for group_id, offsets in loaded.offsets.items():
            if not offsets:
                continue
            if group_id not in self.groups:
                self.classic.new_group(group_id)  # offsets without group metadata: a simple group
            for (topic, p), om in offsets.items():
                self.offsets.put(group_id, topic, p, om)
        for producer_id, pending in loaded.txn.items():
            for (group_id, topic, p), om in pending.items():
                if group_id not in self.groups:
                    self.classic.new_group(group_id)  # Kafka: pending offsets keep a simple group too
                self.offsets.add_txn(producer_id, group_id, topic, p, om)
        for offset, key, value in loaded.other:
            version = int.from_bytes(key[:2], "big", signed=True)
            fn = self._record_types.get(version)
            if fn is None:
                log.debug("%s-%d offset %d: no replay for key version %d", OFFSETS_TOPIC, partition, offset, version)
                continue
            fn(self, partition, offset, key, value)
        self.consumer.on_partition_loaded(partition)  # KIP-848: install the replayed consumer groups

    def _drop_partition(self, partition: int) -> int:
        self._txn_ended_while_loading.pop(partition, None)
        dropped = {gid for gid, g in self.groups.items() if g.partition == partition}
        for gid in dropped:
            self.remove_group(self.groups[gid])
        self.offsets.clear(dropped)
        return len(dropped)

    def register_record_type(self, key_version: int, replay: RecordReplay) -> None:
        """Replay records whose key starts with ``key_version`` at load (another protocol's)."""
        self._record_types[key_version] = replay

    # -- groups ---------------------------------------------------------------------------------

    def add_group(self, group: Group) -> None:
        self.groups[group.group_id] = group

    def remove_group(self, group: Group) -> None:
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        if not group.is_dead():
            group.mark_dead()
        if isinstance(group, ClassicGroup):
            self.classic.cancel_timers(group)

    def maybe_drop_unused_group(self, group: Group) -> None:
        """Forget a group that never got a generation nor offsets (so no record names it)."""
        if (
            isinstance(group, ClassicGroup)
            and group.is_empty()
            and group.generation_id == 0
            and not group.members
            and not group.pending_join
            and not self.offsets.has_offsets(group.group_id)
            and not self.offsets.has_pending(group.group_id)
            and not self.offsets.has_txn_pending(group.group_id)
        ):
            self.remove_group(group)

    # -- writing --------------------------------------------------------------------------------

    async def write(self, partition: int, records: Sequence[Record]) -> ErrorCode:
        """Append ``records`` (before the first await) and wait until they are committed."""
        res = self._append(partition, records)
        if isinstance(res, ErrorCode):
            return res
        return await self._committed(partition, *res)

    def persist(self, partition: int, records: Sequence[Record], on_done: Callable[[ErrorCode], None]) -> int | None:
        """Append now; call ``on_done(error)`` on the loop once the records are committed (or not).
        Returns the log offset after the records, None when the append failed."""
        res = self._append(partition, records)
        if isinstance(res, ErrorCode):
            asyncio.get_running_loop().call_soon(on_done, res)
            return None

        async def wait(end: int, epoch: int) -> None:
            on_done(await self._committed(partition, end, epoch))

        self._spawn(wait(*res))
        return res[0]

    # -- classic protocol entry points ----------------------------------------------------------

    def join_group(self, req: JoinRequest) -> "asyncio.Future[JoinResult]":
        code = self.status(req.group_id)
        if code == ErrorCode.none and not req.group_id:
            code = ErrorCode.invalid_group_id
        cfg = self.config
        if code == ErrorCode.none and not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            code = ErrorCode.invalid_session_timeout
        group = self.groups.get(req.group_id)
        if code == ErrorCode.none and group is not None and not isinstance(group, ClassicGroup):
            return self.join_other_group(group, req)
        if code != ErrorCode.none:
            fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
            fut.set_result(JoinResult(code, req.member_id))
            return fut
        log.debug("group %s: JoinGroup from %r (instance %r)", req.group_id, req.member_id, req.group_instance_id)
        return self.classic.join(req)

    def join_other_group(self, group: Group, req: JoinRequest) -> "asyncio.Future[JoinResult]":
        """A classic JoinGroup for a group of another protocol. Kafka lets classic members join a
        KIP-848 group ("online migration"); until that exists, INCONSISTENT_GROUP_PROTOCOL.

        KIP-848: an *empty* consumer group is converted to a classic one first (offline
        downgrade, as Kafka does): its records get tombstones, its offsets stay."""
        code = ErrorCode.inconsistent_group_protocol
        if isinstance(group, ConsumerGroup) and group.is_empty():
            code = self.consumer.downgrade_empty_group(group)
            if code == ErrorCode.none:
                return self.classic.join(req)
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        fut.set_result(JoinResult(code, req.member_id))
        return fut

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> "asyncio.Future[SyncResult]":
        code = self.status(group_id)
        if code == ErrorCode.coordinator_load_in_progress:
            # The rebalance's state was lost with the old coordinator: have the member rejoin
            # (older clients do not expect COORDINATOR_LOAD_IN_PROGRESS here).
            code = ErrorCode.rebalance_in_progress
        if code == ErrorCode.none and not group_id:
            code = ErrorCode.invalid_group_id
        if code != ErrorCode.none:
            fut: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
            fut.set_result(SyncResult(code))
            return fut
        return self.classic.sync(group_id, generation_id, member_id, instance_id, protocol_type, protocol_name, assignments)

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
        code = self.status(group_id)
        if code == ErrorCode.coordinator_load_in_progress:
            return ErrorCode.none  # Kafka answers blindly while loading
        if code == ErrorCode.none and not group_id:
            code = ErrorCode.invalid_group_id
        if code != ErrorCode.none:
            return code
        code = self.classic.heartbeat(group_id, member_id, instance_id, generation_id)
        if code != ErrorCode.none:
            log.debug("group %s: heartbeat of %s (generation %d): %s", group_id, member_id, generation_id, code.name)
        return code

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        code = self.status(group_id)
        if code == ErrorCode.none and not group_id:
            code = ErrorCode.invalid_group_id
        if code != ErrorCode.none:
            return code, []
        return self.classic.leave(group_id, members)

    # -- offsets --------------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_or_epoch: int,
        commits: Sequence[CommitRequest],
        *,
        retention_ms: int = -1,
        api_version: int = 9,
    ) -> list[ErrorCode]:
        """One error per commit, in order. Appends before the first await."""
        code = self.status(group_id)
        if code != ErrorCode.none:
            return [code] * len(commits)
        group = self.groups.get(group_id)
        created = False
        if group is None:
            if generation_or_epoch < 0:
                log.info("group %s: created as a simple group by an offset commit", group_id)
                group = self.classic.new_group(group_id)
                created = True
            else:
                # v9+ can tell the client the group is gone; older ones only know generations.
                err = ErrorCode.group_id_not_found if api_version >= 9 else ErrorCode.illegal_generation
                return [err] * len(commits)
        else:
            err = group.validate_offset_commit(member_id, instance_id, generation_or_epoch, api_version)
            if err != ErrorCode.none:
                return [err] * len(commits)
        group.on_offset_commit(member_id)

        cfg = self.config
        now = self.clock.now_ms()
        expire = now + retention_ms if retention_ms >= 0 else -1
        results: list[ErrorCode] = []
        records: list[Record] = []
        accepted: list[tuple[int, OffsetAndMetadata, CommitRequest]] = []
        for c in commits:
            meta = c.metadata if c.metadata is not None else ""
            if c.metadata is not None and len(c.metadata) > cfg.offset_metadata_max_bytes:
                results.append(ErrorCode.offset_metadata_too_large)
                continue
            om = OffsetAndMetadata(c.offset, c.leader_epoch, meta, now, expire)
            records.append(
                (
                    offset_commit_key(group_id, c.topic, c.partition),
                    encode_offset_commit_value(OffsetCommitValue(c.offset, c.leader_epoch, meta, now, expire)),
                )
            )
            accepted.append((len(results), om, c))
            results.append(ErrorCode.none)
        if not records:
            if created:
                self.maybe_drop_unused_group(group)
            return results
        res = self._append(group.partition, records)
        if isinstance(res, ErrorCode):
            for i, _, _ in accepted:
                results[i] = res
            if created:
                self.maybe_drop_unused_group(group)
            return results
        end, epoch = res
        base = end - len(records)
        for n, (_, om, c) in enumerate(accepted):
            self.offsets.add_pending(group_id, c.topic, c.partition, base + n, dataclasses.replace(om, record_offset=base + n))
        stored = False
        try:
            err = await self._committed(group.partition, end, epoch)
            if err == ErrorCode.none and self.groups.get(group_id) is group:
                # Stored while still pending: a tombstone written meanwhile (OffsetDelete, a
                # renamed topic's move) keeps its floor until done_pending, so nothing resurrects.
                stored = True
                for n, (_, om, c) in enumerate(accepted):
                    self.offsets.put(group_id, c.topic, c.partition, dataclasses.replace(om, record_offset=base + n))
        finally:
            for n, (_, _, c) in enumerate(accepted):
                self.offsets.done_pending(group_id, c.topic, c.partition, base + n)
        if not stored and created:
            self.maybe_drop_unused_group(group)
        self._commit_waiters.notify(group_id)
        if err != ErrorCode.none:
            for i, _, _ in accepted:
                results[i] = err
        return results

    async def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: Sequence[CommitRequest],
    ) -> dict[tuple[str, int], ErrorCode]:
        """TxnOffsetCommit: one error per (topic, partition). The offsets are appended now, in one
        transactional batch of ``producer_id``/``producer_epoch`` (before the first await), and
        stay pending for that producer, invisible to OffsetFetch, until its transaction ends
        (:meth:`on_txn_completed`). Validation as Kafka 4's ``validateTransactionalOffsetCommit``:
        a group that does not exist is created as a simple group for generation -1, else
        ILLEGAL_GENERATION; otherwise the group's offset-commit rules with the transactional
        relaxations (v0-v2 carry no member: accepted in any state; accepted while a classic group
        completes its rebalance); a consumer-protocol member's stale epoch is ILLEGAL_GENERATION.
        The log fences an older producer epoch (INVALID_PRODUCER_EPOCH)."""
        keys = [(c.topic, c.partition) for c in offsets]
        code = self.status(group_id)
        if code == ErrorCode.none and not group_id:
            code = ErrorCode.invalid_group_id
        if code == ErrorCode.none and (producer_id < 0 or producer_epoch < 0):
            code = ErrorCode.invalid_producer_epoch  # no transactional batch without a producer
        if code != ErrorCode.none:
            return dict.fromkeys(keys, code)
        group = self.groups.get(group_id)
        created = False
        if group is None:
            if generation_id >= 0:
                return dict.fromkeys(keys, ErrorCode.illegal_generation)
            log.info("group %s: created as a simple group by a transactional offset commit", group_id)
            group = self.classic.new_group(group_id)
            created = True
        else:
            err = group.validate_offset_commit(member_id, group_instance_id, generation_id, -1, transactional=True)
            if err == ErrorCode.stale_member_epoch:
                err = ErrorCode.illegal_generation  # TxnOffsetCommit has no STALE_MEMBER_EPOCH
            if err != ErrorCode.none:
                return dict.fromkeys(keys, err)

        cfg = self.config
        now = self.clock.now_ms()
        results: dict[tuple[str, int], ErrorCode] = {}
        records: list[Record] = []
        accepted: list[tuple[OffsetAndMetadata, CommitRequest]] = []
        for c in offsets:
            meta = c.metadata if c.metadata is not None else ""
            if c.metadata is not None and len(c.metadata) > cfg.offset_metadata_max_bytes:
                results[(c.topic, c.partition)] = ErrorCode.offset_metadata_too_large
                continue
            records.append((
                offset_commit_key(group_id, c.topic, c.partition),
                encode_offset_commit_value(OffsetCommitValue(c.offset, c.leader_epoch, meta, now, -1)),
            ))
            accepted.append((OffsetAndMetadata(c.offset, c.leader_epoch, meta, now), c))
            results[(c.topic, c.partition)] = ErrorCode.none
        if not records:
            if created:
                self.maybe_drop_unused_group(group)
            return results
        res = self._append(group.partition, records, producer_id=producer_id, producer_epoch=producer_epoch)
        if isinstance(res, ErrorCode):
            for _, c in accepted:
                results[(c.topic, c.partition)] = res
            if created:
                self.maybe_drop_unused_group(group)
            return results
        end, epoch = res
        base = end - len(records)
        for n, (om, c) in enumerate(accepted):
            self.offsets.add_txn(producer_id, group_id, c.topic, c.partition, dataclasses.replace(om, record_offset=base + n))
        err = await self._committed(group.partition, end, epoch)
        if err != ErrorCode.none:
            # Kafka's failPendingTxnOffsetCommit: the client retries the commit.
            for n, (_, c) in enumerate(accepted):
                self.offsets.drop_txn(producer_id, group_id, c.topic, c.partition, base + n)
                results[(c.topic, c.partition)] = err
            if created:
                self.maybe_drop_unused_group(group)
        return results

    def on_txn_completed(self, producer_id: int, partitions: Iterable[int], commit: bool) -> None:
        """The end-transaction marker of ``producer_id`` is committed in these partitions of
        ``__consumer_offsets``: materialize (``commit``) or drop its pending offsets of their
        groups (Kafka's ``handleTxnCompletion``). A partition still loading applies it once loaded
        (its replay may or may not have read the marker); one this node does not own is the new
        leader's business (its load replays the marker)."""
        now_active: set[int] = set()
        for p in partitions:
            owned = self._owned.get(p)
            if owned is None:
                continue
            if owned.status is PartitionStatus.LOADING:
                self._txn_ended_while_loading.setdefault(p, []).append((producer_id, commit))
            else:
                now_active.add(p)
        if not now_active:
            return
        done = self.offsets.complete_txn(producer_id, commit, lambda gid: self.partition_for(gid) in now_active)
        if done:
            log.debug("producer %d: %d transactional offsets %s", producer_id, len(done),
                      "committed" if commit else "aborted")
        if commit and done and self._ctx is not None:
            # tenancy: offsets committed under the former name of a topic renamed (KIP-37) while the
            # transaction was open follow it now, as a load would move them
            former = former_topic_names(self._ctx.metadata.image)
            if former and any(topic in former for _g, topic, _p in done):
                self.follow_renamed_topics(former, now_active)

    async def fetch_offsets(
        self,
        group_id: str,
        topics: Sequence[tuple[str, Sequence[int]]] | None,
        *,
        require_stable: bool = False,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[ErrorCode, list[tuple[str, list[FetchedOffset]]]]:
        """(group error, [(topic, offsets)]); ``topics`` None means every committed offset."""
        code = self.status(group_id)
        if code != ErrorCode.none:
            return code, []
        group = self.groups.get(group_id)
        known = group is not None
        if group is not None:
            code = group.validate_offset_fetch(member_id, member_epoch)
            if code == ErrorCode.group_id_not_found:
                known = False
            elif code != ErrorCode.none:
                return code, []

        def pending() -> bool:
            if topics is None:
                return self.offsets.has_pending(group_id)
            return any(self.offsets.is_pending(group_id, t, p) for t, ps in topics for p in ps)

        if require_stable and known and pending():
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.config.offset_commit_timeout_ms / 1000.0
            while pending() and loop.time() < deadline:
                await self._commit_waiters.wait([group_id], deadline - loop.time())
            if self.groups.get(group_id) is not group:
                known = False

        stored = self.offsets.group_offsets(group_id) if known else {}
        out: list[tuple[str, list[FetchedOffset]]] = []
        wanted = (
            [(t, sorted(parts)) for t, parts in stored.items()] if topics is None else [(t, list(ps)) for t, ps in topics]
        )
        for topic, parts in wanted:
            rows = []
            for p in parts:
                if require_stable and known and (
                    self.offsets.is_pending(group_id, topic, p) or self.offsets.is_txn_pending(group_id, topic, p)
                ):
                    rows.append(FetchedOffset(p, -1, -1, "", ErrorCode.unstable_offset_commit))
                    continue
                om = stored.get(topic, {}).get(p)
                if om is None:
                    rows.append(FetchedOffset(p, -1, -1, "", ErrorCode.none))
                else:
                    rows.append(FetchedOffset(p, om.offset, om.leader_epoch, om.metadata, ErrorCode.none))
            out.append((topic, rows))
        return ErrorCode.none, out

    async def delete_offsets(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, ErrorCode]]]]]:
        """OffsetDelete for topics known to exist: (group error, per-partition errors)."""
        code = self.status(group_id)
        if code == ErrorCode.none and not group_id:
            code = ErrorCode.invalid_group_id
        if code != ErrorCode.none:
            return code, []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, []
        code = group.validate_offset_delete()
        if code != ErrorCode.none:
            return code, []
        out: list[tuple[str, list[tuple[int, ErrorCode]]]] = []
        records: list[Record] = []
        deleted: list[tuple[str, int]] = []
        for topic, parts in topics:
            if group.is_subscribed_to_topic(topic):
                out.append((topic, [(p, ErrorCode.group_subscribed_to_topic) for p in parts]))
                continue
            rows = []
            for p in parts:
                rows.append((p, ErrorCode.none))
                if (
                    self.offsets.get(group_id, topic, p) is not None
                    or self.offsets.is_pending(group_id, topic, p)
                    or self.offsets.is_txn_pending(group_id, topic, p)
                ):
                    records.append((offset_commit_key(group_id, topic, p), None))
                    deleted.append((topic, p))
            out.append((topic, rows))
        if records:
            res = self._append(group.partition, records)
            if isinstance(res, ErrorCode):
                return res, []
            end, epoch = res
            base = end - len(records)
            for n, (topic, p) in enumerate(deleted):
                self.offsets.remove(group_id, topic, p, base + n)
            err = await self._committed(group.partition, end, epoch)
            if err != ErrorCode.none:
                return err, []
        return ErrorCode.none, out

    # -- admin ----------------------------------------------------------------------------------

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        by_partition: dict[int, list[Group]] = {}
        for gid in group_ids:
            code = self.status(gid)
            if code != ErrorCode.none:
                results[gid] = code
                continue
            group = self.groups.get(gid)
            if group is None:
                results[gid] = ErrorCode.group_id_not_found
                continue
            code = group.validate_delete()
            if code != ErrorCode.none:
                results[gid] = code
                continue
            by_partition.setdefault(group.partition, []).append(group)
            results[gid] = ErrorCode.none
        waits = []
        for partition, groups in by_partition.items():
            waits.append((groups, self.write(partition, self._delete_group_records(groups, "deleted"))))
        for groups, wait in waits:
            err = await wait
            if err != ErrorCode.none:
                for g in groups:
                    results[g.group_id] = err
        return results

    def _delete_group_records(self, groups: Iterable[Group], what: str) -> list[Record]:
        """Forget ``groups`` now; the tombstones of everything naming them in the log: their
        offsets (committed, and commits still in flight, whose records precede these) and the
        group's own records."""
        records: list[Record] = []
        for group in groups:
            gid = group.group_id
            keys = dict.fromkeys(self.offsets.remove_group(gid))
            keys.update(dict.fromkeys(self.offsets.pending_keys(gid)))
            records.extend((offset_commit_key(gid, topic, p), None) for topic, p in keys)
            records.extend(group.tombstone_records())  # KIP-848: each kind names its own records
            self.remove_group(group)
            log.info("group %s: %s", gid, what)
        return records

    # -- tenants (tenancy) ------------------------------------------------------------------------

    def delete_tenant_groups(self, tenants: Container[str], partitions: Iterable[int] | None = None) -> int:
        """Delete every group (any state, members or not) of the active partitions (or of
        ``partitions``) whose id carries the prefix of a tenant not in ``tenants``, with its
        offsets; returns how many. A deleted tenant's groups go this way when its deletion reaches
        the metadata image, and again after a load (a tenant deleted while this node was not
        their coordinator), so a tenant created later never sees them. Parked requests of their
        members fail (NOT_COORDINATOR); their connections are closed by then anyway."""
        wanted = None if partitions is None else set(partitions)
        by_partition: dict[int, list[Group]] = {}
        for group in self.groups.values():
            tid = tenant_of_group(group.group_id)
            if tid is None or tid in tenants or (wanted is not None and group.partition not in wanted):
                continue
            if self.serving(group.partition) is not None:
                by_partition.setdefault(group.partition, []).append(group)
        for partition, groups in by_partition.items():
            records = self._delete_group_records(groups, "deleted: its tenant is gone")
            self.persist(partition, records, lambda code, p=partition: code == ErrorCode.none or log.warning(
                "tombstones of deleted tenants' groups in %s-%d not written: %s", OFFSETS_TOPIC, p, code.name))
        return sum(len(g) for g in by_partition.values())

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> tuple[ErrorCode, list[Group]]:
        """Groups of the active partitions, filtered (case-insensitively) by state and type."""
        if not self.active:
            return ErrorCode.coordinator_not_available, []
        state_filter = {s.strip().lower() for s in states}
        type_filter = {t.strip().lower() for t in types}
        out = []
        for g in self.groups.values():
            if self.serving(g.partition) is None or g.is_dead():
                continue
            if state_filter and not g.in_states(state_filter):
                continue
            if type_filter and g.group_type not in type_filter:
                continue
            out.append(g)
        return (ErrorCode.coordinator_load_in_progress if self.any_loading() else ErrorCode.none), out

    def describe_group(self, group_id: str) -> tuple[ErrorCode, ClassicGroup | None]:
        code = self.status(group_id)
        if code != ErrorCode.none:
            return code, None
        group = self.groups.get(group_id)
        if not isinstance(group, ClassicGroup) or group.is_dead():
            return ErrorCode.group_id_not_found, None
        return ErrorCode.none, group

    # -- expiry ---------------------------------------------------------------------------------

    def schedule_expiry(self) -> None:
        def run() -> None:
            try:
                self.cleanup_expired_offsets()
            finally:
                self.schedule_expiry()

        self.timer.schedule(EXPIRY_TIMER_KEY, self.config.offsets_retention_check_interval_ms, run)

    def cleanup_expired_offsets(self) -> int:
        """Tombstone expired offsets and delete Empty groups left without any; returns how many
        offsets expired."""
        now = self.clock.now_ms()
        retention = self.config.offsets_retention_ms
        by_partition: dict[int, list[Record]] = {}
        expired_total = 0
        for group in list(self.groups.values()):
            if self.serving(group.partition) is None:
                continue
            gid = group.group_id
            expired: list[tuple[str, int]] = []
            all_expired = True
            for topic, parts in self.offsets.group_offsets(gid).items():
                if group.is_subscribed_to_topic(topic):
                    all_expired = False
                    continue
                for p, om in parts.items():
                    base = group.offset_expiration_base(om)
                    if base is None or self.offsets.is_pending(gid, topic, p) or self.offsets.is_txn_pending(gid, topic, p):
                        all_expired = False
                        continue
                    due = now >= om.expire_timestamp if om.expire_timestamp >= 0 else now - base >= retention
                    if due:
                        expired.append((topic, p))
                    else:
                        all_expired = False
            records = by_partition.setdefault(group.partition, [])
            for topic, p in expired:
                self.offsets.remove(gid, topic, p)
                records.append((offset_commit_key(gid, topic, p), None))
            if expired:
                log.info("group %s: %d committed offsets expired", gid, len(expired))
            expired_total += len(expired)
            if (
                all_expired
                and group.is_empty()
                and not self.offsets.has_offsets(gid)
                and not self.offsets.has_pending(gid)
                and not self.offsets.has_txn_pending(gid)  # Kafka: an open transaction keeps the group
                and not (isinstance(group, ClassicGroup) and group.pending_join)
            ):
                records.extend(group.tombstone_records())  # KIP-848: each kind names its own records
                self.remove_group(group)
                log.info("group %s: removed (empty, no offsets left)", gid)
        for partition, records in by_partition.items():
            if records:
                self.persist(partition, records, lambda code, p=partition: code == ErrorCode.none or log.warning(
                    "expiry tombstones for %s-%d not written: %s", OFFSETS_TOPIC, p, code.name))
        return expired_total

    def on_topics_deleted(self, topics: Iterable[str]) -> None:
        """Tombstone the committed offsets of deleted topics, and the pending offsets of open
        transactions for them (Kafka's onPartitionsDeleted)."""
        names = set(topics)
        by_partition: dict[int, list[Record]] = {}
        for gid in dict.fromkeys([*self.offsets.groups(), *self.offsets.txn_groups()]):
            group = self.groups.get(gid)
            if group is None or self.serving(group.partition) is None:
                continue
            keys = [(t, p) for t, parts in self.offsets.group_offsets(gid).items() if t in names for p in parts]
            keys += [(t, p) for t, p in self.offsets.txn_keys(gid) if t in names and (t, p) not in keys]
            for topic, p in keys:
                self.offsets.remove(gid, topic, p)
                by_partition.setdefault(group.partition, []).append((offset_commit_key(gid, topic, p), None))
        for partition, records in by_partition.items():
            log.info("%s-%d: %d offsets of deleted topics removed", OFFSETS_TOPIC, partition, len(records))
            self.persist(partition, records, lambda code: None)

    def follow_renamed_topics(self, renames: Mapping[str, str], partitions: Iterable[int] | None = None) -> int:
        """Move the committed offsets of topics renamed ``old`` -> ``renames[old]`` (KIP-37 moves)
        to the new names, in the active partitions (or only ``partitions``); returns how many
        (group, topic, partition) offsets moved.

        One batch per partition of ``__consumer_offsets`` (a replay sees all of it or none): for
        each key under an old name, a commit record under the new name carrying the old key's last
        record as it was (offset, leader epoch, metadata, commit and expire timestamps; a commit
        still in flight counts, as a replay would apply it), then a tombstone for the old key. A
        later record already under the new name (a commit made after the move) wins: the old key
        only gets its tombstone. Memory changes at once, so OffsetFetch of the new name answers the
        moved offsets from the moment the metadata change is seen. Idempotent: nothing is left
        under the old name afterwards. Called when the metadata image renames a topic (same topic
        id), and after each load with the image's former names (``renamed_topics``), for a rename
        this node missed: a crash between the metadata change and this batch, or a partition that
        was loading or led elsewhere."""
        if not renames:
            return 0
        wanted = None if partitions is None else set(partitions)
        by_partition: dict[int, list[tuple[str, str, int]]] = {}
        for gid, topic, p in self.offsets.keys_of_topics(renames):
            group = self.groups.get(gid)
            if group is None or self.serving(group.partition) is None or (wanted is not None and group.partition not in wanted):
                continue
            by_partition.setdefault(group.partition, []).append((gid, topic, p))
        moved = 0
        for partition, keys in by_partition.items():
            # Tombstones first, then the new keys: right for chains and swaps of names too.
            records: list[Record] = [(offset_commit_key(gid, old, p), None) for gid, old, p in keys]
            puts: list[tuple[int, str, str, int, OffsetAndMetadata]] = []
            for gid, old, p in keys:
                new = renames[old]
                value = self.offsets.latest(gid, old, p)
                current = None if new in renames else self.offsets.latest(gid, new, p)
                if value is not None and (current is None or value.record_offset > current.record_offset):
                    puts.append((len(records), gid, new, p, value))
                    records.append((offset_commit_key(gid, new, p), encode_offset_commit_value(OffsetCommitValue(
                        value.offset, value.leader_epoch, value.metadata, value.commit_timestamp, value.expire_timestamp))))
            end = self.persist(partition, records, lambda code, p=partition: code == ErrorCode.none or log.warning(
                "offsets of renamed topics in %s-%d not written: %s", OFFSETS_TOPIC, p, code.name))
            if end is None:
                continue  # not the coordinator any more: the next load of the partition moves them
            base = end - len(records)
            for i, (gid, old, p) in enumerate(keys):
                self.offsets.remove(gid, old, p, base + i)
            for i, gid, new, p, value in puts:
                self.offsets.put(gid, new, p, dataclasses.replace(value, record_offset=base + i))
            moved += len(puts)
            log.info(
                "%s-%d: %d committed offsets follow renamed topics (%s)", OFFSETS_TOPIC, partition, len(puts),
                ", ".join(f"{o} -> {renames[o]}" for o in sorted({k[1] for k in keys})),
            )
        return moved
