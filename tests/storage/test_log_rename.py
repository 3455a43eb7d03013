"""LogManager.rename_partition (KIP-37 moves) and partition.metadata (topic ids on disk): data,
offsets and producer state survive a rename, and a crash on either side of it loses nothing."""

from __future__ import annotations

import os
import uuid

import pytest

from storage_helpers import T0, Crash, FaultyFS, batch, read_all

from shoal.clock import ManualClock
from shoal.protocol.records import build_batch
from shoal.storage import LogConfig, LogManager


def manager(path, fs=None) -> LogManager:
    m = LogManager(path, clock=ManualClock(T0), fs=fs)
    m.load()
    return m


def idempotent_batch(pid: int, seq: int) -> bytes:
    return build_batch([(T0, b"k", b"v", [])], producer_id=pid, producer_epoch=0, base_sequence=seq)


def test_topic_id_round_trip(tmp_path):
    m = manager(tmp_path)
    m.get_or_create("t", 0)
    tid = uuid.uuid4()
    assert m.read_topic_id("t", 0) is None
    m.write_topic_id("t", 0, tid)
    assert m.read_topic_id("t", 0) == tid
    text = (tmp_path / "t-0" / "partition.metadata").read_text()
    assert text.startswith("version: 0\ntopic_id: ") and "=" not in text  # Kafka's base64 form
    (tmp_path / "t-0" / "partition.metadata").write_text("version: 0\ntopic_id: !!!\n")
    assert m.read_topic_id("t", 0) is None
    assert m.read_topic_id("ghost", 0) is None
    m.close()


def test_rename_keeps_data_offsets_and_producers(tmp_path):
    m = manager(tmp_path)
    log = m.get_or_create("orders", 1, LogConfig(segment_bytes=600))
    for _ in range(5):
        log.append(batch(3), now_ms=T0)
    log.append(idempotent_batch(42, 0), now_ms=T0)
    log.high_watermark = log.log_end_offset
    tid = uuid.uuid4()
    m.write_topic_id("orders", 1, tid)
    before = (read_all(log), log.log_end_offset, log.high_watermark, len(os.listdir(tmp_path / "orders-1")))

    moved = m.rename_partition("orders", "payments:eu:orders", 1)
    assert moved is not None and m.get("orders", 1) is None and m.get("payments:eu:orders", 1) is moved
    assert not (tmp_path / "orders-1").exists() and (tmp_path / "payments:eu:orders-1").is_dir()
    assert (read_all(moved), moved.log_end_offset, moved.high_watermark) == before[:3]
    assert moved.config.segment_bytes == 600  # the log's config, until the broker gives another
    assert m.read_topic_id("payments:eu:orders", 1) == tid
    assert [p.producer_id for p in moved.active_producers()] == [42]
    moved.append(batch(1), now_ms=T0)  # still writable
    m.close()

    m2 = manager(tmp_path)
    assert m2.partitions() == [("payments:eu:orders", 1)]
    again = m2.get("payments:eu:orders", 1)
    assert again.log_end_offset == before[1] + 1 and read_all(again)[: len(before[0])] == before[0]
    m2.close()


def test_rename_refuses_a_taken_name_and_ignores_a_missing_log(tmp_path):
    m = manager(tmp_path)
    m.get_or_create("a", 0).append(batch(1), now_ms=T0)
    m.get_or_create("b", 0)
    with pytest.raises(FileExistsError):
        m.rename_partition("a", "b", 0)
    assert m.get("a", 0).log_end_offset == 1  # untouched
    assert m.rename_partition("ghost", "x", 0) is None
    with pytest.raises(ValueError):
        m.rename_partition("a", "bad/name", 0)
    m.close()


def test_crash_after_the_rename_recovers_under_the_new_name(tmp_path):
    m = manager(tmp_path)
    log = m.get_or_create("t", 0)
    for _ in range(4):
        log.append(batch(2), now_ms=T0)
    m.checkpoint()  # the state file still names "t"
    m.rename_partition("t", "ns:t", 0)
    # no close(): the process dies here; the state file knows nothing of "ns:t"
    m2 = manager(tmp_path)
    assert m2.partitions() == [("ns:t", 0)]
    assert read_all(m2.get("ns:t", 0)) == list(range(8))
    m2.close()


def test_crash_in_the_rename_leaves_the_old_directory_whole(tmp_path):
    fs = FaultyFS()
    m = manager(tmp_path, fs)
    log = m.get_or_create("t", 0)
    log.append(batch(3), now_ms=T0)
    m.write_topic_id("t", 0, uuid.UUID(int=7))
    fs.crash_on_rename = True
    with pytest.raises(Crash):
        m.rename_partition("t", "ns:t", 0)
    fs.bury()  # close what the dead process left open
    m2 = manager(tmp_path)
    assert m2.partitions() == [("t", 0)] and read_all(m2.get("t", 0)) == [0, 1, 2]
    assert m2.read_topic_id("t", 0) == uuid.UUID(int=7)  # what start-up adoption reads
    m2.close()
