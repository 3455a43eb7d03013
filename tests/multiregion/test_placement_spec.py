"""Placement constraints (the multi-region document's JSON): parsing with clear errors, checks
against the brokers, and the assignment; exact examples and Hypothesis properties."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.placement.constraints import (
    Constraint,
    PlacementSpecError,
    assign_with_constraints,
    check_against,
    parse_placement,
)

# The multi-region document's two examples.
ASYNC_DOC = {"version": 1, "replicas": [{"count": 2, "constraints": {"rack": "region-a"}}],
             "observers": [{"count": 1, "constraints": {"rack": "region-b"}}]}
SYNC_DOC = {"version": 1, "replicas": [{"count": 2, "constraints": {"rack": "region-a"}},
                                       {"count": 2, "constraints": {"rack": "region-b"}}]}
BROKERS = [(1, "region-a"), (2, "region-a"), (3, "region-a"), (4, "region-b"), (5, "region-b"), (6, "region-b")]


def test_the_documents_examples_parse():
    spec = parse_placement(json.dumps(ASYNC_DOC))
    assert spec.replicas == (Constraint(2, "region-a"),) and spec.observers == (Constraint(1, "region-b"),)
    assert (spec.sync_count, spec.observer_count, spec.replication_factor, spec.promotion) == (2, 1, 3, None)
    spec = parse_placement(json.dumps(SYNC_DOC))
    assert spec.per_rack() == {"region-a": (2, 0), "region-b": (2, 0)} and spec.observers == ()
    assert parse_placement(spec.to_json()) == spec


def test_version_2_promotion_policy():
    doc = {**ASYNC_DOC, "version": 2}
    assert parse_placement(json.dumps(doc)).promotion == "under-min-isr"  # the default
    doc["observerPromotionPolicy"] = "leader-is-observer"
    assert parse_placement(json.dumps(doc)).promotion == "leader-is-observer"


@pytest.mark.parametrize("doc, message", [
    ("not json", "not JSON"),
    ([1], "must be a JSON object"),
    ({**ASYNC_DOC, "version": 3}, "unknown version 3"),
    ({"replicas": ASYNC_DOC["replicas"]}, "unknown version None"),
    ({"version": 1}, '"replicas" is missing'),
    ({"version": 1, "replicas": []}, '"replicas" must be a non-empty list'),
    ({"version": 1, "replicas": [{"count": 0, "constraints": {"rack": "a"}}]}, "replicas[0]: count must be"),
    ({"version": 1, "replicas": [{"count": "2", "constraints": {"rack": "a"}}]}, "replicas[0]: count must be"),
    ({"version": 1, "replicas": [{"count": 1, "constraints": {}}]}, "replicas[0]: constraints must name a rack"),
    ({"version": 1, "replicas": [{"count": 1, "constraints": {"rack": "a", "zone": "z"}}]},
     "unknown constraint 'zone'"),
    ({"version": 1, "replicas": [{"count": 1, "constraints": {"rack": ""}}]}, "rack must be a non-empty string"),
    ({**ASYNC_DOC, "observerPromotionPolicy": "under-min-isr"}, "observerPromotionPolicy needs version 2"),
    ({**ASYNC_DOC, "version": 2, "observerPromotionPolicy": "always"}, "unknown observerPromotionPolicy 'always'"),
    ({**ASYNC_DOC, "replica": []}, "unknown field 'replica'"),
])
def test_malformed_specs_say_what_is_wrong(doc, message):
    with pytest.raises(PlacementSpecError) as e:
        parse_placement(doc if isinstance(doc, str) else json.dumps(doc))
    assert message in e.value.message and e.value.code == "INVALID_CONFIG"


def test_checks_against_the_brokers():
    spec = parse_placement(json.dumps({"version": 1, "replicas": [{"count": 3, "constraints": {"rack": "region-a"}}],
                                       "observers": [{"count": 1, "constraints": {"rack": "region-a"}}]}))
    with pytest.raises(PlacementSpecError, match="rack 'region-a' has 3 brokers, fewer than the 3 replicas "
                                                 "\\+ 1 observer it should hold") as e:
        check_against(spec, BROKERS)
    assert e.value.code == "INVALID_REPLICATION_FACTOR"
    with pytest.raises(PlacementSpecError, match="rack 'region-c' has no broker \\(racks: region-a, region-b\\)"):
        check_against(parse_placement('{"version":1,"replicas":[{"count":1,"constraints":{"rack":"region-c"}}]}'),
                      BROKERS)
    with pytest.raises(PlacementSpecError, match="rack 'region-b' has no live broker"):
        check_against(parse_placement(json.dumps(SYNC_DOC)), BROKERS, live={1, 2, 3})
    check_against(parse_placement(json.dumps(SYNC_DOC)), BROKERS, live={1, 2, 3, 6})


def test_assignment_of_the_documents_examples():
    spec = parse_placement(json.dumps(ASYNC_DOC))
    assert assign_with_constraints(spec, BROKERS, 3) == [
        ((1, 2, 4), (4,)), ((2, 3, 5), (5,)), ((3, 1, 6), (6,))]
    spec = parse_placement(json.dumps(SYNC_DOC))
    assert assign_with_constraints(spec, BROKERS, 2, start_index=1) == [((2, 3, 5, 6), ()), ((3, 1, 6, 4), ())]


@st.composite
def clusters_and_specs(draw):
    """Brokers in 1-4 racks, and a spec that fits them: sync constraints (at least one), then
    observers in the room left."""
    racks = draw(st.lists(st.sampled_from("abcd"), min_size=1, max_size=4, unique=True))
    brokers, node = [], 1
    for r in racks:
        for _ in range(draw(st.integers(1, 4))):
            brokers.append((node, r))
            node += 1
    room = Counter(r for _n, r in brokers)
    groups: list[list[dict]] = [[], []]
    for kind, at_least in ((0, 1), (1, 0)):
        for r in draw(st.lists(st.sampled_from(racks), min_size=at_least, max_size=3)):
            if room[r]:
                c = draw(st.integers(1, room[r]))
                room[r] -= c
                groups[kind].append({"count": c, "constraints": {"rack": r}})
    doc = {"version": 1, "replicas": groups[0]}
    if groups[1]:
        doc["observers"] = groups[1]
    return brokers, doc, draw(st.integers(0, 10)), draw(st.integers(1, 12))


@settings(max_examples=300, deadline=None)
@given(clusters_and_specs())
def test_assignment_properties(case):
    brokers, doc, start, partitions = case
    spec = parse_placement(json.dumps(doc))
    rack = dict(brokers)
    out = assign_with_constraints(spec, brokers, partitions, start_index=start)
    assert len(out) == partitions
    for replicas, observers in out:
        assert len(set(replicas)) == len(replicas) == spec.replication_factor  # distinct brokers
        assert replicas[spec.sync_count:] == observers  # observers last
        want = spec.per_rack()
        assert Counter(rack[r] for r in replicas[:spec.sync_count]) == Counter(
            {r: s for r, (s, _o) in want.items() if s})
        assert Counter(rack[r] for r in observers) == Counter({r: o for r, (_s, o) in want.items() if o})
    first = spec.replicas[0].rack
    in_first = sorted(n for n, r in brokers if r == first)
    leaders = [replicas[0] for replicas, _ in out[:len(in_first)]]
    assert len(set(leaders)) == min(len(in_first), partitions)  # leaders rotate over the rack's brokers
