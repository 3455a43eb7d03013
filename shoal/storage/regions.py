"""File regions of a segment: what a zero-copy Fetch sends (``shoal.protocol.regions``).

A region owns a duplicate of the segment's descriptor (``os.dup``, as Kafka's ``FileRecords``
slices keep their channel), so the bytes stay readable while it waits to be sent even if the
segment is deleted (retention, a compaction swap) or its cached descriptor is closed meanwhile:
the file's data lives until the last descriptor on it closes. A truncation is different: the
file really gets shorter, and the sender pads what is missing (``shoal.protocol.regions.padding``).

The descriptors are bounded: at most ``RegionCounters.limit`` regions are open at once in the
process (a quarter of the descriptor limit by default); past it the log answers with a copy, so a
slow consumer or a response of many partitions cannot take the descriptors sockets need.
"""

from __future__ import annotations

import os

from shoal.protocol.regions import Region, RegionCounters, padding
from shoal.storage.cache import descriptor_limit

RegionCounters.limit = max(16, descriptor_limit() // 4)


class FileRegion(Region):
    """``length`` bytes at ``offset`` of a segment, through a descriptor of its own; ``end_offset``
    is the offset after its last batch (whole batches, as the log returns them)."""

    __slots__ = ("fd", "offset", "length", "end_offset")

    def __init__(self, fd: int, offset: int, length: int, end_offset: int) -> None:
        self.fd = fd
        self.offset = offset
        self.length = length
        self.end_offset = end_offset

    @classmethod
    def take(cls, fd: int, offset: int, length: int, end_offset: int) -> FileRegion | None:
        """A region over a duplicate of ``fd`` (the caller holds the segment's lock), or None
        when the budget of open regions is used up (the caller copies instead)."""
        if RegionCounters.open >= RegionCounters.limit:
            return None
        region = cls(os.dup(fd), offset, length, end_offset)
        RegionCounters.open += 1
        return region

    def read(self) -> bytes:
        """Its bytes (the copy path), padded as the sender would if the file was truncated."""
        data = os.pread(self.fd, self.length, self.offset) if self.fd >= 0 else b""
        if len(data) < self.length:
            data += padding(self.length - len(data))
        return data

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            RegionCounters.open -= 1
            os.close(fd)

    def __del__(self) -> None:  # a response dropped before it was sent (throttled, connection gone)
        self.close()

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, offset={self.offset}, length={self.length})"
