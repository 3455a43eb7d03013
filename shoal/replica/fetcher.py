"""Followers: fetch from leaders with the Fetch API, as Kafka's replica fetchers do.

For every partition this broker follows, one :class:`ReplicaFetcher` per (leader, fetcher index)
(``num.replica.fetchers`` per leader, a partition's index picked by hashing it) sends Fetch
requests to the leader's endpoint on ``inter.broker.listener.name`` with this broker's id as
``replica_id``, its log end offset as fetch offset and the epoch of its last batch as
``last_fetched_epoch``; it appends what comes back unchanged (``Partition.append_as_follower``)
and learns the high watermark from the leader.

- ``replica.fetch.max.bytes`` per partition, ``replica.fetch.response.max.bytes`` per response,
  ``replica.fetch.wait.max.ms`` / ``replica.fetch.min.bytes`` the long poll, ``replica.fetch.backoff.ms``
  after an error, ``replica.socket.timeout.ms`` for an answer.
- **Divergence** (KIP-320, the fetch-based form of KIP-101/279): when the leader answers with a
  ``diverging_epoch`` (the follower's last epoch ends earlier on the leader, or is unknown to it),
  the follower truncates to the end of the largest epoch both logs share, bounded by the
  leader's end offset for it (``_truncation_offset``), and fetches again from there. Truncating
  to the log end still drops an epoch entry taken there and never written in (a leader elected
  and replaced before any write), as Kafka's ``truncateTo`` does; the same answer again with no
  progress backs off and is logged once (``ReplicaFetcher._diverged``), never a spin.
- Out of range: a follower behind the leader's log start starts again at it (its log emptied);
  one ahead of the leader's log truncates to the leader's high watermark and fetches on.
- NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_LEADER_EPOCH (the leader's image
  lags this broker's: images reach brokers milliseconds apart): retried after 20 ms, doubling up
  to ``replica.fetch.backoff.ms``; FENCED_LEADER_EPOCH (this broker's image lags): after the
  backoff, or at once when the next image moves the partition to another leader or epoch.

**Pipelining** (``shoal.replica.fetch.pipeline.depth``; Kafka keeps one fetch in flight): a
fetcher may keep several Fetch requests in flight on its connection. With one, a write that
reaches the leader just after it answered the follower waits for the next fetch: acks=all takes up
to two round trips, 60+ ms across a 30 ms WAN link. With several, a fetch is parked at the leader
whenever the write comes, and acks=all takes one. The leader reads each pipelined fetch past
what it already sent the follower on that connection (``Partition.follower_read_offset``); the
follower checks that every answer's records start at its log end, and when one does not (it
dropped an earlier answer) closes the connection, which makes the leader forget, and fetches again
from its log end. Depth 0 (the default) picks it from the round trip measured at connect: one
fetch at a time on a LAN, up to 8 across a WAN.

**Fetch sessions** (KIP-227, Kafka's ``FetchSessionHandler``; the leader's side is
``shoal.replica.sessions``): the first fetch on a connection names every ready partition and opens
a session (``session_epoch`` 0); the next ones name only the partitions whose fetch state changed
(``_named``: a new log end or last epoch, a new fetch state after a leader change or truncation),
and forget those no longer ready. The leader answers only what changed, so an idle partition costs
nothing per fetch. While the session opens one fetch is in flight (the next needs its id); a
session error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, another session id)
closes the connection, and the next opens a new session. A leader that opens none (``session_id``
0) is sent full fetches without one, as before.

**Catching up at a bounded rate** (``replica.fetch.max.catchup.partitions``; Kafka has no such
cap): a partition this broker follows but is not in the ISR of (a restarted broker's, a reassigned
replica's; observers excepted: they never join) is *catching up*. At most that many are fetched at
once per broker; the others wait, left out of every fetch, and take the places the ones in flight
give back when they reach the leader's high watermark (an answer without records: they are
fetched on until the image puts them in the ISR, the leader's batched ISR change), the least
behind first (``catch_up_admissions``: the
leader's high watermark last seen minus this log's end, unknown counted as 0; ties in topic and
partition order). A restarted broker with thousands of partitions so catches up a few hundred at a
time, each finishing, instead of all of them at once; its leaders' ISR expansions come as the
partitions catch up, in batches (``shoal.replica.isr``: a few etcd transactions for thousands),
not thousands racing for etcd and the controller. Partitions in the ISR are always fetched: in a
session they cost nothing while idle.

A fetcher runs as one task on the broker's event loop; appends happen on the loop (as the
leader's do).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
import zlib
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable, Mapping, TypeVar

from shoal.asyncutil import cancel_and_wait
from shoal.net.fetch_request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic
from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import InvalidRecords

if TYPE_CHECKING:
    from shoal.config import BrokerConfig
    from shoal.metadata import MetadataImage
    from shoal.replica.manager import ReplicaManager
    from shoal.replica.partition import Partition

log = logging.getLogger("shoal.replica.fetcher")

FETCH = 1
LAGGING_RETRY_S = 0.02  # the first retry when the leader's image lags this broker's
FETCH_VERSION = 12  # topic names, replica_id in the body, last_fetched_epoch / diverging_epoch
INITIAL_EPOCH = 0  # a full fetch that opens a session (KIP-227)
FINAL_EPOCH = -1  # a full fetch without a session
SESSION_ERRORS = (ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch)
RECHECK_S = 10.0  # a session's request compares every partition's fetch state this often


K = TypeVar("K", bound=Hashable)


def catch_up_admissions(waiting: Mapping[K, int], in_flight: int, cap: int) -> list[K]:
    """Which of the partitions ``waiting`` to catch up (key -> how far behind the leader it is
    thought to be) start fetching now, beside the ``in_flight`` ones already catching up: the
    least behind first, ties in key order, as many as ``cap`` leaves room for; every one with a
    cap of 0 (none)."""
    if cap <= 0:
        return sorted(waiting, key=lambda k: (waiting[k], k))
    free = cap - in_flight
    if free <= 0 or not waiting:
        return []
    return heapq.nsmallest(free, waiting, key=lambda k: (waiting[k], k))


@dataclass
class _Fetching:
    partition: "Partition"
    leader_epoch: int  # the epoch of the leader we fetch from, as the image says
    delayed_until: float = 0.0  # loop time: after an error, skip until then
    lagging_retries: int = 0  # answers that the leader's image lags ours, in a row
    throttled: bool = False  # reassignment: its bytes count against follower.replication.throttled.rate
    # the last divergence answer and this log's (end, latest epoch) after acting on it: the same
    # answer again with the log unchanged is no progress (``_diverged``)
    diverged: tuple[int, int, int, int] | None = None
    stuck: bool = False  # said so once; cleared by progress


class _Session:
    """This fetcher's fetch session with the leader (Kafka's ``FetchSessionHandler``): its id (0:
    none yet, the next fetch opens one), the epoch the next fetch carries, and what the leader
    holds of each partition: the fetch state last named (``_named``). A session belongs to the
    connection: a new connection opens a new one."""

    __slots__ = ("id", "epoch", "held")

    def __init__(self) -> None:
        self.id = 0
        self.epoch = INITIAL_EPOCH
        self.held: dict[tuple[str, int], tuple] = {}


def _named(f: _Fetching) -> tuple:
    """What a fetch tells the leader of a partition; named again only when it changed (a new
    fetch state object too: a new leader epoch, or a truncation)."""
    plog = f.partition.log
    return f, plog.log_end_offset, plog.latest_epoch


def _time_out(answer: "asyncio.Future[Any]", timeout: float) -> None:
    if not answer.done():
        from shoal.net import KafkaError

        answer.set_exception(KafkaError("REQUEST_TIMED_OUT", f"no answer to a replica fetch within {timeout}s"))


def _truncation_offset(part: "Partition", leader_epoch: int, leader_end: int) -> int:
    """Where a follower whose log diverges from the leader's must truncate (Kafka's
    ``getOffsetTruncationState``): the leader says its epoch ``leader_epoch`` ends at
    ``leader_end``; the follower's own largest epoch <= that ends at ``f_end``. When the follower
    has that very epoch, both logs agree up to the smaller end; when it does not, it truncates to
    the end of its own epoch (below the leader's) and the next fetch resolves further."""
    plog = part.log
    f_epoch, f_end = plog.end_offset_for_epoch(leader_epoch)
    if f_epoch < 0 or f_end < 0:
        return min(leader_end, plog.log_end_offset) if leader_epoch >= 0 else plog.log_start_offset
    if f_epoch == leader_epoch:
        return min(leader_end, f_end, plog.log_end_offset)
    return min(f_end, plog.log_end_offset)


class ReplicaFetcher:
    def __init__(self, manager: "FetcherManager", leader_id: int, index: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.index = index
        self.partitions: dict[tuple[str, int], _Fetching] = {}
        self._conn: Any = None
        self._endpoint: tuple[str, int] | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.fetches = 0  # requests answered (tests, metrics)
        self.resyncs = 0  # pipelines started again: an answer did not start at the log end
        self.depth = 1  # fetches in flight (``pipeline_depth``)
        self.rtt_ms: float | None = None  # the round trip to the leader measured at connect
        self._session = _Session()
        self._sessionless = False  # the leader opened no session: every fetch names everything
        self._touched: set[tuple[str, int]] = set()  # answered or replaced since the last request
        self._recheck_at = 0.0  # loop time of the next request that compares every partition
        self.full_fetches = 0  # fetches that named every partition (opened a session, or none)
        self.named = 0  # partitions named by fetches since start (tests, metrics)
        self._released = False  # an answer let partitions catching up give their places back

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader={self.leader_id}, index={self.index}, partitions={len(self.partitions)})"

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.leader_id}-{self.index}")

    async def stop(self) -> None:
        await cancel_and_wait([self._task])
        await self._close()

    def wake(self) -> None:
        self._wake.set()

    def touched(self, key: tuple[str, int]) -> None:
        """``key``'s fetch state was replaced (or added): compare it at the next request, now."""
        self._touched.add(key)
        self._wake.set()

    async def _close(self) -> None:
        self._session = _Session()  # the leader's ends with the connection (tried again on the next one)
        self._sessionless = False
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:
                pass

    async def _connection(self) -> Any:
        endpoint = self.manager.endpoint(self.leader_id)
        if endpoint is None:
            raise ConnectionError(f"broker {self.leader_id} is not registered")
        if self._conn is not None and endpoint == self._endpoint and self._conn._closed_reason is None:
            return self._conn
        await self._close()
        from shoal.net.interbroker import inter_broker_security
        from shoal.net import Connection
        from shoal.net.fetch_request import encode_fetch_v12
        from shoal.net.fetch_response import decode_fetch_v12

        cfg = self.manager.config()
        timeout = int(cfg.get("replica.socket.timeout.ms")) / 1000.0
        # SASL / TLS of inter.broker.listener.name; Fetch answers read without copying their
        # records (``decode_fetch_v12``): they go to the log as they came
        conn = Connection(endpoint[0], endpoint[1], f"shoal-replica-{self.manager.node_id}", timeout,
                          inter_broker_security(cfg), {FETCH: decode_fetch_v12}, {FETCH: encode_fetch_v12})
        try:
            await conn.open()
            self.rtt_ms = await self._round_trip(conn)
        except BaseException:  # failed or cancelled (the fetcher stopped): not left open, unowned
            try:
                await conn.close()
            except Exception:
                pass
            raise
        self._conn, self._endpoint = conn, endpoint
        return conn

    @staticmethod
    async def _round_trip(conn: Any) -> float:
        """The round trip to the leader in ms: the fastest of three ApiVersions requests, timed
        with ``time.perf_counter`` (uvloop's ``loop.time()`` counts whole milliseconds: a 4.6 ms
        link measured 4 or 5 ms, either side of ``...pipeline.min.rtt.ms``' 5)."""
        from shoal.net import API_VERSIONS, requests

        version = conn.version_for(API_VERSIONS)
        body = requests.api_versions(version, "shoal-replica")
        rtt = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            await conn.send(API_VERSIONS, version, body)
            rtt = min(rtt, time.perf_counter() - t0)
        return rtt * 1000.0

    def pipeline_depth(self, cfg: "BrokerConfig") -> int:
        """``shoal.replica.fetch.pipeline.depth``, or with 0 one chosen from the round trip to
        the leader measured at connect: 1 below ``...pipeline.min.rtt.ms``, else about one fetch
        in flight per 4 ms of round trip (2 to 8), so that a steady stream of writes finds a fetch
        waiting at the leader."""
        depth = int(cfg.get("shoal.replica.fetch.pipeline.depth"))
        if depth > 0:
            return depth
        rtt = self.rtt_ms
        if rtt is None or rtt < int(cfg.get("shoal.replica.fetch.pipeline.min.rtt.ms")):
            return 1
        return max(2, min(8, int(rtt / 4) + 1))

    def _ready(self, now: float) -> dict[tuple[str, int], _Fetching]:
        waiting = self.manager.waiting
        if waiting:  # catching up, not yet admitted (``catch_up_admissions``): left out
            ready = {k: f for k, f in self.partitions.items() if f.delayed_until <= now and k not in waiting}
        else:
            ready = {k: f for k, f in self.partitions.items() if f.delayed_until <= now}
        return self.manager.replicas.throttle.follower_ready(ready, self.manager._image(), now)

    async def _run(self) -> None:
        """Keep up to ``depth`` Fetch requests in flight to the leader (one connection, answers
        in order), each asking for every ready partition from this broker's log end; handle the
        oldest answer, then send the next. With one (``depth`` 1, Kafka's way) a write that
        reaches the leader just after it answered waits for the follower's next fetch: up to two
        round trips to acks=all. An answer whose records do not start at this log's end (the
        leader sent past something this broker dropped) closes the connection: the leader then
        forgets what it sent and the next fetch starts from the log end."""
        loop = asyncio.get_running_loop()
        failures = resyncs = 0
        inflight: deque[tuple["asyncio.Future[Any]", dict[tuple[str, int], _Fetching], asyncio.TimerHandle]] = deque()
        try:
            while True:
                cfg = self.manager.config()
                backoff = int(cfg.get("replica.fetch.backoff.ms")) / 1000.0
                self.depth = self.pipeline_depth(cfg)
                now = loop.time()
                ready = self._ready(now)
                if not ready and not inflight:
                    self._wake.clear()
                    delays = [f.delayed_until - now for f in self.partitions.values()]
                    try:
                        await asyncio.wait_for(self._wake.wait(), min(delays) if delays else None)
                    except asyncio.TimeoutError:
                        pass
                    continue
                try:
                    if ready and len(inflight) < self.depth and self._may_send(inflight):
                        conn = await self._connection()
                        while ready and len(inflight) < self.depth and self._may_send(inflight):
                            # awaited directly, timed here: resumed in the iteration after the
                            # answer is decoded (conn.send's wait_for(shield()) takes three more)
                            answer = conn.request(FETCH, FETCH_VERSION, self._request(cfg, ready))
                            inflight.append((answer, ready, loop.call_later(conn.timeout, _time_out, answer, conn.timeout)))
                            ready = dict(ready)
                    answer, sent, timer = inflight[0]
                    try:
                        response = await answer
                    finally:
                        timer.cancel()
                    inflight.popleft()
                    failures = 0
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    failures += 1
                    if failures == 1 or failures % 50 == 0:
                        log.warning("broker %d: cannot fetch from leader %d (%d partitions): %s", self.manager.node_id,
                                    self.leader_id, len(ready or (inflight[0][1] if inflight else ())), e)
                    self._drop(inflight)
                    await self._close()
                    await asyncio.sleep(backoff)
                    continue
                self.fetches += 1
                if self._handle(response, sent, loop.time() + backoff):
                    resyncs = 0
                    continue
                self.resyncs += 1
                resyncs += 1
                self._drop(inflight)
                await self._close()
                if resyncs > 1:  # again at once: something else is wrong; do not spin on it
                    await asyncio.sleep(backoff)
        finally:
            self._drop(inflight)

    @staticmethod
    def _drop(inflight: deque) -> None:
        while inflight:
            answer, _, timer = inflight.popleft()
            timer.cancel()
            if not answer.done():
                answer.cancel()
            elif not answer.cancelled():
                answer.exception()  # retrieved: no "exception never retrieved" warning

    def _may_send(self, inflight: deque) -> bool:
        """One fetch at a time while a session opens (the next needs its id), else pipelined."""
        return self._session.id != 0 or self._sessionless or not inflight

    def _request(self, cfg: "BrokerConfig", ready: dict[tuple[str, int], _Fetching]) -> FetchRequest:
        """The Fetch request for ``ready``, as ``shoal.net.fetch_request``'s tuples, which the
        connection encodes without kio: kio's entities and writer took ~13 us a fetch (the generic
        ``shoal.net.build_entity`` ~190 us before them), at a couple of thousand fetches a second
        per broker under acks=all load (docs/benchmarks.md).

        In a session (KIP-227) it names only the partitions whose fetch state changed since the
        leader last heard of them, and forgets those not ready any more (delayed after an error,
        throttled, moved to another fetcher): the leader answers the rest only when they change.
        Without one it names every ready partition, and opens a session (``session_epoch`` 0)
        unless the leader opened none before."""
        per_partition = int(cfg.get("replica.fetch.max.bytes"))
        session = self._session
        held = session.held
        forgotten: dict[str, list[int]] = {}
        if session.id == 0:
            session_epoch = FINAL_EPOCH if self._sessionless else INITIAL_EPOCH
            named = ready
            held.clear()
            held.update((k, _named(f)) for k, f in ready.items())
            self._touched = set()
            self.full_fetches += 1
        else:
            session_epoch = session.epoch
            session.epoch = session.epoch + 1 if session.epoch < 0x7FFFFFFF else 1
            named = {}
            # what may have changed: partitions answered or replaced since the last request, and
            # those ready again (set differences of the key views run in C, not per partition here)
            check: Any = ready.keys() & self._touched
            check |= ready.keys() - held.keys()
            self._touched = set()
            now = asyncio.get_running_loop().time()
            if now >= self._recheck_at:  # and now and then all of them: a change nothing reported
                check, self._recheck_at = ready.keys(), now + RECHECK_S
            for k in check:
                f = ready[k]
                state = _named(f)
                if held.get(k) != state:
                    held[k] = state
                    named[k] = f
            for k in held.keys() - ready.keys():
                del held[k]
                forgotten.setdefault(k[0], []).append(k[1])
        self.named += len(named)
        wait_ms = int(cfg.get("replica.fetch.wait.max.ms"))
        catching_up = self.manager.catching_up
        if catching_up and not catching_up.isdisjoint(named):
            # partitions catching up named: answered at once, not parked, so that the ones already
            # at the leader's high watermark give their places back now (``caught_up_to``)
            wait_ms = 0
        topics: dict[str, list[FetchPartition]] = {}
        for (name, index), f in named.items():
            plog = f.partition.log
            topics.setdefault(name, []).append(FetchPartition(
                index, f.leader_epoch, plog.log_end_offset, plog.latest_epoch, plog.log_start_offset, per_partition))
        return FetchRequest(
            replica_id=self.manager.node_id,
            max_wait_ms=wait_ms,
            min_bytes=int(cfg.get("replica.fetch.min.bytes")),
            max_bytes=int(cfg.get("replica.fetch.response.max.bytes")),
            isolation_level=0,
            session_id=session.id,
            session_epoch=session_epoch,
            topics=tuple(FetchTopic(name, tuple(parts)) for name, parts in topics.items()),
            forgotten_topics_data=tuple(ForgottenTopic(name, tuple(parts)) for name, parts in forgotten.items()),
            rack_id="",
        )

    def _handle(self, response: Any, ready: dict[tuple[str, int], _Fetching], retry_at: float) -> bool:
        """Apply one answer; False when the fetch pipeline must start again (records that do not
        start at the log end, or records for a partition dropped while they were on the way, or
        a session the leader does not know: a new connection opens a new one)."""
        session = self._session
        if response.error_code in SESSION_ERRORS or (session.id != 0 and response.session_id != session.id):
            log.info("broker %d: leader %d answered a fetch in session %d with %s (session %d): opening a new session",
                     self.manager.node_id, self.leader_id, session.id, ErrorCode(response.error_code).name,
                     response.session_id)
            return False
        if session.id == 0 and not self._sessionless and response.error_code == ErrorCode.none:
            session.id = response.session_id
            session.epoch = 1
            if session.id == 0:
                self._sessionless = True
                log.info("broker %d: leader %d opens no fetch session: every fetch names every partition",
                         self.manager.node_id, self.leader_id)
        if response.error_code != ErrorCode.none:
            for r in ready.values():
                r.delayed_until = retry_at
            log.warning("leader %d answered a fetch with %s", self.leader_id, ErrorCode(response.error_code).name)
            return True
        now_ms = self.manager.now_ms()
        in_step = True
        touched = self._touched
        self._released = False
        for t in response.responses:
            for p in t.partitions:
                key = (t.topic, p.partition_index)
                touched.add(key)
                f = self.partitions.get(key)
                if f is None or f is not ready.get(key):
                    in_step = in_step and not p.records  # removed or replaced while the fetch was in flight
                    continue
                try:
                    in_step = self._handle_partition(f, p, now_ms, retry_at) and in_step
                except InvalidRecords as e:
                    # a batch whose framing or CRC does not hold (Kafka's CorruptRecordException):
                    # nothing of the answer was written; fetched again after the backoff, on a new
                    # connection (the leader forgets what it sent on this one)
                    log.warning("%s-%d: leader %d's records refused (%s): fetching them again", key[0], key[1],
                                self.leader_id, e.message)
                    f.delayed_until = retry_at
                    in_step = False
                except Exception:
                    log.exception("%s-%d: cannot apply the fetch from leader %d", key[0], key[1], self.leader_id)
                    f.delayed_until = retry_at
                    in_step = in_step and not p.records
        if self._released:  # partitions caught up: others take their places
            self.manager.admit()
        return in_step

    def _starts_at_end(self, part: "Partition", records: Any) -> bool:
        """The leader's records start at this log's end (or, for an empty log, in a batch that
        holds its start: ``_append``); a pipelined answer may not, when this broker dropped an
        earlier one the leader counted as sent."""
        plog = part.log
        first = int.from_bytes(bytes(records[0:8]), "big", signed=True)
        end = plog.log_end_offset
        if first == end or (end == plog.log_start_offset and first < end):
            return True
        log.info("%s-%d: leader %d's answer starts at %d, this log ends at %d: fetching again from the log end",
                 part.topic, part.index, self.leader_id, first, end)
        return False

    def _handle_partition(self, f: _Fetching, p: Any, now_ms: int, retry_at: float) -> bool:
        part = f.partition
        plog = part.log
        code = p.error_code
        if code == ErrorCode.none:
            diverging = p.diverging_epoch
            if diverging is not None and diverging.epoch >= 0 and diverging.end_offset >= 0:
                self._diverged(f, diverging.epoch, diverging.end_offset, retry_at)
                return True
            f.lagging_retries = 0
            f.diverged, f.stuck = None, False
            records = p.records
            if records:
                if not self._starts_at_end(part, records):
                    return False
                part.append_as_follower(records, now_ms)
                if f.throttled:
                    self.manager.replicas.throttle.record("follower", len(records))
            part.observe_leader_high_watermark(p.high_watermark)
            if p.high_watermark >= 0:
                self.manager.leader_hw[part.key] = p.high_watermark
                if not records and part.log_end_offset >= p.high_watermark and self.manager.caught_up_to(part.key):
                    self._released = True
            part.observe_leader_log_start(p.log_start_offset)  # the leader's DeleteRecords or retention
            return True
        if code == ErrorCode.offset_out_of_range:
            leader_start = p.log_start_offset
            if leader_start >= 0 and plog.log_end_offset < leader_start:
                log.info("%s-%d: behind leader %d's log start %d: starting again there", part.topic, part.index,
                         self.leader_id, leader_start)
                self.manager.truncate_fully(part, leader_start)
                self._renew(f)
            elif p.high_watermark >= 0 and plog.log_end_offset > p.high_watermark:
                log.info("%s-%d: ahead of leader %d: truncating to its high watermark %d", part.topic, part.index,
                         self.leader_id, p.high_watermark)
                self.manager.truncate(part, max(p.high_watermark, part.high_watermark))
                self._renew(f)
            else:
                f.delayed_until = retry_at
            return True
        if code in (ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
                    ErrorCode.unknown_topic_id, ErrorCode.unknown_leader_epoch):
            # most often the leader has not seen the image that made the topic or made it leader
            # (images reach brokers milliseconds apart): ask again soon, backing off to
            # replica.fetch.backoff.ms; if another broker leads now, the next image re-targets it
            f.lagging_retries += 1
            now = asyncio.get_running_loop().time()
            f.delayed_until = min(retry_at, now + LAGGING_RETRY_S * 2 ** min(f.lagging_retries - 1, 6))
            return True
        if code != ErrorCode.fenced_leader_epoch:
            log.warning("%s-%d: leader %d answered %s", part.topic, part.index, self.leader_id, ErrorCode(code).name)
        f.delayed_until = retry_at
        return True

    def _diverged(self, f: _Fetching, epoch: int, end_offset: int, retry_at: float) -> None:
        """The leader says this log diverges from its own after ``epoch``, which ends at
        ``end_offset`` on the leader: truncate (``_truncation_offset``) and fetch again. The same
        answer again while this log is where the last one left it (same end, same latest epoch)
        would be answered the same way forever: the follower backs off ``replica.fetch.backoff.ms``
        and says so once, instead of asking thousands of times a second."""
        part = f.partition
        plog = part.log
        if f.diverged == (epoch, end_offset, plog.log_end_offset, plog.latest_epoch):
            if not f.stuck:
                f.stuck = True
                log.warning("%s-%d: leader %d answers again that this log diverges after its epoch %d (ends at %d), "
                            "but truncating made no progress (log end %d, latest epoch %d): retrying every "
                            "replica.fetch.backoff.ms", part.topic, part.index, self.leader_id, epoch, end_offset,
                            plog.log_end_offset, plog.latest_epoch)
            f.delayed_until = retry_at
            return
        offset = _truncation_offset(part, epoch, end_offset)
        log.info("%s-%d: log diverges from leader %d (its epoch %d ends at %d): truncating %d -> %d",
                 part.topic, part.index, self.leader_id, epoch, end_offset, plog.log_end_offset, offset)
        self.manager.truncate(part, offset)
        f.diverged = (epoch, end_offset, plog.log_end_offset, plog.latest_epoch)
        self._renew(f)

    def _renew(self, f: _Fetching) -> None:
        """After a truncation, answers still in flight for the partition are stale: a fresh
        fetch state makes :meth:`_handle` pass them by (and start the pipeline again if one
        carries records)."""
        key = f.partition.key
        if self.partitions.get(key) is f:
            self.partitions[key] = _Fetching(f.partition, f.leader_epoch, f.delayed_until, f.lagging_retries, f.throttled,
                                             f.diverged, f.stuck)


def fetcher_index(name: str, index: int, fetchers: int) -> int:
    """Kafka's ``getFetcherId``: a stable spread of partitions over ``num.replica.fetchers``."""
    return (zlib.crc32(name.encode()) * 31 + index) % max(1, fetchers)


class FetcherManager:
    """The fetchers of one broker: which follower partition fetches from which leader."""

    def __init__(self, replicas: "ReplicaManager", image: Callable[[], "MetadataImage"],
                 config: Callable[[], "BrokerConfig"]) -> None:
        self.replicas = replicas
        self.node_id = replicas.node_id
        self._image = image
        self.config = config
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._where: dict[tuple[str, int], tuple[int, int]] = {}  # partition -> the fetcher that has it
        self._running = False
        # catching up (followed, not in the ISR): fetched now, or waiting for a place
        # (``replica.fetch.max.catchup.partitions``)
        self.catching_up: set[tuple[str, int]] = set()
        self.waiting: set[tuple[str, int]] = set()
        self.caught_up: set[tuple[str, int]] = set()  # caught up, still out of the ISR: place given back
        self.leader_hw: dict[tuple[str, int], int] = {}  # the leader's high watermark last seen
        self.catching_up_peak = 0  # the most in ``catching_up`` at once (tests, metrics)

    def now_ms(self) -> int:
        return self.replicas.clock.now_ms()

    def endpoint(self, node: int) -> tuple[str, int] | None:
        b = self._image().brokers.get(node)
        if b is None:
            return None
        from shoal.net.interbroker import inter_broker_endpoint

        return inter_broker_endpoint(self.config(), b)

    def truncate(self, part: "Partition", offset: int) -> None:
        part.truncate_to(offset)

    def truncate_fully(self, part: "Partition", offset: int) -> None:
        part.truncate_fully(offset)

    def start(self) -> None:
        self._running = True
        self.sync()

    async def stop(self) -> None:
        self._running = False
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self._where.clear()
        self.catching_up.clear()
        self.waiting.clear()
        self.caught_up.clear()
        for f in fetchers:
            await f.stop()

    def sync(self, keys: "Iterable[tuple[str, int]] | None" = None) -> None:
        """Follow the hosted partitions' roles: every partition this broker follows (a live
        leader elsewhere) is in exactly one fetcher, that of its leader; a new leader epoch
        starts it afresh (no backoff). Fetchers left without partitions stop. ``keys``: only
        these partitions may have changed (the topics of a metadata change): the others are not
        looked at (None: all)."""
        if not self._running:
            return
        cfg = self.config()
        fetchers = int(cfg.get("num.replica.fetchers"))
        where = self._where
        node = self.node_id
        catching_up, waiting, caught_up = self.catching_up, self.waiting, self.caught_up
        if keys is None:
            keys = set(where) | {p.key for p in self.replicas.hosted()}
        emptied = False
        for key in keys:
            part = self.replicas.partition(*key)
            want = None
            if part is not None:
                leader = part.info.leader
                if leader >= 0 and leader != node:
                    want = (leader, fetcher_index(key[0], key[1], fetchers))
            if want is not None and part is not None and node not in part.info.isr and node not in part.info.observers:
                if key not in catching_up and key not in caught_up:
                    waiting.add(key)
            else:
                catching_up.discard(key)
                waiting.discard(key)
                caught_up.discard(key)
                if want is None:
                    self.leader_hw.pop(key, None)
            fid = where.get(key)
            if fid is not None:
                fetcher = self.fetchers.get(fid)
                f = fetcher.partitions.get(key) if fetcher is not None else None
                if fetcher is None or f is None or want != fid or f.partition is not part:
                    if fetcher is not None and f is not None:
                        del fetcher.partitions[key]
                        emptied = emptied or not fetcher.partitions
                    del where[key]
                    fid = None
                elif part is not None and f.leader_epoch != part.info.leader_epoch:
                    fetcher.partitions[key] = _Fetching(part, part.info.leader_epoch)
                    fetcher.touched(key)
            if want is not None and part is not None and fid is None:
                fetcher = self.fetchers.get(want)
                if fetcher is None:
                    fetcher = self.fetchers[want] = ReplicaFetcher(self, *want)
                    fetcher.start()
                fetcher.partitions[key] = _Fetching(part, part.info.leader_epoch)
                fetcher.touched(key)
                where[key] = want
        if waiting:
            self.admit()
        if emptied:
            for fid in [fid for fid, f in self.fetchers.items() if not f.partitions]:
                fetcher = self.fetchers.pop(fid)
                asyncio.get_running_loop().create_task(fetcher.stop())

    def caught_up_to(self, key: tuple[str, int]) -> bool:
        """``key``, catching up, reached the leader's high watermark (an answer with no records):
        it gives its place back (it stays fetched until the image puts it in the ISR). True when
        it did (the caller then calls :meth:`admit`)."""
        if key not in self.catching_up:
            return False
        self.catching_up.discard(key)
        self.caught_up.add(key)
        return True

    def admit(self) -> None:
        """Partitions waiting to catch up take the places free under
        ``replica.fetch.max.catchup.partitions`` (``catch_up_admissions``) and are fetched from
        the next request on."""
        waiting, catching_up = self.waiting, self.catching_up
        if not waiting:
            return
        cap = int(self.config().get("replica.fetch.max.catchup.partitions"))
        if 0 < cap <= len(catching_up):
            return
        hw = self.leader_hw
        behind: dict[tuple[str, int], int] = {}
        for key in waiting:
            part = self.replicas.partition(*key)
            end = part.log.log_end_offset if part is not None else 0
            behind[key] = max(0, hw.get(key, end) - end)
        for key in catch_up_admissions(behind, len(catching_up), cap):
            waiting.discard(key)
            catching_up.add(key)
            fetcher = self.fetchers.get(self._where.get(key))  # type: ignore[arg-type]
            if fetcher is not None:
                fetcher.touched(key)
        self.catching_up_peak = max(self.catching_up_peak, len(catching_up))
