"""Feature versions (KIP-584, Kafka's ``metadata.version`` and ``transaction.version``): one integer
level per feature family, finalized cluster-wide in the metadata image (``MetadataImage.features``;
etcd's ``/meta/features``, the embedded store's file), and the range of levels each release
supports, which every broker registers (``BrokerInfo.features``).

A broker refuses to start when a finalized level is outside what it supports (``refusal``); a level
is raised (UpdateFeatures, ``shoal features upgrade``) only when every registered broker supports
it, and lowered only for a family whose downgrade loses nothing (``shoal/metadata/rules/features.py``).
So a cluster rolled onto a new release keeps the old formats until the operator finalizes the new
level, and can be rolled back until then.

Families:

- ``shoal.version``: the formats brokers share (the etcd image layout and values, internal-topic
  records, inter-broker requests, on-disk checkpoints). Level 1 is the formats of 0.14.0 (and of
  every build before it); level 2 writes etcd's topic values in their compact version 2
  (``shoal.metadata.codec``). Never downgraded once finalized: data of the newer formats may
  exist. docs/upgrades.md has every format's versions and the level that enables each.
- ``transaction.version``: Kafka's (KIP-890): 2 serves Produce v12, TxnOffsetCommit v5 and
  EndTxn v5 as transaction version 2; 0 or 1 keep clients on version 1. A safe downgrade.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

SHOAL_VERSION = "shoal.version"
TRANSACTION_VERSION = "transaction.version"


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    min_level: int  # the lowest level this release runs at
    max_level: int  # the highest level this release supports
    downgradable: bool  # a lower level can be finalized (SAFE_DOWNGRADE) without losing anything


FEATURES: Mapping[str, Feature] = {
    SHOAL_VERSION: Feature(SHOAL_VERSION, 1, 2, downgradable=False),
    TRANSACTION_VERSION: Feature(TRANSACTION_VERSION, 0, 2, downgradable=True),
}


def supported() -> tuple[tuple[str, int, int], ...]:
    """(feature, min level, max level) of this release: what its brokers register."""
    return tuple((f.name, f.min_level, f.max_level) for f in FEATURES.values())


def defaults(transaction_version: int) -> dict[str, int]:
    """The levels finalized for the families a cluster has none for, when a broker starts:
    ``shoal.version`` 1 (the formats a cluster made before features existed has), and
    ``transaction.version`` the broker's ``shoal.transaction.version`` (what it served before).
    A family a later release adds defaults to 0 there (off until finalized), so a rolling upgrade
    never turns it on by itself."""
    return {SHOAL_VERSION: 1, TRANSACTION_VERSION: transaction_version}


def refusal(finalized: Mapping[str, int], ranges: tuple[tuple[str, int, int], ...], release: str) -> str | None:
    """Why a broker of ``release`` supporting ``ranges`` cannot run in a cluster with ``finalized``
    levels (one line naming both), or None."""
    supports = {name: (lo, hi) for name, lo, hi in ranges}
    for name, level in sorted(finalized.items()):
        if name not in supports:
            if level > 0:
                return (f"the cluster's finalized {name} is {level}, a feature this broker (shoal {release}) does "
                        "not know: run a release that supports it")
            continue
        lo, hi = supports[name]
        if not lo <= level <= hi:
            return (f"the cluster's finalized {name} is {level}, this broker (shoal {release}) supports {name} "
                    f"{lo} to {hi}: run a release that supports level {level} (see shoal features describe)")
    return None
