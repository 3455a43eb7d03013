"""The HTTP admin API: tenants (logical clusters) and their SCRAM users, as JSON over HTTP/1.1.

Started by the broker when ``shoal.admin.listener`` (``http://HOST:PORT``) is set. Standard library
only (asyncio streams + json). One request per connection (``Connection: close``). Endpoints:

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
    GET    /v1/cluster/load                 per broker its capacity and load totals, per partition
                                            its leader's rates and size (``shoal.cluster.load``;
                                            the operator's only)
    GET    /openapi.json                    the OpenAPI 3.0 description of the above

The password is hashed here (``make_credential``, random salt) and never stored. Errors are
``{"error": code, "message": ...}`` with 400 (bad request), 404 (no such tenant/user/path), 405,
409 (the user exists), 413; a request that breaks a handler gets a 500, never a dead server.
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
from typing import TYPE_CHECKING, Any, Awaitable, Callable
from urllib.parse import unquote, urlsplit

from shoal.admin.http_errors import HttpError
from shoal.admin.http_namespaces import SECTIONS as TENANCY_SECTIONS, TenancyRoutes
from shoal.admin.http_namespaces import openapi_paths as tenancy_openapi
from shoal.cluster.load import ClusterLoad, cluster_load_json
from shoal.config import BrokerConfig
from shoal.metadata import IdentityPool, MetadataError, MetadataStore, TenantInfo
from shoal.tenancy.principals import operator_user_error, tenant_user

if TYPE_CHECKING:
    from shoal.cluster.balancer.service import BalancerService

log = logging.getLogger("shoal.admin.http")

MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024
READ_TIMEOUT_S = 10.0
MAX_NAME_CHARS = 255
# A user gets a credential for each SCRAM mechanism unless the request names one: a listener offers
# both (``sasl.enabled.mechanisms``), and a client configured for the one the user lacks fails as a
# wrong password would (SCRAM never says which part was wrong), as ``kafka-configs.sh`` users learn.
DEFAULT_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")

_REASONS = {200: "OK", 201: "Created", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 405: "Method Not Allowed",
            409: "Conflict", 413: "Payload Too Large", 500: "Internal Server Error"}


def parse_listener(value: str, config: str = "shoal.admin.listener") -> tuple[str, int]:
    """``http://HOST:PORT`` -> ``(host, port)``; ValueError (naming ``config``) for anything else."""
    u = urlsplit(value.strip())
    try:
        port = u.port
    except ValueError as e:
        raise ValueError(f"{config}: bad port in {value!r}") from e
    if u.scheme != "http" or not u.hostname or port is None or u.path not in ("", "/"):
        raise ValueError(f"{config} wants http://HOST:PORT, got {value!r}")
    return u.hostname, port


def tenant_json(t: TenantInfo, user_tenants: Any, admins: Any = frozenset()) -> dict[str, Any]:
    users = sorted(u for u, tid in user_tenants.items() if tid == t.tenant_id)
    return {
        "tenant_id": t.tenant_id,
        "display_name": t.display_name,
        "created_ms": t.created_ms,
        "users": users,
        "admins": [u for u in users if u in admins],
    }


def identity_pool_json(p: IdentityPool) -> dict[str, Any]:
    return {"pool_id": p.pool_id, "tenant_id": p.tenant_id, "issuer": p.issuer,
            "claim_filter": dict(p.claim_filter), "principal_claim": p.principal_claim,
            "display_name": p.display_name}


def _name(body: dict[str, Any], key: str) -> str:
    v = body.get(key)
    if not isinstance(v, str) or not v.strip():
        raise HttpError(400, "bad_request", f"'{key}' must be a non-empty string")
    if len(v) > MAX_NAME_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in v):
        raise HttpError(400, "bad_request", f"'{key}' must be at most {MAX_NAME_CHARS} printable characters")
    return v


class AdminHttpServer:
    def __init__(self, store: MetadataStore, host: str, port: int, *,
                 broker_config: Callable[[], BrokerConfig] | None = None, login_backoff: Any = None,
                 cluster_load: Callable[[], Awaitable[ClusterLoad]] | None = None,
                 balancer: "BalancerService | None" = None) -> None:
        self.store = store
        self.cluster_load = cluster_load  # the broker's shoal.cluster.load.LoadReporter.cluster_load
        self.host = host
        self.port = port
        # namespaces, topic moves, tenant defaults and policy (shoal.admin.http_namespaces)
        self.tenancy = TenancyRoutes(self, broker_config)
        from shoal.admin.http_cluster import ClusterRoutes

        self.cluster = ClusterRoutes(self, balancer)  # the balancer, remove-broker (issue 27)
        from shoal.admin.http_auth import HttpAuth

        self.auth = HttpAuth(store, broker_config, backoff=login_backoff)  # shoal.admin.authentication
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_connection, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("HTTP admin API listening on http://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    # -- connection handling ----------------------------------------------------------------

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                peer = writer.get_extra_info("peername")
                peer_s = f"{peer[0]}:{peer[1]}" if peer else "?"
                status, payload = await asyncio.wait_for(self._handle(reader, peer_s), READ_TIMEOUT_S)
            except asyncio.TimeoutError:
                status, payload = 400, {"error": "bad_request", "message": "request not received in time"}
            except HttpError as e:
                status, payload = e.status, {"error": e.code, "message": e.message}
            except (ConnectionError, asyncio.IncompleteReadError):
                return
            except Exception:
                log.exception("HTTP admin request failed")
                status, payload = 500, {"error": "internal_error", "message": "internal error"}
            body = json.dumps(payload, indent=1).encode("utf-8") + b"\n"
            head = (
                f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
                "Content-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode("ascii")
            writer.write(head + body)
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, asyncio.CancelledError):
                pass

    async def _handle(self, reader: asyncio.StreamReader, peer: str = "?") -> tuple[int, Any]:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise HttpError(413, "payload_too_large", "request headers too large") from None
        except asyncio.IncompleteReadError as e:
            if not e.partial:
                raise
            raise HttpError(400, "bad_request", "incomplete request") from None
        if len(head) > MAX_HEADER_BYTES:
            raise HttpError(413, "payload_too_large", "request headers too large")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise HttpError(400, "bad_request", "malformed request line")
        method, target = parts[0], parts[1]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep:
                raise HttpError(400, "bad_request", "malformed header")
            headers[name.strip().lower()] = value.strip()
        if "transfer-encoding" in headers:
            raise HttpError(400, "bad_request", "send the body with Content-Length")
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise HttpError(400, "bad_request", "bad Content-Length") from None
        if length < 0:
            raise HttpError(400, "bad_request", "bad Content-Length")
        if length > MAX_BODY_BYTES:
            raise HttpError(413, "payload_too_large", f"body over {MAX_BODY_BYTES} bytes")
        raw = await reader.readexactly(length) if length else b""
        url = urlsplit(target)
        from shoal.admin.http_auth import AuthError

        segs = [unquote(s) for s in url.path.strip("/").split("/")] if url.path.strip("/") else []
        try:
            caller = await self.auth.check(headers, method, segs, peer)
        except AuthError as e:
            raise HttpError(e.status, e.code, e.message) from None
        return await self.route(method, url.path, raw, url.query, caller)

    # -- routing ------------------------------------------------------------------------------

    async def route(self, method: str, path: str, raw: bytes, query: str = "",
                    caller: str | None = None) -> tuple[int, Any]:
        """``caller``: the tenant whose administrator calls (``HttpAuth.check``), None for the
        operator."""
        segs = [unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []
        if segs == ["openapi.json"]:
            self._allow(method, "GET")
            return 200, openapi()
        if segs == ["v1", "cluster", "load"]:
            self._allow(method, "GET")
            if caller is not None:  # a tenant's administrator: the operator's alone
                raise HttpError(403, "forbidden", "not allowed")
            if self.cluster_load is None:
                raise HttpError(404, "not_found", "this broker does not measure load")
            return 200, cluster_load_json(await self.cluster_load())
        if segs[:2] == ["v1", "cluster"] and len(segs) > 2:
            return await self.cluster.route(method, segs[2:])
        if segs == ["v1", "identity_pools"] or (segs[:2] == ["v1", "tenants"] and len(segs) in (4, 5)
                                                and segs[3] == "identity_pools"):
            return await self._identity_pools(method, segs, raw, caller)
        if segs[:2] == ["v1", "tenants"] and len(segs) > 3 and segs[3] in TENANCY_SECTIONS:
            return await self.tenancy.route(method, segs[2], segs[3:], query, raw, caller)
        if segs[:2] != ["v1", "tenants"] or len(segs) > 5:
            raise HttpError(404, "not_found", f"no such path: {path}")
        if len(segs) == 2:
            if self._allow(method, "GET", "POST") == "GET":
                image = self.store.image
                return 200, {"tenants": [tenant_json(t, image.user_tenants, image.tenant_admins)
                                         for t in sorted(image.tenants.values(), key=lambda t: t.created_ms)]}
            name = _name(self._json(raw), "display_name")
            namesakes = sorted(t.tenant_id for t in self.store.image.tenants.values() if t.display_name == name)
            t = await self._store_call(self.store.create_tenant(name))
            created = tenant_json(t, self.store.image.user_tenants, self.store.image.tenant_admins)
            if namesakes:  # allowed (a display name is a label), but most likely a script run twice
                created["warning"] = (f"tenant {', '.join(namesakes)} is also named {name!r}: display names need "
                                      f"not be unique, tell these tenants apart by id")
            return 201, created
        tenant_id = segs[2]
        if len(segs) == 3:
            if self._allow(method, "GET", "DELETE") == "GET":
                t = self._tenant(tenant_id)
                return 200, tenant_json(t, self.store.image.user_tenants, self.store.image.tenant_admins)
            before = self.store.image.user_tenants
            t = await self._store_call(self.store.delete_tenant(tenant_id))
            return 200, tenant_json(t, before)
        if segs[3] != "users":
            raise HttpError(404, "not_found", f"no such path: {path}")
        if len(segs) == 4:
            self._allow(method, "POST")
            return 201, await self._create_user(tenant_id, self._json(raw), caller)
        self._allow(method, "DELETE")
        user = segs[4]
        self._tenant(tenant_id)
        if caller is not None and self.store.image.user_tenants.get(user) != tenant_id:
            user = tenant_user(tenant_id, user)  # the name its administrator created it with
        if self.store.image.user_tenants.get(user) != tenant_id:
            raise HttpError(404, "not_found", f"User '{user}' does not exist in tenant {tenant_id}.")
        await self._store_call(self.store.remove_user(user))
        return 200, {"user": user, "tenant_id": tenant_id}

    async def _create_user(self, tenant_id: str, body: dict[str, Any], caller: str | None = None) -> dict[str, Any]:
        """The operator (``caller`` None) maps a name as it is into the tenant (how mTLS and
        pre-named users join one); a tenant administrator's users are stored qualified,
        ``<tenant>_<name>``, the name they log in with (``shoal.tenancy.principals``)."""
        from shoal.auth.scram import MECHANISMS, make_credential

        user = _name(body, "user")
        password = body.get("password")
        if not isinstance(password, str) or not password:
            raise HttpError(400, "bad_request", "'password' must be a non-empty string")
        mechanism = body.get("mechanism")
        if mechanism is not None and mechanism not in MECHANISMS:
            raise HttpError(400, "bad_request", f"'mechanism' must be one of {', '.join(MECHANISMS)}")
        admin = body.get("admin", False)
        if not isinstance(admin, bool):
            raise HttpError(400, "bad_request", "'admin' must be true or false")
        if user.startswith("lkc-") and "_" in user:
            raise HttpError(400, "bad_request", "user names starting with 'lkc-' and containing '_' are reserved")
        if caller is None:
            why = operator_user_error(user, self.auth.super_users(), into_tenant=True)
            if why is not None:
                raise HttpError(400, "bad_request", why)
        else:
            user = tenant_user(tenant_id, user)
        self._tenant(tenant_id)
        mechanisms = (mechanism,) if mechanism is not None else DEFAULT_MECHANISMS
        creds = tuple([await asyncio.to_thread(make_credential, m, password) for m in mechanisms])
        await self._store_call(self.store.assign_user(user, tenant_id, creds, new_user=True))
        if admin:  # a tenant administrator may do anything within its tenant
            await self._store_call(self.store.set_tenant_admin(user, True))
        return {"user": user, "tenant_id": tenant_id, "mechanisms": list(mechanisms), "admin": admin}

    async def _identity_pools(self, method: str, segs: list[str], raw: bytes, caller: str | None) -> tuple[int, Any]:
        """OAuth identity pools (``shoal.tenancy.identity_pools``): the operator's alone."""
        if caller is not None:
            raise HttpError(403, "forbidden", "not allowed")
        pools = self.store.image.identity_pools
        if len(segs) == 2:
            self._allow(method, "GET")
            return 200, {"identity_pools": [identity_pool_json(pools[i]) for i in sorted(pools)]}
        tenant_id = segs[2]
        if len(segs) == 4:
            if self._allow(method, "GET", "POST") == "GET":
                self._tenant(tenant_id)
                return 200, {"identity_pools": [identity_pool_json(p) for _, p in sorted(pools.items())
                                                if p.tenant_id == tenant_id]}
            body = self._json(raw)
            unknown = set(body) - {"issuer", "claim_filter", "principal_claim", "display_name"}
            if unknown:
                raise HttpError(400, "bad_request", f"unknown fields: {', '.join(sorted(unknown))}")
            try:
                pool = await self._store_call(self.store.create_identity_pool(
                    tenant_id, body.get("issuer"), body.get("claim_filter"),  # (checked by the rules)
                    principal_claim=body.get("principal_claim", "sub"), display_name=body.get("display_name", "")))
            except MetadataError as e:  # INVALID_REQUEST, POLICY_VIOLATION
                raise HttpError(400, "bad_request", e.message) from None
            log.info("identity pool %s of tenant %s created (issuer %s, filter %s)", pool.pool_id, tenant_id,
                     pool.issuer, dict(pool.claim_filter) or "none")
            return 201, identity_pool_json(pool)
        pool = pools.get(segs[4])
        if pool is None or pool.tenant_id != tenant_id:
            raise HttpError(404, "not_found", f"Identity pool '{segs[4]}' does not exist in tenant {tenant_id}.")
        if self._allow(method, "GET", "DELETE") == "GET":
            return 200, identity_pool_json(pool)
        await self._store_call(self.store.delete_identity_pool(pool.pool_id))
        log.info("identity pool %s of tenant %s deleted", pool.pool_id, tenant_id)
        return 200, identity_pool_json(pool)

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _allow(method: str, *allowed: str) -> str:
        if method not in allowed:
            raise HttpError(405, "method_not_allowed", f"{method} not allowed here (allowed: {', '.join(allowed)})")
        return method

    @staticmethod
    def _json(raw: bytes) -> dict[str, Any]:
        try:
            body = json.loads(raw.decode("utf-8")) if raw.strip() else None
        except (UnicodeDecodeError, ValueError):
            raise HttpError(400, "bad_request", "body is not valid JSON") from None
        if not isinstance(body, dict):
            raise HttpError(400, "bad_request", "body must be a JSON object")
        return body

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


# -- OpenAPI ------------------------------------------------------------------------------------


def openapi() -> dict[str, Any]:
    def ref(name: str) -> dict[str, str]:
        return {"$ref": f"#/components/schemas/{name}"}

    def resp(desc: str, schema: str) -> dict[str, Any]:
        return {"description": desc, "content": {"application/json": {"schema": ref(schema)}}}

    def errors(*codes: int) -> dict[str, Any]:
        return {str(c): resp(_REASONS[c], "Error") for c in codes}

    def body(schema: str) -> dict[str, Any]:
        return {"required": True, "content": {"application/json": {"schema": ref(schema)}}}

    tenant_id = {"name": "tenant_id", "in": "path", "required": True,
                 "schema": {"type": "string", "pattern": "^lkc-[0-9a-z]{6}$"}}
    user = {"name": "user", "in": "path", "required": True, "schema": {"type": "string"}}
    string = {"type": "string"}
    doc = {
        "openapi": "3.0.3",
        "info": {"title": "Shoal admin API", "version": "1",
                 "description": "Tenants (logical clusters) and their SCRAM users."},
        "paths": {
            "/v1/tenants": {
                "get": {"operationId": "listTenants", "summary": "List tenants",
                        "responses": {"200": resp("The tenants", "TenantList")}},
                "post": {"operationId": "createTenant", "summary": "Create a tenant",
                         "requestBody": body("TenantCreate"),
                         "responses": {"201": resp("The new tenant", "Tenant"), **errors(400)}},
            },
            "/v1/tenants/{tenant_id}": {
                "parameters": [tenant_id],
                "get": {"operationId": "describeTenant", "summary": "Describe a tenant",
                        "responses": {"200": resp("The tenant", "Tenant"), **errors(404)}},
                "delete": {"operationId": "deleteTenant",
                           "summary": "Delete a tenant with its users and their credentials",
                           "responses": {"200": resp("The deleted tenant", "Tenant"), **errors(404)}},
            },
            "/v1/tenants/{tenant_id}/users": {
                "parameters": [tenant_id],
                "post": {"operationId": "createUser",
                         "summary": "Create a SCRAM user in the tenant (the password is hashed, never stored)",
                         "requestBody": body("UserCreate"),
                         "responses": {"201": resp("The new user", "User"), **errors(400, 404, 409)}},
            },
            "/v1/tenants/{tenant_id}/users/{user}": {
                "parameters": [tenant_id, user],
                "delete": {"operationId": "deleteUser", "summary": "Delete a user of the tenant",
                           "responses": {"200": resp("The deleted user", "User"), **errors(404)}},
            },
            "/v1/tenants/{tenant_id}/identity_pools": {
                "parameters": [tenant_id],
                "get": {"operationId": "listIdentityPools", "summary": "The tenant's OAuth identity pools",
                        "responses": {"200": resp("The pools", "IdentityPoolList"), **errors(403, 404)}},
                "post": {"operationId": "createIdentityPool",
                         "summary": "Map OAUTHBEARER tokens of an issuer whose claims pass a filter to principals of "
                                    "the tenant (the operator's only)",
                         "requestBody": body("IdentityPoolCreate"),
                         "responses": {"201": resp("The new pool", "IdentityPool"), **errors(400, 403, 404)}},
            },
            "/v1/tenants/{tenant_id}/identity_pools/{pool_id}": {
                "parameters": [tenant_id, {"name": "pool_id", "in": "path", "required": True, "schema": string}],
                "get": {"operationId": "describeIdentityPool", "summary": "One identity pool",
                        "responses": {"200": resp("The pool", "IdentityPool"), **errors(403, 404)}},
                "delete": {"operationId": "deleteIdentityPool", "summary": "Delete an identity pool",
                           "responses": {"200": resp("The deleted pool", "IdentityPool"), **errors(403, 404)}},
            },
            "/v1/identity_pools": {
                "get": {"operationId": "listAllIdentityPools", "summary": "Every tenant's identity pools",
                        "responses": {"200": resp("The pools", "IdentityPoolList"), **errors(403)}},
            },
            "/v1/cluster/load": {
                "get": {"operationId": "clusterLoad",
                        "summary": "Per broker its capacity and load, per partition its leader's byte rates and "
                                   "size (the operator's only)",
                        "responses": {"200": resp("The cluster's load", "ClusterLoad"), **errors(403, 404)}},
            },
        },
        "components": {
            "schemas": {
                "Tenant": {"type": "object", "required": ["tenant_id", "display_name", "created_ms", "users"],
                           "properties": {"tenant_id": string, "display_name": string,
                                          "created_ms": {"type": "integer", "format": "int64"},
                                          "users": {"type": "array", "items": string},
                                          "admins": {"type": "array", "items": string},
                                          "warning": {"type": "string", "description": "on creation: other "
                                                      "tenants have this display name"}}},
                "IdentityPool": {"type": "object",
                                 "required": ["pool_id", "tenant_id", "issuer", "claim_filter", "principal_claim"],
                                 "properties": {"pool_id": string, "tenant_id": string, "issuer": string,
                                                "claim_filter": ref("ClaimFilter"), "principal_claim": string,
                                                "display_name": string}},
                "ClaimFilter": {"type": "object", "description": "{} (every token of the issuer), {claim, equals} "
                                "or {claim, contains}",
                                "properties": {"claim": string, "equals": string, "contains": string}},
                "IdentityPoolCreate": {"type": "object", "required": ["issuer"],
                                       "properties": {"issuer": string, "claim_filter": ref("ClaimFilter"),
                                                      "principal_claim": {"type": "string", "default": "sub"},
                                                      "display_name": string}},
                "IdentityPoolList": {"type": "object", "required": ["identity_pools"],
                                     "properties": {"identity_pools": {"type": "array", "items": ref("IdentityPool")}}},
                "TenantList": {"type": "object", "required": ["tenants"],
                               "properties": {"tenants": {"type": "array", "items": ref("Tenant")}}},
                "TenantCreate": {"type": "object", "required": ["display_name"],
                                 "properties": {"display_name": string}},
                "UserCreate": {"type": "object", "required": ["user", "password"],
                               "properties": {"user": string, "password": {"type": "string", "format": "password"},
                                              "mechanism": {"type": "string",
                                                            "enum": ["SCRAM-SHA-256", "SCRAM-SHA-512"],
                                                            "description": "only this mechanism's credential "
                                                                           "(default: one for each)"},
                                              "admin": {"type": "boolean", "default": False}}},
                "User": {"type": "object", "required": ["user", "tenant_id"],
                         "properties": {"user": string, "tenant_id": string,
                                        "mechanisms": {"type": "array", "items": string},
                                        "admin": {"type": "boolean"}}},
                "ClusterLoad": {"type": "object", "required": ["brokers", "partitions", "stale_brokers"],
                                "properties": {"brokers": {"type": "array", "items": {"type": "object"}},
                                               "partitions": {"type": "array", "items": {"type": "object"}},
                                               "stale_brokers": {"type": "array", "items": {"type": "integer"}}}},
                "Error": {"type": "object", "required": ["error", "message"],
                          "properties": {"error": string, "message": string}},
            }
        },
    }
    paths, schemas = tenancy_openapi(ref, resp, errors, body, tenant_id)
    doc["paths"].update(paths)
    doc["components"]["schemas"].update(schemas)
    return doc
