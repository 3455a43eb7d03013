"""What the console reads and does, as the logged-in user, over the Kafka protocol.

Every page is made of Kafka requests sent by Shoal's own admin client (``shoal.client``) on
connections authenticated with the user's SASL/SCRAM credentials, so the broker's handlers scope
and authorize them exactly as they do any Kafka client of that user: a tenant's user sees its
logical cluster and nothing else, the operator (a super user on the physical cluster) sees the
physical one. Partition-level requests (Fetch, Produce, ListOffsets) go to each partition's leader
and group requests to the group's coordinator, found through Metadata and FindCoordinator, as any
client does: the console works the same on one broker or a cluster.

The functions here take an :class:`~shoal.client.AdminClient` and return plain values for the
templates (``shoal.console.pages``); they never see HTTP.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from shoal.client import (
    CONFIG_SOURCES, EARLIEST, AclBinding, AclFilter, LATEST, OP_DELETE, OP_SET, RESOURCE_TOPIC, AdminClient, ClusterMetadata, ConfigEntry, GroupDescription, GroupListing,
    KafkaError, TopicDescription,
)
from shoal.cli.common import observer_count as cli_observer_count
from shoal.protocol import codec
from shoal.protocol.records import build_batch, iter_batch_records, parse_batches

PRODUCE, FETCH, LIST_OFFSETS, DESCRIBE_CONFIGS, DESCRIBE_LOG_DIRS = 0, 1, 2, 32, 35
OFFSET_FETCH, FIND_COORDINATOR, DESCRIBE_GROUPS, CONSUMER_GROUP_DESCRIBE = 9, 10, 15, 69
RATE_WINDOW_MS = 60_000  # messages/s "now": over the last minute (ListOffsets by timestamp)
FETCH_MAX_BYTES = 1 << 20
SEARCH_MAX_RECORDS = 10_000  # a key search scans at most this many records
MAX_LIMIT = 500

TopicPartition = tuple[str, int]


# -- topics ---------------------------------------------------------------------------------------

@dataclass
class TopicRow:
    name: str
    partitions: int
    replication_factor: int
    observers: int
    racks: tuple[str, ...]
    size: int | None  # bytes in the leaders' logs (None: DescribeLogDirs refused)
    messages: int | None  # end - start offsets
    retention_ms: str | None
    retention_bytes: str | None
    cleanup_policy: str | None
    messages_per_s: float | None
    bytes_per_s: float | None  # messages/s x the log's mean record size: an estimate


@dataclass
class PartitionRow:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    observers: tuple[int, ...]
    offline: tuple[int, ...]
    racks: tuple[str, ...]
    earliest: int | None
    latest: int | None
    size: int | None


@dataclass
class TopicDetail:
    row: TopicRow
    topic_id: str | None
    partitions: list[PartitionRow]
    configs: list[ConfigEntry]


def observer_count(entries: Mapping[str, ConfigEntry] | None) -> int:
    """Observers per partition of a topic placed by ``replica.placement`` (``shoal topics describe``'s)."""
    return cli_observer_count(entries) if entries and "replica.placement" in entries else 0


def _leaders(md: ClusterMetadata, tps: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
    """The partitions of ``tps`` by leader, as ``md`` has them (partitions without one left out)."""
    leaders = {(n, p.partition): p.leader for n, t in md.topics.items() if isinstance(t, TopicDescription)
               for p in t.partitions}
    out: dict[int, list[TopicPartition]] = {}
    for tp in tps:
        leader = leaders.get(tp, -1)
        if leader >= 0:
            out.setdefault(leader, []).append(tp)
    return out


async def offsets_at(client: AdminClient, md: ClusterMetadata, tps: Iterable[TopicPartition],
                     *timestamps: int) -> list[dict[TopicPartition, int]]:
    """For each of ``timestamps`` (EARLIEST, LATEST or a time), each partition's offset (-1: no
    record that late), from one ListOffsets per leader and timestamp, all in flight at once
    (partitions whose leader refuses are left out). The entities are built directly, which a
    thousand partitions need (the client's dict-to-entity conversion costs ~60 ms there)."""
    version = min(client.version_for(LIST_OFFSETS), 8)
    request = codec.request_type(LIST_OFFSETS, version)
    mod = sys.modules[request.__module__]
    by_leader = _leaders(md, tps)

    async def one(node: int, part: list[TopicPartition], ts: int) -> dict[TopicPartition, int]:
        topics: dict[str, list[Any]] = {}
        for t, p in part:
            topics.setdefault(t, []).append(codec.build(mod.ListOffsetsPartition, partition_index=p,
                                                        current_leader_epoch=-1, timestamp=ts, max_num_offsets=1))
        body = codec.build(request, replica_id=-1, isolation_level=0, timeout=int(client.timeout * 1000),
                           topics=tuple(codec.build(mod.ListOffsetsTopic, name=t, partitions=tuple(ps))
                                        for t, ps in topics.items()))
        try:
            resp = await client.request(LIST_OFFSETS, body, node_id=node)
        except KafkaError:
            return {}
        return {(t.name, int(p.partition_index)): int(p.offset) for t in resp.topics for p in t.partitions
                if not int(p.error_code)}

    jobs = [[one(node, part, ts) for node, part in by_leader.items()] for ts in timestamps]
    results = await asyncio.gather(*(j for row in jobs for j in row))
    out: list[dict[TopicPartition, int]] = []
    for i in range(len(timestamps)):
        merged: dict[TopicPartition, int] = {}
        for r in results[i * len(by_leader):(i + 1) * len(by_leader)]:
            merged.update(r)
        out.append(merged)
    return out


async def topic_configs(client: AdminClient, names: list[str], keys: Iterable[str] | None
                        ) -> dict[tuple[int, str], dict[str, ConfigEntry] | KafkaError]:
    """``client.describe_configs`` of topics, its request entity built directly (see offsets_at)."""
    version = client.version_for(DESCRIBE_CONFIGS)
    request = codec.request_type(DESCRIBE_CONFIGS, version)
    mod = sys.modules[request.__module__]
    wanted = None if keys is None else tuple(keys)
    body = codec.build(request, include_synonyms=False, include_documentation=False, resources=tuple(
        codec.build(mod.DescribeConfigsResource, resource_type=RESOURCE_TOPIC, resource_name=n,
                    configuration_keys=wanted) for n in names))
    resp = await client.request(DESCRIBE_CONFIGS, body)
    out: dict[tuple[int, str], dict[str, ConfigEntry] | KafkaError] = {}
    for r in resp.results:
        if int(r.error_code):
            out[(RESOURCE_TOPIC, r.resource_name)] = KafkaError.from_code(int(r.error_code), r.error_message,
                                                                          r.resource_name)
            continue
        out[(RESOURCE_TOPIC, r.resource_name)] = {c.name: ConfigEntry(
            c.name, c.value, CONFIG_SOURCES.get(int(getattr(c, "config_source", 0)), "UNKNOWN"), bool(c.read_only),
            bool(c.is_sensitive)) for c in r.configs}
    return out


async def log_sizes(client: AdminClient, brokers: Iterable[int], tps: Iterable[TopicPartition] | None = None
                    ) -> dict[TopicPartition, dict[int, int]] | None:
    """(topic, partition) -> {broker: size} from every broker's DescribeLogDirs (``tps``: of those
    partitions only); None when refused (DESCRIBE on the cluster is needed)."""
    wanted: Any = None
    if tps is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        wanted = [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]

    async def one(node: int) -> tuple[int, Any]:
        try:
            return node, await client.request(DESCRIBE_LOG_DIRS, {"topics": wanted}, node_id=node)
        except KafkaError:
            return node, None

    out: dict[TopicPartition, dict[int, int]] = {}
    refused = True
    for node, resp in await asyncio.gather(*(one(n) for n in brokers)):
        if resp is None or int(getattr(resp, "error_code", 0)):
            continue
        for d in resp.results:
            if int(d.error_code):
                continue
            refused = False
            for t in d.topics:
                for p in t.partitions:
                    out.setdefault((t.name, int(p.partition_index)), {})[node] = int(p.partition_size)
    return None if refused and not out else out


def _racks(brokers: Mapping[int, tuple[str, int, str | None]], ids: Iterable[int]) -> tuple[str, ...]:
    return tuple(sorted({r for b in ids if (r := (brokers.get(b) or ("", 0, None))[2])}))


OVERVIEW_CONFIGS = ("retention.ms", "retention.bytes", "cleanup.policy", "replica.placement")


async def topics_overview(client: AdminClient, md: ClusterMetadata, names: list[str], now_ms: int | None = None,
                          keys: Iterable[str] | None = OVERVIEW_CONFIGS) -> tuple[list[TopicRow], dict[str, Any]]:
    """One row for each of the topics ``names`` (of ``md``), and the raw pieces (configs, offsets,
    sizes) for a detail page; ``keys``: the configs to read (None: all). Its requests (configs,
    three ListOffsets per leader, DescribeLogDirs per broker) are in flight together."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    topics = {n: t for n in names if isinstance(t := md.topics.get(n), TopicDescription)}
    if not topics:
        return [], {"metadata": md, "topics": {}, "configs": {}, "earliest": {}, "latest": {}, "sizes": None}
    tps = [(n, p.partition) for n, t in topics.items() for p in t.partitions]
    configs, (earliest, latest, recent), sizes = await asyncio.gather(
        topic_configs(client, list(topics), keys),
        offsets_at(client, md, tps, EARLIEST, LATEST, now_ms - RATE_WINDOW_MS),
        log_sizes(client, md.brokers, tps))
    rows = []
    for name, t in topics.items():
        entries = configs.get((RESOURCE_TOPIC, name))
        entries = entries if isinstance(entries, dict) else {}
        leader_sizes = [sizes.get((name, p.partition), {}).get(p.leader) for p in t.partitions] if sizes is not None else []
        size = sum(s for s in leader_sizes if s is not None) if sizes is not None else None
        have = [p.partition for p in t.partitions if (name, p.partition) in earliest and (name, p.partition) in latest]
        messages = sum(latest[(name, p)] - earliest[(name, p)] for p in have) if have else None
        in_window = 0
        for p in have:
            start = recent.get((name, p), -1)
            if start >= 0:  # -1: no record that recent
                in_window += max(0, latest[(name, p)] - start)
        per_s = in_window / (RATE_WINDOW_MS / 1000) if have else None
        bytes_s = per_s * size / messages if per_s is not None and size is not None and messages else (
            0.0 if per_s == 0 else None)

        def value(key: str) -> str | None:
            e = entries.get(key)
            return e.value if e is not None else None

        rows.append(TopicRow(
            name=name, partitions=len(t.partitions), replication_factor=t.replication_factor,
            observers=observer_count(entries), racks=_racks(md.brokers, {r for p in t.partitions for r in p.replicas}),
            size=size, messages=messages, retention_ms=value("retention.ms"), retention_bytes=value("retention.bytes"),
            cleanup_policy=value("cleanup.policy"), messages_per_s=per_s, bytes_per_s=bytes_s,
        ))
    return rows, {"metadata": md, "topics": topics, "configs": configs, "earliest": earliest, "latest": latest,
                  "sizes": sizes}


async def topic_detail(client: AdminClient, name: str) -> TopicDetail | None:
    """One topic, or None when the user does not see it (no such topic, or not authorized: the
    same answer, as the broker gives it)."""
    md = await client.metadata([name])
    rows, raw = await topics_overview(client, md, [name], keys=None)
    if not rows:
        return None
    t: TopicDescription = raw["topics"][name]
    entries = raw["configs"].get((RESOURCE_TOPIC, name))
    entries = entries if isinstance(entries, dict) else {}
    n_obs = rows[0].observers
    sizes = raw["sizes"]
    parts = []
    for p in t.partitions:
        tp = (name, p.partition)
        parts.append(PartitionRow(
            partition=p.partition, leader=p.leader, replicas=p.replicas, isr=p.isr,
            observers=p.replicas[-n_obs:] if n_obs else (), offline=p.offline_replicas,
            racks=_racks(raw["metadata"].brokers, p.replicas), earliest=raw["earliest"].get(tp),
            latest=raw["latest"].get(tp), size=(sizes.get(tp) or {}).get(p.leader) if sizes is not None else None,
        ))
    return TopicDetail(rows[0], str(t.topic_id) if t.topic_id else None, parts,
                       sorted(entries.values(), key=lambda e: (e.source != "DYNAMIC_TOPIC_CONFIG", e.name)))


def parse_configs(text: str) -> dict[str, str]:
    """``key=value`` lines (blank lines and ``#`` comments skipped) -> dict; ValueError otherwise."""
    out = {}
    for i, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"line {i}: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


async def create_topic(client: AdminClient, name: str, partitions: int, replication_factor: int,
                       configs: Mapping[str, str]) -> None:
    """Raise the broker's KafkaError (policy, name, configs) when refused."""
    await client.create_topics([{"name": name, "num_partitions": partitions,
                                 "replication_factor": replication_factor, "configs": dict(configs)}])


async def delete_topic(client: AdminClient, name: str) -> None:
    await client.delete_topics([name])


async def alter_config(client: AdminClient, topic: str, key: str, value: str | None) -> None:
    """Set ``key`` (``value`` None: back to its default) on ``topic``."""
    op = (key, OP_DELETE, None) if value is None else (key, OP_SET, value)
    await client.incremental_alter_configs({(RESOURCE_TOPIC, topic): [op]})


# -- messages -------------------------------------------------------------------------------------

@dataclass
class Message:
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass
class Browse:
    messages: list[Message]
    earliest: int
    latest: int
    start: int  # the first offset read
    scanned: int = 0  # records read (a key search)
    truncated: bool = False  # a key search stopped at SEARCH_MAX_RECORDS
    notes: list[str] = field(default_factory=list)


async def _leader(client: AdminClient, topic: str, partition: int) -> tuple[int, ClusterMetadata]:
    """The partition's leader and the Metadata that names it; the broker's KafkaError otherwise."""
    md = await client.metadata([topic])
    t = md.topics.get(topic)
    if not isinstance(t, TopicDescription):
        raise t if isinstance(t, KafkaError) else KafkaError("UNKNOWN_TOPIC_OR_PARTITION", None, topic)
    for p in t.partitions:
        if p.partition == partition:
            if p.leader < 0:
                raise KafkaError("LEADER_NOT_AVAILABLE", None, f"{topic}-{partition}")
            return p.leader, md
    raise KafkaError("UNKNOWN_TOPIC_OR_PARTITION", None, f"{topic}-{partition}")


async def _fetch(client: AdminClient, leader: int, topic: str, partition: int, offset: int,
                 max_bytes: int = FETCH_MAX_BYTES) -> list[Message]:
    """The records from ``offset`` that one Fetch returns (control records left out)."""
    resp = await client.request(FETCH, {
        "cluster_id": None, "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
        "forgotten_topics_data": [],
    }, node_id=leader, max_version=12)  # v13 names topics by id
    err = KafkaError.from_code(int(resp.error_code)) if int(getattr(resp, "error_code", 0)) else None
    if err:
        raise err
    out: list[Message] = []
    for t in resp.responses:
        for p in t.partitions:
            if int(p.error_code):
                raise KafkaError.from_code(int(p.error_code), None, f"{topic}-{partition}")
            buf = bytes(p.records or b"")
            for pos, h in parse_batches(buf, allow_partial=True):
                if h.is_control:
                    continue
                for r in iter_batch_records(buf, pos, h):
                    if r.offset >= offset:
                        out.append(Message(partition, r.offset, r.timestamp, r.key, r.value, list(r.headers)))
    return out


async def browse(client: AdminClient, topic: str, partition: int, *, offset: int | None = None,
                 timestamp_ms: int | None = None, newest_first: bool = True, limit: int = 50,
                 key: bytes | None = None) -> Browse:
    """Up to ``limit`` records of one partition. Oldest first: from ``offset``, else the first
    record at or after ``timestamp_ms``, else the log start. Newest first: the ``limit`` records
    before ``offset`` (or the first at ``timestamp_ms``; else the log end), newest first. With
    ``key``: only records with that key, scanning at most SEARCH_MAX_RECORDS in that direction."""
    limit = max(1, min(MAX_LIMIT, limit))
    tp = (topic, partition)
    leader, md = await _leader(client, topic, partition)
    at_time = [timestamp_ms] if timestamp_ms is not None and offset is None else []
    found = await offsets_at(client, md, [tp], EARLIEST, LATEST, *at_time)
    if any(tp not in f for f in found):
        raise KafkaError("NOT_LEADER_OR_FOLLOWER", "the partition's leader did not answer: try again", f"{topic}-{partition}")
    earliest, latest = found[0][tp], found[1][tp]
    if at_time:
        offset = latest if found[2][tp] < 0 else found[2][tp]
    budget = SEARCH_MAX_RECORDS if key is not None else limit
    result = Browse([], earliest, latest, 0)

    def keep(batch: list[Message]) -> list[Message]:
        return [m for m in batch if key is None or m.key == key]

    if not newest_first:
        pos = max(earliest, offset if offset is not None else earliest)
        result.start = pos
        while pos < latest and len(result.messages) < limit and result.scanned < budget:
            batch = [m for m in await _fetch(client, leader, topic, partition, pos) if m.offset < latest]
            if not batch:
                break
            batch = batch[: budget - result.scanned]
            result.scanned += len(batch)
            result.messages += keep(batch)
            pos = batch[-1].offset + 1
        result.messages = result.messages[:limit]
    else:
        end = min(latest, offset if offset is not None else latest)
        step = limit if key is None else max(limit, 500)
        while end > earliest and len(result.messages) < limit and result.scanned < budget:
            start = max(earliest, end - step)
            window: list[Message] = []
            pos = start
            while pos < end:
                got = [m for m in await _fetch(client, leader, topic, partition, pos) if m.offset < end]
                if not got:
                    break
                window += got
                pos = got[-1].offset + 1
            result.scanned += len(window)
            result.messages += keep(window)[::-1]
            result.start = start
            end = start
        result.messages = result.messages[:limit]
    result.truncated = key is not None and result.scanned >= budget
    return result


async def produce(client: AdminClient, topic: str, partition: int, key: bytes | None, value: bytes | None,
                  headers: list[tuple[str, bytes | None]], now_ms: int | None = None) -> int:
    """Produce one record (acks=all) and return its offset."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    leader, _md = await _leader(client, topic, partition)
    batch = build_batch([(now_ms, key, value, headers)])
    resp = await client.request(PRODUCE, {
        "transactional_id": None, "acks": -1, "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    }, node_id=leader, max_version=12)  # v13 names topics by id
    for t in resp.responses:
        for p in t.partition_responses:
            if int(p.error_code):
                raise KafkaError.from_code(int(p.error_code), getattr(p, "error_message", None), f"{topic}-{partition}")
            return int(p.base_offset)
    raise KafkaError("UNKNOWN_SERVER_ERROR", "no partition in the produce response", topic)


SHOWN_BYTES = 64 * 1024  # of a key or value, the rest is cut (and said)


def render_bytes(data: bytes | None, fmt: str) -> tuple[str, str]:
    """(how it is shown, the text) of a key or value: ``text`` (UTF-8, else hex), ``json`` (pretty
    when it parses, else text) or ``hex``; beyond SHOWN_BYTES, cut with a line saying how much."""
    if data is None:
        return "null", ""
    if len(data) > SHOWN_BYTES:
        kind, text = render_bytes(data[:SHOWN_BYTES], "hex" if fmt == "hex" else "text")
        return kind, f"{text}\n… ({len(data):,} bytes in all, the first {SHOWN_BYTES:,} shown)"
    if fmt == "hex":
        return "hex", data.hex(" ")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "hex", data.hex(" ")
    if fmt == "json":
        try:
            return "json", json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    return "text", text


# -- consumer groups ------------------------------------------------------------------------------

@dataclass
class GroupRow:
    group_id: str
    state: str
    group_type: str
    members: int | None
    lag: int | None


@dataclass
class GroupDetail:
    description: GroupDescription
    rows: list[dict[str, Any]]  # shoal.cli.groups.lag_rows
    total_lag: int | None


async def _ends(client: AdminClient, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
    tps = sorted(set(tps))
    if not tps:
        return {}
    (got,) = await offsets_at(client, await client.metadata(sorted({t for t, _ in tps})), tps, LATEST)
    return {tp: got.get(tp) for tp in tps}


async def _coordinators(client: AdminClient, group_ids: list[str]) -> dict[str, int]:
    """Each group's coordinator: one batched FindCoordinator (v4+, KIP-699), else one per group.
    Groups whose coordinator is not found are left out."""
    out: dict[str, int] = {}
    if not group_ids:
        return out
    if client.version_for(FIND_COORDINATOR) >= 4:
        resp = await client.request(FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": group_ids})
        for c in resp.coordinators:
            if not int(c.error_code):
                out[c.key] = int(c.node_id)  # a broker of the Metadata that ListGroups read
        return out
    for gid in group_ids:
        try:
            out[gid] = (await client.find_coordinator(gid))[0]
        except KafkaError:
            continue
    return out


async def groups_overview(client: AdminClient, listings: list[GroupListing]) -> list[GroupRow]:
    """The groups ``listings`` (``client.list_groups()``'s) with their state, members and total
    lag, in a few batched requests whatever their number: FindCoordinator (one), then per
    coordinator one DescribeGroups, one ConsumerGroupDescribe (KIP-848 groups) and one OffsetFetch
    of all its groups (v8+), and ListOffsets per leader for the log ends."""
    coordinators = await _coordinators(client, [g.group_id for g in listings])
    by_node: dict[int, list[str]] = {}
    for gid, node in coordinators.items():
        by_node.setdefault(node, []).append(gid)
    kinds = {g.group_id: g.group_type or "classic" for g in listings}
    states = {g.group_id: g.state for g in listings}
    members: dict[str, int] = {}
    committed: dict[str, dict[TopicPartition, int]] = {}
    for node, gids in by_node.items():
        classic = [g for g in gids if kinds[g] != "consumer"]
        modern = [g for g in gids if kinds[g] == "consumer"]
        if classic:
            resp = await client.request(DESCRIBE_GROUPS, {"groups": classic, "include_authorized_operations": False},
                                        node_id=node)
            for g in resp.groups:
                if not int(g.error_code):
                    members[g.group_id], states[g.group_id] = len(g.members), g.group_state
        if modern:
            resp = await client.request(CONSUMER_GROUP_DESCRIBE, {"group_ids": modern,
                                                                  "include_authorized_operations": False}, node_id=node)
            for g in resp.groups:
                if not int(g.error_code):
                    members[g.group_id], states[g.group_id] = len(g.members), g.group_state
        resp = await client.request(OFFSET_FETCH, {
            "groups": [{"group_id": g, "member_id": None, "member_epoch": -1, "topics": None} for g in gids],
            "require_stable": False}, node_id=node, max_version=9)
        for g in resp.groups:
            if int(g.error_code):
                continue
            committed[g.group_id] = {(t.name, int(p.partition_index)): int(p.committed_offset)
                                     for t in g.topics for p in t.partitions
                                     if not int(p.error_code) and int(p.committed_offset) >= 0}
    ends = await _ends(client, [tp for offsets in committed.values() for tp in offsets])
    rows = []
    for g in listings:
        gid = g.group_id
        offsets = committed.get(gid, {})
        lags = [end - off for tp, off in offsets.items() if (end := ends.get(tp)) is not None]
        rows.append(GroupRow(gid, states.get(gid) or "?", kinds[gid], members.get(gid), sum(lags) if lags else None))
    return rows


async def group_detail(client: AdminClient, group_id: str) -> GroupDetail | None:
    """One group's members, assignment, committed offsets and lag; None when the user does not
    see it (a group with neither members nor offsets, as Kafka reports a group that is not there)."""
    from shoal.cli.groups import lag_rows

    desc = await client.describe_group(group_id)
    committed = await client.fetch_offsets(group_id) if desc.state != "Dead" else {}
    if desc.state == "Dead" and not committed:
        return None
    ends = await _ends(client, [*committed, *(tp for m in desc.members for tp in m.assignment)])
    rows = lag_rows(desc, committed, ends)
    lags = [r["lag"] for r in rows if r["lag"] is not None]
    return GroupDetail(desc, rows, sum(lags) if lags else None)


async def reset_offsets(client: AdminClient, group_id: str, mode: str, value: int | None) -> dict[TopicPartition, int]:
    """Move an empty group's committed offsets (``mode``: shoal groups reset-offsets' to_earliest,
    to_latest, to_offset, to_datetime (``value`` in ms) or shift_by) on every partition it has
    committed; the new offsets. KafkaError NON_EMPTY_GROUP while it has members."""
    from shoal.cli.groups import INACTIVE, new_offset

    desc = await client.describe_group(group_id)
    if desc.state not in INACTIVE:
        raise KafkaError("NON_EMPTY_GROUP", f"the group is {desc.state} with {len(desc.members)} members: "
                         "offsets can only be reset while it has none (stop its consumers first)", group_id)
    committed = await client.fetch_offsets(group_id) if desc.state != "Dead" else {}
    if not committed:
        raise KafkaError("GROUP_ID_NOT_FOUND", "the group has no committed offsets to reset", group_id)
    parts = sorted(committed)
    md = await client.metadata(sorted({t for t, _ in parts}))
    at_time = [value] if mode == "to_datetime" and value is not None else []
    found = await offsets_at(client, md, parts, EARLIEST, LATEST, *at_time)
    missing = [tp for tp in parts if any(tp not in f for f in found)]
    if missing:
        raise KafkaError("LEADER_NOT_AVAILABLE", "no offsets for these partitions now: try again",
                         ", ".join(f"{t}-{p}" for t, p in missing))
    plan = {tp: new_offset(mode, value, committed.get(tp), found[0][tp], found[1][tp], found[2][tp] if at_time else None)
            for tp in parts}
    await client.commit_offsets(group_id, plan)
    return plan


# -- ACLs -----------------------------------------------------------------------------------------

@dataclass
class AclRow:
    binding: AclBinding
    resource_type: str  # Kafka's names: TOPIC, GROUP, ...
    pattern_type: str
    operation: str
    permission: str


def acl_row(b: AclBinding) -> AclRow:
    from shoal.tenancy.acl import Operation, PatternType, Permission, ResourceType, code_name

    return AclRow(b, code_name(ResourceType, b.resource_type), code_name(PatternType, b.pattern_type),
                  code_name(Operation, b.operation), code_name(Permission, b.permission_type))


async def acls(client: AdminClient) -> list[AclRow]:
    """Every ACL binding the user may see (its tenant's, under its names), as ``shoal acls list``
    asks them: every resource type, then namespaces (a filter of type ANY leaves them out)."""
    from shoal.tenancy.acl import PatternType, ResourceType

    found: list[AclBinding] = []
    for rt in (ResourceType.ANY, ResourceType.NAMESPACE):
        found += await client.describe_acls(AclFilter(int(rt), None, int(PatternType.ANY)))
    key = (lambda b: (b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation,
                      b.permission_type))
    return [acl_row(b) for b in sorted(set(found), key=key)]
