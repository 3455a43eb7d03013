"""CPU cost of ``PartitionLog.append`` (the leader's hot path) against a baseline version of
``shoal/storage/log.py``, measured in the same run, rounds interleaved (A/B).

    python bench/bench_log_append.py [--appends 20000] [--rounds 7] [--baseline REV]

The baseline defaults to the commit before the leader-epoch cache came in (the parent of the
commit that added ``shoal/storage/epochs.py``; HEAD while it is uncommitted). Each round opens a
fresh log in a temporary directory per side and appends single-batch client requests of one
1 KiB record (and of ten 100-byte records) under a constant leader epoch, as a partition leader
does; it prints CPU µs (user + system, ``time.process_time``: steadier than wall time on a
shared machine) per append per side, the median and the best of the rounds, the median of the
per-round ratios (both sides of a round ran back to back, under the same load), and the ratios
new/baseline (the best round is the least disturbed by other load on a shared machine).
Also times ``append_as_follower`` of the same batches, in chunks of ~64 KiB as a fetcher would.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from shoal.protocol.records import LOG_OVERHEAD, build_batch, read_header  # noqa: E402
from shoal.storage import log as new_log  # noqa: E402

T0 = 1_700_000_000_000


def baseline_rev(root: str) -> str:
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "shoal/storage/epochs.py"],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout.split()
    return f"{added[-1]}^" if added else "HEAD"


def load_baseline(root: str, rev: str):
    src = subprocess.run(
        ["git", "show", f"{rev}:shoal/storage/log.py"], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    path = os.path.join(tempfile.mkdtemp(prefix="bench-log-"), "_log_baseline.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("shoal.storage._log_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def time_appends(mod, batches: list[bytes], tmp: str) -> float:
    log = mod.PartitionLog.open(os.path.join(tmp, "t-0"), now_ms=T0)
    try:
        append = log.append
        start = time.process_time()
        for b in batches:
            append(b, now_ms=T0, leader_epoch=5)
        return (time.process_time() - start) / len(batches) * 1e6
    finally:
        log.close(flush=False)


def time_follower(leader_dir: str, n: int, tmp: str) -> float:
    """µs per batch for a follower copying the leader's log in ~64 KiB reads."""
    leader = new_log.PartitionLog.open(leader_dir, now_ms=T0)
    chunks = []
    offset = 0
    while offset < leader.log_end_offset:
        data = leader.read(offset, 64 * 1024).records
        chunks.append(data)
        p = 0
        while p < len(data):
            h = read_header(data, p)
            offset = h.last_offset + 1
            p += h.batch_length + LOG_OVERHEAD
    leader.close(flush=False)
    follower = new_log.PartitionLog.open(os.path.join(tmp, "t-0"), now_ms=T0)
    try:
        start = time.process_time()
        for c in chunks:
            follower.append_as_follower(c)
        return (time.process_time() - start) / n * 1e6
    finally:
        follower.close(flush=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--appends", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--baseline", default=None)
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rev = args.baseline or baseline_rev(root)
    old = load_baseline(root, rev)
    short = subprocess.run(["git", "rev-parse", "--short", rev], cwd=root, capture_output=True, text=True)
    print(f"baseline: {rev} ({short.stdout.strip()})")
    print(f"{args.appends} appends per side per round, {args.rounds} rounds, interleaved; CPU µs per append")
    shapes = {
        "1 x 1 KiB": [build_batch([(T0, b"k", b"v" * 1024, [])]) for _ in range(64)],
        "10 x 100 B": [build_batch([(T0 + i, b"k%d" % i, b"v" * 100, []) for i in range(10)]) for _ in range(64)],
    }
    for name, pool in shapes.items():
        batches = [pool[i % len(pool)] for i in range(args.appends)]
        a_times, b_times, f_times = [], [], []
        for r in range(args.rounds):
            with tempfile.TemporaryDirectory() as ta, tempfile.TemporaryDirectory() as tb:
                order = [(old, ta, a_times), (new_log, tb, b_times)]
                if r % 2:
                    order.reverse()
                for mod, tmp, out in order:
                    out.append(time_appends(mod, batches, tmp))
                with tempfile.TemporaryDirectory() as tf:
                    f_times.append(time_follower(os.path.join(tb, "t-0"), len(batches), tf))
        a, b = statistics.median(a_times), statistics.median(b_times)
        amin, bmin = min(a_times), min(b_times)
        print(f"{name:>11}: median baseline {a:6.2f} µs  new {b:6.2f} µs  ratio new/baseline {b / a:5.3f};"
              f" best baseline {amin:6.2f} µs  new {bmin:6.2f} µs  ratio {bmin / amin:5.3f}")
        paired = statistics.median(y / x for x, y in zip(a_times, b_times))
        print(f"{'':>11}  paired (median of the per-round ratios new/baseline): {paired:5.3f}")
        rounds_a = " ".join(f"{x:.2f}" for x in a_times)
        rounds_b = " ".join(f"{x:.2f}" for x in b_times)
        print(f"{'':>11}  rounds: baseline {rounds_a} | new {rounds_b}")
        print(f"{'':>11}  append_as_follower, ~64 KiB chunks: {statistics.median(f_times):6.2f} µs per batch")


if __name__ == "__main__":
    main()
