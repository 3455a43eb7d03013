"""``min.insync.racks``: Shoal's rack-aware durability for acks=all (Kafka has only a proposal,
KIP-1290). Pure functions.

With ``min.insync.racks`` = k (topic config, broker default 1 = off), an acks=all batch completes
only when the ISR members that have it span at least k racks (``broker.rack``). A batch is
acknowledged once the high watermark passes it, that is once every ISR member has it, so the
rule is on the ISR: a partition whose ISR spans fewer than k racks refuses acks=all with
NOT_ENOUGH_REPLICAS before the append (as ``min.insync.replicas`` does), and a batch whose ISR
shrank below k racks while it waited is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND.

A member whose rack is unknown (no ``broker.rack``, or a broker no longer registered) counts for
no rack: with k > 1 only brokers with a rack make the quorum.
"""

from __future__ import annotations

from typing import Iterable, Mapping


def racks_spanned(members: Iterable[int], rack_of: Mapping[int, str | None]) -> int:
    """The number of distinct known racks of ``members``."""
    return len({rack for r in members if (rack := rack_of.get(r)) is not None})


def enough_racks(members: Iterable[int], rack_of: Mapping[int, str | None], min_racks: int) -> bool:
    """True when ``members`` span at least ``min_racks`` racks (always, for ``min_racks`` <= 1)."""
    return min_racks <= 1 or racks_spanned(members, rack_of) >= min_racks
