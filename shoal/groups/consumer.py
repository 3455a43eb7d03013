"""The KIP-848 consumer group protocol (``ConsumerGroupHeartbeat``): server-side assignment, member
epochs, and reconciliation with revocation before assignment (Kafka's ``ConsumerGroup``,
``CurrentAssignmentBuilder`` and the consumer half of ``GroupMetadataManager``, re-derived).

Epochs. The *group epoch* bumps whenever what should be assigned changes: a member joins, leaves,
changes its subscription, or a subscribed topic appears, vanishes or grows. The *target
assignment* is recomputed by the group's server-side assignor (``shoal.groups.assignors``) on the
first heartbeat after a bump, and stamped with the *assignment epoch*. Each member converges to its
target one heartbeat at a time and then carries the assignment epoch as its *member epoch*:

- partitions it owns that its target no longer has must be revoked first: the member stays in
  its epoch in ``UNREVOKED_PARTITIONS`` until a heartbeat reports them gone (or its rebalance
  timeout fences it);
- partitions of its target still owned by another member (``currentPartitionEpoch``) are held
  back (``UNRELEASED_PARTITIONS``) and handed over on a later heartbeat once released;
- so no partition is ever owned by two members at once.

Group states (``ConsumerGroupState``), computed from the above: Empty (no members), Assigning
(group epoch > assignment epoch), Reconciling (some member not yet at the assignment epoch),
Stable, Dead (deleted or unloaded).

Persistence: every change is a record of ``shoal.groups.consumer_records`` (Kafka's key versions
3-8). A heartbeat computes its records from the current state without touching it, appends them
(before its first ``await``, so the log order is the event-loop order), then *replays* them into
memory with the same code the load path uses, and answers once they are committed. So a group
after a restart is exactly the group before it: members come back with their epochs and
assignments and carry on heartbeating without a rebalance; those that are gone expire.

Timeouts (on the coordinator's injected ``Timer``): a member's session
(``group.consumer.session.timeout.ms``, renewed by each heartbeat) and, while it holds partitions
it must revoke, its rebalance timeout (the client's ``rebalance_timeout``); either fences it.

Static membership (``instance_id``, KIP-345 for KIP-848): a static member leaving with epoch -2
keeps its assignment until its session expires; a new member id joining with the same instance id
takes over that assignment at once (no rebalance); while the old one has not left, the new one gets
UNRELEASED_INSTANCE_ID.

Subscriptions by regular expression (``subscribed_topic_regex``, heartbeat v1): Kafka evaluates
RE2/J expressions as full matches over the cluster's topic names. Shoal evaluates them with RE2
itself (``shoal.protocol.regex``: the same syntax, linear time, at most 1000 characters); what RE2
refuses (backreferences, lookaround, possessive quantifiers) gets INVALID_REGULAR_EXPRESSION.
Internal topics never match. A regex is resolved against the current metadata at every heartbeat
(cached per metadata version), so new matching topics join the assignment at the next heartbeat.
The matching itself runs in a worker thread before the heartbeat's decision (``prepare_regexes``),
so a tenant's expression never holds the coordinator's event loop; only a metadata change in
that moment makes the decision match on the loop, and then still in linear time.

Tenancy: the manager sees physical names only (the handlers qualify a tenant's group id and
subscribed topic names). A regex of a tenant's group matches the names the tenant sees (its own
topics, unqualified), never another tenant's, and, with an authorizer, only the topics the member
whose heartbeat came last may describe (Kafka's ``filterTopicDescribeAuthorizedTopics``).

Single-threaded: everything runs on the coordinator's event loop. Not thread-safe.

Deliberate deviations from Kafka:

- subscription metadata is recomputed on every heartbeat (cached per metadata version) instead of
  on a refresh deadline, so a new or grown topic is picked up at the next heartbeat;
- resolved regular expressions are not persisted (Kafka 4 writes ConsumerGroupRegularExpression
  records, key version 16, which Shoal skips when loading); they are recomputed after a restart;
- no online migration between protocols: a classic JoinGroup for a non-empty consumer group gets
  INCONSISTENT_GROUP_PROTOCOL and a heartbeat for a non-empty classic group GROUP_ID_NOT_FOUND, as
  Kafka with ``group.consumer.migration.policy=disabled``; empty groups convert either way
  (offline upgrade/downgrade) as in Kafka;
- a heartbeat whose records were appended but not committed is answered with the error while the
  in-memory state has moved on (Kafka reverts its timeline);
- partition racks are not considered (PartitionMetadata records carry no racks).
"""

from __future__ import annotations

import dataclasses
import enum
import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable, Mapping

from shoal.groups import consumer_records as cr
from shoal.groups.assignors import ASSIGNORS, MemberSpec
from shoal.groups.group import Group, OffsetAndMetadata, tenant_of_group
from shoal.groups.records import RecordFormatError, group_metadata_key
from shoal.protocol.errors import ErrorCode
from shoal.protocol.regex import compile_client_regex, match_names

if TYPE_CHECKING:
    from shoal.groups.coordinator import GroupCoordinator
    from shoal.metadata import MetadataImage

log = logging.getLogger("shoal.groups.consumer")

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1
PROTOCOL_TYPE = "consumer"
INT_MAX = 2**31 - 1

TopicPartitions = dict[uuid.UUID, frozenset[int]]
TopicFilter = tuple[Hashable, Callable[[str], bool]]
EMPTY: TopicPartitions = {}


class MemberState(enum.IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> "MemberState":
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    assignors: tuple[str, ...] = ("uniform", "range")
    max_size: int = INT_MAX
    enabled: bool = True  # "consumer" in group.coordinator.rebalance.protocols

    @property
    def default_assignor(self) -> str:
        return self.assignors[0]

    @classmethod
    def from_broker_config(cls, cfg: Any) -> "ConsumerGroupConfig":
        def get(name: str, default: Any) -> Any:
            try:
                v = cfg.get(name)
            except KeyError:
                return default
            return default if v is None else v

        def as_list(v: Any) -> tuple[str, ...]:
            items = v.split(",") if isinstance(v, str) else list(v)
            return tuple(s.strip() for s in items if s and s.strip())

        assignors = tuple(a for a in as_list(get("group.consumer.assignors", "uniform,range")) if a in ASSIGNORS)
        protocols = as_list(get("group.coordinator.rebalance.protocols", "classic,consumer"))
        return cls(
            session_timeout_ms=int(get("group.consumer.session.timeout.ms", 45000)),
            heartbeat_interval_ms=int(get("group.consumer.heartbeat.interval.ms", 5000)),
            assignors=assignors or ("uniform",),
            max_size=int(get("group.consumer.max.size", INT_MAX)),
            enabled="consumer" in protocols,
        )


def _norm(tps: Mapping[uuid.UUID, Iterable[int]] | None) -> TopicPartitions:
    """Topic id → frozenset of partitions, without empty entries."""
    if not tps:
        return {}
    return {t: frozenset(ps) for t, ps in tps.items() if ps}


# -- members -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConsumerMember:
    """One member, immutable: a heartbeat builds the next version with ``dataclasses.replace``."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: TopicPartitions = field(default_factory=dict)
    pending_revocation: TopicPartitions = field(default_factory=dict)

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def subscription_value(self) -> cr.MemberMetadataValue:
        return cr.MemberMetadataValue(
            self.instance_id, self.rack_id, self.client_id, self.client_host,
            self.subscribed_topic_names, self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor,
        )

    def assignment_value(self) -> cr.CurrentMemberAssignmentValue:
        return cr.CurrentMemberAssignmentValue(
            self.member_epoch, self.previous_member_epoch, int(self.state), self.assigned, self.pending_revocation
        )

    def with_subscription(self, v: cr.MemberMetadataValue) -> "ConsumerMember":
        return dataclasses.replace(
            self,
            instance_id=v.instance_id,
            rack_id=v.rack_id,
            client_id=v.client_id,
            client_host=v.client_host,
            subscribed_topic_names=tuple(v.subscribed_topic_names),
            subscribed_topic_regex=v.subscribed_topic_regex,
            rebalance_timeout_ms=v.rebalance_timeout_ms,
            server_assignor=v.server_assignor,
        )

    def with_assignment(self, v: cr.CurrentMemberAssignmentValue) -> "ConsumerMember":
        return dataclasses.replace(
            self,
            member_epoch=v.member_epoch,
            previous_member_epoch=v.previous_member_epoch,
            state=MemberState.of(v.state),
            assigned=_norm(v.assigned),
            pending_revocation=_norm(v.pending_revocation),
        )


class FencedMemberEpoch(Exception):
    pass


def _owns_any(pending: TopicPartitions, owned: TopicPartitions | None) -> bool:
    """True while the member still reports one of ``pending`` (or reports nothing at all)."""
    if owned is None:
        return True
    return any(p in pending.get(t, ()) for t, ps in owned.items() for p in ps)


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: TopicPartitions,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: TopicPartitions | None,
) -> ConsumerMember:
    """One step of a member towards its target (Kafka's ``CurrentAssignmentBuilder.build``).

    ``partition_epoch(topic, partition)`` is the epoch of the partition's current owner, -1 when
    nobody owns it; ``owned`` what the member reported in this heartbeat (None: not reported).
    Raises FencedMemberEpoch for a member in an unknown state that still owns partitions.
    """
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(member.pending_revocation, owned):
            return member
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    # UNKNOWN: written by a newer version; start over from nothing.
    if owned is None or owned:
        raise FencedMemberEpoch("The consumer group member is in a unknown state. The member must abandon all its partitions and rejoin.")
    return _next_assignment(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _bump(member: ConsumerMember, epoch: int) -> tuple[int, int]:
    return epoch, member.member_epoch


def _next_assignment(
    member: ConsumerMember,
    epoch: int,
    target_epoch: int,
    target: TopicPartitions,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: TopicPartitions | None,
) -> ConsumerMember:
    assigned: dict[uuid.UUID, set[int]] = {}
    revoke: dict[uuid.UUID, set[int]] = {}
    grant: dict[uuid.UUID, set[int]] = {}
    unreleased = False
    for t in set(target) | set(member.assigned):
        want = target.get(t, frozenset())
        have = member.assigned.get(t, frozenset())
        keep = have & want
        if keep:
            assigned[t] = set(keep)
        if have - keep:
            revoke[t] = set(have - keep)
        new = set()
        for p in want - keep:
            if partition_epoch(t, p) != -1:
                unreleased = True  # still owned by another member: wait for it to be released
            else:
                new.add(p)
        if new:
            grant[t] = new
    if revoke and _owns_any(_norm(revoke), owned):
        # Revoke first: stay in this epoch until the member confirms.
        new_epoch, previous = _bump(member, epoch)
        return dataclasses.replace(
            member,
            state=MemberState.UNREVOKED_PARTITIONS,
            member_epoch=new_epoch,
            previous_member_epoch=previous,
            assigned=_norm(assigned),
            pending_revocation=_norm(revoke),
        )
    for t, ps in grant.items():
        assigned.setdefault(t, set()).update(ps)
    new_epoch, previous = _bump(member, target_epoch)
    return dataclasses.replace(
        member,
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        member_epoch=new_epoch,
        previous_member_epoch=previous,
        assigned=_norm(assigned),
        pending_revocation={},
    )


# -- the group ----------------------------------------------------------------------------------


class ConsumerGroup(Group):
    """A KIP-848 group: the state its records describe, plus what is derived from it.

    Invariants (kept by :meth:`apply`): ``static_members`` maps each instance id to the one member
    that has it; ``partition_epochs`` maps every partition some member owns (assigned or pending
    revocation) to that member's epoch.
    """

    group_type = "consumer"

    def __init__(self, group_id: str, partition: int, manager: "ConsumerGroupManager | None" = None) -> None:
        super().__init__(group_id, partition)
        self._manager = manager
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}
        self.target: dict[str, TopicPartitions] = {}
        self.subscription_metadata: dict[str, cr.TopicMetadata] = {}
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}
        self.deleted = True  # until a ConsumerGroupMetadata value is applied
        self.dead = False
        # Bumped whenever a member's subscription may have changed: keys the manager's cache of
        # the subscription metadata, so a steady heartbeat does not walk every member.
        self.subscriptions_version = 0
        self.sub_meta_cache: tuple[int, int, dict[str, cr.TopicMetadata]] | None = None
        # tenancy: the topic filter of the last heartbeat (HeartbeatRequest.topic_filter)
        self.regex_filter: TopicFilter | None = None

    def __repr__(self) -> str:
        return (
            f"ConsumerGroup({self.group_id!r}, {self.state.value}, epoch {self.group_epoch}, "
            f"assignment epoch {self.assignment_epoch}, {len(self.members)} members)"
        )

    # -- derived state -------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        mid = self.static_members.get(instance_id)
        return self.members.get(mid) if mid is not None else None

    def target_for(self, member_id: str, instance_id: str | None) -> TopicPartitions:
        if instance_id is not None:
            previous = self.static_members.get(instance_id)
            if previous is not None:
                return self.target.get(previous, EMPTY)
        return self.target.get(member_id, EMPTY)

    def subscribed_topic_names(self) -> set[str]:
        names: set[str] = set()
        for m in self.members.values():
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex and self._manager is not None:
                names.update(self._manager.resolve_regex(m.subscribed_topic_regex, self))
        return names

    def preferred_assignor(self, default: str) -> str:
        return preferred_assignor(self.members.values(), default)

    # -- Group ---------------------------------------------------------------------------------

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def protocol_type(self) -> str | None:
        return PROTOCOL_TYPE

    def is_empty(self) -> bool:
        return not self.members and not self.dead

    def is_dead(self) -> bool:
        return self.dead

    def validate_offset_commit(
        self, member_id: str, instance_id: str | None, generation_or_epoch: int, api_version: int,
        *, transactional: bool = False,
    ) -> ErrorCode:
        if self.dead:
            return ErrorCode.coordinator_not_available
        if generation_or_epoch < 0 and not self.members:
            return ErrorCode.none  # admin client, or a consumer using assign()
        if transactional and generation_or_epoch < 0 and not member_id and instance_id is None:
            return ErrorCode.none  # TxnOffsetCommit without group metadata (v0-v2, or none given)
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if not transactional and api_version < 9:
            return ErrorCode.unsupported_version  # consumer-protocol members commit with v9+
        if generation_or_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        if self.dead:
            return ErrorCode.group_id_not_found
        if member_id is None and member_epoch < 0:
            return ErrorCode.none
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def validate_offset_delete(self) -> ErrorCode:
        return ErrorCode.group_id_not_found if self.dead else ErrorCode.none

    def validate_delete(self) -> ErrorCode:
        if self.dead:
            return ErrorCode.group_id_not_found
        if self.state is not ConsumerGroupState.EMPTY:
            return ErrorCode.non_empty_group
        return ErrorCode.none

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscribed_topic_names()

    def offset_expiration_base(self, offset: OffsetAndMetadata) -> int | None:
        return offset.commit_timestamp  # as Kafka's consumer groups: from each commit

    def mark_dead(self) -> None:
        self.dead = True
        if self._manager is not None:
            self._manager.cancel_timers(self)

    def tombstone_records(self) -> list[tuple[bytes, bytes | None]]:
        """Everything that names the group in ``__consumer_offsets`` (Kafka's order)."""
        gid = self.group_id
        keys = [cr.ConsumerKey(cr.CURRENT_MEMBER_ASSIGNMENT, gid, m) for m in self.members]
        keys += [cr.ConsumerKey(cr.TARGET_ASSIGNMENT_MEMBER, gid, m) for m in self.target]
        keys.append(cr.ConsumerKey(cr.TARGET_ASSIGNMENT_METADATA, gid))
        keys += [cr.ConsumerKey(cr.MEMBER_METADATA, gid, m) for m in self.members]
        keys.append(cr.ConsumerKey(cr.PARTITION_METADATA, gid))
        keys.append(cr.ConsumerKey(cr.GROUP_METADATA, gid))
        return [cr.encode((k, None)) for k in keys]

    # -- replay ----------------------------------------------------------------------------------

    def apply(self, key: cr.ConsumerKey, value: cr.Value | None) -> None:
        """Apply one record (at load, and after a heartbeat appended it)."""
        v = key.version
        if v == cr.GROUP_METADATA:
            if value is None:
                self.deleted = True
            else:
                assert isinstance(value, cr.GroupMetadataValue)
                self.deleted = False
                self.group_epoch = value.epoch
        elif v == cr.PARTITION_METADATA:
            if value is None:
                self.subscription_metadata = {}
            else:
                assert isinstance(value, cr.PartitionMetadataValue)
                self.subscription_metadata = {t.name: t for t in value.topics}
        elif v == cr.TARGET_ASSIGNMENT_METADATA:
            if value is None:
                self.assignment_epoch = -1
            else:
                assert isinstance(value, cr.TargetAssignmentMetadataValue)
                self.assignment_epoch = value.assignment_epoch
        elif v == cr.TARGET_ASSIGNMENT_MEMBER:
            mid = key.member or ""
            if value is None:
                self.target.pop(mid, None)
            else:
                assert isinstance(value, cr.TargetAssignmentMemberValue)
                self.target[mid] = _norm(value.partitions)
        elif v == cr.MEMBER_METADATA:
            self.subscriptions_version += 1
            mid = key.member or ""
            if value is None:
                self._remove_member(mid)
            else:
                assert isinstance(value, cr.MemberMetadataValue)
                old = self.members.get(mid)
                self._update_member(old, (old or ConsumerMember(mid)).with_subscription(value))
        elif v == cr.CURRENT_MEMBER_ASSIGNMENT:
            mid = key.member or ""
            old = self.members.get(mid)
            if value is None:
                if old is not None:
                    self._update_member(old, dataclasses.replace(
                        old, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                        assigned={}, pending_revocation={},
                    ))
            else:
                assert isinstance(value, cr.CurrentMemberAssignmentValue)
                self._update_member(old, (old or ConsumerMember(mid)).with_assignment(value))

    def _update_member(self, old: ConsumerMember | None, new: ConsumerMember) -> None:
        if old is not None:
            self._drop_partition_epochs(old)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == old.member_id:
                del self.static_members[old.instance_id]
        self.members[new.member_id] = new
        if new.instance_id is not None:
            self.static_members[new.instance_id] = new.member_id
        for tps in (new.assigned, new.pending_revocation):
            for t, ps in tps.items():
                for p in ps:
                    prev = self.partition_epochs.get((t, p))
                    if prev is not None:
                        log.warning(
                            "group %s: partition %s-%d given to %s at epoch %d is still owned at epoch %d",
                            self.group_id, t, p, new.member_id, new.member_epoch, prev,
                        )
                    self.partition_epochs[(t, p)] = new.member_epoch

    def _drop_partition_epochs(self, member: ConsumerMember) -> None:
        for tps in (member.assigned, member.pending_revocation):
            for t, ps in tps.items():
                for p in ps:
                    if self.partition_epochs.get((t, p)) == member.member_epoch:
                        del self.partition_epochs[(t, p)]

    def _remove_member(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is None:
            return
        self._drop_partition_epochs(member)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]


def preferred_assignor(members: Iterable[ConsumerMember], default: str) -> str:
    """The server assignor most members ask for (ties: by name); ``default`` when none asks."""
    counts: dict[str, int] = {}
    for m in members:
        if m.server_assignor:
            counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
    if not counts:
        return default
    return min(counts, key=lambda a: (-counts[a], a))


# -- regular expressions ------------------------------------------------------------------------

def compile_regex(pattern: str):
    """Compile a subscription regex with RE2; raises ValueError (``InvalidRegex``) for what RE2/J
    would not accept or a pattern longer than ``MAX_PATTERN_CHARS``."""
    return compile_client_regex(pattern)


# -- requests and results -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: TopicPartitions | None = None  # None: not sent (unchanged)
    client_id: str = ""
    client_host: str = ""
    # tenancy: (key, allowed(visible topic name)) of the heartbeating member, when an authorizer
    # decides which topics it may describe: a regex subscription resolves only to those (Kafka
    # filters a group's regex matches with the member whose heartbeat refreshed them). The key
    # tells two members' filters apart (cache).
    topic_filter: "TopicFilter | None" = None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member: ConsumerMember
    target: TopicPartitions


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error: ErrorCode
    message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: tuple[DescribedMember, ...] = ()


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


def _invalid(message: str) -> HeartbeatError:
    return HeartbeatError(ErrorCode.invalid_request, message)


def _empty(s: str | None) -> bool:
    return s is not None and not s.strip()


Record = cr.Record
RawRecord = tuple[bytes, "bytes | None"]


@dataclass
class _Plan:
    """What a heartbeat will do: records to append, then the in-memory steps to take."""

    group: ConsumerGroup
    records: list[Record] = field(default_factory=list)
    raw_before: list[RawRecord] = field(default_factory=list)  # e.g. a classic group's tombstone
    replaces: Group | None = None  # an empty classic group this consumer group replaces
    after: list[Callable[[], None]] = field(default_factory=list)


def _session_key(group_id: str, member_id: str) -> tuple:
    return ("consumer-session", group_id, member_id)


def _rebalance_key(group_id: str, member_id: str) -> tuple:
    return ("consumer-rebalance", group_id, member_id)


# -- the manager ------------------------------------------------------------------------------


class ConsumerGroupManager:
    """The consumer protocol's operations over the coordinator's groups (one per coordinator)."""

    def __init__(self, coordinator: "GroupCoordinator", config: ConsumerGroupConfig | None = None) -> None:
        self.c = coordinator
        self._config = config
        self._config_cache: tuple[Any, ConsumerGroupConfig] | None = None
        # Where topic metadata comes from: the broker's image, or (tests) whatever is set here.
        self.image_source: Callable[[], "MetadataImage"] | None = None
        self._staging: dict[int, dict[str, ConsumerGroup]] = {}
        # Per metadata version: (pattern, prefix, filter key) -> the names a group resolves to,
        # and (pattern, prefix) -> the names the pattern alone matches (computed in a worker thread
        # by prepare_regexes; None for a pattern RE2 refuses).
        self._regex_cache: dict[tuple, frozenset[str]] = {}
        self._regex_matches: dict[tuple[str, str], frozenset[str] | None] = {}
        self._regex_cache_epoch = -1
        for version in cr.KEY_VERSIONS:
            coordinator.register_record_type(version, self._replay)

    # -- plumbing --------------------------------------------------------------------------------

    @property
    def config(self) -> ConsumerGroupConfig:
        if self._config is not None:
            return self._config
        broker = getattr(self.c, "_ctx", None)
        if broker is None:
            return ConsumerGroupConfig()
        cfg = broker.config
        cached = self._config_cache
        if cached is None or cached[0] is not cfg:
            cached = (cfg, ConsumerGroupConfig.from_broker_config(cfg))
            self._config_cache = cached
        return cached[1]

    @config.setter
    def config(self, value: ConsumerGroupConfig) -> None:
        self._config = value

    def image(self) -> "MetadataImage | None":
        if self.image_source is not None:
            return self.image_source()
        broker = getattr(self.c, "_ctx", None)
        return broker.metadata.image if broker is not None else None

    @property
    def _timer(self):
        return self.c.timer

    def _group(self, group_id: str) -> ConsumerGroup | None:
        g = self.c.groups.get(group_id)
        return g if isinstance(g, ConsumerGroup) else None

    def cancel_timers(self, group: ConsumerGroup) -> None:
        gid = group.group_id
        self._timer.cancel_matching(
            lambda k: isinstance(k, tuple) and len(k) == 3 and k[0] in ("consumer-session", "consumer-rebalance") and k[1] == gid
        )

    def _cancel_member_timers(self, group_id: str, member_id: str) -> None:
        self._timer.cancel(_session_key(group_id, member_id))
        self._timer.cancel(_rebalance_key(group_id, member_id))

    def _schedule_session(self, group_id: str, member_id: str) -> None:
        self._timer.schedule(
            _session_key(group_id, member_id),
            self.config.session_timeout_ms,
            lambda: self._fence_by_timer(group_id, member_id, None, "the member session expired"),
        )

    def _schedule_rebalance_timeout(self, group_id: str, member: ConsumerMember) -> None:
        mid, epoch, timeout = member.member_id, member.member_epoch, member.rebalance_timeout_ms
        self._timer.schedule(
            _rebalance_key(group_id, mid),
            max(0, timeout),
            lambda: self._fence_by_timer(
                group_id, mid, epoch, f"it failed to revoke its partitions of epoch {epoch} within {timeout}ms"
            ),
        )

    # -- topics and regular expressions --------------------------------------------------------

    def _regex_image(self) -> "MetadataImage | None":
        """The current image, with the regex caches emptied when its version moved."""
        image = self.image()
        if image is not None and image.epoch != self._regex_cache_epoch:
            self._regex_cache.clear()
            self._regex_matches.clear()
            self._regex_cache_epoch = image.epoch
        return image

    @staticmethod
    def _regex_candidates(image: "MetadataImage", prefix: str) -> list[str]:
        return [name for name, t in image.topics.items() if not t.internal and name.startswith(prefix)]

    @staticmethod
    def _match(pattern: str, names: list[str], skip: int) -> frozenset[str] | None:
        try:
            rx = compile_regex(pattern)
        except ValueError:
            return None
        return match_names(rx, names, skip)

    async def prepare_regexes(self, group_id: str, pattern: str | None) -> None:
        """Match the regexes a heartbeat of ``group_id`` will resolve (its own ``pattern`` and its
        group's members') in a worker thread, so the decision that follows finds them cached: a
        long expression against many long names never runs on the coordinator's loop."""
        group = self.c.groups.get(group_id)
        patterns = {pattern} if pattern else set()
        if isinstance(group, ConsumerGroup):
            patterns.update(m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex)
        if not patterns:
            return
        tenant = tenant_of_group(group_id)
        prefix = tenant + "_" if tenant else ""
        for p in patterns:
            image = self._regex_image()
            if image is None or (p, prefix) in self._regex_matches:
                continue
            names = self._regex_candidates(image, prefix)
            hit = await asyncio.to_thread(self._match, p, names, len(prefix))
            if self._regex_image() is image:  # else the metadata moved on: resolve again later
                self._regex_matches[(p, prefix)] = hit

    def resolve_regex(self, pattern: str, group: ConsumerGroup | None = None) -> frozenset[str]:
        """Physical names of the non-internal topics ``pattern`` fully matches.

        tenancy: a tenant's group (its id carries the tenant's prefix) matches the names its
        members see: the tenant's own topics, unqualified; and with a topic filter (the last
        heartbeat's), only the topics that filter allows."""
        image = self._regex_image()
        if image is None:
            return frozenset()
        tenant = tenant_of_group(group.group_id) if group is not None else None
        prefix = tenant + "_" if tenant else ""
        flt = group.regex_filter if group is not None else None
        key = (pattern, prefix, flt[0] if flt is not None else None)
        hit = self._regex_cache.get(key)
        if hit is None:
            if (pattern, prefix) in self._regex_matches:
                matched = self._regex_matches[(pattern, prefix)]
            else:  # not prepared (the metadata changed meanwhile): match here, still linear time
                matched = self._match(pattern, self._regex_candidates(image, prefix), len(prefix))
                self._regex_matches[(pattern, prefix)] = matched
            n = len(prefix)
            hit = frozenset(name for name in matched or () if flt is None or flt[1](name[n:]))
            self._regex_cache[key] = hit
        return hit

    def member_topics(self, member: ConsumerMember, group: ConsumerGroup | None = None) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            names |= self.resolve_regex(member.subscribed_topic_regex, group)
        return names

    def _group_subscription_metadata(
        self, group: ConsumerGroup, members: Mapping[str, ConsumerMember], same_subscriptions: bool
    ) -> dict[str, cr.TopicMetadata]:
        """The subscription metadata of ``members``; cached per (metadata version, subscriptions
        version) when the members subscribe to what the group's members do."""
        image = self.image()
        if not same_subscriptions or image is None:
            return self._subscription_metadata(members.values(), group)
        cached = group.sub_meta_cache
        if cached is not None and cached[0] == image.epoch and cached[1] == group.subscriptions_version:
            return cached[2]
        out = self._subscription_metadata(members.values(), group)
        group.sub_meta_cache = (image.epoch, group.subscriptions_version, out)
        return out

    def _subscription_metadata(
        self, members: Iterable[ConsumerMember], group: ConsumerGroup | None = None
    ) -> dict[str, cr.TopicMetadata]:
        image = self.image()
        out: dict[str, cr.TopicMetadata] = {}
        if image is None:
            return out
        for m in members:
            for name in self.member_topics(m, group):
                if name in out:
                    continue
                t = image.topics.get(name)
                if t is not None:
                    out[name] = cr.TopicMetadata(t.topic_id, name, len(t.partitions))
        return out

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------------

    async def heartbeat(self, req: HeartbeatRequest, api_version: int = 1) -> HeartbeatResult:
        """Handle one ConsumerGroupHeartbeat: answer once its records are committed."""
        code = self.c.status(req.group_id)
        if code != ErrorCode.none:
            return HeartbeatResult(code)
        if req.member_epoch not in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            await self.prepare_regexes(req.group_id, req.subscribed_topic_regex)
        try:
            self._validate(req, api_version)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                plan, result = self._leave(req)
            else:
                plan, result = self._regular(req, api_version)
        except HeartbeatError as e:
            if e.code not in (ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch):
                log.info("group %s: heartbeat of %r (epoch %d): %s %s", req.group_id, req.member_id,
                         req.member_epoch, e.code.name, e.message or "")
            return HeartbeatResult(e.code, e.message)
        except Exception as e:  # a bug: nothing was written; answer as Kafka does
            log.exception("group %s: heartbeat of %r failed", req.group_id, req.member_id)
            return HeartbeatResult(ErrorCode.unknown_server_error, str(e))
        err = await self._execute(plan)
        if err != ErrorCode.none:
            return HeartbeatResult(err)
        return result

    def _validate(self, req: HeartbeatRequest, api_version: int) -> None:
        """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``."""
        if not self.config.enabled:
            raise HeartbeatError(ErrorCode.unsupported_version, "The consumer group protocol is not enabled.")
        epoch = req.member_epoch
        if api_version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not req.member_id.strip():
                raise _invalid("MemberId can't be empty.")
        if not req.group_id.strip():
            raise _invalid("GroupId can't be empty.")
        if _empty(req.instance_id):
            raise _invalid("InstanceId can't be empty.")
        if _empty(req.rack_id):
            raise _invalid("RackId can't be empty.")
        if epoch == JOIN_GROUP_MEMBER_EPOCH:
            if req.rebalance_timeout_ms == -1:
                raise _invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or req.owned:
                raise _invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise _invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise _invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise _invalid("MemberEpoch is invalid.")
        assignors = self.config.assignors
        if req.server_assignor is not None and req.server_assignor not in assignors:
            raise HeartbeatError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: {', '.join(assignors)}.",
            )

    def _group_for_heartbeat(self, group_id: str, create: bool, plan_raw: list[RawRecord]) -> tuple[ConsumerGroup, Group | None]:
        """Kafka's ``getOrMaybeCreateConsumerGroup``: (group, classic group it replaces)."""
        existing = self.c.groups.get(group_id)
        if existing is None:
            if not create:
                raise HeartbeatError(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
            return ConsumerGroup(group_id, self.c.partition_for(group_id), self), None
        if isinstance(existing, ConsumerGroup):
            if existing.dead:
                raise HeartbeatError(ErrorCode.coordinator_not_available)
            return existing, None
        if not create:
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        if existing.is_empty() and not getattr(existing, "pending_join", None):
            # Offline upgrade: the empty classic group goes (its offsets stay).
            plan_raw.append((group_metadata_key(group_id), None))
            log.info("group %s: converting the empty classic group to a consumer group", group_id)
            return ConsumerGroup(group_id, existing.partition, self), existing
        raise HeartbeatError(
            ErrorCode.group_id_not_found,
            f"Cannot upgrade classic group {group_id} to consumer group because online upgrade is disabled.",
        )

    def _regular(self, req: HeartbeatRequest, api_version: int) -> tuple[_Plan, HeartbeatResult]:
        cfg = self.config
        gid = req.group_id
        create = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        raw: list[RawRecord] = []
        group, replaces = self._group_for_heartbeat(gid, create, raw)
        flt = req.topic_filter
        if (group.regex_filter or (None,))[0] != (flt or (None,))[0]:
            group.subscriptions_version += 1  # a regex may resolve differently now
        group.regex_filter = flt
        plan = _Plan(group, raw_before=raw, replaces=replaces)
        records = plan.records

        member_id = req.member_id
        if len(group.members) >= cfg.max_size and (not member_id or member_id not in group.members):
            raise HeartbeatError(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of {cfg.max_size} members.",
            )
        if not member_id:
            member_id = self.c.new_uuid()  # v0: the coordinator names new members

        # -- 1. the member, created or found (a static member may take over an instance id)
        replaced: ConsumerMember | None = None
        if req.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not create:
                    raise HeartbeatError(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {gid}.")
                member = ConsumerMember(member_id)
                log.info("group %s: member %s joins", gid, member_id)
            else:
                self._check_epoch(member, req.member_epoch, req.owned)
        else:
            existing = group.static_member(req.instance_id)
            if create:
                if existing is None:
                    member = group.members.get(member_id) or ConsumerMember(member_id)
                    log.info("group %s: static member %s (instance %s) joins", gid, member_id, req.instance_id)
                else:
                    if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                        raise HeartbeatError(
                            ErrorCode.unreleased_instance_id,
                            f"Static member {member_id} with instance id {req.instance_id} cannot join the group "
                            f"because the instance id is owned by {existing.member_id} member.",
                        )
                    # The new incarnation takes over the old one's assignment, from epoch 0.
                    member = dataclasses.replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
                    replaced = existing
                    self._replace_member_records(group, existing, member, records)
                    log.info(
                        "group %s: static member %s re-joins as %s, replacing %s",
                        gid, req.instance_id, member_id, existing.member_id,
                    )
            else:
                if existing is None:
                    raise HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
                if existing.member_id != member_id:
                    raise HeartbeatError(
                        ErrorCode.fenced_instance_id,
                        f"Static member {member_id} with instance id {req.instance_id} was fenced by member "
                        f"{existing.member_id}.",
                    )
                self._check_epoch(existing, req.member_epoch, req.owned)
                member = existing

        updated = dataclasses.replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(
                tuple(sorted(set(req.subscribed_topic_names)))
                if req.subscribed_topic_names is not None else member.subscribed_topic_names
            ),
            subscribed_topic_regex=(
                (req.subscribed_topic_regex or None)
                if req.subscribed_topic_regex is not None else member.subscribed_topic_regex
            ),
            client_id=req.client_id,
            client_host=req.client_host,
        )

        bump = group.group_epoch == 0  # a new group moves off epoch 0 at once
        if updated != member:
            records.append((cr.ConsumerKey(cr.MEMBER_METADATA, gid, member_id), updated.subscription_value()))
            if updated.subscribed_topic_names != member.subscribed_topic_names:
                bump = True
            if updated.subscribed_topic_regex != member.subscribed_topic_regex:
                if updated.subscribed_topic_regex:
                    try:
                        compile_regex(updated.subscribed_topic_regex)
                    except ValueError as e:
                        raise HeartbeatError(
                            ErrorCode.invalid_regular_expression,
                            f"SubscribedTopicRegex `{updated.subscribed_topic_regex}` is not a valid regular "
                            f"expression: {e}.",
                        ) from None
                bump = True

        # -- 2. subscription metadata and the group epoch
        members_after = dict(group.members)
        if replaced is not None:
            members_after.pop(replaced.member_id, None)
        members_after[member_id] = updated
        same_subscriptions = (
            replaced is None
            and member_id in group.members
            and updated.subscribed_topic_names == member.subscribed_topic_names
            and updated.subscribed_topic_regex == member.subscribed_topic_regex
        )
        sub_meta = self._group_subscription_metadata(group, members_after, same_subscriptions)
        if sub_meta != group.subscription_metadata:
            records.append((cr.ConsumerKey(cr.PARTITION_METADATA, gid), cr.PartitionMetadataValue(tuple(sub_meta.values()))))
            bump = True
        group_epoch = group.group_epoch
        if bump:
            group_epoch += 1
            records.append((cr.ConsumerKey(cr.GROUP_METADATA, gid), cr.GroupMetadataValue(group_epoch)))
            log.info("group %s: group epoch %d", gid, group_epoch)

        # -- 3. the target assignment, if the group epoch moved past it
        if group_epoch > group.assignment_epoch:
            target = self._target_assignment(group, group_epoch, members_after, sub_meta, updated, replaced, records)
            target_epoch = group_epoch
        else:
            target_epoch = group.assignment_epoch
            target = group.target_for(member_id, updated.instance_id)

        # -- 4. reconcile the member towards its target
        reconciled = updated
        if not updated.is_reconciled_to(target_epoch):
            try:
                reconciled = reconcile(updated, target_epoch, target, group.current_partition_epoch, req.owned)
            except FencedMemberEpoch as e:
                raise HeartbeatError(ErrorCode.fenced_member_epoch, str(e)) from None
            if reconciled != updated:
                records.append((cr.ConsumerKey(cr.CURRENT_MEMBER_ASSIGNMENT, gid, member_id), reconciled.assignment_value()))
                if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                    plan.after.append(lambda: self._schedule_rebalance_timeout(gid, reconciled))
                else:
                    plan.after.append(lambda: self._timer.cancel(_rebalance_key(gid, member_id)))
                log.debug(
                    "group %s: member %s epoch %d (%s), assigned %s, revoking %s", gid, member_id,
                    reconciled.member_epoch, reconciled.state.name, reconciled.assigned, reconciled.pending_revocation,
                )
        plan.after.append(lambda: self._schedule_session(gid, member_id))

        full = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH or (
            req.rebalance_timeout_ms != -1
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
            and req.owned is not None
        )
        send_assignment = full or reconciled.assigned != member.assigned
        result = HeartbeatResult(
            ErrorCode.none,
            member_id=member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            assignment=dict(reconciled.assigned) if send_assignment else None,
        )
        return plan, result

    @staticmethod
    def _check_epoch(member: ConsumerMember, received: int, owned: TopicPartitions | None) -> None:
        """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid``."""
        if received > member.member_epoch:
            raise HeartbeatError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a greater member epoch ({received}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            )
        if received < member.member_epoch:
            # The response that bumped the epoch may have been lost: accept the previous epoch
            # from a member owning no more than it is assigned.
            subset = owned is None or all(
                set(ps) <= member.assigned.get(t, frozenset()) for t, ps in owned.items()
            )
            if received != member.previous_member_epoch or not subset:
                raise HeartbeatError(
                    ErrorCode.fenced_member_epoch,
                    f"The consumer group member has a smaller member epoch ({received}) than the one known by the "
                    f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
                )

    def _replace_member_records(
        self, group: ConsumerGroup, old: ConsumerMember, new: ConsumerMember, records: list[Record]
    ) -> None:
        gid = group.group_id
        self._remove_member_records(gid, old.member_id, records)
        records.append((cr.ConsumerKey(cr.MEMBER_METADATA, gid, new.member_id), new.subscription_value()))
        records.append((
            cr.ConsumerKey(cr.TARGET_ASSIGNMENT_MEMBER, gid, new.member_id),
            cr.TargetAssignmentMemberValue(group.target.get(old.member_id, {})),
        ))
        records.append((cr.ConsumerKey(cr.CURRENT_MEMBER_ASSIGNMENT, gid, new.member_id), new.assignment_value()))

    @staticmethod
    def _remove_member_records(group_id: str, member_id: str, records: list[Record]) -> None:
        records.append((cr.ConsumerKey(cr.CURRENT_MEMBER_ASSIGNMENT, group_id, member_id), None))
        records.append((cr.ConsumerKey(cr.TARGET_ASSIGNMENT_MEMBER, group_id, member_id), None))
        records.append((cr.ConsumerKey(cr.MEMBER_METADATA, group_id, member_id), None))

    def _target_assignment(
        self,
        group: ConsumerGroup,
        group_epoch: int,
        members: Mapping[str, ConsumerMember],
        sub_meta: Mapping[str, cr.TopicMetadata],
        updated: ConsumerMember,
        replaced: ConsumerMember | None,
        records: list[Record],
    ) -> TopicPartitions:
        """Run the group's assignor; records for members whose target changed, then the epoch."""
        name = preferred_assignor(members.values(), self.config.default_assignor)
        assign = ASSIGNORS.get(name) or ASSIGNORS[self.config.default_assignor]
        ids = {tm.name: tm.topic_id for tm in sub_meta.values()}
        specs = {}
        for mid, m in members.items():
            current = group.target.get(mid, EMPTY)
            if mid == updated.member_id and replaced is not None:
                current = group.target.get(replaced.member_id, EMPTY)
            subscribed = frozenset(ids[n] for n in self.member_topics(m, group) if n in ids)
            specs[mid] = MemberSpec(subscribed, m.instance_id, m.rack_id, current)
        result = assign(specs, {tm.topic_id: tm.num_partitions for tm in sub_meta.values()})
        gid = group.group_id
        for mid in specs:
            new = _norm(result.get(mid))
            old = group.target.get(mid)
            if mid == updated.member_id and replaced is not None:
                old = None  # its target record was just written as a copy of the old member's
            if old is None or old != new:
                records.append((cr.ConsumerKey(cr.TARGET_ASSIGNMENT_MEMBER, gid, mid), cr.TargetAssignmentMemberValue(new)))
        records.append((cr.ConsumerKey(cr.TARGET_ASSIGNMENT_METADATA, gid), cr.TargetAssignmentMetadataValue(group_epoch)))
        log.info("group %s: target assignment for epoch %d computed with %r for %d members",
                 gid, group_epoch, name, len(specs))
        return _norm(result.get(updated.member_id))

    # -- leaving and fencing ---------------------------------------------------------------------

    def _leave(self, req: HeartbeatRequest) -> tuple[_Plan, HeartbeatResult]:
        gid = req.group_id
        group = self._group(gid)
        if group is None or group.dead:
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Consumer group {gid} not found.")
        result = HeartbeatResult(ErrorCode.none, member_id=req.member_id, member_epoch=req.member_epoch)
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.unknown_member_id, f"Member {req.member_id} is not a member of group {gid}.")
            log.info("group %s: member %s left", gid, req.member_id)
            return self._fence_plan(group, member), result
        member = group.static_member(req.instance_id)
        if member is None:
            raise HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if member.member_id != req.member_id:
            raise HeartbeatError(
                ErrorCode.fenced_instance_id,
                f"Static member {req.member_id} with instance id {req.instance_id} was fenced by member {member.member_id}.",
            )
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # Gone for now: keeps its partitions until its session expires or it comes back.
            log.info("group %s: static member %s (instance %s) left temporarily", gid, member.member_id, req.instance_id)
            leaving = dataclasses.replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
            plan = _Plan(group, [(cr.ConsumerKey(cr.CURRENT_MEMBER_ASSIGNMENT, gid, member.member_id), leaving.assignment_value())])
            plan.after.append(lambda: self._timer.cancel(_rebalance_key(gid, member.member_id)))
            return plan, HeartbeatResult(ErrorCode.none, member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        log.info("group %s: static member %s (instance %s) left", gid, member.member_id, req.instance_id)
        return self._fence_plan(group, member), result

    def _fence_plan(self, group: ConsumerGroup, member: ConsumerMember) -> _Plan:
        """Remove a member: its records go, the subscription metadata follows, the epoch bumps."""
        gid = group.group_id
        plan = _Plan(group)
        self._remove_member_records(gid, member.member_id, plan.records)
        rest = [m for mid, m in group.members.items() if mid != member.member_id]
        sub_meta = self._subscription_metadata(rest, group)
        if sub_meta != group.subscription_metadata:
            plan.records.append((cr.ConsumerKey(cr.PARTITION_METADATA, gid), cr.PartitionMetadataValue(tuple(sub_meta.values()))))
        plan.records.append((cr.ConsumerKey(cr.GROUP_METADATA, gid), cr.GroupMetadataValue(group.group_epoch + 1)))
        plan.after.append(lambda: self._cancel_member_timers(gid, member.member_id))
        return plan

    def _fence_by_timer(self, group_id: str, member_id: str, epoch: int | None, reason: str) -> None:
        group = self._group(group_id)
        if group is None or group.dead:
            return
        member = group.members.get(member_id)
        if member is None or (epoch is not None and member.member_epoch != epoch):
            return
        log.info("group %s: member %s fenced because %s", group_id, member_id, reason)
        plan = self._fence_plan(group, member)
        code = self._apply_plan(plan)
        if isinstance(code, ErrorCode):
            log.warning("group %s: could not write the fencing of %s: %s", group_id, member_id, code.name)
            return
        end, owner_epoch = code

        async def wait() -> None:
            err = await self.c._committed(group.partition, end, owner_epoch)
            if err != ErrorCode.none:
                log.warning("group %s: the fencing of %s was not committed: %s", group_id, member_id, err.name)

        self.c._spawn(wait())

    # -- writing -------------------------------------------------------------------------------

    def _apply_plan(self, plan: _Plan) -> tuple[int, int] | ErrorCode | None:
        """Append the plan's records, then apply them and run its steps. None: nothing to write."""
        group = plan.group
        raw = list(plan.raw_before) + [cr.encode(r) for r in plan.records]
        res = None
        if raw:
            res = self.c._append(group.partition, raw)
            if isinstance(res, ErrorCode):
                return res
        if plan.replaces is not None:
            self.c.remove_group(plan.replaces)
        for key, value in plan.records:
            group.apply(key, value)
        if self.c.groups.get(group.group_id) is not group and not group.deleted:
            self.c.add_group(group)
        for step in plan.after:
            step()
        return res

    async def _execute(self, plan: _Plan) -> ErrorCode:
        res = self._apply_plan(plan)
        if res is None:
            return ErrorCode.none
        if isinstance(res, ErrorCode):
            return res
        return await self.c._committed(plan.group.partition, *res)

    # -- empty groups converted by a classic JoinGroup --------------------------------------------

    def downgrade_empty_group(self, group: ConsumerGroup) -> ErrorCode:
        """Offline downgrade: an empty consumer group's records go, so a classic group can take
        its id (its committed offsets stay). Appends the tombstones; returns the append error."""
        assert group.is_empty()
        res = self.c._append(group.partition, group.tombstone_records())
        if isinstance(res, ErrorCode):
            return res
        log.info("group %s: converting the empty consumer group to a classic group", group.group_id)
        self.c.remove_group(group)

        async def wait(end: int, epoch: int) -> None:
            err = await self.c._committed(group.partition, end, epoch)
            if err != ErrorCode.none:
                log.warning("group %s: its tombstones were not committed: %s", group.group_id, err.name)

        self.c._spawn(wait(*res))
        return ErrorCode.none

    # -- ConsumerGroupDescribe ---------------------------------------------------------------------

    def describe(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        out = []
        for gid in group_ids:
            code = self.c.status(gid)
            if code != ErrorCode.none:
                out.append(DescribedGroup(gid, code))
                continue
            existing = self.c.groups.get(gid)
            if existing is None or existing.is_dead():
                out.append(DescribedGroup(gid, ErrorCode.group_id_not_found, f"Group {gid} not found."))
                continue
            if not isinstance(existing, ConsumerGroup):
                out.append(DescribedGroup(gid, ErrorCode.group_id_not_found, f"Group {gid} is not a consumer group."))
                continue
            g = existing
            out.append(
                DescribedGroup(
                    gid,
                    ErrorCode.none,
                    None,
                    g.state_name,
                    g.group_epoch,
                    g.assignment_epoch,
                    g.preferred_assignor(self.config.default_assignor),
                    tuple(DescribedMember(m, g.target.get(mid, EMPTY)) for mid, m in g.members.items()),
                )
            )
        return out

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        image = self.image()
        if image is None:
            return None
        t = image.topics_by_id.get(topic_id)
        return t.name if t is not None else None

    # -- loading ---------------------------------------------------------------------------------

    def _replay(self, coordinator: "GroupCoordinator", partition: int, offset: int, key: bytes, value: bytes | None) -> None:
        try:
            k = cr.decode_key(key)
            v = None if value is None else cr.decode_value(k.version, value)
        except RecordFormatError as e:
            log.warning("__consumer_offsets-%d offset %d: skipping a consumer group record: %s", partition, offset, e)
            return
        staged = self._staging.setdefault(partition, {})
        group = staged.get(k.group)
        if group is None:
            if v is None:
                return  # a tombstone for a group we never saw
            group = staged[k.group] = ConsumerGroup(k.group, partition, self)
        group.apply(k, v)

    def on_partition_loaded(self, partition: int) -> None:
        """The partition's records are replayed: install its consumer groups, start sessions."""
        staged = self._staging.pop(partition, {})
        for gid, group in staged.items():
            if group.deleted:
                continue
            existing = self.c.groups.get(gid)
            if existing is not None:
                if _is_simple_classic(existing):
                    # Created for offsets that had no classic group metadata: they are this group's.
                    self.c.remove_group(existing)
                else:
                    log.warning("group %s: both classic and consumer group records are live; keeping the classic group", gid)
                    continue
            group.partition = self.c.partition_for(gid)
            self.c.add_group(group)
            log.info("group %s: loaded consumer group with %d members, epoch %d", gid, len(group.members), group.group_epoch)
            for member in group.members.values():
                self._schedule_session(gid, member.member_id)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_rebalance_timeout(gid, member)


def _is_simple_classic(group: Group) -> bool:
    return (
        group.group_type == "classic"
        and group.protocol_type is None
        and group.is_empty()
        and not getattr(group, "members", None)
        and not getattr(group, "pending_join", None)
        and getattr(group, "generation_id", 0) == 0
    )
