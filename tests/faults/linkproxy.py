"""An asyncio TCP link proxy for fault tests: the kernel here has no netem, so every link a test
wants to slow down or cut goes through one of these.

One :class:`LinkProxy` runs its own event loop in a daemon thread; a (synchronous) test adds links
and changes them at run time::

    lp = LinkProxy(seed=7)
    port = lp.add("b1->b2", ("127.0.0.1", 9093))      # listens on 127.0.0.1:<port>, forwards
    lp.delay("b1->b2", 50, jitter_ms=10)               # both directions; direction="up"|"down"
    lp.bandwidth("b1->b2", 1_000_000, direction="up")  # bytes/s, token bucket; None: unlimited
    lp.cut("b1->b2", mode="stall", new="hang")         # or mode="reset", new="refuse"
    lp.heal("b1->b2")
    lp.chop("b1->b2", up=60_000, down=1_500, max_cuts=20)  # cut connections at random bytes
    lp.stats("b1->b2")                                  # bytes forwarded, connections
    lp.close()

A link is one path src -> dst: "up" is what the connecting side (src) sends, "down" what dst
answers. ``cut``:

- ``mode="stall"``: existing connections stay open and carry no byte either way (reads stop, so
  TCP backpressure reaches both ends) until ``heal``; then they carry on where they stopped, as
  after a partition that heals before any timeout. ``direction`` may cut one way only.
- ``mode="reset"``: every existing connection is aborted with an RST on both sides.
- ``new="refuse"``: the listening socket is closed, so connecting fails with ECONNREFUSED (the
  port is bound again, same number, at ``heal``); ``new="hang"``: connections are accepted and
  held, no byte either way and no connection to dst, until ``heal`` (a black hole, as a dropped
  SYN-ACK path looks to a client with a connect timeout).

``chop``: each connection made from then on gets a byte budget per direction, drawn from the
link's seeded generator (1 to ``up`` / ``down`` bytes; ``None``: no budget that way); when a
direction's budget runs out, the bytes up to it are forwarded (a request or a response arrives cut
in the middle) and the connection is closed on both sides (FIN), at most ``max_cuts`` times in all
(``stats()["chopped"]``); ``chop(name)`` stops it.

Delay: each chunk read is released ``delay + uniform(0, jitter)`` ms after it arrived, never
before an earlier chunk of the same direction (TCP keeps order). Bandwidth: one token bucket per
link and direction, shared by its connections, burst of 16 KiB or 20 ms of the rate, whichever is
larger. Bytes in flight per connection and direction are bounded (a queue of 64 chunks of at most
64 KiB), so a stalled link holds bounded memory. Delay and bandwidth changes apply to bytes read
after the change.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Coroutine

CHUNK = 65536
QUEUE_CHUNKS = 64
MIN_BURST = 16384
DIRECTIONS = ("up", "down")


@dataclass
class _Dir:
    """One direction of a link: its shaping and its counters (owned by the proxy's loop)."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    rate: float | None = None  # bytes/s
    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    tokens: float = 0.0
    refilled: float = 0.0
    bytes: int = 0

    def __post_init__(self) -> None:
        self.flowing.set()

    async def take(self, n: int) -> None:
        """Wait until the bucket holds ``n`` bytes' worth of tokens (n is at most one burst)."""
        if self.rate is None:
            return
        burst = max(MIN_BURST, self.rate * 0.02)
        now = time.monotonic()
        self.tokens = min(burst, self.tokens + (now - self.refilled) * self.rate)
        self.refilled = now
        self.tokens -= n
        if self.tokens < 0:
            await asyncio.sleep(-self.tokens / self.rate)

    def burst(self) -> int:
        return CHUNK if self.rate is None else int(max(MIN_BURST, self.rate * 0.02))


class _Link:
    def __init__(self, name: str, target: tuple[str, int], rng: random.Random) -> None:
        self.name, self.target, self.rng = name, target, rng
        self.dirs = {d: _Dir() for d in DIRECTIONS}
        self.accepting = asyncio.Event()
        self.accepting.set()
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        self.conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()
        self.tasks: set[asyncio.Task] = set()
        self.accepted = 0
        self.connected = 0
        self.refused_mode = False
        self.chop_limits: dict[str, int | None] = {}  # direction -> largest budget ({}: no chopping)
        self.chop_left = 0  # cuts still allowed
        self.chopped = 0

    async def listen(self, port: int = 0) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", port, reuse_address=True)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def unlisten(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.accepted += 1
        entry: list[Any] = [writer, None]
        key = (writer, None)
        self.conns.add(key)
        try:
            await self.accepting.wait()  # new="hang": held here until heal
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                _abort(writer)
                return
            self.conns.discard(key)
            key = (writer, up_writer)
            entry[1] = up_writer
            self.conns.add(key)
            self.connected += 1
            budgets = {d: self.rng.randint(1, limit) if limit else None for d, limit in self.chop_limits.items()}
            done = [False]

            def chop() -> bool:
                """Whether this connection may be cut now (once, within the link's allowance)."""
                if done[0] or self.chop_left <= 0:
                    return False
                self.chop_left -= 1
                self.chopped += 1
                done[0] = True
                return True

            await asyncio.gather(
                self._pipe(reader, up_writer, self.dirs["up"], budgets.get("up"), chop, entry),
                self._pipe(up_reader, writer, self.dirs["down"], budgets.get("down"), chop, entry))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self.conns.discard(key)
            for w in entry:
                if w is not None:
                    w.close()
            self.tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, d: _Dir,
                    budget: int | None = None, chop: Any = None, ends: Any = ()) -> None:
        """Forward one direction; with a ``budget``, close both ``ends`` once that many bytes went
        through (when ``chop()`` allows the cut)."""
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(QUEUE_CHUNKS)

        async def read() -> None:
            last = 0.0
            try:
                while True:
                    await d.flowing.wait()
                    data = await reader.read(CHUNK)
                    if not data:
                        break
                    delay = d.delay_ms + (self.rng.uniform(0, d.jitter_ms) if d.jitter_ms else 0.0)
                    last = max(last, time.monotonic() + delay / 1000.0)
                    await queue.put((last, data))
            except OSError:
                pass
            finally:
                await queue.put(None)

        async def write() -> None:
            nonlocal budget
            while (item := await queue.get()) is not None:
                release, data = item
                wait = release - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                cut = False
                if budget is not None:
                    if len(data) >= budget and chop():
                        data, cut = data[:budget], True
                    budget = None if len(data) >= budget else budget - len(data)
                view = memoryview(data)
                while view:
                    await d.flowing.wait()
                    piece, view = view[: d.burst()], view[d.burst():]
                    await d.take(len(piece))
                    await d.flowing.wait()  # a cut while waiting for tokens holds the bytes
                    d.bytes += len(piece)  # before the write: a reader may look as soon as it lands
                    writer.write(piece)
                    await writer.drain()
                if cut:  # the budget ran out: the connection ends here, both sides
                    for w in ends:
                        if w is not None:
                            w.close()
                    return
            if writer.can_write_eof():
                writer.write_eof()  # half-close: the other direction may still be talking

        reader_task = asyncio.ensure_future(read())
        try:
            await write()
        except OSError:
            pass
        finally:
            reader_task.cancel()

    def reset_all(self) -> None:
        for client, upstream in list(self.conns):
            _abort(client)
            if upstream is not None:
                _abort(upstream)
        for t in list(self.tasks):
            t.cancel()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0), not a FIN."""
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.transport.abort()


class LinkProxy:
    """Links (name -> listening port -> target), each shaped and cut at run time; thread-safe."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="linkproxy", daemon=True)
        self._thread.start()
        self._links: dict[str, _Link] = {}

    def _call(self, coro: Coroutine[Any, Any, Any], timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    # -- links ------------------------------------------------------------------------------------

    def add(self, name: str, target: tuple[str, int], port: int = 0) -> int:
        """A link to ``target`` listening on 127.0.0.1 (``port`` or a free one); its port."""
        if name in self._links:
            raise ValueError(f"link {name} exists")

        async def go() -> int:
            link = _Link(name, target, random.Random(self._rng.random()))
            self._links[name] = link
            return await link.listen(port)

        return self._call(go())

    def port(self, name: str) -> int:
        return self._links[name].port

    @property
    def names(self) -> list[str]:
        return list(self._links)

    def _dirs(self, name: str, direction: str) -> list[_Dir]:
        link = self._links[name]
        if direction == "both":
            return list(link.dirs.values())
        return [link.dirs[direction]]

    # -- shaping ----------------------------------------------------------------------------------

    def delay(self, name: str, ms: float, jitter_ms: float = 0.0, direction: str = "both") -> None:
        async def go() -> None:
            for d in self._dirs(name, direction):
                d.delay_ms, d.jitter_ms = float(ms), float(jitter_ms)

        self._call(go())

    def bandwidth(self, name: str, bytes_per_s: float | None, direction: str = "both") -> None:
        async def go() -> None:
            for d in self._dirs(name, direction):
                d.rate = None if bytes_per_s is None else float(bytes_per_s)
                d.tokens, d.refilled = 0.0, time.monotonic()

        self._call(go())

    # -- faults -----------------------------------------------------------------------------------

    def cut(self, name: str, mode: str = "stall", new: str = "refuse", direction: str = "both") -> None:
        """Cut a link: ``mode`` "stall"|"reset" for existing connections, ``new`` "refuse"|"hang"
        for new ones (``direction`` only with stall: one way of a stalled link)."""
        if mode not in ("stall", "reset") or new not in ("refuse", "hang"):
            raise ValueError(f"cut mode={mode!r} new={new!r}")
        if mode == "reset" and direction != "both":
            raise ValueError("a reset cuts both directions")

        async def go() -> None:
            link = self._links[name]
            for d in self._dirs(name, direction):
                d.flowing.clear()
            if direction == "both":
                link.accepting.clear()
                if new == "refuse":
                    link.refused_mode = True
                    await link.unlisten()
            if mode == "reset":
                link.reset_all()

        self._call(go())

    def heal(self, name: str) -> None:
        """Undo every cut of the link (shaping stays)."""
        async def go() -> None:
            link = self._links[name]
            if link.server is None:
                await link.listen(link.port)  # same port again
            link.refused_mode = False
            for d in link.dirs.values():
                d.flowing.set()
            link.accepting.set()

        self._call(go())

    def chop(self, name: str, up: int | None = None, down: int | None = None, max_cuts: int = 0) -> None:
        """Cut the link's new connections after a random number of bytes (at most ``up`` one way,
        ``down`` the other), ``max_cuts`` times in all; ``chop(name)`` stops it for new ones."""
        async def go() -> None:
            link = self._links[name]
            link.chop_limits = {"up": up, "down": down} if up or down else {}
            link.chop_left = max_cuts

        self._call(go())

    def heal_all(self) -> None:
        for name in self._links:
            self.heal(name)

    def is_cut(self, name: str) -> bool:
        link = self._links[name]
        return not link.accepting.is_set() or not all(d.flowing.is_set() for d in link.dirs.values())

    def stats(self, name: str) -> dict[str, int]:
        link = self._links[name]
        return {"up_bytes": link.dirs["up"].bytes, "down_bytes": link.dirs["down"].bytes,
                "accepted": link.accepted, "connected": link.connected, "open": len(link.conns),
                "chopped": link.chopped}

    def close(self) -> None:
        async def go() -> None:
            for link in self._links.values():
                await link.unlisten()
                link.reset_all()
            await asyncio.sleep(0)

        try:
            self._call(go())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)
            if not self._thread.is_alive():
                self.loop.close()

    def __enter__(self) -> "LinkProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    """A standalone proxy (no Shoal needed): ``python tests/faults/linkproxy.py --listen 19092
    --target 127.0.0.1:9092 --delay-ms 15 --rate 1000000``. Commands on stdin, one a line:
    ``cut [stall|reset]``, ``heal``, ``delay MS``, ``rate BYTES_PER_S|none``, ``stats``, ``quit``."""
    import argparse
    import json
    import sys

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1")
    ap.add_argument("--target", required=True, help="HOST:PORT")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="each direction")
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    ap.add_argument("--rate", type=float, default=None, help="bytes/s each direction (default unlimited)")
    args = ap.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    with LinkProxy() as lp:
        lp.add("link", (host, int(port)), args.listen)
        lp.delay("link", args.delay_ms, args.jitter_ms)
        lp.bandwidth("link", args.rate)
        print(f"127.0.0.1:{lp.port('link')} -> {args.target}", flush=True)
        for line in sys.stdin:
            cmd, *rest = line.split() or [""]
            try:
                if cmd == "cut":
                    lp.cut("link", mode=rest[0] if rest else "stall")
                elif cmd == "heal":
                    lp.heal("link")
                elif cmd == "delay":
                    lp.delay("link", float(rest[0]))
                elif cmd == "rate":
                    lp.bandwidth("link", None if rest[0] == "none" else float(rest[0]))
                elif cmd == "stats":
                    print(json.dumps(lp.stats("link")), flush=True)
                elif cmd == "quit":
                    break
                elif cmd:
                    print(f"unknown command {cmd!r}", flush=True)
            except (IndexError, ValueError) as e:
                print(f"{line.strip()}: {e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
