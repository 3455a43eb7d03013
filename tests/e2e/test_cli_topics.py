"""``shoal topics`` against the running broker, as a user runs it (a subprocess)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(90)

REPO = Path(__file__).resolve().parents[2]


def shoal_topics(broker, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "shoal", "topics", *args, "--bootstrap-server", broker.bootstrap, "--timeout", "15"],
        capture_output=True, text=True, timeout=30, env=env,
    )


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    return r.stdout


def one_line_error(r: subprocess.CompletedProcess, code_name: str) -> None:
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and code_name in lines[0], r.stderr


def test_topic_lifecycle(broker, topic_name):
    t = topic_name
    out = ok(shoal_topics(broker, "create", t, "--validate-only", "--partitions", "2"))
    assert "validate only" in out
    assert t not in ok(shoal_topics(broker, "list")).split()

    out = ok(shoal_topics(
        broker, "create", t, "--partitions", "3", "--replication-factor", "1",
        "--config", "retention.ms=86400000", "--config", "cleanup.policy=compact",
    ))
    assert out.strip() == f"Created topic {t}."
    assert t in ok(shoal_topics(broker, "list")).splitlines()

    one_line_error(shoal_topics(broker, "create", t, "--partitions", "3"), "TOPIC_ALREADY_EXISTS")
    ok(shoal_topics(broker, "create", t, "--partitions", "3", "--if-not-exists"))

    out = ok(shoal_topics(broker, "describe", t))
    lines = out.splitlines()
    head = lines[0]
    assert head.startswith(f"Topic: {t}\tTopicId: ")
    assert re.search(r"TopicId: [0-9a-f-]{36}\t", head) or re.search(r"TopicId: [A-Za-z0-9_-]{22}\t", head)
    assert "\tPartitionCount: 3\tReplicationFactor: 1\t" in head
    assert head.endswith("Configs: cleanup.policy=compact,retention.ms=86400000")
    assert lines[1:] == [f"\tTopic: {t}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1" for p in range(3)]

    ok(shoal_topics(broker, "alter", t, "--partitions", "5"))
    ok(shoal_topics(broker, "alter", t, "--config", "retention.ms=1000", "--delete-config", "cleanup.policy"))
    head, *parts = ok(shoal_topics(broker, "describe", t)).splitlines()
    assert "PartitionCount: 5" in head and head.endswith("Configs: retention.ms=1000")
    assert len(parts) == 5
    one_line_error(shoal_topics(broker, "alter", t, "--partitions", "2"), "INVALID_PARTITIONS")
    one_line_error(shoal_topics(broker, "alter", t, "--config", "retention.ms=forever"), "INVALID_CONFIG")

    # describe without a name lists every topic, ours included.
    assert f"Topic: {t}\t" in ok(shoal_topics(broker, "describe"))

    assert ok(shoal_topics(broker, "delete", t)).strip() == f"Deleted topic {t}."
    assert t not in ok(shoal_topics(broker, "list")).split()
    one_line_error(shoal_topics(broker, "delete", t), "UNKNOWN_TOPIC_OR_PARTITION")
    ok(shoal_topics(broker, "delete", t, "--if-exists"))
    one_line_error(shoal_topics(broker, "describe", t), "UNKNOWN_TOPIC_OR_PARTITION")


def test_bad_arguments_and_unreachable_broker(broker):
    r = shoal_topics(broker, "create", "x", "--config", "novalue")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    one_line_error(shoal_topics(broker, "create", "bad/name"), "INVALID_TOPIC_EXCEPTION")

    class Nowhere:
        bootstrap = "127.0.0.1:1"

    r = shoal_topics(Nowhere, "list")
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1 and "127.0.0.1:1" in r.stderr
