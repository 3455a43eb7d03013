"""The file operations the log makes, behind one object so tests can inject torn writes and crashes.

Everything the storage layer does to disk goes through a ``FileSystem``: descriptors (open, pread,
pwrite, pwritev, fsync, ftruncate, close) and names (rename, unlink, directories). The helpers at the bottom
(``read_file``, ``write_file``, ``write_file_atomic``, ``fsync_path``) are built on the primitives,
so a fault injected into ``pwrite``, ``fsync`` or ``rename`` reaches them too.
"""

from __future__ import annotations

import os
import shutil
from typing import NamedTuple, Sequence


class DirEntry(NamedTuple):
    name: str
    is_dir: bool
    size: int


class FileSystem:
    """Plain POSIX files. Subclass and override a primitive to inject faults."""

    # -- descriptors ---------------------------------------------------------------------------

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags | os.O_CLOEXEC, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def pwritev(self, fd: int, buffers: Sequence[bytes | bytearray | memoryview], offset: int) -> int:
        """``buffers`` back to back at ``offset``, one system call. A subclass that overrides
        ``pwrite`` (a test's fault injector) is handed the joined bytes through ``pwrite``
        instead, so it sees the one write it would have seen."""
        if type(self).pwrite is not FileSystem.pwrite:
            return self.pwrite(fd, b"".join(buffers), offset)
        return os.pwritev(fd, buffers, offset)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def fsize(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def sync_all(self) -> None:
        """Flush every dirty page of every file system (``sync(2)``), e.g. before a clean shutdown."""
        os.sync()

    # -- names ---------------------------------------------------------------------------------

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def make_new_dir(self, path: str) -> bool:
        """Create the directory (and its parents) if absent: True when this call created it (it
        is then empty, nothing to read in it), False when it was there."""
        try:
            os.mkdir(path)
        except FileExistsError:
            return False
        except FileNotFoundError:
            self.makedirs(path)
        return True

    def rmtree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def mtime_ms(self, path: str) -> int:
        return os.stat(path).st_mtime_ns // 1_000_000

    def scandir(self, path: str) -> list[DirEntry]:
        out = []
        with os.scandir(path) as it:
            for e in it:
                is_dir = e.is_dir(follow_symlinks=False)
                out.append(DirEntry(e.name, is_dir, 0 if is_dir else e.stat(follow_symlinks=False).st_size))
        return out

    # -- helpers built on the primitives --------------------------------------------------------

    def pwrite_all(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        n = self.pwrite(fd, data, offset)
        total = len(data)
        if n == total:
            return
        mv = memoryview(data)
        while n < total:
            w = self.pwrite(fd, mv[n:], offset + n)
            if w <= 0:
                raise OSError(f"short write: {n} of {total} bytes")
            n += w

    def pwritev_all(self, fd: int, buffers: Sequence[bytes | bytearray | memoryview], offset: int) -> None:
        """:meth:`pwritev`, and the rest of a short write piece by piece."""
        n = self.pwritev(fd, buffers, offset)
        pos = offset
        for b in buffers:
            size = len(b)
            if n >= size:
                n -= size
            else:
                self.pwrite_all(fd, memoryview(b)[n:], pos + n)
                n = 0
            pos += size

    def read_file(self, path: str) -> bytes | None:
        """The whole file, or None if it does not exist."""
        try:
            fd = self.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            size = self.fsize(fd)
            chunks = []
            pos = 0
            while pos < size:
                chunk = self.pread(fd, size - pos, pos)
                if not chunk:
                    break
                chunks.append(chunk)
                pos += len(chunk)
            return b"".join(chunks)
        finally:
            self.close(fd)

    def write_file(self, path: str, data: bytes | bytearray | memoryview, *, sync: bool = False) -> None:
        """Replace the file's contents in place (not atomic: for files recovery can rebuild)."""
        fd = self.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            if data:
                self.pwrite_all(fd, data, 0)
            if sync:
                self.fsync(fd)
        finally:
            self.close(fd)

    def write_file_atomic(self, path: str, data: bytes) -> None:
        """Write a temporary file, fsync it, rename it over ``path`` and fsync the directory."""
        tmp = path + ".tmp"
        self.write_file(tmp, data, sync=True)
        self.rename(tmp, path)
        self.fsync_dir(os.path.dirname(path) or ".")

    def fsync_path(self, path: str) -> bool:
        """fsync a file by name (its dirty pages, whichever descriptor wrote them); False if absent."""
        try:
            fd = self.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            self.fsync(fd)
        finally:
            self.close(fd)
        return True

    def fsync_dir(self, path: str) -> None:
        try:
            fd = self.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            return
        try:
            self.fsync(fd)
        finally:
            self.close(fd)


DEFAULT_FS = FileSystem()
