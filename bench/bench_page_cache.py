"""What a write into the page cache costs on this machine, fresh memory against recycled.

    python bench/bench_page_cache.py [--runs 8] [--mib 150] [--dir DIR] [--pause 0]

Writes ``--mib`` MiB to a new file in ``--dir`` (default: a temporary directory) in 1 MiB
``pwrite`` calls, as a broker appends a megabyte Produce, then deletes it; ``--runs`` times,
``--pause`` seconds apart. Prints each run's ``pwrite`` p50 / max and MiB/s. On a virtual machine
that hands freed memory back to its host (virtio free page reporting, balloon), a write into page
frames the host no longer backs costs several times a write into frames just freed by the file
before: the first run (and any run after a pause) is the slow one. The broker pays this copy on
every append (it is where 60-70% of its CPU goes when idempotent producers send 1 MB batches, perf:
``copy_folio_from_iter_atomic``), and an idempotent producer (one request in flight) waits for it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--mib", type=int, default=150)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--pause", type=float, default=0.0, help="seconds between runs (freed memory may go back to the host)")
    args = ap.parse_args()
    buf = os.urandom(1 << 20)
    with tempfile.TemporaryDirectory(prefix="bench-page-cache-", dir=args.dir) as d:
        rows = []
        for r in range(args.runs):
            if r and args.pause:
                time.sleep(args.pause)
            path = os.path.join(d, f"f{r}")
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
            times = []
            t0 = time.perf_counter()
            try:
                for i in range(args.mib):
                    t = time.perf_counter()
                    os.pwrite(fd, buf, i << 20)
                    times.append((time.perf_counter() - t) * 1000)
            finally:
                os.close(fd)
                os.unlink(path)
            rows.append((statistics.median(times), max(times), args.mib / (time.perf_counter() - t0)))
    fast = min(r[0] for r in rows)
    for i, (p50, top, rate) in enumerate(rows):
        print(f"run {i + 1}: {args.mib} x 1 MiB pwrite: p50 {p50:.2f} ms, max {top:.2f} ms; {rate:,.0f} MiB/s "
              f"({p50 / fast:.1f}x the fastest run's p50)")


if __name__ == "__main__":
    main()
