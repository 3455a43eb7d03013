"""Tenant (logical cluster) rules: creation, updates, tenant administrators, and the delete cascade.

A tenant owns every physical name with its prefix (``tenant_prefix``): topics, namespaces and the
SCRAM users it creates; plus the users mapped to it, its OAuth identity pools, its ACLs (``AclEntry.tenant``) and the client
quotas whose entity names it or carries its prefix. Deleting a tenant removes all of that in the
same change.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Callable, Mapping

from shoal.metadata import MetadataError, MetadataImage, TenantInfo, owner_tenant, tenant_prefix
from shoal.metadata.change import Change, Result, unchanged
from shoal.metadata.rules import existing_tenant


def create_tenant(
    image: MetadataImage, display_name: str, *, new_tenant_id: Callable[[], str], now_ms: int
) -> Result[TenantInfo]:
    """A tenant with the first id ``new_tenant_id`` draws that no tenant has, created at ``now_ms``."""
    while True:
        tenant_id = new_tenant_id()
        if tenant_id not in image.tenants:
            break
    tenant = TenantInfo(tenant_id, str(display_name), int(now_ms))
    return Result(Change(tenants={tenant_id: tenant}), tenant)


def delete_tenant(image: MetadataImage, tenant_id: str) -> Result[TenantInfo]:
    tenant = existing_tenant(image, tenant_id)
    prefix = tenant_prefix(tenant_id)
    users = {u for u, t in image.user_tenants.items() if t == tenant_id}
    users |= {u for u in image.scram_credentials if u.startswith(prefix)}
    change = Change(
        tenants={tenant_id: None},
        user_tenants=dict.fromkeys(users & image.user_tenants.keys()),
        scram_credentials=dict.fromkeys(users & image.scram_credentials.keys()),
        tenant_admins=dict.fromkeys(users & image.tenant_admins, False),
        topics=dict.fromkeys(n for n in image.topics if n.startswith(prefix)),
        namespaces=dict.fromkeys(n for n in image.namespaces if n.startswith(prefix)),
        identity_pools=dict.fromkeys(i for i, p in image.identity_pools.items() if p.tenant_id == tenant_id),
        acls_removed={a for a in image.acls if a.tenant == tenant_id},
        client_quotas=dict.fromkeys(
            e for e in image.client_quotas
            if any(n is not None and (n == tenant_id or n.startswith(prefix)) for _, n in e)
        ),
    )
    return Result(change, tenant)


def update_tenant(
    image: MetadataImage,
    tenant_id: str,
    *,
    display_name: str | None = None,
    configs: Mapping[str, str] | None = None,
    policy: Mapping[str, object] | None = None,
) -> Result[TenantInfo]:
    t = existing_tenant(image, tenant_id)
    new = TenantInfo(
        t.tenant_id,
        t.display_name if display_name is None else str(display_name),
        t.created_ms,
        t.configs if configs is None else MappingProxyType({str(k): str(v) for k, v in configs.items()}),
        t.policy if policy is None else MappingProxyType(dict(policy)),
    )
    if new == t:
        return unchanged(new)
    return Result(Change(tenants={tenant_id: new}), new)


def set_tenant_admin(image: MetadataImage, user: str, admin: bool) -> Result[None]:
    """A user mapped to a tenant (or carrying a tenant's prefix) may become its administrator;
    anyone may stop being one."""
    if user not in image.user_tenants and not (admin is False or owner_tenant(user, image.tenants)):
        raise MetadataError("RESOURCE_NOT_FOUND", f"User '{user}' belongs to no tenant.")
    if (user in image.tenant_admins) == bool(admin):
        return unchanged(None)
    return Result(Change(tenant_admins={user: bool(admin)}), None)
