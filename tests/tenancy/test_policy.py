"""The per-tenant create-topic policy, pure: every limit exactly at and past its edge, the policy
document's validation, and Hypothesis properties (no policy allows all; looser never refuses more)."""

from __future__ import annotations

import uuid
from types import MappingProxyType

import pytest
from hypothesis import given, strategies as st

from shoal.metadata import MetadataImage, PartitionInfo, TopicInfo
from shoal.tenancy.policy import (
    CreateRequest,
    TenantState,
    check_create,
    check_partitions,
    tenant_state,
    validate_policy,
)


def req(name="orders", partitions=3, rf=1, **configs) -> CreateRequest:
    return CreateRequest(name, partitions, rf, {k.replace("_", "."): v for k, v in configs.items()})


def test_no_policy_allows_anything():
    assert check_create({}, TenantState(10**6, 10**9), req(partitions=10**5, rf=9)) is None
    assert check_partitions({}, TenantState(0, 0), "t", 1, 10**5) is None


@pytest.mark.parametrize("policy, state, request_, key", [
    ({"max.partitions.per.topic": 3}, TenantState(), req(partitions=4), "max.partitions.per.topic"),
    ({"max.partitions": 10}, TenantState(2, 8), req(partitions=3), "max.partitions"),
    ({"max.topics": 2}, TenantState(2, 2), req(), "max.topics"),
    ({"topic.name.prefix": "team-a."}, TenantState(), req(name="orders"), "topic.name.prefix"),
    ({"allowed.configs": ["retention.ms"]}, TenantState(), req(segment_ms="1"), "allowed.configs"),
    ({"config.ranges": {"retention.ms": [1000, 5000]}}, TenantState(), req(retention_ms="999"), "config.ranges"),
    ({"config.ranges": {"retention.ms": [1000, 5000]}}, TenantState(), req(retention_ms="5001"), "config.ranges"),
    ({"config.ranges": {"retention.ms": [1000, None]}}, TenantState(), req(retention_ms="-1"), "config.ranges"),
    ({"config.ranges": {"retention.ms": [1, 2]}}, TenantState(), req(retention_ms="abc"), "config.ranges"),
    ({"min.replication.factor": 2}, TenantState(), req(rf=1), "min.replication.factor"),
    ({"max.replication.factor": 2}, TenantState(), req(rf=3), "max.replication.factor"),
])
def test_each_limit_refuses_past_its_edge(policy, state, request_, key):
    message = check_create(policy, state, request_)
    assert message is not None and f"({key})" in message


@pytest.mark.parametrize("policy, state, request_", [
    ({"max.partitions.per.topic": 3}, TenantState(), req(partitions=3)),
    ({"max.partitions": 10}, TenantState(2, 7), req(partitions=3)),
    ({"max.topics": 3}, TenantState(2, 2), req()),
    ({"topic.name.prefix": "team-a."}, TenantState(), req(name="team-a.orders")),
    ({"topic.name.prefix": "payments:"}, TenantState(), req(name="payments:eu:orders")),
    ({"allowed.configs": ["retention.ms"]}, TenantState(), req(retention_ms="5")),
    ({"allowed.configs": []}, TenantState(), req()),
    ({"config.ranges": {"retention.ms": [1000, 5000]}}, TenantState(), req(retention_ms="1000")),
    ({"config.ranges": {"retention.ms": [1000, 5000]}}, TenantState(), req(retention_ms="5000")),
    ({"config.ranges": {"retention.ms": [1000, 5000]}}, TenantState(), req(segment_ms="1")),  # not ranged
    ({"config.ranges": {"min.cleanable.dirty.ratio": [0.1, 0.5]}}, TenantState(), req(min_cleanable_dirty_ratio="0.5")),
    ({"min.replication.factor": 2, "max.replication.factor": 2}, TenantState(), req(rf=2)),
])
def test_each_limit_allows_its_edge(policy, state, request_):
    assert check_create(policy, state, request_) is None


def test_messages_are_exact():
    assert check_create({"max.partitions.per.topic": 3}, TenantState(), req(partitions=4)) == (
        "Topic 'orders' would have 4 partitions; the tenant's policy allows at most 3 per topic "
        "(max.partitions.per.topic).")
    assert check_create({"max.partitions": 10}, TenantState(2, 8), req(partitions=3)) == (
        "The tenant would have 11 partitions; its policy allows at most 10 (max.partitions).")
    assert check_create({"config.ranges": {"retention.ms": [1000, None]}}, TenantState(), req(retention_ms="-1")) == (
        "Config retention.ms=-1 is outside the tenant's range [1000, inf] (config.ranges).")
    assert check_create({"allowed.configs": ["retention.ms"]}, TenantState(), req(segment_ms="1", flush_ms="2")) == (
        "Config(s) flush.ms, segment.ms may not be set on create (allowed.configs).")


def test_create_partitions_limits():
    policy = {"max.partitions.per.topic": 5, "max.partitions": 8}
    assert check_partitions(policy, TenantState(2, 4), "t", 2, 5) is None  # 4 + 3 = 7
    assert "(max.partitions.per.topic)" in check_partitions(policy, TenantState(2, 4), "t", 2, 6)
    assert "(max.partitions)" in check_partitions(policy, TenantState(2, 6), "t", 2, 5)  # 6 + 3 = 9
    # only partition limits apply to growing a topic
    assert check_partitions({"max.topics": 0, "topic.name.prefix": "x"}, TenantState(9, 9), "t", 1, 2) is None


def test_tenant_state_counts_only_the_tenants_topics():
    def topic(name, n):
        parts = tuple(PartitionInfo(i, (1,), (1,), 1) for i in range(n))
        return TopicInfo(name, uuid.uuid4(), parts, MappingProxyType({}))

    topics = {t.name: t for t in (topic("lkc-abc123_a", 3), topic("lkc-abc123_ns:b", 2), topic("lkc-zzz999_c", 7),
                                  topic("plain", 5))}
    img = MetadataImage("c", 1, {}, topics, {t.topic_id: t for t in topics.values()}, {})
    assert tenant_state(img, "lkc-abc123") == TenantState(2, 5)
    assert tenant_state(img, "lkc-nothin") == TenantState(0, 0)


@pytest.mark.parametrize("policy, fragment", [
    ([], "JSON object"),
    ({"max.partition": 3}, "unknown policy key 'max.partition'"),
    ({"max.partitions.per.topic": 0}, ">= 1"),
    ({"max.topics": -1}, ">= 0"),
    ({"max.topics": 2.5}, "integer"),
    ({"max.topics": True}, "integer"),
    ({"topic.name.prefix": ""}, "non-empty string"),
    ({"allowed.configs": "retention.ms"}, "list"),
    ({"allowed.configs": ["retention.ms", "bogus"]}, "unknown topic configs: bogus"),
    ({"config.ranges": {"cleanup.policy": [1, 2]}}, "not a numeric topic config"),
    ({"config.ranges": {"retention.ms": [1]}}, "[min, max]"),
    ({"config.ranges": {"retention.ms": [5, 1]}}, "min > max"),
    ({"config.ranges": {"retention.ms": ["1", 2]}}, "[min, max]"),
    ({"config.ranges": {"retention.ms": [float("nan"), 2]}}, "[min, max]"),
    ({"min.replication.factor": 3, "max.replication.factor": 2}, "above"),
])
def test_invalid_policies(policy, fragment):
    assert fragment in validate_policy(policy)


def test_valid_policy():
    assert validate_policy({
        "max.partitions.per.topic": 12, "max.partitions": 100, "max.topics": 10, "topic.name.prefix": "a-",
        "allowed.configs": ["retention.ms", "cleanup.policy"], "config.ranges": {"retention.ms": [1000, None]},
        "min.replication.factor": 1, "max.replication.factor": 3,
    }) is None
    assert validate_policy({}) is None


# -- properties ----------------------------------------------------------------------------------

small = st.integers(0, 50)
policies = st.fixed_dictionaries({}, optional={
    "max.partitions.per.topic": st.integers(1, 50),
    "max.partitions": small,
    "max.topics": small,
    "topic.name.prefix": st.sampled_from(["a", "ab", "b:"]),
    "allowed.configs": st.lists(st.sampled_from(["retention.ms", "segment.ms", "flush.ms"]), unique=True),
    "config.ranges": st.dictionaries(st.sampled_from(["retention.ms", "segment.ms"]),
                                     st.tuples(small, small).map(lambda t: [min(t), max(t)]), max_size=2),
    "min.replication.factor": st.integers(1, 4),
})
states = st.builds(TenantState, small, small)
requests = st.builds(
    CreateRequest,
    st.sampled_from(["a", "abc", "b:x", "x"]),
    st.integers(1, 60),
    st.integers(1, 4),
    st.dictionaries(st.sampled_from(["retention.ms", "segment.ms", "flush.ms"]), small.map(str), max_size=3),
)


@given(policies, states, requests)
def test_generated_policies_are_valid_and_each_key_alone_is_a_weaker_policy(policy, state, request_):
    assert validate_policy(policy) is None
    verdict = check_create(policy, state, request_)
    if verdict is None:
        # a policy with fewer keys never refuses what a stricter one allowed
        for key in policy:
            assert check_create({key: policy[key]}, state, request_) is None
    else:
        # the refusal names a key of the policy, and that key alone refuses too
        keys = [k for k in policy if f"({k})" in verdict]
        assert len(keys) == 1
        assert check_create({keys[0]: policy[keys[0]]}, state, request_) is not None


@given(st.integers(0, 100), st.integers(0, 100), st.integers(1, 100))
def test_max_partitions_edge(limit, have, asked):
    verdict = check_create({"max.partitions": limit}, TenantState(0, have), req(partitions=asked))
    assert (verdict is None) == (have + asked <= limit)


def test_a_stored_invalid_policy_refuses_instead_of_crashing():
    for broken in ({"max.topics": "10"}, {"config.ranges": {"retention.ms": "x"}}, {"surprise": 1}):
        assert "policy is invalid" in check_create(broken, TenantState(), req())
        assert "policy is invalid" in check_partitions(broken, TenantState(), "t", 1, 2)
