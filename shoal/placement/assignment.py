"""Replica placement: Kafka's round-robin assignment (``AdminUtils.assignReplicasToBrokers``).

Pure functions; the caller supplies the brokers (in the order to use: Kafka sorts them by id) and
the start index / replica shift that Kafka draws at random, so every outcome is reproducible. Brokers place
through ``shoal.cluster.planner`` (which draws them); ``shoal placement assign`` calls this directly.

Rack-unaware (no broker has a rack), from Kafka's doc comment:
  1. assign the first replica of each partition round-robin, starting at a (random) position;
  2. assign the remaining replicas of each partition with an increasing shift.

  broker-0  broker-1  broker-2  broker-3  broker-4
  p0        p1        p2        p3        p4       (1st replica)
  p5        p6        p7        p8        p9       (1st replica)
  p4        p0        p1        p2        p3       (2nd replica)
  p8        p9        p5        p6        p7       (2nd replica)
  p3        p4        p0        p1        p2       (3rd replica)
  p7        p8        p9        p5        p6       (3rd replica)

Rack-aware (every broker has a rack): the brokers are first arranged rack-alternated (racks sorted,
brokers within a rack sorted by id: racks a:{0,1,2}, b:{3,4}, c:{5} give 0,3,5,1,4,2); leaders are
assigned round-robin over that list, and each further replica goes to the next broker (by the
same shifting) whose rack has no replica yet — once every rack has one, the rack rule lapses; a
broker never holds two replicas of a partition while some broker holds none.
"""

from __future__ import annotations

from typing import Iterable, Sequence


class PlacementError(Exception):
    """``code`` is the Kafka error name: INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR /
    INVALID_REQUEST (mixed rack information)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _replica_index(first_replica_index: int, second_replica_shift: int, replica_index: int, n: int) -> int:
    shift = 1 + (second_replica_shift + replica_index) % (n - 1)
    return (first_replica_index + shift) % n


def rack_alternated(brokers: Iterable[tuple[int, str]]) -> list[int]:
    """Kafka's ``getRackAlternatedBrokerList``: one broker from each rack in turn."""
    by_rack: dict[str, list[int]] = {}
    for node, rack in brokers:
        by_rack.setdefault(rack, []).append(node)
    racks = sorted(by_rack)
    iters = {r: iter(sorted(by_rack[r])) for r in racks}
    total = sum(len(v) for v in by_rack.values())
    out: list[int] = []
    i = 0
    while len(out) < total:
        nxt = next(iters[racks[i]], None)
        if nxt is not None:
            out.append(nxt)
        i = (i + 1) % len(racks)
    return out


def assign_replicas(
    brokers: Sequence[tuple[int, str | None]],
    num_partitions: int,
    replication_factor: int,
    *,
    start_index: int = 0,
    replica_shift: int | None = None,
    start_partition_id: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions ``start_partition_id ..`` (one tuple per partition).

    ``brokers`` are ``(node_id, rack)``; ``start_index`` and ``replica_shift`` are Kafka's
    ``fixedStartIndex`` and initial ``nextReplicaShift`` (Kafka draws both at random when no fixed
    index is given; ``replica_shift`` defaults to ``start_index`` as with a fixed index).
    """
    if num_partitions <= 0:
        raise PlacementError("INVALID_PARTITIONS", "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise PlacementError("INVALID_REPLICATION_FACTOR", "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise PlacementError(
            "INVALID_REPLICATION_FACTOR",
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.",
        )
    shift = start_index if replica_shift is None else replica_shift
    if all(rack is None for _, rack in brokers):
        return _rack_unaware(
            [b for b, _ in brokers], num_partitions, replication_factor, start_index, shift, start_partition_id
        )
    if any(rack is None for _, rack in brokers):
        raise PlacementError(
            "INVALID_REQUEST", "Not all brokers have rack information for replica rack aware assignment."
        )
    return _rack_aware(
        [(b, r) for b, r in brokers if r is not None],
        num_partitions,
        replication_factor,
        start_index,
        shift,
        start_partition_id,
    )


def _rack_unaware(
    broker_ids: list[int], n_partitions: int, rf: int, start_index: int, shift: int, start_partition: int
) -> list[tuple[int, ...]]:
    n = len(broker_ids)
    out: list[tuple[int, ...]] = []
    current = max(0, start_partition)
    for _ in range(n_partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start_index) % n
        replicas = [broker_ids[first]]
        for j in range(rf - 1):
            replicas.append(broker_ids[_replica_index(first, shift, j, n)])
        out.append(tuple(replicas))
        current += 1
    return out


def _rack_aware(
    brokers: list[tuple[int, str]],
    n_partitions: int,
    rf: int,
    start_index: int,
    shift: int,
    start_partition: int,
) -> list[tuple[int, ...]]:
    rack_of = dict(brokers)
    num_racks = len(set(rack_of.values()))
    arranged = rack_alternated(brokers)
    n = len(arranged)
    out: list[tuple[int, ...]] = []
    current = max(0, start_partition)
    for _ in range(n_partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_with = {rack_of[leader]}
        brokers_with = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                broker = arranged[_replica_index(first, shift * num_racks, k, n)]
                rack = rack_of[broker]
                k += 1
                if (rack not in racks_with or len(racks_with) == num_racks) and (
                    broker not in brokers_with or len(brokers_with) == n
                ):
                    replicas.append(broker)
                    racks_with.add(rack)
                    brokers_with.add(broker)
                    break
        out.append(tuple(replicas))
        current += 1
    return out


def start_index_for_new_partitions(broker_ids: Sequence[int], partition0_replicas: Sequence[int]) -> int:
    """Kafka's ``addPartitions``: start at the first broker whose id >= partition 0's leader."""
    if not partition0_replicas:
        return 0
    leader = partition0_replicas[0]
    for i, b in enumerate(broker_ids):
        if b >= leader:
            return i
    return 0
