"""Quota entities: stored and visible forms per scope, Kafka's validation, describe filters and
the per-key index (pure functions on hand-made images)."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.metadata import MetadataImage
from shoal.quotas.entities import (
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    EntityError,
    QuotaIndex,
    check_value,
    describe,
    quota_index,
    stored_entity,
    visible_entity,
)
from shoal.quotas.precedence import DEFAULT, QuotaEntityKey

A, B = "lkc-aaaaaa", "lkc-bbbbbb"


def image(quotas: dict | None = None) -> MetadataImage:
    return MetadataImage(
        cluster_id="c", controller_id=1, brokers={}, topics={}, topics_by_id={}, broker_configs={},
        user_tenants={"alice": A, "bob": B},
        client_quotas=MappingProxyType({e: MappingProxyType(v) for e, v in (quotas or {}).items()}),
    )


def test_tenant_entities_are_qualified_and_come_back_unqualified() -> None:
    img = image()
    # a mapped user keeps its name; any other name is the tenant's own (prefixed) user
    assert stored_entity(img, A, [("user", "alice")]) == (("tenant", A), ("user", "alice"))
    assert stored_entity(img, A, [("user", "carol"), ("client-id", "app")]) == (
        ("client-id", "app"), ("tenant", A), ("user", A + "_carol"))
    assert stored_entity(img, A, [("user", None)]) == (("tenant", A), ("user", None))
    # bob is mapped to B: from A he is A's own "bob"
    assert stored_entity(img, A, [("user", "bob")]) == (("tenant", A), ("user", A + "_bob"))
    stored = stored_entity(img, A, [("client-id", "app"), ("user", "carol")])
    assert visible_entity(A, stored) == (("client-id", "app"), ("user", "carol"))
    assert visible_entity(B, stored) is None
    assert visible_entity(None, stored) == stored  # the operator sees the stored form
    assert visible_entity(A, (("tenant", A),)) is None  # the tenant-wide quota is the operator's
    assert visible_entity(A, (("client-id", "app"),)) is None  # physical-view entities


@given(st.lists(st.tuples(st.sampled_from(["user", "client-id"]),
                          st.one_of(st.none(), st.text(min_size=1, max_size=8))),
                min_size=1, max_size=2, unique_by=lambda c: c[0]))
def test_round_trip_in_a_tenant_scope(components) -> None:
    stored = stored_entity(image(), A, components)
    assert visible_entity(A, stored) == tuple(sorted(components))
    assert visible_entity(B, stored) is None


@pytest.mark.parametrize("tenant,components,message", [
    (None, [], "Invalid empty client quota entity"),
    (None, [("user", "a"), ("user", "b")], "duplicate entity entry user"),
    (None, [("group", "g")], "Unhandled client quota entity type: group"),
    (None, [("user", "")], "Empty user not supported"),
    (None, [("ip", "1.2.3.4"), ("user", "a")], "IP entity should not be combined"),
    (None, [("ip", "not-an-ip")], "not-an-ip is not a valid IP"),
    (None, [("tenant", None), ("user", "a")], "default tenant entity cannot be combined"),
    (A, [("tenant", B)], "Unhandled client quota entity type: tenant"),
    (A, [("ip", "1.2.3.4")], "Unhandled client quota entity type: ip"),
])
def test_invalid_entities(tenant, components, message) -> None:
    with pytest.raises(EntityError, match=message) as e:
        stored_entity(image(), tenant, components)
    assert e.value.code == "INVALID_REQUEST"


@pytest.mark.parametrize("entity,key,value,message", [
    ((("user", "u"),), "producer_byte_rate", 1024.0, None),
    ((("user", "u"),), "request_percentage", 12.5, None),
    ((("ip", None),), "connection_creation_rate", 10.0, None),
    ((("tenant", A),), "consumer_byte_rate", 1e6, None),
    ((("user", "u"),), "producer_byte_rate", 1.5, "cannot be a fractional value"),
    ((("user", "u"),), "producer_byte_rate", 0.0, "must be greater than 0"),
    ((("user", "u"),), "consumer_byte_rate", -1.0, "must be greater than 0"),
    ((("user", "u"),), "connection_creation_rate", 1.0, "Invalid configuration key"),
    ((("ip", None),), "producer_byte_rate", 1.0, "Invalid configuration key"),
    ((("ip", None),), "connection_creation_rate", 2.0**31, "too large for an INT"),
    ((("user", "u"),), "bogus", 1.0, "Invalid configuration key bogus"),
])
def test_quota_values(entity, key, value, message) -> None:
    if message is None:
        check_value(entity, key, value)
    else:
        with pytest.raises(EntityError, match=message):
            check_value(entity, key, value)


QUOTAS = {
    (("user", "u1"),): {"producer_byte_rate": 1.0},
    (("user", None),): {"producer_byte_rate": 2.0},
    (("client-id", "c1"), ("user", "u1")): {"consumer_byte_rate": 3.0},
    (("client-id", None),): {"request_percentage": 4.0},
    (("ip", "1.2.3.4"),): {"connection_creation_rate": 5.0},
    (("tenant", A),): {"producer_byte_rate": 6.0},
    (("client-id", "app"), ("tenant", A)): {"producer_byte_rate": 7.0},
    (("tenant", A), ("user", A + "_carol")): {"producer_byte_rate": 8.0},
    (("client-id", "app"), ("tenant", B)): {"producer_byte_rate": 9.0},
}


def names(found) -> list:
    return [entity for entity, _values in found]


def test_describe_matches_like_kafka() -> None:
    img = image(QUOTAS)
    assert names(describe(img, None, [("user", MATCH_EXACT, "u1")], False)) == [
        (("client-id", "c1"), ("user", "u1")), (("user", "u1"),)]
    assert names(describe(img, None, [("user", MATCH_EXACT, "u1")], True)) == [(("user", "u1"),)]
    assert names(describe(img, None, [("user", MATCH_DEFAULT, None)], False)) == [(("user", None),)]
    assert len(describe(img, None, [("user", MATCH_ANY, None)], False)) == 4
    assert names(describe(img, None, [("ip", MATCH_ANY, None)], False)) == [(("ip", "1.2.3.4"),)]
    assert len(describe(img, None, [], False)) == len(QUOTAS)
    assert describe(img, None, [], True) == []
    found = describe(img, None, [("tenant", MATCH_EXACT, A)], True)
    assert found == [((("tenant", A),), {"producer_byte_rate": 6.0})]


def test_describe_in_a_tenant_scope_sees_only_its_own() -> None:
    img = image(QUOTAS)
    assert describe(img, A, [], False) == [
        ((("client-id", "app"),), {"producer_byte_rate": 7.0}),
        ((("tenant", A),), {"producer_byte_rate": 6.0}),  # its own tenant-wide quota
        ((("user", "carol"),), {"producer_byte_rate": 8.0}),
    ]
    assert names(describe(img, B, [("client-id", MATCH_EXACT, "app")], True)) == [(("client-id", "app"),)]
    assert describe(img, A, [("ip", MATCH_ANY, None)], False) == []


def test_a_tenant_describes_its_own_tenant_quota() -> None:
    """Issue 24: a tenant asking for its own tenant quota got UNSUPPORTED_VERSION. It sees its own
    tenant-wide values, else the tenant default's key by key; never the default entity or
    another tenant's."""
    img = image({**QUOTAS, (("tenant", None),): {"producer_byte_rate": 50.0, "consumer_byte_rate": 60.0}})
    own = [((("tenant", A),), {"producer_byte_rate": 6.0, "consumer_byte_rate": 60.0})]
    assert describe(img, A, [("tenant", MATCH_EXACT, A)], True) == own
    assert describe(img, A, [("tenant", MATCH_ANY, None)], False) == own
    assert describe(img, A, [("tenant", MATCH_EXACT, B)], False) == []
    assert describe(img, A, [("tenant", MATCH_DEFAULT, None)], False) == []
    assert describe(img, B, [("tenant", MATCH_ANY, None)], True) == [
        ((("tenant", B),), {"producer_byte_rate": 50.0, "consumer_byte_rate": 60.0})]
    assert describe(image(QUOTAS), B, [("tenant", MATCH_ANY, None)], True) == []  # none applies


@pytest.mark.parametrize("components,code", [
    ([("user", MATCH_EXACT, None)], "INVALID_REQUEST"),
    ([("user", MATCH_DEFAULT, "x")], "INVALID_REQUEST"),
    ([("user", MATCH_ANY, "x")], "INVALID_REQUEST"),
    ([("user", MATCH_ANY, None), ("user", MATCH_DEFAULT, None)], "INVALID_REQUEST"),
    ([("ip", MATCH_ANY, None), ("user", MATCH_ANY, None)], "INVALID_REQUEST"),
    ([("", MATCH_ANY, None)], "INVALID_REQUEST"),
    ([("group", MATCH_ANY, None)], "UNSUPPORTED_VERSION"),
    ([("user", 7, None)], "UNSUPPORTED_VERSION"),
])
def test_describe_refuses_bad_filters(components, code) -> None:
    with pytest.raises(EntityError) as e:
        describe(image(QUOTAS), None, components, False)
    assert e.value.code == code


def test_quota_index_per_scope() -> None:
    idx = quota_index(image(QUOTAS).client_quotas, "producer_byte_rate")
    assert idx == QuotaIndex(
        scopes={
            None: {QuotaEntityKey("u1", None): 1.0, QuotaEntityKey(DEFAULT, None): 2.0},
            A: {QuotaEntityKey(None, "app"): 7.0, QuotaEntityKey(A + "_carol", None): 8.0},
            B: {QuotaEntityKey(None, "app"): 9.0},
        },
        tenants={A: 6.0},
    )
    assert quota_index(image(QUOTAS).client_quotas, "controller_mutation_rate").empty
