"""The checkers on hand-made histories: exact examples of every anomaly, and Hypothesis properties
(a faithful history passes; dropping, duplicating or swapping records is caught exactly)."""

from __future__ import annotations

import struct

from hypothesis import given, strategies as st

from faults.checker import (
    Ack, Commit, History, Read, batches_upto, check, commits_backwards, duplicated, inconsistent,
    log_bytes_upto, lost, misordered_final, nonmonotonic_polls, poll_skips, replica_divergence, row, table,
    vanished,
)


def _acks(spec: list[tuple[str, int, int, int]]) -> list[Ack]:
    """(producer, seq, partition, offset) -> Ack with value b"producer:seq"."""
    return [Ack(p, s, part, o, f"{p}:{s}".encode()) for p, s, part, o in spec]


def _final_of(acks: list[Ack]) -> dict[int, list[tuple[int, bytes]]]:
    final: dict[int, list[tuple[int, bytes]]] = {}
    for a in sorted(acks, key=lambda a: (a.partition, a.offset)):
        final.setdefault(a.partition, []).append((a.offset, a.value))
    return final


ACKS = _acks([("p1", 0, 0, 0), ("p1", 1, 1, 0), ("p1", 2, 0, 1), ("p2", 0, 0, 2), ("p2", 1, 1, 1)])


def test_a_faithful_history_is_clean():
    h = History(acks=ACKS, final=_final_of(ACKS),
                reads=[Read("c1", 0, 0, 0, b"p1:0"), Read("c1", 0, 0, 1, b"p1:2"), Read("c1", 0, 1, 0, b"p1:1")],
                commits=[Commit("c1", 0, 1), Commit("c1", 0, 2)], observed_commits=[Commit("o", 0, 2)])
    r = check(h, {0: {1: b"abc", 2: b"abc"}})
    assert r.ok, r.summary()
    assert r.summary().startswith("acked=5 send-errors=0 reads=3 lost=0 duplicated=0")


def test_lost_is_an_acked_value_missing_from_the_final_read():
    final = _final_of(ACKS)
    final[0] = [x for x in final[0] if x[1] != b"p1:2"]
    assert lost(ACKS, final) == [ACKS[2]]
    assert not check(History(acks=ACKS, final=final)).ok


def test_unacked_values_in_the_final_read_are_not_lost_nor_duplicated():
    final = _final_of(ACKS)
    final[0].append((3, b"p3:0"))  # a send whose ack never came (indeterminate)
    assert lost(ACKS, final) == [] and duplicated(final) == {}


def test_duplicated_counts_each_value_at_two_places():
    final = _final_of(ACKS)
    final[1].append((2, b"p1:1"))
    assert duplicated(final) == {b"p1:1": [(1, 0), (1, 2)]}
    # and the acked value is now inconsistent (found at two places)
    assert [a for a, _ in inconsistent(ACKS, final)] == [ACKS[1]]


def test_inconsistent_is_an_ack_whose_offset_does_not_hold_its_value():
    final = {0: [(0, b"p1:0"), (1, b"p2:0"), (2, b"p1:2")], 1: [(0, b"p1:1"), (1, b"p2:1")]}
    bad = inconsistent(ACKS, final)
    assert {a.value for a, _ in bad} == {b"p1:2", b"p2:0"}


def test_misordered_is_a_producer_sequence_against_offsets():
    acks = _acks([("p1", 0, 0, 0), ("p1", 1, 0, 1), ("p1", 2, 0, 2)])
    assert misordered_final(acks, _final_of(acks)) == []
    swapped = {0: [(0, b"p1:0"), (1, b"p1:2"), (2, b"p1:1")]}
    assert misordered_final(acks, swapped) == [(acks[1], acks[2])]  # seq 1 lies after seq 2
    # different producers, or different partitions, are not ordered against each other
    other = _acks([("p1", 0, 0, 1), ("p2", 0, 0, 0), ("p1", 1, 1, 0)])
    assert misordered_final(other, _final_of(other)) == []


def test_nonmonotonic_polls_only_within_a_session():
    reads = [Read("c1", 0, 0, 5, b""), Read("c1", 0, 0, 6, b""), Read("c1", 1, 0, 3, b""),  # new session: ok
             Read("c1", 1, 0, 4, b""), Read("c1", 1, 0, 4, b"")]
    assert nonmonotonic_polls(reads) == [(reads[3], reads[4])]
    assert nonmonotonic_polls([Read("c1", 0, 0, 2, b""), Read("c2", 0, 0, 1, b"")]) == []


def test_poll_skips_are_jumps_over_records_the_final_read_holds():
    final = {0: [(0, b"a"), (1, b"b"), (3, b"c"), (4, b"d"), (7, b"e")]}
    reads = [Read("c", 0, 0, 0, b"a"), Read("c", 0, 0, 1, b"b"), Read("c", 0, 0, 3, b"c"),  # 2: no record
             Read("c", 0, 0, 7, b"e"),  # skips 4
             Read("c", 1, 0, 4, b"d")]  # a new session may start anywhere
    assert poll_skips(reads, final) == [(reads[2], reads[3], 1)]


def test_vanished_is_a_read_the_final_read_does_not_hold():
    final = {0: [(0, b"a"), (1, b"b")]}
    reads = [Read("c", 0, 0, 0, b"a"), Read("c", 0, 0, 1, b"x"), Read("c", 0, 0, 2, b"c")]
    assert vanished(reads, final) == reads[1:]


def test_commits_backwards_per_consumer_and_observed():
    commits = [Commit("c1", 0, 5), Commit("c2", 0, 3), Commit("c1", 0, 7), Commit("c1", 1, 2), Commit("c1", 0, 6)]
    assert commits_backwards(commits) == [(commits[2], commits[4])]
    assert commits_backwards(commits, per_consumer=False) == [(commits[0], commits[1]), (commits[2], commits[4])]


def test_replica_divergence():
    assert replica_divergence({0: {1: b"ab", 2: b"ab", 3: b"ab"}, 1: {1: b"x"}}) == {}
    assert replica_divergence({0: {1: b"ab", 2: b"ac"}}) == {0: {1: 2, 2: 2}}


def _batch(base: int, n: int, payload: bytes = b"") -> bytes:
    body = struct.pack(">ibIhi", 0, 2, 0, 0, n - 1) + payload  # epoch, magic, crc, attributes, lastOffsetDelta
    return struct.pack(">qi", base, len(body)) + body


def test_batches_upto_cuts_at_whole_batches_below_the_high_watermark(tmp_path):
    seg0 = _batch(0, 3, b"aaa") + _batch(3, 2, b"bb")
    seg1 = _batch(5, 1, b"c") + _batch(6, 4, b"dddd")
    assert batches_upto(seg0, 5) == seg0
    assert batches_upto(seg0, 4) == _batch(0, 3, b"aaa")  # the batch 3..4 straddles hw 4
    assert batches_upto(seg0 + seg0[:20], 99) == seg0  # a torn tail ends the scan
    d = tmp_path / "t-0"
    d.mkdir()
    (d / f"{0:020d}.log").write_bytes(seg0)
    (d / f"{5:020d}.log").write_bytes(seg1)
    (d / f"{0:020d}.index").write_bytes(b"junk")
    assert log_bytes_upto(d, 6) == seg0 + _batch(5, 1, b"c")
    assert log_bytes_upto(d, 5) == seg0
    assert log_bytes_upto(d, 100) == seg0 + seg1


def test_table_and_row():
    r = check(History(acks=ACKS, final=_final_of(ACKS)))
    assert row(3, 7, [r, r]) == (3, 7, 10, 0, 0, 0)
    assert table([row(3, 7, [r])]).splitlines()[2] == "|         3 |      7 |     5 |    0 |          0 |          0 |"


# -- properties ------------------------------------------------------------------------------------

@st.composite
def histories(draw):
    """Producers sending seq 0.. each to partitions of their choice; offsets assigned per
    partition in an interleaving order drawn by Hypothesis (as a broker appends them)."""
    n_parts = draw(st.integers(1, 3))
    sends = draw(st.lists(st.tuples(st.sampled_from(["p1", "p2", "p3"]), st.integers(0, n_parts - 1)),
                          min_size=1, max_size=40))
    seqs: dict[str, int] = {}
    next_offset = [0] * n_parts
    acks = []
    for producer, part in sends:
        seq = seqs.get(producer, 0)
        seqs[producer] = seq + 1
        acks.append(Ack(producer, seq, part, next_offset[part], f"{producer}:{seq}".encode()))
        next_offset[part] += draw(st.integers(1, 3))  # offsets may be sparse (batches, markers)
    return acks


@given(histories())
def test_property_faithful_histories_pass(acks):
    reads = [Read("c", 0, a.partition, a.offset, a.value) for a in sorted(acks, key=lambda a: a.offset)]
    assert check(History(acks=acks, reads=reads, final=_final_of(acks))).ok


@given(histories(), st.data())
def test_property_dropping_records_is_exactly_lost(acks, data):
    dropped = set(data.draw(st.sets(st.sampled_from(range(len(acks))))))
    final = _final_of([a for i, a in enumerate(acks) if i not in dropped])
    assert sorted(lost(acks, final), key=acks.index) == [acks[i] for i in sorted(dropped)]
    assert duplicated(final) == {} and misordered_final(acks, final) == []


@given(histories(), st.data())
def test_property_duplicating_a_record_is_caught(acks, data):
    a = data.draw(st.sampled_from(acks))
    final = _final_of(acks)
    final[a.partition].append((max(o for o, _ in final[a.partition]) + 1, a.value))
    assert list(duplicated(final)) == [a.value] and lost(acks, final) == []


@given(histories(), st.data())
def test_property_swapping_two_of_a_producers_records_is_misordered(acks, data):
    pairs = [(x, y) for x in acks for y in acks
             if x.producer == y.producer and x.partition == y.partition and x.seq < y.seq]
    if not pairs:
        return
    x, y = data.draw(st.sampled_from(pairs))
    swapped = [Ack(a.producer, a.seq, a.partition, y.offset if a is x else x.offset if a is y else a.offset, a.value)
               for a in acks]
    assert misordered_final(acks, _final_of(swapped))
    assert lost(acks, _final_of(swapped)) == []


def test_a_follower_told_again_and_again_that_it_diverges_is_spinning():
    from faults.run import spinning

    line = "2026-11-28 22:38:52,526 INFO shoal.replica.fetcher: {p}: log diverges from leader 3 (its epoch 0 ends at 5): truncating 5 -> 5\n"
    logs = {1: line.format(p="t-0") * 21 + line.format(p="t-1") * 2, 2: line.format(p="t-0") * 20}
    assert spinning(logs) == {(1, "t-0"): 21}  # once or twice per leadership change is normal
    assert spinning(logs, most=1) == {(1, "t-0"): 21, (1, "t-1"): 2, (2, "t-0"): 20}
