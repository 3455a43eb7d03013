"""UpdateFeatures (key 57), v0-v1 (KIP-584): finalize feature levels (``shoal.metadata.features``).
DescribeFeatures is ApiVersions v3+'s SupportedFeatures / FinalizedFeatures (shoal.handlers.api_versions).

As Kafka's controller: ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise), an operator
action (a tenant's principals are refused even with ALTER on their logical cluster); the updates
are decided together (``shoal.metadata.rules.features``) and committed as one change, or none of
them with one INVALID_UPDATE_VERSION given to every feature of the request, as Kafka's
``UpdateFeaturesResponse.createWithErrors``. v0's ``allow_downgrade`` is v1's SAFE_DOWNGRADE;
``validate_only`` (v1) decides without committing. Any broker serves it.
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING

from shoal.handlers.registry import api
from shoal.metadata import MetadataError
from shoal.metadata.rules.features import SAFE_DOWNGRADE, UPGRADE
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode, error_code
from shoal.tenancy.acl import Operation

if TYPE_CHECKING:
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import UpdateFeaturesRequest, UpdateFeaturesResponse

KEY = 57
log = logging.getLogger("shoal.admin")
FEATURES_ARE_OPERATORS = ("Feature levels are cluster-wide and their updates operator actions: a tenant's principals "
                          "cannot finalize them (ask the platform operator)")


@api(KEY, 0, 1)
async def handle_update_features(ctx: RequestContext, req: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
    mod = response_module(KEY, ctx.api_version)
    names = [u.feature for u in req.feature_updates]

    def answer(code: ErrorCode, message: str | None) -> UpdateFeaturesResponse:
        results = tuple(build(mod.UpdatableFeatureResult, feature=n, error_code=code, error_message=message)
                        for n in names)
        return build(mod.UpdateFeaturesResponse, throttle_time=datetime.timedelta(0), error_code=code,
                     error_message=message, results=results)

    scope = ctx.scope
    if not scope.physical_view or not scope.allowed_cluster(Operation.ALTER):
        return answer(ErrorCode.cluster_authorization_failed,
                      FEATURES_ARE_OPERATORS if scope.allowed_cluster(Operation.ALTER) else None)
    if len(set(names)) != len(names):
        return answer(ErrorCode.invalid_request, "The request contains multiple updates for the same feature.")
    updates = []
    for u in req.feature_updates:
        kind = getattr(u, "upgrade_type", None)
        if kind is None:  # v0
            kind = SAFE_DOWNGRADE if getattr(u, "allow_downgrade", False) else UPGRADE
        updates.append((u.feature, int(u.max_version_level), int(kind)))
    validate_only = bool(getattr(req, "validate_only", False))
    try:
        await ctx.services.metadata.update_features(updates, validate_only)
    except MetadataError as e:
        log.warning("UpdateFeatures from %s refused: %s", ctx.principal, e.message)
        return answer(error_code(e.code), e.message)
    if not validate_only:
        log.info("UpdateFeatures by %s: %s", ctx.principal,
                 ", ".join(f"{n} finalized at {max(level, 0)}" for n, level, _k in updates))
    return answer(ErrorCode.none, None)
