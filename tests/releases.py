"""A release of this repository's history installed into a venv of its own, for the upgrade tests
and the benchmark of one (imported as ``releases``; tests/cluster/test_rolling_upgrade.py,
bench/bench_rolling_upgrade.py)::

    venv = installed(PREVIOUS, tmp_path_factory.getbasetemp())   # built once per test session
    broker.venv = venv                                           # broker_process.BrokerProcess runs it
    restart_on(cluster, 2, None, workload)                       # broker 2 onto this checkout

The commit's tree (``git archive``: a commit hash, which every clone of main has, where a tag
may not be fetched) is built into a wheel with this machine's build backend (``python -m build
--no-isolation --skip-dependency-check``: an older release may name a newer setuptools than the
machine's, which builds it the same), installed with ``--no-deps`` into a ``--system-site-packages``
venv made without pip (this machine's pip installs into it: 2 s instead of 16 s). Its C speed-up
is built too, as an operator's would be.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from broker_process import REPO
from polling import until
from shoal.client import AdminClient

# release 0.14.0 (tag v0.14.0), by its commit in main's history: a clone may not fetch tags
PREVIOUS = "0b9fb49de0a7a14b470068f933dc04ead08c554d"
# the last commit of main before shoal.version 2: feature levels, shoal.version 1 to 1 (until a release has them)
BEFORE_LEVEL_2 = "5cfdc4028f69aa40ae0a55630dbd985a3b300ec3"

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


# -- a cluster being rolled (a cluster_harness.Cluster with ``etcd`` and ``prefix`` set) ------------


def in_sync(c: Any) -> bool:
    """Every partition of every topic led, with all its replicas in the ISR."""
    async def go() -> Any:
        async with AdminClient(c.live[0].bootstrap, timeout=10) as a:
            return await a.describe_topics(await a.list_topics())
    try:
        topics = asyncio.run(go())
    except Exception:  # a broker stopping under us: not yet
        return False
    return all(p.leader >= 0 and set(p.isr) == set(p.replicas) for t in topics.values() for p in t.partitions)


def committed(c: Any, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of ``topic``, by partition."""
    async def go() -> dict[tuple[str, int], int]:
        async with AdminClient(c.bootstrap(*(b.node_id for b in c.live)), timeout=10) as a:
            return await a.fetch_offsets(group)
    return {p: o for (t, p), o in asyncio.run(go()).items() if t == topic}


def restart_on(c: Any, node: int, venv: Path | None, w: Any, more: int = 30, timeout: float = 60.0) -> float:
    """Controlled shutdown (SIGTERM) of broker ``node``, started again on ``venv`` (None: this
    checkout), until every replica is in sync and the workload ``w`` has ``more`` acks more; the
    seconds it took."""
    t0 = time.monotonic()
    c[node].stop()
    c[node].venv = venv
    c.start_one(node)
    until(lambda: in_sync(c), timeout, f"every replica in sync after broker {node} restarted")
    assert w.wait_acked(more, timeout), f"no progress after broker {node} restarted"
    return time.monotonic() - t0


def registered_range(c: Any, node: int) -> list[int] | None:
    """The ``shoal.version`` range broker ``node`` registered in etcd (None: a release before
    feature levels)."""
    reg = json.loads(c.etcd.etcdctl("get", f"{c.prefix}/brokers/{node}", "--print-value-only"))
    return next(([lo, hi] for f, lo, hi in reg.get("features", []) if f == "shoal.version"), None)


def etcd_topic(c: Any, name: str) -> dict[str, Any]:
    """A topic's value in etcd, as stored."""
    return json.loads(c.etcd.etcdctl("get", f"{c.prefix}/topics/{name}", "--print-value-only"))
