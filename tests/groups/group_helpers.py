"""Helpers of the group coordinator unit tests (imported as ``group_helpers``).

A coordinator on a ManualClock and a MemoryCoordinatorLog, owning every partition of a small
``__consumer_offsets``. Time moves only when a test calls :meth:`Env.advance`, which runs the
timeouts that fell due; :func:`settle` lets the parked futures and write completions run.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from dataclasses import dataclass, field

from shoal.clock import ManualClock
from shoal.groups import GroupConfig, GroupCoordinator, JoinRequest, MemoryCoordinatorLog
from shoal.groups.classic import ClassicGroup

SESSION_MS = 10_000
REBALANCE_MS = 30_000


def subscription(*topics: str, user_data: bytes = b"") -> bytes:
    """A ConsumerProtocolSubscription v0: the bytes a Java/librdkafka consumer sends."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        raw = t.encode()
        out += struct.pack(">h", len(raw)) + raw
    return out + struct.pack(">i", len(user_data)) + user_data


def range_protocols(*topics: str) -> tuple[tuple[str, bytes], ...]:
    return (("range", subscription(*topics)),)


async def settle(rounds: int = 10) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


@dataclass
class Env:
    clock: ManualClock
    log: MemoryCoordinatorLog
    coord: GroupCoordinator
    partitions: int = 1
    seq: itertools.count = field(default_factory=itertools.count)

    def advance(self, ms: float) -> int:
        self.clock.sleep(ms / 1000.0)
        return self.coord.timer.run_due()

    async def initial_rebalance(self, *futs: asyncio.Future) -> list:
        """Let a new group's delayed first join complete (the delay is extended once per round in
        which new members arrived), then return the JoinGroup results."""
        await settle()
        for _ in range(20):
            if all(f.done() for f in futs):
                break
            self.advance(self.coord.config.initial_rebalance_delay_ms)
            await settle()
        return [await f for f in futs]

    def group(self, group_id: str) -> ClassicGroup:
        g = self.coord.groups[group_id]
        assert isinstance(g, ClassicGroup)
        return g

    def join(
        self,
        group_id: str = "g",
        member_id: str = "",
        *,
        instance_id: str | None = None,
        protocols=None,
        protocol_type: str = "consumer",
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        client_id: str = "client",
        version: int = 9,
    ) -> asyncio.Future:
        return self.coord.join_group(
            JoinRequest(
                group_id=group_id,
                member_id=member_id,
                group_instance_id=instance_id,
                protocol_type=protocol_type,
                protocols=protocols if protocols is not None else range_protocols("t"),
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=rebalance_ms,
                client_id=client_id,
                client_host="/127.0.0.1",
                require_known_member_id=version >= 4,
                supports_skip_assignment=version >= 9,
            )
        )

    def sync(self, group_id: str, generation: int, member_id: str, assignments=None, *, instance_id=None,
             protocol_type=None, protocol_name=None) -> asyncio.Future:
        return self.coord.sync_group(
            group_id, generation, member_id, instance_id, protocol_type, protocol_name, assignments or {}
        )


def make_env(partitions: int = 1, log: MemoryCoordinatorLog | None = None, clock: ManualClock | None = None, **cfg) -> Env:
    clock = clock or ManualClock()
    log = log or MemoryCoordinatorLog()
    ids = itertools.count()
    config = GroupConfig(**{"initial_rebalance_delay_ms": 3000, **cfg})
    coord = GroupCoordinator(
        clock=clock, log=log, config=config, num_partitions=partitions, new_uuid=lambda: f"u{next(ids)}"
    )
    return Env(clock, log, coord, partitions)


async def started_env(partitions: int = 1, **kw) -> Env:
    env = make_env(partitions, **kw)
    for p in range(partitions):
        env.coord.start_loading(p)
    await env.coord.wait_loaded()
    return env


async def stable_group(env: Env, group_id: str = "g", n: int = 1, **join_kw) -> list[str]:
    """Bring ``n`` dynamic members into a Stable generation; returns their member ids, leader first."""
    ids = []
    for i in range(n):
        r = await env.join(group_id, client_id=f"c{i}", **join_kw)  # MEMBER_ID_REQUIRED
        ids.append(r.member_id)
    futs = [env.join(group_id, mid, **join_kw) for mid in ids]
    results = await env.initial_rebalance(*futs)
    leader = results[0].leader
    gen = results[0].generation_id
    syncs = [env.sync(group_id, gen, r.member_id, {m: m.encode() for m in ids} if r.member_id == leader else None) for r in results]
    for s in syncs:
        await s
    assert env.group(group_id).state_name == "Stable"
    return [leader] + [m for m in ids if m != leader]


async def handler_call(broker, api_key: int, version: int, /, *, principal: str = "User:ANONYMOUS",
                       tenant: str | None = None, **values):
    """One request to an in-process broker's handler as ``principal`` (of ``tenant``), through the
    codec both ways, so each version's request and response are valid on the wire."""
    from shoal.client import build_entity
    from shoal.handlers.context import RequestContext
    from shoal.protocol.codec import decode_request, decode_response, encode_request, encode_response, request_type

    req = build_entity(request_type(api_key, version), values)
    frame = encode_request(api_key, version, 7, "handler-test", req)
    header, decoded = decode_request(api_key, version, memoryview(frame)[4:])
    spec = broker.registry.lookup(api_key)
    assert spec is not None and spec.min_version <= version <= spec.max_version
    ctx = RequestContext(services=broker.services, header=header, client_address="127.0.0.1:5555", principal=principal, tenant=tenant)
    resp = await spec.handler(ctx, decoded)
    _, back = decode_response(api_key, version, memoryview(encode_response(7, api_key, version, resp))[4:])
    return back
