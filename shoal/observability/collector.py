"""The scrape half of the broker metrics: a prometheus_client collector (docs/metrics.md).

It turns :class:`shoal.observability.requests.BrokerMetrics`' plain numbers into metric families
and reads, when ``/metrics`` is asked and never on a request's path: the connections per listener,
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

from typing import TYPE_CHECKING, Any, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from shoal.metadata import owner_tenant
from shoal.observability.requests import (
    BYTES_IN, BYTES_OUT, FAILED_FETCH, FAILED_PRODUCE, FETCH_REQUESTS, MESSAGES_IN, PRODUCE_REQUESTS, ApiStats,
    BrokerMetrics, Histogram,
)

if TYPE_CHECKING:
    from shoal.broker import Broker

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


def _counter(name: str, doc: str, labels: list[str], rows: dict[Any, int]) -> CounterMetricFamily:
    """A counter family from ``{label values (a tuple, or one value): count}``."""
    fam = CounterMetricFamily(name, doc, labels=labels)
    for key, n in sorted(rows.items()):
        fam.add_metric(list(key) if isinstance(key, tuple) else [key], n)
    return fam


def _histogram(fam: HistogramMetricFamily, labels: list[str], h: Histogram) -> None:
    fam.add_metric(labels, h.cumulative(), h.sum)


class BrokerCollector:
    """Reads ``broker.metrics`` (BrokerMetrics), its connections, replicas and groups at scrape time."""

    def __init__(self, broker: "Broker") -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        m: BrokerMetrics | None = getattr(broker, "metrics", None)
        image = broker.metadata.image
        if m is not None:
            yield from self._requests(m)
            yield from self._topics(m, image)
            yield from self._connections(m)
        yield from self._logs(image)
        yield from self._lag(image)
        probe = getattr(broker, "loop_lag", None)
        if probe is not None:
            fam = HistogramMetricFamily("shoal_event_loop_lag_seconds",
                                        "how late the broker's event loop ran a timer it was asked to run on time")
            fam.add_metric([], probe.histogram.cumulative(), probe.histogram.sum)
            yield fam
            yield GaugeMetricFamily("shoal_event_loop_lag_max_seconds", "the largest event-loop lag seen since start",
                                    value=probe.max)

    # -- requests --------------------------------------------------------------------------

    def _requests(self, m: BrokerMetrics) -> Iterator[Metric]:
        apis: list[tuple[str, ApiStats]] = sorted(m.apis.items())
        for name, part, doc in REQUEST_HISTOGRAMS:
            fam = HistogramMetricFamily(name, doc, labels=["api"])
            for api, stats in apis:
                _histogram(fam, [api], stats.histogram(part))
            yield fam
        yield _counter("shoal_requests", "requests answered, per API (Kafka's request name) and tenant",
                       ["api", "tenant"], m.requests)
        fam = CounterMetricFamily("shoal_request_errors",
                                  "responses with an error, per API and Kafka error (Produce and Fetch: per "
                                  "partition; UNKNOWN_SERVER_ERROR: the handler failed)", labels=["api", "error"])
        for api, stats in apis:
            for error, n in sorted(stats.errors.items()):
                fam.add_metric([api, error], n)
        yield fam
        yield _counter("shoal_throttled_requests", "responses that carried a quota throttle", ["api", "tenant"],
                       m.throttled)

    def _topics(self, m: BrokerMetrics, image: Any) -> Iterator[Metric]:
        m.forget_topics(image.topics)
        rows = [(split_name(physical, image.tenants), counters) for physical, counters in sorted(m.topics.items())]
        for name, index, doc in TOPIC_COUNTERS:
            fam = CounterMetricFamily(name, doc, labels=["tenant", "topic"])
            for (tenant, topic), counters in rows:
                fam.add_metric([tenant, topic], counters[index])
            yield fam
        yield CounterMetricFamily("shoal_replication_bytes_out", "record bytes answered to followers' fetches",
                                  value=m.replication_bytes_out)

    def _connections(self, m: BrokerMetrics) -> Iterator[Metric]:
        open_: dict[str, int] = {l.name: 0 for l in getattr(self.broker, "listeners", ())}
        for conn in list(self.broker.connections):
            open_[conn.listener] = open_.get(conn.listener, 0) + 1
        fam = GaugeMetricFamily("shoal_connections", "open client connections, per listener", labels=["listener"])
        for listener, n in sorted(open_.items()):
            fam.add_metric([listener], n)
        yield fam
        yield _counter("shoal_connections_created", "connections accepted, per listener", ["listener"],
                       m.connections_created)
        yield _counter("shoal_authentications", "SASL authentications (and re-authentications), per listener, "
                       "mechanism and result (success, failure)", ["listener", "mechanism", "result"],
                       m.authentications)

    # -- logs and lag (read from the replica manager and the group coordinator) -------------

    def _logs(self, image: Any) -> Iterator[Metric]:
        replicas = getattr(self.broker, "replicas", None)
        if replicas is None:
            return
        labels = ["tenant", "topic", "partition"]
        fams = {
            "size": GaugeMetricFamily("shoal_log_size_bytes", "bytes of a hosted partition's log on disk", labels=labels),
            "segments": GaugeMetricFamily("shoal_log_segments", "segments of a hosted partition's log", labels=labels),
            "start": GaugeMetricFamily("shoal_log_start_offset", "a hosted partition's log start offset", labels=labels),
            "end": GaugeMetricFamily("shoal_log_end_offset", "a hosted partition's log end offset", labels=labels),
            "hw": GaugeMetricFamily("shoal_log_high_watermark", "a hosted partition's high watermark", labels=labels),
            "leader": GaugeMetricFamily("shoal_partition_leader", "1 if this broker leads the partition, 0 if it follows",
                                        labels=labels),
            "isr": GaugeMetricFamily("shoal_partition_in_sync_replicas", "the ISR size of a partition this broker leads",
                                     labels=labels),
        }
        for p in sorted(replicas.hosted(), key=lambda p: p.key):
            log = p.log
            tenant, topic = split_name(p.topic, image.tenants)
            values = [tenant, topic, str(p.index)]
            fams["size"].add_metric(values, log.size_bytes)
            fams["segments"].add_metric(values, len(log.segment_bases()))
            fams["start"].add_metric(values, log.log_start_offset)
            fams["end"].add_metric(values, log.log_end_offset)
            fams["hw"].add_metric(values, log.high_watermark)
            leader = p.is_leader
            fams["leader"].add_metric(values, 1 if leader else 0)
            if leader:
                fams["isr"].add_metric(values, len(p.info.isr))
        yield from fams.values()

    def _lag(self, image: Any) -> Iterator[Metric]:
        groups = getattr(self.broker, "groups", None)
        replicas = getattr(self.broker, "replicas", None)
        labels = ["tenant", "group", "topic", "partition"]
        lag = GaugeMetricFamily("shoal_consumer_group_lag",
                                "high watermark minus the group's committed offset, for partitions this broker hosts "
                                "of groups it coordinates", labels=labels)
        committed = GaugeMetricFamily("shoal_consumer_group_committed_offset",
                                      "a group's committed offset, for groups this broker coordinates", labels=labels)
        if groups is not None and replicas is not None:
            store = groups.offsets
            for group in sorted(store.groups()):
                tenant, visible_group = split_name(group, image.tenants)
                for topic, parts in sorted(store.group_offsets(group).items()):
                    _, visible_topic = split_name(topic, image.tenants)
                    for index, om in sorted(parts.items()):
                        values = [tenant, visible_group, visible_topic, str(index)]
                        committed.add_metric(values, om.offset)
                        p = replicas.partition(topic, index)
                        if p is not None and om.offset >= 0:
                            lag.add_metric(values, max(0, p.high_watermark - om.offset))
        yield lag
        yield committed
