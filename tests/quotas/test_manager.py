"""The client quota managers on a ManualClock and hand-made metadata images: Kafka's exact
throttle examples and its precedence test through the manager, tenant scoping and slices,
dynamic quotas, fetch caps and sensor expiry."""

from __future__ import annotations

import uuid
from types import MappingProxyType

import pytest

from shoal.clock import ManualClock
from shoal.config import BrokerConfig
from shoal.metadata import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from shoal.quotas.manager import ClientQuotaManager, QuotaManagers, QuotaType, client_throttles

D = None  # the <default> entity name


def image(quotas: dict, *, topics: dict | None = None, brokers: tuple[int, ...] = (1,),
          user_tenants: dict | None = None) -> MetadataImage:
    topics = topics or {}
    return MetadataImage(
        cluster_id="c", controller_id=1,
        brokers={b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in brokers},
        topics=topics, topics_by_id={t.topic_id: t for t in topics.values()}, broker_configs={},
        client_quotas=MappingProxyType({tuple(sorted(e)): MappingProxyType(v) for e, v in quotas.items()}),
        user_tenants=user_tenants or {},
    )


def topic(name: str, leaders: list[int]) -> TopicInfo:
    parts = tuple(PartitionInfo(i, (leader,), (leader,), leader) for i, leader in enumerate(leaders))
    return TopicInfo(name, uuid.uuid4(), parts)


def produce_manager(quotas: dict, *, pacing: bool = False, **kw) -> ClientQuotaManager:
    m = ClientQuotaManager(QuotaType.PRODUCE, node_id=1, pacing=pacing)
    m.update(image(quotas, **kw))
    return m


@pytest.mark.parametrize("pacing", [False, True])
def test_issue_example_2100_ms_through_the_manager(pacing: bool) -> None:
    """ClientQuotaManagerTest.testQuotaViolation: default client-id quota 500 B/s, 400 B each
    second for 10 s, then 2,300 B at +500 ms -> Kafka's throttle is 2,100 ms; throttled until the
    burst sample expires. With smoothing the pacer asks for 3,600 ms there (the applied throttle,
    ``record_and_get_throttle_ms``), Kafka's value is still 2,100 ms."""
    clock = ManualClock()
    m = produce_manager({(("client-id", D),): {"producer_byte_rate": 500}}, pacing=pacing)

    def record(value: int) -> tuple[int, int]:
        return m.record(None, "ANONYMOUS", "unknown", value, clock.now_ms())

    for _ in range(10):
        assert record(400) == (0, 0)
        clock.sleep(1.0)
    clock.sleep(0.5)
    assert record(2300) == (2100, 3600 if pacing else 0)
    clock.sleep(3.6 if pacing else 2.1)
    for _ in range(10):
        record(400)
        clock.sleep(1.0)
    assert m.record_and_get_throttle_ms(None, "ANONYMOUS", "unknown", 0, clock.now_ms()) == 0


def test_request_quota_example_210_ms_and_one_window_cap() -> None:
    """ClientRequestQuotaManagerTest.testRequestPercentageQuotaViolation through the broker's
    managers: request_percentage 1 (10 ms of a thread per second)."""
    clock = ManualClock()
    q = QuotaManagers(BrokerConfig.load(None, {}), node_id=1)
    q.update(image({(("client-id", D),): {"request_percentage": 1.0}}))

    def record(ms: float) -> int:
        return q.record_request_time(None, "ANONYMOUS", "test-client", 3, round(ms * 1_000_000), clock.now_ms())

    for _ in range(10):
        assert record(4) == 0
        clock.sleep(1.0)
    clock.sleep(0.5)
    throttle = record(67.1)
    assert throttle == 210
    clock.sleep(throttle / 1000)
    for _ in range(11):
        record(4)
        clock.sleep(1.0)
    assert record(0) == 0
    assert record(500) == 1000  # capped at one quota window
    # Exempt APIs (ApiVersions here) are recorded apart and never throttled.
    assert q.record_request_time(None, "ANONYMOUS", "test-client", 18, 10**10, clock.now_ms()) == 0
    assert q.exempt_sensor.rate.measure(clock.now_ms()) > 0


def test_kafka_quota_config_precedence() -> None:
    """ClientQuotaManagerTest.testQuotaConfigPrecedence, value for value (pacing off: the test
    bursts quota.window.num windows at once into fresh sensors)."""
    clock = ManualClock()
    quotas = {
        (("user", D),): 1000,
        (("client-id", D),): 2000,
        (("user", D), ("client-id", D)): 3000,
        (("user", "userA"),): 4000,
        (("user", "userA"), ("client-id", "client1")): 5000,
        (("user", "userB"),): 6000,
        (("user", "userB"), ("client-id", "client1")): 7000,
        (("user", "userB"), ("client-id", D)): 8000,
        (("user", "userC"),): 10000,
        (("client-id", "client1"),): 9000,
    }
    m = ClientQuotaManager(QuotaType.PRODUCE, node_id=1, pacing=False)

    def set_quotas() -> None:
        m.update(image({e: {"producer_byte_rate": v} for e, v in quotas.items()}))

    def check(user: str, client: str, bound: float, value: int, throttled: bool) -> None:
        assert m.quota(None, user, client) == (bound, None)
        who = (None, user, client, clock.now_ms())
        assert m.max_value_in_quota_window(*who) == bound * 10
        throttle = m.record_and_get_throttle_ms(None, user, client, value * 11, clock.now_ms())
        assert (throttle > 0) == throttled, (user, client, throttle)

    set_quotas()
    check("userA", "client1", 5000, 4500, False)  # <user, client> over <user>
    check("userA", "client2", 4000, 4500, True)  # <user> over <client> and defaults
    check("userA", "client3", 4000, 0, True)  # <user> quota shared across the user's clients
    check("userA", "client1", 5000, 0, False)  # <user, client> is exclusive
    check("userB", "client1", 7000, 8000, True)
    check("userB", "client2", 8000, 7000, False)  # default per-client quota, exclusive
    check("userB", "client3", 8000, 7000, False)
    check("userD", "client1", 3000, 3500, True)  # default <user, client>
    check("userD", "client2", 3000, 2500, False)
    check("userE", "client1", 3000, 2500, False)
    del quotas[(("user", D), ("client-id", D))]
    set_quotas()
    check("userD", "client1", 1000, 0, False)  # metric tags changed: a new sensor
    check("userE", "client4", 1000, 1500, True)
    check("userF", "client4", 1000, 800, False)  # default <user> shared across the user's clients
    check("userF", "client5", 1000, 800, True)
    del quotas[(("user", D),)]
    set_quotas()
    check("userF", "client4", 2000, 0, False)  # default <client-id> shared across users
    check("userF", "client5", 2000, 0, False)
    check("userF", "client5", 2000, 2500, True)
    check("userG", "client5", 2000, 0, True)
    quotas[(("user", "userA"),)] = 8000
    quotas[(("user", "userA"), ("client-id", "client1"))] = 10000
    set_quotas()
    check("userA", "client2", 8000, 0, False)
    check("userA", "client2", 8000, 4500, True)  # the new value and the earlier ones add up
    check("userA", "client1", 10000, 0, False)
    check("userA", "client1", 10000, 6000, True)
    del quotas[(("user", "userA"), ("client-id", "client1"))]
    set_quotas()
    check("userA", "client6", 8000, 0, True)  # the shared user quota
    quotas[(("user", "userA"), ("client-id", "client6"))] = 11000
    set_quotas()
    check("userA", "client6", 11000, 8500, False)
    quotas[(("user", "userA"), ("client-id", D))] = 12000
    del quotas[(("user", "userA"), ("client-id", "client6"))]
    set_quotas()
    check("userA", "client6", 12000, 4000, True)


def test_client_id_quotas_are_scoped_to_their_tenant() -> None:
    """Tenant A's client-id "app" quota applies to A's "app" only: not to B's "app", not to a
    physical-view "app"; the physical "app" quota applies to the physical view only."""
    m = produce_manager({
        (("client-id", "app"), ("tenant", "lkc-aaaaaa")): {"producer_byte_rate": 100},
        (("client-id", "app"),): {"producer_byte_rate": 300},
        (("tenant", "lkc-bbbbbb"), ("user", D)): {"producer_byte_rate": 200},
    })
    assert m.quota("lkc-aaaaaa", "alice", "app") == (100, None)
    assert m.quota("lkc-bbbbbb", "bob", "app") == (200, None)
    assert m.quota("lkc-cccccc", "carol", "app") == (None, None)
    assert m.quota(None, "ANONYMOUS", "app") == (300, None)
    # Separate sensors: A's usage does not throttle B.
    now = 1_700_000_000_000
    assert m.record_and_get_throttle_ms("lkc-aaaaaa", "alice", "app", 5000, now) > 0
    assert m.record_and_get_throttle_ms("lkc-bbbbbb", "bob", "app", 1000, now) == 0


def test_tenant_quota_is_sliced_over_leaders_and_the_larger_throttle_wins() -> None:
    tid = "lkc-aaaaaa"
    quotas = {(("tenant", tid),): {"producer_byte_rate": 1000}, (("tenant", D),): {"producer_byte_rate": 50}}
    # Our node (1) and node 2 lead the tenant's partitions: each gets half.
    m = produce_manager(quotas, topics={f"{tid}_t": topic(f"{tid}_t", [1, 2, 1])}, brokers=(1, 2, 3))
    assert m.quota(tid, "alice", "c") == (None, 500)
    assert m.tenant_quota(tid) == 500
    assert m.quota("lkc-bbbbbb", "bob", "c") == (None, 50)  # the tenant default, no leaders: whole
    # One node, no topics yet: the whole quota.
    assert produce_manager(quotas).quota(tid, "alice", "c") == (None, 1000)
    # Client and tenant bounds together: the larger throttle.
    m = produce_manager({**quotas, (("tenant", tid), ("user", "alice")): {"producer_byte_rate": 2000}})
    now = 1_700_000_000_000
    assert m.quota(tid, "alice", "c") == (2000, 1000)
    throttle = m.record_and_get_throttle_ms(tid, "alice", "c", 15_000, now)
    # tenant: 15000 B over a padded 10 s = 1500 B/s > 1000: (1500-1000)/1000*10000 = 5000 ms
    assert throttle == 5000
    # Another user of the tenant shares the tenant sensor.
    assert m.record_and_get_throttle_ms(tid, "bob", "c", 0, now) == 5000


def test_dynamic_tenant_quota_lowers_the_bound() -> None:
    tid = "lkc-aaaaaa"
    m = produce_manager({(("tenant", tid),): {"producer_byte_rate": 1000}})
    m.set_dynamic_tenant_quota(tid, 400)
    assert m.quota(tid, "u", "c") == (None, 400)
    m.set_dynamic_tenant_quota(tid, 5000)  # never above the configured slice
    assert m.quota(tid, "u", "c") == (None, 1000)
    m.set_dynamic_tenant_quota("lkc-bbbbbb", 300)  # a tenant without a configured quota
    assert m.quota("lkc-bbbbbb", "u", "c") == (None, 300)
    m.set_dynamic_tenant_quota(tid, None)
    assert m.quota(tid, "u", "c") == (None, 1000)
    now = 1_700_000_000_000
    m.record(tid, "u", "c", 700, now)
    assert m.tenant_usage(now)[tid] == (700.0, now)  # 700 B in the first window: not padded
    m.record(tid, "u", "c", 1400, now + 2500)
    assert m.tenant_usage(now + 3000)[tid] == (700.0, now + 2500)  # 2100 B over the 3 s covered


def greedy(m, tenant: str, start_ms: int, seconds: int, chunk: int) -> list[int]:
    """A client that sends ``chunk`` bytes whenever it is not muted: bytes sent per second."""
    sent = [0] * seconds
    muted_until = start_ms
    for now in range(start_ms, start_ms + seconds * 1000):
        if now >= muted_until:
            sent[(now - start_ms) // 1000] += chunk
            muted_until = now + m.record_and_get_throttle_ms(tenant, "u", "c", chunk, now)
    return sent


def test_a_dynamic_quota_is_paced_at_once_without_the_windows_memory() -> None:
    """Cut from 8000 to 2000 B/s after 3 s at 8000 B/s, a greedy client runs at 2000 B/s from the
    next second on. Checked against the 11 s window, the 24,000 B sent under the old quota would
    mute it for seconds (Kafka: (O - T) / T x W)."""
    tid = "lkc-aaaaaa"
    m = produce_manager({(("tenant", tid),): {"producer_byte_rate": 8000}}, pacing=True)
    now = 1_700_000_000_000
    assert greedy(m, tid, now, 3, 100)[1:] == [8000, 8000]
    m.set_dynamic_tenant_quota(tid, 2000)
    assert m.quota(tid, "u", "c") == (None, 2000)
    sent = greedy(m, tid, now + 3000, 10, 100)
    assert sent[1:] == [2000] * 9, sent
    assert sum(sent) <= 2000 * 10 + 2000  # at most one window of the cap ahead
    # request time has no pacer: there the dynamic quota lowers Kafka's (bounded) bound
    r = ClientQuotaManager(QuotaType.REQUEST, node_id=1)
    r.update(image({(("tenant", tid),): {"request_percentage": 50}}))
    r.set_dynamic_tenant_quota(tid, 20)
    assert r.quota(tid, "u", "c") == (None, 20)
    assert r._handle(tid, "u", "c").tenant.cap is None


def test_tenants_muted_since_names_tenants_held_by_their_bound() -> None:
    m = produce_manager({(("tenant", "lkc-aaaaaa"),): {"producer_byte_rate": 1000},
                         (("tenant", "lkc-bbbbbb"),): {"producer_byte_rate": 1000}}, pacing=True)
    now = 1_700_000_000_000
    # a tenant's pacer starts empty and fills to a quarter window (250 B) at 1000 B/s
    assert m.record("lkc-aaaaaa", "u", "c", 0, now - 1000) == (0, 0)
    assert m.record("lkc-aaaaaa", "u", "c", 250, now) == (0, 0)  # within
    _, pacing_ms = m.record("lkc-bbbbbb", "u", "c", 3000, now)  # 3000 B from an empty pacer
    assert pacing_ms == 3000
    assert m.tenants_muted_since(now) == {"lkc-bbbbbb"}
    assert m.tenants_muted_since(now + 2999) == {"lkc-bbbbbb"}
    assert m.tenants_muted_since(now + 3000) == set()


def test_fetch_cap_and_unrecord() -> None:
    """getMaxValueInQuotaWindow: quota x (samples - 1) windows; a throttled fetch's bytes are
    taken back, so a refetch is measured as if it had not happened."""
    m = ClientQuotaManager(QuotaType.FETCH, node_id=1, pacing=False)
    m.update(image({(("user", "u"),): {"consumer_byte_rate": 1000}}))
    now = 1_700_000_000_000
    assert m.max_value_in_quota_window(None, "u", "c", now) == 10_000
    quota_ms, _ = m.record(None, "u", "c", 12_000, now)
    assert quota_ms == 2000
    m.unrecord(None, "u", "c", 12_000, now)
    assert m.record(None, "u", "c", 9_000, now) == (0, 0)


def test_idle_sensors_expire() -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE, node_id=1, expiration_ms=60_000)
    m.update(image({}))
    now = 1_700_000_000_000
    m.record(None, "a", "c1", 10, now)
    m.record("lkc-aaaaaa", "b", "c2", 10, now)
    assert len(list(m.client_sensors())) == 2 and len(list(m.tenant_sensors())) == 1
    m.record(None, "a", "c1", 10, now + 50_000)
    m.sweep(now + 70_000)
    assert [k for k, _ in m.client_sensors()] == [(None, "", "c1")]
    assert list(m.tenant_sensors()) == []


def test_quotas_enabled_only_when_configured() -> None:
    """Kafka's quotasEnabled: without any quota of the type nothing needs recording."""
    q = QuotaManagers(BrokerConfig.load(None, {}), node_id=1)
    q.update(image({(("user", "u"),): {"consumer_byte_rate": 10}}))
    assert (q.produce.active, q.fetch.active, q.request.active) == (False, True, False)
    q.set_record_usage(True)
    assert q.produce.active and q.request.active


@pytest.mark.parametrize("key,version,expected", [
    (0, 5, False), (0, 6, True), (1, 7, False), (1, 8, True), (3, 5, False), (3, 6, True),
    (48, 1, False), (49, 1, False), (44, 0, True), (18, 2, True),
])
def test_kip_219_who_throttles(key: int, version: int, expected: bool) -> None:
    """Kafka's shouldClientThrottle: Produce v6+, Fetch v8+, Metadata v6+; the client quota APIs
    never (the broker delays their responses)."""
    assert client_throttles(key, version) is expected
