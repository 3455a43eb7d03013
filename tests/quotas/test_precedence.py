"""Quota selection: every one of Kafka's eight levels, metric-tag sharing, Kafka's
ClientQuotaManagerTest.testQuotaConfigPrecedence replayed, and the tenant level."""

from __future__ import annotations

from itertools import combinations

import pytest

from shoal.quotas.precedence import (
    DEFAULT,
    QuotaEntityKey as K,
    QuotaLevel,
    candidate_entities,
    combine_throttles,
    level_of,
    metric_tags_for,
    select_quota,
    select_tenant_quota,
)
from shoal.quotas.throttle import QuotaSensor

USER, CLIENT = "alice", "app-1"

LEVEL_ENTITIES = {
    QuotaLevel.USER_CLIENT: K(USER, CLIENT),
    QuotaLevel.USER_DEFAULT_CLIENT: K(USER, DEFAULT),
    QuotaLevel.USER: K(USER, None),
    QuotaLevel.DEFAULT_USER_CLIENT: K(DEFAULT, CLIENT),
    QuotaLevel.DEFAULT_USER_DEFAULT_CLIENT: K(DEFAULT, DEFAULT),
    QuotaLevel.DEFAULT_USER: K(DEFAULT, None),
    QuotaLevel.CLIENT: K(None, CLIENT),
    QuotaLevel.DEFAULT_CLIENT: K(None, DEFAULT),
}
EXPECTED_TAGS = {
    QuotaLevel.USER_CLIENT: (USER, CLIENT),
    QuotaLevel.USER_DEFAULT_CLIENT: (USER, CLIENT),
    QuotaLevel.USER: (USER, ""),
    QuotaLevel.DEFAULT_USER_CLIENT: (USER, CLIENT),
    QuotaLevel.DEFAULT_USER_DEFAULT_CLIENT: (USER, CLIENT),
    QuotaLevel.DEFAULT_USER: (USER, ""),
    QuotaLevel.CLIENT: ("", CLIENT),
    QuotaLevel.DEFAULT_CLIENT: ("", CLIENT),
}
PATHS = {
    QuotaLevel.USER_CLIENT: "/config/users/alice/clients/app-1",
    QuotaLevel.USER_DEFAULT_CLIENT: "/config/users/alice/clients/<default>",
    QuotaLevel.USER: "/config/users/alice",
    QuotaLevel.DEFAULT_USER_CLIENT: "/config/users/<default>/clients/app-1",
    QuotaLevel.DEFAULT_USER_DEFAULT_CLIENT: "/config/users/<default>/clients/<default>",
    QuotaLevel.DEFAULT_USER: "/config/users/<default>",
    QuotaLevel.CLIENT: "/config/clients/app-1",
    QuotaLevel.DEFAULT_CLIENT: "/config/clients/<default>",
}


@pytest.mark.parametrize("level", list(QuotaLevel))
def test_each_level_alone(level: QuotaLevel) -> None:
    entity = LEVEL_ENTITIES[level]
    sel = select_quota({entity: 100.0 * level}, USER, CLIENT)
    assert sel == (100.0 * level, entity)
    value, source = sel  # unpacks as (value, entity)
    assert source.path == PATHS[level]
    assert sel.level is level and level_of(entity) is level
    assert sel.metric_tags(USER, CLIENT) == EXPECTED_TAGS[level]


@pytest.mark.parametrize("level", list(QuotaLevel))
def test_each_level_beats_every_less_specific_level(level: QuotaLevel) -> None:
    entities = {LEVEL_ENTITIES[lv]: float(lv) for lv in QuotaLevel if lv >= level}
    assert select_quota(entities, USER, CLIENT) == (float(level), LEVEL_ENTITIES[level])


def test_every_subset_selects_the_most_specific() -> None:
    levels = list(QuotaLevel)
    for r in range(1, len(levels) + 1):
        for subset in combinations(levels, r):
            entities = {LEVEL_ENTITIES[lv]: float(lv) for lv in subset}
            assert select_quota(entities, USER, CLIENT).level is min(subset)


def test_other_principals_do_not_match() -> None:
    entities = {K("bob", CLIENT): 1.0, K("bob", None): 2.0, K(None, "other"): 3.0,
                K("bob", DEFAULT): 4.0, K(DEFAULT, "other"): 5.0}
    sel = select_quota(entities, USER, CLIENT)
    assert sel == (None, None) and sel.level is None
    assert sel.metric_tags(USER, CLIENT) == ("", CLIENT)


def test_default_is_not_the_string() -> None:
    assert select_quota({K("<default>", None): 1.0}, "bob", "c") == (None, None)
    assert [k for _, k in candidate_entities("u", "c")] == [
        K("u", "c"), K("u", DEFAULT), K("u", None), K(DEFAULT, "c"), K(DEFAULT, DEFAULT),
        K(DEFAULT, None), K(None, "c"), K(None, DEFAULT)]


def test_entity_needs_a_name() -> None:
    with pytest.raises(ValueError):
        K(None, None)


def test_metric_tags_for_no_quota() -> None:
    assert metric_tags_for(None, "u", "c") == ("", "c")


class _Manager:
    """Kafka's ClientQuotaManager reduced to selection + one sensor per metric-tag set."""

    def __init__(self) -> None:
        self.entities: dict[K, float] = {}
        self.sensors: dict[tuple[str, str], QuotaSensor] = {}

    def check(self, user: str, client: str, bound: float | None, value: int, throttle: bool) -> None:
        sel = select_quota(self.entities, user, client)
        assert sel.value == bound
        tags = sel.metric_tags(user, client)
        sensor = self.sensors.setdefault(tags, QuotaSensor(sel.value))
        sensor.bound = sel.value  # Kafka updates the metric config in place
        got = sensor.record(value * 11, 0)  # checkQuota records value * numQuotaSamples
        assert (got > 0) is throttle, (user, client, got)


def test_kafka_quota_config_precedence() -> None:
    """ClientQuotaManagerTest.testQuotaConfigPrecedence, step by step (time never moves)."""
    m = _Manager()
    m.entities.update({
        K(DEFAULT, None): 1000, K(None, DEFAULT): 2000, K(DEFAULT, DEFAULT): 3000,
        K("userA", None): 4000, K("userA", "client1"): 5000, K("userB", None): 6000,
        K("userB", "client1"): 7000, K("userB", DEFAULT): 8000, K("userC", None): 10000,
        K(None, "client1"): 9000,
    })
    m.check("userA", "client1", 5000, 4500, False)  # <user, client> over <user>
    m.check("userA", "client2", 4000, 4500, True)   # <user> over <client> and defaults
    m.check("userA", "client3", 4000, 0, True)      # <user> quota shared across the user's clients
    m.check("userA", "client1", 5000, 0, False)     # <user, client> is exclusive
    m.check("userB", "client1", 7000, 8000, True)
    m.check("userB", "client2", 8000, 7000, False)  # default per-client of user: exclusive
    m.check("userB", "client3", 8000, 7000, False)
    m.check("userD", "client1", 3000, 3500, True)   # default <user, client>
    m.check("userD", "client2", 3000, 2500, False)
    m.check("userE", "client1", 3000, 2500, False)

    del m.entities[K(DEFAULT, DEFAULT)]
    m.check("userD", "client1", 1000, 0, False)     # tags changed: a new counter
    m.check("userE", "client4", 1000, 1500, True)
    m.check("userF", "client4", 1000, 800, False)   # default <user> shared across its clients
    m.check("userF", "client5", 1000, 800, True)

    del m.entities[K(DEFAULT, None)]
    m.check("userF", "client4", 2000, 0, False)     # default <client-id> shared across users
    m.check("userF", "client5", 2000, 0, False)
    m.check("userF", "client5", 2000, 2500, True)
    m.check("userG", "client5", 2000, 0, True)

    m.entities[K("userA", None)] = 8000
    m.entities[K("userA", "client1")] = 10000
    m.check("userA", "client2", 8000, 0, False)
    m.check("userA", "client2", 8000, 4500, True)   # sum of new and earlier values
    m.check("userA", "client1", 10000, 0, False)
    m.check("userA", "client1", 10000, 6000, True)
    del m.entities[K("userA", "client1")]
    m.check("userA", "client6", 8000, 0, True)      # shared user quota
    m.entities[K("userA", "client6")] = 11000
    m.check("userA", "client6", 11000, 8500, False)
    m.entities[K("userA", DEFAULT)] = 12000
    del m.entities[K("userA", "client6")]
    m.check("userA", "client6", 12000, 4000, True)  # same tags as before: sums


def test_tenant_level() -> None:
    quotas = {"lkc-1": 5e6, DEFAULT: 1e6}
    assert select_tenant_quota(quotas, "lkc-1") == (5e6, "lkc-1")
    assert select_tenant_quota(quotas, "lkc-2") == (1e6, DEFAULT)
    assert select_tenant_quota({}, "lkc-2") == (None, None)


def test_combine_throttles_takes_the_longest() -> None:
    assert combine_throttles() == 0
    assert combine_throttles(0, 2100, 300) == 2100
    assert combine_throttles(-5) == 0
