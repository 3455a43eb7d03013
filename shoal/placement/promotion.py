"""Automatic observer promotion: the pure policy (placement JSON version 2, ``observerPromotionPolicy``).

Confluent's policies, as Shoal implements them (the leader decides, the metadata rules check):

- ``under-min-isr``: while the ISR's sync replicas are fewer than ``min.insync.replicas``, enough
  caught-up observers join the ISR to bring it back to ``min.insync.replicas`` (and no more);
- ``under-replicated``: while any sync replica is out of the ISR, caught-up observers stand in for
  the missing ones (at least up to ``min.insync.replicas`` when it exceeds the sync replicas);
- ``leader-is-observer``: observers join only while the leader is itself an observer, which
  happens after an unclean election (the topic's ``unclean.leader.election.enable``, or the
  operator's ElectLeaders UNCLEAN) found no sync replica alive: under this policy only, such an
  election may pick an observer (``shoal.cluster.controller.elect``), which then brings other
  caught-up observers into the ISR up to ``min.insync.replicas``. Clean elections never pick an
  observer outside the ISR.

Promotion is an ISR join: only an observer that is caught up (what the leader's ISR-join check says
of any follower: it has everything up to the high watermark) is promoted, and never while a
caught-up sync replica waits to join (its own expansion comes first). Demotion is an ISR shrink:
once the sync replicas in the ISR are enough again, promoted observers leave it, last promoted
first, and never so many that the ISR falls below ``min.insync.replicas``. A promoted observer is an
ISR member: it counts for acks=all and the high watermark, and a clean election may pick it when no
sync ISR member is alive (it has every acknowledged record).

Pure functions, no I/O: ``observer_isr`` (the leader's proposal), ``promotion_allowed`` (the
metadata rule's check) and ``promotion_policy`` (a topic's policy from its placement JSON).
"""

from __future__ import annotations

import functools
from typing import AbstractSet, Sequence

from shoal.placement.constraints import PlacementSpecError, parse_placement

UNDER_MIN_ISR, UNDER_REPLICATED, LEADER_IS_OBSERVER = "under-min-isr", "under-replicated", "leader-is-observer"


@functools.lru_cache(maxsize=256)
def promotion_policy(placement: str) -> str | None:
    """The ``observerPromotionPolicy`` of a ``replica.placement`` value (None: unset, version 1, or
    unreadable). Cached: leaders ask on every follower fetch of a partition with observers."""
    if not placement:
        return None
    try:
        return parse_placement(placement).promotion
    except PlacementSpecError:
        return None


def promotions_needed(policy: str | None, *, isr: Sequence[int], sync_replicas: Sequence[int],
                      observers: Sequence[int], leader: int, min_isr: int) -> int:
    """How many observers the ISR should hold under ``policy`` (None: no promotion, version 1)."""
    sync_in = sum(1 for r in isr if r in sync_replicas)
    if policy == UNDER_MIN_ISR:
        target = min_isr
    elif policy == UNDER_REPLICATED:
        target = max(len(sync_replicas), min_isr)
    elif policy == LEADER_IS_OBSERVER and leader in observers:
        target = min_isr
    else:
        return 0
    return max(0, target - sync_in)


def observer_isr(policy: str | None, *, isr: Sequence[int], sync_replicas: Sequence[int],
                 observers: Sequence[int], caught_up: AbstractSet[int], leader: int,
                 min_isr: int) -> tuple[int, ...] | None:
    """The ISR the leader should propose to promote or demote observers, or None to keep it.

    ``caught_up``: the replicas (sync or observers) outside the ISR that the leader would let
    join now. Promoted observers are appended in the order of ``observers``; demoted ones leave
    from the end of the ISR (last promoted first); the leader is never demoted."""
    isr = tuple(isr)
    if leader not in isr:
        return None
    promoted = [r for r in isr if r in observers]
    needed = promotions_needed(policy, isr=isr, sync_replicas=sync_replicas, observers=observers,
                               leader=leader, min_isr=min_isr)
    if len(promoted) < needed:
        if any(r in caught_up and r not in isr for r in sync_replicas):
            return None  # a sync replica rejoins first
        candidates = [o for o in observers if o not in isr and o in caught_up]
        joining = candidates[:needed - len(promoted)]
        return isr + tuple(joining) if joining else None
    if len(promoted) > needed:
        removable = min(len(promoted) - needed, len(isr) - min_isr)
        leaving: list[int] = []
        for r in reversed(isr):
            if len(leaving) >= removable:
                break
            if r in observers and r != leader:
                leaving.append(r)
        if leaving:
            return tuple(r for r in isr if r not in leaving)
    return None


def promotion_allowed(policy: str | None, *, old_isr: Sequence[int], new_isr: Sequence[int],
                      sync_replicas: Sequence[int], observers: Sequence[int], leader: int,
                      min_isr: int) -> bool:
    """The metadata rule: an ISR change may bring observers in only when ``policy`` promotes and
    the new ISR holds no more observers than it needs. Observers already in the ISR may stay
    (demotion is the leader's later, separate change) and may always leave."""
    joining = [r for r in new_isr if r in observers and r not in old_isr]
    if not joining:
        return True
    in_new = sum(1 for r in new_isr if r in observers)
    # counted against the ISR before the observers joined: the sync replicas it holds decide
    sync_isr = [r for r in new_isr if r not in observers]
    needed = promotions_needed(policy, isr=sync_isr, sync_replicas=sync_replicas, observers=observers,
                               leader=leader, min_isr=min_isr)
    return in_new <= needed
