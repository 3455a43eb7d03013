"""A bare socket speaking Shoal's codec, for exact error codes, exact versions and closes.
Imported as ``raw_client`` (tests/ is on sys.path)::

    with RawClient("127.0.0.1:9092", client_id="c1") as r:
        resp = r.call(19, 7, {"topics": (...), "timeout_ms": 1000, "validate_only": False})
"""

from __future__ import annotations

import socket
import struct

from shoal.protocol import codec


class RawClient:
    def __init__(self, address: str, client_id: str = "raw-client", timeout: float = 5.0) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
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
        size = struct.unpack(">i", self._exactly(4))[0]
        return codec.decode_response(key, version, self._exactly(size))[1]

    def call(self, key: int, version: int, fields: dict):
        self.send(key, version, fields)
        return self.recv(key, version)

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("closed")
            buf += chunk
        return buf
