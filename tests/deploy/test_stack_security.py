"""`make up`'s security files and users (stack/security.py), without starting the stack: what
the first `up` makes under <workdir>/security and that the next `up` keeps it; the users and
ACLs it writes into a cluster's ZooKeeper, decided as the brokers' authorizer decides them.
tests/deploy/test_up.py has the brokers of a real `make up` refusing and serving them."""

from __future__ import annotations

import functools
import json
import stat
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from logbroker.security import credentials
from logbroker.security.acl_store import AclStore
from logbroker.security.acls import CLUSTER, Acl, Authorizer, Operation, Resource, group, topic
from logbroker.security.scram import make_credential
from logbroker.stack.security import COMPONENTS, StackSecurity
from logbroker.stack.traffic import TOPICS
from logbroker.stack.zookeeper import ZkTarget

LIVE_TOPICS = (*TOPICS, "_audit")


def modes(directory: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()}


def test_the_first_up_makes_private_files_and_the_next_keeps_them(tmp_path: Path) -> None:
    first = StackSecurity(tmp_path / "security", brokers=3)
    directory = first.directory
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    found = modes(directory)
    assert set(found.values()) == {0o600}, found
    expected = {"ca.pem", "ca.key", "users.json", "admin.properties"}
    expected |= {f"broker-{i}.{x}" for i in range(3) for x in ("pem", "key")}
    expected |= {f"{user}.properties" for user in COMPONENTS}
    expected |= {"kcat.pem", "kcat.key", "kcat.conf"}  # SSL08's client certificate
    assert expected <= set(found), sorted(found)
    kcat = dict(line.split("=", 1) for line in (directory / "kcat.conf").read_text().splitlines())
    assert kcat["ssl.certificate.location"] == str(directory / "kcat.pem")
    assert (kcat["security.protocol"], kcat["api.version.request"]) == ("ssl", "false")

    kept = json.loads((directory / "users.json").read_text())
    assert set(kept["users"]) == {*COMPONENTS, "broker-0", "broker-1", "broker-2"}
    assert len(set(kept["users"].values())) == 7  # a password each
    assert kept["zookeeper.auth"].startswith("digest:logbroker:")

    # the broker's secrets in its --config file, never among its other settings
    settings = first.broker_settings(1)
    assert settings["super.users"] == "User:broker-0;User:broker-1;User:broker-2"
    assert settings["allow.everyone.if.no.acl.found"] == "false"
    assert settings["sasl.enabled.mechanisms"] == "SCRAM-SHA-256"
    assert settings["zookeeper.set.acl"] == "true"
    # SASL on SASL_SSL(08) only; SSL08 asks a certificate (kcat's), the rest none
    assert settings["security.inter.broker.protocol"] == "SASL_SSL"
    assert settings["ssl.client.auth"] == "none"
    assert settings["listener.name.ssl08.ssl.client.auth"] == "required"
    assert not any(first.users["broker-1"] in value for value in settings.values())
    secret = first.broker_file("live", 1).read_text()
    assert f'username="broker-1" password="{first.users["broker-1"]}"' in secret
    assert f"zookeeper.auth={first.zk_auth}" in secret

    # an Airflow connection (contract B): the password in its password, never in its extra
    conn = first.connection("loads", "127.0.0.1:2181/analysis", {"acks": "ack"})
    assert (conn["login"], conn["password"]) == ("loads", first.users["loads"])
    assert conn["extra"] == {
        "acks": "ack",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "ssl.cafile": str(directory / "ca.pem"),
    }

    before = {name: (directory / name).read_bytes() for name in found}
    again = StackSecurity(tmp_path / "security", brokers=3)
    assert again.users == first.users and again.zk_auth == first.zk_auth
    for name in ("ca.pem", "ca.key", "broker-0.pem", "broker-2.key", "users.json", "kcat.key"):
        assert (directory / name).read_bytes() == before[name], name


def read_cluster(connect: str, security: StackSecurity) -> dict[Resource, frozenset[Acl]]:
    """The cluster's ACLs, after checking that every user's stored SCRAM credential is its
    password's (salted and hashed as `logbroker configs` stores them), and that only the
    digest reads them."""
    users = security.users
    with pytest.raises(NoAuthError):
        read_anonymously(connect, f"{credentials.USERS_PATH}/{next(iter(users))}")
    with security.admin_zookeeper(connect) as zk:
        for user, password in users.items():
            config = credentials.read_user_config(zk, user)
            assert config is not None, user
            stored = credentials.scram_credentials(config, user)["SCRAM-SHA-256"]
            again = make_credential("SCRAM-SHA-256", password, salt=stored.salt)
            assert again.stored_key == stored.stored_key, user
        return AclStore(zk).read_all()


def read_anonymously(connect: str, path: str) -> bytes:
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=10)
    try:
        data: bytes = zk.get(path)[0]
        return data
    finally:
        zk.stop()
        zk.close()


def _lookup(acls: dict[Resource, frozenset[Acl]], resource: Resource) -> frozenset[Acl]:
    return acls.get(resource, frozenset())


def test_each_component_gets_only_what_its_job_needs(tmp_path: Path, zk_chroot: ZkTarget) -> None:
    security = StackSecurity(tmp_path / "security", brokers=2)
    client = KazooClient(hosts=zk_chroot.connect, timeout=10)
    client.start(timeout=10)
    try:
        for cluster in ("live", "analysis"):
            client.ensure_path(f"/{cluster}")
    finally:
        client.stop()
        client.close()
    found = {}
    for cluster in ("live", "analysis"):
        connect = f"{zk_chroot.connect}/{cluster}"
        security.provision(cluster, connect, TOPICS)
        security.provision(cluster, connect, TOPICS)  # the next `up`: the same ACLs, once
        acls = read_cluster(connect, security)
        assert all(len(a) == len(set(a)) for a in acls.values())
        found[cluster] = Authorizer(functools.partial(_lookup, acls))

    def may(cluster: str, user: str, operation: Operation, resource: Resource) -> bool:
        return found[cluster].authorize(f"User:{user}", "127.0.0.1", operation, resource)

    read, write, describe = Operation.READ, Operation.WRITE, Operation.DESCRIBE
    for name in LIVE_TOPICS:
        t = topic(name)
        assert may("live", "traffic", write, t) and not may("live", "traffic", read, t)
        assert may("live", "mirror", read, t) and not may("live", "mirror", write, t)
        assert may("analysis", "mirror", write, t) and not may("analysis", "mirror", read, t)
        for user in ("loads", "audit"):
            assert may("analysis", user, read, t) and not may("analysis", user, write, t)
            assert not may("live", user, describe, t)
        assert not may("analysis", "traffic", describe, t)
    assert may("live", "mirror", read, group("mirror-live"))
    assert not may("live", "traffic", read, group("mirror-live"))
    assert not may("live", "mirror", read, topic("not_a_pipeline_topic"))
    assert not may("live", "mirror", Operation.CREATE, CLUSTER)
    # kcat's certificate on SSL08 (User:CN=kcat) reads every topic of both clusters, the
    # 0.8-format ad_clicks too, and writes none; an anonymous client (the 0.7 port) nothing
    for cluster in ("live", "analysis"):
        for name in LIVE_TOPICS:  # ad_clicks among them
            assert may(cluster, "CN=kcat", read, topic(name)), (cluster, name)
            assert not may(cluster, "CN=kcat", write, topic(name))
            assert not may(cluster, "ANONYMOUS", describe, topic(name))
