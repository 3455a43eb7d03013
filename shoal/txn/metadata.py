"""One transactional id's state and its transitions (Kafka's ``TransactionMetadata``), pure.

A transition is prepared (``prepare_*`` returns a :class:`Transit`, the state to be, and marks the
metadata with ``pending``), written to ``__transaction_state``, and then either completed
(:meth:`TransactionMetadata.complete`) once the write is committed, or dropped
(:meth:`TransactionMetadata.abort_pending`) when it failed. While a transition is pending, other
operations on the id answer CONCURRENT_TRANSACTIONS.

States, as Kafka's::

    Empty / CompleteCommit / CompleteAbort --AddPartitions--> Ongoing
    Ongoing --EndTxn--> PrepareCommit | PrepareAbort --markers written--> CompleteCommit | CompleteAbort
    Empty / Complete* --EndTxn v5 abort--> PrepareAbort (no partitions, no markers)
    Ongoing --InitProducerId of a new instance, timeout--> PrepareAbort with the epoch bumped
            (Kafka passes through PrepareEpochFence, which is never written)
    Empty / Complete* --InitProducerId--> Empty with epoch + 1 (a new producer id when exhausted)
    Empty / Complete* --idle for transactional.id.expiration.ms--> Dead (tombstone)

Transaction version 2 (KIP-890 part 2, EndTxn v5): Prepare* carries the producer epoch + 1 (the
markers are written with it, fencing the transaction's producer at that epoch everywhere) and the
client gets it in EndTxn's answer; an exhausted epoch takes it to Short.MAX_VALUE with a new
producer id in ``next_producer_id``, which Complete* switches to at epoch 0. Such transitions are
written as TransactionLogValue v1 (``client_transaction_version`` 2, previous / next producer id).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from shoal.protocol.errors import ErrorCode
from shoal.txn.records import TxnLogValue, TxnState, group_partitions

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 2**15 - 1


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``TransactionMetadata.isEpochExhausted``: the last epoch a producer id may use is
    Short.MAX_VALUE - 1, so the coordinator can still fence it once."""
    return epoch >= MAX_EPOCH - 1


class IllegalTransition(Exception):
    """A transition Kafka's coordinator calls illegal (a bug, not a client's error)."""


@dataclass(frozen=True, slots=True)
class Transit:
    """The state a transition leads to."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    start_ms: int
    last_update_ms: int
    client_transaction_version: int = 0
    next_producer_id: int = NO_PRODUCER_ID
    fence: bool = False  # an abort that fences the producer (a new instance, a timeout)

    @property
    def log_version(self) -> int:
        """TransactionLogValue v1 for transaction version 2 transactions, v0 (as before) otherwise."""
        return 1 if self.client_transaction_version >= 2 else 0

    def log_value(self) -> TxnLogValue | None:
        """The record to write (None: the tombstone of a Dead id)."""
        if self.state is TxnState.DEAD:
            return None
        return TxnLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            timeout_ms=self.timeout_ms,
            state=self.state,
            partitions=group_partitions(self.partitions),
            last_update_ms=self.last_update_ms,
            start_ms=self.start_ms,
            previous_producer_id=self.last_producer_id,
            next_producer_id=self.next_producer_id,
            client_transaction_version=self.client_transaction_version,
        )


_VALID_PREVIOUS = {
    TxnState.EMPTY: {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.ONGOING: {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.PREPARE_COMMIT: {TxnState.ONGOING},
    TxnState.PREPARE_ABORT: {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.COMPLETE_COMMIT: {TxnState.PREPARE_COMMIT},
    TxnState.COMPLETE_ABORT: {TxnState.PREPARE_ABORT},
    TxnState.DEAD: {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.PREPARE_EPOCH_FENCE: {TxnState.ONGOING},
}


@dataclass(eq=False)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 60000
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    pending: TxnState | None = None
    failed_epoch_fence: bool = False  # an epoch fence whose write failed: do not bump again
    client_transaction_version: int = 0  # 2: the last transaction ended with EndTxn v5
    next_producer_id: int = NO_PRODUCER_ID  # Prepare* of a version 2 transaction that rotates the producer id

    @classmethod
    def from_log(cls, transactional_id: str, v: TxnLogValue) -> "TransactionMetadata":
        return cls(
            transactional_id=transactional_id,
            producer_id=v.producer_id,
            last_producer_id=v.previous_producer_id,
            producer_epoch=v.producer_epoch,
            timeout_ms=v.timeout_ms,
            state=v.state,
            partitions={(t, p) for t, ps in v.partitions for p in ps},
            start_ms=v.start_ms,
            last_update_ms=v.last_update_ms,
            client_transaction_version=v.client_transaction_version,
            next_producer_id=v.next_producer_id,
        )

    @property
    def pending_in_progress(self) -> bool:
        return self.pending is not None

    @property
    def epoch_exhausted(self) -> bool:
        return epoch_exhausted(self.producer_epoch)

    # -- preparing ------------------------------------------------------------------------------

    def _transit(self, state: TxnState, **changes) -> Transit:
        if self.pending is not None:
            raise IllegalTransition(f"{self.transactional_id}: {state.kafka_name} while {self.pending.kafka_name} is pending")
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}")
        base = Transit(
            producer_id=self.producer_id,
            last_producer_id=self.last_producer_id,
            producer_epoch=self.producer_epoch,
            last_producer_epoch=self.last_producer_epoch,
            timeout_ms=self.timeout_ms,
            state=state,
            partitions=frozenset(self.partitions),
            start_ms=self.start_ms,
            last_update_ms=self.last_update_ms,
            client_transaction_version=self.client_transaction_version,
            next_producer_id=self.next_producer_id,
        )
        self.pending = state
        return replace(base, **changes)

    def prepare_increment_epoch(self, timeout_ms: int, expected_epoch: int | None, now_ms: int) -> Transit | ErrorCode:
        """InitProducerId on an Empty / Complete* id whose epoch is not exhausted."""
        if self.epoch_exhausted:
            raise IllegalTransition(f"{self.transactional_id}: epoch {self.producer_epoch} is exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch  # a retry of the last bump
        else:
            return ErrorCode.producer_fenced
        return self._transit(
            TxnState.EMPTY, producer_epoch=epoch, last_producer_epoch=last, timeout_ms=timeout_ms,
            partitions=frozenset(), start_ms=-1, last_update_ms=now_ms,
        )

    def prepare_producer_id_rotation(self, new_producer_id: int, timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> Transit:
        """InitProducerId when the epoch is exhausted: a new producer id at epoch 0."""
        return self._transit(
            TxnState.EMPTY, producer_id=new_producer_id, last_producer_id=self.producer_id, producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms,
        )

    def prepare_fence_abort(self, now_ms: int) -> Transit:
        """Ongoing, fenced by a new instance or timed out (Kafka's PrepareEpochFence, then
        PrepareAbort): the transaction is aborted with the epoch bumped by one, so the old
        producer's requests and batches are fenced. After a fence whose write failed the epoch in
        memory is already bumped: it is not bumped again (Kafka's ``hasFailedEpochFence``)."""
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTransition(f"{self.transactional_id}: cannot fence epoch {self.producer_epoch}")
        epoch = self.producer_epoch if self.failed_epoch_fence else self.producer_epoch + 1
        return self._transit(TxnState.PREPARE_ABORT, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH,
                             last_update_ms=now_ms, next_producer_id=NO_PRODUCER_ID, fence=True)

    def fence_failed(self, t: Transit) -> None:
        """The write of a fencing abort failed: keep the bumped epoch (never returned to a client)."""
        self.pending = None
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        self.failed_epoch_fence = True

    def prepare_add_partitions(self, added, now_ms: int, client_transaction_version: int = 0) -> Transit:
        """``client_transaction_version`` 2: the partitions are added by a broker for a Produce v12 /
        TxnOffsetCommit v5 (the transaction is then written as version 2); 0: by the client's
        AddPartitionsToTxn / AddOffsetsToTxn, as before."""
        ctv = client_transaction_version
        if self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            return self._transit(TxnState.ONGOING, partitions=frozenset(added), start_ms=now_ms, last_update_ms=now_ms,
                                 client_transaction_version=ctv)
        return self._transit(TxnState.ONGOING, partitions=frozenset(self.partitions | set(added)), last_update_ms=now_ms,
                             client_transaction_version=ctv)

    def prepare_end(self, commit: bool, now_ms: int) -> Transit:
        return self._transit(TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, last_update_ms=now_ms)

    def prepare_end_v2(self, commit: bool, now_ms: int, next_producer_id: int = NO_PRODUCER_ID) -> Transit:
        """EndTxn v5 (Kafka's ``prepareAbortOrCommit`` with transaction version 2): the epoch + 1,
        the current one kept as the last; ``next_producer_id`` when the epoch is exhausted. An
        abort of an Empty / Complete* id (a transaction whose partitions, if any, the client does
        not know) has no partitions and starts now."""
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTransition(f"{self.transactional_id}: cannot bump epoch {self.producer_epoch}")
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        extra = {}
        if self.state is not TxnState.ONGOING:
            extra = {"partitions": frozenset(), "start_ms": now_ms}
        return self._transit(state, producer_epoch=self.producer_epoch + 1, last_producer_epoch=self.producer_epoch,
                             last_update_ms=now_ms, client_transaction_version=2, next_producer_id=next_producer_id,
                             **extra)

    def prepare_complete(self, now_ms: int) -> Transit:
        state = TxnState.COMPLETE_COMMIT if self.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        if self.client_transaction_version >= 2 and self.next_producer_id != NO_PRODUCER_ID:
            return self._transit(state, partitions=frozenset(), last_update_ms=now_ms, producer_id=self.next_producer_id,
                                 last_producer_id=self.producer_id, producer_epoch=0, next_producer_id=NO_PRODUCER_ID)
        return self._transit(state, partitions=frozenset(), last_update_ms=now_ms, next_producer_id=NO_PRODUCER_ID)

    def client_identity(self) -> tuple[int, int]:
        """The producer id and epoch a version 2 client uses once the current Prepare* / Complete*
        is done (EndTxn v5's answer)."""
        if self.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) and self.next_producer_id != NO_PRODUCER_ID:
            return self.next_producer_id, 0
        return self.producer_id, self.producer_epoch

    def prepare_dead(self) -> Transit:
        return self._transit(TxnState.DEAD, partitions=frozenset())

    # -- finishing ------------------------------------------------------------------------------

    def complete(self, t: Transit) -> None:
        """The write of ``t`` is committed: take its state."""
        if self.pending is not t.state:
            raise IllegalTransition(f"{self.transactional_id}: completing {t.state.kafka_name}, pending {self.pending}")
        self.producer_id = t.producer_id
        self.last_producer_id = t.last_producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.timeout_ms = t.timeout_ms
        self.state = t.state
        self.partitions = set(t.partitions)
        self.start_ms = t.start_ms
        self.last_update_ms = t.last_update_ms
        self.client_transaction_version = t.client_transaction_version
        self.next_producer_id = t.next_producer_id
        self.pending = None
        self.failed_epoch_fence = False

    def abort_pending(self) -> None:
        self.pending = None
