"""The classic group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup (Kafka's ``ClassicGroup``
and the classic half of ``GroupMetadataManager``, re-derived, not translated).

States and transitions (``VALID_PREVIOUS``)::

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                 ▲      ▲                                      │ leader's SyncGroup,
      │                 │      └──── member joins/leaves/fails ───────┤ record written
      └── last member ──┘                                             ▼
          leaves             ◀──── member joins/leaves/fails ──── Stable

    any state ──▶ Dead (deleted, expired, or unloaded)

Invariants:

- every member of ``members`` has a heartbeat timer, except while it awaits a JoinGroup or
  SyncGroup response (then the rebalance/sync timers govern it);
- ``static_members`` maps each group.instance.id to the one member id that owns it; a JoinGroup
  with that instance id and no member id replaces the owner (KIP-345), fencing the old id with
  FENCED_INSTANCE_ID; in Stable, with the selected protocol unchanged, no rebalance happens;
- a member id handed out with MEMBER_ID_REQUIRED (JoinGroup v4+, dynamic members) sits in
  ``pending_join`` until it joins with it or its session timeout passes; the join phase does not
  complete while any are pending;
- the join phase of a *new* group (from Empty) waits ``group.initial.rebalance.delay.ms``, and
  again (up to the rebalance timeout in total) each time a new member arrived in the meantime;
  otherwise it completes as soon as every known member has rejoined, or at the rebalance timeout
  (removing dynamic members that did not rejoin);
- the assignment is stored (GroupMetadataValue record, acks=all) before SyncGroup responses go
  out and the group becomes Stable; a generation is never reused.

All methods run on the event loop; parked JoinGroup/SyncGroup requests are ``asyncio.Future``\\ s
that the handlers await. Nothing here blocks or sleeps; timeouts go through the injected
:class:`~shoal.groups.timer.Timer`.

Deliberate deviations from Kafka:

- a member that sends a second JoinGroup (or SyncGroup) while its first is still parked gets
  REBALANCE_IN_PROGRESS on the first one (Kafka silently drops the first callback); a member that
  leaves or is removed while its SyncGroup is parked gets UNKNOWN_MEMBER_ID on it (Kafka never
  answers it);
- member ids are ``<client.id or instance id>-<uuid4>`` like Kafka's, from an injectable source.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from shoal.groups.group import Group, OffsetAndMetadata
from shoal.groups.records import (
    GroupMetadataValue,
    MemberMetadataValue,
    RecordFormatError,
    encode_group_metadata_value,
    group_metadata_key,
    subscription_topics,
)
from shoal.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from shoal.groups.coordinator import GroupCoordinator

log = logging.getLogger("shoal.groups")

CONSUMER_PROTOCOL_TYPE = "consumer"
UNKNOWN_MEMBER_ID = ""


class ClassicGroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = ClassicGroupState
VALID_PREVIOUS: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.DEAD: frozenset({S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
}

Protocols = tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's order of preference


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: Protocols
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True  # JoinGroup v4+
    supports_skip_assignment: bool = True  # JoinGroup v9+
    reason: str | None = None


@dataclass(eq=False)
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    join_future: "asyncio.Future[JoinResult] | None" = None
    sync_future: "asyncio.Future[SyncResult] | None" = None
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: Protocols) -> bool:
        return tuple(protocols) == tuple(self.protocols)

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            return False  # a new member may expire even while it awaits its JoinGroup response
        return self.awaiting_join or self.awaiting_sync


def _resolve(fut: "asyncio.Future | None", value: object) -> bool:
    if fut is None or fut.done():
        return False
    fut.set_result(value)
    return True


class ClassicGroup(Group):
    group_type = "classic"

    def __init__(self, group_id: str, partition: int, manager: "ClassicGroupManager", now_ms: int) -> None:
        super().__init__(group_id, partition)
        self._manager = manager
        self.state = S.EMPTY
        self.previous_state = S.EMPTY
        self.state_timestamp: int | None = now_ms
        self._protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, ClassicMember] = {}  # insertion order: the next leader is the oldest
        self.static_members: dict[str, str] = {}
        self.pending_join: set[str] = set()
        self.pending_sync: set[str] = set()
        self.subscribed_topics: set[str] | None = None
        self.new_member_added = False

    def __repr__(self) -> str:
        return (
            f"ClassicGroup({self.group_id!r}, {self.state.value}, generation {self.generation_id}, "
            f"{len(self.members)} members, leader {self.leader_id!r})"
        )

    # -- Group ---------------------------------------------------------------------------------

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def protocol_type(self) -> str | None:
        return self._protocol_type

    def is_empty(self) -> bool:
        return self.state is S.EMPTY

    def is_dead(self) -> bool:
        return self.state is S.DEAD

    def uses_consumer_protocol(self) -> bool:
        return self._protocol_type == CONSUMER_PROTOCOL_TYPE

    def validate_offset_commit(
        self, member_id: str, instance_id: str | None, generation_or_epoch: int, api_version: int,
        *, transactional: bool = False,
    ) -> ErrorCode:
        if self.state is S.DEAD:
            return ErrorCode.coordinator_not_available
        if generation_or_epoch < 0 and self.state is S.EMPTY:
            return ErrorCode.none  # a "simple" commit: admin client or a consumer using assign()
        if generation_or_epoch >= 0 or member_id or instance_id is not None:
            code = self.validate_member(member_id, instance_id)
            if code != ErrorCode.none:
                return code
            if generation_or_epoch != self.generation_id:
                return ErrorCode.illegal_generation
        elif not transactional and self.state is not S.EMPTY:
            # TxnOffsetCommit v0-v2 carry no member id nor generation: accepted in any state
            return ErrorCode.unknown_member_id
        if not transactional and self.state is S.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def on_offset_commit(self, member_id: str) -> None:
        # In the classic protocol a commit keeps the member's session alive in Stable and
        # PreparingRebalance (the heartbeat tells it about the rebalance).
        member = self.members.get(member_id)
        if member is not None and self.state in (S.STABLE, S.PREPARING_REBALANCE):
            self._manager.reschedule_heartbeat(self, member)

    def validate_offset_delete(self) -> ErrorCode:
        if self.state is S.DEAD:
            return ErrorCode.group_id_not_found
        if self.state is not S.EMPTY and not self.uses_consumer_protocol():
            return ErrorCode.non_empty_group
        return ErrorCode.none

    def validate_delete(self) -> ErrorCode:
        if self.state is S.DEAD:
            return ErrorCode.group_id_not_found
        if self.state is not S.EMPTY:
            return ErrorCode.non_empty_group
        return ErrorCode.none

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            return self.uses_consumer_protocol()
        return topic in self.subscribed_topics

    def offset_expiration_base(self, offset: OffsetAndMetadata) -> int | None:
        if self._protocol_type is None:
            return offset.commit_timestamp  # a simple group: retention counts from each commit
        if self.state is S.EMPTY:
            # No members: retention counts from when the group became empty.
            return self.state_timestamp if self.state_timestamp is not None else offset.commit_timestamp
        if self.uses_consumer_protocol() and self.subscribed_topics is not None and self.state is S.STABLE:
            return offset.commit_timestamp  # offsets of topics nobody subscribes to any more
        return None

    def mark_dead(self) -> None:
        for member in self.members.values():
            self.complete_join_future(member, JoinResult(ErrorCode.not_coordinator, member.member_id))
            self.complete_sync_future(member, SyncResult(ErrorCode.not_coordinator))
        self.transition_to(S.DEAD, None)

    # -- membership ----------------------------------------------------------------------------

    def transition_to(self, state: ClassicGroupState, now_ms: int | None) -> None:
        if self.state not in VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id}: {self.state.value} -> {state.value} is not a transition")
        self.previous_state = self.state
        self.state = state
        if now_ms is not None:
            self.state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS[S.PREPARING_REBALANCE]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if existing != member_id:
                log.info(
                    "group %s: member id %s of static member %s is fenced by %s",
                    self.group_id, member_id, instance_id, existing,
                )
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def add(self, member: ClassicMember, future: "asyncio.Future[JoinResult] | None") -> None:
        if member.group_instance_id is not None:
            assert member.group_instance_id not in self.static_members
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self._protocol_type = member.protocol_type
        assert self._protocol_type == member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        member.join_future = future
        self.pending_join.discard(member.member_id)

    def remove(self, member_id: str) -> ClassicMember | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_join.discard(member_id)
        self.pending_sync.discard(member_id)
        return member

    def update_member(
        self,
        member: ClassicMember,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        future: "asyncio.Future[JoinResult] | None",
    ) -> None:
        member.protocols = tuple(protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        old = member.join_future
        if old is not None and old is not future:
            # The member sent another JoinGroup while one was parked: the older one is answered.
            _resolve(old, JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.join_future = future

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> ClassicMember:
        old = self.members.pop(old_member_id)
        # Fence the old incarnation at once if it is parked on a JoinGroup or SyncGroup.
        self.complete_join_future(old, JoinResult(ErrorCode.fenced_instance_id, old_member_id))
        self.complete_sync_future(old, SyncResult(ErrorCode.fenced_instance_id))
        new = ClassicMember(
            member_id=new_member_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_member_id] = new
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        self.pending_sync.discard(old_member_id)
        return new

    def complete_join_future(self, member: ClassicMember, result: JoinResult) -> bool:
        fut = member.join_future
        if fut is None:
            return False
        member.join_future = None
        _resolve(fut, result)
        return True

    def complete_sync_future(self, member: ClassicMember, result: SyncResult) -> bool:
        fut = member.sync_future
        if fut is None:
            return False
        member.sync_future = None
        _resolve(fut, result)
        return True

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        return not self.pending_join and all(m.awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[ClassicMember]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep a leader that rejoined, else pick a member that did; False if none did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for m in self.members.values():
            if m.awaiting_join:
                log.info(
                    "group %s: leader %s did not rejoin in time; %s is the new leader",
                    self.group_id, self.leader_id, m.member_id,
                )
                self.leader_id = m.member_id
                return True
        return False

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols -----------------------------------------------------------------------------

    def _candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return common

    def supports_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        names = list(names)
        if self.state is S.EMPTY and not self.members:
            return bool(protocol_type) and bool(names)
        if self._protocol_type != protocol_type:
            return False
        common = self._candidate_protocols()
        return any(n in common for n in names)

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that every member supports; the most
        votes wins (ties: the protocol the earliest member voted for)."""
        candidates = self._candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            name = m.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        best = max(votes.values())
        return next(name for name, n in votes.items() if n == best)

    def compute_subscribed_topics(self) -> set[str] | None:
        if self._protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(subscription_topics(m.metadata(self.protocol_name)))
        except RecordFormatError as e:
            log.warning(
                "group %s: cannot parse the consumer protocol subscription (%s); "
                "the subscribed topics are unknown", self.group_id, e,
            )
            return None
        return topics

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(S.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(S.EMPTY, now_ms)
        self.pending_sync.clear()

    def current_members(self) -> tuple[JoinMember, ...]:
        return tuple(
            JoinMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    def metadata_value(self, assignment: dict[str, bytes]) -> GroupMetadataValue:
        return GroupMetadataValue(
            protocol_type=self._protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=self.state_timestamp if self.state_timestamp is not None else -1,
            members=tuple(
                MemberMetadataValue(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata(self.protocol_name),
                    assignment=assignment.get(m.member_id, b""),
                )
                for m in self.members.values()
            ),
        )

    def metadata_record(self, assignment: dict[str, bytes]) -> tuple[bytes, bytes]:
        return group_metadata_key(self.group_id), encode_group_metadata_value(self.metadata_value(assignment))

    def assignments(self) -> dict[str, bytes]:
        return {m.member_id: m.assignment for m in self.members.values()}


def _hb_key(group_id: str, member_id: str) -> tuple:
    return ("classic-heartbeat", group_id, member_id)


def _join_key(group_id: str) -> tuple:
    return ("classic-join", group_id)


def _sync_key(group_id: str) -> tuple:
    return ("classic-sync", group_id)


class ClassicGroupManager:
    """The classic protocol's operations over the coordinator's groups."""

    def __init__(self, coordinator: "GroupCoordinator") -> None:
        self.c = coordinator

    # -- plumbing --------------------------------------------------------------------------------

    @property
    def _timer(self):
        return self.c.timer

    def _now(self) -> int:
        return self.c.clock.now_ms()

    def _future(self) -> asyncio.Future:
        return asyncio.get_running_loop().create_future()

    def _done(self, value: object) -> asyncio.Future:
        fut = self._future()
        fut.set_result(value)
        return fut

    def _group(self, group_id: str) -> ClassicGroup | None:
        g = self.c.groups.get(group_id)
        return g if isinstance(g, ClassicGroup) else None

    def new_group(self, group_id: str) -> ClassicGroup:
        group = ClassicGroup(group_id, self.c.partition_for(group_id), self, self._now())
        self.c.add_group(group)
        return group

    def generate_member_id(self, client_id: str, instance_id: str | None) -> str:
        return f"{instance_id if instance_id is not None else client_id}-{self.c.new_uuid()}"

    def cancel_timers(self, group: ClassicGroup) -> None:
        """Cancel the group's timers (a member's timer is cancelled whenever it leaves, so the
        current members and pending members are all that can be left)."""
        gid = group.group_id
        self._timer.cancel(_join_key(gid))
        self._timer.cancel(_sync_key(gid))
        for mid in [*group.members, *group.pending_join]:
            self._timer.cancel(_hb_key(gid, mid))

    def reschedule_heartbeat(self, group: ClassicGroup, member: ClassicMember, timeout_ms: int | None = None) -> None:
        gid, mid = group.group_id, member.member_id
        self._timer.schedule(
            _hb_key(gid, mid),
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            lambda: self._expire_heartbeat(gid, mid),
        )

    # -- JoinGroup -------------------------------------------------------------------------------

    def join(self, req: JoinRequest) -> "asyncio.Future[JoinResult]":
        fut: asyncio.Future[JoinResult] = self._future()
        is_unknown = req.member_id == UNKNOWN_MEMBER_ID
        group = self._group(req.group_id)
        created = False
        if group is None:
            if not is_unknown:
                fut.set_result(JoinResult(ErrorCode.unknown_member_id, req.member_id))
                return fut
            group = self.new_group(req.group_id)
            created = True
        if not self._accept_joining_member(group, req.member_id):
            group.remove(req.member_id)
            fut.set_result(JoinResult(ErrorCode.group_max_size_reached, UNKNOWN_MEMBER_ID))
        elif is_unknown:
            self._join_new_member(group, req, fut)
        else:
            self._join_existing_member(group, req, fut)
        if created and fut.done() and not group.members and not group.pending_join:
            self.c.remove_group(group)  # nothing came of it: do not leave an empty group behind
        return fut

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.c.config.max_size
        if group.state in (S.EMPTY, S.DEAD):
            return True
        if group.state is S.PREPARING_REBALANCE:
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join) or group.num_awaiting_join() < max_size
        return member_id in group.members or len(group.members) < max_size

    def _join_new_member(self, group: ClassicGroup, req: JoinRequest, fut: asyncio.Future) -> None:
        if group.state is S.DEAD:
            fut.set_result(JoinResult(ErrorCode.coordinator_not_available, UNKNOWN_MEMBER_ID))
            return
        if not group.supports_protocols(req.protocol_type, (n for n, _ in req.protocols)):
            fut.set_result(JoinResult(ErrorCode.inconsistent_group_protocol, UNKNOWN_MEMBER_ID))
            return
        new_id = self.generate_member_id(req.client_id, req.group_instance_id)
        if req.group_instance_id is not None:
            existing = group.static_members.get(req.group_instance_id)
            if existing is not None:
                log.info(
                    "group %s: static member %s rejoins in %s; member id %s replaces %s",
                    group.group_id, req.group_instance_id, group.state.value, new_id, existing,
                )
                self._update_static_member(group, req, existing, new_id, fut)
            else:
                self._add_member_and_rebalance(group, req, new_id, fut)
        elif req.require_known_member_id:
            group.pending_join.add(new_id)
            gid = group.group_id
            self._timer.schedule(_hb_key(gid, new_id), req.session_timeout_ms, lambda: self._expire_heartbeat(gid, new_id))
            fut.set_result(JoinResult(ErrorCode.member_id_required, new_id))
        else:
            self._add_member_and_rebalance(group, req, new_id, fut)

    def _join_existing_member(self, group: ClassicGroup, req: JoinRequest, fut: asyncio.Future) -> None:
        member_id = req.member_id
        if group.state is S.DEAD:
            fut.set_result(JoinResult(ErrorCode.coordinator_not_available, member_id))
            return
        if not group.supports_protocols(req.protocol_type, (n for n, _ in req.protocols)):
            fut.set_result(JoinResult(ErrorCode.inconsistent_group_protocol, member_id))
            return
        if member_id in group.pending_join:
            if req.group_instance_id is not None:
                # A pending member id is only ever handed to dynamic members (Kafka: an
                # IllegalStateException, i.e. UNKNOWN_SERVER_ERROR).
                fut.set_result(JoinResult(ErrorCode.unknown_server_error, member_id))
                return
            self._add_member_and_rebalance(group, req, member_id, fut)
            return
        code = group.validate_member(member_id, req.group_instance_id)
        if code != ErrorCode.none:
            fut.set_result(JoinResult(code, member_id))
            return
        member = group.members[member_id]
        state = group.state
        if state is S.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, req, fut, "joining during PreparingRebalance")
        elif state is S.COMPLETING_REBALANCE:
            if member.matches(req.protocols):
                # Same metadata (it probably lost the first response): the current generation again.
                fut.set_result(self._join_result(group, member, leader_view=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, req, fut, "metadata changed in CompletingRebalance")
        elif state is S.STABLE:
            if group.is_leader(member_id):
                # The leader may rejoin to trigger a rebalance for changes its metadata does not
                # show (e.g. partitions added to a subscribed topic).
                self._update_member_and_rebalance(group, member, req, fut, "leader rejoined")
            elif not member.matches(req.protocols):
                self._update_member_and_rebalance(group, member, req, fut, "metadata changed in Stable")
            else:
                fut.set_result(self._join_result(group, member, leader_view=False))
        else:
            # Empty: the member's generation is gone; it must reset its member id and rejoin.
            fut.set_result(JoinResult(ErrorCode.unknown_member_id, member_id))

    def _join_result(self, group: ClassicGroup, member: ClassicMember, *, leader_view: bool, skip: bool = False, leader: str | None = None) -> JoinResult:
        return JoinResult(
            error=ErrorCode.none,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=(group.leader_id if leader is None else leader) or "",
            skip_assignment=skip,
            members=group.current_members() if leader_view else (),
        )

    def _add_member_and_rebalance(self, group: ClassicGroup, req: JoinRequest, member_id: str, fut: asyncio.Future) -> None:
        member = ClassicMember(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=tuple(req.protocols),
            is_new=True,
        )
        if group.state is S.PREPARING_REBALANCE and group.previous_state is S.EMPTY:
            group.new_member_added = True  # the initial rebalance waits a little longer
        group.add(member, fut)
        # New members cannot heartbeat and a parked JoinGroup cannot notice a disconnect: time the
        # join out, so members that went away do not pile up; a live one simply retries.
        self.reschedule_heartbeat(group, member, self.c.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(group, f"new member {member_id} joined")

    def _update_member_and_rebalance(
        self, group: ClassicGroup, member: ClassicMember, req: JoinRequest, fut: asyncio.Future, reason: str
    ) -> None:
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, fut)
        self._maybe_prepare_rebalance_or_complete_join(group, f"member {member.member_id} {reason}")

    def _update_static_member(
        self, group: ClassicGroup, req: JoinRequest, old_id: str, new_id: str, fut: asyncio.Future
    ) -> None:
        instance_id = req.group_instance_id
        assert instance_id is not None
        current_leader = group.leader_id
        self._timer.cancel(_hb_key(group.group_id, old_id))
        member = group.replace_static_member(instance_id, old_id, new_id)
        self.reschedule_heartbeat(group, member)
        old_protocols = member.protocols
        old_rebalance, old_session = member.rebalance_timeout_ms, member.session_timeout_ms
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, fut)

        if group.state is S.STABLE:
            if group.protocol_name == group.select_protocol():
                log.info(
                    "group %s: static member %s rejoined without changing the protocol: no rebalance",
                    group.group_id, instance_id,
                )
                generation = group.generation_id

                def done(code: ErrorCode) -> None:
                    if member.join_future is None:
                        return  # fenced or removed meanwhile: already answered
                    if code != ErrorCode.none or group.generation_id != generation:
                        if code == ErrorCode.none:
                            code = ErrorCode.rebalance_in_progress
                        log.warning(
                            "group %s: could not persist static member %s as %s (%s); reverting to %s",
                            group.group_id, instance_id, new_id, code.name, old_id,
                        )
                        pending = member.join_future
                        member.join_future = None
                        if group.members.get(new_id) is member and group.state is not S.DEAD:
                            group.update_member(member, old_protocols, old_rebalance, old_session, None)
                            self._timer.cancel(_hb_key(group.group_id, new_id))
                            old = group.replace_static_member(instance_id, new_id, old_id)
                            self.reschedule_heartbeat(group, old)
                        _resolve(
                            pending,
                            JoinResult(code, UNKNOWN_MEMBER_ID, group.generation_id, group.protocol_type,
                                       group.protocol_name, current_leader or ""),
                        )
                    elif req.supports_skip_assignment:
                        # KIP-814: a static leader gets the members but need not assign again.
                        is_leader = group.is_leader(new_id)
                        group.complete_join_future(
                            member, self._join_result(group, member, leader_view=is_leader, skip=is_leader)
                        )
                    else:
                        # Older clients: answer as a follower (the leader named is the old id, so
                        # even a former leader just syncs and gets its assignment back).
                        group.complete_join_future(
                            member, self._join_result(group, member, leader_view=False, leader=current_leader or "")
                        )

                self.c.persist(group.partition, [group.metadata_record(group.assignments())], done)
            else:
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"static member {instance_id} rejoined with a change of protocol"
                )
        elif group.state is S.COMPLETING_REBALANCE:
            # The leader may already be assigning for the old member id: start over.
            self._prepare_rebalance(group, f"static member {instance_id} rejoined during CompletingRebalance")
        else:
            self._maybe_complete_join_phase(group)

    # -- rebalance machinery -------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.state is S.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment(group, ErrorCode.rebalance_in_progress)
        self._remove_sync_expiration(group)
        initial = group.state is S.EMPTY
        gid = group.group_id
        if initial:
            delay = self.c.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._timer.schedule(_join_key(gid), delay, lambda: self._try_complete_initial(gid, delay, remaining))
        group.transition_to(S.PREPARING_REBALANCE, self._now())
        log.info(
            "group %s: preparing to rebalance (generation %d; %s)", gid, group.generation_id, reason
        )
        if not initial:
            if group.has_all_members_joined():
                self._complete_join(group)
            else:
                self._timer.schedule(
                    _join_key(gid), group.rebalance_timeout_ms(), lambda: self._complete_join_by_id(gid)
                )

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if group.state is not S.PREPARING_REBALANCE:
            return
        if group.previous_state is S.EMPTY:
            return  # the initial rebalance completes on its timer
        if group.has_all_members_joined():
            self._complete_join(group)

    def _try_complete_initial(self, group_id: str, delay: int, remaining: int) -> None:
        group = self._group(group_id)
        if group is None or group.state is not S.PREPARING_REBALANCE:
            return
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            new_delay = min(self.c.config.initial_rebalance_delay_ms, remaining)
            new_remaining = max(remaining - delay, 0)
            self._timer.schedule(
                _join_key(group_id), new_delay, lambda: self._try_complete_initial(group_id, new_delay, new_remaining)
            )
        else:
            self._complete_join(group)

    def _complete_join_by_id(self, group_id: str) -> None:
        group = self._group(group_id)
        if group is not None and group.state is S.PREPARING_REBALANCE:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        gid = group.group_id
        self._timer.cancel(_join_key(gid))
        gone = [m for m in group.not_yet_rejoined() if not m.is_static]
        for m in gone:
            group.remove(m.member_id)
            self._timer.cancel(_hb_key(gid, m.member_id))
        if gone:
            log.info("group %s: removed members that did not rejoin: %s", gid, [m.member_id for m in gone])
        if group.state is S.DEAD:
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin are left: wait for them to rejoin or expire.
            log.warning("group %s: no member rejoined; waiting another rebalance timeout", gid)
            self._timer.schedule(_join_key(gid), group.rebalance_timeout_ms(), lambda: self._complete_join_by_id(gid))
            return
        group.init_next_generation(self._now())
        if group.state is S.EMPTY:
            log.info("group %s: generation %d is empty", gid, group.generation_id)

            def done(code: ErrorCode) -> None:
                if code != ErrorCode.none:
                    log.warning("group %s: could not write its empty metadata: %s", gid, code.name)

            self.c.persist(group.partition, [group.metadata_record({})], done)
            return
        log.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            gid, group.generation_id, len(group.members), group.protocol_name, group.leader_id,
        )
        for member in group.members.values():
            group.complete_join_future(member, self._join_result(group, member, leader_view=group.is_leader(member.member_id)))
            self.reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        generation = group.generation_id
        self._timer.schedule(
            _sync_key(gid), group.rebalance_timeout_ms(), lambda: self._expire_pending_sync(gid, generation)
        )

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync.clear()
        self._timer.cancel(_sync_key(group.group_id))

    def _expire_pending_sync(self, group_id: str, generation: int) -> None:
        group = self._group(group_id)
        if group is None or group.generation_id != generation:
            return
        if group.state in (S.COMPLETING_REBALANCE, S.STABLE) and group.pending_sync:
            missing = sorted(group.pending_sync)
            for mid in missing:
                group.remove(mid)
                self._timer.cancel(_hb_key(group_id, mid))
            log.info("group %s: removed members that did not SyncGroup in time: %s", group_id, missing)
            self._prepare_rebalance(group, "members did not sync in time")

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self._group(group_id)
        if group is None or group.state is S.DEAD:
            return
        if member_id in group.pending_join:
            log.info("group %s: pending member %s expired", group_id, member_id)
            group.remove(member_id)
            if group.state is S.PREPARING_REBALANCE and group.has_all_members_joined():
                self._complete_join(group)
            elif not group.members and not group.pending_join and group.state is S.EMPTY:
                self.c.maybe_drop_unused_group(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("group %s: member %s failed (session timeout); removing it", group_id, member_id)
        self._remove_member_and_update(group, member, "session timeout")

    def _remove_member_and_update(self, group: ClassicGroup, member: ClassicMember, reason: str) -> None:
        group.complete_join_future(member, JoinResult(ErrorCode.unknown_member_id, UNKNOWN_MEMBER_ID))
        group.complete_sync_future(member, SyncResult(ErrorCode.unknown_member_id))
        group.remove(member.member_id)
        self._timer.cancel(_hb_key(group.group_id, member.member_id))
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, f"member {member.member_id} removed: {reason}")
        elif group.state is S.PREPARING_REBALANCE and group.has_all_members_joined():
            self._complete_join(group)

    # -- SyncGroup -------------------------------------------------------------------------------

    def sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> "asyncio.Future[SyncResult]":
        group = self._group(group_id)
        if group is None or group.is_empty():
            return self._done(SyncResult(ErrorCode.unknown_member_id))
        code = self._validate_sync(group, generation_id, member_id, instance_id, protocol_type, protocol_name)
        if code != ErrorCode.none:
            return self._done(SyncResult(code))
        if group.state is S.PREPARING_REBALANCE:
            return self._done(SyncResult(ErrorCode.rebalance_in_progress))
        member = group.members[member_id]
        if group.state is S.STABLE:
            self._remove_pending_sync(group, member_id)
            return self._done(SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment))
        # CompletingRebalance: park until the leader's assignment is stored.
        fut: asyncio.Future[SyncResult] = self._future()
        if member.sync_future is not None:
            _resolve(member.sync_future, SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_future = fut
        self._remove_pending_sync(group, member_id)
        if group.is_leader(member_id):
            assignment = {mid: assignments.get(mid, b"") for mid in group.members}
            missing = [mid for mid in group.members if mid not in assignments]
            if missing:
                log.warning("group %s: the leader assigned nothing to %s", group_id, missing)
            generation = group.generation_id

            def done(code: ErrorCode) -> None:
                if group.state is not S.COMPLETING_REBALANCE or group.generation_id != generation:
                    return  # the group moved on (a member joined or left) while the record was written
                if code != ErrorCode.none:
                    self._reset_and_propagate_assignment(group, code)
                    self._maybe_prepare_rebalance_or_complete_join(group, f"storing the assignment failed: {code.name}")
                else:
                    for m in group.members.values():
                        m.assignment = assignment.get(m.member_id, b"")
                    self._propagate_assignment(group, ErrorCode.none)
                    group.transition_to(S.STABLE, self._now())
                    log.info("group %s: generation %d is stable", group_id, generation)

            self.c.persist(group.partition, [group.metadata_record(assignment)], done)
        return fut

    def _validate_sync(
        self,
        group: ClassicGroup,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> ErrorCode:
        if group.state is S.DEAD:
            return ErrorCode.coordinator_not_available
        code = group.validate_member(member_id, instance_id)
        if code != ErrorCode.none:
            return code
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if protocol_type is not None and group.protocol_type is not None and protocol_type != group.protocol_type:
            return ErrorCode.inconsistent_group_protocol
        if protocol_name is not None and group.protocol_name is not None and protocol_name != group.protocol_name:
            return ErrorCode.inconsistent_group_protocol
        return ErrorCode.none

    def _remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if group.state in (S.DEAD, S.EMPTY, S.PREPARING_REBALANCE) or not group.pending_sync:
            self._timer.cancel(_sync_key(group.group_id))

    def _reset_and_propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error == ErrorCode.none
        for m in group.members.values():
            result = SyncResult(
                error,
                group.protocol_type if ok else None,
                group.protocol_name if ok else None,
                m.assignment,
            )
            if group.complete_sync_future(m, result):
                # Sessions restart once the member has its answer (expiries were ignored while it waited).
                self.reschedule_heartbeat(group, m)

    # -- Heartbeat -------------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
        group = self._group(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state is S.DEAD:
            return ErrorCode.coordinator_not_available
        code = group.validate_member(member_id, instance_id)
        if code != ErrorCode.none:
            return code
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.state is S.EMPTY:
            return ErrorCode.unknown_member_id
        self.reschedule_heartbeat(group, group.members[member_id])
        if group.state is S.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # -- LeaveGroup ------------------------------------------------------------------------------

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """(group error, one error per leaving member)."""
        group = self._group(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id for _ in members]
        if group.state is S.DEAD:
            return ErrorCode.coordinator_not_available, []
        out: list[ErrorCode] = []
        left: list[str] = []
        for member_id, instance_id in members:
            if member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal by group.instance.id (kafka-consumer-groups, AdminClient).
                current = group.static_members.get(instance_id) if instance_id is not None else None
                if current is None:
                    out.append(ErrorCode.unknown_member_id)
                    continue
                self._remove_current_member(group, current)
                left.append(current)
                out.append(ErrorCode.none)
            elif member_id in group.pending_join:
                group.remove(member_id)
                self._timer.cancel(_hb_key(group_id, member_id))
                out.append(ErrorCode.none)
                left.append(member_id)
            else:
                code = group.validate_member(member_id, instance_id)
                if code == ErrorCode.none:
                    self._remove_current_member(group, member_id)
                    left.append(member_id)
                out.append(code)
        if left:
            log.info("group %s: %s left", group_id, left)
            if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, f"members {left} left")
            elif group.state is S.PREPARING_REBALANCE:
                self._maybe_complete_join_phase(group)
            elif group.state is S.EMPTY and not group.members and not group.pending_join:
                self.c.maybe_drop_unused_group(group)
        return ErrorCode.none, out

    def _remove_current_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members[member_id]
        self._timer.cancel(_hb_key(group.group_id, member_id))
        group.complete_join_future(member, JoinResult(ErrorCode.unknown_member_id, UNKNOWN_MEMBER_ID))
        # Kafka leaves a parked SyncGroup of a leaving member unanswered; answer it.
        group.complete_sync_future(member, SyncResult(ErrorCode.unknown_member_id))
        group.remove(member_id)

    # -- loading ---------------------------------------------------------------------------------

    def load(self, group_id: str, value: GroupMetadataValue) -> ClassicGroup:
        """Rebuild a group from its last GroupMetadataValue (members come back Stable, as in
        Kafka: they carry on heartbeating with their member id and generation, or expire)."""
        group = ClassicGroup(group_id, self.c.partition_for(group_id), self, self._now())
        group._protocol_type = value.protocol_type or None
        group.generation_id = value.generation
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        group.state_timestamp = value.current_state_timestamp if value.current_state_timestamp >= 0 else None
        for m in value.members:
            member = ClassicMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout,
                session_timeout_ms=m.session_timeout,
                protocol_type=value.protocol_type,
                protocols=((value.protocol or "", m.subscription),),
                assignment=m.assignment,
            )
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        if group.members:
            if group.leader_id not in group.members:
                group.leader_id = next(iter(group.members))
            group.state = S.STABLE
            group.previous_state = S.COMPLETING_REBALANCE
            group.subscribed_topics = group.compute_subscribed_topics()
        else:
            group.leader_id = None
            group.protocol_name = None
            group.subscribed_topics = group.compute_subscribed_topics()
        return group

    def on_loaded(self, group: ClassicGroup) -> None:
        for member in group.members.values():
            self.reschedule_heartbeat(group, member)
