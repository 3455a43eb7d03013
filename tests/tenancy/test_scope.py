"""The request scope: name qualification, tenant resolution, reserved names (pure, exact)."""

from __future__ import annotations

import uuid
from types import MappingProxyType

from hypothesis import given, strategies as st

from shoal.config import BrokerConfig
from shoal.metadata import MetadataImage, TenantInfo, TopicInfo
from shoal.tenancy.scope import Scope, resolve, tenant_of

A, B = "lkc-aaaaaa", "lkc-bbbbbb"


def image(**kw) -> MetadataImage:
    topics = {n: TopicInfo(n, uuid.uuid4(), ()) for n in (f"{A}_users", f"{B}_users", "ops-topic")}
    base = dict(
        cluster_id="phys", controller_id=1, brokers=MappingProxyType({}),
        topics=MappingProxyType(topics),
        topics_by_id=MappingProxyType({t.topic_id: t for t in topics.values()}),
        broker_configs=MappingProxyType({}),
        tenants=MappingProxyType({A: TenantInfo(A, "A", 1), B: TenantInfo(B, "B", 2)}),
        user_tenants=MappingProxyType({"alice": A, "bob": B}),
    )
    base.update(kw)
    return MetadataImage(**base)


CONFIG = BrokerConfig({"super.users": "User:root"})


def scope(img: MetadataImage, principal: str) -> Scope:
    return Scope(img, CONFIG, principal, "127.0.0.1", tenant_of(img, principal))


def test_names_are_qualified_in_and_unqualified_out():
    img = image()
    a = scope(img, "User:alice")
    assert a.tenant_id == A and a.physical("users") == f"{A}_users"
    assert a.visible(f"{A}_users") == "users"
    assert a.visible(f"{B}_users") is None and a.visible("ops-topic") is None
    assert [n for n, _ in a.topics(img)] == ["users"]
    assert a.cluster_id(img) == A
    b_id = img.topics[f"{B}_users"].topic_id
    assert a.topic_by_id(img, b_id) is None
    assert a.topic_by_id(img, img.topics[f"{A}_users"].topic_id).name == f"{A}_users"


def test_physical_view_and_super_users():
    img = image()
    op = scope(img, "User:root")
    assert op.tenant_id is None and op.superuser and op.cluster_id(img) == "phys"
    assert sorted(n for n, _ in op.topics(img)) == sorted(img.topics)
    anon = scope(img, "User:ANONYMOUS")
    assert not anon.superuser and anon.physical_view


def test_tenant_created_users_belong_to_their_tenant():
    img = image()
    assert tenant_of(img, f"User:{A}_carol") == A  # created by tenant A itself
    assert tenant_of(img, "User:lkc-zzzzzz_carol") is None  # no such tenant
    a = scope(img, f"User:{A}_carol")
    assert a.visible_principal == "User:carol"
    assert a.physical_user(img, "alice") == "alice"  # the control plane's user of A keeps its name
    assert a.physical_user(img, "bob") == f"{A}_bob"  # B's bob is not A's: a name A would create
    assert a.visible_user(img, "bob") is None and a.visible_user(img, f"{A}_x") == "x"


def test_reserved_names():
    img = image()
    a = scope(img, "User:alice")
    assert a.reserved_name(img, f"{B}_users") and a.reserved_name(img, "lkc-zzzzzz_x")
    assert not a.reserved_name(img, "lkc-users") and not a.reserved_name(img, "users")
    anon = scope(img, "User:ANONYMOUS")
    assert anon.reserved_name(img, f"{A}_x") and not anon.reserved_name(img, "lkc-zzzzzz_x")
    assert not scope(img, "User:root").reserved_name(img, f"{A}_x")


def test_a_connection_loses_its_scope_when_its_tenant_or_membership_goes():
    img = image()
    assert resolve(img, CONFIG, "User:alice", "h", A).tenant_id == A
    moved = image(user_tenants=MappingProxyType({"alice": B}))
    assert resolve(moved, CONFIG, "User:alice", "h", A) is None
    gone = image(tenants=MappingProxyType({B: TenantInfo(B, "B", 2)}))
    assert resolve(gone, CONFIG, "User:alice", "h", A) is None
    # an unbound (physical-view) connection whose user joins a tenant is closed too
    assert resolve(img, CONFIG, "User:alice", "h", None) is None


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-:", min_size=1, max_size=40))
def test_qualification_round_trips(name):
    img = image()
    for who in ("User:alice", "User:bob"):
        s = scope(img, who)
        assert s.visible(s.physical(name)) == name
        other = scope(img, "User:bob" if who == "User:alice" else "User:alice")
        assert other.visible(s.physical(name)) is None


@given(st.lists(st.tuples(st.sampled_from([None, "lkc-aaaaaa", "lkc-bbbbbb"]),
                          st.sampled_from(["t", "u", "v"])), max_size=20))
def test_acls_of_a_tenant_are_its_bindings_in_order(rows):
    from shoal.metadata import AclEntry
    from shoal.tenancy.scope import acls_of

    acls = tuple(AclEntry(tenant=t, resource_type=2, resource_name=name, pattern_type=3, principal="User:x",
                          host="*", operation=3, permission_type=3) for t, name in rows)
    for tenant in (None, "lkc-aaaaaa", "lkc-bbbbbb", "lkc-cccccc"):
        assert acls_of(acls, tenant) == tuple(a for a in acls if a.tenant == tenant)
    other = acls[:-1]  # another table (a change): its own index, not the cached one
    assert acls_of(other, "lkc-aaaaaa") == tuple(a for a in other if a.tenant == "lkc-aaaaaa")
