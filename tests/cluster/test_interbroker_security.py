"""Brokers replicate over an authenticated, encrypted inter-broker listener (SASL_SSL).

Three real broker processes on the real etcd, each with a listener INTERNAL (SASL_SSL, the test
CA's certificate) named by ``inter.broker.listener.name``; followers log in with
SCRAM-SHA-512 as ``User:broker`` (``listener.name.internal.scram-sha-512.sasl.jaas.config``,
made at start-up by ``shoal.sasl.bootstrap.users``), a super user, with an authorizer that
refuses everyone else. Clients use the PLAINTEXT listener (the operator).

- every replica joins the ISR and acks=all with min.insync.replicas=3 works: the followers'
  fetches passed TLS and SASL (INTERNAL speaks nothing else), and the bytes are the leader's;
- a broker restarted with the wrong password cannot fetch: it leaves the ISR, says why in one
  line of its log, and rejoins once restarted with the right one;
- a broker on etcd whose inter-broker listener is SASL but has no login does not start: one line
  that names the setting to add.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic

from broker_process import free_port
from cluster_harness import Cluster, ClusterBroker, until

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "auth"))
from auth_certs import make_pki  # noqa: E402

pytestmark = pytest.mark.timeout(300)

PASSWORD = "brokers-s3cret"
LAG_MS = 3000
AUTH_TIMEOUT_MS = 1500


def jaas(password: str) -> str:
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="{password}";'


class InternalBroker(ClusterBroker):
    """A cluster broker with a third listener, INTERNAL (SASL_SSL), for the brokers only. It is
    the first listener, so the one a broker registers as its host and port (the controller's
    probes go there), as in a cluster whose only listener is SASL_SSL."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.internal_port = free_port()

    def listeners(self) -> list[str]:
        return [f"INTERNAL://{self.host}:{self.internal_port}", *super().listeners()]


def tls_overrides(pki, password: str = PASSWORD) -> dict[str, str]:
    return {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": jaas(password),
        "shoal.sasl.bootstrap.users": f"broker:{PASSWORD}",
        "ssl.keystore.location": str(pki.server_pem),
        "ssl.truststore.location": str(pki.ca),
        "authorizer.class.name": "shoal",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:ANONYMOUS;User:broker",
        "replica.lag.time.max.ms": str(LAG_MS),
        "replica.fetch.backoff.ms": "200",
        # short, so that a connection that never logs in on INTERNAL is closed within the tests
        "listener.name.internal.shoal.sasl.authentication.timeout.ms": str(AUTH_TIMEOUT_MS),
    }


def make_cluster(workdir: Path, url: str, overrides: dict[str, str]) -> Cluster:
    c = Cluster(workdir, url, overrides=overrides)
    c.brokers = {i: InternalBroker(workdir / f"broker{i}", url, i, f"dc{i}", dict(overrides)) for i in (1, 2, 3)}
    return c


@pytest.fixture(scope="module")
def secured(etcd_cluster, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("interbroker")
    pki = make_pki(workdir / "pki")
    c = make_cluster(workdir, etcd_cluster.url(f"/ibsec-{uuid.uuid4().hex[:8]}"), tls_overrides(pki))
    c.pki = pki
    try:
        c.start()
        yield c
    finally:
        c.close()


def isr(bootstrap: str, topic: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    md = KafkaAdmin({"bootstrap.servers": bootstrap, "log_level": 2}).list_topics(topic, timeout=15)
    return {p.id: (p.leader, tuple(sorted(p.isrs))) for p in md.topics[topic].partitions.values()}


def create(bootstrap: str, topic: str, min_isr: int) -> None:
    a = KafkaAdmin({"bootstrap.servers": bootstrap, "log_level": 2})
    a.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": str(min_isr)})])[topic].result(20)


def produce(bootstrap: str, topic: str, n: int) -> list[str]:
    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "log_level": 2,
                  "message.timeout.ms": 30000})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), key=str(i).encode(),
                  on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
        p.poll(0)
    assert p.flush(40) == 0
    return errors


def count(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "log_level": 2})
    c.assign([TopicPartition(topic, p, 0) for p in range(3)])
    got, deadline = 0, time.monotonic() + 30
    while time.monotonic() < deadline:
        batch = c.consume(500, 0.5)
        got += sum(1 for m in batch if m.error() is None)
        if not batch and got:
            break
    c.close()
    return got


def test_replication_over_sasl_ssl(secured):
    b = secured.bootstrap()
    topic = f"ib-{uuid.uuid4().hex[:6]}"
    create(b, topic, min_isr=3)
    until(lambda: all(r == (1, 2, 3) for _l, r in isr(b, topic).values()), 30, "every replica in the ISR")
    assert produce(b, topic, 300) == []  # min.insync.replicas=3: each ack needed both followers
    assert count(b, topic) == 300


def test_the_controllers_held_connections_log_in_and_see_a_death(secured):
    """The controller holds a connection to each broker on its inter-broker listener (SASL_SSL
    here) and logs in there as a follower does: the listener's authentication timeout does not
    close it, and when the broker is killed it is that connection's end that tells the
    controller (its log says so)."""
    ctrl = secured.wait_controller()
    victim = next(n for n in (1, 2, 3) if n != ctrl)
    marks = {n: len(secured[n].log_text()) for n in (1, 2, 3)}
    time.sleep(AUTH_TIMEOUT_MS / 1000 * 2 + 1)  # any connection not logged in is closed by now
    for n in (1, 2, 3):
        assert "not authenticated within" not in secured[n].log_text()[marks[n]:], n
    secured.kill(victim)
    try:
        line = f"broker {victim} refuses connections"
        until(lambda: line in secured[ctrl].log_text()[marks[ctrl]:], 10, "the controller sees the death")
        said = next(ln for ln in secured[ctrl].log_text()[marks[ctrl]:].splitlines() if line in ln)
        assert "(the connection held to it ended)" in said, said
    finally:
        secured.start_one(victim)
        secured.wait_brokers({1, 2, 3}, timeout=60)


def test_wrong_password_keeps_a_broker_out_of_the_isr(secured):
    b = secured.bootstrap(1, 2)
    topic = f"ib-{uuid.uuid4().hex[:6]}"
    create(b, topic, min_isr=2)
    until(lambda: all(r == (1, 2, 3) for _l, r in isr(b, topic).values()), 30, "every replica in the ISR")
    broker3 = secured[3]
    broker3.stop()
    broker3.overrides["listener.name.internal.scram-sha-512.sasl.jaas.config"] = jaas("wrong")
    mark = len(broker3.log_text())
    broker3.start()
    followed = [p for p, (leader, _r) in isr(b, topic).items() if leader != 3]
    assert followed
    assert produce(b, topic, 100) == []  # acks=all with the two others
    until(lambda: all(3 not in isr(b, topic)[p][1] for p in followed), 30, "broker 3 out of the ISR")
    time.sleep(LAG_MS / 1000 + 1)  # well past replica.lag.time.max.ms: it stays out
    assert all(3 not in isr(b, topic)[p][1] for p in followed)
    lines = [ln for ln in broker3.log_text()[mark:].splitlines() if "cannot fetch from leader" in ln]
    assert lines and any("uthentication failed" in ln for ln in lines), lines
    broker3.stop()
    broker3.overrides["listener.name.internal.scram-sha-512.sasl.jaas.config"] = jaas(PASSWORD)
    broker3.start()
    until(lambda: all(r == (1, 2, 3) for _l, r in isr(b, topic).values()), 60, "broker 3 back in the ISR")


def test_no_inter_broker_login_is_a_start_up_error(secured, tmp_path):
    overrides = tls_overrides(secured.pki)
    del overrides["listener.name.internal.scram-sha-512.sasl.jaas.config"]
    broker = InternalBroker(tmp_path / "b9", secured.url, 9, "dc1", overrides)
    proc = subprocess.run([sys.executable, "-m", "shoal", "serve", *broker.serve_args()], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode != 0
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(err) == 1, proc.stderr
    assert "listener.name.internal.scram-sha-512.sasl.jaas.config" in err[0], err
