"""InitProducerId (key 22, v0-v5) and DescribeProducers (key 61, v0); the producer id allocator.

Producer ids come from ``MetadataStore.allocate_producer_ids`` in blocks of 1000 (Kafka's
AllocateProducerIds), so they are unique across restarts and, with a shared store, across brokers.
A block not used up before a restart is abandoned, as in Kafka.

InitProducerId without a transactional id:

- no producer id and epoch (-1, -1): a fresh producer id with epoch 0;
- only one of them -1: INVALID_REQUEST (Kafka's check);
- v3+ with an existing producer id and epoch (KIP-360, sent by librdkafka when it bumps the epoch
  of an idempotent producer): if the id is known, the epoch is bumped and the same id returned.
  Known means issued or bumped by this broker since it started, or present in the producer state
  of one of its partitions; the current epoch is the highest of those. An epoch older than the
  current one is fenced: PRODUCER_FENCED (v4+) or INVALID_PRODUCER_EPOCH (v0-v3), as Kafka maps
  it; a retry of the previous bump (its answer lost) gets the bumped epoch again. An epoch that
  would reach Short.MAX_VALUE (exhausted) gets a fresh producer id with epoch 0.

Deviations from Kafka (without a transactional id):

- Kafka's coordinator ignores the producer id and epoch when there is no transactional id and
  always hands out a fresh id; Shoal bumps the epoch as described above (clients accept either).
  A producer id this broker does not know (never issued, or expired everywhere) gets a fresh id,
  which is Kafka's answer, rather than an error that would make librdkafka retry forever.

InitProducerId with a transactional id goes to the transaction coordinator (``shoal.txn``), as
Kafka's: WRITE on the TRANSACTIONAL_ID (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), an empty id
INVALID_REQUEST, a timeout above ``transaction.max.timeout.ms`` INVALID_TRANSACTION_TIMEOUT, a
broker that is not the id's coordinator NOT_COORDINATOR. A new id gets a fresh producer id (from
the same allocator) at epoch 0; a known one its epoch bumped, fencing the previous instance; an
ongoing transaction of the fenced producer is aborted first (CONCURRENT_TRANSACTIONS until its
markers are written; the client retries). The id is qualified by the caller's tenant.
v6 (KIP-939 two-phase commit) is not offered.

DescribeProducers v0: per partition led here, the producers its state remembers (last sequence,
last timestamp, epoch, coordinator epoch, and the first offset of the producer's ongoing
transaction, -1 when it has none). Unknown
partitions: UNKNOWN_TOPIC_OR_PARTITION; partitions led elsewhere: NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from shoal.handlers.registry import api
from shoal.metadata import MetadataError, MetadataStore
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode
from shoal.tenancy.acl import Operation, ResourceType

if TYPE_CHECKING:
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import (
        DescribeProducersRequest, DescribeProducersResponse, InitProducerIdRequest, InitProducerIdResponse,
    )
    from shoal.services import Services
    from shoal.tenancy.scope import Scope

INIT_PRODUCER_ID = 22
DESCRIBE_PRODUCERS = 61
BLOCK_SIZE = 1000
# Kafka's TransactionMetadata.isEpochExhausted: an epoch of Short.MAX_VALUE - 1 cannot be bumped.
EXHAUSTED_EPOCH = 2**15 - 2
_REMEMBERED = 100_000

log = logging.getLogger("shoal.producer_ids")


class ProducerIdManager:
    """Hands out producer ids from blocks reserved in the metadata store, and decides epoch bumps.

    Use from one event loop. ``remembered`` bounds how many issued ids keep their epoch in memory
    (least recently used go first; the partitions' producer state still knows active ones).
    """

    def __init__(self, store: MetadataStore, *, block_size: int = BLOCK_SIZE, remembered: int = _REMEMBERED) -> None:
        self._store = store
        self._block_size = block_size
        self._next = 0
        self._end = 0  # the current block is [_next, _end)
        self._lock = asyncio.Lock()
        self._remembered = remembered
        # pid -> (epoch, epoch before the last bump, owner: the tenant the id was issued to)
        self._epochs: OrderedDict[int, tuple[int, int, str | None]] = OrderedDict()

    async def next_id(self) -> int:
        """A producer id never handed out before. Raises MetadataError if the store cannot reserve."""
        if self._next >= self._end:
            async with self._lock:
                if self._next >= self._end:
                    first, count = await self._store.allocate_producer_ids(self._block_size)
                    self._next, self._end = first, first + count
        pid = self._next
        self._next += 1
        return pid

    def _remember(self, pid: int, epoch: int, previous: int, owner: str | None = None) -> None:
        self._epochs[pid] = (epoch, previous, owner)
        self._epochs.move_to_end(pid)
        while len(self._epochs) > self._remembered:
            self._epochs.popitem(last=False)

    async def fresh(self, owner: str | None = None) -> tuple[int, int]:
        pid = await self.next_id()
        self._remember(pid, 0, -1, owner)
        return pid, 0

    async def init_producer(
        self, producer_id: int, epoch: int, partition_epoch: int | None, owner: str | None = None
    ) -> tuple[str, int, int]:
        """``(error name, producer id, epoch)`` for an InitProducerId without a transactional id.

        ``partition_epoch`` is the highest epoch of ``producer_id`` in this broker's partitions
        (None if none knows it). Fencing answers "PRODUCER_FENCED"; the handler maps it for old
        versions. ``owner`` is the caller's tenant: an id issued to another tenant is unknown to it
        (it gets a fresh id and cannot fence or bump the other tenant's producer).
        """
        if producer_id == -1 and epoch == -1:
            return ("NONE", *await self.fresh(owner))
        if producer_id < 0 or epoch < 0:
            return "INVALID_REQUEST", -1, -1
        remembered = self._epochs.get(producer_id)
        if remembered is not None and remembered[2] != owner:
            remembered = None
        known = [e for e in (remembered[0] if remembered else None, partition_epoch) if e is not None]
        if not known:
            return ("NONE", *await self.fresh(owner))
        current = max(known)
        if remembered is not None and remembered[0] == current and remembered[1] == epoch and epoch == current - 1:
            self._epochs.move_to_end(producer_id)
            return "NONE", producer_id, current  # a retry of the bump whose answer was lost
        if epoch < current:
            return "PRODUCER_FENCED", -1, -1
        if epoch >= EXHAUSTED_EPOCH:
            return ("NONE", *await self.fresh(owner))
        self._remember(producer_id, epoch + 1, epoch, owner)
        return "NONE", producer_id, epoch + 1


def _partition_epoch(svc: Services, producer_id: int, scope: Scope) -> int | None:
    """The producer's highest epoch in the partitions this scope owns (a tenant cannot learn of,
    or bump, another tenant's producers)."""
    best = None
    prefix = scope.prefix
    for plog in svc.replicas.partition_logs():
        if prefix and not plog.topic.startswith(prefix):
            continue
        e = plog.producer_epoch(producer_id)
        if e is not None and (best is None or e > best):
            best = e
    return best


async def _init_transactional(ctx: RequestContext, req: InitProducerIdRequest, txn: str) -> tuple[ErrorCode, int, int]:
    """InitProducerId with a transactional id: the transaction coordinator (``services.txn``)
    decides, for the id qualified by the caller's tenant."""
    if txn == "":
        return ErrorCode.invalid_request, -1, -1
    scope = ctx.scope
    if not scope.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
        return ErrorCode.transactional_id_authorization_failed, -1, -1
    coordinator = ctx.services.txn
    pid = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    if (pid == -1) != (epoch == -1):
        return ErrorCode.invalid_request, -1, -1
    timeout_ms = int(req.transaction_timeout / datetime.timedelta(milliseconds=1))
    try:
        r = await coordinator.init_producer_id(scope.physical(txn), timeout_ms, pid, epoch)
    except MetadataError as e:
        log.warning("cannot reserve producer ids: %s", e)
        return ErrorCode.coordinator_load_in_progress, -1, -1
    code = r.error
    if code == ErrorCode.producer_fenced and ctx.api_version < 4:
        code = ErrorCode.invalid_producer_epoch
    return code, r.producer_id, r.producer_epoch


@api(INIT_PRODUCER_ID, 0, 5)
async def handle_init_producer_id(ctx: RequestContext, req: InitProducerIdRequest) -> InitProducerIdResponse:
    svc = ctx.services
    version = ctx.api_version
    mod = response_module(INIT_PRODUCER_ID, version)

    def answer(code: ErrorCode, pid: int = -1, epoch: int = -1) -> InitProducerIdResponse:
        return build(
            mod.InitProducerIdResponse,
            throttle_time=datetime.timedelta(0),
            error_code=code,
            producer_id=pid,
            producer_epoch=epoch,
        )

    txn = req.transactional_id
    if txn is not None:
        code, pid, epoch = await _init_transactional(ctx, req, txn)
        return answer(code, pid, epoch)
    scope = ctx.scope
    # Idempotent producers: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic (KIP-679).
    if not (scope.allowed_cluster(Operation.IDEMPOTENT_WRITE) or scope.allowed_any_topic(Operation.WRITE)):
        return answer(ErrorCode.cluster_authorization_failed)
    pid = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    manager: ProducerIdManager = svc.producer_ids
    partition_epoch = _partition_epoch(svc, pid, scope) if pid >= 0 and epoch >= 0 else None
    try:
        name, pid, epoch = await manager.init_producer(pid, epoch, partition_epoch, scope.tenant_id)
    except MetadataError as e:
        log.warning("cannot reserve producer ids: %s", e)
        return answer(ErrorCode.coordinator_load_in_progress)  # retriable, as Kafka when no block is ready
    if name == "PRODUCER_FENCED" and version < 4:
        name = "INVALID_PRODUCER_EPOCH"  # older clients do not know PRODUCER_FENCED (KafkaApis does this)
    return answer(ErrorCode[name.lower()], pid, epoch)


@api(DESCRIBE_PRODUCERS, 0, 0)
async def handle_describe_producers(ctx: RequestContext, req: DescribeProducersRequest) -> DescribeProducersResponse:
    svc = ctx.services
    mod = response_module(DESCRIBE_PRODUCERS, ctx.api_version)
    image = svc.metadata.image
    scope = ctx.scope
    topics = []
    for t in req.topics:
        topic = scope.topic(image, t.name)
        readable = scope.allowed(Operation.READ, ResourceType.TOPIC, t.name)
        parts = []
        for index in t.partition_indexes:
            code = ErrorCode.none
            producers: tuple = ()
            if not readable:
                code = ErrorCode.topic_authorization_failed
            elif topic is None or not 0 <= index < len(topic.partitions):
                code = ErrorCode.unknown_topic_or_partition
            else:
                pinfo = topic.partitions[index]
                part = svc.replicas.leader(topic.name, pinfo)
                if part is None:
                    code = ErrorCode.not_leader_or_follower
                else:
                    producers = tuple(
                        build(
                            mod.ProducerState,
                            producer_id=p.producer_id,
                            producer_epoch=p.producer_epoch,
                            last_sequence=p.last_sequence,
                            last_timestamp=p.last_timestamp,
                            coordinator_epoch=p.coordinator_epoch,
                            current_txn_start_offset=p.current_txn_start_offset,
                        )
                        for p in sorted(part.view.active_producers(), key=lambda p: p.producer_id)
                    )
            parts.append(
                build(
                    mod.PartitionResponse,
                    partition_index=index,
                    error_code=code,
                    error_message=None,
                    active_producers=producers,
                )
            )
        topics.append(build(mod.TopicResponse, name=t.name, partitions=tuple(parts)))
    return build(mod.DescribeProducersResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics))
