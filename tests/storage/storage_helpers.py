"""Helpers for the storage tests: batches, decoding, and a file layer that tears writes and crashes."""

from __future__ import annotations

import os

from shoal.protocol.records import build_batch, iter_records
from shoal.storage import FileSystem

T0 = 1_700_000_000_000


def batch(n: int = 1, *, ts: int = T0, value_size: int = 50, compression: int = 0, tag: bytes = b"") -> bytes:
    """A client batch of ``n`` records with timestamps ts, ts+1, ..."""
    return build_batch(
        [(ts + i, b"k%d" % i, tag + bytes([i % 251]) * value_size, [("h", b"x")]) for i in range(n)],
        compression=compression,
    )


def offsets(records: bytes) -> list[int]:
    return [r.offset for r in iter_records(records)]


def read_all(log, start: int | None = None) -> list[int]:
    """Every offset readable from ``start`` (default: the log start) to the log end, in order."""
    out: list[int] = []
    pos = log.log_start_offset if start is None else start
    while pos < log.log_end_offset:
        info = log.read(pos, 1 << 20)
        got = offsets(info.records)
        assert got, f"nothing read at {pos}"
        out.extend(o for o in got if o >= pos)
        pos = got[-1] + 1
    return out


class Crash(BaseException):
    """The simulated process death (BaseException: nothing in the log may swallow it)."""


class FaultyFS(FileSystem):
    """Real files, but the ``fail_at``-th write (counting pwrites from now) writes only
    ``torn_bytes`` of its data and then the "process dies": that call and every later file
    operation raise Crash. ``enospc_at`` instead makes that write fail with ENOSPC after writing
    ``torn_bytes`` (a clean error the log must survive). Descriptors are tracked so a test can
    close what the dead process left open."""

    def __init__(self) -> None:
        self.writes = 0
        self.fail_at: int | None = None
        self.enospc_at: int | None = None
        self.torn_bytes = 0
        self.crash_on_rename = False
        self.crash_on_fsync = False
        self.dead = False
        self.open_fds: set[int] = set()
        self.reads: list[str] = []
        self._paths: dict[int, str] = {}

    def _check(self) -> None:
        if self.dead:
            raise Crash("the process is dead")

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        self._check()
        fd = super().open(path, flags, mode)
        self.open_fds.add(fd)
        self._paths[fd] = path
        return fd

    def close(self, fd: int) -> None:
        self.open_fds.discard(fd)
        self._paths.pop(fd, None)
        super().close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self._check()
        self.reads.append(self._paths.get(fd, "?"))
        return super().pread(fd, size, offset)

    def pwrite(self, fd, data, offset) -> int:
        self._check()
        self.writes += 1
        if self.fail_at is not None and self.writes == self.fail_at:
            if self.torn_bytes:
                super().pwrite(fd, memoryview(data)[: self.torn_bytes], offset)
            self.dead = True
            raise Crash(f"crashed in write {self.writes}")
        if self.enospc_at is not None and self.writes == self.enospc_at:
            if self.torn_bytes:
                super().pwrite(fd, memoryview(data)[: self.torn_bytes], offset)
            raise OSError(28, "No space left on device (simulated)")
        return super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        self._check()
        if self.crash_on_fsync:
            self.dead = True
            raise Crash("crashed in fsync")
        super().fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        self._check()
        super().ftruncate(fd, size)

    def rename(self, src: str, dst: str) -> None:
        self._check()
        if self.crash_on_rename:
            self.dead = True
            raise Crash("crashed in rename")
        super().rename(src, dst)

    def unlink(self, path: str) -> None:
        self._check()
        super().unlink(path)

    def sync_all(self) -> None:
        self._check()
        super().sync_all()

    def bury(self) -> None:
        """Close every descriptor the dead process held (the kernel would)."""
        for fd in list(self.open_fds):
            try:
                os.close(fd)
            except OSError:
                pass
        self.open_fds.clear()
