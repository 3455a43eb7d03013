"""Bounded, shared caches of segment resources: open descriptors and loaded indexes.

With 10,000 partitions a broker cannot keep every segment file open nor every index in memory,
so both are least-recently-used caches shared by all partitions of a ``LogManager``.

Thread safety: each segment carries its partition's lock (``seg.lock``). A descriptor is only used
while that lock is held, and the cache closes an evicted descriptor only if it can take the
victim's lock without waiting, so a descriptor never closes under a reader in another thread.
Index eviction just drops the segment's references to its arrays; users hold their own references
for the duration of a lookup, so that needs no lock.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shoal.storage.fs import FileSystem
    from shoal.storage.segment import Segment


def default_max_open_files() -> int:
    """Half the process's descriptor limit (sockets need the rest), between 16 and 32768."""
    return max(16, min(32768, descriptor_limit() // 2))


def descriptor_limit() -> int:
    """The process's soft limit of open descriptors (65536 when unlimited, 1024 when unknown)."""
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            soft = 65536
    except (ImportError, ValueError, OSError):
        soft = 1024
    return soft


class FileHandles:
    """LRU of open segment descriptors (the active segment's opened read-write)."""

    def __init__(self, fs: FileSystem, capacity: int | None = None) -> None:
        self._fs = fs
        self.capacity = capacity if capacity is not None else default_max_open_files()
        self._lru: OrderedDict[Segment, None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._lru)

    def get(self, seg: Segment, *, writable: bool = False) -> int:
        """A descriptor for ``seg``'s log file. The caller holds ``seg.lock``."""
        fd = seg.fd
        if fd >= 0 and (seg.fd_writable or not writable):
            with self._lock:
                if seg in self._lru:
                    self._lru.move_to_end(seg)
            return fd
        if fd >= 0:
            self.release(seg)
        flags = (os.O_RDWR | os.O_CREAT) if writable else os.O_RDONLY
        fd = self._fs.open(seg.prefix + ".log", flags)
        self.adopt(seg, fd, writable=writable)
        return fd

    def adopt(self, seg: Segment, fd: int, *, writable: bool) -> None:
        """Track a descriptor the caller opened for ``seg`` (whose lock it holds)."""
        seg.fd = fd
        seg.fd_writable = writable
        with self._lock:
            self._lru[seg] = None
            victims = self._pick_victims(seg)
        for victim in victims:
            try:
                self._close_fd(victim)
            finally:
                victim.lock.release()

    def touch(self, seg: Segment) -> None:
        with self._lock:
            if seg in self._lru:
                self._lru.move_to_end(seg)

    def release(self, seg: Segment) -> None:
        """Close ``seg``'s descriptor, if open. The caller holds ``seg.lock``."""
        with self._lock:
            self._lru.pop(seg, None)
        self._close_fd(seg)

    def close_all(self) -> None:
        """Close every descriptor (at shutdown, when nothing else runs)."""
        with self._lock:
            segs = list(self._lru)
            self._lru.clear()
        for seg in segs:
            self._close_fd(seg)

    def _pick_victims(self, keep: Segment) -> list[Segment]:
        """Under self._lock: unlink and return least recently used segments whose lock we took."""
        excess = len(self._lru) - self.capacity
        if excess <= 0:
            return []
        victims = []
        for seg in self._lru:
            if len(victims) >= excess:
                break
            if seg.lock is not keep.lock and seg.lock.acquire(blocking=False):
                victims.append(seg)
        for seg in victims:
            del self._lru[seg]
        return victims

    def _close_fd(self, seg: Segment) -> None:
        fd = seg.fd
        seg.fd = -1
        seg.fd_writable = False
        if fd >= 0:
            try:
                self._fs.close(fd)
            except OSError:
                pass


class IndexCache:
    """LRU, by bytes, of the indexes loaded for inactive segments. Active segments are pinned (not here)."""

    def __init__(self, budget_bytes: int = 64 * 1024 * 1024) -> None:
        self.budget_bytes = budget_bytes
        self._lru: OrderedDict[Segment, int] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    @property
    def total_bytes(self) -> int:
        return self._total

    def add(self, seg: Segment, nbytes: int) -> None:
        with self._lock:
            old = self._lru.pop(seg, None)
            if old is not None:
                self._total -= old
            self._lru[seg] = nbytes
            self._total += nbytes
            while self._total > self.budget_bytes and len(self._lru) > 1:
                victim, size = self._lru.popitem(last=False)
                if victim is seg:
                    self._lru[seg] = size
                    self._lru.move_to_end(seg, last=False)
                    break
                self._total -= size
                victim.oi = None
                victim.ti = None

    def touch(self, seg: Segment) -> None:
        with self._lock:
            if seg in self._lru:
                self._lru.move_to_end(seg)

    def forget(self, seg: Segment) -> None:
        with self._lock:
            size = self._lru.pop(seg, None)
            if size is not None:
                self._total -= size
