"""CPU cost of one follower Fetch request inside the broker (the leader's side of acks=all), without sockets.

    python bench/fetch_path.py [--requests 5000] [--replica-id 1] [--profile]

As bench/produce_path.py: a real Broker (file storage in a temporary directory), 200 one-record
Produce requests, then Fetch v12 frames as a replica fetcher sends them (``replica_id``, one
partition, ``max_wait`` 0, each at an offset that has a 1 KiB record) fed into a connection whose
transport only counts bytes: framing, the guard and kio's decoding, the handler (read from the log,
``follower_fetched``), the response's building and encoding. ``--replica-id -1``: a consumer's fetch.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
sys.modules.setdefault("hypothesis", None)  # as `shoal serve` does: no Hypothesis hooks in kio

from produce_path import produce_frame, time_requests  # noqa: E402

from shoal.broker import Broker  # noqa: E402
from shoal.config import BrokerConfig  # noqa: E402
from shoal.net.fetch_request import FetchPartition, FetchRequest, FetchTopic, encode_fetch_v12  # noqa: E402
from shoal.replica.fetcher import FETCH_VERSION  # noqa: E402


def fetch_frame(topic: str, corr: int, offset: int, replica_id: int) -> bytes:
    """The replica fetcher's Fetch, as it encodes it (``shoal.net.fetch_request``)."""
    req = FetchRequest(
        replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=10 << 20, isolation_level=0,
        session_id=0, session_epoch=-1,
        topics=(FetchTopic(topic, (FetchPartition(0, -1, offset, -1, 0, 1 << 20),)),),
        forgotten_topics_data=(), rack_id="",
    )
    return encode_fetch_v12(FETCH_VERSION, corr, "shoal-replica-2", req)


async def run(n: int, profile: bool, replica_id: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        cfg = BrokerConfig.load(None, {"log.dirs": d, "listeners": "PLAINTEXT://127.0.0.1:0"})
        broker = Broker(cfg)
        await broker.start()
        from shoal.handlers.metadata import auto_create_topic

        await auto_create_topic(broker.services, "bench")
        await time_requests(broker, [produce_frame("bench", i) for i in range(64)], 200)
        frames = [fetch_frame("bench", i, 100 + i % 50, replica_id) for i in range(64)]
        await time_requests(broker, frames, 500)  # warm up
        prof = cProfile.Profile() if profile else None
        if prof:
            prof.enable()
        c0 = time.process_time()
        dt = await time_requests(broker, frames, n)
        cpu = time.process_time() - c0
        if prof:
            prof.disable()
            pstats.Stats(prof).sort_stats("cumtime").print_stats(30)
        print(f"{n} Fetch v12 requests (replica_id {replica_id}, one partition, a 1 KiB record each): "
              f"{dt / n * 1e6:.1f} us wall, {cpu / n * 1e6:.1f} us CPU each")
        await broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--replica-id", type=int, default=1)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(run(args.requests, args.profile, args.replica_id))


if __name__ == "__main__":
    main()
