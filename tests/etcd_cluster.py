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

    c = EtcdCluster(workdir, tls=True)  # client URLs on TLS with --client-cert-auth (a test CA)
    c.start(); c.enable_auth()          # etcd RBAC on: a root user, etcdctl authenticates as it
    c.add_user("shoal", "pw", "/prefix/")  # a user whose role reads and writes only /prefix/...
    c.url("/prefix")                  # "etcds://127.0.0.1:P1,..."
    c.shoal_settings("shoal", "pw")   # the shoal.etcd.* broker settings for that user (files)
    c.client_settings = c.shoal_settings("shoal", "pw")  # what running_cluster's brokers get

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
    def __init__(self, name: str, data_dir: Path, client_port: int, peer_port: int, scheme: str = "http") -> None:
        self.name = name
        self.scheme = scheme
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
    """``tls``: the members' client URLs are https, with ``--client-cert-auth`` and a certificate
    authority of the cluster's own (``pki``: ``tests/auth/auth_certs.py``'s, made in ``workdir``);
    ``etcdctl`` and ``healthy`` present its client certificate. The peer URLs stay http."""

    def __init__(self, workdir: Path, size: int = 3, tls: bool = False) -> None:
        self.workdir = Path(workdir)
        self.token = f"shoal-test-{uuid.uuid4().hex[:12]}"
        self.tls = tls
        self.pki: Any = None
        self.root_password: str | None = None  # set by enable_auth: etcdctl runs as root
        # the broker settings that reach it (cluster_harness.running_cluster gives them to its
        # brokers): a test sets them, e.g. to shoal_settings(user, password)
        self.client_settings: dict[str, str] = {}
        scheme = "https" if tls else "http"
        self.members = [
            EtcdMember(f"m{i}", self.workdir / f"m{i}.etcd", free_port(), free_port(), scheme) for i in range(size)
        ]

    # -- addresses --------------------------------------------------------------------------------

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    def url(self, prefix: str = "", members: list[int] | None = None) -> str:
        """``etcd://`` URL of the cluster (or of some members), with an optional ``/prefix``."""
        eps = self.endpoints if members is None else [self.members[i].endpoint for i in members]
        return ("etcds://" if self.tls else "etcd://") + ",".join(eps) + (("/" + prefix.strip("/")) if prefix else "")

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        require_etcd()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.tls and self.pki is None:
            self.pki = make_test_pki(self.workdir / "pki")
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
            "--listen-client-urls", f"{m.scheme}://{m.endpoint}",
            "--advertise-client-urls", f"{m.scheme}://{m.endpoint}",
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
            *self._tls_flags(),
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

    def _tls_flags(self) -> list[str]:
        if not self.tls:
            return []
        p = self.pki
        return ["--cert-file", str(p.server_cert), "--key-file", str(p.server_key),
                "--trusted-ca-file", str(p.ca), "--client-cert-auth"]

    def healthy(self, i: int) -> bool:
        m = self.members[i]
        context = None
        if self.tls:
            import ssl

            context = ssl.create_default_context(cafile=str(self.pki.ca))
            context.load_cert_chain(str(self.pki.client_cert), str(self.pki.client_key))
        try:
            with urllib.request.urlopen(f"{m.scheme}://{m.endpoint}/health", timeout=2, context=context) as r:
                # with RBAC on, /health answers {"health":"false","reason":"RANGE ERROR"} to a client
                # that is no user: the member is serving all the same
                body = r.read()
                return b'"true"' in body or (self.root_password is not None and b"RANGE ERROR" in body)
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
            self.resume_member(i)
            self.kill_member(i)
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- tools ------------------------------------------------------------------------------------

    def etcdctl(self, *args: str, members: list[int] | None = None, stdin: bytes | None = None) -> str:
        eps = self.endpoints if members is None else [self.members[i].endpoint for i in members]
        env = dict(os.environ, ETCDCTL_API="3")
        r = subprocess.run(
            [ETCDCTL, "--endpoints", ",".join(f"{self.members[0].scheme}://{e}" for e in eps),
             "--command-timeout=10s", *self.etcdctl_flags(), *args],
            env=env, capture_output=True, timeout=30, input=stdin,
        )
        if r.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)}: {r.stderr.decode(errors='replace').strip()}")
        return r.stdout.decode()

    def etcdctl_flags(self) -> list[str]:
        """etcdctl's TLS flags (the test CA, the client certificate) and, with RBAC on, root's
        credentials."""
        flags = []
        if self.tls:
            p = self.pki
            flags += ["--cacert", str(p.ca), "--cert", str(p.client_cert), "--key", str(p.client_key)]
        if self.root_password is not None:
            flags += ["--user", f"root:{self.root_password}"]
        return flags

    # -- backups (etcd's disaster recovery guide) ---------------------------------------------------

    def snapshot(self, path: Path) -> Path:
        """``etcdctl snapshot save`` from one running member (a snapshot is one member's)."""
        self.etcdctl("snapshot", "save", str(path), members=[self._live()])
        return path

    @classmethod
    def from_snapshot(cls, snapshot: Path, workdir: Path, like: "EtcdCluster", size: int = 1) -> "EtcdCluster":
        """A new cluster (``size`` members, not started) whose members ``etcdctl snapshot restore``
        made from ``snapshot``, with ``like``'s TLS files and root password (the snapshot holds
        etcd's users and roles: RBAC stays on)."""
        new = cls(workdir, size=size, tls=like.tls)
        new.pki, new.root_password = like.pki, like.root_password
        new.workdir.mkdir(parents=True, exist_ok=True)
        initial = ",".join(f"{m.name}={m.peer_url}" for m in new.members)
        for m in new.members:
            r = subprocess.run(
                [ETCDCTL, "snapshot", "restore", str(snapshot), "--name", m.name, "--data-dir", str(m.data_dir),
                 "--initial-cluster", initial, "--initial-advertise-peer-urls", m.peer_url,
                 "--initial-cluster-token", new.token],
                env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, timeout=60)
            if r.returncode != 0:
                raise RuntimeError(f"etcdctl snapshot restore: {r.stderr.decode(errors='replace').strip()}")
        return new

    # -- RBAC (etcd's authentication guide) -------------------------------------------------------

    def enable_auth(self, root_password: str | None = None) -> None:
        """Add etcd's root user and turn authentication on; etcdctl authenticates as root since."""
        pw = root_password or uuid.uuid4().hex
        self.etcdctl("user", "add", "root", "--new-user-password", pw)
        self.etcdctl("auth", "enable")
        self.root_password = pw

    def add_user(self, user: str, password: str, *prefixes: str) -> None:
        """A user with a role of its own (``<user>-role``) that may read and write every key
        starting with one of ``prefixes`` (none: a role without permissions)."""
        role = f"{user}-role"
        self.etcdctl("role", "add", role)
        for prefix in prefixes:
            self.etcdctl("role", "grant-permission", role, "--prefix=true", "readwrite", prefix)
        self.etcdctl("user", "add", user, "--new-user-password", password)
        self.etcdctl("user", "grant-role", user, role)

    def shoal_settings(self, user: str | None = None, password: str | None = None) -> dict[str, str]:
        """The broker settings that reach this cluster: the ``shoal.etcd.ssl.*`` files and, for
        ``user``, ``shoal.etcd.user`` and a password file (written here, mode 0600)."""
        out: dict[str, str] = {}
        if self.tls:
            p = self.pki
            out |= {"shoal.etcd.ssl.cafile": str(p.ca), "shoal.etcd.ssl.certfile": str(p.client_cert),
                    "shoal.etcd.ssl.keyfile": str(p.client_key)}
        if user is not None:
            path = self.workdir / f"{user}-{uuid.uuid4().hex[:6]}.password"
            path.write_text((password or "") + "\n")
            path.chmod(0o600)
            out |= {"shoal.etcd.user": user, "shoal.etcd.password.file": str(path)}
        return out

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
        ids = {int(s["Status"]["header"]["member_id"]): by_ep[s["Endpoint"].partition("://")[2]] for s in out}
        leader = int(out[0]["Status"]["leader"])
        if leader not in ids:
            raise RuntimeError(f"etcd leader {leader:x} is not a running member")
        return ids[leader]

    def members_used_by(self, pid: int) -> set[int]:
        """The members process ``pid`` holds an established connection to (its client port),
        from ``/proc``: which member a broker uses."""
        inodes = set()
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        ports = {m.client_port: i for i, m in enumerate(self.members)}
        used = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                lines = Path(table).read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                f = line.split()
                remote_port, state, inode = int(f[2].rsplit(":", 1)[1], 16), f[3], f[9]
                if state == "01" and inode in inodes and remote_port in ports:  # 01: ESTABLISHED
                    used.add(ports[remote_port])
        return used

    def pause_member(self, i: int) -> None:
        """SIGSTOP: the member keeps its connections and accepts new ones, and answers nothing."""
        proc = self.members[i].proc
        assert proc is not None and proc.poll() is None
        proc.send_signal(signal.SIGSTOP)

    def resume_member(self, i: int) -> None:
        proc = self.members[i].proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)

    def move_leader(self, to: int) -> None:
        """Make member ``to`` the raft leader (``etcdctl move-leader``, asked of the leader)."""
        import json

        out = json.loads(self.etcdctl("endpoint", "status", "-w", "json", members=[to]))
        self.etcdctl("move-leader", f"{int(out[0]['Status']['header']['member_id']):x}", members=[self.leader()])
        deadline = time.monotonic() + 10
        while self.leader() != to:
            if time.monotonic() > deadline:
                raise RuntimeError(f"member {to} did not become the leader")
            time.sleep(0.1)

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


def make_test_pki(directory: Path) -> Any:
    """A test CA, a server certificate for 127.0.0.1/localhost and a client certificate
    (``tests/auth/auth_certs.py``'s ``make_pki``)."""
    import sys

    auth = str(Path(__file__).resolve().parent / "auth")
    if auth not in sys.path:
        sys.path.insert(0, auth)
    from auth_certs import make_pki

    return make_pki(directory, {"O": "shoal-test", "CN": "shoal-etcd-client"})


def broker_store(url: str, **kw: Any) -> "EtcdMetadataStore":
    """An etcd metadata store as a broker's composition root builds it: with its broker registration
    (``shoal.cluster.registration``, under the store's etcd session), so ``register_broker`` works."""
    from shoal.cluster.registration import Registration
    from shoal.metadata.etcd import EtcdMetadataStore

    return EtcdMetadataStore(url, registration=Registration.for_backend, **kw)
