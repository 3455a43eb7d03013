"""Two brokers on one data directory (issue 16, Safety): the second is refused, having changed nothing.

A running broker holds ``flock`` on ``<dir>/.lock`` in each log dir and in its metadata store's
directory (``shoal.storage.dirlock``). A second ``python -m shoal serve`` on the same directory
(on another port) exits 1 with one line naming the directory and the holder's pid, before reading
anything: every file of the first broker is byte-identical afterwards (before the lock, a second
start compacted the running broker's metadata journal into its snapshot), and the first broker
still serves. After a kill -9 the kernel drops the lock with the process: the ``.lock`` file left
behind locks nothing and a restart works.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from broker_process import REPO, BrokerProcess, free_port
from e2e_helpers import OP_TIMEOUT, consume, create_topic

pytestmark = pytest.mark.timeout(120)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    errors: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, "message.timeout.ms": 15000})
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert p.flush(OP_TIMEOUT) == 0
    assert not errors, errors[:3]


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*")) if p.is_file()
    }


def _settled_files(root: Path, quiet_s: float = 6.0, limit_s: float = 45.0) -> dict[str, bytes]:
    """The files once the broker has stopped writing on its own for ``quiet_s`` (its periodic
    checkpoint runs every 5 s), so a later difference can only come from someone else."""
    deadline = time.monotonic() + limit_s
    last, since = _files(root), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _files(root)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return now
    raise AssertionError(f"the broker kept rewriting its files for {limit_s}s")


def _second_serve(*log_dirs: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "shoal", "serve", "--listeners", f"PLAINTEXT://127.0.0.1:{free_port()}",
         "--log-dirs", ",".join(str(d) for d in log_dirs)],
        capture_output=True, text=True, timeout=60, env=env,
    )


@pytest.fixture
def first(tmp_path):
    # no periodic writer beyond its checkpoint: metering (a usage window every 10 s) off, so that a
    # difference in its files can only come from the second process
    b = BrokerProcess(tmp_path / "first", overrides={"shoal.metering.enable": "false"})
    b.start()
    yield b
    b.stop()


def test_second_broker_is_refused_and_changes_nothing(first, tmp_path) -> None:
    create_topic(first.bootstrap, "locked", 2)
    _produce(first.bootstrap, "locked", [f"v{i}".encode() for i in range(50)])
    before = _settled_files(first.data_dir)
    # what a second start used to rewrite: a journal to fold into the snapshot
    assert before["__metadata/metadata.journal"], "nothing in the journal: the test would prove little"
    assert before[".lock"].decode().strip() == str(first.proc.pid)

    r = _second_serve(first.data_dir)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f"log dir {first.data_dir} is in use by process {first.proc.pid}" in lines[0]
    assert "stop that broker first" in lines[0] and "Traceback" not in r.stderr

    # a second broker that names the directory as its second log dir is refused as well
    other = tmp_path / "other"
    r = _second_serve(other, first.data_dir)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"log dir {first.data_dir} is in use by process {first.proc.pid}" in r.stderr

    assert _files(first.data_dir) == before
    assert first.running
    _produce(first.bootstrap, "locked", [b"after"])
    got = consume(first.bootstrap, "locked", 2, 51)
    assert sorted(m.value() for m in got) == sorted([f"v{i}".encode() for i in range(50)] + [b"after"])


def test_kill9_releases_the_lock(first) -> None:
    create_topic(first.bootstrap, "survives", 1)
    _produce(first.bootstrap, "survives", [b"one", b"two"])
    dead_pid = first.proc.pid
    first._terminate(signal.SIGKILL)
    assert not first.running
    # the .lock file is still there, naming the dead holder; it locks nothing
    assert (first.data_dir / ".lock").read_text().strip() == str(dead_pid)
    first.start()
    assert (first.data_dir / ".lock").read_text().strip() == str(first.proc.pid)
    assert [m.value() for m in consume(first.bootstrap, "survives", [0], 2)] == [b"one", b"two"]
    # and the restarted broker holds it in turn
    r = _second_serve(first.data_dir)
    assert r.returncode == 1 and f"in use by process {first.proc.pid}" in r.stderr, r.stderr
