"""The console's tenant pages: topics, messages, consumer groups (the operator's: ``shoal.console.operator``).

Each handler asks the session's Kafka client (``shoal.console.kafka``) and renders a template. A
topic or group the user does not see (it does not exist in its view, or it may not describe it)
is a 404, whichever it is, as the broker answers both the same way. A state-changing form posts,
then redirects (303) to a page that shows its outcome.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from shoal.client import AclBinding, AclFilter, AdminClient, KafkaError, TopicDescription
from shoal.console import kafka
from shoal.console.common import LAG, flash, form, paginate, redirect, render, session_of, why
from shoal.console.formats import parse_when
from shoal.console.lag import plot
from shoal.console.sessions import Session
from shoal.metadata import tenant_prefix

NOT_VISIBLE = frozenset({"UNKNOWN_TOPIC_OR_PARTITION", "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
                         "GROUP_ID_NOT_FOUND", "INVALID_TOPIC_EXCEPTION"})
FORMATS = ("text", "json", "hex")
RESET_MODES = {"to_earliest": "the earliest offset", "to_latest": "the latest offset",
               "to_offset": "an offset", "to_datetime": "a time (UTC)", "shift_by": "a shift of N"}


def client_of(request: web.Request) -> AdminClient:
    return session_of(request).client


def not_found(request: web.Request, what: str) -> web.Response:
    return render(request, "notfound.html", status=404, what=what)


async def _visible(request: web.Request, topic: str) -> bool:
    md = await client_of(request).metadata([topic])
    return isinstance(md.topics.get(topic), TopicDescription)


async def topic_post(request: web.Request) -> tuple[str, dict[str, str]]:
    """The topic a form acts on and the form's fields; 404 when the user does not see the topic."""
    name = request.match_info["topic"]
    if not await _visible(request, name):
        raise web.HTTPNotFound(text=not_found(request, f"topic {name}").text, content_type="text/html")
    return name, await form(request)


def _int(fields: dict[str, str], name: str, default: int | None = None) -> int | None:
    text = (fields.get(name) or "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {text!r}") from None


# -- topics ---------------------------------------------------------------------------------------

async def topics_page(request: web.Request, error: str | None = None, values: dict[str, str] | None = None,
                      status: int = 200) -> web.Response:
    client = client_of(request)
    md = await client.metadata(None)
    names = sorted(n for n, t in md.topics.items() if isinstance(t, TopicDescription))
    pager, shown = paginate(request, names)
    rows, _raw = await kafka.topics_overview(client, md, shown)
    return render(request, "topics.html", status=status, rows=rows, pager=pager, error=error, values=values or {})


async def create_topic(request: web.Request) -> web.StreamResponse:
    fields = await form(request)
    name = fields.get("name", "").strip()
    try:
        if not name:
            raise ValueError("a topic needs a name")
        partitions = _int(fields, "partitions", -1)
        replication = _int(fields, "replication_factor", -1)
        configs = kafka.parse_configs(fields.get("configs", ""))
        await kafka.create_topic(client_of(request), name, partitions or -1, replication or -1, configs)
    except ValueError as e:
        return await topics_page(request, str(e), fields, 400)
    except KafkaError as e:
        return await topics_page(request, f"Topic {name} not created: {why(e)}", fields, 400)
    flash(request, "ok", f"Topic {name} created.")
    raise redirect(request, "topic", topic=name)


async def topic_page(request: web.Request) -> web.Response:
    name = request.match_info["topic"]
    try:
        detail = await kafka.topic_detail(client_of(request), name)
    except KafkaError as e:
        if e.code_name in NOT_VISIBLE:
            detail = None
        else:
            raise
    if detail is None:
        return not_found(request, f"topic {name}")
    return render(request, "topic.html", topic=detail)


async def topic_config(request: web.Request) -> web.StreamResponse:
    name, fields = await topic_post(request)
    key = fields.get("key", "").strip()
    reset = fields.get("action") == "reset"
    try:
        if not key:
            raise ValueError("name the config to change")
        await kafka.alter_config(client_of(request), name, key, None if reset else fields.get("value", "").strip())
        flash(request, "ok", f"{key} reset to its default." if reset else f"{key} set.")
    except (ValueError, KafkaError) as e:
        flash(request, "error", f"{key} not changed: {why(e)}")
    raise redirect(request, "topic", topic=name)


async def delete_topic(request: web.Request) -> web.StreamResponse:
    name, fields = await topic_post(request)
    if fields.get("confirm", "") != name:
        flash(request, "error", f"Topic {name} not deleted: type its name to confirm.")
        raise redirect(request, "topic", topic=name)
    try:
        await kafka.delete_topic(client_of(request), name)
    except KafkaError as e:
        flash(request, "error", f"Topic {name} not deleted: {why(e)}")
        raise redirect(request, "topic", topic=name)
    flash(request, "ok", f"Topic {name} deleted.")
    raise redirect(request, "topics")


# -- messages -------------------------------------------------------------------------------------

async def messages_page(request: web.Request) -> web.Response:
    name = request.match_info["topic"]
    q = dict(request.query)
    client = client_of(request)
    md = await client.metadata([name])
    topic = md.topics.get(name)
    if not isinstance(topic, TopicDescription):
        return not_found(request, f"topic {name}")
    fmt = q.get("format", "text")
    fmt = fmt if fmt in FORMATS else "text"
    newest = q.get("order", "newest") != "oldest"
    error = None
    result = None
    partition = 0
    try:
        partition = _int(q, "partition", 0) or 0
        if partition not in {p.partition for p in topic.partitions}:
            partition, wanted = 0, partition
            raise ValueError(f"{name} has no partition {wanted}")
        offset = _int(q, "offset")
        timestamp = parse_when(q["time"]) if q.get("time", "").strip() and offset is None else None
        limit = _int(q, "limit", 50) or 50
        key = q["key"].encode() if q.get("key") else None
        result = await kafka.browse(client, name, partition, offset=offset, timestamp_ms=timestamp,
                                    newest_first=newest, limit=limit, key=key)
    except (ValueError, KafkaError) as e:
        error = why(e)
    shown = [
        {"m": m, "key": kafka.render_bytes(m.key, fmt), "value": kafka.render_bytes(m.value, fmt),
         "headers": [(k, kafka.render_bytes(v, "text")[1] if v is not None else None) for k, v in m.headers]}
        for m in (result.messages if result else [])
    ]
    return render(request, "messages.html", topic=topic, query=q, fmt=fmt, newest=newest, result=result,
                  shown=shown, error=error, partition=partition, formats=FORMATS)


def _headers(text: str) -> list[tuple[str, bytes | None]]:
    out: list[tuple[str, bytes | None]] = []
    for line in text.splitlines():
        if line.strip():
            k, sep, v = line.partition("=")
            if not k.strip():
                raise ValueError(f"a header needs a name: {line!r}")
            out.append((k.strip(), v.encode() if sep else None))
    return out


async def produce(request: web.Request) -> web.StreamResponse:
    name, fields = await topic_post(request)
    partition = 0
    try:
        partition = _int(fields, "partition", 0) or 0
        key = fields["key"].encode() if fields.get("key") else None
        value = fields.get("value", "").encode()
        offset = await kafka.produce(client_of(request), name, partition, key, value,
                                     _headers(fields.get("headers", "")))
        flash(request, "ok", f"Produced a record to {name}-{partition} at offset {offset}.")
    except (ValueError, KafkaError) as e:
        flash(request, "error", f"Not produced: {why(e)}")
    raise redirect(request, "messages", {"partition": partition, "order": "newest"}, topic=name)


# -- consumer groups ------------------------------------------------------------------------------

async def groups_page(request: web.Request) -> web.Response:
    client = client_of(request)
    listings = {g.group_id: g for g in await client.list_groups()}
    pager, shown = paginate(request, sorted(listings))
    rows = await kafka.groups_overview(client, [listings[g] for g in shown])
    return render(request, "groups.html", rows=rows, pager=pager)


async def _group(request: web.Request, group: str) -> kafka.GroupDetail | None:
    try:
        return await kafka.group_detail(client_of(request), group)
    except KafkaError as e:
        if e.code_name in NOT_VISIBLE:
            return None
        raise


async def group_page(request: web.Request) -> web.Response:
    group = request.match_info["group"]
    detail = await _group(request, group)
    if detail is None:
        return not_found(request, f"group {group}")
    refresh = _refresh(request.query.get("refresh"))
    sampler = request.app[LAG]
    session = session_of(request)
    # the user's request for the group succeeded: it may see the group's history (a tenant's
    # groups are kept under their physical names)
    physical = group if not sampler.cluster_wide else await _physical_group(session, group)
    samples = sampler.opened(session, group, physical, detail.total_lag)
    lag_plot = plot(samples, sampler.clock(), sampler.window_s, width=1080, height=150)
    return render(request, "group.html", group=detail, modes=RESET_MODES, refresh=refresh, lag_plot=lag_plot,
                  interval=sampler.interval_s, cluster_wide=sampler.cluster_wide)


async def _physical_group(session: Session, group: str) -> str:
    """The physical name of the group ``session``'s user calls ``group``: with its tenant's
    prefix (``Session.tenant``)."""
    tid = await session.tenant()
    return tenant_prefix(tid) + group if tid is not None else group


def _refresh(value: str | None) -> int | None:
    try:
        seconds = int(value or "")
    except ValueError:
        return None
    return max(2, min(300, seconds))


async def reset_group(request: web.Request) -> web.StreamResponse:
    group = request.match_info["group"]
    if await _group(request, group) is None:
        return not_found(request, f"group {group}")
    fields = await form(request)
    mode = fields.get("mode", "")
    try:
        if mode not in RESET_MODES:
            raise ValueError(f"unknown reset {mode!r}")
        value: int | None = None
        if mode == "to_datetime":
            value = parse_when(fields.get("value", ""))
        elif mode in ("to_offset", "shift_by"):
            value = _int(fields, "value")
            if value is None:
                raise ValueError("give the offset or the shift")
        plan = await kafka.reset_offsets(client_of(request), group, mode, value)
        flash(request, "ok", f"Offsets of {group} reset on {len(plan)} partitions.")
    except (ValueError, KafkaError) as e:
        flash(request, "error", f"Offsets not reset: {why(e)}")
    raise redirect(request, "group", group=group)


# -- ACLs -----------------------------------------------------------------------------------------

ACL_RESOURCES = ("TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "NAMESPACE")
ACL_PATTERNS = ("LITERAL", "PREFIXED")
ACL_OPERATIONS = ("ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS",
                  "ALTER_CONFIGS", "IDEMPOTENT_WRITE")


async def acls_page(request: web.Request) -> web.Response:
    rows: list[kafka.AclRow] = []
    off = None
    try:
        rows = await kafka.acls(client_of(request))
    except KafkaError as e:
        if e.code_name != "SECURITY_DISABLED":
            raise
        off = "ACLs are not enabled on this cluster: every user of the tenant may do everything in it."
    return render(request, "acls.html", rows=rows, off=off, resources=ACL_RESOURCES, patterns=ACL_PATTERNS,
                  operations=ACL_OPERATIONS)


def _binding(fields: dict[str, str]) -> AclBinding:
    """The ACL binding a form names (Kafka's names for its codes); ValueError for a bad field."""
    from shoal.tenancy.acl import CLUSTER_NAME, Operation, PatternType, Permission, ResourceType

    def code(enum: Any, key: str, allowed: tuple[str, ...]) -> int:
        value = fields.get(key, "").strip().upper()
        if value not in allowed:
            raise ValueError(f"{key.replace('_', ' ')} must be one of {', '.join(allowed)}")
        return int(enum[value])

    resource = code(ResourceType, "resource_type", ACL_RESOURCES)
    name = CLUSTER_NAME if resource == ResourceType.CLUSTER else fields.get("resource_name", "").strip()
    principal = fields.get("principal", "").strip()
    if not name:
        raise ValueError("name the resource")
    if not principal.startswith("User:") or len(principal) == len("User:"):
        raise ValueError("a principal is User:<name> (or User:* for everyone)")
    return AclBinding(resource, name, code(PatternType, "pattern_type", ACL_PATTERNS), principal,
                      fields.get("host", "").strip() or "*", code(Operation, "operation", ACL_OPERATIONS),
                      code(Permission, "permission", ("ALLOW", "DENY")))


async def acl_add(request: web.Request) -> web.StreamResponse:
    fields = await form(request)
    try:
        b = _binding(fields)
        await client_of(request).create_acls([b])
        flash(request, "ok", f"ACL added: {kafka.acl_row(b).permission} {b.principal} {kafka.acl_row(b).operation} "
                             f"on {kafka.acl_row(b).resource_type} {b.resource_name}.")
    except (ValueError, KafkaError) as e:
        flash(request, "error", f"ACL not added: {why(e)}")
    raise redirect(request, "acls")


async def acl_delete(request: web.Request) -> web.StreamResponse:
    fields = await form(request)
    try:
        b = _binding(fields)
        got = await client_of(request).delete_acls([AclFilter(b.resource_type, b.resource_name, b.pattern_type,
                                                              b.principal, b.host, b.operation, b.permission_type)])
        deleted = next(iter(got.values()))
        flash(request, "ok" if deleted else "error", "ACL removed." if deleted else "No such ACL (already removed?).")
    except (ValueError, KafkaError) as e:
        flash(request, "error", f"ACL not removed: {why(e)}")
    raise redirect(request, "acls")


def add_routes(r: web.UrlDispatcher) -> None:
    res = r.add_resource("/topics", name="topics")
    res.add_route("GET", topics_page)
    res.add_route("POST", create_topic)
    r.add_get("/topics/{topic}", topic_page, name="topic")
    r.add_post("/topics/{topic}/config", topic_config, name="topic_config")
    r.add_post("/topics/{topic}/delete", delete_topic, name="topic_delete")
    r.add_get("/topics/{topic}/messages", messages_page, name="messages")
    r.add_post("/topics/{topic}/produce", produce, name="produce")
    r.add_get("/groups", groups_page, name="groups")
    r.add_get("/groups/{group}", group_page, name="group")
    r.add_post("/groups/{group}/reset", reset_group, name="group_reset")
    res = r.add_resource("/acls", name="acls")
    res.add_route("GET", acls_page)
    res.add_route("POST", acl_add)
    r.add_post("/acls/delete", acl_delete, name="acl_delete")
