"""KIP-320 divergence between a leader's and a follower's logs, decided as the fetch handler (the
leader) and the replica fetcher (the follower) decide it, on real partition logs: the follower
truncates to where both logs agree and, fed the leader's batches from there, ends byte-identical."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from shoal.clock import ManualClock
from shoal.handlers.fetch import _divergence
from shoal.protocol.records import build_batch
from shoal.replica.fetcher import _truncation_offset
from shoal.storage import LogManager


def batch(i: int) -> bytearray:
    return bytearray(build_batch([(0, None, b"v%d" % i, ())]))


def write(plog, epochs: list[int]) -> None:
    """One single-record batch per entry, in the given leader epoch."""
    for i, e in enumerate(epochs):
        plog.append(batch(i), now_ms=0, leader_epoch=e)


def files(d: Path) -> bytes:
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def test_a_follower_with_a_tail_of_a_lost_epoch_truncates_and_converges(tmp_path) -> None:
    clock = ManualClock()
    leader_logs, follower_logs = LogManager(tmp_path / "l", clock=clock), LogManager(tmp_path / "f", clock=clock)
    leader, follower = leader_logs.get_or_create("t", 0), follower_logs.get_or_create("t", 0)
    # both had epoch 0 (offsets 0-4); the follower then led epoch 1 briefly (5-7, never committed),
    # the other broker led epoch 2 from offset 5 and wrote 5-9
    write(leader, [0] * 5 + [2] * 5)
    write(follower, [0] * 5 + [1] * 3)
    fetch_offset, last_epoch = follower.log_end_offset, follower.latest_epoch
    assert (fetch_offset, last_epoch) == (8, 1)
    diverging = _divergence(leader, last_epoch, fetch_offset)
    assert diverging == (0, 5)  # epoch 1 is unknown here: the largest below it, 0, ends at 5
    cut = _truncation_offset(SimpleNamespace(log=follower), *diverging)
    assert cut == 5
    follower.truncate_to(cut)
    assert _divergence(leader, follower.latest_epoch, follower.log_end_offset) is None  # agrees now
    data = leader.read(follower.log_end_offset, 1 << 20, max_offset=leader.log_end_offset).records
    follower.append_as_follower(data, now_ms=0)
    assert follower.log_end_offset == leader.log_end_offset == 10
    assert follower.epoch_entries() == leader.epoch_entries() == [(0, 0), (2, 5)]
    assert files(tmp_path / "f" / "t-0") == files(tmp_path / "l" / "t-0")
    leader_logs.close()
    follower_logs.close()


def test_a_follower_behind_in_the_same_epoch_does_not_diverge(tmp_path) -> None:
    clock = ManualClock()
    logs = LogManager(tmp_path, clock=clock)
    leader = logs.get_or_create("t", 0)
    write(leader, [3] * 6)
    assert _divergence(leader, 3, 4) is None  # it has a prefix of epoch 3: fetch on
    assert _divergence(leader, 3, 6) is None
    assert _divergence(leader, 3, 7) == (3, 6)  # more of epoch 3 than the leader: cut to 6
    assert _divergence(leader, 4, 7) == (3, 6)  # an epoch the leader never had: agree up to its end
    logs.close()
