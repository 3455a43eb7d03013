"""The ``shoal`` command's basics (issue 16), from real processes: an unknown key in a properties
file is a warning naming it (Kafka's "was supplied but isn't a known config"), an invalid
``--log-level`` is an argparse error listing the choices, ``shoal --version`` prints the version,
and ``shoal ... | head`` ends without a BrokenPipeError traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker_process import REPO, BrokerProcess
from shoal import __version__

pytestmark = pytest.mark.timeout(90)

CHOICES = "choose from DEBUG, INFO, WARNING, ERROR, CRITICAL"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SHOAL_LOG_LEVEL", None)
    env.update(extra)
    return env


def _shoal(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shoal", *args], capture_output=True, text=True,
                          timeout=60, env=_env(**env))


class PropertiesBroker(BrokerProcess):
    """A broker whose settings come from a server.properties file."""

    def __init__(self, workdir: Path, properties: dict[str, str]) -> None:
        super().__init__(workdir)
        self.properties = workdir / "server.properties"
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in {
            "listeners": f"PLAINTEXT://{self.host}:{self.port}", "log.dirs": str(self.data_dir), **properties,
        }.items()))

    def serve_args(self) -> list[str]:
        return ["--config", str(self.properties)]


def test_unknown_config_keys_are_named(tmp_path) -> None:
    b = PropertiesBroker(tmp_path, {
        "shoal.metdata.store": "embedded",  # a typo of shoal.metadata.store
        "num.partitions": "3",  # known: not named
        "listener.name.plaintext.ssl.keystore.location": "/x",  # per-listener keys are not unknown
        "frobnicate.level": "11",  # near nothing known
    })
    b.start()  # a warning, not a refusal
    try:
        warnings = [l for l in b.log_text().splitlines() if " WARNING shoal.config: " in l]
    finally:
        b.stop()
    assert [w.split(" WARNING shoal.config: ", 1)[1] for w in warnings] == [
        "The configuration 'shoal.metdata.store' was supplied but isn't a known config. "
        "Did you mean 'shoal.metadata.store'?",
        "The configuration 'frobnicate.level' was supplied but isn't a known config.",
    ]


def test_invalid_log_level_lists_the_choices(tmp_path) -> None:
    r = _shoal("serve", "--log-dirs", str(tmp_path / "data"), "--log-level", "loud")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"shoal serve: error: argument --log-level: invalid choice: 'loud' ({CHOICES}, in any case)" in r.stderr
    r = _shoal("serve", "--log-dirs", str(tmp_path / "data"), SHOAL_LOG_LEVEL="verbose")  # the default, too
    assert r.returncode == 2 and f"invalid choice: 'verbose' ({CHOICES}" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "data").exists()
    assert "{DEBUG,INFO,WARNING,ERROR,CRITICAL}" in _shoal("serve", "--help").stdout


def test_version() -> None:
    r = _shoal("--version")
    assert r.returncode == 0 and r.stdout == f"shoal {__version__}\n"


def _closed_reader(*args: str) -> subprocess.CompletedProcess:
    """Run ``shoal args`` with stdout a pipe whose reader is gone before anything is written:
    every write fails with EPIPE, as once ``head`` has what it wants."""
    p = subprocess.Popen([sys.executable, "-m", "shoal", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=_env())
    p.stdout.close()
    _, err = p.communicate(timeout=60)
    return subprocess.CompletedProcess(p.args, p.returncode, "", err.decode())


def test_a_closed_pipe_ends_quietly(broker) -> None:
    for i in range(3):
        assert _shoal("topics", "create", f"pipe-{i}", "--bootstrap-server", broker.bootstrap).returncode in (0, 1)
    r = _closed_reader("topics", "list", "--bootstrap-server", broker.bootstrap)
    assert r.stderr == "" and r.returncode == 141, r.stderr  # 128 + SIGPIPE, as `yes | head` ends
    assert _closed_reader("--help").stderr == ""  # argparse's own output, quiet too
    # the real thing: a pipeline into head -1
    r = subprocess.run(
        f"{sys.executable} -m shoal topics list --bootstrap-server {broker.bootstrap} | head -1",
        shell=True, capture_output=True, text=True, timeout=60, env=_env(),
    )
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 1 and r.stderr == "", r.stderr
