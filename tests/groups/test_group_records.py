"""__consumer_offsets record formats and the group → partition hash, with exact bytes.

The expected bytes are written out field by field from Kafka's schemas (OffsetCommitKey.json,
OffsetCommitValue.json, GroupMetadataKey.json, GroupMetadataValue.json); the hash values were
computed with Java's String.hashCode (OpenJDK 17).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    OtherKey,
    RecordFormatError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_offset_commit_value,
    group_metadata_key,
    java_string_hash,
    offset_commit_key,
    partition_for,
    subscription_topics,
)


def s16(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


@pytest.mark.parametrize(
    "group, java_hash, partition",
    [
        ("", 0, 0),
        ("a", 97, 47),
        ("hello", 99162322, 22),
        ("polygenelubricants", -2147483648, 0),  # Integer.MIN_VALUE: Utils.abs gives 0
        ("my-group", -1906497762, 12),
        ("consumer-group-1", 147483020, 20),
        ("grüße-ü", 426791238, 38),
        ("😀g", 54959972, 22),  # a surrogate pair counts as two UTF-16 units
    ],
)
def test_partition_for_matches_java(group, java_hash, partition):
    assert java_string_hash(group) == java_hash
    assert partition_for(group, 50) == partition


def test_offset_commit_key_bytes():
    key = offset_commit_key("g", "t", 3)
    assert key == b"\x00\x01" + s16("g") + s16("t") + b"\x00\x00\x00\x03"
    assert decode_key(key) == OffsetCommitKey("g", "t", 3)
    # Version 0 keys (older Kafka) read the same.
    assert decode_key(b"\x00\x00" + key[2:]) == OffsetCommitKey("g", "t", 3)


def test_group_metadata_key_bytes():
    assert group_metadata_key("grp") == b"\x00\x02" + s16("grp")
    assert decode_key(group_metadata_key("grp")) == GroupMetadataKey("grp")


def test_other_key_versions_are_passed_through():
    key = b"\x00\x03" + s16("cg")  # ConsumerGroupMetadataKey (KIP-848)
    assert decode_key(key) == OtherKey(3, key)


def test_offset_commit_value_v3_bytes():
    v = OffsetCommitValue(offset=42, leader_epoch=5, metadata="m", commit_timestamp=1000)
    raw = encode_offset_commit_value(v)
    assert raw == (
        b"\x00\x03" + struct.pack(">q", 42) + struct.pack(">i", 5) + s16("m") + struct.pack(">q", 1000)
    )
    assert decode_offset_commit_value(raw) == v


def test_offset_commit_value_v1_when_expiring():
    v = OffsetCommitValue(offset=7, leader_epoch=5, metadata="", commit_timestamp=10, expire_timestamp=99)
    raw = encode_offset_commit_value(v)
    assert raw == b"\x00\x01" + struct.pack(">q", 7) + s16("") + struct.pack(">qq", 10, 99)
    # v1 has no leader epoch
    assert decode_offset_commit_value(raw) == OffsetCommitValue(7, -1, "", 10, 99)


def test_offset_commit_value_other_versions():
    v0 = b"\x00\x00" + struct.pack(">q", 1) + s16("x") + struct.pack(">q", 2)
    assert decode_offset_commit_value(v0) == OffsetCommitValue(1, -1, "x", 2)
    # v4 (flexible): compact string (length+1 as uvarint), then an empty tagged-field section.
    v4 = b"\x00\x04" + struct.pack(">q", 3) + struct.pack(">i", 9) + b"\x02x" + struct.pack(">q", 4) + b"\x00"
    assert decode_offset_commit_value(v4) == OffsetCommitValue(3, 9, "x", 4)
    # v4 with a tagged field we do not know is still read.
    v4t = v4[:-1] + b"\x01\x05\x02ab"
    assert decode_offset_commit_value(v4t) == OffsetCommitValue(3, 9, "x", 4)
    with pytest.raises(RecordFormatError):
        decode_offset_commit_value(b"\x00\x09" + v0[2:])
    with pytest.raises(RecordFormatError):
        decode_offset_commit_value(v0[:-3])


def test_group_metadata_value_v3_bytes():
    member = MemberMetadataValue("m-1", "inst", "cli", "/127.0.0.1", 30000, 10000, b"\x01\x02", b"\x03")
    v = GroupMetadataValue("consumer", 4, "range", "m-1", 123, (member,))
    raw = encode_group_metadata_value(v)
    assert raw == (
        b"\x00\x03"
        + s16("consumer")
        + struct.pack(">i", 4)
        + s16("range")
        + s16("m-1")
        + struct.pack(">q", 123)
        + struct.pack(">i", 1)
        + s16("m-1")
        + s16("inst")
        + s16("cli")
        + s16("/127.0.0.1")
        + struct.pack(">ii", 30000, 10000)
        + struct.pack(">i", 2) + b"\x01\x02"
        + struct.pack(">i", 1) + b"\x03"
    )
    assert decode_group_metadata_value(raw) == v


def test_empty_group_metadata_value_has_null_protocol_and_leader():
    v = GroupMetadataValue("consumer", 2, None, None, 5, ())
    raw = encode_group_metadata_value(v)
    assert raw == b"\x00\x03" + s16("consumer") + struct.pack(">i", 2) + b"\xff\xff\xff\xff" + struct.pack(">qi", 5, 0)
    assert decode_group_metadata_value(raw) == v


def test_group_metadata_value_v0_and_v4():
    v0 = (
        b"\x00\x00" + s16("consumer") + struct.pack(">i", 1) + s16("range") + s16("m")
        + struct.pack(">i", 1) + s16("m") + s16("c") + s16("/h") + struct.pack(">i", 6000)
        + struct.pack(">i", 0) + struct.pack(">i", 0)
    )
    got = decode_group_metadata_value(v0)
    assert got.members[0] == MemberMetadataValue("m", None, "c", "/h", 6000, 6000, b"", b"")
    assert got.current_state_timestamp == -1
    v4 = (
        b"\x00\x04" + b"\x09consumer" + struct.pack(">i", 1) + b"\x06range" + b"\x02m" + struct.pack(">q", 7)
        + b"\x02"  # one member
        + b"\x02m" + b"\x00" + b"\x02c" + b"\x03/h" + struct.pack(">ii", 100, 200) + b"\x02\x09" + b"\x01"
        + b"\x00"  # member tagged fields
        + b"\x00"  # value tagged fields
    )
    got = decode_group_metadata_value(v4)
    assert got == GroupMetadataValue(
        "consumer", 1, "range", "m", 7, (MemberMetadataValue("m", None, "c", "/h", 100, 200, b"\x09", b""),)
    )


def test_subscription_topics():
    raw = struct.pack(">hi", 1, 2) + s16("a") + s16("b") + struct.pack(">i", -1) + b"extra v1 fields"
    assert subscription_topics(raw) == ["a", "b"]
    with pytest.raises(RecordFormatError):
        subscription_topics(b"\x00")


@given(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-1, 2**31 - 1),
    st.text(max_size=50),
    st.integers(0, 2**62),
)
def test_offset_commit_value_round_trip(offset, epoch, metadata, ts):
    v = OffsetCommitValue(offset, epoch, metadata, ts)
    assert decode_offset_commit_value(encode_offset_commit_value(v)) == v


@given(st.binary(max_size=64))
def test_decoders_only_raise_record_format_error(data):
    for fn in (decode_key, decode_offset_commit_value, decode_group_metadata_value, subscription_topics):
        try:
            fn(data)
        except RecordFormatError:
            pass
