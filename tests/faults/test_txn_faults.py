"""Exactly once under faults, the CI part (issue 14): a transactional consume-transform-produce
pipeline (``faults.txn_workload``: confluent-kafka consumers in a group, transactional producers,
``send_offsets_to_transaction``) over three real brokers on an etcd of their own, every client link
through a link proxy, while a fixed schedule kill -9s the broker coordinating worker 0's
transactional id, the leader of an output partition, and the group's coordinator (RF=3 topics;
each kill held 1 s, the broker restarted on its data); transactions of at most 5 records, paced
so that the input is not all consumed when the schedule ends (asserted). The input's 600 records, read back with
read_committed from the output, appear exactly once each and in input order per partition, and
the group's committed offsets are the input's ends (``faults.txn_checker``).

A worker whose client call does not return within 45 s (every call has a shorter timeout) is
replaced by the workload's watchdog (its successor fences it); the count is printed. librdkafka
2.16's ``send_offsets_to_transaction`` was seen to block for minutes (its timeout is 30 s) right
after the group coordinator was killed, in 5 of 17 runs (both workers at once in some); the
group then waits for that member (``max.poll.interval.ms``, 20 s here), and without the watchdog
the run never finished.

The longer campaign: ``python bench/bench_txn_faults.py`` (random seeded schedules)."""

from __future__ import annotations

import pytest

from faults.nemesis import Schedule
from faults.txn_checker import table
from faults.txn_workload import TxnRun

pytestmark = pytest.mark.timeout(300)

FIXED = """\
seed=0 op=0 at=1.00 kind=kill target=txn-coordinator hold=1.00 mode=-
seed=0 op=1 at=7.00 kind=kill target=out-leader:1 hold=1.00 mode=-
seed=0 op=2 at=13.00 kind=kill target=group-coordinator hold=1.00 mode=-
"""


def _logs(cluster) -> str:
    return "\n".join(b.log_tail(40) for b in cluster.brokers.values())


def test_pipeline_exactly_once_under_kills(proxied3, fault_etcd):
    c = proxied3
    run = TxnRun(c, fault_etcd, rf=3, partitions=3, records=600, workers=2, batch=5, pause=0.25)
    schedule = Schedule.parse(FIXED)
    try:
        result = run.play(schedule, done_timeout=150)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{_logs(c)}") from None
    pl, nemesis = run.pipeline, run.nemesis
    print(result.summary())
    print(f"left after the faults={run.left_after_faults} commits={pl.commits} wedged={pl.wedged} restarts={len(pl.restarts)}: {[(r.worker, r.reason[:80]) for r in pl.restarts]}")
    print(table([(1, nemesis.faults, result)]))
    assert [e.error for e in nemesis.events] == [""] * len(schedule.ops), nemesis.events
    assert nemesis.faults == 3
    assert result.inputs == 600 and pl.commits > 0
    assert run.left_after_faults, "the pipeline had finished before the last fault: the faults hit nothing"
    assert result.ok, result.summary()
