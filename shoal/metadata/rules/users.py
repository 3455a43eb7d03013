"""User rules: SCRAM credentials (salted hashes only) and tenant membership.

A user belongs to at most one tenant. ``assign_user`` stores the mapping and, when given, the
credential in the same change, so a user never exists half-made; removing a user removes its
credentials, its mapping and its tenant-administrator mark together.
"""

from __future__ import annotations

from types import MappingProxyType

from shoal.metadata import MetadataError, MetadataImage, ScramCredential
from shoal.metadata.change import Change, Result, unchanged
from shoal.metadata.rules import existing_tenant


def set_scram_credential(image: MetadataImage, user: str, credential: ScramCredential) -> Result[None]:
    by_mech = dict(image.scram_credentials.get(user, {}))
    if by_mech.get(credential.mechanism) == credential:
        return unchanged(None)
    by_mech[credential.mechanism] = credential
    return Result(Change(scram_credentials={user: MappingProxyType(by_mech)}), None)


def delete_scram_credential(image: MetadataImage, user: str, mechanism: str) -> Result[None]:
    by_mech = dict(image.scram_credentials.get(user, {}))
    if mechanism not in by_mech:
        raise MetadataError("RESOURCE_NOT_FOUND", "Attempt to delete a user credential that does not exist")
    del by_mech[mechanism]
    return Result(Change(scram_credentials={user: MappingProxyType(by_mech) if by_mech else None}), None)


def assign_user(
    image: MetadataImage,
    user: str,
    tenant_id: str,
    credential: ScramCredential | tuple[ScramCredential, ...] | None = None,
    *,
    new_user: bool = False,
) -> Result[None]:
    existing_tenant(image, tenant_id)
    if new_user and (user in image.user_tenants or user in image.scram_credentials):
        raise MetadataError("DUPLICATE_RESOURCE", f"User '{user}' already exists.")
    current = image.user_tenants.get(user)
    if current is not None and current != tenant_id:
        raise MetadataError("DUPLICATE_RESOURCE", f"User '{user}' already belongs to tenant {current}.")
    change = Change(user_tenants={user: tenant_id})
    credentials = (credential,) if isinstance(credential, ScramCredential) else credential or ()
    if credentials:
        by_mech = dict(image.scram_credentials.get(user, {}))
        for cred in credentials:
            by_mech[cred.mechanism] = cred
        change.scram_credentials[user] = MappingProxyType(by_mech)
    elif current == tenant_id:
        return unchanged(None)
    return Result(change, None)


def remove_user(image: MetadataImage, user: str) -> Result[None]:
    if user not in image.user_tenants and user not in image.scram_credentials:
        raise MetadataError("RESOURCE_NOT_FOUND", f"User '{user}' does not exist.")
    change = Change(user_tenants={user: None}, scram_credentials={user: None})
    if user in image.tenant_admins:
        change.tenant_admins[user] = False
    return Result(change, None)
