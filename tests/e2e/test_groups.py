"""Consumer groups with real clients: confluent-kafka, kafka-python, aiokafka and kcat (-G).

Every wait is bounded (DEADLINE). Tests that wait for a rebalance set heartbeat.interval.ms low so
members notice quickly; the latency test uses the clients' default settings.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from e2e_helpers import OP_TIMEOUT, commit_and_count, create_topic
from e2e_helpers import run_until as _run_until
from polling import until

pytestmark = pytest.mark.timeout(60)
DEADLINE = 20.0
FAST = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 250}


def produce(bootstrap: str, topic: str, n: int, start: int = 0, partitions: int | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        kw = {"partition": i % partitions} if partitions else {"key": str(i).encode()}
        p.produce(topic, value=str(i).encode(), **kw)
    assert p.flush(OP_TIMEOUT) == 0


def group_consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 50,
        **FAST,
    }
    conf.update(extra)
    return Consumer(conf)


def wait_until(cond, what: str, consumers=(), timeout: float = DEADLINE) -> None:
    """``until``, polling ``consumers`` (if any) between checks."""
    until(cond, timeout, what, every=0.02, retry=(),
          between=(lambda: [c.poll(0.02) for c in consumers]) if consumers else None)


class Member:
    """A group member that counts a message only once its offset is committed.

    A failed commit (the partition moved to another member meanwhile) puts the batch back: its
    messages come again, to whoever owns the partition now. So every produced message must be
    counted exactly once across all members, whatever the rebalances.
    """

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, counted: list, **extra) -> None:
        self.name = name
        self.topic = topic
        self.counted = counted
        self.assignment: set[int] = set()
        self.rebalances = 0
        self.c = group_consumer(bootstrap, group, **extra)
        self.c.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer, partitions):
        self.rebalances += 1
        self.assignment |= {p.partition for p in partitions}

    def _on_revoke(self, consumer, partitions):
        self.rebalances += 1
        self.assignment -= {p.partition for p in partitions}

    def step(self) -> None:
        batch = [m for m in self.c.consume(num_messages=200, timeout=0.02) if not m.error()]
        commit_and_count(self, batch)

    def close(self) -> None:
        self.c.close()


def run_until(members: list[Member], cond, what: str, timeout: float = DEADLINE) -> None:
    _run_until(members, cond, what, timeout)


def assignments_are(members: list[Member], sizes: list[int], partitions: int):
    def check() -> bool:
        got = [m.assignment for m in members]
        union = set().union(*got)
        return sorted(len(a) for a in got) == sorted(sizes) and len(union) == partitions and sum(map(len, got)) == partitions

    return check


def test_three_members_share_six_partitions_through_leave_and_join(broker, make_topic, topic_name):
    topic = make_topic(topic_name, partitions=6)
    group = f"g-{topic}"
    counted: list = []
    members = [Member(f"m{i}", broker.bootstrap, group, topic, counted) for i in range(3)]
    try:
        run_until(members, assignments_are(members, [2, 2, 2], 6), "three members with two partitions each")
        produce(broker.bootstrap, topic, 300, 0, partitions=6)
        run_until(members, lambda: len(counted) >= 300, "the first 300 messages")

        members.pop().close()  # a member leaves: the other two take three partitions each
        produce(broker.bootstrap, topic, 300, 300, partitions=6)
        run_until(members, assignments_are(members, [3, 3], 6), "two members with three partitions each")
        run_until(members, lambda: len(counted) >= 600, "600 messages")

        members.append(Member("m3", broker.bootstrap, group, topic, counted))  # one joins
        produce(broker.bootstrap, topic, 300, 600, partitions=6)
        run_until(members, assignments_are(members, [2, 2, 2], 6), "three members again")
        run_until(members, lambda: len(counted) >= 900, "900 messages")
        for m in members:
            m.step()
    finally:
        for m in members:
            m.close()
    values = Counter(v for _, _, v in counted)
    assert sorted(values) == list(range(900))
    assert max(values.values()) == 1, [v for v, n in values.items() if n > 1][:10]


def test_first_record_of_a_new_group_within_two_seconds_with_default_settings(broker, make_topic, topic_name):
    topic = make_topic(topic_name, partitions=3)
    produce(broker.bootstrap, topic, 30)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"fresh-{topic}", "auto.offset.reset": "earliest"})
    try:
        start = time.monotonic()
        c.subscribe([topic])
        msg = None
        while msg is None and time.monotonic() - start < DEADLINE:
            m = c.poll(0.05)
            if m is not None and not m.error():
                msg = m
        elapsed = time.monotonic() - start
    finally:
        c.close()
    assert msg is not None
    assert elapsed < 2.0, f"first record after {elapsed:.2f}s"


def test_commit_survives_broker_restart_and_kill(fresh_broker, topic_name):
    create_topic(fresh_broker.bootstrap, topic_name, 1)
    produce(fresh_broker.bootstrap, topic_name, 100, partitions=1)
    group = f"restart-{topic_name}"

    def consume_and_commit(n: int) -> list[int]:
        c = group_consumer(fresh_broker.bootstrap, group)
        c.subscribe([topic_name])
        got: list[int] = []
        deadline = time.monotonic() + DEADLINE
        try:
            while len(got) < n and time.monotonic() < deadline:
                m = c.poll(0.05)
                if m is not None and not m.error():
                    got.append(m.offset())
                    if len(got) == n:
                        c.commit(message=m, asynchronous=False)
        finally:
            c.close()
        return got

    assert consume_and_commit(40) == list(range(40))
    fresh_broker.restart()
    assert consume_and_commit(30) == list(range(40, 70))
    fresh_broker.kill9()  # no clean shutdown: the commit is in the log, if not yet fsynced
    assert consume_and_commit(30) == list(range(70, 100))
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(OP_TIMEOUT)
    assert [(tp.partition, tp.offset) for tp in res.topic_partitions] == [(0, 100)]


def test_members_carry_on_across_a_coordinator_restart(fresh_broker, topic_name):
    """The group comes back Stable from __consumer_offsets: members keep their member id and
    generation, heartbeat on, and nothing is lost or consumed twice."""
    create_topic(fresh_broker.bootstrap, topic_name, 4)
    group = f"carry-on-{topic_name}"
    counted: list = []
    members = [Member(f"m{i}", fresh_broker.bootstrap, group, topic_name, counted) for i in range(2)]
    try:
        run_until(members, assignments_are(members, [2, 2], 4), "two members")
        produce(fresh_broker.bootstrap, topic_name, 100, partitions=4)
        run_until(members, lambda: len(counted) >= 100, "100 messages")
        before = [m.rebalances for m in members]
        fresh_broker.restart()
        produce(fresh_broker.bootstrap, topic_name, 100, 100, partitions=4)
        run_until(members, lambda: len(counted) >= 200, "100 more messages after the restart")
        assert [m.rebalances for m in members] == before, "the restart caused a rebalance"
    finally:
        for m in members:
            m.close()
    values = Counter(v for _, _, v in counted)
    assert sorted(values) == list(range(200)) and max(values.values()) == 1


def test_cooperative_sticky_rebalance_moves_only_what_it_must(broker, make_topic, topic_name):
    topic = make_topic(topic_name, partitions=6)
    group = f"coop-{topic}"
    counted: list = []
    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    revoked: list[set[int]] = []
    a = Member("a", broker.bootstrap, group, topic, counted, **coop)
    original_revoke = a._on_revoke

    def on_revoke(consumer, partitions):
        revoked.append({p.partition for p in partitions})
        original_revoke(consumer, partitions)

    a.c.subscribe([topic], on_assign=a._on_assign, on_revoke=on_revoke)
    members = [a]
    try:
        run_until(members, lambda: len(a.assignment) == 6, "a owning all six partitions")
        produce(broker.bootstrap, topic, 120, partitions=6)
        run_until(members, lambda: len(counted) >= 120, "120 messages")
        before = set(a.assignment)
        b = Member("b", broker.bootstrap, group, topic, counted, **coop)
        members.append(b)
        run_until(members, assignments_are(members, [3, 3], 6), "three partitions each")
        produce(broker.bootstrap, topic, 120, 120, partitions=6)
        run_until(members, lambda: len(counted) >= 240, "240 messages")
        # Incremental: a gave up exactly the three partitions b took, and kept the others.
        assert revoked == [b.assignment] and a.assignment == before - b.assignment
    finally:
        for m in members:
            m.close()
    values = Counter(v for _, _, v in counted)
    assert sorted(values) == list(range(240)) and max(values.values()) == 1


def test_static_member_restart_without_rebalance(broker, make_topic, topic_name):
    topic = make_topic(topic_name, partitions=6)
    group = f"static-{topic}"
    counted: list = []
    extra = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 250}
    a = Member("a", broker.bootstrap, group, topic, counted, **{"group.instance.id": "instance-a"}, **extra)
    b = Member("b", broker.bootstrap, group, topic, counted, **{"group.instance.id": "instance-b"}, **extra)
    members = [a, b]
    try:
        run_until(members, assignments_are(members, [3, 3], 6), "two static members")
        a_parts, b_rebalances = set(a.assignment), b.rebalances
        a.close()  # a static member does not leave the group on close
        a2 = Member("a2", broker.bootstrap, group, topic, counted, **{"group.instance.id": "instance-a"}, **extra)
        members = [a2, b]
        run_until(members, lambda: a2.assignment == a_parts, "the restarted member getting its partitions back")
        produce(broker.bootstrap, topic, 60, partitions=6)
        run_until(members, lambda: len(counted) >= 60, "60 messages")
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            for m in members:
                m.step()
        assert b.rebalances == b_rebalances, "the other member saw a rebalance"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # referenced until the result is in
        desc = admin.describe_consumer_groups([group])[group].result(OP_TIMEOUT)
        assert str(desc.state).endswith("STABLE")
        assert sorted(m.group_instance_id for m in desc.members) == ["instance-a", "instance-b"]
    finally:
        for m in members:
            m.close()


def test_kafka_python_three_consumers(broker, make_topic, topic_name):
    """One thread per consumer, as applications run them (kafka-python 3.0 re-sends JoinGroup
    when a join completes just after a very short poll() gave up, so poll with a real timeout)."""
    from kafka import KafkaConsumer

    topic = make_topic(topic_name, partitions=6)
    group = f"kp-{topic}"
    stop = threading.Event()
    lock = threading.Lock()
    got: Counter = Counter()
    assignments: dict[int, int] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        c = KafkaConsumer(
            topic, bootstrap_servers=broker.bootstrap, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=250,
        )
        try:
            while not stop.is_set():
                records = c.poll(200)
                with lock:
                    for msgs in records.values():
                        got.update(int(m.value) for m in msgs)
                    assignments[i] = len(c.assignment())
                if records:
                    c.commit()
        except BaseException as e:  # surfaced by the test thread
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: errors or sorted(assignments.values()) == [2, 2, 2], "three members with two partitions")
        produce(broker.bootstrap, topic, 90, partitions=6)
        wait_until(lambda: errors or sum(got.values()) >= 90, "90 messages")
    finally:
        stop.set()
        for t in threads:
            t.join(15)
    assert not errors, errors
    assert sorted(got) == list(range(90)) and max(got.values()) == 1


def test_aiokafka_three_consumers_and_commit(broker, make_topic, topic_name):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    topic = make_topic(topic_name, partitions=6)
    group = f"aio-{topic}"

    async def main():
        consumers = [
            AIOKafkaConsumer(
                topic, bootstrap_servers=broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=250,
            )
            for _ in range(3)
        ]
        await asyncio.gather(*(c.start() for c in consumers))
        got: Counter = Counter()
        try:
            deadline = time.monotonic() + DEADLINE
            while sorted(len(c.assignment()) for c in consumers) != [2, 2, 2]:
                assert time.monotonic() < deadline, [c.assignment() for c in consumers]
                await asyncio.sleep(0.05)
            await asyncio.to_thread(produce, broker.bootstrap, topic, 90, 0, 6)
            while sum(got.values()) < 90:
                assert time.monotonic() < deadline + DEADLINE
                for c in consumers:
                    for msgs in (await c.getmany(timeout_ms=20)).values():
                        got.update(int(m.value) for m in msgs)
                    await c.commit()
            committed = {p: await consumers[0].committed(ATP(topic, p)) for p in range(6)}
        finally:
            await asyncio.gather(*(c.stop() for c in consumers))
        return got, committed

    got, committed = asyncio.run(main())
    assert sorted(got) == list(range(90)) and max(got.values()) == 1
    assert sum(committed.values()) == 90


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (make deps)")
def test_kcat_group_mode_three_members(broker, make_topic, topic_name):
    topic = make_topic(topic_name, partitions=6)
    group = f"kcat-{topic}"
    procs = [
        subprocess.Popen(
            ["kcat", "-b", broker.bootstrap, "-G", group, "-u", "-o", "beginning", "-f", "%p %o %s\n",
             "-X", "heartbeat.interval.ms=250", "-X", "session.timeout.ms=6000", topic],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(3)
    ]
    lines: list[list[str]] = [[] for _ in procs]
    errs: list[list[str]] = [[] for _ in procs]
    threads = []
    for i, p in enumerate(procs):
        for stream, sink in ((p.stdout, lines[i]), (p.stderr, errs[i])):
            t = threading.Thread(target=lambda s=stream, d=sink: d.extend(iter(s.readline, "")), daemon=True)
            t.start()
            threads.append(t)

    def assigned(i: int) -> set[int]:
        parts: set[int] = set()
        for line in errs[i]:
            if "assigned:" in line:
                parts = {int(x.split("[")[1].rstrip("], \n")) for x in line.split("assigned:")[1].split(",") if "[" in x}
            elif "revoked:" in line:
                parts = set()
        return parts

    try:
        wait_until(lambda: sorted(len(assigned(i)) for i in range(3)) == [2, 2, 2], "three kcat members with two partitions")
        produce(broker.bootstrap, topic, 60, partitions=6)
        wait_until(lambda: sum(len(x) for x in lines) >= 60, "60 messages through kcat")
        time.sleep(0.3)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
    values = Counter(int(line.split()[2]) for x in lines for line in x)
    assert sorted(values) == list(range(60)) and max(values.values()) == 1
    assert all(len({int(line.split()[0]) for line in x}) == 2 for x in lines)


def test_bad_group_requests_get_kafka_errors_and_leave_others_alone(broker, make_topic, topic_name):
    from shoal.client import AdminClient as ShoalAdmin, build_entity
    from shoal.protocol import codec

    topic = make_topic(topic_name, partitions=2)
    group = f"victim-{topic}"
    counted: list = []
    good = Member("good", broker.bootstrap, group, topic, counted)
    try:
        run_until([good], lambda: len(good.assignment) == 2, "the well-behaved member")

        async def bad() -> dict[str, object]:
            out: dict[str, object] = {}
            async with ShoalAdmin(broker.bootstrap) as c:
                def req(key, version, **values):
                    return c.request(key, build_entity(codec.request_type(key, version), values))

                join = dict(group_id=group, session_timeout=6000, rebalance_timeout=6000, protocol_type="consumer",
                            protocols=[{"name": "range", "metadata": b""}])
                out["join_unknown_member"] = (await req(11, 5, member_id="forged-id", **join)).error_code
                out["join_wrong_type"] = (await req(11, 5, **{**join, "protocol_type": "connect"}, member_id="")).error_code
                out["join_bad_session"] = (await req(11, 5, **{**join, "session_timeout": 10}, member_id="")).error_code
                out["heartbeat_unknown"] = (await req(12, 4, group_id=group, generation_id=1, member_id="forged-id")).error_code
                out["sync_unknown"] = (await req(14, 5, group_id=group, generation_id=1, member_id="forged-id")).error_code
                out["leave_unknown"] = (await req(13, 5, group_id=group, members=[{"member_id": "forged-id"}])).members[0].error_code
                commit = dict(group_id=group, member_id="forged-id", generation_id_or_member_epoch=1)
                r = await req(8, 9, **commit, topics=[{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1}]}])
                out["commit_unknown_member"] = r.topics[0].partitions[0].error_code
                r = await req(8, 9, group_id=f"simple-{topic}", member_id="", generation_id_or_member_epoch=-1, topics=[
                    {"name": topic, "partitions": [{"partition_index": 7, "committed_offset": 1},
                                                   {"partition_index": 0, "committed_offset": 1, "committed_metadata": "x" * 5000}]},
                    {"name": "no-such-topic", "partitions": [{"partition_index": 0, "committed_offset": 1}]},
                ])
                out["commit_unknown_partition"] = r.topics[0].partitions[0].error_code
                out["commit_oversized_metadata"] = r.topics[0].partitions[1].error_code
                out["commit_unknown_topic"] = r.topics[1].partitions[0].error_code
                r = await req(47, 0, group_id=group, topics=[{"name": topic, "partitions": [{"partition_index": 0}]}])
                out["offset_delete_subscribed"] = r.topics[0].partitions[0].error_code
                r = await req(42, 2, groups_names=[group, f"nope-{uuid.uuid4().hex}"])
                out["delete_groups"] = [x.error_code for x in r.results]
            return out

        results = asyncio.run(bad())
        from kio.schema.errors import ErrorCode as E

        assert results == {
            "join_unknown_member": E.unknown_member_id,
            "join_wrong_type": E.inconsistent_group_protocol,
            "join_bad_session": E.invalid_session_timeout,
            "heartbeat_unknown": E.unknown_member_id,
            "sync_unknown": E.unknown_member_id,
            "leave_unknown": E.unknown_member_id,
            "commit_unknown_member": E.unknown_member_id,
            "commit_unknown_partition": E.unknown_topic_or_partition,
            "commit_oversized_metadata": E.offset_metadata_too_large,
            "commit_unknown_topic": E.unknown_topic_or_partition,
            "offset_delete_subscribed": E.group_subscribed_to_topic,
            "delete_groups": [E.non_empty_group, E.group_id_not_found],
        }
        rebalances = good.rebalances
        produce(broker.bootstrap, topic, 20, partitions=2)
        run_until([good], lambda: len(counted) >= 20, "the good member's messages")
        assert good.rebalances == rebalances  # nothing happened to the real member
        assert sorted(v for _, _, v in counted) == list(range(20))
    finally:
        good.close()


def test_admin_client_group_operations(broker, make_topic, topic_name):
    """What kafka-consumer-groups.sh-style tooling does: list, describe, alter and read offsets,
    delete a group."""
    from confluent_kafka import ConsumerGroupState

    topic = make_topic(topic_name, partitions=2)
    group = f"admin-{topic}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tps = [TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group].result(OP_TIMEOUT)
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(OP_TIMEOUT)
    assert sorted((tp.partition, tp.offset) for tp in res.topic_partitions) == [(0, 5), (1, 7)]
    listed = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(OP_TIMEOUT)
    assert group in {g.group_id for g in listed.valid}
    desc = admin.describe_consumer_groups([group])[group].result(OP_TIMEOUT)
    assert desc.state == ConsumerGroupState.EMPTY and desc.members == [] and desc.is_simple_consumer_group

    c = group_consumer(broker.bootstrap, group)
    try:
        c.subscribe([topic])
        wait_until(lambda: len(c.assignment()) == 2, "the member", consumers=[c])
        desc = admin.describe_consumer_groups([group])[group].result(OP_TIMEOUT)
        assert desc.state == ConsumerGroupState.STABLE and len(desc.members) == 1
        assert sorted(tp.partition for tp in desc.members[0].assignment.topic_partitions) == [0, 1]
        with pytest.raises(KafkaException) as e:
            admin.delete_consumer_groups([group])[group].result(OP_TIMEOUT)
        assert e.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        c.close()
    admin.delete_consumer_groups([group])[group].result(OP_TIMEOUT)
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(OP_TIMEOUT)
    assert all(tp.offset < 0 for tp in res.topic_partitions)
