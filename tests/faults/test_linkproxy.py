"""LinkProxy with real sockets: an echo/sink server in a thread, a link to it, blocking clients.
Bounds are lower bounds that physics guarantees (a delay or a rate cannot be beaten) and upper
bounds with wide margins for a loaded 2-core machine."""

from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest

from faults.linkproxy import LinkProxy


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        srv = self.server
        while True:
            try:
                data = self.request.recv(65536)
            except OSError:
                return
            if not data:
                return
            with srv.lock:  # type: ignore[attr-defined]
                srv.received += len(data)  # type: ignore[attr-defined]
            if srv.echo:  # type: ignore[attr-defined]
                self.request.sendall(data)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, echo: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.echo, self.received, self.lock = echo, 0, threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def addr(self) -> tuple[str, int]:
        return self.server_address[0], self.server_address[1]


@pytest.fixture
def echo():
    s = _Server(echo=True)
    yield s
    s.shutdown()
    s.server_close()


@pytest.fixture
def proxy():
    p = LinkProxy(seed=1)
    yield p
    p.close()


def _connect(port: int, timeout: float = 5.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _roundtrip(s: socket.socket, payload: bytes = b"ping") -> float:
    t0 = time.monotonic()
    s.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = s.recv(65536)
        assert chunk, "closed"
        got += chunk
    assert got == payload
    return time.monotonic() - t0


def test_plain_link_forwards_both_ways(proxy, echo):
    port = proxy.add("a->b", echo.addr)
    with _connect(port) as s:
        assert _roundtrip(s, b"x" * 300_000) < 10
    st = proxy.stats("a->b")
    assert st["up_bytes"] == st["down_bytes"] == 300_000 and st["connected"] == 1


def test_delay_per_direction_is_measured(proxy, echo):
    port = proxy.add("a->b", echo.addr)
    with _connect(port) as s:
        base = min(_roundtrip(s) for _ in range(5))
        proxy.delay("a->b", 150, direction="up")
        up_only = min(_roundtrip(s) for _ in range(3))
        proxy.delay("a->b", 100, jitter_ms=50, direction="down")
        both = [_roundtrip(s) for _ in range(5)]
        proxy.delay("a->b", 0)
        after = min(_roundtrip(s) for _ in range(5))
    assert base < 0.1
    assert 0.15 <= up_only < 0.15 + 1.0
    assert all(0.25 <= rtt < 0.30 + 1.0 for rtt in both), both
    assert after < 0.15


def test_bandwidth_token_bucket_is_measured(proxy):
    sink = _Server(echo=False)
    try:
        port = proxy.add("a->b", sink.addr)
        rate, size = 200_000, 500_000
        proxy.bandwidth("a->b", rate, direction="up")
        with _connect(port) as s:
            t0 = time.monotonic()
            s.sendall(b"y" * size)
            deadline = t0 + 30
            while sink.received < size and time.monotonic() < deadline:
                time.sleep(0.01)
            elapsed = time.monotonic() - t0
        assert sink.received == size
        # at most one burst (16 KiB) ahead of the rate; slower only by the machine's load
        assert (size - 16384) / rate <= elapsed < size / rate * 3, elapsed
    finally:
        sink.shutdown()
        sink.server_close()


def test_stall_cut_stops_bytes_both_ways_and_heal_resumes(proxy, echo):
    port = proxy.add("a->b", echo.addr)
    with _connect(port) as s:
        _roundtrip(s)
        before = echo.received
        proxy.cut("a->b", mode="stall", new="refuse")
        s.sendall(b"during-cut")
        s.settimeout(1.0)
        with pytest.raises(socket.timeout):
            s.recv(100)
        assert echo.received == before  # nothing reached the server
        with pytest.raises(ConnectionRefusedError):
            _connect(port).close()
        proxy.heal("a->b")
        s.settimeout(10)
        got = b""
        while len(got) < len(b"during-cut"):
            got += s.recv(100)
        assert got == b"during-cut"  # the same connection carries on
    with _connect(port) as s2:  # and new ones are accepted again
        _roundtrip(s2)


def test_one_way_stall_cuts_only_that_direction(proxy, echo):
    port = proxy.add("a->b", echo.addr)
    with _connect(port) as s:
        _roundtrip(s)
        proxy.cut("a->b", mode="stall", direction="down")
        s.sendall(b"up-only")
        deadline = time.monotonic() + 10
        while echo.received < 4 + 7 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert echo.received == 4 + 7  # up still flows
        s.settimeout(1.0)
        with pytest.raises(socket.timeout):
            s.recv(100)  # the echo is held
        proxy.heal("a->b")
        s.settimeout(10)
        assert s.recv(100) == b"up-only"


def test_reset_cut_aborts_connections_and_hang_holds_new_ones(proxy, echo):
    port = proxy.add("a->b", echo.addr)
    with _connect(port) as s:
        _roundtrip(s)
        proxy.cut("a->b", mode="reset", new="hang")
        s.settimeout(5)
        with pytest.raises((ConnectionResetError, BrokenPipeError, AssertionError)):
            _roundtrip(s)  # RST, or EOF ("closed")
    s2 = _connect(port)  # accepted (hang), but nothing passes
    try:
        s2.sendall(b"held")
        s2.settimeout(1.0)
        with pytest.raises(socket.timeout):
            s2.recv(100)
        proxy.heal("a->b")
        s2.settimeout(10)
        assert s2.recv(100) == b"held"  # connected to the server at heal, bytes delivered
    finally:
        s2.close()
    assert proxy.stats("a->b")["accepted"] == 2


def test_links_are_independent(proxy, echo):
    pa, pb = proxy.add("a->s", echo.addr), proxy.add("b->s", echo.addr)
    proxy.cut("a->s", mode="reset", new="refuse")
    with pytest.raises(ConnectionRefusedError):
        _connect(pa).close()
    with _connect(pb) as s:
        _roundtrip(s)
    assert proxy.is_cut("a->s") and not proxy.is_cut("b->s")
    proxy.heal_all()
    with _connect(pa) as s:
        _roundtrip(s)


def test_chop_cuts_each_new_connection_within_its_budget_up_to_max_cuts(proxy, echo):
    """``chop``: a connection is closed once a direction carried its random budget (the bytes up
    to it forwarded, so a message arrives cut), at most ``max_cuts`` times; then links forward."""
    port = proxy.add("a->b", echo.addr)
    proxy.chop("a->b", up=None, down=1000, max_cuts=2)
    payload = b"x" * 2000  # longer than any budget: every echo is cut short
    for _ in range(2):
        with _connect(port) as s:
            s.sendall(payload)
            got = b""
            while chunk := s.recv(65536):
                got += chunk
            assert 1 <= len(got) <= 1000 and got == payload[:len(got)]  # then EOF: closed
    assert proxy.stats("a->b")["chopped"] == 2
    with _connect(port) as s:  # the allowance is spent: whole round trips again
        _roundtrip(s, payload)
    proxy.chop("a->b", up=10, max_cuts=5)
    proxy.chop("a->b")  # stopped before any connection
    with _connect(port) as s:
        _roundtrip(s, payload)
    assert proxy.stats("a->b")["chopped"] == 2
