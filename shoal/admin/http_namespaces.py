"""The HTTP admin API's tenancy endpoints: KIP-37 namespaces, topic moves, tenant config defaults
and the create-topic policy (``TenancyRoutes``' endpoints, served by ``shoal.admin.http``).

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

from typing import TYPE_CHECKING, Annotated, Any, Awaitable, Callable, Literal

from pydantic import BeforeValidator, Field

from shoal.admin.http_errors import HttpError
from shoal.admin.http_routes import Model, TenantId, endpoint
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

_STATUS = {
    "RESOURCE_NOT_FOUND": (404, "not_found"),
    "UNKNOWN_TOPIC_OR_PARTITION": (404, "not_found"),
    "NAMESPACE_NOT_EMPTY": (409, "conflict"),
    "TOPIC_ALREADY_EXISTS": (409, "conflict"),
}


def _error(code: str, message: str) -> Exception:
    status, kind = _STATUS.get(code, (400, "bad_request"))
    return HttpError(status, kind, message)

def _flag(value: Any) -> Any:
    if isinstance(value, str):
        if value.lower() not in ("true", "false", "1", "0", ""):
            raise ValueError("must be true or false")
        return value.lower() in ("true", "1", "")
    return value


Flag = Annotated[bool, BeforeValidator(_flag)]
NamespaceName = Annotated[str, Field(description="a namespace, tiers separated by ':' (payments:eu)")]
StrMap = dict[str, str]


# -- models -------------------------------------------------------------------------------------


class ListQuery(Model):
    parent: str = Field("", description="list under this namespace (default: the top)")
    recursive: Flag = Field(False, description="and everything under them")


class DeleteQuery(Model):
    recursive: Flag = Field(False, description="with its child namespaces and their topics")


class NamespaceList(Model):
    parent: str
    namespaces: list[str]


class NamespaceCreate(Model):
    name: str
    configs: StrMap = {}


class NamespaceCreated(Model):
    name: str
    created: list[str]
    configs: StrMap = {}


class Namespace(Model):
    name: str
    configs: StrMap
    namespaces: list[str]
    topics: list[str]


class NamespaceDeleted(Model):
    deleted_namespaces: list[str]
    deleted_topics: list[str]


class ConfigsReplace(Model):
    configs: StrMap


class ConfigsPatch(Model):
    set: StrMap = {}
    delete: list[str] = []


class ConfigLayer(Model):
    origin: str
    where: str | None
    value: str | None


class EffectiveConfig(Model):
    name: str
    value: str | None
    source: str
    origin: Literal[inheritance.TOPIC, inheritance.NAMESPACE, inheritance.TENANT_DEFAULT,  # type: ignore[valid-type]
                    ns.BROKER_DYNAMIC, ns.BROKER_STATIC, ns.DEFAULT]
    where: str | None = None
    layers: list[ConfigLayer] = []


class NamespaceConfigs(Model):
    namespace: str
    configs: StrMap
    effective: list[EffectiveConfig]


class TopicConfigs(Model):
    topic: str
    configs: StrMap
    effective: list[EffectiveConfig]


class TenantConfigs(Model):
    tenant_id: str
    configs: StrMap


class TenantPolicy(Model):
    tenant_id: str = ""
    policy: dict[str, Any]


class MoveTopic(Model):
    namespace: str = Field(description='the namespace to move to ("" for the default namespace)')


class MoveNamespace(Model):
    to: str = Field(description='the namespace to move to ("" for the default namespace)')


class MovedTopic(Model):
    from_: str = Field(serialization_alias="from")
    to: str
    topic_id: str


class Moved(Model):
    namespace: str
    moved: list[MovedTopic]


def effective(entries: list[ns.EffectiveConfig]) -> list[EffectiveConfig]:
    return [EffectiveConfig(name=e.name, value=e.value, source=e.label, origin=e.origin, where=e.where,
                            layers=[ConfigLayer(origin=o, where=w, value=v) for o, w, v in e.layers])
            for e in entries]


_CONFIGS_OF = "A namespace's configs (inherited by its topics)"
_TENANT_CONFIGS = ("The tenant's defaults for topic configs, and its cell (shoal.tenant.cell.brokers / "
                   "shoal.tenant.cell.racks: the operator's)")


class TenancyRoutes:
    """The endpoints above, on one ``AdminHttpServer`` (its store and its broker config)."""

    def __init__(self, server: "AdminHttpServer", broker_config: Callable[[], BrokerConfig] | None) -> None:
        self.server = server
        self.broker_config = broker_config or BrokerConfig

    @property
    def store(self) -> Any:
        return self.server.store

    async def around(self, call: Awaitable[Model], kwargs: dict[str, Any]) -> Model:
        """Every endpoint here: 404 for an unknown tenant first, the store's refusals as HTTP's."""
        try:
            self.server._tenant(kwargs["tenant_id"])
        except HttpError:
            call.close()  # type: ignore[attr-defined]  # (a coroutine never awaited)
            raise
        try:
            return await call
        except ns.NamespaceError as e:
            raise _error(e.code, e.message) from None
        except MetadataError as e:
            raise _error(e.code, e.message) from None

    # -- namespaces ---------------------------------------------------------------------------

    @endpoint("GET", "/v1/tenants/{tenant_id}/namespaces", op="listNamespaces",
              summary="The namespaces under a namespace", errors=[404])
    async def list_namespaces(self, tenant_id: TenantId, query: ListQuery) -> NamespaceList:
        prefix = tenant_prefix(tenant_id)
        if query.parent:
            self._existing(prefix, query.parent)
        names = ns.children(self.store.image, prefix, query.parent, recursive=query.recursive)
        return NamespaceList(parent=query.parent, namespaces=names)

    @endpoint("POST", "/v1/tenants/{tenant_id}/namespaces", op="createNamespace", status=201,
              summary="Create a namespace and every missing parent", errors=[400, 404, 409])
    async def create_namespace(self, tenant_id: TenantId, body: NamespaceCreate) -> NamespaceCreated:
        prefix = tenant_prefix(tenant_id)
        name = body.name
        configs = self._configs(body.configs, "configs")
        missing = ns.plan_create(self.store.image, prefix, name)
        if prefix + name not in missing:
            raise _error("TOPIC_ALREADY_EXISTS", f"Namespace '{name}' already exists.")
        await self.store.create_namespaces(missing)
        if configs:
            await self.store.set_namespace_configs(prefix + name, configs)
        return NamespaceCreated(name=name, created=[n[len(prefix):] for n in missing], configs=configs)

    @endpoint("GET", "/v1/tenants/{tenant_id}/namespaces/{namespace}", op="describeNamespace",
              summary="A namespace: configs, children, topics", errors=[404])
    async def describe_namespace(self, tenant_id: TenantId, namespace: NamespaceName) -> Namespace:
        prefix = tenant_prefix(tenant_id)
        self._existing(prefix, namespace)
        image = self.store.image
        return Namespace(name=namespace, configs=dict(sorted(image.namespaces[prefix + namespace].configs.items())),
                         namespaces=ns.children(image, prefix, namespace),
                         topics=ns.topics_in(image, prefix, namespace))

    @endpoint("DELETE", "/v1/tenants/{tenant_id}/namespaces/{namespace}", op="deleteNamespace",
              summary="Delete a namespace and its topics (recursive: and everything under it)", errors=[404, 409])
    async def delete_namespace(self, tenant_id: TenantId, namespace: NamespaceName,
                               query: DeleteQuery) -> NamespaceDeleted:
        prefix = tenant_prefix(tenant_id)
        self._existing(prefix, namespace)

        def delete(image: MetadataImage) -> Result[Any]:  # the topics created meanwhile go too
            plan = ns.plan_delete(image, prefix, namespace, recursive=query.recursive)
            r = namespace_rules.delete_namespaces(image, list(plan.namespaces), list(plan.topics))
            return Result(r.change, plan)

        plan = await self.store.decide_and_commit(delete)
        n = len(prefix)
        return NamespaceDeleted(deleted_namespaces=[x[n:] for x in plan.namespaces],
                                deleted_topics=[x[n:] for x in plan.topics])

    @endpoint("GET", "/v1/tenants/{tenant_id}/namespaces/{namespace}/configs", op="namespaceConfigsGet",
              summary=_CONFIGS_OF, errors=[404])
    async def namespace_configs(self, tenant_id: TenantId, namespace: NamespaceName) -> NamespaceConfigs:
        return await self._namespace_configs("GET", tenant_prefix(tenant_id), namespace, None)

    @endpoint("PUT", "/v1/tenants/{tenant_id}/namespaces/{namespace}/configs", op="namespaceConfigsReplace",
              summary=_CONFIGS_OF, errors=[400, 404])
    async def replace_namespace_configs(self, tenant_id: TenantId, namespace: NamespaceName,
                                        body: ConfigsReplace) -> NamespaceConfigs:
        return await self._namespace_configs("PUT", tenant_prefix(tenant_id), namespace, body)

    @endpoint("PATCH", "/v1/tenants/{tenant_id}/namespaces/{namespace}/configs", op="namespaceConfigsPatch",
              summary=_CONFIGS_OF, errors=[400, 404])
    async def patch_namespace_configs(self, tenant_id: TenantId, namespace: NamespaceName,
                                      body: ConfigsPatch) -> NamespaceConfigs:
        return await self._namespace_configs("PATCH", tenant_prefix(tenant_id), namespace, body)

    @endpoint("POST", "/v1/tenants/{tenant_id}/namespaces/{namespace}/move", op="moveNamespaceTopics",
              summary="Move the namespace's topics to another", errors=[400, 404, 409])
    async def move_namespace(self, tenant_id: TenantId, namespace: NamespaceName, body: MoveNamespace) -> Moved:
        prefix = tenant_prefix(tenant_id)
        self._existing(prefix, namespace)
        return await self._move(prefix, ns.topics_in(self.store.image, prefix, namespace), body.to)

    @endpoint("POST", "/v1/tenants/{tenant_id}/topics/{topic}/move", op="moveTopic",
              summary="Move a topic to another namespace (same id and data)", errors=[400, 404, 409])
    async def move_topic(self, tenant_id: TenantId, topic: str, body: MoveTopic) -> Moved:
        return await self._move(tenant_prefix(tenant_id), [topic], body.namespace)

    @endpoint("GET", "/v1/tenants/{tenant_id}/topics/{topic}/configs", op="topicEffectiveConfigs",
              summary="A topic's configs with their origins", errors=[404])
    async def topic_configs(self, tenant_id: TenantId, topic: str) -> TopicConfigs:
        physical = tenant_prefix(tenant_id) + topic
        image = self.store.image
        if physical not in image.topics:
            raise _error("UNKNOWN_TOPIC_OR_PARTITION", f"Topic '{topic}' does not exist.")
        entries = ns.effective_topic_config(image, physical, self.broker_config())
        return TopicConfigs(topic=topic, configs=dict(image.topics[physical].configs), effective=effective(entries))

    def _existing(self, prefix: str, name: str) -> None:
        why = ns.namespace_name_error(name)
        if why is not None:
            raise _error("INVALID_REQUEST", why)
        if prefix + name not in self.store.image.namespaces:
            raise _error("RESOURCE_NOT_FOUND", f"Namespace '{name}' does not exist.")

    async def _namespace_configs(self, method: str, prefix: str, name: str,
                                 body: ConfigsReplace | ConfigsPatch | None) -> NamespaceConfigs:
        self._existing(prefix, name)
        physical = prefix + name
        if body is not None:
            change = body.model_dump()

            def alter(image: MetadataImage) -> Result[Any]:  # a PATCH edits the configs it commits to
                found = image.namespaces.get(physical)
                if found is None:  # deleted meanwhile
                    raise MetadataError("RESOURCE_NOT_FOUND", f"Namespace '{name}' does not exist.")
                new = self._changed(method, dict(found.configs), change, lambda k, v: (k, v))
                return namespace_rules.set_namespace_configs(image, physical, new)

            await self.server._store_call(self.store.decide_and_commit(alter))
        image = self.store.image
        entries = ns.resolve_layers(inheritance.namespace_layers(image, physical), self.broker_config())
        return NamespaceConfigs(namespace=name, configs=dict(sorted(image.namespaces[physical].configs.items())),
                                effective=effective(entries))

    async def _move(self, prefix: str, topics: list[str], target: str) -> Moved:
        if target:
            self._existing(prefix, target)
        plan = ns.plan_move(self.store.image, prefix, topics, target)
        moved = []
        n = len(prefix)
        for old, new in plan:
            info = await self.store.rename_topic(old, new)
            moved.append(MovedTopic(from_=old[n:], to=new[n:], topic_id=str(info.topic_id)))
        return Moved(namespace=target, moved=moved)

    # -- tenant defaults and policy -----------------------------------------------------------

    @endpoint("GET", "/v1/tenants/{tenant_id}/configs", op="tenantConfigsGet", summary=_TENANT_CONFIGS, errors=[404])
    async def tenant_configs(self, tenant_id: TenantId) -> TenantConfigs:
        return self._tenant_configs_out(tenant_id)

    @endpoint("PUT", "/v1/tenants/{tenant_id}/configs", op="tenantConfigsReplace", summary=_TENANT_CONFIGS,
              errors=[400, 403, 404])
    async def replace_tenant_configs(self, tenant_id: TenantId, body: ConfigsReplace,
                                     caller: str | None) -> TenantConfigs:
        return await self._tenant_configs("PUT", tenant_id, body, caller)

    @endpoint("PATCH", "/v1/tenants/{tenant_id}/configs", op="tenantConfigsPatch", summary=_TENANT_CONFIGS,
              errors=[400, 403, 404])
    async def patch_tenant_configs(self, tenant_id: TenantId, body: ConfigsPatch, caller: str | None) -> TenantConfigs:
        return await self._tenant_configs("PATCH", tenant_id, body, caller)

    async def _tenant_configs(self, method: str, tenant_id: str, body: ConfigsReplace | ConfigsPatch,
                              caller: str | None) -> TenantConfigs:
        """The tenant's topic config defaults and, the operator's alone, its cell
        (``shoal.placement.cells``: a tenant's administrator changing it is refused with 403)."""
        defaults_body, cell_body = _split_cell(method, body.model_dump())

        def alter(image: MetadataImage) -> Result[Any]:  # a PATCH edits the configs it commits to
            current = existing_tenant(image, tenant_id).configs
            new = self._changed(method, dict(cells.topic_defaults(current)), defaults_body, ns.tenant_default_key)
            return tenant_rules.update_tenant(image, tenant_id, configs={**new, **_cell_changed(
                method, cells.cell_configs(current), cell_body, operator=caller is None)})

        await self.server._store_call(self.store.decide_and_commit(alter))
        return self._tenant_configs_out(tenant_id)

    def _tenant_configs_out(self, tenant_id: str) -> TenantConfigs:
        return TenantConfigs(tenant_id=tenant_id, configs=dict(sorted(self.store.image.tenants[tenant_id].configs.items())))

    @endpoint("GET", "/v1/tenants/{tenant_id}/policy", op="getPolicy", summary="The tenant's create-topic policy",
              errors=[404])
    async def policy(self, tenant_id: TenantId) -> TenantPolicy:
        return TenantPolicy(tenant_id=tenant_id, policy=dict(self.store.image.tenants[tenant_id].policy))

    @endpoint("PUT", "/v1/tenants/{tenant_id}/policy", op="setPolicy", summary="Replace the tenant's create-topic policy",
              errors=[400, 403, 404])
    async def set_policy(self, tenant_id: TenantId, body: TenantPolicy) -> TenantPolicy:
        why = validate_policy(body.policy)
        if why is not None:
            raise _error("INVALID_REQUEST", why)
        await self.server._store_call(self.store.update_tenant(tenant_id, policy=body.policy))
        return await self.policy(tenant_id)


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
