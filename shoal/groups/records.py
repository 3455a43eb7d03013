"""Records of ``__consumer_offsets``: Kafka's key/value layouts, and the group → partition hash.

Every record's key and value start with an int16 version that says what they are, exactly as
Kafka's ``GroupCoordinatorRecordSerde`` writes them, so Kafka's tools (``kafka-dump-log
--offsets-decoder``, ``kafka-console-consumer --formatter ...OffsetsMessageFormatter``) read
Shoal's log and Shoal reads theirs:

=========== =========================== ==============================================
key version key                         value (null value = tombstone)
=========== =========================== ==============================================
0, 1        OffsetCommitKey             OffsetCommitValue v0-v4 (written: v3; v1 when
            (group, topic, partition)   the commit carries an expire timestamp)
2           GroupMetadataKey (group)    GroupMetadataValue v0-v4 (written: v3)
3 ..        KIP-848 / share-group keys  decoded by whoever registers them
=========== =========================== ==============================================

Versions written are the ones Kafka 3.x/4.x writes (the highest non-flexible ones); every version
Kafka defines is read, including the flexible v4 values with tagged fields.

Pure functions, no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable

from shoal.tenancy.internal_topics import OFFSETS_TOPIC  # noqa: F401  (the groups package exports it)

OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """Bytes in ``__consumer_offsets`` that are not a record this module understands."""


# -- group → partition ---------------------------------------------------------------------------


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, with int32 overflow."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % groupMetadataTopicPartitionCount``.

    ``Utils.abs`` maps Integer.MIN_VALUE to 0 (``Math.abs`` would leave it negative).
    """
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# -- binary helpers ------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = bytes(buf)
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordFormatError(f"truncated: need {n} bytes at {self.pos} of {len(self.buf)}")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            b = self._take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise RecordFormatError("varint too long")

    def string(self, flexible: bool, nullable: bool = False) -> str | None:
        n = self.uvarint() - 1 if flexible else self.int16()
        if n < 0:
            if not nullable:
                raise RecordFormatError("null in a non-nullable string")
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"string is not UTF-8: {e}") from e

    def bytes_(self, flexible: bool) -> bytes:
        n = self.uvarint() - 1 if flexible else self.int32()
        if n < 0:
            raise RecordFormatError("null in a non-nullable bytes field")
        return self._take(n)

    def array_len(self, flexible: bool) -> int:
        n = self.uvarint() - 1 if flexible else self.int32()
        if n < 0:
            raise RecordFormatError("null array")
        return n

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())

    def done(self) -> bool:
        return self.pos == len(self.buf)


def _str(s: str | None) -> bytes:
    if s is None:
        return _I16.pack(-1)
    raw = s.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise RecordFormatError(f"string of {len(raw)} bytes does not fit an int16 length")
    return _I16.pack(len(raw)) + raw


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


# -- keys ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OtherKey:
    """A key version this module does not decode (KIP-848 and share-group records)."""

    version: int
    raw: bytes


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(OFFSET_COMMIT_KEY_VERSION) + _str(group) + _str(topic) + _I32.pack(partition)


def group_metadata_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _str(group)


def key_version(key: bytes) -> int:
    if len(key) < 2:
        raise RecordFormatError("key shorter than its version")
    return _I16.unpack_from(key, 0)[0]


def decode_key(key: bytes) -> OffsetCommitKey | GroupMetadataKey | OtherKey:
    r = _Reader(key)
    version = r.int16()
    if version in OFFSET_COMMIT_KEY_VERSIONS:
        out: OffsetCommitKey | GroupMetadataKey = OffsetCommitKey(
            r.string(False) or "", r.string(False) or "", r.int32()
        )
    elif version == GROUP_METADATA_KEY_VERSION:
        out = GroupMetadataKey(r.string(False) or "")
    else:
        return OtherKey(version, bytes(key))
    if not r.done():
        raise RecordFormatError(f"{len(r.buf) - r.pos} bytes left after a key of version {version}")
    return out


# -- offset commit values ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int  # -1: none
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # only v1 carries one (OffsetCommit v2-v4 retention_time)


def encode_offset_commit_value(v: OffsetCommitValue) -> bytes:
    """v3, or v1 when an expire timestamp is set (Kafka's ``offsetCommitValueVersion``)."""
    if v.expire_timestamp >= 0:
        return (
            _I16.pack(1)
            + _I64.pack(v.offset)
            + _str(v.metadata)
            + _I64.pack(v.commit_timestamp)
            + _I64.pack(v.expire_timestamp)
        )
    return (
        _I16.pack(3)
        + _I64.pack(v.offset)
        + _I32.pack(v.leader_epoch)
        + _str(v.metadata)
        + _I64.pack(v.commit_timestamp)
    )


def decode_offset_commit_value(value: bytes) -> OffsetCommitValue:
    r = _Reader(value)
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    flexible = version >= 4
    offset = r.int64()
    epoch = r.int32() if version >= 3 else -1
    metadata = r.string(flexible) or ""
    commit_ts = r.int64()
    expire_ts = r.int64() if version == 1 else -1
    if flexible:
        r.skip_tagged_fields()
    # Readers ignore trailing bytes of newer minor additions, as Kafka's do for ignorable fields.
    return OffsetCommitValue(offset, epoch, metadata, commit_ts, expire_ts)


# -- group metadata values -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadataValue, ...] = field(default_factory=tuple)


def encode_group_metadata_value(v: GroupMetadataValue) -> bytes:
    """Version 3, the one Kafka 2.3+ writes."""
    parts = [
        _I16.pack(3),
        _str(v.protocol_type),
        _I32.pack(v.generation),
        _str(v.protocol),
        _str(v.leader),
        _I64.pack(v.current_state_timestamp),
        _I32.pack(len(v.members)),
    ]
    for m in v.members:
        parts += [
            _str(m.member_id),
            _str(m.group_instance_id),
            _str(m.client_id),
            _str(m.client_host),
            _I32.pack(m.rebalance_timeout),
            _I32.pack(m.session_timeout),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


def decode_group_metadata_value(value: bytes) -> GroupMetadataValue:
    r = _Reader(value)
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    flex = version >= 4
    protocol_type = r.string(flex) or ""
    generation = r.int32()
    protocol = r.string(flex, nullable=True)
    leader = r.string(flex, nullable=True)
    state_ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len(flex)):
        member_id = r.string(flex) or ""
        instance = r.string(flex, nullable=True) if version >= 3 else None
        client_id = r.string(flex) or ""
        client_host = r.string(flex) or ""
        rebalance = r.int32() if version >= 1 else -1
        session = r.int32()
        subscription = r.bytes_(flex)
        assignment = r.bytes_(flex)
        if flex:
            r.skip_tagged_fields()
        if rebalance < 0:
            rebalance = session  # v0 members: the rebalance timeout was the session timeout
        members.append(
            MemberMetadataValue(member_id, instance, client_id, client_host, rebalance, session, subscription, assignment)
        )
    if flex:
        r.skip_tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


# -- the consumer protocol's subscription (for subscribed topics) --------------------------------


def subscription_topics(metadata: bytes) -> list[str]:
    """Topics of a ``ConsumerProtocolSubscription``, read with its v0 prefix as Kafka does.

    Raises RecordFormatError when the bytes are not a subscription.
    """
    r = _Reader(metadata)
    version = r.int16()
    if version < 0:
        raise RecordFormatError(f"negative consumer protocol version {version}")
    n = r.int32()
    if n < 0:
        raise RecordFormatError("null topic list")
    return [r.string(False) or "" for _ in range(n)]


# -- topic names inside the consumer protocol's bytes (tenancy) ----------------------------------
#
# A classic group with protocol type "consumer" carries topic names inside opaque bytes: the
# members' ``ConsumerProtocolSubscription`` (topics; v1+ owned partitions) and the leader's
# ``ConsumerProtocolAssignment``. A tenant's clients write the names they see; the coordinator
# stores physical names (so OffsetDelete, expiry and the operator's view see real topics). These
# rewrite every topic name with ``rename`` (None drops that topic) and keep every other byte: user
# data, generation id, rack id, and fields of versions newer than this module knows.

Rename = Callable[[str], "str | None"]


def _nullable_bytes_end(r: _Reader) -> int:
    n = r.int32()
    if n >= 0:
        r._take(n)
    elif n != -1:
        raise RecordFormatError(f"invalid bytes length {n}")
    return r.pos


def _topic_partitions(r: _Reader, rename: Rename) -> tuple[int, bytes]:
    """(entries kept, their bytes) of a ``[]TopicPartition`` array (topic, []int32)."""
    out = []
    kept = 0
    for _ in range(r.array_len(False)):
        topic = r.string(False) or ""
        n = r.array_len(False)
        parts = r._take(4 * n)
        new = rename(topic)
        if new is not None:
            kept += 1
            out.append(_str(new) + _I32.pack(n) + parts)
    return kept, b"".join(out)


def _version(r: _Reader) -> int:
    version = r.int16()
    if version < 0:
        raise RecordFormatError(f"negative consumer protocol version {version}")
    return version


def rename_subscription(metadata: bytes, rename: Rename) -> bytes:
    """A ``ConsumerProtocolSubscription`` with its topic names renamed; raises RecordFormatError
    when the bytes are not one."""
    r = _Reader(metadata)
    version = _version(r)
    topics = [r.string(False) or "" for _ in range(r.array_len(False))]
    start = r.pos
    user_data = r.buf[start:_nullable_bytes_end(r)]
    renamed = [n for n in map(rename, topics) if n is not None]
    out = [_I16.pack(version), _I32.pack(len(renamed)), *map(_str, renamed), user_data]
    if version >= 1:
        kept, owned = _topic_partitions(r, rename)
        out += [_I32.pack(kept), owned]
    out.append(r.buf[r.pos:])
    return b"".join(out)


def rename_assignment(assignment: bytes, rename: Rename) -> bytes:
    """A ``ConsumerProtocolAssignment`` with its topic names renamed (an empty one, as a
    follower's SyncGroup may carry, stays empty); raises RecordFormatError when the bytes are not
    one."""
    if not assignment:
        return assignment
    r = _Reader(assignment)
    version = _version(r)
    kept, parts = _topic_partitions(r, rename)
    return b"".join((_I16.pack(version), _I32.pack(kept), parts, r.buf[r.pos:]))
