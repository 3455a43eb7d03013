"""Placement: where a partition's replicas go. Pure functions, no I/O; only the protocol layer below.

- :mod:`~shoal.placement.assignment`: Kafka's rack-aware assignment (KIP-36,
  ``AdminUtils.assignReplicasToBrokers``).
- :mod:`~shoal.placement.constraints`: the placement-constraints JSON (topic config
  ``replica.placement``): parsing, checking against the brokers, assignment and reassignment.
- :mod:`~shoal.placement.stretch`: the stretch-cluster advisor (what a layout over datacenters
  guarantees, and what losing each datacenter does to it).
- :mod:`~shoal.placement.promotion`: the observer promotion policy (placement JSON version 2).
"""
