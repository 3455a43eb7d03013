"""Hardening (issue 10, items 1, 3, 4): what one connection may make the broker hold, and for how
long; attacks made with raw sockets against a real broker process, with real clients working
during and after.

- A client that pipelines thousands of Fetch requests and reads nothing: the broker stops reading
  it (and says so in its metrics) instead of holding a response per request.
- Before SASL authentication a frame is at most ``sasl.server.max.receive.size``; a connection that
  does not authenticate in time is closed.
- ``connections.max.idle.ms`` closes idle connections, ``shoal.request.read.timeout.ms`` closes
  those that started a frame and do not finish it (slowloris); one log line, not one per socket.

The broker has three listeners: PLAINTEXT (defaults: the attacks that must not be cut short by a
timeout), SASL_PLAINTEXT (authentication timeout 3 s) and IDLE, a PLAINTEXT listener whose idle
and read timeouts are 3 s (listener-level configs). Memory is the broker process's VmRSS.
"""

from __future__ import annotations

import datetime
import re
import socket
import struct
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from broker_process import BrokerProcess, free_port
from e2e_helpers import consume, create_topic
from polling import until
from raw_client import RawClient
from shoal.protocol import codec

pytestmark = pytest.mark.timeout(120)

USER, PASSWORD = "alice", "alice-secret"
TIMEOUT_MS = 3000
MIB = 1 << 20


class HardenedBroker(BrokerProcess):
    def __init__(self, workdir: Path) -> None:
        self.sasl_port, self.idle_port, self.metrics_port = free_port(), free_port(), free_port()
        super().__init__(workdir, overrides={
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,IDLE:PLAINTEXT",
            "shoal.sasl.bootstrap.users": f"{USER}:{PASSWORD}",
            "shoal.metrics.listener": f"http://127.0.0.1:{self.metrics_port}",
            "listener.name.sasl_plaintext.shoal.sasl.authentication.timeout.ms": str(TIMEOUT_MS),
            "listener.name.idle.connections.max.idle.ms": str(TIMEOUT_MS),
            "listener.name.idle.shoal.request.read.timeout.ms": str(TIMEOUT_MS),
        })

    def listeners(self) -> list[str]:
        return super().listeners() + [f"SASL_PLAINTEXT://{self.host}:{self.sasl_port}",
                                      f"IDLE://{self.host}:{self.idle_port}"]

    def rss_mib(self) -> float:
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def metrics(self) -> dict[str, float]:
        """``name{labels}`` -> value of every sample on /metrics."""
        with urllib.request.urlopen(f"http://{self.host}:{self.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out


@pytest.fixture(scope="module")
def hb(tmp_path_factory):
    b = HardenedBroker(tmp_path_factory.mktemp("shoal-hardening-"))
    b.start()
    yield b
    b.stop()


@pytest.fixture
def guarded(hb):
    assert hb.running, hb.log_tail()
    yield hb
    assert hb.running, f"the broker exited\n{hb.log_tail()}"


def closed_by_peer(s: socket.socket, timeout: float = 0.05) -> bool:
    """The broker closed ``s`` (EOF or reset); False while it is open and silent."""
    s.settimeout(timeout)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except (socket.timeout, BlockingIOError):
        return False
    except OSError:
        return True


def closes_logged(b: BrokerProcess, since: int, text: str, count: int) -> list[str] | None:
    """The broker's log lines since offset ``since`` that contain ``text``, once they say that
    ``count`` connections were closed in all ("closed N connections ..."); else None."""
    lines = [l for l in b.log_text()[since:].splitlines() if text in l]
    total = sum(int(m.group(1)) for l in lines if (m := re.search(r"closed (\d+) connection", l)))
    assert total <= count, lines
    return lines if total == count else None


def round_trip(b: BrokerProcess, bootstrap: str | None = None, n: int = 50, **conf) -> None:
    """A confluent-kafka producer and consumer on ``bootstrap`` (PLAINTEXT by default, with
    ``conf``): ``n`` records out and back, on a topic made on the PLAINTEXT listener."""
    topic = f"normal-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, 1)
    bootstrap = bootstrap or b.bootstrap
    p = Producer({"bootstrap.servers": bootstrap, "allow.auto.create.topics": True, "socket.timeout.ms": 10000,
                  **conf})
    errors: list = []
    for i in range(n):
        p.produce(topic, b"v%d" % i, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(20) == 0 and not errors, errors
    got = consume(bootstrap, topic, 1, n, timeout=20, **conf)
    assert [m.value() for m in got] == [b"v%d" % i for i in range(n)]


def fetch_frame(topic: str, cid: int, max_bytes: int = 64 * MIB, client_id: str = "attacker") -> bytes:
    fetch = codec.request_type(1, 4)
    mod = sys.modules[fetch.__module__]
    body = fetch(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=max_bytes, isolation_level=0,
                 topics=(mod.FetchTopic(topic=topic, partitions=(
                     mod.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=max_bytes),)),))
    return codec.encode_request(1, 4, cid, client_id, body)


# -- 1. a client that pipelines Fetch requests and reads nothing ------------------------------------

def test_client_that_stops_reading_is_paused_and_memory_stays_bounded(guarded):
    b = guarded
    topic = f"big-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                  "compression.type": "none"})
    value = b"x" * 1024
    for _ in range(2048):  # 2 MiB: each Fetch below answers about 2 MiB
        p.produce(topic, value)
    assert p.flush(20) == 0

    requests = 3000  # ~6 GB of responses if the broker answered them all into memory
    # 8 KB requests: 24 MB in all, more than the kernel buffers between us, so sendall blocks
    # unless the broker reads them all.
    client_id = "a" * 8000
    frames = b"".join(fetch_frame(topic, i, client_id=client_id) for i in range(requests))
    rss_before = b.rss_mib()
    attacker = socket.socket()
    attacker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # reads nothing anyway
    attacker.connect((b.host, b.port))
    sent = [0]

    def send_all() -> None:  # blocks once the broker stops reading; the main thread goes on
        try:
            attacker.sendall(frames)
            sent[0] = len(frames)
        except OSError:
            pass

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    try:
        # The broker pauses the connection and reports it (and the bytes it holds for it).
        metrics = until(lambda: (m := b.metrics()).get('shoal_connections_paused{reason="responses"}', 0) >= 1
                        and m, 20.0, "the attacker's connection to be paused")
        # At most shoal.connection.queued.response.max.bytes (4 MiB) in the transport plus as much
        # behind an earlier response, and the response being written when it paused (2 MiB).
        queued = metrics['shoal_connection_queued_response_bytes']
        assert 0 < queued < 16 * MIB, metrics
        peak = rss_before
        for _ in range(10):  # over a few seconds: still bounded, nothing more is read
            peak = max(peak, b.rss_mib())
            time.sleep(0.3)
        round_trip(b)  # other clients are served meanwhile
        peak = max(peak, b.rss_mib())
        assert peak - rss_before < 50, f"RSS {rss_before:.0f} -> {peak:.0f} MiB"  # (before: 6 GB)
        assert sent[0] == 0, "the broker read all 3,000 requests: it did not stop reading"
    finally:
        attacker.shutdown(socket.SHUT_RDWR)  # (close alone leaves the blocked sendall's socket open)
        attacker.close()
        sender.join(10)
    until(lambda: b.metrics().get('shoal_connections_paused{reason="responses"}', 0) == 0, 20.0,
          "the paused connection to be gone")
    round_trip(b)
    print(f"\nstop-reading attack: RSS {rss_before:.0f} MiB before, peak {peak:.0f} MiB; "
          f"queued response bytes while paused: {queued / MIB:.1f} MiB")


# -- 3. pre-authentication buffering, authentication timeout ----------------------------------------

def sasl_conf(b: HardenedBroker) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": USER, "sasl.password": PASSWORD}


def test_unauthenticated_frames_are_capped_and_memory_is_returned(guarded):
    b = guarded
    sasl = f"{b.host}:{b.sasl_port}"
    log_before = len(b.log_text())
    rss_before = b.rss_mib()
    chunk = b"\0" * MIB
    socks = []
    for _ in range(10):
        s = socket.create_connection((b.host, b.sasl_port), timeout=10)
        socks.append(s)
        try:
            s.sendall(struct.pack(">i", 100 * MIB))
            for _ in range(4):
                s.sendall(chunk)
        except OSError:
            pass  # closed by the broker while we were still sending: what we want
    for s in socks:
        assert until(lambda: closed_by_peer(s), 15, "the broker to close a 100 MB pre-auth frame")
        s.close()
    rss_after = b.rss_mib()
    assert rss_after - rss_before < 50, f"RSS {rss_before:.0f} -> {rss_after:.0f} MiB"
    # Logged as a summary: one line a second at most, with the count (the first one at once).
    lines = until(lambda: closes_logged(b, log_before, "sasl.server.max.receive.size", 10), 10,
                  "10 closes to be logged")
    assert len(lines) <= 4, lines
    # A real SASL client still logs in, produces and consumes (its frames are small).
    round_trip(b, sasl, **sasl_conf(b))
    print(f"\npre-auth 100 MB frames x10: RSS {rss_before:.0f} -> {rss_after:.0f} MiB")


def scram_login(address: str, user: str, password: str) -> RawClient:
    """A raw connection that has authenticated with SCRAM-SHA-256 (SaslHandshake v1 and two
    SaslAuthenticate v2 rounds), ready for requests of its own making."""
    import scramp

    c = RawClient(address, client_id=user, timeout=10)
    assert c.call(17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
    client = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
    r = c.call(36, 2, {"auth_bytes": client.get_client_first().encode()})
    client.set_server_first(bytes(r.auth_bytes).decode())
    r = c.call(36, 2, {"auth_bytes": client.get_client_final().encode()})
    assert r.error_code == 0, r
    client.set_server_final(bytes(r.auth_bytes).decode())
    return c


def test_an_authenticated_clients_announced_frames_do_not_hold_the_request_memory(guarded):
    """alice logs in on three connections and sends on each only the length of a 100 MB frame:
    300 MB announced, over the broker's 256 MiB ``queued.max.request.bytes``. Memory is taken as
    bytes arrive, and an owner's share counts its frames at their announced size: alice's first
    frame takes her past her share (a quarter of the pool), so her other two connections wait,
    and everyone else is read at once (they waited for the read timeout, 30 s, while the pool
    was reserved from the lengths)."""
    b = guarded
    sasl = f"{b.host}:{b.sasl_port}"
    hogs = [scram_login(sasl, USER, PASSWORD) for _ in range(3)]
    try:
        for h in hogs:
            h.sock.sendall(struct.pack(">i", 100 * MIB))
        time.sleep(0.5)  # read by the broker
        started = time.monotonic()
        round_trip(b, n=20)  # PLAINTEXT: another owner
        took = time.monotonic() - started
        assert took < 15, f"another client waited {took:.1f} s"
        assert b.metrics()['shoal_connections_paused{reason="memory"}'] == 2  # alice's 2nd and 3rd
        assert b.metrics()["shoal_queued_request_bytes"] < MIB  # what arrived, not what was announced
    finally:
        for h in hogs:
            h.close()


def test_connection_that_does_not_authenticate_in_time_is_closed(guarded):
    b = guarded
    silent = [socket.create_connection((b.host, b.sasl_port), timeout=10) for _ in range(20)]
    started = time.monotonic()
    # One that asked for ApiVersions and a mechanism, then stalled, is closed too.
    talker = RawClient(f"{b.host}:{b.sasl_port}", client_id="stalls")
    assert talker.call(18, 0, {}).error_code == 0
    assert talker.call(17, 1, {"mechanism": "PLAIN"}).error_code == 0
    # A real client authenticates meanwhile, and its connection is not cut.
    round_trip(b, f"{b.host}:{b.sasl_port}", **sasl_conf(b))
    for s in silent + [talker.sock]:
        assert until(lambda: closed_by_peer(s), 20, "an unauthenticated connection to be closed")
    elapsed = time.monotonic() - started
    assert elapsed >= TIMEOUT_MS / 1000 * 0.9, f"closed after {elapsed:.1f} s, before the timeout"
    for s in silent:
        s.close()
    talker.close()
    assert "not authenticated within shoal.sasl.authentication.timeout.ms=3000" in b.log_text()


# -- 4. idle and slowloris connections ---------------------------------------------------------------

def test_idle_and_slowloris_connections_are_closed_active_ones_are_not(guarded):
    b = guarded
    closed_before = b.metrics()
    log_before = len(b.log_text())
    idle = [socket.create_connection((b.host, b.idle_port), timeout=10) for _ in range(300)]
    slow = [socket.create_connection((b.host, b.idle_port), timeout=10) for _ in range(100)]
    for s in slow:  # a frame of 1,000 bytes, started ...
        s.sendall(struct.pack(">i", 1000) + b"\0\0")
    active = RawClient(f"{b.host}:{b.idle_port}", client_id="active")
    started = time.monotonic()
    deadline = started + 4 * TIMEOUT_MS / 1000
    stop = threading.Event()

    def dribble() -> None:  # ... and fed one byte per socket every 0.5 s, never finished
        while not stop.is_set():
            for s in slow:
                try:
                    s.send(b"\0")
                except OSError:
                    pass
            stop.wait(0.5)

    t = threading.Thread(target=dribble, daemon=True)
    t.start()
    try:
        while time.monotonic() < deadline:  # the active client asks something every 0.5 s
            assert active.call(18, 0, {}).error_code == 0
            time.sleep(0.5)
        for s in idle:
            assert until(lambda: closed_by_peer(s), 10, "an idle connection to be closed")
        for s in slow:
            assert until(lambda: closed_by_peer(s), 10, "a slowloris connection to be closed")
    finally:
        stop.set()
        t.join(5)
    assert active.call(18, 0, {}).error_code == 0, "the active connection was closed"
    active.close()
    for s in idle + slow:
        s.close()
    # Connections on the PLAINTEXT listener (default timeouts) are untouched: a client works.
    round_trip(b)
    metrics = b.metrics()

    def closed(reason: str) -> float:
        key = f'shoal_connections_closed_total{{reason="{reason}"}}'
        return metrics[key] - closed_before.get(key, 0)

    assert closed("idle") >= 300 and closed("read_timeout") == 100, metrics
    # A summary: a line a second at most, not 300 + 100 lines.
    slow_lines = until(lambda: closes_logged(b, log_before, "shoal.request.read.timeout.ms=3000", 100), 10,
                       "100 slowloris closes to be logged")
    assert len(slow_lines) <= 10, slow_lines
    idle_lines = [l for l in b.log_text()[log_before:].splitlines() if "connections.max.idle.ms=3000" in l]
    assert 1 <= len(idle_lines) <= 10, idle_lines
