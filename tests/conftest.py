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
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests explore fresh random inputs on every developer run; CI (CI=true) replays a fixed
# derandomized sequence so a submission's result does not depend on the draw.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # plain `pytest` without an installed shoal
    sys.path.insert(0, str(REPO))
START_TIMEOUT = 20.0
LOG_TAIL_LINES = 150


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api_versions_ok(host: str, port: int, timeout: float = 2.0) -> bool:
    """A TCP connect and an ApiVersions v0 round trip with error_code 0."""
    from shoal.protocol import codec

    body = codec.request_type(18, 0)()
    frame = codec.encode_request(18, 0, 1, "shoal-tests", body)
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(frame)
            size = struct.unpack(">i", _recv_exactly(s, 4))[0]
            payload = _recv_exactly(s, size)
    except (OSError, EOFError):
        return False
    correlation_id, resp = codec.decode_response(18, 0, payload)
    return correlation_id == 1 and resp.error_code == 0


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


class BrokerProcess:
    """``python -m shoal serve`` on a fixed port and directory, restartable."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "broker.log"
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts} at {time.strftime('%H:%M:%S')} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-m", "shoal", "serve",
                    "--listeners", f"PLAINTEXT://{self.host}:{self.port}",
                    "--log-dirs", str(self.data_dir),
                ],
                cwd=self.workdir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker exited with status {self.proc.returncode} while starting\n{self.log_tail()}"
                )
            if api_versions_ok(self.host, self.port, timeout=1.0):
                return
            time.sleep(0.05)
        self._terminate(signal.SIGKILL)
        raise RuntimeError(f"broker not answering ApiVersions after {START_TIMEOUT}s\n{self.log_tail()}")

    def _terminate(self, sig: int, wait: float = 15.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            with open(self.log_path, "ab") as log:
                log.write(f"\n===== no exit {wait}s after signal {sig}; SIGKILL =====\n".encode())
            proc.kill()
            proc.wait(10)

    def stop(self) -> None:
        self._terminate(signal.SIGTERM)

    def restart(self) -> None:
        self.stop()
        self.start()

    def kill9(self) -> None:
        """SIGKILL (no shutdown hooks run), then start again on the same port and directory."""
        self._terminate(signal.SIGKILL)
        self.start()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no broker log)"
        return f"--- {self.log_path} (last {lines} lines) ---\n" + "\n".join(text[-lines:])

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


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


@pytest.fixture
def topic_name(request) -> str:
    """A topic name unique to this test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")
    return f"{base}-{uuid.uuid4().hex[:6]}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        funcargs = getattr(item, "funcargs", {}) or {}
        for name, value in funcargs.items():
            if isinstance(value, BrokerProcess):
                rep.sections.append((f"shoal broker log ({name})", value.log_tail()))
