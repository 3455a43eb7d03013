"""What the console's modules share: the application's keys, URLs of routes, rendering, forms."""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Awaitable, Callable

import jinja2
from aiohttp import web

from shoal.client import KafkaError
from shoal.console.lag import ClusterSampler, SessionSampler
from shoal.console.sessions import Session, Sessions

SESSIONS: web.AppKey[Sessions] = web.AppKey("sessions", Sessions)
TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("templates", jinja2.Environment)
SESSION: web.RequestKey[Session] = web.RequestKey("session", Session)  # the request's live session
FORM: web.RequestKey[dict[str, str]] = web.RequestKey("form", dict)  # a POST's fields, read once
LAG: web.AppKey[ClusterSampler | SessionSampler] = web.AppKey("lag", object)  # the groups' lag histories (the plot)
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


def why(e: Exception) -> str:
    """A refusal as one line for a page: a Kafka error's code and message (a policy's reason), or
    the message of a form's bad field."""
    if isinstance(e, KafkaError):
        return f"{e.code_name}: {e.message}" if e.message else e.code_name
    return str(e)


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


PAGE_SIZE = 100  # rows of a list page; ?per_page= up to MAX_PAGE_SIZE
MAX_PAGE_SIZE = 1000


@dataclass
class Pager:
    """Which rows of a long list a page shows: those whose name holds ``q`` (any case), page
    ``page`` of ``pages``, ``per_page`` a page."""

    total: int  # rows before the filter
    matched: int
    page: int
    pages: int
    per_page: int
    q: str

    @property
    def first(self) -> int:
        return (self.page - 1) * self.per_page

    def query(self, page: int) -> dict[str, Any]:
        return {"q": self.q, "page": page, "per_page": self.per_page if self.per_page != PAGE_SIZE else None}


def paginate(request: web.Request, names: list[str]) -> tuple[Pager, list[str]]:
    """The page of ``names`` (sorted) the request's ``q``, ``page`` and ``per_page`` ask for."""
    q = request.query.get("q", "").strip()
    matched = [n for n in names if q.lower() in n.lower()] if q else names

    def number(key: str, default: int) -> int:
        try:
            return int(request.query.get(key, default))
        except ValueError:
            return default

    per_page = max(1, min(MAX_PAGE_SIZE, number("per_page", PAGE_SIZE)))
    pages = max(1, math.ceil(len(matched) / per_page))
    page = max(1, min(pages, number("page", 1)))
    pager = Pager(len(names), len(matched), page, pages, per_page, q)
    return pager, matched[pager.first:pager.first + per_page]
