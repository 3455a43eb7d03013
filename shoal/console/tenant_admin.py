"""The tenant's pages that Kafka's protocol has no API for: usage and bill, users, namespaces.

A tenant cannot read ``__shoal_usage`` (internal) nor the metering pipeline's Parquet tables, and
its SCRAM users and KIP-37 namespaces are the admin API's. So these pages call the HTTP admin API
as the logged-in user (the console's ``AdminApi``, ``shoal.console.operator.ADMIN_API``), with that
user's rights there: a tenant's administrator may call its own tenant's endpoints, another user of
a tenant none (these pages answer 403), a super user any.

- Mounted on the broker's admin listener: the admin API's handlers in process
  (``operator_data.InProcessAdminApi``), the caller decided by ``HttpAuth.authorize`` for the
  session's user (authenticated by its SASL/SCRAM login) whatever ``shoal.admin.authentication``
  says.
- ``shoal console --admin-api URL``: over HTTP with the user's credentials (HTTP Basic,
  ``HttpAdminApi``), so the admin API decides, which it can only with
  ``shoal.admin.authentication=basic``: an admin API that lets anyone in (``none``: it takes every
  caller for the operator) is refused for these pages, checked once a minute with credentials
  that must be refused (no user name: answered 401 before any password check or login backoff).

The tenant's id (the path's ``{id}``) is the cluster id the broker tells the user's own Kafka
client (Metadata), so a page can only ever ask for the user's own tenant; the admin API checks it
once more.
"""

from __future__ import annotations

import secrets
import time
from typing import Any
from urllib.parse import quote

from aiohttp import web

from shoal.console.common import flash, form, redirect, render, session_of
from shoal.console.operator import ADMIN_API
from shoal.console.operator_data import AdminApiError, InProcessAdminApi

MIN_PASSWORD = 8
MAX_DESCRIBED = 200  # namespaces described on a page (their topics and configs)
PROBE_S = 60.0  # how long an HTTP admin API's "it authenticates" is believed
OPEN_API: web.AppKey[list[Any]] = web.AppKey("admin_api_checked", list)  # [checked at, authenticates]


async def _authenticates(request: web.Request, api: Any) -> bool:
    """Does the admin API check credentials? (In process: the user is authorized by name.)"""
    if isinstance(api, InProcessAdminApi):
        return True
    checked = request.app[OPEN_API]
    if checked and time.monotonic() - checked[0] < PROBE_S:
        return bool(checked[1])
    try:
        # no user name: refused as unauthenticated before any password check or login backoff
        await api.call("", secrets.token_urlsafe(24), "GET", "/v1/tenants")
        ok = False  # a wrong password let in: no authentication
    except AdminApiError as e:
        if e.status == 0:
            raise
        ok = e.status in (401, 403)
    checked[:] = [time.monotonic(), ok]
    return ok


async def admin_call(request: web.Request, method: str, path: str, body: Any = None) -> Any:
    """The admin API's JSON answer to ``method path`` as the session's user; AdminApiError."""
    api = request.app[ADMIN_API]
    if api is None:
        raise AdminApiError(0, "this console reaches no admin API (shoal console --admin-api URL)")
    if not await _authenticates(request, api):
        raise AdminApiError(0, "the admin API lets anyone in (shoal.admin.authentication=none), so it cannot "
                              "tell what this user may see: these pages need shoal.admin.authentication=basic")
    session = session_of(request)
    return await api.call(session.user, session.password, method, path, body)


async def tenant_id(request: web.Request) -> str | None:
    """The user's tenant (the cluster id its Kafka client sees); None for the physical cluster."""
    session = session_of(request)
    return None if session.operator else await session.tenant()


async def administers(request: web.Request) -> bool:
    """Whether the session's user administers its tenant: the nav shows it the usage, users and
    namespaces pages, which the admin API answers for a tenant's administrators only (403 for its
    other users; the pages keep refusing them by URL). Asked once a session, on its first page:
    the admin API's answer to ``GET /v1/tenants/{id}`` as the user, whichever ``AdminApi`` the
    console has (in process: ``HttpAuth.authorize`` reads the metadata's tenant administrators;
    over HTTP: the admin API checks the user's password and its rights), so the nav says what the
    pages will do. An answer the admin API could not give (unreachable, none configured, or one
    that lets anyone in) hides the links too, and is asked again after ``PROBE_S``. The operator
    sees the tenants' pages on its own Tenants page, not these."""
    session = session_of(request)
    if session.operator:
        return False
    now = time.monotonic()
    if session.tenant_admin is not None and now < session.tenant_admin_until:
        return session.tenant_admin
    tid = await tenant_id(request)
    answer, until = False, float("inf")
    if tid is not None:
        try:
            await admin_call(request, "GET", f"/v1/tenants/{tid}")
            answer = True
        except AdminApiError as e:
            if e.status not in (401, 403, 404):
                until = now + PROBE_S
    session.tenant_admin, session.tenant_admin_until = answer, until
    return answer


async def _tenant_or_page(request: web.Request, template: str, **context: Any) -> str | web.Response:
    tid = await tenant_id(request)
    if tid is None:
        return render(request, template, status=404, tenant=None, refused="A tenant's page: the physical cluster "
                      "has no tenant (the operator sees tenants on the Tenants page).", **context)
    return tid


def _refused(request: web.Request, template: str, e: AdminApiError, **context: Any) -> web.Response:
    status = e.status if e.status in (403, 404) else 502
    text = ("Only the tenant's administrators may see this page." if e.status == 403 else e.message)
    return render(request, template, status=status, refused=text, **context)


# -- usage and bill -------------------------------------------------------------------------------

async def usage_page(request: web.Request) -> web.Response:
    tid = await _tenant_or_page(request, "usage.html", usage=None)
    if isinstance(tid, web.Response):
        return tid
    try:
        usage = await admin_call(request, "GET", f"/v1/tenants/{tid}/usage")
    except AdminApiError as e:
        return _refused(request, "usage.html", e, tenant=tid, usage=None)
    return render(request, "usage.html", tenant=tid, usage=usage, refused=None, refresh=30)


# -- users ----------------------------------------------------------------------------------------

async def _users(request: web.Request, tid: str) -> web.Response:
    try:
        t = await admin_call(request, "GET", f"/v1/tenants/{tid}")
    except AdminApiError as e:
        return _refused(request, "users.html", e, tenant=tid, users=[], admins=[])
    return render(request, "users.html", tenant=tid, users=t.get("users", []), admins=t.get("admins", []),
                  refused=None)


async def users_page(request: web.Request) -> web.Response:
    tid = await _tenant_or_page(request, "users.html", users=[], admins=[])
    return tid if isinstance(tid, web.Response) else await _users(request, tid)


async def user_create(request: web.Request) -> web.StreamResponse:
    tid = await _tenant_or_page(request, "users.html", users=[], admins=[])
    if isinstance(tid, web.Response):
        return tid
    fields = await form(request)
    name, password = fields.get("user", "").strip(), fields.get("password", "")
    if not name or len(password) < MIN_PASSWORD or password != fields.get("password2", ""):
        flash(request, "error", "User not created: give a name, and a password of at least "
              f"{MIN_PASSWORD} characters typed twice the same.")
        raise redirect(request, "users")
    try:
        made = await admin_call(request, "POST", f"/v1/tenants/{tid}/users",
                                {"user": name, "password": password, "admin": fields.get("admin") == "on"})
    except AdminApiError as e:
        if e.status == 403:
            return _refused(request, "users.html", e, tenant=tid, users=[], admins=[])
        flash(request, "error", f"User not created: {e.message}")
    else:
        flash(request, "ok", f"User {made['user']} created{' (an administrator)' if made.get('admin') else ''}: "
              "it logs in under that name.")
    raise redirect(request, "users")


async def user_delete(request: web.Request) -> web.StreamResponse:
    tid = await _tenant_or_page(request, "users.html", users=[], admins=[])
    if isinstance(tid, web.Response):
        return tid
    name = (await form(request)).get("user", "")
    if name == session_of(request).user:
        flash(request, "error", "You cannot delete the user you are logged in as.")
        raise redirect(request, "users")
    try:
        await admin_call(request, "DELETE", f"/v1/tenants/{tid}/users/{quote(name, safe='')}")
    except AdminApiError as e:
        if e.status == 403:
            return _refused(request, "users.html", e, tenant=tid, users=[], admins=[])
        flash(request, "error", f"User not deleted: {e.message}")
    else:
        flash(request, "ok", f"User {name} deleted (its connections close at their next login).")
    raise redirect(request, "users")


# -- namespaces -----------------------------------------------------------------------------------

async def namespaces_page(request: web.Request) -> web.Response:
    tid = await _tenant_or_page(request, "namespaces.html", namespaces=[])
    if isinstance(tid, web.Response):
        return tid
    try:
        listed = await admin_call(request, "GET", f"/v1/tenants/{tid}/namespaces?recursive=true")
    except AdminApiError as e:
        return _refused(request, "namespaces.html", e, tenant=tid, namespaces=[])
    rows = []
    for name in listed.get("namespaces", [])[:MAX_DESCRIBED]:
        try:
            rows.append(await admin_call(request, "GET", f"/v1/tenants/{tid}/namespaces/{quote(name, safe='')}"))
        except AdminApiError:  # (deleted meanwhile)
            continue
    return render(request, "namespaces.html", tenant=tid, namespaces=rows, refused=None,
                  more=max(0, len(listed.get("namespaces", [])) - MAX_DESCRIBED))


async def namespace_create(request: web.Request) -> web.StreamResponse:
    tid = await _tenant_or_page(request, "namespaces.html", namespaces=[])
    if isinstance(tid, web.Response):
        return tid
    name = (await form(request)).get("namespace", "").strip()
    try:
        await admin_call(request, "POST", f"/v1/tenants/{tid}/namespaces", {"name": name})
    except AdminApiError as e:
        if e.status == 403:
            return _refused(request, "namespaces.html", e, tenant=tid, namespaces=[])
        flash(request, "error", f"Namespace not created: {e.message}")
    else:
        flash(request, "ok", f"Namespace {name} created.")
    raise redirect(request, "namespaces")


def add_routes(app: web.Application) -> None:
    app[OPEN_API] = []
    r = app.router
    r.add_get("/usage", usage_page, name="usage")
    res = r.add_resource("/users", name="users")
    res.add_route("GET", users_page)
    res.add_route("POST", user_create)
    r.add_post("/users/delete", user_delete, name="user_delete")
    res = r.add_resource("/namespaces", name="namespaces")
    res.add_route("GET", namespaces_page)
    res.add_route("POST", namespace_create)
