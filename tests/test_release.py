"""A release, as an operator gets it (issue 28, part 1): ``python -m build`` makes an sdist and a
wheel (the wheel built from the sdist, so the sdist is complete), the wheel installs into a fresh
venv (third-party packages from the machine: ``--system-site-packages``, ``pip install --no-deps``)
and its ``shoal serve`` runs outside the repository (another working directory, no PYTHONPATH) and
serves confluent-kafka's produce and consume, with the C speed-up removed (it is optional). The
same broker shows the release everywhere it is said to: ``shoal --version``, the banner, the
``broker N started`` log line, ``/metrics``' ``shoal_build_info``; and the KIP-511 client software
each connection named in ApiVersions (``shoal_client_software_connections``), refusing names Kafka
refuses with INVALID_REQUEST.

One build, venv and broker for the module (~20 s of it is the build and the venv).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka import Consumer, Producer

from broker_process import REPO, BrokerProcess, free_port
from polling import until
from raw_client import RawClient

import shoal
from shoal.protocol.errors import ErrorCode

sys.path.insert(0, str(REPO / "tests" / "metrics"))
from metrics_scrape import scrape  # noqa: E402

VERSION = shoal.__version__
TIMEOUT = 30.0


class InstalledBroker(BrokerProcess):
    """``shoal serve`` of the venv's console script, with no PYTHONPATH, in a directory outside
    the repository: what it imports comes from the installed wheel (or the machine's packages)."""

    def __init__(self, workdir: Path, venv: Path, **kw) -> None:
        super().__init__(workdir, **kw)
        self.venv = venv


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def release():
    work = Path(tempfile.mkdtemp(prefix="shoal-release-"))
    dist, venv = work / "dist", work / "venv"
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # --no-isolation: the build backend this machine has (setuptools and wheel: the test extras), not
    # one downloaded into a fresh environment per run (14 s of the module's time, 40 s loaded)
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(REPO)], cwd=work, env=clean)
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], cwd=work, env=clean)
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
         cwd=work, env=clean)
    # The C speed-up is optional: the installed broker runs without it (shoal_build_info says so).
    site = Path(_run([str(venv / "bin" / "python"), "-c", "import shoal, os; print(os.path.dirname(shoal.__file__))"],
                     cwd=work, env=clean).strip())
    for so in (site / "_native").glob("speedups*.so"):
        so.unlink()
    broker = InstalledBroker(work / "broker", venv,
                             overrides={"shoal.metrics.listener": f"http://127.0.0.1:{free_port()}"})
    broker.start()
    try:
        yield work, wheel, sdist, site, broker
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def test_the_sdist_and_wheel_hold_every_module_and_the_release_notes(release):
    _work, wheel, sdist, _site, _broker = release
    assert wheel.name.startswith(f"shoal-{VERSION}-") and sdist.name == f"shoal-{VERSION}.tar.gz"
    tracked = _run(["git", "ls-files", "shoal"], cwd=REPO).split()
    with zipfile.ZipFile(wheel) as z:
        in_wheel = set(z.namelist())
    # every module and every file a module may read beside itself (package data)
    assert [f for f in tracked if f not in in_wheel] == []
    assert any(n.startswith("shoal/_native/speedups") and n.endswith(".so") for n in in_wheel)  # built here
    assert not [n for n in in_wheel if "__pycache__" in n or n.endswith(".pyc")]
    with tarfile.open(sdist) as t:
        in_sdist = {n.partition("/")[2] for n in t.getnames()}
    assert [f for f in tracked if f not in in_sdist] == []
    assert {"CHANGELOG.md", "README.md", "pyproject.toml", "setup.py"} <= in_sdist


def test_the_installed_broker_serves_produce_and_consume_outside_the_repository(release):
    work, _wheel, _sdist, site, broker = release
    assert REPO not in site.parents and REPO not in broker.workdir.parents
    assert not list((site / "_native").glob("*.so"))
    out = _run([str(work / "venv" / "bin" / "shoal"), "--version"], cwd=work,
               env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.strip() == f"shoal {VERSION}"
    conf = {"bootstrap.servers": broker.bootstrap}
    p = Producer({**conf, "acks": "all", "enable.idempotence": True})
    for i in range(200):
        p.produce("released", key=str(i).encode(), value=f"v{i}".encode())
    assert p.flush(TIMEOUT) == 0
    c = Consumer({**conf, "group.id": "release-check", "auto.offset.reset": "earliest"})
    c.subscribe(["released"])
    got: list[bytes] = []
    try:
        while len(got) < 200:
            m = c.poll(TIMEOUT)
            assert m is not None, f"consumed {len(got)} of 200"
            assert m.error() is None, m.error()
            got.append(m.value())
    finally:
        c.close()
    assert got == [f"v{i}".encode() for i in range(200)]
    log = broker.log_text()
    assert f"Shoal broker 1 is up: PLAINTEXT://{broker.bootstrap} (shoal {VERSION}, cluster " in log
    assert f"broker 1 started: PLAINTEXT://{broker.bootstrap}, " in log and f", shoal {VERSION} (Python " in log


def test_metrics_show_the_build_and_each_connections_client_software(release):
    *_, broker = release
    url = broker.overrides["shoal.metrics.listener"] + "/metrics"
    first = scrape(url)
    infos = [dict(labels) for (name, labels), v in first.samples.items() if name == "shoal_build_info" and v == 1]
    assert infos == [{"version": VERSION, "python": f"{sys.version_info[0]}.{sys.version_info[1]}."
                      f"{sys.version_info[2]}", "speedups": "python"}]
    assert first.value("shoal_feature_finalized_level", feature="shoal.version") == 1
    assert first.value("shoal_feature_max_supported_level", feature="transaction.version") == 2
    p = Producer({"bootstrap.servers": broker.bootstrap})
    with RawClient(broker.bootstrap) as ok, RawClient(broker.bootstrap) as old:
        assert p.list_topics(timeout=TIMEOUT).brokers
        assert ok.call(18, 3, {"client_software_name": "probe-app", "client_software_version": "1.2.3-rc1"}) \
            .error_code == ErrorCode.none
        assert old.call(18, 0, {}).error_code == ErrorCode.none
        s = scrape(url)
        conns = "shoal_client_software_connections"
        assert s.value(conns, listener="PLAINTEXT", client_software_name="probe-app",
                       client_software_version="1.2.3-rc1") == 1
        assert s.value(conns, listener="PLAINTEXT", client_software_name="unknown",
                       client_software_version="unknown") >= 1

        def rdkafka() -> set[str]:  # (librdkafka opens its connection to broker 1 after the bootstrap's)
            return {dict(labels)["client_software_version"] for (name, labels), v in scrape(url).samples.items()
                    if name == conns and dict(labels)["client_software_name"] == "confluent-kafka-python"}

        # confluent-kafka names itself and its version, with librdkafka's
        assert until(rdkafka, TIMEOUT, "confluent-kafka's connection") == {
            f"{confluent_kafka.__version__}-rdkafka-{confluent_kafka.libversion()[0]}"}
    del p


@pytest.mark.parametrize("name, version", [
    ("", "1.0"), ("-app", "1.0"), ("app.", "1.0"), ("app name", "1.0"), ("app", ""), ("app", "1.0 beta"),
    ("app", "1.0_1"), ("äpp", "1.0"),
])
def test_client_software_kafka_refuses_is_invalid_request(release, name, version):
    *_, broker = release
    with RawClient(broker.bootstrap) as r:
        resp = r.call(18, 3, {"client_software_name": name, "client_software_version": version})
        assert resp.error_code == ErrorCode.invalid_request
        assert r.call(18, 3, {"client_software_name": "app", "client_software_version": "1.0"}).error_code == 0
