"""Exclusive locks on the directories a broker writes, as Kafka's ``.lock`` in each log dir.

A broker takes them first at start-up, before it reads or writes anything else there, and holds
them until it stops. A second process pointed at a directory in use is refused
(``DirInUse``: the directory and the holder's pid, in one line) having changed nothing: it only
opened the existing ``.lock``, without truncating it. A directory that cannot be created or
written is refused the same way (``DirUnusable``), so an unwritable log dir is reported before
anything half-starts.

The lock is ``flock(LOCK_EX | LOCK_NB)`` on ``<dir>/.lock``, which also holds the holder's pid
(written after the lock is taken, read only for the refusal's message). ``flock`` belongs to the
open file, so the kernel drops it when the holder dies, kill -9 included: a ``.lock`` left behind
locks nothing. The descriptor is close-on-exec, so a child process never keeps a lock alive.
Locks are per open file, not per process: a second ``DirLock`` on one directory in the same process
is refused too (as a test running two ``Broker`` objects on one directory would be).

Each log dir also names its owner in ``meta.properties`` (Kafka's file: ``node.id``, ``cluster.id``,
``version=1``), written once the broker has started (``record_owner``). Right after the lock, before
anything else is read, ``check_owner`` refuses a directory written by another node id
(``DirOfAnotherNode``), which on a cluster would otherwise be taken for this node's replicas.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterable
from pathlib import Path

LOCK_FILE = ".lock"  # Kafka's name (LogManager.LockFileName)
META_FILE = "meta.properties"  # Kafka's name (MetaPropertiesEnsemble.META_PROPERTIES_NAME)


class DirLockError(Exception):
    """A directory the broker needs cannot be locked. ``str()`` is the one line for the operator."""

    def __init__(self, directory: str, message: str) -> None:
        super().__init__(message)
        self.directory = directory


class DirInUse(DirLockError):
    """Another process (``pid``, ``None`` if unknown) holds the directory's lock."""

    def __init__(self, directory: str, pid: int | None, what: str) -> None:
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(
            directory,
            f"{what} {directory} is in use by {holder} (it holds {os.path.join(directory, LOCK_FILE)}): "
            "stop that broker first, or give this one its own directory (log.dirs, --log-dirs)",
        )
        self.pid = pid


class DirUnusable(DirLockError):
    """The directory cannot be created, or this process cannot write in it."""

    def __init__(self, directory: str, error: OSError, what: str) -> None:
        reason = error.strerror or str(error)
        if isinstance(error, FileExistsError) or error.errno == errno.ENOTDIR:
            blocker = _file_in_the_way(directory)
            problem = f"cannot create {what} {directory}: {blocker} is a file, not a directory"
            fix = "remove that file or point log.dirs (--log-dirs) at another directory"
        else:
            problem = f"cannot write {what} {directory}: {reason}"
            fix = (
                f"make it writable by this user (uid {os.getuid()}), mount it read-write, "
                "or point log.dirs (--log-dirs) at another directory"
            )
        super().__init__(directory, f"{problem}: {fix}")
        self.error = error


def _file_in_the_way(directory: str) -> str:
    """The path itself or its first ancestor that exists and is not a directory."""
    path = Path(directory).absolute()
    for p in [*reversed(path.parents), path]:
        if p.exists() and not p.is_dir():
            return str(p)
    return str(path)


def _holder_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        pid = int(text)
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)  # a pid the holder has not yet overwritten may be a previous holder's
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


class DirLock:
    """The held lock of one directory; ``release`` (or the process's death) lets it go."""

    def __init__(self, directory: str, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: str | os.PathLike[str], what: str = "log dir") -> "DirLock":
        """Create ``directory`` if missing, then take its lock, or raise ``DirLockError``.
        ``what`` names the directory in messages ("log dir", "metadata dir")."""
        d = os.fspath(directory)
        try:
            os.makedirs(d, exist_ok=True)
            fd = os.open(os.path.join(d, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise DirUnusable(d, e, what) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder_pid(fd)
            os.close(fd)
            raise DirInUse(d, pid, what) from None
        except OSError as e:
            os.close(fd)
            raise DirUnusable(d, e, what) from e
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as e:  # locked but not writable: this directory will not take our data either
            os.close(fd)
            raise DirUnusable(d, e, what) from e
        return cls(d, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Let the lock go (the ``.lock`` file stays, as Kafka's does). Idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class DirLocks:
    """The locks of every directory a broker writes: all taken, or none held."""

    def __init__(self, locks: list[DirLock]) -> None:
        self.locks = locks

    @classmethod
    def acquire(cls, directories: Iterable[tuple[str | os.PathLike[str], str]]) -> "DirLocks":
        """Lock each ``(directory, what)`` in order, each directory once; on a refusal release
        those already taken and raise it."""
        locks: list[DirLock] = []
        seen: set[str] = set()
        try:
            for directory, what in directories:
                key = os.path.realpath(os.fspath(directory))
                if key in seen:
                    continue
                seen.add(key)
                locks.append(DirLock.acquire(directory, what))
        except BaseException:
            for lock in locks:
                lock.release()
            raise
        return cls(locks)

    def release(self) -> None:
        for lock in self.locks:
            lock.release()


class DirOfAnotherNode(DirLockError):
    """The log dir's ``meta.properties`` names another node id."""

    def __init__(self, directory: str, owner: int, node_id: int) -> None:
        super().__init__(
            directory,
            f"log dir {directory} was written by node {owner} ({os.path.join(directory, META_FILE)}), "
            f"this is node {node_id}: start this broker with --node-id {owner} (node.id), "
            "or point log.dirs (--log-dirs) at another directory",
        )
        self.owner = owner


class DirOfNewerRelease(DirLockError):
    """The log dir's ``meta.properties`` is of a version this release does not read."""

    def __init__(self, directory: str, version: str) -> None:
        super().__init__(
            directory,
            f"log dir {directory} has a meta.properties of version {version} "
            f"({os.path.join(directory, META_FILE)}), this broker reads versions 0 and 1: a newer release "
            "wrote it; run that release",
        )


def read_meta_properties(directory: str | os.PathLike[str]) -> dict[str, str]:
    """The ``key=value`` lines of ``<directory>/meta.properties`` (empty when there is none)."""
    try:
        text = (Path(directory) / META_FILE).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def check_owner(directories: Iterable[str | os.PathLike[str]], node_id: int) -> None:
    """Raise ``DirOfAnotherNode`` for the first directory whose ``meta.properties`` names another
    node id (a file without a number there names no one), ``DirOfNewerRelease`` for one of a
    version this release does not read."""
    for d in directories:
        meta = read_meta_properties(d)
        if meta.get("version", "1") not in ("0", "1"):  # Kafka's: 0 (ZooKeeper) and 1 (KRaft)
            raise DirOfNewerRelease(os.fspath(d), meta["version"])
        owner = meta.get("node.id", "")
        if owner.lstrip("-").isdigit() and int(owner) != node_id:
            raise DirOfAnotherNode(os.fspath(d), int(owner), node_id)


def record_owner(directories: Iterable[str | os.PathLike[str]], node_id: int, cluster_id: str) -> None:
    """Write each directory's ``meta.properties`` (atomically) unless it already says this."""
    want = {"cluster.id": cluster_id, "node.id": str(node_id), "version": "1"}
    for d in directories:
        if read_meta_properties(d) == want:
            continue
        path = Path(d) / META_FILE
        tmp = path.with_name(META_FILE + ".tmp")
        tmp.write_text("#Written by Shoal: the node and cluster this log dir belongs to\n"
                       + "".join(f"{k}={v}\n" for k, v in want.items()), encoding="utf-8")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
