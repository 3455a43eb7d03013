"""The one topic-creation planner: every path that creates partitions asks it where they go.

Callers: topic creation, one decision for CreateTopics (validate_only too, manual assignments
too), auto-creation through Metadata, the coordinators' internal topics and the metering topic
(``shoal.tenancy.creation``), and CreatePartitions. Each hands it the live brokers with their
racks (``live_brokers(image)``) of the image it decides on, the request and its defaults
(``Defaults.for_topics`` / ``Defaults.for_offsets_topic``), and an injected random source; it
returns a :class:`Plan` or raises :class:`PlacementError` with Kafka's error code and Kafka's
message. Pure: no I/O, no clock, no randomness but ``rng``, so a seeded ``random.Random`` gives
the same plan every time.

What Kafka does, and so this:
- Placement is ``AdminUtils.assignReplicasToBrokers`` (KIP-36, :mod:`shoal.placement.assignment`) with
  Kafka's RANDOM start index and replica shift, each drawn in ``[0, brokers)``: the first
  replicas (the leaders) go round-robin over the brokers from that start, so topics' leaders
  spread over the cluster instead of piling on the lowest id.
- CreatePartitions continues the topic's round-robin, as ``AdminZkClient.addPartitions``: the start
  is the first broker (by id) whose id is at least partition 0's leader, no random draw.
- Validation and messages are KRaft's ``ReplicationControlManager`` (what a Kafka 3/4 broker
  answers today): ``Unable to replicate the partition 3 time(s): The target replication factor of
  3 cannot be reached because only 1 broker(s) are registered.``; CreatePartitions raises the
  placer's message unwrapped, as KRaft does. ``validateManualPartitionAssignment`` for manual
  assignments (brokers checked in id order: unknown, then repeated; then consistent RF).
- ``-1`` partitions / replication factor take the defaults: ``num.partitions`` and
  ``default.replication.factor``, or ``offsets.topic.num.partitions`` and
  ``offsets.topic.replication.factor`` for ``__consumer_offsets``. No path lowers the replication
  factor to the number of brokers (Kafka does not since KIP-115): too few brokers is
  INVALID_REPLICATION_FACTOR everywhere.

Deliberate deviations:
- The placement is AdminUtils's (rack-alternated round-robin), not KRaft's
  ``StripedReplicaPlacer``: the stretch-cluster document's examples (RF 4 over two racks of three
  gives [1, 4, 2, 5]) are AdminUtils's, and it is exactly reproducible from a start index.
- Racks on some brokers only: rack-unaware placement over all of them (AdminUtils'
  ``RackAwareMode.Safe``, which ZooKeeper-mode auto-creation used), where Kafka's CreateTopics in
  ZooKeeper mode failed; KRaft, too, places without failing.
- At most ``MAX_PARTITIONS_PER_TOPIC`` partitions per topic (INVALID_PARTITIONS beyond it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Collection, Iterable, Mapping, Sequence

from shoal.metadata import owner_tenant
from shoal.placement.assignment import PlacementError, assign_replicas, start_index_for_new_partitions
from shoal.placement.cells import CellError, parse_cell

if TYPE_CHECKING:
    from shoal.config import BrokerConfig
    from shoal.metadata import MetadataImage
    from shoal.placement.constraints import PlacementSpec

__all__ = [
    "MAX_PARTITIONS_PER_TOPIC",
    "Defaults",
    "Plan",
    "PlacementError",
    "TopicRequest",
    "cell_brokers",
    "host_shortfall",
    "hosts_of",
    "live_brokers",
    "plan_new_partitions",
    "plan_topic",
]

MAX_PARTITIONS_PER_TOPIC = 100_000

Broker = tuple[int, "str | None"]  # (node id, rack)


@dataclass(frozen=True, slots=True)
class Defaults:
    """What ``-1`` means in a request: partitions and replication factor."""

    num_partitions: int
    replication_factor: int

    @classmethod
    def for_topics(cls, cfg: "BrokerConfig") -> "Defaults":
        return cls(int(cfg.get("num.partitions")), int(cfg.get("default.replication.factor")))

    @classmethod
    def for_offsets_topic(cls, num_partitions: int, replication_factor: int) -> "Defaults":
        """``offsets.topic.num.partitions`` / ``offsets.topic.replication.factor``."""
        return cls(int(num_partitions), int(replication_factor))


@dataclass(frozen=True, slots=True)
class TopicRequest:
    """One topic to create. ``assignments``: ``(partition index, broker ids)`` as a client sent
    them (CreatableReplicaAssignment); when given, both counts must be -1."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: tuple[tuple[int, tuple[int, ...]], ...] = ()
    placement: PlacementSpec | None = None  # replica.placement


@dataclass(frozen=True, slots=True)
class Plan:
    """Replica lists for partitions ``first_partition, first_partition + 1, ...``; the first
    replica of each is its preferred leader."""

    name: str
    assignments: tuple[tuple[int, ...], ...]
    first_partition: int = 0
    observers: tuple[tuple[int, ...], ...] = ()  # per partition, the observers among its replicas

    @property
    def num_partitions(self) -> int:
        return len(self.assignments)

    @property
    def replication_factor(self) -> int:
        return len(self.assignments[0]) if self.assignments else 0


class Brokers(list[Broker]):
    """The brokers placement may use; ``cell`` names the tenant's cell they were narrowed to
    (for the refusals' messages), "" when they were not; ``hosts`` each one's host
    (``broker.host``, else its advertised host), which placement spreads over after racks."""

    cell: str = ""
    hosts: dict[int, str] = {}


def hosts_of(brokers: Sequence[Broker]) -> dict[int, str] | None:
    """The brokers' hosts (``Brokers.hosts``), None when not known (every broker its own host)."""
    return getattr(brokers, "hosts", None) or None


def host_shortfall(brokers: Sequence[Broker], plan: "Plan") -> str | None:
    """One line when some partition of ``plan`` has two replicas on one host because the brokers
    span fewer hosts than its replication factor (placed as best it can); None otherwise."""
    hosts = hosts_of(brokers)
    if not hosts or not plan.assignments:
        return None
    available = len({hosts.get(b, str(b)) for b, _ in brokers})
    rf = plan.replication_factor
    if available >= rf or not any(len({hosts.get(b, str(b)) for b in r}) < len(r) for r in plan.assignments):
        return None
    return (f"topic {plan.name}: replication factor {rf} over {available} host(s) (broker.host): some "
            f"partitions have two replicas on one host, so losing that host loses both; add hosts")


def live_brokers(image: "MetadataImage", fenced: Collection[int] = (), topic: str | None = None) -> list[Broker]:
    """The brokers placement may use, ``(node id, rack)`` sorted by id (Kafka sorts them too):
    the registered ones but those the controller treats as gone (``fenced``,
    ``shoal.cluster.controller.Controller.fenced_brokers``). A killed broker stays registered until its
    lease expires, while the controller already moved its leaderships away (its port refuses);
    KRaft's controller likewise places new replicas on unfenced brokers only. With ``topic`` (a
    physical name) of a tenant confined to a cell (``shoal.placement.cells``), those in the cell."""
    out = Brokers((b.node_id, b.rack) for b in sorted(image.brokers.values(), key=lambda b: b.node_id)
                  if b.node_id not in fenced)
    out.hosts = {b.node_id: b.machine for b in image.brokers.values()}
    tenant_id = owner_tenant(topic, image.tenants) if topic else None
    cell = cell_brokers(image, tenant_id) if tenant_id else None
    if tenant_id is None or cell is None:
        return out
    narrowed = Brokers(b for b in out if b[0] in cell)
    narrowed.hosts = out.hosts
    narrowed.cell = f" in tenant {tenant_id}'s cell ({_cell_text(image, tenant_id)})"
    return narrowed


def _cell_text(image: "MetadataImage", tenant_id: str) -> str:
    cell = parse_cell(image.tenants[tenant_id].configs)
    return cell.describe() if cell is not None else ""


def cell_brokers(image: "MetadataImage", tenant_id: str,
                 racks: Mapping[int, str | None] | None = None) -> frozenset[int] | None:
    """The brokers of tenant ``tenant_id``'s cell (``shoal.placement.cells``): those its
    ``shoal.tenant.cell.brokers`` lists, and those in its ``shoal.tenant.cell.racks`` (by
    ``racks``, each broker's rack, else the registered brokers' racks); None when the tenant has no
    cell (or its cell config does not parse: validated when set)."""
    tenant = image.tenants.get(tenant_id)
    if tenant is None:
        return None
    try:
        cell = parse_cell(tenant.configs)
    except CellError:
        return None
    if cell is None:
        return None
    if racks is None:
        racks = {b.node_id: b.rack for b in image.brokers.values()}
    return cell.members(racks.items())


def _where(brokers: Sequence[Broker]) -> str:
    return brokers.cell if isinstance(brokers, Brokers) else ""


# ---------------------------------------------------------------------------------------------
# Topic creation


def plan_topic(
    brokers: Sequence[Broker], request: TopicRequest, defaults: Defaults, rng: random.Random
) -> Plan:
    """KRaft's ``ReplicationControlManager.createTopic`` checks, then placement (a
    ``replica.placement`` spec places replicas and observers by its constraints instead)."""
    if request.placement is not None:
        return _constrained_topic(brokers, request, request.placement, defaults, rng)
    if request.assignments:
        return Plan(request.name, _manual_topic(brokers, request))
    rf, partitions = request.replication_factor, request.num_partitions
    if rf < -1 or rf == 0:
        raise PlacementError(
            "INVALID_REPLICATION_FACTOR", "Replication factor must be larger than 0, or -1 to use the default value."
        )
    if partitions < -1 or partitions == 0:
        raise PlacementError("INVALID_PARTITIONS", "Number of partitions was set to an invalid non-positive value.")
    partitions = defaults.num_partitions if partitions == -1 else partitions
    rf = defaults.replication_factor if rf == -1 else rf
    _check_partition_count(partitions)
    try:
        assignment = _place(brokers, partitions, rf, rng)
    except PlacementError as e:
        if e.code != "INVALID_REPLICATION_FACTOR":
            raise
        raise PlacementError(e.code, f"Unable to replicate the partition {rf} time(s): {e.message}") from None
    return Plan(request.name, tuple(assignment))


def _constrained_topic(brokers: Sequence[Broker], request: TopicRequest, spec: PlacementSpec,
                       defaults: Defaults, rng: random.Random) -> Plan:
    """Placement constraints (the multi-region document): the spec gives the replica count, so
    a replication factor or a manual assignment with it is refused; the start position within
    each rack is drawn like Kafka's start index."""
    from shoal.placement.constraints import PlacementSpecError, assign_with_constraints

    if request.assignments:
        raise PlacementError("INVALID_REQUEST", "A replica assignment and replica.placement cannot both be given.")
    if request.replication_factor != -1:
        raise PlacementError(
            "INVALID_REPLICATION_FACTOR",
            f"replica.placement sets the replicas ({spec.sync_count} replicas + {spec.observer_count} observers): "
            "give replication factor -1 (the default) with it")
    partitions = defaults.num_partitions if request.num_partitions == -1 else request.num_partitions
    if partitions < 1:
        raise PlacementError("INVALID_PARTITIONS", "Number of partitions was set to an invalid non-positive value.")
    _check_partition_count(partitions)
    try:
        placed = assign_with_constraints(spec, brokers, partitions, start_index=rng.randrange(max(1, len(brokers))),
                                         hosts=hosts_of(brokers))
    except PlacementSpecError as e:
        raise PlacementError(e.code, f"replica.placement cannot be satisfied: {e.message}") from None
    return Plan(request.name, tuple(r for r, _o in placed), observers=tuple(o for _r, o in placed))


def _place(brokers: Sequence[Broker], partitions: int, rf: int, rng: random.Random) -> list[tuple[int, ...]]:
    _check_brokers(brokers, rf)
    n = len(brokers)
    start, shift = rng.randrange(n), rng.randrange(n)  # AdminUtils: rand.nextInt(brokers), twice
    return assign_replicas(_rack_mode_safe(brokers), partitions, rf, start_index=start, replica_shift=shift,
                           hosts=hosts_of(brokers))


def _check_brokers(brokers: Sequence[Broker], rf: int) -> None:
    """``StripedReplicaPlacer``'s checks, with its messages."""
    if rf <= 0:
        raise PlacementError(
            "INVALID_REPLICATION_FACTOR", f"Invalid replication factor {rf}: the replication factor must be positive."
        )
    if not brokers:
        raise PlacementError("INVALID_REPLICATION_FACTOR", f"All brokers{_where(brokers)} are currently fenced.")
    if rf > len(brokers):
        raise PlacementError(
            "INVALID_REPLICATION_FACTOR",
            f"The target replication factor of {rf} cannot be reached because only "
            f"{len(brokers)} broker(s) are registered{_where(brokers)}.",
        )


def _rack_mode_safe(brokers: Sequence[Broker]) -> list[Broker]:
    """AdminUtils ``RackAwareMode.Safe``: racks only when every broker has one."""
    if any(rack is None for _, rack in brokers):
        return [(b, None) for b, _ in brokers]
    return list(brokers)


def _check_partition_count(count: int) -> None:
    if count > MAX_PARTITIONS_PER_TOPIC:
        raise PlacementError("INVALID_PARTITIONS", f"A topic may have at most {MAX_PARTITIONS_PER_TOPIC} partitions.")


def _manual_topic(brokers: Sequence[Broker], request: TopicRequest) -> tuple[tuple[int, ...], ...]:
    if request.replication_factor != -1:
        raise PlacementError(
            "INVALID_REQUEST", "A manual partition assignment was specified, but replication factor was not set to -1."
        )
    if request.num_partitions != -1:
        raise PlacementError(
            "INVALID_REQUEST", "A manual partition assignment was specified, but numPartitions was not set to -1."
        )
    registered = {b for b, _ in brokers}
    by_index: dict[int, tuple[int, ...]] = {}
    rf: int | None = None
    for index, replicas in request.assignments:
        if index in by_index:
            raise PlacementError(
                "INVALID_REPLICA_ASSIGNMENT", f"Found multiple manual partition assignments for partition {index}"
            )
        _check_manual(registered, replicas, rf, _where(brokers))
        rf = len(replicas)
        by_index[index] = tuple(replicas)
        _check_partition_count(len(by_index))
    if any(i not in by_index for i in range(len(by_index))):
        raise PlacementError("INVALID_REPLICA_ASSIGNMENT", "partitions should be a consecutive 0-based integer sequence")
    return tuple(by_index[i] for i in range(len(by_index)))


def _check_manual(registered: set[int], replicas: Iterable[int], rf: int | None, where: str = "") -> None:
    """KRaft's ``validateManualPartitionAssignment``."""
    ids = sorted(replicas)
    if not ids:
        raise PlacementError(
            "INVALID_REPLICA_ASSIGNMENT", "The manual partition assignment includes an empty replica list."
        )
    previous = None
    for b in ids:
        if b not in registered:
            raise PlacementError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"The manual partition assignment includes broker {b}, but no such broker is registered{where}.",
            )
        if b == previous:
            raise PlacementError(
                "INVALID_REPLICA_ASSIGNMENT", f"The manual partition assignment includes the broker {b} more than once."
            )
        previous = b
    if rf is not None and len(ids) != rf:
        raise PlacementError(
            "INVALID_REPLICA_ASSIGNMENT",
            f"The manual partition assignment includes a partition with {len(ids)} replica(s), but this is not "
            f"consistent with previous partitions, which have {rf} replica(s).",
        )


# ---------------------------------------------------------------------------------------------
# CreatePartitions


def plan_new_partitions(
    brokers: Sequence[Broker],
    name: str,
    existing: Sequence[Sequence[int]],
    count: int,
    assignments: Sequence[Sequence[int]] | None = None,
    placement: "PlacementSpec | None" = None,
) -> Plan:
    """Grow topic ``name`` (its partitions' replica lists ``existing``) to ``count`` partitions:
    KRaft's ``createPartitions`` checks, then the continued round-robin (or ``assignments``; or
    the topic's ``replica.placement``, continuing its rotation, observers included)."""
    current = len(existing)
    if count == current:
        raise PlacementError("INVALID_PARTITIONS", f"Topic already has {current} partition(s).")
    if count < current:
        raise PlacementError(
            "INVALID_PARTITIONS",
            f"The topic {name} currently has {current} partition(s); {count} would not be an increase.",
        )
    _check_partition_count(count)
    additional = count - current
    rf = len(existing[0]) if existing else 0
    if placement is not None:
        from shoal.placement.constraints import PlacementSpecError, assign_with_constraints

        if assignments is not None:
            raise PlacementError("INVALID_REQUEST",
                                 f"Topic {name} is placed by replica.placement: new partitions follow it, give no assignment.")
        try:
            constrained = assign_with_constraints(placement, brokers, count, hosts=hosts_of(brokers))[current:]
        except PlacementSpecError as e:
            raise PlacementError(e.code, f"replica.placement cannot be satisfied: {e.message}") from None
        return Plan(name, tuple(r for r, _o in constrained), current, observers=tuple(o for _r, o in constrained))
    if assignments is not None:
        if len(assignments) != additional:
            raise PlacementError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"Attempted to add {additional} additional partition(s), but only {len(assignments)} "
                "assignment(s) were specified.",
            )
        registered = {b for b, _ in brokers}
        for replicas in assignments:
            _check_manual(registered, replicas, rf or None, _where(brokers))
        return Plan(name, tuple(tuple(r) for r in assignments), current)
    _check_brokers(brokers, rf)
    start = start_index_for_new_partitions([b for b, _ in brokers], existing[0] if existing else ())
    placed = assign_replicas(_rack_mode_safe(brokers), additional, rf, start_index=start, start_partition_id=current,
                             hosts=hosts_of(brokers))
    return Plan(name, tuple(placed), current)


# ---------------------------------------------------------------------------------------------
# Placement changes


def placement_targets(brokers: Sequence[Broker], placement: "PlacementSpec",
                      current: Sequence[Sequence[int]]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Where a topic's partitions (``current`` replica lists) go when its ``replica.placement``
    becomes ``placement``: per partition (replicas, observers), moving as few replicas as the spec
    allows (``constraints.reassign_with_constraints``). PlacementError when the brokers
    cannot hold it."""
    from shoal.placement.constraints import PlacementSpecError, reassign_with_constraints

    try:
        return reassign_with_constraints(placement, brokers, current)
    except PlacementSpecError as e:
        raise PlacementError(e.code, f"replica.placement cannot be satisfied: {e.message}") from None
