"""Automatic observer promotion, the pure policy (``shoal.placement.promotion``): exact examples for each
of Confluent's policies and Hypothesis properties (never more observers than needed promoted, none
that is not caught up, demotion never below min.insync.replicas, the rule accepts what the leader
proposes)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.placement.promotion import observer_isr, promotion_allowed, promotion_policy, promotions_needed

# the drill (b) layout: 2 sync + 1 observer per DC; dc1 = 1, 2 (+5), dc2 = 3, 4 (+6)
SYNC, OBS = (1, 2, 3, 4), (5, 6)


def decide(policy, isr, caught_up=(), leader=None, min_isr=3, sync=SYNC, obs=OBS):
    return observer_isr(policy, isr=isr, sync_replicas=sync, observers=obs, caught_up=set(caught_up),
                        leader=isr[0] if leader is None else leader, min_isr=min_isr)


def test_under_min_isr_promotes_exactly_what_is_missing():
    # dc1 lost: the ISR is dc2's two sync replicas, below min.insync.replicas=3: one observer joins
    assert decide("under-min-isr", (3, 4), caught_up={6}) == (3, 4, 6)
    assert decide("under-min-isr", (3, 4), caught_up={5, 6}) == (3, 4, 5)  # one is enough
    assert decide("under-min-isr", (3,), caught_up={5, 6}) == (3, 5, 6)  # two missing, two join
    assert decide("under-min-isr", (3, 4), caught_up=()) is None  # no observer caught up: none joins
    assert decide("under-min-isr", (3, 4, 1), caught_up={5, 6}) is None  # min ISR holds
    assert decide("under-min-isr", (3, 4), caught_up={1, 6}) is None  # sync replica 1 rejoins first


def test_under_min_isr_demotes_once_the_sync_replicas_are_back():
    assert decide("under-min-isr", (3, 4, 6, 1), caught_up=()) == (3, 4, 1)
    assert decide("under-min-isr", (3, 4, 6)) is None  # still needed
    assert decide("under-min-isr", (3, 5, 6, 4)) == (3, 5, 4)  # one of two goes, the last promoted
    assert decide("under-min-isr", (3, 5, 6, 4, 1)) == (3, 4, 1)


def test_under_replicated_stands_in_for_every_missing_sync_replica():
    assert decide("under-replicated", (1, 2, 3), caught_up={5, 6}, min_isr=2) == (1, 2, 3, 5)
    assert decide("under-replicated", (1, 2), caught_up={5, 6}, min_isr=2) == (1, 2, 5, 6)
    assert decide("under-replicated", (1, 2, 3, 4), caught_up={5, 6}, min_isr=2) is None
    assert decide("under-replicated", (1, 2, 5, 6, 3), min_isr=2) == (1, 2, 5, 3)
    # min.insync.replicas above the sync replicas: observers fill up to it and stay
    assert decide("under-replicated", (1, 2), caught_up={3}, sync=(1, 2), obs=(3,), min_isr=3) == (1, 2, 3)
    assert decide("under-replicated", (1, 2, 3), sync=(1, 2), obs=(3,), min_isr=3) is None


def test_leader_is_observer_and_version_1_promote_nothing():
    assert decide("leader-is-observer", (3, 4), caught_up={5, 6}) is None
    assert decide(None, (3, 4), caught_up={5, 6}) is None
    # version 1 with an observer in the ISR (written under a v2 placement, since changed): it may go
    # only while the ISR keeps min.insync.replicas
    assert decide(None, (3, 4, 6), min_isr=3) is None
    assert decide(None, (3, 4, 6, 1), min_isr=3) == (3, 4, 1)
    # the policy's one case: an observer leads (Shoal never elects one outside the ISR)
    assert decide("leader-is-observer", (6, 3), caught_up={5}, leader=6) == (6, 3, 5)


def test_the_leader_is_never_demoted():
    assert decide("under-min-isr", (6, 1, 2, 3), leader=6) is None


def test_rule_accepts_only_what_is_needed():
    kw = dict(sync_replicas=SYNC, observers=OBS, leader=3, min_isr=3)
    assert promotion_allowed("under-min-isr", old_isr=(3, 4), new_isr=(3, 4, 6), **kw)
    assert not promotion_allowed("under-min-isr", old_isr=(3, 4), new_isr=(3, 4, 5, 6), **kw)
    assert not promotion_allowed("under-min-isr", old_isr=(3, 4, 1), new_isr=(3, 4, 1, 6), **kw)
    assert not promotion_allowed(None, old_isr=(3, 4), new_isr=(3, 4, 6), **kw)
    assert not promotion_allowed("leader-is-observer", old_isr=(3, 4), new_isr=(3, 4, 6), **kw)
    # an observer promoted earlier stays while a sync replica rejoins; demotion is always allowed
    assert promotion_allowed("under-min-isr", old_isr=(3, 4, 6), new_isr=(3, 4, 6, 1), **kw)
    assert promotion_allowed(None, old_isr=(3, 4, 6, 1), new_isr=(3, 4, 1), **kw)


def test_policy_from_the_placement_json():
    v2 = '{"version":2,"replicas":[{"count":2,"constraints":{"rack":"dc1"}}],' \
         '"observers":[{"count":1,"constraints":{"rack":"dc2"}}]}'
    assert promotion_policy(v2) == "under-min-isr"  # version 2's default
    assert promotion_policy(v2.replace("}]}", '}],"observerPromotionPolicy":"under-replicated"}')) == "under-replicated"
    assert promotion_policy(v2.replace('"version":2', '"version":1')) is None
    assert promotion_policy("") is None and promotion_policy("{not json") is None


@st.composite
def situations(draw):
    n_sync = draw(st.integers(1, 5))
    n_obs = draw(st.integers(1, 4))
    sync = tuple(range(1, n_sync + 1))
    obs = tuple(range(n_sync + 1, n_sync + n_obs + 1))
    leader = draw(st.sampled_from(sync))
    others = [r for r in sync + obs if r != leader]
    members = draw(st.lists(st.sampled_from(others), unique=True)) if others else []
    isr = (leader, *members)
    outside = [r for r in sync + obs if r not in isr]
    caught_up = set(draw(st.lists(st.sampled_from(outside), unique=True))) if outside else set()
    min_isr = draw(st.integers(1, n_sync + n_obs))
    policy = draw(st.sampled_from(["under-min-isr", "under-replicated", "leader-is-observer", None]))
    return policy, isr, sync, obs, caught_up, leader, min_isr


@settings(max_examples=400, deadline=None)
@given(situations())
def test_properties(s):
    policy, isr, sync, obs, caught_up, leader, min_isr = s
    new = observer_isr(policy, isr=isr, sync_replicas=sync, observers=obs, caught_up=caught_up,
                       leader=leader, min_isr=min_isr)
    if new is None:
        return
    assert leader in new and len(set(new)) == len(new)
    assert [r for r in new if r in sync] == [r for r in isr if r in sync]  # sync members untouched
    before = [r for r in isr if r in obs]
    after = [r for r in new if r in obs]
    needed = promotions_needed(policy, isr=isr, sync_replicas=sync, observers=obs, leader=leader, min_isr=min_isr)
    if len(after) > len(before):  # a promotion
        assert len(after) <= needed  # never more than needed
        assert set(after) - set(before) <= caught_up  # only caught-up observers
        assert not any(r in caught_up for r in sync if r not in isr)  # a caught-up sync replica first
        assert policy in ("under-min-isr", "under-replicated")  # never for leader-is-observer here
        assert promotion_allowed(policy, old_isr=isr, new_isr=new, sync_replicas=sync, observers=obs,
                                 leader=leader, min_isr=min_isr)  # the rule accepts the leader's proposal
    else:  # a demotion: the ISR stays at min.insync.replicas or above without them
        assert len(after) < len(before) and len(new) >= min_isr
        assert len(after) >= min(needed, len(before))
        assert set(new) <= set(isr)


@pytest.mark.parametrize("policy", ["under-min-isr", "under-replicated"])
def test_promote_then_recover_then_demote_is_stable(policy):
    isr = decide(policy, (3, 4), caught_up={5, 6}, min_isr=3)
    assert isr is not None and len(isr) >= 3
    assert decide(policy, isr, caught_up=(), min_isr=3) is None
    back = isr + (1, 2)
    demoted = decide(policy, back, min_isr=3)
    assert demoted == (3, 4, 1, 2)
    assert decide(policy, demoted, caught_up={5, 6}, min_isr=3) is None  # no flapping back in


@st.composite
def elections(draw):
    from shoal.metadata import PartitionInfo

    n_sync, n_obs = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    sync = list(range(1, n_sync + 1))
    obs = list(range(n_sync + 1, n_sync + n_obs + 1))
    isr = draw(st.lists(st.sampled_from(sync + obs), unique=True, min_size=1))
    leader = draw(st.sampled_from(isr + [-1]))
    alive = set(draw(st.lists(st.sampled_from(sync + obs), unique=True)))
    p = PartitionInfo(0, tuple(sync + obs), tuple(isr), leader, observers=tuple(obs))
    return p, alive, draw(st.booleans()), draw(st.booleans())


@settings(max_examples=400, deadline=None)
@given(elections())
def test_an_observer_leads_only_when_promoted_or_the_policy_allows(e):
    from shoal.cluster.controller import elect

    p, alive, unclean, observer_may_lead = e
    chosen = elect(p, alive, unclean, observer_may_lead)
    if chosen is None or chosen[0] < 0:
        return
    leader = chosen[0]
    assert leader in alive
    if leader in p.observers:
        if leader in p.isr:  # promoted: only when no sync ISR member is alive, or it led already
            assert leader == p.leader or not any(r in alive for r in p.isr if r not in p.observers)
        else:  # outside the ISR: an unclean election under leader-is-observer with no sync replica alive
            assert unclean and observer_may_lead and not any(r in alive for r in p.sync_replicas)
