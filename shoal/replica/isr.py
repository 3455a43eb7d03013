"""The ISR change queue: a leader's ISR changes go to the metadata store in batches.

Kafka's ``AlterPartitionManager`` is the model. A leader decides ISR changes one partition at a
time (a follower caught up, a follower lagging, an observer promoted: ``Partition._expansion``,
``shrink``, ``promotion``), and used to send each as its own metadata change: a restarted broker
rejoining thousands of partitions made thousands of etcd transactions at once, every one of them
racing the others (and the other brokers') for the image's epoch, each lost race decided again,
each commit an image every broker published. At 6,000 partitions that saturated a 2-core machine
for minutes and cost two brokers their etcd leases.

So each broker has one queue (``IsrChangeQueue``):

- ``submit`` records the proposal on the partition (``Partition.pending_isr``: from then on the
  high watermark counts the larger of the two ISRs, ``maximal_isr``) and keeps it, one per
  partition (the latest wins: a partition proposes again only once its earlier proposal is
  settled, or overtaken by a change in the image);
- one batch is in flight at a time: ``DecidingStore.alter_isrs`` with every proposal pending when
  it starts (committed in as few etcd transactions as etcd's limits allow); proposals made
  meanwhile wait for the next one. So a burst of N proposals is a handful of commits, whatever N;
- each partition's answer goes back to it. Committed: the image brings the new ISR and
  ``Partition.update`` clears ``pending_isr`` (not before: an expansion must count until the
  image shows it, or the high watermark could pass the new member's log end while the
  controller may already elect it). Refused (a stale partition epoch, a fenced leader epoch, an
  ISR the rules refuse): ``pending_isr`` is cleared and the partition proposes again at its next
  fetch or ISR check, against its newer epoch; it fails alone, not its batch. A batch whose fate
  is unknown (the store unreachable, a transaction that timed out and may have landed): its
  proposals are sent again after ``RETRY_BACKOFF_S``, still pending, unless the image overtook
  them (a landed change then answers stale, and the image has cleared its pending state);
- one log line per batch (how many expanded, shrunk, refused and why, the first few partitions),
  each partition's detail at DEBUG: at thousands of partitions a line each is a cost of its own.

Single-threaded: called on the event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Awaitable, Callable, Sequence

from shoal.asyncutil import cancel_and_wait
from shoal.metadata import IsrChange, MetadataError, PartitionInfo
from shoal.replica.partition import Partition

log = logging.getLogger("shoal.replica")

__all__ = ["IsrChangeQueue", "AlterIsrs"]

AlterIsrs = Callable[[Sequence[IsrChange]], Awaitable[Sequence["PartitionInfo | Exception"]]]

# After a batch whose fate is unknown (the store unreachable): wait this long before sending again.
RETRY_BACKOFF_S = 0.5
# How many partitions a batch's log line names.
LOG_NAMES = 5


@dataclass(slots=True)
class _Proposal:
    part: Partition
    info: PartitionInfo  # the partition as the proposal was decided on
    isr: tuple[int, ...]
    why: str
    min_isr: int | None

    def current(self) -> bool:
        """Still what the partition has pending, on the image it was decided on."""
        p, info = self.part, self.part.info
        return (p.pending_isr == self.isr and info.partition_epoch == self.info.partition_epoch
                and info.leader_epoch == self.info.leader_epoch)

    def change(self, node_id: int) -> IsrChange:
        return IsrChange(self.part.topic, self.part.index, node_id, self.info.leader_epoch,
                         self.info.partition_epoch, self.isr, self.min_isr)

    def describe(self) -> str:
        return f"{self.part.topic}-{self.part.index} {list(self.info.isr)} -> {list(self.isr)} ({self.why})"


def _unknown_fate(e: BaseException) -> bool:
    """A batch's error that does not say the change was refused: the store unreachable, or a
    transaction that timed out (it may have landed)."""
    return not isinstance(e, MetadataError) or e.code == "REQUEST_TIMED_OUT"


class IsrChangeQueue:
    """One broker's ISR changes on their way to the metadata store (see the module docstring)."""

    def __init__(self, node_id: int, alter_isrs: AlterIsrs, *, retry_backoff_s: float = RETRY_BACKOFF_S) -> None:
        self.node_id = node_id
        self._alter_isrs = alter_isrs
        self.retry_backoff_s = retry_backoff_s
        self._unsent: dict[tuple[str, int], _Proposal] = {}
        self._task: asyncio.Task[None] | None = None
        self.batches = 0  # batches sent (metrics, tests)
        self.shrinks = 0  # ISR changes committed (metrics)
        self.expands = 0
        self.refused = 0  # proposals the store refused (stale, fenced, invalid)
        self._failing = False  # the last batch's fate was unknown (its warning said so once)
        self._stopped = False

    @property
    def unsent(self) -> int:
        """Proposals waiting for the next batch."""
        return len(self._unsent)

    def submit(self, part: Partition, isr: tuple[int, ...], why: str, min_isr: int | None = None) -> None:
        """Propose ``isr`` for ``part`` (this broker leads it and has nothing pending for it): it
        counts for the high watermark at once, and goes to the store in the next batch. Once the
        queue is stopped, nothing: the broker is leaving (``stop``)."""
        if self._stopped:
            return
        part.pending_isr = isr
        part.maybe_increment_high_watermark()  # an expansion may let it move already
        self._unsent[part.key] = _Proposal(part, part.info, isr, why, min_isr)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"isr-changes {self.node_id}")

    async def stop(self) -> None:
        """No batch from now on: the one in flight is cancelled at once, even mid-commit (it may
        land or not: the image tells), and later proposals are dropped. A controlled shutdown
        stops the queue before its own change (``shoal.cluster.controller.controlled_shutdown``):
        that change must not wait behind ISR batches for this process's turn at the store, and a
        leader that is handing its leaderships away has no ISR change left worth making."""
        self._stopped = True
        await cancel_and_wait([self._task])

    async def _run(self) -> None:
        while self._unsent:
            batch, self._unsent = self._unsent, {}
            proposals = [p for p in batch.values() if p.current()]
            if not proposals:
                continue
            self.batches += 1
            try:
                answers: Sequence[PartitionInfo | Exception] = await self._alter_isrs(
                    [p.change(self.node_id) for p in proposals])
            except Exception as e:  # the store's own failure: every proposal of the batch
                answers = [e] * len(proposals)
            if self._settle(proposals, answers):
                await asyncio.sleep(self.retry_backoff_s)

    def _settle(self, proposals: list[_Proposal], answers: Sequence[PartitionInfo | Exception]) -> bool:
        """Give each partition its answer and log the batch; True when some are to be sent again."""
        committed: list[_Proposal] = []
        refused: list[tuple[_Proposal, Exception]] = []
        again = 0
        for p, answer in zip(proposals, answers):
            if isinstance(answer, PartitionInfo) and answer.partition_epoch != p.info.partition_epoch:
                committed.append(p)
                if len(p.isr) < len(p.info.isr):
                    self.shrinks += 1
                else:
                    self.expands += 1
                log.debug("%s: ISR %s", p.part.key, p.describe())
            elif isinstance(answer, Exception) and _unknown_fate(answer):
                if p.current():  # still pending: sent again (a newer proposal or the image overtook it else)
                    self._unsent.setdefault(p.part.key, p)
                    again += 1
                log.debug("%s: ISR change %s not made yet: %s", p.part.key, p.describe(), answer)
            else:  # refused, or the ISR already was that: the partition may propose again
                if p.current():
                    p.part.pending_isr = None
                if isinstance(answer, Exception):
                    refused.append((p, answer))
                    self.refused += 1
                    log.debug("%s: cannot change the ISR %s: %s", p.part.key, p.describe(), answer)
        self._log(proposals, committed, refused, again, answers)
        return again > 0

    def _log(self, proposals: list[_Proposal], committed: list[_Proposal], refused: list[tuple[_Proposal, Exception]],
             again: int, answers: Sequence[PartitionInfo | Exception]) -> None:
        """One line for the batch: what changed, what was refused and why, the first few names."""
        if not committed and not refused and not again and not self._failing:
            return
        parts = []
        if committed:
            shrunk = sum(1 for p in committed if len(p.isr) < len(p.info.isr))
            parts.append(f"{len(committed) - shrunk} expanded, {shrunk} shrunk: "
                         + _names([p.describe() for p in committed]))
        if refused:
            why = Counter(getattr(e, "code", type(e).__name__) for _, e in refused)
            parts.append(f"{len(refused)} refused ({', '.join(f'{n} {c}' for c, n in why.most_common())}): "
                         + _names([f"{p.part.topic}-{p.part.index}: {e}" for p, e in refused]))
        if again:
            e = next(a for a in answers if isinstance(a, Exception) and _unknown_fate(a))
            parts.append(f"{again} to be sent again every {self.retry_backoff_s:g} s: {e}")
        elif self._failing:
            parts.append("the store answers again")
        if again:  # a warning when the store stops answering, not every retry while it does not
            level = logging.DEBUG if self._failing else logging.WARNING
        elif any(getattr(e, "code", "") not in _ROUTINE for _, e in refused):
            level = logging.WARNING
        else:
            level = logging.INFO
        self._failing = again > 0
        log.log(level, "ISR changes (batch %d, %d partition(s)): %s", self.batches, len(proposals), "; ".join(parts))


# Refusals that races make (another change to the partition, a new leader): not worth a warning.
_ROUTINE = ("INVALID_UPDATE_VERSION", "FENCED_LEADER_EPOCH")


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:LOG_NAMES])
    return shown + (f" and {len(items) - LOG_NAMES} more" if len(items) > LOG_NAMES else "")
