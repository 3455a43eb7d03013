"""etcd in production (issue 28, part 3; ``docs/cluster.md``, *etcd in production*): three real
brokers on a real three-member etcd whose client URLs are TLS with ``--client-cert-auth`` and
whose RBAC is on, the brokers authenticating as a user whose role may read and write only their
prefix; certificates made by the test (``tests/auth/auth_certs.py``).

- the cluster serves a real client's produce and consume, and no password reaches a log or a
  command line; the password rotated (the file, then etcd, which revokes the tokens): the brokers
  authenticate again with the new one, no restart;
- the member a broker uses hangs (SIGSTOP) for longer than the session: the broker moves to
  another member within a third of the session, keeps its lease, registration and leaderships;
- a wrong CA, a client certificate etcd does not trust, a wrong password and a user without
  permission on the prefix each stop ``shoal serve`` in one line;
- ``etcdctl snapshot save``, restored into a new etcd (``etcdctl snapshot restore``): a broker
  started on it has its topics; one prefix of it copied back into the live etcd (the other keys
  left alone): a broker started there has its topics and their records.

One etcd cluster for the module; the restore runs last (it stops the brokers).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic

from broker_process import REPO
from cluster_harness import LEASE_LOST, SESSION_MS, Cluster, run, running_cluster, until
from etcd_cluster import EtcdCluster, make_test_pki
from shoal.client import AdminClient
from shoal.client.admin import PartitionDescription
from shoal.etcd.security import granted_prefixes

pytestmark = pytest.mark.timeout(120)

PREFIX = "/shoal-prod"
USER, PASSWORD, NEW_PASSWORD = "shoal", f"pw-{uuid.uuid4().hex}", f"pw-{uuid.uuid4().hex}"
STRANGER, STRANGER_PASSWORD = "stranger", f"pw-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    c = EtcdCluster(tmp_path_factory.mktemp("etcd-tls"), tls=True)
    c.start()
    try:
        c.enable_auth()
        c.add_user(USER, PASSWORD, *granted_prefixes(PREFIX))  # what docs/cluster.md says to grant
        c.add_user(STRANGER, STRANGER_PASSWORD)
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def cluster(etcd, tmp_path_factory):
    etcd.client_settings = etcd.shoal_settings(USER, PASSWORD)
    with running_cluster(etcd, tmp_path_factory, "prod", prefix=PREFIX) as c:
        c.wait_controller()
        yield c


def create(bootstrap: str, name: str, partitions: int = 3, rf: int = 3) -> None:
    a = KafkaAdmin({"bootstrap.servers": bootstrap, "log_level": 2})
    a.create_topics([NewTopic(name, partitions, rf)], request_timeout=20)[name].result(25)


def produce(bootstrap: str, topic: str, n: int) -> list[bytes]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "log_level": 2})
    values = [f"{topic}-{i}".encode() for i in range(n)]
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0
    return values


def consume(bootstrap: str, topic: str, partitions: int, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 2})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


async def _partitions(bootstrap: str, topic: str) -> list[PartitionDescription]:
    async with AdminClient(bootstrap, timeout=10) as a:
        md = await a.metadata([topic])
    return list(md.topics[topic].partitions)


async def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    return {p.partition: p.leader for p in await _partitions(bootstrap, topic)}


async def _topics(bootstrap: str) -> set[str]:
    async with AdminClient(bootstrap, timeout=10) as a:
        return set((await a.metadata(None)).topics)


def registration(etcd: EtcdCluster, node_id: int) -> tuple[int, int] | None:
    """(lease, create revision) of broker ``node_id``'s registration key, None when absent."""
    out = json.loads(etcd.etcdctl("get", f"{PREFIX}/brokers/{node_id}", "-w", "json"))
    kvs = out.get("kvs") or []
    return (int(kvs[0].get("lease", 0)), int(kvs[0]["create_revision"])) if kvs else None


def test_tls_rbac_cluster_serves_clients_and_keeps_secrets(etcd, cluster):
    topic = f"prod-{uuid.uuid4().hex[:6]}"
    create(cluster.bootstrap(), topic)
    sent = produce(cluster.bootstrap(), topic, 300)
    assert sorted(consume(cluster.bootstrap(), topic, 3, len(sent))) == sorted(sent)
    # the metadata is in etcd, under the prefix the user may use
    assert json.loads(etcd.etcdctl("get", f"{PREFIX}/topics/{topic}", "-w", "json")).get("count") == 1
    for b in cluster.brokers.values():
        log = b.log_text()
        assert f"authenticated to etcd as user '{USER}'" in log
        assert PASSWORD not in log
        assert PASSWORD.encode() not in Path(f"/proc/{b.proc.pid}/cmdline").read_bytes()
        assert "etcds://" in " ".join(b.serve_args())

    # the password rotated: the new one written to the brokers' password file, then set in etcd,
    # which revokes every token of the user: each broker's next request is refused, authenticates
    # again with the file's new password and goes through (no restart)
    before = {n: b.log_text().count("authenticated to etcd") for n, b in cluster.brokers.items()}
    Path(cluster[1].overrides["shoal.etcd.password.file"]).write_text(NEW_PASSWORD + "\n")
    etcd.etcdctl("user", "passwd", USER, "--interactive=false", stdin=NEW_PASSWORD.encode() + b"\n")
    again = f"again-{uuid.uuid4().hex[:6]}"
    create(cluster.bootstrap(), again)
    sent = produce(cluster.bootstrap(), again, 30)
    assert sorted(consume(cluster.bootstrap(), again, 3, len(sent))) == sorted(sent)
    until(lambda: any(b.log_text().count("authenticated to etcd") > before[n] for n, b in cluster.brokers.items()),
          10, "a broker authenticated again")
    logs = "".join(b.log_text() for b in cluster.brokers.values())
    assert "etcd refused the token" in logs and "changed in shoal.etcd.password.file" in logs
    assert PASSWORD not in logs and NEW_PASSWORD not in logs


def test_hung_member_broker_moves_on_keeps_lease_and_leaderships(etcd, cluster):
    topic = f"hung-{uuid.uuid4().hex[:6]}"
    create(cluster.bootstrap(), topic, partitions=6)
    node = next(n for n in cluster.brokers if n != cluster.wait_controller())  # a broker the controller watches
    broker = cluster[node]
    until(lambda: len(etcd.members_used_by(broker.proc.pid)) == 1, 10, "the broker on one etcd member")
    (member,) = etcd.members_used_by(broker.proc.pid)
    if etcd.leader() == member:  # a follower: a paused leader's successor would extend every lease
        etcd.move_leader((member + 1) % len(etcd.members))
    held, leaders = registration(etcd, node), run(_leaders(cluster.bootstrap(), topic))
    assert held is not None and held[0] != 0
    assert node in leaders.values()
    marks = cluster.log_marks()

    paused_at = time.time()
    etcd.pause_member(member)
    try:
        # longer than the session; every broker lists the paused one's broker all along
        while time.time() - paused_at < SESSION_MS / 1000 + 2.0:
            for b in cluster.brokers.values():
                assert node in cluster.describe(b.node_id)["brokers"], f"broker {node} dropped"
            time.sleep(0.3)
        moved_to = etcd.members_used_by(broker.proc.pid)
    finally:
        etcd.resume_member(member)

    assert registration(etcd, node) == held  # the same lease, the same registration key
    assert all(LEASE_LOST not in text for text in cluster.logs_since(marks).values())
    log = cluster.logs_since(marks)[node]
    moves = [line for line in log.splitlines() if "shoal.etcd.client: etcd member" in line and "moving to" in line]
    assert moves and f":{etcd.members[member].client_port} " in moves[0], log[-3000:]
    moved_in = datetime.strptime(moves[0][:23], "%Y-%m-%d %H:%M:%S,%f").timestamp() - paused_at
    print(f"broker {node} left the paused member {moved_in:.2f} s after the pause")
    # the next keep-alive (within one interval, a third of the session) times out one interval
    # later (and a loaded machine's scheduling on top: the lease's survival is the criterion)
    assert moved_in <= SESSION_MS / 1000 / 3 * 2 + 1.0, moved_in
    assert moved_to - {member}, moved_to  # (the old channel is closed once its calls ran out)
    assert run(_leaders(cluster.bootstrap(), topic)) == leaders
    # its watch moved too: a change made through another broker reaches its image
    later = f"later-{uuid.uuid4().hex[:6]}"
    create(cluster[cluster.wait_controller()].bootstrap, later, rf=1)
    until(lambda: later in run(_topics(broker.bootstrap)), 5, f"{later} in broker {node}'s image")
    etcd.wait_healthy()


def _serve_fails(cluster: Cluster, workdir: Path, cases: dict[str, dict[str, str]]) -> dict[str, tuple[int, str]]:
    """``shoal serve`` with each case's settings (all at once): its exit status and stderr."""
    procs = {}
    for name, settings in cases.items():
        d = workdir / name
        d.mkdir(parents=True)
        args = [sys.executable, "-m", "shoal", "serve", "--listeners", "PLAINTEXT://127.0.0.1:0",
                "--log-dirs", str(d / "data"), "--node-id", "9"]
        for k, v in {**cluster[1].overrides, **settings}.items():
            args += ["--override", f"{k}={v}"]
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        procs[name] = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=d)
    out = {}
    for name, p in procs.items():
        try:
            _, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        out[name] = (p.returncode, err.decode(errors="replace"))
    return out


def test_refused_brokers_stop_in_one_line(etcd, cluster, tmp_path):
    other = make_test_pki(tmp_path / "other-pki")
    wrong_pw = tmp_path / "wrong.password"
    wrong_pw.write_text("not-the-password\n")
    stranger = etcd.shoal_settings(STRANGER, STRANGER_PASSWORD)
    results = _serve_fails(cluster, tmp_path, {
        "wrong-ca": {"shoal.etcd.ssl.cafile": str(other.ca)},
        "untrusted-cert": {"shoal.etcd.ssl.certfile": str(other.client_cert),
                           "shoal.etcd.ssl.keyfile": str(other.client_key)},
        "wrong-password": {"shoal.etcd.password.file": str(wrong_pw)},
        "no-permission": {k: v for k, v in stranger.items() if k.startswith("shoal.etcd.user") or "password" in k},
    })  # (files that cannot be used: tests/etcd/test_etcd_security.py, the same one line)
    expect = {
        "wrong-ca": f"cannot verify the etcd member's TLS certificate with shoal.etcd.ssl.cafile {other.ca}",
        "untrusted-cert": f"the etcd member refused the TLS client certificate shoal.etcd.ssl.certfile {other.client_cert}",
        "wrong-password": f"etcd refused user '{USER}': etcdserver: authentication failed",
        "no-permission": f"etcd user '{STRANGER}' may not read and write the prefix {PREFIX}",
    }
    for name, (code, err) in results.items():
        last = err.strip().splitlines()[-1] if err.strip() else ""
        assert code == 1, (name, code, err[-2000:])
        assert last.startswith("shoal serve: cannot start: ") and expect[name] in last, (name, err[-2000:])
        assert "Traceback" not in err and not {PASSWORD, NEW_PASSWORD, STRANGER_PASSWORD} & set(err.split()), (name, err)


def copy_prefix(scratch: EtcdCluster, live: EtcdCluster, prefix: str) -> int:
    """docs/cluster.md's restore of one prefix: delete it on ``live``, put ``scratch``'s keys
    under it there, in creation order, but those under a lease (the brokers make them again).
    How many keys it put."""
    live.etcdctl("del", "--prefix", prefix)
    kvs = json.loads(scratch.etcdctl("get", "--prefix", prefix, "-w", "json")).get("kvs") or []
    put = 0
    for kv in sorted(kvs, key=lambda kv: int(kv["create_revision"])):
        if kv.get("lease"):
            continue
        live.etcdctl("put", base64.b64decode(kv["key"]).decode(), stdin=base64.b64decode(kv.get("value", "")))
        put += 1
    return put


def test_snapshot_restored_into_a_new_etcd_has_the_topics(etcd, cluster, tmp_path):
    topic = f"backup-{uuid.uuid4().hex[:6]}"
    create(cluster.bootstrap(), topic)
    sent = produce(cluster.bootstrap(), topic, 100)
    # every replica in sync in the backup (broker 1 alone comes back: it must be in every ISR)
    until(lambda: all(len(p.isr) == 3 for p in run(_partitions(cluster.bootstrap(), topic))), 15, "full ISRs")
    snapshot = etcd.snapshot(tmp_path / "shoal.db")
    t0 = time.monotonic()
    cluster.close()  # the old etcd is lost: the brokers stop, a new etcd is made from the backup
    # two restores of the backup: the new etcd of a whole restore, and the scratch copy one prefix
    # is copied back from (no broker runs on it)
    restored, scratch = (EtcdCluster.from_snapshot(snapshot, tmp_path / name, like=etcd) for name in ("new", "scratch"))
    b = cluster[1]
    try:
        restored.start()
        scratch.start()
        b.overrides["shoal.metadata.store"] = restored.url(PREFIX)
        b.start()  # (once its own registration from the snapshot, under a restored lease, expired)
        assert topic in run(_topics(b.bootstrap))
        whole = time.monotonic() - t0

        # one prefix of a shared etcd, copied back into the live etcd; its other keys are left alone
        b.stop()
        etcd.etcdctl("put", "/other-cluster/key", "kept")
        t1 = time.monotonic()
        assert copy_prefix(scratch, etcd, PREFIX + "/") > 3
        b.overrides["shoal.metadata.store"] = etcd.url(PREFIX)
        b.start()
        # the registrations are not copied: broker 1 is the only broker, and leads it all
        until(lambda: set(run(_leaders(b.bootstrap, topic)).values()) == {1}, 15, "broker 1 leading every partition")
        assert sorted(consume(b.bootstrap, topic, 3, len(sent))) == sorted(sent)
        assert etcd.etcdctl("get", "/other-cluster/key", "--print-value-only").strip() == "kept"
        assert whole < 20 and time.monotonic() - t1 < 15, (whole, time.monotonic() - t1)
    finally:
        cluster.close()
        restored.close()
        scratch.close()
