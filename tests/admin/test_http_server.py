"""The HTTP admin API's server on aiohttp (issue 30), in process over a real embedded store and
real loopback sockets: keep-alive, the generated OpenAPI document against the routes, the error
answers of malformed and oversized requests (the server serving on after each), a handler's
crash, a mounted sub-application and a clean stop."""

from __future__ import annotations

import asyncio
import json
import logging
import warnings

import pytest
from aiohttp import web

from shoal.admin.http import MAX_BODY_BYTES, AdminHttpServer
from shoal.admin.http_routes import signature
from shoal.config import BrokerConfig
from shoal.metadata.embedded import EmbeddedMetadataStore


@pytest.fixture
async def served(tmp_path):
    store = EmbeddedMetadataStore(tmp_path, node_id=1)
    await store.start()
    server = AdminHttpServer(store, "127.0.0.1", 0, broker_config=lambda: BrokerConfig.load(None, {}))
    ui = web.Application()

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="console page")

    ui.router.add_get("/page", page)
    server.mount("/ui", ui)
    await server.start()
    yield server, store
    await server.stop()
    await store.close()


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[int, dict, bytes]:
    """Send one request on an open connection and read its response: (status, headers, body)."""
    writer.write(request)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    body = await asyncio.wait_for(reader.readexactly(int(headers.get("content-length", "0"))), 10)
    return status, headers, body


def req(method: str, path: str, body: bytes | None = None, extra: str = "") -> bytes:
    length = f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\n" if body is not None else ""
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n{length}{extra}\r\n".encode() + (body or b"")


async def test_keep_alive_serves_requests_one_after_another_on_a_connection(served):
    server, _store = served
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        status, headers, body = await exchange(reader, writer, req("POST", "/v1/tenants", b'{"display_name": "K"}'))
        assert status == 201 and headers.get("connection", "").lower() != "close", headers
        assert headers["server"] == "Shoal"  # no versions
        tid = json.loads(body)["tenant_id"]
        status, _headers, body = await exchange(reader, writer, req("GET", f"/v1/tenants/{tid}"))
        assert status == 200 and json.loads(body)["display_name"] == "K"
        # an error answer keeps the connection too
        status, _headers, body = await exchange(reader, writer, req("GET", "/v1/tenants/lkc-zzzzzz"))
        assert status == 404 and json.loads(body)["error"] == "not_found"
        status, _headers, body = await exchange(reader, writer, req("GET", "/v1/tenants"))
        assert status == 200 and [t["tenant_id"] for t in json.loads(body)["tenants"]] == [tid]
    finally:
        writer.close()


async def test_the_generated_openapi_lists_every_route_with_its_schemas(served):
    server, _store = served
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    status, _headers, body = await exchange(reader, writer, req("GET", "/openapi.json"))
    writer.close()
    assert status == 200
    doc = json.loads(body)
    schemas = doc["components"]["schemas"]
    routes = {(r.method, r.resource.canonical) for r in server.app.router.routes()
              if r.resource is not None and r.resource.canonical != "/openapi.json"
              and not r.resource.canonical.startswith("/ui/")}
    assert routes == {(ep.method, ep.path) for ep, _ in server.endpoints} and len(routes) >= 30

    def schema_of(content: dict) -> dict:
        return schemas[content["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]]

    for ep, _owner in server.endpoints:
        op = doc["paths"][ep.path][ep.method.lower()]
        sig = signature(ep.fn)
        answer = schema_of(op["responses"][str(ep.status)]["content"])
        assert set(sig.response.model_json_schema(by_alias=True)["properties"]) == set(answer["properties"]), ep.op
        if sig.body is None:
            assert "requestBody" not in op, ep.op
        else:
            assert set(sig.body.model_json_schema()["properties"]) == set(schema_of(op["requestBody"]["content"])["properties"])
        for code in ep.errors:
            assert schema_of(op["responses"][str(code)]["content"])["required"] == ["error", "message"]
        assert [p["name"] for p in op.get("parameters", []) if p["in"] == "path"] == list(sig.params), ep.op
    assert doc["paths"]["/v1/tenants/{tenant_id}/users"]["post"]["requestBody"]
    assert schemas["UserCreate"]["properties"]["mechanism"]["enum"] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert schemas["UserCreate"]["properties"]["mechanism"]["nullable"] is True  # OpenAPI 3.0, not anyOf null
    assert not any("anyOf" in json.dumps(s) and '"null"' in json.dumps(s) for s in schemas.values())
    query = doc["paths"]["/v1/tenants/{tenant_id}/namespaces"]["get"]["parameters"]
    assert {(p["name"], p["in"], p["schema"]["type"]) for p in query} == {
        ("tenant_id", "path", "string"), ("parent", "query", "string"), ("recursive", "query", "boolean")}


async def test_malformed_requests_get_400_and_the_server_keeps_serving(served, caplog):
    server, _store = served
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    for raw, code in ((b"{not json", "bad_request"), (b"[1]", "bad_request"), (b'{"display_name": 7}', "bad_request")):
        status, _headers, body = await exchange(reader, writer, req("POST", "/v1/tenants", raw))
        assert (status, json.loads(body)["error"]) == (400, code), body
    status, _headers, body = await exchange(reader, writer, req("POST", "/v1/tenants/lkc-zzzzzz/users",
                                                                b'{"user": "u", "password": "p", "admin": "yes"}'))
    assert status == 400 and json.loads(body) == {"error": "bad_request",
                                                  "message": "'admin': input should be a valid boolean"}
    status, headers, body = await exchange(reader, writer, req("PUT", "/v1/tenants"))
    assert status == 405 and headers["allow"] == "GET,POST" and json.loads(body) == {
        "error": "method_not_allowed", "message": "PUT not allowed here (allowed: GET, POST)"}
    status, _headers, body = await exchange(reader, writer, req("GET", "/v2/nothing"))
    assert status == 404 and json.loads(body) == {"error": "not_found", "message": "no such path: /v2/nothing"}
    status, _headers, _body = await exchange(reader, writer, req("GET", "/v1/tenants"))
    assert status == 200  # the same connection, still served
    writer.close()
    # a broken request line or Content-Length: 400 from the HTTP parser (HTTP/1.0 when it could not
    # read the version), the connection closed, one warning line and no traceback
    caplog.set_level(logging.INFO, logger="shoal.admin.http")
    for junk in (b"GET\r\n\r\n", b"POST /v1/tenants HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                 b"POST /v1/tenants HTTP/1.1\r\nContent-Length: x\r\n\r\n"):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(junk)
        reply = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert reply.startswith((b"HTTP/1.1 400 ", b"HTTP/1.0 400 ")), (junk, reply[:80])
    lines = [r for r in caplog.records if r.name == "shoal.admin.http"]
    assert lines and all(r.levelno == logging.WARNING and r.exc_info is None for r in lines), lines
    assert "from 127.0.0.1: Invalid character in Content-Length" in caplog.text and "Traceback" not in caplog.text
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    assert (await exchange(reader, writer, req("GET", "/v1/tenants")))[0] == 200
    writer.close()


async def test_oversized_bodies_and_headers_get_413_before_the_body_is_read(served):
    server, _store = served
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    # only the headers are sent: the 413 comes from Content-Length alone
    writer.write(f"POST /v1/tenants HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode())
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 413 ")
    writer.close()
    # a chunked body (no Content-Length) is cut off at the limit as it is read
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    chunk = b"x" * 16384
    writer.write(b"POST /v1/tenants HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + (b"%x\r\n%s\r\n" % (len(chunk), chunk)) * 5 + b"0\r\n\r\n")
    status, _headers, body = await exchange(reader, writer, b"")
    assert status == 413 and json.loads(body)["error"] == "payload_too_large"
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    big = "".join(f"X-Pad-{i}: {'v' * 1000}\r\n" for i in range(20))
    status, _headers, body = await exchange(reader, writer, req("GET", "/v1/tenants", extra=big))
    assert status == 413 and json.loads(body) == {"error": "payload_too_large", "message": "request headers too large"}
    status, _headers, _body = await exchange(reader, writer, req("POST", "/v1/tenants", b'{"display_name": "ok"}'))
    assert status == 201
    writer.close()


async def test_a_handler_crash_is_a_500_and_one_log_line(served, caplog):
    server, _store = served
    server.store = None  # every tenant route now fails inside its handler
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    with caplog.at_level(logging.ERROR, logger="shoal.admin.http"):
        status, _headers, body = await exchange(reader, writer, req("GET", "/v1/tenants"))
    assert status == 500 and json.loads(body) == {"error": "internal_error", "message": "internal error"}
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "HTTP admin request GET /v1/tenants failed"]
    assert (await exchange(reader, writer, req("GET", "/openapi.json")))[0] == 200
    writer.close()


async def test_a_mounted_application_answers_its_own_paths(served):
    server, _store = served
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    status, _headers, body = await exchange(reader, writer, req("GET", "/ui/page"))
    assert (status, body) == (200, b"console page")
    status, headers, body = await exchange(reader, writer, req("GET", "/ui/none"))
    assert status == 404 and not headers["content-type"].startswith("application/json")  # its own 404
    writer.close()
    with pytest.raises(RuntimeError):
        server.mount("/late", web.Application())


async def test_stop_closes_idle_keep_alive_connections_without_warnings(tmp_path):
    store = EmbeddedMetadataStore(tmp_path, node_id=1)
    await store.start()
    server = AdminHttpServer(store, "127.0.0.1", 0)
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    assert (await exchange(reader, writer, req("GET", "/v1/tenants")))[0] == 200
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await server.stop()
        assert loop.time() - t0 < 1.5
        assert await asyncio.wait_for(reader.read(), 5) == b""  # the idle connection was closed
        writer.close()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", server.port)
    assert [str(w.message) for w in caught] == []
    await server.stop()  # twice: nothing
    await store.close()


async def test_basic_authentication_remembers_a_checked_password_across_keep_alive_requests(tmp_path):
    """A correct password is checked with PBKDF2 once, then remembered for a minute under the
    user and the password's hash; a wrong one is never remembered."""
    from shoal.auth.scram import make_credential

    store = EmbeddedMetadataStore(tmp_path, node_id=1)
    await store.start()
    c = make_credential("SCRAM-SHA-512", "admin-secret")
    await store.set_scram_credential("admin", c.mechanism, c.salt, c.stored_key, c.server_key, c.iterations)
    config = BrokerConfig.load(None, {"shoal.admin.authentication": "basic", "super.users": "User:admin"})
    server = AdminHttpServer(store, "127.0.0.1", 0, broker_config=lambda: config)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        good = "Authorization: Basic YWRtaW46YWRtaW4tc2VjcmV0\r\n"  # admin:admin-secret
        bad = "Authorization: Basic YWRtaW46bm9wZQ==\r\n"  # admin:nope
        assert (await exchange(reader, writer, req("GET", "/v1/tenants")))[0] == 401
        status, _headers, body = await exchange(reader, writer, req("GET", "/v1/tenants", extra=bad))
        assert status == 401 and json.loads(body)["error"] == "unauthorized"
        assert server.auth._verified == {}
        for _ in range(2):
            assert (await exchange(reader, writer, req("GET", "/v1/tenants", extra=good)))[0] == 200
        assert [user for user, _digest in server.auth._verified] == ["admin"]
        writer.close()
    finally:
        await server.stop()
        await store.close()


async def test_a_request_head_sent_too_slowly_is_cut_off(tmp_path, monkeypatch):
    """A client that trickles its headers (a slow-loris) is disconnected once the keep-alive
    time has passed since the connection opened (here 0.5 s instead of 30)."""
    import shoal.admin.http as admin_http

    monkeypatch.setattr(admin_http, "KEEPALIVE_S", 0.5)
    server = AdminHttpServer(None, "127.0.0.1", 0)  # type: ignore[arg-type]
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(ConnectionError):
            for _ in range(50):
                await asyncio.sleep(0.1)
                writer.write(b"X-Slow: 1\r\n")
                await writer.drain()
            await asyncio.wait_for(reader.read(), 5)
            raise ConnectionResetError("closed without an answer")  # (read returned: closed)
        assert loop.time() - t0 < 4
        writer.close()
    finally:
        await server.stop()
