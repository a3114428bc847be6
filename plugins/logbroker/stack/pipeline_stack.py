"""The whole pipeline on one machine, for `make demo`, `make up` and the end-to-end tests.

    stack = PipelineStack(workdir).start()      ZooKeeper, the live and analysis clusters,
                                                the registry with the demo's schemas, and
                                                Airflow (api-server, scheduler, dag-processor,
                                                triggerer), every process bound to 127.0.0.1;
                                                with `registry_api_port`, Confluent's registry
                                                API over the registry (registry_api.py)
    stack.produce_hour(hour_ms, ...)            audited traffic for one simulated hour
    stack.trigger(dag_id) / backfill(...)       drive the DAGs through the real scheduler
    stack.stop()                                everything, by PID

Layout under `workdir`:

    zookeeper/                 one ZooKeeper; chroots /live, /analysis, /registry
    live-<id>/ analysis-<id>/  the brokers' log.dirs and logs (broker.log)
    airflow/                   AIRFLOW_HOME: SQLite database (unless on PostgreSQL),
                               logs/<component>.out, task logs
    postgres/                  with `postgres`: Airflow's database (logbroker.stack.postgres)
    spark/                     with `spark_cluster`: the standalone master's and workers' logs
    warehouse/                 the warehouse (a file:// URI), its _reports/ (Data Docs)
    schema-registry.log        with `registry_api_port`: `logbroker schema-registry`'s log
    pipeline.json              what the DAGs run (LOGBROKER_PIPELINE)
    security/                  with `security` (`make up`): the CA, certificates, users'
                               passwords and the ZooKeeper digest (stack/security.py)
    stack.json                 the PIDs, ports and URLs, for `make down` and for people

Spark runs in local mode inside the Airflow tasks (spark-submit per task, local[2]), or, given
a `spark_cluster` (`make up`), on that standalone cluster, which the stack starts and stops; with
`postgres=True` (`make up`) Airflow's metadata is on a PostgreSQL of the stack's own instead of
SQLite. Nothing here imports Airflow or Spark: Airflow is run as commands and driven through
its REST API.

`traffic_of` adds topics beyond the demo's three (the many-topics benchmark): each carries the
schema and the simulated traffic of the demo topic it names, under its own name.

Topics have 0.7's layout (`partitions` per broker) unless `replicated` names them with a
replication factor: then they are replicated topics of `partitions` x brokers partitions
in both clusters (docs/replication.md), which producers should send with
`request_required_acks=-1` for an acknowledgement to survive a leader's death.

`message_formats` (topic -> its `message.format`, "0.7" or "0.8"; by default the demo's,
traffic.MESSAGE_FORMATS: ad_clicks in 0.8's) makes a topic in Kafka 0.8's format in both
clusters: logical offsets and keys, served by every broker's 0.8 listener (port.08). Such a
topic is always a replicated one (its factor from `replicated`, else 1), so the mirror finds
it in the same format at both ends, and its loads checkpoint logical offsets.

`security=True` (`make up`; off for `make demo` and the tests' stacks) secures the clusters
as stack/security.py says: the brokers on SASL_SSL and SASL_SSL08 (SCRAM-SHA-256 logins) and
SSL08 (a client certificate: kcat's) beside their 0.7 port, where a client without a login is
User:ANONYMOUS and refused by the authorizer, replication between brokers only, the authorizer on with one
user per component and its ACLs, ZooKeeper's digest; the Airflow connections carry each
component's user (logbroker_live: the mirror's source and the closed-hour sensor;
logbroker_analysis: the loads; logbroker_analysis_mirror: the mirror's target;
logbroker_audit: the audit), and produce_hour sends as the traffic user. Every topic is then
an assigned one (`replicated` or 0.8-format): a 0.7 topic is created through a broker's
PLAINTEXT port, where the anonymous client may not create it.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..audit import AuditedProducer
from ..client.cluster import Cluster, ReplicatedPartition
from ..client.producer import Producer
from ..coordination.replication_state import MESSAGE_FORMATS
from ..include_files import include_path
from ..serde import SchemaRegistry
from ..serde.schemas import load_schema_file
from .airflow_stack import (
    API_SERVER_GRACE,
    LAST,
    AirflowStack,
    AirflowStackError,
    process_running,
    stop_task_processes,
)
from .broker import BrokerProcess
from .postgres import PostgresServer, stop_postmaster
from .registry_api import RegistryApiProcess
from .security import LISTENERS, StackSecurity
from .spark_standalone import SparkStandalone, stop_groups
from .traffic import MESSAGE_FORMATS as DEMO_FORMATS
from .traffic import TOPICS, activity
from .zookeeper import ZooKeeperServer

# `make demo` and `make up` run a checkout's DAGs (dags/ is not installed)
REPO_ROOT = Path(__file__).resolve().parents[3]
SCHEMAS = include_path("schemas")
TERMINAL = {"success", "failed"}
# The demo's loads and audits are small: JVM start and JIT warm-up are most of each
# spark-submit. C1 only and the serial GC took a small local job from 33-42 s to 21-23 s here
# (2 cores); a large load would rather keep C2.
SMALL_JOB_CONF = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
# On a standalone cluster of this machine: the driver (in the task) binds loopback only and has
# no UI (it would listen on 0.0.0.0:4040); each application takes one core of one worker, so two
# loads run side by side on the two workers, and a small executor.
STANDALONE_CONF = {
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.cores.max": "1",
    "spark.executor.memory": "512m",
}
T = TypeVar("T")


@dataclass
class HourTraffic:
    """What one simulated hour sent: events per topic, and the extras."""

    hour_ms: int
    events: dict[str, int] = field(default_factory=dict)
    late: dict[str, int] = field(default_factory=dict)  # for the hour before, sent now
    bad_payloads: int = 0
    unsent: dict[str, int] = field(default_factory=dict)  # counted, never sent (lost)
    sent: int = 0  # events the brokers acknowledged (the late ones not included)


class PipelineStack:
    def __init__(
        self,
        workdir: Path,
        *,
        brokers_per_cluster: int = 2,
        partitions: int = 2,
        grace_hours: int = 2,
        hours: tuple[str, str | None] | None = None,
        catchup: bool = False,
        port: int | None = None,
        all_admins: bool = False,
        spark_master: str = "local[2]",
        spark_cluster: SparkStandalone | None = None,
        postgres: bool = False,
        extra_airflow_env: dict[str, str] | None = None,
        topics: tuple[str, ...] = TOPICS,
        replicated: Mapping[str, int] | None = None,
        message_formats: Mapping[str, str] | None = None,
        broker_settings: Mapping[str, str] | None = None,
        traffic_of: Mapping[str, str] | None = None,
        pipeline_settings: Mapping[str, Any] | None = None,
        registry_api_port: int | None = None,
        security: bool = False,
        log: Callable[[str], None] = print,
    ) -> None:
        self.workdir = Path(workdir).absolute()
        self.topics = topics  # the pipeline's topics (the demo's, traffic.TOPICS, or traffic_of's)
        # topic -> the demo topic whose schema and traffic it carries (the demo's own: itself)
        self.traffic_of = {**{t: t for t in TOPICS}, **(traffic_of or {})}
        self.replicated = dict(replicated or {})  # topic -> replication factor (>= 2)
        # topic -> "0.8" for each topic made in Kafka 0.8's format (the others: "0.7")
        self.message_formats = _message_formats(
            DEMO_FORMATS if message_formats is None else message_formats,
            (*self.traffic_of, "_audit"),
        )
        self.brokers_per_cluster = brokers_per_cluster
        self.partitions = partitions
        self.grace_hours = grace_hours
        # (first, last) "YYYY-MM-DDTHH": the only hours the load schedules (last None: no end)
        self.hours = hours
        self.catchup = catchup  # the scheduler creates a run for every hour since the last
        self.broker_settings = dict(broker_settings or {})  # every broker's, over num.partitions
        self.log = log
        self.zookeeper = ZooKeeperServer(self.workdir / "zookeeper")
        self.brokers: dict[str, list[BrokerProcess]] = {}
        self.spark_cluster = spark_cluster
        self.spark_master = spark_cluster.master_url if spark_cluster else spark_master
        self.postgres = PostgresServer(self.workdir / "postgres") if postgres else None
        self.airflow = AirflowStack(
            self.workdir / "airflow",
            dags_folder=REPO_ROOT / "dags",
            plugins_folder=REPO_ROOT / "plugins",
            port=port,
            all_admins=all_admins,
            extra_env={},  # filled in start(), once ZooKeeper's port is known
        )
        self.warehouse = self.workdir / "warehouse"
        self.extra_airflow_env = dict(extra_airflow_env or {})
        self.pipeline_settings = dict(pipeline_settings or {})  # more keys for pipeline.json
        # Confluent's registry API (`make up`): on this port, or a free one if it is taken
        self.registry_api: RegistryApiProcess | None = None
        if registry_api_port is not None:
            self.registry_api = RegistryApiProcess(self.workdir, "", registry_api_port)
        self.security: StackSecurity | None = None
        if security:
            plain = [t for t in (*self.traffic_of, "_audit") if not self._assigned(t)]
            if plain:
                raise ValueError(
                    f"security: {', '.join(plain)} would be 0.7 topics, created through a "
                    "broker's PLAINTEXT port; give them a replication factor (replicated)"
                )
            self.security = StackSecurity(self.workdir / "security", brokers_per_cluster)

    # -- where things are -------------------------------------------------------------

    def connect(self, chroot: str) -> str:
        return f"{self.zookeeper.connect_string}/{chroot}"

    @property
    def live(self) -> str:
        return self.connect("live")

    @property
    def analysis(self) -> str:
        return self.connect("analysis")

    @property
    def registry(self) -> str:
        return self.connect("registry")

    @property
    def warehouse_uri(self) -> str:
        return self.warehouse.as_uri()

    def airflow_env(self) -> dict[str, str]:
        def conn(zk: str, user: str) -> str:
            extra = {"schema_registry": self.registry, "acks": "ack"}
            if self.security is not None:  # contract B: login, password, the rest in extra
                return json.dumps(self.security.connection(user, zk, extra))
            return json.dumps({"conn_type": "logbroker", "host": zk, "extra": extra})

        users = {}
        if self.security is not None:  # the mirror's target and the audit: users of their own
            users = {
                "AIRFLOW_CONN_LOGBROKER_ANALYSIS_MIRROR": conn(self.analysis, "mirror"),
                "AIRFLOW_CONN_LOGBROKER_AUDIT": conn(self.analysis, "audit"),
            }
        return {
            "LOGBROKER_PIPELINE": str(self.workdir / "pipeline.json"),
            "AIRFLOW_CONN_LOGBROKER_LIVE": conn(self.live, "mirror"),  # and the sensor
            "AIRFLOW_CONN_LOGBROKER_ANALYSIS": conn(self.analysis, "loads"),
            **users,
            # Spark through Airflow's Spark provider: a connection of its type `spark`, given
            # explicitly (a missing one fails the task, never a silent default master).
            "AIRFLOW_CONN_LOGBROKER_SPARK_DEFAULT": json.dumps(
                {
                    "conn_type": "spark",
                    "host": self.spark_master,
                    "extra": {"conf": SMALL_JOB_CONF}
                    if self.spark_master.startswith("local")
                    else {"conf": {**SMALL_JOB_CONF, **STANDALONE_CONF}}
                    if self.spark_cluster is not None
                    else {},
                }
            ),
            # Two Spark JVMs at most on 2 cores: more only queue for the CPU.
            "AIRFLOW__CORE__PARALLELISM": "4",
            **self.extra_airflow_env,
        }

    # -- start and stop ---------------------------------------------------------------

    def start(self, airflow: bool = True) -> PipelineStack:
        """Airflow's migration and the Spark JVMs' start overlap ZooKeeper's and the brokers'
        (they need none of them): a `make up` is healthy sooner."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        migrating = ThreadPoolExecutor(max_workers=1, thread_name_prefix="airflow-migrate")
        migration: Future[AirflowStack] | None = None
        try:
            if self.postgres is not None:
                self.log(f"PostgreSQL, Airflow's database ({self.postgres.directory})")
                self.postgres.start()
                self.airflow.sql_alchemy_conn = self.postgres.sqlalchemy_url
            if airflow:  # (the migration needs none of airflow_env(): it is set after it)
                self.log(f"Airflow: migrating its database ({self.airflow.home})")
                migration = migrating.submit(self.airflow.migrate)
            if self.spark_cluster is not None:
                workers = self.spark_cluster.workers
                self.log(f"Spark: a master and {workers} workers ({self.spark_cluster.directory})")
                self.spark_cluster.launch()
            self.log(f"ZooKeeper ({self.workdir / 'zookeeper'})")
            self.zookeeper.start()
            for chroot in ("live", "analysis", "registry"):
                self.zookeeper.create_chroot(f"/{chroot}")
            for name, zk in (("live", self.live), ("analysis", self.analysis)):
                if self.security is not None:  # before the brokers: their own logins too
                    self.security.provision(name, zk, self.traffic_of)
                self.brokers[name] = [
                    self._broker(name, zk, i).start() for i in range(self.brokers_per_cluster)
                ]
                if self.security is not None:
                    ports = ", ".join(str(b.listener_ports["SASL_SSL"]) for b in self.brokers[name])
                    ports08 = ", ".join(str(port_08(b)) for b in self.brokers[name])
                    self.log(
                        f"{name} cluster: brokers on SASL_SSL 127.0.0.1:{ports}, Kafka 0.8 "
                        f"with client certificates on SSL08 {ports08} ({zk})"
                    )
                    continue
                ports = ", ".join(str(b.port) for b in self.brokers[name])
                ports08 = ", ".join(str(b.port_08) for b in self.brokers[name])
                self.log(
                    f"{name} cluster: brokers on 127.0.0.1:{ports}, Kafka 0.8 on {ports08} ({zk})"
                )
            self._register_schemas()
            if self.registry_api is not None:
                self.registry_api.zk_connect = self.registry  # ZooKeeper's port is known now
                self.registry_api.start()
                self.log(f"Confluent's schema registry API on {self.registry_api.url}")
            self._create_topics()
            self._write_pipeline()
            if self.spark_cluster is not None:
                self.spark_cluster.wait_alive()
            if migration is not None:
                migration.result()
                self.airflow.extra_env.update(self.airflow_env())
                self.log("Airflow: api-server, scheduler, dag-processor, triggerer")
                self.airflow.start()
            self._write_state()
        except BaseException:
            if migration is not None:  # its `airflow db migrate` ends before the database stops
                with contextlib.suppress(BaseException):
                    migration.result()
            self.stop()
            raise
        finally:
            migrating.shutdown(wait=False)
        return self

    def _broker(self, cluster: str, zk: str, broker_id: int) -> BrokerProcess:
        overrides = {"num.partitions": str(self.partitions), **self.broker_settings}
        if self.security is None:
            return BrokerProcess(
                self.workdir / f"{cluster}-{broker_id}",
                broker_id=broker_id,
                zk_connect=zk,
                overrides=overrides,
                port_08=0,  # Kafka 0.8's clients (kcat, confluent-kafka, kafka-python)
            )
        return BrokerProcess(
            self.workdir / f"{cluster}-{broker_id}",
            broker_id=broker_id,
            zk_connect=zk,
            overrides={**overrides, **self.security.broker_settings(broker_id)},
            listeners=dict.fromkeys(LISTENERS, 0),  # SASL_SSL08, SSL08 instead of port.08
            config_file=self.security.broker_file(cluster, broker_id),
        )

    def cluster(self, zk: str) -> Cluster:
        """An admin's Cluster of `zk`, in a ZooKeeper session holding the brokers' digest when
        they lock ZooKeeper down (coordination/zk_acl.py): make up's, or broker_settings'."""
        if self.security is not None:
            return Cluster(zk, zk_auth=self.security.zk_auth)
        return Cluster(zk, zk_auth=self.broker_settings.get("zookeeper.auth") or None)

    def client_properties(self, user: str) -> dict[str, str]:
        """`user`'s Kafka client properties (none without security: PLAINTEXT)."""
        return {} if self.security is None else self.security.client_properties(user)

    def _register_schemas(self) -> None:
        with SchemaRegistry(self.registry) as registry:
            for topic, demo in self.traffic_of.items():
                registry.register(topic, load_schema_file(SCHEMAS / f"{demo}.avsc"))
            registry.register("_audit", load_schema_file(SCHEMAS / "audit_count.avsc"))

    def message_format(self, topic: str) -> str:
        """A topic's message.format: "0.8" (logical offsets, keys) or "0.7"."""
        return self.message_formats.get(topic, "0.7")

    def _create_topics(self) -> None:
        """The topics in both clusters; on a stack started again (`make up` resuming), the
        replicated ones are there already and keep their assignment (and their format)."""
        every = (*self.traffic_of, "_audit")
        # a 0.8-format topic has an assignment, as a replicated one has (docs/protocol.md)
        replicated = {t: self.replicated.get(t, 1) for t in every if self._assigned(t)}
        plain = [t for t in every if t not in replicated]
        for zk in (self.live, self.analysis):
            with self.cluster(zk) as cluster:
                for topic in plain:
                    cluster.create_topic(topic, self.partitions)
                for topic, factor in sorted(replicated.items()):
                    wanted = self.message_format(topic)
                    found = cluster.assignment(topic)
                    if found is not None:
                        if found.message_format != wanted:
                            self.log(
                                f"{topic}: kept in the {found.message_format} format it was "
                                f"created in ({zk}), not {wanted}"
                            )
                        continue
                    partitions = self.partitions * self.brokers_per_cluster
                    cluster.create_replicated_topic(
                        topic, partitions, factor, message_format=wanted
                    )
                _wait_registered(cluster, zk, plain)
        by_format: dict[str, list[str]] = {}
        for topic in every:
            by_format.setdefault(self.message_format(topic), []).append(topic)
        self.log(
            "topics: "
            + "; ".join(f"{', '.join(ts)} in the {f} format" for f, ts in sorted(by_format.items()))
        )

    def _assigned(self, topic: str) -> bool:
        return topic in self.replicated or self.message_format(topic) != "0.7"

    def replication(self) -> dict[str, dict[str, list[ReplicatedPartition]]]:
        """cluster name -> replicated topic -> its partitions (replicas, leader, ISR)."""
        found: dict[str, dict[str, list[ReplicatedPartition]]] = {}
        for name, zk in (("live", self.live), ("analysis", self.analysis)):
            with self.cluster(zk) as cluster:
                found[name] = {t: cluster.describe_replicated(t) for t in sorted(self.replicated)}
        return found

    def _write_pipeline(self) -> None:
        pipeline: dict[str, Any] = {
            "live_clusters": [{"name": "live", "conn_id": "logbroker_live"}],
            "analysis_conn_id": "logbroker_analysis",
            "spark_conn_id": "logbroker_spark_default",
            "topics": list(self.topics),
            "warehouse": self.warehouse_uri,
            "reports": None,
            "grace_hours": self.grace_hours,
            "max_bad_fraction": 0.01,
        }
        if self.hours is not None:
            first, last = self.hours
            pipeline["start_date"] = f"{first}:00:00+00:00"
            if last is not None:
                pipeline["end_date"] = f"{last}:00:00+00:00"
        if self.catchup:
            pipeline["catchup"] = True
        if self.security is not None:  # contract B's conn ids: users of their own
            pipeline["mirror_target_conn_id"] = "logbroker_analysis_mirror"
            pipeline["audit_conn_id"] = "logbroker_audit"
        pipeline.update(self.pipeline_settings)
        (self.workdir / "pipeline.json").write_text(json.dumps(pipeline, indent=1) + "\n")

    def _write_state(self) -> None:
        state = {
            "zookeeper": {"pid": self.zookeeper.pid, "connect": self.zookeeper.connect_string},
            "brokers": {
                name: [
                    {
                        "id": b.broker_id,
                        "pid": b.pid,
                        "port": b.port,
                        "port.08": port_08(b),
                        **({"listeners": b.listener_ports} if b.listener_ports else {}),
                    }
                    for b in brokers
                ]
                for name, brokers in self.brokers.items()
            },
            "airflow": {
                "url": self.airflow.url,
                "username": self.airflow.username,
                "pids": {n: p.pid for n, p in self.airflow.processes.items()},
            },
            "warehouse": self.warehouse_uri,
        }
        if self.security is not None:
            state["security"] = {
                "directory": str(self.security.directory),
                "cafile": str(self.security.cafile),
                "protocol": "SASL_SSL",
            }
        if self.registry_api is not None:
            state["schema_registry"] = {"pid": self.registry_api.pid, "url": self.registry_api.url}
        if self.postgres is not None:
            state["postgres"] = {"pid": self.postgres.pid, "port": self.postgres.port}
        if self.spark_cluster is not None:
            state["spark"] = {
                "master": self.spark_cluster.master_url,
                "ui": self.spark_cluster.ui_url,
                "pids": self.spark_cluster.pids(),
            }
        (self.workdir / "stack.json").write_text(json.dumps(state, indent=1) + "\n")

    def stop(self) -> None:
        """Stop everything this stack started, by PID: Airflow, Spark, brokers, ZooKeeper,
        PostgreSQL (last: Airflow writes to it until it stops)."""
        with contextlib.suppress(Exception):
            self.airflow.stop()
        if self.spark_cluster is not None:
            with contextlib.suppress(Exception):
                self.spark_cluster.stop()
        if self.registry_api is not None:
            with contextlib.suppress(Exception):
                self.registry_api.stop()
        for brokers in self.brokers.values():
            for broker in brokers:
                with contextlib.suppress(Exception):
                    broker.stop(timeout=20)
        with contextlib.suppress(Exception):
            self.zookeeper.stop()
        if self.postgres is not None:
            with contextlib.suppress(Exception):
                self.postgres.stop()
        with contextlib.suppress(FileNotFoundError):
            (self.workdir / "stack.json").unlink()

    def __enter__(self) -> PipelineStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- traffic ----------------------------------------------------------------------

    def produce_hour(
        self,
        hour_ms: int,
        events: dict[str, int],
        *,
        late: dict[str, int] | None = None,
        bad_payloads: int = 0,
        unsent: dict[str, int] | None = None,
        seed: int = 7,
        acks: str = "ack",
        batch: int = 500,
        pause_s: float = 0.0,
        retries: int | None = None,
        request_required_acks: int | None = None,
    ) -> HourTraffic:
        """One simulated hour on the live cluster, by audited producers (acknowledged, snappy).

        `late`: events of the hour before, sent now (they reach a later load); `bad_payloads`:
        raw bytes on the first topic that are not events (bad records for the load);
        `unsent`: events counted for the audit but never sent (lost on purpose). `pause_s`
        between batches spreads the sending over time (the chaos run's steady rate).
        `request_required_acks=-1`: acknowledged once every in-sync replica has a set (a
        0.7 topic's broker is its whole ISR). `acks="fsync"` holds for the 0.7-format topics:
        0.8's Produce has no fsync, so a 0.8-format topic's events go through a second
        producer at plain acks, their durability its replicas' (request_required_acks).
        """
        traffic = HourTraffic(hour_ms, dict(events), dict(late or {}), bad_payloads)

        def producer(acks: str) -> Producer:
            return Producer.from_properties(
                self.client_properties("traffic"),
                zk_connect=self.live,
                acks=acks,
                request_required_acks=request_required_acks,
                compression_codec="snappy",
                retries=retries,
                retry_backoff_ms=200,
            )

        fsync08 = acks == "fsync" and any(self.message_format(t) == "0.8" for t in events)
        with (
            SchemaRegistry(self.registry) as registry,
            AuditedProducer(producer(acks), registry) as audited,
            AuditedProducer(producer("ack"), registry)
            if fsync08
            else contextlib.nullcontext() as audited08,
        ):

            def audited_for(topic: str) -> AuditedProducer:
                return audited08 if audited08 and self.message_format(topic) == "0.8" else audited

            sends = [
                (topic, records[i : i + batch])
                for topic, count in events.items()
                for records in [self._activity(topic, hour_ms, count, seed)]
                for i in range(0, len(records), batch)
            ]
            for topic, records in sorted(sends, key=lambda s: s[1][0]["header"]["timestamp"]):
                # unkeyed: a dead broker's sets fail over
                audited_for(topic).send(topic, records)
                if pause_s:
                    time.sleep(pause_s)
            traffic.sent = audited.sent_events + (audited08.sent_events if audited08 else 0)
            for topic, count in (late or {}).items():
                records = self._activity(topic, hour_ms - 3_600_000, count, seed + 1)
                audited_for(topic).send(topic, records)
            for topic, count in (unsent or {}).items():
                # Counted as if sent, never sent: what a producer losing events looks like.
                records = self._activity(topic, hour_ms, count, seed + 2)
                counting = audited_for(topic)
                prepared = counting.prepare(topic, records)
                assert counting.publisher is not None
                counting.publisher.count_windows(topic, prepared.windows)
                traffic.unsent[topic] = count
            if bad_payloads:
                garbage = [b"not an event %d" % i for i in range(bad_payloads)]
                audited.producer.send(TOPICS[0], garbage, key="garbage")
        return traffic

    def _activity(self, topic: str, hour_ms: int, count: int, seed: int) -> list[dict[str, Any]]:
        # an unknown topic: activity() names it; a copy of a demo topic: the demo's records
        return activity(self.traffic_of.get(topic, topic), hour_ms, count, seed)

    # -- Airflow ----------------------------------------------------------------------

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        return str(self.airflow.trigger_dag_run(dag_id, conf)["dag_run_id"])

    def backfill(
        self,
        dag_id: str,
        first_hour: str,
        last_hour: str,
        reprocess: bool,
        max_active_runs: int = 1,
    ) -> int:
        """Backfill the hours [first_hour, last_hour] (logical dates are interval starts).

        Without `reprocess`, hours that already ran successfully are skipped ("failed": a
        DAG with depends_on_past must name one of the two reprocess behaviours)."""
        body = {
            "dag_id": dag_id,
            "from_date": f"{first_hour}:00:00Z",
            "to_date": f"{last_hour}:00:00Z",
            "reprocess_behavior": "completed" if reprocess else "failed",
            "max_active_runs": max_active_runs,
        }
        return int(self.airflow.create_backfill(body)["id"])

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        found = self.airflow.api("GET", f"/dags/{dag_id}/dagRuns?limit=100&order_by=run_after")
        return list(found["dag_runs"])

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 900) -> dict[str, Any]:
        def finished() -> dict[str, Any] | None:
            run = self.airflow.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
            return run if run["state"] in TERMINAL else None

        return self.wait_dag(dag_id, finished, timeout, f"{dag_id} run {run_id}")

    def wait_runs(
        self, dag_id: str, count: int, timeout: float = 900, since: Iterable[str] = ()
    ) -> list[dict[str, Any]]:
        """Wait until `count` runs not in `since` exist and every one has finished."""
        before = set(since)

        def finished() -> list[dict[str, Any]] | None:
            new = [r for r in self.runs(dag_id) if r["dag_run_id"] not in before]
            if len(new) >= count and all(r["state"] in TERMINAL for r in new):
                return new
            return None

        return self.wait_dag(dag_id, finished, timeout, f"{count} new run(s) of {dag_id}")

    def wait_dag(
        self,
        dag_id: str,
        predicate: Callable[[], T | None],
        timeout: float,
        what: str,
        sleep: float = 2,
    ) -> T:
        """`wait_for` on a DAG's runs. It stops at once if one of Airflow's processes exited
        (nothing would move again), and on either end the error says where the runs stand."""

        def moving() -> T | None:
            gone = self.airflow.exited()
            if gone:
                raise AirflowStackError(
                    f"airflow {', '.join(gone)} exited while waiting for {what}"
                )
            return predicate()

        try:
            return wait_for(moving, timeout, what, sleep=sleep)
        except AirflowStackError as exc:
            raise AirflowStackError(f"{exc}\n{self.stuck_report(dag_id)}") from None

    def stuck_report(self, dag_id: str, lines: int = 25) -> str:
        """Each run of a DAG with its unfinished tasks, and the tails of the scheduler's and
        the triggerer's logs: what a wait that timed out needs to be understood afterwards."""
        out = [f"runs of {dag_id}:"]
        try:
            for run in self.runs(dag_id):
                states = self.task_states(dag_id, run["dag_run_id"])
                pending = {t: s for t, s in states.items() if s != "success"}
                out.append(
                    f"  {run['dag_run_id']} ({run.get('run_type')}, interval "
                    f"{run.get('data_interval_start')}): {run['state']}; not successful: {pending}"
                )
        except AirflowStackError as exc:
            out.append(f"  (the REST API did not answer: {exc})")
        for name in ("scheduler", "triggerer", *self.airflow.exited()):
            log = self.airflow.home / "logs" / f"{name}.out"
            try:
                tail = log.read_text(errors="replace").splitlines()[-lines:]
            except OSError as exc:
                tail = [f"(unreadable: {exc})"]
            out.append(f"last {len(tail)} lines of {log}:")
            out.extend(f"  {line[:400]}" for line in tail)
        return "\n".join(out)

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        found = self.airflow.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        states: dict[str, str] = {}
        for ti in found["task_instances"]:
            name = ti["task_id"] + (f"[{ti['map_index']}]" if ti.get("map_index", -1) >= 0 else "")
            states[name] = str(ti["state"])
        return states

    def failure_details(self, dag_id: str, run_id: str) -> str:
        """The failed tasks of a run and where their logs are, for an error message."""
        failed = [t for t, s in self.task_states(dag_id, run_id).items() if s != "success"]
        logs = self.airflow.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        return f"{dag_id} {run_id}: tasks not successful: {failed}; task logs under {logs}"


def nudge_mirror(airflow: AirflowStack, dag_id: str, runs: Iterable[dict[str, Any]]) -> bool:
    """Trigger the mirror if an active run of `dag_id` has a wait_for_mirror sensor deferred
    and no mirror run is on its way: the sensor waits for the live cluster's ends as they were
    when it ran, and what was produced after the last mirror run waits for the scheduled one,
    up to 5 minutes away. True if it triggered one."""
    deferred = False
    for run in runs:
        if run["state"] not in ("queued", "running"):
            continue
        path = f"/dags/{dag_id}/dagRuns/{run['dag_run_id']}/taskInstances?limit=100"
        deferred = deferred or any(
            ti["task_id"].startswith("wait_for_mirror") and ti["state"] == "deferred"
            for ti in airflow.api("GET", path)["task_instances"]
        )
    if not deferred:
        return False
    mirrors = airflow.api("GET", "/dags/logbroker_mirror/dagRuns?state=queued&state=running")
    if mirrors["total_entries"]:
        return False
    airflow.trigger_dag_run("logbroker_mirror")
    return True


def _message_formats(formats: Mapping[str, str], topics: Iterable[str]) -> dict[str, str]:
    """topic -> "0.8" of `formats`, checked: a topic of the stack's, a format there is."""
    known = set(topics)
    out = {}
    for topic, value in formats.items():
        if topic not in known:
            raise ValueError(
                f"message_formats names {topic!r}, not a topic of the stack: {sorted(known)}"
            )
        if value not in MESSAGE_FORMATS:
            raise ValueError(
                f"message_formats: {topic!r} has message.format {value!r}, not one of "
                f"{', '.join(MESSAGE_FORMATS)}"
            )
        if value != "0.7":
            out[topic] = value
    return out


def port_08(broker: BrokerProcess) -> int | None:
    """A broker's Kafka 0.8 listener for Kafka's own clients: its SSL08 one (a secure stack:
    a client certificate, no login), else its port.08."""
    return broker.listener_ports.get("SSL08", broker.port_08)


def _since(started: float) -> str:
    return f"{time.monotonic() - started:.1f} s"


def _wait_registered(cluster: Cluster, zk: str, topics: Iterable[str]) -> None:
    """Registration in ZooKeeper follows a 0.7 topic's creation asynchronously: wait for it."""
    wanted = set(topics)
    wait_for(lambda: wanted <= set(cluster.topics()), 60, f"the topics' registration in {zk}")


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    *,
    sleep: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """The first truthy value of `predicate()`, polled until `timeout` seconds passed."""
    deadline = clock() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if clock() >= deadline:
            raise AirflowStackError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(sleep)


def stop_recorded(
    workdir: Path, grace: float = 30, log: Callable[[str], None] | None = None
) -> list[int]:
    """`make down`: stop by PID every process a stack recorded in `workdir`/stack.json.

    In stages, each stage's process groups together: the traffic (it publishes its audit
    counts while the brokers are still up), Airflow's running tasks, its scheduler,
    dag-processor and triggerer, what is left of its tasks, its api-server (the order and why:
    airflow_stack.LAST), the Spark workers (and their executors), the Spark master, the
    schema registry's API, the brokers, ZooKeeper, and PostgreSQL last (Airflow writes to it until it stops), by a fast
    shutdown of its postmaster."""
    state_file = Path(workdir) / "stack.json"
    if not state_file.exists():
        return []
    state = json.loads(state_file.read_text())
    spark = state.get("spark", {}).get("pids", {})
    airflow = state["airflow"]["pids"]
    stages = [
        [state["traffic"]["pid"]] if "traffic" in state else [],
        [pid for name, pid in airflow.items() if name not in LAST],
        [pid for name, pid in airflow.items() if name in LAST],
        [pid for name, pid in spark.items() if name != "master"],
        [pid for name, pid in spark.items() if name == "master"],
        [state["schema_registry"]["pid"]] if "schema_registry" in state else [],
        [b["pid"] for brokers in state["brokers"].values() for b in brokers],
        [state["zookeeper"]["pid"]],
    ]
    home = Path(workdir) / "airflow"
    names = ["traffic", "Airflow's scheduler, dag-processor, triggerer", "Airflow's api-server",
             "Spark workers", "Spark master", "the schema registry's API", "brokers",
             "ZooKeeper"]  # fmt: skip
    stopped = []
    for number, stage in enumerate(stages):
        started = time.monotonic()
        if number == 1:  # the running tasks first (airflow_stack.LAST says why)
            running = [pid for pid in airflow.values() if process_running(pid)]
            tasks = stop_task_processes(home, grace, spare=running)
            if log is not None:
                log(f"Airflow's running tasks: {len(tasks)} processes, {_since(started)}")
            started = time.monotonic()
        if number == 2:
            stop_task_processes(home, grace)
        pids = [pid for pid in stage if pid is not None and process_running(pid)]
        stop_groups(pids, min(grace, API_SERVER_GRACE) if number == 2 else grace)
        stopped += pids
        if log is not None and pids:
            log(f"{names[number]}: {len(pids)} process groups, {_since(started)}")
    postmaster = state.get("postgres", {}).get("pid")
    if postmaster is not None and process_running(postmaster):
        stop_postmaster(postmaster, grace)
        stopped.append(postmaster)
    state_file.unlink()
    return stopped
