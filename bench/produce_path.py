"""CPU cost of one single-batch Produce request inside the broker, without sockets.

    python bench/produce_path.py [--requests 20000] [--profile]

Starts a real Broker (file storage in a temporary directory), then feeds Produce v9 frames of one
1 KiB record straight into a connection object whose transport only counts bytes: what remains is
framing, decoding (kio + guard), the handler, the append and the response encoding.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import pstats
import sys
import tempfile
import time

sys.modules.setdefault("hypothesis", None)  # as `shoal serve` does: no Hypothesis hooks in kio

from shoal.broker import Broker  # noqa: E402
from shoal.config import BrokerConfig  # noqa: E402
from shoal.protocol import codec  # noqa: E402
from shoal.protocol.records import build_batch  # noqa: E402
from shoal.server.connection import KafkaConnection  # noqa: E402


class CountingTransport:
    def __init__(self) -> None:
        self.bytes = 0
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)
        self.writes += 1

    def get_extra_info(self, name: str, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def pause_reading(self) -> None: ...
    def set_write_buffer_limits(self, high=None, low=None) -> None: ...
    def get_write_buffer_size(self) -> int: return 0
    def resume_reading(self) -> None: ...
    def close(self) -> None: ...


def produce_frame(topic: str, corr: int, records: int = 1) -> bytes:
    rq = codec.request_type(0, 9)
    mod = sys.modules[rq.__module__]
    body = codec.build(
        rq,
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            codec.build(
                mod.TopicProduceData,
                name=topic,
                partition_data=(
                    codec.build(
                        mod.PartitionProduceData,
                        index=0,
                        records=build_batch([(1_700_000_000_000, b"k", b"v" * 1024, [])] * records),
                    ),
                ),
            ),
        ),
    )
    return codec.encode_request(0, 9, corr, "bench", body)


async def time_requests(broker: Broker, frames: list[bytes], n: int) -> float:
    """Seconds for a new connection (whose transport only counts bytes) to answer ``n`` of
    ``frames``, fed one at a time."""
    conn = KafkaConnection(broker, "PLAINTEXT")
    transport = CountingTransport()
    conn.connection_made(transport)
    t = time.perf_counter()
    for i in range(n):
        conn.data_received(frames[i % len(frames)])
        await asyncio.sleep(0)
    while transport.writes < n:
        await asyncio.sleep(0)
    dt = time.perf_counter() - t
    conn.connection_lost(None)
    return dt


async def run(n: int, profile: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        cfg = BrokerConfig.load(None, {"log.dirs": d, "listeners": "PLAINTEXT://127.0.0.1:0"})
        broker = Broker(cfg)
        await broker.start()
        from shoal.handlers.metadata import auto_create_topic

        await auto_create_topic(broker.services, "bench")
        frames = [produce_frame("bench", i) for i in range(64)]
        prof = cProfile.Profile() if profile else None
        if prof:
            prof.enable()
        dt = await time_requests(broker, frames, n)
        if prof:
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(20)
        print(f"{n} Produce requests (1 x 1 KiB record): {dt / n * 1e6:.1f} µs of broker CPU each")
        await broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(run(args.requests, args.profile))


if __name__ == "__main__":
    main()
