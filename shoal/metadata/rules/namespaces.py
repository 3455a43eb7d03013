"""Namespace rules (KIP-37): physical (tenant-qualified) names; callers pass every ancestor."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from shoal.metadata import MetadataError, MetadataImage, NamespaceInfo
from shoal.metadata.change import Change, Result, unchanged


def create_namespaces(image: MetadataImage, names: list[str]) -> Result[None]:
    """Create those of ``names`` that do not exist yet."""
    missing: dict[str, NamespaceInfo | None] = {
        n: NamespaceInfo(n, MappingProxyType({})) for n in names if n not in image.namespaces}
    return Result(Change(namespaces=missing), None) if missing else unchanged(None)


def delete_namespaces(image: MetadataImage, names: list[str], topics: list[str]) -> Result[None]:
    """Delete namespaces and topics together, in one change (those that exist)."""
    change = Change(
        namespaces=dict.fromkeys(n for n in names if n in image.namespaces),
        topics=dict.fromkeys(t for t in topics if t in image.topics),
    )
    return Result(change, None)


def set_namespace_configs(image: MetadataImage, name: str, configs: Mapping[str, str]) -> Result[NamespaceInfo]:
    if name not in image.namespaces:
        raise MetadataError("RESOURCE_NOT_FOUND", f"Namespace '{name}' does not exist.")
    ns = NamespaceInfo(name, MappingProxyType({str(k): str(v) for k, v in configs.items()}))
    return Result(Change(namespaces={name: ns}), ns)
