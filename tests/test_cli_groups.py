"""``shoal groups`` as an operator runs it (a subprocess), against a real broker process and a real
confluent-kafka consumer group, classic and KIP-848: exact lag after producing and committing,
what is refused while the group has members, reset-offsets then a consumer resuming at the reset
offsets, delete-offsets, delete, ``--output json``. Plus the pure helpers, exactly."""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from polling import until
from shoal.cli import main
from shoal.cli.common import UsageError, table
from shoal.cli.groups import new_offset, parse_datetime, parse_topic_specs

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[1]
DEADLINE = 30.0
PER_PARTITION = 20
# Record timestamps: BASE_TS + offset * 1000 on every partition; recent, or retention.ms (7 days)
# would delete the segments.
BASE_TS = (int(time.time()) - 3600) * 1000


def shoal_groups(broker, *args: str, subprocess_: bool = False) -> subprocess.CompletedProcess:
    """``shoal groups ARGS`` against ``broker``: the CLI's ``main`` in this process (a Python start
    per call would make this module slow on a loaded machine), or ``python -m shoal`` as a user
    runs it."""
    argv = ["groups", *args, "--bootstrap-server", broker.bootstrap, "--timeout", "15"]
    if subprocess_:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        return subprocess.run([sys.executable, "-m", "shoal", *argv], capture_output=True, text=True, timeout=60,
                              env=env)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse
            rc = e.code
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"exit {r.returncode}: {r.stdout}\n{r.stderr}"
    return r.stdout


def refused(r: subprocess.CompletedProcess, *words: str) -> str:
    assert r.returncode == 1, f"exit {r.returncode}: {r.stdout}\n{r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr + r.stdout, r.stderr + r.stdout
    return r.stderr


def describe_json(broker, group: str) -> dict:
    (d,) = json.loads(ok(shoal_groups(broker, "describe", group, "--output", "json")))
    return d


def make_topic(broker, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(timeout=15)


def produce(broker, topic: str, partitions: int) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for part in range(partitions):
        for i in range(PER_PARTITION):
            p.produce(topic, value=b"%d" % i, partition=part, timestamp=BASE_TS + i * 1000)
    assert p.flush(15) == 0


def consumer(broker, group: str, protocol: str) -> Consumer:
    conf = {
        "bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": protocol,
        "auto.offset.reset": "latest", "enable.auto.commit": False, "fetch.wait.max.ms": 50,
        "client.id": f"cli-test-{protocol}",
    }
    if protocol == "classic":
        conf["session.timeout.ms"] = 6000
    return Consumer(conf)


def joined(c: Consumer, partitions: int) -> bool:
    c.poll(0.1)
    return len(c.assignment()) == partitions


# -- against a real broker and real consumers --------------------------------------------------


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_groups_lifecycle(broker, protocol):
    topic, group = f"cli-groups-{uuid.uuid4().hex[:8]}", f"g-{protocol}-{uuid.uuid4().hex[:8]}"
    make_topic(broker, topic, 3)
    produce(broker, topic, 3)

    c = consumer(broker, group, protocol)
    try:
        c.subscribe([topic])
        until(lambda: joined(c, 3), DEADLINE, "the consumer to get all three partitions")
        # commit M on two partitions, none on the third
        c.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 12)], asynchronous=False)

        assert group in ok(shoal_groups(broker, "list", subprocess_=True)).split()
        listed = {g["group"]: g for g in json.loads(ok(shoal_groups(broker, "list", "--output", "json")))}
        assert listed[group]["type"] == protocol and listed[group]["state"] == "Stable"

        d = until(lambda: (d := describe_json(broker, group)) and d["state"] == "Stable" and d, DEADLINE, "Stable")
        assert d["type"] == protocol and d["coordinator"]["port"] == broker.port
        assert len(d["members"]) == 1 and d["members"][0]["client_id"] == f"cli-test-{protocol}"
        rows = {r["partition"]: r for r in d["offsets"]}
        assert [(rows[p]["current_offset"], rows[p]["log_end_offset"], rows[p]["lag"]) for p in range(3)] == [
            (5, PER_PARTITION, PER_PARTITION - 5), (12, PER_PARTITION, PER_PARTITION - 12), (None, PER_PARTITION, None)
        ]
        assert d["total_lag"] == 2 * PER_PARTITION - 17
        assert all(r["member_id"] == d["members"][0]["member_id"] for r in rows.values())

        text = ok(shoal_groups(broker, "describe", group)).strip().splitlines()
        assert text[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                   "CONSUMER-ID", "HOST", "CLIENT-ID"]
        assert text[1].split()[:6] == [group, topic, "0", "5", str(PER_PARTITION), str(PER_PARTITION - 5)]
        assert text[3].split()[:6] == [group, topic, "2", "-", str(PER_PARTITION), "-"]
        assert text[-1] == f"TOTAL-LAG {2 * PER_PARTITION - 17}"
        state = ok(shoal_groups(broker, "describe", group, "--state")).strip().splitlines()
        assert state[1].split()[-2:] == ["Stable", "1"] and f"127.0.0.1:{broker.port}" in state[1]
        members = ok(shoal_groups(broker, "describe", group, "--members", "--verbose")).strip().splitlines()
        assert f"{topic}(0,1,2)" in members[1] and members[1].split()[4] == "3"

        # refused while the group has a member, each with a clear message
        refused(shoal_groups(broker, "delete", group), "NON_EMPTY_GROUP", "stop its consumers")
        refused(shoal_groups(broker, "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute"),
                "can only be reset if the group", "current state is Stable")
        refused(shoal_groups(broker, "delete-offsets", group, "--topic", topic),
                "GROUP_SUBSCRIBED_TO_TOPIC")
    finally:
        c.close()

    until(lambda: describe_json(broker, group)["state"] == "Empty", DEADLINE, "the group to be Empty")

    # dry runs print the plan and change nothing
    plan = json.loads(ok(shoal_groups(broker, "reset-offsets", group, "--topic", f"{topic}:0,1", "--shift-by", "-3",
                                      "--output", "json")))
    assert [(o["partition"], o["new_offset"]) for o in plan["offsets"]] == [(0, 2), (1, 9)] and not plan["executed"]
    at = datetime.datetime.fromtimestamp((BASE_TS + 6500) / 1000, datetime.timezone.utc).isoformat()
    plan = json.loads(ok(shoal_groups(broker, "reset-offsets", group, "--topic", topic, "--to-datetime", at,
                                      "--dry-run", "--output", "json")))
    assert [o["new_offset"] for o in plan["offsets"]] == [7, 7, 7]
    out = ok(shoal_groups(broker, "reset-offsets", group, "--topic", topic, "--to-offset", "1000"))
    assert [line.split()[-1] for line in out.strip().splitlines()[1:]] == [str(PER_PARTITION)] * 3  # clamped
    assert [r["current_offset"] for r in describe_json(broker, group)["offsets"]] == [5, 12]

    # execute: partition 0 to 3, partition 2 to 9; a new consumer of the group resumes there
    ok(shoal_groups(broker, "reset-offsets", group, "--topic", f"{topic}:0", "--to-offset", "3", "--execute"))
    ok(shoal_groups(broker, "reset-offsets", group, "--topic", f"{topic}:2", "--to-datetime", at[:-6] + "Z",
                    "--execute"))
    d = describe_json(broker, group)
    assert [(r["partition"], r["current_offset"], r["lag"]) for r in d["offsets"]] == [
        (0, 3, PER_PARTITION - 3), (1, 12, PER_PARTITION - 12), (2, 7, PER_PARTITION - 7)
    ]
    c = consumer(broker, group, protocol)
    first: dict[int, int] = {}
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + DEADLINE
        while len(first) < 3 and time.monotonic() < deadline:
            for m in c.consume(num_messages=100, timeout=0.2):
                if not m.error():
                    first.setdefault(m.partition(), m.offset())
    finally:
        c.close()
    assert first == {0: 3, 1: 12, 2: 7}

    until(lambda: describe_json(broker, group)["state"] == "Empty", DEADLINE, "the group to be Empty again")
    out = ok(shoal_groups(broker, "delete-offsets", group, "--topic", f"{topic}:1"))
    assert f"{topic} 1" in " ".join(out.split()) and "Successful" in out
    assert [r["partition"] for r in describe_json(broker, group)["offsets"]] == [0, 2]

    assert "was successful" in ok(shoal_groups(broker, "delete", group))
    assert group not in ok(shoal_groups(broker, "list")).split()
    refused(shoal_groups(broker, "describe", group, subprocess_=True), f"Consumer group '{group}' does not exist.")
    refused(shoal_groups(broker, "delete", group), "GROUP_ID_NOT_FOUND")


def test_usage_errors_before_connecting(broker):
    r = shoal_groups(broker, "describe", subprocess_=True)
    assert r.returncode == 2 and "name a GROUP or give --all-groups" in r.stderr
    r = shoal_groups(broker, "reset-offsets", "g", "--topic", "t", "--to-datetime", "yesterday")
    assert r.returncode == 2 and "not ISO-8601" in r.stderr
    r = shoal_groups(broker, "reset-offsets", "g", "--topic", "t:x", "--to-earliest")
    assert r.returncode == 2 and "partitions must be numbers" in r.stderr
    # a group that never existed can be given offsets (Kafka: a Dead group is inactive) ...
    r = shoal_groups(broker, "reset-offsets", f"new-{uuid.uuid4().hex[:6]}", "--topic", "no-such-topic-here",
                     "--to-earliest")
    refused(r, "UNKNOWN_TOPIC_OR_PARTITION")


# -- pure helpers --------------------------------------------------------------------------------


def test_parse_topic_specs():
    assert parse_topic_specs(["t", "u:2,0", "u:1", "t:3"]) == {"t": None, "u": [0, 1, 2]}
    for bad in (":1", "t:", "t:a", "t:-1"):
        with pytest.raises(UsageError):
            parse_topic_specs([bad])


def test_new_offset_is_clamped_like_kafka():
    assert new_offset("to_earliest", True, 7, 2, 10) == 2
    assert new_offset("to_latest", True, 7, 2, 10) == 10
    assert new_offset("to_offset", 0, 7, 2, 10) == 2
    assert new_offset("to_offset", 99, 7, 2, 10) == 10
    assert new_offset("shift_by", -3, 7, 2, 10) == 4
    assert new_offset("shift_by", -30, 7, 2, 10) == 2
    assert new_offset("to_current", True, 7, 2, 10) == 7
    assert new_offset("to_datetime", "x", 7, 2, 10, at_time=5) == 5
    assert new_offset("to_datetime", "x", 7, 2, 10, at_time=-1) == 10
    with pytest.raises(ValueError):
        new_offset("shift_by", 1, None, 2, 10)


def test_parse_datetime():
    assert parse_datetime("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_datetime("2023-11-14T23:13:20.5+01:00") == 1_700_000_000_500
    with pytest.raises(UsageError):
        parse_datetime("14/11/2023")


def test_table_columns():
    assert table(["A", "LONG"], [["xyz", None], ["q", 7]]) == ["A   LONG", "xyz -", "q   7"]
