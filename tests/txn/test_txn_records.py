"""__transaction_state record formats: Kafka's TransactionLogKey / TransactionLogValue bytes."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.txn.records import (
    RecordFormatError, TxnLogValue, TxnState, decode_key, decode_value, encode_key, encode_value, group_partitions,
)


def test_key_bytes():
    assert encode_key("tx") == b"\x00\x00\x00\x02tx"
    assert decode_key(b"\x00\x00\x00\x02tx") == "tx"


def test_value_v0_bytes_exact():
    v = TxnLogValue(7, 3, 60000, TxnState.ONGOING, (("t", (0, 2)),), 1000, 900)
    expected = (
        struct.pack(">hqhib", 0, 7, 3, 60000, 1)
        + struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(">iii", 2, 0, 2)
        + struct.pack(">qq", 1000, 900)
    )
    assert encode_value(v) == expected
    assert decode_value(expected) == v


def test_empty_writes_null_partitions():
    data = encode_value(TxnLogValue(1, 0, 1000, TxnState.EMPTY, (), 5, -1))
    assert data[2 + 8 + 2 + 4 + 1:][:4] == b"\xff\xff\xff\xff"
    assert decode_value(data).partitions == ()


def test_value_v1_flexible_with_tagged_fields():
    body = struct.pack(">hqhib", 1, 9, 2, 1000, 2)
    body += bytes([2]) + bytes([2]) + b"t" + bytes([2]) + struct.pack(">i", 4) + bytes([0])  # one topic, one partition
    body += struct.pack(">qq", 11, 10)
    body += bytes([2, 0, 8]) + struct.pack(">q", 5) + bytes([2, 2]) + struct.pack(">h", 2)  # tags 0 and 2
    v = decode_value(body)
    assert (v.producer_id, v.producer_epoch, v.state, v.partitions) == (9, 2, TxnState.PREPARE_COMMIT, (("t", (4,)),))
    assert (v.previous_producer_id, v.client_transaction_version, v.last_update_ms, v.start_ms) == (5, 2, 11, 10)
    assert encode_value(v, version=1) == body  # the same bytes written back: defaults (tag 1) left out


def test_value_v1_empty_and_all_tags_bytes_exact():
    v = TxnLogValue(3, 0, 500, TxnState.EMPTY, (), 7, -1, previous_producer_id=2, next_producer_id=4,
                    client_transaction_version=2)
    expected = (
        struct.pack(">hqhib", 1, 3, 0, 500, 0) + bytes([0])  # null compact array
        + struct.pack(">qq", 7, -1)
        + bytes([3, 0, 8]) + struct.pack(">q", 2) + bytes([1, 8]) + struct.pack(">q", 4)
        + bytes([2, 2]) + struct.pack(">h", 2)
    )
    assert encode_value(v, version=1) == expected
    assert decode_value(expected) == v
    bare = TxnLogValue(3, 0, 500, TxnState.ONGOING, (("t", (1,)),), 7, 6)
    assert encode_value(bare, version=1).endswith(struct.pack(">qq", 7, 6) + bytes([0]))  # no tags at their defaults


def test_value_v0_drops_tv2_fields_and_unknown_versions_refused():
    v = TxnLogValue(3, 1, 500, TxnState.ONGOING, (("t", (1,)),), 7, 6, 2, 4, 2)
    assert decode_value(encode_value(v)) == TxnLogValue(3, 1, 500, TxnState.ONGOING, (("t", (1,)),), 7, 6)
    with pytest.raises(ValueError):
        encode_value(v, version=2)


@pytest.mark.parametrize("data", [b"", b"\x00\x05", b"\x00\x00\x00\x00\x00", struct.pack(">hqhib", 0, 1, 1, 1, 9)])
def test_bad_values_raise_format_error(data):
    with pytest.raises(RecordFormatError):
        decode_value(data)


def test_state_names_are_kafkas():
    assert [s.kafka_name for s in TxnState] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
        "PrepareEpochFence"]
    assert TxnState.by_name("Ongoing") is TxnState.ONGOING and TxnState.by_name("ongoing") is None


@given(
    pid=st.integers(0, 2**63 - 1), epoch=st.integers(0, 2**15 - 1), timeout=st.integers(1, 2**31 - 1),
    state=st.sampled_from([s for s in TxnState if s is not TxnState.EMPTY]),
    parts=st.sets(st.tuples(st.text(min_size=1, max_size=5), st.integers(0, 1000)), max_size=6),
    ts=st.integers(-1, 2**40),
)
def test_round_trip(pid, epoch, timeout, state, parts, ts):
    v = TxnLogValue(pid, epoch, timeout, state, group_partitions(parts), ts, ts)
    assert decode_value(encode_value(v)) == v


@given(
    pid=st.integers(0, 2**63 - 1), epoch=st.integers(0, 2**15 - 1), state=st.sampled_from(list(TxnState)),
    parts=st.sets(st.tuples(st.text(min_size=1, max_size=5), st.integers(0, 1000)), max_size=6),
    prev=st.integers(-1, 2**63 - 1), nxt=st.integers(-1, 2**63 - 1), ctv=st.integers(0, 2),
)
def test_round_trip_v1(pid, epoch, state, parts, prev, nxt, ctv):
    v = TxnLogValue(pid, epoch, 1000, state, group_partitions(parts), 5, 4, prev, nxt, ctv)
    assert decode_value(encode_value(v, version=1)) == v


@given(st.binary(max_size=64))
def test_decoder_only_raises_format_error(data):
    try:
        decode_value(data)
    except RecordFormatError:
        pass
