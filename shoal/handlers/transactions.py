"""Transactions: AddPartitionsToTxn (24) v0-5, AddOffsetsToTxn (25) v0-4, EndTxn (26) v0-5,
WriteTxnMarkers (27) v1-2, DescribeTransactions (65) v0, ListTransactions (66) v0-2.

The handlers translate between kio entities and ``shoal.txn.TransactionCoordinator``
(``services.txn``), which knows physical names only. InitProducerId with a transactional id is in
``shoal.handlers.producer_ids``, FindCoordinator in ``shoal.handlers.groups``, TxnOffsetCommit in
``shoal.handlers.offsets``.

Authorization, as Kafka's ``KafkaApis``: WRITE on the TRANSACTIONAL_ID for AddPartitionsToTxn
(client versions), AddOffsetsToTxn and EndTxn (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); WRITE on
each topic added (TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED); READ on the
group for AddOffsetsToTxn (GROUP_AUTHORIZATION_FAILED); CLUSTER_ACTION on the cluster, in the
physical view, for WriteTxnMarkers and for the brokers' AddPartitionsToTxn v4+
(CLUSTER_AUTHORIZATION_FAILED); DESCRIBE on the transactional id for DescribeTransactions, whose
topics are listed only where the caller may DESCRIBE them; ListTransactions lists the ids the
caller may DESCRIBE.

Errors as Kafka's: PRODUCER_FENCED from v2 of AddPartitionsToTxn, AddOffsetsToTxn and EndTxn,
INVALID_PRODUCER_EPOCH before (KIP-588). AddOffsetsToTxn maps the group to its
``__consumer_offsets`` partition whether or not that topic exists yet (the hash over
``offsets.topic.num.partitions``; the group coordinator creates it).

Tenancy (``ctx.scope``): transactional ids, topics and groups are qualified on the way in and
unqualified on the way out; ListTransactions lists the scope's ids only.

ListTransactions v2's ``TransactionalIdPattern`` is a full match by RE2, as Kafka's RE2/J
(``shoal.protocol.regex``: linear time, at most 1000 characters, matched in a worker thread); a
pattern RE2 refuses gets INVALID_REGULAR_EXPRESSION.

KIP-890 part 2 (transaction version 2, when ``shoal.transaction.version`` is 2): EndTxn v5 bumps
the producer epoch at every commit and abort and answers the producer id and epoch the client goes
on with; AddPartitionsToTxn v4+ without ``verify_only`` (a broker adding the partitions of a
Produce v12 or TxnOffsetCommit v5) adds them as a version 2 transaction. At a lower level EndTxn v5
is served as v4 (its answer echoes the request's producer id and epoch).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterable

from shoal.groups import OFFSETS_TOPIC, partition_for
from shoal.handlers.registry import api
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode
from shoal.protocol.regex import InvalidRegex, compile_client_regex, match_names
from shoal.tenancy.acl import Operation, ResourceType
from shoal.txn.coordinator import transaction_version

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import (
        AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
        DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse,
        ListTransactionsRequest, ListTransactionsResponse, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
    )

log = logging.getLogger("shoal.handlers.transactions")

ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
ZERO = datetime.timedelta(0)
_UTC = datetime.timezone.utc


def fenced_as_epoch(code: ErrorCode) -> ErrorCode:
    """KIP-588: PRODUCER_FENCED is answered from AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2
    on; older versions get INVALID_PRODUCER_EPOCH, as Kafka's KafkaApis answers them."""
    return ErrorCode.invalid_producer_epoch if code == ErrorCode.producer_fenced else code


# -- AddPartitionsToTxn -------------------------------------------------------------------------


async def _add_partitions(ctx: RequestContext, txn: str, pid: int, epoch: int, topics: Iterable[Any], verify_only: bool,
                          client_transaction_version: int = 0) -> dict[tuple[str, int], ErrorCode]:
    """Per (client topic, partition) error of one transaction of an AddPartitionsToTxn."""
    svc = ctx.services
    scope = ctx.scope
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    if not scope.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
        return {tp: ErrorCode.transactional_id_authorization_failed for tp in wanted}
    image = svc.metadata.image
    denied, unknown = set(), set()
    for name, p in wanted:
        if not scope.allowed(Operation.WRITE, ResourceType.TOPIC, name):
            denied.add((name, p))
            continue
        topic = scope.topic(image, name)
        if topic is None or not 0 <= p < len(topic.partitions):
            unknown.add((name, p))
    if denied or unknown:
        out = {tp: ErrorCode.operation_not_attempted for tp in wanted}
        out.update({tp: ErrorCode.topic_authorization_failed for tp in denied})
        out.update({tp: ErrorCode.unknown_topic_or_partition for tp in unknown})
        return out
    coordinator = svc.txn
    physical = [(scope.physical(n), p) for n, p in wanted]
    if verify_only:
        codes = coordinator.verify_partitions(scope.physical(txn), pid, epoch, physical)
        return {tp: codes[ph] for tp, ph in zip(wanted, physical)}
    code = await coordinator.add_partitions(scope.physical(txn), pid, epoch, physical, client_transaction_version)
    return {tp: code for tp in wanted}


def _topic_results(mod: ModuleType, codes: dict[tuple[str, int], ErrorCode]) -> tuple[Entity, ...]:
    by_topic: dict[str, list] = {}
    for (name, p), code in codes.items():
        by_topic.setdefault(name, []).append(
            build(mod.AddPartitionsToTxnPartitionResult, partition_index=p, partition_error_code=code))
    return tuple(build(mod.AddPartitionsToTxnTopicResult, name=n, results_by_partition=tuple(r))
                 for n, r in by_topic.items())


@api(ADD_PARTITIONS_TO_TXN, 0, 5)
async def handle_add_partitions_to_txn(ctx: RequestContext,
                                       req: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    v = ctx.api_version
    mod = response_module(ADD_PARTITIONS_TO_TXN, v)
    if v < 4:
        codes = await _add_partitions(ctx, getattr(req, "v3_and_below_transactional_id"),
                                      getattr(req, "v3_and_below_producer_id"),
                                      getattr(req, "v3_and_below_producer_epoch"),
                                      getattr(req, "v3_and_below_topics"), False)
        if v < 2:  # KIP-588: older clients know INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED (KafkaApis)
            codes = {tp: fenced_as_epoch(c) for tp, c in codes.items()}
        return build(mod.AddPartitionsToTxnResponse, throttle_time=ZERO,
                     results_by_topic_v3_and_below=_topic_results(mod, codes))
    scope = ctx.scope
    if not (scope.physical_view and scope.allowed_cluster(Operation.CLUSTER_ACTION)):
        return build(mod.AddPartitionsToTxnResponse, throttle_time=ZERO,
                     error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=())
    results = []
    ctv = 2 if transaction_version(ctx.services.config, ctx.services.metadata.image) >= 2 else 0  # a broker adding a Produce v12's partitions
    for t in getattr(req, "transactions"):
        codes = await _add_partitions(ctx, t.transactional_id, t.producer_id, t.producer_epoch, t.topics, t.verify_only,
                                      ctv)
        results.append(build(mod.AddPartitionsToTxnResult, transactional_id=t.transactional_id,
                             topic_results=_topic_results(mod, codes)))
    return build(mod.AddPartitionsToTxnResponse, throttle_time=ZERO, error_code=ErrorCode.none,
                 results_by_transaction=tuple(results))


# -- AddOffsetsToTxn ----------------------------------------------------------------------------


@api(ADD_OFFSETS_TO_TXN, 0, 4)
async def handle_add_offsets_to_txn(ctx: RequestContext, req: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    mod = response_module(ADD_OFFSETS_TO_TXN, ctx.api_version)
    svc = ctx.services
    scope = ctx.scope

    def answer(code: ErrorCode) -> AddOffsetsToTxnResponse:
        if ctx.api_version < 2:
            code = fenced_as_epoch(code)
        return build(mod.AddOffsetsToTxnResponse, throttle_time=ZERO, error_code=code)

    if not scope.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return answer(ErrorCode.transactional_id_authorization_failed)
    if not scope.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return answer(ErrorCode.group_authorization_failed)
    # Kafka's groupCoordinator.partitionFor: the hash over the offsets topic's partitions, which
    # need not exist yet (the group coordinator creates it when TxnOffsetCommit finds it)
    topic = svc.metadata.image.topic(OFFSETS_TOPIC)
    count = len(topic.partitions) if topic is not None else int(svc.config.get("offsets.topic.num.partitions"))
    if topic is None:
        svc.groups.request_offsets_topic()
    partition = partition_for(scope.physical(req.group_id), count)
    code = await svc.txn.add_partitions(scope.physical(req.transactional_id), req.producer_id, req.producer_epoch,
                                        [(OFFSETS_TOPIC, partition)])
    return answer(code)


# -- EndTxn -------------------------------------------------------------------------------------


@api(END_TXN, 0, 5)
async def handle_end_txn(ctx: RequestContext, req: EndTxnRequest) -> EndTxnResponse:
    v = ctx.api_version
    mod = response_module(END_TXN, v)
    scope = ctx.scope

    def answer(code: ErrorCode, pid: int = -1, epoch: int = -1) -> EndTxnResponse:
        if v < 2:
            code = fenced_as_epoch(code)
        return build(mod.EndTxnResponse, throttle_time=ZERO, error_code=code, producer_id=pid, producer_epoch=epoch)

    if not scope.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return answer(ErrorCode.transactional_id_authorization_failed)
    coordinator = ctx.services.txn
    if v >= 5 and transaction_version(ctx.services.config, ctx.services.metadata.image) >= 2:
        res = await coordinator.end_txn_v2(scope.physical(req.transactional_id), req.producer_id, req.producer_epoch,
                                           bool(req.committed))
        return answer(res.error, res.producer_id, res.producer_epoch)
    code = await coordinator.end_txn(scope.physical(req.transactional_id), req.producer_id, req.producer_epoch,
                                     bool(req.committed))
    if code == ErrorCode.none:
        return answer(code, req.producer_id, req.producer_epoch)
    return answer(code)


# -- WriteTxnMarkers ----------------------------------------------------------------------------


@api(WRITE_TXN_MARKERS, 1, 2)
async def handle_write_txn_markers(ctx: RequestContext, req: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    """Inter-broker: a coordinator asks this broker, the leader, to write markers."""
    from shoal.txn.markers import write_local_markers

    mod = response_module(WRITE_TXN_MARKERS, ctx.api_version)
    svc = ctx.services
    scope = ctx.scope
    allowed = scope.physical_view and scope.allowed_cluster(Operation.CLUSTER_ACTION)
    timeout_s = int(svc.config.get("request.timeout.ms")) / 1000.0
    results = []
    for m in req.markers:
        wanted: list[tuple[str, int]] = [(t.name, p) for t in m.topics for p in t.partition_indexes]
        if not allowed:
            codes = {tp: ErrorCode.cluster_authorization_failed for tp in wanted}
        else:
            codes = await write_local_markers(svc, svc.groups, m.producer_id, m.producer_epoch, m.coordinator_epoch,
                                              bool(m.transaction_result), wanted, timeout_s)
        by_topic: dict[str, list] = {}
        for (name, p), code in codes.items():
            by_topic.setdefault(name, []).append(build(mod.WritableTxnMarkerPartitionResult, partition_index=p,
                                                       error_code=code))
        results.append(build(mod.WritableTxnMarkerResult, producer_id=m.producer_id, topics=tuple(
            build(mod.WritableTxnMarkerTopicResult, name=n, partitions=tuple(ps)) for n, ps in by_topic.items())))
    return build(mod.WriteTxnMarkersResponse, markers=tuple(results))


# -- DescribeTransactions / ListTransactions ----------------------------------------------------


@api(DESCRIBE_TRANSACTIONS, 0, 0)
async def handle_describe_transactions(ctx: RequestContext,
                                       req: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    mod = response_module(DESCRIBE_TRANSACTIONS, ctx.api_version)
    scope = ctx.scope
    coordinator = ctx.services.txn
    out = []
    for tid in req.transactional_ids:
        empty = dict(transaction_state="", transaction_timeout=ZERO,
                     transaction_start_time=datetime.datetime.fromtimestamp(-1 / 1000, _UTC),
                     producer_id=-1, producer_epoch=-1, topics=())
        if not scope.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            out.append(build(mod.TransactionState, error_code=ErrorCode.transactional_id_authorization_failed,
                             transactional_id=tid, **empty))
            continue
        code, md = coordinator.describe(scope.physical(tid))
        if md is None:
            out.append(build(mod.TransactionState, error_code=code, transactional_id=tid, **empty))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(md.partitions):
            name = scope.visible(topic)
            if name is None or not scope.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
                continue
            by_topic.setdefault(name, []).append(p)
        out.append(build(
            mod.TransactionState, error_code=ErrorCode.none, transactional_id=tid,
            transaction_state=md.state.kafka_name, transaction_timeout=datetime.timedelta(milliseconds=md.timeout_ms),
            transaction_start_time=datetime.datetime.fromtimestamp(md.start_ms / 1000, _UTC),
            producer_id=md.producer_id, producer_epoch=md.producer_epoch,
            topics=tuple(build(mod.TopicData, topic=n, partitions=tuple(ps)) for n, ps in by_topic.items()),
        ))
    return build(mod.DescribeTransactionsResponse, throttle_time=ZERO, transaction_states=tuple(out))


@api(LIST_TRANSACTIONS, 0, 2)
async def handle_list_transactions(ctx: RequestContext, req: ListTransactionsRequest) -> ListTransactionsResponse:
    mod = response_module(LIST_TRANSACTIONS, ctx.api_version)
    scope = ctx.scope
    coordinator = ctx.services.txn
    pattern = getattr(req, "transactional_id_pattern", None)
    regex = None
    if pattern:
        try:
            regex = compile_client_regex(pattern)
        except InvalidRegex:
            return build(mod.ListTransactionsResponse, throttle_time=ZERO,
                         error_code=ErrorCode.invalid_regular_expression,
                         unknown_state_filters=(), transaction_states=())
    code, mds, unknown = coordinator.list(req.state_filters, req.producer_id_filters,
                                          int(getattr(req, "duration_filter", -1)))
    visible = []
    for md in mds:
        name = scope.visible(md.transactional_id)
        if name is None or not scope.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, name):
            continue
        visible.append((name, md))
    if regex is not None:  # RE2, in a worker thread: many ids never hold the event loop
        matched = await asyncio.to_thread(match_names, regex, [name for name, _ in visible])
        visible = [(name, md) for name, md in visible if name in matched]
    states = [build(mod.TransactionState, transactional_id=name, producer_id=md.producer_id,
                    transaction_state=md.state.kafka_name) for name, md in visible]
    return build(mod.ListTransactionsResponse, throttle_time=ZERO, error_code=code,
                 unknown_state_filters=tuple(unknown), transaction_states=tuple(states))
