"""Every ``shoal serve`` start-up failure is one line that says what is wrong and what to do
(issue 16, Safety), from a real ``python -m shoal serve``; ``--log-level debug`` adds the traceback.

Cases: an unwritable log dir (a read-only tmpfs mount as root, else an immutable or mode-0555
directory), a log dir that cannot be created (a file in its path), a metadata file that is not
JSON, one of an unknown format version, a directory written by another node id, a listener host
that does not resolve, a port in use, a bad config value, a missing config file. (A directory in
use by another broker: tests/e2e/test_data_dir_lock.py; the command's other basics:
tests/test_cli_basics.py.)
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shoal import __version__

REPO = Path(__file__).resolve().parent.parent
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING) ")
ELSEWHERE = "or point log.dirs (--log-dirs) at another directory"


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SHOAL_LOG_LEVEL", None)
    return env


def _shoal(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shoal", *args], capture_output=True, text=True,
                          timeout=timeout, env=_env())


def _serve(data: Path | str, *args: str) -> subprocess.CompletedProcess:
    return _shoal("serve", "--listeners", "PLAINTEXT://127.0.0.1:0", "--log-dirs", str(data), *args)


def _one_line(r: subprocess.CompletedProcess, rc: int = 1) -> str:
    """The failure's line: the process failed with ``rc``, and besides log records (a start-up
    INFO line may precede it) its stderr is that one line, with no traceback."""
    assert r.returncode == rc, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = [l for l in r.stderr.splitlines() if not LOG_RECORD.match(l)]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("shoal serve: ")
    return lines[0]


@pytest.fixture
def readonly_dir(tmp_path):
    """A directory this process cannot write: a read-only tmpfs where mounting works (root in CI),
    else an immutable directory (root), else mode 0555 (anyone else)."""
    d = tmp_path / "ro"
    d.mkdir()
    undo: list[str] | None = None
    if os.geteuid() == 0:
        for cmd, back in ((["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(d)], ["umount", str(d)]),
                          (["chattr", "+i", str(d)], ["chattr", "-i", str(d)])):
            if shutil.which(cmd[0]) and subprocess.run(cmd, capture_output=True).returncode == 0:
                undo = back
                break
        else:
            pytest.skip("as root, neither a read-only mount nor chattr +i is possible here")
    else:
        d.chmod(0o555)
    try:
        yield d
    finally:
        if undo:
            subprocess.run(undo, check=True)
        else:
            d.chmod(0o755)


def test_unwritable_log_dir(readonly_dir) -> None:
    for d in (readonly_dir, readonly_dir / "data"):  # existing, and to be created
        line = _one_line(_serve(d))
        assert line.startswith(f"shoal serve: cannot start: cannot write log dir {d}: ")
        assert line.endswith(f"make it writable by this user (uid {os.geteuid()}), mount it read-write, {ELSEWHERE}")


def test_log_dir_that_cannot_be_created(tmp_path) -> None:
    (tmp_path / "file").write_text("not a directory")
    line = _one_line(_serve(tmp_path / "file" / "data"))
    assert line == (f"shoal serve: cannot start: cannot create log dir {tmp_path}/file/data: "
                    f"{tmp_path}/file is a file, not a directory: remove that file {ELSEWHERE}")


def _metadata_file(data: Path, text: str) -> Path:
    (data / "__metadata").mkdir(parents=True)
    path = data / "__metadata" / "metadata.json"
    path.write_text(text)
    return path


def test_metadata_file_that_is_not_json(tmp_path) -> None:
    path = _metadata_file(tmp_path / "data", "<html>not Shoal's</html>\n")
    line = _one_line(_serve(tmp_path / "data"))
    assert line.startswith(f"shoal serve: cannot start: {path}: corrupt metadata file: ")
    assert "this is not a Shoal metadata file, or it is damaged" in line
    assert "point log.dirs (--log-dirs) at Shoal's data directory or an empty one" in line
    assert path.read_text() == "<html>not Shoal's</html>\n"  # left as it was


def test_metadata_file_of_unknown_format(tmp_path) -> None:
    path = _metadata_file(tmp_path / "data", json.dumps({"version": 99, "cluster_id": "x"}))
    line = _one_line(_serve(tmp_path / "data"))
    assert line == (f"shoal serve: cannot start: {path}: unsupported metadata format version 99: it was "
                    f"written by another program or another Shoal version; start the Shoal that wrote it, {ELSEWHERE}")


def test_directory_of_another_node_id(tmp_path) -> None:
    from shoal.metadata.embedded import EmbeddedMetadataStore

    async def write_as_node_1() -> None:
        store = EmbeddedMetadataStore(tmp_path / "data", node_id=1)
        await store.start()
        await store.close()

    asyncio.run(write_as_node_1())
    line = _one_line(_serve(tmp_path / "data", "--node-id", "2"))
    assert line == (f"shoal serve: cannot start: {tmp_path}/data/__metadata/metadata.json was written by node 1, "
                    f"this is node 2: start this broker with --node-id 1 (node.id), {ELSEWHERE}")


def test_unresolvable_listener_host(tmp_path) -> None:
    host = "no-such-host.invalid"  # RFC 6761: never resolves
    r = _shoal("serve", "--listeners", f"PLAINTEXT://{host}:0", "--log-dirs", str(tmp_path / "data"))
    line = _one_line(r)
    assert line.startswith(f"shoal serve: cannot start: cannot resolve the host '{host}' of listener "
                           f"PLAINTEXT://{host}:0: ")
    assert line.endswith("fix it in listeners (--listeners), e.g. 127.0.0.1, 0.0.0.0 or a name this machine resolves")


def test_port_in_use(tmp_path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = _shoal("serve", "--listeners", f"PLAINTEXT://127.0.0.1:{port}", "--log-dirs", str(tmp_path / "data"))
    line = _one_line(r)
    assert f"('127.0.0.1', {port}): address already in use" in line
    assert line.endswith("another process listens on that port; stop it or choose another port in listeners "
                         "(--listeners; port 0 picks a free one)")


def test_bad_config_value(tmp_path) -> None:
    line = _one_line(_serve(tmp_path / "data", "--override", "num.partitions=many"), rc=2)
    assert line == ("shoal serve: Invalid value many for configuration num.partitions: Not a number of type INT: "
                    "fix the config (server.properties, --override or the flag that sets it)")
    assert not (tmp_path / "data").exists()  # refused before any directory was touched


def test_missing_config_file(tmp_path) -> None:
    line = _one_line(_shoal("serve", "--config", str(tmp_path / "nope.properties")), rc=2)
    assert line == (f"shoal serve: cannot read the config file {tmp_path}/nope.properties: "
                    "No such file or directory: check the --config path")


def test_debug_adds_the_traceback(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    r = _serve(tmp_path / "file" / "data", "--log-level", "debug")
    assert r.returncode == 1
    assert "Traceback (most recent call last)" in r.stderr and "NotADirectoryError" in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("shoal serve: cannot start: cannot create log dir")


def test_log_dir_of_another_node_id(tmp_path) -> None:
    """A log dir names its node in meta.properties (as Kafka's): checked before anything is read,
    so another node's partitions are never taken for this one's (on a cluster, too)."""
    from broker_process import BrokerProcess

    b = BrokerProcess(tmp_path)
    b.start()
    deadline = time.monotonic() + 20
    while not (b.data_dir / "meta.properties").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # written just after the broker is up
    b.stop()
    meta = (b.data_dir / "meta.properties").read_text()
    assert "node.id=1\n" in meta and "version=1\n" in meta
    before = {p: p.read_bytes() for p in b.data_dir.rglob("*") if p.is_file()}
    line = _one_line(_serve(b.data_dir, "--node-id", "7"))
    assert line == (f"shoal serve: cannot start: log dir {b.data_dir} was written by node 1 ({b.data_dir}/meta.properties), "
                    f"this is node 7: start this broker with --node-id 1 (node.id), {ELSEWHERE}")
    # refused before the metadata store was read: nothing changed but the lock file's pid
    after = {p: p.read_bytes() for p in b.data_dir.rglob("*") if p.is_file()}
    assert {p: v for p, v in after.items() if p.name != ".lock"} == {p: v for p, v in before.items() if p.name != ".lock"}


def test_ctrl_c_while_waiting_for_etcd_stops_in_one_line(tmp_path) -> None:
    """Issue 24: SIGINT while the broker waits for an etcd nobody listens on printed a 30-line
    traceback (asyncio.run's KeyboardInterrupt over the cancelled start); now one line, exit 130."""
    import signal

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "shoal", "serve", "--listeners", "PLAINTEXT://127.0.0.1:0",
                          "--log-dirs", str(tmp_path / "data"), "--override",
                          f"shoal.metadata.store=etcd://127.0.0.1:{nobody}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        before = []
        while not any("cannot reach etcd" in line for line in before):  # it waits for etcd now
            line = p.stderr.readline()
            assert line, "".join(before)
            before.append(line)
        p.send_signal(signal.SIGINT)
        out, after = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, after
    assert after.splitlines() == ["shoal serve: stopped (interrupted while starting)"], after


def test_oauthbearer_without_a_validator(tmp_path) -> None:
    """OAUTHBEARER enabled with neither a JWKS URL nor the unsecured validator: one line naming both
    (Kafka would fall back to the unsecured validator, which accepts a token for any name)."""
    line = _one_line(_serve(tmp_path / "data", "--listeners", "PLAINTEXT://127.0.0.1:0,OAUTH://127.0.0.1:0",
                            "--override", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,OAUTH:SASL_PLAINTEXT",
                            "--override", "listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER"))
    assert "listener OAUTH enables OAUTHBEARER but sets no sasl.oauthbearer.jwks.endpoint.url" in line
    assert "OAuthBearerUnsecuredValidatorCallbackHandler" in line
