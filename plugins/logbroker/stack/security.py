"""`make up`'s security: its CA and certificates, its users and their ACLs, its ZooKeeper digest.

    security = StackSecurity(workdir / "security", brokers=3)   made at the first `up`,
                                                                 read back at the next ones
    security.broker_file(cluster, broker_id)   the broker's secret settings (--config FILE)
    security.broker_settings(broker_id)        its other security keys (listeners, TLS, ...)
    security.provision(zk_connect, topics)     users and ACLs of one cluster, in ZooKeeper
    security.client_properties("traffic")      a component's Kafka client properties

Layout under the directory (0700; every file 0600):

    ca.pem, ca.key                 the CA (security/certificates.py)
    broker-<id>.pem, .key          broker <id>'s certificate (CN=broker-<id>), in both clusters
    kcat.pem, .key                 a client certificate for people's Kafka 0.8 tools on SSL08
                                   (CN=kcat: principal User:CN=kcat)
    kcat.conf                      librdkafka's settings for it (`kcat -F kcat.conf -b ... -L`)
    users.json                     {"zookeeper.auth": "digest:logbroker:<pw>",
                                    "users": {"traffic": "<pw>", ..., "broker-0": "<pw>"}}
    <cluster>-<id>.properties      broker <id>'s sasl.jaas.config and zookeeper.auth
    <user>.properties              a component's client properties (--command-config FILE)
    admin.properties               zookeeper.auth, for the admin commands' --command-config

The brokers' listeners (LISTENERS; SASL per listener, as Kafka's): SASL_SSL and SASL_SSL08,
logbroker's protocol and Kafka 0.8's over TLS with a SCRAM-SHA-256 login, where the stack's
components connect (their SCRAM users' ACLs apply on both, the 0.8-format topics' leaders at
SASL_SSL08); SSL08, Kafka 0.8's protocol over TLS with a client certificate required and no
login, for librdkafka/kcat and kafka-python, which cannot log in on the 0.8 protocol
(CERT_USERS: User:CN=kcat reads every pipeline topic); and the 0.7 port (`port`, PLAINTEXT:
a broker always binds it) without login, where a client is User:ANONYMOUS, which no ACL
allows anything (allow.everyone.if.no.acl.found=false): refused, as a 0.7 client must be on a
cluster that authorizes. The brokers follow their leaders over SASL_SSL, logged in as
User:broker-<id>, the super users. Each component is a SCRAM user with only the ACLs its job
needs (component_acls); the stack writes users and ACLs with the code behind `logbroker
configs` (credentials.alter_user) and `logbroker acls` (AclStore.add), in a ZooKeeper session
holding the digest (contract A of issue 46: the brokers' znodes are digest-ACLed with
`zookeeper.set.acl`).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..coordination.zk_acl import kazoo_options, private_acl
from ..protocol.topics import AUDIT_TOPIC
from ..security import credentials
from ..security.acl_store import AclStore
from ..security.acls import Acl, Operation, Permission, Resource, group, topic
from ..security.certificates import CertificateAuthority
from ..security.scram import make_credential

MECHANISM = "SCRAM-SHA-256"
PROTOCOL = "SASL_SSL"
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
# The listeners beside the 0.7 port (`port`, PLAINTEXT, always bound: no login there, so a
# client is User:ANONYMOUS, whom the authorizer refuses everything): logbroker's protocol and
# Kafka 0.8's with a SCRAM login over TLS, and Kafka 0.8's with a client certificate (kcat)
LISTENERS = ("SASL_SSL", "SASL_SSL08", "SSL08")
CERT_LISTENER = "SSL08"  # client certificates required, no login
# the people's Kafka 0.8 tools' certificates (kcat.pem), each principal User:CN=<name>
CERT_USERS = ("kcat",)
ZK_USER = "logbroker"  # the digest's user: the brokers and the stack's admin calls
COMPONENTS = ("traffic", "mirror", "loads", "audit")
ENV_ZK_AUTH = "LOGBROKER_ZOOKEEPER_AUTH"  # contract A: the admin commands' digest


READ: tuple[Operation, ...] = (Operation.READ, Operation.DESCRIBE)
WRITE: tuple[Operation, ...] = (Operation.WRITE, Operation.DESCRIBE)
Grants = list[tuple[Resource, tuple[Operation, ...]]]


def component_acls(cluster: str, topics: Iterable[str], mirror_group: str) -> dict[str, Grants]:
    """user -> [(resource, operations)] in `cluster` ("live" or "analysis"): what each job
    does there and nothing more.

    live:      traffic writes the topics and _audit (its counts); the mirror reads them
               (its group's offsets are in ZooKeeper, /consumers, but Read on the group too,
               as Kafka's consumers need it)
    analysis:  the mirror writes (and may create) the topics; the loads and the audit read
    both:      CN=kcat (User:CN=kcat, a certificate on SSL08) reads the topics
    """
    every = [*topics, AUDIT_TOPIC]
    # kcat's certificate (SSL08, Kafka 0.8's protocol): reads every topic of both clusters,
    # as a person looking at the pipeline does (0.8-format ones, ad_clicks, in 0.8's offsets)
    people: dict[str, Grants] = {
        f"CN={name}": [(topic(t), READ) for t in every] for name in CERT_USERS
    }
    if cluster == "live":
        return {
            "traffic": [(topic(t), WRITE) for t in every],
            "mirror": [(topic(t), READ) for t in every]
            + [(group(mirror_group), (Operation.READ,))],
            **people,
        }
    return {
        "mirror": [(topic(t), (*WRITE, Operation.CREATE)) for t in every],
        "loads": [(topic(t), READ) for t in every],
        "audit": [(topic(t), READ) for t in every],
        **people,
    }


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    path.chmod(0o600)  # an existing file keeps its mode through O_CREAT


def _properties(settings: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in settings.items())


class StackSecurity:
    def __init__(self, directory: Path, brokers: int) -> None:
        self.directory = Path(directory).absolute()
        self.brokers = brokers
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        self.ca = CertificateAuthority(self.directory)
        for name in (*(f"broker-{i}" for i in range(brokers)), *CERT_USERS):
            if not (self.directory / f"{name}.key").exists():
                self.ca.issue(name)
        users_file = self.directory / "users.json"
        kept = json.loads(users_file.read_text()) if users_file.exists() else {}
        users = dict(kept.get("users", {}))
        for name in (*COMPONENTS, *self.broker_users()):
            users.setdefault(name, secrets.token_urlsafe(24))
        self.users: dict[str, str] = users
        self.zk_auth: str = kept.get("zookeeper.auth") or (
            f"digest:{ZK_USER}:{secrets.token_urlsafe(24)}"
        )
        _write_private(
            users_file,
            json.dumps({"zookeeper.auth": self.zk_auth, "users": users}, indent=1) + "\n",
        )
        for name in COMPONENTS:
            _write_private(
                self.directory / f"{name}.properties", _properties(self.client_properties(name))
            )
        _write_private(
            self.directory / "admin.properties", _properties({"zookeeper.auth": self.zk_auth})
        )
        for name in CERT_USERS:
            _write_private(self.directory / f"{name}.conf", _properties(self.kcat_settings(name)))

    @property
    def cafile(self) -> Path:
        return self.ca.certfile

    def broker_users(self) -> list[str]:
        return [f"broker-{i}" for i in range(self.brokers)]

    # -- brokers --------------------------------------------------------------------------

    def broker_settings(self, broker_id: int) -> dict[str, str]:
        """Broker `broker_id`'s security keys but its secrets (those: broker_file) and its
        listeners (LISTENERS, ports chosen by BrokerProcess)."""
        name = f"broker-{broker_id}"
        return {
            "ssl.certfile": str(self.directory / f"{name}.pem"),
            "ssl.keyfile": str(self.directory / f"{name}.key"),
            "ssl.cafile": str(self.cafile),
            # SASL_SSL*: the SCRAM login is who a client is; SSL08: its certificate
            "ssl.client.auth": "none",
            f"listener.name.{CERT_LISTENER.lower()}.ssl.client.auth": "required",
            "security.inter.broker.protocol": "SASL_SSL",
            "replication.require.authenticated.brokers": "true",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "authorizer.class.name": AUTHORIZER,
            "super.users": ";".join(f"User:{u}" for u in self.broker_users()),
            "allow.everyone.if.no.acl.found": "false",
            "zookeeper.set.acl": "true",
        }

    def broker_file(self, cluster: str, broker_id: int) -> Path:
        """<cluster>-<id>.properties (0600): the broker's SCRAM login and ZooKeeper digest,
        given as --config so that no password is on a command line."""
        name = f"broker-{broker_id}"
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{name}" password="{self.users[name]}";'
        )
        path = self.directory / f"{cluster}-{broker_id}.properties"
        _write_private(
            path, _properties({"sasl.jaas.config": jaas, "zookeeper.auth": self.zk_auth})
        )
        return path

    # -- clients --------------------------------------------------------------------------

    def client_properties(self, user: str) -> dict[str, str]:
        """A component's Kafka client properties (contract B of issue 46)."""
        return {
            "security.protocol": PROTOCOL,
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": self.users[user],
            "ssl.cafile": str(self.cafile),
        }

    def kcat_settings(self, name: str = "kcat") -> dict[str, str]:
        """librdkafka's settings (kcat -F FILE) for certificate `name` on SSL08: TLS with
        the certificate, Kafka 0.8's protocol (no ApiVersions, which 0.8 brokers lack)."""
        return {
            "security.protocol": "ssl",
            "ssl.ca.location": str(self.cafile),
            "ssl.certificate.location": str(self.directory / f"{name}.pem"),
            "ssl.key.location": str(self.directory / f"{name}.key"),
            "api.version.request": "false",
            "broker.version.fallback": "0.8.2.2",
        }

    def connection(self, user: str, host: str, extra: dict[str, Any]) -> dict[str, Any]:
        """An Airflow connection of type logbroker for `user` (contract B): the password
        in the connection's password, the non-secret properties in its extra."""
        properties = self.client_properties(user)
        secret = {"sasl.username", "sasl.password"}
        public = {k: v for k, v in properties.items() if k not in secret}
        return {
            "conn_type": "logbroker",
            "host": host,
            "login": user,
            "password": self.users[user],
            "extra": {**extra, **public},
        }

    # -- ZooKeeper ------------------------------------------------------------------------

    @contextmanager
    def admin_zookeeper(self, zk_connect: str, *, private: bool = False) -> Iterator[Any]:
        """A ZooKeeper session with the digest; what it creates is the brokers' ACL
        (coordination/zk_acl.py: [digest: ALL, world: READ]), or digest only when `private`
        (the credentials), as the brokers make their own znodes."""
        from kazoo.client import KazooClient

        client = KazooClient(hosts=zk_connect, timeout=10, **kazoo_options(self.zk_auth))
        if private:
            client.default_acl = private_acl(client)
        client.start(timeout=10)
        try:
            yield client
        finally:
            client.stop()
            client.close()

    def provision(self, cluster: str, zk_connect: str, topics: Iterable[str]) -> None:
        """The users of `cluster` (the brokers and the components) and the components' ACLs
        there, by the code of `logbroker configs --alter --add-config` and `logbroker acls
        --add`. Again at every `up`: a password kept in users.json is set again (new salt),
        an ACL already there stays once."""
        topics = list(topics)
        with self.admin_zookeeper(zk_connect) as zk:  # the parents world-readable
            zk.ensure_path(credentials.USERS_PATH)
            zk.ensure_path(credentials.CHANGES_PATH.rsplit("/", 1)[0])
        with self.admin_zookeeper(zk_connect, private=True) as zk:  # the salted keys not
            for user in (*self.broker_users(), *COMPONENTS):
                credential = make_credential(MECHANISM, self.users[user])
                credentials.alter_user(zk, user, add={MECHANISM: credential})
        with self.admin_zookeeper(zk_connect) as zk:
            store = AclStore(zk)
            for user, grants in component_acls(cluster, topics, f"mirror-{cluster}").items():
                for resource, operations in grants:
                    store.add(resource, [_allow(user, op) for op in operations])


def _allow(user: str, operation: Operation) -> Acl:
    return Acl(f"User:{user}", "*", operation, Permission.ALLOW)
