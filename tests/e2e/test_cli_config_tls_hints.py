"""The CLI says what to do (issue 16), through ``shoal`` as a subprocess against a real broker with a
PLAINTEXT listener, an SSL listener (a test CA) and the HTTP admin API:

- a refused config change (``shoal configs``, ``shoal topics alter|create --config``): an unknown
  name names the closest known one, a static config says it is read-only and needs the file and a
  restart, a value of the wrong type names the type and the default, a broker asked for another
  broker's configs says where to send it;
- a plaintext client on the TLS listener: "this listener speaks TLS" with the security.protocol to
  set, and the broker logs one line saying a client sent plaintext to its TLS listener; a TLS
  client on the plaintext listener: "this listener does not speak TLS";
- ``shoal tenants describe|list`` print times as ISO-8601, ``--output json`` epoch milliseconds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from broker_process import REPO, BrokerProcess, free_port
from e2e_helpers import one_line

pytestmark = pytest.mark.timeout(120)


class TlsBroker(BrokerProcess):
    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        sys.path.insert(0, str(REPO / "tests" / "auth"))
        from auth_certs import make_pki

        self.pki = make_pki(workdir / "pki")
        self.ssl_port = free_port()
        self.admin_url = f"http://127.0.0.1:{free_port()}"
        self.overrides.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.pki.server_pem),
                               "shoal.admin.listener": self.admin_url})

    def listeners(self) -> list[str]:
        return super().listeners() + [f"SSL://{self.host}:{self.ssl_port}"]


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    b = TlsBroker(tmp_path_factory.mktemp("shoal-e2e-cfg-tls-hints"))
    b.start()
    yield b
    b.stop()


def shoal(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "shoal", *args], capture_output=True, text=True, timeout=60, env=env)


def test_configs_hints(tb):
    b = ["--bootstrap-server", tb.bootstrap, "--timeout", "10"]
    one_line(shoal("configs", "alter", "--broker", "1", "--add-config", "log.cleaner.thread=2", *b), 1,
             "INVALID_REQUEST", "log.cleaner.thread is not a broker config: did you mean log.cleaner.threads?")
    one_line(shoal("configs", "alter", "--broker-defaults", "--add-config", "log.dirs=/elsewhere", *b), 1,
             "log.dirs is a static broker config, read-only while the broker runs", "server.properties",
             "shoal serve --override log.dirs=...", "restart the broker")
    one_line(shoal("configs", "alter", "--broker", "1", "--add-config", "message.max.bytes=lots", *b), 1,
             "INVALID_CONFIG", "message.max.bytes takes an integer (default 1048588)")
    one_line(shoal("configs", "describe", "--broker", "7", *b), 1,
             "only its own configs", "--bootstrap-server", "--broker 1 here")
    # the broker's configs are unchanged, and a good change still goes through
    r = shoal("configs", "alter", "--broker", "1", "--add-config", "log.cleaner.threads=2", *b)
    assert r.returncode == 0 and "Completed updating config for broker 1." in r.stdout, r.stderr

    topic = f"hints-{uuid.uuid4().hex[:6]}"
    one_line(shoal("topics", "create", topic, "--config", "cleanup.polcy=compact", *b), 1,
             "cleanup.polcy is not a topic config: did you mean cleanup.policy?")
    assert shoal("topics", "create", topic, *b).returncode == 0
    one_line(shoal("topics", "alter", topic, "--config", "retention.msx=5", *b), 1,
             "did you mean retention.ms?")
    one_line(shoal("topics", "alter", topic, "--config", "retention.ms=soon", *b), 1, "retention.ms takes an integer")


def test_plaintext_client_on_the_tls_listener(tb, tmp_path):
    tls = f"127.0.0.1:{tb.ssl_port}"
    before = tb.log_text().count("sent plaintext")
    one_line(shoal("topics", "list", "--bootstrap-server", tls, "--timeout", "10"), 3,
             "this listener speaks TLS: use --command-config with security.protocol=SSL", "ssl.ca.location")
    sasl = tmp_path / "sasl.properties"
    sasl.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=u\nsasl.password=p\n")
    one_line(shoal("groups", "list", "--bootstrap-server", tls, "--command-config", str(sasl), "--timeout", "10"), 3,
             "this listener speaks TLS", "security.protocol=SASL_SSL")
    lines = [l for l in tb.log_text().splitlines() if "sent plaintext" in l]
    assert len(lines) > before
    assert f"listener SSL speaks TLS but a client at 127.0.0.1 sent plaintext" in lines[-1]
    assert "security.protocol=SSL" in lines[-1]
    # with what the hint says, it works
    ok = tmp_path / "ssl.properties"
    ok.write_text(f"security.protocol=SSL\nssl.ca.location={tb.pki.ca}\n")
    r = shoal("topics", "list", "--bootstrap-server", tls, "--command-config", str(ok), "--timeout", "10")
    assert r.returncode == 0, r.stderr
    # and the other way round: TLS to the plaintext listener
    one_line(shoal("topics", "list", "--bootstrap-server", tb.bootstrap, "--command-config", str(ok), "--timeout", "10"),
             3, "this listener does not speak TLS: set security.protocol=PLAINTEXT in " + str(ok))
    # a listener that is not there is still "cannot connect", nothing more
    one_line(shoal("topics", "list", "--bootstrap-server", f"127.0.0.1:{free_port()}", "--timeout", "5"), 3,
             "cannot connect")


ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def test_tenant_times_are_iso_8601(tb):
    url = ["--admin-url", tb.admin_url]
    r = shoal("tenants", "create", "Iso Co", *url)
    assert r.returncode == 0, r.stderr
    tid = r.stdout.strip()
    r = shoal("tenants", "describe", tid, *url)
    assert r.returncode == 0, r.stderr
    created = re.search(rf"^Created: ({ISO})$", r.stdout, re.M).group(1)
    r = shoal("tenants", "describe", tid, "--output", "json", *url)
    ms = json.loads(r.stdout)["created_ms"]
    assert isinstance(ms, int)
    assert datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp() * 1000 == pytest.approx(ms, abs=1)
    r = shoal("tenants", "list", *url)
    assert f"{tid}\tIso Co\tcreated={created}\tusers=" in r.stdout.splitlines()
    listed = json.loads(shoal("tenants", "list", "--output", "json", *url).stdout)
    assert {t["tenant_id"]: t["created_ms"] for t in listed}[tid] == ms
    # no admin API there: where it is expected to be and how to point the CLI elsewhere
    one_line(shoal("tenants", "list", "--admin-url", f"http://127.0.0.1:{free_port()}"), 3,
             "cannot reach the admin API", "shoal.admin.listener", "--quickstart", "SHOAL_ADMIN_URL")


def test_a_port_check_on_the_tls_listener_is_not_logged(tb):
    """A TCP connection opened and closed before the TLS handshake (a load balancer's health
    check, the controller's liveness probe every half second) is no news: no log line for it, or
    a broker probed over TLS logs two lines a second. A real handshake failure is still logged."""
    import socket
    import time

    mark = len(tb.log_text())
    for _ in range(5):
        socket.create_connection(("127.0.0.1", tb.ssl_port), timeout=5).close()
    with socket.create_connection(("127.0.0.1", tb.ssl_port), timeout=5) as s:  # not a ClientHello
        s.sendall(b"\x16\x03\x01\x00\x05hello")
        s.settimeout(5)
        try:
            s.recv(100)
        except OSError:
            pass
    deadline = time.monotonic() + 10
    while "failed before it started" not in tb.log_text()[mark:] and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = [l for l in tb.log_text()[mark:].splitlines() if "listener SSL" in l]
    assert len(lines) == 1 and "failed before it started" in lines[0], lines

