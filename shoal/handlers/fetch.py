"""Fetch (key 1), v4-v18: long-poll in a purgatory, fetch sessions (KIP-227), topic ids (v13+).

This handler resolves the request (topic names or ids, the session, authorization, the quota's
cap) and builds the answer; the reads, the wait for ``min_bytes`` and everything a follower's
fetch does on the leader are the replica layer's (``shoal.replica.read.fetch_messages``).

Reads return whole stored batches (as producers wrote them, compressed or not) from the batch that
holds the fetch offset, up to the high watermark. ``partition_max_bytes`` and ``max_bytes`` bound
the answer, except that the first partition with data always gets one whole batch so a consumer
can make progress past a batch larger than its limits (Kafka's KIP-74 rule).

If fewer than ``min_bytes`` are ready the request waits in the purgatory until a producer appends
to one of its partitions or ``max_wait`` passes, then answers with what there is.

A follower's fetch (``replica_id`` >= 0, CLUSTER_ACTION in the physical view) reads up to the log
end, not the high watermark; its fetch offset tells the leader what it has (the high watermark and
the ISR may move: ``ReplicaManager.follower_fetched``), and a ``last_fetched_epoch`` whose epoch
ends earlier here is answered with a ``diverging_epoch`` to truncate to (KIP-320). Every fetch's
``current_leader_epoch`` is checked: FENCED_LEADER_EPOCH when older than the leader's,
UNKNOWN_LEADER_EPOCH when newer. A follower's fetch session is not in ``FetchSessionCache`` but on
its connection (``shoal.replica.sessions``): its fetches read only the partitions they name and
those that changed here, and wait on the session, so an idle partition costs nothing per fetch.

Scoped: topic names and ids are the tenant's (``ctx.scope``): another tenant's topic id is
UNKNOWN_TOPIC_ID, its name resolves to this tenant's own (missing) topic. Reading needs READ on the
topic (TOPIC_AUTHORIZATION_FAILED, left out of the session, as Kafka does); a replica's fetch
(replica_id >= 0, exempt from quotas) needs CLUSTER_ACTION on the cluster instead, and only the
physical view has replicas: a tenant's is TOPIC_AUTHORIZATION_FAILED. Who is a replica is decided
once per request from the principal (``RequestContext.is_replica``), not from ``replica_id``: a
fetch that claims it without the right (a session's incremental fetch names no topic to refuse)
is a consumer's, with its quota, metering and high watermark. A fetch session belongs
to the scope and principal that created it: any other caller gets FETCH_SESSION_ID_NOT_FOUND.

``isolation_level`` READ_COMMITTED (1) reads up to the last stable offset instead of the high
watermark (a batch straddling it is not returned) and lists the aborted transactions
``(producer_id, first_offset)`` overlapping the returned batches, from the log's transaction
index, so the consumer drops their records; ``last_stable_offset`` is set in every answer (both
levels). A follower serving a consumer (KIP-392) applies the LSO it knows: its own log's, bounded
by the high watermark the leader gave it.

Deviations from Kafka:
- Quotas: the fetch quota counts the record bytes of the response (Kafka: the whole response's
  size), and a fetch throttled only by the request quota keeps its data (Kafka empties it too).
"""

from __future__ import annotations

import datetime
import secrets
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from shoal.cluster import routing
from shoal.handlers.registry import api
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode
from shoal.protocol.regions import Region
from shoal.replica.read import ReadResult, ReplicaOrder, count_sent, fetch_messages
from shoal.replica.sessions import CachedPartition, ReplicaSession
from shoal.tenancy.acl import Operation, ResourceType

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from shoal.handlers.context import ConnectionControls, RequestContext
    from shoal.handlers.messages import FetchRequest, FetchResponse
    from shoal.metadata import MetadataImage, PartitionInfo
    from shoal.services import Services
    from shoal.tenancy.scope import Scope

KEY = 1
ZERO_UUID = uuid.UUID(int=0)
FINAL_EPOCH = -1
INITIAL_EPOCH = 0


@dataclass
class FetchSession:
    session_id: int
    epoch: int  # the epoch the next request must carry
    owner: tuple = ()  # (tenant id, principal) of the creator: nobody else may use the session
    partitions: "OrderedDict[tuple[str, int], CachedPartition]" = field(default_factory=OrderedDict)


class FetchSessionCache:
    """Incremental fetch sessions of one broker (KIP-227), shared fairly between tenants.

    ``max_sessions`` (``max.incremental.fetch.session.cache.slots``) still bounds the whole cache,
    as in Kafka. Each scope that creates sessions (a tenant, or the physical view, whose sessions
    include the followers') has its own share of it, max-min fair: when the cache is full, a new
    session evicts the least recently used session of the scope holding the *most* sessions (its
    own when it is among the largest). So a scope under ``max_sessions / (scopes holding
    sessions)`` never loses a session to another scope's new ones; a scope alone may use the whole
    cache; and a tenant opening sessions without end (issue 24: 1,100 of one tenant evicted
    another's) recycles its own. Kafka has one least-recently-used pool (it prefers evicting
    small, idle sessions); a shared platform must not let one tenant empty it for the others.

    Single-threaded (the event loop); ``new`` and ``get`` are O(1), an eviction O(scopes)."""

    def __init__(self, max_sessions: int = 1000) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[int, FetchSession] = {}
        # per scope (the owner's tenant id; None for the physical view), least recently used first
        self._scopes: dict[Any, OrderedDict[int, FetchSession]] = {}

    @staticmethod
    def _scope(owner: tuple) -> Any:
        return owner[0] if owner else None

    def new(self, owner: tuple = ()) -> FetchSession:
        sid = 0
        while sid == 0 or sid in self._sessions:
            sid = secrets.randbits(31)
        session = FetchSession(sid, 1, owner)
        scope = self._scope(owner)
        mine = self._scopes.setdefault(scope, OrderedDict())
        while len(self._sessions) >= self.max_sessions and self._sessions:
            self._evict_one(scope)
        if self.max_sessions > 0:
            self._sessions[sid] = session
            mine[sid] = session
        elif not mine:
            del self._scopes[scope]
        return session

    def _evict_one(self, scope: Any) -> None:
        """Evict the least recently used session of the largest scope (``scope``'s own when it is
        as large as any)."""
        largest = max(len(q) for q in self._scopes.values())
        victim = scope if len(self._scopes.get(scope, ())) >= largest else max(
            self._scopes, key=lambda s: len(self._scopes[s]))
        sid, _ = self._scopes[victim].popitem(last=False)
        del self._sessions[sid]
        if not self._scopes[victim] and victim != scope:
            del self._scopes[victim]

    def get(self, sid: int) -> FetchSession | None:
        s = self._sessions.get(sid)
        if s is not None:
            self._scopes[self._scope(s.owner)].move_to_end(sid)
        return s

    def remove(self, sid: int) -> None:
        s = self._sessions.pop(sid, None)
        if s is not None:
            scope = self._scope(s.owner)
            q = self._scopes[scope]
            q.pop(sid, None)
            if not q:
                del self._scopes[scope]

    def count(self, owner: tuple = ()) -> int:
        """Sessions of ``owner``'s scope now."""
        return len(self._scopes.get(self._scope(owner), ()))

    def __len__(self) -> int:
        return len(self._sessions)


def _timedelta_s(value: datetime.timedelta | int) -> float:
    return value.total_seconds() if isinstance(value, datetime.timedelta) else value / 1000.0


def _partition_data(mod: ModuleType, index: int, code: ErrorCode, *, hwm: int = -1, lso: int = -1, log_start: int = -1,
                    records: bytes | Region | None = b"", pinfo: PartitionInfo | None = None,
                    diverging: tuple[int, int] | None = None, preferred: int = -1,
                    aborted: list[tuple[int, int]] | None = None) -> Entity:
    # KIP-951: tell the client who leads now, so it need not refresh metadata first.
    extra = routing.current_leader(mod, pinfo) if code == ErrorCode.not_leader_or_follower else {}
    if diverging is not None and hasattr(mod, "EpochEndOffset"):  # KIP-320: a follower must truncate
        extra["diverging_epoch"] = build(mod.EpochEndOffset, epoch=diverging[0], end_offset=diverging[1])
    return build(
        mod.PartitionData,
        partition_index=index,
        error_code=code,
        high_watermark=hwm,
        last_stable_offset=lso,
        log_start_offset=log_start,
        aborted_transactions=(
            None if aborted is None
            else tuple(build(mod.AbortedTransaction, producer_id=pid, first_offset=first) for pid, first in aborted)
        ),
        preferred_read_replica=preferred,  # KIP-392: read from this replica instead (its rack)
        records=records or b"",  # never null: clients reject a null record set
        **extra,
    )


@api(KEY, 4, 18)
async def handle_fetch(ctx: RequestContext, req: FetchRequest) -> FetchResponse:
    svc = ctx.services
    v = ctx.api_version
    mod = response_module(KEY, v)
    use_ids = v >= 13
    sessions: FetchSessionCache = svc.fetch_sessions

    # -- resolve the request's partitions (by name or id) and the session --------------------
    image = svc.metadata.image
    scope = ctx.scope
    owner = (scope.tenant_id, ctx.principal)
    # A replica's fetch needs CLUSTER_ACTION on the cluster instead of READ on each topic
    # (Kafka's isFromFollower); replicas are brokers, never a tenant's principals. Decided once
    # for the whole request, from the principal (``RequestContext.is_replica``): everything
    # below (log end or high watermark, quotas, metering, the ISR) follows ``follower``, so a
    # session's incremental fetch, which names no topic, cannot read as a replica either.
    replica_id = _replica_id(req)
    follower = ctx.is_replica(replica_id)
    claims_replica = replica_id >= 0
    wanted: "OrderedDict[tuple[str, int], CachedPartition]" = OrderedDict()
    unknown_ids: list[tuple[uuid.UUID, int]] = []
    denied: list[tuple[str | None, uuid.UUID | None, int]] = []
    for t in req.topics:
        if use_ids:
            info = scope.topic_by_id(image, getattr(t, "topic_id"))
            if info is None:
                unknown_ids.extend((getattr(t, "topic_id"), p.partition) for p in t.partitions)
                continue
            name = info.name
            visible = scope.visible(name)
        else:
            visible = getattr(t, "topic")
            name = scope.physical(visible)
        tid = getattr(t, "topic_id") if use_ids else None
        if not (follower if claims_replica
                # (visible None: not the scope's topic)
                else visible is not None and scope.allowed(Operation.READ, ResourceType.TOPIC, visible)):
            denied.extend((visible, tid, p.partition) for p in t.partitions)
            continue
        for p in t.partitions:
            wanted[(name, p.partition)] = CachedPartition(
                p.fetch_offset, p.partition_max_bytes, tid,
                getattr(p, "current_leader_epoch", -1), getattr(p, "last_fetched_epoch", -1),
            )

    session_id = getattr(req, "session_id", 0)
    session_epoch = getattr(req, "session_epoch", FINAL_EPOCH)
    session: FetchSession | None = None
    incremental = False
    # a follower's session lives on its connection, apart from the consumers' cache
    # (``shoal.replica.sessions``); one that asks for none is served in full, as before
    rsession: ReplicaSession | None = None
    my_seq = 0
    conn = ctx.connection
    if follower and v >= 7 and conn is not None and (session_id != 0 or session_epoch == INITIAL_EPOCH):
        rsession, code = _replica_session(svc, conn, replica_id, session_id, session_epoch, wanted,
                                          _forgotten(req, scope, image, use_ids))
        if code != ErrorCode.none:
            return _top_error(mod, code)
        incremental = rsession is not None and session_id != 0
        my_seq = rsession.seq if rsession is not None else 0
    elif session_id == 0:
        if session_epoch == INITIAL_EPOCH and v >= 7:
            session = sessions.new(owner)
            session.partitions = wanted
    else:
        existing = sessions.get(session_id)
        if existing is not None and existing.owner != owner:
            return _top_error(mod, ErrorCode.fetch_session_id_not_found)
        if session_epoch == FINAL_EPOCH:
            sessions.remove(session_id)
        elif existing is None:
            return _top_error(mod, ErrorCode.fetch_session_id_not_found)
        elif existing.epoch != session_epoch:
            return _top_error(mod, ErrorCode.invalid_fetch_session_epoch)
        else:
            session = existing
            incremental = True
            for key, sp in wanted.items():
                old = session.partitions.get(key)
                if old is not None:
                    sp.last_hwm, sp.last_log_start = old.last_hwm, old.last_log_start
                session.partitions[key] = sp
            for gone in _forgotten(req, scope, image, use_ids):
                session.partitions.pop(gone, None)
            session.epoch = session.epoch + 1 if session.epoch < 0x7FFFFFFF else 1
    if session is not None and not incremental:
        session.epoch = 1
    # a follower's session reads what the fetch names now, and what changed here when its turn comes
    targets = wanted if rsession is not None else session.partitions if session is not None else wanted

    # -- read, waiting in the purgatory for min_bytes ----------------------------------------
    deadline = svc.clock.monotonic() + _timedelta_s(req.max_wait)  # the replica layer's clock
    min_bytes = max(req.min_bytes, 0)
    max_bytes = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
    max_bytes = min(max_bytes, int(svc.config.get("fetch.max.bytes")))
    # quotas: one fetch returns no more than the consumer's quota allows (Kafka caps max_bytes
    # with getMaxValueInQuotaWindow); followers are exempt
    cap = None if follower else svc.quotas.fetch_cap(ctx, svc.clock.now_ms())
    if cap is not None:
        max_bytes = min(max_bytes, cap)
        min_bytes = min(min_bytes, max_bytes)
    # the replica layer reads, waiting for min_bytes (a v11+ consumer's rack: KIP-392)
    results, total, preferred = await fetch_messages(
        svc.replicas, image, targets, deadline=deadline, min_bytes=min_bytes, max_bytes=max_bytes,
        replica_id=replica_id, follower=follower, rsession=rsession, my_seq=my_seq,
        order=ReplicaOrder.of(ctx.connection) if follower else None, conn_id=ctx.client_address,
        client_rack=(getattr(req, "rack_id", "") or "") if not follower and v >= 11 else "",
        committed=not follower and getattr(req, "isolation_level", 0) == 1,
        regions=conn is not None and conn.zero_copy)

    # quotas: over the consumer's quota, the bytes are taken back and the answer is empty, with
    # the throttle time (Kafka's getThrottledResponse: a new session is not kept)
    if not follower and svc.quotas.record_fetch(ctx, total, svc.clock.now_ms()):
        _close_regions(results.values())
        if session is not None and not incremental:
            sessions.remove(session.session_id)
            session = None
        return _top_error(mod, ErrorCode.none, session.session_id if session is not None else 0)
    count_sent(results, follower)  # the partitions' load (shoal.cluster.load)

    # -- build the response ----------------------------------------------------------------
    by_topic: "OrderedDict[str, list]" = OrderedDict()
    topic_ids: dict[str, uuid.UUID | None] = {}
    for key, sp in targets.items():
        name, index = key
        r = results[key]
        if incremental:
            # Leave out what the client already knows: no records, no error, same offsets.
            changed = (
                r.code != ErrorCode.none
                or r.records
                or key in preferred
                or r.diverging is not None
                or r.hwm != sp.last_hwm
                or r.log_start != sp.last_log_start
            )
            if not changed:
                continue
        sp.last_hwm, sp.last_log_start = r.hwm, r.log_start
        topic_ids[name] = sp.topic_id
        by_topic.setdefault(name, []).append(
            _partition_data(
                mod, index, r.code, hwm=r.hwm, lso=r.lso, log_start=r.log_start,
                records=r.records, pinfo=r.pinfo, diverging=r.diverging, preferred=preferred.get(key, -1),
                aborted=r.aborted,
            )
        )
    topics = [
        build(
            mod.FetchableTopicResponse, topic=scope.visible(name), topic_id=topic_ids.get(name) or ZERO_UUID,
            partitions=tuple(parts),
        )
        for name, parts in by_topic.items()
    ]
    for visible, tid, index in denied:
        topics.append(
            build(
                mod.FetchableTopicResponse,
                topic=visible,
                topic_id=tid or ZERO_UUID,
                partitions=(_partition_data(mod, index, ErrorCode.topic_authorization_failed),),
            )
        )
    for tid, index in unknown_ids:
        topics.append(
            build(
                mod.FetchableTopicResponse,
                topic_id=tid,
                partitions=(_partition_data(mod, index, ErrorCode.unknown_topic_id),),
            )
        )
    return build(
        mod.FetchResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=(session.session_id if session is not None else rsession.session_id if rsession is not None
                    else 0),
        responses=tuple(topics),
        node_endpoints=routing.node_endpoints(
            mod, svc.metadata.image,
            [r.pinfo.leader for r in results.values() if r.pinfo is not None] + list(preferred.values()),
            ctx.listener),
    )


def _close_regions(results: Iterable[ReadResult]) -> None:
    """Give back the descriptors of record sets read as file regions and not sent."""
    for r in results:
        if isinstance(r.records, Region):
            r.records.close()


def _top_error(mod: ModuleType, code: ErrorCode, session_id: int = 0) -> FetchResponse:
    return build(
        mod.FetchResponse,
        throttle_time=datetime.timedelta(0),
        error_code=code,
        session_id=session_id,
        responses=(),
        node_endpoints=(),
    )


def _forgotten(req: FetchRequest, scope: Scope, image: MetadataImage, use_ids: bool) -> list[tuple[str, int]]:
    """The partitions an incremental fetch leaves its session (``forgotten_topics_data``); those
    of a topic id this scope does not know are in no session."""
    out: list[tuple[str, int]] = []
    for ft in getattr(req, "forgotten_topics_data", ()) or ():
        if use_ids:
            info = scope.topic_by_id(image, ft.topic_id)
            if info is None:
                continue
            fname = info.name
        else:
            fname = scope.physical(ft.topic)
        out.extend((fname, part) for part in ft.partitions)
    return out


def _replica_session(svc: Services, conn: ConnectionControls, replica_id: int, session_id: int, session_epoch: int,
                     wanted: Mapping[tuple[str, int], CachedPartition],
                     forgotten: Iterable[tuple[str, int]]) -> tuple[ReplicaSession | None, ErrorCode]:
    """A follower's fetch session on its connection (``shoal.replica.sessions``): a new one
    for a full fetch (``session_epoch`` 0), else the connection's, brought up to date with what
    the fetch names (which it reads) and forgets; ``seq`` numbers its fetches. Returns (session
    or None, error): None for a fetch that closes its session (epoch -1, served in full)."""
    index = svc.replicas.sessions
    current: ReplicaSession | None = conn.replica_session
    if session_id == 0:
        if current is not None:
            index.close(current)
        s = conn.replica_session = ReplicaSession(replica_id)
        s.partitions = dict(wanted)  # read by this fetch: since 0, the session's first
        index.add(s, wanted)
        conn.closers.append(lambda: index.close(s))
        return s, ErrorCode.none
    if current is None or current.session_id != session_id or current.replica_id != replica_id:
        return None, ErrorCode.fetch_session_id_not_found
    if session_epoch == FINAL_EPOCH:
        index.close(current)
        conn.replica_session = None
        return None, ErrorCode.none
    if current.epoch != session_epoch:
        return None, ErrorCode.invalid_fetch_session_epoch
    current.next_epoch()
    current.seq += 1
    held, dirty, seq = current.partitions, current.dirty, current.seq
    added = []
    for key, sp in wanted.items():  # read by this fetch, not by one before it still parked
        old = held.get(key)
        if old is None:
            added.append(key)
        else:
            sp.last_hwm, sp.last_log_start = old.last_hwm, old.last_log_start
        sp.since = seq
        held[key] = sp
    if added:
        index.add(current, added)
    gone = [k for k in forgotten if held.pop(k, None) is not None]
    if gone:
        for k in gone:
            dirty.pop(k, None)
        index.remove(current, gone)
    return current, ErrorCode.none


def _replica_id(req: FetchRequest) -> int:
    """The fetching replica's broker id (v15+: in replica_state), -1 for a consumer. A replica's
    fetch is exempt from client quotas and reads up to the log end, not the high watermark."""
    state = getattr(req, "replica_state", None)
    replica = state.replica_id if state is not None else getattr(req, "replica_id", -1)
    return replica if replica is not None else -1


