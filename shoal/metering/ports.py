"""What metering uses of its broker (``shoal.broker.Broker``, the composition root), and nothing
else of it: :class:`SamplerHost` for the usage sampler (``shoal.metering.counters``),
:class:`MeteringHost` for the publisher and its writer (``shoal.metering.publisher``)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from shoal.clock import Clock
    from shoal.config import BrokerConfig
    from shoal.metadata import MetadataStore
    from shoal.replica import ReplicaManager


class SamplerHost(Protocol):
    """Usage is read off the per-request hook's counters (``metrics``), the image, the replicas
    this broker hosts (log sizes) and its open connections."""

    metadata: "MetadataStore"
    metrics: Any  # shoal.metering.counters.UsageMetrics or UsageCounters
    replicas: "ReplicaManager"
    connections: set[Any]  # shoal.server.connection.KafkaConnection


class MeteringHost(SamplerHost, Protocol):
    """The publisher's: the sampler's, and what it needs to create ``__shoal_usage`` and write to
    it (its node id, configs, data dir, the controller election, the planner's random start)."""

    node_id: int
    clock: "Clock"
    static_config: "BrokerConfig"  # its data dir (metering-state.json)
    controller: Any  # shoal.cluster.controller.Controller on etcd, else None
    random: random.Random

    @property
    def config(self) -> "BrokerConfig": ...
