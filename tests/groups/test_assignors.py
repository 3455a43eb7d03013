"""The KIP-848 server-side assignors: exact examples (Kafka's RangeAssignor documentation) and
Hypothesis properties (exactly-once, balance, stickiness, determinism)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.groups.assignors import ASSIGNORS, MemberSpec, range_, range_member_order, uniform


def spec(*topics, instance_id=None, **assignment) -> MemberSpec:
    return MemberSpec(frozenset(topics), instance_id, None, {t: frozenset(ps) for t, ps in assignment.items()})


def flat(assignment) -> dict[str, set[tuple]]:
    return {m: {(t, p) for t, ps in a.items() for p in ps} for m, a in assignment.items()}


def sizes(assignment) -> dict[str, int]:
    return {m: len(tps) for m, tps in flat(assignment).items()}


def check_exactly_once(members, partitions, assignment) -> None:
    """Every partition of a topic somebody subscribes to is assigned once, to a subscriber."""
    assert set(assignment) == set(members)
    seen: dict[tuple, str] = {}
    for m, tps in flat(assignment).items():
        for t, p in tps:
            assert t in members[m].subscribed, f"{m} got {t}-{p} without subscribing to it"
            assert 0 <= p < partitions[t]
            assert (t, p) not in seen, f"{t}-{p} assigned to {seen[(t, p)]} and {m}"
            seen[(t, p)] = m
    wanted = {(t, p) for s in members.values() for t in s.subscribed if t in partitions for p in range(partitions[t])}
    assert set(seen) == wanted


# -- exact examples ------------------------------------------------------------------------------


def test_range_co_partitions_as_kafka_documents():
    # Kafka's RangeAssignor doc: M0, M1; T1 and T2 with 3 partitions each.
    members = {"M0": spec("T1", "T2"), "M1": spec("T1", "T2")}
    out = range_(members, {"T1": 3, "T2": 3})
    assert out == {
        "M0": {"T1": frozenset({0, 1}), "T2": frozenset({0, 1})},
        "M1": {"T1": frozenset({2}), "T2": frozenset({2})},
    }


def test_range_orders_static_members_by_instance_id_first():
    members = {"b": spec("t", instance_id="I1"), "a": spec("t"), "z": spec("t", instance_id="I0")}
    assert range_member_order(members) == ["z", "b", "a"]
    out = range_(members, {"t": 4})
    assert out == {"z": {"t": frozenset({0, 1})}, "b": {"t": frozenset({2})}, "a": {"t": frozenset({3})}}


def test_range_heterogeneous_counts_only_subscribers_of_each_topic():
    members = {"a": spec("t1"), "b": spec("t1", "t2"), "c": spec("t2")}
    out = range_(members, {"t1": 3, "t2": 2})
    assert out == {"a": {"t1": frozenset({0, 1})}, "b": {"t1": frozenset({2}), "t2": frozenset({0})}, "c": {"t2": frozenset({1})}}


def test_uniform_six_partitions_three_members_two_each():
    members = {m: spec("t") for m in "abc"}
    out = uniform(members, {"t": 6})
    assert sizes(out) == {"a": 2, "b": 2, "c": 2}
    assert out["a"] == {"t": frozenset({0, 1})}


def test_uniform_member_joining_moves_only_what_it_must():
    members = {"a": spec("t", t=range(0, 3)), "b": spec("t", t=range(3, 6)), "c": spec("t")}
    out = uniform(members, {"t": 6})
    assert sizes(out) == {"a": 2, "b": 2, "c": 2}
    assert out["a"]["t"] <= frozenset(range(0, 3)) and out["b"]["t"] <= frozenset(range(3, 6))


def test_uniform_member_leaving_keeps_everybody_else_in_place():
    members = {"a": spec("t", t={0, 1}), "b": spec("t", t={2, 3})}  # c (4, 5) left
    out = uniform(members, {"t": 6})
    assert out["a"]["t"] >= {0, 1} and out["b"]["t"] >= {2, 3} and sizes(out) == {"a": 3, "b": 3}


def test_uniform_extra_partition_goes_to_a_member_that_already_has_it():
    # 7 partitions, 2 members: the member holding 4 keeps all 4 (Kafka would give the extra slot
    # to the first member in iteration order and might move one).
    members = {"a": spec("t", t={0, 1, 2}), "b": spec("t", t={3, 4, 5, 6})}
    out = uniform(members, {"t": 7})
    assert out == {"a": {"t": frozenset({0, 1, 2})}, "b": {"t": frozenset({3, 4, 5, 6})}}


def test_uniform_drops_unsubscribed_and_vanished_partitions():
    members = {"a": spec("t", old={0}, t={0, 9})}  # unsubscribed from "old"; t-9 no longer exists
    out = uniform(members, {"t": 2, "old": 1})
    assert out == {"a": {"t": frozenset({0, 1})}}


def test_uniform_heterogeneous_example():
    members = {"a": spec("t1"), "b": spec("t1", "t2"), "c": spec("t2")}
    out = uniform(members, {"t1": 3, "t2": 3})
    check_exactly_once(members, {"t1": 3, "t2": 3}, out)
    assert sorted(sizes(out).values()) == [2, 2, 2]


def test_no_members_or_no_topics():
    assert uniform({}, {"t": 3}) == {} and range_({}, {"t": 3}) == {}
    assert uniform({"a": spec("missing")}, {"t": 3}) == {"a": {}}
    assert range_({"a": spec()}, {"t": 3}) == {"a": {}}


# -- properties ----------------------------------------------------------------------------------

TOPICS = ["t0", "t1", "t2", "t3"]
partition_counts = st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12), min_size=1)
member_ids = st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=8, unique=True)


@st.composite
def groups(draw, homogeneous: bool | None = None):
    partitions = draw(partition_counts)
    ids = draw(member_ids)
    if homogeneous is None:
        homogeneous = draw(st.booleans())
    common = frozenset(draw(st.sets(st.sampled_from(TOPICS), min_size=1)))
    members = {}
    for m in ids:
        subscribed = common if homogeneous else frozenset(draw(st.sets(st.sampled_from(TOPICS))))
        # An arbitrary (possibly stale, overlapping, out-of-range) current assignment.
        current = draw(st.dictionaries(st.sampled_from(TOPICS), st.frozensets(st.integers(0, 14), max_size=6), max_size=3))
        instance = draw(st.one_of(st.none(), st.text("xyz", min_size=1, max_size=2)))
        members[m] = MemberSpec(subscribed, instance, None, current)
    return members, partitions


def total(members, partitions) -> int:
    topics = {t for s in members.values() for t in s.subscribed if t in partitions}
    return sum(partitions[t] for t in topics)


@settings(max_examples=300, deadline=None)
@given(groups())
def test_every_subscribed_partition_assigned_exactly_once(group):
    members, partitions = group
    for name, assign in ASSIGNORS.items():
        check_exactly_once(members, partitions, assign(members, partitions))


@settings(max_examples=300, deadline=None)
@given(groups(homogeneous=True))
def test_uniform_homogeneous_is_balanced_within_one(group):
    members, partitions = group
    counts = sizes(uniform(members, partitions)).values()
    assert max(counts) - min(counts) <= 1


@settings(max_examples=300, deadline=None)
@given(groups(homogeneous=False))
def test_uniform_heterogeneous_leaves_no_improving_move(group):
    """No partition could go to another subscriber of its topic holding two or more fewer."""
    members, partitions = group
    out = uniform(members, partitions)
    load = sizes(out)
    for m, tps in flat(out).items():
        for t, _p in tps:
            for other, s in members.items():
                if t in s.subscribed:
                    assert load[other] >= load[m] - 1


@settings(max_examples=300, deadline=None)
@given(groups(), st.randoms(use_true_random=False))
def test_assignors_are_deterministic_whatever_the_member_order(group, rnd):
    members, partitions = group
    items = list(members.items())
    rnd.shuffle(items)
    shuffled = dict(items)
    for assign in ASSIGNORS.values():
        assert assign(members, partitions) == assign(shuffled, partitions)


@settings(max_examples=300, deadline=None)
@given(groups(homogeneous=True), st.text("ijk", min_size=1, max_size=3))
def test_uniform_stable_when_a_member_joins(group, newcomer):
    """Starting from a uniform assignment, a joining member only takes partitions: every old
    member keeps ``min(what it had, its new quota)`` and gains nothing."""
    members, partitions = group
    if newcomer in members:
        return
    before = uniform(members, partitions)
    after_members = {m: MemberSpec(s.subscribed, s.instance_id, None, before[m]) for m, s in members.items()}
    after_members[newcomer] = MemberSpec(next(iter(members.values())).subscribed)
    after = uniform(after_members, partitions)
    old, new = flat(before), flat(after)
    for m in members:
        assert new[m] <= old[m]
    quota_min, extra = divmod(total(members, partitions), len(after_members))
    moved = sum(len(old[m] - new[m]) for m in members)
    # The fewest moves a balanced assignment allows: everything above each member's quota.
    by_holding = sorted(members, key=lambda m: -len(old[m]))
    least = sum(max(0, len(old[m]) - quota_min - (1 if i < extra else 0)) for i, m in enumerate(by_holding))
    assert moved == least


@settings(max_examples=300, deadline=None)
@given(groups(homogeneous=True), st.data())
def test_uniform_stable_when_a_member_leaves(group, data):
    """Starting from a uniform assignment, when a member leaves every other keeps all it had."""
    members, partitions = group
    if len(members) < 2:
        return
    before = uniform(members, partitions)
    leaving = data.draw(st.sampled_from(sorted(members)))
    rest = {m: MemberSpec(s.subscribed, s.instance_id, None, before[m]) for m, s in members.items() if m != leaving}
    after = uniform(rest, partitions)
    old, new = flat(before), flat(after)
    for m in rest:
        assert old[m] <= new[m]
    check_exactly_once(rest, partitions, after)


@settings(max_examples=200, deadline=None)
@given(groups())
def test_uniform_is_a_fixed_point(group):
    """Recomputing with nothing changed moves nothing."""
    members, partitions = group
    first = uniform(members, partitions)
    again = uniform({m: MemberSpec(s.subscribed, s.instance_id, None, first[m]) for m, s in members.items()}, partitions)
    assert again == first


@settings(max_examples=200, deadline=None)
@given(groups(homogeneous=True))
def test_range_gives_contiguous_balanced_ranges_per_topic(group):
    members, partitions = group
    out = range_(members, partitions)
    for t in {t for s in members.values() for t in s.subscribed if t in partitions}:
        ranges = [sorted(out[m].get(t, ())) for m in range_member_order(members)]
        flat_ranges = [p for r in ranges for p in r]
        assert flat_ranges == list(range(partitions[t]))  # contiguous, in member order
        lengths = [len(r) for r in ranges]
        assert max(lengths) - min(lengths) <= 1
