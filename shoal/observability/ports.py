"""What the broker metrics' scrape side (``shoal.observability.collector``) reads of its broker
(``shoal.broker.Broker``, the composition root), and nothing else of it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from shoal.groups import GroupCoordinator
    from shoal.metadata import MetadataStore
    from shoal.replica import ReplicaManager


class CollectorHost(Protocol):
    """Read at scrape time: the counters (``metrics``), the image, the open connections per
    listener, the replicas (fetchers, partitions, logs), the groups coordinated (consumer lag) and
    the event loop's lag probe (``loop_lag``, set while the metrics endpoint runs)."""

    metadata: "MetadataStore"
    metrics: Any  # shoal.observability.BrokerMetrics (or metering's UsageMetrics), None when off
    connections: set[Any]  # shoal.server.connection.KafkaConnection
    listeners: list[Any]  # the bound listeners (.name, .host, .port)
    replicas: "ReplicaManager"
    groups: "GroupCoordinator"
    loop_lag: Any  # shoal.observability.loop.LoopLagProbe, None until the endpoint starts
