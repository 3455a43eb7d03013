"""ApiVersions (key 18), v0-v4.

The response is the handler registry itself: every registered API with its version range.
A request for a version newer than we know is answered in v0 with UNSUPPORTED_VERSION and the
ranges (KIP-511), handled by the connection before decoding (see server.connection).
"""

from __future__ import annotations

import datetime
import functools
import re
from types import ModuleType
from typing import TYPE_CHECKING

from shoal.handlers.registry import Registry, api
from shoal.metadata import features
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode
from shoal.txn.coordinator import configured_transaction_version

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from shoal.config import BrokerConfig
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import ApiVersionsRequest, ApiVersionsResponse
    from shoal.metadata import MetadataImage

KEY = 18
# KIP-511: client software name and version must be non-empty and well formed.
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


def _api_keys(mod: ModuleType, registry: Registry) -> tuple[Entity, ...]:
    return tuple(
        build(mod.ApiVersion, api_key=s.key, min_version=s.min_version, max_version=s.max_version)
        for s in registry.specs()
    )


def api_versions_v0_error(registry: Registry) -> ApiVersionsResponse:
    mod = response_module(KEY, 0)
    return mod.ApiVersionsResponse(error_code=ErrorCode.unsupported_version, api_keys=_api_keys(mod, registry))


@api(KEY, 0, 4)
async def handle_api_versions(ctx: RequestContext, req: ApiVersionsRequest) -> ApiVersionsResponse:
    code = ErrorCode.none
    if ctx.api_version >= 3:
        name, version = getattr(req, "client_software_name") or "", getattr(req, "client_software_version") or ""
        if not _SOFTWARE.match(name) or not _SOFTWARE.match(version):
            code = ErrorCode.invalid_request
        else:
            conn = ctx.connection
            if conn is not None:
                conn.client_software = (getattr(req, "client_software_name"), getattr(req, "client_software_version"))
        levels, epoch = finalized_levels(ctx.services.config, ctx.services.metadata.image)
        return _response(ctx.services.registry, ctx.api_version, code, tuple(sorted(levels.items())), epoch)
    return _response(ctx.services.registry, ctx.api_version, code)


def finalized_levels(config: BrokerConfig, image: MetadataImage) -> tuple[dict[str, int], int]:
    """The cluster's finalized feature levels and their epoch (the image's, ``shoal features``);
    a family the cluster has no level for yet shows the level this broker finalizes for it at
    start-up (``shoal.metadata.features.defaults``)."""
    levels = {**features.defaults(configured_transaction_version(config)), **image.features.levels}
    return levels, max(image.features.epoch, 0)


@functools.lru_cache(maxsize=64)
def _response(registry: Registry, version: int, code: ErrorCode, finalized_levels: tuple[tuple[str, int], ...] = (),
              epoch: int = -1) -> ApiVersionsResponse:
    """The (immutable) response for a registry, version, error code and finalized feature levels:
    every client sends an ApiVersions on every connection, and building the table is a third of
    its cost. v3+ lists the features this broker supports (shoal.metadata.features: its release's
    ranges) and the cluster's finalized levels with their epoch (KIP-584; a client uses transaction
    version 2 when ``transaction.version`` is finalized at 2 or more); a level 0 is not finalized."""
    mod = response_module(KEY, version)
    supported: tuple = ()
    finalized: tuple = ()
    if version >= 3:
        supported = tuple(build(mod.SupportedFeatureKey, name=name, min_version=lo, max_version=hi)
                          for name, lo, hi in features.supported())
        finalized = tuple(build(mod.FinalizedFeatureKey, name=name, max_version_level=level, min_version_level=level)
                          for name, level in finalized_levels if level > 0)
    return build(
        mod.ApiVersionsResponse,
        error_code=code,
        api_keys=_api_keys(mod, registry),
        throttle_time=datetime.timedelta(0),
        supported_features=supported,
        finalized_features_epoch=epoch if finalized else -1,
        finalized_features=finalized,
        zk_migration_ready=False,
    )
