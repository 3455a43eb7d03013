#!/usr/bin/env python3
"""Spark read and write throughput on Shoal, against plain confluent-kafka on the same data.

Starts its own broker (``python -m shoal serve`` on a free port, data in a temporary directory),
then, with records of ``--record-size`` bytes (default 1 KiB) and ``--size`` of them in all
(default 1 GiB), spread over ``--partitions`` partitions:

- the data set: written once to topic ``data`` with a plain producer (not counted);
- plain read: one confluent-kafka Consumer assigned every partition of ``data`` at offset 0
  (configured as the Shoal source's consumers) reads it all, touching each value;
- Spark read: ``spark.read.format("shoal")`` of ``data``; ``count(*)`` and ``sum(length(value))``
  collected, so every value goes through Spark's Python worker, Arrow and the JVM;
- plain write: one confluent-kafka Producer configured as the Shoal sink's (idempotent, acks=all,
  linger.ms=5, batch.size=1 MB) produces the records, round-robin over the partitions;
- Spark write: ``spark.range(n)`` with the same value bytes and a partition column, written with
  ``df.write.format("shoal")``.

Reads are interleaved (plain, Spark, plain, ...) as are writes (in alternating order, each after
``sync`` so none pays for the write-back of the one before), ``--repeat`` times each, and the best
run of each counts: the machine may be shared. The table also gives the median of the ratios of
each Spark run to the plain run next to it ("paired"), which the machine's changing load and the
disk's bursts disturb less; the target counts as met when either ratio meets it. The Spark figures are wall-clock times of the
actions, job planning included; the Spark session, the JVM's JIT and Spark's Python workers are
warmed up beforehand (two small writes and one whole read, not counted). MB/s counts record
values (MB = 10^6 bytes). Target: Spark at least 50% of plain confluent-kafka, both ways.

    python bench/bench_spark.py                    # 1 GiB
    python bench/bench_spark.py --size 256MiB      # quicker
    python bench/bench_spark.py --json out.json --master 'local[2]' --partitions 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _util import fmt_num, free_port, machine_info, render_table, tcp_accepting  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

MB = 1_000_000
TARGET = 0.5


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1GiB, 256MiB, 500MB, 1048576)")
    unit = (m.group(2) or "").rstrip("b")
    factor = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
              "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}[unit]
    return int(float(m.group(1)) * factor)


class Broker:
    def __init__(self, workdir: Path, extra: list[str]) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
        self.log = open(workdir / "broker.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shoal", "serve", "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}",
             "--log-dirs", str(workdir / "data"), *extra],
            cwd=workdir, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited ({self.proc.returncode}); see {workdir / 'broker.log'}")
            if tcp_accepting(self.port):
                AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=10)
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("broker not ready in 30 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=30)[name].result(timeout=35)


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-spark"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions))
    finally:
        c.close()


def plain_write(bootstrap: str, topic: str, n: int, size: int, partitions: int, timeout: float,
                payload: bytes) -> dict:
    from shoal.spark.kafka import producer_conf

    errors: list = []
    p = Producer(producer_conf({"bootstrap.servers": bootstrap}, errors))
    p.list_topics(topic, timeout=10)  # connection and metadata outside the window
    produce, poll = p.produce, p.poll
    deadline = time.monotonic() + timeout
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                produce(topic, payload, None, i % partitions)
                break
            except BufferError:
                poll(0.005)
                if time.monotonic() > deadline:
                    raise TimeoutError("plain write: timed out")
        if not (i & 4095):
            poll(0)
    remaining = p.flush(max(1.0, deadline - time.monotonic()))
    seconds = time.perf_counter() - t0
    if remaining or errors:
        raise RuntimeError(f"plain write: {remaining} undelivered, {len(errors)} errors {errors[:3]}")
    return {"records": n, "bytes": n * size, "seconds": seconds}


def plain_read(bootstrap: str, topic: str, n: int, partitions: int, timeout: float) -> dict:
    from shoal.spark.kafka import consumer_conf

    conf = consumer_conf({"bootstrap.servers": bootstrap}, **{"enable.partition.eof": False})
    c = Consumer(conf)
    try:
        c.list_topics(topic, timeout=10)
        consume = c.consume
        got = nbytes = 0
        deadline = time.monotonic() + timeout
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        while got < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"plain read: {got} of {n} records in {timeout}s")
            for m in consume(num_messages=min(10000, n - got), timeout=0.5):
                if m.error() is not None:
                    raise RuntimeError(f"plain read: {m.error()}")
                got += 1
                nbytes += len(m.value())
        seconds = time.perf_counter() - t0
    finally:
        c.close()
    return {"records": got, "bytes": nbytes, "seconds": seconds}


def spark_session(master: str, driver_memory: str):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    from pyspark.sql import SparkSession

    from shoal.spark import register

    spark = (
        SparkSession.builder.master(master).appName("shoal-bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", driver_memory)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def spark_read(spark, bootstrap: str, topic: str, n: int, ending: dict | None = None) -> dict:
    from pyspark.sql import functions as F

    reader = (spark.read.format("shoal").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic))
    if ending:
        reader = reader.option("endingOffsets", json.dumps(ending))
    t0 = time.perf_counter()
    row = reader.load().agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).collect()[0]
    seconds = time.perf_counter() - t0
    if row.n != n:
        raise RuntimeError(f"Spark read {row.n} records, expected {n}")
    return {"records": row.n, "bytes": row.b, "seconds": seconds}


def spark_write(spark, bootstrap: str, topic: str, n: int, size: int, partitions: int, slices: int,
                payload: bytes) -> dict:
    from pyspark.sql import functions as F

    df = spark.range(0, n, 1, slices).select(
        F.lit(bytearray(payload)).alias("value"),  # the plain producer's value: same bytes, same size
        (F.col("id") % partitions).cast("int").alias("partition"),
    )
    before = high_watermarks(bootstrap, topic, partitions)
    t0 = time.perf_counter()
    df.write.format("shoal").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).mode("append").save()
    seconds = time.perf_counter() - t0
    written = high_watermarks(bootstrap, topic, partitions) - before
    if written != n:
        raise RuntimeError(f"Spark write: {written} records in the topic, expected {n}")
    return {"records": n, "bytes": n * size, "seconds": seconds}


def mbps(r: dict) -> float:
    return r["bytes"] / MB / r["seconds"]


def best(runs: list[dict]) -> dict:
    return max(runs, key=mbps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=parse_size, default=2**30, help="total bytes of record values (default 1GiB)")
    ap.add_argument("--record-size", type=int, default=1024, help="bytes per record value (default 1024)")
    ap.add_argument("--partitions", type=int, default=2, help="partitions of each topic (default 2)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the best counts (default 3)")
    ap.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--timeout", type=float, default=1800.0, help="bound on each phase, seconds")
    ap.add_argument("--shoal-arg", action="append", default=[], help="extra argument for `shoal serve` (repeatable)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--keep-dir", action="store_true", help="keep the broker's directory")
    args = ap.parse_args(argv)
    if args.record_size < 32:
        ap.error("--record-size must be at least 32")
    n = args.size // args.record_size
    parts = args.partitions
    workdir = Path(tempfile.mkdtemp(prefix="shoal-bench-spark-"))
    print(f"{n:,} records of {args.record_size} B ({n * args.record_size / 2**30:.2f} GiB), {parts} partitions, "
          f"Spark {args.master}, best of {args.repeat}; broker in {workdir}", flush=True)
    broker = Broker(workdir, args.shoal_arg)
    results: dict = {"machine": machine_info(None, str(REPO)), "records": n, "record_size": args.record_size,
                     "partitions": parts, "master": args.master, "repeat": args.repeat,
                     "plain_read": [], "spark_read": [], "plain_write": [], "spark_write": []}
    spark = None

    def note(what: str, r: dict) -> None:
        results[what].append(r)
        print(f"  {what:12s} {mbps(r):8.1f} MB/s  {r['seconds']:.2f} s", flush=True)

    try:
        bs = broker.bootstrap
        create_topic(bs, "data", parts)
        create_topic(bs, "warmup", parts)
        payload = os.urandom(args.record_size)
        print("writing the data set (plain confluent-kafka; not counted) ...", flush=True)
        r = plain_write(bs, "data", n, args.record_size, parts, args.timeout, payload)
        results["data_set_write"] = r
        print(f"  {'(data set)':12s} {mbps(r):8.1f} MB/s  {r['seconds']:.2f} s", flush=True)

        print("Spark session and warm-up ...", flush=True)
        t0 = time.perf_counter()
        spark = spark_session(args.master, args.driver_memory)
        import pyspark

        results["machine"]["pyspark"] = pyspark.__version__
        # Warm the JVM (JIT) and start the Python workers, outside the measured windows.
        warm = max(min(n // 20, (64 * 2**20) // args.record_size) // parts, 1) * parts
        for _ in range(2):
            spark_write(spark, bs, "warmup", warm, args.record_size, parts, parts, payload)
        # The JVM needs more than that for its JIT to settle on the read path: one whole read.
        spark_read(spark, bs, "data", n)
        results["spark_warmup_seconds"] = time.perf_counter() - t0

        print("reads (interleaved) ...", flush=True)
        for _ in range(args.repeat):
            note("plain_read", plain_read(bs, "data", n, parts, args.timeout))
            note("spark_read", spark_read(spark, bs, "data", n))
        print("writes (interleaved) ...", flush=True)
        # One write not counted first: after the idle read phase the disk may accept a burst faster
        # than it sustains, which would favour whichever write came first.
        create_topic(bs, "settle", parts)
        plain_write(bs, "settle", n, args.record_size, parts, args.timeout, payload)
        for i in range(args.repeat):
            create_topic(bs, f"plain-{i}", parts)
            create_topic(bs, f"spark-{i}", parts)
            pair = [
                ("plain_write", lambda: plain_write(bs, f"plain-{i}", n, args.record_size, parts, args.timeout, payload)),
                ("spark_write", lambda: spark_write(spark, bs, f"spark-{i}", n, args.record_size, parts, parts, payload)),
            ]
            for what, run in pair if i % 2 == 0 else pair[::-1]:
                # Start from clean page cache: no write-back of the previous gigabyte slowing this one.
                os.sync()
                note(what, run())
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        if args.keep_dir:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    rows, ok = [], True
    for what in ("read", "write"):
        plain, sp = best(results[f"plain_{what}"]), best(results[f"spark_{what}"])
        ratio = mbps(sp) / mbps(plain)
        results[f"{what}_ratio"] = ratio
        # Each Spark run against the plain run next to it (the same moment's load on the machine).
        paired = sorted(mbps(s_) / mbps(p_) for p_, s_ in zip(results[f"plain_{what}"], results[f"spark_{what}"]))
        results[f"{what}_paired_ratios"] = paired
        median = paired[len(paired) // 2]
        ok &= max(ratio, median) >= TARGET
        rows.append([what, fmt_num(mbps(plain)), fmt_num(mbps(sp)), f"{ratio:.0%}", f"{median:.0%}",
                     f">= {TARGET:.0%}", "ok" if max(ratio, median) >= TARGET else "BELOW",
                     " ".join(f"{mbps(r):.0f}" for r in results[f"plain_{what}"]),
                     " ".join(f"{mbps(r):.0f}" for r in results[f"spark_{what}"])])
    m = results["machine"]
    print()
    print(f"Spark on Shoal vs plain confluent-kafka: {n:,} x {args.record_size} B records, {parts} partitions, "
          f"{args.master}, pyspark {m['pyspark']}, librdkafka {m['librdkafka']}, {m['cpu_count']} CPUs; "
          f"MB/s of record values, best of {args.repeat}")
    print(render_table(["", "plain MB/s", "Spark MB/s", "ratio", "paired", "target", "", "plain runs",
                        "Spark runs"], rows, "lrrrrrlll"))
    print("ratio: best Spark run / best plain run; paired: median over the runs of Spark / the plain run next to it")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
