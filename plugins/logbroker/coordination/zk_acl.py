"""ZooKeeper digest ACLs on the brokers' znodes (`zookeeper.set.acl`, `zookeeper.auth`).

`zookeeper.auth` is ZooKeeper's own `addauth` form, `digest:<user>:<password>`. A session
opened with `kazoo_options(auth)` logs in with that digest and creates every znode it does
not give an ACL of its own with

    BROKER_ACL    digest <user>: ALL, world anyone: READ      (the brokers' znodes)

The SCRAM credentials (/config/users/<user>) get `private_acl(client)`, the same without the
world's READ. What other clients write stays open (OPEN_ACL_UNSAFE), because they hold no
digest: /consumers (0.7 groups' offsets and owners, 0.8 OffsetCommit through a broker), the
schema registry's paths, the pipeline's load locks, and the chroot itself.

`secure_tree` is what Kafka's zookeeper-security-migration did: it sets the ACL of znodes made
before `zookeeper.set.acl` was turned on, at the broker's start. `watch_children` is for the
clients without the digest that used to make a node in order to watch it (a new topic's
/brokers/topics/<topic>): they wait for a broker to make it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.security import ACL

log = logging.getLogger(__name__)

AUTH_KEY = "zookeeper.auth"  # the broker key, the --command-config key
AUTH_ENV = "LOGBROKER_ZOOKEEPER_AUTH"  # the admin tools' other source


@dataclass(frozen=True)
class ZkDigest:
    """A ZooKeeper digest login; `repr` hides the password (it is in configs and logs)."""

    user: str
    password: str = field(repr=False)

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """KazooClient(auth_data=...)."""
        return [("digest", f"{self.user}:{self.password}")]

    def acl(self) -> list[ACL]:
        """The brokers' znodes: ALL for this digest user, READ for everyone."""
        from kazoo.security import make_acl, make_digest_acl

        return [
            make_digest_acl(self.user, self.password, all=True),
            make_acl("world", "anyone", read=True),
        ]


def parse_zk_auth(text: str, key: str = AUTH_KEY) -> ZkDigest:
    """`digest:<user>:<password>` -> ZkDigest; ValueError naming `key` (never the password)."""
    scheme, sep, rest = text.strip().partition(":")
    user, sep2, password = rest.partition(":")
    if not (sep and sep2) or scheme != "digest":
        raise ValueError(f"{key} must be digest:<user>:<password> (ZooKeeper's addauth form)")
    if not user or user != user.strip() or not password:
        raise ValueError(f"{key}: digest:<user>:<password> with a user and a password, not empty")
    return ZkDigest(user, password)


def kazoo_options(auth: ZkDigest | str | None) -> dict[str, Any]:
    """KazooClient keyword arguments: log in with the digest and create the znodes with
    BROKER_ACL unless a call says otherwise; {} without a digest (ZooKeeper's open default)."""
    if auth is None or auth == "":
        return {}
    digest = parse_zk_auth(auth) if isinstance(auth, str) else auth
    return {"auth_data": digest.auth_data, "default_acl": digest.acl()}


def open_acl() -> list[ACL]:
    """For the znodes everyone must be able to write (/consumers, ...)."""
    from kazoo.security import OPEN_ACL_UNSAFE

    return list(OPEN_ACL_UNSAFE)


def private_acl(client: KazooClient) -> list[ACL] | None:
    """The client's default ACL without the world's READ (the SCRAM credentials); None (the
    default, open) for a client that sets no ACL."""
    default = client.default_acl
    if not default:
        return None
    return [acl for acl in default if acl.id.scheme != "world"]


def watch_children(client: KazooClient, path: str, func: Callable[[list[str]], object]) -> None:
    """kazoo's ChildrenWatch on `path`, made first if missing. Where the client may not make it
    (a client without the digest under the brokers' znodes: a topic no broker has yet), it
    waits for a broker to make it, then watches its children (func sees nothing until then)."""
    from kazoo.exceptions import NoAuthError
    from kazoo.recipe.watchers import ChildrenWatch, DataWatch

    try:
        client.ensure_path(path)
    except NoAuthError:

        def made(data: bytes | None, stat: object) -> bool | None:
            if stat is None:
                return None  # not yet: keep watching
            ChildrenWatch(client, path, func)
            return False  # done: this watch ends

        DataWatch(client, path, made)
        return
    ChildrenWatch(client, path, func)


def secure_tree(
    client: KazooClient, roots: Iterable[str], acl: list[ACL], timeout: float = 30.0
) -> int:
    """Set `acl` on each root and everything under it (/config/users/*: without the world's
    READ); the number of znodes changed. A znode this session may not change (another digest's)
    is logged and left as it is. One level of the trees at a time, its reads and writes
    pipelined; children are asked only of the znodes that have some."""
    from kazoo.exceptions import NoAuthError, NoNodeError

    private = [a for a in acl if a.id.scheme != "world"]
    changed = 0
    level = list(roots)
    while level:
        reads = [(path, client.get_acls_async(path)) for path in level]
        parents, writes = [], []
        for path, acls in reads:
            try:
                current, stat = acls.get(timeout=timeout)
            except NoNodeError:
                continue
            except NoAuthError:
                log.warning("cannot read %s: another digest's, without READ for this one", path)
                continue
            wanted = private if _is_credential(path) else acl
            if sorted(map(repr, current)) != sorted(map(repr, wanted)):
                writes.append((path, client.set_acls_async(path, wanted)))
            if stat.numChildren:  # most znodes are leaves: no second read for them
                parents.append((path, client.get_children_async(path)))
        level = []
        for path, children in parents:
            try:
                names = children.get(timeout=timeout)
            except (NoNodeError, NoAuthError):
                continue
            level.extend(f"{path.rstrip('/')}/{child}" for child in names)
        for path, pending in writes:
            try:
                pending.get(timeout=timeout)
                changed += 1
            except NoNodeError:
                continue
            except NoAuthError:
                log.warning("cannot set the ACL of %s: it allows this digest no ADMIN", path)
    return changed


def _is_credential(path: str) -> bool:
    return path.startswith("/config/users/")  # security/credentials.py's USERS_PATH
