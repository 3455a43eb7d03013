"""tests/faults/linkproxy.py as a standalone script: a TCP echo server behind it, the delay
measured, stats and a cut through its stdin commands."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from broker_process import free_port

pytestmark = pytest.mark.timeout(60)

SCRIPT = Path(__file__).resolve().parents[1] / "faults" / "linkproxy.py"


def echo_server() -> int:
    srv = socket.create_server(("127.0.0.1", 0))

    def echo(c: socket.socket) -> None:
        try:
            while data := c.recv(4096):
                c.sendall(data)
        except OSError:  # the proxy's reset
            pass
        finally:
            c.close()

    def serve() -> None:
        while True:
            c, _ = srv.accept()
            threading.Thread(target=echo, args=(c,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


def test_the_script_delays_counts_and_cuts():
    listen = free_port()
    p = subprocess.Popen([sys.executable, str(SCRIPT), "--listen", str(listen), "--target", f"127.0.0.1:{echo_server()}",
                          "--delay-ms", "20"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().startswith(f"127.0.0.1:{listen} ->")
        with socket.create_connection(("127.0.0.1", listen), timeout=5) as s:
            t0 = time.perf_counter()
            s.sendall(b"ping")
            assert s.recv(4) == b"ping"
            assert 0.039 <= time.perf_counter() - t0 < 0.5  # 20 ms each way
            p.stdin.write("stats\n")
            p.stdin.flush()
            assert '"up_bytes": 4' in p.stdout.readline()
            p.stdin.write("cut reset\n")
            p.stdin.write("stats\n")
            p.stdin.flush()
            p.stdout.readline()
            with pytest.raises(OSError):
                s.sendall(b"x")
                if s.recv(1) == b"":
                    raise ConnectionError("closed")
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", listen), timeout=2)
        p.stdin.write("heal\n")
        p.stdin.write("stats\n")
        p.stdin.flush()
        p.stdout.readline()
        with socket.create_connection(("127.0.0.1", listen), timeout=5) as s:
            s.sendall(b"pong")
            assert s.recv(4) == b"pong"
        p.stdin.write("quit\n")
        p.stdin.flush()
        assert p.wait(10) == 0
    finally:
        p.kill()
