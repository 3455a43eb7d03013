"""The operator's pages: brokers, tenants, multi-region, the balancer (a super user's only).

Every handler here is wrapped by :func:`operator_only`: a session whose user is not an operator
(``is_operator``: the cluster's super users) gets the same 404 as a page that does not exist,
before anything is asked of the broker or the admin API. What each page reads is in
``shoal.console.operator_data``.
"""

from __future__ import annotations

import functools
from typing import Any

from aiohttp import web

from shoal.client import KafkaError
from shoal.console import operator_data as data
from shoal.console.common import Handler, flash, form, paginate, redirect, render, session_of, why
from shoal.console.operator_data import AdminApi, AdminApiError, IsrWatch, PartlyCreated

ADMIN_API: web.AppKey[Any] = web.AppKey("admin_api", object)  # an operator_data.AdminApi, or None
ISR_WATCH: web.AppKey[IsrWatch] = web.AppKey("isr_watch", IsrWatch)
REFRESH_S = 5  # the brokers page reloads itself this often when asked (?refresh=1)


def operator_only(handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def checked(request: web.Request) -> web.StreamResponse:
        if not session_of(request).operator:
            return render(request, "notfound.html", status=404, what="page")
        return await handler(request)
    return checked


def _admin(request: web.Request) -> AdminApi | None:
    return request.app[ADMIN_API]


def _as_user(request: web.Request) -> tuple[str, str]:
    s = session_of(request)
    return s.user, s.password


@operator_only
async def brokers_page(request: web.Request) -> web.Response:
    session = session_of(request)
    view, _infos, _md = await data.cluster_view(session.client, _admin(request), *_as_user(request),
                                                watch=request.app[ISR_WATCH])
    refresh = REFRESH_S if request.query.get("refresh") else None
    return render(request, "operator_brokers.html", view=view, util=data.utilization, refresh=refresh,
                  isr_changes=list(request.app[ISR_WATCH].changes)[:20], sub="brokers")


@operator_only
async def tenants_page(request: web.Request) -> web.Response:
    return await _tenants_page(request)


async def _tenants_page(request: web.Request, error: str | None = None, values: dict[str, str] | None = None,
                        status: int = 200) -> web.Response:
    admin = _admin(request)
    rows: list[data.TenantRow] = []
    load_error = throttle_note = None
    if admin is None:
        error = error or "The console was started without the admin API (--admin-api): no tenants to show."
    else:
        try:
            rows, load_error, throttle_note = await data.tenants_view(session_of(request).client, admin,
                                                                      *_as_user(request))
        except AdminApiError as e:
            error = error or f"The admin API refused: {e.status or 'no answer'}: {e.message}"
    pager, shown = paginate(request, [r.tenant_id + " " + r.display_name for r in rows])
    by_key = {r.tenant_id + " " + r.display_name: r for r in rows}
    page = [by_key[k] for k in shown]
    if admin is not None:  # this month's usage and cost of the tenants shown (not of every tenant)
        await data.tenant_usages(admin, *_as_user(request), page)
    return render(request, "operator_tenants.html", status=status, rows=page, pager=pager,
                  error=error, load_error=load_error, throttle_note=throttle_note, values=values or {},
                  sub="tenants")


@operator_only
async def create_tenant(request: web.Request) -> web.StreamResponse:
    fields = await form(request)
    name, user, password = (fields.get("display_name", "").strip(), fields.get("admin_user", "").strip(),
                            fields.get("admin_password", ""))
    shown = {"display_name": name, "admin_user": user}  # never the password
    admin = _admin(request)
    if not name or not user or not password:
        return await _tenants_page(request, "A tenant needs a name, and its administrator a name and a password.",
                                  shown, 400)
    if admin is None:
        return await _tenants_page(request, "The console was started without the admin API (--admin-api).", shown, 400)
    try:
        tid, made = await data.create_tenant(admin, *_as_user(request), name, user, password)
    except PartlyCreated as e:
        return await _tenants_page(request, f"Partly done: {e.message}", shown, 400 if e.status else 502)
    except AdminApiError as e:
        return await _tenants_page(request, f"Not created: {e.message}", shown, 400 if e.status else 502)
    except KeyError:
        return await _tenants_page(request, "Not created: the admin API's answer had no tenant id.", shown, 502)
    flash(request, "ok", f"Tenant {tid} ({name}) created, with its administrator {made}.")
    raise redirect(request, "operator_tenants")


@operator_only
async def regions_page(request: web.Request) -> web.Response:
    session = session_of(request)
    view, infos, md = await data.cluster_view(session.client, None, *_as_user(request))
    racks = {n: r for n, (_h, _p, r) in md.brokers.items()}
    replicas_of = {b.node: b.replicas for b in view.brokers}
    pager, shown = paginate(request, [i.topic.name for i in infos])
    wanted = set(shown)
    placed = data.placements([i for i in infos if i.topic.name in wanted], racks)
    dcs = data.datacenters(md, replicas_of)
    observers = [(t.name, p, obs, promoted) for t in placed for p, obs, promoted in t.observers]
    return render(request, "operator_regions.html", placed=placed, dcs=dcs, pager=pager, observers=observers,
                  promoted=sum(1 for o in observers if o[3]), sub="regions")


@operator_only
async def balancer_page(request: web.Request) -> web.Response:
    status, error = await data.balancer_status(_admin(request), *_as_user(request))
    moving: list[Any] = []
    moving_error = None
    try:
        moving = await data.reassignments(session_of(request).client)
    except KafkaError as e:
        moving_error = why(e)
    return render(request, "operator_balancer.html", balancer=status, error=error, moving=moving,
                  moving_error=moving_error, sub="balancer")


@operator_only
async def balancer_action(request: web.Request) -> web.StreamResponse:
    action = request.match_info["action"]
    admin = _admin(request)
    if action not in ("pause", "resume") or admin is None:
        return render(request, "notfound.html", status=404, what="action")
    try:
        await admin.call(*_as_user(request), "POST", f"/v1/cluster/balancer/{action}")
        flash(request, "ok", f"Balancer {'paused' if action == 'pause' else 'resumed'}.")
    except AdminApiError as e:
        flash(request, "error", f"Not done: {e.status or 'no answer'}: {e.message}")
    raise redirect(request, "operator_balancer")


def add_routes(r: web.UrlDispatcher) -> None:
    r.add_get("/operator", brokers_page, name="operator")
    res = r.add_resource("/operator/tenants", name="operator_tenants")
    res.add_route("GET", tenants_page)
    res.add_route("POST", create_tenant)
    r.add_get("/operator/regions", regions_page, name="operator_regions")
    r.add_get("/operator/balancer", balancer_page, name="operator_balancer")
    r.add_post("/operator/balancer/{action}", balancer_action, name="operator_balancer_action")


def setup(app: web.Application, admin_api: AdminApi | None) -> None:
    app[ADMIN_API] = admin_api
    app[ISR_WATCH] = IsrWatch()
    add_routes(app.router)

    async def close(_app: web.Application) -> None:
        if admin_api is not None:
            await admin_api.close()

    app.on_cleanup.append(close)
