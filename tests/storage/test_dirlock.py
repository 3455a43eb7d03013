"""``shoal.storage.dirlock``: one holder per directory, refusals that change nothing, all or none."""

from __future__ import annotations

import os

import pytest

from shoal.storage.dirlock import (
    LOCK_FILE, DirInUse, DirLock, DirLocks, DirOfAnotherNode, DirUnusable, check_owner, read_meta_properties,
    record_owner,
)


def test_lock_creates_the_directory_and_names_its_holder(tmp_path) -> None:
    d = tmp_path / "a" / "b"
    lock = DirLock.acquire(d)
    assert lock.held and (d / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    before = (d / LOCK_FILE).read_bytes()
    with pytest.raises(DirInUse) as e:  # flock is per open file: the same process is refused too
        DirLock.acquire(d, "metadata dir")
    assert e.value.pid == os.getpid() and e.value.directory == str(d)
    assert str(e.value).startswith(f"metadata dir {d} is in use by process {os.getpid()} (it holds {d / LOCK_FILE})")
    assert (d / LOCK_FILE).read_bytes() == before  # the refusal wrote nothing
    lock.release()
    lock.release()  # idempotent
    assert not lock.held
    DirLock.acquire(d).release()


def test_a_stale_pid_is_not_named(tmp_path) -> None:
    lock = DirLock.acquire(tmp_path)
    (tmp_path / LOCK_FILE).write_text("999999999\n")  # no such process
    with pytest.raises(DirInUse) as e:
        DirLock.acquire(tmp_path)
    assert e.value.pid is None and "in use by another process" in str(e.value)
    lock.release()


def test_unusable_directories(tmp_path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(DirUnusable) as e:
        DirLock.acquire(tmp_path / "file" / "data")
    assert str(e.value).startswith(f"cannot create log dir {tmp_path}/file/data: {tmp_path}/file is a file")
    with pytest.raises(DirUnusable) as e:
        DirLock.acquire(tmp_path / "file")
    assert f"{tmp_path}/file is a file, not a directory" in str(e.value)


def test_all_or_none(tmp_path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    held = DirLock.acquire(b)
    with pytest.raises(DirInUse):
        DirLocks.acquire([(a, "log dir"), (b, "log dir"), (c, "log dir")])
    assert not (c / LOCK_FILE).exists()  # stopped at the first refusal
    DirLock.acquire(a).release()  # ... and let go of what it had taken
    held.release()
    # one directory spelt twice is locked once, not refused by itself
    both = DirLocks.acquire([(a, "log dir"), (tmp_path / "x" / ".." / "a", "metadata dir")])
    assert len(both.locks) == 1
    both.release()
    DirLock.acquire(a).release()


def test_a_log_dir_names_its_node(tmp_path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    check_owner([a, b], 2)  # no meta.properties yet: no one's
    record_owner([a, b], 1, "clusterA")
    assert read_meta_properties(a) == {"cluster.id": "clusterA", "node.id": "1", "version": "1"}
    check_owner([a, b], 1)
    with pytest.raises(DirOfAnotherNode) as e:
        check_owner([a, b], 2)
    assert str(e.value) == (f"log dir {a} was written by node 1 ({a}/meta.properties), this is node 2: start "
                            "this broker with --node-id 1 (node.id), or point log.dirs (--log-dirs) at another directory")
    # Kafka writes the same keys (a comment line with the date first)
    (b / "meta.properties").write_text("#\n#Wed Nov 25 14:00:00 UTC 2026\nnode.id=3\nversion=1\ncluster.id=k\n")
    with pytest.raises(DirOfAnotherNode) as e:
        check_owner([b], 1)
    assert e.value.owner == 3
