"""A rolling upgrade from the previous release, for real (issue 28 part 2; docs/upgrades.md).

Three brokers on the session's three-member etcd start on release 0.14.0 (``PREVIOUS``: built from
this repository's history into a venv of its own, ``tests/releases.py``), under idempotent acks=all
load and a committing consumer group (``faults.workload``). Each broker in turn is stopped with a
controlled shutdown (SIGTERM) and started again on this checkout, once every replica is back in
sync. Before finalizing, one broker goes back to 0.14.0 (it rejoins and serves; while it is
registered ``shoal.version`` 2 cannot be finalized: it supports no level) and forward again; then
``shoal features upgrade --feature shoal.version=2``, and topics are written in their version-2
form (etcd's compact topic values) that every broker reads. The checker (``faults.checker``) finds
0 lost, duplicated or misordered records, no poll skips and no commit going backwards; the group's
committed offsets survive the roll; no send failed and no client saw a fatal error.

After finalizing, a release that cannot run at level 2 is refused in one line. 0.14.0 predates
feature levels and checks none (docs/upgrades.md says so): the release refused is the last commit
before level 2 (``BEFORE_LEVEL_2``), which has the refusal and supports ``shoal.version`` 1 only.

Wall time 29-53 s on the shared 2-core machine: the two builds, at once (2.4 s each idle, 5-8 s
loaded; printed), and the roll (18-32 s); one module, one cluster, one build per test session.
"""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker_process import REPO
from cluster_harness import Cluster, until
from faults.checker import check
from faults.run import create_topic
from faults.workload import Workload
from releases import (BEFORE_LEVEL_2, BUILD_SECONDS, PREVIOUS, committed, etcd_topic, in_sync, installed,
                      registered_range, restart_on, version_of)

TOPIC, PARTITIONS, GROUP = "rolling", 3, "rolling-group"


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    t0 = time.monotonic()
    with ThreadPoolExecutor(2) as pool:  # the two builds at once (each mostly waits on its subprocesses)
        previous, before2 = pool.map(lambda commit: installed(commit, base), (PREVIOUS, BEFORE_LEVEL_2))
    print(f"releases built and installed in {time.monotonic() - t0:.1f} s ({BUILD_SECONDS})")
    assert version_of(previous) == "shoal 0.14.0"
    return previous, before2


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory, releases):
    previous, _ = releases
    prefix = f"/rolling-{time.monotonic_ns() % 10**8}"
    c = Cluster(tmp_path_factory.mktemp("rolling"), etcd_cluster.url(prefix))
    c.etcd, c.prefix = etcd_cluster, prefix
    for b in c.brokers.values():
        b.venv = previous
    try:
        c.start()
        yield c
    finally:
        c.close()


def shoal_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shoal", *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO)


def test_rolling_upgrade_from_the_previous_release_loses_nothing(cluster, releases):
    c = cluster
    previous, _ = releases
    t0 = time.monotonic()
    assert all("(shoal 0.14.0, cluster " in b.log_text() for b in c.brokers.values())
    assert [registered_range(c, n) for n in (1, 2, 3)] == [None] * 3  # 0.14.0 registers no feature range
    create_topic(c, TOPIC, 3, PARTITIONS)
    all_brokers = c.bootstrap()
    w = Workload(TOPIC, PARTITIONS, all_brokers, all_brokers, observer_bootstrap=all_brokers, producers=1,
                 consumers=2, rate=150, group=GROUP, commit_interval=0.3)
    w.start()
    try:
        assert w.wait_acked(150, 30)
        until(lambda: len(committed(c, GROUP, TOPIC)) == PARTITIONS, 30, "the group's first commits")
        before = committed(c, GROUP, TOPIC)
        # -- the roll: each broker onto this checkout
        for node in (1, 2, 3):
            restart_on(c, node, None, w)
        assert [registered_range(c, n) for n in (1, 2, 3)] == [[1, 2]] * 3  # this checkout's range
        # -- before finalizing: one broker back to 0.14.0 rejoins and serves; it blocks level 2
        restart_on(c, 3, previous, w)
        assert registered_range(c, 3) is None
        out = shoal_cli("features", "upgrade", "--feature", "shoal.version=2", "--bootstrap-server", c[1].bootstrap)
        assert out.returncode == 1 and out.stderr.strip() == (
            "Could not upgrade shoal.version to 2. INVALID_UPDATE_VERSION: Invalid update version 2 for feature "
            "shoal.version. Broker 3 only supports versions 0-0."), out
        assert "v" not in etcd_topic(c, TOPIC)  # version 1: what 0.14.0 reads
        restart_on(c, 3, None, w)
        until(lambda: registered_range(c, 3) == [1, 2], 10, "broker 3 registered on this checkout")
        # -- finalize
        out = shoal_cli("features", "upgrade", "--feature", "shoal.version=2", "--bootstrap-server", c[2].bootstrap)
        assert (out.returncode, out.stdout) == (0, "shoal.version was upgraded to 2.\n"), out.stderr
        create_topic(c, "after-finalize", 3, 2)  # written in version 2, read by every broker
        doc = etcd_topic(c, "after-finalize")
        assert doc["v"] == 2 and len(doc["p"]) == 2
        until(lambda: in_sync(c), 30, "every replica in sync after finalizing")
        assert w.wait_acked(100, 30)
    finally:
        w.stop(flush_timeout=30, drain=2)
    roll_s = time.monotonic() - t0
    w.final_read(c[1].bootstrap)
    result = check(w.history)
    print(f"rolling upgrade: {roll_s:.1f} s; {result.summary()}; client errors (retriable): {len(w.client_errors)}")
    assert result.ok, result.summary()
    assert not w.fatal and not w.history.errors, (w.fatal, w.history.errors[:5])
    assert len(w.history.reads) > 0 and result.acked > 300
    # the group's committed offsets survived the roll: none went back, and they moved on
    after = committed(c, GROUP, TOPIC)
    assert set(after) == set(before) and all(after[p] >= before[p] for p in before), (before, after)
    assert sum(after.values()) > sum(before.values())


def test_after_finalizing_a_release_without_level_2_is_refused_in_one_line(cluster, releases):
    c = cluster
    _, before2 = releases
    assert version_of(before2) == "shoal 0.14.0"  # (main's version string before 0.15.0 is cut)
    c[3].stop()
    c[3].venv = before2
    mark = len(c[3].log_text())
    with pytest.raises(RuntimeError, match="exited with status 1"):
        c.start_one(3)
    lines = c[3].log_text()[mark:].strip().splitlines()
    assert lines[-1] == (
        "shoal serve: cannot start: the cluster's finalized shoal.version is 2, this broker (shoal 0.14.0) supports "
        "shoal.version 1 to 1: run a release that supports level 2 (see shoal features describe)"), lines
    assert c.describe(1)["brokers"].keys() == {1, 2}  # it registered nothing
