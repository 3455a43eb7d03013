"""The partition log's leader epochs: its ``LeaderEpochCache`` (``shoal.storage.epochs``) and the
``leader-epoch-checkpoint`` file that keeps it (Kafka's ``LeaderEpochFileCache``).

KIP-101/279: the log keeps a ``LeaderEpochCache`` equal to a scan of its batch headers (an entry
where a batch's partitionLeaderEpoch exceeds every earlier one). ``append`` compares its
``leader_epoch`` with the latest epoch (one comparison) and assigns a new entry when it is larger;
``append_as_follower`` does so per batch; ``truncate_to`` drops the entries from the new end (even
when it cuts nothing: an epoch taken at the log end and never written in), retention and
DeleteRecords move the first to the log start, ``truncate_fully_and_start_at`` clears it. The cache
is written to ``leader-epoch-checkpoint`` (Kafka's format) by ``flush`` (temp file, fsync, rename,
directory fsync) before the recovery point moves, never on the append path: an unclean open takes
the checkpoint, forgets its entries from the first segment it recovers on, and assigns the epochs
of the batches the recovery scan reads there, so entries past the recovery point come from the data
itself. A clean open trusts the checkpoint (``close`` writes it); a missing or corrupt one is
rebuilt from every batch header. Only ``truncate_fully_and_start_at`` writes it at once (Kafka's
``clearAndFlush``), so no entry of the dropped log survives a crash.
"""

from __future__ import annotations

import os
import threading

from shoal.storage.epochs import CHECKPOINT_FILE as EPOCH_CHECKPOINT_FILE, LeaderEpochCache, encode_checkpoint


class LogEpochs:
    """``PartitionLog``'s leader-epoch methods: a mixin, whose state is the log's (directory, lock,
    log end...); these fields are its own, set by ``PartitionLog.__init__``."""

    _epochs: LeaderEpochCache
    _epoch_seq: int  # bumped at every change of the epoch cache
    _epoch_written: int  # the change leader-epoch-checkpoint holds
    _epoch_synced: int  # the change it holds fsynced
    _epoch_file_lock: threading.Lock  # orders writes of that file

    def _epoch_checkpoint_path(self) -> str:
        return os.path.join(self.directory, EPOCH_CHECKPOINT_FILE)

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        if self._epochs.assign(epoch, start_offset):
            self._epoch_seq += 1

    def _write_epoch_checkpoint(self, seq: int, data: bytes, *, sync: bool = True) -> None:
        """Write ``leader-epoch-checkpoint`` (change ``seq`` of the cache) unless a later change
        is already written: a temp file renamed over it, with ``sync`` fsynced before the rename
        and the directory after (without: the caller syncs the file system). Without the
        partition lock (``flush``) or under it."""
        fs = self._fs
        path = self._epoch_checkpoint_path()
        with self._epoch_file_lock:
            if self._closed:
                return  # the directory may be going away (deleted or renamed)
            if seq > self._epoch_written:
                if sync:
                    fs.write_file_atomic(path, data)
                else:
                    fs.write_file(path + ".tmp", data)
                    fs.rename(path + ".tmp", path)
                self._epoch_written = seq
            elif sync and self._epoch_synced < self._epoch_written:
                fs.fsync_path(path)
                fs.fsync_dir(self.directory)
            if sync:
                self._epoch_synced = self._epoch_written

    def _epoch_snapshot(self, *, synced: bool = True) -> tuple[int, bytes] | None:
        """``(change, file contents)`` if the file (fsynced, with ``synced``) lags the cache
        (under the lock)."""
        seq = self._epoch_seq
        if seq <= (self._epoch_synced if synced else self._epoch_written):
            return None
        return seq, encode_checkpoint(self._epochs.entries())

    @property
    def latest_epoch(self) -> int:
        """The largest leader epoch of the log's batches (-1 if none)."""
        return self._epochs.latest_epoch

    def epoch_entries(self) -> list[tuple[int, int]]:
        """``(epoch, start_offset)`` of each leader epoch in the log, ascending."""
        with self._lock:
            return self._epochs.entries()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` for OffsetsForLeaderEpoch (KIP-279; see ``shoal.storage.epochs``)."""
        with self._lock:
            return self._epochs.end_offset_for(epoch, self._leo)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The leader epoch the offset was written under, from the cache (None below the first)."""
        with self._lock:
            return self._epochs.epoch_for_offset(offset)

    def assign_epoch_start_offset(self, epoch: int) -> None:
        """A leader taking ``epoch`` records that it starts at the log end offset (Kafka's
        ``maybeAssignEpochStartOffset`` in ``makeLeader``), before any batch of it is written."""
        with self._lock:
            self._check_open()
            if epoch > self._epochs.latest_epoch:
                self._assign_epoch(epoch, self._leo)

    def _write_epochs_unsynced(self) -> None:
        epochs = self._epoch_snapshot(synced=False)
        if epochs is not None:
            self._write_epoch_checkpoint(*epochs, sync=False)
