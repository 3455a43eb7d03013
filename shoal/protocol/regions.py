"""Record sets sent from a file, not from memory: the protocol's side of zero-copy Fetch.

A Fetch response's ``records`` may be a ``Region`` (a range of a segment file; the storage layer
makes them, ``shoal.storage.regions``) instead of bytes. ``encode_response`` then writes the
response's own bytes as usual, with each region's exact length in its size field, and returns a
``RegionFrame``: the byte runs and the regions in order, which the connection writes, sending each
region with ``sendfile`` between the byte runs (``shoal.server.connection``). No I/O here.
"""

from __future__ import annotations

import struct
import threading
from typing import Any, Iterator


class RegionCounters:
    """Process-wide: regions holding a descriptor now (``open``, at most ``limit``: past it the log
    copies), bytes sent with sendfile, bytes padded after a truncation (metrics, tests)."""

    open = 0
    limit = 1024  # set by shoal.storage.regions from the descriptor limit
    sent_bytes = 0
    padded_bytes = 0


class Region:
    """``length`` bytes of an open file from ``offset``; ``read()`` returns them (the copy path),
    ``close()`` gives back the descriptor. Implemented by ``shoal.storage.regions.FileRegion``."""

    __slots__ = ()
    fd: int
    offset: int
    length: int
    end_offset: int  # the offset after its last batch

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class RegionFrame:
    """A response frame with regions in it: ``parts`` alternate byte runs and regions, in order;
    ``len()`` is the whole frame's size, length prefix included."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[Any], size: int) -> None:
        self.parts = parts
        self.size = size

    def __len__(self) -> int:
        return self.size

    def regions(self) -> Iterator[Region]:
        return (p for p in self.parts if isinstance(p, Region))

    def close(self) -> None:
        """Give back the descriptors of the regions not yet sent (a response dropped)."""
        for r in self.regions():
            r.close()

    def materialize(self) -> bytes:
        """The whole frame as bytes (the copy path: a connection that cannot sendfile)."""
        out = b"".join(p.read() if isinstance(p, Region) else bytes(p) for p in self.parts)
        self.close()
        return out


class _Sink(threading.local):
    regions: list[tuple[int, Region]] | None = None


SINK = _Sink()
"""Where the writer leaves the regions it meets (their position in the output), while
``encode_response`` collects them; with none set the writer copies the region's bytes."""


def take_region(out: bytearray, v: Region) -> None:
    """The writer met a region at the end of ``out`` (its size field already written)."""
    sink = SINK.regions
    if sink is None:
        out += v.read()
        v.close()
    else:
        sink.append((len(out), v))


_PREFIX = struct.Struct(">qi")  # a batch's base offset and length
LOG_OVERHEAD = 12
_MIN_BATCH = 61  # Kafka's RECORD_BATCH_OVERHEAD: its client refuses a batch length below a header's


def padding(n: int) -> bytes:
    """``n`` bytes to send in place of a region's part that a truncation took from its file.

    The size fields of the response are already sent, so exactly ``n`` bytes must follow. A
    truncation cuts at a batch boundary, so what was sent ends with whole batches; the padding
    reads as one batch longer than the bytes left, which every client takes for the partial batch
    a fetch may end with and drops (Kafka's clients: ``remaining < size + LOG_OVERHEAD``;
    librdkafka likewise; its length is at least a batch header's, which Kafka's client checks
    first). Fewer than 12 bytes are a partial batch header already."""
    RegionCounters.padded_bytes += n
    if n < LOG_OVERHEAD:
        return bytes(n)
    return _PREFIX.pack(-1, max(n - LOG_OVERHEAD + 1, _MIN_BATCH)) + bytes(n - LOG_OVERHEAD)
