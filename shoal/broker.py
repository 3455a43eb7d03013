"""The broker: assembles the services handlers use and runs the listeners clients connect to.

No module globals: a test can run several ``Broker`` objects in one process. Handlers and the
group coordinator see ``Broker.services`` (``shoal.services.Services``: typed collaborators), never
the broker. Its replica manager (``shoal.replica``) follows the metadata image, so handlers only
change metadata; storage follows, on one node as on many.
"""

from __future__ import annotations

import asyncio
import logging
import platform
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal import __version__
from shoal.clock import SYSTEM_CLOCK, Clock
from shoal.config import BrokerConfig
from shoal.etcd.client import is_etcd_url
from shoal.handlers.fetch import FetchSessionCache
from shoal.handlers.registry import Registry
from shoal.metadata import BrokerInfo, MetadataError, MetadataImage, MetadataStore, features
from shoal.replica import ReplicaManager
from shoal.services import Services
from shoal.storage import LogManager

log = logging.getLogger("shoal.broker")

STOP_WARN_S = 10.0  # a clean stop still running this long logs the step it waits for


def handler_modules() -> list[Any]:
    from shoal.handlers import api_versions, configs, fetch, list_offsets, metadata, produce, producer_ids, topics
    from shoal.handlers import groups, offsets  # consumer groups and committed offsets
    from shoal.handlers import consumer_groups  # KIP-848 ConsumerGroupHeartbeat/Describe
    from shoal.handlers import sasl  # auth: SaslHandshake/SaslAuthenticate, SCRAM credentials
    from shoal.handlers import acls  # tenancy: CreateAcls/DescribeAcls/DeleteAcls
    from shoal.handlers import client_quotas  # quotas: Describe/AlterClientQuotas
    from shoal.handlers import describe_topic_partitions  # KIP-966
    from shoal.handlers import offsets_for_leader_epoch  # replica: KIP-101/279/320
    from shoal.handlers import elect_leaders  # replica: KIP-183/460
    from shoal.handlers import describe_log_dirs  # replica: sizes and lags of hosted replicas
    from shoal.handlers import reassignments  # replica: KIP-455 Alter/ListPartitionReassignments
    from shoal.handlers import transactions  # txn: AddPartitionsToTxn ... ListTransactions
    from shoal.handlers import features as feature_updates  # KIP-584 UpdateFeatures

    return [
        api_versions, metadata, produce, fetch, list_offsets, topics, configs, producer_ids, groups, offsets,
        consumer_groups, sasl, acls, client_quotas, describe_topic_partitions, offsets_for_leader_epoch,
        elect_leaders, describe_log_dirs, reassignments, transactions, feature_updates,
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
            if is_etcd_url(store):  # cluster: the brokers sharing the prefix share the image
                from shoal.cluster.registration import Registration
                from shoal.etcd.security import EtcdSecurity
                from shoal.metadata.etcd import EtcdMetadataStore

                metadata = EtcdMetadataStore(
                    store, node_id=self.node_id, session_timeout_ms=int(config.get("broker.session.timeout.ms")),
                    registration=Registration.for_backend, security=EtcdSecurity.from_config(store, config.get),
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
        self.fetch_sessions = FetchSessionCache(
            int(config.get("max.incremental.fetch.session.cache.slots"))
        )
        # replica: every hosted partition (role, ISR, high watermark, log) and the purgatories
        self.replicas = ReplicaManager(self.node_id, self.logs, lambda: self.metadata.image, lambda: self.config, clock,
                                       alter_isrs=self.metadata.alter_isrs)
        self.listeners: list[Listener] = []
        self.listener_security: dict[str, Any] = {}  # auth: name -> shoal.auth.ListenerSecurity
        self._servers: list[Any] = []  # shoal.server.limits.ListenerServer
        self._config_cache: tuple[int, BrokerConfig] | None = None
        self._periodic: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()
        self._dir_locks: Any = None  # safety: shoal.storage.dirlock.DirLocks, from start() to stop()
        self.admin_http: Any = None  # admin: shoal.admin.http.AdminHttpServer when configured
        self.controller: Any = None  # cluster: shoal.cluster.controller.Controller on etcd
        # quotas: produce/fetch/request client quota managers (shoal.quotas.manager), Prometheus
        from shoal.quotas.manager import QuotaManagers

        self.quotas = QuotaManagers(config, self.node_id)
        # a tenant's consumer quota is split over the followers that may serve its consumers too
        from shoal.config import selector_kind

        self.quotas.fetch.follower_reads = selector_kind(config.get("replica.selector.class")) == "rack-aware"
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
        self.loop_lag: Any = None  # shoal.observability.loop.LoopLagProbe, while metrics_http runs
        # metrics: Kafka's broker metrics, counted while the endpoint is on (shoal.observability)
        from shoal.observability import BrokerMetrics

        self.metrics: Any = BrokerMetrics(clock) if config.get("shoal.metrics.listener") else None
        # metering: per-tenant usage to __shoal_usage (shoal.metering), read off those counters
        self.metering: Any = None  # shoal.metering.publisher.UsagePublisher, from start() to stop()
        self._metering_task: asyncio.Task[None] | None = None
        if bool(config.get("shoal.metering.enable")):  # without the endpoint, metering's own counters
            from shoal.metering.counters import usage_hook

            self.metrics = usage_hook(clock, self.metrics is not None)
        # quotas: shoal.server.limits.ConnectionLimits (counters per listener: .stats, .total)
        self.connection_limits: Any = None
        # quotas: shoal.quotas.autotune.BrokerProtection (from start()); its tuning task
        self.protection: Any = None
        self._protection_task: asyncio.Task[None] | None = None
        self.demand_exchange: Any = None  # quotas: shoal.quotas.demand.DemandExchange (from start())
        self.load_reporter: Any = None  # cluster: shoal.cluster.load.LoadReporter (from start())
        from shoal.quotas.mutation import MutationQuotaManager

        self.mutation_quotas = MutationQuotaManager(  # KIP-599, charged by the topic admin handlers
            samples=int(config.get("controller.quota.window.num")),
            window_ms=int(config.get("controller.quota.window.size.seconds")) * 1000,
        )
        # -- groups, txn: what the coordinators see of this broker (shoal.groups.runtime), and the
        # coordinators, built from it before Services; they exist before clients can connect (and
        # answer COORDINATOR_NOT_AVAILABLE until started in start()).
        from shoal.groups import GroupCoordinator
        from shoal.groups.runtime import CoordinatorContext
        from shoal.txn import TransactionCoordinator

        coordinators = CoordinatorContext(
            node_id=self.node_id, clock=clock, metadata=self.metadata, replicas=self.replicas,
            config_source=lambda: self.config, cluster_source=lambda: self.controller is not None,
            random=self.random, fenced_source=self.fenced_brokers,
        )
        self.groups = GroupCoordinator.for_context(coordinators)
        self.txn = TransactionCoordinator.for_context(coordinators, self.groups, self.producer_ids.next_id)
        # What handlers see of this broker (shoal.services).
        self.services = Services(
            node_id=self.node_id, clock=clock, metadata=self.metadata, replicas=self.replicas,
            quotas=self.quotas, mutation_quotas=self.mutation_quotas, producer_ids=self.producer_ids,
            fetch_sessions=self.fetch_sessions, registry=self.registry,
            config_source=lambda: self.config, controller_source=lambda: self.controller_id,
            cluster_source=lambda: self.controller is not None, fenced_source=self.fenced_brokers, groups=self.groups,
            txn=self.txn, random=self.random,
        )

    def fenced_brokers(self) -> frozenset[int]:
        """Registered brokers placement leaves out: those the controller treats as gone
        (``Controller.fenced_brokers``) and those being removed (``shoal.balancer.remove.brokers``:
        nothing new is placed on a draining broker)."""
        if self.controller is None:
            return frozenset()
        removing = self.config.get("shoal.balancer.remove.brokers") or ()
        return self.controller.fenced_brokers | frozenset(int(b) for b in removing)

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
        # -- features (KIP-584): refuse a cluster whose finalized levels this release cannot run at
        why = features.refusal(self.metadata.image.features.levels, features.supported(), __version__)
        if why is not None:
            raise MetadataError("UNSUPPORTED_VERSION", why)
        # -- auth: TLS contexts and SASL settings per listener; bootstrap SCRAM users.
        from shoal.auth import ensure_bootstrap_users, jwks_caches, listener_security

        self.listener_security = listener_security(self.static_config)
        for cache in jwks_caches(self.listener_security):  # OAUTHBEARER: the first fetch, off the loop, not awaited
            asyncio.get_running_loop().run_in_executor(None, cache.refresh)
        if hasattr(getattr(self.metadata, "backend", None), "registration"):  # a cluster: followers log in to leaders
            from shoal.net.interbroker import inter_broker_security

            inter_broker_security(self.static_config)
        await ensure_bootstrap_users(self.static_config, self.metadata)
        self.services.listener_security = self.listener_security
        await asyncio.to_thread(self.replicas.load)  # the logs on disk (tenancy: and moves we did not apply)
        self.replicas.start()
        self.metadata.subscribe(self.replicas.on_metadata)
        self.quotas.update(self.metadata.image)  # quotas: follow client quotas and leaders
        self.metadata.subscribe(self.quotas.on_metadata)
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
        from shoal.txn.coordinator import configured_transaction_version

        await self.metadata.finalize_missing_features(features.defaults(configured_transaction_version(self.config)))
        self.metadata.subscribe(self._on_features)
        if hasattr(self.metadata, "backend") and hasattr(self.metadata.backend, "registration"):
            from shoal.cluster.controller import Controller  # cluster: the controller election

            self.controller = Controller(self.metadata, self.node_id, int(self.config.get("broker.session.timeout.ms")),
                                         unclean=self._unclean_election, rebalance=self._rebalance_settings,
                                         inter_broker=self._inter_broker_endpoint, balancer=self._balancer())
            self.controller.start()
        await self.groups.start()  # groups: creates __consumer_offsets if missing, loads it
        await self.txn.start()  # txn: loads the __transaction_state partitions led here
        # -- cluster: per-partition load and capacity, the balancer's inputs (shoal.cluster.load)
        from shoal.cluster.load import LoadReporter
        from shoal.etcd.client import DEFAULT_PREFIX

        backend = getattr(self.metadata, "backend", None)
        self.load_reporter = LoadReporter(
            self.node_id, self.replicas.hosted, list(self.static_config.log_dirs), lambda: self.config,
            self.clock.now_ms, getattr(backend, "session", None), getattr(backend, "prefix", DEFAULT_PREFIX))
        # -- admin: the HTTP admin API (tenants, namespaces), when shoal.admin.listener is set;
        # up before the Kafka listeners serve, so a client that reaches those finds it too.
        admin_listener = self.static_config.get("shoal.admin.listener")
        if admin_listener:
            from shoal.admin.http import AdminHttpServer
            from shoal.admin.http_listener import parse_listener
            from shoal.auth import shared_backoff

            self.admin_http = AdminHttpServer(self.metadata, *parse_listener(admin_listener),
                                              broker_config=lambda: self.config,
                                              login_backoff=shared_backoff(self.listener_security),
                                              cluster_load=self.load_reporter.cluster_load,
                                              balancer=self._balancer_service(), live_usage=self._live_usage)
            self._mount_console()  # console: the web UI under /ui/ on the same listener
            await self.admin_http.start()
        for server in self._servers:
            await server.start_serving()
        self._periodic = asyncio.create_task(self._run_periodic())
        self.replicas.start_background()  # replica: ISR checks, follower fetchers
        # -- quotas: broker-wide limits and auto-tuned tenant quotas (shoal.quotas.autotune)
        from shoal.quotas.autotune import BrokerProtection

        self.protection = BrokerProtection.for_broker(self)
        self._protection_task = asyncio.create_task(self.protection.run(self.clock))
        from shoal.quotas.demand import DemandExchange  # quotas: tenant-wide quotas split by demand

        self.demand_exchange = DemandExchange.for_broker(self)
        self.demand_exchange.start()
        self.load_reporter.start()
        if self._metering_enabled():  # metering: windows every shoal.metering.interval.ms
            from shoal.metering.publisher import UsagePublisher

            self.metering = UsagePublisher(self)
            self._metering_task = asyncio.create_task(self.metering.run())
        metrics_listener = self.static_config.get("shoal.metrics.listener")
        if metrics_listener:  # quotas: the Prometheus endpoint
            from shoal.admin.metrics import MetricsHttpServer

            self.metrics_http = MetricsHttpServer(self, metrics_listener)
            await self.metrics_http.start()
        log.info(
            "broker %d started: %s, data in %s, cluster id %s, shoal %s (Python %s)",
            self.node_id,
            ", ".join(f"{l.name}://{l.host}:{l.port}" for l in self.listeners),
            self.data_dir,
            self.metadata.image.cluster_id,
            __version__,
            platform.python_version(),
        )

    def _metering_enabled(self) -> bool:
        from shoal.metering.counters import is_usage_hook

        return is_usage_hook(self.metrics)

    def _live_usage(self) -> Any:
        """Per tenant this broker's usage since it started (the metering sampler's), for the admin
        API's GET /v1/tenants/{id}/usage: (samples, node id, since ms); None while metering is off."""
        if self.metering is None:
            return None
        return self.metering.sampler.sample(), self.node_id, self.metering.incarnation

    def _on_features(self, old: MetadataImage, new: MetadataImage) -> None:
        """A finalized level this release cannot run at, set while this broker was not registered
        (UpdateFeatures checks the registered brokers' ranges): one error line; a restart refuses."""
        if new.features is old.features:
            return
        why = features.refusal(new.features.levels, features.supported(), __version__)
        if why is not None:
            log.error("%s; this broker keeps serving but will not start again on this release", why)

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
            features=features.supported(),
            host_id=self.static_config.host_id or "",  # else the advertised host stands for it
        )

    def _inter_broker_endpoint(self, info: BrokerInfo) -> tuple[tuple[str, int], Any]:
        """Where another broker takes inter-broker connections and how to log in there (the
        controller's held connections, as a follower's fetches)."""
        from shoal.net.interbroker import inter_broker_endpoint, inter_broker_security

        return inter_broker_endpoint(self.config, info), inter_broker_security(self.config)

    def _rebalance_settings(self) -> tuple[bool, float, int]:
        cfg = self.config
        return (bool(cfg.get("auto.leader.rebalance.enable")), float(cfg.get("leader.imbalance.check.interval.seconds")),
                int(cfg.get("leader.imbalance.per.broker.percentage")))

    def _balancer(self) -> Any:
        """The controller's balancer (issue 27; shoal.cluster.balancer.executor), on an etcd cluster."""
        from shoal.cluster.balancer.executor import Balancer
        from shoal.cluster.balancer.expansion import Expansion
        from shoal.cluster.balancer.inputs import expansion_settings_of, settings_of
        from shoal.cluster.controller import PREFERRED, election_change

        def reports() -> Any:  # the load reports as last read (the reporter starts after the controller)
            reporter = self.load_reporter
            return reporter.latest if reporter is not None and reporter.steps else None
        expansion = Expansion(reports, lambda: expansion_settings_of(self.config))
        return Balancer(self.metadata, self.node_id, lambda: settings_of(self.config), self._balancer_configs_of,
                        lambda image, wanted: election_change(image, PREFERRED, wanted), loads=self._balancer_loads,
                        expansion=expansion)

    async def _balancer_loads(self) -> Any:
        """The cluster's capacities and per-partition loads, as the brokers last reported them."""
        if self.load_reporter is None:  # not started yet
            return {}, {}
        load = await self.load_reporter.cluster_load()
        return load.capacities(), load.partition_loads()

    def _balancer_configs_of(self, image: Any, topic: str) -> dict[str, str]:
        from shoal.cluster.balancer.inputs import placement_configs

        return placement_configs(self.config, image, topic)

    def _balancer_service(self) -> Any:
        """The balancer's operator commands on this broker (the admin API), on an etcd cluster."""
        controller = self.controller
        if controller is None:
            return None
        from shoal.cluster.balancer.service import BalancerService

        return BalancerService(self.metadata, lambda: self.config, self._balancer_configs_of,
                               controller.balancer_status, lambda: controller.fenced_brokers, loads=self._balancer_loads)

    def _unclean_election(self, image: Any, topic: str) -> bool:
        """``unclean.leader.election.enable`` of ``topic``: its own, its namespaces' or tenant's
        (KIP-37 inheritance), else the broker's."""
        from shoal.config import topic_config_value
        from shoal.metadata.inheritance import topic_overrides

        info = image.topics.get(topic)
        overrides = topic_overrides(image, topic, info.configs) if info is not None else {}
        return bool(topic_config_value(self.config, overrides, "unclean.leader.election.enable"))

    async def controlled_shutdown(self, timeout: float = 10.0) -> None:
        """cluster: before a clean stop, move this broker's leaderships to other ISR members and
        leave every ISR (``controlled.shutdown.enable``; ``shoal.cluster.controller.shutdown_change``),
        so producers see NOT_LEADER_OR_FOLLOWER and move on instead of timing out."""
        if self.controller is None or not bool(self.config.get("controlled.shutdown.enable")):
            return
        from shoal.cluster.controller import controlled_shutdown

        t0 = asyncio.get_running_loop().time()
        try:
            moved = await asyncio.wait_for(
                controlled_shutdown(self.metadata, self.node_id, self.replicas), timeout)
        except Exception as e:  # etcd unreachable, or too slow: the leases will do it, later
            log.warning("controlled shutdown: could not move leaderships away: %s", str(e) or type(e).__name__)
            return
        log.info("controlled shutdown: %d leaderships moved in %.0f ms", moved,
                 (asyncio.get_running_loop().time() - t0) * 1000)

    def _mount_console(self) -> None:
        """The Shoal Console (shoal.console) under /ui/ on the admin listener, logging each user in
        to one of this broker's SASL listeners with SCRAM (shoal.console.listener, else the first
        SASL_PLAINTEXT one, else the first SASL_SSL one), behind the login backoff its listeners
        share; the super users get its operator pages, which call this admin API's own handlers in
        process. Over SASL_SSL the console's clients check the listener's certificate against its
        own truststore and, unless ssl.endpoint.identification.algorithm is empty, for the
        listener's advertised host name (on a wildcard address they connect to 127.0.0.1, still
        checking that name); without a truststore the console is not served (one log line)."""
        if not self.config.get("shoal.console.enable"):
            return
        from shoal.auth import shared_backoff
        from shoal.console import console_app
        from shoal.console.operator_data import InProcessAdminApi
        from shoal.net.interbroker import listener_tls_client
        from shoal.tenancy.scope import super_users

        wanted = self.static_config.get("shoal.console.listener")
        candidates = []
        for listener in self.listeners:
            sec = self.listener_security[listener.name]
            scram = [m for m in ("SCRAM-SHA-512", "SCRAM-SHA-256") if m in sec.sasl_mechanisms]
            if sec.protocol in ("SASL_PLAINTEXT", "SASL_SSL") and scram and wanted in (None, listener.name):
                candidates.append((sec.protocol != "SASL_PLAINTEXT", listener, sec.protocol, scram[0]))
        why = (f"listener {wanted} is no SASL_PLAINTEXT or SASL_SSL listener with SCRAM" if wanted else
               "no SASL_PLAINTEXT or SASL_SSL listener with SCRAM for it to log users in through")
        for _tls, listener, protocol, mechanism in sorted(candidates, key=lambda c: c[0]):  # SASL_PLAINTEXT first
            host = "127.0.0.1" if listener.host in ("", "0.0.0.0", "::") else listener.host
            bootstrap, props, resolve = f"{host}:{listener.port}", {"security.protocol": protocol}, {}
            if protocol == "SASL_SSL":
                tls = listener_tls_client(self.static_config, listener.name)
                if tls is None:
                    why = (f"listener {listener.name} is SASL_SSL without an ssl.truststore.location for the "
                           "console's clients to check its certificate with")
                    continue
                props.update(tls)
                name, port = self._broker_info().endpoint(listener.name)  # the advertised name and port
                bootstrap = f"{name}:{port}"
                if (name, port) != (host, listener.port):
                    resolve[bootstrap] = f"{host}:{listener.port}"
            self.admin_http.mount("/ui", console_app(
                bootstrap, props, mechanism=mechanism,
                is_operator=lambda user: f"User:{user}" in super_users(self.config),
                backoff=shared_backoff(self.listener_security),
                force_secure_cookies=bool(self.config.get("shoal.console.secure.cookies")),
                admin_api=InProcessAdminApi(self.admin_http), resolve=resolve,  # the operator pages' API
                lag_client=self._console_lag_client,  # every group's lag, for the plot
                lag_interval_s=int(self.config.get("shoal.console.lag.interval.ms")) / 1000))
            log.info("Shoal Console on %s/ui/ (users log in through listener %s, %s)",
                     self.static_config.get("shoal.admin.listener").rstrip("/"), listener.name, protocol)
            return
        log.info("Shoal Console not served: %s", why)

    def _console_lag_client(self) -> Any:
        """The console's own Kafka client for its lag plot (every group, sampled cluster-wide):
        this broker's inter-broker login on its inter-broker endpoint, as another broker connects
        to it; that principal sees the physical cluster (with an authorizer it needs DESCRIBE on
        groups and topics, which the broker's principal in ``super.users`` has)."""
        from shoal.console.lag import sampler_client

        (host, port), security = self._inter_broker_endpoint(self._broker_info())
        return sampler_client(f"{host}:{port}", security)

    async def stop(self) -> None:
        step = ["controlled shutdown"]
        watchdog = asyncio.get_running_loop().call_later(
            STOP_WARN_S, lambda: log.warning("still stopping after %.0f s: waiting for %s", STOP_WARN_S, step[0]))
        try:
            await self._stop(step)
        finally:
            watchdog.cancel()

    async def _stop(self, step: list[str]) -> None:
        """The steps of a clean stop, in order; ``step[0]`` names the one running (a stop that
        hangs says where)."""
        await self.controlled_shutdown()
        step[0] = "the listeners and connections"
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
        step[0] = "metering's last window"
        if self._metering_task is not None:  # metering: the last window, once no client is served
            self._metering_task.cancel()
            try:
                await self._metering_task
            except asyncio.CancelledError:
                pass
            await self.metering.close()
            await self.metering.writer.close()
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
        step[0] = "the tenant-quota demand exchange"
        if self.demand_exchange is not None:  # quotas
            await self.demand_exchange.stop()
        step[0] = "the balancer load reporter"
        if self.load_reporter is not None:  # cluster
            await self.load_reporter.stop()
        step[0] = "the replica manager"
        await self.replicas.stop()  # replica: fetchers, ISR checks
        step[0] = "the controller"
        if self.controller is not None:  # cluster: the key goes with the lease, at close
            await self.controller.stop()
        step[0] = "the transaction coordinator"
        await self.txn.stop()  # txn
        step[0] = "the group coordinator"
        await self.groups.stop()  # groups
        step[0] = "the logs' close"
        await asyncio.to_thread(self.logs.close)
        step[0] = "the metadata store's close"
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
                self.replicas.retry_unreconciled()
                await asyncio.to_thread(self.logs.run_periodic, self.clock.now_ms())
            except Exception:
                log.exception("periodic log maintenance failed")
