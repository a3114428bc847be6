"""A broker: the logs, the socket server, the metrics endpoint and the ZooKeeper registration.

Start order: load (and recover) the logs, start flushing and retention, bind the socket,
register in ZooKeeper with the bound port, take the roles of its replicas and join the
controller election (replication/, in the registration's session), open the metrics port.
Stop order (SIGTERM or SIGINT): hand the leaderships of replicated partitions over while
still serving (controlled shutdown, replication/shutdown.py), stop accepting, finish the
requests in flight, leave the election and the replicas, leave ZooKeeper, flush every log and
write the clean-shutdown marker. A broker whose id is taken in ZooKeeper does not start.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import resource
import signal
import ssl
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..client.connection import BrokerConnection
from ..config import BrokerConfig
from ..protocol.errors import LogbrokerError, describe_exception
from ..replication.epochs import FILE_NAME as EPOCH_FILE
from ..security.credentials import UserCredentials
from ..security.listeners import (
    KAFKA08,
    PLAINTEXT,
    WIRE_08,
    Listener,
    advertised,
    broker_listeners,
    inter_broker_listener,
    inter_broker_protocol,
    listener_context,
    listener_mechanisms,
)
from ..security.sasl import SaslClientConfig, ServerAuthenticator
from ..security.tls import TLS_PROTOCOLS, client_context
from ..storage.log import Clock
from ..storage.log_manager import LogManager, system_clock
from .authorization import RequestAuthorizer
from .connection import ClientConnection
from .handlers import RequestHandlers
from .log_limiter import RateLimitedLog
from .memory import keep_freed_memory
from .metrics import BrokerMetrics, MetricsServer, serve_metrics
from .socket_server import SocketServer, descriptor_use
from .waiters import AppendWaiters

if TYPE_CHECKING:
    from ..replication.controller import Controller
    from ..replication.metadata_cache import MetadataCache
    from ..replication.replicas import ReplicaManager
    from ..security.acl_store import AclCache
    from .kafka08_apis import Kafka08Apis
    from .registration import BrokerRegistration

log = logging.getLogger(__name__)


class StartupError(LogbrokerError):
    """The broker could not start; the message names the step, the cause is chained."""


class BrokerServer:
    def __init__(self, config: BrokerConfig, clock: Clock = system_clock) -> None:
        self.config = config
        self.clock = clock
        self.logs: LogManager | None = None
        self.registration: BrokerRegistration | None = None
        self.replicas: ReplicaManager | None = None
        self.controller: Controller | None = None
        self.server: SocketServer | None = None
        self.server08: SocketServer | None = None  # the Kafka 0.8 listener (port.08)
        self.metadata08: MetadataCache | None = None
        self.acls: AclCache | None = None  # with authorizer.class.name: the ACLs' copy
        self.credentials: UserCredentials | None = None  # SASL's, when it is on
        # the listeners besides PLAINTEXT and KAFKA08 (`listeners`: SSL, SSL08, ...)
        self.more_servers: dict[str, SocketServer] = {}
        self.more_metadata: list[MetadataCache] = []
        self.addresses: dict[str, tuple[str, int]] = {}  # listener name -> bound address
        self.metrics = BrokerMetrics(config.brokerid)
        self.waiters = AppendWaiters()
        self.replica_waiters = AppendWaiters()  # followers' REPLICA_FETCHes (handlers.py)
        self.address: tuple[str, int] | None = None
        self.address08: tuple[str, int] | None = None
        self.metrics_address: tuple[str, int] | None = None
        self._step = "starting"  # what start() is doing, for its error message
        self._metrics_server: MetricsServer | None = None

    async def start(self) -> None:
        """Start every part, in order; raises StartupError naming the step that failed,
        with the original exception as its cause, after stopping what had started."""
        started = time.monotonic()
        config = self.config
        try:
            await self._start_parts()
        except Exception as exc:
            raise StartupError(
                f"broker {config.brokerid} could not start: {self._step} failed: "
                f"{describe_exception(exc)}{_descriptor_shortage(exc)}"
            ) from exc
        assert self.address is not None and self.logs is not None
        log.info(
            "broker %d listening on %s:%d%s%s (log.dir %s, %d logs, %s, metrics %s) in %.0f ms",
            config.brokerid,
            *self.address,
            f", Kafka 0.8 on {self.address08[0]}:{self.address08[1]}" if self.address08 else "",
            "".join(
                f", {name} on {self.addresses[name][0]}:{self.addresses[name][1]}"
                for name in self.more_servers
            ),
            self.logs.log_dir,
            len(self.logs.logs()),
            f"zookeeper {config.zk_connect}" if config.enable_zookeeper else "no zookeeper",
            f"http://{self.metrics_address[0]}:{self.metrics_address[1]}/metrics"
            if self.metrics_address
            else "off",
            (time.monotonic() - started) * 1000,
        )

    async def _start_parts(self) -> None:
        loop = asyncio.get_running_loop()
        config = self.config
        self._step = f"loading the logs in log.dir {config.log_dir}"
        # a replica's directory holds its epoch file (replication/epochs.py): read as such
        # with or without ZooKeeper, so that no replica is ever served as a 0.7 topic
        self.logs = LogManager(
            config, self.clock, on_new_topic=self._on_new_topic, replica_marker=EPOCH_FILE
        )
        try:
            self._step = "starting the log flusher and cleaner"
            self.logs.start_background()
            # One limit for every line a client can cause, whichever part writes it.
            warnings = RateLimitedLog(
                logging.getLogger("logbroker.server.connection"),
                config.connection_log_interval_ms / 1000,
            )
            if config.enable_zookeeper:
                from ..replication.replicas import ReplicaManager  # kazoo only when needed

                self.replicas = ReplicaManager(
                    config.brokerid,
                    self.logs,
                    lag_time_max_ms=config.replica_lag_time_max_ms,
                    min_insync_replicas=config.min_insync_replicas,
                    fetch_max_bytes=config.replica_fetch_max_bytes,
                    fetch_wait_max_ms=config.replica_fetch_wait_max_ms,
                    checkpoint_interval_ms=config.replica_high_watermark_checkpoint_interval_ms,
                    # a broker paused as long as its session lasts may have lost it, and its
                    # leaderships with it; one paused less cannot have (a busy loop's stall
                    # must not count as a pause)
                    pause_limit_ms=config.zk_sessiontimeout_ms,
                    connect=_leader_connector(config),
                    leader_listener=inter_broker_listener(config),
                )
            handlers = RequestHandlers(
                self.logs,
                config,
                self.metrics,
                self.waiters,
                warnings=warnings,
                replicas=self.replicas,
                replica_waiters=self.replica_waiters,
            )
            if config.authorizer_enabled:
                # before the first request: until the ACLs are read, only super users pass
                handlers.authorizer = self._authorizer(warnings, loop)
            self.metrics.set_gauge_source(self._gauges)
            if self.replicas is not None:
                self.replicas.on_isr_change = self.metrics.isr_changed
                self.replicas.on_damaged_fetch = functools.partial(
                    self.metrics.error, "replica_fetch_damaged"
                )
            listeners = {x.name: x for x in broker_listeners(config)}
            announced = advertised(config)
            plain = listeners.pop(PLAINTEXT)
            # SASL on the listeners mapped to SASL_* only, each with its mechanisms
            plain_sasl = self._sasl(plain)
            self.server = SocketServer(
                config,
                handlers,
                self.metrics,
                loop,
                warnings,
                host=plain.host,
                port=plain.port,
                connection=lambda s: ClientConnection(s, plain_sasl),
            )
            self._step = f"listening on {plain.host}:{plain.port} (hostname, port)"
            self.address = self.addresses[PLAINTEXT] = await self.server.start()
            apis08 = None
            more08: list[Kafka08Apis] = []
            for listener in listeners.values():
                self._step = f"listening on {listener.host}:{listener.port} ({listener.name})"
                if listener.wire == WIRE_08:
                    if self.replicas is None:
                        continue  # 0.8 topics live in ZooKeeper: no 0.8 listener without it
                    apis, server = self._kafka08_listener(handlers, warnings, loop, listener)
                    bound = await server.start()
                    apis.advertised = announced.get(listener.name, (listener.host, bound[1]))
                    if listener.name == KAFKA08:
                        apis08, self.server08, self.address08 = apis, server, bound
                    else:
                        more08.append(apis)
                        self.more_servers[listener.name] = server
                else:
                    server = SocketServer(
                        config,
                        handlers,
                        self.metrics,
                        loop,
                        warnings,
                        host=listener.host,
                        port=listener.port,
                        tls=listener_context(config, listener),
                        name=listener.name,
                        connection=functools.partial(ClientConnection, sasl=self._sasl(listener)),
                    )
                    self.more_servers[listener.name] = server
                    bound = await server.start()
                self.addresses[listener.name] = bound
            registered = {
                name: announced.get(name, (listeners[name].host, bound[1]))
                for name, bound in self.addresses.items()
                if name != PLAINTEXT
            }
            if config.enable_zookeeper:
                self._step = f"registering in ZooKeeper {config.zk_connect} (zk.connect)"
                from .registration import BrokerRegistration  # kazoo only when needed

                self.registration = BrokerRegistration(
                    config.zk_connect,
                    config.brokerid,
                    *announced.get(PLAINTEXT, (plain.host, self.address[1])),
                    session_timeout_ms=config.zk_sessiontimeout_ms,
                    connection_timeout_ms=config.zk_connectiontimeout_ms,
                    topics=self._topic_partitions,
                    endpoints=registered or None,
                    zk_auth=config.zk_digest(),
                    set_acl=config.zookeeper_set_acl,
                )
                await loop.run_in_executor(None, self.registration.start)
                if config.zookeeper_set_acl:
                    self._step = "setting the ACLs of the brokers' znodes (zookeeper.set.acl)"
                    await loop.run_in_executor(None, self._secure_znodes)
                self._step = "taking the roles of this broker's replicas (replication)"
                from ..coordination.replication_state import ClusterDefaults
                from ..replication.controller import Controller

                client = self.registration.client
                assert client is not None and self.replicas is not None
                if self.acls is not None:
                    self._step = "reading the ACLs (authorizer.class.name)"
                    await loop.run_in_executor(None, self.acls.start, client)
                if self.credentials is not None:
                    self._step = "reading the users' credentials (/config/users)"
                    await loop.run_in_executor(None, self.credentials.start, client)
                await loop.run_in_executor(None, self.replicas.start, client, loop)
                self.controller = Controller(
                    client,
                    config.brokerid,
                    unclean_leader_election=config.unclean_leader_election_enable,
                    defaults=ClusterDefaults(
                        config.default_replication_factor, config.min_insync_replicas
                    ),
                )
                await loop.run_in_executor(None, self.controller.start)
                if apis08 is not None:
                    self._step = "reading the cluster's metadata (the 0.8 listener)"
                    apis08.group_offsets.client = client
                    self.metadata08 = apis08.metadata_cache
                    await loop.run_in_executor(None, self.metadata08.start, client)
                for apis in more08:
                    apis.group_offsets.client = client
                    self.more_metadata.append(apis.metadata_cache)
                    await loop.run_in_executor(None, apis.metadata_cache.start, client)
            if config.metrics_port >= 0:
                self._step = f"serving metrics on {config.hostname}:{config.metrics_port}"
                self._metrics_server = await serve_metrics(
                    self.metrics, config.hostname, config.metrics_port
                )
                self.metrics_address = self._metrics_server.address
        except BaseException:
            await self._stop_parts()
            raise

    def _secure_znodes(self) -> None:
        """Give the znodes made before zookeeper.set.acl was on the brokers' ACL (what Kafka's
        zookeeper-security-migration did), at every start: a few reads per znode."""
        from ..coordination import paths, replication_state
        from ..coordination.zk_acl import secure_tree
        from ..security.acls import ACL_CHANGES, ACL_ROOT
        from ..security.credentials import USERS_PATH

        assert self.registration is not None and self.registration.client is not None
        client = self.registration.client
        roots = (paths.BROKERS, replication_state.ROOT, ACL_ROOT, ACL_CHANGES, "/config")
        # Made now if missing, with the ACL: else a tool without the digest could make them
        # (the chroot is open) and own what the brokers read (the ACLs, the users).
        made = (replication_state.TOPICS, replication_state.ENDPOINTS, ACL_ROOT, ACL_CHANGES)
        for path in (*made, USERS_PATH, "/config/changes"):
            client.ensure_path(path)
        changed = secure_tree(client, roots, client.default_acl)
        if changed:
            log.info("zookeeper.set.acl: set the ACL of %d znodes made without it", changed)

    def _authorizer(
        self, warnings: RateLimitedLog, loop: asyncio.AbstractEventLoop
    ) -> RequestAuthorizer:
        """The authorizer over a copy of the ACLs, which the registration's ZooKeeper session
        loads and keeps up to date (updates applied on this loop: security/acl_store.py)."""
        from ..security.acl_store import AclCache
        from ..security.acls import Authorizer, parse_super_users

        self.acls = cache = AclCache(apply=loop.call_soon_threadsafe)
        authorizer = Authorizer(
            cache.get,
            parse_super_users(self.config.super_users),
            self.config.allow_everyone_if_no_acl_found,
            ready=lambda: cache.loaded,
        )
        return RequestAuthorizer(authorizer, warnings)

    def _kafka08_listener(
        self,
        handlers: RequestHandlers,
        warnings: RateLimitedLog,
        loop: asyncio.AbstractEventLoop,
        listener: Listener,
    ) -> tuple[Kafka08Apis, SocketServer]:
        """The Kafka 0.8 listener's APIs and socket server (their ZooKeeper parts are given
        their client once the registration has one: until then they answer as a broker that
        is starting does)."""
        from ..replication.metadata_cache import MetadataCache
        from .group_offsets import GroupOffsets
        from .kafka08_apis import Kafka08Apis
        from .kafka08_connection import Kafka08Connection

        assert self.replicas is not None
        apis = Kafka08Apis(
            self.config,
            self.replicas,
            MetadataCache(listener.name),  # its brokers at this listener's addresses
            GroupOffsets(),
            self.metrics,
            self.waiters,
            handlers.appended,
            advertised=(listener.host, listener.port),
            warnings=warnings,
        )
        apis.authorizer = handlers.authorizer
        sasl = self._sasl(listener)
        server = SocketServer(
            self.config,
            handlers,
            self.metrics,
            loop,
            warnings,
            host=listener.host,
            port=listener.port,
            connection=lambda s: Kafka08Connection(s, apis, sasl),
            tls=listener_context(self.config, listener),
            name=listener.name,
        )
        return apis, server

    def _sasl(self, listener: Listener) -> Callable[[], ServerAuthenticator] | None:
        """What makes each connection's SASL authenticator on `listener`, with its mechanisms
        (None: its clients do not log in)."""
        mechanisms = listener_mechanisms(self.config, listener)
        if not mechanisms:
            return None
        if self.credentials is None:
            self.credentials = UserCredentials()
        return functools.partial(ServerAuthenticator, mechanisms, self.credentials.lookup)

    def _topic_partitions(self) -> dict[str, int]:
        assert self.logs is not None
        return {topic: self.logs.partition_count(topic) for topic in self.logs.topics()}

    def _on_new_topic(self, topic: str, partitions: int) -> None:
        if self.registration is not None:
            self.registration.register_topic(topic, partitions)

    def _gauges(self) -> Iterable[tuple[str, dict[str, str], float, str]]:
        if self.logs is None:
            return
        for part_log in self.logs.logs():
            labels = {"topic": part_log.topic, "partition": str(part_log.partition)}
            yield ("logbroker_log_end_offset", labels, part_log.end_offset, "end of the log")
            yield ("logbroker_log_start_offset", labels, part_log.start_offset, "first offset kept")
            yield ("logbroker_log_size_bytes", labels, part_log.size_in_bytes, "bytes on disk")
        yield from self._replication_gauges()

    def _replication_gauges(self) -> Iterable[tuple[str, dict[str, str], float, str]]:
        """What docs/replication.md ("Metrics") lists; read on the event loop, like the
        followers' ends (a state is replaced whole by the replicas' worker)."""
        controller = self.controller
        active = 1 if controller is not None and controller.active else 0
        yield ("logbroker_active_controller_count", {}, active, "1 on the controller, else 0")
        leading = [r for r in self.replicas.replicas() if r.leading] if self.replicas else []
        yield ("logbroker_leader_count", {}, len(leading), "replicated partitions led here")
        short = sum(1 for r in leading if len(r.isr) < len(r.replicas))
        yield (
            "logbroker_under_replicated_partitions",
            {},
            short,
            "partitions led here whose ISR is short of their replicas",
        )
        for replica in leading:
            end = replica.log.end_offset
            for follower, fetched in sorted(replica.follower_end.items()):
                labels = {
                    "topic": replica.topic,
                    "partition": str(replica.partition),
                    "follower": str(follower),
                }
                yield (
                    "logbroker_follower_lag_bytes",
                    labels,
                    max(0, end - fetched),
                    "leader's log end minus the offset the follower last fetched from",
                )

    async def stop(self) -> None:
        log.info("broker %d shutting down", self.config.brokerid)
        await self._controlled_shutdown()
        self.waiters.wake_all()
        self.replica_waiters.wake_all()
        await self._stop_parts()
        log.info("broker %d stopped cleanly", self.config.brokerid)

    async def _controlled_shutdown(self) -> None:
        """Wait, serving, for the controller to move this broker's leaderships elsewhere."""
        config = self.config
        client = self.registration.client if self.registration is not None else None
        if not config.controlled_shutdown_enable or client is None or self.replicas is None:
            return
        from ..replication.shutdown import hand_over_leaderships

        await asyncio.get_running_loop().run_in_executor(
            None,
            hand_over_leaderships,
            client,
            self.replicas,
            config.controlled_shutdown_timeout_ms,
        )

    async def _stop_parts(self) -> None:
        loop = asyncio.get_running_loop()
        if self.server08 is not None:
            await self.server08.stop()
        if self.metadata08 is not None:
            self.metadata08.stop()
        if self.acls is not None:
            self.acls.stop()
        for server in self.more_servers.values():
            await server.stop()
        for cache in self.more_metadata:
            cache.stop()
        if self.server is not None:
            await self.server.stop()
            self.server.handlers.close()
        if self._metrics_server is not None:
            await self._metrics_server.stop()
            self._metrics_server = None
        if self.controller is not None:
            await loop.run_in_executor(None, self.controller.stop)
            self.controller = None
        if self.replicas is not None:
            await loop.run_in_executor(None, self.replicas.stop)
        if self.registration is not None:
            await loop.run_in_executor(None, self.registration.stop)
        if self.logs is not None:
            await loop.run_in_executor(None, self.logs.shutdown)
            self.logs = None


def _descriptor_shortage(exc: BaseException) -> str:
    """Why a start failed, when it is the descriptor limit hiding behind another error (a
    ZooKeeper client that cannot open its socket reports only that it cannot connect)."""
    causes: list[BaseException] = []
    while exc is not None and len(causes) < 10:
        causes.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    out_of_descriptors = any(
        isinstance(c, OSError) and c.errno in (errno.EMFILE, errno.ENFILE) for c in causes
    )
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        used = -1
    near_limit = soft != resource.RLIM_INFINITY and used >= soft * 0.9
    if not (out_of_descriptors or near_limit):
        return ""
    return (
        f" (the real cause: the broker is out of file descriptors, {descriptor_use()}; "
        "raise the limit, e.g. `ulimit -n`, or lower max.open.segment.files)"
    )


async def serve(config: BrokerConfig) -> None:
    """Run a broker until SIGTERM or SIGINT."""
    broker = BrokerServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await broker.start()
    await stop.wait()
    await broker.stop()


def run(config: BrokerConfig) -> int:
    keep_freed_memory()
    asyncio.run(serve(config))
    return 0


def _connect_to_leader(
    host: str,
    port: int,
    timeout_s: float,
    tls: ssl.SSLContext | None = None,
    sasl: SaslClientConfig | None = None,
) -> BrokerConnection:
    """How a replica fetcher reaches its leader: the client's blocking connection (over TLS
    and logged in with this broker's own credentials as the listeners ask)."""
    return BrokerConnection(host, port, timeout=timeout_s, tls=tls, sasl=sasl)


def _leader_connector(config: BrokerConfig) -> Callable[[str, int, float], BrokerConnection]:
    """Followers' connections: over TLS with this broker's own certificate (its principal
    is what the leader checks) when security.inter.broker.protocol is SSL or SASL_SSL, and
    logged in with sasl.jaas.config when it is SASL_*."""
    protocol = inter_broker_protocol(config)
    context = None
    if protocol in TLS_PROTOCOLS:
        context = client_context(config.ssl_cafile, config.ssl_certfile, config.ssl_keyfile)
    sasl = config.inter_broker_sasl() if protocol.startswith("SASL_") else None
    return functools.partial(_connect_to_leader, tls=context, sasl=sasl)
