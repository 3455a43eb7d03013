"""ACL APIs (CreateAcls, DescribeAcls, DeleteAcls).

  DescribeAcls (29)  v1-3
  CreateAcls (30)    v1-3
  DeleteAcls (31)    v1-3
  (v0 is not in kio's schemas; every maintained client sends v1 or later.)

As Kafka's ``AclApis``: CreateAcls and DeleteAcls need ALTER on the CLUSTER, DescribeAcls needs
DESCRIBE on it (CLUSTER_AUTHORIZATION_FAILED otherwise); without an authorizer
(``authorizer.class.name`` empty) all three answer SECURITY_DISABLED. A binding that cannot be
created (``shoal.tenancy.acl.binding_error``) gets INVALID_REQUEST with a message in its own
result; the others are created. Filters are Kafka's ``AclBindingFilter``
(``shoal.tenancy.acl.binding_matches_filter``); a filter with UNKNOWN or unknown codes gets
INVALID_REQUEST (for DescribeAcls the whole response, for DeleteAcls that filter's result).
DescribeAcls answers grouped by resource pattern, in the order bindings were created.

Tenancy: bindings belong to the scope that creates them (``AclEntry.tenant`` is the caller's
tenant, None for the physical view), with names and principals as that scope sees them. A scope
only ever describes or deletes its own bindings; the physical view sees only tenant-None ones.

Deviations from Kafka:
- Shoal's resource type NAMESPACE (20, KIP-37) is accepted in bindings and filters, but a filter
  with resource type ANY never matches a NAMESPACE binding (unmodified clients cannot parse the
  code): such bindings are described and deleted only by a filter that names NAMESPACE.
- Bindings are checked more strictly than Kafka's broker does (as ``kafka-acls.sh`` checks them):
  the operation must be one the resource type supports, or ALL; PREFIXED ``*`` is refused.
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Any

from shoal.handlers.registry import api
from shoal.metadata import AclEntry, MetadataImage
from shoal.metadata.change import Result
from shoal.metadata.rules import acls as acl_rules
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode
from shoal.tenancy.acl import (
    Operation,
    binding_error,
    binding_matches_filter,
    filter_error,
    format_entry,
    format_pattern,
)

if TYPE_CHECKING:
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import (
        CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
        DescribeAclsResponse,
    )

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31

_NO_THROTTLE = datetime.timedelta(0)
_SECURITY_DISABLED = "No Authorizer is configured on the broker"

log = logging.getLogger("shoal.acls")


def describe_binding(a: AclEntry) -> str:
    """Kafka's ``AclBinding.toString`` shape, for log lines."""
    return (
        f"(pattern={format_pattern(a.resource_type, a.resource_name, a.pattern_type)}, "
        f"entry={format_entry(a.principal, a.host, a.operation, a.permission_type)})"
    )


def _refusal(ctx: Any, operation: int) -> tuple[ErrorCode, str] | None:
    """The error of the whole request, or None when the caller may go on."""
    if not ctx.scope.allowed_cluster(operation):
        return ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
    if not ctx.services.config.get("authorizer.class.name"):
        return ErrorCode.security_disabled, _SECURITY_DISABLED
    return None


def _who(ctx: Any) -> str:
    tenant = ctx.scope.tenant_id
    where = f" in tenant {tenant}" if tenant else ""
    return f"{ctx.principal} from {ctx.client_address}{where}"


def _own_bindings(ctx: Any, image: MetadataImage | None = None) -> list[AclEntry]:
    tenant = ctx.scope.tenant_id
    return [a for a in (image or ctx.services.metadata.image).acls if a.tenant == tenant]


def _matching(bindings: list[AclEntry], f: Any) -> list[AclEntry]:
    return [
        a for a in bindings
        if binding_matches_filter(
            a, f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
            f.host_filter, f.operation, f.permission_type,
        )
    ]


def _invalid_filter(f: Any) -> str | None:
    return filter_error(f.resource_type_filter, f.pattern_type_filter, f.operation, f.permission_type)


@api(CREATE_ACLS, 1, 3)
async def handle_create_acls(ctx: RequestContext, req: CreateAclsRequest) -> CreateAclsResponse:
    mod = response_module(CREATE_ACLS, ctx.api_version)

    def result(code: ErrorCode = ErrorCode.none, message: str | None = None) -> Any:
        return build(mod.AclCreationResult, error_code=code, error_message=message)

    refused = _refusal(ctx, Operation.ALTER)
    if refused is not None:
        return build(
            mod.CreateAclsResponse, throttle_time=_NO_THROTTLE,
            results=tuple(result(*refused) for _ in req.creations),
        )
    tenant = ctx.scope.tenant_id
    results: list[Any] = []
    new: list[AclEntry] = []
    for c in req.creations:
        entry = AclEntry(
            tenant, int(c.resource_type), c.resource_name, int(c.resource_pattern_type), c.principal, c.host,
            int(c.operation), int(c.permission_type),
        )
        why = binding_error(entry)
        if why is not None:
            log.info("refused to create ACL for %s: %s", _who(ctx), why)
            results.append(result(ErrorCode.invalid_request, why))
            continue
        new.append(entry)
        results.append(result())
    if new:
        await ctx.services.metadata.alter_acls(new, [])
        for a in new:
            log.info("ACL created by %s: %s", _who(ctx), describe_binding(a))
    return build(mod.CreateAclsResponse, throttle_time=_NO_THROTTLE, results=tuple(results))


@api(DESCRIBE_ACLS, 1, 3)
async def handle_describe_acls(ctx: RequestContext, req: DescribeAclsRequest) -> DescribeAclsResponse:
    mod = response_module(DESCRIBE_ACLS, ctx.api_version)

    def response(code: ErrorCode = ErrorCode.none, message: str | None = None, resources: tuple = ()) -> Any:
        return build(
            mod.DescribeAclsResponse, throttle_time=_NO_THROTTLE, error_code=code, error_message=message,
            resources=resources,
        )

    refused = _refusal(ctx, Operation.DESCRIBE)
    if refused is not None:
        return response(*refused)
    why = _invalid_filter(req)
    if why is not None:
        return response(ErrorCode.invalid_request, why)
    grouped: dict[tuple[int, str, int], list[Any]] = {}
    for a in _matching(_own_bindings(ctx), req):
        grouped.setdefault((a.resource_type, a.resource_name, a.pattern_type), []).append(
            build(mod.AclDescription, principal=a.principal, host=a.host, operation=a.operation,
                  permission_type=a.permission_type)
        )
    return response(resources=tuple(
        build(mod.DescribeAclsResource, resource_type=rt, resource_name=name, pattern_type=pt, acls=tuple(acls))
        for (rt, name, pt), acls in grouped.items()
    ))


@api(DELETE_ACLS, 1, 3)
async def handle_delete_acls(ctx: RequestContext, req: DeleteAclsRequest) -> DeleteAclsResponse:
    mod = response_module(DELETE_ACLS, ctx.api_version)

    def result(code: ErrorCode = ErrorCode.none, message: str | None = None, matching: tuple = ()) -> Any:
        return build(mod.DeleteAclsFilterResult, error_code=code, error_message=message, matching_acls=matching)

    refused = _refusal(ctx, Operation.ALTER)
    if refused is not None:
        return build(
            mod.DeleteAclsResponse, throttle_time=_NO_THROTTLE,
            filter_results=tuple(result(*refused) for _ in req.filters),
        )
    def delete(image: MetadataImage) -> Result[tuple[list[Any], dict[AclEntry, None]]]:
        """Match the filters against the bindings of the image the removal commits against: a
        binding created meanwhile (through any broker) is matched too, none is reported twice."""
        bindings = _own_bindings(ctx, image)
        results: list[Any] = []
        gone: dict[AclEntry, None] = {}
        for f in req.filters:
            why = _invalid_filter(f)
            if why is not None:
                results.append(result(ErrorCode.invalid_request, why))
                continue
            matched = _matching(bindings, f)
            gone.update(dict.fromkeys(matched))
            results.append(result(matching=tuple(
                build(
                    mod.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
                    resource_type=a.resource_type, resource_name=a.resource_name, pattern_type=a.pattern_type,
                    principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission_type,
                )
                for a in matched
            )))
        return Result(acl_rules.alter_acls(image, [], list(gone)).change if gone else None, (results, gone))

    results, gone = await ctx.services.metadata.decide_and_commit(delete)
    for a in gone:
        log.info("ACL deleted by %s: %s", _who(ctx), describe_binding(a))
    return build(mod.DeleteAclsResponse, throttle_time=_NO_THROTTLE, filter_results=tuple(results))
