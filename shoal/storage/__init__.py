"""The partition log: Kafka-style segments of RecordBatch v2 files, indexes, recovery, retention.

``LogManager`` owns every ``PartitionLog`` of a data directory; ``LogConfig`` carries a topic's
log settings; ``FileSystem`` is the seam where tests inject torn writes and crashes.
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
