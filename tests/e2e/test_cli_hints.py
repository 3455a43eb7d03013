"""An admin command refused for who it is says, in one line, what to do (shoal.cli.hints): each
case through the ``shoal`` CLI as a subprocess against a real broker with a PLAINTEXT listener
(User:ANONYMOUS, not a super user), a SASL_PLAINTEXT listener, the ACL authorizer, ``super.users``
= User:admin and the HTTP admin API with basic authentication. The super user's commands keep
working before and after."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from broker_process import BrokerProcess, free_port
from e2e_helpers import one_line

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]


class HintBroker(BrokerProcess):
    def __init__(self, workdir: Path) -> None:
        self.sasl_port = free_port()
        self.admin_url = f"http://127.0.0.1:{free_port()}"
        super().__init__(workdir, overrides={
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
            "authorizer.class.name": "shoal",
            "super.users": "User:admin",
            "shoal.sasl.bootstrap.users": "admin:admin-secret,bob:bob-secret",
            "shoal.admin.listener": self.admin_url,
            "shoal.admin.authentication": "basic",
        })

    def listeners(self) -> list[str]:
        return super().listeners() + [f"SASL_PLAINTEXT://{self.host}:{self.sasl_port}"]


@pytest.fixture(scope="module")
def hb():
    b = HintBroker(Path(tempfile.mkdtemp(prefix="shoal-e2e-hints-")))
    b.start()
    yield b
    b.stop()
    shutil.rmtree(b.workdir, ignore_errors=True)


def props(tmp_path: Path, user: str, password: str, protocol: str = "SASL_PLAINTEXT") -> str:
    path = tmp_path / f"{user}-{uuid.uuid4().hex[:6]}.properties"
    path.write_text(f"security.protocol={protocol}\nsasl.mechanism=SCRAM-SHA-512\n"
                    f"sasl.username={user}\nsasl.password={password}\n")
    return str(path)


def shoal(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_ADMIN_")}
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "shoal", *args, "--timeout", "10"],
                          capture_output=True, text=True, timeout=60, env=e)


def test_wire_hints(hb, tmp_path):
    sasl = f"127.0.0.1:{hb.sasl_port}"
    admin = props(tmp_path, "admin", "admin-secret")
    topic = f"hints-{uuid.uuid4().hex[:6]}"
    r = shoal("topics", "create", topic, "--partitions", "1", "--bootstrap-server", sasl, "--command-config", admin)
    assert r.returncode == 0, r.stderr

    # SASL listener, no credentials: not "connection closed" but what to give
    one_line(shoal("topics", "list", "--bootstrap-server", sasl), 3,
             "requires SASL authentication", "SCRAM-SHA-512", "--command-config", "sasl.username")
    one_line(shoal("groups", "list", "--bootstrap-server", sasl), 3, "requires SASL authentication")

    # wrong password
    bad = props(tmp_path, "bob", "not-bobs")
    one_line(shoal("topics", "list", "--bootstrap-server", sasl, "--command-config", bad), 3,
             "SASL_AUTHENTICATION_FAILED", "'bob'", "check sasl.username and sasl.password in " + bad)

    # credentials sent to the PLAINTEXT listener
    one_line(shoal("topics", "list", "--bootstrap-server", hb.bootstrap, "--command-config", admin), 3,
             "ILLEGAL_SASL_STATE", "does not use SASL", "security.protocol=PLAINTEXT")

    # authenticated but not allowed: super.users or an ACL
    bob = props(tmp_path, "bob", "bob-secret")
    one_line(shoal("topics", "create", f"bobs-{uuid.uuid4().hex[:6]}", "--bootstrap-server", sasl,
                   "--command-config", bob), 1,
             "TOPIC_AUTHORIZATION_FAILED", "User:bob may not do this", "super.users", "shoal acls add")
    one_line(shoal("acls", "list", "--bootstrap-server", sasl, "--command-config", bob), 1,
             "CLUSTER_AUTHORIZATION_FAILED", "User:bob", "super.users")

    # not authenticated on the PLAINTEXT listener (User:ANONYMOUS, not a super user)
    one_line(shoal("topics", "delete", topic, "--bootstrap-server", hb.bootstrap), 1,
             "TOPIC_AUTHORIZATION_FAILED", "not authenticated (User:ANONYMOUS)", "SASL listener", "super.users")

    # the super user is unaffected, before and after
    r = shoal("topics", "delete", topic, "--bootstrap-server", sasl, "--command-config", admin)
    assert r.returncode == 0 and r.stdout.strip() == f"Deleted topic {topic}.", r.stderr


def test_http_admin_hints(hb):
    url = ["--admin-url", hb.admin_url]
    one_line(shoal("tenants", "list", *url), 1, "authentication required", "SHOAL_ADMIN_USER",
             "SHOAL_ADMIN_PASSWORD")
    one_line(shoal("tenants", "list", *url, env={"SHOAL_ADMIN_USER": "admin", "SHOAL_ADMIN_PASSWORD": "nope"}), 1,
             "SHOAL_ADMIN_USER=admin", "check SHOAL_ADMIN_PASSWORD")
    one_line(shoal("tenants", "list", *url, env={"SHOAL_ADMIN_USER": "bob", "SHOAL_ADMIN_PASSWORD": "bob-secret"}),
             1, "User:bob may not do this", "super.users")
    r = shoal("tenants", "list", *url, env={"SHOAL_ADMIN_USER": "admin", "SHOAL_ADMIN_PASSWORD": "admin-secret"})
    assert r.returncode == 0, r.stderr


# -- the hints themselves (pure) -----------------------------------------------------------------


def test_hint_texts():
    from shoal.cli.hints import hint, http_hint

    sasl = {"security.protocol": "SASL_SSL", "sasl.username": "carol", "sasl.mechanism": "plain"}
    assert "User:carol may not do this" in hint("GROUP_AUTHORIZATION_FAILED", sasl, "c.properties")
    assert "not authenticated (User:ANONYMOUS)" in hint("CLUSTER_AUTHORIZATION_FAILED", {}, None)
    # a username without SASL is not the principal
    assert "User:ANONYMOUS" in hint("TOPIC_AUTHORIZATION_FAILED", {"sasl.username": "carol"}, None)
    assert "sasl.mechanism=PLAIN" in hint("UNSUPPORTED_SASL_MECHANISM", sasl, "c.properties")
    assert "in c.properties" in hint("SASL_AUTHENTICATION_FAILED", sasl, "c.properties")
    assert hint("TOPIC_ALREADY_EXISTS", sasl, None) is None
    assert "SHOAL_ADMIN_USER and SHOAL_ADMIN_PASSWORD" in http_hint(401, None)
    assert "check SHOAL_ADMIN_PASSWORD" in http_hint(401, "ops")
    assert "User:ops" in http_hint(403, "ops") and http_hint(404, "ops") is None
