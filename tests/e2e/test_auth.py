"""Authentication end to end with real clients: SASL PLAIN and SCRAM-SHA-256/512 over
SASL_PLAINTEXT and SASL_SSL, TLS with a test CA, mTLS, failures, the pre-authentication gate,
KIP-368 re-authentication and ``shoal scram set``.

One broker for the module, with one listener per case (see ``auth_broker``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("cryptography")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "auth"))
from auth_certs import make_pki  # noqa: E402
from broker_process import REPO, BrokerProcess, free_port  # noqa: E402

from raw_client import RawClient  # noqa: E402

USERS = {"alice": "alice-secret", "admin": "admin-secret"}
REAUTH_MS = 1500


class AuthBroker(BrokerProcess):
    """A broker with only authenticated listeners: SASL (plain and TLS), TLS, mutual TLS, and a
    SASL listener whose sessions expire after ``REAUTH_MS``. Ready once SASL_PLAINTEXT answers
    ApiVersions (allowed before authentication)."""

    def __init__(self) -> None:
        workdir = Path(tempfile.mkdtemp(prefix="shoal-auth-"))
        self.pki = p = make_pki(workdir / "pki")
        self.ports = {n: free_port() for n in ("SASL_PLAINTEXT", "SSL", "SASL_SSL", "MTLS", "REAUTH")}
        super().__init__(workdir, self.ports["SASL_PLAINTEXT"], {
            "listener.security.protocol.map":
                "SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,MTLS:SSL,REAUTH:SASL_PLAINTEXT",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(p.server_pem),
            "ssl.truststore.location": str(p.ca),
            "ssl.client.auth": "requested",
            "listener.name.sasl_ssl.ssl.certificate.location": str(p.server_cert),
            "listener.name.sasl_ssl.ssl.key.location": str(p.server_key),
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
            "shoal.sasl.bootstrap.users": ",".join(f"{u}:{pw}" for u, pw in USERS.items()),
        })

    def listeners(self) -> list[str]:
        return [f"{n}://{self.host}:{port}" for n, port in self.ports.items()]

    def addr(self, listener: str) -> str:
        return f"{self.host}:{self.ports[listener]}"


class Raw(RawClient):
    """A bare socket speaking Shoal's codec: for exact error codes and closes."""

    def __init__(self, address: str) -> None:
        super().__init__(address, client_id="auth-test")

    def plain(self, user: str, password: str, version: int = 2):
        assert self.call(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        return self.call(36, version, {"auth_bytes": f"\x00{user}\x00{password}".encode()})

    def metadata(self):
        return self.call(3, 1, {"topics": ()})


@pytest.fixture(scope="module")
def auth_broker():
    b = AuthBroker()
    b.start()
    yield b
    b.stop()
    shutil.rmtree(b.workdir, ignore_errors=True)


def sasl_conf(b: AuthBroker, listener: str, mech: str, user: str = "alice", password: str | None = None) -> dict:
    conf = {
        "bootstrap.servers": b.addr(listener),
        "security.protocol": "SASL_SSL" if listener == "SASL_SSL" else "SASL_PLAINTEXT",
        "sasl.mechanism": mech,
        "sasl.username": user,
        "sasl.password": USERS.get(user, "") if password is None else password,
    }
    if listener == "SASL_SSL":
        conf["ssl.ca.location"] = str(b.pki.ca)
    return conf


def ssl_conf(b: AuthBroker, listener: str, client_cert: bool) -> dict:
    conf = {"bootstrap.servers": b.addr(listener), "security.protocol": "SSL", "ssl.ca.location": str(b.pki.ca)}
    if client_cert:
        conf.update({"ssl.certificate.location": str(b.pki.client_cert), "ssl.key.location": str(b.pki.client_key)})
    return conf


def confluent_round_trip(conf: dict, n: int = 3, size: int = 0) -> None:
    """``n`` records (of ``size`` bytes: 1,000 of 1 KiB make a megabyte Produce, read into place
    behind TLS too) produced and read back in order."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = f"auth-{uuid.uuid4().hex[:8]}"
    p = Producer({**conf, "allow.auto.create.topics": True, "linger.ms": 5})
    errors = []
    values = [f"m{i}-".encode().ljust(size, b"x") for i in range(n)]
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(15) == 0 and not errors
    c = Consumer({**conf, "group.id": "auth-e2e", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 15
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == values


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_sasl_plaintext(auth_broker, mech):
    confluent_round_trip(sasl_conf(auth_broker, "SASL_PLAINTEXT", mech))


def test_confluent_kafka_sasl_ssl_and_ssl(auth_broker):
    confluent_round_trip(sasl_conf(auth_broker, "SASL_SSL", "SCRAM-SHA-512"))
    confluent_round_trip(ssl_conf(auth_broker, "SSL", client_cert=False))
    confluent_round_trip(ssl_conf(auth_broker, "MTLS", client_cert=True))


def test_megabyte_produce_requests_over_tls(auth_broker):
    confluent_round_trip(ssl_conf(auth_broker, "SSL", client_cert=False), n=3000, size=1024)
    confluent_round_trip(sasl_conf(auth_broker, "SASL_SSL", "SCRAM-SHA-512"), n=3000, size=1024)


def test_kafka_python_scram_sha_256(auth_broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"auth-kp-{uuid.uuid4().hex[:8]}"
    common = dict(bootstrap_servers=auth_broker.addr("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice", sasl_plain_password=USERS["alice"])
    p = KafkaProducer(**common)
    p.send(topic, b"hello").get(timeout=15)
    p.close()
    c = KafkaConsumer(**common, auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=10000)
    c.assign([TopicPartition(topic, 0)])
    first = next(c, None)  # the first record (iterating on would wait out consumer_timeout_ms)
    assert first is not None and first.value == b"hello"
    c.close()


async def test_aiokafka_sasl_ssl_plain(auth_broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    topic = f"auth-aio-{uuid.uuid4().hex[:8]}"
    common = dict(bootstrap_servers=auth_broker.addr("SASL_SSL"), security_protocol="SASL_SSL",
                  ssl_context=create_ssl_context(cafile=str(auth_broker.pki.ca)),
                  sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password=USERS["alice"])
    p = AIOKafkaProducer(**common)
    await p.start()
    try:
        await p.send_and_wait(topic, b"aio")
    finally:
        await p.stop()
    c = AIOKafkaConsumer(**common, enable_auto_commit=False, auto_offset_reset="earliest")
    await c.start()
    try:
        c.assign([TopicPartition(topic, 0)])
        await c.seek_to_beginning()
        m = await c.getone()
        assert m.value == b"aio"
    finally:
        await c.stop()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat(auth_broker):
    b = auth_broker

    def kcat(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["kcat", "-L", "-m", "5", *args], capture_output=True, text=True, timeout=30)

    def refused(reason: str, *args: str) -> None:
        """kcat -L is refused: librdkafka says ``reason`` on stderr within kcat's metadata timeout.
        Stopped then: it would only wait out the rest of the timeout (5 s a call) and fail."""
        seen = ""
        with subprocess.Popen(["kcat", "-L", "-m", "5", *args], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) as p:
            try:
                for line in p.stderr:  # type: ignore[union-attr]  (ends when kcat exits)
                    seen += line
                    if reason in line:
                        break
            finally:
                p.kill()
        assert reason in seen, (args, seen)

    r = kcat("-b", b.addr("SASL_PLAINTEXT"), "-X", "security.protocol=SASL_PLAINTEXT",
             "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice", "-X", f"sasl.password={USERS['alice']}")
    assert r.returncode == 0 and "1 brokers" in r.stdout, r.stderr
    # Debian's kcat (older librdkafka) repeats its client nonce in client-final; Kafka accepts a
    # nonce that ends with the server's, and so does Shoal (shoal/auth/sasl.py).
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        r = kcat("-b", b.addr("SASL_PLAINTEXT"), "-X", "security.protocol=SASL_PLAINTEXT",
                 "-X", f"sasl.mechanisms={mechanism}", "-X", "sasl.username=alice",
                 "-X", f"sasl.password={USERS['alice']}")
        assert r.returncode == 0 and "1 brokers" in r.stdout, (mechanism, r.stderr)
        refused(f"invalid credentials with SASL mechanism {mechanism}", "-b", b.addr("SASL_PLAINTEXT"),
                "-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
                "-X", "sasl.username=alice", "-X", "sasl.password=nope")
    r = kcat("-b", b.addr("MTLS"), "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={b.pki.ca}",
             "-X", f"ssl.certificate.location={b.pki.client_cert}", "-X", f"ssl.key.location={b.pki.client_key}")
    assert r.returncode == 0 and "1 brokers" in r.stdout, r.stderr
    # client certificate required: the broker ends the TLS session of a client without one
    refused("SSL routines", "-b", b.addr("MTLS"), "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={b.pki.ca}")
    refused("invalid credentials with SASL mechanism PLAIN", "-b", b.addr("SASL_PLAINTEXT"),
            "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice",
            "-X", "sasl.password=nope")


def test_wrong_password_and_unknown_user(auth_broker):
    b = auth_broker
    with Raw(b.addr("SASL_PLAINTEXT")) as good:
        assert good.plain("alice", USERS["alice"]).error_code == 0
        messages = []
        for user, password in (("alice", "wrong-pw-123"), ("nobody", "whatever-456")):
            with Raw(b.addr("SASL_PLAINTEXT")) as bad:
                r = bad.plain(user, password)
                assert r.error_code == 58  # SASL_AUTHENTICATION_FAILED
                messages.append(r.error_message)
                assert bad.closed()
        assert messages[0] == messages[1]
        assert "PLAIN" in messages[0] and "alice" not in messages[0]
        assert good.metadata().brokers  # other clients unaffected
    log = b.log_text()
    assert "failed authentication from 127.0.0.1:" in log and "mechanism PLAIN" in log
    assert "wrong-pw-123" not in log and "whatever-456" not in log


def test_request_before_authentication_closes(auth_broker):
    with Raw(auth_broker.addr("SASL_PLAINTEXT")) as r:
        assert r.call(18, 0, {}).error_code == 0  # ApiVersions is allowed
        r.send(3, 1, {"topics": ()})
        assert r.closed()
    assert "before SASL authentication" in auth_broker.log_text()


def test_reauthentication_raw(auth_broker):
    b = auth_broker
    with Raw(b.addr("REAUTH")) as r:
        resp = r.plain("alice", USERS["alice"], version=1)
        assert resp.error_code == 0 and resp.session_lifetime.total_seconds() * 1000 == REAUTH_MS
        time.sleep(REAUTH_MS / 1000 * 0.6)
        assert r.plain("alice", USERS["alice"], version=1).error_code == 0  # re-authenticated
        time.sleep(REAUTH_MS / 1000 * 0.6)  # past the first session's end, inside the second
        assert r.metadata().brokers
        time.sleep(REAUTH_MS / 1000 * 0.6)
        r.send(3, 1, {"topics": ()})
        assert r.closed()
    with Raw(b.addr("REAUTH")) as r:  # re-authentication may not change the principal
        assert r.plain("alice", USERS["alice"]).error_code == 0
        assert r.plain("admin", USERS["admin"]).error_code == 58
        assert r.closed()
    assert "SASL session expired" in b.log_text()


def test_reauthentication_keeps_a_confluent_producer_working(auth_broker):
    from confluent_kafka import Producer

    b = auth_broker
    conf = sasl_conf(b, "REAUTH", "SCRAM-SHA-256")
    before = b.log_text().count("SASL session expired")
    p = Producer({**conf, "allow.auto.create.topics": True, "linger.ms": 5})
    topic = f"auth-reauth-{uuid.uuid4().hex[:8]}"
    errors, delivered = [], []
    deadline = time.monotonic() + REAUTH_MS / 1000 * 3
    while time.monotonic() < deadline:
        p.produce(topic, b"x", on_delivery=lambda err, msg: (errors if err else delivered).append(err))
        p.poll(0.1)
    assert p.flush(15) == 0
    assert not errors and len(delivered) > 20
    assert b.log_text().count("SASL session expired") == before


def test_cli_scram_set_then_login(auth_broker, tmp_path):
    b = auth_broker
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                     f"sasl.username=admin\nsasl.password={USERS['admin']}\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run(
        [sys.executable, "-m", "shoal", "scram", "set", "carol", "--mechanism", "SCRAM-SHA-512", "--password-stdin",
         "--bootstrap-server", b.addr("SASL_PLAINTEXT"), "--command-config", str(props)],
        input="carol-pw\n", capture_output=True, text=True, env=env, timeout=30,
    )
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "shoal", "scram", "describe", "carol",
         "--bootstrap-server", b.addr("SASL_PLAINTEXT"), "--command-config", str(props)],
        capture_output=True, text=True, env=env, timeout=30,
    )
    assert r.stdout.strip() == "carol: SCRAM-SHA-512(iterations=4096)", r.stderr
    with Raw(b.addr("SASL_PLAINTEXT")) as raw:
        assert raw.plain("carol", "carol-pw").error_code == 0
    stored = b"".join(p.read_bytes() for p in (b.workdir / "data" / "__metadata").iterdir())
    assert b"carol" in stored and b"carol-pw" not in stored  # in the snapshot or its journal
    # without --mechanism: a credential for each mechanism the listener offers, and delete removes both
    def scram(*args: str, stdin: str = ""):
        return subprocess.run([sys.executable, "-m", "shoal", "scram", *args, "--bootstrap-server",
                               b.addr("SASL_PLAINTEXT"), "--command-config", str(props)],
                              input=stdin, capture_output=True, text=True, env=env, timeout=30)

    r = scram("set", "dave", "--password-stdin", stdin="dave-pw\n")
    assert r.returncode == 0 and "SCRAM-SHA-256, SCRAM-SHA-512 credentials of user dave set" in r.stdout, r.stderr
    assert scram("describe", "dave").stdout.strip() == "dave: SCRAM-SHA-256(iterations=4096), SCRAM-SHA-512(iterations=4096)"
    from confluent_kafka.admin import AdminClient

    AdminClient(sasl_conf(b, "SASL_PLAINTEXT", "SCRAM-SHA-256", "dave", "dave-pw")).list_topics(timeout=10)
    r = scram("delete", "dave")
    assert r.returncode == 0 and "SCRAM-SHA-256, SCRAM-SHA-512 credentials of user dave deleted" in r.stdout, r.stderr
    r = scram("delete", "dave")
    assert r.returncode == 1 and "RESOURCE_NOT_FOUND" in r.stderr, r.stderr


def test_cli_topics_over_sasl_ssl_and_mtls(auth_broker, tmp_path):
    """`shoal topics --command-config` reaches TLS and SASL listeners (shoal.client.ClientSecurity)."""
    b = auth_broker
    env = dict(os.environ, PYTHONPATH=str(REPO))
    sasl_ssl = tmp_path / "sasl_ssl.properties"
    sasl_ssl.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
        f"sasl.username=alice\nsasl.password={USERS['alice']}\nssl.ca.location={b.pki.ca}\n"
    )
    mtls = tmp_path / "mtls.properties"
    mtls.write_text(
        f"security.protocol=SSL\nssl.ca.location={b.pki.ca}\n"
        f"ssl.certificate.location={b.pki.client_cert}\nssl.key.location={b.pki.client_key}\n"
    )

    def topics(*args: str, listener: str, config) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "shoal", "topics", *args, "--bootstrap-server", b.addr(listener),
             "--command-config", str(config)],
            capture_output=True, text=True, env=env, timeout=60,
        )

    r = topics("create", "cli-over-tls", "--partitions", "2", listener="SASL_SSL", config=sasl_ssl)
    assert r.returncode == 0, r.stderr
    r = topics("list", listener="MTLS", config=mtls)
    assert r.returncode == 0 and "cli-over-tls" in r.stdout.split(), r.stderr
    bad = tmp_path / "bad.properties"
    bad.write_text(sasl_ssl.read_text().replace(USERS["alice"], "wrong"))
    r = topics("list", listener="SASL_SSL", config=bad)
    assert r.returncode != 0 and "Traceback" not in r.stderr
