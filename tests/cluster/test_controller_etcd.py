"""The controller election and its fence against a real etcd (two stores = two brokers): one
holder at a time, the key's creation revision as the epoch, a stale controller's change refused
inside etcd while other brokers' admin changes go through."""

from __future__ import annotations

import asyncio
import datetime
import random
import urllib.request

import pytest

from etcd_cluster import broker_store
from shoal.cluster import planner
from shoal.cluster.controller import Controller, leadership_change
from shoal.metadata import BrokerInfo, MetadataError
from shoal.metadata.etcd import EtcdMetadataStore


@pytest.fixture
async def two(etcd_cluster, etcd_prefix):
    url = etcd_cluster.url(etcd_prefix)
    # a 9 s lease, as the harness's brokers: nothing here waits for one to expire, and a 3 s one
    # could lapse on a loaded CI machine (a keep-alive late twice), taking the new controller's key
    # with it (its fenced change refused: failed once in a fresh clone's suite)
    stores = [broker_store(url, node_id=n, session_timeout_ms=9000) for n in (1, 2)]
    for n, s in enumerate(stores, 1):
        await s.start()
        await s.register_broker(BrokerInfo(n, "127.0.0.1", 9090 + n))
    yield stores
    for s in stores:
        await s.close()


async def test_one_controller_and_a_stale_one_is_fenced_inside_etcd(two, etcd_cluster, etcd_prefix):
    s1, s2 = two
    await s1.create_topic("t", [(2,), (1,)], {})
    c1, c2 = Controller(s1, 1, 3000), Controller(s2, 2, 3000)
    await c1.campaign()
    await c2.campaign()
    assert (c1.is_controller, c1.controller_id) == (True, 1)
    assert (c2.is_controller, c2.controller_id) == (False, 1)
    first = c1.epoch
    await c1.campaign()
    assert c1.epoch == first  # holding the key: same epoch

    # c1 loses the key without noticing (as when its lease expires during a long pause)
    etcd_cluster.etcdctl("del", f"{etcd_prefix}/controller")
    await c2.campaign()
    assert c2.is_controller and c2.epoch > first

    # gone broker 2 in c1's stale view: its fenced change is refused inside etcd
    with c1.fenced(), pytest.raises(MetadataError) as e:
        await s1.decide_and_commit(lambda img: leadership_change(img, {1}))
    assert e.value.code == "NOT_CONTROLLER"
    assert s2.image.topics["t"].partitions[0].leader == 2  # unchanged
    await s1.create_topic("u", [(1,)], {})  # an admin change (not the controller's) is not fenced

    with c2.fenced():
        assert await s2.decide_and_commit(lambda img: leadership_change(img, {2})) == 2  # t-1, u-0
    p = s2.image.topics["t"].partitions[1]
    assert (p.leader, p.leader_epoch) == (-1, 1)

    await c1.campaign()  # c1 learns it
    assert (c1.is_controller, c1.controller_id) == (False, 2)


def proposals(etcd_cluster) -> int:
    """Raft proposals committed, summed over the members (etcd's own metric)."""
    total = 0
    for endpoint in etcd_cluster.endpoints:
        with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("etcd_server_proposals_committed_total "):
                    total += int(float(line.split()[1]))
    return total


async def test_campaigning_for_a_held_key_writes_nothing_to_etcd(two, etcd_cluster):
    """Every broker campaigns twice a second; while the key is held that is a read, not the
    election transaction (an etcd write whichever branch it takes: a raft proposal and an fsync
    on every member: 6 a second on three brokers, before)."""
    s1, s2 = two
    c1, c2 = Controller(s1, 1, 3000), Controller(s2, 2, 3000)
    await c1.campaign()
    before = proposals(etcd_cluster)
    for _ in range(10):
        await c1.campaign()
        await c2.campaign()
    assert proposals(etcd_cluster) - before <= 3  # (a stray lease operation of the stores' own)
    assert (c1.is_controller, c2.is_controller, c2.controller_id) == (True, False, 1)


async def test_a_broker_that_accepted_a_probe_goes_at_its_first_refusals_even_just_registered(
        etcd_cluster, etcd_prefix, unused_tcp_port_factory):
    """A broker registers before its listeners accept, so the controller does not count its
    refusals for PROBE_GRACE_S after it registers, unless its port has accepted a probe since:
    then it is up, and a refusal means it died (kill -9 just after a restart: the failover bench
    measured 4.4-5.4 s for those, the grace period plus two probes, against 1.4 s)."""
    clock = [100.0]
    url = etcd_cluster.url(etcd_prefix)
    s1, s2, s3 = (broker_store(url, node_id=n, session_timeout_ms=3000) for n in (1, 2, 3))
    up_port, starting_port = unused_tcp_port_factory(), unused_tcp_port_factory()
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", up_port)
    c1 = Controller(s1, 1, 3000, monotonic=lambda: clock[0])
    try:
        for s in (s1, s2, s3):
            await s.start()
        s1.subscribe(c1._on_metadata)  # what start() does, without the election loop
        await s2.register_broker(BrokerInfo(2, "127.0.0.1", up_port))
        await s3.register_broker(BrokerInfo(3, "127.0.0.1", starting_port))  # never accepts
        for _ in range(100):
            if {2, 3} <= set(s1.image.brokers):
                break
            await asyncio.sleep(0.05)
        await c1.probe()  # 2 accepts; 3 refuses but may be starting
        server.close()
        await server.wait_closed()
        await c1.probe()
        await c1.probe()
        assert c1.refused == {2}  # within the grace period still (the clock has not moved)
        clock[0] += 6.0  # past it: 3 never came up
        await c1.probe()
        await c1.probe()
        assert c1.refused == {2, 3}
    finally:
        server.close()
        for s in (s1, s2, s3):
            await s.close()


class Port:
    """A broker's port as the probes see it: accepting, then gone with its connections (the
    kernel closes a killed process's listener and sockets at once)."""

    def __init__(self) -> None:
        self.server: asyncio.AbstractServer | None = None
        self.accepted: list[asyncio.StreamWriter] = []

    async def open(self) -> int:
        async def accept(_r, w) -> None:
            self.accepted.append(w)

        self.server = await asyncio.start_server(accept, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def kill(self) -> None:
        self.server.close()
        for w in self.accepted:
            w.transport.abort()
        await self.server.wait_closed()


async def held(port: Port) -> None:
    """Until the probe's connection and the held one have both been accepted."""
    for _ in range(200):
        if len(port.accepted) >= 2:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no connection held to the port")


async def broker_2_at(s1: EtcdMetadataStore, s2: EtcdMetadataStore, port: int) -> None:
    """Start both stores, register broker 2 (through s2) at ``port``, wait until s1 sees it."""
    for s in (s1, s2):
        await s.start()
    await s2.register_broker(BrokerInfo(2, "127.0.0.1", port))
    for _ in range(100):
        if 2 in s1.image.brokers:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("broker 2 not registered")


async def until_woken(c: Controller) -> None:
    await asyncio.wait_for(c._wake.wait(), 5)
    c._wake.clear()


async def test_a_held_connection_that_ends_and_a_refusal_make_a_broker_gone_at_once(etcd_cluster, etcd_prefix):
    """The controller holds a connection to each broker it probed: when that broker dies the
    connection ends, the election loop is woken, and one refused probe is enough (two, half a
    second apart, before: failover after kill -9 went from 1.4 s to 0.3-0.4 s in the bench)."""
    url = etcd_cluster.url(etcd_prefix)
    s1, s2 = (broker_store(url, node_id=n, session_timeout_ms=3000) for n in (1, 2))
    port = Port()
    c1 = Controller(s1, 1, 3000)
    try:
        await broker_2_at(s1, s2, await port.open())
        await c1.probe()  # accepted: a connection is held to it from now on
        await held(port)
        await port.kill()
        await until_woken(c1)
        await c1.probe()
        assert c1.refused == {2}
    finally:
        await c1.stop()
        for s in (s1, s2):
            await s.close()


async def test_placement_leaves_out_a_broker_the_controller_treats_as_gone(etcd_cluster, etcd_prefix):
    """Broker 2 dies (its port refuses) and stays registered until its lease expires: the
    controller treats it as gone and publishes so, and new replicas go to brokers 1 and 3 only,
    planned on the controller or on broker 3 alike (KRaft's controller places on unfenced brokers
    only). It used to take a share of them: the metering topic created after a kill -9 landed on
    the dead broker and the controller moved its leaderships off it at once. Once it answers
    again, it is placeable again."""
    url = etcd_cluster.url(etcd_prefix)
    s1, s2, s3 = (broker_store(url, node_id=n, session_timeout_ms=9000) for n in (1, 2, 3))
    ports = {n: Port() for n in (1, 2, 3)}
    c1, c3 = Controller(s1, 1, 9000), Controller(s3, 3, 9000)

    def placed(s: EtcdMetadataStore, c: Controller) -> set[int]:
        plan = planner.plan_topic(planner.live_brokers(s.image, c.fenced_brokers), planner.TopicRequest("t", 12, 2),
                                  planner.Defaults(1, 1), random.Random(0))
        return {b for a in plan.assignments for b in a}

    try:
        await broker_2_at(s1, s2, await ports[2].open())
        await s3.start()
        for n, s in ((1, s1), (3, s3)):
            await s.register_broker(BrokerInfo(n, "127.0.0.1", await ports[n].open()))
        for _ in range(100):
            if set(s1.image.brokers) == set(s3.image.brokers) == {1, 2, 3}:
                break
            await asyncio.sleep(0.05)
        await c1.campaign()
        await c3.campaign()
        assert (c1.is_controller, c3.controller_id) == (True, 1)
        assert placed(s1, c1) == placed(s3, c3) == {1, 2, 3}
        await c1.probe()  # accepted: a connection is held to 2 from now on
        await held(ports[2])
        await ports[2].kill()
        await until_woken(c1)
        await c1.probe()
        assert c1.refused == {2}
        await c1.publish_fenced()
        await c3.campaign()
        assert c1.fenced_brokers == c3.fenced_brokers == {2} and 2 in s1.image.brokers and 2 in s3.image.brokers
        assert placed(s1, c1) == placed(s3, c3) == {1, 3}

        c1._alive_again(2)  # its held connection logged in again (a false alarm)
        await c1.publish_fenced()
        await c3.campaign()
        assert c1.fenced_brokers == c3.fenced_brokers == set() and placed(s3, c3) == {1, 2, 3}
    finally:
        for c in (c1, c3):
            await c.stop()
        for s in (s1, s2, s3):
            await s.close()
        for port in ports.values():
            if port.server is not None:
                port.server.close()


async def test_a_dead_controllers_key_goes_and_its_registration_stays(etcd_cluster, etcd_prefix):
    """A broker that finds the controller dead (its held connection ended, its port refuses)
    deletes the controller key, only if it is still that holder's, and treats the holder as gone;
    the holder's registration stays until its lease expires, as any dead broker's (clients then
    move its partitions to the new leaders directly)."""
    url = etcd_cluster.url(etcd_prefix)
    s1, s2 = (broker_store(url, node_id=n, session_timeout_ms=3000) for n in (1, 2))
    port = Port()
    c1, c2 = Controller(s1, 1, 3000), Controller(s2, 2, 3000)
    try:
        for s in (s1, s2):
            await s.start()
        await s1.register_broker(BrokerInfo(1, "127.0.0.1", await port.open()))
        await s2.register_broker(BrokerInfo(2, "127.0.0.1", 9))
        for _ in range(100):
            if 1 in s2.image.brokers:
                break
            await asyncio.sleep(0.05)
        await c1.campaign()
        await c2.campaign()
        assert (c1.is_controller, c2.controller_id) == (True, 1)
        stale = c2._holder_revision
        await c2.probe_controller()  # accepted: held from now on
        await held(port)
        await port.kill()
        await until_woken(c2)
        await c2.probe_controller()
        assert c2.refused == {1}
        assert not (await s2.backend.client.range(c2.key)).kvs  # the key went
        assert 1 in s2.image.brokers  # the registration stays
        await c2.campaign()
        assert c2.is_controller

        # a late deletion meant for the dead holder cannot take a successor's key
        c1._holder_revision, c1.controller_id, c1._holder_lease = stale, 2, 1
        c1._dropped.add(2)
        await c1.probe_controller()  # broker 2's "port" (9, discard) refuses
        assert (await s2.backend.client.range(c2.key)).kvs
    finally:
        for c in (c1, c2):
            await c.stop()
        for s in (s1, s2):
            await s.close()


async def test_a_held_connection_the_broker_ends_at_once_is_not_reopened_every_round(etcd_cluster, etcd_prefix):
    """A port that takes the connection and ends it before the login (another listener's security,
    a connection limit): the broker is alive (the next probe is accepted), so the controller does
    not open a held connection again on every half-second round (one per HOLD_KEEPALIVE_S)."""
    url = etcd_cluster.url(etcd_prefix)
    s1, s2 = (broker_store(url, node_id=n, session_timeout_ms=3000) for n in (1, 2))
    connections = []

    async def hang_up(_r, w) -> None:
        connections.append(w)
        w.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    c1 = Controller(s1, 1, 3000)
    try:
        await broker_2_at(s1, s2, server.sockets[0].getsockname()[1])
        for _ in range(6):
            await c1.probe()
            await asyncio.sleep(0.05)
        assert c1.refused == set()
        # six probes and one held connection (ended at once), not one held per round
        assert len(connections) == 7, len(connections)
    finally:
        await c1.stop()
        server.close()
        for s in (s1, s2):
            await s.close()


async def test_a_broker_that_does_not_answer_yet_is_held_again_next_round(etcd_cluster, etcd_prefix, monkeypatch):
    """A restarted broker's port accepts before it serves (it waits for its old lease to expire):
    the held connection's login times out. That is not a refusal to log in: the next round opens
    it again (a bench run that killed a broker restarted a few seconds before fell back to the
    two probes, 0.5 s slower)."""
    from shoal.cluster import controller as controller_module

    monkeypatch.setattr(controller_module, "HOLD_TIMEOUT_S", 0.3)
    url = etcd_cluster.url(etcd_prefix)
    s1, s2 = (broker_store(url, node_id=n, session_timeout_ms=3000) for n in (1, 2))
    port = Port()  # accepts, never answers
    c1 = Controller(s1, 1, 3000)
    try:
        await broker_2_at(s1, s2, await port.open())
        await c1.probe()
        await held(port)  # the probe's connection and the held one
        await asyncio.sleep(0.6)  # its login timed out
        assert c1._watches[2][1].done()
        await c1.probe()
        for _ in range(200):
            if len(port.accepted) >= 4:
                break
            await asyncio.sleep(0.01)
        assert len(port.accepted) == 4  # probed, and held again
        assert c1.refused == set()
    finally:
        await c1.stop()
        await port.kill()
        for s in (s1, s2):
            await s.close()


class AnsweringPort(Port):
    """A broker's port whose process serves: every request is answered as ApiVersions v0-v3
    offering ApiVersions only (what the controller's held connection asks before it holds)."""

    answered = 0

    async def open(self, port: int = 0) -> int:
        from shoal.protocol.codec import build, decode_request, encode_response, peek_header, response_module
        from shoal.protocol.errors import ErrorCode

        async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            self.accepted.append(w)
            try:
                while True:
                    frame = await r.readexactly(int.from_bytes(await r.readexactly(4), "big"))
                    key, version, _cid = peek_header(frame)
                    header, _req = decode_request(key, version, frame)
                    m = response_module(18, version)
                    keys = (build(m.ApiVersion, api_key=18, min_version=0, max_version=3),)
                    w.write(encode_response(header.correlation_id, 18, version, build(
                        m.ApiVersionsResponse, error_code=ErrorCode.none, api_keys=keys, throttle_time=datetime.timedelta(0))))
                    await w.drain()
                    self.answered += 1
            except (asyncio.IncompleteReadError, ConnectionError):
                w.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", port)
        return self.server.sockets[0].getsockname()[1]


async def test_a_gone_broker_whose_port_only_accepts_stays_gone_until_it_answers(etcd_cluster, etcd_prefix,
                                                                                  monkeypatch):
    """A broker killed and restarted on the same port: the new process accepts connections while
    it waits for its old lease to expire, and answers nothing until it registers anew. The
    controller keeps it gone meanwhile (taken for alive, it would lead the partitions only it
    can lead while it cannot serve them, until the old lease's expiry took them away again); a
    process that answers is alive again."""
    from shoal.cluster import controller as controller_module

    monkeypatch.setattr(controller_module, "HOLD_TIMEOUT_S", 0.3)
    url = etcd_cluster.url(etcd_prefix)
    s1, s2 = (broker_store(url, node_id=n, session_timeout_ms=3000) for n in (1, 2))
    port = AnsweringPort()  # broker 2's process, serving
    c1 = Controller(s1, 1, 3000)
    restarted = answering = None
    try:
        number = await port.open()
        await broker_2_at(s1, s2, number)
        await c1.probe()
        await held(port)
        for _ in range(100):
            if port.answered:  # the held connection logged in
                break
            await asyncio.sleep(0.02)
        await port.kill()  # kill -9
        await until_woken(c1)
        await c1.probe()
        assert c1.refused == {2}
        restarted = Port()  # the same port accepts again, answers nothing: a process starting
        restarted.server = await asyncio.start_server(lambda _r, w: restarted.accepted.append(w), "127.0.0.1", number)
        for _ in range(3):
            await c1.probe()
            await asyncio.sleep(0.4)  # its held connection's login times out meanwhile
        assert restarted.accepted and c1.refused == {2}  # probed and held, still gone
        await restarted.kill()
        answering = AnsweringPort()  # a process that serves under the same registration
        await answering.open(number)
        await c1.probe()
        for _ in range(100):
            if not c1.refused:
                break
            await asyncio.sleep(0.02)
        assert c1.refused == set()
    finally:
        await c1.stop()
        for p in (restarted, answering):
            if p is not None and p.server is not None:
                await p.kill()
        for s in (s1, s2):
            await s.close()
