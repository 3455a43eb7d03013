"""`shoal serve` start-up failures: one clear line on stderr and a non-zero exit, no traceback."""

from __future__ import annotations

import socket
import subprocess
import sys


def _serve(*args: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shoal", "serve", "--log-dirs", str(tmp_path / "data"), *args],
        capture_output=True, text=True, timeout=60,
    )


def test_port_in_use(tmp_path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = _serve("--listeners", f"PLAINTEXT://127.0.0.1:{port}", tmp_path=tmp_path)
    assert r.returncode == 1
    assert "cannot start" in r.stderr and "address already in use" in r.stderr
    assert "Traceback" not in r.stderr


def test_missing_tls_material(tmp_path) -> None:
    r = _serve(
        "--listeners", "SSL://127.0.0.1:0",
        "--override", f"ssl.keystore.location={tmp_path}/missing.pem",
        tmp_path=tmp_path,
    )
    assert r.returncode == 1
    assert "cannot load TLS material" in r.stderr and "Traceback" not in r.stderr


def test_bad_config_value(tmp_path) -> None:
    r = _serve("--override", "num.partitions=many", tmp_path=tmp_path)
    assert r.returncode == 2
    assert "num.partitions" in r.stderr and "Traceback" not in r.stderr
