"""Offset arithmetic of the ``shoal`` Spark source: pure functions, no Spark and no Kafka client.

- Spark's offsets JSON (``{"topicA":{"0":23,"1":42}}``), with topics and partitions sorted so that
  equal offsets are always the same string (Spark compares a stream's offsets as strings).
- :func:`rate_limit`: ``maxOffsetsPerTrigger`` shared among partitions in proportion to their lag,
  exactly as Spark's Kafka source does (small partitions are not starved).
- :func:`split_ranges`: one input partition per topic-partition range, split further when
  ``maxRecordsPerPartition`` or ``minPartitions`` asks.
- :func:`clamp_ranges`: ranges checked against what the broker still has (data loss).

A topic-partition is a ``(topic, partition)`` tuple; offset maps are ``{(topic, partition): int}``.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Iterable, Mapping

__all__ = [
    "TP",
    "OffsetRange",
    "DataLoss",
    "to_spark_json",
    "from_spark_json",
    "rate_limit",
    "split_ranges",
    "clamp_ranges",
]

TP = tuple[str, int]


def to_spark_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): o}`` as Spark's Kafka offsets object, topics and partitions in sorted order."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_spark_json(doc: Mapping[str, Mapping[str, int]] | None) -> dict[TP, int]:
    if not doc:
        return {}
    return {(str(t), int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records ``[start, end)`` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)

    @property
    def tp(self) -> TP:
        return (self.topic, self.partition)


def rate_limit(start: Mapping[TP, int], latest: Mapping[TP, int], limit: int) -> dict[TP, int]:
    """End offsets that read at most about ``limit`` records, shared in proportion to each lag.

    Spark's ``KafkaMicroBatchStream.rateLimit``: each partition with records gets
    ``limit * lag / total_lag`` of them, floored, but at least one (a share below one is rounded
    up so small partitions are not starved); never past ``latest``. Partitions without records
    keep their latest offset.
    """
    sizes = {tp: end - start[tp] for tp, end in latest.items() if tp in start and end - start[tp] > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    out: dict[TP, int] = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        prorate = limit * (sizes[tp] / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, start[tp] + share)
    return out


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``parts`` contiguous pieces of ``r``, sizes differing by at most one (larger ones last)."""
    out, remaining, begin = [], r.size, r.start
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        out.append(OffsetRange(r.topic, r.partition, begin, begin + this))
        begin += this
    return out


def split_ranges(
    ranges: Iterable[OffsetRange],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Input partitions for ``ranges``: empty ranges dropped, then split as the options ask.

    ``maxRecordsPerPartition`` splits each range into ``ceil(size / max)`` equal pieces. Then, if
    that gives fewer than ``minPartitions`` pieces, extra splits go one at a time to the range
    whose pieces are currently largest, until there are ``minPartitions`` pieces (or every piece
    is a single record). Spark rounds proportional shares instead, which can fall a little short
    of ``minPartitions``; this way the count is exact and the largest piece as small as possible.
    """
    live = [r for r in ranges if r.size > 0]
    parts = [1] * len(live)
    if max_records_per_partition:
        parts = [math.ceil(r.size / max_records_per_partition) for r in live]
    if min_partitions and sum(parts) < min_partitions:
        # Max-heap on the current piece size (size / parts); ties by position for determinism.
        heap = [(-(r.size / n), i) for i, (r, n) in enumerate(zip(live, parts)) if r.size > n]
        heapq.heapify(heap)
        total = sum(parts)
        while total < min_partitions and heap:
            _, i = heapq.heappop(heap)
            parts[i] += 1
            total += 1
            if live[i].size > parts[i]:
                heapq.heappush(heap, (-(live[i].size / parts[i]), i))
    out: list[OffsetRange] = []
    for r, n in zip(live, parts):
        out.extend(_divide(r, n))
    return out


@dataclass(frozen=True, slots=True)
class DataLoss:
    """Records of a planned range that the broker no longer has."""

    topic: str
    partition: int
    start: int  # first missing offset
    end: int  # first offset after the missing ones
    reason: str

    def describe(self) -> str:
        if self.start >= self.end:
            return f"{self.topic}-{self.partition} from offset {self.start}: {self.reason}"
        return f"{self.topic}-{self.partition} offsets [{self.start}, {self.end}): {self.reason}"


def clamp_ranges(
    ranges: Iterable[OffsetRange],
    earliest: Mapping[TP, int],
    latest: Mapping[TP, int],
) -> tuple[list[OffsetRange], list[DataLoss]]:
    """Ranges cut to what the broker has, and what was cut.

    A range starting below the log start offset lost its first records to retention or
    DeleteRecords; a range ending above the high watermark lost its last ones (the log was
    truncated or the topic recreated). Partitions missing from ``earliest`` are gone altogether.
    """
    kept: list[OffsetRange] = []
    lost: list[DataLoss] = []
    for r in ranges:
        if r.tp not in earliest or r.tp not in latest:
            if r.size:
                lost.append(DataLoss(r.topic, r.partition, r.start, r.end, "the partition no longer exists"))
            continue
        start, end = r.start, r.end
        low, high = earliest[r.tp], latest[r.tp]
        if start < low:
            lost.append(DataLoss(r.topic, r.partition, start, min(low, end),
                                 f"deleted before they were read (log start offset is now {low})"))
            start = min(low, end)
        if end > high:
            lost.append(DataLoss(r.topic, r.partition, max(high, start), end,
                                 f"no longer in the log (high watermark is now {high})"))
            end = max(high, start)
        kept.append(OffsetRange(r.topic, r.partition, start, end))
    return kept, lost
