"""Zero-copy Fetch on the connection's side: a response's file regions go out with ``sendfile``.

``encode_response`` answers a Fetch whose record sets are file regions with a ``RegionFrame``
(``shoal.protocol.regions``): byte runs and regions in order. ``Outbox`` writes them in order on
one connection: byte runs through the transport, as every other response; a region, once the
transport has nothing left to send (so nothing is reordered), with ``os.sendfile`` from the
region's own descriptor straight to the socket. The socket is non-blocking: a partial send waits
until the socket can take more (``Writable``), and the responses after it wait in the outbox,
whose bytes count toward the connection's ``shoal.connection.queued.response.max.bytes`` (it
stops reading requests meanwhile), so a slow consumer costs the broker descriptors, not memory,
and no more of them than the requests it may have unanswered.

A region whose file was truncated under it (``sendfile`` returns 0 before its end) is finished
with padding that reads as a partial last batch (``shoal.storage.regions.padding``): the size
fields already sent stay true. A connection that closes gives back every region it holds.

``Writable``: the event loop (uvloop's or asyncio's) owns the socket's registration and refuses a
second writer on it, so each loop has one extra ``epoll`` set, registered with the loop as a
reader, in which a waiting socket is registered one-shot for EPOLLOUT.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import select
import weakref
from collections import deque
from typing import Any, Callable

from shoal.protocol.regions import Region, RegionCounters, RegionFrame, padding

log = logging.getLogger("shoal.server")


class Writable:
    """Calls back once when a socket can take more bytes (one per event loop)."""

    _per_loop: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Writable]" = weakref.WeakKeyDictionary()

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._ep = select.epoll()
        self._waiting: dict[int, Callable[[], None]] = {}
        self._registered: set[int] = set()
        loop.add_reader(self._ep.fileno(), self._ready)

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> Writable:
        w = cls._per_loop.get(loop)
        if w is None:
            w = cls._per_loop[loop] = cls(loop)
        return w

    def wait(self, fd: int, callback: Callable[[], None]) -> None:
        self._waiting[fd] = callback
        mask = select.EPOLLOUT | select.EPOLLONESHOT
        if fd in self._registered:
            try:
                self._ep.modify(fd, mask)
                return
            except FileNotFoundError:  # the descriptor was closed and reused since
                pass
        try:
            self._ep.register(fd, mask)
        except FileExistsError:
            self._ep.modify(fd, mask)
        self._registered.add(fd)

    def forget(self, fd: int) -> None:
        """The socket is closing: no callback, no registration (before its descriptor closes)."""
        self._waiting.pop(fd, None)
        if fd in self._registered:
            self._registered.discard(fd)
            try:
                self._ep.unregister(fd)
            except OSError:
                pass

    def _ready(self) -> None:
        for fd, _events in self._ep.poll(0):
            cb = self._waiting.pop(fd, None)
            if cb is not None:
                cb()


class Outbox:
    """The parts of responses waiting to be written on one connection, in order."""

    def __init__(self, transport: Any, sock_fd: int, progress: Callable[[], None],
                 failed: Callable[[str], None]) -> None:
        self.transport = transport
        self.fd = sock_fd  # -1: no sendfile (TLS): regions are copied
        self.parts: deque[Any] = deque()
        self.bytes = 0  # bytes waiting here (regions counted whole)
        self._sent = 0  # of the region at the head
        self._waiting = False
        self._progress = progress  # something left the outbox (the connection may read again)
        self._failed = failed  # the socket refused (the connection closes)

    def write(self, data: bytes | bytearray | RegionFrame) -> None:
        if not isinstance(data, RegionFrame):
            if not self.parts:
                self.transport.write(data)
                return
            self.parts.append(data)
        else:
            self.parts.extend(data.parts)
        self.bytes += len(data)
        if not self._waiting:
            self.pump()

    def pump(self) -> None:
        """Write what can be written now, in order; wait for the socket when it is full."""
        self._waiting = False
        parts = self.parts
        transport = self.transport
        moved = False
        while parts:
            if transport.is_closing():
                return
            head = parts[0]
            if not isinstance(head, Region):
                parts.popleft()
                self.bytes -= len(head)
                transport.write(head)
                moved = True
                continue
            if self.fd < 0:  # no sendfile on this connection: the copy path
                parts.popleft()
                self.bytes -= head.length
                transport.write(head.read())
                head.close()
                moved = True
                continue
            if transport.get_write_buffer_size():  # what the transport holds goes first
                self._wait()
                break
            left = head.length - self._sent
            try:
                n = os.sendfile(self.fd, head.fd, head.offset + self._sent, left)
            except (BlockingIOError, InterruptedError):
                self._wait()
                break
            except OSError as e:
                if e.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF):
                    self._failed(f"sendfile: {e.strerror}")
                    return
                raise
            if n == 0:  # the file ends before the region: truncated under us
                parts[0] = padding(left)
                self.bytes -= head.length - left  # the padding is counted as bytes now
                head.close()
                self._sent = 0
                continue
            self._sent += n
            RegionCounters.sent_bytes += n
            moved = True
            if self._sent >= head.length:
                parts.popleft()
                self.bytes -= head.length
                self._sent = 0
                head.close()
        if moved:
            self._progress()

    def _wait(self) -> None:
        self._waiting = True
        Writable.of(asyncio.get_running_loop()).wait(self.fd, self.pump)

    def close(self) -> None:
        """The connection is gone: give back every region still here."""
        if self.fd >= 0:
            Writable.of(asyncio.get_running_loop()).forget(self.fd)
        parts, self.parts = self.parts, deque()
        for p in parts:
            if isinstance(p, Region):
                p.close()
        self.bytes = 0
        self._waiting = False
