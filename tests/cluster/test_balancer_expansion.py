"""Automatic expansion (issue 27, part 6) as policy: the capacity model's ratios on a broker's load
report, when the hook runs (only after the utilization stayed above the headroom for the whole
window, once, for ``ceil(load / (1 - headroom))`` brokers), the shrink it recommends and never
below the replication factor; and the hook itself, a real executable run by :class:`Expansion`."""

from __future__ import annotations

import asyncio
import logging
import stat
from pathlib import Path
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.cluster.balancer.expansion import (
    Expansion,
    ExpansionSettings,
    ExpansionWatch,
    broker_use,
    percentile,
    recommended_brokers,
)
from shoal.cluster.load import BrokerCapacity, BrokerReport, LedLoad, decode_report, encode_report
from shoal.metadata import MetadataImage

KB = 1000
S = ExpansionSettings(command="/bin/true", after_ms=60_000, headroom=0.3, wait_ms=600_000,
                      shrink_after_ms=3_600_000)


def report(node: int = 1, bytes_in: float = 0.0, bytes_out: float = 0.0, repl: float = 0.0, busy: float | None = None,
           disk_write: int = 0, network_out: int = 0) -> BrokerReport:
    led = {("t", node): LedLoad(0, bytes_in, bytes_out, repl, 0)}
    return BrokerReport(node, 60_000, BrokerCapacity(0, 0, 0, network_out, disk_write), led, {("t", node): 0}, {},
                        busy=busy)


def test_the_capacity_models_ratios():
    # produce: 100 kB/s in at RF 3 is 300 kB/s of disk writes in the cluster, of 600 kB/s
    use = broker_use(report(bytes_in=100 * KB, disk_write=600 * KB), lambda t, p: 3)
    assert use.produce == pytest.approx(0.5) and use.consume is None and use.requests is None
    assert use.util == pytest.approx(0.5)
    # consume: 200 kB/s to consumers of (1000 - 200 replicating) kB/s of read capacity
    use = broker_use(report(bytes_out=200 * KB, repl=200 * KB, network_out=1000 * KB, busy=0.4), lambda t, p: 3)
    assert use.consume == pytest.approx(0.25) and use.requests == pytest.approx(0.4) and use.util == pytest.approx(0.4)
    # nothing known: no utilization (the broker is left out of the sample)
    assert broker_use(report(bytes_in=5 * KB), lambda t, p: 3).util is None


def test_the_loop_busy_share_survives_the_codec_and_an_older_report_has_none():
    r = report(bytes_in=1.0, busy=0.734512)
    assert decode_report(encode_report(r)).busy == pytest.approx(0.734512)
    assert decode_report(encode_report(report(bytes_in=1.0))).busy is None


def test_percentile_and_recommendation():
    assert percentile([], 95) == 0.0
    assert percentile(list(range(1, 101)), 95) == 95
    assert recommended_brokers(2.4, 0.3, 3) == 4  # 2.4 / 0.7 = 3.43
    assert recommended_brokers(2.1, 0.3, 3) == 3  # exactly 3.0 needs 3
    assert recommended_brokers(0.2, 0.3, 3) == 3  # never below the replication factor
    assert recommended_brokers(0.0, 0.3, 0) == 1


def feed(w: ExpansionWatch, start: int, end: int, per_broker: float, brokers: int = 3, every: int = 10_000) -> None:
    for t in range(start, end + 1, every):
        w.observe(t, {b: per_broker for b in range(1, brokers + 1)}, brokers)


def test_the_hook_runs_only_after_the_whole_window_above_the_line_and_once():
    w = ExpansionWatch()
    feed(w, 0, 50_000, 0.8)  # 50 s of 80% on 3 brokers: hot, not yet for a minute
    d = w.decide(50_000, S, 3, 3)
    assert d.state == "hot" and d.expand_to is None and d.recommended == 4  # 2.4 brokers of load / 0.7
    feed(w, 60_000, 60_000, 0.8)
    d = w.decide(60_000, S, 3, 3)
    assert d.state == "expanding" and d.expand_to == 4 and d.hot_for_ms == 60_000
    w.fired(60_000, 4)
    feed(w, 70_000, 300_000, 0.9)
    assert w.decide(300_000, S, 3, 3).state == "waiting"  # once, while the brokers are awaited
    # the wait is over and the brokers never came: it may run again
    feed(w, 310_000, 700_000, 0.9)
    assert w.decide(700_000, S, 3, 3).expand_to == 4


def test_only_a_sustained_load_expands_not_a_spike_nor_an_interrupted_one():
    w = ExpansionWatch()
    feed(w, 0, 120_000, 0.5)
    assert w.decide(120_000, S, 3, 3).state == "watching"
    # a long quiet time, then a spike: samples span the window, but the window is mostly cold
    feed(w, 130_000, 150_000, 0.9)
    d = w.decide(150_000, S, 3, 3)
    assert d.state == "watching" and d.expand_to is None and d.utilization_p95 == pytest.approx(0.9)
    # a minute of it, sampled every second, with one dip: 60 of 61 above (98%): hot
    w = ExpansionWatch()
    for t in range(0, 61_000, 1000):
        w.observe(t, {1: 0.1 if t == 30_000 else 0.8, 2: 0.8, 3: 0.8}, 3)
    assert w.decide(60_000, S, 3, 3).expand_to == 4
    # ... with a dip in every ten samples (90%): not
    w = ExpansionWatch()
    for t in range(0, 61_000, 1000):
        w.observe(t, {1: 0.1 if t % 10_000 == 0 else 0.8, 2: 0.8, 3: 0.8}, 3)
    assert w.decide(60_000, S, 3, 3).expand_to is None


def test_new_brokers_end_the_run_and_start_a_fresh_window():
    w = ExpansionWatch()
    feed(w, 0, 60_000, 0.8)
    w.fired(60_000, 4)
    feed(w, 70_000, 70_000, 0.6, brokers=4)  # the fourth broker registered: samples start over
    d = w.decide(70_000, S, 4, 3)
    assert d.state == "watching" and w.fired_at_ms is None and len(w.samples) == 1


def test_the_recommendation_counts_the_brokers_there_are():
    w = ExpansionWatch()
    feed(w, 0, 60_000, 0.72, brokers=4)  # 2.88 brokers of load / 0.7 = 4.1 -> 5
    assert w.decide(60_000, S, 4, 3).expand_to == 5


def test_shrink_is_recommended_after_the_shrink_window_and_never_below_rf():
    w = ExpansionWatch()
    feed(w, 0, 3_000_000, 0.2, brokers=6, every=60_000)  # 1.2 brokers of load on 6
    assert w.decide(3_000_000, S, 6, 3).shrink_to is None  # not an hour yet
    feed(w, 3_060_000, 3_600_000, 0.2, brokers=6, every=60_000)
    d = w.decide(3_600_000, S, 6, 3)
    assert d.shrink_to == 3 and d.expand_to is None  # 1.2 / 0.7 -> 2, but RF 3
    busy = ExpansionWatch()
    feed(busy, 0, 3_600_000, 0.6, brokers=6, every=60_000)  # 3.6 brokers of load / 0.7 -> 6: no shrink
    assert busy.decide(3_600_000, S, 6, 3).shrink_to is None


def test_without_a_command_nothing_runs():
    w = ExpansionWatch()
    feed(w, 0, 120_000, 0.95)
    d = w.decide(120_000, ExpansionSettings(command=""), 3, 3)
    assert d.state == "off" and d.expand_to is None and d.recommended == 5


@given(st.lists(st.floats(0, 2), min_size=1, max_size=60), st.floats(0.05, 0.9))
def test_the_recommendation_carries_the_p95_load_with_the_headroom(per_broker, headroom):
    w = ExpansionWatch()
    for i, u in enumerate(per_broker):
        w.observe(i * 10_000, {1: u, 2: u, 3: u}, 3)
    now = (len(per_broker) - 1) * 10_000
    s = ExpansionSettings(command="x", after_ms=10**9, headroom=headroom)
    d = w.decide(now, s, 3, 3)
    load = percentile([3 * u for u in per_broker], 95)
    assert d.recommended >= 3 and d.recommended * (1 - headroom) >= load - 1e-6
    assert d.recommended == 3 or (d.recommended - 1) * (1 - headroom) < load + 1e-6


# -- the hook, run for real ------------------------------------------------------------------------


class Reports:
    def __init__(self) -> None:
        self.load = None

    def set(self, per_broker: float) -> None:
        from shoal.cluster.load import ClusterLoad

        self.load = ClusterLoad({b: report(b, busy=per_broker) for b in (1, 2, 3)})


EMPTY: MappingProxyType = MappingProxyType({})
IMAGE = MetadataImage("c", 1, EMPTY, EMPTY, EMPTY, EMPTY)


def hook(tmp_path: Path, body: str) -> str:
    path = tmp_path / "expand.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


async def drive(exp: Expansion, reports: Reports, clock: list[int], until_ms: int, util: float) -> dict:
    status: dict = {}
    while clock[0] <= until_ms:
        reports.set(util)
        status = exp.step(IMAGE, 3)
        clock[0] += 10_000
    await asyncio.sleep(0)
    return status


async def test_the_hook_runs_once_with_the_counts_and_its_output_is_in_the_status(tmp_path, caplog):
    out = tmp_path / "asked"
    cmd = hook(tmp_path, f'echo "$1 $2 $SHOAL_RECOMMENDED_BROKERS" >> {out}\necho provisioning one broker\n')
    reports, clock = Reports(), [0]
    exp = Expansion(lambda: reports.load, lambda: ExpansionSettings(command=cmd, after_ms=60_000), lambda: clock[0])
    caplog.set_level(logging.INFO, "shoal.cluster.balancer")
    await drive(exp, reports, clock, 200_000, 0.85)
    for _ in range(100):
        if exp.hook and exp.hook.exit is not None:
            break
        await asyncio.sleep(0.05)
    assert out.read_text() == "3 4 4\n"  # once: 2.55 brokers of load / 0.7 -> 4
    status = exp.status()
    assert status["state"] == "waiting" and status["hook"]["exit"] == 0
    assert "provisioning one broker" in status["hook"]["output"]
    assert any("expansion hook exited 0" in r.getMessage() for r in caplog.records)
    await exp.stop()


async def test_a_failing_or_missing_hook_is_one_error_line(tmp_path, caplog):
    caplog.set_level(logging.INFO, "shoal.cluster.balancer")
    for cmd, said in ((hook(tmp_path, "echo no quota left in the region >&2\nexit 3\n"), "exited 3"),
                      (str(tmp_path / "missing"), "could not run")):
        caplog.clear()
        reports, clock = Reports(), [0]
        exp = Expansion(lambda: reports.load, lambda: ExpansionSettings(command=cmd, after_ms=60_000), lambda: clock[0])
        await drive(exp, reports, clock, 100_000, 0.9)
        for _ in range(100):
            if exp.hook and exp.hook.exit is not None:
                break
            await asyncio.sleep(0.05)
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and said in errors[0].getMessage() and not errors[0].exc_info
        assert exp.status()["hook"]["exit"] != 0
        await exp.stop()
