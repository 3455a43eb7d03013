"""``shoal placement check`` (the stretch advisor) as a user runs it: offline from a placement
JSON or Kafka's rack-aware placement, and online for a topic of a real 3-broker cluster
(racks dc1..dc3) on the real etcd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
TWO_DCS = "1:dc1,2:dc1,3:dc1,4:dc2,5:dc2,6:dc2"
DRILL_B = {"version": 2, "replicas": [{"count": 2, "constraints": {"rack": "dc1"}},
                                      {"count": 2, "constraints": {"rack": "dc2"}}],
           "observers": [{"count": 1, "constraints": {"rack": "dc1"}}, {"count": 1, "constraints": {"rack": "dc2"}}]}


def check(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "shoal", "placement", "check", *args],
                          capture_output=True, text=True, timeout=60, env=env)


def test_drill_a_rack_aware_rf4_min_isr_3():
    r = check("--replication-factor", "4", "--brokers", TWO_DCS, "--min-insync-replicas", "3")
    assert r.returncode == 1, r.stderr  # a warning: losing a DC stops acks=all (by design)
    assert "every acknowledged record is in at least 2 datacenters" in r.stdout
    assert "2 DCs: min.insync.replicas=3" in r.stdout
    assert "lose dc1: acks=all fails (NOT_ENOUGH_REPLICAS); consumers read; no acknowledged record lost" in r.stdout


def test_drill_b_placement_json_from_a_file(tmp_path):
    spec = tmp_path / "placement.json"
    spec.write_text(json.dumps(DRILL_B))
    r = check("--spec", str(spec), "--brokers", TWO_DCS, "--min-insync-replicas", "3", "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    (layout,) = doc["layouts"]
    assert layout["partitions"] == [0, 1, 2, 3, 4, 5]
    assert (layout["replicas_per_dc"], layout["observers_per_dc"]) == ({"dc1": 2, "dc2": 2}, {"dc1": 1, "dc2": 1})
    assert layout["observer_promotion_policy"] == "under-min-isr"
    assert [(x["dc"], x["produce_acks_all"], x["produce_after_promotion"], x["observers_promoted"])
            for x in layout["dc_loss"]] == [("dc1", False, True, 1), ("dc2", False, True, 1)]


def test_three_dcs_that_survive_exit_0():
    r = check("--replication-factor", "3", "--brokers", "1:a,2:b,3:c", "--min-insync-replicas", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WARNING" not in r.stdout and r.stdout.count("acks=all works") == 3


@pytest.mark.parametrize("args, code, message", [
    (["--spec", '{"version":3,"replicas":[]}', "--brokers", TWO_DCS], 1, "INVALID_CONFIG: unknown version 3"),
    (["--spec", json.dumps({"version": 1, "replicas": [{"count": 4, "constraints": {"rack": "dc1"}}]}),
      "--brokers", TWO_DCS], 1, "INVALID_REPLICATION_FACTOR: rack 'dc1' has 3 brokers, fewer than the 4 replicas"),
    (["--replication-factor", "3"], 2, "--brokers ID:RACK,... is needed"),
    (["--spec", "/nonexistent.json", "--brokers", TWO_DCS], 2, "--spec: cannot read /nonexistent.json"),
    (["--replication-factor", "3", "--brokers", TWO_DCS, "--min-insync-replicas", "0"], 2, "must be at least 1"),
])
def test_errors_are_one_line(args, code, message):
    r = check(*args)
    assert r.returncode == code, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_a_topic_of_a_running_cluster(cluster3):
    topic = f"stretch-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdmin({"bootstrap.servers": cluster3.bootstrap(), "log_level": 2})
    admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})])[topic].result(20)
    r = check("--topic", topic, "--bootstrap-server", cluster3.bootstrap(1), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    (layout,) = json.loads(r.stdout)["layouts"]
    assert layout["replicas_per_dc"] == {"dc1": 1, "dc2": 1, "dc3": 1} and layout["min_insync_replicas"] == 2
    assert layout["acked_records_in_at_least_dcs"] == 2
    assert all(x["produce_acks_all"] and x["consume"] for x in layout["dc_loss"])
    r = check("--topic", topic, "--bootstrap-server", cluster3.bootstrap(1), "--min-insync-replicas", "3")
    assert r.returncode == 1 and "lose dc1: acks=all fails (NOT_ENOUGH_REPLICAS)" in r.stdout
    r = check("--topic", "no-such-topic", "--bootstrap-server", cluster3.bootstrap(1))
    assert r.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in r.stderr
