"""Helpers of the exactly-once Spark tests (imported as ``spark_eo_helpers``): the independent
checker's view of a topic, and the streaming job of ``spark_eo_job.py`` run, killed and re-run as
its own driver process, on one broker or a cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from spark_helpers import OP_TIMEOUT, create_topic, produce

from shoal.spark.kafka import TaskCommitLog
from shoal.spark.sink import task_log_topic

JOB = Path(__file__).with_name("spark_eo_job.py")


def view(bootstrap: str, topic: str, partitions: int, isolation: str, timeout: float = 60.0) -> list:
    """Every record of ``topic`` a consumer in ``isolation`` reads, from the start until its
    position in each partition reaches the partition's high watermark (read_committed: waits
    for the last stable offset to get there)."""
    plain = Consumer({"bootstrap.servers": bootstrap, "group.id": "eo-check", "isolation.level": "read_uncommitted"})
    try:
        ends = {p: plain.get_watermark_offsets(TopicPartition(topic, p), timeout=OP_TIMEOUT)[1] for p in range(partitions)}
    finally:
        plain.close()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eo-check", "isolation.level": isolation,
                  "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    out: list = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        pos = {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(pos[p] < ends[p] for p in pos):
            assert time.monotonic() < deadline, f"{isolation} read of {topic} stuck at {pos}, ends {ends}"
            for m in c.consume(500, 0.2):
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(m.error())
                    pos[m.partition()] = max(pos[m.partition()], m.offset())
                    continue
                out.append(m)
                pos[m.partition()] = max(pos[m.partition()], m.offset() + 1)
    finally:
        c.close()
    return out


PAD = b"x" * 2000  # rows of 2 KB: Spark's 64 KiB buffers to and from the Python UDF fill up


def name(m) -> bytes:
    return m.value().split(b"|")[0]


def start_job(bs: str, src: str, out: str, ckpt: Path, log: Path, *hang: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(JOB), bs, src, out, str(ckpt), *hang],
                            stdout=subprocess.PIPE, stderr=log.open("ab"), start_new_session=True, text=True)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid``, deepest first (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []

    def walk(p: int) -> None:
        for c in children.get(p, ()):
            walk(c)
            out.append(c)

    walk(pid)
    return out


def kill(job: subprocess.Popen) -> None:
    """kill -9 of the driver: its Python workers first (PySpark's daemon puts them in process groups
    of their own; a writer that outlives the JVM sees its input end and commits), then the JVM and
    the driver's process group."""
    for pid in _descendants(job.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(job.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    job.wait(30)


def pipeline_topics(bs: str, uniq: str, rf: int = 1) -> tuple[str, str, list[bytes]]:
    """The input topic (2 partitions, 1,000 rows of 2 KB named r0..r999), the output topic, the names."""
    src = create_topic(bs, f"{uniq}-in", 2, replication_factor=rf)
    out = create_topic(bs, f"{uniq}-out", 3, replication_factor=rf)
    names = [b"r%d" % i for i in range(1000)]
    produce(bs, src, [{"value": n + b"|" + PAD, "key": b"k%d" % i, "partition": i % 2} for i, n in enumerate(names)])
    return src, out, names


def run_to_end(bs: str, src: str, out: str, ckpt: Path, log: Path) -> dict:
    """The job, without failures, until its query ends; what it printed."""
    job = start_job(bs, src, out, ckpt, log)
    try:
        stdout, _ = job.communicate(timeout=180)
    finally:
        kill(job)
    assert job.returncode == 0, log.read_text()[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


def wait_for(what: str, check, timeout: float, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            raise AssertionError(f"the Spark job exited ({proc.returncode}) before {what}\n{log.read_text()[-3000:]}")
        assert time.monotonic() < deadline, f"not {what} after {timeout}s\n{log.read_text()[-3000:]}"
        time.sleep(0.5)


def cut_short_then_rerun(bs: str, uniq: str, tmp_path: Path, rf: int = 1, attempts: int = 3) -> None:
    """A UDF raises in the middle of task 1 of batch 1: PySpark ends the writer's input as if it
    were complete, so the task commits the rows it got, then fails (and the query with it). The
    re-run of batch 1 after the restart writes only the rest of that task's rows.

    On a loaded machine PySpark sometimes aborts the task instead (the UDF's exception reaches
    the writer before the end of its input): nothing of the task is committed, and the re-run
    writes it whole. That run is checked for exactly-once too, and the scenario is tried again on
    new topics (up to ``attempts`` times) until one has the early commit this test is about."""
    for attempt in range(attempts):
        if _cut_short_once(bs, f"{uniq}-{attempt}", tmp_path / f"attempt{attempt}", rf):
            return
    raise AssertionError(f"no early commit to test in {attempts} attempts (PySpark aborted the task each time)")


def _cut_short_once(bs: str, uniq: str, tmp_path: Path, rf: int) -> bool:
    """One run of :func:`cut_short_then_rerun`'s scenario, its output checked exactly-once either
    way; whether the failing task committed early (the case under test)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    src, out, names = pipeline_topics(bs, uniq, rf)
    ckpt, flag, log = tmp_path / "ckpt", tmp_path / "failing", tmp_path / "job.log"
    job = start_job(bs, src, out, ckpt, log, "r701", str(flag), "raise")
    try:
        job.communicate(timeout=150)
    finally:
        kill(job)
    assert job.returncode != 0 and flag.exists(), log.read_text()[-3000:]
    query_id = json.loads(next((ckpt / "metadata").open()))["id"]
    tasks = TaskCommitLog({"bootstrap.servers": bs}, task_log_topic(None, query_id), poll_timeout_ms=20_000)
    cut = [(d["firstRow"], d["records"]) for d in tasks.find(1, 1)]
    assert cut == [] or (len(cut) == 1 and cut[0][0] == 0 and 0 < cut[0][1] < 200), cut
    early = Counter(name(m) for m in view(bs, out, 3, "read_committed"))
    assert early[b"r701"] == 0  # the row the UDF failed on
    if cut:
        assert early[b"r401"] == 1  # committed: the rows before the failure

    run_to_end(bs, src, out, ckpt, log)
    committed = Counter(name(m) for m in view(bs, out, 3, "read_committed"))
    assert committed == Counter(names), {v: n for v, n in committed.items() if n != 1}
    if cut:
        n = cut[0][1]
        assert [(d["firstRow"], d["records"]) for d in tasks.find(1, 1)] == [(0, n), (n, 200 - n)]
    return bool(cut)