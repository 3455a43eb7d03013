"""The transactional pipeline's checker on hand-made views: a faithful view passes; each anomaly
(lost, duplicated, misordered, foreign, offsets not at the end) is caught exactly; and Hypothesis
properties: any drop, duplicate or swap of a faithful view is caught."""

from __future__ import annotations

from hypothesis import given, strategies as st

from faults.txn_checker import SUFFIX, check_pipeline, table

INPUTS = {0: ["in-0", "in-2", "in-4"], 1: ["in-1", "in-3"]}


def faithful(inputs=INPUTS) -> dict[int, list[str]]:
    return {p: [v + SUFFIX for v in vs] for p, vs in inputs.items()}


def test_a_faithful_view_is_clean():
    r = check_pipeline(INPUTS, faithful(), {0: 3, 1: 2}, uncommitted_count=9)
    assert r.ok, r.summary()
    assert r.summary() == ("inputs=5 outputs=5 lost=0 duplicated=0 misordered=0 foreign=0 offsets-wrong=0 "
                           "aborted-seen=4")


def test_each_anomaly_exactly():
    view = {0: ["in-0|out", "in-4|out", "in-2|out", "in-4|out"], 1: ["in-1|out", "in-2|out", "junk"]}
    r = check_pipeline(INPUTS, view, {0: 3, 1: 1})
    assert r.lost == [(1, "in-3")]
    assert r.duplicated == [(0, "in-4|out")]
    assert r.misordered == [(0, 2)]  # in-2 after in-4
    assert r.foreign == [(1, "in-2|out"), (1, "junk")]  # another partition's record; no input's
    assert r.offsets == [(1, 1, 2)]
    assert not r.ok and "FIRST: lost [(1, 'in-3')]" in r.summary()


def test_offsets_against_given_ends_and_missing():
    r = check_pipeline(INPUTS, faithful(), {0: 3}, input_ends={0: 3, 1: 2})
    assert r.offsets == [(1, None, 2)]
    assert check_pipeline(INPUTS, faithful()).ok  # offsets not given: not judged


def test_table_sums_rows():
    a = check_pipeline(INPUTS, faithful(), uncommitted_count=7)
    b = check_pipeline(INPUTS, {0: ["in-0|out"], 1: faithful()[1]})
    assert table([(1, 3, a), (1, 2, b)]).splitlines()[-1] == "| 2 | 5 | 10 | 8 | 2 | 0 | 0 | 2 |"


views = st.integers(1, 4).flatmap(lambda parts: st.lists(st.integers(0, parts - 1), min_size=1, max_size=40))


@given(views, st.data())
def test_any_drop_duplicate_or_swap_is_caught(assignment, data):
    inputs: dict[int, list[str]] = {}
    for i, p in enumerate(assignment):
        inputs.setdefault(p, []).append(f"in-{i}")
    ends = {p: len(v) for p, v in inputs.items()}
    view = faithful(inputs)
    assert check_pipeline(inputs, view, ends).ok
    p = data.draw(st.sampled_from(sorted(view)))
    vs = list(view[p])
    kind = data.draw(st.sampled_from(["drop", "dup", "swap"] if len(vs) > 1 else ["drop", "dup"]))
    if kind == "drop":
        i = data.draw(st.integers(0, len(vs) - 1))
        lost = vs.pop(i)
        r = check_pipeline(inputs, {**view, p: vs}, ends)
        assert r.lost == [(p, lost[:-len(SUFFIX)])] and not r.duplicated and not r.misordered
    elif kind == "dup":
        i, j = data.draw(st.integers(0, len(vs) - 1)), data.draw(st.integers(0, len(vs)))
        vs.insert(j, vs[i])
        r = check_pipeline(inputs, {**view, p: vs}, ends)
        assert r.duplicated == [(p, vs[j])] and not r.lost
    else:
        i = data.draw(st.integers(0, len(vs) - 2))
        vs[i], vs[i + 1] = vs[i + 1], vs[i]
        r = check_pipeline(inputs, {**view, p: vs}, ends)
        assert r.misordered == [(p, i + 1)] and not r.lost and not r.duplicated
