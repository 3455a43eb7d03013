"""The KIP-848 consumer group protocol with a real client: confluent-kafka / librdkafka with
``group.protocol=consumer`` (ConsumerGroupHeartbeat, server-side assignment).

These tests run their own broker, started with short consumer-group timeouts
(``group.consumer.heartbeat.interval.ms=500``, ``group.consumer.session.timeout.ms=6000``) so
rebalances settle in about a second; the last test restarts it. Every wait is bounded (DEADLINE).
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from broker_process import BrokerProcess
from e2e_helpers import OP_TIMEOUT, commit_and_count, create_topic
from e2e_helpers import run_until as _run_until

pytestmark = pytest.mark.timeout(120)

DEADLINE = 20.0
OVERRIDES = {
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": "6000",
}
KIP848_GA = 0x020C0000  # librdkafka 2.12.0: group.protocol=consumer generally available


# -- a broker of this module's own, with overrides ------------------------------------------------


@pytest.fixture(scope="module")
def kip848_broker(request):
    b = BrokerProcess(Path(tempfile.mkdtemp(prefix="shoal-e2e-kip848-")), overrides=OVERRIDES)
    b.start()
    yield b
    b.stop()
    if request.session.testsfailed:
        print(f"\nkept broker directory {b.workdir}")
    else:
        shutil.rmtree(b.workdir, ignore_errors=True)


@pytest.fixture
def cbroker(kip848_broker, request):
    failed_before = request.session.testsfailed
    assert kip848_broker.proc is not None and kip848_broker.proc.poll() is None, kip848_broker.log_tail()
    yield kip848_broker
    if request.session.testsfailed > failed_before:
        print(f"\n--- {kip848_broker.log_path} ---\n{kip848_broker.log_tail()}")


# -- clients ---------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, n: int, start: int = 0, partitions: int = 1) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert p.flush(OP_TIMEOUT) == 0


def kip848_consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 50,
    }
    conf.update(extra)
    return Consumer(conf)


class Member:
    """Counts a message only once its offset is committed (a failed commit, e.g. STALE_MEMBER_EPOCH
    while an epoch moves, puts the batch back), so every message must be counted exactly once."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, counted: list, **extra) -> None:
        self.name, self.topic, self.counted = name, topic, counted
        self.c = kip848_consumer(bootstrap, group, **extra)
        self.c.subscribe([topic])
        self.revocations = 0
        self._last: set[int] = set()

    @property
    def assignment(self) -> set[int]:
        now = {tp.partition for tp in self.c.assignment()}
        if self._last - now:
            self.revocations += 1
        self._last = now
        return now

    def step(self) -> None:
        batch = [m for m in self.c.consume(num_messages=200, timeout=0.02) if not m.error()]
        self.assignment  # noqa: B018 - notice revocations
        commit_and_count(self, batch)

    def close(self) -> None:
        self.c.close()


def run_until(members: list[Member], cond, what: str, timeout: float = DEADLINE) -> None:
    _run_until(members, cond, what, timeout)


def split(members: list[Member], sizes: list[int], partitions: int):
    def check() -> bool:
        got = [m.assignment for m in members]
        return sorted(map(len, got)) == sorted(sizes) and len(set().union(*got)) == partitions == sum(map(len, got))

    return check


def exactly_once(counted: list, n: int) -> None:
    values = Counter(v for _, _, v in counted)
    assert sorted(values) == list(range(n)), f"missing: {sorted(set(range(n)) - set(values))[:10]}"
    assert max(values.values()) == 1, [v for v, k in values.items() if k > 1][:10]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- tests --------------------------------------------------------------------------------------


def test_librdkafka_speaks_the_consumer_protocol():
    version, number = confluent_kafka.libversion()
    assert number >= KIP848_GA, f"librdkafka {version} predates group.protocol=consumer (2.12)"


def test_first_record_of_a_new_group_with_default_settings(cbroker):
    topic = unique("latency")
    create_topic(cbroker.bootstrap, topic, 3)
    produce(cbroker.bootstrap, topic, 30, partitions=3)
    c = Consumer({"bootstrap.servers": cbroker.bootstrap, "group.id": unique("fresh"), "group.protocol": "consumer",
                  "auto.offset.reset": "earliest"})
    try:
        start = time.monotonic()
        c.subscribe([topic])
        msg = None
        while msg is None and time.monotonic() - start < DEADLINE:
            m = c.poll(0.02)
            if m is not None and not m.error():
                msg = m
        elapsed = time.monotonic() - start
    finally:
        c.close()
    assert msg is not None
    print(f"\nKIP-848: subscribe to first record in {elapsed * 1000:.0f} ms")
    assert elapsed < 2.0, f"first record after {elapsed:.2f}s"


def test_three_members_share_six_partitions_through_leave_and_join(cbroker):
    topic = unique("six")
    create_topic(cbroker.bootstrap, topic, 6)
    group = unique("g")
    counted: list = []
    members = [Member(f"m{i}", cbroker.bootstrap, group, topic, counted) for i in range(3)]
    try:
        run_until(members, split(members, [2, 2, 2], 6), "three members with two partitions each")
        produce(cbroker.bootstrap, topic, 300, 0, partitions=6)
        run_until(members, lambda: len(counted) >= 300, "the first 300 messages")

        members.pop().close()  # leaves with epoch -1: the other two take three partitions each
        produce(cbroker.bootstrap, topic, 300, 300, partitions=6)
        run_until(members, split(members, [3, 3], 6), "two members with three partitions each")
        run_until(members, lambda: len(counted) >= 600, "600 messages")

        members.append(Member("m3", cbroker.bootstrap, group, topic, counted))
        produce(cbroker.bootstrap, topic, 300, 600, partitions=6)
        run_until(members, split(members, [2, 2, 2], 6), "three members again")
        run_until(members, lambda: len(counted) >= 900, "900 messages")
        for m in members:
            m.step()
    finally:
        for m in members:
            m.close()
    exactly_once(counted, 900)


def test_server_side_assignor_selection(cbroker):
    topic = unique("assignor")
    create_topic(cbroker.bootstrap, topic, 4)
    admin = AdminClient({"bootstrap.servers": cbroker.bootstrap})
    groups = {"range": unique("ranged"), "uniform": unique("uniformed")}
    members = []
    try:
        for assignor, group in groups.items():
            extra = {"group.remote.assignor": assignor} if assignor == "range" else {}
            pair = [Member(f"{assignor}{i}", cbroker.bootstrap, group, topic, [], **extra) for i in range(2)]
            members += pair
            run_until(pair, split(pair, [2, 2], 4), f"two {assignor} members")
        for assignor, group in groups.items():
            desc = admin.describe_consumer_groups([group])[group].result(OP_TIMEOUT)
            assert desc.type == ConsumerGroupType.CONSUMER
            assert desc.partition_assignor == assignor
            ranges = sorted(sorted(tp.partition for tp in m.assignment.topic_partitions) for m in desc.members)
            assert ranges == [[0, 1], [2, 3]]
        bad = kip848_consumer(cbroker.bootstrap, unique("bad"), **{"group.remote.assignor": "nope"})
        bad.subscribe([topic])
        err = None
        deadline = time.monotonic() + DEADLINE
        while err is None and time.monotonic() < deadline:
            m = bad.poll(0.05)
            if m is not None and m.error():
                err = m.error()
        bad.close()
        assert err is not None and "assignor" in err.str().lower()
    finally:
        for m in members:
            m.close()


def test_classic_and_consumer_groups_side_by_side(cbroker):
    topic = unique("both")
    create_topic(cbroker.bootstrap, topic, 4)
    produce(cbroker.bootstrap, topic, 200, partitions=4)
    classic_group, kip848_group = unique("classic"), unique("kip848")
    classic_counted: list = []
    kip848_counted: list = []
    classic = Member("classic", cbroker.bootstrap, classic_group, topic, classic_counted, **{"group.protocol": "classic"})
    modern = [Member(f"new{i}", cbroker.bootstrap, kip848_group, topic, kip848_counted) for i in range(2)]
    try:
        run_until([classic, *modern], lambda: len(classic_counted) >= 200 and len(kip848_counted) >= 200, "both groups")
        admin = AdminClient({"bootstrap.servers": cbroker.bootstrap})
        listed = {g.group_id: g for g in admin.list_consumer_groups().result(OP_TIMEOUT).valid}
        assert listed[classic_group].type == ConsumerGroupType.CLASSIC
        assert listed[kip848_group].type == ConsumerGroupType.CONSUMER
        # The classic consumer cannot join the consumer group while it has members.
        intruder = kip848_consumer(cbroker.bootstrap, kip848_group, **{"group.protocol": "classic"})
        intruder.subscribe([topic])
        err = None
        deadline = time.monotonic() + 10
        while err is None and time.monotonic() < deadline:
            m = intruder.poll(0.05)
            for x in modern:
                x.step()
            if m is not None and m.error():
                err = m.error()
        intruder.close()
        assert err is not None and err.code() == confluent_kafka.KafkaError.INCONSISTENT_GROUP_PROTOCOL
    finally:
        classic.close()
        for m in modern:
            m.close()
    exactly_once(classic_counted, 200)
    exactly_once(kip848_counted, 200)


def test_regex_subscription_resolved_by_the_broker(cbroker):
    prefix = unique("rx")
    create_topic(cbroker.bootstrap, f"{prefix}-a", 2)
    create_topic(cbroker.bootstrap, f"{prefix}-b", 1)
    create_topic(cbroker.bootstrap, unique("other"), 1)
    c = kip848_consumer(cbroker.bootstrap, unique("rxg"))
    c.subscribe([f"^{prefix}-.*"])
    try:
        def assigned() -> set:
            return {(tp.topic, tp.partition) for tp in c.assignment()}

        deadline = time.monotonic() + DEADLINE
        want = {(f"{prefix}-a", 0), (f"{prefix}-a", 1), (f"{prefix}-b", 0)}
        while assigned() != want and time.monotonic() < deadline:
            c.poll(0.05)
        assert assigned() == want
        create_topic(cbroker.bootstrap, f"{prefix}-c", 1)  # a new matching topic joins the assignment
        want.add((f"{prefix}-c", 0))
        while assigned() != want and time.monotonic() < deadline:
            c.poll(0.05)
        assert assigned() == want
    finally:
        c.close()


def test_static_member_restarts_without_moving_anything(cbroker):
    topic = unique("static")
    create_topic(cbroker.bootstrap, topic, 4)
    group = unique("sg")
    a = Member("a", cbroker.bootstrap, group, topic, [], **{"group.instance.id": "ia"})
    b = Member("b", cbroker.bootstrap, group, topic, [], **{"group.instance.id": "ib"})
    members = [a, b]
    try:
        run_until(members, split(members, [2, 2], 4), "two static members")
        a_parts, b_parts, b_revocations = a.assignment, b.assignment, b.revocations
        a.close()  # a static member leaves with epoch -2: its partitions wait for it
        a2 = Member("a2", cbroker.bootstrap, group, topic, [], **{"group.instance.id": "ia"})
        members = [a2, b]
        run_until(members, lambda: a2.assignment == a_parts, "the restarted member getting its partitions back")
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            for m in members:
                m.step()
        assert b.assignment == b_parts and b.revocations == b_revocations
    finally:
        for m in members:
            m.close()


def test_offsets_and_members_survive_a_broker_restart(cbroker):
    """Runs last: it restarts the module's broker."""
    topic = unique("restart")
    create_topic(cbroker.bootstrap, topic, 4)
    produce(cbroker.bootstrap, topic, 100, partitions=4)
    committed_group, live_group = unique("committed"), unique("live")

    # 1. A consumer reads everything, commits offset 10 of each partition and goes away.
    c = kip848_consumer(cbroker.bootstrap, committed_group)
    c.subscribe([topic])
    got: list = []
    deadline = time.monotonic() + DEADLINE
    while len(got) < 100 and time.monotonic() < deadline:
        m = c.poll(0.05)
        if m is not None and not m.error():
            got.append(m)
    assert len(got) == 100
    c.commit(offsets=[TopicPartition(topic, p, 10) for p in range(4)], asynchronous=False)
    c.close()

    # 2. Two members stay up across the restart.
    counted: list = []
    members = [Member(f"m{i}", cbroker.bootstrap, live_group, topic, counted) for i in range(2)]
    try:
        run_until(members, split(members, [2, 2], 4), "two members")
        run_until(members, lambda: len(counted) >= 100, "100 messages")
        before = [(m.assignment, m.revocations) for m in members]
        cbroker.restart()
        produce(cbroker.bootstrap, topic, 100, 100, partitions=4)
        run_until(members, lambda: len(counted) >= 200, "100 more messages after the restart", timeout=30)
        assert [(m.assignment, m.revocations) for m in members] == before, "the restart caused a rebalance"
    finally:
        for m in members:
            m.close()
    exactly_once(counted, 200)

    # 3. The committed group resumes where it committed.
    c = kip848_consumer(cbroker.bootstrap, committed_group)
    c.subscribe([topic])
    first: dict[int, int] = {}
    deadline = time.monotonic() + DEADLINE
    while len(first) < 4 and time.monotonic() < deadline:
        m = c.poll(0.05)
        if m is not None and not m.error():
            first.setdefault(m.partition(), m.offset())
    c.close()
    assert first == {p: 10 for p in range(4)}


def test_a_pathological_regex_is_answered_at_once(cbroker):
    """Issue 24 item 3: ``(a+)+b`` against a topic ``"a" * 28`` backtracked 2**28 steps in Python's
    ``re`` on the broker's event loop (minutes); RE2 answers at once, and the broker keeps serving
    other requests. What RE2/J refuses, and a pattern over 1000 characters, gets
    INVALID_REGULAR_EXPRESSION (128)."""
    import asyncio

    from shoal.client import AdminClient as ShoalAdmin, build_entity
    from shoal.protocol import codec

    topic, fine = "a" * 28, unique("rx-fine")
    create_topic(cbroker.bootstrap, topic, 1)
    create_topic(cbroker.bootstrap, fine, 1)

    def heartbeat(group: str, member: str, regex: str) -> dict:
        return {"group_id": group, "member_id": member, "member_epoch": 0, "instance_id": None, "rack_id": None,
                "rebalance_timeout": 30000, "subscribed_topic_names": None, "subscribed_topic_regex": regex,
                "server_assignor": None, "topic_partitions": []}

    async def go() -> None:
        async with ShoalAdmin(cbroker.bootstrap, client_id="regex-tests", timeout=60) as c:
            async def send(key: int, fields: dict):
                return await c.request(key, build_entity(codec.request_type(key, c.version_for(key)), fields))

            async def beat(regex: str, group: str | None = None):
                group = group or unique("rx-evil")
                for _ in range(50):  # the offsets topic may still be loading
                    r = await send(68, heartbeat(group, str(uuid.uuid4()), regex))
                    if r.error_code not in (14, 15):
                        return r
                    await asyncio.sleep(0.1)
                return r

            await beat(".*")  # the coordinator is ready before the clock starts
            t0 = time.monotonic()
            evil = asyncio.ensure_future(beat("(a+)+b"))
            await asyncio.sleep(0.05)
            md = await send(3, {"topics": None, "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
            metadata_s = time.monotonic() - t0
            r = await evil
            heartbeat_s = time.monotonic() - t0
            assert r.error_code == 0, r
            assert metadata_s < 2.0 and heartbeat_s < 2.0, (metadata_s, heartbeat_s)
            assert topic in {t.name for t in md.topics}
            ok = await beat(f"{fine}|x{{2,5}}")  # a regex that does match still resolves
            assert ok.error_code == 0
            for bad in ("(a)\\1", "(?=a)a", "a*+", "(", "a" * 1001):
                r = await beat(bad)
                assert r.error_code == 128, (bad, r)

    asyncio.run(go())
    assert "Traceback" not in cbroker.log_tail(400)
