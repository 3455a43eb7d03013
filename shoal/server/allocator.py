"""The C allocator's thresholds for a broker process (glibc ``malloc``).

A request of a megabyte (a librdkafka Produce batch is up to ``batch.size``, 1 MB) is read,
framed, decoded and appended through a few buffers of its size. glibc serves an allocation above
``M_MMAP_THRESHOLD`` (128 KiB at first, raised as such blocks are freed) with a fresh ``mmap``
and gives the top of the heap back to the kernel past ``M_TRIM_THRESHOLD``; either way the next
request's buffers are new pages, and every 4 KiB of them is a page fault the kernel zeroes.
Measured on one broker with an idempotent librdkafka producer (one Produce in flight per
partition, so every request's buffers are freed before the next arrives): ~950 minor faults per
MB and 2.3 ms of system time per 1 MB request, against ~5 faults per MB with the thresholds
below; broker CPU per record fell by half (docs/benchmarks.md, issue 29 part 4).

:func:`tune` keeps blocks up to ``MMAP_THRESHOLD`` on the heap and up to ``TRIM_THRESHOLD`` of
free heap in the process, so the buffers of one request are reused by the next. What it costs
is memory the process keeps after a burst (at most ``TRIM_THRESHOLD`` above what it uses; the
request memory pool, ``queued.max.request.bytes``, bounds what is read at once). glibc's own
environment variables win: with ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or a
``glibc.malloc`` tunable in ``GLIBC_TUNABLES`` set, nothing is changed. Other C libraries
(musl) are left alone.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger("shoal.server")

M_TRIM_THRESHOLD = -1  # <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 16 * 1024 * 1024  # glibc caps it at 32 MiB on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 64 * 1024 * 1024
_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def operator_settings(environ: dict[str, str] | os._Environ[str]) -> bool:
    """The operator set glibc's malloc thresholds (environment variables or tunables)."""
    return any(environ.get(k) for k in _ENV) or "glibc.malloc." in environ.get("GLIBC_TUNABLES", "")


def tune(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD,
         environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Set the thresholds (once, at start-up, before the broker allocates its buffers); True if
    they were set. Setting either turns glibc's dynamic adjustment off, so both are set."""
    if operator_settings(environ):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc only: musl's mallopt does nothing
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))
    if not ok:
        log.debug("mallopt refused the thresholds (mmap %d, trim %d)", mmap_threshold, trim_threshold)
    return ok
