"""The lag plot's pieces without a broker: the history on an injected clock (kept an hour, per
user and group, groups forgotten an hour after their page was last opened, at most N per user)
and the plot's coordinates."""

from __future__ import annotations

from shoal.console.lag import LagHistory, _nice, plot


def test_history_keeps_an_hour_per_user_and_group():
    now = [0.0]
    h = LagHistory(window_s=3600, max_groups=2, clock=lambda: now[0])
    h.opened("alice", "g", 10)
    assert h.watched() == [("alice", "g")]
    for lag in (8, 6, 4):
        now[0] += 1201
        h.record("alice", "g", lag)
    assert h.samples("alice", "g") == [(1201.0, 8), (2402.0, 6), (3603.0, 4)]  # the first is over an hour old
    assert h.samples("bob", "g") == []
    h.record("alice", "g", None)  # a group not there: no sample
    assert len(h.samples("alice", "g")) == 3
    # over an hour since its page was last opened: no longer sampled, its history dropped
    assert h.watched() == [] and h.samples("alice", "g") == []


def test_at_most_max_groups_per_user():
    h = LagHistory(max_groups=2, clock=lambda: 0.0)
    for g in ("a", "b", "c"):
        h.opened("alice", g, 1)
    h.opened("bob", "a", 1)
    assert sorted(h.watched()) == [("alice", "b"), ("alice", "c"), ("bob", "a")]
    assert h.samples("alice", "a") == [] and h.samples("alice", "c") == [(0.0, 1)]


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
