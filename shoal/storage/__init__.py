"""The partition log: Kafka-style segments of RecordBatch v2 files, indexes, recovery, retention.

``LogManager`` owns every ``PartitionLog`` of a data directory; ``LogConfig`` carries a topic's
log settings; ``FileSystem`` is the seam where tests inject torn writes and crashes.

``PartitionLog`` (``log``: the segment list, append, read, retention, truncation, flush) is split
along Kafka's seams: ``segment`` (one segment's files, ``LogSegment``), ``loader`` (opening and
recovery, ``LogLoader``), ``leader_epochs`` (the epoch cache's checkpoint), ``transactions`` (the
last stable offset, aborted-transaction indexes, producer state) and ``compaction`` (the hooks of
the ``cleaner``). Above storage it is seen through ``view``'s protocols: ``PartitionStorage``
for the replica layer, read-only ``LogView`` for everything else.
"""

from shoal.storage.cache import FileHandles, IndexCache
from shoal.storage.config import LogConfig
from shoal.storage.epochs import LeaderEpochCache
from shoal.storage.fs import FileSystem
from shoal.storage.log import (
    AppendInfo,
    LogClosed,
    OffsetOutOfRange,
    PartitionLog,
    PartitionState,
    ReadInfo,
    UnexpectedAppendOffset,
    parse_partition_dir,
)
from shoal.storage.manager import LogManager, MaintenanceReport
from shoal.storage.producer_state import ProducerStateError
from shoal.storage.transactions import ProducerInfo
from shoal.storage.view import LogView, PartitionStorage

__all__ = [
    "AppendInfo",
    "FileHandles",
    "FileSystem",
    "IndexCache",
    "LeaderEpochCache",
    "LogClosed",
    "LogConfig",
    "LogManager",
    "LogView",
    "MaintenanceReport",
    "OffsetOutOfRange",
    "PartitionLog",
    "PartitionState",
    "PartitionStorage",
    "ProducerInfo",
    "ProducerStateError",
    "ReadInfo",
    "UnexpectedAppendOffset",
    "parse_partition_dir",
]
