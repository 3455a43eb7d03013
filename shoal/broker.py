"""The broker: owns the services handlers use and the listeners clients connect to.

No module globals: a test can run several ``Broker`` objects in one process. The broker follows the
metadata image: when a partition is assigned to this node it opens (or creates) its log, when a
topic goes away it deletes its logs, when configs change it re-derives the partitions' LogConfig.
So handlers only change metadata; storage follows, on one node as on many.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal.clock import SYSTEM_CLOCK, Clock
from shoal.config import BrokerConfig, log_config
from shoal.handlers.fetch import FetchSessionCache
from shoal.handlers.registry import Registry
from shoal.metadata import (
    BrokerInfo,
    MetadataImage,
    MetadataStore,
    PartitionInfo,
    TopicInfo,
    changed_topics,
    topic_renames,
)
from shoal.server.purgatory import Purgatory
from shoal.storage import LogConfig, LogManager, PartitionLog
from shoal.tenancy.namespaces import auto_create_refusal, changed_config_prefixes, topic_overrides

log = logging.getLogger("shoal.broker")


def handler_modules() -> list[Any]:
    from shoal.handlers import admin, api_versions, fetch, list_offsets, metadata, produce, producer_ids
    from shoal.handlers import groups, offsets  # consumer groups and committed offsets
    from shoal.handlers import consumer_groups  # KIP-848 ConsumerGroupHeartbeat/Describe
    from shoal.handlers import sasl  # auth: SaslHandshake/SaslAuthenticate, SCRAM credentials
    from shoal.handlers import acls  # tenancy: CreateAcls/DescribeAcls/DeleteAcls
    from shoal.handlers import client_quotas  # quotas: Describe/AlterClientQuotas
    from shoal.handlers import describe_topic_partitions  # KIP-966

    return [
        api_versions, metadata, produce, fetch, list_offsets, admin, producer_ids, groups, offsets,
        consumer_groups, sasl, acls, client_quotas, describe_topic_partitions,
    ]


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        metadata: MetadataStore | None = None,
    ) -> None:
        self.static_config = config
        self.clock = clock
        self.random = random.Random()  # placement's random start (shoal.cluster.planner); tests seed it
        self.node_id: int = config.node_id
        self.data_dir = Path(config.data_dir)
        if metadata is None:
            store = str(config.get("shoal.metadata.store"))
            if store.startswith("etcd://"):  # cluster: the brokers sharing the prefix share the image
                from shoal.metadata.etcd import EtcdMetadataStore

                metadata = EtcdMetadataStore(
                    store, node_id=self.node_id, session_timeout_ms=int(config.get("broker.session.timeout.ms"))
                )
            else:
                from shoal.metadata.embedded import EmbeddedMetadataStore

                metadata = EmbeddedMetadataStore(
                    self.data_dir / "__metadata" / "metadata.json", node_id=self.node_id
                )
        self.metadata = metadata
        self.logs = LogManager(
            self.data_dir,
            clock=clock,
            retention_check_interval_ms=int(config.get("log.retention.check.interval.ms")),
            producer_id_expiration_ms=int(config.get("producer.id.expiration.ms")),
        )
        self.logs.cleaner_enabled = bool(config.get("log.cleaner.enable"))
        self.logs.cleaner_backoff_ms = int(config.get("log.cleaner.backoff.ms"))
        self.registry = Registry(handler_modules())
        from shoal.handlers.producer_ids import ProducerIdManager

        self.producer_ids = ProducerIdManager(self.metadata)  # InitProducerId's allocator
        self.connections: set[Any] = set()
        from shoal.logutil import RateLimitedLog

        # Log lines a client can cause (rejected connections, failed handlers), rate-limited.
        self.client_log = RateLimitedLog(logging.getLogger("shoal.server"), clock=clock)
        self.fetch_waiters = Purgatory()  # keyed by (topic, partition): new data or HWM moved
        self.fetch_sessions = FetchSessionCache(
            int(config.get("max.incremental.fetch.session.cache.slots"))
        )
        self.hwm_waiters = Purgatory()  # keyed by (topic, partition): the high watermark moved
        self.listeners: list[Listener] = []
        self.listener_security: dict[str, Any] = {}  # auth: name -> shoal.auth.ListenerSecurity
        self._servers: list[Any] = []  # shoal.server.limits.ListenerServer
        self._config_cache: tuple[int, BrokerConfig] | None = None
        self._log_configs: dict[str, LogConfig] = {}
        self._unreconciled: set[str] = set()  # topics whose logs failed to follow a change (retried)
        self._periodic: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()
        self._dir_locks: Any = None  # safety: shoal.storage.dirlock.DirLocks, from start() to stop()
        self.admin_http: Any = None  # admin: shoal.admin.http.AdminHttpServer when configured
        self.controller: Any = None  # cluster: shoal.cluster.controller.Controller on etcd
        # quotas: produce/fetch/request client quota managers (shoal.quotas.manager), Prometheus
        from shoal.quotas.manager import QuotaManagers

        self.quotas = QuotaManagers(config, self.node_id)
        # scheduler: fair request processing across tenants (shoal.server.scheduler)
        from shoal.server.scheduler import RequestScheduler

        self.scheduler = RequestScheduler(
            budget_ns=int(config.get("shoal.request.scheduler.batch.us")) * 1000,
            quantum_ns=int(config.get("shoal.request.scheduler.quantum.us")) * 1000,
            tenant_queue_max=int(config.get("queued.max.requests")),
            enabled=bool(config.get("shoal.request.scheduler.enable")),
            nanos=clock.nanos, weight=self.quotas.scheduling_weight,
        )
        self.metrics_http: Any = None  # shoal.admin.metrics.MetricsHttpServer when configured
        # quotas: shoal.server.limits.ConnectionLimits (counters per listener: .stats, .total)
        self.connection_limits: Any = None
        # quotas: shoal.quotas.autotune.BrokerProtection (from start()); its tuning task
        self.protection: Any = None
        self._protection_task: asyncio.Task[None] | None = None
        from shoal.quotas.mutation import MutationQuotaManager

        self.mutation_quotas = MutationQuotaManager(  # KIP-599, charged by the topic admin handlers
            samples=int(config.get("controller.quota.window.num")),
            window_ms=int(config.get("controller.quota.window.size.seconds")) * 1000,
        )

    @property
    def controller_id(self) -> int:
        """The controller Metadata and DescribeCluster report: the elected one on etcd (-1 until
        known), this broker in embedded mode."""
        if self.controller is not None:
            return self.controller.controller_id
        return self.metadata.image.controller_id

    # -- configuration ----------------------------------------------------------------------

    @property
    def config(self) -> BrokerConfig:
        """Static config with the current image's cluster-wide dynamic configs and this broker's own
        (``broker_overrides``) applied."""
        image = self.metadata.image
        cached = self._config_cache
        if cached is None or cached[0] != image.epoch:
            own = image.broker_overrides.get(self.node_id)
            cached = (image.epoch, self.static_config.with_dynamic(image.broker_configs, own))
            self._config_cache = cached
        return cached[1]

    def log_config_for(self, topic: TopicInfo) -> LogConfig:
        cfg = self._log_configs.get(topic.name)
        if cfg is None:
            # tenancy: configs the topic does not set come from its namespaces and tenant (KIP-37)
            overrides = topic_overrides(self.metadata.image, topic.name, topic.configs)
            cfg = log_config(self.config, overrides)
            self._log_configs[topic.name] = cfg
        return cfg

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        # -- safety: lock every directory this broker writes before anything is read or written
        # there (a second broker on them is refused, having changed nothing); held until stop().
        from shoal.storage.dirlock import DirLocks, check_owner, record_owner

        self._dir_locks = await asyncio.to_thread(DirLocks.acquire, self._written_dirs())
        log_dirs = self.static_config.log_dirs
        try:
            await asyncio.to_thread(check_owner, log_dirs, self.node_id)  # not another node's data
            await self._start()
        except BaseException:
            self._dir_locks.release()
            raise
        try:
            await asyncio.to_thread(record_owner, log_dirs, self.node_id, self.metadata.image.cluster_id)
        except OSError as e:
            log.warning("cannot record this node in its log dirs (meta.properties): %s", e)

    def _written_dirs(self) -> list[tuple[Path, str]]:
        dirs = [(Path(d), "log dir") for d in self.static_config.log_dirs]
        store_path = getattr(self.metadata, "path", None)  # the embedded store's file
        if isinstance(store_path, Path):
            dirs.append((store_path.parent, "metadata dir"))
        return dirs

    async def _start(self) -> None:
        await self.metadata.start()
        # -- auth: TLS contexts and SASL settings per listener; bootstrap SCRAM users.
        from shoal.auth import ensure_bootstrap_users, listener_security

        self.listener_security = listener_security(self.static_config)
        await ensure_bootstrap_users(self.static_config, self.metadata)
        image = self.metadata.image

        def config_for(topic: str) -> LogConfig:
            info = image.topic(topic)
            return self.log_config_for(info) if info is not None else log_config(self.config, {})

        await asyncio.to_thread(self.logs.load, config_for)
        await asyncio.to_thread(self._adopt_renamed_logs, image)  # tenancy: moves we did not apply
        self._reconcile(None, self.metadata.image)
        self._restore_high_watermarks(self.metadata.image)
        self.metadata.subscribe(self._on_metadata)
        self.quotas.update(self.metadata.image)  # quotas: follow client quotas and leaders
        self.metadata.subscribe(self.quotas.on_metadata)
        # -- groups: the coordinator exists before clients can connect (it answers
        # COORDINATOR_NOT_AVAILABLE until started below).
        from shoal.groups import GroupCoordinator

        self.groups = GroupCoordinator.for_broker(self)
        from shoal.server.connection import KafkaConnection
        from shoal.server.limits import ConnectionLimits, create_listener

        # -- quotas: KIP-402/612 connection limits; each listener accepts through them.
        self.connection_limits = ConnectionLimits(self, [n for n, _h, _p in self.static_config.listeners])
        self.metadata.subscribe(self.connection_limits.on_metadata)
        for name, host, port in self.static_config.listeners:
            server = await create_listener(  # not serving before this broker is registered
                self.connection_limits, name, host, port,
                lambda name=name: KafkaConnection(self, name),
                self.listener_security[name].ssl_context,  # auth: None unless SSL/SASL_SSL
            )
            actual = server.sockets[0].getsockname()[1]
            self.listeners.append(Listener(name, host, actual))
            self._servers.append(server)
        await self.metadata.register_broker(self._broker_info())
        if hasattr(self.metadata, "backend") and hasattr(self.metadata.backend, "registration"):
            from shoal.cluster.controller import Controller  # cluster: the controller election

            self.controller = Controller(self.metadata, self.node_id, int(self.config.get("broker.session.timeout.ms")))
            self.controller.start()
        await self.groups.start()  # groups: creates __consumer_offsets if missing, loads it
        # -- admin: the HTTP admin API (tenants, namespaces), when shoal.admin.listener is set;
        # up before the Kafka listeners serve, so a client that reaches those finds it too.
        admin_listener = self.static_config.get("shoal.admin.listener")
        if admin_listener:
            from shoal.admin.http import AdminHttpServer, parse_listener
            from shoal.auth import shared_backoff

            self.admin_http = AdminHttpServer(self.metadata, *parse_listener(admin_listener),
                                              broker_config=lambda: self.config,
                                              login_backoff=shared_backoff(self.listener_security))
            await self.admin_http.start()
        for server in self._servers:
            await server.start_serving()
        self._periodic = asyncio.create_task(self._run_periodic())
        # -- quotas: broker-wide limits and auto-tuned tenant quotas (shoal.quotas.autotune)
        from shoal.quotas.autotune import BrokerProtection

        self.protection = BrokerProtection.for_broker(self)
        self._protection_task = asyncio.create_task(self.protection.run(self.clock))
        metrics_listener = self.static_config.get("shoal.metrics.listener")
        if metrics_listener:  # quotas: the Prometheus endpoint
            from shoal.admin.metrics import MetricsHttpServer

            self.metrics_http = MetricsHttpServer(self, metrics_listener)
            await self.metrics_http.start()
        log.info(
            "broker %d started: %s, data in %s, cluster id %s",
            self.node_id,
            ", ".join(f"{l.name}://{l.host}:{l.port}" for l in self.listeners),
            self.data_dir,
            self.metadata.image.cluster_id,
        )

    def _broker_info(self) -> BrokerInfo:
        advertised = list(self.static_config.advertised_listeners)
        endpoints: list[tuple[str, str, int]] = []
        for l in self.listeners:
            host, port = l.host, l.port
            for name, ahost, aport in advertised:
                if name == l.name:
                    host, port = ahost, (aport or l.port)
            if host in ("0.0.0.0", "", "::"):
                host = "127.0.0.1"
            endpoints.append((l.name, host, port))
        first = endpoints[0]
        return BrokerInfo(
            node_id=self.node_id,
            host=first[1],
            port=first[2],
            rack=self.static_config.rack,
            endpoints=tuple(endpoints),
        )

    async def stop(self) -> None:
        if self.admin_http is not None:  # admin
            await self.admin_http.stop()
        if self.metrics_http is not None:  # quotas
            await self.metrics_http.stop()
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            conn.close()
        for server in self._servers:
            await server.wait_closed()
        if self.connection_limits is not None:  # quotas
            if hasattr(self.metadata, "unsubscribe"):
                self.metadata.unsubscribe(self.connection_limits.on_metadata)
            self.connection_limits.close()
        if self._periodic is not None:
            self._periodic.cancel()
            try:
                await self._periodic
            except asyncio.CancelledError:
                pass
        if self._protection_task is not None:  # quotas
            self._protection_task.cancel()
            try:
                await self._protection_task
            except asyncio.CancelledError:
                pass
        if self.controller is not None:  # cluster: the key goes with the lease, at close
            await self.controller.stop()
        if getattr(self, "groups", None) is not None:
            await self.groups.stop()  # groups
        await asyncio.to_thread(self.logs.close)
        await self.metadata.close()
        if self._dir_locks is not None:  # safety: last, after every write
            self._dir_locks.release()
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def _run_periodic(self) -> None:
        interval = min(
            int(self.config.get("log.retention.check.interval.ms")),
            int(self.config.get("log.flush.scheduler.interval.ms")),
            1000,
        ) / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                self._retry_unreconciled()
                await asyncio.to_thread(self.logs.run_periodic, self.clock.now_ms())
            except Exception:
                log.exception("periodic log maintenance failed")

    # -- following metadata ---------------------------------------------------------------

    def _on_metadata(self, old: MetadataImage, new: MetadataImage) -> None:
        self._reconcile(old, new)

    def _reconcile(self, old: MetadataImage | None, new: MetadataImage) -> None:
        """Logs follow the topics: created, deleted, moved (renames) and reconfigured. After a
        change (``old`` given) only the topics it touched are visited, plus those whose inherited
        configs it changed (namespace or tenant defaults, broker configs)."""
        old_topics = old.topics if old is not None else {}
        if old is None:
            changes = {name: (None, topic) for name, topic in new.topics.items()}
            recheck: Any = ()
        else:
            changes = changed_topics(old, new)
            if any(a is None or b is None for a, b in changes.values()):
                self._follow_renames(old, new)
            recheck = ()
            if (old.broker_configs is not new.broker_configs and old.broker_configs != new.broker_configs) or (
                old.broker_overrides.get(self.node_id) != new.broker_overrides.get(self.node_id)
            ):
                self._log_configs.clear()
                recheck = new.topics
            elif changed := changed_config_prefixes(old, new):  # tenancy: namespace or tenant defaults
                for name in [n for n in self._log_configs if n.startswith(changed)]:
                    del self._log_configs[name]
                recheck = [n for n in new.topics if n.startswith(changed)]
        for name, (topic, current) in changes.items():
            if topic is None:
                continue
            if (current is None or current.topic_id != topic.topic_id) and topic.topic_id not in new.topics_by_id:
                self._log_configs.pop(name, None)
                for p in topic.partitions:
                    if self.node_id in p.replicas:
                        self.logs.delete_partition(name, p.partition)
        visit = dict.fromkeys(n for n, (_, t) in changes.items() if t is not None)
        visit.update(dict.fromkeys(recheck))
        visit.update(dict.fromkeys(n for n in self._unreconciled if n in new.topics))
        self._unreconciled.clear()
        for name in visit:
            topic = new.topics[name]
            prev = old_topics.get(name)
            if prev is not None and prev.configs != topic.configs:
                self._log_configs.pop(name, None)
            try:
                self._reconcile_topic(topic)
            except OSError:  # a disk error: retried by the periodic task, and at the next change
                log.exception("cannot create or reconfigure the logs of %s; will retry", name)
                self._unreconciled.add(name)
        if old is None:
            # Logs on disk for topics that no longer exist (deleted while we were down).
            for name, partition in list(self.logs.partitions()):
                topic = new.topics.get(name)
                if topic is None or partition >= len(topic.partitions):
                    self.logs.delete_partition(name, partition)

    def _reconcile_topic(self, topic: TopicInfo) -> None:
        """This broker's logs of ``topic`` exist and have its current config."""
        cfg = self.log_config_for(topic)
        for p in topic.partitions:
            if self.node_id not in p.replicas:
                continue
            plog = self.logs.get(topic.name, p.partition)
            if plog is None:
                self.logs.get_or_create(topic.name, p.partition, cfg)
                self.logs.write_topic_id(topic.name, p.partition, topic.topic_id)
            elif plog.config != cfg:
                plog.update_config(cfg)
            if plog is not None and p.leader == self.node_id and (p.isr == (self.node_id,) or not p.isr):
                # cluster: leading again (a returning sole ISR member): every logged batch is committed
                plog.high_watermark = max(plog.high_watermark, plog.log_end_offset)

    def _retry_unreconciled(self) -> None:
        """Topics whose logs could not be created or reconfigured at their change: try again."""
        if not self._unreconciled:
            return
        image = self.metadata.image
        for name in list(self._unreconciled):
            topic = image.topics.get(name)
            self._unreconciled.discard(name)
            if topic is None:
                continue
            try:
                self._reconcile_topic(topic)
                log.info("logs of %s created after an earlier failure", name)
            except OSError as e:
                log.warning("cannot create or reconfigure the logs of %s yet: %s", name, e)
                self._unreconciled.add(name)

    def _follow_renames(self, old: MetadataImage, new: MetadataImage) -> None:
        """A topic whose id stayed but whose name changed (a KIP-37 move): its logs move to the
        directories of the new name, data, offsets and producer state kept."""
        for prev_name, name in topic_renames(old, new).items():
            prev, topic = old.topics[prev_name], new.topics[name]
            self._log_configs.pop(prev.name, None)
            for p in prev.partitions:
                if self.node_id not in p.replicas:
                    continue
                try:
                    self.logs.rename_partition(prev.name, topic.name, p.partition)
                except (OSError, ValueError):
                    log.exception("cannot move %s-%d to %s", prev.name, p.partition, topic.name)
            log.info("topic %s (%s) is now %s", prev.name, topic.topic_id, topic.name)

    def _adopt_renamed_logs(self, image: MetadataImage) -> None:
        """At start-up: a partition directory whose topic id (``partition.metadata``) now belongs
        to a topic of another name was renamed while we were down, or just before a crash: move it
        to the current name. Directories from before topic ids were written get theirs."""
        for name, partition in self.logs.partitions():
            topic = image.topics.get(name)
            topic_id = self.logs.read_topic_id(name, partition)
            if topic is not None and topic_id in (None, topic.topic_id):
                if topic_id is None:
                    self.logs.write_topic_id(name, partition, topic.topic_id)
                continue
            current = image.topics_by_id.get(topic_id) if topic_id is not None else None
            if current is None or partition >= len(current.partitions) or self.logs.get(current.name, partition) is not None:
                continue  # not ours any more: _reconcile deletes it
            log.info("moving %s-%d to %s (renamed while the broker was down)", name, partition, current.name)
            self.logs.rename_partition(name, current.name, partition, self.log_config_for(current))

    def _restore_high_watermarks(self, image: MetadataImage) -> None:
        """After a restart, a leader that is its partition's whole ISR has every logged batch
        replicated, so its high watermark is the log end (the checkpoint may be older)."""
        for name, topic in image.topics.items():
            for p in topic.partitions:
                if p.leader == self.node_id and (p.isr == (self.node_id,) or not p.isr):
                    plog = self.logs.get(name, p.partition)
                    if plog is not None:
                        plog.high_watermark = plog.log_end_offset

    # -- partition access for handlers -----------------------------------------------------

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get(topic, partition)

    def after_leader_append(self, topic: TopicInfo, p: PartitionInfo, plog: PartitionLog) -> None:
        """Advance the high watermark when this leader is the whole ISR, and wake fetchers.

        With followers, the replication layer advances the HWM as they catch up instead.
        """
        if p.isr == (self.node_id,) or not p.isr:
            plog.high_watermark = plog.log_end_offset
            self.hwm_waiters.notify((topic.name, p.partition))
        self.fetch_waiters.notify((topic.name, p.partition))

    async def await_high_watermarks(
        self, waits: list[tuple[str, int, int]], timeout: float
    ) -> set[tuple[str, int]]:
        """Wait until each partition's high watermark reaches its offset (acks=all).

        Returns the partitions that did not get there within ``timeout`` seconds (or lost their
        log meanwhile); the caller answers REQUEST_TIMED_OUT for those.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout

        def behind() -> list[tuple[str, int, int]]:
            out = []
            for topic, partition, offset in waits:
                plog = self.logs.get(topic, partition)
                if plog is None or plog.high_watermark < offset:
                    out.append((topic, partition, offset))
            return out

        pending = behind()
        while pending:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await self.hwm_waiters.wait([(t, p) for t, p, _ in pending], remaining)
            pending = behind()
        return {(t, p) for t, p, _ in pending}

    async def auto_create_topic(self, name: str) -> TopicInfo | None:
        """Create a topic with broker defaults, as Kafka does for Metadata with auto-creation."""
        from shoal.cluster import planner
        from shoal.metadata import MetadataError

        image = self.metadata.image
        defaults = planner.Defaults.for_topics(self.config)
        refused = auto_create_refusal(  # tenancy: namespace, policy
            image, name, defaults.num_partitions, defaults.replication_factor
        )
        if refused is not None:
            raise MetadataError(*refused)
        try:  # the cluster's one planner, as CreateTopics: too few brokers is refused, never shrunk
            plan = planner.plan_topic(planner.live_brokers(image), planner.TopicRequest(name), defaults, self.random)
        except planner.PlacementError as e:
            raise MetadataError(e.code, e.message) from None
        try:
            return await self.metadata.create_topic(name, list(plan.assignments), {})
        except MetadataError as e:
            if e.code == "TOPIC_ALREADY_EXISTS":
                return self.metadata.image.topic(name)
            raise

