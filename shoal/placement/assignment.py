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

Host-aware (Shoal; ``hosts`` maps brokers to the machine they run on, ``broker.host``: ``shoal serve
--processes N`` runs several brokers per host): after racks, hosts. Each further replica goes to
the next broker (by the same shifting) in a rack without a replica yet and on a host without one;
when no such broker is left, racks win (a new rack on a used host), then a new host, then any
broker without a replica. So with every host in one rack (the usual layout) a partition spans
min(RF, racks) racks as before and min(RF, hosts) hosts. When every broker is its own host the
placement is exactly Kafka's. A cluster with fewer hosts than RF places as best it can; the
planner's caller says so (``host_shortfall``).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence


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
    hosts: Mapping[int, str] | None = None,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions ``start_partition_id ..`` (one tuple per partition).

    ``brokers`` are ``(node_id, rack)``; ``start_index`` and ``replica_shift`` are Kafka's
    ``fixedStartIndex`` and initial ``nextReplicaShift`` (Kafka draws both at random when no fixed
    index is given; ``replica_shift`` defaults to ``start_index`` as with a fixed index).
    ``hosts``: each broker's host (missing: a host of its own), spread over after racks.
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
    host_of = _hosts(brokers, hosts)
    if all(rack is None for _, rack in brokers):
        if host_of is not None:  # several brokers on a host: the rack-aware walk, one rack
            return _rack_aware([(b, "") for b, _ in brokers], num_partitions, replication_factor, start_index,
                               shift, start_partition_id, host_of)
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
        host_of,
    )


def _hosts(brokers: Sequence[tuple[int, str | None]], hosts: Mapping[int, str] | None) -> dict[int, str] | None:
    """Each broker's host when some host runs several of the brokers, else None (Kafka's placement)."""
    if not hosts:
        return None
    host_of = {b: hosts.get(b) or f"\0broker-{b}" for b, _ in brokers}
    return host_of if len(set(host_of.values())) < len(host_of) else None


def host_shortfall(replicas: Sequence[int], hosts: Mapping[int, str], available: int) -> int:
    """How many hosts a partition's ``replicas`` lack: min(RF, ``available`` hosts) - hosts held."""
    return max(0, min(len(replicas), available) - len({hosts.get(b, f"broker-{b}") for b in replicas}))


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
    host_of: Mapping[int, str] | None = None,
) -> list[tuple[int, ...]]:
    """Kafka's rack-aware walk; with ``host_of``, the brokers host-alternated within each rack
    and each further replica the first broker of the walk in the best tier (new rack and new
    host, new rack, new host, new broker; a rack or host counts as new once every one has a
    replica). With one broker per host the tiers are Kafka's rule."""
    rack_of = dict(brokers)
    num_racks = len(set(rack_of.values()))
    if host_of is None:
        arranged, host_of = rack_alternated(brokers), {b: str(b) for b in rack_of}
    else:
        arranged = _host_alternated(brokers, host_of)
    num_hosts = len(set(host_of.values()))
    n = len(arranged)
    out: list[tuple[int, ...]] = []
    current = max(0, start_partition)
    for _ in range(n_partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_with, hosts_with, brokers_with = {rack_of[leader]}, {host_of[leader]}, {leader}
        k = 0
        for _ in range(rf - 1):
            best: tuple[int, int, int] | None = None  # (tier, k, broker)
            for j in range(k, k + n - 1):  # one round of the walk: every broker but the leader
                broker = arranged[_replica_index(first, shift * num_racks, j, n)]
                if broker in brokers_with:
                    continue
                new_rack = rack_of[broker] not in racks_with or len(racks_with) == num_racks
                new_host = host_of[broker] not in hosts_with or len(hosts_with) == num_hosts
                tier = 0 if new_rack and new_host else 1 if new_rack else 2 if new_host else 3
                if best is None or tier < best[0]:
                    best = (tier, j, broker)
                    if tier == 0:
                        break
            assert best is not None  # rf <= n: some broker holds no replica yet
            _tier, j, broker = best
            k = j + 1
            replicas.append(broker)
            racks_with.add(rack_of[broker])
            hosts_with.add(host_of[broker])
            brokers_with.add(broker)
        out.append(tuple(replicas))
        current += 1
    return out


def _host_alternated(brokers: list[tuple[int, str]], host_of: Mapping[int, str]) -> list[int]:
    """``rack_alternated`` with each rack's brokers in host-alternated order (hosts sorted, brokers
    within a host by id): racks a:{1@h1, 2@h1, 3@h2} give 1,3,2."""
    by_rack: dict[str, list[int]] = {}
    for node, rack in brokers:
        by_rack.setdefault(rack, []).append(node)
    order: dict[int, int] = {}
    for members in by_rack.values():
        for i, node in enumerate(rack_alternated((b, host_of[b]) for b in members)):
            order[node] = i
    racks = sorted(by_rack)
    columns = {r: sorted(by_rack[r], key=order.__getitem__) for r in racks}
    out: list[int] = []
    for i in range(max(len(c) for c in columns.values())):
        out += [columns[r][i] for r in racks if i < len(columns[r])]
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
