"""What the console's modules share: the application's keys, URLs of routes, rendering, forms."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Awaitable, Callable

import jinja2
from aiohttp import web

from shoal.console.sessions import Session, Sessions

SESSIONS: web.AppKey[Sessions] = web.AppKey("sessions", Sessions)
TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("templates", jinja2.Environment)
SESSION: web.RequestKey[Session] = web.RequestKey("session", Session)  # the request's live session
FORM: web.RequestKey[dict[str, str]] = web.RequestKey("form", dict)  # a POST's fields, read once
FORCE_SECURE: web.AppKey[bool] = web.AppKey("force_secure", bool)  # Secure cookies on plain HTTP too

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def package_dir(name: str) -> Path:
    """shoal/console/<name> on disk (templates, static: package data of the wheel)."""
    return Path(str(resources.files("shoal.console").joinpath(name)))


def url(request: web.Request, name: str, query: dict[str, Any] | None = None, **parts: Any) -> str:
    """The path of route ``name`` under the console's mount point (``/ui/...``)."""
    u = request.app.router[name].url_for(**{k: str(v) for k, v in parts.items()})
    if query:
        u = u.with_query({k: str(v) for k, v in query.items() if v is not None and v != ""})
    return str(u)


def base_path(request: web.Request) -> str:
    return url(request, "index")


def session_of(request: web.Request) -> Session:
    return request[SESSION]


def flash(request: web.Request, kind: str, text: str) -> None:
    """A message shown on the next page this session sees (``kind``: ok or error)."""
    session_of(request).flashes.append((kind, text))


def render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    session: Session | None = request.get(SESSION)
    flashes: list[tuple[str, str]] = []
    if session is not None:
        flashes, session.flashes = session.flashes, []
    env = request.app[TEMPLATES]
    body = env.get_template(template).render(
        request=request, session=session, flashes=flashes, csrf=session.csrf if session else "",
        url=lambda name, query=None, **parts: url(request, name, query, **parts), **context)
    return web.Response(text=body, status=status, content_type="text/html", charset="utf-8")


def redirect(request: web.Request, name: str, query: dict[str, Any] | None = None, **parts: Any) -> web.HTTPSeeOther:
    return web.HTTPSeeOther(url(request, name, query, **parts))


async def form(request: web.Request) -> dict[str, str]:
    """A POST's url-encoded fields (files refused); the CSRF middleware has already read them."""
    got = request.get(FORM)
    if got is None:
        data = await request.post()
        got = {k: v for k, v in data.items() if isinstance(v, str)}
        request[FORM] = got
    return got
