"""KafkaConnection's flow control on a real Broker (in-process) with a transport that only records:
a client that does not take its responses is not read, nor are its buffered requests run, until
it does; a connection waits for request memory (queued.max.request.bytes) that another gives
back. Over real sockets: tests/e2e/test_hardening_connections.py."""

from __future__ import annotations

import asyncio
import struct

import pytest

from shoal.broker import Broker
from shoal.config import BrokerConfig
from shoal.protocol import codec
from shoal.server.bounds import ConnectionGuard
from shoal.server.connection import KafkaConnection


class RecordingTransport:
    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.reading = True
        self.closed = False
        self.limits: tuple[int, int] | None = None

    def write(self, data: bytes) -> None:
        self.frames.append(bytes(data))

    def get_extra_info(self, name: str, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        self.limits = (high, low)

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        self.closed = True

    def correlation_ids(self) -> list[int]:
        return [struct.unpack_from(">i", f, 4)[0] for f in self.frames]


def api_versions(cid: int) -> bytes:
    return codec.encode_request(18, 0, cid, "t", codec.request_type(18, 0)())


@pytest.fixture
def make_broker(tmp_path):
    brokers: list[Broker] = []

    async def make(**overrides: str) -> Broker:
        cfg = BrokerConfig.load(None, {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0",
                                       **overrides})
        b = Broker(cfg)
        await b.start()
        brokers.append(b)
        return b

    yield make


def connect(broker: Broker) -> tuple[KafkaConnection, RecordingTransport]:
    conn = KafkaConnection(broker, "PLAINTEXT")
    t = RecordingTransport()
    conn.connection_made(t)  # type: ignore[arg-type]
    return conn, t


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_requests_wait_while_the_client_does_not_take_its_responses(make_broker):
    async def run():
        broker = await make_broker(**{"shoal.connection.queued.response.max.bytes": "65536"})
        try:
            conn, t = connect(broker)
            assert t.limits == (65536, 16384)
            conn.pause_writing()  # the transport holds more than 64 KiB
            assert not t.reading
            conn.data_received(b"".join(api_versions(i) for i in range(10)))
            await settle()
            assert t.frames == []  # buffered, not run
            conn.resume_writing()
            await settle()
            assert t.reading and t.correlation_ids() == list(range(10))
            # paused again half-way through a burst: the rest waits for the drain
            conn.data_received(api_versions(10))
            conn.pause_writing()
            conn.data_received(b"".join(api_versions(i) for i in range(11, 20)))
            await settle()
            assert t.correlation_ids() == list(range(11))
            conn.resume_writing()
            await settle()
            assert t.correlation_ids() == list(range(20))
            assert conn._held == 0 and ConnectionGuard.for_broker(broker).memory.used == 0
            conn.connection_lost(None)
        finally:
            await broker.stop()

    asyncio.run(run())


def test_a_connection_waits_for_request_memory_another_gives_back(make_broker):
    async def run():
        broker = await make_broker(**{"queued.max.request.bytes": "1000",
                                      "shoal.queued.max.request.bytes.per.principal": "100000"})
        try:
            memory = ConnectionGuard.for_broker(broker).memory
            hog, _ = connect(broker)
            hog.data_received(struct.pack(">i", 5000) + b"\0" * 1200)  # a frame of 5,000 bytes, partly read
            assert memory.used == 1204  # what has arrived of it (over the limit: not strict)
            assert memory.owned == {(None, "User:ANONYMOUS"): 5000}  # its owner's share: the announced size
            hog.data_received(b"\0" * 100)
            assert memory.used == 1304
            conn, t = connect(broker)
            conn.data_received(api_versions(1))
            await settle()
            assert t.frames == [] and not t.reading and conn.paused_because == "memory"
            hog.connection_lost(None)  # gives its 5,000 bytes back
            await settle()
            assert t.correlation_ids() == [1] and t.reading and conn.paused_because is None
            assert memory.used == 0
            conn.connection_lost(None)
            assert memory.owned == {}
        finally:
            await broker.stop()

    asyncio.run(run())


def test_an_owner_past_its_share_waits_alone(make_broker):
    """Lengths of large frames announced by one principal take no pool memory and stall only
    that principal's next frames, never another's."""
    async def run():
        broker = await make_broker(**{"queued.max.request.bytes": "4000"})  # shares of 1,000
        try:
            memory = ConnectionGuard.for_broker(broker).memory
            hogs = [connect(broker) for _ in range(3)]
            for hog, _ in hogs:
                hog.bind_principal("User:mallory")
                hog.data_received(struct.pack(">i", 3000))  # only the length of a 3,000-byte frame
            await settle()
            assert memory.used == 4  # the first hog's 4 bytes; the others wait before their frames
            assert [h.paused_because for h, _ in hogs] == [None, "memory", "memory"]
            conn, t = connect(broker)  # anonymous: another owner
            conn.data_received(api_versions(1))
            await settle()
            assert t.correlation_ids() == [1] and conn.paused_because is None
            hogs[0][0].connection_lost(None)  # mallory's announced frame is gone: her next may start
            await settle()
            assert hogs[1][0].paused_because is None and memory.owned[(None, "User:mallory")] == 3000
            for hog, _ in hogs[1:]:
                hog.connection_lost(None)
            conn.connection_lost(None)
            assert memory.used == 0 and memory.owned == {}
        finally:
            await broker.stop()

    asyncio.run(run())


def metadata(cid: int, topics: int) -> bytes:
    """A Metadata v4 request naming ``topics`` unknown topics (~10 bytes each), no auto-creation."""
    import kio.schema.metadata.v4.request as m
    from kio.schema.types import TopicName

    body = m.MetadataRequest(topics=tuple(m.MetadataRequestTopic(name=TopicName(f"missing-{i:06d}"))
                                          for i in range(topics)), allow_auto_topic_creation=False)
    return codec.encode_request(3, 4, cid, "t", body)


def read_into(conn: KafkaConnection, data: bytes, step: int) -> None:
    """What the event loop does on a BufferedProtocol: read into get_buffer(), then buffer_updated()."""
    while data:
        buf = conn.get_buffer(-1)
        n = min(len(buf), step, len(data))
        buf[:n] = data[:n]
        conn.buffer_updated(n)
        data = data[n:]


def test_large_frames_are_read_in_place_in_order_and_accounted(make_broker):
    """A frame of LARGE_FRAME bytes or more is read into a buffer of its own, whatever the reads'
    sizes and whether the bytes come through get_buffer or data_received; requests keep their
    order, a pause holds a whole large frame back, and the request memory comes back to 0."""
    from shoal.server.connection import LARGE_FRAME

    async def run():
        broker = await make_broker()
        try:
            memory = ConnectionGuard.for_broker(broker).memory
            conn, t = connect(broker)
            big1, small, big2, big3 = metadata(1, 9000), api_versions(2), metadata(3, 12000), metadata(4, 7000)
            assert min(len(big1), len(big2), len(big3)) > LARGE_FRAME
            conn.data_received(big1[:1000])
            assert conn._large is not None and memory.used == 1000
            assert len(conn._large) == LARGE_FRAME  # not what the length announces: what came, doubled
            read_into(conn, big1[1000 : 4 + LARGE_FRAME], 5000)  # full: the next read doubles it
            assert conn.get_buffer(-1).nbytes == LARGE_FRAME and len(conn._large) == 2 * LARGE_FRAME
            read_into(conn, big1[4 + LARGE_FRAME :], 7000)
            stream = small + big2
            read_into(conn, stream[:30000], 30000)  # through the scratch buffer: big2 starts
            assert conn._large is not None
            await settle()
            conn.pause_writing()  # the client stops taking responses: big2 waits, whole
            read_into(conn, stream[30000:], 65536)
            await settle()
            assert t.correlation_ids() == [1, 2]
            conn.resume_writing()
            conn.data_received(big3[:5] + big3[5:70000])  # the data_received path into place too
            conn.data_received(big3[70000:] + api_versions(5))
            await settle()
            assert t.correlation_ids() == [1, 2, 3, 4, 5]
            assert all(len(f) > 4 for f in t.frames) and conn._large is None
            assert conn._held == 0 and memory.used == 0 and memory.owned == {}
            conn.connection_lost(None)
        finally:
            await broker.stop()

    asyncio.run(run())
