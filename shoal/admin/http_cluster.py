"""The HTTP admin API's cluster endpoints (issue 27), the operator's only (a tenant
administrator gets 403, as on every path outside its own tenant):

- ``GET /v1/cluster/balancer``: the settings and the controller's last published status
  (``shoal.cluster.balancer.executor.Status``);
- ``GET /v1/cluster/balancer/plan``: a plan made on this broker now (a dry run);
- ``POST /v1/cluster/balancer/pause`` / ``resume``;
- ``POST /v1/cluster/brokers/{id}/remove``: drain broker ``id`` and remove it (409 with the reason
  when the other brokers cannot hold its replicas); ``DELETE`` the same path cancels.

On a single node (no controller, no balancer) they answer 404."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shoal.admin.http_errors import HttpError
from shoal.cluster.balancer.service import BalancerService, RemoveRefused, plan_json

if TYPE_CHECKING:
    from shoal.admin.http import AdminHttpServer


class ClusterRoutes:
    def __init__(self, server: "AdminHttpServer", balancer: BalancerService | None) -> None:
        self.server = server
        self.balancer = balancer

    async def route(self, method: str, segs: list[str]) -> tuple[int, Any]:
        """``segs``: the path after ``/v1/cluster/``."""
        b = self.balancer
        if b is None:
            raise HttpError(404, "not_found", "no balancer here: it runs on a cluster (shoal.metadata.store=etcd://...)")
        allow = self.server._allow
        if segs == ["balancer"]:
            allow(method, "GET")
            return 200, await b.status()
        if segs == ["balancer", "plan"]:
            allow(method, "GET")
            return 200, plan_json(await b.plan())
        if segs in (["balancer", "pause"], ["balancer", "resume"]):
            allow(method, "POST")
            await b.set_paused(segs[1] == "pause")
            return 200, {"paused": segs[1] == "pause"}
        if len(segs) == 3 and segs[0] == "brokers" and segs[2] == "remove":
            try:
                node = int(segs[1])
            except ValueError:
                raise HttpError(400, "bad_request", f"not a broker id: {segs[1]!r}") from None
            cancel = allow(method, "POST", "DELETE") == "DELETE"
            try:
                return 200, await b.remove_broker(node, cancel=cancel)
            except RemoveRefused as e:
                raise HttpError(409, "refused", str(e)) from None
        raise HttpError(404, "not_found", f"no such path: /v1/cluster/{'/'.join(segs)}")
