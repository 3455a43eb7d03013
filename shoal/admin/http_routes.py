"""The HTTP admin API's endpoints as declarations, and the OpenAPI document generated from them.

An endpoint is a coroutine method of a route class (``AdminHttpServer``, ``TenancyRoutes``,
``ClusterRoutes``) decorated with ``@endpoint(METHOD, PATH, op=..., summary=...)``. Its signature
says what it takes, its return annotation what it answers (a pydantic model):

- ``body: SomeModel``: the JSON body, validated by the model (strict: ``"yes"`` is no boolean);
- ``query: SomeModel``: the query string (the last value of a repeated key);
- ``caller``: the tenant whose administrator calls (``HttpAuth.check``), None for the operator;
- any other parameter: the path parameter of that name (``{tenant_id}``), validated by its
  annotation (``int``: a number), documented by it (``TenantId``: the id's pattern).

``AdminHttpServer`` registers each endpoint with aiohttp's router and calls it through
``invoke``; ``openapi_document`` builds the OpenAPI 3.0 document from the same declarations and
pydantic's JSON schemas of the models. An invalid body, query or path parameter is a 400
``{"error": "bad_request", "message": "'field' ..."}``, the API's error shape (``Error``).
"""

from __future__ import annotations

import inspect
import json
import typing
from dataclasses import dataclass
from functools import cache
from http import HTTPStatus
from typing import Annotated, Any, Awaitable, Callable, Iterable, Literal, Mapping, TypeVar
from urllib.parse import parse_qs, unquote

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, WithJsonSchema
from pydantic.json_schema import models_json_schema

from shoal.admin.http_errors import HttpError


class Model(BaseModel):
    """A request or response body: strict types; unknown fields of a request are ignored (as
    Kafka's JSON configs ignore unknown keys) unless the model forbids them."""

    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True)


class Error(Model):
    """Every error answer: a code (``bad_request``, ``not_found``, ...) and a sentence."""

    error: str
    message: str


TenantId = Annotated[str, WithJsonSchema({"type": "string", "pattern": "^lkc-[0-9a-z]{6}$"})]
Handler = Callable[..., Awaitable[Model]]
H = TypeVar("H", bound=Handler)
_SPECIAL = ("self", "body", "query", "caller")


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # aiohttp's and OpenAPI's template: /v1/tenants/{tenant_id}
    op: str  # the OpenAPI operationId
    summary: str
    status: int  # of a success
    errors: tuple[int, ...]  # the error statuses it documents
    fn: Handler

    def match(self, segs: list[str]) -> dict[str, str] | None:
        """The path parameters if ``segs`` (the decoded path segments) is this endpoint's path."""
        template = self.path.strip("/").split("/")
        if len(template) != len(segs):
            return None
        params = {}
        for t, s in zip(template, segs):
            if t.startswith("{"):
                if not s:
                    return None
                params[t[1:-1]] = s
            elif t != s:
                return None
        return params


def endpoint(method: str, path: str, *, op: str, summary: str, status: int = 200,
             errors: Iterable[int] = ()) -> Callable[[H], H]:
    def mark(fn: H) -> H:
        fn.__endpoint__ = Endpoint(method, path, op, summary, status, tuple(errors), fn)  # type: ignore[attr-defined]
        return fn
    return mark


def endpoints(*owners: object) -> list[tuple[Endpoint, object]]:
    """Each owner's endpoints (in the order its class declares them) with the owner to call them on."""
    out = []
    for owner in owners:
        for value in vars(type(owner)).values():
            ep = getattr(value, "__endpoint__", None)
            if isinstance(ep, Endpoint):
                sig = signature(ep.fn)
                names = {seg[1:-1] for seg in ep.path.split("/") if seg.startswith("{")}
                assert names == set(sig.params), f"{ep.op}: path {ep.path} and parameters {sorted(sig.params)}"
                out.append((ep, owner))
    return out


@dataclass(frozen=True)
class Signature:
    body: type[Model] | None
    query: type[Model] | None
    caller: bool
    params: dict[str, Any]  # path parameter -> its annotation
    response: type[Model]


@cache
def signature(fn: Handler) -> Signature:
    hints = typing.get_type_hints(fn, include_extras=True)
    names = [n for n in inspect.signature(fn).parameters if n != "self"]
    return Signature(hints.get("body"), hints.get("query"), "caller" in names,
                     {n: hints.get(n, str) for n in names if n not in _SPECIAL}, hints["return"])


@cache
def _adapter(annotation: Any) -> TypeAdapter[Any]:
    return TypeAdapter(annotation)


def find(eps: list[tuple[Endpoint, object]], method: str, path: str) -> tuple[Endpoint, object, dict[str, str]]:
    """The endpoint for ``method path`` (as aiohttp's router finds it): HttpError 404 for no such
    path, 405 naming the allowed methods."""
    segs = [unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []
    allowed = []
    for ep, owner in eps:
        params = ep.match(segs)
        if params is not None:
            if ep.method == method:
                return ep, owner, params
            allowed.append(ep.method)
    if allowed:
        raise method_not_allowed(method, allowed)
    raise HttpError(404, "not_found", f"no such path: {path}")


def method_not_allowed(method: str, allowed: Iterable[str]) -> HttpError:
    return HttpError(405, "method_not_allowed", f"{method} not allowed here (allowed: {', '.join(sorted(allowed))})")


async def invoke(ep: Endpoint, owner: object, params: Mapping[str, str], raw: bytes, query: str,
                 caller: str | None) -> tuple[int, Any]:
    """Call ``ep`` on ``owner`` with the request's parts validated: (status, the JSON answer)."""
    sig = signature(ep.fn)
    kwargs: dict[str, Any] = {name: _valid(_adapter(t), params[name], name) for name, t in sig.params.items()}
    if sig.body is not None:
        kwargs["body"] = _valid(sig.body, json_object(raw))
    if sig.query is not None:
        kwargs["query"] = _valid(sig.query, {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()})
    if sig.caller:
        kwargs["caller"] = caller
    around = getattr(owner, "around", None)  # the owner's checks and error translation around each call
    call = ep.fn(owner, **kwargs)
    result = await (around(call, kwargs) if around is not None else call)
    return ep.status, result.model_dump(mode="json", by_alias=True, exclude_unset=True)


def json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw.decode("utf-8")) if raw.strip() else None
    except (UnicodeDecodeError, ValueError):
        raise HttpError(400, "bad_request", "body is not valid JSON") from None
    if not isinstance(body, dict):
        raise HttpError(400, "bad_request", "body must be a JSON object")
    return body


def _valid(model: type[Model] | TypeAdapter[Any], data: Any, name: str = "") -> Any:
    try:
        if isinstance(model, TypeAdapter):
            return model.validate_python(data, strict=False)  # a path parameter: "7" is a number
        return model.model_validate(data)
    except ValidationError as e:
        raise HttpError(400, "bad_request", describe(e, name)) from None


def describe(e: ValidationError, name: str = "") -> str:
    """A pydantic error as one sentence naming the field: ``'admin': input should be a valid
    boolean``, a validator's own message as it is (``'user' must be a non-empty string``)."""
    errors = e.errors(include_url=False)
    err = errors[0]
    where = ".".join(str(x) for x in err["loc"]) or name
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if err["type"] == "extra_forbidden":
        return f"unknown field: {where}{more}"
    if err["type"] == "missing":
        return f"'{where}' is required{more}"
    if err["type"] == "value_error":
        return f"'{where}' {err['ctx']['error']}{more}"
    msg = err["msg"]
    return f"'{where}': {msg[:1].lower()}{msg[1:]}{more}"


# -- OpenAPI ------------------------------------------------------------------------------------


def openapi_document(eps: Iterable[Endpoint], info: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI 3.0 document of ``eps``: operations from the declarations, schemas from the
    models (pydantic's JSON Schema, its ``anyOf [X, null]`` written as 3.0's ``nullable``)."""
    eps = list(eps)
    sigs = [signature(ep.fn) for ep in eps]
    wanted: set[tuple[type[Model], Literal["validation", "serialization"]]] = {(Error, "serialization")}
    for s in sigs:
        wanted.add((s.response, "serialization"))
        if s.body is not None:
            wanted.add((s.body, "validation"))
    refs, defs = models_json_schema(sorted(wanted, key=lambda m: (m[0].__name__, m[1])),
                                    ref_template="#/components/schemas/{model}")

    def content(model: type[Model], mode: str = "serialization") -> dict[str, Any]:
        return {"application/json": {"schema": refs[(model, mode)]}}  # type: ignore[index]

    paths: dict[str, dict[str, Any]] = {}
    for ep, s in zip(eps, sigs):
        params = [{"name": n, "in": "path", "required": True, "schema": _adapter(t).json_schema()}
                  for n, t in s.params.items()]
        if s.query is not None:
            params += [{"name": n, "in": "query", "schema": p}
                       for n, p in s.query.model_json_schema()["properties"].items()]
        op: dict[str, Any] = {"operationId": ep.op, "summary": ep.summary}
        if params:
            op["parameters"] = params
        if s.body is not None:
            op["requestBody"] = {"required": True, "content": content(s.body, "validation")}
        op["responses"] = {str(ep.status): {"description": HTTPStatus(ep.status).phrase, "content": content(s.response)},
                           **{str(c): {"description": HTTPStatus(c).phrase, "content": content(Error)}
                              for c in sorted(ep.errors)}}
        paths.setdefault(ep.path, {})[ep.method.lower()] = op
    return _openapi30({"openapi": "3.0.3", "info": info, "paths": paths,
                       "components": {"schemas": defs.get("$defs", {})}})


def _openapi30(node: Any) -> Any:
    """JSON Schema 2020-12 (pydantic's) as OpenAPI 3.0's dialect: ``nullable``, no ``const``."""
    if isinstance(node, list):
        return [_openapi30(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: _openapi30(v) for k, v in node.items()}
    options = node.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        rest = [o for o in options if o != {"type": "null"}]
        del node["anyOf"]
        node.update(rest[0] if len(rest) == 1 else {"anyOf": rest})
        node["nullable"] = True
    if "const" in node:
        node["enum"] = [node.pop("const")]
    return node
