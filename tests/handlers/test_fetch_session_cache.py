"""The fetch-session cache's fair share between tenants (``FetchSessionCache``, KIP-227): exact
cases of its max-min policy and a property that a scope under its share is never evicted."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.handlers.fetch import FetchSessionCache

A, B, C, OP = ("lkc-aaaaaa", "User:a"), ("lkc-bbbbbb", "User:b"), ("lkc-cccccc", "User:c"), (None, "User:op")


def test_one_tenant_cannot_evict_another():
    """Issue 24: 1,100 sessions of one tenant evicted another's from the one cache of 1,000."""
    cache = FetchSessionCache(1000)
    theirs = [cache.new(B).session_id for _ in range(50)]
    mine = [cache.new(A).session_id for _ in range(1100)]
    assert len(cache) == 1000
    assert all(cache.get(sid) is not None for sid in theirs)
    assert cache.count(A) == 950 and cache.count(B) == 50
    # A recycled its own least recently used sessions
    assert cache.get(mine[0]) is None and cache.get(mine[-1]) is not None


def test_a_scope_alone_uses_the_whole_cache_and_shares_converge():
    cache = FetchSessionCache(12)
    for _ in range(12):
        cache.new(A)
    assert cache.count(A) == 12  # work-conserving: no other scope wants any
    for _ in range(20):
        cache.new(B)
    assert (cache.count(A), cache.count(B)) == (6, 6)
    for _ in range(20):
        cache.new(OP)  # the physical view (the followers' sessions too) is a scope like the others
    assert (cache.count(A), cache.count(B), cache.count(OP)) == (4, 4, 4)
    cache.new(C)  # a newcomer takes from the largest (of equals, the one that came first)
    assert sorted((cache.count(A), cache.count(B), cache.count(OP), cache.count(C))) == [1, 3, 4, 4]


def test_removed_and_zero_slots():
    cache = FetchSessionCache(2)
    s = cache.new(A)
    cache.remove(s.session_id)
    cache.remove(s.session_id)
    assert len(cache) == 0 and cache.count(A) == 0
    none = FetchSessionCache(0)
    assert none.get(none.new(A).session_id) is None and len(none) == 0  # sessionless, as Kafka


@settings(deadline=None, max_examples=200)
@given(st.lists(st.sampled_from("ABCO"), max_size=300), st.integers(1, 40))
def test_a_scope_under_its_share_keeps_its_sessions(creators, slots):
    """Property: the cache never holds more than its slots, and a new session of one scope never
    evicts a session of another scope that holds fewer than the new session's scope."""
    owners = {"A": A, "B": B, "C": C, "O": OP}
    cache = FetchSessionCache(slots)
    for who in creators:
        before = {k: cache.count(o) for k, o in owners.items()}
        cache.new(owners[who])
        after = {k: cache.count(o) for k, o in owners.items()}
        assert len(cache) <= slots
        for k in owners:
            if k != who and after[k] < before[k]:
                assert before[k] >= before[who], (who, k, before)
