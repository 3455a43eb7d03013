"""The per-request half of the broker metrics: plain counters the connection adds to.

Three calls per request from ``shoal.server.connection`` (each a few dict and list updates):

* :meth:`BrokerMetrics.begin` when the request is decoded and its handler is about to start;
* :meth:`BrokerMetrics.answered` when the handler's response is encoded (or the handler failed):
  the request's local and remote time, its sizes and errors, and for Produce and Fetch the
  per-topic bytes, messages, requests and failures;
* :meth:`BrokerMetrics.sent` when the response is handed to the socket: the request is counted,
  and every histogram of its API observes it, all at once (so each histogram's count equals
  ``shoal_requests_total`` of its API, and a request whose connection closed first is in none).

Kafka's ``RequestMetrics`` breakdown, in Shoal's terms (all in ``shoal_request_*_seconds``):

=========  =============================================================================
queue      frame read → handler started (waiting in the tenant scheduler's queue)
local      the handler's own steps on the event loop (KIP-124's request time), encoding included
remote     handler started → response ready, minus local: waiting in a purgatory (acks=all,
           long-poll Fetch), for a rebalance, for the metadata store
throttle   the quota throttle the response carried (0 when none); a client older than KIP-219
           also waits that long for its response
send       response ready → handed to the socket: waiting behind earlier responses of the
           connection (responses leave in request order), not counting a throttle delay
total      frame read → handed to the socket
=========  =============================================================================

Per topic (keyed by the physical name; the collector splits it into ``tenant`` and the tenant's
``topic`` name): Kafka's ``BrokerTopicMetrics`` — bytes and messages appended by Produce, record
bytes answered to consumers' fetches (followers' fetches are ``replication_bytes_out``), and the
partitions of Produce and Fetch requests, and of those, the ones answered with an error. Only
topics that exist are counted: an error about a name that is no topic (unknown topic or id,
not authorized, invalid name) is counted in the API's errors only, so a client cannot make
series by naming topics.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from typing import TYPE_CHECKING, Any, Callable

from shoal.protocol.codec import api_key_map

if TYPE_CHECKING:
    from shoal.clock import Clock
    from shoal.handlers.context import RequestContext

PRODUCE, FETCH, SASL_HANDSHAKE, SASL_AUTHENTICATE = 0, 1, 17, 36

# Histogram bounds. Latency in seconds (Kafka's request times span 0.1 ms .. the 30 s of a
# request timeout); sizes in bytes (64 B .. 64 MiB, by 4).
LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                     0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIZE_BUCKETS = tuple(float(64 * 4**i) for i in range(11))
_LATENCY_NS = tuple(round(b * 1e9) for b in LATENCY_BUCKETS_S)
LATENCY_SLOTS = len(LATENCY_BUCKETS_S) + 1
SIZE_SLOTS = len(SIZE_BUCKETS) + 1

# Errors that say the name is no topic (or not the caller's): not counted per topic.
_NOT_A_TOPIC = frozenset({3, 17, 29, 100})  # UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC, TOPIC_AUTH..., UNKNOWN_TOPIC_ID

# RecordBatch v2 header: batchLength at 8, recordsCount at 57 (61 bytes of header in all).
_I32 = struct.Struct(">i")
_BATCH_HEADER = 61

# Per-topic counters: indexes into each topic's list.
BYTES_IN, MESSAGES_IN, PRODUCE_REQUESTS, FAILED_PRODUCE, BYTES_OUT, FETCH_REQUESTS, FAILED_FETCH = range(7)
TOPIC_FIELDS = 7


class Histogram:
    """Fixed buckets, plain ints: ``observe`` is one bisect and two additions. ``bounds`` are in
    the unit observed (ints of ns for latencies); ``scale`` converts to the exposed unit."""

    __slots__ = ("bounds", "counts", "total", "scale", "exposed")

    def __init__(self, bounds: tuple[float, ...], scale: float = 1.0, exposed: tuple[float, ...] | None = None) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0
        self.scale = scale
        self.exposed = exposed if exposed is not None else bounds

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # le: value <= bound
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """``[(le, cumulative count), ..., ("+Inf", count)]`` for a HistogramMetricFamily."""
        out, acc = [], 0
        for bound, n in zip(self.exposed, self.counts):
            acc += n
            out.append((_le(bound), acc))
        out.append(("+Inf", acc + self.counts[-1]))
        return out

    @property
    def sum(self) -> float:
        return self.total * self.scale


def _le(bound: float) -> str:
    return repr(float(bound))


def latency_histogram() -> Histogram:
    return Histogram(_LATENCY_NS, 1e-9, LATENCY_BUCKETS_S)


class ApiStats:
    """One API's histograms (Kafka's ``RequestMetrics`` of one request name) and errors.

    Flat lists, so that a request's eight observations are index arithmetic in one function
    (:meth:`BrokerMetrics.sent`) rather than eight method calls: ``latency`` holds the bucket
    counts of the six parts (``PARTS``, ``LATENCY_SLOTS`` each, the last +Inf), in ns;
    ``sizes`` those of request and response bytes (``SIZE_SLOTS`` each)."""

    __slots__ = ("latency", "latency_sum", "sizes", "size_sum", "errors")

    PARTS = ("total", "queue", "local", "remote", "throttle", "send")
    SIZE_PARTS = ("request", "response")

    def __init__(self) -> None:
        self.latency = [0] * (LATENCY_SLOTS * len(self.PARTS))
        self.latency_sum = [0] * len(self.PARTS)
        self.sizes = [0] * (SIZE_SLOTS * len(self.SIZE_PARTS))
        self.size_sum = [0] * len(self.SIZE_PARTS)
        self.errors: dict[str, int] = {}  # Kafka error name -> responses (or partitions) with it

    def histogram(self, part: str) -> Histogram:
        """A copy of one part's histogram (``total`` .. ``send``, ``request``, ``response``)."""
        if part in self.SIZE_PARTS:
            i = self.SIZE_PARTS.index(part)
            h = Histogram(SIZE_BUCKETS)
            h.counts = self.sizes[i * SIZE_SLOTS:(i + 1) * SIZE_SLOTS]
            h.total = self.size_sum[i]
            return h
        i = self.PARTS.index(part)
        h = latency_histogram()
        h.counts = self.latency[i * LATENCY_SLOTS:(i + 1) * LATENCY_SLOTS]
        h.total = self.latency_sum[i]
        return h


# A request on its way through the connection (``_Slot.m``): a list, indexed by these.
(R_STATS, R_KEY, R_ARRIVED, R_STARTED, R_LOCAL, R_REMOTE, R_THROTTLE, R_READY, R_REQUEST_SIZE, R_RESPONSE_SIZE,
 R_DELAYED, R_SASL) = range(12)
RequestRecord = list


def api_name(api_key: int) -> str:
    """Kafka's request name of an API key: ``Produce``, ``ListOffsets``, ``SaslAuthenticate``."""
    snake = api_key_map.get(api_key)
    if snake is None:
        return f"Api{api_key}"
    return "".join(w[:1].upper() + w[1:] for w in snake.split("_"))


def _fetch_replica_id(request: Any) -> int:
    rid = getattr(request, "replica_id", None)
    if rid is None:  # v15+: KIP-903 moved it into replica_state
        state = getattr(request, "replica_state", None)
        rid = state.replica_id if state is not None else -1
    return int(rid)


def produce_failures(response: Any) -> dict[tuple[str, int], int] | None:
    """(topic, partition) -> error code of a Produce response's failed partitions; None when
    none failed (or there is no response: acks=0)."""
    failed: dict[tuple[str, int], int] | None = None
    if response is not None:
        for tr in response.responses:
            for pr in tr.partition_responses:
                if pr.error_code:
                    if failed is None:
                        failed = {}
                    failed[(tr.name, pr.index)] = pr.error_code
    return failed


def batch_messages(records: bytes) -> int:
    """Records in a Produce partition's ``records``: one batch's header count (the usual case),
    else :func:`record_count`."""
    n = len(records)
    if n >= _BATCH_HEADER and _I32.unpack_from(records, 8)[0] + 12 == n:
        return _I32.unpack_from(records, 57)[0]
    return record_count(records)


def fetched_topic(image: Any, scope: Any, tr: Any) -> tuple[str, bool]:
    """(physical name, exists) of one topic of a Fetch response: by name before v13, by id since."""
    name = getattr(tr, "topic", None)
    if name:
        physical = scope.physical(name)
        return physical, physical in image.topics
    info = image.topics_by_id.get(tr.topic_id)
    return (info.name, True) if info is not None else ("", False)


def is_follower_fetch(ctx: Any, request: Any) -> bool:
    """A Fetch from a replica: ``replica_id`` >= 0 from a principal that may be one
    (``RequestContext.is_replica``); anything else is a consumer's."""
    return ctx.is_replica(_fetch_replica_id(request))


def record_count(records: bytes) -> int:
    """Records in a run of RecordBatch v2 batches (the header's count; 0 for what is not whole)."""
    n, pos, count = len(records), 0, 0
    unpack = _I32.unpack_from
    while n - pos >= _BATCH_HEADER:
        (length,) = unpack(records, pos + 8)
        (c,) = unpack(records, pos + 57)
        count += c
        pos += 12 + length
    return count


class BrokerMetrics:
    """The broker's request, topic, connection and authentication counters (see the module doc).

    Not thread-safe: the event loop owns it. ``clock`` gives ``nanos()``."""

    def __init__(self, clock: "Clock", client_throttles: Callable[[int, int], bool] | None = None) -> None:
        self.nanos = clock.nanos
        if client_throttles is None:
            from shoal.quotas.manager import client_throttles
        self._client_throttles = client_throttles
        self.apis: dict[str, ApiStats] = {}
        self._names: dict[int, str] = {}
        self.requests: dict[tuple[str, str], int] = {}  # (api, tenant) -> responses sent
        self.throttled: dict[tuple[str, str], int] = {}  # (api, tenant) -> responses with a throttle
        self.topics: dict[str, list[int]] = {}  # physical topic -> TOPIC_FIELDS counters
        self.replication_bytes_out = 0  # record bytes answered to followers' fetches
        self.rack_bytes_out: dict[tuple[str, bool], int] = {}  # (client rack, from the leader) -> consumer bytes
        self.connections_created: dict[str, int] = {}  # listener -> connections accepted
        self.authentications: dict[tuple[str, str, str], int] = {}  # (listener, mechanism, result)
        self._has_error: dict[type, bool] = {}  # response type -> has a top-level error_code

    # -- connection side -------------------------------------------------------------------

    def connection_opened(self, listener: str) -> None:
        self.connections_created[listener] = self.connections_created.get(listener, 0) + 1

    def begin(self, ctx: "RequestContext", request: Any, arrived: int, started: int) -> RequestRecord:
        """A request's handler is about to start (``arrived``: when its frame was read)."""
        key = ctx.header.api_key
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = api_name(key)
        if key == FETCH:  # Kafka's request names split Fetch by who asks
            name = "FetchFollower" if is_follower_fetch(ctx, request) else "FetchConsumer"
        stats = self.apis.get(name)
        if stats is None:
            stats = self.apis[name] = ApiStats()
        sasl_state = None
        if key == SASL_AUTHENTICATE or key == SASL_HANDSHAKE:
            sasl = getattr(ctx.connection, "sasl", None)
            if sasl is not None:
                sasl_state = sasl.state
        return [stats, (name, ctx.tenant or ""), arrived, started, 0, 0, 0, 0, 0, 0, False, sasl_state]

    def answered(self, rec: RequestRecord, ctx: "RequestContext", request: Any, response: Any,
                 data: bytes | None, throttle_ms: int, failed: bool) -> None:
        """The response is encoded (``data``; None when none is sent) or the handler failed."""
        now = self.nanos()
        local = ctx.thread_ns(now)
        remote = now - rec[R_STARTED] - local
        rec[R_LOCAL] = local
        rec[R_REMOTE] = remote if remote > 0 else 0
        rec[R_READY] = now
        rec[R_REQUEST_SIZE] = ctx.request_size
        if data is not None:
            rec[R_RESPONSE_SIZE] = len(data)
        if throttle_ms:
            rec[R_THROTTLE] = throttle_ms * 1_000_000
            rec[R_DELAYED] = data is not None and not self._client_throttles(ctx.header.api_key,
                                                                             ctx.header.api_version)
            k = rec[R_KEY]
            self.throttled[k] = self.throttled.get(k, 0) + 1
        errors = rec[R_STATS].errors
        key = ctx.header.api_key
        if failed:
            errors["UNKNOWN_SERVER_ERROR"] = errors.get("UNKNOWN_SERVER_ERROR", 0) + 1
        elif key == PRODUCE:
            self._produce(ctx, request, response, errors)  # (response None: acks=0, errors unknown)
        elif response is not None:
            if key == FETCH:
                self._fetch(ctx, response, errors, rec[R_KEY][0] == "FetchFollower", request)
            cls = type(response)
            has = self._has_error.get(cls)
            if has is None:
                has = self._has_error[cls] = "error_code" in getattr(cls, "__dataclass_fields__", ())
            if has and response.error_code:
                _count_error(errors, response.error_code)
        if rec[R_SASL] is not None:
            self._authentication(rec, ctx)

    def sent(self, rec: RequestRecord) -> None:
        """The response went to the socket (or there was none to send): count the request, and
        observe its eight histograms."""
        now = self.nanos()
        s: ApiStats = rec[R_STATS]
        lat, sums, bounds = s.latency, s.latency_sum, _LATENCY_NS
        arrived = rec[R_ARRIVED]
        v = now - arrived
        lat[bisect_left(bounds, v)] += 1
        sums[0] += v
        v = rec[R_STARTED] - arrived
        if v:
            lat[LATENCY_SLOTS + bisect_left(bounds, v)] += 1
            sums[1] += v
        else:
            lat[LATENCY_SLOTS] += 1
        v = rec[R_LOCAL]
        lat[2 * LATENCY_SLOTS + bisect_left(bounds, v)] += 1
        sums[2] += v
        v = rec[R_REMOTE]
        lat[3 * LATENCY_SLOTS + bisect_left(bounds, v)] += 1
        sums[3] += v
        throttle = rec[R_THROTTLE]
        if throttle:
            lat[4 * LATENCY_SLOTS + bisect_left(bounds, throttle)] += 1
            sums[4] += throttle
        else:
            lat[4 * LATENCY_SLOTS] += 1
        v = now - rec[R_READY]
        if rec[R_DELAYED]:
            v = max(0, v - throttle)
        lat[5 * LATENCY_SLOTS + bisect_left(bounds, v)] += 1
        sums[5] += v
        sizes, size_sum = s.sizes, s.size_sum
        v = rec[R_REQUEST_SIZE]
        sizes[bisect_left(SIZE_BUCKETS, v)] += 1
        size_sum[0] += v
        v = rec[R_RESPONSE_SIZE]
        sizes[SIZE_SLOTS + bisect_left(SIZE_BUCKETS, v)] += 1
        size_sum[1] += v
        requests, k = self.requests, rec[R_KEY]
        requests[k] = requests.get(k, 0) + 1

    # -- per topic -------------------------------------------------------------------------

    def _topic(self, physical: str) -> list[int]:
        t = self.topics.get(physical)
        if t is None:
            t = self.topics[physical] = [0] * TOPIC_FIELDS
        return t

    def _produce(self, ctx: "RequestContext", request: Any, response: Any, errors: dict[str, int]) -> None:
        failed = produce_failures(response)
        topics = ctx.services.metadata.image.topics
        counters = self.topics
        prefix = ctx.scope.prefix  # tenancy: the tenant's names are its physical ones, prefixed
        for td in request.topic_data:
            physical = prefix + td.name if prefix else td.name
            if physical in topics:
                t = counters.get(physical)
                if t is None:
                    t = counters[physical] = [0] * TOPIC_FIELDS
            else:
                t = None
            for pd in td.partition_data:
                code = failed.get((td.name, pd.index)) if failed is not None else None
                if code is not None:
                    _count_error(errors, code)
                if t is None:
                    continue
                t[PRODUCE_REQUESTS] += 1
                if code is not None:
                    if code not in _NOT_A_TOPIC:
                        t[FAILED_PRODUCE] += 1
                    continue
                records = pd.records
                if records:
                    t[BYTES_IN] += len(records)
                    t[MESSAGES_IN] += batch_messages(records)

    def _fetch(self, ctx: "RequestContext", response: Any, errors: dict[str, int], follower: bool,
               request: Any = None) -> None:
        image = ctx.services.metadata.image
        topics = image.topics
        scope = ctx.scope
        served = [0, 0]  # consumer bytes served as follower, as leader (KIP-392: by the client's rack)
        node = ctx.services.node_id
        for tr in response.responses:
            physical, exists = fetched_topic(image, scope, tr)
            t = self._topic(physical) if exists and not follower else None
            for pd in tr.partitions:
                code = pd.error_code
                if code:
                    _count_error(errors, code)
                size = len(pd.records) if pd.records else 0
                if follower:
                    self.replication_bytes_out += size
                if t is None:
                    continue
                t[FETCH_REQUESTS] += 1
                if code:
                    if code not in _NOT_A_TOPIC:
                        t[FAILED_FETCH] += 1
                t[BYTES_OUT] += size
                if size:
                    info = topics[physical].partitions
                    as_leader = pd.partition_index < len(info) and info[pd.partition_index].leader == node
                    served[as_leader] += size
        if served[0] or served[1]:
            rack = (getattr(request, "rack_id", None) or "") if request is not None else ""
            for as_leader in (False, True):
                if served[as_leader]:
                    key = (rack, as_leader)
                    self.rack_bytes_out[key] = self.rack_bytes_out.get(key, 0) + served[as_leader]

    def forget_topics(self, keep: Any) -> None:
        """Drop the counters of topics no longer in ``keep`` (deleted: their series go, as
        Kafka removes a deleted topic's metrics)."""
        for name in [n for n in self.topics if n not in keep]:
            del self.topics[name]

    # -- authentication --------------------------------------------------------------------

    def _authentication(self, rec: RequestRecord, ctx: "RequestContext") -> None:
        sasl = getattr(ctx.connection, "sasl", None)
        if sasl is None:
            return
        before, after = rec[R_SASL], sasl.state
        if after == sasl.FAILED and before != sasl.FAILED:
            result = "failure"
        elif after == sasl.AUTHENTICATED and before != sasl.AUTHENTICATED:
            result = "success"
        else:
            return  # a step of a longer exchange (SCRAM's first message), or a handshake
        k = (ctx.listener, sasl.mechanism or "", result)
        self.authentications[k] = self.authentications.get(k, 0) + 1


def _count_error(errors: dict[str, int], code: int) -> None:
    name = _error_name(code)
    errors[name] = errors.get(name, 0) + 1


_ERROR_NAMES: dict[int, str] = {}


def _error_name(code: int) -> str:
    name = _ERROR_NAMES.get(code)
    if name is None:
        from shoal.protocol.errors import ErrorCode

        try:
            name = ErrorCode(code).name.upper()
        except ValueError:
            name = f"ERROR_{int(code)}"
        _ERROR_NAMES[code] = name
    return name
