"""What the server layer uses of its broker (``shoal.broker.Broker``, the composition root), and
nothing else of it: one port per user, each a structural type the broker satisfies as it is.

- :class:`LimitsHost`: ``shoal.server.limits.ConnectionLimits`` (configs, quotas of the image).
- :class:`GuardHost`: ``shoal.server.bounds`` (the connection sweep, request memory, its metrics).
- :class:`ConnectionHost`: ``shoal.server.connection.KafkaConnection`` (what a request is run with).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from shoal.clock import Clock
    from shoal.config import BrokerConfig
    from shoal.handlers.registry import Registry
    from shoal.logutil import RateLimitedLog
    from shoal.metadata import MetadataStore
    from shoal.quotas.manager import QuotaManagers
    from shoal.server.scheduler import RequestScheduler
    from shoal.services import Services


class LimitsHost(Protocol):
    """What the connection limits read: this node's configs as of the image, and the time."""

    node_id: int
    clock: "Clock"
    metadata: "MetadataStore"

    @property
    def config(self) -> "BrokerConfig": ...


class GuardHost(Protocol):
    """What the connection guard reads: its configs, the image's epoch, the open connections
    (``KafkaConnection``), and the time."""

    clock: "Clock"
    metadata: "MetadataStore"
    connections: set[Any]

    @property
    def config(self) -> "BrokerConfig": ...


class ConnectionHost(GuardHost, Protocol):
    """What a connection uses: the guard's, and what its requests are run with (the handlers'
    registry and services, the scheduler, quotas, the metrics hook, the listeners' security)."""

    quotas: "QuotaManagers"
    scheduler: "RequestScheduler"
    registry: "Registry"
    services: "Services"
    listener_security: dict[str, Any]  # listener name -> shoal.auth.ListenerSecurity
    client_log: "RateLimitedLog"
    metrics: Any  # shoal.observability.BrokerMetrics, metering's hook, or None
