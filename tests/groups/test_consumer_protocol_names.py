"""Topic names inside the consumer protocol's bytes (``rename_subscription``/``rename_assignment``):
exact bytes, round trips over every version with Hypothesis, and garbage that may only raise
RecordFormatError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from group_helpers import subscription
from shoal.groups.records import RecordFormatError, rename_assignment, rename_subscription, subscription_topics


def _s(v: str | None) -> bytes:
    if v is None:
        return struct.pack(">h", -1)
    raw = v.encode()
    return struct.pack(">h", len(raw)) + raw


def _b(v: bytes | None) -> bytes:
    return struct.pack(">i", -1) if v is None else struct.pack(">i", len(v)) + v


def _tps(tps: list[tuple[str, list[int]]]) -> bytes:
    out = struct.pack(">i", len(tps))
    for t, ps in tps:
        out += _s(t) + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    return out


def encode_subscription(version, topics, user_data, owned=(), generation=-1, rack=None, tail=b"") -> bytes:
    """Kafka's ConsumerProtocolSubscription, written independently of the code under test."""
    out = struct.pack(">hi", version, len(topics)) + b"".join(_s(t) for t in topics) + _b(user_data)
    if version >= 1:
        out += _tps(list(owned))
    if version >= 2:
        out += struct.pack(">i", generation)
    if version >= 3:
        out += _s(rack)
    return out + tail


def encode_assignment(version, tps, user_data, tail=b"") -> bytes:
    return struct.pack(">h", version) + _tps(list(tps)) + _b(user_data) + tail


def qualify(name: str) -> str:
    return "lkc-abc123_" + name


def unqualify(name: str) -> str | None:
    return name[len("lkc-abc123_"):] if name.startswith("lkc-abc123_") else None


def test_exact_bytes_of_a_v0_subscription_and_assignment():
    assert rename_subscription(subscription("users", "orders", user_data=b"ud"), qualify) == subscription(
        "lkc-abc123_users", "lkc-abc123_orders", user_data=b"ud")
    a = encode_assignment(1, [("users", [0, 2])], b"x")
    assert rename_assignment(a, qualify) == (
        b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x10lkc-abc123_users" + b"\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x02"
        + b"\x00\x00\x00\x01x")
    assert rename_assignment(b"", qualify) == b""  # a follower's empty SyncGroup assignment


def test_names_another_scope_does_not_own_are_dropped():
    sub = encode_subscription(3, ["lkc-abc123_a", "lkc-zzz999_b"], None,
                              [("lkc-zzz999_b", [1]), ("lkc-abc123_a", [0])], 7, "r1")
    assert rename_subscription(sub, unqualify) == encode_subscription(3, ["a"], None, [("a", [0])], 7, "r1")
    a = encode_assignment(0, [("lkc-zzz999_b", [1]), ("lkc-abc123_a", [0, 1])], b"")
    assert rename_assignment(a, unqualify) == encode_assignment(0, [("a", [0, 1])], b"")


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)
tps = st.lists(st.tuples(names, st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4)), max_size=4)
maybe_bytes = st.none() | st.binary(max_size=16)


@given(
    version=st.integers(0, 5), topics=st.lists(names, max_size=5), user_data=maybe_bytes, owned=tps,
    generation=st.integers(-(2**31), 2**31 - 1), rack=st.none() | names, tail=st.binary(max_size=8),
)
def test_subscription_round_trip(version, topics, user_data, owned, generation, rack, tail):
    # Versions past 3 carry fields this code does not know: they are kept byte for byte.
    raw = encode_subscription(version, topics, user_data, owned, generation, rack, tail if version > 3 else b"")
    qualified = rename_subscription(raw, qualify)
    assert qualified == encode_subscription(
        version, [qualify(t) for t in topics], user_data, [(qualify(t), ps) for t, ps in owned], generation, rack,
        tail if version > 3 else b"")
    assert subscription_topics(qualified) == [qualify(t) for t in topics]
    assert rename_subscription(qualified, unqualify) == raw


@given(version=st.integers(0, 5), assigned=tps, user_data=maybe_bytes, tail=st.binary(max_size=8))
def test_assignment_round_trip(version, assigned, user_data, tail):
    raw = encode_assignment(version, assigned, user_data, tail)
    qualified = rename_assignment(raw, qualify)
    assert qualified == encode_assignment(version, [(qualify(t), ps) for t, ps in assigned], user_data, tail)
    assert rename_assignment(qualified, unqualify) == raw


@given(st.binary(max_size=64))
def test_garbage_raises_only_record_format_error(data):
    for fn in (rename_subscription, rename_assignment):
        try:
            fn(data, qualify)
        except RecordFormatError:
            pass


@pytest.mark.parametrize("data", [b"\xff\xff", b"\x00\x00\xff\xff\xff\xff", b"\x00\x00\x00\x00\x00\x01\x00\x05ab"])
def test_malformed_examples(data):
    with pytest.raises(RecordFormatError):
        rename_subscription(data, qualify)
