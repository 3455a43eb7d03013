"""Connection limits on real loopback sockets (shoal.server.limits): an in-process broker in a
thread, plain TCP clients speaking ApiVersions, and confluent-kafka producers."""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import ssl
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from broker_thread import ThreadBroker
from raw_client import RawClient
from shoal.protocol import codec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "auth"))
from auth_certs import make_pki  # noqa: E402

ANSWERED, CLOSED, SILENT = "answered", "closed", "silent"


def connect(port: int) -> RawClient:
    return RawClient(f"127.0.0.1:{port}", client_id="limits-test")


def probe(r: RawClient, timeout: float = 2.0, *, send: bool = True) -> str:
    """Send ApiVersions v0 (``send=False``: wait for the answer to one sent before) and say how
    it went: ANSWERED (served), CLOSED (the broker closed the connection) or SILENT (not accepted
    yet: the connection waits in the listen backlog, its request unread)."""
    r.sock.settimeout(timeout)
    try:
        if send:
            r.send(18, 0, {})
        r.recv(18, 0)
    except socket.timeout:
        return SILENT
    except (OSError, EOFError):
        return CLOSED
    return ANSWERED


def wait_closed(r: RawClient, timeout: float) -> float:
    """Seconds until the broker closes the connection (fails if it does not)."""
    start = time.monotonic()
    r.sock.settimeout(timeout)
    assert r.closed()
    return time.monotonic() - start


@pytest.fixture
def start(tmp_path):
    brokers: list[ThreadBroker] = []

    def start(**overrides: str) -> ThreadBroker:
        tb = ThreadBroker(tmp_path / f"b{len(brokers)}", {k.replace("_", "."): v for k, v in overrides.items()})
        brokers.append(tb)
        return tb.start()

    yield start
    for tb in brokers:
        tb.stop()


def stats(tb: ThreadBroker, listener: str = "PLAINTEXT"):
    return tb.call(lambda: tb.broker.connection_limits.stats[listener])


def test_max_connections_per_ip_refuses_with_a_log_line(start, caplog):
    caplog.set_level(logging.INFO, logger="shoal.server.limits")
    tb = start(max_connections_per_ip="2")
    a, b = connect(tb.port()), connect(tb.port())
    assert probe(a) == ANSWERED and probe(b) == ANSWERED
    c = connect(tb.port())
    assert probe(c) == CLOSED
    assert "refused a connection from 127.0.0.1, which already has the configured maximum of 2" in caplog.text
    s = stats(tb)
    assert (s.connections, s.refused_per_ip, s.accepted) == (2, 1, 2)
    a.close()
    deadline = time.monotonic() + 5
    while stats(tb).connections != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    d = connect(tb.port())
    assert probe(d) == ANSWERED
    for s_ in (b, c, d):
        s_.close()


def test_max_connections_blocks_accept_until_one_closes(start, caplog):
    caplog.set_level(logging.INFO, logger="shoal.server.limits")
    tb = start(max_connections="2")
    a, b = connect(tb.port()), connect(tb.port())
    assert probe(a) == ANSWERED and probe(b) == ANSWERED
    c = connect(tb.port())  # TCP completes in the kernel; the broker does not accept it yet
    assert probe(c, timeout=0.5) == SILENT
    assert stats(tb).blocked == 1
    assert "listener PLAINTEXT: at its connection limit (2 open, 2 on the broker)" in caplog.text
    a.close()
    assert probe(c, 5, send=False) == ANSWERED
    assert stats(tb).connections == 2
    b.close()
    c.close()


def test_dynamic_max_connections_wakes_a_blocked_acceptor(start):
    tb = start(max_connections="1")
    a = connect(tb.port())
    assert probe(a) == ANSWERED
    b = connect(tb.port())
    assert probe(b, timeout=0.3) == SILENT
    tb.run(tb.broker.metadata.set_broker_configs({"max.connections": "5"}))
    assert probe(b, 5, send=False) == ANSWERED
    a.close()
    b.close()


def test_connection_creation_rate_delays_accepts(start, caplog):
    """Rate 5/s over 2 samples of 1 s (W >= 1 s): 5 connections at once are in the rate, the
    6th is delayed (6 - 5) / 5 * 1000 = 200 ms, the 7th about as long again."""
    caplog.set_level(logging.INFO, logger="shoal.server.limits")
    tb = start(max_connection_creation_rate="5", quota_window_num="2")
    t0 = time.monotonic()
    socks = [connect(tb.port()) for _ in range(7)]  # all in the backlog at once
    assert [probe(s, timeout=5) for s in socks] == [ANSWERED] * 7
    elapsed = time.monotonic() - t0
    st = stats(tb)
    assert st.rate_throttled == 2 and 300 <= st.rate_throttle_ms <= 420, st
    assert elapsed >= 0.3
    delays = [int(m) for m in re.findall(r"over its limit, delaying accept by (\d+) ms", caplog.text)]
    assert delays and 150 <= delays[0] <= 200, caplog.text  # 200 ms less the time the 5 took
    for s in socks:
        s.close()


def test_ip_connection_creation_rate_quota_closes_after_the_throttle(start, caplog):
    caplog.set_level(logging.INFO, logger="shoal.server.limits")
    tb = start(quota_window_num="2")
    tb.run(tb.broker.metadata.alter_client_quotas([((("ip", "127.0.0.1"),), {"connection_creation_rate": 2.0})]))
    # 3 in W = 1 s: (3 - 2) / 2 * 1000 = 500 ms for c, then closed unanswered. The three connect
    # back to back (a and b are probed after), so what the throttle loses to the time between a's
    # accept and c's is a few ms even on a slow machine, not two request round trips.
    a, b, c = connect(tb.port()), connect(tb.port()), connect(tb.port())
    waited = wait_closed(c, 5)
    assert 0.35 <= waited <= 2.0, waited
    assert probe(a) == ANSWERED and probe(b) == ANSWERED
    assert stats(tb).ip_throttled == 1 and stats(tb).connections == 2
    m = re.search(r"127\.0\.0\.1 is over its connection creation rate of 2/s; closing the connection after (\d+) ms",
                  caplog.text)
    assert m and 450 <= int(m.group(1)) <= 500, caplog.text  # 500 ms less the time a and b took
    # the default ("ip", None) applies to addresses without their own quota; removing ours
    # leaves the default, here unlimited enough
    tb.run(tb.broker.metadata.alter_client_quotas([
        ((("ip", "127.0.0.1"),), {"connection_creation_rate": None}),
        ((("ip", None),), {"connection_creation_rate": 1000.0}),
    ]))
    d = connect(tb.port())
    assert probe(d) == ANSWERED
    for s in (a, b, c, d):
        s.close()


def test_listener_limit_and_inter_broker_listener_protection(start, caplog):
    caplog.set_level(logging.INFO, logger="shoal.server.limits")
    tb = start(
        listeners="INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        inter_broker_listener_name="INTERNAL",
        max_connections="2",
        **{"listener.name.external.max.connections": "5"},
    )
    ext = [connect(tb.port("EXTERNAL")) for _ in range(2)]
    assert [probe(s) for s in ext] == [ANSWERED, ANSWERED]
    blocked = connect(tb.port("EXTERNAL"))
    assert probe(blocked, timeout=0.3) == SILENT  # broker-wide limit: 2
    internal = connect(tb.port("INTERNAL"))  # always accepted; the oldest external one is closed
    assert probe(internal) == ANSWERED
    wait_closed(ext[0], 5)
    assert stats(tb, "EXTERNAL").closed_excess == 1
    assert "closing its oldest connection to stay within max.connections=2" in caplog.text
    internal.close()
    assert probe(blocked, 5, send=False) == ANSWERED
    for s in (*ext, blocked):
        s.close()


def test_bad_per_ip_config_is_a_startup_error(tmp_path):
    from shoal.config import ConfigError

    tb = ThreadBroker(tmp_path, {"max.connections.per.ip": "0"})
    with pytest.raises(ConfigError, match="can be set to zero only if"):
        tb.start()
    tb.stop()


def test_real_producers_under_a_connection_creation_rate(start):
    """librdkafka clients connecting in a storm are slowed down, never failed."""
    tb = start(max_connection_creation_rate="4", quota_window_num="2")
    producers = [Producer({"bootstrap.servers": tb.bootstrap, "linger.ms": 0}) for _ in range(6)]
    delivered: list[str] = []
    for i, p in enumerate(producers):
        p.produce("storm", f"m{i}".encode(), on_delivery=lambda err, msg: delivered.append(err or "ok"))
    for p in producers:
        assert p.flush(30) == 0
    assert delivered == ["ok"] * 6
    st = stats(tb)
    assert st.rate_throttled >= 1 and st.accepted >= 6


def test_failed_tls_handshake_frees_its_slot(start, tmp_path):
    """A connection counted at accept whose TLS handshake fails is released: with
    max.connections=1, a garbage client does not keep a real one out."""
    pki = make_pki(tmp_path / "pki")
    tb = start(listeners="SSL://127.0.0.1:0", listener_security_protocol_map="SSL:SSL",
               ssl_keystore_location=str(pki.server_pem), max_connections="1")
    with socket.create_connection(("127.0.0.1", tb.port()), timeout=5) as junk:
        junk.sendall(b"this is not a TLS client hello" * 10)
        junk.settimeout(5)
        with contextlib.suppress(OSError):
            while junk.recv(1024):  # an alert, perhaps, then the broker closes it
                pass
    deadline = time.monotonic() + 5
    while stats(tb, "SSL").connections and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stats(tb, "SSL").connections == 0
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    with socket.create_connection(("127.0.0.1", tb.port()), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        tls.sendall(codec.encode_request(18, 0, 1, "limits-test", codec.request_type(18, 0)()))
        assert len(tls.recv(4)) == 4
    assert stats(tb, "SSL").accepted == 2
