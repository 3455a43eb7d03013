"""Feature levels (KIP-584; shoal.metadata.features and its rules): the UpdateFeatures decision
on hand-built images, the start-up refusal, and the finalized levels kept by the embedded store
across restarts (its snapshot and its journal). The cluster's (etcd) side, with real clients:
tests/cluster/test_features_cluster.py."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest

from shoal.metadata import BrokerInfo, FinalizedFeatures, MetadataError, MetadataImage
from shoal.metadata.embedded import EmbeddedMetadataStore
from shoal.metadata.features import SHOAL_VERSION, TRANSACTION_VERSION, defaults, refusal, supported
from shoal.metadata.rules.features import SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, UPGRADE, finalize_missing, update_features

THIS = supported()


def image(levels: dict[str, int], brokers: dict[int, tuple] | None = None, epoch: int = 7) -> MetadataImage:
    e = MappingProxyType({})
    regs = {n: BrokerInfo(n, "h", 9092 + n, features=f) for n, f in (brokers or {1: THIS, 2: THIS}).items()}
    return MetadataImage("c", 1, MappingProxyType(regs), e, e, e, epoch=epoch,
                         features=FinalizedFeatures(MappingProxyType(levels), 3))


FINAL = {SHOAL_VERSION: 1, TRANSACTION_VERSION: 2}


def refused(img: MetadataImage, *updates: tuple[str, int, int]) -> str:
    with pytest.raises(MetadataError) as e:
        update_features(img, list(updates))
    assert e.value.code == "INVALID_UPDATE_VERSION"
    return e.value.message


def test_a_safe_downgrade_and_an_upgrade_finalize_at_the_next_epoch():
    img = image(FINAL)
    r = update_features(img, [(TRANSACTION_VERSION, 1, SAFE_DOWNGRADE)])
    assert r.change is not None and r.change.features == FinalizedFeatures({SHOAL_VERSION: 1, TRANSACTION_VERSION: 1}, 8)
    assert dict(r.change.apply(img).features.levels) == {SHOAL_VERSION: 1, TRANSACTION_VERSION: 1}
    assert dict(img.features.levels) == FINAL  # the input image is untouched
    down = image({SHOAL_VERSION: 1, TRANSACTION_VERSION: 0})
    assert update_features(down, [(TRANSACTION_VERSION, 2, UPGRADE)]).change.features.levels[TRANSACTION_VERSION] == 2
    # the same level, or validate_only: nothing to commit
    assert update_features(img, [(TRANSACTION_VERSION, 2, UPGRADE)]).change is None
    assert update_features(img, [(TRANSACTION_VERSION, 0, UNSAFE_DOWNGRADE)], validate_only=True).change is None


def test_refusals_name_the_feature_and_why():
    img = image(FINAL)
    assert refused(img, ("group.version", 1, UPGRADE)).endswith("The controller does not support the given feature.")
    assert "without setting the upgrade type" in refused(img, (TRANSACTION_VERSION, 1, UPGRADE))
    assert "Can't downgrade to a newer version" in refused(image({SHOAL_VERSION: 1, TRANSACTION_VERSION: 0}),
                                                          (TRANSACTION_VERSION, 2, SAFE_DOWNGRADE))
    assert "cannot be downgraded" in refused(img, (SHOAL_VERSION, 0, UNSAFE_DOWNGRADE))
    assert "Unknown upgrade type 7" in refused(img, (TRANSACTION_VERSION, 1, 7))
    # every registered broker must support the level: an older broker (transaction.version 0-1) blocks 2
    old = image({SHOAL_VERSION: 1, TRANSACTION_VERSION: 1},
                {1: THIS, 3: ((SHOAL_VERSION, 1, 1), (TRANSACTION_VERSION, 0, 1))})
    assert refused(old, (TRANSACTION_VERSION, 2, UPGRADE)) == (
        "Invalid update version 2 for feature transaction.version. Broker 3 only supports versions 0-1.")
    assert refused(img, (SHOAL_VERSION, 3, UPGRADE)).endswith("Broker 1 only supports versions 1-2.")
    # a broker of a release before feature levels (0.14.0) registers no range: it blocks any change
    pre = image(FINAL, {1: THIS, 2: ()})
    assert refused(pre, (SHOAL_VERSION, 2, UPGRADE)).endswith("Broker 2 only supports versions 0-0.")
    assert update_features(image(FINAL), [(SHOAL_VERSION, 2, UPGRADE)]).change.features.levels[SHOAL_VERSION] == 2
    # all or nothing: a good update beside a refused one is not made
    assert "cannot be downgraded" in refused(img, (TRANSACTION_VERSION, 1, SAFE_DOWNGRADE), (SHOAL_VERSION, 0, 2))


def test_start_up_refusal_and_the_levels_a_broker_finalizes_when_missing():
    assert refusal(FINAL, THIS, "0.14.0") is None
    assert refusal({SHOAL_VERSION: 2}, THIS, "0.15.0") is None
    assert refusal({SHOAL_VERSION: 3}, THIS, "0.15.0") == (
        "the cluster's finalized shoal.version is 3, this broker (shoal 0.15.0) supports shoal.version 1 to 2: "
        "run a release that supports level 3 (see shoal features describe)")
    assert "group.version is 1, a feature this broker (shoal 0.14.0) does not know" in refusal(
        {"group.version": 1}, THIS, "0.14.0")
    assert refusal({"group.version": 0}, THIS, "0.14.0") is None  # level 0: not finalized
    # a cluster made before features existed gets shoal.version 1 and the configured transaction.version
    r = finalize_missing(image({}), defaults(1))
    assert dict(r.change.features.levels) == {SHOAL_VERSION: 1, TRANSACTION_VERSION: 1}
    # one that has a level keeps it (another broker finalized it first, or the operator changed it)
    r = finalize_missing(image({SHOAL_VERSION: 1, TRANSACTION_VERSION: 0}), defaults(2))
    assert r.change is None


async def test_the_embedded_store_keeps_the_levels_across_restarts(tmp_path: Path):
    s = EmbeddedMetadataStore(tmp_path, node_id=1)
    await s.start()
    await s.register_broker(BrokerInfo(1, "h", 9092, features=THIS))
    await s.finalize_missing_features(defaults(2))
    await s.update_features([(TRANSACTION_VERSION, 1, SAFE_DOWNGRADE)])
    want = s.image.features
    assert dict(want.levels) == {SHOAL_VERSION: 1, TRANSACTION_VERSION: 1} and want.epoch == s.image.epoch
    for _ in range(2):  # from the journal, then from the snapshot written at the close
        await s.close()
        s = EmbeddedMetadataStore(s.path, node_id=1)
        await s.start()
        assert s.image.features == want
    await s.close()
