"""Partition.append_marker on a leader: the marker is written in the leader epoch, the high
watermark and the purgatories progress as for a produce, and the LSO follows the HW."""

from __future__ import annotations

from test_replica_manager import SOLE, WITH_FOLLOWER, image, rm, wait_out  # noqa: F401 (the fixture)

from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import build_batch, parse_batches
from shoal.storage import ProducerStateError

PID = 4242


def txn(seq: int, epoch: int = 0) -> bytearray:
    return bytearray(build_batch([(0, None, b"v", ())], producer_id=PID, producer_epoch=epoch, base_sequence=seq,
                                 is_transactional=True))


async def test_marker_on_a_sole_leader_commits_at_once(rm) -> None:  # noqa: F811
    rm.publish(image([SOLE]))
    p = rm.leader("t", SOLE)
    p.append_as_leader(txn(0), 0)
    assert (p.high_watermark, p.last_stable_offset) == (1, 0)
    info = p.append_marker(PID, 0, 3, True, 0)
    assert info.base_offset == 1 and p.high_watermark == 2 and p.last_stable_offset == 2
    assert await rm.wait_committed([("t", 0, 2, 1)], 0.01) == {}
    (_pos, h), = parse_batches(p.log.read(1, 1 << 20).records)
    assert h.is_control and h.partition_leader_epoch == SOLE.leader_epoch


async def test_marker_waits_for_the_followers_like_a_produce(rm) -> None:  # noqa: F811
    rm.publish(image([WITH_FOLLOWER]))
    p = rm.leader("t", WITH_FOLLOWER)
    p.append_as_leader(txn(0), 0)
    p.update_follower_fetch(2, 1, 0)
    p.append_marker(PID, 0, 0, False, 0)
    assert (p.log_end_offset, p.high_watermark, p.last_stable_offset) == (2, 1, 0)
    assert await wait_out(rm, [("t", 1, 2, 1)], 0.01) == {("t", 1): ErrorCode.request_timed_out}
    p.update_follower_fetch(2, 2, 0)
    assert (p.high_watermark, p.last_stable_offset) == (2, 2)
    assert p.log.aborted_transactions(0, 2) == [(PID, 0)]


def test_fenced_marker_writes_nothing(rm) -> None:  # noqa: F811
    rm.publish(image([SOLE]))
    p = rm.leader("t", SOLE)
    p.append_as_leader(txn(0, epoch=5), 0)
    try:
        p.append_marker(PID, 4, 0, True, 0)
    except ProducerStateError as e:
        assert e.code == "INVALID_PRODUCER_EPOCH"
    else:
        raise AssertionError("an older epoch was accepted")
    assert p.log_end_offset == 1 and p.last_stable_offset == 0
