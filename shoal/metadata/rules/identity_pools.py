"""OAuth identity pool rules: create (the pool's shape checked here) and delete.

An identity pool maps SASL/OAUTHBEARER tokens to a tenant's principals: a token whose ``iss`` is
the pool's ``issuer`` and whose claims pass its ``claim_filter`` authenticates as
``User:<tenant>_<value of principal_claim>`` (``shoal.tenancy.identity_pools`` matches tokens).
A filter is ``{}`` (every token of the issuer), ``{"claim": C, "equals": V}`` (the claim is the
string V, or a list holding it) or ``{"claim": C, "contains": V}`` (the claim is a list, or a
space-separated string as OAuth's ``scope``, holding V). A tenant's pools go with the tenant.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Callable, Mapping

from shoal.metadata import IdentityPool, MetadataError, MetadataImage
from shoal.metadata.change import Change, Result
from shoal.metadata.rules import existing_tenant

FILTER_OPERATORS = ("equals", "contains")
MAX_POOLS = 1000  # every login looks at the pools; a bound keeps that cheap


def _invalid(message: str) -> MetadataError:
    return MetadataError("INVALID_REQUEST", message)


def _name(value: object, what: str, *, max_len: int = 256) -> str:
    if not isinstance(value, str) or not value or len(value) > max_len or not value.isprintable():
        raise _invalid(f"{what} must be a non-empty printable string of at most {max_len} characters")
    return value


def check_filter(claim_filter: object) -> Mapping[str, str]:
    """A pool's claim filter as stored (see the module docstring); INVALID_REQUEST otherwise."""
    if claim_filter is None or claim_filter == {}:
        return MappingProxyType({})
    if not isinstance(claim_filter, Mapping):
        raise _invalid('claim_filter must be an object: {"claim": NAME, "equals"|"contains": VALUE} or {}')
    ops = [op for op in FILTER_OPERATORS if op in claim_filter]
    unknown = set(claim_filter) - {"claim", *FILTER_OPERATORS}
    if unknown or len(ops) != 1 or "claim" not in claim_filter:
        raise _invalid('claim_filter must be {"claim": NAME, "equals": VALUE} or {"claim": NAME, "contains": VALUE}'
                       + (f" (unknown keys: {', '.join(sorted(map(str, unknown)))})" if unknown else ""))
    return MappingProxyType({"claim": _name(claim_filter["claim"], "claim_filter.claim"),
                             ops[0]: _name(claim_filter[ops[0]], f"claim_filter.{ops[0]}", max_len=1024)})


def create_identity_pool(
    image: MetadataImage,
    tenant_id: str,
    issuer: str,
    claim_filter: object,
    *,
    principal_claim: str = "sub",
    display_name: str = "",
    new_pool_id: Callable[[], str],
) -> Result[IdentityPool]:
    existing_tenant(image, tenant_id)
    if len(image.identity_pools) >= MAX_POOLS:
        raise MetadataError("POLICY_VIOLATION", f"the cluster has {MAX_POOLS} identity pools, the most it keeps")
    pool_filter = check_filter(claim_filter)
    issuer = _name(issuer, "issuer", max_len=1024)
    principal_claim = _name(principal_claim or "sub", "principal_claim")
    if not isinstance(display_name, str) or len(display_name) > 256:
        raise _invalid("display_name must be a string of at most 256 characters")
    for p in image.identity_pools.values():
        if (p.tenant_id, p.issuer, dict(p.claim_filter)) == (tenant_id, issuer, dict(pool_filter)):
            raise MetadataError("INVALID_REQUEST", f"identity pool {p.pool_id} of tenant {tenant_id} already maps "
                                "this issuer and claim filter")
    while True:
        pool_id = new_pool_id()
        if pool_id not in image.identity_pools:
            break
    pool = IdentityPool(pool_id, tenant_id, issuer, pool_filter, principal_claim, display_name)
    return Result(Change(identity_pools={pool_id: pool}), pool)


def delete_identity_pool(image: MetadataImage, pool_id: str) -> Result[IdentityPool]:
    pool = image.identity_pools.get(pool_id)
    if pool is None:
        raise MetadataError("RESOURCE_NOT_FOUND", f"Identity pool '{pool_id}' does not exist.")
    return Result(Change(identity_pools={pool_id: None}), pool)
