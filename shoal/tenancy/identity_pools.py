"""OAuth identity pools: which tenant, and which principal, a validated token's claims stand for.

Pure (no I/O): ``resolve_principal`` is called by the OAUTHBEARER SASL server once a token is
valid, with the pools of the current metadata image (``MetadataImage.identity_pools``; their shape
and storage are ``shoal.metadata.rules.identity_pools``'s).

A pool matches a token when the token's ``iss`` is the pool's issuer and its claims pass the pool's
filter: ``{}`` always; ``{"claim": C, "equals": V}`` when claim C is the string V (or a list
holding it); ``{"claim": C, "contains": V}`` when C is a list holding V or a space-separated
string (OAuth's ``scope``) with V among its words. A client may name its pool with the
``identityPoolId`` SASL extension (librdkafka's ``sasl.oauthbearer.extensions``, as Confluent
Cloud's clients do): then only that pool is tried. Otherwise exactly one pool must match: a token
that two pools match is refused rather than put in either tenant.

The principal of a match is ``User:<tenant>_<name>`` (``tenant_user``), ``<name>`` being the
pool's ``principal_claim`` (``sub``): the tenant sees ``User:<name>``, as it sees the users it
creates, and no token can name a principal of another tenant. A token no pool matches is refused
when pools are required (``shoal.sasl.oauthbearer.identity.pools.required``); otherwise its
principal is its ``sasl.oauthbearer.sub.claim.name`` claim, as in Kafka (the operator's view, or
the tenant ``user_tenants`` maps it to), except for names no one may log in as (``ANONYMOUS``, a
tenant's ``lkc-xxxxxx_`` names: ``operator_user_error``).
"""

from __future__ import annotations

from typing import Any, Mapping

from shoal.metadata import IdentityPool
from shoal.tenancy.principals import operator_user_error, tenant_user


class NoIdentity(Exception):
    """The claims stand for no principal; ``str()`` says why (for the broker's log)."""


def filter_matches(claim_filter: Mapping[str, str], claims: Mapping[str, Any]) -> bool:
    if not claim_filter:
        return True
    value = claims.get(claim_filter.get("claim", ""))
    if "equals" in claim_filter:
        want = claim_filter["equals"]
        return value == want or (isinstance(value, list) and want in value)
    if "contains" in claim_filter:
        want = claim_filter["contains"]
        if isinstance(value, str):
            return want in value.split(" ")
        return isinstance(value, list) and want in value
    return False


def matching_pools(pools: Mapping[str, IdentityPool], claims: Mapping[str, Any],
                   pool_id: str | None = None) -> list[IdentityPool]:
    """The pools (in id order) whose issuer and filter the claims pass; only ``pool_id`` if given."""
    iss = claims.get("iss")
    candidates = [pools[pool_id]] if pool_id is not None and pool_id in pools else (
        [] if pool_id is not None else [pools[k] for k in sorted(pools)])
    return [p for p in candidates if p.issuer == iss and filter_matches(p.claim_filter, claims)]


def _claim_name(claims: Mapping[str, Any], claim: str) -> str:
    value = claims.get(claim)
    if not isinstance(value, str) or not value or not value.isprintable():
        raise NoIdentity(f"the token has no usable {claim!r} claim (a non-empty printable string)")
    return value


def resolve_principal(pools: Mapping[str, IdentityPool], claims: Mapping[str, Any], *,
                      extensions: Mapping[str, str] | None = None, principal_claim: str = "sub",
                      required: bool = False, pool_extension: str = "identityPoolId") -> str:
    """The stored user name (the principal without ``User:``) these claims authenticate as; see
    the module docstring. Raises ``NoIdentity``."""
    wanted = (extensions or {}).get(pool_extension)
    matches = matching_pools(pools, claims, wanted)
    if len(matches) > 1:
        raise NoIdentity(f"{len(matches)} identity pools match the token ({', '.join(p.pool_id for p in matches)}); "
                         f"the client must name one with the {pool_extension} SASL extension")
    if matches:
        pool = matches[0]
        return tenant_user(pool.tenant_id, _claim_name(claims, pool.principal_claim))
    if wanted is not None:
        raise NoIdentity(f"the token does not match identity pool {wanted!r} (unknown, another issuer, "
                         "or its claim filter)")
    if required:
        raise NoIdentity(f"no identity pool matches the token (issuer {claims.get('iss')!r})")
    name = _claim_name(claims, principal_claim)
    why = operator_user_error(name, frozenset(), into_tenant=False)
    if why is not None:
        raise NoIdentity(f"principal {name!r} refused: {why}")
    return name
