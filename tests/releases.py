"""A release of this repository's history installed into a venv of its own, for the upgrade tests
(imported as ``releases``; tests/cluster/test_rolling_upgrade.py)::

    venv = installed(PREVIOUS, tmp_path_factory.getbasetemp())   # built once per test session
    broker.venv = venv                                           # broker_process.BrokerProcess runs it

The commit's tree (``git archive``: a commit hash, which every clone of main has, where a tag
may not be fetched) is built into a wheel with this machine's build backend (``python -m build
--no-isolation --skip-dependency-check``: an older release may name a newer setuptools than the
machine's, which builds it the same), installed with ``--no-deps`` into a ``--system-site-packages``
venv made without pip (this machine's pip installs into it: 2 s instead of 16 s). Its C speed-up
is built too, as an operator's would be.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from broker_process import REPO

BUILD_SECONDS: dict[str, float] = {}  # commit -> seconds its build and install took (reported by the tests)


def _run(args: list[str], cwd: Path, stdin: bytes | None = None) -> bytes:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(args, cwd=cwd, env=env, input=stdin, capture_output=True, timeout=300)
    assert done.returncode == 0, (f"{' '.join(args)} failed ({done.returncode}):\n"
                                  f"{done.stdout.decode(errors='replace')}\n{done.stderr.decode(errors='replace')}")
    return done.stdout


def installed(commit: str, base: Path) -> Path:
    """The venv holding the release built from ``commit``, under ``base`` (made once: a venv
    already there is reused)."""
    work = base / f"release-{commit}"
    venv = work / "venv"
    if (venv / "bin" / "shoal").exists():
        return venv
    t0 = time.monotonic()
    src, dist = work / "src", work / "dist"
    src.mkdir(parents=True, exist_ok=True)
    tar = _run(["git", "archive", "--format=tar", commit], cwd=REPO)
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(src)
    _run([sys.executable, "-m", "build", "--no-isolation", "--skip-dependency-check", "--wheel",
          "--outdir", str(dist), str(src)], cwd=work)
    (wheel,) = dist.glob("*.whl")
    _run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], cwd=work)
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps",
          "--no-index", str(wheel)], cwd=work)
    BUILD_SECONDS[commit] = time.monotonic() - t0
    return venv


def version_of(venv: Path) -> str:
    """What ``shoal --version`` of the venv says (``shoal X.Y.Z``)."""
    return _run([str(venv / "bin" / "shoal"), "--version"], cwd=venv).decode().strip()
