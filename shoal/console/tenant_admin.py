"""The tenant's pages that Kafka's protocol has no API for: usage and bill, users, namespaces.

A tenant cannot read ``__shoal_usage`` (internal) nor the metering pipeline's Parquet tables, and
its SCRAM users and KIP-37 namespaces are the admin API's. So these pages call the HTTP admin API
as the logged-in user, with that user's rights there: a tenant's administrator may call its own
tenant's endpoints, another user of a tenant none (403), a super user any.

- Mounted on the broker's admin listener (``AdminHttpServer.mount`` marks the console with
  ``MOUNTED_ON``): the admin API's handlers in process (``AdminHttpServer.route``), the caller
  decided by ``HttpAuth.authorize`` for the session's user (authenticated by its SASL/SCRAM login)
  whatever ``shoal.admin.authentication`` says.
- Otherwise (``shoal console``): not available yet on this console.

The tenant's id (the path's ``{id}``) is the cluster id the broker tells the user's own Kafka
client (Metadata), so a page can only ever ask for the user's own tenant; the admin API checks it
once more.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web

from shoal.console.common import flash, form, redirect, render, session_of

MIN_PASSWORD = 8
MAX_DESCRIBED = 200  # namespaces described on a page (their topics and configs)


class AdminRefused(Exception):
    """The admin API refused a call (its status, 0: not reachable) with one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def admin_call(request: web.Request, method: str, path: str, body: Any = None, query: str = "") -> Any:
    """The admin API's JSON answer to ``method path`` as the session's user; AdminRefused."""
    from shoal.admin.http import MOUNTED_ON
    from shoal.admin.http_auth import AuthError
    from shoal.admin.http_errors import HttpError

    server: Any = request.app.get(MOUNTED_ON)
    if server is None:
        raise AdminRefused(0, "this console reaches no admin API (it is served by the broker's admin listener)")
    segs = [unquote(s) for s in path.strip("/").split("/")]
    try:
        caller = server.auth.authorize(session_of(request).user, method, segs)
        _status, answer = await server.route(method, path, json.dumps(body).encode() if body is not None else b"",
                                             query, caller)
    except (AuthError, HttpError) as e:
        raise AdminRefused(e.status, e.message) from None
    return answer


async def tenant_id(request: web.Request) -> str | None:
    """The user's tenant (the cluster id its Kafka client sees); None for the physical cluster."""
    session = session_of(request)
    if session.operator:
        return None
    md = await session.client.metadata([])
    return md.cluster_id if md.cluster_id and md.cluster_id.startswith("lkc-") else None


async def _tenant_or_page(request: web.Request, template: str, **context: Any) -> str | web.Response:
    tid = await tenant_id(request)
    if tid is None:
        return render(request, template, status=404, tenant=None, refused="A tenant's page: the physical cluster "
                      "has no tenant (the operator sees tenants on the Tenants page).", **context)
    return tid


def _refused(request: web.Request, template: str, e: AdminRefused, **context: Any) -> web.Response:
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
    except AdminRefused as e:
        return _refused(request, "usage.html", e, tenant=tid, usage=None)
    return render(request, "usage.html", tenant=tid, usage=usage, refused=None, refresh=30)


# -- users ----------------------------------------------------------------------------------------

async def _users(request: web.Request, tid: str) -> web.Response:
    try:
        t = await admin_call(request, "GET", f"/v1/tenants/{tid}")
    except AdminRefused as e:
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
    except AdminRefused as e:
        if e.status == 403:
            return _refused(request, "users.html", e, tenant=tid, users=[], admins=[])
        flash(request, "error", f"User not created: {e.message}")
    else:
        flash(request, "ok", f"User {made['user']} created: it logs in as {made['user']}"
              + (" (an administrator)." if made.get("admin") else "."))
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
    except AdminRefused as e:
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
        listed = await admin_call(request, "GET", f"/v1/tenants/{tid}/namespaces", query="recursive=true")
    except AdminRefused as e:
        return _refused(request, "namespaces.html", e, tenant=tid, namespaces=[])
    rows = []
    for name in listed.get("namespaces", [])[:MAX_DESCRIBED]:
        try:
            rows.append(await admin_call(request, "GET", f"/v1/tenants/{tid}/namespaces/{quote(name, safe='')}"))
        except AdminRefused:  # (deleted meanwhile)
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
    except AdminRefused as e:
        if e.status == 403:
            return _refused(request, "namespaces.html", e, tenant=tid, namespaces=[])
        flash(request, "error", f"Namespace not created: {e.message}")
    else:
        flash(request, "ok", f"Namespace {name} created.")
    raise redirect(request, "namespaces")


def add_routes(r: web.UrlDispatcher) -> None:
    r.add_get("/usage", usage_page, name="usage")
    res = r.add_resource("/users", name="users")
    res.add_route("GET", users_page)
    res.add_route("POST", user_create)
    r.add_post("/users/delete", user_delete, name="user_delete")
    res = r.add_resource("/namespaces", name="namespaces")
    res.add_route("GET", namespaces_page)
    res.add_route("POST", namespace_create)
