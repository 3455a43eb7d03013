"""Committed offsets of every group this coordinator owns (Kafka's ``OffsetMetadataManager`` store).

An offset enters the store only once its record is in ``__consumer_offsets`` and committed (the
high watermark passed it); until then the commit is *pending*, which OffsetFetch with
``require_stable`` and offset expiry take into account. Two commits of one partition in flight at
once are applied in log order (``record_offset``), whatever order their waits finish in. A pending
commit's value is kept too: moving a renamed topic's offsets (KIP-37) carries the latest record of
each partition, committed or still in flight, as a replay of the log would.
"""

from __future__ import annotations

from typing import Callable, Container

from shoal.groups.group import OffsetAndMetadata

TopicPartition = tuple[str, int]


class OffsetStore:
    def __init__(self) -> None:
        self._offsets: dict[str, dict[str, dict[int, OffsetAndMetadata]]] = {}
        # Commits in flight, per (group, topic, partition): log offset -> value (None: unknown).
        self._pending: dict[tuple[str, str, int], dict[int, OffsetAndMetadata | None]] = {}
        # A tombstone written after commits that are still in flight: those must not resurrect
        # the offset when their wait ends (kept only while such commits exist).
        self._floor: dict[tuple[str, str, int], int] = {}
        # Transactional commits: producer id -> (group, topic, partition) -> value, and the
        # reverse index (group, topic, partition) -> producer ids with one pending.
        self._txn: dict[int, dict[tuple[str, str, int], OffsetAndMetadata]] = {}
        self._open: dict[tuple[str, str, int], set[int]] = {}

    # -- reads -------------------------------------------------------------------------------

    def get(self, group: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        return self._offsets.get(group, {}).get(topic, {}).get(partition)

    def group_offsets(self, group: str) -> dict[str, dict[int, OffsetAndMetadata]]:
        """topic → partition → offset (live view; copy before mutating the store)."""
        return self._offsets.get(group, {})

    def has_offsets(self, group: str) -> bool:
        return bool(self._offsets.get(group))

    def groups(self) -> list[str]:
        return list(self._offsets)

    def count(self, group: str) -> int:
        return sum(len(p) for p in self._offsets.get(group, {}).values())

    def is_pending(self, group: str, topic: str, partition: int) -> bool:
        return (group, topic, partition) in self._pending

    def has_pending(self, group: str) -> bool:
        return any(k[0] == group for k in self._pending)

    def pending_keys(self, group: str) -> list[TopicPartition]:
        """(topic, partition) of the group's commits in flight."""
        return [(t, p) for g, t, p in self._pending if g == group]

    def is_txn_pending(self, group: str, topic: str, partition: int) -> bool:
        """A transaction not yet completed committed an offset of this partition."""
        return (group, topic, partition) in self._open

    def has_txn_pending(self, group: str) -> bool:
        return any(k[0] == group for k in self._open)

    def txn_keys(self, group: str) -> list[TopicPartition]:
        """(topic, partition) of the group's pending transactional offsets."""
        return [(t, p) for g, t, p in self._open if g == group]

    def txn_pending(self, producer_id: int) -> dict[tuple[str, str, int], OffsetAndMetadata]:
        """The producer's pending transactional offsets (a copy)."""
        return dict(self._txn.get(producer_id, {}))

    def txn_groups(self) -> list[str]:
        """Groups with pending transactional offsets."""
        return list(dict.fromkeys(k[0] for k in self._open))

    def txn_producers(self) -> list[int]:
        return list(self._txn)

    def latest(self, group: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        """The value of the partition's last record in the log: its commit still in flight with
        the highest ``record_offset`` if later than the committed offset, else the committed one."""
        out = self.get(group, topic, partition)
        for value in self._pending.get((group, topic, partition), {}).values():
            if value is not None and (out is None or value.record_offset > out.record_offset):
                out = value
        return out

    def keys_of_topics(self, topics: Container[str]) -> list[tuple[str, str, int]]:
        """(group, topic, partition) of every offset, committed or in flight, of ``topics``."""
        keys = {
            (g, t, p): None
            for g, by_topic in self._offsets.items() for t, parts in by_topic.items() if t in topics for p in parts
        }
        keys.update((k, None) for k in self._pending if k[1] in topics)
        return list(keys)

    # -- writes ------------------------------------------------------------------------------

    def put(self, group: str, topic: str, partition: int, value: OffsetAndMetadata) -> bool:
        """Store ``value`` unless a record later in the log (a commit or a tombstone) already took
        effect; True if stored."""
        key = (group, topic, partition)
        if value.record_offset >= 0 and self._floor.get(key, -1) > value.record_offset:
            return False
        parts = self._offsets.setdefault(group, {}).setdefault(topic, {})
        current = parts.get(partition)
        if current is not None and value.record_offset >= 0 and current.record_offset > value.record_offset:
            return False
        parts[partition] = value
        return True

    def remove(self, group: str, topic: str, partition: int, record_offset: int = -1) -> OffsetAndMetadata | None:
        """Forget an offset; ``record_offset`` is the tombstone's place in the log, if any."""
        key = (group, topic, partition)
        if record_offset >= 0 and key in self._pending:
            self._floor[key] = max(self._floor.get(key, -1), record_offset)
        self._drop_open(key)
        topics = self._offsets.get(group)
        if topics is None:
            return None
        parts = topics.get(topic)
        if parts is None:
            return None
        out = parts.pop(partition, None)
        if not parts:
            del topics[topic]
        if not topics:
            del self._offsets[group]
        return out

    def remove_group(self, group: str) -> list[TopicPartition]:
        """Forget the group's committed and pending transactional offsets; the (topic, partition)
        of each (the keys its tombstones name)."""
        topics = self._offsets.pop(group, {})
        keys = dict.fromkeys((t, p) for t, parts in topics.items() for p in parts)
        for t, p in self.txn_keys(group):
            keys[(t, p)] = None
            self._drop_open((group, t, p))
        return list(keys)

    def add_txn(self, producer_id: int, group: str, topic: str, partition: int, value: OffsetAndMetadata) -> None:
        """A transactional commit was appended (``value.record_offset`` says where)."""
        key = (group, topic, partition)
        self._txn.setdefault(producer_id, {})[key] = value
        self._open.setdefault(key, set()).add(producer_id)

    def drop_txn(self, producer_id: int, group: str, topic: str, partition: int, record_offset: int) -> None:
        """The transactional commit at ``record_offset`` failed: forget it unless a later one of
        the same producer replaced it."""
        key = (group, topic, partition)
        pending = self._txn.get(producer_id)
        if pending is None or key not in pending or pending[key].record_offset != record_offset:
            return
        del pending[key]
        if not pending:
            del self._txn[producer_id]
        self._unlink(key, producer_id)

    def complete_txn(
        self, producer_id: int, commit: bool, groups: Callable[[str], bool] | None = None
    ) -> list[tuple[str, str, int]]:
        """The producer's transaction ended (in the ``__consumer_offsets`` partitions whose groups
        ``groups`` accepts; None: all): on commit its pending offsets become committed where they
        are later in the log than the committed one. Returns the keys completed (committed or
        dropped)."""
        pending = self._txn.get(producer_id)
        if not pending:
            return []
        done = [k for k in pending if groups is None or groups(k[0])]
        for key in done:
            value = pending.pop(key)
            self._unlink(key, producer_id)
            if commit:
                self.put(*key, value)
        if not pending:
            del self._txn[producer_id]
        return done

    def _unlink(self, key: tuple[str, str, int], producer_id: int) -> None:
        producers = self._open.get(key)
        if producers is not None:
            producers.discard(producer_id)
            if not producers:
                del self._open[key]

    def _drop_open(self, key: tuple[str, str, int]) -> None:
        """A tombstone of ``key``: every producer's pending transactional offset of it goes."""
        for pid in self._open.pop(key, ()):
            pending = self._txn.get(pid)
            if pending is not None:
                pending.pop(key, None)
                if not pending:
                    del self._txn[pid]

    def add_pending(
        self, group: str, topic: str, partition: int, record_offset: int, value: OffsetAndMetadata | None = None
    ) -> None:
        self._pending.setdefault((group, topic, partition), {})[record_offset] = value

    def done_pending(self, group: str, topic: str, partition: int, record_offset: int) -> None:
        key = (group, topic, partition)
        offsets = self._pending.get(key)
        if offsets is None:
            return
        offsets.pop(record_offset, None)
        if not offsets:
            del self._pending[key]
            self._floor.pop(key, None)

    def clear(self, groups: set[str] | None = None) -> None:
        """Forget everything (or the given groups), e.g. when a partition is unloaded."""
        if groups is None:
            self._offsets.clear()
            self._pending.clear()
            self._floor.clear()
            self._txn.clear()
            self._open.clear()
            return
        for g in groups:
            self._offsets.pop(g, None)
        for key in [k for k in self._pending if k[0] in groups]:
            del self._pending[key]
            self._floor.pop(key, None)
        for key in [k for k in self._open if k[0] in groups]:
            self._drop_open(key)
