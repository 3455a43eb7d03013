"""A connection muted for ~0 ms on uvloop (the broker's event loop, shoal serve): uvloop's
``call_at`` for a time already past returns a ``Handle`` without ``when()``, and the request
scheduler's tick asked the mute for its deadline, crashed, and stalled every connection of the
broker (seen in bench/bench_tenant_split.py). The connection keeps the deadline itself."""

from __future__ import annotations

import asyncio

import uvloop

from shoal.broker import Broker
from shoal.config import BrokerConfig
from test_connection_bounds import RecordingTransport, api_versions
from shoal.server.connection import KafkaConnection


def test_a_zero_ms_mute_on_uvloop_parks_and_unparks(tmp_path) -> None:
    async def run() -> None:
        cfg = BrokerConfig.load(None, {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"})
        broker = Broker(cfg)
        await broker.start()
        try:
            conn = KafkaConnection(broker, "PLAINTEXT")
            t = RecordingTransport()
            conn.connection_made(t)  # type: ignore[arg-type]
            loop = asyncio.get_running_loop()
            conn._mute_for(0)  # a deadline already past by the time call_at runs
            assert conn._mute is not None and not hasattr(conn._mute, "when")  # uvloop's plain Handle
            conn._mute_for(0)  # compares with the current mute's deadline
            conn._sched_park()  # the scheduler parks a muted connection until the deadline
            assert conn._mute_until <= loop.time()
            for _ in range(10):
                await asyncio.sleep(0)
            assert conn._mute is None  # unmuted
            conn.data_received(api_versions(7))  # and it serves again
            for _ in range(50):
                if t.frames:
                    break
                await asyncio.sleep(0.01)
            assert t.frames, "no response after the mute"
        finally:
            await broker.stop()

    uvloop.run(run())
