"""Every format brokers share carries a version, and a reader meeting a version it does not read
skips or refuses it in one clear line, never misreads it (issue 28 part 2; docs/upgrades.md has
the table). One table per format family, each row a value of a newer version than this release
reads and what its reader must do with it; and the gated format of ``shoal.version`` 2 (etcd's
compact topic values) read back equal to version 1. Pure: no broker, no etcd (the etcd backend's
skipping of such a key, and the level that turns version 2 on, are in
tests/metadata/test_etcd_backend.py; the coordinators' loads skipping a newer record in
tests/groups/test_group_offsets.py and tests/txn/test_txn_coordinator.py; the upgrade itself in
tests/cluster/test_rolling_upgrade.py).
"""

from __future__ import annotations

import json
import logging
import struct
import uuid
import zlib
from pathlib import Path

import pytest

from shoal.metadata import BrokerInfo, MetadataError, PartitionInfo, frozen_topic
from shoal.metadata import codec
from shoal.metadata.codec import FormatVersionError

I16 = struct.Struct(">h")


def _no_misread(read, data, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        read(data)


# -- the etcd image's values (shoal.metadata.codec) -------------------------------------------------

TOPIC = frozen_topic(
    name="orders", topic_id=uuid.UUID(int=7), configs={"cleanup.policy": "compact"}, internal=False,
    partitions=(PartitionInfo(0, (1, 2, 3), (1, 2), 1, leader_epoch=4, partition_epoch=9),
                PartitionInfo(1, (2, 3, 1), (2, 3, 1), 2, leader_epoch=1, partition_epoch=2,
                              adding=(4,), removing=(1,), observers=(5,))))
DOCS = {  # each document kind's decoder and a version-1 document of it, as the encoder writes it
    "topic": (codec.topic_from_json, codec.topic_to_json(TOPIC)),
    "broker registration": (codec.broker_from_json, codec.broker_to_json(BrokerInfo(1, "h", 9092))),
    "feature levels": (codec.features_from_json, {"epoch": 3, "levels": {"shoal.version": 1}}),
    "tenant": (codec.tenant_from_json, {"tenant_id": "t", "display_name": "T", "created_ms": 1}),
    "identity pool": (codec.identity_pool_from_json, {"pool_id": "p", "tenant_id": "t", "issuer": "i",
                                                      "claim_filter": {}, "principal_claim": "sub",
                                                      "display_name": ""}),
    "client quota": (codec.quota_values_from_json, {"producer_byte_rate": 1024.0}),
    "SCRAM credential": (lambda d: codec.user_credentials_from_json({"SCRAM-SHA-256": d}),
                         {"salt": "c2FsdA==", "stored_key": "a2V5", "server_key": "a2V5", "iterations": 4096}),
}


@pytest.mark.parametrize("kind", sorted(DOCS))
@pytest.mark.parametrize("version", [codec.READS.get("topic", 1) + 1, 99, 0, "2", None])
def test_an_etcd_document_of_a_version_this_release_does_not_read_is_refused(kind, version):
    decode, doc = DOCS[kind]
    assert "v" not in doc  # version 1 is written without "v": byte for byte what 0.14.0 wrote
    decode(json.loads(json.dumps(doc)))  # and read back
    newer = {**doc, "v": version}
    with pytest.raises(FormatVersionError) as e:
        decode(newer)
    known = codec.READS.get(kind, 1)
    assert str(e.value).startswith(f"a {kind} of format version {version!r}, this broker (shoal ")
    assert f"reads {kind} versions 1 to {known}: a newer release wrote it" in str(e.value)
    assert isinstance(e.value, ValueError)  # the backends' undecodable-value path catches it too


def test_topic_version_2_is_compact_and_reads_back_equal():
    v1, v2 = codec.topic_to_json(TOPIC), codec.topic_to_json(TOPIC, 2)
    assert set(v1) == {"name", "topic_id", "internal", "configs", "partitions"}
    assert v2["v"] == 2 and "partitions" not in v2
    assert v2["p"] == [[0, [1, 2, 3], [1, 2], 1, 4, 9],
                       [1, [2, 3, 1], [2, 3, 1], 2, 1, 2, {"adding": [4], "removing": [1], "observers": [5]}]]
    for doc in (v1, v2):
        assert codec.topic_from_json(json.loads(json.dumps(doc))) == TOPIC
    # a topic of 4000 three-replica partitions: version 2 is under a third of version 1's bytes
    big = frozen_topic(name="big", topic_id=uuid.UUID(int=8), configs={}, internal=False,
                       partitions=tuple(PartitionInfo(i, (1, 2, 3), (1, 2, 3), 1, 5, 12) for i in range(4000)))
    size = {v: len(json.dumps(codec.topic_to_json(big, v), separators=(",", ":"))) for v in (1, 2)}
    assert size[2] * 3 < size[1], size
    assert [codec.topic_version(level) for level in (1, 2, 3)] == [1, 2, 2]
    with pytest.raises(ValueError, match="a partition row of 5 fields"):
        codec.topic_from_json({**v2, "p": [[0, [1], [1], 1, 0]]})


# -- internal topics' records ---------------------------------------------------------------------


def _offsets_rows():
    from shoal.groups import consumer_records, records

    offset_v5 = I16.pack(5) + struct.pack(">q", 42) + b"\x00" * 20
    group_v5 = I16.pack(5) + b"\x00" * 20
    member_v1 = I16.pack(1) + b"\x00" * 8
    return [
        ("OffsetCommitValue v5", records.decode_offset_commit_value, offset_v5, "unknown OffsetCommitValue version 5"),
        ("GroupMetadataValue v5", records.decode_group_metadata_value, group_v5, "unknown GroupMetadataValue version 5"),
        ("ConsumerGroupMemberMetadataValue v1", lambda v: consumer_records.decode_value(5, v), member_v1,
         "unknown ConsumerGroupMemberMetadataValue version 1"),
        ("a key version beyond 8", consumer_records.decode_key, I16.pack(99) + I16.pack(1) + b"g",
         "key version 99 is not a consumer group record"),
    ]


@pytest.mark.parametrize("name, read, data, match", _offsets_rows(), ids=lambda x: x if isinstance(x, str) else "")
def test_consumer_offsets_records_of_newer_versions_are_refused(name, read, data, match):
    from shoal.groups.records import RecordFormatError

    _no_misread(read, data, RecordFormatError, match)


def test_an_unknown_consumer_offsets_key_is_kept_aside_not_decoded():
    from shoal.groups.records import OtherKey, decode_key

    assert decode_key(I16.pack(99) + b"anything") == OtherKey(99, I16.pack(99) + b"anything")


@pytest.mark.parametrize("name, read, data, match", [
    ("TransactionLogKey v1", "decode_key", I16.pack(1) + I16.pack(1) + b"t", "unknown TransactionLogKey version 1"),
    ("TransactionLogValue v2", "decode_value", I16.pack(2) + b"\x00" * 40, "unknown TransactionLogValue version 2"),
])
def test_transaction_state_records_of_newer_versions_are_refused(name, read, data, match):
    from shoal.txn import records

    _no_misread(getattr(records, read), data, records.RecordFormatError, match)


def test_a_usage_record_of_a_newer_schema_is_refused():
    from shoal.metering.record import RecordError, UsageRecord

    _no_misread(UsageRecord.from_json, json.dumps({"schema_version": 2, "broker": 1}), RecordError,
                r"schema_version 2 \(this reader knows 1\)")


# -- etcd values outside the image: the brokers' load and demand reports --------------------------


@pytest.mark.parametrize("module, read, what", [
    ("shoal.cluster.load", "decode_report", "load report"),
    ("shoal.quotas.demand", "decode_reports", "demand report"),
])
def test_reports_of_newer_versions_are_refused(module, read, what):
    import importlib

    m = importlib.import_module(module)
    body = json.dumps({"v": m.CODEC_VERSION + 1}).encode()
    data = zlib.compress(body) if what == "load report" else body
    _no_misread(getattr(m, read), data, ValueError, f"not a version {m.CODEC_VERSION} {what}")


# -- on-disk checkpoints and state files ----------------------------------------------------------


def test_checkpoints_of_newer_versions_are_refused_or_rebuilt(tmp_path, caplog):
    from shoal.storage import cleaner, epochs, manager, producer_state, txn_index
    from shoal.storage.fs import FileSystem

    _no_misread(epochs.decode_checkpoint, b"1\n1\n0 0\n", epochs.CheckpointError,
                "unknown leader-epoch checkpoint version '1'")
    snapshot = producer_state.encode_snapshot([])
    _no_misread(producer_state.decode_snapshot, I16.pack(2) + snapshot[2:], producer_state.SnapshotError,
                "unknown producer snapshot version 2")
    # an aborted-transaction index ends at an entry of another version (what precedes it is kept)
    good = txn_index.encode_entries([txn_index.AbortedTxn(7, 0, 10, 11)])
    newer = bytearray(txn_index.encode_entries([txn_index.AbortedTxn(8, 20, 30, 31)]))
    newer[0:2] = I16.pack(1)
    with caplog.at_level(logging.WARNING):
        assert txn_index.decode_entries(good + bytes(newer), "x.txnindex") == [txn_index.AbortedTxn(7, 0, 10, 11)]
    assert "x.txnindex: entry 1 has version 1; the index ends there" in caplog.text
    # the log manager's state file: every partition is recovered from its segments instead
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert manager.read_state_file(b"shoal-log-state 2\nt 0 0 0 0 0 0 0\n") == {}
    assert "shoal-log-state begins 'shoal-log-state 2', not 'shoal-log-state 1'" in caplog.text
    assert manager.read_state_file(b"shoal-log-state 1\nt 0 1 2 3 4 0 5\n")[("t", 0)].high_watermark == 2
    # the cleaner's checkpoint: cleaning starts from the log start
    fs = FileSystem()
    (tmp_path / cleaner.CHECKPOINT_FILE).write_text("shoal-cleaner-checkpoint 2\n77\n")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cleaner.read_checkpoint(fs, str(tmp_path)) is None
    assert "cleaner-offset-checkpoint is version 2, this broker reads version 1" in caplog.text
    cleaner.write_checkpoint(fs, str(tmp_path), 77)
    assert cleaner.read_checkpoint(fs, str(tmp_path)) == 77


def test_a_partition_metadata_file_of_another_version_names_no_topic(tmp_path, caplog):
    from shoal.clock import ManualClock
    from shoal.storage.manager import PARTITION_METADATA, LogManager

    m = LogManager(tmp_path, clock=ManualClock(0))
    (tmp_path / "t-0").mkdir()
    m.write_topic_id("t", 0, uuid.UUID(int=5))
    assert m.read_topic_id("t", 0) == uuid.UUID(int=5)
    path = tmp_path / "t-0" / PARTITION_METADATA
    path.write_text(path.read_text().replace("version: 0", "version: 1"))
    with caplog.at_level(logging.WARNING):
        assert m.read_topic_id("t", 0) is None
    assert "t-0/partition.metadata is version 1, this broker reads version 0" in caplog.text


def test_a_log_dir_of_a_newer_meta_properties_version_is_refused(tmp_path):
    from shoal.storage.dirlock import DirOfNewerRelease, check_owner, record_owner

    record_owner([tmp_path], 1, "c1")
    check_owner([tmp_path], 1)  # version 1, as 0.14.0 writes it
    meta = tmp_path / "meta.properties"
    meta.write_text(meta.read_text().replace("version=1", "version=2"))
    with pytest.raises(DirOfNewerRelease) as e:
        check_owner([tmp_path], 1)
    assert str(e.value) == (f"log dir {tmp_path} has a meta.properties of version 2 ({meta}), this broker reads "
                            "versions 0 and 1: a newer release wrote it; run that release")


def test_the_embedded_store_refuses_a_file_of_a_newer_format(tmp_path):
    import asyncio

    from shoal.metadata.embedded import FORMAT_VERSION, EmbeddedMetadataStore

    path = Path(tmp_path) / "metadata.json"
    path.write_text(json.dumps({"version": FORMAT_VERSION + 1, "cluster_id": "c"}))
    store = EmbeddedMetadataStore(path, node_id=1)
    with pytest.raises(MetadataError, match=f"unsupported metadata format version {FORMAT_VERSION + 1}"):
        asyncio.run(store.start())


def test_docs_upgrades_lists_every_format_family():
    from broker_process import REPO

    text = (REPO / "docs" / "upgrades.md").read_text()
    for name in ("/topics/<name>", "__consumer_offsets", "__transaction_state", "__shoal_usage",
                 "leader-epoch-checkpoint", "shoal-log-state", "cleaner-offset-checkpoint", "meta.properties",
                 "partition.metadata", "producer snapshot", ".txnindex", "Fetch", "shoal.version"):
        assert name in text, name
