"""Log floods (issue 10, item 6): a null where the schema forbids one, against a real broker.

A non-nullable array (or string) sent as null (count -1) used to reach the handler as None; it
crashed with a TypeError and logged a full traceback per request (27 APIs here, 28 in the issue;
16.9 MB of log in 5 s from one client). Kafka fails to parse such a request and closes the connection
(``RequestContext.parseRequest`` -> InvalidRequestException -> ``SocketServer`` closes the
channel); Shoal now does the same from its structural guard, before any handler runs, with one
rate-limited log line per client address (``shoal.logutil``).

For every API key and version the broker serves (its own ApiVersions answer), every
non-nullable array, string and bytes field (nested ones too) is sent as null: each must close the
connection without an answer, the whole sweep may add only a few log lines and no traceback, and
a normal client keeps working throughout.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient

from null_requests import encode, frame, null_paths
from raw_client import recv_frame
from shoal.protocol import codec

pytestmark = pytest.mark.timeout(120)

SOCKET_TIMEOUT = 5.0


def _served(broker) -> list[tuple[int, int]]:
    """(api key, version) pairs from the broker's ApiVersions v0 answer."""
    with socket.create_connection((broker.host, broker.port), timeout=SOCKET_TIMEOUT) as s:
        s.sendall(codec.encode_request(18, 0, 1, "nulls", codec.request_type(18, 0)()))
        _, resp = codec.decode_response(18, 0, recv_frame(s))
    return [(k.api_key, v) for k in resp.api_keys for v in range(k.min_version, k.max_version + 1)]


def _outcome(broker, data: bytes) -> str:
    """"closed", or what came back instead."""
    with socket.create_connection((broker.host, broker.port), timeout=SOCKET_TIMEOUT) as s:
        s.sendall(data)
        try:
            head = s.recv(1)
        except ConnectionResetError:
            return "closed"
        except socket.timeout:
            return "no answer and not closed"
        if head == b"":
            return "closed"
        s.settimeout(SOCKET_TIMEOUT)
        rest = s.recv(65536)
        return f"answered ({len(head) + len(rest)} bytes)"


class _Probe:
    """A normal client asking for metadata over and over while the attack runs."""

    def __init__(self, bootstrap: str) -> None:
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
        self.ok = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.admin.list_topics(timeout=10)
                self.ok += 1
            except Exception as e:  # noqa: BLE001  (any failure is a finding)
                self.errors.append(repr(e))
            time.sleep(0.02)

    def __enter__(self) -> "_Probe":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(15)


def _new_log(broker, since: int) -> str:
    return broker.log_text()[since:]


def test_null_in_every_non_nullable_field_of_every_served_api(fresh_broker):
    b = fresh_broker
    cases = []
    for key, version in _served(b):
        cls = codec.request_type(key, version)
        for path in null_paths(cls):
            cases.append((key, version, path, frame(key, version, 7, "nulls", encode(cls, path), bool(cls.__flexible__))))
    assert len({c[0] for c in cases}) >= 28 and len(cases) > 400  # the sweep covers what it claims

    start = len(b.log_text())
    with _Probe(b.bootstrap) as probe:
        bad = [(k, v, p, out) for k, v, p, data in cases if (out := _outcome(b, data)) != "closed"]
    assert not bad, f"{len(bad)} of {len(cases)} not closed, e.g. {bad[:5]}"

    log = _new_log(b, start)
    lines = [l for l in log.splitlines() if l.strip()]
    assert "Traceback" not in log and "UNKNOWN_SERVER_ERROR" not in log, log[:3000]
    assert 1 <= len(lines) <= 5, lines[:20]  # one line (per 10 s per client address) says why
    assert "is null, which this version does not allow" in lines[0]
    assert probe.ok >= 3 and not probe.errors, (probe.ok, probe.errors[:3])


def test_one_client_repeating_a_null_request_for_five_seconds(fresh_broker):
    """The reported flood: the same null request as fast as one client can send it (before: a
    traceback per request on a connection that stayed open, 2.4 MB of log in 5 s)."""
    b = fresh_broker
    cls = codec.request_type(1, 7)  # Fetch v7 with topics null: a TypeError in the handler before
    data = frame(1, 7, 1, "flood", encode(cls, "topics"), False)
    start = len(b.log_text())
    sent = 0
    with _Probe(b.bootstrap) as probe:
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            assert _outcome(b, data) == "closed"
            sent += 1
    grown = len(b.log_text()) - start
    print(f"\n{sent} null Metadata requests in 5 s: broker log grew by {grown} bytes")
    assert sent >= 50
    assert grown < 2000, _new_log(b, start)[:3000]
    assert probe.ok >= 3 and not probe.errors, (probe.ok, probe.errors[:3])


def _answer(broker, data: bytes) -> bytes | str:
    """The response frame, or "closed"."""
    with socket.create_connection((broker.host, broker.port), timeout=SOCKET_TIMEOUT) as s:
        s.sendall(data)
        try:
            return recv_frame(s)
        except (EOFError, ConnectionResetError):
            return "closed"


def test_null_in_every_nullable_field_of_every_served_api(fresh_broker):
    """Issue 24, item 13: Metadata v10/v11 with a null topic name (allowed there) logged an ERROR
    with a traceback: the handler echoed the null into the response's name, which only v12+ may
    hold. Kafka answers such a request (its error response puts "" for a null name). Every
    nullable string, bytes and array of every served request, sent as null: each is answered (or
    the connection closed), with no traceback and no ERROR line, and Metadata v10/v11 answers
    INVALID_REQUEST for its null-named topic."""
    b = fresh_broker
    cases = []
    for key, version in _served(b):
        cls = codec.request_type(key, version)
        for path in null_paths(cls, allowed=True):
            cases.append((key, version, path, frame(key, version, 7, "nulls", encode(cls, path), bool(cls.__flexible__))))
    assert len({c[0] for c in cases}) >= 25 and len(cases) > 150  # the sweep covers what it claims

    start = len(b.log_text())
    with _Probe(b.bootstrap) as probe:
        answers = {(k, v, p): _answer(b, data) for k, v, p, data in cases}
    log = _new_log(b, start)
    assert "Traceback" not in log and " ERROR " not in log, log[:3000]
    lines = [l for l in log.splitlines() if l.strip()]
    assert len(lines) <= len(cases), log[:3000]  # one line per request at most
    assert len([l for l in lines if " WARNING " in l]) <= 5, log[:3000]  # rate-limited per client
    for version in (10, 11):
        raw = answers[(3, version, "topics.name")]
        assert raw != "closed"
        _, md = codec.decode_response(3, version, raw)
        assert [(t.name, t.error_code) for t in md.topics] == [("", 42)], md.topics  # INVALID_REQUEST
    assert probe.ok >= 3 and not probe.errors, (probe.ok, probe.errors[:3])
