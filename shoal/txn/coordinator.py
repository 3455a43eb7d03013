"""The transaction coordinator: transactional ids of the ``__transaction_state`` partitions this
broker leads (Kafka's ``TransactionCoordinator`` + ``TransactionStateManager``).

One ``TransactionCoordinator`` per broker (``services.txn``). Like the group coordinator (both are
``shoal.groups.runtime.InternalTopicCoordinator`` s) it owns a partition of ``__transaction_state``
while this node leads it: it replays the partition's log to rebuild each transactional id's last
state (LOADING: requests get COORDINATOR_LOAD_IN_PROGRESS), then serves them; when leadership
moves away (or its leader epoch changes) it drops them (NOT_COORDINATOR). A transactional id lives in partition ``abs(hashCode(id)) % partitions``,
Kafka's formula. The partition's leader epoch is the coordinator epoch stamped on markers.

Every state change is prepared (``shoal.txn.metadata``), appended to the partition (before the
first ``await``), and takes effect only once the high watermark passes it (acks=all); until then
other requests for the id get CONCURRENT_TRANSACTIONS. EndTxn answers once PrepareCommit /
PrepareAbort is committed; the markers are then written (``shoal.txn.markers``) and Complete* is
written after the last one. The producer's next AddPartitionsToTxn / AddOffsetsToTxn, which
usually arrives meanwhile, waits for Complete* (up to ``COMPLETION_WAIT_S``) instead of getting
CONCURRENT_TRANSACTIONS and a client retry backoff (20 ms and more). A load finds transactions in PrepareCommit / PrepareAbort (the
previous coordinator died or moved before writing Complete*) and sends their markers again.

Timers: every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` Ongoing
transactions older than their timeout are aborted with the epoch bumped (the producer is fenced,
as in Kafka); every ``transaction.remove.expired.transaction.cleanup.interval.ms`` ids idle (Empty,
CompleteCommit, CompleteAbort) for ``transactional.id.expiration.ms`` get a tombstone.

The coordinator knows physical transactional ids only (a tenant's ``tx`` is ``lkc-3f9a2c_tx``; the
handlers translate), and physical topic names.

Not thread-safe; everything runs on the loop that called :meth:`start` (the replay in a worker
thread).

KIP-890 part 2 (transaction version 2): :meth:`TransactionCoordinator.end_txn_v2` (EndTxn v5)
bumps the epoch at every commit and abort; :meth:`TransactionCoordinator.verify` with ``add``
adds the partitions of a Produce v12 / TxnOffsetCommit v5.

Deviations from Kafka: ListTransactions' duration filter counts from the transaction's start; writes to
``__transaction_state`` wait for its high watermark (acks=all) but, like the group coordinator's,
do not check its ``min.insync.replicas`` (set to ``transaction.state.log.min.isr`` capped by the
replication factor, which is itself capped by the brokers up when the topic is created).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable

from shoal.clock import Clock
from shoal.groups.records import partition_for
from shoal.groups.runtime import InternalTopicCoordinator, OwnedPartition
from shoal.groups.storage import CoordinatorLog
from shoal.metadata.features import FEATURES, TRANSACTION_VERSION
from shoal.protocol.errors import ErrorCode
from shoal.txn.markers import MarkerWriter
from shoal.txn.metadata import (
    MAX_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TransactionMetadata, Transit, epoch_exhausted,
)
from shoal.txn.records import (
    TXN_STATE_TOPIC, RecordFormatError, TxnLogValue, TxnState, decode_key, decode_value, encode_key, encode_value,
)

if TYPE_CHECKING:
    from shoal.groups import GroupCoordinator
    from shoal.groups.runtime import CoordinatorContext
    from shoal.metadata import MetadataImage

log = logging.getLogger("shoal.txn")

ADD_PARTITIONS_TO_TXN = 24
VERIFY_VERSION = 4  # AddPartitionsToTxn from a broker: batched, verify_only (KIP-890)
ADD_VERSION = 5  # AddPartitionsToTxn from a broker adding a Produce v12's partitions (KIP-890 part 2)
# How long an AddPartitionsToTxn / AddOffsetsToTxn arriving while the previous transaction's markers
# and Complete* are still being written waits for them before answering CONCURRENT_TRANSACTIONS.
# The producer's next transaction starts right after EndTxn's answer (given once Prepare* is
# written), so it usually finds the id in Prepare*; librdkafka retries after retry.backoff.ms and
# Kafka's Java client after 20 ms, much longer than the markers take on a healthy cluster.
COMPLETION_WAIT_S = 0.5


@dataclass(frozen=True)
class TxnConfig:
    max_timeout_ms: int = 900000
    id_expiration_ms: int = 604800000
    num_partitions: int = 50
    replication_factor: int = 1
    min_isr: int = 2
    segment_bytes: int = 104857600
    abort_interval_ms: int = 10000
    expire_interval_ms: int = 3600000
    request_timeout_ms: int = 30000

    @classmethod
    def from_broker_config(cls, cfg) -> "TxnConfig":
        def get(name: str, default: int) -> int:
            try:
                v = cfg.get(name)
            except KeyError:
                return default
            return default if v is None else int(v)

        return cls(
            max_timeout_ms=get("transaction.max.timeout.ms", 900000),
            id_expiration_ms=get("transactional.id.expiration.ms", 604800000),
            num_partitions=get("transaction.state.log.num.partitions", 50),
            replication_factor=get("transaction.state.log.replication.factor", 1),
            min_isr=get("transaction.state.log.min.isr", 2),
            segment_bytes=get("transaction.state.log.segment.bytes", 104857600),
            abort_interval_ms=get("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000),
            expire_interval_ms=get("transaction.remove.expired.transaction.cleanup.interval.ms", 3600000),
            request_timeout_ms=get("request.timeout.ms", 30000),
        )


TRANSACTION_VERSION_FEATURE = TRANSACTION_VERSION  # shoal.metadata.features
MAX_TRANSACTION_VERSION = FEATURES[TRANSACTION_VERSION].max_level


def transaction_version(cfg, image: "MetadataImage | None" = None) -> int:
    """The finalized ``transaction.version`` feature level: the cluster's (``image.features``,
    UpdateFeatures, ``shoal features``), else the broker's ``shoal.transaction.version``.
    KIP-890 part 2's requests (Produce v12, TxnOffsetCommit v5, EndTxn v5) act as transaction
    version 2 only at level 2; below, they are served as the versions before them."""
    level = None if image is None else image.features.levels.get(TRANSACTION_VERSION_FEATURE)
    return configured_transaction_version(cfg) if level is None else int(level)


def configured_transaction_version(cfg) -> int:
    """``shoal.transaction.version``: the level a cluster without a finalized one starts with."""
    try:
        v = cfg.get("shoal.transaction.version")
    except KeyError:
        return MAX_TRANSACTION_VERSION
    return MAX_TRANSACTION_VERSION if v is None else int(v)


@dataclass(frozen=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionCoordinator(InternalTopicCoordinator[TxnConfig, "dict[str, TxnLogValue | None]"]):
    TOPIC = TXN_STATE_TOPIC
    RF_CONFIG = "transaction.state.log.replication.factor"
    KEYS = "transactional ids"
    NAME = "transaction coordinator"
    logger = log
    RELOAD_ON_NEW_LEADER_EPOCH = True  # the leader epoch is the coordinator epoch stamped on markers
    SHRINK_RF_TO_LIVE_BROKERS = True

    def __init__(
        self,
        *,
        clock: Clock,
        log: CoordinatorLog,
        config: TxnConfig | Callable[[], TxnConfig],
        next_producer_id: Callable[[], Awaitable[int]],
        markers: MarkerWriter | None = None,
        num_partitions: int | None = None,
        node_id: int = 0,
    ) -> None:
        super().__init__(clock=clock, log=log, config=config, num_partitions=num_partitions, node_id=node_id)
        self.next_producer_id = next_producer_id
        self.markers = markers
        self.txns: dict[str, TransactionMetadata] = {}
        # transactional id -> set once its Complete* is written (or the markers gave up): an
        # AddPartitionsToTxn / AddOffsetsToTxn of the next transaction waits on it
        self._completing: dict[str, asyncio.Event] = {}
        self.completion_wait_s = COMPLETION_WAIT_S

    # -- construction for a broker ------------------------------------------------------------

    @classmethod
    def for_context(cls, ctx: "CoordinatorContext", groups: "GroupCoordinator",
                    next_producer_id: Callable[[], Awaitable[int]]) -> "TransactionCoordinator":
        """The broker's: ``groups`` is told of the offsets its markers commit or abort."""
        c = cls._for_context(ctx, TxnConfig.from_broker_config, next_producer_id=next_producer_id)
        c.markers = MarkerWriter(ctx, groups, timeout_s=lambda: c.config.request_timeout_ms / 1000.0)
        return c

    @property
    def write_timeout_s(self) -> float:
        return self.config.request_timeout_ms / 1000.0

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Follow metadata (load the partitions this node leads) and start the timers.
        ``__transaction_state`` is created at the first FindCoordinator for a transaction
        (:meth:`request_topic`), as Kafka does."""
        self._follow_metadata()
        self._timers = [
            asyncio.create_task(self._every(lambda: self.config.abort_interval_ms, self.abort_timed_out), name="txn-abort"),
            asyncio.create_task(self._every(lambda: self.config.expire_interval_ms, self.expire_ids), name="txn-expire"),
        ]

    async def stop(self) -> None:
        await super().stop()
        if self.markers is not None:
            await self.markers.close()

    async def _every(self, interval_ms: Callable[[], int], fn: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(max(interval_ms(), 10) / 1000.0)
            try:
                fn()
            except Exception:
                log.exception("transaction coordinator timer failed")

    # -- the topic ------------------------------------------------------------------------------

    def _topic_size(self) -> tuple[int, int]:
        cfg = self.config
        return cfg.num_partitions, cfg.replication_factor

    def _topic_configs(self, replication_factor: int) -> dict[str, str]:
        cfg = self.config
        return {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "min.insync.replicas": str(max(1, min(cfg.min_isr, replication_factor))),
            "segment.bytes": str(cfg.segment_bytes),
            "unclean.leader.election.enable": "false",
        }

    # -- partitions -----------------------------------------------------------------------------

    def status(self, transactional_id: str) -> ErrorCode:
        code = super().status(transactional_id)
        if code == ErrorCode.coordinator_not_available and self.active:
            self.request_topic()  # created at first use
        return code

    def _read_partition(self, partition: int) -> dict[str, TxnLogValue | None]:
        out: dict[str, TxnLogValue | None] = {}
        for offset, key, value in self.log.replay(partition):
            if key is None:
                continue
            try:
                tid = decode_key(key)
                out[tid] = None if value is None else decode_value(value)
            except RecordFormatError as e:
                log.warning("%s-%d offset %d: skipping a record: %s", TXN_STATE_TOPIC, partition, offset, e)
        return out

    def _apply_loaded(self, partition: int, loaded: dict[str, TxnLogValue | None]) -> None:
        for tid, value in loaded.items():
            if value is not None and value.state is not TxnState.DEAD:
                self.txns[tid] = TransactionMetadata.from_log(tid, value)

    def _on_loaded(self, partition: int, owned: OwnedPartition, loaded: dict[str, TxnLogValue | None],
                   started: float) -> None:
        """Transactions found in PrepareCommit / PrepareAbort get their markers (again)."""
        resend = [self.txns[tid] for tid, v in loaded.items()
                  if v is not None and v.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)]
        n = sum(1 for v in loaded.values() if v is not None)
        if n:
            log.info("loaded %s-%d (coordinator epoch %d): %d transactional ids, %d transactions to complete",
                     TXN_STATE_TOPIC, partition, owned.coordinator_epoch, n, len(resend))
        for md in resend:
            commit = md.state is TxnState.PREPARE_COMMIT
            self._start_completion(md, md.prepare_complete(self.clock.now_ms()), commit, partition, owned)

    def _drop_partition(self, partition: int) -> int:
        if not self.num_partitions:
            dropped = list(self.txns)
        else:
            dropped = [t for t in self.txns if self.partition_for(t) == partition]
        for t in dropped:
            del self.txns[t]
        return len(dropped)

    def _still(self, partition: int, load_epoch: int, md: TransactionMetadata | None = None) -> bool:
        return self._still_owned(partition, load_epoch) and (md is None or self.txns.get(md.transactional_id) is md)

    # -- writing --------------------------------------------------------------------------------

    async def _write(self, md: TransactionMetadata, transit: Transit) -> ErrorCode:
        """Append ``transit`` (now) and wait for acks=all; on success ``md`` takes it, on failure
        its pending transition is dropped (a fencing abort keeps its bumped epoch)."""
        tid = md.transactional_id
        partition = self.partition_for(tid)
        owned = self.serving(partition)
        if owned is None:
            md.abort_pending()
            return ErrorCode.not_coordinator
        value = transit.log_value()
        res = self._append(partition, [(encode_key(tid), None if value is None else encode_value(value, transit.log_version))])
        code = res if isinstance(res, ErrorCode) else await self._committed(partition, *res)
        if not self._still(partition, owned.load_epoch, md):
            return ErrorCode.not_coordinator
        if code != ErrorCode.none:
            log.info("transactional id %s: writing %s failed: %s", tid, transit.state.kafka_name, code.name)
            if md.pending is transit.state:
                if transit.fence and transit.producer_epoch != md.producer_epoch:
                    md.fence_failed(transit)
                else:
                    md.abort_pending()
            return code
        md.complete(transit)
        if transit.state is TxnState.DEAD:
            del self.txns[tid]
        return ErrorCode.none

    # -- InitProducerId -------------------------------------------------------------------------

    def valid_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.config.max_timeout_ms

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH) -> InitResult:
        if not transactional_id:
            return InitResult(ErrorCode.invalid_request)
        if not self.valid_timeout(timeout_ms):
            return InitResult(ErrorCode.invalid_transaction_timeout)
        expected = None if producer_id == NO_PRODUCER_ID and producer_epoch == NO_PRODUCER_EPOCH else (producer_id, producer_epoch)
        for _attempt in range(3):
            code = self.status(transactional_id)
            if code != ErrorCode.none:
                return InitResult(code)
            md = self.txns.get(transactional_id)
            if md is None:
                pid = await self.next_producer_id()
                code = self.status(transactional_id)
                if code != ErrorCode.none:
                    return InitResult(code)
                md = self.txns.setdefault(transactional_id, TransactionMetadata(
                    transactional_id, pid, timeout_ms=timeout_ms, last_update_ms=self.clock.now_ms()))
            if md.pending_in_progress:
                return InitResult(ErrorCode.concurrent_transactions)
            if expected is not None and not (
                md.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == md.producer_id
                or (expected[0] == md.last_producer_id and epoch_exhausted(expected[1]))
            ):
                return InitResult(ErrorCode.producer_fenced)
            state = md.state
            if state in (TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT):
                return InitResult(ErrorCode.concurrent_transactions)
            now = self.clock.now_ms()
            if state is TxnState.ONGOING:
                # Fence the current producer: abort its transaction with a bumped epoch, and let
                # the new one retry (it gets the epoch bumped once more when the abort is done).
                transit = md.prepare_fence_abort(now)
                code = await self._end_prepared(md, transit, commit=False)
                return InitResult(code if code != ErrorCode.none else ErrorCode.concurrent_transactions)
            if state not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                log.error("transactional id %s in state %s at InitProducerId", transactional_id, state.kafka_name)
                return InitResult(ErrorCode.unknown_server_error)
            if md.epoch_exhausted and (expected is None or expected[1] == md.producer_epoch):
                new_pid = await self.next_producer_id()
                if md.pending_in_progress or self.txns.get(transactional_id) is not md or md.state is not state:
                    continue  # something happened meanwhile: decide again
                transit = md.prepare_producer_id_rotation(new_pid, timeout_ms, now, expected is not None)
            else:
                transit = md.prepare_increment_epoch(timeout_ms, None if expected is None else expected[1], now)
                if isinstance(transit, ErrorCode):
                    return InitResult(transit)
            code = await self._write(md, transit)
            if code != ErrorCode.none:
                return InitResult(code)
            log.info("initialized transactional id %s with producer id %d epoch %d", transactional_id,
                     transit.producer_id, transit.producer_epoch)
            return InitResult(ErrorCode.none, transit.producer_id, transit.producer_epoch)
        return InitResult(ErrorCode.concurrent_transactions)

    def _producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TransactionMetadata | ErrorCode:
        """The id's metadata when this coordinator serves it and the producer is its current one."""
        if not transactional_id:
            return ErrorCode.invalid_request
        code = self.status(transactional_id)
        if code != ErrorCode.none:
            return code
        md = self.txns.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if md.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        return md

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[tuple[str, int]], client_transaction_version: int = 0) -> ErrorCode:
        """AddPartitionsToTxn / AddOffsetsToTxn of a client (``client_transaction_version`` 0), or
        a broker adding the partitions of a Produce v12 / TxnOffsetCommit v5 (2, KIP-890 part 2)."""
        rotating = self.txns.get(transactional_id)
        if (rotating is not None and rotating.next_producer_id == producer_id and producer_epoch == 0
                and rotating.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)):
            # the new producer id of an EndTxn v5 past an exhausted epoch: it is the id's once Complete* is written
            if not await self._wait_completion(transactional_id):
                return ErrorCode.concurrent_transactions
        md = self._producer(transactional_id, producer_id, producer_epoch)
        if isinstance(md, ErrorCode):
            return md
        if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            # the previous transaction's markers are being written: wait for its Complete*
            # (bounded) rather than send the producer into a retry backoff; then decide afresh
            if transactional_id in self._completing:
                if not await self._wait_completion(transactional_id):
                    return ErrorCode.concurrent_transactions
                md = self._producer(transactional_id, producer_id, producer_epoch)
                if isinstance(md, ErrorCode):
                    return md
        if md.pending_in_progress or md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions
        added = set(partitions)
        if md.state is TxnState.ONGOING and added <= md.partitions:
            return ErrorCode.none
        return await self._write(md, md.prepare_add_partitions(added, self.clock.now_ms(), client_transaction_version))

    async def _wait_completion(self, transactional_id: str) -> bool:
        """Wait (up to ``completion_wait_s``) for the markers and Complete* of the id's transaction
        being completed, if any; False when that took too long."""
        done = self._completing.get(transactional_id)
        if done is None:
            return True
        try:
            await asyncio.wait_for(done.wait(), self.completion_wait_s)
        except asyncio.TimeoutError:
            return False
        return True

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890 part 1 (AddPartitionsToTxn v4 ``verify_only``): is each partition in the
        producer's ongoing transaction? Writes nothing."""
        parts = list(partitions)
        md = self._producer(transactional_id, producer_id, producer_epoch)
        if isinstance(md, ErrorCode):
            return {tp: md for tp in parts}
        if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return {tp: ErrorCode.concurrent_transactions for tp in parts}
        return {tp: ErrorCode.none if (md.state is TxnState.ONGOING and tp in md.partitions)
                else ErrorCode.invalid_txn_state for tp in parts}

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Iterable[tuple[str, int]], add: bool = False) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890 part 1 for Produce: :meth:`verify_partitions` here when this broker is the id's
        coordinator, else AddPartitionsToTxn v4 ``verify_only`` to the coordinator broker. Errors
        as the coordinator answers them (the produce handler maps them for the producer).
        ``add`` (KIP-890 part 2, Produce v12 / TxnOffsetCommit v5: Kafka's AddPartitionsToTxnManager
        with ``addPartition``): the partitions are added to the transaction instead, as a version
        2 transaction (AddPartitionsToTxn v5 without ``verify_only`` to a remote coordinator)."""
        parts = list(partitions)
        if self.status(transactional_id) != ErrorCode.none and self._ctx is not None:
            node = self._coordinator_node(transactional_id)
            if node is not None and node != self.node_id and self.markers is not None:
                return await self._verify_remote(node, transactional_id, producer_id, producer_epoch, parts, add)
        if add:
            code = await self.add_partitions(transactional_id, producer_id, producer_epoch, parts, 2)
            return {tp: code for tp in parts}
        return self.verify_partitions(transactional_id, producer_id, producer_epoch, parts)

    def _coordinator_node(self, transactional_id: str) -> int | None:
        assert self._ctx is not None
        topic = self._ctx.metadata.image.topic(TXN_STATE_TOPIC)
        if topic is None or not topic.partitions:
            return None
        leader = topic.partitions[partition_for(transactional_id, len(topic.partitions))].leader
        return leader if leader >= 0 else None

    async def _verify_remote(self, node: int, transactional_id: str, producer_id: int, producer_epoch: int,
                             parts: list[tuple[str, int]], add: bool = False) -> dict[tuple[str, int], ErrorCode]:
        from shoal.net.requests import add_partitions_to_txn

        assert self.markers is not None
        version = ADD_VERSION if add else VERIFY_VERSION
        body = add_partitions_to_txn(version, transactional_id, producer_id, producer_epoch, parts, verify_only=not add)
        try:
            resp = await self.markers.channel.send(node, ADD_PARTITIONS_TO_TXN, version, body)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.info("cannot verify transactional id %s with coordinator %d: %s", transactional_id, node, e)
            return {tp: ErrorCode.coordinator_not_available for tp in parts}
        out = {tp: ErrorCode(resp.error_code) if resp.error_code else ErrorCode.unknown_server_error for tp in parts}
        for r in resp.results_by_transaction:
            for t in r.topic_results:
                for p in t.results_by_partition:
                    out[(t.name, p.partition_index)] = ErrorCode(p.partition_error_code)
        return out

    # -- EndTxn ---------------------------------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        md = self._producer(transactional_id, producer_id, producer_epoch)
        if isinstance(md, ErrorCode):
            return md
        if md.pending_in_progress:
            return ErrorCode.concurrent_transactions
        state = md.state
        if state is TxnState.ONGOING:
            return await self._end_prepared(md, md.prepare_end(commit, self.clock.now_ms()), commit)
        if state is TxnState.COMPLETE_COMMIT:
            return ErrorCode.none if commit else ErrorCode.invalid_txn_state
        if state is TxnState.COMPLETE_ABORT:
            return ErrorCode.none if not commit else ErrorCode.invalid_txn_state
        if state is TxnState.PREPARE_COMMIT:
            return ErrorCode.concurrent_transactions if commit else ErrorCode.invalid_txn_state
        if state is TxnState.PREPARE_ABORT:
            return ErrorCode.concurrent_transactions if not commit else ErrorCode.invalid_txn_state
        return ErrorCode.invalid_txn_state  # Empty

    async def end_txn_v2(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         commit: bool) -> InitResult:
        """EndTxn v5 (transaction version 2, KIP-890 part 2; Kafka's ``endTransaction``): the
        Prepare* written bumps the epoch (a new producer id past an exhausted epoch), and the
        answer carries the producer id and epoch the client goes on with. A retry of the last
        EndTxn (the epoch before the bump) is answered NONE with the current ones; an abort of an
        id with no ongoing transaction is written too (the client may not know what its
        produces added)."""
        next_pid = NO_PRODUCER_ID
        for _attempt in range(2):
            if not transactional_id:
                return InitResult(ErrorCode.invalid_request)
            code = self.status(transactional_id)
            if code != ErrorCode.none:
                return InitResult(code)
            md = self.txns.get(transactional_id)
            if md is None:
                return InitResult(ErrorCode.invalid_producer_id_mapping)
            decision = end_v2_decision(md, producer_id, producer_epoch, commit)
            if isinstance(decision, ErrorCode):
                if decision == ErrorCode.none:
                    return InitResult(ErrorCode.none, *md.client_identity())
                return InitResult(decision)
            if md.epoch_exhausted and next_pid == NO_PRODUCER_ID:
                next_pid = await self.next_producer_id()  # then decide afresh: the id may have moved on
                continue
            transit = md.prepare_end_v2(commit, self.clock.now_ms(), next_pid if md.epoch_exhausted else NO_PRODUCER_ID)
            code = await self._end_prepared(md, transit, commit)
            if code != ErrorCode.none:
                return InitResult(code)
            if transit.next_producer_id != NO_PRODUCER_ID:
                return InitResult(ErrorCode.none, transit.next_producer_id, 0)
            return InitResult(ErrorCode.none, transit.producer_id, transit.producer_epoch)
        return InitResult(ErrorCode.concurrent_transactions)

    async def _end_prepared(self, md: TransactionMetadata, transit: Transit, commit: bool) -> ErrorCode:
        """Write PrepareCommit / PrepareAbort; once committed, start the markers."""
        partition = self.partition_for(md.transactional_id)
        code = await self._write(md, transit)
        if code != ErrorCode.none:
            return code
        owned = self._owned.get(partition)
        if owned is None:
            return ErrorCode.not_coordinator
        self._start_completion(md, md.prepare_complete(self.clock.now_ms()), commit, partition, owned)
        return ErrorCode.none

    def _start_completion(self, md: TransactionMetadata, complete: Transit, commit: bool, partition: int,
                          owned: OwnedPartition) -> None:
        done = asyncio.Event()
        self._completing[md.transactional_id] = done
        self._spawn(self._complete(md, complete, commit, partition, owned.coordinator_epoch, owned.load_epoch, done))

    async def _complete(self, md: TransactionMetadata, complete: Transit, commit: bool, partition: int,
                        coordinator_epoch: int, load_epoch: int, done: asyncio.Event) -> None:
        """:meth:`_send_markers`, then wake the requests waiting for the transaction to finish."""
        try:
            await self._send_markers(md, complete, commit, partition, coordinator_epoch, load_epoch)
        finally:
            done.set()
            if self._completing.get(md.transactional_id) is done:
                del self._completing[md.transactional_id]

    async def _send_markers(self, md: TransactionMetadata, complete: Transit, commit: bool, partition: int,
                            coordinator_epoch: int, load_epoch: int) -> None:
        """Markers in every partition of the transaction, then Complete* (retried while this
        coordinator still owns the id). ``md.pending`` holds Complete* meanwhile."""
        def still() -> bool:
            return self._still(partition, load_epoch, md)

        parts = sorted(md.partitions)
        if parts and self.markers is not None:
            done = await self.markers.send(md.producer_id, md.producer_epoch, coordinator_epoch, commit, parts, still)
            if not done:
                if still() and md.pending is complete.state:
                    md.abort_pending()  # fenced by a newer epoch: leave it in Prepare*, as Kafka does
                return
        for _attempt in range(100):
            if not still():
                return
            md.pending = complete.state  # _write may have dropped it on a failed attempt
            code = await self._write(md, complete)
            if code == ErrorCode.none:
                log.debug("transactional id %s: %s", md.transactional_id, complete.state.kafka_name)
                return
            if code == ErrorCode.not_coordinator:
                return
            md.pending = complete.state
            await asyncio.sleep(0.2)
        log.error("transactional id %s: cannot write %s", md.transactional_id, complete.state.kafka_name)

    # -- timers ---------------------------------------------------------------------------------

    def timed_out(self, now_ms: int) -> list[TransactionMetadata]:
        """Ongoing transactions older than their timeout, with no transition pending."""
        return [
            md for md in self.txns.values()
            if md.state is TxnState.ONGOING and not md.pending_in_progress and md.start_ms + md.timeout_ms < now_ms
            and self.status(md.transactional_id) == ErrorCode.none
        ]

    def abort_timed_out(self) -> int:
        """Abort (with an epoch bump, fencing the producer) every timed-out transaction."""
        now = self.clock.now_ms()
        n = 0
        for md in self.timed_out(now):
            log.info("transactional id %s: transaction of producer %d epoch %d timed out after %d ms; aborting it",
                     md.transactional_id, md.producer_id, md.producer_epoch, md.timeout_ms)
            self._spawn(self._end_prepared(md, md.prepare_fence_abort(now), commit=False))
            n += 1
        return n

    def expired(self, now_ms: int) -> list[TransactionMetadata]:
        limit = self.config.id_expiration_ms
        return [
            md for md in self.txns.values()
            if md.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
            and not md.pending_in_progress and md.last_update_ms + limit <= now_ms
            and self.status(md.transactional_id) == ErrorCode.none
        ]

    def expire_ids(self) -> int:
        """Tombstones for transactional ids idle longer than transactional.id.expiration.ms."""
        now = self.clock.now_ms()
        n = 0
        for md in self.expired(now):
            log.info("transactional id %s expired (idle since %d)", md.transactional_id, md.last_update_ms)
            self._spawn(self._write(md, md.prepare_dead()))
            n += 1
        return n

    # -- Describe / List ------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        if not self.active:
            return ErrorCode.coordinator_not_available, None
        if not transactional_id:
            return ErrorCode.invalid_request, None
        code = self.status(transactional_id)
        if code != ErrorCode.none:
            return code, None
        md = self.txns.get(transactional_id)
        if md is None or md.state is TxnState.DEAD:
            return ErrorCode.transactional_id_not_found, None
        return ErrorCode.none, md

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
             min_duration_ms: int = -1) -> tuple[ErrorCode, list[TransactionMetadata], list[str]]:
        """(error, transactions, unknown state filters), Kafka's ``listTransactionStates``."""
        if not self.active:
            return ErrorCode.coordinator_not_available, [], []
        wanted, unknown = set(), []
        for s in states:
            st = TxnState.by_name(s)
            if st is None:
                unknown.append(s)
            else:
                wanted.add(st)
        pids = set(producer_ids)
        if states and not wanted:
            return ErrorCode.none, [], unknown
        code = ErrorCode.coordinator_load_in_progress if self.any_loading() else ErrorCode.none
        now = self.clock.now_ms()
        out = []
        for md in self.txns.values():
            if md.state is TxnState.DEAD:
                continue
            if wanted and md.state not in wanted:
                continue
            if pids and md.producer_id not in pids:
                continue
            if min_duration_ms >= 0 and not (md.start_ms >= 0 and now - md.start_ms >= min_duration_ms):
                continue
            out.append(md)
        return code, sorted(out, key=lambda m: m.transactional_id), unknown


def end_v2_decision(md: TransactionMetadata, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode | bool:
    """What EndTxn v5 does with an id (Kafka's ``endTransaction`` under transaction version 2):
    True to write Prepare* (with the epoch bumped), ErrorCode.none for a retry of the EndTxn that
    already ended the transaction (answered with the current producer id and epoch), another
    ErrorCode to refuse. A retry names the epoch before the bump, or the last epoch of the
    previous producer id after a rotation."""
    retry_on_overflow = (md.last_producer_id == producer_id and producer_epoch == MAX_EPOCH - 1
                         and md.producer_epoch == 0)
    retry_on_bump = md.producer_epoch == producer_epoch + 1
    state = md.state
    if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        valid = retry_on_bump
    elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        valid = retry_on_bump or retry_on_overflow or producer_epoch == md.producer_epoch
    else:
        valid = producer_epoch == md.producer_epoch
    is_retry = retry_on_bump or retry_on_overflow
    if md.producer_id != producer_id and not retry_on_overflow:
        return ErrorCode.invalid_producer_id_mapping
    if not valid:
        return ErrorCode.producer_fenced
    if md.pending_in_progress:
        return ErrorCode.concurrent_transactions
    if state is TxnState.ONGOING:
        return True
    if state is TxnState.COMPLETE_COMMIT:
        if commit:
            return ErrorCode.none if is_retry else ErrorCode.invalid_txn_state
        return ErrorCode.invalid_txn_state if is_retry else True
    if state is TxnState.COMPLETE_ABORT:
        if not commit:
            return ErrorCode.none if is_retry else True
        return ErrorCode.invalid_txn_state
    if state is TxnState.PREPARE_COMMIT:
        return ErrorCode.concurrent_transactions if commit else ErrorCode.invalid_txn_state
    if state is TxnState.PREPARE_ABORT:
        return ErrorCode.concurrent_transactions if not commit else ErrorCode.invalid_txn_state
    if state is TxnState.EMPTY:
        return ErrorCode.invalid_txn_state if commit else True
    return ErrorCode.invalid_txn_state
