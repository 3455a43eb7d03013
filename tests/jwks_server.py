"""A JWKS endpoint for the OAuth tests (imported as ``jwks_server``; tests/ is on sys.path): a
threaded HTTP server on 127.0.0.1 answering every GET with one JSON document, over TLS when given
a server context; it counts its hits."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JwksServer:
    def __init__(self, body: bytes, tls: ssl.SSLContext | None = None, host: str = "127.0.0.1") -> None:
        self.hits = 0
        server_self = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                server_self.hits += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"{'https' if tls else 'http'}://{host}:{self.port}/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
