"""Produce (key 0), v3-v12: RecordBatch v2 only, acks 0, 1 and all.

Batches are stored as the producer sent them (never recompressed): the broker validates lengths,
magic, CRC and codec, walks the records of every batch (compressed ones decompressed into a
bounded buffer, see ``shoal.protocol.records.validate_produce``), assigns offsets, and stamps
LogAppendTime when the topic asks for it. A rejected partition appends nothing; its error is
Kafka's (CORRUPT_MESSAGE for what cannot be decompressed or framed, INVALID_RECORD for records
that do not match their batch, MESSAGE_TOO_LARGE beyond the decompression bound); a keyless record
in a compacted topic gets INVALID_RECORD with ``record_errors`` (KIP-467, v8+). One warning per
topic and client host per 10 s says why.

Every partition is appended before the first ``await`` (so requests pipelined on one connection
land in order); acks=all then waits in the purgatory until the high watermark covers the batch.

Idempotent producers: the partition log checks a batch with a producer id against the partition's
producer state as it appends (see ``shoal.storage.producer_state``): OUT_OF_ORDER_SEQUENCE_NUMBER
and INVALID_PRODUCER_EPOCH as Kafka answers them; a retry of one of the producer's last five
batches is answered NONE with the original base offset (and, as Kafka does, the original batch's
timestamp as log_append_time) without writing anything.

Scoped: topic names are the tenant's (``ctx.scope``); writing needs WRITE on the topic
(TOPIC_AUTHORIZATION_FAILED otherwise, as Kafka answers).

Transactional producers (``shoal.txn``): a request with a transactional id needs WRITE on that
TRANSACTIONAL_ID (TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise); a transactional batch without
a transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED too. KIP-890 part 1: before the first
transactional batch of a producer goes to a partition without an ongoing transaction of that
producer, the coordinator confirms that the partition was added to the transaction (locally, or
AddPartitionsToTxn v4 ``verify_only`` to the coordinator broker): INVALID_TXN_STATE when it was
not, INVALID_PRODUCER_EPOCH for a fenced or unknown producer, NOT_ENOUGH_REPLICAS (retriable)
while the coordinator cannot answer. KIP-890 part 2: from v12, when ``shoal.transaction.version``
is 2, the coordinator adds the partition to the transaction instead (the client sends no
AddPartitionsToTxn; AddPartitionsToTxn v5 without ``verify_only`` to a remote coordinator).

Deviations from Kafka:
- v13 (topic ids in Produce, KIP-516) is not offered.
"""

from __future__ import annotations

import datetime
import logging
import struct
from types import ModuleType
from typing import TYPE_CHECKING

from shoal.cluster import routing
from shoal.handlers.registry import api
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode, error_code
from shoal.protocol.records import InvalidRecords
from shoal.storage import OffsetOutOfRange
from shoal.storage.producer_state import ProducerStateError
from shoal.tenancy.acl import Operation, ResourceType
from shoal.tenancy.internal_topics import USAGE_TOPIC
from shoal.txn.coordinator import transaction_version

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import ProduceRequest, ProduceResponse
    from shoal.metadata import MetadataImage, PartitionInfo
    from shoal.storage import AppendInfo

KEY = 0
log = logging.getLogger("shoal.produce")
_UTC = datetime.timezone.utc
REJECTION_LOG_INTERVAL_S = 10.0


class _RateLimitedLog:
    """At most one warning per key (topic, client host) per interval; the next says how many
    were left out. Rejected batches are the client's fault and a client can repeat them."""

    def __init__(self, interval_s: float = REJECTION_LOG_INTERVAL_S, max_keys: int = 4096) -> None:
        self.interval_s = interval_s
        self.max_keys = max_keys
        self._last: dict[object, tuple[float, int]] = {}

    def log(self, key: object, now: float, msg: str, *args: object) -> None:
        last, skipped = self._last.get(key, (float("-inf"), 0))
        if now - last < self.interval_s:
            self._last[key] = (last, skipped + 1)
            return
        if len(self._last) >= self.max_keys:
            self._last = {k: v for k, v in self._last.items() if now - v[0] < self.interval_s}
        self._last[key] = (now, 0)
        if skipped:
            msg += " (%d more since the last line)"
            args = (*args, skipped)
        log.warning(msg, *args)


# Logging state only (shared by the brokers of one process, which is harmless: it only thins lines).
_rejections = _RateLimitedLog()


def _partition_response(mod: ModuleType, index: int, code: ErrorCode, *, base_offset: int = -1, append_time: int = -1,
                        log_start: int = -1, message: str | None = None, record_errors: tuple[Entity, ...] = (),
                        leader: PartitionInfo | None = None) -> Entity:
    return build(
        mod.PartitionProduceResponse,
        index=index,
        error_code=code,
        base_offset=base_offset,
        log_append_time=None
        if append_time < 0
        else datetime.datetime.fromtimestamp(append_time / 1000, _UTC),
        log_start_offset=log_start,
        record_errors=record_errors,
        error_message=message,
        **(routing.current_leader(mod, leader) if leader is not None else {}),
    )


_BATCH_PRODUCER = struct.Struct(">qh")  # producer id and epoch, at byte 43 of a batch header


def verification_error(code: ErrorCode) -> ErrorCode:
    """What a producer gets when the coordinator did not confirm its partition (Kafka's
    AddPartitionsToTxnManager): fenced or unknown producers INVALID_PRODUCER_EPOCH, a partition not
    in the transaction INVALID_TXN_STATE, coordinator trouble the retriable NOT_ENOUGH_REPLICAS."""
    if code in (ErrorCode.none, ErrorCode.invalid_txn_state):
        return code
    if code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_id_mapping, ErrorCode.invalid_producer_epoch):
        return ErrorCode.invalid_producer_epoch
    if code in (ErrorCode.transactional_id_authorization_failed, ErrorCode.invalid_request):
        return code
    return ErrorCode.not_enough_replicas


async def _verify_transactional(ctx: RequestContext, req: ProduceRequest, image: MetadataImage,
                                transactional_id: str) -> dict[tuple[str, int], ErrorCode]:
    """(physical topic, partition) -> error for the transactional batches whose partition has no
    ongoing transaction of their producer yet; the others are not listed. From v12 at transaction
    version 2 the partitions are added to the transaction (KIP-890 part 2)."""
    svc = ctx.services
    scope = ctx.scope
    add = ctx.api_version >= 12 and transaction_version(svc.config, svc.metadata.image) >= 2
    need: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for t in req.topic_data:
        physical = scope.physical(t.name)
        topic = image.topics.get(physical)
        if topic is None or not scope.allowed(Operation.WRITE, ResourceType.TOPIC, t.name):
            continue  # refused below; never added to a transaction
        for p in t.partition_data:
            data = p.records
            if data is None or len(data) < 61 or not data[22] & 0x10 or not 0 <= p.index < len(topic.partitions):
                continue
            part = svc.replicas.leader(physical, topic.partitions[p.index])
            if part is None:
                continue
            pid, epoch = _BATCH_PRODUCER.unpack_from(data, 43)
            # Kafka's hasOngoingTransaction(producerId, epoch): an ongoing transaction of this
            # producer at this epoch needs no check; another epoch (a bump, a zombie) does
            if part.view.ongoing_txn_first_offset(pid) is not None and part.view.producer_epoch(pid) == epoch:
                continue
            need.setdefault((pid, epoch), []).append((physical, p.index))
    if not need:
        return {}
    coordinator = svc.txn
    out: dict[tuple[str, int], ErrorCode] = {}
    for (pid, epoch), parts in need.items():
        codes = await coordinator.verify(scope.physical(transactional_id), pid, epoch, parts, add)
        out.update({tp: verification_error(code) for tp, code in codes.items()})
    return out


@api(KEY, 3, 12)
async def handle_produce(ctx: RequestContext, req: ProduceRequest) -> ProduceResponse | None:
    svc = ctx.services
    mod = response_module(KEY, ctx.api_version)
    image = svc.metadata.image
    acks = req.acks
    now_ms = svc.clock.now_ms()
    responses = []
    waits: list[tuple[str, int, int, int]] = []  # (topic, partition, offset the HWM must pass, min ISR)
    failed = False
    leaders: list[int] = []  # of partitions this broker does not lead (KIP-951 node_endpoints)
    to_flush = []  # partitions whose flush.messages / flush.ms is due: fsync before answering
    scope = ctx.scope
    txn_id = req.transactional_id
    if txn_id is not None and not scope.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        for t in req.topic_data:
            responses.append(
                build(
                    mod.TopicProduceResponse,
                    name=t.name,
                    partition_responses=tuple(
                        _partition_response(mod, p.index, ErrorCode.transactional_id_authorization_failed)
                        for p in t.partition_data
                    ),
                )
            )
        return build(mod.ProduceResponse, responses=tuple(responses), throttle_time=datetime.timedelta(0))
    if acks not in (0, 1, -1):
        for t in req.topic_data:
            responses.append(
                build(
                    mod.TopicProduceResponse,
                    name=t.name,
                    partition_responses=tuple(
                        _partition_response(mod, p.index, ErrorCode.invalid_required_acks) for p in t.partition_data
                    ),
                )
            )
        return build(mod.ProduceResponse, responses=tuple(responses), throttle_time=datetime.timedelta(0))

    # KIP-890 part 1: the first transactional batch of a producer to a partition is checked with
    # the coordinator (the partition must be in the producer's ongoing transaction).
    verified = await _verify_transactional(ctx, req, image, txn_id) if txn_id is not None else {}
    for t in req.topic_data:
        physical = scope.physical(t.name)
        parts: list[Entity | tuple[int, AppendInfo]] = []  # answered now, or appended
        if not scope.allowed(Operation.WRITE, ResourceType.TOPIC, t.name):
            for p in t.partition_data:
                parts.append(_partition_response(mod, p.index, ErrorCode.topic_authorization_failed))
            failed = True
            responses.append((t.name, parts))
            continue
        topic = image.topics.get(physical)
        for p in t.partition_data:
            if topic is None or not 0 <= p.index < len(topic.partitions):
                parts.append(_partition_response(mod, p.index, ErrorCode.unknown_topic_or_partition))
                failed = True
                continue
            if topic.internal and not (physical == USAGE_TOPIC and scope.allowed_cluster(Operation.CLUSTER_ACTION)):
                # Only the broker writes its internal topics (Kafka: "Cannot append to internal topic");
                # metering: a broker that leads no partition of __shoal_usage sends its usage to a leader.
                parts.append(_partition_response(mod, p.index, ErrorCode.invalid_topic_exception,
                                                 message=f"Cannot append to internal topic {t.name}"))
                failed = True
                continue
            pinfo = topic.partitions[p.index]
            part = svc.replicas.leader(physical, pinfo)
            if part is None:  # cluster: another broker leads it (KIP-951: say which)
                parts.append(_partition_response(mod, p.index, ErrorCode.not_leader_or_follower, leader=pinfo))
                leaders.append(pinfo.leader)
                failed = True
                continue
            if acks == -1:
                min_isr = int(part.view.config.min_insync_replicas)  # the topic's, or inherited
                if not svc.replicas.enough_replicas(part, min_isr):  # and min.insync.racks
                    parts.append(_partition_response(mod, p.index, ErrorCode.not_enough_replicas))
                    failed = True
                    continue
            if p.records is None:
                parts.append(_partition_response(mod, p.index, ErrorCode.corrupt_message, message="no records"))
                failed = True
                continue
            if len(p.records) >= 23:
                attributes = p.records[22]  # the low byte of the first batch's attributes
                if ctx.api_version < 7 and attributes & 0x07 == 4:
                    # zstd needs Produce v7+ (KIP-110): older clients cannot have meant it.
                    parts.append(_partition_response(mod, p.index, ErrorCode.unsupported_compression_type))
                    failed = True
                    continue
                if attributes & 0x10 and txn_id is None:  # transactional batch without a transactional id
                    parts.append(_partition_response(mod, p.index, ErrorCode.transactional_id_authorization_failed))
                    failed = True
                    continue
            code = verified.get((physical, p.index), ErrorCode.none)
            if code != ErrorCode.none:
                log.info("transactional produce to %s-%d from %s (transactional id %r) refused: %s",
                         physical, p.index, ctx.client_address, txn_id, code.name)
                parts.append(_partition_response(mod, p.index, code))
                failed = True
                continue
            try:
                info = part.append_as_leader(p.records, now_ms)
            except InvalidRecords as e:
                code_name = e.code
                record_errors = ()
                if ctx.api_version < 8:
                    if code_name == "INVALID_RECORD":
                        code_name = "CORRUPT_MESSAGE"  # INVALID_RECORD is unknown to older clients
                elif e.record_errors:
                    record_errors = tuple(
                        build(mod.BatchIndexAndErrorMessage, batch_index=i, batch_index_error_message=m)
                        for i, m in e.record_errors
                    )
                _rejections.log(
                    (physical, str(ctx.client_address).rpartition(":")[0]), svc.clock.monotonic(),
                    "rejected produce to %s-%d from %s (client %s): %s",
                    physical, p.index, ctx.client_address, ctx.client_id, e,
                )
                parts.append(_partition_response(
                    mod, p.index, error_code(code_name), message=e.message, record_errors=record_errors,
                ))
                failed = True
                continue
            except ProducerStateError as e:
                log.info(
                    "rejected produce to %s-%d from %s (client %s): %s",
                    physical, p.index, ctx.client_address, ctx.client_id, e,
                )
                parts.append(_partition_response(mod, p.index, error_code(e.code), message=e.message))
                failed = True
                continue
            except OffsetOutOfRange as e:
                parts.append(_partition_response(mod, p.index, ErrorCode.unknown_server_error, message=str(e)))
                failed = True
                continue
            if info.duplicate:
                log.debug(
                    "duplicate batch to %s-%d from %s answered with its original offsets %d-%d",
                    physical, p.index, ctx.client_address, info.base_offset, info.last_offset,
                )
            else:
                if part.flush_due(now_ms):
                    to_flush.append(part)
            if acks == -1:
                waits.append((physical, p.index, info.last_offset + 1, min_isr))
            parts.append((p.index, info))
        responses.append((t.name, parts))

    # quotas: the whole request's size counts against producer_byte_rate (acks=0 too: no
    # response, but the connection is muted all the same); the throttle goes in ctx.throttle_ms.
    svc.quotas.record_produce(ctx, now_ms)

    if acks == 0:
        # No response for acks=0. On an error Kafka closes the connection so the client notices.
        ctx.no_response = True
        if failed:
            ctx.close_after = True
        return None

    for part in to_flush:
        await part.flush_if_due(now_ms)
    failed_waits: dict[tuple[str, int], ErrorCode] = {}
    if waits:
        failed_waits = await svc.replicas.wait_committed(waits, req.timeout.total_seconds())
    topics = []
    for name, parts in responses:
        out = []
        physical = scope.physical(name)
        for answer in parts:
            if not isinstance(answer, tuple):
                out.append(answer)
            elif (physical, answer[0]) in failed_waits:
                out.append(_partition_response(mod, answer[0], failed_waits[(physical, answer[0])]))
            else:
                index, info = answer
                out.append(
                    _partition_response(
                        mod,
                        index,
                        ErrorCode.none,
                        base_offset=info.base_offset,
                        append_time=info.log_append_time_ms,
                        log_start=info.log_start_offset,
                    )
                )
        topics.append(build(mod.TopicProduceResponse, name=name, partition_responses=tuple(out)))
    return build(mod.ProduceResponse, responses=tuple(topics), throttle_time=datetime.timedelta(0),
                 node_endpoints=routing.node_endpoints(mod, image, leaders, ctx.listener))
