"""The HTTP admin API: tenants (logical clusters) and their SCRAM users, as JSON over HTTP/1.1.

Started by the broker when ``shoal.admin.listener`` (``http://HOST:PORT``) is set: an aiohttp
application (``AdminHttpServer.app``) served on the broker's own event loop (``web.AppRunner`` and
``web.TCPSite``), HTTP/1.1 keep-alive; each endpoint is a declared route with pydantic models for
its body and answer (``shoal.admin.http_routes``), from which ``/openapi.json`` is generated.
Another aiohttp application can be mounted under a prefix before the start (``mount``: the
console, ``/ui/``). Endpoints:

    GET    /v1/tenants                      list tenants
    POST   /v1/tenants                      {"display_name": ...} -> 201 tenant ("warning" when
                                            another tenant has that display name: not refused)
    GET    /v1/tenants/{id}                 one tenant with its users
    DELETE /v1/tenants/{id}                 delete it, its users and their credentials
    POST   /v1/tenants/{id}/users           {"user", "password", "mechanism"?, "admin"?} -> 201
                                            (no "mechanism": SCRAM-SHA-256 and -512 both)
    DELETE /v1/tenants/{id}/users/{user}    delete a user of that tenant
    .../v1/tenants/{id}/namespaces|topics|configs|policy   KIP-37 namespaces, topic moves, the
                                            tenant's config defaults and create-topic policy
                                            (``shoal.admin.http_namespaces``)
    GET|POST /v1/tenants/{id}/identity_pools  a tenant's OAuth identity pools; POST {"issuer",
                                            "claim_filter"?, "principal_claim"?, "display_name"?}
                                            -> 201 pool (the operator's only)
    GET|DELETE /v1/tenants/{id}/identity_pools/{pool}  one pool
    GET    /v1/identity_pools               every tenant's pools (the operator's only)
    GET    /v1/tenants/{id}/usage           this month's usage and bill (the metering tables, else
                                            live counters), quotas, throttling (``shoal.admin.http_usage``)
    GET    /v1/cluster/load                 per broker its capacity and load totals, per partition
                                            its leader's rates and size (``shoal.cluster.load``;
                                            the operator's only)
    .../v1/cluster/balancer[/plan|/pause|/resume], /v1/cluster/brokers/{id}/remove   the balancer
                                            and broker removal (``shoal.admin.http_cluster``)
    GET    /openapi.json                    the OpenAPI 3.0 description of the above

The password is hashed here (``make_credential``, random salt) and never stored. Errors are
``{"error": code, "message": ...}`` with 400 (bad request), 404 (no such tenant/user/path), 405,
409 (the user exists), 413 (a body over 64 KiB, refused before it is read; headers over 16 KiB);
a request that breaks a handler gets a 500 and one log line, never a dead server.
Users (``shoal.tenancy.principals``): the operator creates a user under the name it gives (mTLS
principals and pre-named users join a tenant that way), but never ``ANONYMOUS``, a super user or a
tenant-shaped ``lkc-xxxxxx_`` name (400); a tenant administrator's users are stored (and log in)
as ``<tenant>_<name>``, so its 409 only ever means its own tenant has that user.
Authentication: ``shoal.admin.authentication=basic`` requires HTTP Basic credentials of a SCRAM
user (super users: everything; a tenant's administrators: their own tenant), see
``shoal.admin.http_auth``; the default ``none`` has none: bind the listener to a trusted address.
"""

from __future__ import annotations

import asyncio
import json
import logging
from http import HTTPStatus
from typing import TYPE_CHECKING, Annotated, Any, Awaitable, Callable, Literal
from urllib.parse import unquote

from aiohttp import web
from pydantic import AfterValidator, Field

from shoal.admin.http_errors import HttpError
from shoal.admin.http_namespaces import TenancyRoutes
from shoal.admin.http_routes import Endpoint, Model, TenantId, endpoint, endpoints, find, invoke
from shoal.admin.http_routes import method_not_allowed, openapi_document
from shoal.cluster.load import ClusterLoad as LoadReports, cluster_load_json
from shoal.config import BrokerConfig
from shoal.metadata import IdentityPool as PoolInfo, MetadataError, MetadataStore, TenantInfo
from shoal.tenancy.principals import operator_user_error, tenant_user

if TYPE_CHECKING:
    from shoal.cluster.balancer.service import BalancerService

log = logging.getLogger("shoal.admin.http")

MAX_HEADER_BYTES = 16 * 1024  # the request line and headers; more: 413
MAX_BODY_BYTES = 64 * 1024
READ_TIMEOUT_S = 10.0  # to receive a request's body
KEEPALIVE_S = 30.0  # an idle keep-alive connection is closed after this
SHUTDOWN_S = 2.0  # on the broker's stop, requests in flight get this long
MAX_NAME_CHARS = 255
# A user gets a credential for each SCRAM mechanism unless the request names one: a listener offers
# both (``sasl.enabled.mechanisms``), and a client configured for the one the user lacks fails as a
# wrong password would (SCRAM never says which part was wrong), as ``kafka-configs.sh`` users learn.
DEFAULT_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_CALLER = web.RequestKey("shoal.admin.caller", object)  # HttpAuth.check's answer: str | None


# -- models -------------------------------------------------------------------------------------


def _printable_name(v: str) -> str:
    if not v.strip():
        raise ValueError("must be a non-empty string")
    if len(v) > MAX_NAME_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in v):
        raise ValueError(f"must be at most {MAX_NAME_CHARS} printable characters")
    return v


Name = Annotated[str, AfterValidator(_printable_name)]


class Tenant(Model):
    tenant_id: str
    display_name: str
    created_ms: int = Field(json_schema_extra={"format": "int64"})
    users: list[str]
    admins: list[str] = []
    warning: str | None = Field(default=None, description="on creation: other tenants have this display name")


class TenantList(Model):
    tenants: list[Tenant]


class TenantCreate(Model):
    display_name: Name


class UserCreate(Model):
    user: Name
    password: str = Field(min_length=1, json_schema_extra={"format": "password"})
    mechanism: Literal["SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        default=None, description="only this mechanism's credential (default: one for each)")
    admin: bool = False


class User(Model):
    user: str
    tenant_id: str
    mechanisms: list[str] = []
    admin: bool = False


class ClaimFilter(Model):
    """{} (every token of the issuer), {claim, equals} or {claim, contains}"""

    model_config = {"extra": "forbid"}
    claim: str | None = None
    equals: str | None = None
    contains: str | None = None


class IdentityPoolCreate(Model):
    model_config = {"extra": "forbid"}
    issuer: str
    claim_filter: ClaimFilter | None = None
    principal_claim: str = "sub"
    display_name: str = ""


class IdentityPool(Model):
    pool_id: str
    tenant_id: str
    issuer: str
    claim_filter: ClaimFilter
    principal_claim: str
    display_name: str = ""


class IdentityPoolList(Model):
    identity_pools: list[IdentityPool]


class ClusterLoad(Model):
    """Per broker its capacity and load totals, per partition its leader's rates and size."""

    brokers: list[dict[str, Any]]
    partitions: list[dict[str, Any]]
    stale_brokers: list[int]


def tenant_out(t: TenantInfo, user_tenants: Any, admins: Any = frozenset()) -> Tenant:
    users = sorted(u for u, tid in user_tenants.items() if tid == t.tenant_id)
    return Tenant(tenant_id=t.tenant_id, display_name=t.display_name, created_ms=t.created_ms, users=users,
                  admins=[u for u in users if u in admins])


def identity_pool_out(p: PoolInfo) -> IdentityPool:
    return IdentityPool(pool_id=p.pool_id, tenant_id=p.tenant_id, issuer=p.issuer,
                           claim_filter=ClaimFilter.model_validate(dict(p.claim_filter)),
                           principal_claim=p.principal_claim, display_name=p.display_name)


async def _server_header(request: web.Request, response: web.StreamResponse) -> None:
    """``Server: Shoal`` (no Python and aiohttp versions for a scanner to match)."""
    response.headers["Server"] = "Shoal"


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return json_response(status, {"error": code, "message": message}, headers)


def json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=json.dumps(payload, indent=1).encode("utf-8") + b"\n",
                        content_type="application/json", headers=headers)


# -- the server ---------------------------------------------------------------------------------


class _ProtocolLog(logging.LoggerAdapter):
    """aiohttp's connection-level complaints (a malformed request, which it answers with 400 and
    closes) as one rate-limited warning naming the client and the problem, no traceback: a client
    sending garbage fills no log."""

    def __init__(self, what: str = "HTTP admin API") -> None:
        from shoal.logutil import RateLimitedLog

        super().__init__(log, {})
        self.what = what
        self._lines = RateLimitedLog(log)

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kw: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else None
        text = str(getattr(exc, "message", exc) or "").strip()
        what = text.splitlines()[0].rstrip(":") if text else type(exc).__name__
        self._lines.log(logging.WARNING, ("protocol", type(exc).__name__), "%s: %s: %s",
                        self.what, str(msg) % args if args else msg, what)


class AdminHttpServer:
    """The admin API on ``host:port``. ``app`` (an ``aiohttp.web.Application``) exists from the
    construction on: ``mount`` another application under a prefix before ``start``."""

    def __init__(self, store: MetadataStore, host: str, port: int, *,
                 broker_config: Callable[[], BrokerConfig] | None = None, login_backoff: Any = None,
                 cluster_load: Callable[[], Awaitable[LoadReports]] | None = None,
                 balancer: "BalancerService | None" = None, live_usage: Callable[[], Any] | None = None) -> None:
        self.store = store
        self.cluster_load = cluster_load  # the broker's shoal.cluster.load.LoadReporter.cluster_load
        self.host = host
        self.port = port
        # namespaces, topic moves, tenant defaults and policy (shoal.admin.http_namespaces)
        self.tenancy = TenancyRoutes(self, broker_config)
        from shoal.admin.http_cluster import ClusterRoutes

        self.cluster = ClusterRoutes(self, balancer)  # the balancer, remove-broker (issue 27)
        from shoal.admin.http_usage import UsageRoutes

        self.usage = UsageRoutes(self, broker_config, live_usage)  # a tenant's usage, bill, quotas (issue 30)
        from shoal.admin.http_auth import HttpAuth

        self.auth = HttpAuth(store, broker_config, backoff=login_backoff)  # shoal.admin.authentication
        self.endpoints = endpoints(self, self.tenancy, self.cluster, self.usage)
        self._openapi: bytes | None = None
        self._mounts: list[str] = []
        # client_max_size: aiohttp refuses a body that reaches it (413) as it reads (a chunked one too)
        self.app = web.Application(client_max_size=MAX_BODY_BYTES + 1, middlewares=[self._middleware])
        for ep, owner in self.endpoints:
            self.app.router.add_route(ep.method, ep.path, self._handler(ep, owner), name=ep.op)
        self.app.router.add_route("GET", "/openapi.json", self._openapi_json, name="openapi")
        self.app.on_response_prepare.append(_server_header)
        self._runner: web.AppRunner | None = None

    def mount(self, prefix: str, subapp: web.Application) -> None:
        """Serve ``subapp`` under ``prefix`` (``/ui``) on this listener; before ``start``. Its
        requests skip this API's authentication and JSON errors (it answers them itself), not
        the listener's limits (``client_max_size`` is this application's: 64 KiB bodies)."""
        if self._runner is not None:
            raise RuntimeError("mount before the admin API starts")
        prefix = "/" + prefix.strip("/")
        self.app.add_subapp(prefix, subapp)
        self._mounts.append(prefix)

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, handle_signals=False, access_log=None, keepalive_timeout=KEEPALIVE_S,
                                     shutdown_timeout=SHUTDOWN_S,
                                     logger=_ProtocolLog(),
                                     # a longer request line or header than this: aiohttp's own 400;
                                     # longer headers altogether: our 413 (_middleware)
                                     max_line_size=MAX_HEADER_BYTES, max_field_size=MAX_HEADER_BYTES)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await self._runner.cleanup()
            self._runner = None
            raise
        self.port = self._runner.addresses[0][1]
        log.info("HTTP admin API listening on http://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    # -- requests -----------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Around every request but a mounted application's: the header limit, authentication
        (its answer is the request's caller), and every error as ``{"error", "message"}``."""
        path = request.path
        if any(path == p or path.startswith(p + "/") for p in self._mounts):
            return await handler(request)
        try:
            if len(request.raw_path) + sum(len(k) + len(v) + 4 for k, v in request.raw_headers) > MAX_HEADER_BYTES:
                raise HttpError(413, "payload_too_large", "request headers too large")
            from shoal.admin.http_auth import AuthError

            raw_path = request.rel_url.raw_path
            segs = [unquote(s) for s in raw_path.strip("/").split("/")] if raw_path.strip("/") else []
            peer = request.transport.get_extra_info("peername") if request.transport is not None else None
            try:
                request[_CALLER] = await self.auth.check(request.headers, request.method, segs,
                                                         f"{peer[0]}:{peer[1]}" if peer else "?")
            except AuthError as e:
                raise HttpError(e.status, e.code, e.message) from None
            return await handler(request)
        except HttpError as e:
            return error_response(e.status, e.code, e.message)
        except web.HTTPMethodNotAllowed as e:
            err = method_not_allowed(e.method, e.allowed_methods)
            return error_response(err.status, err.code, err.message, {"Allow": ",".join(sorted(e.allowed_methods))})
        except web.HTTPNotFound:
            return error_response(404, "not_found", f"no such path: {path}")
        except web.HTTPRequestEntityTooLarge:
            return error_response(413, "payload_too_large", f"body over {MAX_BODY_BYTES} bytes")
        except web.HTTPException as e:  # aiohttp's own refusals (a bad request, ...)
            code = "bad_request" if e.status == 400 else HTTPStatus(e.status).phrase.lower().replace(" ", "_")
            return error_response(e.status, code, e.reason)
        except Exception:
            log.exception("HTTP admin request %s %s failed", request.method, path)
            return error_response(500, "internal_error", "internal error")

    def _handler(self, ep: Endpoint, owner: object) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            raw = await self._body(request)
            status, payload = await invoke(ep, owner, request.match_info, raw, request.rel_url.raw_query_string,
                                           request.get(_CALLER))
            return json_response(status, payload)
        return handle

    @staticmethod
    async def _body(request: web.Request) -> bytes:
        """The body, refused (413) by its Content-Length before it is read when over the limit."""
        if not request.body_exists:
            return b""
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            raise HttpError(413, "payload_too_large", f"body over {MAX_BODY_BYTES} bytes")
        try:
            return await asyncio.wait_for(request.read(), READ_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise HttpError(400, "bad_request", "request not received in time") from None

    async def _openapi_json(self, request: web.Request) -> web.Response:
        if self._openapi is None:
            self._openapi = json.dumps(self.openapi(), indent=1).encode("utf-8") + b"\n"
        return web.Response(body=self._openapi, content_type="application/json")

    def openapi(self) -> dict[str, Any]:
        return openapi_document((ep for ep, _ in self.endpoints), {
            "title": "Shoal admin API", "version": "1",
            "description": "Tenants (logical clusters), their SCRAM users and OAuth identity pools, namespaces, "
                           "tenant defaults and policies, the cluster's load and balancer."})

    async def route(self, method: str, path: str, raw: bytes, query: str = "",
                    caller: str | None = None) -> tuple[int, Any]:
        """One request in process, routed as aiohttp routes it (no authentication: ``caller`` is
        ``HttpAuth.check``'s answer, the tenant whose administrator calls, None for the operator):
        (status, the JSON answer); HttpError for an error answer."""
        ep, owner, params = find(self.endpoints, method, path)
        return await invoke(ep, owner, params, raw, query, caller)

    # -- tenants and users --------------------------------------------------------------------

    @endpoint("GET", "/v1/tenants", op="listTenants", summary="List tenants")
    async def list_tenants(self) -> TenantList:
        image = self.store.image
        return TenantList(tenants=[tenant_out(t, image.user_tenants, image.tenant_admins)
                                   for t in sorted(image.tenants.values(), key=lambda t: t.created_ms)])

    @endpoint("POST", "/v1/tenants", op="createTenant", summary="Create a tenant", status=201, errors=[400])
    async def create_tenant(self, body: TenantCreate) -> Tenant:
        name = body.display_name
        namesakes = sorted(t.tenant_id for t in self.store.image.tenants.values() if t.display_name == name)
        t = await self._store_call(self.store.create_tenant(name))
        created = tenant_out(t, self.store.image.user_tenants, self.store.image.tenant_admins)
        if namesakes:  # allowed (a display name is a label), but most likely a script run twice
            created.warning = (f"tenant {', '.join(namesakes)} is also named {name!r}: display names need "
                               f"not be unique, tell these tenants apart by id")
        return created

    @endpoint("GET", "/v1/tenants/{tenant_id}", op="describeTenant", summary="Describe a tenant", errors=[404])
    async def describe_tenant(self, tenant_id: TenantId) -> Tenant:
        return tenant_out(self._tenant(tenant_id), self.store.image.user_tenants, self.store.image.tenant_admins)

    @endpoint("DELETE", "/v1/tenants/{tenant_id}", op="deleteTenant",
              summary="Delete a tenant with its users and their credentials", errors=[404])
    async def delete_tenant(self, tenant_id: TenantId) -> Tenant:
        before = self.store.image.user_tenants
        return tenant_out(await self._store_call(self.store.delete_tenant(tenant_id)), before)

    @endpoint("POST", "/v1/tenants/{tenant_id}/users", op="createUser", status=201, errors=[400, 404, 409],
              summary="Create a SCRAM user in the tenant (the password is hashed, never stored)")
    async def create_user(self, tenant_id: TenantId, body: UserCreate, caller: str | None) -> User:
        """The operator (``caller`` None) maps a name as it is into the tenant (how mTLS and
        pre-named users join one); a tenant administrator's users are stored qualified,
        ``<tenant>_<name>``, the name they log in with (``shoal.tenancy.principals``)."""
        from shoal.auth.scram import make_credential

        user = body.user
        if user.startswith("lkc-") and "_" in user:
            raise HttpError(400, "bad_request", "user names starting with 'lkc-' and containing '_' are reserved")
        if caller is None:
            why = operator_user_error(user, self.auth.super_users(), into_tenant=True)
            if why is not None:
                raise HttpError(400, "bad_request", why)
        else:
            user = tenant_user(tenant_id, user)
        self._tenant(tenant_id)
        mechanisms = (body.mechanism,) if body.mechanism is not None else DEFAULT_MECHANISMS
        creds = tuple([await asyncio.to_thread(make_credential, m, body.password) for m in mechanisms])
        await self._store_call(self.store.assign_user(user, tenant_id, creds, new_user=True))
        if body.admin:  # a tenant administrator may do anything within its tenant
            await self._store_call(self.store.set_tenant_admin(user, True))
        return User(user=user, tenant_id=tenant_id, mechanisms=list(mechanisms), admin=body.admin)

    @endpoint("DELETE", "/v1/tenants/{tenant_id}/users/{user}", op="deleteUser", summary="Delete a user of the tenant",
              errors=[404])
    async def delete_user(self, tenant_id: TenantId, user: str, caller: str | None) -> User:
        self._tenant(tenant_id)
        if caller is not None and self.store.image.user_tenants.get(user) != tenant_id:
            user = tenant_user(tenant_id, user)  # the name its administrator created it with
        if self.store.image.user_tenants.get(user) != tenant_id:
            raise HttpError(404, "not_found", f"User '{user}' does not exist in tenant {tenant_id}.")
        await self._store_call(self.store.remove_user(user))
        return User(user=user, tenant_id=tenant_id)

    # -- OAuth identity pools (shoal.tenancy.identity_pools): the operator's alone --------------

    @endpoint("GET", "/v1/tenants/{tenant_id}/identity_pools", op="listIdentityPools",
              summary="The tenant's OAuth identity pools", errors=[403, 404])
    async def list_identity_pools(self, tenant_id: TenantId, caller: str | None) -> IdentityPoolList:
        self._operator(caller)
        self._tenant(tenant_id)
        pools = self.store.image.identity_pools
        return IdentityPoolList(identity_pools=[identity_pool_out(p) for _, p in sorted(pools.items())
                                                if p.tenant_id == tenant_id])

    @endpoint("POST", "/v1/tenants/{tenant_id}/identity_pools", op="createIdentityPool", status=201,
              errors=[400, 403, 404], summary="Map OAUTHBEARER tokens of an issuer whose claims pass a filter to "
                                              "principals of the tenant (the operator's only)")
    async def create_identity_pool(self, tenant_id: TenantId, body: IdentityPoolCreate,
                                   caller: str | None) -> IdentityPool:
        self._operator(caller)
        claim_filter = None if body.claim_filter is None else body.claim_filter.model_dump(exclude_unset=True)
        try:
            pool = await self._store_call(self.store.create_identity_pool(
                tenant_id, body.issuer, claim_filter,  # (checked by the rules)
                principal_claim=body.principal_claim, display_name=body.display_name))
        except MetadataError as e:  # INVALID_REQUEST, POLICY_VIOLATION
            raise HttpError(400, "bad_request", e.message) from None
        log.info("identity pool %s of tenant %s created (issuer %s, filter %s)", pool.pool_id, tenant_id,
                 pool.issuer, dict(pool.claim_filter) or "none")
        return identity_pool_out(pool)

    @endpoint("GET", "/v1/tenants/{tenant_id}/identity_pools/{pool_id}", op="describeIdentityPool",
              summary="One identity pool", errors=[403, 404])
    async def describe_identity_pool(self, tenant_id: TenantId, pool_id: str, caller: str | None) -> IdentityPool:
        return identity_pool_out(self._pool(tenant_id, pool_id, caller))

    @endpoint("DELETE", "/v1/tenants/{tenant_id}/identity_pools/{pool_id}", op="deleteIdentityPool",
              summary="Delete an identity pool", errors=[403, 404])
    async def delete_identity_pool(self, tenant_id: TenantId, pool_id: str, caller: str | None) -> IdentityPool:
        pool = self._pool(tenant_id, pool_id, caller)
        await self._store_call(self.store.delete_identity_pool(pool.pool_id))
        log.info("identity pool %s of tenant %s deleted", pool.pool_id, tenant_id)
        return identity_pool_out(pool)

    @endpoint("GET", "/v1/identity_pools", op="listAllIdentityPools", summary="Every tenant's identity pools",
              errors=[403])
    async def list_all_identity_pools(self, caller: str | None) -> IdentityPoolList:
        self._operator(caller)
        pools = self.store.image.identity_pools
        return IdentityPoolList(identity_pools=[identity_pool_out(pools[i]) for i in sorted(pools)])

    def _pool(self, tenant_id: str, pool_id: str, caller: str | None) -> PoolInfo:
        self._operator(caller)
        pool = self.store.image.identity_pools.get(pool_id)
        if pool is None or pool.tenant_id != tenant_id:
            raise HttpError(404, "not_found", f"Identity pool '{pool_id}' does not exist in tenant {tenant_id}.")
        return pool

    # -- the cluster ------------------------------------------------------------------------------

    @endpoint("GET", "/v1/cluster/load", op="clusterLoad", errors=[403, 404],
              summary="Per broker its capacity and load, per partition its leader's byte rates and size "
                      "(the operator's only)")
    async def get_cluster_load(self, caller: str | None) -> ClusterLoad:
        self._operator(caller)
        if self.cluster_load is None:
            raise HttpError(404, "not_found", "this broker does not measure load")
        return ClusterLoad.model_validate(cluster_load_json(await self.cluster_load()))

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _operator(caller: str | None) -> None:
        if caller is not None:  # a tenant's administrator: the operator's alone
            raise HttpError(403, "forbidden", "not allowed")

    def _tenant(self, tenant_id: str) -> TenantInfo:
        t = self.store.image.tenants.get(tenant_id)
        if t is None:
            raise HttpError(404, "not_found", f"Tenant '{tenant_id}' does not exist.")
        return t

    @staticmethod
    async def _store_call(coro: Any) -> Any:
        try:
            return await coro
        except MetadataError as e:
            if e.code == "RESOURCE_NOT_FOUND":
                raise HttpError(404, "not_found", e.message) from None
            if e.code == "DUPLICATE_RESOURCE":
                raise HttpError(409, "conflict", e.message) from None
            raise


def openapi() -> dict[str, Any]:
    """The admin API's OpenAPI document (of a server with no store: the routes are the same)."""
    return AdminHttpServer(None, "127.0.0.1", 0).openapi()  # type: ignore[arg-type]
