"""What kio costs on the hot path: decode Produce, encode Produce and Fetch responses.

    python bench/kio_cost.py

Prints microseconds per operation. The broker uses kio for every message; this is the number to
watch before hand-writing any codec (the issue asks to hand-write only what profiling proves).
"""

from __future__ import annotations

import datetime
import time
import uuid

from shoal.protocol import codec
from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import build_batch


def per_op(fn, n: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    batch = build_batch([(1_700_000_000_000, b"key", b"v" * 1024, [])])
    rows = []
    for version in (9, 11):
        rq = codec.request_type(0, version)
        mod = __import__(rq.__module__, fromlist=["x"])
        body = codec.build(
            rq,
            transactional_id=None,
            acks=1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(
                codec.build(
                    mod.TopicProduceData,
                    name="bench",
                    partition_data=(codec.build(mod.PartitionProduceData, index=0, records=batch),),
                ),
            ),
        )
        frame = codec.encode_request(0, version, 1, "bench", body)[4:]
        rows.append((f"decode Produce v{version} request (1 x 1 KiB batch)", per_op(lambda: codec.decode_request(0, version, frame), 20000)))
        rmod = codec.response_module(0, version)
        resp = codec.build(
            rmod.ProduceResponse,
            responses=(
                codec.build(
                    rmod.TopicProduceResponse,
                    name="bench",
                    partition_responses=(
                        codec.build(
                            rmod.PartitionProduceResponse,
                            index=0, error_code=ErrorCode.none, base_offset=5, log_append_time=None,
                            log_start_offset=0, record_errors=(), error_message=None,
                        ),
                    ),
                ),
            ),
            throttle_time=datetime.timedelta(0),
        )
        rows.append((f"encode Produce v{version} response (1 partition)", per_op(lambda: codec.encode_response(1, 0, version, resp), 20000)))
    for version, size in ((12, 1 << 20), (16, 1 << 20), (16, 1024)):
        fmod = codec.response_module(1, version)
        records = b"r" * size
        resp = codec.build(
            fmod.FetchResponse,
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.none,
            session_id=0,
            responses=(
                codec.build(
                    fmod.FetchableTopicResponse,
                    topic="bench",
                    topic_id=uuid.uuid4(),
                    partitions=(
                        codec.build(
                            fmod.PartitionData,
                            partition_index=0, error_code=ErrorCode.none, high_watermark=1,
                            last_stable_offset=1, log_start_offset=0, aborted_transactions=None,
                            preferred_read_replica=-1, records=records,
                        ),
                    ),
                ),
            ),
        )
        rows.append((f"encode Fetch v{version} response (1 partition, {size} B)", per_op(lambda: codec.encode_response(1, 1, version, resp), 2000)))
    width = max(len(r[0]) for r in rows)
    for name, us in rows:
        print(f"{name:<{width}}  {us:8.2f} µs")


if __name__ == "__main__":
    main()
