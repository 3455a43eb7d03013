"""``shoal serve --quickstart``, what ``make serve`` runs (issue 16, tenants out of the box): a real
broker process on free loopback ports; its banner's commands run as a shell script (the ``shoal``
CLI, kcat and confluent-kafka as a tenant's user); the generated admin credentials (mode 0600,
random, reused on restart, never on a command line, written only once the broker holds its
directory); refusals (off loopback, a directory in use) in one line having written nothing.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker_process import REPO, BrokerProcess, free_port
from quickstart_broker import QuickstartBroker, tool_path
from shoal import quickstart

pytestmark = pytest.mark.timeout(180)


def run_script(text: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=150)


@pytest.fixture(scope="module")
def qb(tmp_path_factory):
    b = QuickstartBroker(tmp_path_factory.mktemp("shoal-quickstart"))
    b.start()
    yield b
    b.stop()


def test_make_serve_runs_the_quickstart():
    recipe = (REPO / "Makefile").read_text().split("\nserve:", 1)[1].split("\n\n", 1)[0]
    assert "-m shoal serve --quickstart" in recipe and "--log-dirs ./data" in recipe


def test_make_install_runs_pip_only_when_needed(tmp_path):
    """Issue 24: `make serve` ran `pip install -e .` on every start (28.6 s before a broker that
    starts in under one). Now pip runs when `shoal` is not the editable install of this checkout or
    pyproject.toml, setup.py, the C speed-ups or the version (shoal/__init__.py) changed since the
    last install. The checkout is a copy of the files the Makefile reads; pip is a stand-in that
    records its arguments and writes the dist-info an editable install leaves (on PYTHONPATH, so it
    is the `shoal` Python finds)."""
    import json

    for name in ("Makefile", "pyproject.toml", "setup.py", "shoal/_native/speedups.c", "shoal/__init__.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes((REPO / name).read_bytes())
    site = tmp_path / "site" / "shoal-0.1.0.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: shoal\nVersion: 0.1.0\n")
    (tmp_path / "shoal.egg-info").mkdir()  # what an editable install leaves in the checkout (`python -c` sees it first)
    (tmp_path / "shoal.egg-info" / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: shoal\nVersion: 0.1.0\n")
    pip = tmp_path / "pip"
    pip.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/pip.log\n"
                   f"printf '{{\"dir_info\": {{\"editable\": true}}, \"url\": \"file://%s\"}}' \"$PWD\" "
                   f"> {site}/direct_url.json\n")
    pip.chmod(0o755)
    env = dict(os.environ, PYTHONPATH=str(site.parent))

    def make_install() -> list[str]:
        r = subprocess.run(["make", "-s", "install", f"PYTHON={sys.executable}", f"PIP={pip}"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        return (tmp_path / "pip.log").read_text().splitlines()

    assert make_install() == ["install -q --disable-pip-version-check -e ."]  # a fresh machine
    assert len(make_install()) == 1  # installed from here, nothing changed: no pip
    earlier = time.time() - 60
    os.utime(tmp_path / ".install.stamp", (earlier, earlier))  # pyproject.toml changed after the install
    assert len(make_install()) == 2
    assert len(make_install()) == 2
    (site / "direct_url.json").write_text(json.dumps({"dir_info": {"editable": True}, "url": "file:///elsewhere"}))
    assert len(make_install()) == 3  # another checkout installed since


def test_banner_commands_create_a_tenant_and_user_and_produce_and_consume(qb, tmp_path):
    banner = qb.banner()
    assert f"SASL_PLAINTEXT://127.0.0.1:{qb.sasl_port}" in banner and f"http://127.0.0.1:{qb.admin_port}" in banner
    assert str(qb.credentials) in banner
    r = run_script(quickstart.script(banner), tmp_path, tool_path(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    out, both = r.stdout.splitlines(), r.stdout + r.stderr
    tenant = re.search(r"user dana created in tenant (lkc-[0-9a-z]{6})", r.stdout).group(1)
    assert "Created topic orders." in out, both
    assert out.count("k1:hello from kcat") == 2, both  # kcat, then confluent-kafka
    assert "k2:hello from confluent-kafka" in out, both
    assert f"{tenant}_orders" in out, both  # the operator's physical view


def test_admin_credentials_are_generated_private_and_kept(qb, tmp_path):
    qb.banner()  # the file is written just before the banner
    path = qb.credentials
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    props = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))
    password = props["sasl.password"]
    assert props["sasl.username"] == "admin" and len(password) >= 32 and re.fullmatch(r"[A-Za-z0-9_-]+", password)
    cmdline = Path(f"/proc/{qb.proc.pid}/cmdline").read_bytes()
    assert password.encode() not in cmdline
    assert password not in qb.log_text()
    before = path.read_bytes()
    path.chmod(0o644)  # someone loosened it: a warning on the next start
    qb.restart()  # the same password, the same file
    assert path.read_bytes() == before and "Quickstart" in qb.banner()
    assert f"{path} holds the admin password and others may read it: chmod 600" in qb.log_text()
    path.chmod(0o600)
    env = tool_path(tmp_path)
    # the file is a client properties file of a super user: the SASL listener and the admin API
    r = subprocess.run(["shoal", "topics", "list", "--bootstrap-server", f"127.0.0.1:{qb.sasl_port}",
                        "--command-config", str(path)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "__consumer_offsets" in r.stdout, r.stderr
    r = subprocess.run(["shoal", "tenants", "list"], capture_output=True, text=True, timeout=60,
                       env={**env, "SHOAL_ADMIN_URL": f"http://127.0.0.1:{qb.admin_port}",
                            "SHOAL_ADMIN_USER": "admin", "SHOAL_ADMIN_PASSWORD": password})
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["shoal", "tenants", "list"], capture_output=True, text=True, timeout=60,
                       env={**env, "SHOAL_ADMIN_URL": f"http://127.0.0.1:{qb.admin_port}"})
    assert r.returncode == 1 and "SHOAL_ADMIN_USER" in r.stderr  # never without the password


def test_a_plain_brokers_data_dir_takes_the_quickstart_and_a_deleted_file_a_new_password(tmp_path):
    plain = BrokerProcess(tmp_path)  # what make serve ran before --quickstart, on the same ./data
    plain.start()
    plain.stop()
    b = QuickstartBroker(tmp_path)
    assert b.data_dir == plain.data_dir
    b.start()
    try:
        b.banner()  # written before the banner
        first = b.credentials.read_text()
    finally:
        b.stop()
    b.credentials.unlink()  # deleted: a new one on the next start
    b.start()
    try:
        b.banner()
        assert b.credentials.read_text() != first
    finally:
        b.stop()


def _serve(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "shoal", "serve", "--quickstart", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_second_broker_on_the_directory_writes_no_credentials(tmp_path):
    running = BrokerProcess(tmp_path)  # a plain broker holds the directory
    running.start()
    try:
        r = _serve("--log-dirs", str(running.data_dir), "--listeners",
                   f"PLAINTEXT://127.0.0.1:{free_port()},SASL_PLAINTEXT://127.0.0.1:{free_port()}",
                   "--override", f"shoal.admin.listener=http://127.0.0.1:{free_port()}",
                   "--override", f"shoal.metrics.listener=http://127.0.0.1:{free_port()}", cwd=tmp_path)
        assert r.returncode == 1 and "is in use by process" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not (running.data_dir / quickstart.CREDENTIALS_FILE).exists()
    finally:
        running.stop()


@pytest.mark.parametrize("args, words", [
    (["--listeners", "PLAINTEXT://0.0.0.0:{p},SASL_PLAINTEXT://127.0.0.1:{q}"],
     ("listener PLAINTEXT://0.0.0.0:", "not on loopback", "without --quickstart")),
    (["--listeners", "PLAINTEXT://127.0.0.1:{p}"], ("no SASL listener", "SASL_PLAINTEXT://127.0.0.1:PORT")),
    (["--override", "shoal.admin.listener=http://0.0.0.0:{p}"], ("shoal.admin.listener=0.0.0.0", "not on loopback")),
])
def test_off_loopback_or_without_sasl_is_refused_in_one_line(tmp_path, args, words):
    args = [a.format(p=free_port(), q=free_port()) for a in args]
    r = _serve("--log-dirs", str(tmp_path / "data"), *args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shoal serve --quickstart: "), r.stderr
    for w in words:
        assert w in lines[0]
    assert not (tmp_path / "data").exists()


# -- pure parts -----------------------------------------------------------------------------------


def test_flags_and_the_file_win_over_the_quickstart_defaults():
    got = quickstart.overrides({"listeners": "PLAINTEXT://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2"},
                               {"super.users", "num.partitions"})
    assert got["listeners"] == "PLAINTEXT://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2"
    assert "super.users" not in got  # the file's value stands
    assert got["shoal.admin.listener"] == "http://127.0.0.1:9644"
    assert got["shoal.admin.authentication"] == "basic"
    assert quickstart.with_admin(None, "pw") == "admin:pw"
    assert quickstart.with_admin("bob:b,admin:old", "pw") == "bob:b,admin:pw"
    assert quickstart.new_password() != quickstart.new_password()


def test_unusable_credentials_file_is_one_line(tmp_path):
    path = tmp_path / "admin.properties"
    assert quickstart.read_password(path) is None
    path.write_text("sasl.username=root\nsasl.password=x\n")
    with pytest.raises(quickstart.QuickstartError, match="delete it"):
        quickstart.read_password(path)
    quickstart.write_credentials(tmp_path / "new.properties", "s3cret")
    assert quickstart.read_password(tmp_path / "new.properties") == "s3cret"
    with pytest.raises(FileExistsError):  # never over an existing file
        quickstart.write_credentials(tmp_path / "new.properties", "other")
