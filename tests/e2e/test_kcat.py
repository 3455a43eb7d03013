"""kcat (librdkafka's command-line client) against a real Shoal broker."""

from __future__ import annotations

import shutil
import subprocess

import pytest

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (make deps)"),
]


def kcat(*args: str, input: bytes | None = None, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", *args], input=input, capture_output=True, timeout=timeout)


def test_metadata_listing(broker, make_topic, topic_name):
    topic = make_topic(topic_name, partitions=3)
    r = kcat("-b", broker.bootstrap, "-L", "-t", topic, "-m", "10")
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr.decode()
    assert "1 brokers:" in out and f"127.0.0.1:{broker.port}" in out
    assert f'topic "{topic}" with 3 partitions:' in out
    for p in range(3):
        assert f"partition {p}, leader 1, replicas: 1, isrs: 1" in out


def test_produce_keys_and_consume_from_beginning(broker, make_topic, topic_name):
    topic = make_topic(topic_name, partitions=2)
    lines = [f"key{i % 5}:value {i}" for i in range(50)]
    r = kcat("-b", broker.bootstrap, "-P", "-t", topic, "-K:", "-z", "lz4", "-m", "10",
             input=("\n".join(lines) + "\n").encode())
    assert r.returncode == 0, r.stderr.decode()
    r = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-m", "10",
             "-f", r"%p|%o|%k|%s\n")
    assert r.returncode == 0, r.stderr.decode()
    rows = [line.split("|", 3) for line in r.stdout.decode().splitlines() if line]
    assert sorted(f"{k}:{v}" for _, _, k, v in rows) == sorted(lines)
    by_partition: dict[str, list[tuple[int, str, int]]] = {}
    for p, o, k, v in rows:
        by_partition.setdefault(p, []).append((int(o), k, int(v.split()[1])))
    partitions_of_key: dict[str, set[str]] = {}
    for p, items in by_partition.items():
        assert [o for o, _, _ in items] == list(range(len(items)))
        for key in {k for _, k, _ in items}:
            seq = [n for _, k, n in items if k == key]
            assert seq == sorted(seq), f"key {key} out of order in partition {p}"
            partitions_of_key.setdefault(key, set()).add(p)
    assert all(len(ps) == 1 for ps in partitions_of_key.values())
