"""A real Shoal broker in a subprocess (``python -m shoal serve``), restartable: the broker of the
``broker``/``fresh_broker`` fixtures (tests/conftest.py) and the base of the ones with more
listeners (tests/e2e/tenancy_fixtures.py). Imported as ``broker_process``: tests/ is on sys.path.
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from raw_client import recv_frame

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT = 20.0
LOG_TAIL_LINES = 150


def _below_ephemeral() -> range:
    """The ports below the kernel's ephemeral range; under pytest-xdist, this worker's share of
    them only (every N-th port), so two workers never hand out the same port: each draws at random
    and checks it can bind, but binds it only later, and a whole-suite run once saw a region test's
    broker find its port taken by another worker's (address already in use)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    if low <= 12000:
        return range(0)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if worker.startswith("gw") and worker[2:].isdigit() and count > 1:
        return range(10000 + int(worker[2:]) % count, low, count)
    return range(10000, low)


_PORTS = _below_ephemeral()
_random = random.Random()  # its own: Hypothesis seeds the module's
_handed_out: set[int] = set()


def free_port() -> int:
    """A free loopback port for a listener that a test starts later. Drawn at random from below the
    kernel's ephemeral range (ip_local_port_range), which outgoing connections take their local
    ports from: no client's connect() takes it before the broker binds it, even with several
    pytest workers and other test runs connecting all the time. Ephemeral when there is no room."""
    for _ in range(200):
        if not _PORTS:
            break
        port = _random.choice(_PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
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
            payload = recv_frame(s)
    except (OSError, EOFError):
        return False
    correlation_id, resp = codec.decode_response(18, 0, payload)
    return correlation_id == 1 and resp.error_code == 0


class BrokerProcess:
    """``python -m shoal serve`` on a fixed port and directory, restartable, with ``overrides``
    (``--override key=value`` each) and ``log_level`` (``--log-level``). Subclasses add listeners
    (``listeners``) and settings."""

    def __init__(self, workdir: Path, port: int | None = None, overrides: dict[str, str] | None = None,
                 log_level: str | None = None) -> None:
        self.overrides: dict[str, str] = dict(overrides or {})
        self.log_level = log_level
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "broker.log"
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        # a release installed into a venv of its own (test_release.py, cluster/test_rolling_upgrade.py):
        # its console script runs, without this checkout on PYTHONPATH; None: this checkout
        self.venv: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def listeners(self) -> list[str]:
        """The ``--listeners`` entries, PLAINTEXT on ``self.port`` among them: readiness is an
        ApiVersions round trip on it."""
        return [f"PLAINTEXT://{self.host}:{self.port}"]

    def serve_args(self) -> list[str]:
        """``shoal serve`` arguments: the listeners, the data directory and the overrides."""
        args = ["--listeners", ",".join(self.listeners()), "--log-dirs", str(self.data_dir)]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        return args + (["--log-level", self.log_level] if self.log_level else [])

    def command(self) -> list[str]:
        """What runs ``shoal serve``: this checkout's on this Python, or the ``venv``'s."""
        if self.venv is not None:
            return [str(self.venv / "bin" / "shoal"), "serve", *self.serve_args()]
        return [sys.executable, "-m", "shoal", "serve", *self.serve_args()]

    def environment(self) -> dict[str, str]:
        """The broker's environment: this one, with the checkout on PYTHONPATH (without any
        PYTHONPATH for a ``venv``'s release: what it imports comes from its install)."""
        if self.venv is not None:
            return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONUNBUFFERED": "1"}
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts} at {time.strftime('%H:%M:%S')} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.workdir,
                env=self.environment(),
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
                self._wait_banner()
                return
            time.sleep(0.05)
        self._terminate(signal.SIGKILL)
        raise RuntimeError(f"broker not answering ApiVersions after {START_TIMEOUT}s\n{self.log_tail()}")

    def _wait_banner(self, timeout: float = 5.0) -> None:
        """Until this start's "is up" banner is in the log (printed once start-up is done, after
        the port answers), so a test that reads the log from here on sees no start-up lines."""
        marker = f"===== start #{self.starts} at "
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_text()
            if " is up: " in text[text.rfind(marker):]:
                return
            time.sleep(0.02)

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


def http_json(base_url: str, method: str, path: str, body: Any = None, raw: bytes | None = None,
              auth: tuple[str, str] | None = None) -> tuple[int, Any]:
    """One call to the broker's HTTP admin API: (status, decoded JSON body), errors included;
    ``auth`` = (user, password) sends HTTP Basic credentials."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    req = urllib.request.Request(base_url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
