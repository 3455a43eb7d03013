"""Kafka's record formats in ``__transaction_state`` (TransactionLogKey / TransactionLogValue).

Key, version 0: ``int16 version, string transactional_id``.

Value, version 0 (what Shoal's coordinator writes today) and 1 (flexible; read, and written by
``encode_value(v, version=1)``, Kafka's format for transaction version 2)::

    int16  version
    int64  producer_id
    (v1 tagged 0: previous_producer_id, tagged 1: next_producer_id, tagged 2: client_transaction_version)
    int16  producer_epoch
    int32  transaction_timeout_ms
    int8   transaction_status          (TxnState)
    array  transaction_partitions      nullable; each: string topic, array of int32 partition ids
    int64  transaction_last_update_timestamp_ms
    int64  transaction_start_timestamp_ms

A tombstone (value None) removes the transactional id (expiration). As Kafka does, the partitions
of an Empty transaction are written as a null array.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from shoal.protocol.records import encode_uvarint
from shoal.tenancy.internal_topics import TXN_STATE_TOPIC  # noqa: F401  (the txn package exports it)

_I16 = struct.Struct(">h")
_VALUE_HEAD = struct.Struct(">qhib")
_VALUE_TAIL = struct.Struct(">qq")


class RecordFormatError(ValueError):
    """Bytes that are not a TransactionLogKey / TransactionLogValue Shoal can read."""


class TxnState(enum.IntEnum):
    """Kafka's ``TransactionState`` ids (as stored) and names (as DescribeTransactions and
    ListTransactions show them)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return _NAMES[self]

    @classmethod
    def by_name(cls, name: str) -> "TxnState | None":
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {v: k for k, v in _NAMES.items()}


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: tuple[tuple[str, tuple[int, ...]], ...]  # sorted by topic; partition ids sorted
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def group_partitions(partitions) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``{(topic, partition)}`` as the record's sorted ``(topic, (partition, ...))`` rows."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items()))


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return _I16.pack(len(b)) + b


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(0) + _string(transactional_id)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError(f"record truncated at byte {self.pos} (needs {n} more)")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, st: struct.Struct) -> tuple:
        return st.unpack(self.take(st.size))

    def int16(self) -> int:
        return self.unpack(_I16)[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise RecordFormatError("varint too long")

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise RecordFormatError("null string")
        return self._utf8(self.take(n))

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise RecordFormatError("null string")
        return self._utf8(self.take(n))

    @staticmethod
    def _utf8(b: bytes) -> str:
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"string is not UTF-8: {e}") from None

    def tagged(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.take(self.uvarint())
        return out


def decode_key(data: bytes) -> str:
    r = _Reader(data)
    version = r.int16()
    if version != 0:
        raise RecordFormatError(f"unknown TransactionLogKey version {version}")
    return r.string()


def _compact_string(s: str) -> bytes:
    b = s.encode("utf-8")
    return encode_uvarint(len(b) + 1) + b


def encode_value(v: TxnLogValue, version: int = 0) -> bytes:
    """The record's bytes. Version 1 is flexible (compact arrays and strings, tagged-field
    sections); its tagged fields (0 previous producer id, 1 next producer id, 2 client transaction
    version) are written only when they differ from their defaults (-1, -1, 0), as Kafka's
    generated serializer does. Version 0 has no place for them: they are dropped."""
    if version not in (0, 1):
        raise ValueError(f"unknown TransactionLogValue version {version}")
    flexible = version == 1
    out = bytearray(_I16.pack(version))
    out += _VALUE_HEAD.pack(v.producer_id, v.producer_epoch, v.timeout_ms, int(v.state))
    if v.state is TxnState.EMPTY and not v.partitions:
        out += encode_uvarint(0) if flexible else struct.pack(">i", -1)
    elif flexible:
        out += encode_uvarint(len(v.partitions) + 1)
        for topic, ids in v.partitions:
            out += _compact_string(topic)
            out += encode_uvarint(len(ids) + 1) + struct.pack(f">{len(ids)}i", *ids)
            out += encode_uvarint(0)  # the partition row's (empty) tagged fields
    else:
        out += struct.pack(">i", len(v.partitions))
        for topic, ids in v.partitions:
            out += _string(topic)
            out += struct.pack(f">i{len(ids)}i", len(ids), *ids)
    out += _VALUE_TAIL.pack(v.last_update_ms, v.start_ms)
    if flexible:
        tags = []
        if v.previous_producer_id != -1:
            tags.append((0, struct.pack(">q", v.previous_producer_id)))
        if v.next_producer_id != -1:
            tags.append((1, struct.pack(">q", v.next_producer_id)))
        if v.client_transaction_version != 0:
            tags.append((2, _I16.pack(v.client_transaction_version)))
        out += encode_uvarint(len(tags))
        for tag, data in tags:
            out += encode_uvarint(tag) + encode_uvarint(len(data)) + data
    return bytes(out)


def decode_value(data: bytes) -> TxnLogValue:
    r = _Reader(data)
    version = r.int16()
    if version not in (0, 1):
        raise RecordFormatError(f"unknown TransactionLogValue version {version}")
    flexible = version >= 1
    pid, epoch, timeout, status = r.unpack(_VALUE_HEAD)
    try:
        state = TxnState(status)
    except ValueError:
        raise RecordFormatError(f"unknown transaction status {status}") from None
    n = (r.uvarint() - 1) if flexible else r.int32()
    partitions = []
    for _ in range(max(n, 0)):
        topic = r.compact_string() if flexible else r.string()
        m = (r.uvarint() - 1) if flexible else r.int32()
        ids = tuple(r.int32() for _ in range(max(m, 0)))
        if flexible:
            r.tagged()
        partitions.append((topic, ids))
    last_update, start = r.unpack(_VALUE_TAIL)
    prev_pid = next_pid = -1
    ctv = 0
    if flexible:
        tags = r.tagged()
        if 0 in tags and len(tags[0]) == 8:
            prev_pid = struct.unpack(">q", tags[0])[0]
        if 1 in tags and len(tags[1]) == 8:
            next_pid = struct.unpack(">q", tags[1])[0]
        if 2 in tags and len(tags[2]) == 2:
            ctv = _I16.unpack(tags[2])[0]
    return TxnLogValue(pid, epoch, timeout, state, tuple(partitions), last_update, start, prev_pid, next_pid, ctv)
