"""One hosted partition on one broker: its role, ISR, leader epoch, high watermark and local log.

Kafka's ``Partition`` is the model. A ``Partition`` exists on every broker that is one of the
partition's replicas (``PartitionInfo.replicas``); the metadata image says who leads, in which
epoch, and who is in the ISR, and :meth:`Partition.update` follows it. The rest of the broker
reaches the partition's log through this object: only the replica layer writes it
(``PartitionStorage``); handlers and other layers read it through :attr:`Partition.view`
(``LogView``).

Invariants:

- the high watermark moves in one place, :meth:`maybe_increment_high_watermark`, and only
  forward while this broker stays leader in one epoch: it is the smallest log end offset over the
  ISR (this leader's own included; a member that has not fetched yet in this epoch holds it back);
- a partition whose ISR is this leader alone (or empty: metadata written before ISRs were kept)
  commits every appended batch at once: the high watermark is the log end offset;
- a follower learns its high watermark from the leader (``observe_leader_high_watermark``), never
  above its own log end.

Single-threaded: called on the event loop only (the log's own lock covers its worker threads).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from shoal.metadata import PartitionInfo
from shoal.placement.promotion import observer_isr
from shoal.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from shoal.replica.sessions import ReplicaSession
    from shoal.storage import AppendInfo, LogView, PartitionStorage

log = logging.getLogger(__name__)


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's ``Replica``): its log end offset as of its
    last fetch, and when it last was caught up (the ISR shrink clock)."""

    log_end_offset: int = -1  # unknown until it fetches in this leader epoch
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    # (leader log end, ms) of its recent fetches, oldest first: with several fetches in flight
    # (a pipelining follower) the one whose log end the follower now has may be a few back
    recent: list[tuple[int, int]] = field(default_factory=list)
    # a pipelining follower: what this leader has already sent it on its connection ``sent_conn``
    # and not yet seen acknowledged by a fetch offset (``follower_read_offset``)
    sent_conn: str = ""
    sent_end: int = -1
    # a sync replica outside the ISR that is a round trip behind under a steady write load: the
    # high watermark waits for it until then (``update_follower_fetch``), and it may not be made
    # to wait again before ``join_retry_ms``
    joining_until_ms: int = -1
    join_retry_ms: int = -1
    # a fetch session (``shoal.replica.sessions``) in which this follower fetched the partition up
    # to the log end: caught up as of that session's latest fetch, for as long as nothing is
    # appended (``_end_moved``) and the partition stays in the session (``forget_session``)
    session: Any = None

    @property
    def caught_up_ms(self) -> int:
        """When this follower was last caught up (the ISR shrink clock): its own clock, or its
        session's latest fetch while it is caught up there on an idle partition."""
        s = self.session
        return self.last_caught_up_ms if s is None else max(self.last_caught_up_ms, s.last_fetch_ms)

    def settle(self) -> None:
        """Stop following the session's clock: caught up as of its latest fetch, no later."""
        s = self.session
        if s is not None:
            self.last_caught_up_ms = max(self.last_caught_up_ms, s.last_fetch_ms)
            self.session = None


RECENT_FETCHES = 16
JOIN_WAIT_MIN_MS = 1000  # how long at least the high watermark may wait for a joining replica
JOIN_MAX_BEHIND_MS = 1000  # a replica further behind than this (in time) is not waited for


class Partition:
    __slots__ = ("topic", "index", "node_id", "log", "info", "followers", "pending_isr", "_now_ms", "_on_progress",
                 "bytes_in", "bytes_out", "bytes_replicated")

    def __init__(
        self,
        topic: str,
        index: int,
        node_id: int,
        log: "PartitionStorage",
        info: PartitionInfo,
        on_progress: Callable[["Partition", bool], None],
        now_ms: Callable[[], int],
    ) -> None:
        self.topic = topic
        self.index = index
        self.node_id = node_id
        self.log = log
        self.info = info
        self.followers: dict[int, FollowerState] = {}
        # An ISR change sent to the metadata store and not yet seen in the image (Kafka's
        # PendingExpandIsr / PendingShrinkIsr): one at a time.
        self.pending_isr: tuple[int, ...] | None = None
        self._now_ms = now_ms
        # (partition, high watermark moved): wakes fetchers and acks=all producers
        self._on_progress = on_progress
        # Load counters (bytes since this object was made; the balancer's per-partition load,
        # shoal.cluster.load, reads them): appended as leader, sent to consumers (a follower
        # serving them too, KIP-392), sent to followers and observers. Plain ints on the hot path.
        self.bytes_in = 0
        self.bytes_out = 0
        self.bytes_replicated = 0
        self._become()
        self.maybe_increment_high_watermark()

    def __repr__(self) -> str:
        i = self.info
        return f"Partition({self.topic}-{self.index} leader={i.leader} epoch={i.leader_epoch} isr={list(i.isr)})"

    # -- role ------------------------------------------------------------------------------

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.index

    @property
    def is_leader(self) -> bool:
        return self.info.leader == self.node_id

    @property
    def leader_epoch(self) -> int:
        return self.info.leader_epoch

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def view(self) -> "LogView":
        """The log, read-only: what handlers and other layers read (offsets, sizes, epochs,
        producers, timestamp lookups); only this layer writes it, through this object."""
        return self.log

    def _sole_member(self) -> bool:
        isr = self.info.isr
        return not isr or isr == (self.node_id,)

    def check_leader_epoch(self, known: int, epoch: int | None = None) -> ErrorCode:
        """KIP-320 (Kafka's ``Partition.checkCurrentLeaderEpoch``): the leader epoch a client or
        follower knows (``known``, -1 when it sent none) against this partition's (or ``epoch``,
        the caller's image's, when given): FENCED_LEADER_EPOCH when older, UNKNOWN_LEADER_EPOCH
        when newer. The one check Fetch, ListOffsets and OffsetsForLeaderEpoch use."""
        if epoch is None:
            epoch = self.info.leader_epoch
        if known < 0 or known == epoch:
            return ErrorCode.none
        return ErrorCode.fenced_leader_epoch if known < epoch else ErrorCode.unknown_leader_epoch

    def enough_isr(self, min_isr: int) -> bool:
        """``min.insync.replicas`` (Kafka's ``inSyncReplicaCount >= minIsr``), checked before an
        acks=all append (NOT_ENOUGH_REPLICAS) and again when the high watermark reaches it
        (NOT_ENOUGH_REPLICAS_AFTER_APPEND). An empty ISR has no member, so it is never enough,
        as in Kafka (``min.insync.replicas`` is at least 1)."""
        return len(self.info.isr) >= min_isr

    def update(self, info: PartitionInfo, log: "PartitionStorage") -> None:
        """Follow the image: a new leader or epoch resets what this leader knows of followers."""
        old = self.info
        self.log = log
        self.info = info
        if info.leader != old.leader or info.leader_epoch != old.leader_epoch:
            self._become()
            self._on_progress(self, True)  # acks=all waiters of the old role answer now
        elif info.replicas != old.replicas and self.is_leader:
            # a reassignment adds or removes replicas: what is known of those that stay is kept
            # (resetting it would hold the high watermark back until each fetched again)
            now, known = self._now_ms(), self.followers
            self.followers = {r: known.get(r) or FollowerState(last_caught_up_ms=now)
                              for r in info.replicas if r != self.node_id}
        if info.partition_epoch != old.partition_epoch or info.leader_epoch != old.leader_epoch:
            self.pending_isr = None  # committed (or overtaken by another change)
        self.maybe_increment_high_watermark()

    def _become(self) -> None:
        """Take the role the image gives (Kafka's ``makeLeader`` / ``makeFollower``). A leader
        records where its epoch starts in the log's epoch cache (so followers can find where they
        diverge) and gives every follower a full ``replica.lag.time.max.ms`` from now (Kafka
        starts their caught-up clocks at the leadership change)."""
        if self.is_leader and self.info.leader_epoch > self.log.latest_epoch:
            self.log.assign_epoch_start_offset(self.info.leader_epoch)
        now = self._now_ms()
        self.followers = (
            {r: FollowerState(last_caught_up_ms=now) for r in self.info.replicas if r != self.node_id}
            if self.is_leader else {}
        )

    # -- leader ----------------------------------------------------------------------------

    def append_as_leader(self, records: bytearray | bytes, now_ms: int, *, client: bool = True) -> "AppendInfo":
        """Append a producer's (or the coordinator's) batches in this leader epoch; the caller
        checked that this broker leads. Raises what ``PartitionLog.append`` raises."""
        info = self.log.append(records, now_ms=now_ms, leader_epoch=self.info.leader_epoch, client=client)
        if not info.duplicate:
            self.bytes_in += len(records)
            self._end_moved()
            self.maybe_increment_high_watermark(appended=True)
        return info

    def append_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, now_ms: int
    ) -> "AppendInfo":
        """Append an end-transaction marker (WriteTxnMarkers, or the local coordinator) in this
        leader epoch; the caller checked that this broker leads. The high watermark and the
        purgatories progress as for ``append_as_leader``; the last stable offset passes the
        transaction once the high watermark passes the marker. Raises what
        ``PartitionLog.append_marker`` raises."""
        info = self.log.append_marker(
            producer_id, producer_epoch, coordinator_epoch, commit, now_ms=now_ms, leader_epoch=self.info.leader_epoch
        )
        self._end_moved()
        self.maybe_increment_high_watermark(appended=True)
        return info

    def delete_records(self, offset: int) -> int:
        """DeleteRecords on the leader (Kafka's ``Partition.deleteRecordsOnLeader``): move the log
        start to ``offset`` (-1: the high watermark); returns the new log start (the low
        watermark). Raises ``OffsetOutOfRange`` above the high watermark."""
        plog = self.log
        return plog.delete_records_before(plog.high_watermark if offset == -1 else offset)

    def flush_due(self, now_ms: int) -> bool:
        """The flush policy: whether the records appended here must be fsynced before the write
        is acknowledged (the topic's flush.messages or flush.ms is due, or a segment rolled;
        Kafka's ``UnifiedLog.append`` flush). Never, with the defaults (Long.MAX: the page cache
        and replication carry durability); the log manager's periodic flush applies the same
        bounds to every log, followers' included."""
        return self.log.flush_due(now_ms)

    async def flush_if_due(self, now_ms: int) -> None:
        """fsync, in a worker thread, if :meth:`flush_due`: before answering a producer (or a
        coordinator's write)."""
        if self.log.flush_due(now_ms):
            await asyncio.to_thread(self.log.maybe_flush, now_ms)

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def maybe_increment_high_watermark(self, *, appended: bool = False) -> bool:
        """Move the high watermark to the smallest log end offset over the ISR; True if it moved.
        ``appended``: new data arrived (wake fetchers waiting for it even when the HW stays)."""
        plog = self.log
        old = plog.high_watermark
        if self.is_leader:
            new = plog.log_end_offset
            members = self.maximal_isr()
            joining = self._joining(members)
            if joining or not self._sole_member():
                for r in (*members, *joining):
                    if r == self.node_id:
                        continue
                    f = self.followers.get(r)
                    new = min(new, f.log_end_offset if f is not None and f.log_end_offset >= 0 else old)
        else:
            new = old
        moved = new > old
        if moved:
            plog.high_watermark = new
        if moved or appended:
            self._on_progress(self, moved)
        return moved

    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the high watermark must respect: while an expansion is in flight the new member
        counts already (it is caught up); while a shrink is, the members leaving still do."""
        pending = self.pending_isr
        if pending is None:
            return self.info.isr
        return self.info.isr + tuple(r for r in pending if r not in self.info.isr)

    def _end_moved(self) -> None:
        """The log end moved (an append): a follower caught up through its fetch session's clock
        is caught up as of the session's latest fetch, not later (``FollowerState.settle``); its
        next fetch of the new records is judged by Kafka's rule again."""
        for f in self.followers.values():
            if f.session is not None:
                f.settle()

    def forget_session(self, replica_id: int, session: ReplicaSession) -> None:
        """The partition left ``session`` (forgotten by the follower, or the session closed)."""
        f = self.followers.get(replica_id)
        if f is not None and f.session is session:
            f.settle()

    def update_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                              session: ReplicaSession | None = None) -> tuple[int, ...] | None:
        """A follower fetched from ``fetch_offset``: it has every offset below it (Kafka's
        ``updateFollowerFetchState``). It is caught up as of now when it asked for the log end,
        or as of its previous fetch when it has what the log end was then. The high watermark
        may move. Returns the ISR to propose when this follower may join it, else None.
        ``session``: the fetch session (``shoal.replica.sessions``) the fetch came in: a
        follower at the log end stays caught up by the session's clock while the partition is
        idle, without being named again; its ``last_fetch_ms`` must still be that of the
        session's previous fetch here (the caller moves it after)."""
        f = self.followers.get(replica_id)
        if f is None or not self.is_leader:
            return None
        f.settle()
        leo = self.log.log_end_offset
        f.log_end_offset = min(fetch_offset, leo)
        recent = f.recent
        had_at = -1  # the time of the latest fetch whose log end this follower now has
        if fetch_offset >= leo:
            f.last_caught_up_ms = had_at = now_ms
            f.session = session
            recent.clear()
        else:
            # Kafka's rule (caught up as of the previous fetch when it has what the log end was
            # then), over the last few fetches: a pipelining follower's fetch offset answers the
            # fetch sent a round trip ago, not the one just before it
            i = len(recent)
            while i and recent[i - 1][0] > fetch_offset:
                i -= 1
            if i:
                had_at = recent[i - 1][1]
                f.last_caught_up_ms = max(f.last_caught_up_ms, had_at)
                del recent[:i]
            elif len(recent) >= RECENT_FETCHES:
                del recent[0]
        recent.append((leo, now_ms))
        f.last_fetch_ms = now_ms
        if had_at >= 0 and f.log_end_offset < self.log.high_watermark:
            self._hold_for(replica_id, f, now_ms, had_at)
        self.maybe_increment_high_watermark()
        return self._expansion(replica_id, f)

    def _hold_for(self, replica_id: int, f: FollowerState, now_ms: int, had_at: int) -> None:
        """A sync replica outside the ISR has everything this log held a moment ago (at
        ``had_at``: at least the high watermark of then), but not the high watermark of now: it
        is one round trip behind, and under a steady write load (the high watermark moving with
        the replicas close by) it would stay behind for ever, never in sync by Kafka's rule (its
        log end at the high watermark). So the high watermark waits for it (acks=all waits one
        round trip more) until it is, for a few of those round trips, at least
        ``JOIN_WAIT_MIN_MS``; if it does not get there (cut off again), not again for ten times
        that. Only for a replica at most ``JOIN_MAX_BEHIND_MS`` behind: one catching up from
        further back joins by Kafka's rule, or once it is this close. Kafka's rule still holds
        when the replica joins; only the time it takes under load changes."""
        if (replica_id in self.info.isr or replica_id in self.info.observers or now_ms < f.join_retry_ms
                or f.joining_until_ms > now_ms or now_ms - had_at > JOIN_MAX_BEHIND_MS):
            return
        wait = max(JOIN_WAIT_MIN_MS, 4 * (now_ms - had_at))
        f.joining_until_ms = now_ms + wait
        f.join_retry_ms = now_ms + 10 * wait

    def _joining(self, members: tuple[int, ...]) -> list[int]:
        """The replicas the high watermark waits for besides ``members`` (:meth:`_hold_for`)."""
        now = -1
        out = []
        for r, f in self.followers.items():
            if f.joining_until_ms >= 0 and r not in members:
                if now < 0:
                    now = self._now_ms()
                if f.joining_until_ms > now:
                    out.append(r)
                else:
                    f.joining_until_ms = -1  # expired (or joined)
        return out

    def follower_read_offset(self, replica_id: int, conn: str, fetch_offset: int) -> int:
        """Where to read a follower's fetch from: its fetch offset, or, for a follower with
        several fetches in flight on connection ``conn``, past what this leader already sent it
        there (a pipelined fetch was sent before the earlier answer arrived; the follower checks
        that every answer starts at its log end and reconnects when one does not)."""
        f = self.followers.get(replica_id)
        if f is not None and f.sent_conn == conn and fetch_offset < f.sent_end <= self.log.log_end_offset:
            return f.sent_end
        return fetch_offset

    def follower_sent(self, replica_id: int, conn: str, end_offset: int) -> None:
        """An answer to ``replica_id`` on ``conn`` carries the log up to ``end_offset``."""
        f = self.followers.get(replica_id)
        if f is not None:
            f.sent_conn, f.sent_end = conn, end_offset

    def _expansion(self, replica_id: int, f: FollowerState) -> tuple[int, ...] | None:
        """Kafka's ``isFollowerInSync`` for a replica outside the ISR: it has everything up to
        the high watermark (and at least one offset of this leader's epoch, when there is one).
        An observer (``replica.placement``) never joins this way: it replicates asynchronously,
        and enters the ISR only by automatic promotion (:meth:`promotion`)."""
        if replica_id in self.info.isr or replica_id in self.info.observers or self.pending_isr is not None:
            return None
        if f.log_end_offset < self.log.high_watermark:
            return None
        return self.info.isr + (replica_id,)

    def promotion(self, policy: str | None, min_isr: int, now_ms: int, lag_ms: int) -> tuple[int, ...] | None:
        """The ISR promoting or demoting observers under the topic's ``observerPromotionPolicy``
        (``shoal.placement.promotion.observer_isr``), or None. A replica outside the ISR counts as caught
        up as it would to join the ISR (``_expansion``'s test: it has everything up to the high
        watermark) and only while it fetches (caught up within ``lag_ms``)."""
        if not self.is_leader or not self.info.observers or self.pending_isr is not None:
            return None
        hw = self.log.high_watermark
        caught_up = {
            r for r, f in self.followers.items()
            if r not in self.info.isr and f.last_fetch_ms >= 0 and f.log_end_offset >= hw
            and now_ms - f.caught_up_ms <= lag_ms
        }
        return observer_isr(policy, isr=self.info.isr or (self.node_id,), sync_replicas=self.info.sync_replicas,
                            observers=self.info.observers, caught_up=caught_up, leader=self.node_id,
                            min_isr=min_isr)

    def shrink(self, now_ms: int, lag_ms: int) -> tuple[int, ...] | None:
        """The ISR without the followers not caught up for ``lag_ms`` (Kafka's
        ``getOutOfSyncReplicas``), or None when all are in sync or a change is in flight."""
        if self.is_leader and any(f.joining_until_ms >= 0 for f in self.followers.values()):
            self.maybe_increment_high_watermark()  # a joining replica's wait may be over
        if not self.is_leader or self.pending_isr is not None or self._sole_member():
            return None
        out = [
            r for r in self.info.isr
            if r != self.node_id and now_ms - self.followers.get(r, FollowerState()).caught_up_ms > lag_ms
        ]
        if not out:
            return None
        return tuple(r for r in self.info.isr if r not in out)

    # -- follower --------------------------------------------------------------------------

    def append_as_follower(self, records: bytes | bytearray | memoryview, now_ms: int) -> None:
        """Append the leader's batches unchanged (Kafka's ``appendRecordsToFollowerOrFutureReplica``).
        An empty log (a new replica, started at the leader's log start) whose first batch holds
        its start but begins below it (DeleteRecords cut inside a batch) starts again at that
        batch's base offset, as Kafka's does; the leader's log start is learnt after
        (:meth:`observe_leader_log_start`). Raises what ``PartitionLog.append_as_follower`` raises."""
        from shoal.storage.log import UnexpectedAppendOffset

        plog = self.log
        try:
            plog.append_as_follower(records, now_ms=now_ms)
        except UnexpectedAppendOffset as e:
            end = plog.log_end_offset
            last = e.first_offset + int.from_bytes(bytes(records[23:27]), "big", signed=True)  # lastOffsetDelta
            if not (end == plog.log_start_offset and e.first_offset < end <= last):
                raise
            log.info("%s-%d: the leader's first batch starts at %d, below this empty log's start %d: starting there",
                     self.topic, self.index, e.first_offset, end)
            self.truncate_fully(e.first_offset)
            plog.append_as_follower(records, now_ms=now_ms)

    def truncate_to(self, offset: int) -> None:
        """A follower cuts its log at ``offset`` (divergence, or ahead of the leader); at or past
        the end too: it drops an empty epoch taken there."""
        self.log.truncate_to(offset)

    def truncate_fully(self, offset: int) -> None:
        """A follower empties its log and starts again at ``offset`` (behind the leader's log start)."""
        self.log.truncate_fully_and_start_at(offset)

    def observe_leader_log_start(self, leader_log_start: int) -> None:
        """A follower follows the leader's log start (its DeleteRecords or retention; Kafka's
        ``LeaderOffsetIncremented``), never past its own high watermark."""
        plog = self.log
        if plog.log_start_offset < leader_log_start <= plog.high_watermark:
            plog.delete_records_before(leader_log_start)

    def observe_leader_high_watermark(self, leader_high_watermark: int) -> None:
        """A follower's high watermark: the leader's, capped at this log's end."""
        new = min(leader_high_watermark, self.log.log_end_offset)
        if new > self.log.high_watermark:
            self.log.high_watermark = new
            self._on_progress(self, True)
