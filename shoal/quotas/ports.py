"""What the quota tasks use of their broker (``shoal.broker.Broker``, the composition root), and
nothing else of it: :class:`ProtectionHost` for the broker-wide protection
(``shoal.quotas.autotune.BrokerProtection.for_broker`` and its ``BrokerLoad``),
:class:`DemandHost` for the tenant quotas' demand exchange (``shoal.quotas.demand``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from shoal.clock import Clock
    from shoal.config import BrokerConfig
    from shoal.metadata import MetadataStore
    from shoal.quotas.manager import QuotaManagers


class _QuotaHost(Protocol):
    quotas: "QuotaManagers"
    clock: "Clock"

    @property
    def config(self) -> "BrokerConfig": ...


class ProtectionHost(_QuotaHost, Protocol):
    """The quota managers (usage, configured and dynamic tenant quotas), the configs, and the load:
    requests in flight on the open connections and waiting in the request scheduler."""

    connections: set[Any]  # shoal.server.connection.KafkaConnection (.in_flight)
    scheduler: Any  # shoal.server.scheduler.RequestScheduler (.waiting)


class DemandHost(_QuotaHost, Protocol):
    """The quota managers, the configs, this node, and the metadata store (on etcd, its backend's
    registration: where the brokers' demands are exchanged)."""

    node_id: int
    metadata: "MetadataStore"
