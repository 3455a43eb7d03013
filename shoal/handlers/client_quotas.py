"""Client quota APIs (DescribeClientQuotas, AlterClientQuotas).

  DescribeClientQuotas (48)  v0-1
  AlterClientQuotas (49)     v0-1

As Kafka (KRaft's ``ClientQuotasImage.describe`` and ``ClientQuotaControlManager``):

- Describe needs DESCRIBE_CONFIGS on the CLUSTER, Alter ALTER_CONFIGS on it
  (CLUSTER_AUTHORIZATION_FAILED: the whole Describe response, each Alter entry).
- Describe filters: per entity type one component, EXACT (a name), DEFAULT or ANY (match type
  2, "specified"); ``strict`` also requires the entity to have no other type. A bad filter is
  INVALID_REQUEST for the whole response (an unknown entity or match type: UNSUPPORTED_VERSION),
  with ``entries`` null.
- Alter: per entry an error of its own (the others are applied, all in one metadata change):
  INVALID_REQUEST for an empty or unknown entity, a duplicated entity type or quota key, an
  empty name, ``ip`` mixed with user/client-id or not an IP address, a key the entity does not
  take (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``,
  ``controller_mutation_rate`` for user/client-id; ``connection_creation_rate`` for ip), a value
  <= 0, a fraction for an integral key; the same entity twice in a request. ``remove`` deletes a
  key (a missing one is a no-op). ``validate_only`` checks and changes nothing.
- Quotas are stored in the metadata store (``alter_client_quotas``) and survive restarts; the
  brokers' quota managers follow the image.

Scoped (``shoal.quotas.entities`` says how entities are stored): a tenant describes and alters
only the user/client-id entities of its own logical cluster, named as it sees them, and
describes (never alters) its own tenant-wide quota, ``(tenant=<its cluster id>)`` with the values
that bound it (its own, else the tenant default's; a filter on the ``tenant`` type matches only
that); the physical view sees everything, including Shoal's ``tenant`` entity type — ``(tenant=T)`` is T's
tenant-wide quota, ``(tenant=<default>)`` every tenant's default, ``(tenant=T, user=U)`` a quota
T set inside its cluster.

Deviations from Kafka: a tenant cannot name ``ip`` entities (connection limits are the
operator's); an unknown entity type in Alter is INVALID_REQUEST (as KRaft), not
UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Any, Sequence

from shoal.handlers.registry import api
from shoal.metadata import MetadataError, MetadataImage
from shoal.metadata.change import Result, unchanged
from shoal.metadata.rules import quotas as quota_rules
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode, error_code
from shoal.quotas.entities import EntityError, check_value, describe, stored_entity
from shoal.tenancy.acl import Operation

if TYPE_CHECKING:
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import (
        AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
        DescribeClientQuotasResponse,
    )

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49

_NO_THROTTLE = datetime.timedelta(0)
log = logging.getLogger("shoal.client_quotas")


@api(DESCRIBE_CLIENT_QUOTAS, 0, 1)
async def handle_describe_client_quotas(ctx: RequestContext,
                                        req: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    mod = response_module(DESCRIBE_CLIENT_QUOTAS, ctx.api_version)

    def error(code: ErrorCode, message: str) -> DescribeClientQuotasResponse:
        return build(mod.DescribeClientQuotasResponse, throttle_time=_NO_THROTTLE, error_code=code,
                     error_message=message, entries=None)

    scope = ctx.scope
    if not scope.allowed_cluster(Operation.DESCRIBE_CONFIGS):
        return error(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    components = [(c.entity_type, int(c.match_type), c.match) for c in req.components]
    try:
        found = describe(ctx.services.metadata.image, scope.tenant_id, components, req.strict)
    except EntityError as e:
        log.info("DescribeClientQuotas from %s refused: %s", ctx.client_address, e.message)
        return error(error_code(e.code), e.message)
    entries = tuple(
        build(
            mod.EntryData,
            entity=tuple(build(mod.EntityData, entity_type=t, entity_name=n) for t, n in entity),
            values=tuple(build(mod.ValueData, key=k, value=v) for k, v in sorted(values.items())),
        )
        for entity, values in found
    )
    return build(mod.DescribeClientQuotasResponse, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none,
                 error_message=None, entries=entries)


@api(ALTER_CLIENT_QUOTAS, 0, 1)
async def handle_alter_client_quotas(ctx: RequestContext, req: AlterClientQuotasRequest) -> AlterClientQuotasResponse:
    mod = response_module(ALTER_CLIENT_QUOTAS, ctx.api_version)
    svc = ctx.services
    scope = ctx.scope
    allowed = scope.allowed_cluster(Operation.ALTER_CONFIGS)
    entries: Sequence[Any] = req.entries  # (v0's or v1's EntryData: enumerate and zip would join them to object)

    def plan(image: MetadataImage) -> Result[tuple[list[tuple[ErrorCode, str | None]], list]]:
        """Each entry's stored entity (a tenant's user named as stored in this image) and checks;
        the one change setting the valid entries' quotas, decided on the image it commits to."""
        results: list[tuple[ErrorCode, str | None]] = []
        planned: list[tuple[int, tuple, dict[str, float | None]]] = []  # (entry index, entity, ops)
        for i, entry in enumerate(entries):
            results.append((ErrorCode.none, None))
            if not allowed:
                results[i] = (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
                continue
            try:
                stored = stored_entity(image, scope.tenant_id, [(e.entity_type, e.entity_name) for e in entry.entity])
                ops: dict[str, float | None] = {}
                for op in entry.ops:
                    if op.key in ops:
                        raise EntityError(f"Duplicate quota key {op.key} not updating quota for this entity")
                    ops[op.key] = None if op.remove else float(op.value)
                for key, value in ops.items():
                    if value is not None:
                        check_value(stored, key, value)
            except EntityError as e:
                results[i] = (error_code(e.code), e.message)
                continue
            planned.append((i, stored, ops))
        counts: dict[tuple, int] = {}
        for _i, stored, _ops in planned:
            counts[stored] = counts.get(stored, 0) + 1
        changes = []
        for i, stored, ops in planned:
            if counts[stored] > 1:
                results[i] = (ErrorCode.invalid_request, f"Ignoring duplicate entity {_describe(stored)}")
            else:
                changes.append((i, stored, ops))
        if not changes or req.validate_only:
            return unchanged((results, []))
        decided = quota_rules.alter_client_quotas(image, [(stored, ops) for _i, stored, ops in changes])
        return Result(decided.change, (results, changes))

    try:
        results, changes = await svc.metadata.decide_and_commit(plan)
    except MetadataError as e:
        log.warning("AlterClientQuotas from %s failed: %s", ctx.client_address, e.message)
        results, changes = plan(svc.metadata.image).response
        for i, _stored, _ops in changes:
            results[i] = (error_code(e.code), e.message)
    else:
        for _i, stored, ops in changes:
            log.info("client quotas of %s (%s) by %s: %s", _describe(stored),
                     scope.tenant_id or "physical view", ctx.principal, ops)
    return build(
        mod.AlterClientQuotasResponse,
        throttle_time=_NO_THROTTLE,
        entries=tuple(
            build(
                mod.EntryData,
                error_code=code,
                error_message=message,
                entity=tuple(build(mod.EntityData, entity_type=e.entity_type, entity_name=e.entity_name)
                             for e in entry.entity),
            )
            for entry, (code, message) in zip(entries, results)
        ),
    )


def _describe(stored: tuple) -> str:
    return "(" + ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in stored) + ")"
