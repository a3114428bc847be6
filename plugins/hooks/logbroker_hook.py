"""`LogbrokerHook`: one logbroker cluster as an Airflow connection of type `logbroker`.

The connection's fields (the form is declared in provider_info.py):

    host      the cluster's ZooKeeper connect string with its chroot,
              e.g. `127.0.0.1:2181/live` or `zk1:2181,zk2:2181,zk3:2181/analysis`
    login     the SASL user (Kafka's sasl.username)
    password  its password (sasl.password): Airflow keeps it encrypted and masks it in logs
    extra     {"schema_registry": "127.0.0.1:2181/registry",   # schema.registry.zk
               "compression_codec": "snappy", "acks": "ack",     # producers handed out
               "timeout_s": 10,
               # a client's non-secret settings, by Kafka's names (docs/security.md):
               "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
               "ssl.cafile": "/etc/logbroker/ca.pem", "ssl.certfile": ..., "ssl.keyfile": ...,
               "ssl.endpoint.identification.algorithm": "https"}

A secret in extra (sasl.password, sasl.jaas.config) is refused, naming the connection: the
password field is the one Airflow masks. As an environment variable (Airflow reads
`AIRFLOW_CONN_<ID>` as JSON):

    AIRFLOW_CONN_LOGBROKER_LIVE='{"conn_type": "logbroker", "host": "127.0.0.1:2181/live",
                                  "login": "mirror", "password": "...",
                                  "extra": {"schema_registry": "127.0.0.1:2181/registry",
                                            "security.protocol": "SASL_SSL",
                                            "sasl.mechanism": "SCRAM-SHA-256",
                                            "ssl.cafile": "/etc/logbroker/ca.pem"}}'

Everything built from a connection connects with its credentials: the cluster view, the
producers, the mirror's .properties files (operators.py), the trigger's polls, the Spark
load's source (through a 0600 file, never its command line).

The hook hands out the library's own clients (producers, consumers, the cluster view) and
reads offsets and lag; it never talks the wire protocol itself. Offsets come back keyed the
way the Spark data source's `startingOffsets` JSON is: topic -> "<broker_id>-<partition>" ->
offset, so one can be passed to the other; a replicated topic's partitions are "<p>" (their
latest offset is the leader's high watermark: docs/replication.md), as a consumer group's
offsets name them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

if TYPE_CHECKING:
    from logbroker.client.cluster import Cluster
    from logbroker.client.producer import Producer
    from logbroker.security.client import ClientCredentials

# topic -> "<broker_id>-<partition>" (a replicated topic's: "<p>") -> byte offset
Offsets = dict[str, dict[str, int]]


class LogbrokerHook(BaseHook):
    """A logbroker cluster: producers, consumers, offsets and lag, from one connection."""

    conn_name_attr = "logbroker_conn_id"
    default_conn_name = "logbroker_default"
    conn_type = "logbroker"
    hook_name = "Logbroker"

    def __init__(self, logbroker_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.logbroker_conn_id = logbroker_conn_id
        self._settings: dict[str, Any] | None = None

    # -- the connection ---------------------------------------------------------------

    @property
    def settings(self) -> dict[str, Any]:
        """zk_connect, schema_registry and client settings from the connection."""
        if self._settings is None:
            conn = self.get_connection(self.logbroker_conn_id)
            self._settings = connection_settings(
                conn.host,
                conn.port,
                conn.schema,
                conn.extra_dejson,
                self.logbroker_conn_id,
                login=conn.login,
                password=conn.password,
            )
        return self._settings

    @property
    def zk_connect(self) -> str:
        return str(self.settings["zk_connect"])

    @property
    def schema_registry(self) -> str | None:
        value = self.settings.get("schema_registry")
        return str(value) if value else None

    @property
    def client_properties(self) -> dict[str, str]:
        """The connection's client credentials as Kafka properties (security.protocol,
        ssl.*, sasl.*, the password included): for a .properties file kept 0600, never
        for a log line or a command line."""
        return dict(self.settings["client"])

    @property
    def credentials(self) -> ClientCredentials:
        return credentials_of(self.settings)

    def get_conn(self) -> Cluster:
        """The cluster as ZooKeeper sees it; the caller closes it (it is a context manager)."""
        return settings_cluster(self.settings)

    # -- clients ------------------------------------------------------------------------

    def producer(self, **overrides: Any) -> Producer:
        """A producer to this cluster (brokers from ZooKeeper), with the connection's
        compression and acks unless overridden."""
        from logbroker.client.producer import Producer

        credentials = self.credentials
        options: dict[str, Any] = {
            "compression_codec": self.settings["compression_codec"],
            "acks": self.settings["acks"],
            "security": credentials.security,
            "sasl": credentials.sasl,
        }
        options.update(overrides)
        return Producer(zk_connect=self.zk_connect, **options)

    # -- offsets and lag ----------------------------------------------------------------

    def end_offsets(self, topics: Iterable[str] | None = None) -> Offsets:
        """The latest offset of every partition of `topics` (all topics, replicated ones
        included, when None)."""
        with self.get_conn() as cluster:
            return cluster_end_offsets(cluster, topics)

    def committed_offsets(self, group: str) -> Offsets:
        """What consumer group `group` committed, per partition (nothing if it never did)."""
        with self.get_conn() as cluster:
            return group_committed_offsets(cluster, group)

    def lag(self, group: str) -> int:
        """The group's total lag in bytes over every partition it has an offset for."""
        with self.get_conn() as cluster:
            return sum(row.lag or 0 for row in cluster.group_partitions(group))

    def test_connection(self) -> tuple[bool, str]:
        """What the UI's Test button shows: the live brokers, or why there are none."""
        try:
            with self.get_conn() as cluster:
                brokers = cluster.live_brokers()
                topics = all_topics(cluster)
        except Exception as exc:  # the UI shows the message; anything may go wrong here
            return False, f"{type(exc).__name__}: {exc}"
        if not brokers:
            return False, f"ZooKeeper {self.zk_connect} answered, but no broker is registered"
        listed = ", ".join(f"{bid} at {b.host}:{b.port}" for bid, b in sorted(brokers.items()))
        return True, f"{len(brokers)} live broker(s): {listed}; {len(topics)} topic(s)"


def connection_settings(
    host: str | None,
    port: int | None,
    schema: str | None,
    extra: dict[str, Any],
    conn_id: str,
    *,
    login: str | None = None,
    password: str | None = None,
) -> dict[str, Any]:
    """The hook's settings from a connection's fields; a missing connect string, a secret in
    extra or a bad security setting is an error that names the connection (never the
    password). `client`: the credentials as Kafka properties (the module's doc)."""
    if not host:
        raise ValueError(
            f"connection {conn_id!r} has no host: set it to the cluster's ZooKeeper connect "
            "string, e.g. 127.0.0.1:2181/live"
        )
    zk_connect = host
    if port and ":" not in host:  # host and port given apart, chroot in `schema`
        zk_connect = f"{host}:{port}"
        if schema:
            zk_connect += "/" + schema.strip("/")
    # The connection form stores its fields under their names; older clients prefixed them.
    extra = {k.removeprefix("extra__logbroker__"): v for k, v in extra.items() if v is not None}
    acks = str(extra.get("acks", "ack"))
    if acks not in ("none", "ack", "fsync"):
        raise ValueError(f"connection {conn_id!r}: acks must be none, ack or fsync, not {acks!r}")
    return {
        "zk_connect": zk_connect,
        "schema_registry": extra.get("schema_registry") or None,
        "compression_codec": str(extra.get("compression_codec", "none")),
        "acks": acks,
        "timeout_s": float(extra.get("timeout_s", 10)),
        "client": client_properties(extra, login, password, conn_id),
    }


def client_properties(
    extra: dict[str, Any], login: str | None, password: str | None, conn_id: str
) -> dict[str, str]:
    """Kafka client properties from a connection: extra's non-secret keys by their Kafka
    names, login as sasl.username and password as sasl.password; checked here (the error
    names the connection and the key, never a secret)."""
    from logbroker.security.client import SECRET_KEYS, ClientCredentials, credential_properties

    secrets = sorted(key for key in SECRET_KEYS if extra.get(key))
    if secrets:
        raise ValueError(
            f"connection {conn_id!r}: {', '.join(secrets)} in extra: put the SASL user in the "
            "connection's login and its password in the password field (which Airflow masks)"
        )
    props = credential_properties(extra)
    if login:
        props["sasl.username"] = login
    if password:
        props["sasl.password"] = password
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if (login or password) and not protocol.startswith("SASL_"):
        raise ValueError(
            f"connection {conn_id!r} has a login or password but security.protocol {protocol} "
            'in extra: set "security.protocol": "SASL_SSL" (or SASL_PLAINTEXT) and '
            '"sasl.mechanism"'
        )
    try:
        ClientCredentials.from_properties(props)
    except ValueError as exc:
        raise ValueError(f"connection {conn_id!r}: {exc}") from None
    return props


def credentials_of(settings: dict[str, Any]) -> ClientCredentials:
    """The credentials of connection_settings' `client` properties."""
    from logbroker.security.client import ClientCredentials

    return ClientCredentials.from_properties(settings["client"])


def settings_cluster(settings: dict[str, Any]) -> Cluster:
    """The cluster of connection_settings(), its brokers reached with its credentials."""
    from logbroker.client.cluster import Cluster

    return Cluster(
        str(settings["zk_connect"]),
        timeout=float(settings["timeout_s"]),
        credentials=credentials_of(settings),
    )


def all_topics(cluster: Cluster) -> list[str]:
    """0.7's topics (/brokers/topics) and the replicated ones (/replication/topics)."""
    return sorted({*cluster.topics(), *cluster.replicated_topics()})


def cluster_end_offsets(cluster: Cluster, topics: Iterable[str] | None) -> Offsets:
    wanted = all_topics(cluster) if topics is None else sorted(set(topics))
    result: Offsets = {}
    for topic in wanted:
        result[topic] = {p.name: p.latest for p in cluster.describe(topic)}
    return result


def group_committed_offsets(cluster: Cluster, group: str) -> Offsets:
    from logbroker.protocol.errors import LogbrokerError

    result: Offsets = {}
    try:
        rows = cluster.group_partitions(group)
    except LogbrokerError:  # the group never ran: nothing committed
        return result
    for row in rows:
        if row.committed is not None:
            result.setdefault(row.topic, {})[row.name] = row.committed
    return result
