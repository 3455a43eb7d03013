"""``shoal serve --processes N`` (issue 29, part 2): a real supervisor running real brokers on a
real etcd. Two supervisors of two processes each stand for two hosts (the second says
``broker.host=host-b``): both processes of a supervisor register with its host, a real client
produces and consumes through all of them, a topic at RF 2 has its replicas on both hosts; a
child killed with SIGKILL is restarted and rejoins; SIGTERM stops every child with its
controlled shutdown and exit status 0; a child that cannot start is retried with back-off and
one line that says why."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic
from prometheus_client.parser import text_string_to_metric_families

from broker_process import REPO, api_versions_ok, free_port
from cluster_harness import SESSION_MS, until

pytestmark = pytest.mark.timeout(120)


def _port_pair() -> int:
    """A free port P with P + 1 free too."""
    for _ in range(50):
        p = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 1))
                return p
            except OSError:
                continue
    raise RuntimeError("no two consecutive free ports")


class Supervisor:
    def __init__(self, workdir: Path, url: str, node_id: int, processes: int = 2, host: str | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = _port_pair()
        self.metrics_port = _port_pair()
        self.node_id, self.processes = node_id, processes
        self.log_path = workdir / "supervisor.log"
        self.args = ["--processes", str(processes), "--node-id", str(node_id),
                     "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}", "--log-dirs", str(workdir / "data"),
                     "-o", f"shoal.metadata.store={url}", "-o", f"broker.session.timeout.ms={SESSION_MS}",
                     "-o", "shoal.balancer.enable=false",
                     "-o", f"shoal.metrics.listener=http://127.0.0.1:{self.metrics_port}", *extra]
        if host:
            self.args += ["-o", f"broker.host={host}"]
        self.proc: subprocess.Popen | None = None

    def start(self, wait: bool = True) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   PYTHONUNBUFFERED="1")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "shoal", "serve", *self.args], env=env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            until(lambda: all(api_versions_ok("127.0.0.1", self.port + i, 1.0) for i in range(self.processes)),
                  45, lambda: "every child answers ApiVersions\n" + self.log_tail())

    def bootstrap(self, i: int) -> str:
        return f"127.0.0.1:{self.port + i}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self) -> str:
        return "\n".join(self.log_text().splitlines()[-40:])

    def child_pid(self, i: int) -> int:
        """The pid of child ``i`` (its command line names its node id)."""
        assert self.proc is not None
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == self.proc.pid and f"node.id={self.node_id + i}".encode() in cmd:
                return int(entry)
        raise AssertionError(f"no child p{i} of supervisor {self.proc.pid}\n{self.log_tail()}")

    def stop(self, timeout: float = 40) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
                raise AssertionError(f"supervisor still running {timeout} s after SIGTERM\n{self.log_tail()}")
        return self.proc.returncode

    def close(self) -> None:
        """SIGTERM, and a second one (the supervisor then kills its children) after 20 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(15)


@pytest.fixture(scope="module")
def hosts(etcd_cluster, tmp_path_factory):
    prefix = f"/procs-{uuid.uuid4().hex[:8]}"
    url = etcd_cluster.url(prefix)
    work = tmp_path_factory.mktemp("procs")
    a = Supervisor(work / "a", url, 1)
    b = Supervisor(work / "b", url, 3, host="host-b")
    try:
        a.start(wait=False)
        b.start()
        until(lambda: all(api_versions_ok("127.0.0.1", a.port + i, 1.0) for i in range(2)), 45,
              lambda: "supervisor a's children answer\n" + a.log_tail())
        yield etcd_cluster, prefix, a, b
    finally:
        a.close()
        b.close()


def _registrations(etcd, prefix: str) -> dict[int, dict]:
    out = etcd.etcdctl("get", "--prefix", f"{prefix}/brokers/", "--print-value-only")
    docs = [json.loads(line) for line in out.splitlines() if line.strip().startswith("{")]
    return {d["node_id"]: d for d in docs}


def _produce_consume(bootstrap: str, topic: str, partitions: int, n: int) -> list[bytes]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "log_level": 2})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "log_level": 2})
    c.assign([TopicPartition(topic, q, 0) for q in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        for m in c.consume(500, 1.0):
            if m.error() is None:
                got.append(m.value())
    c.close()
    return got


def test_children_register_with_one_host_and_serve_clients(hosts) -> None:
    etcd, prefix, a, b = hosts
    until(lambda: set(_registrations(etcd, prefix)) == {1, 2, 3, 4}, 30, "4 brokers registered")
    regs = _registrations(etcd, prefix)
    assert {n: regs[n].get("host_id") for n in regs} == {1: "127.0.0.1", 2: "127.0.0.1", 3: "host-b", 4: "host-b"}
    assert [regs[n]["port"] for n in (1, 2, 3, 4)] == [a.port, a.port + 1, b.port, b.port + 1]
    for n, sup, i in ((1, a, 0), (2, a, 1)):
        assert (sup.workdir / "data" / f"p{i}" / "meta.properties").exists()
    # a topic at RF 2 over 2 hosts x 2 processes: every partition on both hosts
    admin = KafkaAdmin({"bootstrap.servers": a.bootstrap(0)})
    admin.create_topics([NewTopic("spread", 8, 2)])["spread"].result(20)
    md = admin.list_topics("spread", timeout=15).topics["spread"]
    host_of = {1: "a", 2: "a", 3: "b", 4: "b"}
    layouts = {p: tuple(md.partitions[p].replicas) for p in md.partitions}
    assert all({host_of[r] for r in reps} == {"a", "b"} for reps in layouts.values()), layouts
    # a real client through each child of supervisor a
    for i in (0, 1):
        got = _produce_consume(a.bootstrap(i), "spread", 8, 200)
        assert len(got) == 200 * (i + 1)  # the records of both rounds, through either process
    # each process's metrics carry its node id
    for i in (0, 1):
        with urllib.request.urlopen(f"http://127.0.0.1:{a.metrics_port + i}/metrics", timeout=15) as resp:
            fams = list(text_string_to_metric_families(resp.read().decode()))
        samples = [smp for f in fams for smp in f.samples]
        assert samples and all(smp.labels.get("node_id") == str(1 + i) for smp in samples)
        info = [smp for smp in samples if smp.name == "shoal_broker_info"]
        assert [x.labels for x in info] == [{"node_id": str(1 + i), "host": "127.0.0.1", "rack": ""}]
    # shoal placement check reports the host spread
    r = subprocess.run([sys.executable, "-m", "shoal", "placement", "check", "--topic", "spread",
                        "--bootstrap-server", a.bootstrap(0)], capture_output=True, text=True, timeout=60)
    assert "hosts: every partition on 2 hosts (4 brokers on 2 hosts)" in r.stdout, r.stdout + r.stderr
    # a manual assignment that puts both replicas on host a: the check warns and exits 1
    admin.create_topics([NewTopic("same-host", num_partitions=1, replica_assignment=[[1, 2]])])["same-host"].result(20)
    r = subprocess.run([sys.executable, "-m", "shoal", "placement", "check", "--topic", "same-host",
                        "--bootstrap-server", a.bootstrap(0)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "WARNING: partitions 0 have two replicas on one host (127.0.0.1)" in r.stdout, \
        r.stdout + r.stderr


def test_killed_child_is_restarted_and_rejoins(hosts) -> None:
    etcd, prefix, a, _b = hosts
    pid = a.child_pid(1)
    os.kill(pid, signal.SIGKILL)
    until(lambda: "process p1 node 2 killed by SIGKILL" in a.log_text(), 15, lambda: "the supervisor saw it\n" + a.log_tail())
    assert re.search(r"process p1 node 2 killed by SIGKILL after [\d.]+ s; restarting in 1 s", a.log_text())
    until(lambda: a.child_pid(1) != pid and api_versions_ok("127.0.0.1", a.port + 1, 1.0), 30,
          lambda: "p1 back\n" + a.log_tail())
    until(lambda: 2 in _registrations(etcd, prefix), 20, lambda: "node 2 registered again\n" + a.log_tail())
    got = _produce_consume(a.bootstrap(1), "spread", 8, 50)
    assert len(got) >= 50


def test_child_that_cannot_start_backs_off_with_a_reason(etcd_cluster, tmp_path) -> None:
    s = Supervisor(tmp_path / "busy", etcd_cluster.url(f"/busy-{uuid.uuid4().hex[:8]}"), 21)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", s.port + 1))
        taken.listen()
        s.start(wait=False)
        try:
            until(lambda: "restarting in 2 s" in s.log_text(), 30, lambda: "a second failure\n" + s.log_tail())
        finally:
            status = s.stop()
    text = s.log_text()
    line = next(l for l in text.splitlines() if "process p1 node 22 exited with status 1" in l)
    assert "cannot start" in line and "in use" in line and "restarting in 1 s" in line, line
    assert "Traceback" not in text
    assert status == 1  # p1 never ran: the supervisor says so
    assert re.search(r"1 of 2 broker processes did not stop cleanly: p1 node 22", text), s.log_tail()


def test_embedded_store_is_refused(tmp_path) -> None:
    r = subprocess.run([sys.executable, "-m", "shoal", "serve", "--processes", "2", "--log-dirs", str(tmp_path)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "shoal.metadata.store=etcd://" in r.stderr, r.stderr


def test_sigterm_stops_every_child_cleanly(hosts) -> None:
    _etcd, _prefix, a, b = hosts
    status = a.stop()
    text = a.log_text()
    assert status == 0, a.log_tail()
    for tag in ("p0 node 1", "p1 node 2"):
        assert re.search(rf"\[{tag}\] .*controlled shutdown: \d+ leaderships moved", text), a.log_tail()
        assert f"process {tag} stopped cleanly" in text
    assert "all 2 broker processes stopped cleanly" in text
    # the last brokers of the cluster too (one is elected controller as it stops)
    assert b.stop() == 0, b.log_tail()


def test_each_process_gets_its_node_ports_and_dirs() -> None:
    from shoal.cli.supervisor import process_settings
    from shoal.config import BrokerConfig

    settings = {"listeners": "PLAINTEXT://0.0.0.0:9092,SASL://127.0.0.1:9192,ANY://127.0.0.1:0",
                "advertised.listeners": "PLAINTEXT://b1.example:9092,SASL://127.0.0.1:9192,ANY://127.0.0.1:0",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT,ANY:PLAINTEXT",
                "log.dirs": "/d1,/d2", "node.id": "5", "broker.id": "5", "shoal.metrics.listener": "9645",
                "shoal.admin.listener": "http://127.0.0.1:9644", "num.partitions": "3"}
    got = process_settings(settings, BrokerConfig.load(None, settings), 2)
    assert got == {**settings, "node.id": "7", "broker.id": "7",
                   "listeners": "PLAINTEXT://0.0.0.0:9094,SASL://127.0.0.1:9194,ANY://127.0.0.1:0",
                   "advertised.listeners": "PLAINTEXT://b1.example:9094,SASL://127.0.0.1:9194,ANY://127.0.0.1:0",
                   "log.dirs": "/d1/p2,/d2/p2", "shoal.metrics.listener": "http://127.0.0.1:9647",
                   "shoal.admin.listener": "http://127.0.0.1:9646", "broker.host": "b1.example",
                   "shoal.metrics.node.label": "true"}
