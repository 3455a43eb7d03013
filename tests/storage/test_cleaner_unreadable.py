"""The log cleaner and batches it cannot read (issue 10, item 2): kept as they are, counted, and
logged once, with decompression bounded; never an exception that would restart the pass."""

from __future__ import annotations

import logging
import struct

from crc32c import crc32c

from shoal.protocol.records import HEADER, HEADER_SIZE, LOG_OVERHEAD, build_batch, compress, read_header
from shoal.storage.cleaner import CleanerStats, OffsetMap, clean_batch


def zstd_batch(body: bytes, base_offset: int = 0) -> bytes:
    h = list(HEADER.unpack_from(build_batch([(1, b"k", b"v", [])]), 0))
    payload = compress(4, body)
    h[0], h[1], h[5] = base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload), 4
    out = bytearray(HEADER.pack(*h)) + payload
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def test_a_batch_beyond_the_bound_is_kept_counted_and_logged_once(caplog):
    bomb = zstd_batch(b"\0" * (8 << 20), base_offset=7)  # 8 MiB against a 1 MiB bound
    h = read_header(bomb)
    known: dict = {}
    for _pass in range(3):
        m = OffsetMap(limit=1 << 20, known_bad=known)
        stats = CleanerStats()
        assert m.add_batch(bomb, 0, h) == 0 and len(m) == 0  # nothing mapped from it
        with caplog.at_level(logging.WARNING, logger="shoal.storage.cleaner"):
            got = clean_batch(bomb, 0, h, m, now_ms=0, delete_retention_ms=0, retain_empty=False, stats=stats)
        assert got == bomb and stats.batches_skipped == 1 and stats.records_retained == 1
    lines = [r for r in caplog.records if "kept the batch at offsets 7-7" in r.getMessage()]
    assert len(lines) == 1 and "MESSAGE_TOO_LARGE" in lines[0].getMessage()


def test_a_malformed_batch_is_kept_and_good_ones_are_still_cleaned():
    good_old = build_batch([(1, b"a", b"old", [])], base_offset=0)
    bad = zstd_batch(b"\x05garbage that is no record", base_offset=1)
    good_new = build_batch([(2, b"a", b"new", [])], base_offset=2)
    m = OffsetMap()
    for b in (good_old, bad, good_new):
        m.add_batch(b, 0, read_header(b))
    assert m.get(b"a") == 2
    stats = CleanerStats()
    out = [clean_batch(b, 0, read_header(b), m, now_ms=0, delete_retention_ms=0, retain_empty=False, stats=stats)
           for b in (good_old, bad, good_new)]
    assert out == [None, bad, good_new] and stats.batches_skipped == 1
