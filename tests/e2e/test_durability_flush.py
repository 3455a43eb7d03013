"""``log.flush.interval.messages=1`` (issue 10, item 14): fsync before every acknowledgement.

A real broker with the setting: a producer sends acks=all without pause through two SIGKILL
restarts, and every acknowledged record is read back at its offset. kill -9 alone cannot tell
fsync from the page cache (a killed process loses no written data); this checks that the fsync
path acknowledges correctly and loses nothing across crashes. The 12-cycle run and the throughput
cost are in bench/bench_durability.py.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from acked_producer import AckedProducer
from broker_process import BrokerProcess
from e2e_helpers import OP_TIMEOUT, consume, create_topic
from polling import until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def fsync_broker():
    b = BrokerProcess(Path(tempfile.mkdtemp(prefix="shoal-e2e-fsync-")), overrides={"log.flush.interval.messages": "1"})
    b.start()
    yield b
    b.stop()
    shutil.rmtree(b.workdir, ignore_errors=True)


def test_fsync_per_record_loses_nothing_acknowledged_over_kill9_cycles(fsync_broker, topic_name):
    b = fsync_broker
    assert _banner(b), b.log_tail()
    create_topic(b.bootstrap, topic_name)
    with AckedProducer(b.bootstrap, topic_name) as p:
        for _ in range(2):
            assert p.wait_for_more(200, OP_TIMEOUT), f"producer stalled: {p.failed[:3]}"
            b.kill9()
        assert p.wait_for_more(200, OP_TIMEOUT), f"producer did not recover after the restarts: {p.failed[:3]}"
    high = max(p.acked) + 1
    got = consume(b.bootstrap, topic_name, [0], expected=high, timeout=30)
    stored = {m.offset(): m.value() for m in got}
    assert sorted(stored)[:high] == list(range(high)), "offsets are not contiguous from 0"
    lost = p.lost(stored)
    assert not lost, f"{len(lost)} acknowledged records missing or changed, e.g. {sorted(lost.items())[:3]}"


def _banner(b) -> bool:
    """The start-up banner announces fsync per record (it follows readiness by a moment)."""
    return until(lambda: "every acknowledged record is fsynced" in b.log_text(), 10, "the fsync banner",
                 retry=())
