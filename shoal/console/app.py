"""The console's aiohttp application: routes, sessions, CSRF, security headers, rendering.

Every response carries a Content-Security-Policy allowing only the console's own scripts, styles
and images (``default-src 'self'``, no inline script or style), ``X-Frame-Options: DENY``,
``X-Content-Type-Options: nosniff``, ``Referrer-Policy: same-origin``, ``Server-Timing`` (the
time the console took, its Kafka requests included) and, for pages, ``Cache-Control: no-store``. A request without a live session is redirected to the login page
(the static files and the login page excepted). A state-changing request (any method but GET
and HEAD) must carry the session's CSRF token (form field ``csrf`` or header ``X-CSRF-Token``)
and, when the browser sends an ``Origin``, come from the console's own origin: else 403. The login
form is protected the same way by a double-submit token (a cookie and a form field).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from typing import Any, Callable
from urllib.parse import urlsplit

import jinja2
from aiohttp import web

from shoal.asyncutil import cancel_and_wait
from shoal.client import ConnectionLost, KafkaError
from shoal.console import tenant_admin
from shoal.console.common import (FORCE_SECURE, LAG, SESSION, SESSIONS, TEMPLATES, Handler, base_path, form, package_dir,
                                  redirect, render, session_of, url, why)
from shoal.console.lag import ClusterSampler, SessionSampler
from shoal.console.sessions import BrokerUnavailable, LoginFailed, Sessions

log = logging.getLogger("shoal.console")

SESSION_COOKIE = "shoal_console"
LOGIN_COOKIE = "shoal_console_login"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PUBLIC_ROUTES = frozenset({"login", "static"})
MAX_FIELD = 1 << 20  # a form field (a test record's value) at most 1 MiB

def _cookie(response: web.StreamResponse, request: web.Request, name: str, value: str) -> None:
    response.set_cookie(name, value, path=base_path(request), httponly=True, samesite="Strict",
                        secure=request.secure or request.app[FORCE_SECURE])


def _same_origin(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    if origin is None:  # not sent by every browser on a same-origin form post
        return True
    u = urlsplit(origin)
    return u.netloc == request.host and u.scheme == request.scheme


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    try:
        response = await handler(request)
    except web.HTTPException as e:
        response = e
    except Exception:
        log.exception("console: %s %s failed", request.method, request.path)
        response = web.Response(status=500, text="500: internal error (see the broker's log)\n")
    h = response.headers
    h["Content-Security-Policy"] = CSP
    h["X-Frame-Options"] = "DENY"
    h["X-Content-Type-Options"] = "nosniff"
    h["Referrer-Policy"] = "same-origin"
    h["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.1f}"  # the page's time at the server
    route = request.match_info.route.name
    if route != "static":
        h["Cache-Control"] = "no-store"
    if isinstance(response, web.HTTPException):
        if response.status >= 400 and not response.text:
            response.text = f"{response.status}: {response.reason}\n"
        raise response
    return response


@web.middleware
async def sessions_and_csrf(request: web.Request, handler: Handler) -> web.StreamResponse:
    route = request.match_info.route.name
    if request.method not in SAFE_METHODS and not _same_origin(request):
        raise web.HTTPForbidden(text="403: cross-origin request refused\n")
    if route in PUBLIC_ROUTES:
        return await handler(request)
    session = await request.app[SESSIONS].get(request.cookies.get(SESSION_COOKIE))
    if session is None:
        if request.method in SAFE_METHODS:
            raise web.HTTPSeeOther(url(request, "login", {"next": request.path_qs}))
        raise web.HTTPSeeOther(url(request, "login"))
    request[SESSION] = session
    if request.method not in SAFE_METHODS:
        token = request.headers.get("X-CSRF-Token")
        if token is None and request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            token = (await form(request)).get("csrf")
        if not session.csrf_ok(token):
            raise web.HTTPForbidden(text="403: missing or wrong CSRF token\n")
    try:
        async with session.lock:
            await tenant_admin.administers(request)  # the nav's links: asked once a session
            return await handler(request)
    except ConnectionLost:
        # The session's Kafka client lost its broker: log in again (a new client).
        await request.app[SESSIONS].logout(session)
        raise web.HTTPSeeOther(url(request, "login", {"lost": "1"}))
    except KafkaError as e:  # a request of the page refused or timed out: say so, not a 500
        log.info("console: %s %s as %s: %s", request.method, request.path, session.user, e)
        return render(request, "error.html", status=502, message=why(e))


# -- login ----------------------------------------------------------------------------------------

def _next_target(request: web.Request, value: str | None) -> str:
    """Where to go after logging in: a path under the console, never another site."""
    base = base_path(request)
    if value and value.startswith(base) and not value.startswith("//") and "\\" not in value:
        return value
    return base


async def login_form(request: web.Request, error: str | None = None, status: int = 200,
                     user: str = "") -> web.Response:
    token = secrets.token_urlsafe(32)
    notice = "The connection to the broker was lost: log in again." if request.query.get("lost") else None
    response = render(request, "login.html", status=status, login_token=token, error=error, notice=notice,
                      user=user, next=_next_target(request, request.query.get("next")))
    _cookie(response, request, LOGIN_COOKIE, token)
    return response


async def login(request: web.Request) -> web.StreamResponse:
    fields = await form(request)
    cookie = request.cookies.get(LOGIN_COOKIE, "")
    if not cookie or not hmac.compare_digest(cookie.encode(), fields.get("csrf", "").encode()):
        raise web.HTTPForbidden(text="403: missing or wrong CSRF token\n")
    user, password = fields.get("user", "").strip(), fields.get("password", "")
    if not user or not password:
        return await login_form(request, "Enter a user name and a password.", 400, user)
    peer = f"{request.remote or '?'}:0"
    try:
        session = await request.app[SESSIONS].login(user, password, peer)
    except LoginFailed:
        return await login_form(request, "Login failed: wrong user name or password.", 401, user)
    except BrokerUnavailable as e:
        return await login_form(request, f"The broker could not be reached ({e}): try again.", 503, user)
    response = web.HTTPSeeOther(_next_target(request, fields.get("next")))
    _cookie(response, request, SESSION_COOKIE, session.sid)
    response.del_cookie(LOGIN_COOKIE, path=base_path(request))
    return response


async def logout(request: web.Request) -> web.StreamResponse:
    await request.app[SESSIONS].logout(session_of(request))
    response = web.HTTPSeeOther(url(request, "login"))
    response.del_cookie(SESSION_COOKIE, path=base_path(request))
    return response


async def index(request: web.Request) -> web.StreamResponse:
    raise redirect(request, "operator" if session_of(request).operator else "topics")


# -- the application ------------------------------------------------------------------------------

def _filters(env: jinja2.Environment) -> None:
    from shoal.console import formats

    env.filters.update(bytes=formats.human_bytes, rate=formats.rate, duration=formats.duration_ms,
                       when=formats.when, number=formats.number)


def console_app(bootstrap: str, security: dict[str, str] | None = None, *, mechanism: str = "SCRAM-SHA-512",
                is_operator: Callable[[str], bool] = lambda user: False, backoff: Any = None,
                force_secure_cookies: bool = False, sessions: Sessions | None = None,
                lag_interval_s: float = 30.0, admin_api: Any = None,
                lag_client: Callable[[], Any] | None = None,
                resolve: dict[str, str] | None = None) -> web.Application:
    """The console, to be mounted at ``/ui/`` (``parent.add_subapp("/ui/", console_app(...))``).

    ``bootstrap``: a SASL listener's address (``host:port``) the console's Kafka clients log in
    to as each user; ``security``: Kafka client properties for it (``security.protocol``
    SASL_PLAINTEXT or SASL_SSL, ``ssl.ca.location``...); ``mechanism``: the SCRAM mechanism the
    console logs in with; ``is_operator(user)``: who gets the operator's pages (the super users);
    ``backoff``: the broker's ``shoal.auth.backoff.LoginBackoff`` (shared with its listeners);
    ``force_secure_cookies``: mark cookies Secure even on plain HTTP (TLS terminated in front);
    ``lag_interval_s``: how often the groups' lag is sampled (the plot); ``lag_client``: makes
    the console's own ``AdminClient`` (not connected) that sees the physical cluster, with which
    every group's lag is sampled (``lag.ClusterSampler``); None: only the groups users open, each
    as its user (``lag.SessionSampler``);
    ``admin_api``: where the operator's pages read what only Shoal has (tenants, load, balancer),
    and a tenant's usage, users and namespaces pages theirs (``shoal.console.tenant_admin``):
    ``operator_data.HttpAdminApi(url)`` or ``InProcessAdminApi(admin_server)``; ``resolve``:
    ``{"host:port": "host:port"}``, where the clients connect for an address while TLS checks the
    certificate for its name (the broker's own wildcard SASL_SSL listener: its advertised name,
    reached on 127.0.0.1)."""
    from shoal.console import operator, pages

    app = web.Application(middlewares=[security_headers, sessions_and_csrf], client_max_size=2 * MAX_FIELD)
    app[SESSIONS] = sessions or Sessions(bootstrap, security or {"security.protocol": "SASL_PLAINTEXT"},
                                         mechanism=mechanism, is_operator=is_operator, backoff=backoff,
                                         resolve=resolve)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(package_dir("templates")),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    _filters(env)
    app[TEMPLATES] = env
    app[FORCE_SECURE] = force_secure_cookies
    r = app.router
    r.add_get("/", index, name="index")
    res = r.add_resource("/login", name="login")
    res.add_route("GET", login_form)
    res.add_route("POST", login)
    r.add_post("/logout", logout, name="logout")
    pages.add_routes(r)
    operator.setup(app, admin_api)
    r.add_static("/static/", package_dir("static"), name="static")

    app[LAG] = (ClusterSampler(lag_client, interval_s=lag_interval_s) if lag_client is not None
                else SessionSampler(app[SESSIONS], interval_s=lag_interval_s))
    from shoal.console import tenant_admin

    tenant_admin.add_routes(app)  # usage and bill, users, namespaces: through the admin API
    sampler: list[asyncio.Task[None]] = []

    async def start(_app: web.Application) -> None:
        sampler.append(asyncio.create_task(app[LAG].run()))

    async def close(_app: web.Application) -> None:
        await cancel_and_wait(sampler)
        await app[LAG].close()
        await app[SESSIONS].close()

    app.on_startup.append(start)
    app.on_cleanup.append(close)
    return app
