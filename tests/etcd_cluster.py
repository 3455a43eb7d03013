"""A real etcd cluster on loopback for tests: three members (Debian's ``etcd-server``), no Docker.

::

    c = EtcdCluster(workdir)          # 3 members, free ports, a unique cluster token
    c.start()                         # waits until every member answers /health
    c.url("/prefix")                  # "etcd://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/prefix"
    c.stop_member(0); c.start_member(0); c.kill_member(1)
    c.stop_all(); c.start_all()       # the whole quorum down, and back (same data)
    c.etcdctl("compact", "1234")
    c.leader()                        # index of the raft leader member (to kill it)
    c.close()                         # every member killed, the directory removed

Members run with the settings Shoal needs (``docs/cluster.md``): ``--max-txn-ops`` and
``--max-request-bytes`` raised so that one metadata change (a tenant-delete cascade, a topic with
thousands of partitions) fits in one transaction. When ``etcd`` is not installed, ``start`` fails
the test with what to install (``make test`` installs it); it never skips.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from broker_process import free_port  # noqa: F401  (below the ephemeral ports; imported from here too)

if TYPE_CHECKING:
    from shoal.metadata.etcd import EtcdMetadataStore

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
ETCDCTL = shutil.which("etcdctl") or "/usr/bin/etcdctl"

# What Shoal asks of etcd (docs/cluster.md): one change is one transaction.
MAX_TXN_OPS = 10000
MAX_REQUEST_BYTES = 16 * 1024 * 1024


def require_etcd() -> None:
    if not (os.access(ETCD, os.X_OK) and os.access(ETCDCTL, os.X_OK)):
        pytest.fail(
            "etcd is not installed (no etcd/etcdctl on PATH): the cluster tests need a real etcd; "
            "`make test` installs Debian's etcd-server and etcd-client (apt-get install etcd-server etcd-client)",
            pytrace=False,
        )




class EtcdMember:
    def __init__(self, name: str, data_dir: Path, client_port: int, peer_port: int) -> None:
        self.name = name
        self.data_dir = data_dir
        self.client_port = client_port
        self.peer_port = peer_port
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir.parent / f"{name}.log"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class EtcdCluster:
    def __init__(self, workdir: Path, size: int = 3) -> None:
        self.workdir = Path(workdir)
        self.token = f"shoal-test-{uuid.uuid4().hex[:12]}"
        self.members = [
            EtcdMember(f"m{i}", self.workdir / f"m{i}.etcd", free_port(), free_port()) for i in range(size)
        ]

    # -- addresses --------------------------------------------------------------------------------

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    def url(self, prefix: str = "", members: list[int] | None = None) -> str:
        """``etcd://`` URL of the cluster (or of some members), with an optional ``/prefix``."""
        eps = self.endpoints if members is None else [self.members[i].endpoint for i in members]
        return "etcd://" + ",".join(eps) + (("/" + prefix.strip("/")) if prefix else "")

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        require_etcd()
        self.workdir.mkdir(parents=True, exist_ok=True)
        for i in range(len(self.members)):
            self._spawn(i)
        self.wait_healthy(timeout)

    def _spawn(self, i: int) -> None:
        m = self.members[i]
        initial = ",".join(f"{x.name}={self.advertised_peer_url(j)}" for j, x in enumerate(self.members))
        cmd = [
            ETCD,
            "--name", m.name,
            "--data-dir", str(m.data_dir),
            "--listen-client-urls", f"http://{m.endpoint}",
            "--advertise-client-urls", f"http://{m.endpoint}",
            "--listen-peer-urls", m.peer_url,
            "--initial-advertise-peer-urls", self.advertised_peer_url(i),
            "--initial-cluster", initial,
            "--initial-cluster-state", "new",
            "--initial-cluster-token", self.token,
            "--max-txn-ops", str(MAX_TXN_OPS),
            "--max-request-bytes", str(MAX_REQUEST_BYTES),
            # a loaded shared machine: give heartbeats room before an election starts
            "--heartbeat-interval", "100",
            "--election-timeout", "1500",
            "--logger", "zap",
            "--log-level", "warn",
        ]
        out = open(m.log, "ab")
        try:
            m.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            out.close()

    def advertised_peer_url(self, i: int) -> str:
        """The peer URL the other members dial for member ``i`` (tests/region_harness.py puts a
        link proxy there)."""
        return self.members[i].peer_url

    def healthy(self, i: int) -> bool:
        m = self.members[i]
        try:
            with urllib.request.urlopen(f"http://{m.endpoint}/health", timeout=2) as r:
                return b'"true"' in r.read()
        except OSError:
            return False

    def wait_healthy(self, timeout: float = 60.0, members: list[int] | None = None) -> None:
        which = list(range(len(self.members))) if members is None else members
        deadline = time.monotonic() + timeout
        while True:
            dead = [self.members[i].name for i in which if not self.members[i].running]
            if dead:
                raise RuntimeError(f"etcd member(s) {dead} exited:\n{self.log_tail()}")
            if all(self.healthy(i) for i in which):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd not healthy within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.1)

    def stop_member(self, i: int) -> None:
        self._signal(i, signal.SIGTERM)

    def kill_member(self, i: int) -> None:
        self._signal(i, signal.SIGKILL)

    def start_member(self, i: int, wait: bool = True) -> None:
        if not self.members[i].running:
            self._spawn(i)  # its data dir holds the membership: the initial-cluster flags are ignored
        if wait:
            self.wait_healthy(members=[i])

    def stop_all(self) -> None:
        for i in range(len(self.members)):
            self.stop_member(i)

    def start_all(self, timeout: float = 60.0) -> None:
        for i in range(len(self.members)):
            if not self.members[i].running:
                self._spawn(i)
        self.wait_healthy(timeout)

    def _signal(self, i: int, sig: int) -> None:
        m = self.members[i]
        if m.proc is None or m.proc.poll() is not None:
            return
        m.proc.send_signal(sig)
        try:
            m.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            m.proc.kill()
            m.proc.wait(timeout=15)

    def close(self) -> None:
        for i in range(len(self.members)):
            self.kill_member(i)
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- tools ------------------------------------------------------------------------------------

    def etcdctl(self, *args: str, members: list[int] | None = None) -> str:
        eps = self.endpoints if members is None else [self.members[i].endpoint for i in members]
        env = dict(os.environ, ETCDCTL_API="3")
        r = subprocess.run(
            [ETCDCTL, "--endpoints", ",".join(eps), "--command-timeout=10s", *args],
            env=env, capture_output=True, timeout=30,
        )
        if r.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)}: {r.stderr.decode(errors='replace').strip()}")
        return r.stdout.decode()

    def revision(self) -> int:
        """The cluster's current revision."""
        import json

        out = json.loads(self.etcdctl("endpoint", "status", "-w", "json", members=[self._live()]))
        return int(out[0]["Status"]["header"]["revision"])

    def compact(self, revision: int | None = None) -> int:
        rev = self.revision() if revision is None else revision
        self.etcdctl("compact", str(rev), "--physical", members=[self._live()])
        return rev

    def leader(self) -> int:
        """Index of the member that is the raft leader now (asked of the running members)."""
        import json

        live = [i for i, m in enumerate(self.members) if m.running]
        out = json.loads(self.etcdctl("endpoint", "status", "-w", "json", members=live))
        by_ep = {self.members[i].endpoint: i for i in live}
        ids = {int(s["Status"]["header"]["member_id"]): by_ep[s["Endpoint"].removeprefix("http://")] for s in out}
        leader = int(out[0]["Status"]["leader"])
        if leader not in ids:
            raise RuntimeError(f"etcd leader {leader:x} is not a running member")
        return ids[leader]

    def _live(self) -> int:
        return next(i for i, m in enumerate(self.members) if m.running)

    def log_tail(self, lines: int = 20) -> str:
        out = []
        for m in self.members:
            try:
                tail = m.log.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                tail = []
            out.append(f"--- {m.name} ---\n" + "\n".join(tail))
        return "\n".join(out)


class ProxiedEtcd:
    """A link proxy (tests/faults/linkproxy.py) to each member, for a client that must be cut off
    from etcd while the cluster goes on: give it ``url(prefix)``; ``cut()`` resets its connections
    and refuses new ones (the others go on), ``restore()`` lets it through again. On a
    ``LinkProxy`` of its own, or on ``links`` (links named ``<name>:<member index>``, healed with
    the others' ``heal_all``). Thread-safe: usable from a test's event loop too."""

    def __init__(self, cluster: EtcdCluster, links=None, name: str = "etcd") -> None:
        from broker_process import free_port
        from faults.linkproxy import LinkProxy

        self.cluster = cluster
        self._own = links is None
        self.links = LinkProxy() if links is None else links
        self.names = [f"{name}:{i}" for i in range(len(cluster.members))]
        for n, m in zip(self.names, cluster.members):
            host, _, port = m.endpoint.rpartition(":")
            # below the ephemeral range: the port is free again while cut (refused), and heal binds
            # it again, where a client's outgoing connection could have taken an ephemeral one
            self.links.add(n, (host, int(port)), free_port())

    def url(self, prefix: str = "") -> str:
        return "etcd://" + ",".join(f"127.0.0.1:{self.links.port(n)}" for n in self.names) + \
            (("/" + prefix.strip("/")) if prefix else "")

    def cut(self) -> None:
        for n in self.names:
            self.links.cut(n, mode="reset", new="refuse")

    def restore(self) -> None:
        for n in self.names:
            self.links.heal(n)

    def close(self) -> None:
        if self._own:
            self.links.close()


def broker_store(url: str, **kw: Any) -> "EtcdMetadataStore":
    """An etcd metadata store as a broker's composition root builds it: with its broker registration
    (``shoal.cluster.registration``, under the store's etcd session), so ``register_broker`` works."""
    from shoal.cluster.registration import Registration
    from shoal.metadata.etcd import EtcdMetadataStore

    return EtcdMetadataStore(url, registration=Registration.for_backend, **kw)
