"""Feature level rules (KIP-584, Kafka's ``FeatureControlManager``): UpdateFeatures' decision, and
the levels a broker finalizes at start-up for families the cluster has none for.

An update is refused, all of it (Kafka answers one error for every feature of the request), with
INVALID_UPDATE_VERSION when: the feature is unknown; a registered broker does not support the
level; the level is lower than the finalized one and the upgrade type is UPGRADE (Kafka's "Can't
downgrade the version of this feature without setting the upgrade type to either safe or unsafe
downgrade"), or higher with a downgrade type; the family cannot be downgraded (``shoal.version``:
data of the finalized level's formats may exist) or is lowered below its lowest level.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, Sequence

from shoal.metadata import FinalizedFeatures, MetadataError, MetadataImage
from shoal.metadata.change import Change, Result, unchanged
from shoal.metadata.features import FEATURES

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def _invalid(name: str, level: int, why: str) -> MetadataError:
    return MetadataError("INVALID_UPDATE_VERSION", f"Invalid update version {level} for feature {name}. {why}")


def update_features(image: MetadataImage, updates: Sequence[tuple[str, int, int]],
                    validate_only: bool = False) -> Result[None]:
    """``updates``: (feature, level, upgrade type); level < 1 removes the finalized level (0)."""
    levels = dict(image.features.levels)
    for name, level, kind in updates:
        level = max(level, 0)
        feature = FEATURES.get(name)
        if feature is None:
            raise _invalid(name, level, "The controller does not support the given feature.")
        if kind not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
            raise _invalid(name, level, f"Unknown upgrade type {kind}.")
        current = levels.get(name, 0)
        if level < current:
            if kind == UPGRADE:
                raise _invalid(name, level, "Can't downgrade the version of this feature without setting the "
                               "upgrade type to either safe or unsafe downgrade.")
            if not feature.downgradable:
                raise _invalid(name, level, f"{name} {current} is finalized and cannot be downgraded: data of its "
                               "formats may already be written.")
        elif level > current and kind != UPGRADE:
            raise _invalid(name, level, "Can't downgrade to a newer version.")
        if level < feature.min_level and level != current:
            raise _invalid(name, level, f"The lowest level this release supports is {feature.min_level}.")
        for node, broker in sorted(image.brokers.items()):
            ranges = {f: (lo, hi) for f, lo, hi in broker.features}
            lo, hi = ranges.get(name, (0, 0))
            if level != current and not lo <= level <= hi:
                raise _invalid(name, level, f"Broker {node} only supports versions {lo}-{hi}.")
        levels[name] = level
    if validate_only or levels == dict(image.features.levels):
        return unchanged(None)
    return Result(Change(features=FinalizedFeatures(MappingProxyType(levels), image.epoch + 1)), None)


def finalize_missing(image: MetadataImage, defaults: Mapping[str, int]) -> Result[None]:
    """Finalize ``defaults`` for the families the cluster has no level for (a broker's start-up);
    nothing when it has them all (another broker did it first)."""
    missing = {k: v for k, v in defaults.items() if k not in image.features.levels}
    if not missing:
        return unchanged(None)
    levels = {**image.features.levels, **missing}
    return Result(Change(features=FinalizedFeatures(MappingProxyType(levels), image.epoch + 1)), None)
