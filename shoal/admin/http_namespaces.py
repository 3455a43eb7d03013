"""The HTTP admin API's tenancy endpoints: KIP-37 namespaces, topic moves, tenant config defaults
and the create-topic policy (``shoal.admin.http`` routes ``/v1/tenants/{id}/<these>`` here).

    GET    /v1/tenants/{id}/namespaces[?parent=NS][&recursive=true]   children of NS ("" = top)
    POST   /v1/tenants/{id}/namespaces          {"name": "a:b:c", "configs"?: {...}} -> 201
                                                (creates every missing tier: a, a:b, a:b:c)
    GET    /v1/tenants/{id}/namespaces/{ns}     its configs, child namespaces and topics
    DELETE /v1/tenants/{id}/namespaces/{ns}[?recursive=true]   with its topics; refused (409)
                                                when it has child namespaces and is not recursive
    GET    /v1/tenants/{id}/namespaces/{ns}/configs   own configs and every effective value with
                                                its origin (NAMESPACE x, TENANT_DEFAULT, BROKER_*)
    PUT    /v1/tenants/{id}/namespaces/{ns}/configs   {"configs": {...}} replace
    PATCH  /v1/tenants/{id}/namespaces/{ns}/configs   {"set"?: {...}, "delete"?: [...]}
    POST   /v1/tenants/{id}/namespaces/{ns}/move      {"to": NS2}: move the topics directly in ns
    POST   /v1/tenants/{id}/topics/{topic}/move       {"namespace": NS2} ("" = default namespace)
    GET    /v1/tenants/{id}/topics/{topic}/configs    effective configs with their origins
    GET|PUT|PATCH /v1/tenants/{id}/configs      the tenant's topic config defaults (names as
                                                topic configs or their broker synonyms) and
                                                its cell (shoal.tenant.cell.brokers|racks, the
                                                operator's: shoal.placement.cells)
    GET|PUT /v1/tenants/{id}/policy             the create-topic policy (shoal.tenancy.policy)

Names are as the tenant's clients see them (no ``lkc-…_`` prefix). A move is a rename in the
store (same topic id, data, configs); the broker renames the partition logs on disk when it sees
it. Errors: 400 bad names/configs/policies, 404 unknown tenant/namespace/topic, 409 exists, not
empty, or a moved name taken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping
from urllib.parse import parse_qs

from shoal.admin.http_errors import HttpError
from shoal.config import BrokerConfig, ConfigError, validate_topic_configs
from shoal.metadata import MetadataError, MetadataImage, inheritance, tenant_prefix
from shoal.metadata.change import Result
from shoal.metadata.rules import existing_tenant
from shoal.metadata.rules import namespaces as namespace_rules
from shoal.metadata.rules import tenants as tenant_rules
from shoal.placement import cells
from shoal.tenancy import namespaces as ns
from shoal.tenancy.scope import operator_config_refused
from shoal.tenancy.policy import validate_policy

if TYPE_CHECKING:
    from shoal.admin.http import AdminHttpServer

SECTIONS = frozenset({"namespaces", "topics", "configs", "policy"})

_STATUS = {
    "RESOURCE_NOT_FOUND": (404, "not_found"),
    "UNKNOWN_TOPIC_OR_PARTITION": (404, "not_found"),
    "NAMESPACE_NOT_EMPTY": (409, "conflict"),
    "TOPIC_ALREADY_EXISTS": (409, "conflict"),
}


def _error(code: str, message: str) -> Exception:
    status, kind = _STATUS.get(code, (400, "bad_request"))
    return HttpError(status, kind, message)


def _flag(query: Mapping[str, list[str]], key: str) -> bool:
    value = (query.get(key) or ["false"])[-1].lower()
    if value not in ("true", "false", "1", "0", ""):
        raise _error("INVALID_REQUEST", f"'{key}' must be true or false")
    return value in ("true", "1", "")


def effective_json(entries: list[ns.EffectiveConfig]) -> list[dict[str, Any]]:
    return [
        {"name": e.name, "value": e.value, "source": e.label, "origin": e.origin, "where": e.where,
         "layers": [{"origin": o, "where": w, "value": v} for o, w, v in e.layers]}
        for e in entries
    ]


class TenancyRoutes:
    """The endpoints above, on one ``AdminHttpServer`` (its store and its broker config)."""

    def __init__(self, server: "AdminHttpServer", broker_config: Callable[[], BrokerConfig] | None) -> None:
        self.server = server
        self.broker_config = broker_config or BrokerConfig

    @property
    def store(self) -> Any:
        return self.server.store

    async def route(self, method: str, tenant_id: str, segs: list[str], query: str, raw: bytes,
                    caller: str | None = None) -> tuple[int, Any]:
        """``segs``: the path after ``/v1/tenants/{id}/`` (its first is one of SECTIONS); ``caller``:
        the tenant whose administrator calls, None for the operator."""
        self.server._tenant(tenant_id)
        prefix = tenant_prefix(tenant_id)
        q = parse_qs(query, keep_blank_values=True)
        head, rest = segs[0], segs[1:]
        try:
            if head == "configs" and not rest:
                return await self._tenant_configs(method, tenant_id, raw, caller)
            if head == "policy" and not rest:
                return await self._policy(method, tenant_id, raw)
            if head == "namespaces":
                if not rest:
                    if self.server._allow(method, "GET", "POST") == "GET":
                        return self._list(prefix, q)
                    return await self._create(prefix, self.server._json(raw))
                if len(rest) == 1:
                    if self.server._allow(method, "GET", "DELETE") == "GET":
                        return self._describe(prefix, rest[0])
                    return await self._delete(prefix, rest[0], _flag(q, "recursive"))
                if len(rest) == 2 and rest[1] == "configs":
                    return await self._namespace_configs(method, prefix, rest[0], raw)
                if len(rest) == 2 and rest[1] == "move":
                    self.server._allow(method, "POST")
                    target = self._target(self.server._json(raw), "to")
                    self._existing(prefix, rest[0])
                    return await self._move(prefix, ns.topics_in(self.store.image, prefix, rest[0]), target)
            if head == "topics" and len(rest) == 2:
                topic = rest[0]
                if rest[1] == "move":
                    self.server._allow(method, "POST")
                    return await self._move(prefix, [topic], self._target(self.server._json(raw), "namespace"))
                if rest[1] == "configs":
                    self.server._allow(method, "GET")
                    image = self.store.image
                    if prefix + topic not in image.topics:
                        raise _error("UNKNOWN_TOPIC_OR_PARTITION", f"Topic '{topic}' does not exist.")
                    entries = ns.effective_topic_config(image, prefix + topic, self.broker_config())
                    return 200, {"topic": topic, "configs": dict(image.topics[prefix + topic].configs),
                                 "effective": effective_json(entries)}
        except ns.NamespaceError as e:
            raise _error(e.code, e.message) from None
        except MetadataError as e:
            raise _error(e.code, e.message) from None
        raise HttpError(404, "not_found", f"no such path under /v1/tenants/{tenant_id}: {'/'.join(segs)}")

    # -- namespaces ---------------------------------------------------------------------------

    def _existing(self, prefix: str, name: str) -> None:
        why = ns.namespace_name_error(name)
        if why is not None:
            raise _error("INVALID_REQUEST", why)
        if prefix + name not in self.store.image.namespaces:
            raise _error("RESOURCE_NOT_FOUND", f"Namespace '{name}' does not exist.")

    def _list(self, prefix: str, q: Mapping[str, list[str]]) -> tuple[int, Any]:
        parent = (q.get("parent") or [""])[-1]
        if parent:
            self._existing(prefix, parent)
        names = ns.children(self.store.image, prefix, parent, recursive=_flag(q, "recursive"))
        return 200, {"parent": parent, "namespaces": names}

    def _describe(self, prefix: str, name: str) -> tuple[int, Any]:
        self._existing(prefix, name)
        image = self.store.image
        return 200, {
            "name": name,
            "configs": dict(sorted(image.namespaces[prefix + name].configs.items())),
            "namespaces": ns.children(image, prefix, name),
            "topics": ns.topics_in(image, prefix, name),
        }

    async def _create(self, prefix: str, body: dict[str, Any]) -> tuple[int, Any]:
        name = body.get("name")
        if not isinstance(name, str):
            raise _error("INVALID_REQUEST", "'name' must be a string")
        configs = self._configs(body.get("configs", {}), "configs")
        missing = ns.plan_create(self.store.image, prefix, name)
        if prefix + name not in missing:
            raise _error("TOPIC_ALREADY_EXISTS", f"Namespace '{name}' already exists.")
        await self.store.create_namespaces(missing)
        if configs:
            await self.store.set_namespace_configs(prefix + name, configs)
        return 201, {"name": name, "created": [n[len(prefix):] for n in missing], "configs": configs}

    async def _delete(self, prefix: str, name: str, recursive: bool) -> tuple[int, Any]:
        self._existing(prefix, name)

        def delete(image: MetadataImage) -> Result[Any]:  # the topics created meanwhile go too
            plan = ns.plan_delete(image, prefix, name, recursive=recursive)
            r = namespace_rules.delete_namespaces(image, list(plan.namespaces), list(plan.topics))
            return Result(r.change, plan)

        plan = await self.store.decide_and_commit(delete)
        n = len(prefix)
        return 200, {"deleted_namespaces": [x[n:] for x in plan.namespaces], "deleted_topics": [x[n:] for x in plan.topics]}

    async def _namespace_configs(self, method: str, prefix: str, name: str, raw: bytes) -> tuple[int, Any]:
        self._existing(prefix, name)
        physical = prefix + name
        if self.server._allow(method, "GET", "PUT", "PATCH") != "GET":
            body = self.server._json(raw)

            def alter(image: MetadataImage) -> Result[Any]:  # a PATCH edits the configs it commits to
                found = image.namespaces.get(physical)
                if found is None:  # deleted meanwhile
                    raise MetadataError("RESOURCE_NOT_FOUND", f"Namespace '{name}' does not exist.")
                current = dict(found.configs)
                new = self._changed(method, current, body, lambda k, v: (k, v))
                return namespace_rules.set_namespace_configs(image, physical, new)

            await self.server._store_call(self.store.decide_and_commit(alter))
        image = self.store.image
        entries = ns.resolve_layers(inheritance.namespace_layers(image, physical), self.broker_config())
        return 200, {"namespace": name, "configs": dict(sorted(image.namespaces[physical].configs.items())),
                     "effective": effective_json(entries)}

    @staticmethod
    def _target(body: dict[str, Any], key: str) -> str:
        target = body.get(key)
        if not isinstance(target, str):
            raise _error("INVALID_REQUEST", f"'{key}' must be a namespace name (\"\" for the default namespace)")
        return target

    async def _move(self, prefix: str, topics: list[str], target: str) -> tuple[int, Any]:
        if target:
            self._existing(prefix, target)
        plan = ns.plan_move(self.store.image, prefix, topics, target)
        moved = []
        n = len(prefix)
        for old, new in plan:
            info = await self.store.rename_topic(old, new)
            moved.append({"from": old[n:], "to": new[n:], "topic_id": str(info.topic_id)})
        return 200, {"namespace": target, "moved": moved}

    # -- tenant defaults and policy -----------------------------------------------------------

    async def _tenant_configs(self, method: str, tenant_id: str, raw: bytes, caller: str | None) -> tuple[int, Any]:
        """The tenant's topic config defaults and, the operator's alone, its cell
        (``shoal.placement.cells``: a tenant's administrator changing it is refused with 403)."""
        if self.server._allow(method, "GET", "PUT", "PATCH") != "GET":
            body = self.server._json(raw)
            defaults_body, cell_body = _split_cell(method, body)

            def alter(image: MetadataImage) -> Result[Any]:  # a PATCH edits the configs it commits to
                current = existing_tenant(image, tenant_id).configs
                new = self._changed(method, dict(cells.topic_defaults(current)), defaults_body, ns.tenant_default_key)
                return tenant_rules.update_tenant(image, tenant_id, configs={**new, **_cell_changed(
                    method, cells.cell_configs(current), cell_body, operator=caller is None)})

            await self.server._store_call(self.store.decide_and_commit(alter))
        return 200, {"tenant_id": tenant_id, "configs": dict(sorted(self.store.image.tenants[tenant_id].configs.items()))}

    async def _policy(self, method: str, tenant_id: str, raw: bytes) -> tuple[int, Any]:
        if self.server._allow(method, "GET", "PUT") == "PUT":
            body = self.server._json(raw)
            policy = body.get("policy")
            why = validate_policy(policy)
            if why is not None:
                raise _error("INVALID_REQUEST", why)
            await self.server._store_call(self.store.update_tenant(tenant_id, policy=policy))
        return 200, {"tenant_id": tenant_id, "policy": dict(self.store.image.tenants[tenant_id].policy)}

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _configs(value: Any, key: str, rename: Callable[[str, str | None], tuple[str, str | None]] | None = None) -> dict[str, str]:
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise _error("INVALID_REQUEST", f"'{key}' must map config names to string values")
        out: dict[str, str] = {}
        for k, v in value.items():
            name, val = rename(k, v) if rename is not None else (k, v)
            out[name] = val  # type: ignore[assignment]
        try:
            validate_topic_configs(out)
        except ConfigError as e:
            raise _error(e.code, e.message) from None
        return out

    def _changed(self, method: str, current: dict[str, str], body: dict[str, Any],
                 rename: Callable[[str, str | None], tuple[str, str | None]]) -> dict[str, str]:
        """PUT {"configs": {...}} replaces; PATCH {"set": {...}, "delete": [...]} changes."""
        if method == "PUT":
            return self._configs(body.get("configs"), "configs", rename)
        new = dict(current)
        deletes = body.get("delete", [])
        if not isinstance(deletes, list) or not all(isinstance(d, str) for d in deletes):
            raise _error("INVALID_REQUEST", "'delete' must be a list of config names")
        for d in deletes:
            new.pop(rename(d, None)[0], None)
        new.update(self._configs(body.get("set", {}), "set", rename))
        try:
            validate_topic_configs(new)
        except ConfigError as e:
            raise _error(e.code, e.message) from None
        return new


def _split_cell(method: str, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A tenant configs body as (its topic config defaults' part, its cell's part), each in the
    body's shape (PUT {"configs"}, PATCH {"set", "delete"}); malformed parts are left for
    ``_changed`` to refuse."""
    def split(value: Any) -> tuple[Any, dict[str, Any]]:
        if not isinstance(value, dict):
            return value, {}
        return ({k: v for k, v in value.items() if k not in cells.CELL_CONFIGS},
                {k: v for k, v in value.items() if k in cells.CELL_CONFIGS})

    if method == "PUT":
        configs, cell = split(body.get("configs"))
        return {"configs": configs}, {"configs": cell}
    sets, cell_sets = split(body.get("set", {}))
    deletes = body.get("delete", [])
    cell_deletes = [d for d in deletes if d in cells.CELL_CONFIGS] if isinstance(deletes, list) else []
    if isinstance(deletes, list):
        deletes = [d for d in deletes if d not in cells.CELL_CONFIGS]
    return {"set": sets, "delete": deletes}, {"set": cell_sets, "delete": cell_deletes}


def _cell_changed(method: str, current: dict[str, str], body: dict[str, Any], *, operator: bool) -> dict[str, str]:
    """The tenant's cell configs after ``body`` (``_split_cell``'s cell part), validated. A
    tenant's administrator may not change them (its PUT without them keeps them)."""
    if method == "PUT":
        new = dict(body["configs"]) if body["configs"] or operator else dict(current)
    else:
        new = {k: v for k, v in current.items() if k not in body["delete"]}
        new.update(body["set"])
    if new == current:
        return new
    if not operator:
        changed = sorted(k for k in cells.CELL_CONFIGS if new.get(k) != current.get(k))
        raise HttpError(403, "forbidden", operator_config_refused(changed[0]))
    if not all(isinstance(v, str) for v in new.values()):
        raise _error("INVALID_REQUEST", "the cell configs' values must be strings")
    try:
        cells.parse_cell(new)
    except cells.CellError as e:
        raise _error(e.code, e.message) from None
    return new


# -- OpenAPI ------------------------------------------------------------------------------------


def openapi_paths(ref: Callable[[str], dict[str, str]], resp: Callable[[str, str], dict[str, Any]],
                  errors: Callable[..., dict[str, Any]], body: Callable[[str], dict[str, Any]],
                  tenant_id: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(paths, schemas) of the endpoints above, built with ``shoal.admin.http.openapi``'s helpers."""
    namespace = {"name": "namespace", "in": "path", "required": True, "schema": {"type": "string"},
                 "description": "a namespace, tiers separated by ':' (payments:eu)"}
    topic = {"name": "topic", "in": "path", "required": True, "schema": {"type": "string"}}
    flag = {"type": "boolean", "default": False}
    string = {"type": "string"}
    str_map = {"type": "object", "additionalProperties": string}
    def configs_of(op: str, schema: str, summary: str) -> dict[str, Any]:
        return {
            "get": {"operationId": f"{op}Get", "summary": summary,
                    "responses": {"200": resp("Configs and effective values", schema), **errors(404)}},
            "put": {"operationId": f"{op}Replace", "summary": summary, "requestBody": body("ConfigsReplace"),
                    "responses": {"200": resp("The new configs", schema), **errors(400, 404)}},
            "patch": {"operationId": f"{op}Patch", "summary": summary, "requestBody": body("ConfigsPatch"),
                      "responses": {"200": resp("The new configs", schema), **errors(400, 404)}},
        }

    paths = {
        "/v1/tenants/{tenant_id}/namespaces": {
            "parameters": [tenant_id],
            "get": {"operationId": "listNamespaces", "summary": "The namespaces under a namespace",
                    "parameters": [{"name": "parent", "in": "query", "schema": string},
                                   {"name": "recursive", "in": "query", "schema": flag}],
                    "responses": {"200": resp("The namespaces", "NamespaceList"), **errors(404)}},
            "post": {"operationId": "createNamespace", "summary": "Create a namespace and every missing parent",
                     "requestBody": body("NamespaceCreate"),
                     "responses": {"201": resp("Created", "NamespaceCreated"), **errors(400, 404, 409)}},
        },
        "/v1/tenants/{tenant_id}/namespaces/{namespace}": {
            "parameters": [tenant_id, namespace],
            "get": {"operationId": "describeNamespace", "summary": "A namespace: configs, children, topics",
                    "responses": {"200": resp("The namespace", "Namespace"), **errors(404)}},
            "delete": {"operationId": "deleteNamespace",
                       "summary": "Delete a namespace and its topics (recursive: and everything under it)",
                       "parameters": [{"name": "recursive", "in": "query", "schema": flag}],
                       "responses": {"200": resp("What was deleted", "NamespaceDeleted"), **errors(404, 409)}},
        },
        "/v1/tenants/{tenant_id}/namespaces/{namespace}/configs": {
            "parameters": [tenant_id, namespace],
            **configs_of("namespaceConfigs", "NamespaceConfigs", "A namespace's configs (inherited by its topics)"),
        },
        "/v1/tenants/{tenant_id}/namespaces/{namespace}/move": {
            "parameters": [tenant_id, namespace],
            "post": {"operationId": "moveNamespaceTopics", "summary": "Move the namespace's topics to another",
                     "requestBody": body("MoveNamespace"),
                     "responses": {"200": resp("The moves", "Moved"), **errors(400, 404, 409)}},
        },
        "/v1/tenants/{tenant_id}/topics/{topic}/move": {
            "parameters": [tenant_id, topic],
            "post": {"operationId": "moveTopic", "summary": "Move a topic to another namespace (same id and data)",
                     "requestBody": body("MoveTopic"),
                     "responses": {"200": resp("The move", "Moved"), **errors(400, 404, 409)}},
        },
        "/v1/tenants/{tenant_id}/topics/{topic}/configs": {
            "parameters": [tenant_id, topic],
            "get": {"operationId": "topicEffectiveConfigs", "summary": "A topic's configs with their origins",
                    "responses": {"200": resp("The topic's configs", "TopicConfigs"), **errors(404)}},
        },
        "/v1/tenants/{tenant_id}/configs": {
            "parameters": [tenant_id],
            **configs_of("tenantConfigs", "TenantConfigs",
                         "The tenant's defaults for topic configs, and its cell "
                         "(shoal.tenant.cell.brokers / shoal.tenant.cell.racks: the operator's)"),
        },
        "/v1/tenants/{tenant_id}/policy": {
            "parameters": [tenant_id],
            "get": {"operationId": "getPolicy", "summary": "The tenant's create-topic policy",
                    "responses": {"200": resp("The policy", "TenantPolicy"), **errors(404)}},
            "put": {"operationId": "setPolicy", "summary": "Replace the tenant's create-topic policy",
                    "requestBody": body("TenantPolicy"),
                    "responses": {"200": resp("The policy", "TenantPolicy"), **errors(400, 404)}},
        },
    }
    effective = {"type": "array", "items": ref("EffectiveConfig")}
    schemas = {
        "NamespaceList": {"type": "object", "required": ["parent", "namespaces"],
                          "properties": {"parent": string, "namespaces": {"type": "array", "items": string}}},
        "NamespaceCreate": {"type": "object", "required": ["name"], "properties": {"name": string, "configs": str_map}},
        "NamespaceCreated": {"type": "object", "required": ["name", "created"],
                             "properties": {"name": string, "created": {"type": "array", "items": string},
                                            "configs": str_map}},
        "Namespace": {"type": "object", "required": ["name", "configs", "namespaces", "topics"],
                      "properties": {"name": string, "configs": str_map,
                                     "namespaces": {"type": "array", "items": string},
                                     "topics": {"type": "array", "items": string}}},
        "NamespaceDeleted": {"type": "object", "required": ["deleted_namespaces", "deleted_topics"],
                             "properties": {"deleted_namespaces": {"type": "array", "items": string},
                                            "deleted_topics": {"type": "array", "items": string}}},
        "ConfigsReplace": {"type": "object", "required": ["configs"], "properties": {"configs": str_map}},
        "ConfigsPatch": {"type": "object", "properties": {"set": str_map, "delete": {"type": "array", "items": string}}},
        "EffectiveConfig": {"type": "object", "required": ["name", "value", "source", "origin"],
                            "properties": {"name": string, "value": {"type": "string", "nullable": True},
                                           "source": string,
                                           "origin": {"type": "string", "enum": [inheritance.TOPIC, inheritance.NAMESPACE, inheritance.TENANT_DEFAULT,
                                                                                 ns.BROKER_DYNAMIC, ns.BROKER_STATIC, ns.DEFAULT]},
                                           "where": {"type": "string", "nullable": True},
                                           "layers": {"type": "array", "items": {"type": "object"}}}},
        "NamespaceConfigs": {"type": "object", "required": ["namespace", "configs", "effective"],
                             "properties": {"namespace": string, "configs": str_map, "effective": effective}},
        "TopicConfigs": {"type": "object", "required": ["topic", "configs", "effective"],
                         "properties": {"topic": string, "configs": str_map, "effective": effective}},
        "TenantConfigs": {"type": "object", "required": ["tenant_id", "configs"],
                          "properties": {"tenant_id": string, "configs": str_map}},
        "TenantPolicy": {"type": "object", "required": ["policy"],
                         "properties": {"tenant_id": string, "policy": {"type": "object"}}},
        "MoveTopic": {"type": "object", "required": ["namespace"], "properties": {"namespace": string}},
        "MoveNamespace": {"type": "object", "required": ["to"], "properties": {"to": string}},
        "Moved": {"type": "object", "required": ["namespace", "moved"],
                  "properties": {"namespace": string, "moved": {"type": "array", "items": {
                      "type": "object", "properties": {"from": string, "to": string, "topic_id": string}}}}},
    }
    return paths, schemas
