"""The replica layer's read path: a Fetch's reads, the leader's and a serving follower's.

Kafka's ``ReplicaManager.fetchMessages`` / ``readFromLog`` / ``findPreferredReadReplica`` and
``Partition.fetchRecords``: :func:`fetch_messages` reads a fetch's partitions, waits for
``min_bytes`` on the purgatory (a follower's fetch session on its session), and answers; the
Fetch handler keeps the consumers' fetch sessions, authorization and quotas, and calls it once.

- :func:`read_from_log` reads each partition once: a consumer up to the high watermark (READ_COMMITTED:
  the last stable offset, with the aborted transactions of what it returns), a follower up to the
  log end. The leader epoch a fetch knows is checked (``Partition.check_leader_epoch``).
- KIP-320 on the leader: a follower whose last fetched epoch ends earlier here is answered with
  where it diverges (:func:`divergence`), and truncates to it (``shoal.replica.fetcher``).
- KIP-392: :func:`preferred_read_replicas` sends a consumer in another rack to a replica in its
  own (``shoal.replica.selector``); :func:`serving_follower` serves a consumer from a follower.
- Pipelined replication: a follower may have several fetches in flight on one connection;
  :class:`ReplicaOrder` lets only the oldest read, and each reads past what an earlier one was sent
  (``Partition.follower_read_offset``).
- Replica fetch sessions (``shoal.replica.sessions``): :func:`changed` is what a session's fetch
  reads besides what it names, :func:`keep_pending` what stays marked after it.

Single-threaded: the event loop.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Collection, Iterable, Mapping, Protocol

from shoal.clock import SYSTEM_CLOCK, Clock
from shoal.config import selector_kind
from shoal.protocol.errors import ErrorCode
from shoal.protocol.regions import Region
from shoal.replica.purgatory import expire
from shoal.replica.selector import ReplicaView, select_read_replica
from shoal.replica.sessions import CachedPartition
from shoal.storage import OffsetOutOfRange

if TYPE_CHECKING:
    from shoal.metadata import MetadataImage, PartitionInfo
    from shoal.replica.manager import ReplicaManager
    from shoal.replica.partition import Partition
    from shoal.replica.sessions import ReplicaSession
    from shoal.storage import LogView

Key = tuple[str, int]


async def fetch_messages(
    replicas: "ReplicaManager", image: MetadataImage, targets: dict[Key, CachedPartition], *, deadline: float, min_bytes: int, max_bytes: int,
    replica_id: int = -1, follower: bool = False, rsession: "ReplicaSession | None" = None, my_seq: int = 0,
    order: ReplicaOrder | None = None, conn_id: str = "", client_rack: str = "", committed: bool = False,
    regions: bool = False,
) -> tuple[dict[tuple[str, int], ReadResult], int, dict[tuple[str, int], int]]:
    """Read ``targets`` (partition -> what the fetch asks of it: offset, byte limit, epochs),
    waiting until ``min_bytes`` are there or ``deadline`` (``replicas.clock.monotonic()`` time) passes (Kafka's
    ``ReplicaManager.fetchMessages``). Returns the results, their total record bytes and the
    preferred read replicas (KIP-392) of the partitions whose consumer should read elsewhere.

    A follower's fetch (``follower``, from ``replica_id``) tells the leader what it has (the high
    watermark and the ISR may move), is held back while its reassignment is over the leader's
    throttle (KIP-73), reads in ``order`` (its connection's pipelined fetches, oldest first) past
    what this leader already sent it on ``conn_id``, and, in a fetch session ``rsession`` (this
    fetch its number ``my_seq``), reads too what changed in the session and waits on it. A
    consumer that sent its ``client_rack`` may be sent to a replica in its rack, and may read
    from a follower; ``committed``: READ_COMMITTED, up to the last stable offset. ``regions``:
    long reads may be file regions, not bytes (zero-copy Fetch on a plaintext connection,
    ``shoal.storage.regions``); the caller sends or closes them."""
    clock = replicas.clock  # the deadline and the timers (a ManualClock's in tests)
    fetch_ms = clock.now_ms()
    if follower:  # replica: what the follower has (its fetch offset) may move the HW / ISR
        replicas.follower_fetched(replica_id, image, targets.items(), fetch_ms, rsession)
    # reassignment (KIP-73): throttled replicas get no records while over the leader's rate
    throttle = replicas.throttle
    throttled = throttle.leader_keys(image, replica_id, targets) if follower else set()
    skip: Any = throttled if throttled and throttle.exceeded("leader") else frozenset()
    # follower fetching (KIP-392): a v11+ consumer that gives its rack may be sent, by the leader,
    # to a replica in that rack (answered at once, no records), and may read from a follower
    from_followers = bool(client_rack)
    preferred = preferred_read_replicas(replicas, image, targets, client_rack) if from_followers else {}
    if preferred:
        skip = frozenset(skip) | preferred.keys()
    # a follower may have several fetches in flight on its connection (pipelined replication,
    # ``shoal.replica.fetch.pipeline.depth``): each reads past what an earlier one was sent
    pipeline = (replica_id, conn_id) if follower else None
    seq = order.take() if order is not None else 0
    try:
        my_turn = order is None or await order.turn(seq, deadline - clock.monotonic(), clock)
        if not my_turn:
            skip = targets.keys()  # an earlier fetch of the connection still waits: no records
        while True:
            if rsession is not None and (more := changed(rsession, targets, my_seq)):
                replicas.follower_fetched(replica_id, image, more.items(), fetch_ms, rsession)
                targets.update(more)
                throttled |= throttle.leader_keys(image, replica_id, more)
                if my_turn and throttled and throttle.exceeded("leader"):
                    skip = throttled
            results, total, must_answer = read_from_log(replicas, targets, max_bytes, follower, skip, from_followers,
                                                        committed, pipeline, regions)
            if must_answer or preferred or total >= min_bytes or clock.monotonic() >= deadline or not (
                    rsession.partitions if rsession is not None else targets):
                break
            if rsession is not None:
                notified = await rsession.wait(deadline - clock.monotonic(), clock)
                if not notified and not rsession.dirty:
                    break
                continue  # what changed meanwhile is read at the top
            notified = await replicas.wait_for_data(list(targets.keys()), deadline - clock.monotonic(), follower)
            if not notified:
                results, total, _ = read_from_log(replicas, targets, max_bytes, follower, skip, from_followers,
                                                  committed, pipeline, regions)
                break
        if rsession is not None:
            keep_pending(rsession, targets, results)
        if pipeline is not None and total:
            for r in results.values():
                if r.records and r.part is not None:
                    r.part.follower_sent(replica_id, pipeline[1], end_offset(r.records))
    finally:
        if order is not None:
            order.done(seq)
    if throttled:
        throttle.record("leader", sum(len(results[k].records or b"") for k in throttled if k in results))
    return results, total, preferred


def count_sent(results: Mapping[Key, ReadResult], follower: bool) -> None:
    """Count what a fetch's answer carries on the partitions it came from (their load counters,
    ``Partition.bytes_out`` for a consumer, ``bytes_replicated`` for a follower or observer): once
    per answer, after the quotas kept it (a throttled consumer's bytes are taken back)."""
    for r in results.values():
        records = r.records
        if records and r.part is not None:
            if follower:
                r.part.bytes_replicated += len(records)
            else:
                r.part.bytes_out += len(records)


def changed(session: ReplicaSession, targets: Collection[Key], mine: int) -> dict[Key, CachedPartition]:
    """The session's partitions that changed here and fetch number ``mine`` does not read yet,
    but for those a later fetch named (it reads them; they stay dirty until it does)."""
    held = session.partitions
    more: dict[Key, CachedPartition] = {}
    for key in session.take_dirty():
        sp = held[key]
        if sp.since > mine:
            session.keep_dirty(key)
        elif key not in targets:
            more[key] = sp
    return more


def keep_pending(session: ReplicaSession, targets: Mapping[Key, CachedPartition],
                 results: Mapping[Key, ReadResult]) -> None:
    """After a session's fetch read ``targets``: the partitions still pending stay dirty, to be
    read (and their follower state updated) at its next fetch; the rest were told and cost
    nothing until they change again. Pending: the follower has not got to the log end (records on
    their way, or held back by a byte limit or a throttle); or it is a sync replica outside the
    ISR (each fetch may let it rejoin, ``Partition._expansion``, as Kafka's walk of the session
    would); or its follower state does not follow this session's clock (it was not led here when
    the fetch arrived, or a new leader epoch reset it); or this leader does not know it as a
    replica yet (a reassignment that adds it: the follower's image had it before this one's, and
    its fetch, at the log end of an idle partition, named the partition once and never again, so
    the replica never joined the ISR and the reassignment never completed)."""
    replica = session.replica_id
    for key, sp in targets.items():
        r = results[key]
        part = r.part
        if part is None or r.code != ErrorCode.none:
            continue
        info = part.info
        f = part.followers.get(replica)
        if (part.log.log_end_offset > sp.fetch_offset
                or (replica not in info.isr and replica in info.replicas and replica not in info.observers)
                or f is None or f.session is not session):
            session.keep_dirty(key)


class PipelinedConnection(Protocol):
    """A follower's connection, as far as its fetches' order is kept on it."""

    replica_order: ReplicaOrder | None


class ReplicaOrder:
    """The Fetch requests of one follower connection, oldest first (pipelined replication): only
    the oldest unanswered one reads, the others wait for their turn. Otherwise a fetch arriving
    between an append and the wake-up of the fetch parked before it would take the new records,
    and its answer would wait behind the earlier one, which finds nothing left: the follower would
    get them out of order (and the earlier answer only at its ``max_wait``)."""

    __slots__ = ("issued", "open", "turns")

    def __init__(self) -> None:
        self.issued = 0
        self.open: dict[int, None] = {}  # unanswered, in order
        self.turns: dict[int, asyncio.Future[None]] = {}

    @staticmethod
    def of(conn: "PipelinedConnection | None") -> "ReplicaOrder | None":
        """The order of ``conn``'s fetches (kept on the connection), or None without one."""
        if conn is None:
            return None
        order = conn.replica_order
        if order is None:
            order = conn.replica_order = ReplicaOrder()
        return order

    def take(self) -> int:
        self.issued += 1
        self.open[self.issued] = None
        return self.issued

    def _head(self) -> int:
        return next(iter(self.open), 0)

    async def turn(self, seq: int, timeout: float, clock: Clock = SYSTEM_CLOCK) -> bool:
        """Wait until ``seq`` is the oldest unanswered, at most ``timeout`` s of ``clock``; True
        if it is."""
        if self._head() == seq:
            return True
        if timeout <= 0:
            return False
        fut = self.turns[seq] = asyncio.get_running_loop().create_future()
        timer = clock.call_later(timeout, expire, fut)
        try:
            await fut
        finally:
            timer.cancel()
            self.turns.pop(seq, None)
        return self._head() == seq

    def done(self, seq: int) -> None:
        self.open.pop(seq, None)
        fut = self.turns.get(self._head())
        if fut is not None and not fut.done():
            fut.set_result(None)


@dataclass(slots=True)
class ReadResult:
    code: ErrorCode
    records: bytes | Region | None = None  # a Region: zero copy (shoal.protocol.regions)
    hwm: int = -1
    log_start: int = -1
    lso: int = -1
    aborted: list[tuple[int, int]] | None = None  # read_committed: aborted transactions in the records
    pinfo: PartitionInfo | None = None  # the partition's when this broker does not lead it
    diverging: tuple[int, int] | None = None  # a follower's (epoch, end offset) to truncate to
    part: Partition | None = None  # the Partition its records come from (a leader's, or a follower serving a consumer)


def preferred_read_replicas(replicas: "ReplicaManager", image: MetadataImage, targets: Mapping[Key, CachedPartition],
                            client_rack: str) -> dict[Key, int]:
    """KIP-392 on the leader: for the partitions this broker leads, the replica in the consumer's
    rack it should read from instead (``shoal.replica.selector``); absent when the leader stays."""
    if not client_rack:
        return {}
    kind = selector_kind(replicas.config().get("replica.selector.class"))
    if kind != "rack-aware":
        return {}
    out: dict[tuple[str, int], int] = {}
    for key, sp in targets.items():
        topic = image.topic(key[0])
        if topic is None or not 0 <= key[1] < len(topic.partitions):
            continue
        pinfo = topic.partitions[key[1]]
        part = replicas.leader(key[0], pinfo)
        if part is None:
            continue

        def rack(node: int) -> str | None:
            b = image.brokers.get(node)
            return b.rack if b is not None else None

        others = [ReplicaView(node, rack(node), f.log_end_offset, f.caught_up_ms)
                  for node, f in part.followers.items()
                  if (node in pinfo.isr or node in pinfo.observers) and node in image.brokers
                  and sp.fetch_offset >= part.log.log_start_offset]
        chosen = select_read_replica(kind, client_rack, ReplicaView(replicas.node_id, rack(replicas.node_id),
                                                                    part.log.log_end_offset), others, sp.fetch_offset)
        if chosen != replicas.node_id:
            out[key] = chosen
    return out


def read_from_log(replicas: "ReplicaManager", targets: Mapping[Key, CachedPartition], max_bytes: int, follower: bool,
                  skip: Collection[Key] = frozenset(), from_followers: bool = False, committed: bool = False,
                  pipeline: tuple[int, str] | None = None,
                  regions: bool = False) -> tuple[dict[Key, ReadResult], int, bool]:
    """Read every partition once. Returns results, total bytes, and whether to answer at once.
    A consumer reads up to the high watermark (``committed``, READ_COMMITTED: the last stable
    offset, with the aborted transactions of what it returns), a follower up to the log end; ``skip``: partitions
    answered without records (a throttled reassignment, a preferred read replica elsewhere).
    ``from_followers`` (KIP-392, a v11+ consumer that sent its rack): a partition this broker
    follows (or observes) is served too, up to the high watermark this follower knows.
    ``pipeline``: a replica's fetch, ``(replica id, connection)``: read past what this leader
    already sent that replica on that connection (``Partition.follower_read_offset``).
    ``regions``: a long read may be a file region (``LogView.read``)."""
    image = replicas.image()
    results: dict[tuple[str, int], ReadResult] = {}
    total = 0
    must_answer = False
    remaining = max_bytes
    for key, sp in targets.items():
        name, index = key
        topic = image.topic(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            results[key] = ReadResult(ErrorCode.unknown_topic_or_partition)
            must_answer = True
            continue
        pinfo = topic.partitions[index]
        part = replicas.leader(name, pinfo)
        if part is None and from_followers:
            part = serving_follower(replicas, name, pinfo)
        if part is None:  # cluster: another broker leads it
            results[key] = ReadResult(ErrorCode.not_leader_or_follower, pinfo=pinfo)
            must_answer = True
            continue
        # KIP-320: the client's leader is not this one (a follower serving judges by the image)
        code = part.check_leader_epoch(sp.current_leader_epoch,
                                       pinfo.leader_epoch if part.info.leader != replicas.node_id else None)
        if code != ErrorCode.none:
            results[key] = ReadResult(code)
            must_answer = True
            continue
        plog = part.log
        hwm = plog.high_watermark
        lso = plog.last_stable_offset
        r = ReadResult(ErrorCode.none, hwm=hwm, log_start=plog.log_start_offset, lso=lso)
        upto = plog.log_end_offset if follower else lso if committed else hwm
        if follower and sp.last_fetched_epoch >= 0 and sp.fetch_offset > plog.log_start_offset:
            diverging = divergence(plog, sp.last_fetched_epoch, sp.fetch_offset)
            if diverging is not None:
                r.diverging = diverging
                results[key] = r
                must_answer = True
                continue
        limit = min(sp.max_bytes, remaining)
        start = sp.fetch_offset
        r.part = part
        if pipeline is not None:
            start = part.follower_read_offset(pipeline[0], pipeline[1], start)
        if key not in skip and start < upto and (limit > 0 or total == 0):
            try:
                info = plog.read(start, max(limit, 0), max_offset=upto, min_one_batch=total == 0,
                                 regions=regions)
            except OffsetOutOfRange:
                r.code = ErrorCode.offset_out_of_range
                must_answer = True
            else:
                if info.records:
                    r.records = info.records
                    total += len(info.records)
                    remaining -= len(info.records)
                    if committed:
                        r.aborted = plog.aborted_transactions(sp.fetch_offset, end_offset(info.records))
        elif sp.fetch_offset > plog.log_end_offset or sp.fetch_offset < plog.log_start_offset:
            r.code = ErrorCode.offset_out_of_range
            must_answer = True
        results[key] = r
    return results, total, must_answer


_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def end_offset(records: bytes | Region) -> int:
    """The offset after the last of the whole batches ``records`` (as the log returns them):
    a walk over the batch lengths only, about 0.1 ms for a MiB of 1 KiB batches (a file region
    knows it: the log read it)."""
    if isinstance(records, Region):
        return records.end_offset
    length = _I32.unpack_from
    pos, n = 0, len(records)
    while True:
        nxt = pos + length(records, pos + 8)[0] + 12  # baseOffset int64, batchLength int32
        if nxt >= n:
            break
        pos = nxt
    return _I64.unpack_from(records, pos)[0] + length(records, pos + 23)[0] + 1  # + lastOffsetDelta + 1


def serving_follower(replicas: "ReplicaManager", name: str, pinfo: PartitionInfo) -> Partition | None:
    """The hosted follower (or observer) of a partition led by another live broker, to serve a
    consumer's fetch (KIP-392); None when this broker holds no replica of it, leads it (a leader
    not ready yet answers NOT_LEADER_OR_FOLLOWER, as before), or has not followed that leader yet."""
    if pinfo.leader < 0 or pinfo.leader == replicas.node_id or replicas.node_id not in pinfo.replicas:
        return None
    part = replicas.partition(name, pinfo.partition)
    if part is None or part.log is None or part.is_leader or part.info.leader != pinfo.leader:
        return None
    return part


def divergence(plog: LogView, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
    """KIP-320 on the leader: where a follower whose last batch has ``last_fetched_epoch`` and
    whose log ends at ``fetch_offset`` diverges from this log, or None when it does not. The
    follower's epoch ends earlier here, is unknown here (above every epoch here: the answer is this
    log's latest epoch and end), or is older than every epoch here: it must truncate to the
    answer, bounded by its own end of that epoch (``shoal.replica.fetcher``)."""
    epoch, end = plog.end_offset_for_epoch(last_fetched_epoch)
    if epoch < 0 or end < 0:  # an epoch above every epoch here: agree up to the end of the latest
        latest = plog.latest_epoch
        return (latest, plog.log_end_offset) if latest >= 0 else (last_fetched_epoch, plog.log_start_offset)
    if epoch < last_fetched_epoch or end < fetch_offset:
        return epoch, end
    return None
