"""``shoal placement assign`` as a user runs it (a subprocess): the stretch-cluster document's
examples, text and JSON output, Kafka's errors and exit statuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
STRETCH = "1:dc1,2:dc1,3:dc1,4:dc2,5:dc2,6:dc2"


def shoal_placement(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "shoal", "placement", "assign", *args],
        capture_output=True, text=True, timeout=60, env=env,
    )


@pytest.mark.parametrize("rf, replicas, racks", [
    (4, [1, 4, 2, 5], ["dc1", "dc2", "dc1", "dc2"]),
    (5, [1, 4, 2, 5, 3], ["dc1", "dc2", "dc1", "dc2", "dc1"]),
])
def test_stretch_document_examples_json(rf, replicas, racks):
    r = shoal_placement("--brokers", STRETCH, "--partitions", "1", "--replication-factor", str(rf),
                        "--start-index", "0", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {
        "start_index": 0, "replica_shift": 0,
        "partitions": [{"partition": 0, "replicas": replicas, "racks": racks}],
    }


def test_text_output():
    r = shoal_placement("--brokers", STRETCH, "--replication-factor", "4", "--start-index", "0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "start index 0, replica shift 0; 6 brokers in 2 racks",
        "partition 0: 1,4,2,5  racks dc1,dc2,dc1,dc2",
    ]
    r = shoal_placement("--brokers", "0,1,2,3,4", "--partitions", "10", "--replication-factor", "3",
                        "--start-index", "0")
    lines = r.stdout.splitlines()
    assert lines[0] == "start index 0, replica shift 0; 5 brokers (no racks)"
    assert lines[1] == "partition 0: 0,1,2" and lines[6] == "partition 5: 0,2,3"  # Kafka's doc table


def test_random_start_is_printed_and_replayable():
    r = shoal_placement("--brokers", STRETCH, "--partitions", "6", "--replication-factor", "2", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert 0 <= doc["start_index"] < 6 and 0 <= doc["replica_shift"] < 6
    again = shoal_placement("--brokers", STRETCH, "--partitions", "6", "--replication-factor", "2", "--json",
                            "--start-index", str(doc["start_index"]), "--replica-shift", str(doc["replica_shift"]))
    assert json.loads(again.stdout) == doc
    assert sorted(p["replicas"][0] for p in doc["partitions"]) == [1, 2, 3, 4, 5, 6]


def test_errors():
    r = shoal_placement("--brokers", "1", "--replication-factor", "3")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip() == (
        "shoal placement assign: INVALID_REPLICATION_FACTOR: Replication factor: 3 larger than available brokers: 1."
    )
    r = shoal_placement("--brokers", "1:a,2", "--replication-factor", "1")
    assert r.returncode == 1 and "Not all brokers have rack information" in r.stderr
    for bad in ("1,x", "1,1", "1:", ""):
        r = shoal_placement("--brokers", bad, "--replication-factor", "1")
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (bad, r.stderr)
    r = shoal_placement("--brokers", "1", "--replication-factor", "1", "--start-index", "-1")
    assert r.returncode == 2
