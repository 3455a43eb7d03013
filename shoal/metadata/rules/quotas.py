"""Client quota rules: per entity, a mapping of quota key -> value; an entity without values goes."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from shoal.metadata import MetadataImage, QuotaEntity
from shoal.metadata.change import Change, Result, unchanged


def alter_client_quotas(
    image: MetadataImage, changes: list[tuple[QuotaEntity, Mapping[str, float | None]]]
) -> Result[None]:
    """Set (a float) or remove (None) values per entity, all in one change, in order."""
    quotas: dict[QuotaEntity, dict[str, float]] = {}
    for entity, values in changes:
        current = quotas.get(tuple(entity))
        if current is None:
            current = quotas[tuple(entity)] = dict(image.client_quotas.get(tuple(entity), {}))
        for key, value in values.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = float(value)
    change: dict[QuotaEntity, Mapping[str, float] | None] = {
        e: MappingProxyType(v) if v else None for e, v in quotas.items() if v != image.client_quotas.get(e, {})
    }
    return Result(Change(client_quotas=change), None) if change else unchanged(None)
