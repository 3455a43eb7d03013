"""DescribeLogDirs (key 35), v1-v4: this broker's log directory and the partitions in it.

As Kafka's ``ReplicaManager.describeLogDirs``: every partition replica this broker hosts (leader or
follower) with its size in bytes and ``offset_lag`` = max(0, high watermark - log end offset)
(0 on a leader; what a follower still lacks of what is committed); a null topic list means every
partition. DESCRIBE on the cluster is needed (CLUSTER_AUTHORIZATION_FAILED otherwise, v3+ in the
top-level error code, earlier as an empty answer). v4 adds the directory's total and usable bytes.

Scoped: a tenant sees its own partitions only, under their names, with their sizes; the directory
is named ``/<its cluster id>`` and its total and usable bytes are -1 (Kafka's unknown volume): the
broker's path and its disk, shared by every tenant, are the operator's (the physical view sees
them).

Deviation: one log directory per broker (``log.dirs`` holds one directory); no future replicas
(``is_future_key`` is always false: AlterReplicaLogDirs is not served).
"""

from __future__ import annotations

import datetime
import os
from typing import TYPE_CHECKING

from shoal.handlers.registry import api
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode
from shoal.tenancy.acl import Operation

if TYPE_CHECKING:
    from shoal.handlers.context import RequestContext
    from shoal.handlers.messages import DescribeLogDirsRequest, DescribeLogDirsResponse

KEY = 35


@api(KEY, 1, 4)
async def handle_describe_log_dirs(ctx: RequestContext, req: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    svc = ctx.services
    mod = response_module(KEY, ctx.api_version)
    scope = ctx.scope
    if not scope.allowed_cluster(Operation.DESCRIBE):
        return build(mod.DescribeLogDirsResponse, throttle_time=datetime.timedelta(0),
                     error_code=ErrorCode.cluster_authorization_failed, results=())
    wanted = None
    if req.topics is not None:
        wanted = {(scope.physical(t.topic), p) for t in req.topics for p in t.partitions}
    by_topic: dict[str, list] = {}
    for part in sorted(svc.replicas.hosted(), key=lambda p: p.key):
        visible = scope.visible(part.topic)
        if visible is None or (wanted is not None and part.key not in wanted):
            continue
        plog = part.view
        by_topic.setdefault(visible, []).append(build(
            mod.DescribeLogDirsPartition, partition_index=part.index, partition_size=plog.size_bytes,
            offset_lag=max(0, plog.high_watermark - plog.log_end_offset), is_future_key=False))
    total = usable = -1  # Kafka's UNKNOWN_VOLUME_BYTES
    if scope.tenant_id is not None:  # the tenant's view: no broker path, no shared disk
        log_dir = f"/{scope.tenant_id}"
    else:
        log_dir = os.path.abspath(svc.replicas.logs.data_dir)
        try:
            st = os.statvfs(log_dir)
            total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError:
            pass
    result = build(mod.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir=log_dir,
                   topics=tuple(build(mod.DescribeLogDirsTopic, name=n, partitions=tuple(ps))
                                for n, ps in by_topic.items()),
                   total_bytes=total, usable_bytes=usable)
    return build(mod.DescribeLogDirsResponse, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                 results=(result,))
