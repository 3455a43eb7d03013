"""Fair scheduling of request processing across tenants (issue 10: noisy neighbour by cheap requests).

Kafka puts every request in one queue served by a pool of handler threads; Redpanda runs each
kind of work in a scheduling group with its own share of the shard. Shoal serves every request on
one event loop, so the question is *whose* request runs next. Without a scheduler the answer is
"whoever's socket the loop reads first": 200 connections of one tenant pipelining Metadata made
every loop iteration run thousands of their requests before another tenant's Produce got a turn
(its p99 went from 10 ms to 959 ms), and a request quota did not help, since it throttles a
connection only after its requests ran, and muted connections come back all together.

Two parts:

* :class:`DeficitRoundRobin` — the decision, pure: flows (one per tenant; per principal for users
  outside any tenant) of queued items, served by deficit round robin where the cost of an item is
  only known after it ran (as fq_codel charges a packet after dequeuing it): the flow at the head
  is served while its deficit is positive, each item's cost is then charged, and a flow whose
  deficit is used up gets ``quantum x weight`` more and goes to the back. Over any period in which
  flows stay backlogged, each gets a share of the cost proportional to its weight (to within one
  item's cost and a quantum); nothing starves (every backlogged flow is served once per round);
  and it is work-conserving (a flow alone is served back to back). A flow that empties with a
  debt keeps it while the scheduler stays busy, so emptying and refilling does not earn a fresh
  quantum; all debts are forgiven when the scheduler drains. A *held* flow (its tenant is over
  its request quota: :meth:`DeficitRoundRobin.hold`) is served only while no other flow has work.
* :class:`RequestScheduler` — the wiring on the event loop. A request runs at once, inside
  ``data_received`` as before, while the scheduler is empty and the requests run so far in this
  loop iteration took less than ``budget`` (so an uncontended broker costs two clock readings
  per request, measured: no difference in Produce CPU beyond this machine's noise). Past that, requests wait in their connection's queue, the connection waits in its
  tenant's flow, and a drain callback runs queued requests for at most ``budget`` per loop
  iteration, then yields to the loop, so reading and writing sockets, timers and tasks (acks=all
  completions) get their turn between batches, and every tenant's next request is at most one
  round of quanta away. The connection side (``shoal.server.connection``): its queue, parking a
  muted connection (its queued requests wait for the mute, as requests in its buffer do), pausing
  reads of a connection whose tenant has ``tenant_queue_max`` requests queued.

Not thread-safe: the broker's event loop owns it. Time is injected: ``now``/``nanos`` arguments
in the pure part, a ``nanos`` callable in the wiring (the broker passes its clock's).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Callable, Generic, Hashable, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

MIN_WEIGHT = 0.05  # a weight below this would let one cheap flow spin the round robin


class _Flow(Generic[T]):
    __slots__ = ("key", "items", "deficit", "weight", "held_until", "lane")

    def __init__(self, key: Any, weight: float) -> None:
        self.key = key
        self.items: deque[T] = deque()
        self.deficit = 0.0
        self.weight = weight
        self.held_until = float("-inf")
        self.lane: deque[_Flow[T]] | None = None  # the round it waits in (None: idle)


class DeficitRoundRobin(Generic[K, T]):
    """Deficit round robin over flows of items, each item's cost charged after it is served.

    ``push(key, item, weight)`` queues an item in its flow; ``pop(now)`` returns the next
    ``(key, item)``; the caller must then ``charge(key, cost)`` the item's cost (before or after
    pushing the flow's next item; pushing first keeps the flow at the head while its deficit
    lasts). ``hold(key, until)`` makes a flow wait behind every flow that is not held until
    ``until`` (the same time unit as ``now``).
    """

    def __init__(self, quantum: float) -> None:
        if quantum <= 0:
            raise ValueError("quantum must be positive")
        self.quantum = quantum
        self._flows: dict[K, _Flow[T]] = {}
        self._round: deque[_Flow[T]] = deque()  # flows with items, not held
        self._held: deque[_Flow[T]] = deque()  # flows with items, held
        self._next_release = float("inf")  # earliest held_until in _held
        self._len = 0

    def __len__(self) -> int:
        """Items queued."""
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def queued(self, key: K) -> int:
        f = self._flows.get(key)
        return len(f.items) if f is not None else 0

    def deficit(self, key: K) -> float:
        f = self._flows.get(key)
        return f.deficit if f is not None else 0.0

    def push(self, key: K, item: T, weight: float = 1.0) -> None:
        """Queue ``item`` in flow ``key``; ``weight`` is taken when the flow joins the round."""
        f = self._flows.get(key)
        if f is None:
            f = self._flows[key] = _Flow(key, max(weight, MIN_WEIGHT))
        f.items.append(item)
        self._len += 1
        if f.lane is None:
            f.weight = max(weight, MIN_WEIGHT)
            f.lane = self._round
            self._round.append(f)

    def hold(self, key: K, until: float) -> None:
        """Serve ``key`` only when no unheld flow has work, until ``until``."""
        f = self._flows.get(key)
        if f is None:
            f = self._flows[key] = _Flow(key, 1.0)
        if until > f.held_until:
            f.held_until = until

    def pop(self, now: float = 0.0) -> tuple[K, T]:
        """The next item; raises IndexError when nothing is queued."""
        if not self._len:
            raise IndexError("pop from an empty scheduler")
        if now >= self._next_release:
            self._release(now)
        rnd, held = self._round, self._held
        while True:
            lane = rnd if rnd else held
            f = lane[0]
            if lane is rnd and f.held_until > now:  # over its quota: behind everyone else
                rnd.popleft()
                f.lane = held
                held.append(f)
                if f.held_until < self._next_release:
                    self._next_release = f.held_until
                continue
            if f.deficit <= 0:
                f.deficit += self.quantum * f.weight
                lane.rotate(-1)
                continue
            self._len -= 1
            return f.key, f.items.popleft()

    def charge(self, key: K, cost: float) -> None:
        """Charge a served item's cost to its flow; a flow left empty leaves the round."""
        f = self._flows.get(key)
        if f is None:
            return
        f.deficit -= cost
        if f.items or f.lane is None:
            return
        lane = f.lane
        if lane[0] is f:
            lane.popleft()
        else:
            lane.remove(f)
        f.lane = None
        if not self._len:
            self._forget()
        elif f.deficit >= 0 and f.held_until == float("-inf"):
            del self._flows[key]  # DRR: an emptied flow's credit is not kept

    def _release(self, now: float) -> None:
        """Held flows whose hold is over go back to the round."""
        nxt = float("inf")
        keep: deque[_Flow[T]] = deque()
        for f in self._held:
            if f.held_until <= now:
                f.held_until = float("-inf")
                f.lane = self._round
                self._round.append(f)
            else:
                keep.append(f)
                nxt = min(nxt, f.held_until)
        self._held = keep
        for f in keep:
            f.lane = keep
        self._next_release = nxt

    def _forget(self) -> None:
        """Nothing is queued: the broker is not contended, debts and holds do not matter."""
        self._flows = {k: f for k, f in self._flows.items() if f.lane is not None}
        self._next_release = float("inf")


class Queued(Protocol):
    """What the scheduler serves (a connection with requests waiting)."""

    def run_next(self) -> bool:
        """Run the next queued request (or park); True if more wait and it stays in the round."""

    def scheduler_key(self) -> Hashable:
        """The flow it belongs to now (tenant, or principal)."""


class RequestScheduler:
    """Runs requests at once while the broker keeps up, fairly across tenants when it does not
    (see the module doc). ``weight(key)``: a flow's weight (default 1)."""

    def __init__(self, *, budget_ns: int = 2_000_000, quantum_ns: int = 500_000, tenant_queue_max: int = 500,
                 nanos: Callable[[], int], weight: Callable[[Hashable], float] | None = None,
                 enabled: bool = True) -> None:
        self.budget_ns = budget_ns
        self.tenant_queue_max = tenant_queue_max
        self.nanos = nanos
        self.weight = weight
        self.enabled = enabled
        self.drr: DeficitRoundRobin[Hashable, Queued] = DeficitRoundRobin(quantum_ns)
        self.queued: dict[Hashable, int] = {}  # requests waiting, per flow
        self.waiting = 0  # requests waiting, in all
        self.deferred = 0  # requests that waited (a counter, for metrics)
        self._spent = 0  # ns of requests run in this loop iteration
        self._armed = False  # _tick is scheduled
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- the connection's side ---------------------------------------------------------------------

    def eager(self) -> bool:
        """May a request run at once (nothing waits, and this loop iteration has time left)?"""
        return not self.drr._len and self._spent < self.budget_ns or not self.enabled

    def ran(self, ns: int) -> None:
        """A request ran at once, taking ``ns``. The budget is renewed by the next loop iteration
        once half of it is used (a callback per iteration would cost the hot path more than
        the clock readings do), so one iteration runs at most ``budget`` of them."""
        self._spent += ns
        if self._spent >= self.budget_ns >> 1 and not self._armed:
            self._arm()

    def count(self, key: Hashable, delta: int) -> bool:
        """``delta`` requests more (fewer) wait in flow ``key``; True when the flow is full."""
        n = self.queued.get(key, 0) + delta
        self.waiting += delta
        if delta > 0:
            self.deferred += delta
        if n > 0:
            self.queued[key] = n
        else:
            self.queued.pop(key, None)
        return n >= self.tenant_queue_max

    def submit(self, item: Queued, key: Hashable) -> None:
        """``item`` has requests waiting: put it in flow ``key``'s round."""
        self.drr.push(key, item, self.weight(key) if self.weight is not None else 1.0)
        if not self._armed:
            self._arm()

    def hold(self, key: Hashable, seconds: float) -> None:
        """Flow ``key`` is over its request quota for ``seconds``: serve it last until then."""
        self.drr.hold(key, self.nanos() + seconds * 1e9)

    # -- the loop's side ---------------------------------------------------------------------------

    def _arm(self) -> None:
        self._armed = True
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        loop.call_soon(self._tick)

    def _tick(self) -> None:
        """Once per loop iteration while there is work: a new budget, and a batch of queued
        requests."""
        self._armed = False
        self._spent = 0
        if self.drr._len:
            self.drain()

    def drain(self) -> None:
        """Run queued requests, fairly, for at most ``budget_ns``; come back next iteration if
        some still wait."""
        drr, nanos = self.drr, self.nanos
        start = now = nanos()
        deadline = start + self.budget_ns
        while drr._len and now < deadline:
            key, item = drr.pop(now)
            try:
                if item.run_next():  # back in its flow before the charge: it keeps its turn
                    k = item.scheduler_key()
                    drr.push(k, item, 1.0 if k == key or self.weight is None else self.weight(k))
            finally:
                t = nanos()
                drr.charge(key, t - now)
                now = t
        self._spent = now - start
        if drr._len and not self._armed:
            self._arm()
