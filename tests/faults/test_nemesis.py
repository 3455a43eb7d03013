"""Schedules are pure: the same seed gives the same ops, printed lines parse back, ops never
overlap and stay within the duration."""

from __future__ import annotations

from hypothesis import given, strategies as st

from faults.nemesis import KINDS, Op, Schedule

BROKERS, CLIENTS = [1, 2, 3], ["producer", "consumer"]


def test_same_seed_same_schedule_and_printed_lines_replay():
    a = Schedule.random(7, 60, BROKERS, CLIENTS, partitions=6)
    b = Schedule.random(7, 60, BROKERS, CLIENTS, partitions=6)
    assert a == b and len(a.ops) >= 5
    assert Schedule.parse(str(a)) == a
    assert Schedule.random(8, 60, BROKERS, CLIENTS, partitions=6) != a
    assert str(a).splitlines()[0].startswith("seed=7 op=0 at=")


def test_a_fixed_schedule_parses():
    s = Schedule.parse("seed=0 op=0 at=1.00 kind=pause target=leader:0 hold=2.00 mode=-\n"
                       "seed=0 op=1 at=4.00 kind=cut-client target=producer hold=2.00 mode=reset\n")
    assert s.ops == (Op(1.0, "pause", "leader:0", 2.0), Op(4.0, "cut-client", "producer", 2.0, "reset"))
    assert s.duration == 6.0


@given(st.integers(0, 2**32), st.floats(5, 300), st.lists(st.sampled_from(KINDS), min_size=1, unique=True))
def test_property_ops_are_sequential_within_duration_and_of_the_kinds_asked(seed, duration, kinds):
    s = Schedule.random(seed, duration, BROKERS, CLIENTS, kinds=tuple(kinds), partitions=3)
    ends = 0.0
    for op in s.ops:
        assert op.kind in kinds and op.at >= ends and 0.5 <= op.hold <= 4.0
        ends = op.at + op.hold
    assert ends <= duration
    assert Schedule.parse(str(s)) == s
