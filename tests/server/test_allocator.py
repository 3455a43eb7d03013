"""shoal.server.allocator: a broker process reuses the pages of its large buffers (glibc)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shoal.server.allocator import operator_settings, tune

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Four 1 MiB buffers (a request's frame, its records, ...) allocated, touched and freed, 50 times:
# the minor page faults that costs.
ROUNDS = """
import resource, sys
if sys.argv[1] == "tune":
    from shoal.server.allocator import tune
    assert tune()
def one():
    bufs = [bytearray(1 << 20) for _ in range(4)]
    for b in bufs:
        b[::4096] = b"\\1" * len(b[::4096])
one()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    one()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


def _faults(mode: str, **env: str) -> int:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    environ.update(env, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", ROUNDS, mode], env=environ, capture_output=True, text=True,
                         check=True, timeout=60)
    return int(out.stdout)


@pytest.mark.skipif(not hasattr(os, "confstr") or "glibc" not in (os.confstr("CS_GNU_LIBC_VERSION") or ""),
                    reason="glibc's malloc only")
def test_large_buffers_reuse_their_pages_once_tuned() -> None:
    # glibc's defaults give the freed megabytes back and fault them in again: 4 x 256 pages a round
    assert _faults("plain") > 50 * 512
    assert _faults("tune") < 500


def test_the_operators_settings_win() -> None:
    assert not operator_settings({})
    assert operator_settings({"MALLOC_TRIM_THRESHOLD_": "1000"})
    assert operator_settings({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4096"})
    assert not operator_settings({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"})
    assert tune(environ={"MALLOC_MMAP_THRESHOLD_": "131072"}) is False
