"""``txn_schedule``: random schedules with the transaction roles, drawn from the seed alone (the
same seed draws the same ops, which print and parse back), aiming kill and pause ops at
``txn-coordinator``, ``group-coordinator`` or ``out-leader:<p>`` part of the time and leaving the
other kinds as ``Schedule.random`` drew them."""

from __future__ import annotations

from faults.nemesis import KINDS, Schedule
from faults.txn_workload import TXN_ROLES, txn_schedule


def draw(seed: int, share: float = 0.5) -> Schedule:
    return txn_schedule(seed, 60, [1, 2, 3], ["producer", "consumer"], KINDS, partitions=3, txn_share=share)


def test_same_seed_same_schedule_and_it_replays():
    for seed in range(20):
        s = draw(seed)
        assert s == draw(seed)
        assert Schedule.parse(str(s)) == s


def test_only_kill_and_pause_are_retargeted():
    for seed in range(50):
        base = Schedule.random(seed, 60, [1, 2, 3], ["producer", "consumer"], kinds=KINDS, partitions=3)
        s = draw(seed)
        assert [(o.at, o.kind, o.hold, o.mode) for o in s.ops] == [(o.at, o.kind, o.hold, o.mode) for o in base.ops]
        for mine, theirs in zip(s.ops, base.ops):
            if mine.target != theirs.target:
                assert mine.kind in ("kill", "pause")
                assert mine.target in TXN_ROLES[:2] or mine.target.startswith("out-leader:")
    assert draw(3, share=0.0) == Schedule.random(3, 60, [1, 2, 3], ["producer", "consumer"], kinds=KINDS,
                                                 partitions=3)


def test_every_transaction_role_is_drawn():
    targets = {o.target.split(":")[0] for seed in range(100) for o in draw(seed, share=1.0).ops
               if o.kind in ("kill", "pause")}
    assert targets == set(TXN_ROLES)
