"""Feature levels on a real two-broker cluster on etcd (KIP-584, issue 28 part 2), through real
clients: kafka-python's ``describe_features`` (ApiVersions v3+) and ``update_features``
(UpdateFeatures) and ``shoal features``. Every broker registers the range it supports; the
finalized levels live in etcd (``/meta/features``) and every broker serves the same ones; a
downgrade only where it loses nothing; a broker whose release cannot run at the finalized level
refuses to start in one line naming both.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from kafka.admin import KafkaAdminClient
from kafka.errors import InvalidUpdateVersionError

from broker_process import REPO
from cluster_harness import running_cluster, until

import shoal

SUPPORTED = {"shoal.version": (1, 2), "transaction.version": (0, 2)}


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "features", size=2) as c:
        c.etcd = etcd_cluster
        c.prefix = "/" + c.url.rsplit("/", 1)[1]
        yield c


def etcd_json(c, key: str):
    out = c.etcd.etcdctl("get", f"{c.prefix}/{key}", "--print-value-only").strip()
    return json.loads(out) if out else None


def describe(bootstrap: str) -> dict:
    a = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="features-test")
    try:
        return a.describe_features()
    finally:
        a.close()


def update(bootstrap: str, updates: dict) -> dict:
    a = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="features-test")
    try:
        return a.update_features(updates)
    finally:
        a.close()


def finalized(bootstrap: str) -> dict[str, tuple[tuple[int, int], int]]:
    return {n: (f["finalized"], f["finalized_epoch"]) for n, f in describe(bootstrap).items() if "finalized" in f}


def shoal_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shoal", *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO)


def test_every_broker_registers_its_range_and_serves_the_finalized_levels(cluster):
    for n in (1, 2):
        reg = etcd_json(cluster, f"brokers/{n}")
        assert {f: (lo, hi) for f, lo, hi in reg["features"]} == SUPPORTED
    stored = etcd_json(cluster, "meta/features")
    assert stored["levels"] == {"shoal.version": 1, "transaction.version": 2} and stored["epoch"] > 0
    for n in (1, 2):
        got = describe(cluster[n].bootstrap)
        assert {f: v["supported"] for f, v in got.items()} == SUPPORTED
        assert finalized(cluster[n].bootstrap) == {"shoal.version": ((1, 1), stored["epoch"]),
                                                   "transaction.version": ((2, 2), stored["epoch"])}


def test_updates_reach_every_broker_and_downgrades_follow_kip_584(cluster):
    b1, b2 = cluster[1].bootstrap, cluster[2].bootstrap
    # a downgrade needs a downgrade type, and shoal.version is never downgraded
    with pytest.raises(InvalidUpdateVersionError, match="without setting the upgrade type"):
        update(b1, {"transaction.version": 1})
    with pytest.raises(InvalidUpdateVersionError, match="shoal.version 1 is finalized and cannot be downgraded"):
        update(b1, {"shoal.version": ("SAFE_DOWNGRADE", 0)})
    with pytest.raises(InvalidUpdateVersionError, match=r"Broker 1 only supports versions 1-2"):
        update(b2, {"shoal.version": 3})
    with pytest.raises(InvalidUpdateVersionError, match="does not support the given feature"):
        update(b2, {"group.version": 1})
    assert etcd_json(cluster, "meta/features")["levels"]["transaction.version"] == 2  # nothing changed
    assert update(b1, {"transaction.version": ("SAFE_DOWNGRADE", 1)}) == {"transaction.version": "OK"}
    epoch = etcd_json(cluster, "meta/features")["epoch"]
    until(lambda: finalized(b2)["transaction.version"] == ((1, 1), epoch), 10, "broker 2 sees the downgrade")
    assert finalized(b1)["transaction.version"] == ((1, 1), epoch)
    # shoal features: describe as kafka-features.sh, then the upgrade back (--latest), through broker 2
    out = shoal_cli("features", "describe", "--bootstrap-server", b2)
    assert out.returncode == 0, out.stderr
    assert (f"Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\t"
            f"FinalizedVersionLevel: 1\tEpoch: {epoch}") in out.stdout.splitlines()
    out = shoal_cli("features", "upgrade", "--feature", "transaction.version=2", "--bootstrap-server", b2)
    assert (out.returncode, out.stdout) == (0, "transaction.version was upgraded to 2.\n"), out.stderr
    until(lambda: finalized(b2)["transaction.version"][0] == (2, 2), 10, "broker 2 sees the upgrade")
    out = shoal_cli("features", "upgrade", "--feature", "shoal.version=3", "--bootstrap-server", b2)
    assert out.returncode == 1 and out.stderr.strip().splitlines() == [
        "Could not upgrade shoal.version to 3. INVALID_UPDATE_VERSION: Invalid update version 3 for feature "
        "shoal.version. Broker 1 only supports versions 1-2."]
    # --latest: every family to this release's highest level (shoal.version 2 here, never downgraded)
    out = shoal_cli("features", "upgrade", "--latest", "--bootstrap-server", b2)
    assert (out.returncode, out.stdout) == (0, "shoal.version was upgraded to 2.\n"), out.stderr
    out = shoal_cli("features", "upgrade", "--latest", "--bootstrap-server", b2)
    assert (out.returncode, out.stdout) == (
        0, "Every feature is finalized at the highest level this broker's release supports.\n"), out.stderr
    until(lambda: finalized(b1)["transaction.version"][0] == (2, 2), 10, "broker 1 sees the upgrade")


def test_a_broker_that_cannot_run_the_finalized_level_refuses_to_start(cluster):
    """As a release that finalized shoal.version 3 would leave the cluster: broker 2 (this
    release, 1 to 2) is refused in one line naming both, having served nothing, and broker 1,
    running, logs that it could not start again; back at 1 broker 2 starts."""
    before = etcd_json(cluster, "meta/features")
    cluster.stop(2)
    newer = {"epoch": before["epoch"], "levels": {**before["levels"], "shoal.version": 3}}
    mark, mark1 = len(cluster[2].log_text()), len(cluster[1].log_text())
    cluster.etcd.etcdctl("put", f"{cluster.prefix}/meta/features", json.dumps(newer))
    try:
        # broker 1, running, says in one error line that it could not start again
        until(lambda: "ERROR shoal.broker: the cluster's finalized shoal.version is 3, this broker" in
              cluster[1].log_text()[mark1:], 10, "broker 1's error line")
        with pytest.raises(RuntimeError, match="exited with status 1"):
            cluster.start_one(2)
        log = cluster[2].log_text()[mark:].strip().splitlines()
        assert log[1:] == [
            f"shoal serve: cannot start: the cluster's finalized shoal.version is 3, this broker (shoal "
            f"{shoal.__version__}) supports shoal.version 1 to 2: run a release that supports level 3 (see shoal "
            "features describe)"], log
    finally:
        cluster.etcd.etcdctl("put", f"{cluster.prefix}/meta/features", json.dumps(before))
    cluster.start_one(2)
    cluster.wait_brokers({1, 2})
    assert finalized(cluster[2].bootstrap)["shoal.version"][0] == (2, 2)


def test_a_tenant_administrator_cannot_change_feature_levels(cluster):
    from kafka.errors import ClusterAuthorizationFailedError
    from tenancy_fixtures import Tenant

    status, body = cluster[1].http("POST", "/v1/tenants", {"display_name": "features-tenant"})
    assert status == 201, body
    tenant = Tenant(cluster[1], body["tenant_id"])
    tenant.add_user("features-admin", admin=True)
    a = KafkaAdminClient(client_id="features-tenant", **tenant.kafka_python())
    try:
        assert a.describe_features()["transaction.version"]["finalized"] == (2, 2)  # it may read them
        with pytest.raises(ClusterAuthorizationFailedError, match="a tenant's principals cannot finalize them"):
            a.update_features({"transaction.version": ("SAFE_DOWNGRADE", 1)})
    finally:
        a.close()
    assert etcd_json(cluster, "meta/features")["levels"]["transaction.version"] == 2
