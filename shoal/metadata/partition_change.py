"""One partition's change (Kafka's ``PartitionChangeBuilder``): the only place the leader epoch
and the partition epoch are bumped.

Every decision that changes a partition's registration (a leader election, a leadership change
or controlled shutdown, a leader's ISR change, a preferred-leader rebalance, a reassignment's
start, completion or cancellation, a role swap) says *what* changes and leaves the epochs to
:meth:`PartitionChange.build`, which applies KRaft's rules:

- the **leader epoch** goes up by one when the leader changes (fetchers and producers of the old
  leader are fenced by it; KIP-101, KIP-320);
- the **partition epoch** goes up by one on every change (a leader's ISR change decided on an
  older one is refused: ``INVALID_UPDATE_VERSION``);
- a change that changes nothing builds the partition itself, epochs untouched (unless it is
  an explicit write that asks for a new partition epoch all the same).

    p2 = PartitionChange(p).leader(3).isr((3, 1)).build()

Pure, no I/O; the callers stay the decisions (``shoal.metadata.rules``, the controller's).
"""

from __future__ import annotations

import dataclasses

from shoal.metadata import PartitionInfo


class PartitionChange:
    """A change to ``p``, field by field; :meth:`build` gives the partition after it."""

    __slots__ = ("_p", "_fields")

    def __init__(self, p: PartitionInfo) -> None:
        self._p = p
        self._fields: dict[str, object] = {}

    def leader(self, leader: int) -> PartitionChange:
        self._fields["leader"] = int(leader)
        return self

    def isr(self, isr: tuple[int, ...]) -> PartitionChange:
        self._fields["isr"] = tuple(isr)
        return self

    def replicas(self, replicas: tuple[int, ...]) -> PartitionChange:
        self._fields["replicas"] = tuple(replicas)
        return self

    def observers(self, observers: tuple[int, ...]) -> PartitionChange:
        self._fields["observers"] = tuple(observers)
        return self

    def reassignment(self, adding: tuple[int, ...], removing: tuple[int, ...]) -> PartitionChange:
        """The replicas an ongoing reassignment adds and removes (both empty: none runs)."""
        self._fields["adding"] = tuple(adding)
        self._fields["removing"] = tuple(removing)
        return self

    def build(self, *, always: bool = False) -> PartitionInfo:
        """The partition after the change; ``p`` itself when nothing changes, unless ``always``
        (an explicit write, ``MetadataStore.update_partition``: a new partition epoch even then)."""
        p = self._p
        changed = {k: v for k, v in self._fields.items() if getattr(p, k) != v}
        if not changed and not always:
            return p
        leader_moved = "leader" in changed
        return dataclasses.replace(p, **changed,  # type: ignore[arg-type]
                                   leader_epoch=p.leader_epoch + 1 if leader_moved else p.leader_epoch,
                                   partition_epoch=p.partition_epoch + 1)
