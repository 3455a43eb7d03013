"""The handler table: dispatch and the ApiVersions response come from the same declarations.

A handler is ``async def handle(ctx: RequestContext, request: XRequest) -> XResponse`` (the
unions of ``shoal.handlers.messages``; None: no response, Produce with acks=0) decorated with
``@api(key, min_version, max_version)``, which keeps its type. The version range must be
covered by kio's schemas; that is checked when the registry is built, so a typo fails at
start-up, not on a client.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Awaitable, Callable, TypeVar

from shoal.protocol.codec import kio_versions

# (ctx, request) -> response; each handler's own types are narrower (a request type per API)
Handler = Callable[..., Awaitable[object]]
_H = TypeVar("_H", bound=Handler)


@dataclass(frozen=True)
class ApiSpec:
    key: int
    min_version: int
    max_version: int
    handler: Handler


def api(key: int, min_version: int, max_version: int) -> Callable[[_H], _H]:
    def mark(fn: _H) -> _H:
        fn.__shoal_api__ = (key, min_version, max_version)  # type: ignore[attr-defined]
        return fn

    return mark


class Registry:
    def __init__(self, modules: list[ModuleType]) -> None:
        self._specs: dict[int, ApiSpec] = {}
        for mod in modules:
            for obj in vars(mod).values():
                mark = getattr(obj, "__shoal_api__", None)
                if mark is None or not callable(obj):
                    continue
                key, lo, hi = mark
                known = kio_versions(key)
                if known is None or lo < known[0] or hi > known[1]:
                    raise ValueError(f"api {key} v{lo}-{hi} is outside kio's schemas {known}")
                if key in self._specs and self._specs[key].handler is not obj:
                    raise ValueError(f"api {key} registered twice")
                self._specs[key] = ApiSpec(key, lo, hi, obj)

    def lookup(self, key: int) -> ApiSpec | None:
        return self._specs.get(key)

    def specs(self) -> list[ApiSpec]:
        return [self._specs[k] for k in sorted(self._specs)]
