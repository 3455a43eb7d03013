"""Helpers for bench/bench_brokers.py: /proc sampling, machine info, formatting.

Only the standard library is used (psutil is optional in pyproject's ``bench``
extra but is not required here: everything is read from /proc directly).
"""

from __future__ import annotations

import math
import os
import platform
import socket
import subprocess
import sys
import time
from collections import deque
from typing import Iterable, Iterator, Sequence

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# --------------------------------------------------------------------------
# /proc sampling
# --------------------------------------------------------------------------

def _read_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the ``(comm)`` field (index 0 = state)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # comm may contain spaces/parentheses: split after the last ')'
    return data[data.rfind(")") + 2:].split()


def _all_stats() -> Iterator[tuple[int, list[str]]]:
    """(pid, stat fields) of every live process (none when /proc cannot be read)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for name in entries:
        if name.isdigit():
            st = _read_stat(int(name))
            if st is not None:
                yield int(name), st


def descendants(pid: int) -> list[int]:
    """``pid`` plus all its live descendants (scan of /proc, children first order irrelevant)."""
    children: dict[int, list[int]] = {}
    for child, st in _all_stats():
        try:
            ppid = int(st[1])
        except (IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(child)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def cpu_seconds(pids: Iterable[int]) -> float:
    """user+sys CPU seconds of the given processes (all threads included).

    Fields (man 5 proc): utime=14, stime=15 (1-based, counting pid and comm).
    After stripping pid and comm, state is index 0, so utime=11, stime=12.
    """
    total = 0
    for pid in pids:
        st = _read_stat(pid)
        if st is None:
            continue
        total += int(st[11]) + int(st[12])
    return total / CLK_TCK


PF_KTHREAD = 0x00200000


def user_process_cpu() -> dict[int, float]:
    """CPU seconds (user+sys) of every live user-space process, by pid (kernel threads left
    out: they mostly write back what a benchmark's broker wrote). Two tables taken around a
    window, without the benchmark's own processes, tell what other work ran meanwhile."""
    out: dict[int, float] = {}
    for pid, st in _all_stats():
        try:
            if not int(st[6]) & PF_KTHREAD:
                out[pid] = (int(st[11]) + int(st[12])) / CLK_TCK
        except (IndexError, ValueError):
            continue
    return out


def cpu_since(before: dict[int, float], after: dict[int, float], exclude: Iterable[int]) -> float:
    """CPU seconds the processes of ``after`` (minus ``exclude``) used since ``before``; a
    process new in ``after`` counts from zero. Processes that ended in between are missed."""
    skip = set(exclude)
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items() if pid not in skip)


def status_kib(pids: Iterable[int], field: str) -> int:
    """Sum of a ``/proc/<pid>/status`` kB field (VmRSS, VmHWM, ...) over pids, in KiB."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total


# --------------------------------------------------------------------------
# networking
# --------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tcp_accepting(port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------
# statistics / formatting
# --------------------------------------------------------------------------

def percentile(sorted_vals: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence, q in [0, 100]."""
    if not sorted_vals:
        return math.nan
    k = max(0, min(len(sorted_vals) - 1, math.ceil(q / 100.0 * len(sorted_vals)) - 1))
    return sorted_vals[k]


def fmt_num(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if math.isnan(v):
            return "n/a"
        a = abs(v)
        if a >= 1000:
            return f"{v:,.0f}"
        if a >= 100:
            return f"{v:.1f}"
        if a >= 1:
            return f"{v:.2f}"
        if a == 0:
            return "0"
        return f"{v:.3f}"
    return str(v)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
                 align: str | None = None) -> str:
    """Plain-text table. ``align`` is a string of 'l'/'r' per column."""
    align = align or ("l" * len(headers))
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))

    def line(cells):
        out = []
        for i, c in enumerate(cells):
            out.append(c.rjust(widths[i]) if align[i] == "r" else c.ljust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep] + [line(r) for r in rows])


# --------------------------------------------------------------------------
# machine info
# --------------------------------------------------------------------------

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def meminfo_mib(*fields: str) -> int | None:
    """Sum of ``/proc/meminfo`` fields (``MemTotal``, ``Dirty``, ``Writeback`` ...) in MiB."""
    total, seen = 0, False
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in fields:
                    total += int(rest.split()[0])
                    seen = True
    except OSError:
        return None
    return total // 1024 if seen else None


def wait_writeback(max_mib: int, timeout: float) -> float:
    """Wait (at most ``timeout`` s) until dirty and under-writeback pages are below ``max_mib``,
    so that a window does not pay for the page cache a previous one filled (writers are
    throttled once dirty pages pass the kernel's dirty ratio). Returns the seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        dirty = meminfo_mib("Dirty", "Writeback")
        if dirty is None or dirty <= max_mib:
            break
        time.sleep(0.2)
    return time.perf_counter() - t0


def _cmd_output(argv: list[str], cwd: str | None = None) -> str | None:
    try:
        out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def _first(v):
    return v[0] if isinstance(v, tuple) else v


def machine_info(tansu_bin: str | None, repo_root: str) -> dict:
    import confluent_kafka

    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "mem_total_mib": meminfo_mib("MemTotal"),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "python_impl": platform.python_implementation(),
        "confluent_kafka": getattr(confluent_kafka, "__version__", None) or _first(confluent_kafka.version()),
        "librdkafka": confluent_kafka.libversion()[0],
        "tansu": (_cmd_output([tansu_bin, "--version"]) if tansu_bin else None),
        # read-only git query (no state change)
        "shoal_git": _cmd_output(["git", "rev-parse", "--short", "HEAD"], cwd=repo_root),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


class RingLog:
    """Tiny bounded in-memory log sink (used for librdkafka client logs)."""

    def __init__(self, maxlen: int = 400, echo: bool = False):
        self.lines: deque[str] = deque(maxlen=maxlen)
        self.echo = echo

    def add(self, line: str) -> None:
        self.lines.append(line)
        if self.echo:
            print(line, file=sys.stderr, flush=True)

    def tail(self, n: int = 20) -> list[str]:
        return list(self.lines)[-n:]

    def clear(self) -> None:
        self.lines.clear()


def flat_out(producer, topic: str, seconds: float, size: int) -> tuple[int, float]:
    """(records acknowledged, seconds): ``producer`` (a confluent-kafka Producer, its settings the
    caller's) produces ``size``-byte records to ``topic`` as fast as it takes them for ``seconds``,
    then flushes (at most 120 s)."""
    value = b"x" * size
    acked = [0]

    def done(err, _msg) -> None:
        if err is None:
            acked[0] += 1

    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        try:
            producer.produce(topic, value, on_delivery=done)
        except BufferError:
            producer.poll(0.001)
        producer.poll(0)
    producer.flush(120)
    return acked[0], time.perf_counter() - start
