"""Typed builders of the requests brokers send each other, each at the version the sender speaks.

- ApiVersions: the replica fetcher's round-trip probe, the controller's keepalive on a held connection.
- (Fetch: the replica fetcher's own tuples and encoder, :mod:`shoal.net.fetch_request`: kio's
  entities and writer cost more than the rest of a follower's fetch on that hot path.)
- Produce: a broker's usage records to the leader of ``__shoal_usage`` (acks=all).
- WriteTxnMarkers: a transaction coordinator's commit/abort markers to a partition's leader.
- AddPartitionsToTxn: a leader verifying (or, KIP-890 part 2, adding) a producer's partitions with
  its transaction coordinator.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Any, Iterable

from shoal import __version__
from shoal.net.entities import build_entity
from shoal.protocol import codec

PRODUCE, FETCH, API_VERSIONS, ADD_PARTITIONS_TO_TXN, WRITE_TXN_MARKERS = 0, 1, 18, 24, 27


@functools.cache
def _schema(api_key: int, version: int) -> ModuleType:
    """The kio module of the request ``api_key`` v``version`` (its nested entity types)."""
    return importlib.import_module(codec.request_type(api_key, version).__module__)


def api_versions(version: int, software_name: str) -> Any:
    """ApiVersions v``version`` naming the sending component (``shoal-replica``, ``shoal-controller``)
    and Shoal's release (KIP-511: the broker it reaches shows both for the connection)."""
    return build_entity(codec.request_type(API_VERSIONS, version),
                        {"client_software_name": software_name, "client_software_version": __version__})


def produce(version: int, topic: str, partition: int, records: bytes, *, acks: int, timeout_ms: int) -> Any:
    """Produce v``version`` of one RecordBatch to one partition, outside any transaction."""
    return build_entity(codec.request_type(PRODUCE, version), {
        "transactional_id": None, "acks": acks, "timeout": timeout_ms,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    })


def _by_topic(parts: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    return by_topic


def write_txn_markers(version: int, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                      parts: Iterable[tuple[str, int]]) -> Any:
    """WriteTxnMarkers v``version``: one commit (``commit``) or abort marker for ``parts``."""
    m = _schema(WRITE_TXN_MARKERS, version)
    return codec.request_type(WRITE_TXN_MARKERS, version)(markers=(m.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
        topics=tuple(m.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps)) for t, ps in _by_topic(parts).items()),
        coordinator_epoch=coordinator_epoch,
    ),))


def add_partitions_to_txn(version: int, transactional_id: str, producer_id: int, producer_epoch: int,
                          parts: Iterable[tuple[str, int]], *, verify_only: bool) -> Any:
    """AddPartitionsToTxn v``version`` (4+, the brokers' batched form) for one transaction."""
    m = _schema(ADD_PARTITIONS_TO_TXN, version)
    return codec.request_type(ADD_PARTITIONS_TO_TXN, version)(transactions=(m.AddPartitionsToTxnTransaction(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
        verify_only=verify_only,
        topics=tuple(m.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps)) for t, ps in _by_topic(parts).items()),
    ),))
