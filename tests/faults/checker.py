"""Checkers over a recorded history (Jepsen's Kafka/Redpanda analyses are the model): pure
functions, no broker in sight — the checker never trusts the broker's own view, only what clients
were told (acks, reads, commits) and a final read.

A history (``History``) holds

- ``acks``: every acknowledged send (producer, seq, partition, offset, value) — acks=all;
- ``errors``: every send that failed (indeterminate: it may or may not be in the log);
- ``reads``: every record a group consumer polled, with the consumer's *session* (a counter that
  moves at each assignment it gets, so a re-delivery after a rebalance is not a regression);
- ``commits``: every offset commit a consumer was told succeeded;
- ``observed_commits``: committed offsets read back from the broker over time (OffsetFetch);
- ``final``: partition -> [(offset, value)], a read of every partition from its start to its
  high watermark after the faults healed.

Checks (each a function; ``check`` runs them all):

- **lost**: an acknowledged value absent from the final read.
- **duplicated**: a value at more than one place in the final read (idempotence means none, even
  for values whose send was retried or failed).
- **inconsistent**: an acknowledged value found at another (partition, offset) than its ack said.
- **misordered**: in the final read, two values of one producer in one partition whose offsets
  are in the opposite order of their producer sequence; and a consumer session that polled a
  partition's offsets out of increasing order.
- **poll skips**: a consumer session that jumped over records of a partition the final read
  holds (it will never see them: lost to that consumer, Jepsen's poll-skip).
- **vanished**: a record a consumer read (so it was below the high watermark then) that the
  final read does not hold at that offset (Jepsen's lost-after-read / inconsistent offsets).
- **commits backwards**: a consumer's successful commits, or the broker's committed offsets as
  observed over time, going down for a partition.
- **replicas divergent**: replicas of a partition whose log bytes up to the high watermark differ
  (``replica_divergence`` over bytes; ``log_bytes_upto`` reads them from a data directory).

``table`` prints the one-line summary per campaign: schedules, faults, acked, lost, duplicated,
misordered.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence


@dataclass(frozen=True, slots=True)
class Ack:
    producer: str
    seq: int
    partition: int
    offset: int
    value: bytes
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class SendError:
    producer: str
    seq: int
    partition: int
    value: bytes
    error: str
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class Read:
    consumer: str
    session: int
    partition: int
    offset: int
    value: bytes
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class Commit:
    consumer: str
    partition: int
    offset: int
    time: float = 0.0


@dataclass
class History:
    acks: list[Ack] = field(default_factory=list)
    errors: list[SendError] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    observed_commits: list[Commit] = field(default_factory=list)
    final: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)


# -- the checks ------------------------------------------------------------------------------------


def _final_places(final: Mapping[int, Sequence[tuple[int, bytes]]]) -> dict[bytes, list[tuple[int, int]]]:
    places: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for p, records in final.items():
        for offset, value in records:
            places[value].append((p, offset))
    return places


def lost(acks: Iterable[Ack], final: Mapping[int, Sequence[tuple[int, bytes]]]) -> list[Ack]:
    """Acknowledged sends whose value is nowhere in the final read."""
    places = _final_places(final)
    return [a for a in acks if a.value not in places]


def duplicated(final: Mapping[int, Sequence[tuple[int, bytes]]]) -> dict[bytes, list[tuple[int, int]]]:
    """Values at more than one (partition, offset) of the final read."""
    return {v: sorted(ps) for v, ps in _final_places(final).items() if len(ps) > 1}


def inconsistent(acks: Iterable[Ack], final: Mapping[int, Sequence[tuple[int, bytes]]]) -> list[tuple[Ack, list[tuple[int, int]]]]:
    """Acknowledged values present in the final read, but not (only) where the ack put them."""
    places = _final_places(final)
    return [(a, places[a.value]) for a in acks
            if a.value in places and places[a.value] != [(a.partition, a.offset)]]


def misordered_final(acks: Iterable[Ack], final: Mapping[int, Sequence[tuple[int, bytes]]]) -> list[tuple[Ack, Ack]]:
    """Pairs (a, b) of one producer and partition, a.seq < b.seq, whose final offsets are not in
    that order (a at or after b). Values are located in the final read, not by their acks; a
    partition's final records must also be in strictly increasing offsets (else every pair there
    counts as the read itself is disordered)."""
    places = {}
    for p, records in final.items():
        offsets = [o for o, _ in records]
        if any(b <= a for a, b in zip(offsets, offsets[1:])):
            raise ValueError(f"final read of partition {p} is not in increasing offsets")
        for o, v in records:
            places.setdefault(v, (p, o))
    by_key: dict[tuple[str, int], list[tuple[int, int, Ack]]] = defaultdict(list)
    for a in acks:
        where = places.get(a.value)
        if where is not None and where[0] == a.partition:
            by_key[(a.producer, a.partition)].append((a.seq, where[1], a))
    out = []
    for items in by_key.values():
        items.sort(key=lambda t: t[0])
        # a violation shows as a descent in offsets along seq order; report each adjacent descent
        best: tuple[int, int, Ack] | None = None  # the item with the highest offset so far
        for item in items:
            if best is not None and item[1] <= best[1]:
                out.append((best[2], item[2]))
            if best is None or item[1] > best[1]:
                best = item
    return out


def nonmonotonic_polls(reads: Iterable[Read]) -> list[tuple[Read, Read]]:
    """Within one consumer session, consecutive polls of a partition whose offsets do not
    increase: (earlier read, later read)."""
    last: dict[tuple[str, int, int], Read] = {}
    out = []
    for r in reads:
        key = (r.consumer, r.session, r.partition)
        prev = last.get(key)
        if prev is not None and r.offset <= prev.offset:
            out.append((prev, r))
        last[key] = r
    return out


def poll_skips(reads: Iterable[Read], final: Mapping[int, Sequence[tuple[int, bytes]]]) -> list[tuple[Read, Read, int]]:
    """Within one consumer session, consecutive polls of a partition that jumped over records the
    final read holds between them (Jepsen's poll-skip): (earlier read, later read, records skipped)."""
    offsets = {p: [o for o, _ in records] for p, records in final.items()}
    last: dict[tuple[str, int, int], Read] = {}
    out = []
    for r in reads:
        key = (r.consumer, r.session, r.partition)
        prev = last.get(key)
        if prev is not None and r.offset > prev.offset + 1:
            between = offsets.get(r.partition, [])
            n = bisect_left(between, r.offset) - bisect_right(between, prev.offset)
            if n > 0:
                out.append((prev, r, n))
        last[key] = r
    return out


def vanished(reads: Iterable[Read], final: Mapping[int, Sequence[tuple[int, bytes]]]) -> list[Read]:
    """Records a consumer read that the final read does not hold at the same offset."""
    at = {(p, o): v for p, records in final.items() for o, v in records}
    return [r for r in reads if at.get((r.partition, r.offset)) != r.value]


def commits_backwards(commits: Iterable[Commit], per_consumer: bool = True) -> list[tuple[Commit, Commit]]:
    """Commits (in the order given, which is time order) whose offset is below the previous one
    for the same partition — per consumer, or over all when ``per_consumer`` is false (the
    broker's committed offsets as observed)."""
    last: dict[tuple[str, int], Commit] = {}
    out = []
    for c in commits:
        key = (c.consumer if per_consumer else "", c.partition)
        prev = last.get(key)
        if prev is not None and c.offset < prev.offset:
            out.append((prev, c))
        last[key] = c
    return out


def replica_divergence(replicas: Mapping[int, Mapping[int, bytes]]) -> dict[int, dict[int, int]]:
    """partition -> {broker: byte length} for partitions whose replicas' bytes up to the high
    watermark are not all identical (``replicas``: partition -> broker -> bytes)."""
    out = {}
    for p, by_broker in replicas.items():
        if len(set(by_broker.values())) > 1:
            out[p] = {b: len(v) for b, v in by_broker.items()}
    return out


# -- replica bytes from a data directory -----------------------------------------------------------

_PREFIX = struct.Struct(">qi")  # RecordBatch v2: baseOffset, batchLength (bytes after these 12)
_LAST_DELTA_AT = 23  # lastOffsetDelta (int32) at byte 23 of the batch
_I32 = struct.Struct(">i")


def batches_upto(segment: bytes, hw: int) -> bytes:
    """The whole batches of one segment's bytes whose last offset is below ``hw``, concatenated
    (Shoal's segment files are RecordBatch v2 back to back: shoal/storage/segment.py). A torn tail
    ends the scan."""
    out = []
    pos = 0
    while pos + _PREFIX.size <= len(segment):
        base, length = _PREFIX.unpack_from(segment, pos)
        end = pos + _PREFIX.size + length
        if length <= 0 or end > len(segment) or pos + _LAST_DELTA_AT + 4 > len(segment):
            break
        last = base + _I32.unpack_from(segment, pos + _LAST_DELTA_AT)[0]
        if last >= hw:
            break
        out.append(segment[pos:end])
        pos = end
    return b"".join(out)


def log_bytes_upto(partition_dir: str | os.PathLike, hw: int) -> bytes:
    """The bytes of every batch of a partition directory (``<data dir>/<topic>-<p>``) below
    ``hw``, over its segments in offset order. Read the files, not through Fetch: a replica the
    broker would not serve (a follower) is compared all the same."""
    names = sorted(n for n in os.listdir(partition_dir) if n.endswith(".log"))
    out = []
    for n in names:
        if int(n[:-4]) >= hw:
            break
        with open(os.path.join(partition_dir, n), "rb") as f:
            out.append(batches_upto(f.read(), hw))
    return b"".join(out)


# -- the result ------------------------------------------------------------------------------------


@dataclass
class Result:
    acked: int
    lost: list[Ack]
    duplicated: dict[bytes, list[tuple[int, int]]]
    inconsistent: list[tuple[Ack, list[tuple[int, int]]]]
    misordered: list[tuple[Ack, Ack]]
    nonmonotonic: list[tuple[Read, Read]]
    vanished: list[Read]
    skipped: list[tuple[Read, Read, int]]
    commits_backwards: list[tuple[Commit, Commit]]
    divergent: dict[int, dict[int, int]]
    errors: int = 0
    reads: int = 0
    # (topic, partition) -> (replicas, isr) of the partitions some sync replica had not rejoined
    # after the faults healed (``faults.run.out_of_isr``; filled by the run, not the history)
    out_of_isr: dict = field(default_factory=dict)
    # (broker, partition) -> how often a follower was told its log diverges, where it kept being
    # told (``faults.run.spinning``: a follower that makes no progress, from the brokers' logs)
    spinning: dict = field(default_factory=dict)

    @property
    def n_misordered(self) -> int:
        return len(self.misordered) + len(self.nonmonotonic)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.inconsistent or self.n_misordered or self.vanished
                    or self.skipped or self.commits_backwards or self.divergent or self.out_of_isr
                    or self.spinning)

    def summary(self) -> str:
        """One line, and the first few examples of every problem."""
        line = (f"acked={self.acked} send-errors={self.errors} reads={self.reads} lost={len(self.lost)} "
                f"duplicated={len(self.duplicated)} inconsistent={len(self.inconsistent)} "
                f"misordered={self.n_misordered} vanished={len(self.vanished)} poll-skips={len(self.skipped)} "
                f"commits-backwards={len(self.commits_backwards)} divergent={len(self.divergent)} "
                f"out-of-isr={len(self.out_of_isr)} spinning={len(self.spinning)}")
        details = []
        for name in ("lost", "inconsistent", "misordered", "nonmonotonic", "vanished", "skipped", "commits_backwards"):
            items = getattr(self, name)
            if items:
                details.append(f"  {name}: {items[:3]!r}{' ...' if len(items) > 3 else ''}")
        if self.duplicated:
            details.append(f"  duplicated: {list(self.duplicated.items())[:3]!r}")
        if self.divergent:
            details.append(f"  divergent: {self.divergent!r}")
        if self.out_of_isr:
            details.append(f"  out of the ISR (replicas, isr): {dict(list(self.out_of_isr.items())[:5])!r}")
        if self.spinning:
            details.append(f"  followers told again and again that they diverge: {self.spinning!r}")
        return "\n".join([line, *details])


def check(h: History, replicas: Mapping[int, Mapping[int, bytes]] | None = None) -> Result:
    return Result(
        acked=len(h.acks),
        lost=lost(h.acks, h.final),
        duplicated=duplicated(h.final),
        inconsistent=inconsistent(h.acks, h.final),
        misordered=misordered_final(h.acks, h.final),
        nonmonotonic=nonmonotonic_polls(h.reads),
        vanished=vanished(h.reads, h.final),
        skipped=poll_skips(h.reads, h.final),
        commits_backwards=commits_backwards(h.commits) + commits_backwards(h.observed_commits, per_consumer=False),
        divergent=replica_divergence(replicas or {}),
        errors=len(h.errors),
        reads=len(h.reads),
    )


HEADER = ("schedules", "faults", "acked", "lost", "duplicated", "misordered")


def row(schedules: int, faults: int, results: Sequence[Result]) -> tuple[int, ...]:
    return (schedules, faults, sum(r.acked for r in results), sum(len(r.lost) for r in results),
            sum(len(r.duplicated) for r in results), sum(r.n_misordered for r in results))


def table(rows: Sequence[Sequence[object]], header: Sequence[str] = HEADER) -> str:
    """A Markdown table (docs/ and the terminal alike)."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = "| " + " | ".join(f"{{:>{w}}}" for w in widths) + " |"
    return "\n".join([fmt.format(*header), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
                      *(fmt.format(*map(str, r)) for r in rows)])
