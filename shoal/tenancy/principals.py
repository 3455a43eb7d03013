"""Which user names a caller may create or claim, and whose SCRAM credentials it may touch.

Pure rules (no I/O, no store): the HTTP admin API, AlterUserScramCredentials /
DescribeUserScramCredentials (and so ``shoal scram``) and ``shoal.sasl.bootstrap.users`` call them.

Names. A SCRAM user's stored name is its principal (``User:<stored name>``), and the principal
decides the tenant (``shoal.tenancy.scope.tenant_of``). So:

- a user a **tenant** creates (its administrator through the HTTP API, or any allowed tenant user
  over the wire) is always stored qualified, ``<tenant>_<name>`` (``tenant_user``). Two tenants
  can both have ``bob`` (``lkc-aaaaaa_bob``, ``lkc-bbbbbb_bob``): names are unique across the
  cluster by construction, a tenant's create never collides with another tenant's user, and so no
  answer tells a tenant which names other tenants use (a 409 only ever means "your tenant already
  has this user"). Nor can a tenant claim a principal the broker derives itself: ``ANONYMOUS``,
  an mTLS subject (whatever ``ssl.principal.mapping.rules`` make of it) or a super user all lack
  the tenant's prefix;
- only the **operator** (a super user, or anyone on an admin API without authentication) maps a
  name as it is into a tenant: that is how mTLS principals and pre-named SCRAM users join a
  tenant. Even the operator cannot map or create ``ANONYMOUS`` (the principal of every
  unauthenticated connection: mapping it into a tenant closes every operator PLAINTEXT
  connection), cannot put a super user in a tenant (it would lose the physical view), and cannot
  make a name shaped like a tenant's qualified name (``lkc-xxxxxx_...``) outside that tenant
  (``operator_user_error``).

Credentials (``may_access_credential``). Kafka requires ALTER (DESCRIBE) on the cluster to alter
(describe) SCRAM credentials. Shoal requires that too when an authorizer is configured, and
otherwise lets a principal touch a credential other than its own only when it is a super user, an
administrator of the tenant the credential belongs to, or (no authorizer and no ``super.users``:
Kafka's allow-everything default) in the physical view. Anyone may change its own credential, but
only over a connection that authenticated with SASL as that user (the authenticated session stands
for the old password, which Kafka's API has no field for).
"""

from __future__ import annotations

import re

ANONYMOUS_USER = "ANONYMOUS"
# The shape of a tenant's qualified names (shoal.metadata.tenant_prefix): lkc- + 6 + "_".
_TENANT_QUALIFIED = re.compile(r"lkc-[0-9a-z]{6}_")


def tenant_user(tenant_id: str, name: str) -> str:
    """The stored name of the user a tenant calls ``name`` and creates itself."""
    return f"{tenant_id}_{name}"


def tenant_qualified(name: str) -> bool:
    """Is ``name`` shaped like a tenant's qualified name (``lkc-xxxxxx_...``)?"""
    return _TENANT_QUALIFIED.match(name) is not None


def operator_user_error(name: str, super_users: frozenset[str], *, into_tenant: bool) -> str | None:
    """Why the operator may not give ``name`` (as stored) a credential (``into_tenant``: or map it
    into a tenant), else None. ``super_users`` are principals (``User:admin``)."""
    if not name:
        return "user names must not be empty"
    if name == ANONYMOUS_USER:
        return "'ANONYMOUS' is the principal of unauthenticated connections and cannot be a user"
    if tenant_qualified(name):
        return "user names starting with 'lkc-xxxxxx_' are reserved for the users tenants create"
    if into_tenant and f"User:{name}" in super_users:
        return f"'{name}' is a super user (super.users) and cannot belong to a tenant"
    return None


def may_access_credential(*, admin: bool, granted: bool, own: str | None, target: str) -> bool:
    """May a caller alter (describe) the SCRAM credential stored as ``target``?

    ``admin``: a super user, or an administrator of ``target``'s tenant (the caller's tenant scope
    only ever names users of its own tenant); ``granted``: ALTER (DESCRIBE) on the cluster by an
    ACL, or an open physical view (no authorizer, no ``super.users``); ``own``: the stored name the
    connection authenticated as with SASL, None for any other connection (PLAINTEXT, mTLS).
    """
    return admin or granted or (own is not None and own == target)
