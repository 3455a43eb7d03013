"""A bare socket speaking Shoal's codec, for exact error codes, exact versions and closes.
Imported as ``raw_client`` (tests/ is on sys.path)::

    with RawClient("127.0.0.1:9092", client_id="c1") as r:
        resp = r.call(19, 7, {"topics": (...), "timeout_ms": 1000, "validate_only": False})
"""

from __future__ import annotations

import socket
import struct

from shoal.protocol import codec


def recv_exactly(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_frame(s: socket.socket) -> bytes:
    """One size-prefixed frame (its payload)."""
    (size,) = struct.unpack(">i", recv_exactly(s, 4))
    return recv_exactly(s, size)


class RawClient:
    def __init__(self, address: str, client_id: str = "raw-client", timeout: float = 5.0,
                 source: str | None = None) -> None:
        """``source``: the local address to connect from (another loopback address, 127.0.0.2,
        makes a second client host)."""
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.client_id = client_id
        self.cid = 0

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, key: int, version: int, fields: dict) -> int:
        self.cid += 1
        body = codec.request_type(key, version)(**fields)
        self.sock.sendall(codec.encode_request(key, version, self.cid, self.client_id, body))
        return self.cid

    def recv(self, key: int, version: int):
        return codec.decode_response(key, version, recv_frame(self.sock))[1]

    def call(self, key: int, version: int, fields: dict):
        self.send(key, version, fields)
        return self.recv(key, version)

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
