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

from pydantic import ConfigDict

from shoal.admin.http_errors import HttpError
from shoal.admin.http_routes import Model, endpoint
from shoal.cluster.balancer.service import BalancerService, RemoveRefused, plan_json

if TYPE_CHECKING:
    from shoal.admin.http import AdminHttpServer


class Loose(Model):
    """An answer whose fields the balancer defines (``shoal.cluster.balancer``): kept as they are."""

    model_config = ConfigDict(extra="allow")


class BalancerStatus(Loose):
    enabled: bool
    paused: bool
    trigger: str
    remove_brokers: list[int]


class BalancerPlan(Loose):
    replica_moves: int
    leadership_moves: int


class Paused(Model):
    paused: bool


class RemoveStatus(Loose):
    remove_brokers: list[int]


class ClusterRoutes:
    def __init__(self, server: "AdminHttpServer", balancer: BalancerService | None) -> None:
        self.server = server
        self.balancer = balancer

    async def around(self, call: Any, kwargs: dict[str, Any]) -> Model:
        """The operator's alone (a tenant administrator gets 403 from ``HttpAuth.check``), and
        only where a balancer runs."""
        if self.balancer is None:
            call.close()  # (a coroutine never awaited)
            raise HttpError(404, "not_found", "no balancer here: it runs on a cluster (shoal.metadata.store=etcd://...)")
        return await call

    @property
    def _b(self) -> BalancerService:
        assert self.balancer is not None
        return self.balancer

    @endpoint("GET", "/v1/cluster/balancer", op="balancerStatus", errors=[403, 404],
              summary="The balancer's settings and the controller's last published status")
    async def status(self) -> BalancerStatus:
        return BalancerStatus.model_validate(await self._b.status(), strict=False)

    @endpoint("GET", "/v1/cluster/balancer/plan", op="balancerPlan", errors=[403, 404],
              summary="A plan made on this broker now (a dry run)")
    async def plan(self) -> BalancerPlan:
        return BalancerPlan.model_validate(plan_json(await self._b.plan()), strict=False)

    @endpoint("POST", "/v1/cluster/balancer/pause", op="balancerPause", errors=[403, 404], summary="Pause the balancer")
    async def pause(self) -> Paused:
        await self._b.set_paused(True)
        return Paused(paused=True)

    @endpoint("POST", "/v1/cluster/balancer/resume", op="balancerResume", errors=[403, 404],
              summary="Resume the balancer")
    async def resume(self) -> Paused:
        await self._b.set_paused(False)
        return Paused(paused=False)

    @endpoint("POST", "/v1/cluster/brokers/{node}/remove", op="removeBroker", errors=[400, 403, 404, 409],
              summary="Drain a broker and remove it (409 with the reason when the others cannot hold its replicas)")
    async def remove(self, node: int) -> RemoveStatus:
        return await self._remove(node, cancel=False)

    @endpoint("DELETE", "/v1/cluster/brokers/{node}/remove", op="cancelRemoveBroker", errors=[400, 403, 404, 409],
              summary="Cancel a broker's removal")
    async def cancel_remove(self, node: int) -> RemoveStatus:
        return await self._remove(node, cancel=True)

    async def _remove(self, node: int, cancel: bool) -> RemoveStatus:
        try:
            return RemoveStatus.model_validate(await self._b.remove_broker(node, cancel=cancel), strict=False)
        except RemoveRefused as e:
            raise HttpError(409, "refused", str(e)) from None
