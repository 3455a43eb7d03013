"""Follower fetching (KIP-392): which replica a consumer should read from.

A consumer that sends its ``client.rack`` (Fetch v11+ ``rack_id``) to a partition's leader may be
told, in ``preferred_read_replica``, to read from a replica in its own rack instead; it then
fetches from that replica (which serves up to the high watermark it knows) until the replica
fails or falls behind, when it goes back to the leader, which selects again.

``replica.selector.class`` picks the rule (Kafka's class names are accepted; ``shoal.config.selector_kind``
reads the value):

- ``org.apache.kafka.common.replica.RackAwareReplicaSelector`` (``rack-aware``; Shoal's default):
  among the leader and the replicas that have the fetch offset (an ISR member or an observer whose
  log end offset, as of its last fetch, is at or past it), those in the client's rack; the leader
  when it is one of them, else the one furthest ahead (ties: caught up most recently, then the
  lowest id). No preferred replica when the client sends no rack or none is in its rack.
- ``org.apache.kafka.common.replica.LeaderSelector`` (``leader``; Kafka's default): always the
  leader, i.e. no follower fetching.

Deviation from Kafka: rack-aware is the default (Kafka's is the leader), so setting ``broker.rack``
on the brokers and ``client.rack`` on consumers is enough; the leader-only rule is one config away.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True, slots=True)
class ReplicaView:
    node: int
    rack: str | None
    log_end_offset: int
    last_caught_up_ms: int = -1


def select_read_replica(kind: str, client_rack: str, leader: ReplicaView,
                        others: Iterable[ReplicaView], fetch_offset: int) -> int:
    """The replica a consumer in ``client_rack`` should read ``fetch_offset`` from: the leader's id
    when it should stay (the caller then sends no preferred replica), or another replica's."""
    if kind != "rack-aware" or not client_rack:
        return leader.node
    if leader.rack == client_rack:
        return leader.node
    local = [r for r in others if r.rack == client_rack and r.log_end_offset >= fetch_offset >= 0]
    if not local:
        return leader.node
    best = max(local, key=lambda r: (r.log_end_offset, r.last_caught_up_ms, -r.node))
    return best.node
