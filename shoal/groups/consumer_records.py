"""Records of KIP-848 consumer groups in ``__consumer_offsets`` (key versions 3-8), byte for byte as
Kafka's ``GroupCoordinatorRecordSerde`` writes them, so a Kafka broker (or ``kafka-dump-log
--offsets-decoder``) reads Shoal's records and Shoal reads Kafka's:

=========== ===================================================== ==============================
key version key (int16-length strings)                             value (flexible, version 0)
=========== ===================================================== ==============================
3           ConsumerGroupMetadataKey (group)                       ConsumerGroupMetadataValue:
                                                                   group epoch
4           ConsumerGroupPartitionMetadataKey (group)              topics subscribed: id, name,
                                                                   partition count (no racks)
5           ConsumerGroupMemberMetadataKey (group, member)         the member's subscription
6           ConsumerGroupTargetAssignmentMetadataKey (group)       target assignment epoch
7           ConsumerGroupTargetAssignmentMemberKey (group, member) the member's target partitions
8           ConsumerGroupCurrentMemberAssignmentKey (group,        member epoch, previous epoch,
            member)                                                state, assigned and pending
                                                                   revocation partitions
=========== ===================================================== ==============================

Values are the flexible encoding (compact strings and arrays, tagged fields) with an int16 version
prefix; a null value is a tombstone. Readers skip unknown tagged fields (e.g. the
``ClassicMemberMetadata`` Kafka tags onto members that use the classic protocol) and ignore
trailing bytes, as Kafka's do for newer minor versions.

Pure functions, no I/O.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from shoal.groups.records import RecordFormatError, _Reader, _str
from shoal.protocol.records import encode_uvarint as _uvarint

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
KEY_VERSIONS = (3, 4, 5, 6, 7, 8)
_GROUP_ONLY = (GROUP_METADATA, PARTITION_METADATA, TARGET_ASSIGNMENT_METADATA)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

TopicPartitions = dict[uuid.UUID, frozenset[int]]


# -- flexible encoding ---------------------------------------------------------------------------


def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode("utf-8")
    return _uvarint(len(raw) + 1) + raw


def _carray(items: list[bytes]) -> bytes:
    return _uvarint(len(items) + 1) + b"".join(items)


_NO_TAGS = b"\x00"


class _FlexReader(_Reader):
    def int8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def cstr(self, nullable: bool = False) -> str | None:
        return self.string(True, nullable)

    def carray_len(self) -> int:
        return self.array_len(True)

    def int32s(self) -> list[int]:
        return [self.int32() for _ in range(self.carray_len())]


def _value_reader(value: bytes, name: str) -> _FlexReader:
    r = _FlexReader(value)
    version = r.int16()
    if version != 0:
        raise RecordFormatError(f"unknown {name} version {version}")
    return r


def _topic_partitions(tps: TopicPartitions) -> bytes:
    items = []
    for tid in sorted(tps, key=str):
        parts = sorted(tps[tid])
        items.append(tid.bytes + _carray([_I32.pack(p) for p in parts]) + _NO_TAGS)
    return _carray(items)


def _read_topic_partitions(r: _FlexReader) -> TopicPartitions:
    out: TopicPartitions = {}
    for _ in range(r.carray_len()):
        tid = r.uuid()
        parts = r.int32s()
        r.skip_tagged_fields()
        if parts:
            out[tid] = out.get(tid, frozenset()) | frozenset(parts)
    return out


# -- keys ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    version: int  # 3..8: which record
    group: str
    member: str | None = None  # records 5, 7 and 8


def encode_key(k: ConsumerKey) -> bytes:
    out = _I16.pack(k.version) + _str(k.group)
    if k.version not in _GROUP_ONLY:
        out += _str(k.member or "")
    return out


def decode_key(key: bytes) -> ConsumerKey:
    r = _Reader(key)
    version = r.int16()
    if version not in KEY_VERSIONS:
        raise RecordFormatError(f"key version {version} is not a consumer group record")
    group = r.string(False) or ""
    member = None if version in _GROUP_ONLY else (r.string(False) or "")
    if not r.done():
        raise RecordFormatError(f"{len(r.buf) - r.pos} bytes left after a key of version {version}")
    return ConsumerKey(version, group, member)


# -- values ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class PartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class TargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    partitions: TopicPartitions = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState's byte
    assigned: TopicPartitions = field(default_factory=dict)
    pending_revocation: TopicPartitions = field(default_factory=dict)


Value = (
    GroupMetadataValue
    | PartitionMetadataValue
    | MemberMetadataValue
    | TargetAssignmentMetadataValue
    | TargetAssignmentMemberValue
    | CurrentMemberAssignmentValue
)

_V0 = _I16.pack(0)


def encode_value(v: Value) -> bytes:
    if isinstance(v, GroupMetadataValue):
        return _V0 + _I32.pack(v.epoch) + _NO_TAGS
    if isinstance(v, PartitionMetadataValue):
        topics = [
            t.topic_id.bytes + _cstr(t.name) + _I32.pack(t.num_partitions) + _carray([]) + _NO_TAGS
            for t in sorted(v.topics, key=lambda t: t.name)
        ]
        return _V0 + _carray(topics) + _NO_TAGS
    if isinstance(v, MemberMetadataValue):
        return (
            _V0
            + _cstr(v.instance_id)
            + _cstr(v.rack_id)
            + _cstr(v.client_id)
            + _cstr(v.client_host)
            + _carray([_cstr(t) for t in v.subscribed_topic_names])
            + _cstr(v.subscribed_topic_regex)
            + _I32.pack(v.rebalance_timeout_ms)
            + _cstr(v.server_assignor)
            + _NO_TAGS
        )
    if isinstance(v, TargetAssignmentMetadataValue):
        return _V0 + _I32.pack(v.assignment_epoch) + _NO_TAGS
    if isinstance(v, TargetAssignmentMemberValue):
        return _V0 + _topic_partitions(v.partitions) + _NO_TAGS
    if isinstance(v, CurrentMemberAssignmentValue):
        return (
            _V0
            + _I32.pack(v.member_epoch)
            + _I32.pack(v.previous_member_epoch)
            + struct.pack(">b", v.state)
            + _topic_partitions(v.assigned)
            + _topic_partitions(v.pending_revocation)
            + _NO_TAGS
        )
    raise TypeError(f"not a consumer group record value: {v!r}")


def decode_value(key_version: int, value: bytes) -> Value:
    if key_version == GROUP_METADATA:
        r = _value_reader(value, "ConsumerGroupMetadataValue")
        out: Value = GroupMetadataValue(r.int32())
    elif key_version == PARTITION_METADATA:
        r = _value_reader(value, "ConsumerGroupPartitionMetadataValue")
        topics = []
        for _ in range(r.carray_len()):
            tid = r.uuid()
            name = r.cstr() or ""
            n = r.int32()
            for _ in range(r.carray_len()):  # PartitionMetadata: racks per partition (unused)
                r.int32()
                for _ in range(r.carray_len()):
                    r.cstr()
                r.skip_tagged_fields()
            r.skip_tagged_fields()
            topics.append(TopicMetadata(tid, name, n))
        out = PartitionMetadataValue(tuple(topics))
    elif key_version == MEMBER_METADATA:
        r = _value_reader(value, "ConsumerGroupMemberMetadataValue")
        instance_id = r.cstr(True)
        rack_id = r.cstr(True)
        client_id = r.cstr() or ""
        client_host = r.cstr() or ""
        names = tuple(r.cstr() or "" for _ in range(r.carray_len()))
        regex = r.cstr(True)
        rebalance = r.int32()
        assignor = r.cstr(True)
        out = MemberMetadataValue(instance_id, rack_id, client_id, client_host, names, regex or None, rebalance, assignor)
    elif key_version == TARGET_ASSIGNMENT_METADATA:
        r = _value_reader(value, "ConsumerGroupTargetAssignmentMetadataValue")
        out = TargetAssignmentMetadataValue(r.int32())
    elif key_version == TARGET_ASSIGNMENT_MEMBER:
        r = _value_reader(value, "ConsumerGroupTargetAssignmentMemberValue")
        out = TargetAssignmentMemberValue(_read_topic_partitions(r))
    elif key_version == CURRENT_MEMBER_ASSIGNMENT:
        r = _value_reader(value, "ConsumerGroupCurrentMemberAssignmentValue")
        epoch, previous, state = r.int32(), r.int32(), r.int8()
        assigned = _read_topic_partitions(r)
        pending = _read_topic_partitions(r)
        out = CurrentMemberAssignmentValue(epoch, previous, state, assigned, pending)
    else:
        raise RecordFormatError(f"key version {key_version} is not a consumer group record")
    # Tagged fields of the value itself (and anything a newer minor version appended) are skipped.
    return out


Record = tuple[ConsumerKey, "Value | None"]


def encode(record: Record) -> tuple[bytes, bytes | None]:
    key, value = record
    return encode_key(key), (None if value is None else encode_value(value))
