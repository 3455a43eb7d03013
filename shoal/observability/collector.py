"""The scrape half of the broker metrics (docs/metrics.md), written as Prometheus text.

It writes :class:`shoal.observability.requests.BrokerMetrics`' plain numbers and reads, when ``/metrics`` is asked and never on a request's path: the connections per listener,
the log of every hosted partition (size, segments, start and end offsets, high watermark), the
consumer lag of every group this broker coordinates on the partitions it hosts (the high
watermark, what ``ListOffsets`` LATEST answers and ``kafka-consumer-groups.sh`` calls LOG-END-OFFSET,
minus the committed offset), and the event-loop lag probe.

Names follow Prometheus' conventions (``shoal_`` prefix, ``_total`` counters, base units:
seconds and bytes). A series about a tenant's topic or group is labelled with the tenant id
(``tenant``, "" for the physical view) and the name the tenant uses (``topic``, ``group``);
the physical prefix never shows.
"""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING, Any, Iterator

from shoal import __version__
from shoal.metadata import owner_tenant
from shoal.metadata.features import supported as supported_features
from shoal.observability.exposition import TextExposition
from shoal.observability.requests import (
    BYTES_IN, BYTES_OUT, FAILED_FETCH, FAILED_PRODUCE, FETCH_REQUESTS, LATENCY_BUCKETS_S, LATENCY_SLOTS, MESSAGES_IN,
    PRODUCE_REQUESTS, SIZE_BUCKETS, SIZE_SLOTS, ApiStats, BrokerMetrics,
)
from shoal.protocol.records import NATIVE
from shoal.protocol.regions import RegionCounters

if TYPE_CHECKING:
    from shoal.observability.ports import CollectorHost

UNKNOWN_SOFTWARE = "unknown"  # Kafka's ClientInformation.UNKNOWN_NAME_OR_VERSION
BUILD_INFO = ((__version__, platform.python_version(), "c" if NATIVE else "python"), 1)

TOPIC_COUNTERS = (
    ("shoal_topic_bytes_in", BYTES_IN, "record bytes appended by Produce (Kafka's BytesInPerSec)"),
    ("shoal_topic_messages_in", MESSAGES_IN, "records appended by Produce (Kafka's MessagesInPerSec)"),
    ("shoal_topic_bytes_out", BYTES_OUT,
     "record bytes answered to consumers' fetches, followers' excluded (Kafka's BytesOutPerSec)"),
    ("shoal_topic_produce_requests", PRODUCE_REQUESTS,
     "partitions of the topic in Produce requests (Kafka's TotalProduceRequestsPerSec)"),
    ("shoal_topic_fetch_requests", FETCH_REQUESTS,
     "partitions of the topic in consumers' Fetch responses (Kafka's TotalFetchRequestsPerSec)"),
    ("shoal_topic_failed_produce_requests", FAILED_PRODUCE,
     "partitions of the topic whose Produce was answered with an error (Kafka's FailedProduceRequestsPerSec)"),
    ("shoal_topic_failed_fetch_requests", FAILED_FETCH,
     "partitions of the topic whose Fetch was answered with an error (Kafka's FailedFetchRequestsPerSec)"),
)

# (name, part of ApiStats, help)
REQUEST_HISTOGRAMS = (
    ("shoal_request_total_time_seconds", "total",
     "time from a request's frame read to its response handed to the socket (Kafka's TotalTimeMs)"),
    ("shoal_request_queue_time_seconds", "queue",
     "time a request waited in the scheduler's queue before its handler started (RequestQueueTimeMs)"),
    ("shoal_request_local_time_seconds", "local",
     "time the broker worked on a request on its event loop (LocalTimeMs)"),
    ("shoal_request_remote_time_seconds", "remote",
     "time a request waited for others: purgatory (acks=all, long-poll fetch), rebalance, metadata "
     "store (RemoteTimeMs)"),
    ("shoal_request_throttle_time_seconds", "throttle", "quota throttle time of a response (ThrottleTimeMs)"),
    ("shoal_request_send_time_seconds", "send",
     "time a ready response waited behind earlier responses of its connection (ResponseSendTimeMs)"),
    ("shoal_request_size_bytes", "request", "size of request frames (RequestBytes)"),
    ("shoal_response_size_bytes", "response", "size of response frames"),
)


def split_name(physical: str, tenants: Any) -> tuple[str, str]:
    """(tenant id or "", the tenant's name) of a physical topic or group name."""
    tid = owner_tenant(physical, tenants)
    if tid is None:
        return "", physical
    return tid, physical[len(tid) + 1:]


def _part_rows(apis: list[tuple[str, ApiStats]], part: str) -> Iterator[tuple[tuple[str], list[int], float]]:
    if part in ApiStats.SIZE_PARTS:
        i = ApiStats.SIZE_PARTS.index(part)
        for api, s in apis:
            yield (api,), s.sizes[i * SIZE_SLOTS:(i + 1) * SIZE_SLOTS], s.size_sum[i]
    else:
        i = ApiStats.PARTS.index(part)
        for api, s in apis:
            yield (api,), s.latency[i * LATENCY_SLOTS:(i + 1) * LATENCY_SLOTS], s.latency_sum[i] / 1e9


def _keyed(rows: dict[Any, int]) -> list[tuple[tuple, int]]:
    """``{label values (a tuple, or one value): n}`` as sorted rows."""
    return [(k if isinstance(k, tuple) else (k,), n) for k, n in sorted(rows.items())]


class BrokerCollector:
    """Reads ``broker.metrics`` (BrokerMetrics), its connections, replicas and groups at scrape time
    and writes them as Prometheus text (:meth:`exposition`)."""

    def __init__(self, broker: "CollectorHost") -> None:
        self.broker = broker

    def exposition(self) -> str:
        broker = self.broker
        out = TextExposition()
        out.gauge("shoal_build_info", "1, labelled with this broker's release, its Python and whether the C "
                  "speed-up (shoal._native) is in use", ("version", "python", "speedups"), [BUILD_INFO])
        m: BrokerMetrics | None = getattr(broker, "metrics", None)
        image = broker.metadata.image
        # KIP-584: what this broker can run at, and what the cluster runs at (a finalized level below
        # every broker's max is an upgrade that can be finalized; docs/cluster.md, Feature levels)
        out.gauge("shoal_feature_max_supported_level", "the highest level of each feature this broker's release "
                  "supports", ("feature",), [((name,), hi) for name, _lo, hi in supported_features()])
        out.gauge("shoal_feature_finalized_level", "the cluster's finalized level of each feature (shoal features "
                  "describe)", ("feature",), _keyed(dict(image.features.levels)))
        if m is not None:
            self._requests(out, m)
            self._topics(out, m, image)
            self._connections(out, m)
        self._logs(out, image)
        self._fetchers(out)
        self._lag(out, image)
        probe = getattr(broker, "loop_lag", None)
        if probe is not None:
            h = probe.histogram
            out.histogram("shoal_event_loop_lag_seconds",
                          "how late the broker's event loop ran a timer it was asked to run on time", (),
                          h.bounds, [((), h.counts, h.sum)])
            out.gauge("shoal_event_loop_lag_max_seconds", "the largest event-loop lag seen since start", (),
                      [((), probe.max)])
        return out.text()

    # -- requests --------------------------------------------------------------------------

    def _requests(self, out: TextExposition, m: BrokerMetrics) -> None:
        apis: list[tuple[str, ApiStats]] = sorted(m.apis.items())
        for name, part, doc in REQUEST_HISTOGRAMS:
            bounds = SIZE_BUCKETS if part in ApiStats.SIZE_PARTS else LATENCY_BUCKETS_S
            out.histogram(name, doc, ("api",), bounds, _part_rows(apis, part))
        out.counter("shoal_requests", "requests answered, per API (Kafka's request name) and tenant",
                    ("api", "tenant"), _keyed(m.requests))
        out.counter("shoal_request_errors", "responses with an error, per API and Kafka error (Produce and Fetch: "
                    "per partition; UNKNOWN_SERVER_ERROR: the handler failed)", ("api", "error"),
                    [((api, error), n) for api, stats in apis for error, n in sorted(stats.errors.items())])
        out.counter("shoal_throttled_requests", "responses that carried a quota throttle", ("api", "tenant"),
                    _keyed(m.throttled))

    def _topics(self, out: TextExposition, m: BrokerMetrics, image: Any) -> None:
        m.forget_topics(image.topics)
        rows = [(split_name(physical, image.tenants), counters) for physical, counters in sorted(m.topics.items())]
        for name, index, doc in TOPIC_COUNTERS:
            out.counter(name, doc, ("tenant", "topic"), [(labels, counters[index]) for labels, counters in rows])
        out.counter("shoal_replication_bytes_out", "record bytes answered to followers' fetches", (),
                    [((), m.replication_bytes_out)])
        out.counter("shoal_consumer_bytes_out_by_rack",
                    "record bytes answered to consumers, by the client's rack (client.rack; empty: none sent) and "
                    "by whether this broker served them as the leader or as a follower (KIP-392)",
                    ("client_rack", "served_as"),
                    [((rack, "leader" if leader else "follower"), n)
                     for (rack, leader), n in sorted(m.rack_bytes_out.items())])

    def _connections(self, out: TextExposition, m: BrokerMetrics) -> None:
        open_: dict[str, int] = {l.name: 0 for l in getattr(self.broker, "listeners", ())}
        for conn in list(self.broker.connections):
            open_[conn.listener] = open_.get(conn.listener, 0) + 1
        out.gauge("shoal_connections", "open client connections, per listener", ("listener",), _keyed(open_))
        # Kafka's connections{clientSoftwareName, clientSoftwareVersion, listener} (KIP-511): what each
        # client named itself in ApiVersions v3+ ("unknown" before that, or for older clients)
        software: dict[tuple[str, str, str], int] = {}
        for conn in list(self.broker.connections):
            name, version = getattr(conn, "client_software", None) or (UNKNOWN_SOFTWARE, UNKNOWN_SOFTWARE)
            software[(conn.listener, name, version)] = software.get((conn.listener, name, version), 0) + 1
        out.gauge("shoal_client_software_connections",
                  "open client connections per listener and the client software name and version they sent "
                  "in ApiVersions (KIP-511; 'unknown' when not sent)",
                  ("listener", "client_software_name", "client_software_version"), _keyed(software))
        out.counter("shoal_connections_created", "connections accepted, per listener", ("listener",),
                    _keyed(m.connections_created))
        out.counter("shoal_fetch_sendfile_bytes", "record bytes of Fetch responses sent from the segment files "
                    "with sendfile (zero copy, plaintext listeners)", (), [((), RegionCounters.sent_bytes)])
        out.counter("shoal_fetch_padded_bytes", "bytes of Fetch responses padded because a segment was truncated "
                    "while they were sent (read as a partial last batch)", (), [((), RegionCounters.padded_bytes)])
        out.gauge("shoal_fetch_regions_open", "file regions (duplicated segment descriptors) waiting to be sent",
                  (), [((), RegionCounters.open)])
        out.counter("shoal_authentications", "SASL authentications (and re-authentications), per listener, "
                    "mechanism and result (success, failure)", ("listener", "mechanism", "result"),
                    _keyed(m.authentications))

    # -- logs and lag (read from the replica manager and the group coordinator) -------------

    def _fetchers(self, out: TextExposition) -> None:
        """The replica fetchers of this broker (as a follower), per leader and fetcher index."""
        replicas = getattr(self.broker, "replicas", None)
        if replicas is None:
            return
        manager = replicas.fetchers
        out.gauge("shoal_replica_catching_up_partitions", "followed partitions out of the ISR fetched now "
                  "(at most replica.fetch.max.catchup.partitions)", (), [((), len(manager.catching_up))])
        out.gauge("shoal_replica_catching_up_waiting_partitions", "followed partitions out of the ISR waiting for "
                  "a place to catch up (not fetched)", (), [((), len(manager.waiting))])
        out.gauge("shoal_replica_catching_up_peak_partitions", "the most partitions catching up at once since start",
                  (), [((), manager.catching_up_peak)])
        fetchers = sorted(manager.fetchers.items())
        labels = ("leader", "fetcher")

        def rows(value: Any) -> list[tuple[tuple[str, str], float]]:
            return [((str(leader), str(index)), value(f)) for (leader, index), f in fetchers]

        out.gauge("shoal_replica_fetcher_partitions", "partitions a replica fetcher fetches from its leader", labels,
                  rows(lambda f: len(f.partitions)))
        out.gauge("shoal_replica_fetcher_pipeline_depth", "Fetch requests a replica fetcher keeps in flight "
                  "(shoal.replica.fetch.pipeline.depth, or chosen from the round trip)", labels, rows(lambda f: f.depth))
        out.gauge("shoal_replica_fetcher_round_trip_seconds", "round trip to the leader measured at connect "
                  "(-1: not connected yet)", labels,
                  rows(lambda f: f.rtt_ms / 1000.0 if f.rtt_ms is not None else -1))
        out.counter("shoal_replica_fetcher_fetches", "Fetch answers a replica fetcher received", labels,
                    rows(lambda f: f.fetches))
        out.counter("shoal_replica_fetcher_resyncs", "pipelines started again because an answer did not start at "
                    "the log end (should stay 0)", labels, rows(lambda f: f.resyncs))
        out.counter("shoal_replica_fetcher_full_fetches", "Fetch requests that named every partition (opening a "
                    "fetch session, or without one)", labels, rows(lambda f: f.full_fetches))
        out.counter("shoal_replica_fetcher_partitions_named", "partitions named by a replica fetcher's requests "
                    "(in a fetch session only those whose fetch state changed: 0 while idle)", labels,
                    rows(lambda f: f.named))

    def _logs(self, out: TextExposition, image: Any) -> None:
        replicas = getattr(self.broker, "replicas", None)
        if replicas is None:
            return
        rows: dict[str, list[tuple[tuple[str, str, str], int]]] = {
            k: [] for k in ("size", "segments", "start", "end", "hw", "leader", "isr")}
        for p in sorted(replicas.hosted(), key=lambda p: p.key):
            log = p.view
            tenant, topic = split_name(p.topic, image.tenants)
            values = (tenant, topic, str(p.index))
            rows["size"].append((values, log.size_bytes))
            rows["segments"].append((values, len(log.segment_bases())))
            rows["start"].append((values, log.log_start_offset))
            rows["end"].append((values, log.log_end_offset))
            rows["hw"].append((values, log.high_watermark))
            leader = p.is_leader
            rows["leader"].append((values, 1 if leader else 0))
            if leader:
                rows["isr"].append((values, len(p.info.isr)))
        labels = ("tenant", "topic", "partition")
        for key, name, doc in (
            ("size", "shoal_log_size_bytes", "bytes of a hosted partition's log on disk"),
            ("segments", "shoal_log_segments", "segments of a hosted partition's log"),
            ("start", "shoal_log_start_offset", "a hosted partition's log start offset"),
            ("end", "shoal_log_end_offset", "a hosted partition's log end offset"),
            ("hw", "shoal_log_high_watermark", "a hosted partition's high watermark"),
            ("leader", "shoal_partition_leader", "1 if this broker leads the partition, 0 if it follows"),
            ("isr", "shoal_partition_in_sync_replicas", "the ISR size of a partition this broker leads"),
        ):
            out.gauge(name, doc, labels, rows[key])

    def _lag(self, out: TextExposition, image: Any) -> None:
        groups = getattr(self.broker, "groups", None)
        replicas = getattr(self.broker, "replicas", None)
        lag: list[tuple[tuple[str, ...], int]] = []
        committed: list[tuple[tuple[str, ...], int]] = []
        if groups is not None and replicas is not None:
            store = groups.offsets
            for group in sorted(store.groups()):
                tenant, visible_group = split_name(group, image.tenants)
                for topic, parts in sorted(store.group_offsets(group).items()):
                    _, visible_topic = split_name(topic, image.tenants)
                    for index, om in sorted(parts.items()):
                        values = (tenant, visible_group, visible_topic, str(index))
                        committed.append((values, om.offset))
                        p = replicas.partition(topic, index)
                        if p is not None and om.offset >= 0:
                            lag.append((values, max(0, p.high_watermark - om.offset)))
        labels = ("tenant", "group", "topic", "partition")
        out.gauge("shoal_consumer_group_lag", "high watermark minus the group's committed offset, for partitions "
                  "this broker hosts of groups it coordinates", labels, lag)
        out.gauge("shoal_consumer_group_committed_offset",
                  "a group's committed offset, for groups this broker coordinates", labels, committed)
