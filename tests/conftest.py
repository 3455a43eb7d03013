"""Shared fixtures: a real Shoal broker in a subprocess, for the end-to-end tests in tests/e2e.

``broker`` is one broker for the whole session; ``fresh_broker`` is one per test module, for the
tests that restart or SIGKILL it. Both are :class:`BrokerProcess` objects::

    broker.bootstrap   "127.0.0.1:<port>"
    broker.data_dir    its --log-dirs
    broker.restart()   SIGTERM, wait, start again on the same port and directory
    broker.kill9()     SIGKILL, then start again on the same port and directory
    broker.stop()

The broker's stdout and stderr go to ``<tmp>/broker.log``; when a test that uses a broker fails,
the tail of that log is attached to the report ("shoal broker log" section).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests explore fresh random inputs on every developer run; CI (CI=true) replays a fixed
# derandomized sequence, without an example database, so a submission's result does not depend
# on the draw. Neither times the examples: a property is about results, and Hypothesis's default
# 200 ms deadline per example (and its too_slow health check) fail a test when one example is slow
# on a busy machine; hangs are bounded by pytest-timeout. Stated here, not inherited: Hypothesis's
# own "ci" profile has the same, but only where Hypothesis itself detects a CI environment.
settings.register_profile("shoal", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", settings.get_profile("shoal"), derandomize=True, database=None)
settings.load_profile("ci" if os.environ.get("CI") else "shoal")

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # plain `pytest` without an installed shoal
    sys.path.insert(0, str(REPO))
if str(REPO / "tests") not in sys.path:  # so test modules anywhere import broker_process
    sys.path.insert(0, str(REPO / "tests"))
from broker_process import BrokerProcess  # noqa: E402  (the subprocess broker, shared with other fixtures)


def _workdir(prefix: str) -> Path:
    # Not under pytest's basetemp: other pytest sessions on this machine rotate that away.
    return Path(tempfile.mkdtemp(prefix=prefix))


def _guarded(b: BrokerProcess):
    """Fail the test (and restart the broker) when the broker process is found dead."""
    if not b.running:
        status = b.proc.returncode if b.proc else None
        b.start()
        pytest.fail(f"the broker had exited (status {status}) before this test; restarted it\n{b.log_tail()}")
    yield b
    if not b.running:
        status = b.proc.returncode if b.proc else None
        tail = b.log_tail()
        b.start()
        pytest.fail(f"the broker exited (status {status}) during this test\n{tail}")


@pytest.fixture(scope="session")
def _session_broker(request):
    b = BrokerProcess(_workdir("shoal-e2e-"))
    b.start()
    yield b
    b.stop()
    _cleanup(request, b)


@pytest.fixture(scope="module")
def _module_broker(request):
    b = BrokerProcess(_workdir("shoal-e2e-fresh-"))
    b.start()
    yield b
    b.stop()
    _cleanup(request, b)


def _cleanup(request, b: BrokerProcess) -> None:
    if request.session.testsfailed:
        print(f"\nkept broker directory {b.workdir} (tests failed)")
    else:
        shutil.rmtree(b.workdir, ignore_errors=True)


@pytest.fixture
def broker(_session_broker):
    """The session's broker (one for all tests that do not stop it)."""
    yield from _guarded(_session_broker)


@pytest.fixture
def fresh_broker(_module_broker):
    """A broker of this module's own, for tests that restart or kill it."""
    yield from _guarded(_module_broker)


@pytest.fixture(scope="session")
def etcd_cluster():
    """A real three-member etcd on loopback (``tests/etcd_cluster.py``) for the whole session.
    Tests share it, each under a prefix of its own (``etcd_prefix``); tests that stop members
    start an ``EtcdCluster`` of their own. Fails, never skips, when etcd is not installed."""
    from etcd_cluster import EtcdCluster

    c = EtcdCluster(_workdir("shoal-etcd-"))
    c.start()
    yield c
    c.close()


@pytest.fixture
def etcd_prefix() -> str:
    """A key prefix no other test uses."""
    return f"/shoal-test/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def topic_name(request) -> str:
    """A topic name unique to this test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")
    return f"{base}-{uuid.uuid4().hex[:6]}"


# -- running in parallel (`make test`: pytest-xdist, `-n 4 --dist loadgroup -m "not serial"`, then
# `-m serial` alone) -------------------------------------------------------------------------------
# Tests that measure throughput, latency or fairness against a bound: they run in a second pytest
# invocation with nothing else of the suite beside them. Paths (a whole module) or node ids.
SERIAL = (
    "tests/e2e/test_noisy_neighbour.py",  # p99 latency of one tenant beside another
    "tests/e2e/test_quotas.py",  # throughput held to (and kept within) a quota
    "tests/e2e/test_broker_limits.py",  # weighted shares of a saturated broker
    "tests/e2e/test_groups.py::test_first_record_of_a_new_group_within_two_seconds",
    "tests/e2e/test_consumer_protocol.py::test_first_record_of_a_new_group_with_default_settings",
    "tests/e2e/test_hardening_batches.py::test_bomb_planted_on_disk",  # another client's slowest round trip
    "tests/handlers/test_admin_mutation_quota.py",  # throttle times to the second (16.8 s for 19-20 beside others)
    # acks=all p50 under 30 ms beside a slow inter-DC link (beside 4 workers: p50 3-4 s, once)
    "tests/multiregion/test_region_links.py::test_a_slow_inter_dc_link_holds_back_a_sync_replica_not_an_observer",
)
# CPU-bound property tests: beside other workers on 2 cores they take 2-3 times as long as alone
# (146 s measured for test_writer's), so their hang guard (pytest-timeout) is longer.
CPU_BOUND = (
    "tests/protocol/test_writer.py",
    "tests/protocol/test_guard_nulls.py",
    "tests/protocol/test_codec.py",
    "tests/groups/test_assignors.py",
    "tests/auth/test_scram_first.py",
)
CPU_BOUND_TIMEOUT = 600
# One xdist group per module (module and session fixtures are started once, as in a serial run),
# except the tests of these folders that use this fixture, which share one group: one Spark JVM
# (the session's ``spark``) for all the tests that use it. The folder's other tests (Spark jobs in
# processes of their own, or no Spark at all) are in their module's group and run beside it
# (measured at load ~10: the Spark group took 976 s, 404 of them the two job tests below).
SHARED_GROUPS = {"tests/spark/": "spark"}
# Modules whose tests each start what they need (no module-scoped fixtures) and take minutes
# together: each test is a group of its own, so that the module is not one long chain on one
# worker (the drills: 267 s in one group, measured; the exactly-once job tests: 245 s and 159 s).
SPLIT = ("tests/multiregion/test_drills.py", "tests/spark/test_spark_exactly_once.py")
# Groups handed out first, longest first (measured), so that none starts last and keeps the run
# waiting; the others follow in collection order.
FIRST = (
    "tests/spark/",
    "tests/multiregion/test_drills.py",
    "tests/protocol/test_writer.py",
    "tests/groups/test_assignors.py",
    "tests/e2e/test_auth.py",
    "tests/protocol/test_guard_nulls.py",
    "tests/auth/test_scram_first.py",
    "tests/test_startup_errors.py",
    "tests/cluster/test_etcd_outage.py",
)


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: measures time or throughput; `make test` runs it alone")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
        if item.nodeid.startswith(CPU_BOUND):
            own = item.get_closest_marker("timeout")
            if own is None or (own.args and own.args[0] < CPU_BOUND_TIMEOUT):
                item.add_marker(pytest.mark.timeout(CPU_BOUND_TIMEOUT))
        mark = item.get_closest_marker("xdist_group")
        if mark is None:
            path = item.nodeid.split("::")[0]
            shared = [d for d, f in SHARED_GROUPS.items() if path.startswith(d) and f in item.fixturenames]
            group = shared[0] if shared else item.nodeid if path in SPLIT else path
            item.add_marker(pytest.mark.xdist_group(group))
        else:
            group = mark.args[0] if mark.args else mark.kwargs.get("name", "default")
        item.user_properties.append(("xdist_group", group))  # to the controller, for the summary
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike (xdist checks)
        items.sort(key=lambda it: next((i for i, p in enumerate(FIRST) if it.nodeid.startswith(p)), len(FIRST)))


# Seconds each xdist group took (setup, call and teardown of its tests), summed on the controller.
# A group runs on one worker from start to end, so the longest groups bound the parallel phase.
_GROUP_SECONDS: dict[str, float] = {}
SLOWEST_GROUPS = 15


def pytest_runtest_logreport(report):
    group = dict(report.user_properties).get("xdist_group", report.nodeid.split("::")[0])
    _GROUP_SECONDS[group] = _GROUP_SECONDS.get(group, 0.0) + (report.duration or 0.0)


def pytest_terminal_summary(terminalreporter, config):
    if os.environ.get("PYTEST_XDIST_WORKER") or not _GROUP_SECONDS:
        return
    slowest = sorted(_GROUP_SECONDS.items(), key=lambda kv: -kv[1])[:SLOWEST_GROUPS]
    terminalreporter.write_sep("=", f"slowest {len(slowest)} modules (xdist groups), seconds")
    for group, seconds in slowest:
        terminalreporter.write_line(f"{seconds:8.1f}  {group}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        funcargs = getattr(item, "funcargs", {}) or {}
        for name, value in funcargs.items():
            if isinstance(value, BrokerProcess):
                rep.sections.append((f"shoal broker log ({name})", value.log_tail()))
