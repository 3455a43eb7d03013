"""The leader-epoch cache of one partition and its checkpoint file format. No I/O.

Kafka's ``LeaderEpochFileCache`` (KIP-101, KIP-279): an ordered list of ``(epoch, start_offset)``,
the first offset written under each leader epoch, epochs and start offsets both strictly
increasing. ``PartitionLog`` owns one and keeps it equal to what a scan of its batches' headers
gives: an entry wherever a batch's partitionLeaderEpoch is larger than every epoch before it
(:func:`epochs_of_batches`), the first entry clamped to the log start offset. (Leaders and
followers write epochs that never decrease; a batch with a smaller epoch than the latest, which
only a bug would write, leaves the cache alone: the append path checks one comparison.)

- ``assign(epoch, start)``: a batch with a new, larger epoch was appended (leader or follower).
  As Kafka's ``maybeTruncateNonMonotonicEntries``, entries whose epoch or start offset is not
  below the new one are dropped first (a leader that wrote nothing under an epoch it announced).
  Assigning the latest epoch again at a later offset changes nothing.
- ``end_offset_for(epoch, log_end_offset)`` answers OffsetsForLeaderEpoch with Kafka's code: the
  largest epoch <= the requested one and the start offset of the next larger epoch, or the log end
  offset when the latest epoch is requested. UNDEFINED ``(-1, -1)`` for epoch -1, an empty cache,
  or an epoch above the latest. Below the first epoch Kafka (since KAFKA-7415) answers the
  requested epoch with the first entry's start offset, so a follower truncates to the data the
  leader still has rather than falling back to its high watermark; so does this.
- ``truncate_from_end(offset)``: entries starting at or after ``offset`` go (log truncation).
- ``truncate_from_start(offset)``: the log start moved; entries wholly below it go and the epoch
  holding it starts at ``offset`` (Kafka: "truncateFromStart(6) will retain an entry at offset 6").

Checkpoint file ``leader-epoch-checkpoint`` (Kafka's ``CheckpointFile`` text format)::

    0                  <- version
    2                  <- number of entries
    0 0                <- "epoch start_offset", one line each
    3 1200

:func:`decode_checkpoint` raises CheckpointError for anything else (wrong version or count,
malformed or non-monotonic lines), and the log then rebuilds the cache from its batches.

Thread safety: none of its own; ``PartitionLog`` calls it under the partition lock.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable

__all__ = [
    "CHECKPOINT_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "CheckpointError",
    "LeaderEpochCache",
    "decode_checkpoint",
    "encode_checkpoint",
    "epochs_of_batches",
]

CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class CheckpointError(ValueError):
    """A leader-epoch checkpoint file that is torn, corrupt or of an unknown version."""


class LeaderEpochCache:
    """``(epoch, start_offset)`` entries of one partition; see the module docstring."""

    __slots__ = ("_epochs", "_starts", "latest_epoch")

    def __init__(self, entries: Iterable[tuple[int, int]] = ()) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self.latest_epoch = UNDEFINED_EPOCH  # -1 when empty; appends compare against it
        for epoch, start in entries:
            self.assign(epoch, start)

    def __len__(self) -> int:
        return len(self._epochs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LeaderEpochCache):
            return NotImplemented
        return self._epochs == other._epochs and self._starts == other._starts

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.entries()})"

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts))

    def clear(self) -> bool:
        changed = bool(self._epochs)
        self._epochs.clear()
        self._starts.clear()
        self.latest_epoch = UNDEFINED_EPOCH
        return changed

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        epochs = self._epochs
        starts = self._starts
        if epochs and epoch == epochs[-1] and start_offset >= starts[-1]:
            return False  # Kafka's isUpdateNeeded
        while epochs and (epochs[-1] >= epoch or starts[-1] >= start_offset):
            epochs.pop()
            starts.pop()
        epochs.append(epoch)
        starts.append(start_offset)
        self.latest_epoch = epoch
        return True

    def start_offset_of(self, epoch: int) -> int | None:
        i = bisect_left(self._epochs, epoch)
        return self._starts[i] if i < len(self._epochs) and self._epochs[i] == epoch else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the offset was written under (the last entry starting at or before it)."""
        i = bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i else None

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` for OffsetsForLeaderEpoch (Kafka's ``endOffsetFor``)."""
        epochs = self._epochs
        if epoch == UNDEFINED_EPOCH or not epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == epochs[-1]:
            return epoch, log_end_offset
        higher = bisect_right(epochs, epoch)  # the first entry with a larger epoch
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET  # above the latest epoch
        if higher == 0:
            return epoch, self._starts[0]  # below the first epoch: the leader's earliest data
        return epochs[higher - 1], self._starts[higher]

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop the entries starting at or after ``end_offset``; True if any went."""
        starts = self._starts
        if end_offset < 0 or not starts or starts[-1] < end_offset:
            return False
        i = bisect_left(starts, end_offset)
        del starts[i:]
        del self._epochs[i:]
        self.latest_epoch = self._epochs[-1] if self._epochs else UNDEFINED_EPOCH
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: drop the entries wholly below it and move the
        start of the epoch holding it there. True if the cache changed."""
        starts = self._starts
        i = bisect_right(starts, start_offset)  # entries [0, i) start at or before it
        if i == 0 or (i == 1 and starts[0] == start_offset):
            return False
        epochs = self._epochs
        keep = epochs[i - 1]
        del epochs[: i - 1]
        del starts[: i - 1]
        epochs[0] = keep
        starts[0] = start_offset
        return True


def epochs_of_batches(batches: Iterable[tuple[int, int, int]], log_start_offset: int = 0) -> list[tuple[int, int]]:
    """The entries a cache holds for a log with these ``(partition_leader_epoch, base_offset,
    last_offset)`` batches, in log order, starting at ``log_start_offset`` (the reference the
    log's cache is checked against, and how it is rebuilt)."""
    cache = LeaderEpochCache()
    for epoch, base, last in batches:
        if last < log_start_offset or epoch <= cache.latest_epoch:
            continue
        cache.assign(epoch, max(base, log_start_offset))
    return cache.entries()


def encode_checkpoint(entries: Iterable[tuple[int, int]]) -> bytes:
    items = list(entries)
    lines = [str(CHECKPOINT_VERSION), str(len(items))]
    lines.extend(f"{epoch} {start}" for epoch, start in items)
    return ("\n".join(lines) + "\n").encode("ascii")


def decode_checkpoint(data: bytes) -> list[tuple[int, int]]:
    """The entries of a checkpoint file; CheckpointError unless it is exactly a valid one."""
    try:
        lines = data.decode("ascii").split("\n")
    except UnicodeDecodeError as e:
        raise CheckpointError("leader-epoch checkpoint is not ASCII") from e
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CheckpointError("leader-epoch checkpoint has no version and count lines")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CheckpointError(f"unknown leader-epoch checkpoint version {lines[0].strip()!r}")
    try:
        count = int(lines[1])
    except ValueError as e:
        raise CheckpointError(f"bad entry count {lines[1]!r}") from e
    if count != len(lines) - 2:
        raise CheckpointError(f"leader-epoch checkpoint declares {count} entries but has {len(lines) - 2}")
    out: list[tuple[int, int]] = []
    for line in lines[2:]:
        parts = line.split()
        if len(parts) != 2:
            raise CheckpointError(f"malformed leader-epoch entry {line!r}")
        try:
            epoch, start = int(parts[0]), int(parts[1])
        except ValueError as e:
            raise CheckpointError(f"malformed leader-epoch entry {line!r}") from e
        if epoch < 0 or start < 0 or (out and (epoch <= out[-1][0] or start <= out[-1][1])):
            raise CheckpointError(f"leader-epoch entry {line!r} is negative or out of order")
        out.append((epoch, start))
    return out
