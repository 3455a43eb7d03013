#!/usr/bin/env python3
"""Tenancy benchmark (issue 4): throughput with 1 tenant against 1,000 tenants on one broker, and
SASL authentications per second.

Worlds: one Shoal broker each (``python -m shoal serve``), all running side by side, with a
SASL_PLAINTEXT listener for tenant clients, a PLAINTEXT operator listener and the HTTP admin API
(``shoal.admin.listener``). A world of N tenants is provisioned through the public interfaces:
``POST /v1/tenants`` and ``POST /v1/tenants/{id}/users`` (one SCRAM-SHA-256 user per tenant), then
one CreateTopics request per tenant over that tenant's own SASL connection (``t0``.. of
``--topics-per-tenant``, plus the load topics of the tenants that carry traffic). Every step is
timed: each of them is one metadata change (a journal record) per tenant, user or topic.

Phases
  throughput   C client processes (``--clients``, default 10), each a confluent-kafka Producer
               and Consumer of one tenant user on its own 1-partition topic ``load-<i>``. In the
               1-tenant world all C log in as the one tenant's user, on its C load topics; in
               the N-tenant world client i is the user of the i-th of C tenants sampled from
               the N. Every topic has one partition.
               The processes connect and authenticate first, then are released together:
               produce ``M/C`` messages each (``--messages`` total per size; acks=1, linger.ms=5),
               then, released again, read them back with ``assign()`` from the first offset they
               wrote. Throughput = all messages / (last process done - release). Cells are
               interleaved (rep 1: 100 B in world 1, in world N, 1 KiB in world 1, in world N;
               rep 2 the same with the worlds' order swapped ...); each cell's median over
               ``--reps``; ratio N-tenant / 1-tenant, of the medians and paired per rep.
  auth         P processes (``--auth-procs``) open connection after connection to the SASL
               listener for ``--auth-seconds``: SaslHandshake + SaslAuthenticate (PLAIN: one
               round; SCRAM: two), then close. The SCRAM client caches its SaltedPassword
               (RFC 5802 allows it), so a client handshake costs a few HMACs and the broker is
               the bottleneck; PLAIN costs the broker PBKDF2 (4,096 iterations) per login.
  inproc       server side only, no sockets: SaslSession handshake + authenticate steps for the
               same mechanisms, timed around the server calls (µs per authentication).

Broker CPU (user+sys of the broker process tree, /proc/<pid>/stat) is sampled around each window,
and so is the CPU of every other process on the machine: a window during which other work used
more than ``--max-foreign`` cores is measured again. Before each window the benchmark waits for
the page cache's dirty pages to be written back (``--max-dirty-mib``).

Run:  python bench/bench_tenants.py [--tenants 1,1000] [--quick] [--json out.json]
See bench/README.md and --help.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import multiprocessing as mp
import os
import queue
import random
import shlex
import signal
import socket
import statistics
import struct
import sys
import tempfile
import time
import types
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

import _util  # noqa: E402
from _util import (  # noqa: E402
    cpu_since,
    descendants,
    fmt_num,
    free_port,
    render_table,
    user_process_cpu,
    wait_writeback,
)
from bench_brokers import (  # noqa: E402
    CLIENT_LOG,
    LIVE_BROKERS,
    MB,
    BrokerProcess,
    PhaseTimeout,
    StatsBox,
    add_run_args,
    client_cpu,
    consume_conf,
    consume_n,
    csv_list,
    stop_and_clean,
    produce_conf,
    produce_n,
)

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from shoal.auth.sasl import SaslSession  # noqa: E402
from shoal.auth.scram import make_credential, salted_password  # noqa: E402
from shoal.client import AdminClient, ClientSecurity  # noqa: E402
from shoal.protocol import codec  # noqa: E402

ALL_PHASES = ("throughput", "auth", "inproc")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
LOAD_MECHANISM = "SCRAM-SHA-256"
PASSWORD = "bench-secret"
# users of the auth phase, in the measured tenant (tenant 0): PLAIN logs in as the SHA-256 one
AUTH_USERS = {"SCRAM-SHA-256": "auth-256", "SCRAM-SHA-512": "auth-512", "PLAIN": "auth-256"}
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
HANDSHAKE_V, AUTHENTICATE_V = 1, 2
_I32 = struct.Struct(">i")


# --------------------------------------------------------------------------
# a world: one broker with N tenants
# --------------------------------------------------------------------------

@dataclass
class Tenant:
    tenant_id: str
    user: str
    topics: list[str] = field(default_factory=list)


@dataclass
class World:
    n_tenants: int
    broker: BrokerProcess
    sasl_port: int
    admin_url: str
    tenants: list[Tenant]
    load: list[Tenant]  # the tenant of each client process (throughput phase)
    provisioning: dict
    label: str = ""  # "baseline": a world of --baseline-cmd

    @property
    def name(self) -> str:
        return (f"{self.label} " if self.label else "") + f"{self.n_tenants:,} tenant" + (
            "s" if self.n_tenants != 1 else "")

    @property
    def key(self) -> str:
        """Its cells' key prefix in the results."""
        return f"{self.label}/{self.n_tenants}" if self.label else str(self.n_tenants)

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"


def http_json(base: str, method: str, path: str, body: dict | None = None, timeout: float = 30.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def _created(status_doc: tuple[int, dict], what: str) -> dict:
    status, doc = status_doc
    if status != 201:
        raise RuntimeError(f"{what}: HTTP {status} {doc}")
    return doc


def start_world(n_tenants: int, args, workdir: str, shoal_cmd: str | None = None, label: str = "") -> World:
    sasl_port, ops_port, http_port = free_port(), free_port(), free_port()
    admin_url = f"http://127.0.0.1:{http_port}"
    data_dir = tempfile.mkdtemp(prefix=f"shoal-{label}{n_tenants}t-", dir=workdir)
    argv = shlex.split(shoal_cmd or args.shoal_cmd) + [
        "serve", "--log-dirs", data_dir,
        "--listeners", f"SASL://127.0.0.1:{sasl_port},OPS://127.0.0.1:{ops_port}",
        "--override", "listener.security.protocol.map=SASL:SASL_PLAINTEXT,OPS:PLAINTEXT",
        "--override", f"shoal.admin.listener={admin_url}",
    ] + args.shoal_arg
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    b = BrokerProcess(f"shoal-{label}{n_tenants}t", argv, ops_port, workdir, env=env, cwd=REPO_ROOT)
    b.data_dir = data_dir  # type: ignore[attr-defined]
    b.start()
    b.wait_ready(args.startup_timeout)
    deadline = time.perf_counter() + args.startup_timeout
    while http_json(admin_url, "GET", "/openapi.json", timeout=2)[0] != 200:
        if time.perf_counter() > deadline:
            raise PhaseTimeout(f"{b.name}: admin API not answering at {admin_url}")
        time.sleep(0.05)

    prov: dict = {"tenants": n_tenants}
    rng = random.Random(args.seed)
    # client i's tenant: the 1-tenant world puts every client in tenant 0
    load_idx = [0] * args.clients if n_tenants == 1 else rng.sample(range(n_tenants), args.clients)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.provision_concurrency) as pool:
        docs = list(pool.map(
            lambda i: _created(http_json(admin_url, "POST", "/v1/tenants", {"display_name": f"bench {i}"}),
                               "create tenant"),
            range(n_tenants)))
        t1 = time.perf_counter()
        tenants = [Tenant(d["tenant_id"], f"bench-u{i}") for i, d in enumerate(docs)]
        users = [(t.tenant_id, t.user, LOAD_MECHANISM) for t in tenants]
        users += [(tenants[0].tenant_id, u, m) for m, u in AUTH_USERS.items() if m != "PLAIN"]
        list(pool.map(
            lambda a: _created(http_json(admin_url, "POST", f"/v1/tenants/{a[0]}/users",
                                         {"user": a[1], "password": PASSWORD, "mechanism": a[2]}),
                               "create user"),
            users))
    t2 = time.perf_counter()
    for i, t in enumerate(tenants):
        t.topics = [f"t{j}" for j in range(args.topics_per_tenant)]
    for c, i in enumerate(load_idx):
        tenants[i].topics.append(f"load-{c}")
    n_topics = sum(len(t.topics) for t in tenants)
    asyncio.run(_create_tenant_topics(f"127.0.0.1:{sasl_port}", tenants, args))
    t3 = time.perf_counter()
    # the metadata store's files: its snapshot and the journal of the changes since
    meta = [os.path.join(data_dir, "__metadata", f) for f in ("metadata.json", "metadata.journal")]
    prov.update({
        "users": len(users), "topics": n_topics,
        "http_tenants_s": t1 - t0, "http_users_s": t2 - t1, "create_topics_s": t3 - t2,
        "total_s": t3 - t0,
        "metadata_bytes": sum(os.path.getsize(f) for f in meta if os.path.exists(f)),
        "broker_rss_mib": b.rss_kib() / 1024,
    })
    print(f"  {b.name}: {n_tenants:,} tenants + {len(users):,} users over HTTP in "
          f"{t2 - t0:.1f}s ({t1 - t0:.1f}s + {t2 - t1:.1f}s), {n_topics:,} topics by "
          f"{n_tenants:,} CreateTopics (one per tenant, over its SASL connection) in {t3 - t2:.1f}s; "
          f"metadata files {fmt_num(prov['metadata_bytes'] / MB)} MB, "
          f"broker RSS {prov['broker_rss_mib']:.0f} MiB", flush=True)
    return World(n_tenants, b, sasl_port, admin_url, tenants,
                 [tenants[i] for i in load_idx], prov, label)


def tenant_security(user: str, mechanism: str = LOAD_MECHANISM) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": PASSWORD}


async def _create_tenant_topics(bootstrap: str, tenants: list[Tenant], args) -> None:
    """One CreateTopics request per tenant, sent by the tenant's own user."""
    sem = asyncio.Semaphore(args.provision_concurrency)

    async def one(t: Tenant) -> None:
        async with sem:
            sec = ClientSecurity.from_properties(tenant_security(t.user))
            async with AdminClient(bootstrap, client_id="bench-provision", security=sec) as admin:
                await admin.create_topics(
                    [{"name": n, "num_partitions": 1, "replication_factor": 1}
                     for n in t.topics])

    await asyncio.gather(*(one(t) for t in tenants))


# --------------------------------------------------------------------------
# throughput: client processes
# --------------------------------------------------------------------------

def load_worker(idx: int, bootstrap: str, user: str, topic: str, n: int, size: int, acks: str,
                linger_ms: int, timeout: float, ready, go_produce, go_consume, results) -> None:
    """One client process: connect both clients, then produce and consume when released."""
    try:
        sec = tenant_security(user)
        opts = types.SimpleNamespace(stats_interval_ms=0, producer_conf=[], consumer_conf=[])
        p = Producer({**produce_conf(bootstrap, acks, linger_ms, StatsBox(), opts), **sec})
        c = Consumer({**consume_conf(bootstrap, opts), **sec})
        p.list_topics(topic, timeout=10)  # connect + authenticate + metadata, outside the window
        c.list_topics(topic, timeout=10)
        payload = os.urandom(size)
        box = {"ok": 0, "errors": 0, "first": None, "samples": []}

        def on_delivery(err, msg):
            if err is None:
                box["ok"] += 1
                off = msg.offset()
                if box["first"] is None or off < box["first"]:
                    box["first"] = off
            else:
                box["errors"] += 1
                if len(box["samples"]) < 3:
                    box["samples"].append(str(err))

        ready.put(idx)
        if not go_produce.wait(timeout):
            raise PhaseTimeout("never released to produce")
        deadline = time.perf_counter() + timeout
        cpu0 = client_cpu()
        sent, timed_out = produce_n(p, topic, n, payload, on_delivery, deadline)
        remaining = p.flush(max(0.1, deadline - time.perf_counter()))
        results.put(("produce", idx, {
            "end": time.perf_counter(), "client_cpu_s": client_cpu() - cpu0,
            "sent": sent, "delivered_ok": box["ok"],
            "delivery_errors": box["errors"], "error_samples": box["samples"],
            "ok": not timed_out and not remaining and box["errors"] == 0 and box["ok"] == n}))
        if not go_consume.wait(timeout):
            raise PhaseTimeout("never released to consume")
        deadline = time.perf_counter() + timeout
        cpu0 = client_cpu()
        c.assign([TopicPartition(topic, 0, box["first"] or 0)])
        res = consume_n(c, box["ok"], deadline)
        res["end"] = time.perf_counter()
        res["client_cpu_s"] = client_cpu() - cpu0
        c.close()
        results.put(("consume", idx, res))
    except BaseException as e:  # reported to the parent, which fails the cell
        results.put(("error", idx, f"{e.__class__.__name__}: {e}; client log: {CLIENT_LOG.tail(5)}"))


def _collect(results, kind: str, count: int, timeout: float) -> dict[int, dict]:
    out: dict[int, dict] = {}
    deadline = time.perf_counter() + timeout
    while len(out) < count:
        try:
            what, idx, res = results.get(timeout=max(0.1, deadline - time.perf_counter()))
        except queue.Empty:
            raise PhaseTimeout(f"{count - len(out)} client(s) did not finish {kind} in "
                               f"{timeout:.0f}s") from None
        if what == "error":
            raise RuntimeError(f"client {idx}: {res}")
        if what == kind:
            out[idx] = res
    return out


@contextlib.contextmanager
def client_processes(ctx, target, arg_tuples: list[tuple], ready, results, timeout: float):
    """Start a process per argument tuple and wait until each has put its index on ``ready``
    (connected, authenticated, warm); on exit join them all, killing stragglers."""
    procs = [ctx.Process(target=target, args=a, daemon=True) for a in arg_tuples]
    for p in procs:
        p.start()
    try:
        deadline = time.perf_counter() + timeout
        for _ in procs:
            try:
                ready.get(timeout=max(0.1, deadline - time.perf_counter()))
            except queue.Empty:
                _raise_client_error(results)
                raise PhaseTimeout(f"client processes not ready within {timeout:.0f}s") from None
        time.sleep(0.2)  # let the connect/metadata traffic settle
        yield procs
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)


def _raise_client_error(results) -> None:
    """Raise the first error a client process reported, if any."""
    while True:
        try:
            what, idx, res = results.get_nowait()
        except queue.Empty:
            return
        if what == "error":
            raise RuntimeError(f"client {idx}: {res}")


def _ours() -> set[int]:
    """This benchmark's processes: itself, its client processes, every world's broker."""
    pids = set(descendants(os.getpid()))
    for b in LIVE_BROKERS:
        pids.update(b.pids())
    return pids


def _mark(world: World) -> tuple:
    """(broker CPU s, every user process's CPU s, time) at the start of a window; the time
    last, just before the clients are released."""
    return world.broker.cpu(), user_process_cpu(), time.perf_counter()


def _usage(world: World, mark: tuple, res: dict[int, dict]) -> dict:
    """Window length and CPU use from ``mark`` to the last client's end: broker, clients, and
    the other processes on the machine ("foreign": other people's work, which skews the
    window)."""
    cpu0, procs0, t0 = mark
    secs = max(r["end"] for r in res.values()) - t0
    broker = world.broker.cpu() - cpu0
    clients = sum(r["client_cpu_s"] for r in res.values())
    foreign = cpu_since(procs0, user_process_cpu(), _ours())
    return {"seconds": secs, "broker_cpu_s": broker, "broker_cores": broker / secs,
            "client_cores": clients / secs,
            "foreign_cores": max(0.0, foreign) / max(secs, time.perf_counter() - t0)}


def _window(world: World, kind: str, mark: tuple, res: dict[int, dict],
            size: int, total: int) -> dict:
    u = _usage(world, mark, res)
    key = "delivered_ok" if kind == "produce" else "consumed"
    msgs = sum(r[key] for r in res.values())
    secs = u["seconds"]
    return {
        "messages": msgs, "msg_per_s": msgs / secs, "mb_per_s": msgs * size / MB / secs, **u,
        "broker_cpu_us_per_msg": u["broker_cpu_s"] * 1e6 / msgs if msgs else None,
        "ok": all(r["ok"] for r in res.values()) and msgs == total,
        "errors": [s for r in res.values() for s in r.get("error_samples", ())][:5],
    }


def run_load_cell(ctx, world: World, size: int, total: int, args) -> dict:
    """One measurement: produce then consume ``total`` messages of ``size`` B with the world's
    client processes."""
    clients = args.clients
    per = total // clients
    total = per * clients
    ready, results = ctx.Queue(), ctx.Queue()
    go_produce, go_consume = ctx.Event(), ctx.Event()
    with client_processes(ctx, load_worker, [
        (i, world.sasl_bootstrap, t.user, f"load-{i}", per, size, args.acks, args.linger_ms,
         args.phase_timeout, ready, go_produce, go_consume, results) for i, t in enumerate(world.load)
    ], ready, results, args.startup_timeout + 30):
        mark = _mark(world)
        go_produce.set()
        prod = _window(world, "produce", mark,
                       _collect(results, "produce", clients, args.phase_timeout + 30), size, total)
        time.sleep(0.2)
        mark = _mark(world)
        go_consume.set()
        cons = _window(world, "consume", mark,
                       _collect(results, "consume", clients, args.phase_timeout + 30), size, total)
    return {"produce": prod, "consume": cons}


def median_of(runs: list[dict], *path) -> float | None:
    vals = []
    for r in runs:
        v = r
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        if isinstance(v, (int, float)):
            vals.append(v)
    return statistics.median(vals) if vals else None


# --------------------------------------------------------------------------
# authentications per second
# --------------------------------------------------------------------------

class ScramLogin:
    """Client side of SCRAM (RFC 5802) with the SaltedPassword cached per (salt, iterations),
    so that a login costs the client a few HMACs."""

    def __init__(self, mechanism: str, user: str, password: str) -> None:
        self.mechanism, self.user, self.password = mechanism, user, password
        self.h = hashlib.sha512 if mechanism == "SCRAM-SHA-512" else hashlib.sha256
        self._keys: dict[tuple[str, int], tuple[bytes, bytes, bytes]] = {}

    def first(self) -> bytes:
        self.nonce = base64.b64encode(os.urandom(18)).decode()
        self.bare = f"n={self.user},r={self.nonce}"
        return ("n,," + self.bare).encode()

    def final(self, server_first: bytes) -> bytes:
        sf = server_first.decode()
        attrs = dict(a.split("=", 1) for a in sf.split(","))
        if not attrs["r"].startswith(self.nonce):
            raise ValueError("server nonce does not extend ours")
        key = (attrs["s"], int(attrs["i"]))
        keys = self._keys.get(key)
        if keys is None:
            salted = salted_password(self.mechanism, self.password, base64.b64decode(key[0]), key[1])
            client_key = hmac.new(salted, b"Client Key", self.h).digest()
            keys = (client_key, self.h(client_key).digest(), hmac.new(salted, b"Server Key", self.h).digest())
            self._keys[key] = keys
        client_key, stored_key, server_key = keys
        without_proof = f"c=biws,r={attrs['r']}"
        auth_message = f"{self.bare},{sf},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, self.h).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self.expected = b"v=" + base64.b64encode(hmac.new(server_key, auth_message, self.h).digest())
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def login_tokens(mechanism: str, user: str, password: str):
    """``tokens()`` starts one login: a generator that yields each client token and is sent
    the server's answer to it (raising if the server's final message does not verify)."""
    if mechanism == "PLAIN":
        plain = f"\x00{user}\x00{password}".encode()

        def tokens():
            yield plain
        return tokens
    scram = ScramLogin(mechanism, user, password)

    def tokens():
        server_first = yield scram.first()
        server_final = yield scram.final(server_first)
        if server_final != scram.expected:
            raise ValueError("server signature does not verify")
    return tokens


class RawSasl:
    """A blocking socket that logs in and closes: SaslHandshake v1, SaslAuthenticate v2."""

    def __init__(self, host: str, port: int, mechanism: str, tokens) -> None:
        self.addr = (host, port)
        self.tokens = tokens
        req = codec.request_type(SASL_HANDSHAKE, HANDSHAKE_V)(mechanism=mechanism)
        self.handshake = codec.encode_request(SASL_HANDSHAKE, HANDSHAKE_V, 1, "bench-auth", req)
        self.auth_type = codec.request_type(SASL_AUTHENTICATE, AUTHENTICATE_V)

    def login(self) -> None:
        with socket.create_connection(self.addr, timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(self.handshake)
            r = self._recv(s, SASL_HANDSHAKE, HANDSHAKE_V)
            if r.error_code != 0:
                raise RuntimeError(f"SaslHandshake error {r.error_code}")
            gen = self.tokens()
            token = next(gen)
            cid = 2
            while True:
                s.sendall(codec.encode_request(SASL_AUTHENTICATE, AUTHENTICATE_V, cid, "bench-auth",
                                               self.auth_type(auth_bytes=token)))
                r = self._recv(s, SASL_AUTHENTICATE, AUTHENTICATE_V)
                if r.error_code != 0:
                    raise RuntimeError(f"SaslAuthenticate error {r.error_code}: {r.error_message}")
                cid += 1
                try:
                    token = gen.send(bytes(r.auth_bytes))
                except StopIteration:
                    return

    @staticmethod
    def _recv(s: socket.socket, key: int, version: int):
        (size,) = _I32.unpack(_exactly(s, 4))
        return codec.decode_response(key, version, _exactly(s, size))[1]


def _exactly(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        buf += chunk
    return bytes(buf)


def auth_worker(idx: int, port: int, mechanism: str, user: str, seconds: float,
                ready, go, results) -> None:
    try:
        raw = RawSasl("127.0.0.1", port, mechanism, login_tokens(mechanism, user, PASSWORD))
        raw.login()  # warm: the SaltedPassword cache, imports
        ready.put(idx)
        if not go.wait(seconds + 60):
            raise PhaseTimeout("never released")
        end = time.perf_counter() + seconds
        cpu0 = client_cpu()
        n = 0
        errors: list[str] = []
        while True:
            try:
                raw.login()
            except (OSError, RuntimeError, ValueError) as e:
                if len(errors) < 3:
                    errors.append(str(e))
                if len(errors) >= 3:
                    break
                continue
            t = time.perf_counter()
            if t > end:
                break
            n += 1
        results.put(("auth", idx, {"logins": n, "errors": errors, "end": end,
                                   "client_cpu_s": client_cpu() - cpu0}))
    except BaseException as e:
        results.put(("error", idx, f"{e.__class__.__name__}: {e}"))


def run_auth_cell(ctx, world: World, mechanism: str, args) -> dict:
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    user = AUTH_USERS[mechanism]
    with client_processes(ctx, auth_worker, [
        (i, world.sasl_port, mechanism, user, args.auth_seconds, ready, go, results)
        for i in range(args.auth_procs)
    ], ready, results, args.startup_timeout + 30):
        mark = _mark(world)
        go.set()
        res = _collect(results, "auth", args.auth_procs, args.auth_seconds + 60)
        u = _usage(world, mark, res)
    logins = sum(r["logins"] for r in res.values())
    errors = [e for r in res.values() for e in r["errors"]]
    return {"logins": logins, "auth_per_s": logins / u["seconds"], **u,
            "broker_cpu_us_per_auth": u["broker_cpu_s"] * 1e6 / logins if logins else None,
            "errors": errors[:5], "ok": not errors and logins > 0}


def run_inproc(mechanism: str, count: int) -> dict:
    """Server-side µs per authentication: SaslSession.handshake + authenticate steps only, with
    what a broker's listener makes once for all its sessions (the fake-credential secret, PLAIN's
    dummy credential for unknown users: shoal.auth.ListenerSecurity) made outside the timing."""
    hash_mech = "SCRAM-SHA-512" if mechanism == "SCRAM-SHA-512" else "SCRAM-SHA-256"
    cred = make_credential(hash_mech, PASSWORD)
    creds = {("u", hash_mech): cred}

    def lookup(user: str, mech: str):
        return creds.get((user, mech))

    tokens = login_tokens(mechanism, "u", PASSWORD)
    secret = os.urandom(32)
    dummy = make_credential("SCRAM-SHA-512", os.urandom(16).hex())
    server_s = 0.0
    now = time.perf_counter
    for i in range(count + 1):
        if i == 1:
            server_s = 0.0  # the first login warms caches (and the client's SaltedPassword)
        t = now()
        session = SaslSession(MECHANISMS, lookup, fake_secret=secret, dummy=dummy)
        if session.handshake(mechanism) is not None:
            raise RuntimeError("handshake refused")
        server_s += now() - t
        gen = tokens()
        token = next(gen)
        while True:
            t = now()
            out, _ = session.authenticate(token, 0)
            server_s += now() - t
            try:
                token = gen.send(out)
            except StopIteration:
                break
        if not session.authenticated:
            raise RuntimeError("not authenticated")
    us = server_s * 1e6 / count
    return {"count": count, "server_us_per_auth": us, "auth_per_s_one_core": 1e6 / us}


# --------------------------------------------------------------------------
# the measurement matrix
# --------------------------------------------------------------------------

def run_matrix(phase: str, worlds: list[World], reps: int, items: list, results: dict, args,
               run, foreign_of, describe) -> None:
    """Every (item, world) cell ``reps`` times, interleaved: rep 1 of every item in every world,
    then rep 2 ..., the worlds' order alternating between reps. A cell during which the rest of
    the machine used more than ``--max-foreign`` cores is measured again after
    ``--quiet-wait`` s, at most ``--retries`` times; the last try is kept and marked noisy."""
    out = results.setdefault(phase, {})
    for rep in range(reps):
        order = worlds if rep % 2 == 0 else worlds[::-1]
        for item in items:
            for w in order:
                key = f"{w.key}:{item}"
                r = None
                for attempt in range(1, args.retries + 2):
                    waited = wait_writeback(args.max_dirty_mib, 60.0)
                    try:
                        r = run(w, item)
                    except (PhaseTimeout, RuntimeError) as e:
                        results["failures"].append(f"{phase} {key} rep {rep + 1}: {e}")
                        print(f"  !! {key} rep {rep + 1}: {e}", flush=True)
                        r = None
                        break
                    foreign = foreign_of(r)
                    r.update(rep=rep, attempts=attempt, noisy=foreign > args.max_foreign,
                             writeback_wait_s=waited)
                    if not r["noisy"] or attempt > args.retries:
                        break
                    print(f"  ({key} rep {rep + 1}: other work used {foreign:.2f} cores meanwhile; "
                          f"again in {args.quiet_wait:g}s)", flush=True)
                    time.sleep(args.quiet_wait)
                if r is not None:
                    out.setdefault(key, []).append(r)
                    print(f"  rep {rep + 1} {item:>13} {w.name:>13}: {describe(r)}"
                          + ("  NOISY" if r["noisy"] else ""), flush=True)


def _cores(r: dict) -> str:
    return (f"cores broker {r['broker_cores']:.2f} clients {r['client_cores']:.2f} "
            f"other {r['foreign_cores']:.2f}")


def describe_load(r: dict) -> str:
    return "; ".join(
        f"{kind} {fmt_num(r[kind]['msg_per_s'])} msg/s {fmt_num(r[kind]['mb_per_s'])} MB/s "
        f"{fmt_num(r[kind]['broker_cpu_us_per_msg'])} µs/msg ({_cores(r[kind])})"
        + ("" if r[kind]["ok"] else " FLAGGED")
        for kind in ("produce", "consume"))


def describe_auth(r: dict) -> str:
    return (f"{fmt_num(r['auth_per_s'])} auth/s, broker {fmt_num(r['broker_cpu_us_per_auth'])} µs/auth "
            f"({_cores(r)})" + ("" if r["ok"] else f" FLAGGED {r['errors']}"))


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------

def ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def paired_ratio(runs_n: list[dict], runs_1: list[dict], *path) -> float | None:
    """Median over reps of (value in world N / value in world 1), pairing the same rep."""
    def get(r):
        for p in path:
            r = r.get(p) if isinstance(r, dict) else None
        return r

    base = {r["rep"]: get(r) for r in runs_1}
    vals = [ratio(get(r), base.get(r["rep"])) for r in runs_n]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def _pct(r: float | None) -> str:
    return f"{r:.3f} ({(1 - r) * 100:+.1f}%)" if r else "-"


def _mark_flags(v, runs: list[dict], kind: str | None = None) -> str:
    bad = any(not (r.get(kind, r) if kind else r).get("ok", False) for r in runs)
    return fmt_num(v) + ("!" if bad else "") + ("~" if any(r.get("noisy") for r in runs) else "")


def report(machine: dict, worlds: list[World], results: dict, args) -> str:
    out = []
    m = machine
    out.append("Machine: {cpu_model}, {cpu_count} cores (affinity {cpu_affinity}), {mem} MiB RAM, "
               "Linux {kernel}; load average before the run {load}".format(
                   mem=m.get("mem_total_mib"), load=m.get("loadavg"), **m))
    out.append("Python {python}; confluent-kafka {confluent_kafka}; librdkafka {librdkafka}; "
               "shoal {shoal_git}; {date_utc}".format(**m))
    out.append("'!' = a run with errors or missing messages; '~' = a run during which other processes "
               f"used more than {args.max_foreign:g} cores even after {args.retries} re-measurements")
    out.append("")
    out.append("== provisioning (HTTP admin API + one CreateTopics per tenant over SASL) ==")
    rows = [[w.name, f"{w.provisioning['users']:,}", f"{w.provisioning['topics']:,}",
             fmt_num(w.provisioning["http_tenants_s"]), fmt_num(w.provisioning["http_users_s"]),
             fmt_num(w.provisioning["create_topics_s"]),
             fmt_num(w.provisioning["metadata_bytes"] / MB),
             fmt_num(w.provisioning["broker_rss_mib"])] for w in worlds]
    out.append(render_table(["world", "users", "topics", "tenants s", "users s", "CreateTopics s",
                             "metadata MB", "RSS MiB"], rows, "lrrrrrrr"))
    base = worlds[0]
    tp = results.get("throughput", {})
    worst = None
    for w in worlds[1:]:
        if not tp:
            break
        out.append("")
        out.append(f"== throughput, {w.name} / {base.name}: {args.clients} client processes, 1-partition "
                   f"topic each, acks={args.acks}, linger.ms={args.linger_ms}, median of {args.reps} ==")
        rows = []
        for size in args.size_list:
            runs1, runsn = tp.get(f"{base.key}:{size}", []), tp.get(f"{w.key}:{size}", [])
            for kind in ("produce", "consume"):
                m1, mn = median_of(runs1, kind, "msg_per_s"), median_of(runsn, kind, "msg_per_s")
                c1 = median_of(runs1, kind, "broker_cpu_us_per_msg")
                cn = median_of(runsn, kind, "broker_cpu_us_per_msg")
                paired = paired_ratio(runsn, runs1, kind, "msg_per_s")
                if paired is not None:
                    worst = paired if worst is None else min(worst, paired)
                rows.append([
                    f"{size} B {kind}", _mark_flags(m1, runs1, kind),
                    fmt_num(m1 * size / MB if m1 else None), _mark_flags(mn, runsn, kind),
                    fmt_num(mn * size / MB if mn else None), _pct(ratio(mn, m1)), _pct(paired),
                    fmt_num(c1), fmt_num(cn), _pct(paired_ratio(runsn, runs1, kind, "broker_cpu_us_per_msg")),
                    fmt_num(median_of(runs1 + runsn, kind, "foreign_cores")),
                ])
        out.append(render_table(
            ["cell", "msg/s 1", "MB/s 1", "msg/s N", "MB/s N", "N/1 (loss)", "paired N/1 (loss)",
             "broker µs/msg 1", "µs/msg N", "paired CPU N/1", "other cores"], rows, "l" + "r" * 10))
    if worst is not None:
        out.append(f"target: loss < 5%  -> worst paired ratio {worst:.3f} ({(1 - worst) * 100:.1f}% loss): "
                   + ("met" if worst >= 0.95 else "NOT met"))
    auth = results.get("auth", {})
    inproc = results.get("inproc", {})
    if auth or inproc:
        out.append("")
        out.append(f"== SASL authentications/s: {args.auth_procs} client processes, a new connection "
                   f"per login, {args.auth_seconds:g} s windows, median of {args.auth_reps} ==")
        rows = []
        for mech in args.mechanism_list:
            row = [mech]
            for w in worlds:
                runs = auth.get(f"{w.key}:{mech}", [])
                row += [_mark_flags(median_of(runs, "auth_per_s"), runs),
                        fmt_num(median_of(runs, "broker_cpu_us_per_auth")),
                        fmt_num(median_of(runs, "broker_cores")), fmt_num(median_of(runs, "client_cores"))]
            ip = inproc.get(mech, {})
            row += [fmt_num(ip.get("server_us_per_auth")), fmt_num(ip.get("auth_per_s_one_core"))]
            rows.append(row)
        headers = ["mechanism"]
        for w in worlds:
            headers += [f"auth/s {w.name}", "broker µs/auth", "broker cores", "client cores"]
        headers += ["in-process µs/auth", "in-process auth/s"]
        out.append(render_table(headers, rows, "l" + "r" * (len(headers) - 1)))
    if results.get("failures"):
        out.append("")
        out.append("== failures ==")
        out.extend(f"- {f}" for f in results["failures"])
    text = "\n".join(out)
    print(text, flush=True)
    return text


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Tenancy benchmark: throughput with 1 vs N tenants, SASL authentications/s.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--tenants", default="1,1000",
                    help="tenant counts of the worlds, comma list; the first is the baseline")
    ap.add_argument("--phases", default=",".join(ALL_PHASES), help="comma list of: " + ", ".join(ALL_PHASES))
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 rep, messages /10, 2 s auth windows")
    ap.add_argument("--clients", type=int, default=10, help="client processes in every world")
    ap.add_argument("--sizes", default="100,1024", help="message sizes (bytes)")
    ap.add_argument("--messages", default="100:2000000,1024:400000",
                    help="total messages per cell as SIZE:COUNT list (split over the clients)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions of every cell (default 5)")
    ap.add_argument("--topics-per-tenant", type=int, default=1)
    ap.add_argument("--acks", default="1")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--mechanisms", default=",".join(MECHANISMS))
    ap.add_argument("--auth-procs", type=int, default=6, help="client processes of the auth phase")
    ap.add_argument("--auth-seconds", type=float, default=None, help="auth window (default 5)")
    ap.add_argument("--auth-reps", type=int, default=None, help="auth windows per cell (default 3)")
    ap.add_argument("--inproc-count", type=int, default=None,
                    help="in-process logins per mechanism (default 2000)")
    ap.add_argument("--max-foreign", type=float, default=0.25,
                    help="a window during which other processes used more cores than this is "
                         "measured again")
    ap.add_argument("--retries", type=int, default=3, help="re-measurements of a noisy window")
    ap.add_argument("--max-dirty-mib", type=int, default=256,
                    help="before a window, wait (up to 60 s) until dirty + writeback pages are below this")
    ap.add_argument("--quiet-wait", type=float, default=5.0, help="pause (s) before a re-measurement")
    ap.add_argument("--baseline-cmd", default=None, metavar="CMD",
                    help="also run every world with this command prefix (another Shoal, e.g. an exported "
                         "older tree: git archive REV | tar -x -C /tmp/old, then \"env PYTHONPATH=/tmp/old "
                         "python -P -m shoal\"), its cells interleaved with ours: an A/B comparison that "
                         "noise on a shared machine hits alike. The inproc phase measures this tree only")
    ap.add_argument("--provision-concurrency", type=int, default=4)
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--phase-timeout", type=float, default=180.0, help="bound (s) of one window")
    ap.add_argument("--startup-timeout", type=float, default=60.0)
    add_run_args(ap, "--shoal-arg=--override --shoal-arg=log.segment.bytes=268435456")
    args = ap.parse_args(argv)
    try:
        args.tenant_list = [int(x) for x in csv_list(args.tenants)]
        args.size_list = [int(x) for x in csv_list(args.sizes)]
        counts = {int(k): int(v) for k, v in (kv.split(":", 1) for kv in csv_list(args.messages))}
    except ValueError as e:
        ap.error(f"bad number: {e}")
    if not args.tenant_list or min(args.tenant_list) < 1:
        ap.error("--tenants: counts >= 1")
    args.phase_list = csv_list(args.phases)
    bad = [p for p in args.phase_list if p not in ALL_PHASES]
    if bad:
        ap.error(f"--phases: unknown {bad}")
    args.mechanism_list = [m.upper() for m in csv_list(args.mechanisms)]
    bad = [m for m in args.mechanism_list if m not in MECHANISMS]
    if bad:
        ap.error(f"--mechanisms: unknown {bad}")
    missing = [s for s in args.size_list if s not in counts]
    if missing:
        ap.error(f"--messages has no count for size(s) {missing}")
    scale = 10 if args.quick else 1
    args.message_counts = {s: max(args.clients, counts[s] // scale) for s in args.size_list}
    args.reps = args.reps or (1 if args.quick else 5)
    args.auth_reps = args.auth_reps or (1 if args.quick else 3)
    args.auth_seconds = args.auth_seconds or (2.0 if args.quick else 5.0)
    args.inproc_count = args.inproc_count or (300 if args.quick else 2000)
    if min(args.clients, args.reps, args.auth_procs, args.provision_concurrency) < 1:
        ap.error("counts must be >= 1")
    if args.topics_per_tenant < 0:
        ap.error("--topics-per-tenant must be >= 0")
    if args.clients > max(args.tenant_list[1:] or [args.clients]):
        ap.error("--clients cannot exceed the tenant count of a multi-tenant world")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="shoal-bench-tenants-")
    ctx = mp.get_context("spawn")

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_sigterm)

    machine = _util.machine_info(None, REPO_ROOT)
    machine["loadavg"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    # a run from an exported tree (git archive) names its commit in SHOAL_GIT
    machine["shoal_git"] = machine["shoal_git"] or os.environ.get("SHOAL_GIT")
    results: dict = {"failures": []}
    worlds: list[World] = []
    interrupted = False
    t_start = time.perf_counter()
    try:
        print(f"worlds: {args.tenant_list} tenants; phases: {', '.join(args.phase_list)}; "
              f"workdir {workdir}", flush=True)
        for n in args.tenant_list:
            worlds.append(start_world(n, args, workdir))
            if args.baseline_cmd:  # interleaved with ours by run_matrix
                worlds.append(start_world(n, args, workdir, args.baseline_cmd, "baseline"))
        if "inproc" in args.phase_list:
            print("[inproc]", flush=True)
            results["inproc"] = {}
            for mech in args.mechanism_list:
                r = run_inproc(mech, args.inproc_count)
                results["inproc"][mech] = r
                print(f"  {mech}: {r['server_us_per_auth']:.1f} µs/auth server side", flush=True)
        if "throughput" in args.phase_list:
            print("[throughput]", flush=True)
            run_matrix("throughput", worlds, args.reps, args.size_list, results, args,
                       lambda w, size: run_load_cell(ctx, w, size, args.message_counts[size], args),
                       lambda r: max(r["produce"]["foreign_cores"], r["consume"]["foreign_cores"]),
                       describe_load)
        if "auth" in args.phase_list:
            print("[auth]", flush=True)
            run_matrix("auth", worlds, args.auth_reps, args.mechanism_list, results, args,
                       lambda w, mech: run_auth_cell(ctx, w, mech, args),
                       lambda r: r["foreign_cores"], describe_auth)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted; stopping brokers", file=sys.stderr, flush=True)
    finally:
        stop_and_clean(workdir, args.keep_logs)

    print("", flush=True)
    text = report(machine, worlds, results, args) if worlds else ""
    print(f"\ntotal wall time {time.perf_counter() - t_start:.1f}s", flush=True)
    if args.json:
        doc = {"machine": machine, "config": {k: v for k, v in vars(args).items()},
               "provisioning": {w.key: w.provisioning for w in worlds},
               "results": results, "report_text": text, "interrupted": interrupted}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2, default=str)
        print(f"wrote {args.json}", flush=True)
    return 130 if interrupted else (1 if results["failures"] else 0)


if __name__ == "__main__":
    sys.exit(main())
