"""KIP-320 divergence between a leader's and a follower's logs, decided as the fetch handler (the
leader) and the replica fetcher (the follower) decide it, on real partition logs: the follower
truncates to where both logs agree and, fed the leader's batches from there, ends byte-identical."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from shoal.clock import ManualClock
from shoal.replica.read import divergence
from shoal.protocol.records import build_batch
from shoal.replica.fetcher import _truncation_offset
from shoal.storage import LogManager
from test_replica_manager import FOLLOWING, image, rm  # noqa: F401  (fixture)


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
    diverging = divergence(leader, last_epoch, fetch_offset)
    assert diverging == (0, 5)  # epoch 1 is unknown here: the largest below it, 0, ends at 5
    cut = _truncation_offset(SimpleNamespace(log=follower), *diverging)
    assert cut == 5
    follower.truncate_to(cut)
    assert divergence(leader, follower.latest_epoch, follower.log_end_offset) is None  # agrees now
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
    assert divergence(leader, 3, 4) is None  # it has a prefix of epoch 3: fetch on
    assert divergence(leader, 3, 6) is None
    assert divergence(leader, 3, 7) == (3, 6)  # more of epoch 3 than the leader: cut to 6
    assert divergence(leader, 4, 7) == (3, 6)  # an epoch the leader never had: agree up to its end
    logs.close()


def test_an_empty_epoch_at_the_log_end_is_dropped_and_the_logs_agree(tmp_path) -> None:
    """The follower led epoch 1 at its log end (5) and wrote nothing; the old leader came back
    with epoch 2. The leader answers that the follower's epoch 1 diverges at 5, its log end:
    truncating there cuts nothing but must drop the empty epoch, after which the logs agree."""
    clock = ManualClock()
    leader_logs, follower_logs = LogManager(tmp_path / "l", clock=clock), LogManager(tmp_path / "f", clock=clock)
    leader, follower = leader_logs.get_or_create("t", 0), follower_logs.get_or_create("t", 0)
    write(leader, [0] * 5)
    write(follower, [0] * 5)
    follower.assign_epoch_start_offset(1)
    leader.assign_epoch_start_offset(2)
    diverging = divergence(leader, follower.latest_epoch, follower.log_end_offset)
    assert diverging == (0, 5)
    cut = _truncation_offset(SimpleNamespace(log=follower), *diverging)
    assert cut == 5 == follower.log_end_offset
    follower.truncate_to(cut)
    assert follower.latest_epoch == 0
    assert divergence(leader, follower.latest_epoch, follower.log_end_offset) is None
    leader_logs.close()
    follower_logs.close()


def test_the_same_divergence_without_progress_backs_off_and_is_said_once(rm, caplog) -> None:  # noqa: F811
    """A leader that keeps answering a divergence the follower has already acted on (its log
    where the last answer left it) is not asked again at once: the partition waits
    ``replica.fetch.backoff.ms`` and one warning says why, however often it repeats."""
    import logging

    from shoal.replica.fetcher import ReplicaFetcher, _Fetching

    rm.publish(image([FOLLOWING]))
    part = rm.partition("t", FOLLOWING.partition)
    write(part.log, [0] * 5)
    fetcher = ReplicaFetcher(rm.fetchers, FOLLOWING.leader, 0)
    f = fetcher.partitions[part.key] = _Fetching(part, 0)
    with caplog.at_level(logging.INFO, logger="shoal.replica.fetcher"):
        fetcher._diverged(f, 0, 5, retry_at=10.0)  # acted on: truncate to 5 (nothing to cut)
        f = fetcher.partitions[part.key]
        assert f.delayed_until == 0.0 and not f.stuck
        for _ in range(5):
            fetcher._diverged(f, 0, 5, retry_at=20.0)
    assert f.stuck and f.delayed_until == 20.0
    said = [r for r in caplog.records if "truncating made no progress" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert sum("log diverges from leader" in r.getMessage() for r in caplog.records) == 1
