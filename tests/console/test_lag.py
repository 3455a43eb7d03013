"""The lag plot's pieces without a broker: the history on an injected clock (kept an hour per
group, a group with no sample for an hour dropped), the session sampler's watch list (per user
and group, forgotten an hour after the page was last opened, at most N per user) and the plot's
coordinates. The cluster sampler runs for real in tests/console/test_console_tenant_admin.py."""

from __future__ import annotations

from shoal.console.lag import LagHistory, SessionSampler, _nice, plot


class _Session:
    def __init__(self, user: str) -> None:
        self.user = user


def test_history_keeps_an_hour_per_key():
    now = [0.0]
    h = LagHistory(window_s=3600, clock=lambda: now[0])
    h.record("lkc-aaaaaa_g", 10)
    for lag in (8, 6, 4):
        now[0] += 1201
        h.record("lkc-aaaaaa_g", lag)
    assert h.samples("lkc-aaaaaa_g") == [(1201.0, 8), (2402.0, 6), (3603.0, 4)]  # the first is over an hour old
    assert h.samples("lkc-bbbbbb_g") == []
    h.record("lkc-aaaaaa_g", None)  # a group not there: no sample
    assert len(h.samples("lkc-aaaaaa_g")) == 3
    h.record("gone", 1)
    now[0] += 3601
    h.record("lkc-aaaaaa_g", 0)
    h.prune()  # a group with no sample in the last hour (deleted) is dropped
    assert len(h) == 1 and h.samples("gone") == []


def test_the_session_sampler_keeps_an_hour_per_user_and_group():
    now = [0.0]
    s = SessionSampler(None, window_s=3600, max_groups=2, clock=lambda: now[0])  # type: ignore[arg-type]
    assert s.opened(_Session("alice"), "g", "g", 10) == [(0.0, 10)]
    assert s.watched() == [("alice", "g")]
    for lag in (8, 6, 4):
        now[0] += 1201
        s.history.record(("alice", "g"), lag)
    assert s.history.samples(("alice", "g")) == [(1201.0, 8), (2402.0, 6), (3603.0, 4)]
    assert s.opened(_Session("bob"), "g", "g", 1) == [(3603.0, 1)]  # per user
    # over an hour since alice last opened it: no longer sampled, her history dropped
    now[0] += 3601
    assert s.watched() == [] and s.history.samples(("alice", "g")) == []


def test_the_session_sampler_keeps_at_most_max_groups_per_user():
    s = SessionSampler(None, max_groups=2, clock=lambda: 0.0)  # type: ignore[arg-type]
    for g in ("a", "b", "c"):
        s.opened(_Session("alice"), g, g, 1)
    s.opened(_Session("bob"), "a", "a", 1)
    assert sorted(s.watched()) == [("alice", "b"), ("alice", "c"), ("bob", "a")]
    assert s.history.samples(("alice", "a")) == [] and s.history.samples(("alice", "c")) == [(0.0, 1)]


def test_plot_coordinates():
    p = plot([(0.0, 0), (1800.0, 37), (3600.0, 100)], now=3600.0, window_s=3600, width=720, height=160)
    assert p.top == 100 and p.last == 100 and p.samples == 3 and p.span_min == 60
    assert p.points == "0.0,160.0 360.0,100.8 720.0,0.0"
    # a history of 7 minutes is drawn over the last 10
    p = plot([(3180.0, 20), (3600.0, 0)], now=3600.0, window_s=3600, width=600, height=100)
    assert p.span_min == 10 and p.points == "180.0,0.0 600.0,100.0"
    assert plot([(3599.0, 1)], now=3600.0).span_min == 5
    assert plot([], now=0.0).points == "" and plot([], now=0.0).top == 1
    assert plot([(100.0, 5)], now=0.0).points.startswith("720.0,")  # a sample from "the future" is drawn at now
    assert [_nice(v) for v in (0, 1, 2, 3, 7, 10, 11, 180, 999, 5001)] == [1, 1, 2, 5, 10, 10, 20, 200, 1000, 10000]
