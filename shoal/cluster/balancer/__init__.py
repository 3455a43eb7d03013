"""The balancer (issue 27): per-partition load in a cluster model (:mod:`.model`), goals in
priority order (:mod:`.goals`), and a pure planner (:mod:`.planner`): ``brokers + partitions +
goals -> plan``. The loop that applies plans with throttles lives beside the controller."""

from shoal.cluster.balancer.model import (
    ACTIVE,
    EXCLUDED,
    OFFLINE,
    BrokerInfo,
    Capacity,
    PartitionInfo,
    PartitionLoad,
)
from shoal.cluster.balancer.planner import (
    ANY_UNEVEN_LOAD,
    EMPTY_BROKER,
    BalancerConfig,
    Plan,
    objective,
    plan,
)

__all__ = [
    "ACTIVE",
    "ANY_UNEVEN_LOAD",
    "EMPTY_BROKER",
    "EXCLUDED",
    "OFFLINE",
    "BalancerConfig",
    "BrokerInfo",
    "Capacity",
    "PartitionInfo",
    "PartitionLoad",
    "Plan",
    "objective",
    "plan",
]
