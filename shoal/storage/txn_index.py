"""Transaction markers and the aborted-transaction index of a segment (Kafka's ``.txnindex``). No I/O
of its own except through the injected ``FileSystem``.

End-transaction marker (Kafka's ``EndTransactionMarker`` in a control batch): a batch with the
control (0x20) and transactional (0x10) attributes, the producer's id and epoch, base sequence -1
and one record whose key is ``version int16 (0) | type int16 (0 = ABORT, 1 = COMMIT)`` and whose
value is ``version int16 (0) | coordinator_epoch int32``. :func:`marker_batch` builds one,
:func:`read_marker` reads one back (None for any other control batch).

Index file ``<20-digit base offset>.txnindex`` next to the segment holding the markers: one
34-byte big-endian entry per aborted transaction, in marker order::

    version int16 (0) | producer_id int64 | first_offset int64 | last_offset int64 (the marker)
    | last_stable_offset int64

``last_stable_offset`` is the LSO right after the abort was written (the first offset of the
earliest transaction of another producer still open then, else the marker's offset + 1): a
lookup for ``[start, upper)`` can stop at the first entry whose LSO reaches ``upper``, because
no transaction aborted later can start below it (Kafka's ``TxnIndexSearchResult.isComplete``).

Entries are appended when the abort marker is appended (not fsynced then; ``PartitionLog.flush``
fsyncs the index with its segment), truncated with the log, deleted with the segment, carried
into the cleaned segment by compaction, and rebuilt by the recovery scan for every segment from
the recovery point on. A torn tail (a size not a multiple of 34) or an entry of an unknown
version ends the index there.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from shoal.protocol.records import ATTR_CONTROL, BatchHeader, InvalidRecords, build_batch, iter_batch_records

if TYPE_CHECKING:
    from shoal.storage.fs import FileSystem

__all__ = ["ENTRY_SIZE", "SUFFIX", "AbortedTxn", "TxnIndex", "marker_batch", "read_marker"]

log = logging.getLogger("shoal.storage.txn_index")

SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0
ABORT, COMMIT = 0, 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def marker_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, timestamp: int) -> bytes:
    """One control batch holding an end-transaction marker (base offset 0, to be assigned)."""
    key = _KEY.pack(0, COMMIT if commit else ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [(timestamp, key, value, [])],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        is_transactional=True,
        is_control=True,
    )


def read_marker(data: bytes | bytearray | memoryview, h: BatchHeader, pos: int = 0) -> tuple[bool, int] | None:
    """``(commit, coordinator_epoch)`` of the control batch ``h`` at ``data[pos:]``, or None when
    it is no end-transaction marker (another control type, or unreadable)."""
    if not h.attributes & ATTR_CONTROL or len(data) - pos < h.size:
        return None
    try:
        for r in iter_batch_records(data, pos, h):
            key, value = r.key, r.value
            if key is None or len(key) < _KEY.size or value is None or len(value) < _VALUE.size:
                return None
            version, kind = _KEY.unpack_from(key)
            if version != 0 or kind not in (ABORT, COMMIT):
                return None
            return kind == COMMIT, _VALUE.unpack_from(value)[1]
    except (InvalidRecords, struct.error, ValueError, IndexError):
        return None
    return None


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(ENTRY.pack(VERSION, *e) for e in entries)


def decode_entries(data: bytes, path: str = "") -> list[AbortedTxn]:
    out = []
    n = len(data) - len(data) % ENTRY_SIZE
    for pos in range(0, n, ENTRY_SIZE):
        version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
        if version != VERSION:
            log.warning("%s: entry %d has version %d; the index ends there", path, pos // ENTRY_SIZE, version)
            break
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TxnIndex:
    """The aborted transactions of one segment, in memory, mirrored in ``<prefix>.txnindex``."""

    __slots__ = ("path", "entries", "dirty")

    def __init__(self, path: str, entries: list[AbortedTxn] | None = None) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = entries if entries is not None else []
        self.dirty = False  # the file lacks entries a failed write did not add

    @classmethod
    def load(cls, fs: FileSystem, prefix: str) -> TxnIndex:
        path = prefix + SUFFIX
        data = fs.read_file(path)
        return cls(path, decode_entries(data, path) if data else [])

    def append(self, fs: FileSystem, entry: AbortedTxn) -> None:
        """Append one entry to memory and to the file (after its whole entries). A failed write
        (the marker is in the log already) is logged and leaves the index ``dirty``: readers
        still get the entry, and :meth:`rewrite_if_dirty` (at flush and close) writes it."""
        self.entries.append(entry)
        if self.dirty:
            return
        try:
            fd = fs.open(self.path, os.O_WRONLY | os.O_CREAT)
            try:
                fs.pwrite_all(fd, ENTRY.pack(VERSION, *entry), (len(self.entries) - 1) * ENTRY_SIZE)
            finally:
                fs.close(fd)
        except OSError as e:
            log.warning("%s: cannot append an aborted transaction (%s); written again at the next flush", self.path, e)
            self.dirty = True

    def rewrite_if_dirty(self, fs: FileSystem) -> None:
        """Write the whole file again after a failed append (raises OSError if that fails too)."""
        if self.dirty:
            fs.write_file(self.path, encode_entries(self.entries))
            self.dirty = False

    def truncate_to(self, fs: FileSystem, offset: int) -> bool:
        """Drop the entries whose marker is at or above ``offset`` (Kafka's ``truncateTo``)."""
        keep = [e for e in self.entries if e.last_offset < offset]
        if len(keep) == len(self.entries):
            return False
        self.entries = keep
        if keep:
            fs.write_file(self.path, encode_entries(keep))
            self.dirty = False
        else:
            self.reset(fs)
        return True

    def reset(self, fs: FileSystem) -> None:
        """Forget every entry and delete the file."""
        self.entries = []
        self.dirty = False
        try:
            fs.unlink(self.path)
        except FileNotFoundError:
            pass

    def collect(self, start: int, upper: int, out: list[AbortedTxn]) -> bool:
        """Add to ``out`` the entries overlapping ``[start, upper)``; True when the search is
        complete (an entry's last stable offset reaches ``upper``)."""
        for e in self.entries:
            if e.last_offset >= start and e.first_offset < upper:
                out.append(e)
            if e.last_stable_offset >= upper:
                return True
        return False
