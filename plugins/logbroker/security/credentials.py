"""Users' SCRAM credentials in ZooKeeper, laid out as Kafka lays them out (under the
cluster's chroot), so that Kafka's tools and logbroker's read the same nodes:

    /config/users/<user>   {"version":1,"config":{
                              "SCRAM-SHA-256":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096",
                              "SCRAM-SHA-512":"salt=...,stored_key=...,server_key=...,iterations=4096"}}
    /config/changes/config_change_<seq>   {"version":2,"entity_path":"users/<user>"}
                           (written after each change: how Kafka's brokers learn of it)

Salted and hashed (scram.ScramCredential): never the password. Written by a session with a
ZooKeeper digest (zookeeper.set.acl), a user's node is that digest's alone, without the
world's READ that the brokers' other znodes have (coordination/zk_acl.py). Other keys a
user's config holds (Kafka's quotas) are kept as they are. `UserCredentials` is the broker's view: a
watch on /config/users and on each user's node keeps every credential in memory, so a
lookup on the event loop reads a dict, and a change or a deletion counts at the next
authentication.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from ..coordination.zk_acl import private_acl
from .scram import SCRAM_MECHANISMS, ScramCredential

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.protocol.states import ZnodeStat

log = logging.getLogger(__name__)

USERS_PATH = "/config/users"
CHANGES_PATH = "/config/changes/config_change_"


def user_path(user: str) -> str:
    if not user or "/" in user or user in (".", "..") or "\x00" in user or user != user.strip():
        raise ValueError(f"invalid user name {user!r}: no '/', not empty, no spaces around it")
    return f"{USERS_PATH}/{user}"


def parse_user_config(data: bytes | str, user: str = "?") -> dict[str, str]:
    """A /config/users node's value -> its `config` map; ValueError naming the user."""
    try:
        value = json.loads(data)
        config = value["config"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"/config/users/{user} is not Kafka's {{version, config}} JSON") from None
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise ValueError(f"/config/users/{user}: its config is not a map of strings")
    return {str(k): v for k, v in config.items()}


def read_user_config(client: KazooClient, user: str) -> dict[str, str] | None:
    """The user's config map; None when the user has no node."""
    from kazoo.exceptions import NoNodeError

    try:
        data, _stat = client.get(user_path(user))
    except NoNodeError:
        return None
    return parse_user_config(data, user)


def list_users(client: KazooClient) -> list[str]:
    from kazoo.exceptions import NoNodeError

    try:
        return sorted(client.get_children(USERS_PATH))
    except NoNodeError:
        return []


def alter_user(
    client: KazooClient,
    user: str,
    add: dict[str, ScramCredential] | None = None,
    delete: tuple[str, ...] = (),
) -> dict[str, str]:
    """Set and remove the user's mechanisms in one write (a version check retries a
    concurrent change); the config map written. An empty map removes the node."""
    from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

    path = user_path(user)
    while True:
        try:
            data, stat = client.get(path)
            config, version = parse_user_config(data, user), stat.version
        except NoNodeError:
            config, version = {}, -1
        missing = [m for m in delete if m not in config]
        if missing:
            raise ValueError(f"user {user!r} has no {', '.join(missing)} to delete")
        for mechanism in delete:
            del config[mechanism]
        for mechanism, credential in (add or {}).items():
            config[mechanism] = credential.to_config()
        value = json.dumps({"version": 1, "config": config}).encode()
        try:
            if version < 0:
                if not config:
                    return config
                client.ensure_path(USERS_PATH)
                # a digest's session (zookeeper.set.acl): readable by that digest only
                client.create(path, value, acl=private_acl(client))
            elif not config:
                client.delete(path, version=version)
            else:
                client.set(path, value, version=version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # changed meanwhile: read it again
        notice = json.dumps({"version": 2, "entity_path": f"users/{user}"}).encode()
        client.create(CHANGES_PATH, notice, sequence=True, makepath=True)
        return config


def scram_credentials(config: dict[str, str], user: str = "?") -> dict[str, ScramCredential]:
    """The SCRAM entries of a user's config; a damaged one is logged and left out."""
    out = {}
    for mechanism in SCRAM_MECHANISMS:
        text = config.get(mechanism)
        if text is None:
            continue
        try:
            out[mechanism] = ScramCredential.from_config(text)
        except ValueError as exc:
            log.warning("user %s: %s in /config/users ignored: %s", user, mechanism, exc)
    return out


class UserCredentials:
    """The broker's copy of every user's SCRAM credentials, kept current by watches.
    `lookup(user, mechanism)` is the server authenticator's CredentialLookup: None until
    `start` has a ZooKeeper client (a broker that is starting refuses every login)."""

    def __init__(self) -> None:
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._watched: set[str] = set()
        self._lock = threading.Lock()
        self._client: KazooClient | None = None

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def start(self, client: KazooClient) -> None:
        """Read every user and watch for changes (blocking: call from a worker thread)."""
        self._client = client
        client.ensure_path(USERS_PATH)
        client.ChildrenWatch(USERS_PATH, self._children)

    def _children(self, users: list[str]) -> None:
        client = self._client
        assert client is not None
        for user in users:
            with self._lock:
                if user in self._watched:
                    continue
                self._watched.add(user)
            client.DataWatch(f"{USERS_PATH}/{user}", self._watcher(user))

    def _watcher(self, user: str) -> Any:
        def changed(data: bytes | None, _stat: ZnodeStat | None) -> bool:
            if data is None:  # deleted: this watch ends, a new node gets a new one
                with self._lock:
                    self._users.pop(user, None)
                    self._watched.discard(user)
                return False
            try:
                self._users[user] = scram_credentials(parse_user_config(data, user), user)
            except ValueError as exc:
                log.warning("%s; the user cannot log in until it is fixed", exc)
                self._users.pop(user, None)
            return True

        return changed
