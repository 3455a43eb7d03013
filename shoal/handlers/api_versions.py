"""ApiVersions (key 18), v0-v4.

The response is the handler registry itself: every registered API with its version range.
A request for a version newer than we know is answered in v0 with UNSUPPORTED_VERSION and the
ranges (KIP-511), handled by the connection before decoding (see server.connection).
"""

from __future__ import annotations

import datetime
import functools
import re

from shoal.handlers.registry import Registry, api
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode

KEY = 18
# KIP-511: client software name and version must be non-empty and well formed.
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


def _api_keys(mod, registry: Registry) -> tuple:
    return tuple(
        build(mod.ApiVersion, api_key=s.key, min_version=s.min_version, max_version=s.max_version)
        for s in registry.specs()
    )


def api_versions_v0_error(registry: Registry):
    mod = response_module(KEY, 0)
    return mod.ApiVersionsResponse(error_code=ErrorCode.unsupported_version, api_keys=_api_keys(mod, registry))


@api(KEY, 0, 4)
async def handle_api_versions(ctx, req):
    code = ErrorCode.none
    if ctx.api_version >= 3:
        name, version = req.client_software_name or "", req.client_software_version or ""
        if not _SOFTWARE.match(name) or not _SOFTWARE.match(version):
            code = ErrorCode.invalid_request
        else:
            conn = ctx.extra.get("connection")
            if conn is not None:
                conn.client_software = (req.client_software_name, req.client_software_version)
    return _response(ctx.services.registry, ctx.api_version, code)


@functools.lru_cache(maxsize=64)
def _response(registry: Registry, version: int, code: ErrorCode):
    """The (immutable) response for a registry, version and error code: every client sends an
    ApiVersions on every connection, and building the table is a third of its cost."""
    mod = response_module(KEY, version)
    return build(
        mod.ApiVersionsResponse,
        error_code=code,
        api_keys=_api_keys(mod, registry),
        throttle_time=datetime.timedelta(0),
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )
