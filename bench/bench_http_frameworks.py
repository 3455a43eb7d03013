#!/usr/bin/env python3
"""Which HTTP framework for the admin API (issue 30): latency, throughput and memory of the same
two JSON endpoints served by each candidate inside an asyncio loop the server already runs (as the
broker's), on uvloop as `shoal serve` installs it.

Servers (each in its own process, started by this script):
  aiohttp     aiohttp.web.Application served by web.AppRunner + web.TCPSite on the running loop
  starlette   Starlette on uvicorn, ``uvicorn.Server(config).serve()`` awaited on the running loop
  streams     the hand-written server the admin API had before (asyncio.start_server, a request
              line and header parser, ``Connection: close``), reduced to these two endpoints
  shoal       shoal.admin.http.AdminHttpServer itself over a stand-in store holding the same 50
              tenants (whatever the tree's admin API is: after issue 30, aiohttp)

Endpoints: ``GET /v1/tenants`` (50 tenants, ~7 KiB of JSON) and ``POST /v1/tenants`` with a JSON
body (201 and the new tenant; nothing is stored). The client is this script's process (not the
server's): http.client, one request at a time, N requests on one keep-alive connection and, for
every server, N with a new connection per request (the only way the streams server serves).
Memory: the server's VmRSS (/proc/PID/status) when it is up and idle, and its growth over the run
(after 200 warm-up requests, to the end).

``--brokers before=CHECKOUT,after=.`` adds whole brokers (``shoal serve`` of each checkout with
``shoal.admin.listener``, 50 tenants created first): the same GETs, POSTs the API refuses (400, so
the store does not grow during the run), and the broker process's RSS.

Run:  python bench/bench_http_frameworks.py [-n 3000] [--rounds 3] [--servers aiohttp,starlette,streams,shoal]
                                            [--brokers before=/tmp/shoal-main,after=.]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

N_TENANTS = 50


def tenants() -> list[dict[str, Any]]:
    return [{"tenant_id": f"lkc-{i:06d}", "display_name": f"Tenant number {i}", "created_ms": 1_700_000_000_000 + i,
             "users": [f"user{i}a", f"user{i}b"], "admins": [f"user{i}a"]} for i in range(N_TENANTS)]


def created(body: Any) -> tuple[int, dict[str, Any]]:
    if not isinstance(body, dict) or not isinstance(body.get("display_name"), str):
        return 400, {"error": "bad_request", "message": "'display_name' must be a string"}
    return 201, {"tenant_id": "lkc-zzzzzz", "display_name": body["display_name"], "created_ms": 1, "users": [],
                 "admins": []}


def dumps(payload: Any) -> bytes:
    return json.dumps(payload, indent=1).encode() + b"\n"  # as the admin API writes its bodies


# -- servers ----------------------------------------------------------------------------------


async def serve_aiohttp(ready: Callable[[int], None]) -> None:
    from aiohttp import web

    listing = {"tenants": tenants()}

    async def get(request: web.Request) -> web.Response:
        return web.Response(body=dumps(listing), content_type="application/json")

    async def post(request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read())
        except ValueError:
            body = None
        status, payload = created(body)
        return web.Response(status=status, body=dumps(payload), content_type="application/json")

    app = web.Application(client_max_size=64 * 1024)
    app.router.add_get("/v1/tenants", get)
    app.router.add_post("/v1/tenants", post)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    ready(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


async def serve_starlette(ready: Callable[[int], None]) -> None:
    import socket

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    listing = {"tenants": tenants()}

    async def get(request: Request) -> Response:
        return Response(dumps(listing), media_type="application/json")

    async def post(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        status, payload = created(body)
        return Response(dumps(payload), status_code=status, media_type="application/json")

    app = Starlette(routes=[Route("/v1/tenants", get, methods=["GET"]), Route("/v1/tenants", post, methods=["POST"])])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    ready(sock.getsockname()[1])
    await task


async def serve_streams(ready: Callable[[int], None]) -> None:
    """The pre-issue-30 admin API's connection handling (shoal/admin/http.py before aiohttp)."""
    listing = {"tenants": tenants()}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            lines = head.decode("latin-1").split("\r\n")
            method, target, _version = lines[0].split(" ")
            headers = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            raw = await reader.readexactly(length) if length else b""
            if method == "GET":
                status, payload = 200, listing
            else:
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                status, payload = created(body)
            body_bytes = dumps(payload)
            writer.write((f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body_bytes)}\r\nConnection: close\r\n\r\n").encode() + body_bytes)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            pass
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except ConnectionError:
                pass

    server = await asyncio.start_server(handle, "127.0.0.1", 0, reuse_address=True)
    ready(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


async def serve_shoal(ready: Callable[[int], None]) -> None:
    """The tree's AdminHttpServer over a stand-in store: the same 50 tenants, creation answered
    without storing anything."""
    from types import SimpleNamespace

    from shoal.admin.http import AdminHttpServer
    from shoal.metadata import TenantInfo

    infos = {t["tenant_id"]: TenantInfo(t["tenant_id"], t["display_name"], t["created_ms"]) for t in tenants()}
    image = SimpleNamespace(tenants=infos, user_tenants={u: t["tenant_id"] for t in tenants() for u in t["users"]},
                            tenant_admins=frozenset(a for t in tenants() for a in t["admins"]))

    class Store:
        def __init__(self) -> None:
            self.image = image

        async def create_tenant(self, name: str) -> TenantInfo:
            return TenantInfo("lkc-zzzzzz", name, 1)

    server = AdminHttpServer(Store(), "127.0.0.1", 0)  # type: ignore[arg-type]
    await server.start()
    ready(server.port)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


SERVERS = {"aiohttp": serve_aiohttp, "starlette": serve_starlette, "streams": serve_streams, "shoal": serve_shoal}


def run_server(name: str) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    def ready(port: int) -> None:
        print(port, flush=True)

    asyncio.run(SERVERS[name](ready))


# -- client -----------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def requests(port: int, n: int, keep_alive: bool, post: bytes = b'{"display_name": "bench tenant"}',
             post_status: int = 201) -> list[float]:
    """Latencies (s) of n requests, GET and POST alternating 3:1."""
    hdrs = {"Content-Type": "application/json"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    out = []
    for i in range(n):
        if not keep_alive:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        t0 = time.perf_counter()
        if i % 4 == 3:
            conn.request("POST", "/v1/tenants", body=post, headers=hdrs)
            want = post_status
        else:
            conn.request("GET", "/v1/tenants")
            want = 200
        resp = conn.getresponse()
        data = resp.read()
        out.append(time.perf_counter() - t0)
        assert resp.status == want and data, (resp.status, data[:200])
        if keep_alive and resp.will_close:  # http.client would quietly reconnect: not keep-alive
            raise ConnectionError("the server closes the connection after each response")
        if not keep_alive:
            conn.close()
    conn.close()
    return out


def spawn_server(name: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, __file__, "--serve", name], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def spawn_broker(tree: str, workdir: str) -> tuple[subprocess.Popen[str], int]:
    """``shoal serve`` of the checkout ``tree`` with the admin API, holding N_TENANTS tenants."""
    import socket

    def free() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    kafka, admin = free(), free()
    env = dict(os.environ, PYTHONPATH=tree)
    proc = subprocess.Popen([sys.executable, "-m", "shoal", "serve", "--listeners", f"PLAINTEXT://127.0.0.1:{kafka}",
                             "--log-dirs", workdir, "--override", f"shoal.admin.listener=http://127.0.0.1:{admin}"],
                            cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", admin, timeout=5)
            conn.request("GET", "/v1/tenants")
            conn.getresponse().read()
            break
        except (ConnectionError, OSError):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"the broker of {tree} did not start")
            time.sleep(0.2)
    for i in range(N_TENANTS):
        conn = http.client.HTTPConnection("127.0.0.1", admin, timeout=10)
        conn.request("POST", "/v1/tenants", body=json.dumps({"display_name": f"Tenant {i}"}).encode(),
                     headers={"Content-Type": "application/json"})
        assert conn.getresponse().status == 201
        conn.close()
    time.sleep(1)  # the broker's own start-up work settles
    return proc, admin


def measure(name: str, n: int, keep_alive: bool, tree: str | None = None) -> dict[str, Any] | None:
    """One run; ``tree``: a whole broker of that checkout, its POSTs refused (400) so that nothing
    is stored during the run."""
    import tempfile

    post: dict[str, Any] = {} if tree is None else {"post": b'{"display_name": 7}', "post_status": 400}
    tmp = tempfile.TemporaryDirectory(prefix="bench-http-")
    proc, port = spawn_server(name) if tree is None else spawn_broker(tree, tmp.name)
    try:
        idle = rss_kib(proc.pid)
        try:
            requests(port, 200, keep_alive, **post)
        except (AssertionError, http.client.HTTPException, ConnectionError) as e:
            if keep_alive:
                return None  # this server closes every connection
            raise SystemExit(f"{name}: {e}")
        before = rss_kib(proc.pid)
        t0 = time.perf_counter()
        try:
            lat = requests(port, n, keep_alive, **post)
        except (http.client.HTTPException, ConnectionError):
            return None
        wall = time.perf_counter() - t0
        after = rss_kib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
        tmp.cleanup()
    lat.sort()
    return {"server": name, "keep_alive": keep_alive, "n": n, "p50_ms": lat[len(lat) // 2] * 1e3,
            "p99_ms": lat[int(len(lat) * 0.99)] * 1e3, "rps": n / wall, "idle_rss_kib": idle,
            "rss_growth_kib": after - before}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=3000, help="requests per run (GET:POST 3:1)")
    ap.add_argument("--servers", default="aiohttp,starlette,streams,shoal")
    ap.add_argument("--rounds", type=int, default=1, help="runs per server and mode (the median is shown)")
    ap.add_argument("--brokers", default="",
                    help="NAME=CHECKOUT,...: also whole `shoal serve` brokers of these checkouts (e.g. before=/tmp/"
                         "shoal-main,after=.), their admin API's GETs and refused POSTs, and the broker's RSS")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        run_server(args.serve)
        return
    rows = []
    brokers = dict(b.split("=", 1) for b in args.brokers.split(",") if b)
    targets: list[tuple[str, str | None]] = [(s, None) for s in args.servers.split(",") if s]
    targets += [(f"broker:{k}", os.path.abspath(v)) for k, v in brokers.items()]
    for keep_alive in (True, False):
        for name, tree in targets:
            runs = [r for r in (measure(name, args.n, keep_alive, tree) for _ in range(args.rounds)) if r is not None]
            if not runs:
                continue
            row = dict(runs[0])
            for k in ("p50_ms", "p99_ms", "rps", "idle_rss_kib", "rss_growth_kib"):
                row[k] = statistics.median(r[k] for r in runs)
            rows.append(row)
    base = {r["keep_alive"]: r for r in rows if r["server"] == "aiohttp"}
    print(f"{'server':14} {'conn':10} {'p50 ms':>7} {'p99 ms':>7} {'req/s':>7} {'idle RSS':>9} {'RSS +':>7}"
          f"   vs aiohttp (p50, p99, req/s)")
    for r in rows:
        b = base.get(r["keep_alive"])
        ratio = (f"{r['p50_ms'] / b['p50_ms']:.2f}x {r['p99_ms'] / b['p99_ms']:.2f}x {r['rps'] / b['rps']:.2f}x"
                 if b else "")
        print(f"{r['server']:14} {'keep-alive' if r['keep_alive'] else 'per-req':10} {r['p50_ms']:7.2f} "
              f"{r['p99_ms']:7.2f} {r['rps']:7.0f} {r['idle_rss_kib'] / 1024:7.1f}Mi {r['rss_growth_kib']:6d}K   {ratio}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
