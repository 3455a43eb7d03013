"""Who may create or claim which user names, and touch whose credentials (shoal.tenancy.principals)."""

from __future__ import annotations

from shoal.tenancy.principals import (
    may_access_credential,
    operator_user_error,
    tenant_qualified,
    tenant_user,
)

SUPERS = frozenset({"User:admin", "User:CN=ops,O=acme"})


def test_tenant_users_are_always_qualified():
    assert tenant_user("lkc-abc123", "bob") == "lkc-abc123_bob"
    # every name a tenant picks lands under its own prefix: ANONYMOUS, an mTLS subject, a super
    # user, another tenant's qualified name
    for name in ("ANONYMOUS", "CN=alice,O=acme", "admin", "lkc-zzzzzz_bob", "bob"):
        stored = tenant_user("lkc-abc123", name)
        assert stored.startswith("lkc-abc123_") and stored != name
    # two tenants' bobs never collide
    assert tenant_user("lkc-aaaaaa", "bob") != tenant_user("lkc-bbbbbb", "bob")


def test_tenant_qualified_shape():
    assert tenant_qualified("lkc-abc123_bob")
    assert not tenant_qualified("lkc-abc123")
    assert not tenant_qualified("lkc-ABC123_bob")
    assert not tenant_qualified("xlkc-abc123_bob")
    assert not tenant_qualified("lkc-abc12_bob")


def test_operator_rules():
    assert operator_user_error("alice", SUPERS, into_tenant=True) is None
    assert operator_user_error("CN=alice,O=acme", SUPERS, into_tenant=True) is None  # mTLS users join this way
    assert "ANONYMOUS" in operator_user_error("ANONYMOUS", SUPERS, into_tenant=True)
    assert "ANONYMOUS" in operator_user_error("ANONYMOUS", SUPERS, into_tenant=False)
    assert "super user" in operator_user_error("admin", SUPERS, into_tenant=True)
    assert "super user" in operator_user_error("CN=ops,O=acme", SUPERS, into_tenant=True)
    assert operator_user_error("admin", SUPERS, into_tenant=False) is None  # its own credential
    assert "reserved" in operator_user_error("lkc-abc123_x", SUPERS, into_tenant=False)
    assert "empty" in operator_user_error("", SUPERS, into_tenant=False)
    assert operator_user_error("anonymous", SUPERS, into_tenant=True) is None  # principals are case-sensitive


def test_credential_access():
    # a non-admin touches only its own credential ...
    assert may_access_credential(admin=False, granted=False, own="lkc-a_carol", target="lkc-a_carol")
    assert not may_access_credential(admin=False, granted=False, own="lkc-a_carol", target="alice")
    # ... and only over a SASL-authenticated connection as itself
    assert not may_access_credential(admin=False, granted=False, own=None, target="ANONYMOUS")
    # admins (super users, the tenant's administrators) and ACL grants touch any
    assert may_access_credential(admin=True, granted=False, own=None, target="alice")
    assert may_access_credential(admin=False, granted=True, own=None, target="alice")
