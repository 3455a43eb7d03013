"""shoal.server.scheduler: deficit round robin with costs charged after service (exact examples
and Hypothesis properties), and the loop wiring on a fake clock."""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.server.scheduler import MIN_WEIGHT, DeficitRoundRobin, RequestScheduler


def serve(drr: DeficitRoundRobin, cost, n: int, now: float = 0.0, refill: bool = True) -> list:
    """Pop ``n`` items (or until empty), charging ``cost(key, item)``; with ``refill`` the
    flow gets its item back first (a backlogged flow)."""
    out = []
    for _ in range(n):
        if not drr:
            break
        key, item = drr.pop(now)
        out.append((key, item))
        if refill:
            drr.push(key, item)
        drr.charge(key, cost(key, item))
    return out


# -- exact examples -----------------------------------------------------------------------------------


def test_a_flow_alone_is_served_back_to_back_in_order() -> None:
    drr: DeficitRoundRobin[str, int] = DeficitRoundRobin(quantum=10)
    for i in range(5):
        drr.push("a", i)
    assert [item for _k, item in serve(drr, lambda k, i: 100, 10, refill=False)] == [0, 1, 2, 3, 4]
    assert not drr and len(drr) == 0


def test_costs_are_charged_after_service() -> None:
    """Quantum 10: a gets cost-3 items served while its deficit is positive (10, 7, 4, 1 -> 4
    items, deficit -2), then b's cost-7 items (10, 3 -> 2 items, -4), then a again (+10 = 8:
    3 items, -1), b (+10 = 6: 1 item, -1) ... A flow gets its next quantum as it goes to the
    back of the round (a: -1 + 10)."""
    drr: DeficitRoundRobin[str, str] = DeficitRoundRobin(quantum=10)
    drr.push("a", "x")
    drr.push("b", "y")
    order = "".join(k for k, _ in serve(drr, lambda k, i: 3 if k == "a" else 7, 10))
    assert order == "aaaabbaaab"
    assert drr.deficit("a") == 9 and drr.deficit("b") == -1


def test_many_connections_of_one_tenant_share_its_one_flow() -> None:
    """The flow is the tenant: 200 queued connections of a get no more turns than b's one."""
    drr: DeficitRoundRobin[str, int] = DeficitRoundRobin(quantum=5)
    for c in range(200):
        drr.push("a", c)
    drr.push("b", -1)
    served = serve(drr, lambda k, i: 5, 40)
    assert [k for k, _ in served].count("b") == 20


def test_weights_split_the_cost() -> None:
    drr: DeficitRoundRobin[str, int] = DeficitRoundRobin(quantum=10)
    drr.push("light", 0, weight=0.2)
    drr.push("heavy", 0, weight=1.0)
    served = serve(drr, lambda k, i: 1, 1200)
    light = sum(1 for k, _ in served if k == "light")
    assert light == 200  # 2 per round of 12


def test_a_held_flow_waits_behind_the_others_and_only_then() -> None:
    drr: DeficitRoundRobin[str, int] = DeficitRoundRobin(quantum=1)
    drr.push("noisy", 0)
    drr.push("victim", 0)
    drr.hold("noisy", until=100.0)
    # while held: only the victim, as long as it has work
    assert {k for k, _ in serve(drr, lambda k, i: 1, 5, now=50.0)} == {"victim"}
    # the victim has nothing left: the held flow is served anyway (work-conserving)
    drr.pop(50.0)
    drr.charge("victim", 1)
    assert serve(drr, lambda k, i: 1, 3, now=60.0) == [("noisy", 0)] * 3
    # the hold is over: round robin again
    drr.push("victim", 0)
    assert sorted(k for k, _ in serve(drr, lambda k, i: 1, 4, now=100.0)) == ["noisy"] * 2 + ["victim"] * 2


def test_a_debt_outlives_an_empty_queue_while_busy_and_is_forgiven_when_idle() -> None:
    drr: DeficitRoundRobin[str, int] = DeficitRoundRobin(quantum=10)
    drr.push("a", 0)
    drr.push("b", 0)
    key, _ = drr.pop()
    assert key == "a"
    drr.charge("a", 35)  # a empties with a debt of 25 (deficit 10 - 35)
    drr.push("a", 1)
    assert drr.deficit("a") == -25
    # a's debt takes 3 quanta, one per round: b is served its credit and 3 rounds before a
    assert [k for k, _ in serve(drr, lambda k, i: 10, 5)] == ["b", "b", "b", "b", "a"]
    # everything drains: debts forgotten
    while drr:
        k, _ = drr.pop()
        drr.charge(k, 50)
    assert drr.deficit("a") == 0 and drr.deficit("b") == 0


def test_pop_from_empty_raises() -> None:
    with pytest.raises(IndexError):
        DeficitRoundRobin(1).pop()
    with pytest.raises(ValueError):
        DeficitRoundRobin(0)


# -- properties -------------------------------------------------------------------------------------

flows = st.lists(
    st.tuples(st.floats(0.05, 4.0), st.lists(st.integers(1, 50), min_size=1, max_size=8)),
    min_size=1, max_size=6,
)


def backlogged(spec, quantum: int, n: int):
    """Serve flows that stay backlogged (flow i: weight and a cycle of item costs) ``n`` times;
    yields ``(key, cost)`` per item served. ``.weights`` and ``.max_cost`` on the returned
    object."""

    class Run:
        weights = {i: max(w, MIN_WEIGHT) for i, (w, _c) in enumerate(spec)}
        max_cost = max(max(c) for _w, c in spec)

        def __iter__(self):
            drr: DeficitRoundRobin[int, int] = DeficitRoundRobin(quantum)
            for i, (w, _c) in enumerate(spec):
                drr.push(i, i, weight=w)
            nth = [0] * len(spec)
            for _ in range(n):
                key, item = drr.pop()
                costs = spec[key][1]
                cost = costs[nth[key] % len(costs)]
                nth[key] += 1
                drr.push(key, item)
                drr.charge(key, cost)
                yield key, cost

    return Run()


@settings(max_examples=150, deadline=None)
@given(flows, st.integers(1, 40), st.integers(50, 600))
def test_backlogged_flows_get_cost_in_proportion_to_weight(spec, quantum, n) -> None:
    """|served_i / w_i - served_j / w_j| <= 2 quantum + max cost / min weight, at every step."""
    run = backlogged(spec, quantum, n)
    served = {i: 0.0 for i in run.weights}
    bound = 2 * quantum + run.max_cost / min(run.weights.values()) + 1e-9
    for key, cost in run:
        served[key] += cost
        norm = [served[i] / run.weights[i] for i in served]
        assert max(norm) - min(norm) <= bound


@settings(max_examples=150, deadline=None)
@given(flows, st.integers(1, 40), st.integers(50, 400))
def test_no_backlogged_flow_starves(spec, quantum, n) -> None:
    """Between two services of a backlogged flow i the others get at most R rounds of
    (quantum x w_j + max cost) each, R = ceil(max cost / (quantum x w_i)) + 1."""
    run = backlogged(spec, quantum, n)
    weights = run.weights
    since = {i: 0.0 for i in weights}  # cost served to others since i was last served
    for key, cost in run:
        since[key] = 0.0
        for j in since:
            if j != key:
                since[j] += cost
                rounds = math.ceil(run.max_cost / (quantum * weights[j])) + 1
                others = sum(quantum * weights[o] + run.max_cost for o in weights if o != j)
                assert since[j] <= rounds * others + 1e-9


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 30)), min_size=1, max_size=60),
       st.integers(1, 20))
def test_work_conserving_and_fifo_per_flow(pushes, quantum) -> None:
    """Everything pushed comes out, each flow's items in push order, whatever the costs."""
    drr: DeficitRoundRobin[str, tuple[int, int]] = DeficitRoundRobin(quantum)
    for n, (key, cost) in enumerate(pushes):
        drr.push(key, (n, cost))
    out = []
    while drr:
        key, item = drr.pop()
        out.append((key, item))
        drr.charge(key, item[1])
    assert sorted(i for _k, i in out) == sorted((n, c) for n, (_k, c) in enumerate(pushes))
    for key in "abc":
        mine = [i[0] for k, i in out if k == key]
        assert mine == sorted(mine)
    assert len(drr) == 0


# -- the loop wiring ----------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.ns = 0

    def nanos(self) -> int:
        return self.ns


class Conn:
    """A queue of request costs (ns) that advances the fake clock when one runs."""

    def __init__(self, key: str, clock: FakeClock, costs: list[int], log: list[str]) -> None:
        self.key, self.clock, self.costs, self.log = key, clock, list(costs), log

    def scheduler_key(self) -> str:
        return self.key

    def run_next(self) -> bool:
        self.clock.ns += self.costs.pop(0)
        self.log.append(self.key)
        return bool(self.costs)


def test_eager_until_the_iteration_budget_then_queued_and_drained_a_batch_per_iteration() -> None:
    async def main() -> None:
        clock = FakeClock()
        s = RequestScheduler(budget_ns=1000, quantum_ns=300, nanos=clock.nanos)
        assert s.eager()
        s.ran(600)
        assert s.eager()
        s.ran(600)  # 1200 >= 1000: the rest of this iteration queues
        assert not s.eager()
        log: list[str] = []
        noisy = Conn("noisy", clock, [100] * 50, log)
        victim = Conn("victim", clock, [100, 100], log)
        s.submit(noisy, "noisy")
        s.submit(victim, "victim")
        assert not s.eager()  # something waits: new requests queue behind it
        await asyncio.sleep(0)  # one iteration: a budget's worth (10 x 100 ns)
        assert len(log) == 10
        assert log[:8] == ["noisy"] * 3 + ["victim"] * 2 + ["noisy"] * 3
        for _ in range(10):
            await asyncio.sleep(0)
        assert log.count("noisy") == 50 and not s.drr
        assert s.eager()  # idle again, and a fresh budget

    asyncio.run(main())


def test_disabled_scheduler_always_runs_at_once() -> None:
    s = RequestScheduler(budget_ns=1, nanos=lambda: 0, enabled=False)
    assert s.eager()


def test_tenant_queue_counts_and_the_full_mark() -> None:
    s = RequestScheduler(tenant_queue_max=3, nanos=lambda: 0)
    assert not s.count("t", 2)
    assert s.count("t", 1)
    assert s.waiting == 3 and s.queued == {"t": 3}
    assert not s.count("t", -3)
    assert s.queued == {} and s.waiting == 0 and s.deferred == 3


def test_a_tenants_weight_is_its_request_quota_share() -> None:
    """QuotaManagers.scheduling_weight: request_percentage / 100 (at most 1) for a tenant with a
    tenant request quota; 1 for other tenants, principals, and when no request quota exists."""
    from types import MappingProxyType

    from shoal.config import BrokerConfig
    from shoal.metadata import MetadataImage
    from shoal.quotas.manager import QuotaManagers

    def image(quotas: dict) -> MetadataImage:
        return MetadataImage(
            cluster_id="c", controller_id=1, brokers={}, topics={}, topics_by_id={}, broker_configs={},
            client_quotas=MappingProxyType({tuple(sorted(e)): MappingProxyType(v) for e, v in quotas.items()}),
        )

    q = QuotaManagers(BrokerConfig.load(None, {}), node_id=1)
    q.update(image({}))
    assert q.scheduling_weight("lkc-noisy") == 1.0
    q.update(image({(("tenant", "lkc-noisy"),): {"request_percentage": 20.0},
                    (("tenant", "lkc-big"),): {"request_percentage": 250.0}}))
    assert q.scheduling_weight("lkc-noisy") == pytest.approx(0.2)
    assert q.scheduling_weight("lkc-big") == 1.0
    assert q.scheduling_weight("lkc-other") == 1.0
    assert q.scheduling_weight("User:ANONYMOUS") == 1.0
