"""KIP-599 controller mutation quota manager (shoal.quotas.mutation) on a ManualClock: Kafka's
ControllerMutationQuotaManagerTest and the request-level numbers of ControllerMutationQuotaTest."""

from __future__ import annotations

import pytest

from shoal.clock import ManualClock
from shoal.quotas.entities import MUTATION_KEY
from shoal.quotas.mutation import MutationQuotaManager, RequestMutationQuota
from shoal.quotas.token_bucket import ThrottlingQuotaExceeded

USER, CLIENT = "ANONYMOUS", "test-client"


def quotas(*entries):
    """client_quotas as the metadata image keeps them: sorted ((type, name), ...) -> values."""
    return {tuple(sorted(entity)): {MUTATION_KEY: rate} for entity, rate in entries}


def test_kafka_controller_mutation_quota_violation() -> None:
    """ControllerMutationQuotaManagerTest.testControllerMutationQuotaViolation: quota 10/s on
    (user, client-id), 10 samples of 1 s (burst 100), strict requests."""
    clock = ManualClock()
    manager = MutationQuotaManager(samples=10, window_ms=1000)
    manager.update(quotas(([("user", USER), ("client-id", CLIENT)], 10.0)))

    def maybe_record(permits: float) -> int:
        quota = RequestMutationQuota(manager.new_quota_for(None, USER, CLIENT, strict=True), clock)
        try:
            quota.record(permits)
        except ThrottlingQuotaExceeded as e:
            return e.throttle_time_ms
        return 0

    for _ in range(10):  # under the quota: never throttled
        assert maybe_record(10) == 0
        clock.sleep(1)
    assert maybe_record(110) == 0  # 100 tokens: the spike is accepted (checked before recording)
    assert maybe_record(110) == 1000  # -10 tokens: rejected, 10 / 10 = 1 s
    clock.sleep(1)
    assert maybe_record(110) == 0  # back at 0 tokens: accepted again


def test_unbounded_when_no_quota_applies() -> None:
    manager = MutationQuotaManager()
    manager.update({})
    assert not manager.enabled
    assert manager.new_quota_for(None, USER, CLIENT, strict=True) == []
    manager.update(quotas(([("user", "someone-else")], 1.0)))
    assert manager.enabled
    assert manager.new_quota_for(None, USER, CLIENT, strict=False) == []
    assert [q.strict for q in manager.new_quota_for(None, "someone-else", CLIENT, strict=False)] == [False]
    assert [q.strict for q in manager.new_quota_for(None, "someone-else", CLIENT, strict=True)] == [True]
    # a physical-view entity does not apply to a tenant's principal of the same name
    assert manager.new_quota_for("lkc-aaaaaa", "someone-else", CLIENT, strict=True) == []


def test_request_numbers_of_kafka_controller_mutation_quota_test() -> None:
    """ControllerMutationQuotaTest: rate 2/s, 10 samples of 1 s (burst 20); two topics of 30
    partitions. Strict: one accepted (tokens -10), the other rejected, throttle 10 / 2 = 5 s.
    Permissive: both accepted, tokens -40, throttle 20 s. The throttle decays with time."""
    clock = ManualClock()
    manager = MutationQuotaManager(samples=10, window_ms=1000)
    manager.update(quotas(([("user", "ThrottledPrincipal")], 2.0)))

    strict = RequestMutationQuota(manager.new_quota_for(None, "ThrottledPrincipal", "c", strict=True), clock)
    strict.record(30)
    with pytest.raises(ThrottlingQuotaExceeded):
        strict.record(30)
    assert strict.is_exceeded and strict.throttle_time_ms() == 5000
    clock.sleep(5)
    retry = RequestMutationQuota(manager.new_quota_for(None, "ThrottledPrincipal", "c", strict=True), clock)
    retry.record(30)  # tokens were back at 0: accepted
    assert retry.throttle_time_ms() == 0

    clock2 = ManualClock()
    manager2 = MutationQuotaManager(samples=10, window_ms=1000)
    manager2.update(quotas(([("user", "ThrottledPrincipal")], 2.0)))
    permissive = RequestMutationQuota(manager2.new_quota_for(None, "ThrottledPrincipal", "c", strict=False), clock2)
    permissive.record(30)
    permissive.record(30)
    assert not permissive.is_exceeded and permissive.throttle_time_ms() == 20000
    clock2.sleep(5)
    assert permissive.throttle_time_ms() == 15000


def test_buckets_follow_metric_tags_and_quota_changes() -> None:
    clock = ManualClock()
    manager = MutationQuotaManager(samples=10, window_ms=1000)
    manager.update(quotas(([("user", "alice")], 1.0), ([("user", "bob"), ("client-id", None)], 1.0)))
    now = clock.now_ms()
    # a user quota is shared by all the user's client-ids
    assert manager.buckets_for(None, "alice", "c1") == manager.buckets_for(None, "alice", "c2")
    # a <user, default client-id> quota gives each client-id its own bucket
    assert manager.buckets_for(None, "bob", "c1")[0] is not manager.buckets_for(None, "bob", "c2")[0]
    [bucket] = manager.buckets_for(None, "alice", "c1")
    bucket.record(15, now)  # burst 10 -> -5 tokens
    assert bucket.throttle_time_ms(now) == 5000
    manager.update(quotas(([("user", "alice")], 5.0), ([("user", "bob"), ("client-id", None)], 1.0)))
    assert manager.buckets_for(None, "alice", "c1") == [bucket] and bucket.quota == 5.0
    assert bucket.throttle_time_ms(now) == 1000  # same tokens, refilled 5x faster
    same = manager.index
    manager.update(manager._source)  # the same mapping again: nothing recomputed
    assert manager.index is same


def test_tenant_scope_and_tenant_wide_bucket() -> None:
    """A tenant's principals use the tenant's own (user, client-id) entities and, in addition,
    the tenant-wide bucket; a strict request is refused if either is negative."""
    clock = ManualClock()
    manager = MutationQuotaManager(samples=10, window_ms=1000)
    manager.update(quotas(
        ([("tenant", "lkc-aaaaaa"), ("user", "alice")], 10.0),  # alice inside the tenant: burst 100
        ([("tenant", "lkc-aaaaaa")], 2.0),  # the tenant as a whole: burst 20
        ([("tenant", None)], 1.0),  # every other tenant: burst 10
        ([("user", "alice")], 0.5),  # the physical view's alice
    ))
    assert [b.quota for b in manager.buckets_for("lkc-aaaaaa", "alice", "c")] == [10.0, 2.0]
    assert [b.quota for b in manager.buckets_for("lkc-bbbbbb", "alice", "c")] == [1.0]  # default
    assert [b.quota for b in manager.buckets_for(None, "alice", "c")] == [0.5]

    def request(user: str) -> RequestMutationQuota:
        return RequestMutationQuota(manager.new_quota_for("lkc-aaaaaa", user, "c", strict=True), clock)

    q = request("alice")
    q.record(30)  # alice 70, tenant -10
    with pytest.raises(ThrottlingQuotaExceeded) as e:
        q.record(1)
    assert e.value.throttle_time_ms == 5000  # the tenant's bucket: 10 / 2
    alice, tenant = manager.buckets_for("lkc-aaaaaa", "alice", "c")
    assert alice.measure(clock.now_ms()) == 70 and tenant.measure(clock.now_ms()) == -10  # nothing recorded
    with pytest.raises(ThrottlingQuotaExceeded):  # bob has no quota of his own; the tenant's holds
        request("bob").record(1)
    clock.sleep(5)
    q = request("bob")
    q.record(1)
    assert q.throttle_time_ms() == 0
