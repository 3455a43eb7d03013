"""A hosted partition's load counters (``Partition.bytes_in`` / ``bytes_out`` /
``bytes_replicated``, read by shoal.cluster.load): appended as leader, sent to consumers, sent to
followers, each counted once per Fetch answer (``shoal.replica.read.count_sent``). With real
brokers and clients: tests/cluster/test_load_cluster.py."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from shoal.replica.read import count_sent, read_from_log
from test_replica_manager import WITH_FOLLOWER, batch, image, rm  # noqa: F401  (fixture)

LED = dataclasses.replace(WITH_FOLLOWER, partition=0)  # the image's topic lists partitions by index
KEY = ("t", 0)


def target(offset: int = 0) -> SimpleNamespace:
    return SimpleNamespace(fetch_offset=offset, max_bytes=1 << 20, current_leader_epoch=-1, last_fetched_epoch=-1)


def test_counters(rm) -> None:  # noqa: F811
    rm.publish(image([LED]))
    p = rm.leader("t", LED)
    assert (p.bytes_in, p.bytes_out, p.bytes_replicated) == (0, 0, 0)
    records = [batch(3), batch(5)]
    for r in records:
        p.append_as_leader(r, 0)
    appended = sum(len(r) for r in records)
    assert p.bytes_in == appended
    # the follower fetches everything; the high watermark follows, then a consumer reads it
    results, total, _ = read_from_log(rm, {KEY: target()}, 1 << 20, True)
    assert total == appended and p.bytes_replicated == 0  # not counted until answered
    count_sent(results, follower=True)
    assert p.bytes_replicated == appended and p.bytes_out == 0
    p.update_follower_fetch(2, p.log_end_offset, 0)
    assert p.high_watermark == p.log_end_offset
    results, total, _ = read_from_log(rm, {KEY: target()}, 1 << 20, False)
    read_from_log(rm, {KEY: target()}, 1 << 20, False)  # a read the fetch did not answer with
    count_sent(results, follower=False)
    assert p.bytes_out == total == appended and p.bytes_replicated == appended
    # nothing to read: nothing counted
    count_sent(read_from_log(rm, {KEY: target(p.log_end_offset)}, 1 << 20, False)[0], follower=False)
    assert (p.bytes_in, p.bytes_out, p.bytes_replicated) == (appended, appended, appended)
