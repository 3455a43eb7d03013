"""All partition logs of one data directory: loading (and recovery), creation, deletion, upkeep.

Files in the data directory besides the ``<topic>-<partition>`` directories:

- ``shoal-log-state``: one line per partition with its log start offset, high watermark,
  recovery point, and (trusted only after a clean shutdown) log end offset and active segment
  base and size. Kafka keeps the first three in ``log-start-offset-checkpoint``,
  ``replication-offset-checkpoint`` and ``recovery-point-offset-checkpoint``. Written atomically
  by ``run_periodic`` (every ``checkpoint_interval_ms``, or soon after a DeleteRecords) and ``close``,
  when it would change (only the changed partitions' lines formatted again).
- ``.shoal-clean-shutdown``: written last by ``close``, removed by ``load``. Its presence lets
  ``load`` trust the state file and read no data; without it every partition verifies its
  segments from its recovery point on.

Inside each partition directory, next to the segments, ``<offset>.snapshot`` files hold the
idempotent producers' state (see ``shoal.storage.producer_state``); ``close`` writes one at each
log end offset so the next start replays nothing; ``leader-epoch-checkpoint`` holds the
leader-epoch cache (see ``shoal.storage.leader_epochs``), written by flushes and ``close``.
``run_periodic`` forgets producers idle for ``producer_id_expiration_ms``
(producer.id.expiration.ms), checked every
``producer_id_expiration_check_interval_ms`` (Kafka's producer.id.expiration.check.interval.ms).

Compaction (``shoal.storage.cleaner``): ``run_periodic`` also runs the log cleaner for at most
``cleaner_time_budget_ms`` (measured on the clock's monotonic reading) per call, in steps of
``cleaner_step_bytes``: it resumes a pass in progress, else picks the compacted log with the
highest dirty ratio that needs cleaning (Kafka's ``grabFilthiestCompactedLog``), and when none
does it waits ``cleaner_backoff_ms`` (log.cleaner.backoff.ms) before looking again.
``cleaner_enabled`` is log.cleaner.enable. Each partition keeps its own cleaner checkpoint.

``load``, ``run_periodic`` and ``close`` block on disk and are meant for a worker thread;
``get``/``get_or_create``/``delete_partition`` are quick and may be called from the event loop,
also while ``run_periodic`` runs in a thread.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from shoal.clock import Clock
from shoal.storage.cache import FileHandles, IndexCache
from shoal.storage.cleaner import DEFAULT_MAX_MAP_ENTRIES
from shoal.storage.config import LogConfig
from shoal.storage.fs import DEFAULT_FS, FileSystem
from shoal.storage.log import LogClosed, PartitionLog, PartitionState, parse_partition_dir

log = logging.getLogger(__name__)

STATE_FILE = "shoal-log-state"
CLEAN_SHUTDOWN_FILE = ".shoal-clean-shutdown"
PARTITION_METADATA = "partition.metadata"  # Kafka's: the topic id a partition directory holds
_STATE_HEADER = "shoal-log-state 1"


@dataclass(slots=True)
class MaintenanceReport:
    """What one ``run_periodic`` did."""

    deleted_segments: int = 0
    rolled: int = 0
    flushed: int = 0
    purged_files: int = 0
    expired_producers: int = 0
    compacted_bytes: int = 0  # read by the cleaner (mapping and rewriting)
    compaction_passes: int = 0  # finished passes (their checkpoints moved)
    cleaner_skipped_batches: int = 0  # unreadable batches the cleaner kept as they were
    checkpointed: bool = False
    errors: int = 0


def read_state_file(data: bytes | None) -> dict[tuple[str, int], PartitionState]:
    """Parse ``shoal-log-state``; an unreadable file yields nothing (so everything is recovered)."""
    out: dict[tuple[str, int], PartitionState] = {}
    if not data:
        return out
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return out
    if not lines or lines[0].strip() != _STATE_HEADER:
        # another format (a newer release's) is never misread: every partition is recovered
        log.warning("%s begins %r, not %r: recovering every partition from its segments instead", STATE_FILE,
                    lines[0][:40] if lines else "", _STATE_HEADER)
        return out
    for line in lines[1:]:
        parts = line.split()
        if len(parts) != 8:
            continue
        try:
            nums = [int(x) for x in parts[1:]]
        except ValueError:
            continue
        out[(parts[0], nums[0])] = PartitionState(*nums[1:])
    return out


def _state_line(topic: str, partition: int, s: PartitionState) -> str:
    return (f"{topic} {partition} {s.log_start_offset} {s.high_watermark} {s.recovery_point} "
            f"{s.log_end_offset} {s.active_base} {s.active_size}")


class LogManager:
    """Owns every ``PartitionLog`` under ``data_dir`` and the caches they share."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        clock: Clock,
        fs: FileSystem | None = None,
        default_config: LogConfig | None = None,
        max_open_files: int | None = None,
        index_cache_bytes: int = 64 * 1024 * 1024,
        checkpoint_interval_ms: int = 5000,
        retention_check_interval_ms: int = 300000,
        producer_id_expiration_ms: int = 86400000,
        producer_id_expiration_check_interval_ms: int = 600000,
        cleaner_enabled: bool = True,
        cleaner_time_budget_ms: int = 200,
        cleaner_step_bytes: int = 1024 * 1024,
        cleaner_backoff_ms: int = 15000,
        cleaner_max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
    ) -> None:
        self.data_dir = os.fspath(data_dir)
        self.clock = clock
        self.fs = fs if fs is not None else DEFAULT_FS
        self.default_config = default_config or LogConfig()
        self.handles = FileHandles(self.fs, max_open_files)
        self.index_cache = IndexCache(index_cache_bytes)
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.retention_check_interval_ms = retention_check_interval_ms
        # Plain attributes: the broker may change them when the dynamic config changes.
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self._last_producer_expiry_ms: int | None = None
        self.cleaner_enabled = cleaner_enabled
        self.cleaner_time_budget_ms = cleaner_time_budget_ms
        self.cleaner_step_bytes = cleaner_step_bytes
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self.cleaner_max_map_entries = cleaner_max_map_entries
        self.cleaner_skipped_batches = 0  # batches the cleaner could not read and kept as they were, since start
        self._cleaner_idle_until: int | None = None
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._lock = threading.Lock()  # creation and deletion of logs
        self._checkpoint_lock = threading.Lock()
        self._state_dirty = False
        # what the state file holds: each partition's state and its line (``checkpoint``)
        self._checkpointed: dict[tuple[str, int], tuple[PartitionState, str]] | None = None
        self._last_checkpoint_ms: int | None = None
        self._last_retention_ms: int | None = None
        self.loaded_cleanly: bool | None = None
        self._dir_made = False

    # -- loading ---------------------------------------------------------------------------------

    def load(self, config_for: Callable[[str], LogConfig] | None = None) -> None:
        """Open every partition directory found (recovering them after an unclean shutdown)."""
        fs = self.fs
        fs.makedirs(self.data_dir)
        self._dir_made = True
        marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE)
        clean = fs.exists(marker)
        states = read_state_file(fs.read_file(os.path.join(self.data_dir, STATE_FILE)))
        now = self.clock.now_ms()
        for entry in sorted(fs.scandir(self.data_dir)):
            if not entry.is_dir:
                continue
            name = entry.name
            path = os.path.join(self.data_dir, name)
            if name.endswith("-delete"):
                fs.rmtree(path)
                continue
            parsed = parse_partition_dir(name)
            if parsed is None:
                continue
            with self._lock:
                if parsed in self._logs:
                    continue
                cfg = config_for(parsed[0]) if config_for is not None else self.default_config
                self._logs[parsed] = PartitionLog.open(
                    path,
                    cfg,
                    now_ms=now,
                    fs=fs,
                    state=states.get(parsed),
                    clean_shutdown=clean,
                    handles=self.handles,
                    index_cache=self.index_cache,
                    on_state_change=self._mark_dirty,
                )
        if clean:
            fs.unlink(marker)
            fs.fsync_dir(self.data_dir)
        self.loaded_cleanly = clean
        self._last_checkpoint_ms = now

    # -- access ----------------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None) -> PartitionLog:
        """The partition's log, created empty if absent; an existing log takes ``config``."""
        key = (topic, partition)
        plog = self._logs.get(key)
        if plog is None:
            with self._lock:
                plog = self._logs.get(key)
                if plog is None:
                    path = os.path.join(self.data_dir, f"{topic}-{partition}")
                    if parse_partition_dir(os.path.basename(path)) != key:
                        raise ValueError(f"invalid topic or partition: {topic!r} {partition!r}")
                    if not self._dir_made:
                        self.fs.makedirs(self.data_dir)
                        self._dir_made = True
                    plog = self._open(path, config)
                    self._logs[key] = plog
                    self._state_dirty = True
                    return plog
        if config is not None and plog.config != config:
            plog.update_config(config)
        return plog

    def delete_partition(self, topic: str, partition: int) -> bool:
        """Close the log, rename its directory ``<name>.<uuid>-delete`` and remove it."""
        key = (topic, partition)
        with self._lock:
            plog = self._logs.pop(key, None)
        if plog is not None:
            plog.close(flush=False)
        path = os.path.join(self.data_dir, f"{topic}-{partition}")
        if not self.fs.exists(path):
            return plog is not None
        doomed = f"{path}.{uuid.uuid4().hex}-delete"
        self.fs.rename(path, doomed)
        self.fs.rmtree(doomed)
        self._state_dirty = True
        return True

    # -- topic ids and renames (KIP-37 moves) -----------------------------------------------------

    def write_topic_id(self, topic: str, partition: int, topic_id: uuid.UUID) -> None:
        """Write Kafka's ``partition.metadata`` (``version: 0``, ``topic_id: <base64>``) into the
        partition's directory, so a restart can tell which topic a directory holds after its topic
        was renamed. Not fsynced: without it a rename interrupted by a crash is not finished."""
        path = os.path.join(self.data_dir, f"{topic}-{partition}", PARTITION_METADATA)
        text = f"version: 0\ntopic_id: {base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip('=')}\n"
        self.fs.write_file(path, text.encode("ascii"))

    def read_topic_id(self, topic: str, partition: int) -> uuid.UUID | None:
        """The topic id in the directory's ``partition.metadata``, None if absent or unreadable."""
        raw = self.fs.read_file(os.path.join(self.data_dir, f"{topic}-{partition}", PARTITION_METADATA))
        if not raw:
            return None
        for line in raw.decode("ascii", "replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "version" and value.strip() != "0":  # Kafka's only version
                log.warning("%s-%d/%s is version %s, this broker reads version 0: its topic id is not used",
                            topic, partition, PARTITION_METADATA, value.strip())
                return None
            if key.strip() == "topic_id":
                value = value.strip()
                try:
                    return uuid.UUID(bytes=base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
                except ValueError:
                    return None
        return None

    def rename_partition(self, old_topic: str, new_topic: str, partition: int,
                         config: LogConfig | None = None) -> PartitionLog | None:
        """Move a partition's log to the directory of its topic's new name (a namespace move).

        The log is flushed and closed (producer snapshot written), its directory renamed (atomic,
        then the data directory fsynced) and opened again under the new name from its exact state,
        so nothing is read back. A crash before the rename leaves the old directory, which
        ``partition.metadata`` lets the broker adopt at start-up; after it, the new one.
        Returns the reopened log, or None when there was no log under the old name.
        """
        old_key, new_key = (old_topic, partition), (new_topic, partition)
        old_path = os.path.join(self.data_dir, f"{old_topic}-{partition}")
        new_path = os.path.join(self.data_dir, f"{new_topic}-{partition}")
        if parse_partition_dir(os.path.basename(new_path)) != new_key:
            raise ValueError(f"invalid topic or partition: {new_topic!r} {partition!r}")
        with self._lock:
            if new_key in self._logs or self.fs.exists(new_path):
                raise FileExistsError(f"{new_path} already exists")
            plog = self._logs.pop(old_key, None)
        state = None
        if plog is not None:
            plog.close(flush=True)
            state = plog.state()
            config = config or plog.config
        if not self.fs.exists(old_path):
            return None
        self.fs.rename(old_path, new_path)
        self.fs.fsync_dir(self.data_dir)
        with self._lock:
            plog = self._open(new_path, config, state)
            self._logs[new_key] = plog
        self._state_dirty = True
        return plog

    def _open(self, path: str, config: LogConfig | None, state: PartitionState | None = None) -> PartitionLog:
        """Open one of this manager's logs (with ``state``: exactly as it was closed, nothing read)."""
        return PartitionLog.open(
            path,
            config or self.default_config,
            now_ms=self.clock.now_ms(),
            fs=self.fs,
            state=state,
            clean_shutdown=state is not None,
            handles=self.handles,
            index_cache=self.index_cache,
            on_state_change=self._mark_dirty,
        )

    def partitions(self) -> list[tuple[str, int]]:
        return list(self._logs)

    def logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def _mark_dirty(self, _plog: PartitionLog) -> None:
        self._state_dirty = True

    # -- upkeep ----------------------------------------------------------------------------------

    def run_periodic(self, now_ms: int) -> MaintenanceReport:
        """Retention and time rolls (every ``retention_check_interval_ms``), fsyncs due by
        flush.ms/flush.messages or a roll, removal of retired files, compaction (``run_cleaner``,
        within ``cleaner_time_budget_ms``), and the state checkpoint.
        Blocking: run it in a worker thread."""
        report = MaintenanceReport()
        do_retention = (
            self._last_retention_ms is None or now_ms - self._last_retention_ms >= self.retention_check_interval_ms
        )
        last_expiry = self._last_producer_expiry_ms
        do_expiry = last_expiry is None or now_ms - last_expiry >= self.producer_id_expiration_check_interval_ms
        expiration_ms = self.producer_id_expiration_ms
        for plog in self.logs():
            try:
                if do_expiry:
                    report.expired_producers += plog.expire_producers(now_ms, expiration_ms)
                if do_retention:
                    report.rolled += plog.roll_if_due(now_ms)
                    report.deleted_segments += plog.apply_retention(now_ms)
                report.purged_files += plog.purge_deleted_files(now_ms)
                if plog.maybe_flush(now_ms):
                    report.flushed += 1
            except LogClosed:
                continue
            except OSError:
                report.errors += 1
                log.exception("maintenance of %s failed", plog)
        if do_retention:
            self._last_retention_ms = now_ms
        if self.cleaner_enabled:
            self.run_cleaner(now_ms, report)
        if do_expiry:
            self._last_producer_expiry_ms = now_ms
        last = self._last_checkpoint_ms
        if self._state_dirty or last is None or now_ms - last >= self.checkpoint_interval_ms:
            self.checkpoint()
            self._last_checkpoint_ms = now_ms
            report.checkpointed = True
        return report

    def run_cleaner(self, now_ms: int, report: MaintenanceReport | None = None) -> MaintenanceReport:
        """Compact logs for at most ``cleaner_time_budget_ms`` (see the module docstring).
        Blocking: run it in a worker thread (``run_periodic`` calls it)."""
        report = report if report is not None else MaintenanceReport()
        idle = self._cleaner_idle_until
        if idle is not None and now_ms < idle:
            return report
        clock = self.clock
        deadline = clock.monotonic() + self.cleaner_time_budget_ms / 1000.0
        skip: set[int] = set()
        while True:
            plog = self._log_to_clean(now_ms, skip)
            if plog is None:
                self._cleaner_idle_until = now_ms + self.cleaner_backoff_ms
                break
            self._cleaner_idle_until = None
            try:
                result = plog.compact(
                    now_ms, budget_bytes=self.cleaner_step_bytes, max_map_entries=self.cleaner_max_map_entries
                )
            except LogClosed:
                skip.add(id(plog))
                continue
            except Exception:  # a storage error, or a bug: the other logs and upkeep go on
                report.errors += 1
                log.exception("compaction of %s failed", plog)
                skip.add(id(plog))
                continue
            report.compacted_bytes += result.stats.bytes_read
            report.cleaner_skipped_batches += result.stats.batches_skipped
            self.cleaner_skipped_batches += result.stats.batches_skipped
            if result.pass_complete:
                report.compaction_passes += 1
                # One pass per log per call: its ratio is fresh, the others wait their turn.
                skip.add(id(plog))
            elif not result.started or result.aborted:
                if result.aborted:
                    log.info("compaction of %s restarts: %s", plog, result.aborted)
                skip.add(id(plog))
            if clock.monotonic() >= deadline:
                break
        return report

    def _log_to_clean(self, now_ms: int, skip: set[int]) -> PartitionLog | None:
        """A log with a pass in progress, else the filthiest compacted log that needs cleaning."""
        best: PartitionLog | None = None
        best_ratio = -1.0
        for plog in self.logs():
            if id(plog) in skip or plog.closed:
                continue
            if plog.compaction_in_progress:
                return plog
            try:
                info = plog.cleanable_info(now_ms)
            except OSError:
                log.exception("cannot tell how dirty %s is", plog)
                skip.add(id(plog))
                continue
            if info is None or not info.should_clean(plog.config.min_cleanable_dirty_ratio):
                continue
            ratio = 2.0 if info.needs_compaction_now else info.dirty_ratio
            if ratio > best_ratio:
                best, best_ratio = plog, ratio
        return best

    def checkpoint(self) -> None:
        """Write ``shoal-log-state`` atomically (one writer at a time), when it would change:
        only the partitions whose state changed since the last write are formatted again, and a
        file that would be written as it is is not (a topic's creation at thousands of partitions
        checkpointed them all every second, each time formatting every one: issue 25)."""
        with self._checkpoint_lock:
            self._state_dirty = False
            before = self._checkpointed
            lines: dict[tuple[str, int], tuple[PartitionState, str]] = {}
            changed = before is None
            for key, plog in list(self._logs.items()):
                s = plog.state()
                old = before.get(key) if before is not None else None
                if old is not None and old[0] == s:
                    lines[key] = old
                else:
                    lines[key] = (s, _state_line(key[0], key[1], s))
                    changed = True
            if not changed and before is not None and len(before) == len(lines):
                return
            data = "\n".join([_STATE_HEADER, *(line for _, line in lines.values())]) + "\n"
            self.fs.makedirs(self.data_dir)
            self.fs.write_file_atomic(os.path.join(self.data_dir, STATE_FILE), data.encode("utf-8"))
            self._checkpointed = lines  # only once written: a failed write is tried again in full

    def close(self) -> None:
        """Flush and close every log, write the state and the clean-shutdown marker."""
        logs = self.logs()
        for plog in logs:
            plog.persist_indexes()
        self.fs.sync_all()  # one sync instead of an fsync per segment file
        for plog in logs:
            plog.close(flush=False, synced=True)
        self.checkpoint()
        self.fs.write_file_atomic(os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE), b"")
        self.handles.close_all()
