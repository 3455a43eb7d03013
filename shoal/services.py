"""What handlers may use of their broker: narrow, typed collaborators (the coordinators have theirs,
shoal.groups.runtime.CoordinatorContext).

A handler sees ``ctx.services`` (and the request's own context); nothing reaches back into the
``Broker`` object, which only assembles these services, runs the listeners and follows its
lifecycle. Partitions are reached only through ``replicas`` (the replica layer).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from shoal.groups.runtime import BrokerSources

if TYPE_CHECKING:
    from shoal.clock import Clock
    from shoal.config import BrokerConfig
    from shoal.groups import GroupCoordinator
    from shoal.handlers.fetch import FetchSessionCache
    from shoal.handlers.metadata import PartitionEntities
    from shoal.handlers.producer_ids import ProducerIdManager
    from shoal.handlers.registry import Registry
    from shoal.metadata import MetadataImage, MetadataStore
    from shoal.quotas.manager import QuotaManagers
    from shoal.quotas.mutation import MutationQuotaManager
    from shoal.replica import ReplicaManager
    from shoal.txn import TransactionCoordinator


def _partition_entities() -> "PartitionEntities":
    from shoal.handlers.metadata import PartitionEntities

    return PartitionEntities()


@dataclass(eq=False)
class Services(BrokerSources):
    node_id: int
    clock: "Clock"
    metadata: "MetadataStore"
    replicas: "ReplicaManager"
    quotas: "QuotaManagers"
    mutation_quotas: "MutationQuotaManager"
    producer_ids: "ProducerIdManager"
    fetch_sessions: "FetchSessionCache"
    registry: "Registry"
    config_source: Callable[[], "BrokerConfig"]  # static + dynamic configs as of the image
    controller_source: Callable[[], int]  # the elected controller's id (-1 until known)
    cluster_source: Callable[[], bool]  # True on etcd, once the controller election runs
    groups: "GroupCoordinator"  # built before Services, from the coordinator context; started by the broker
    txn: "TransactionCoordinator"  # transactions: built and started like groups
    # registered brokers the controller treats as gone (Controller.fenced_brokers): placement leaves them out
    fenced_source: Callable[[], frozenset[int]] = frozenset
    random: random.Random = field(default_factory=random.Random)  # placement's start index
    listener_security: dict[str, Any] = field(default_factory=dict)  # name -> auth.ListenerSecurity
    # Metadata's partition entities by topic state (thousands of partitions: built once, not per request)
    metadata_partitions: "PartitionEntities" = field(default_factory=lambda: _partition_entities())

    @property
    def controller_id(self) -> int:
        return self.controller_source()

    @property
    def fenced_brokers(self) -> frozenset[int]:
        return self.fenced_source()

    @property
    def image(self) -> "MetadataImage":
        return self.metadata.image
