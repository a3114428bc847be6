"""The ACLs in ZooKeeper (the layout is acls.py's, Kafka 0.9-2.x's SimpleAclAuthorizer's):

    /kafka-acl/<ResourceType>/<name>        {"version":1,"acls":[{"principal":"User:alice",
                                             "permissionType":"Allow","operation":"Read",
                                             "host":"*"}]}; gone with its last ACL
    /kafka-acl-changes/acl_changes_<seq>    "<ResourceType>:<name>", one per change

AclStore reads and changes them (`logbroker acls`); each change is written with the znode's
version (a concurrent writer: read and try again) and then notified.

AclCache is a broker's copy: loaded whole at start, then one resource at a time as the change
notifications come (kazoo's watch thread reads ZooKeeper; the new ACLs are handed to `apply`,
the broker's event loop's call_soon_threadsafe, so that requests read them on the loop's
thread only; `on_applied` is called there after each update: tests wait on it).
Notifications are not purged (Kafka deleted those older than 15 minutes): one small znode
per change.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from .acls import (
    ACL_CHANGES,
    ACL_ROOT,
    CHANGE_PREFIX,
    VERSION,
    Acl,
    AclError,
    Resource,
    ResourceType,
)

log = logging.getLogger(__name__)


def resource_path(resource: Resource) -> str:
    return f"{ACL_ROOT}/{resource.type.value}/{resource.name}"


def encode_acls(acls: Iterable[Acl]) -> bytes:
    items = sorted((a.to_json() for a in acls), key=lambda d: sorted(d.items()))
    return json.dumps({"version": VERSION, "acls": items}).encode()


def decode_acls(data: bytes, where: str = "") -> frozenset[Acl]:
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or not isinstance(doc.get("acls"), list):
            raise AclError("no list of acls")
        return frozenset(Acl.from_json(item) for item in doc["acls"])
    except (ValueError, TypeError, AttributeError) as exc:
        raise AclError(f"unreadable ACLs at {where or 'a znode'}: {exc}") from None


class AclStore:
    """The ACLs in ZooKeeper: read, add and remove, each change notified (kafka-acls.sh's
    side; the brokers read through AclCache)."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client

    def read(self, resource: Resource) -> frozenset[Acl]:
        try:
            data, _ = self.client.get(resource_path(resource))
        except NoNodeError:
            return frozenset()
        return decode_acls(data, resource_path(resource))

    def resources(self) -> list[Resource]:
        found = []
        for kind in ResourceType:
            try:
                names = self.client.get_children(f"{ACL_ROOT}/{kind.value}")
            except NoNodeError:
                continue
            found += [Resource(kind, name) for name in sorted(names)]
        return found

    def read_all(self) -> dict[Resource, frozenset[Acl]]:
        out = {}
        for resource in self.resources():
            acls = self.read(resource)
            if acls:
                out[resource] = acls
        return out

    def add(self, resource: Resource, acls: Iterable[Acl]) -> frozenset[Acl]:
        return self._update(resource, lambda old: old | frozenset(acls))

    def remove(self, resource: Resource, acls: Iterable[Acl] | None = None) -> frozenset[Acl]:
        """Remove `acls` (all of the resource's when None); returns what is left."""
        gone = None if acls is None else frozenset(acls)
        return self._update(resource, lambda old: frozenset() if gone is None else old - gone)

    def _update(
        self, resource: Resource, change: Callable[[frozenset[Acl]], frozenset[Acl]]
    ) -> frozenset[Acl]:
        """Read, change and write back with the znode's version (another writer in between:
        again), then notify the brokers."""
        path = resource_path(resource)
        while True:
            try:
                data, stat = self.client.get(path)
                old, version = decode_acls(data, path), stat.version
            except NoNodeError:
                old, version = frozenset(), -1
            new = change(old)
            if new == old:
                return new
            try:
                if version < 0:
                    self.client.create(path, encode_acls(new), makepath=True)
                elif new:
                    self.client.set(path, encode_acls(new), version=version)
                else:
                    self.client.delete(path, version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue
            self.notify(resource)
            return new

    def notify(self, resource: Resource) -> None:
        self.client.create(
            f"{ACL_CHANGES}/{CHANGE_PREFIX}", str(resource).encode(), sequence=True, makepath=True
        )


class AclCache:
    """A broker's copy of every ACL, kept up to date from the change notifications.

    `apply(fn)` runs fn where requests read the ACLs (the broker's loop: call_soon_threadsafe;
    a test: fn()); `on_applied()` is called there after each update."""

    def __init__(
        self,
        apply: Callable[[Callable[[], None]], object] = lambda fn: fn(),
        on_applied: Callable[[], None] | None = None,
    ) -> None:
        self._apply = apply
        self.on_applied = on_applied
        self._acls: dict[Resource, frozenset[Acl]] = {}
        self.loaded = False  # set on the applying thread with the first load
        self._client: KazooClient | None = None
        self._seen = -1  # the highest change notification read
        self._lock = threading.Lock()  # one reader of notifications at a time

    def get(self, resource: Resource) -> frozenset[Acl]:
        return self._acls.get(resource, frozenset())

    def all(self) -> dict[Resource, frozenset[Acl]]:
        return dict(self._acls)

    def start(self, client: KazooClient) -> None:
        """Load every ACL (blocking: off the loop), then follow the changes."""
        self._client = client
        client.ensure_path(ACL_CHANGES)
        with self._lock:
            # Notifications before the load are in it: only later ones are read.
            self._seen = max((_sequence(c) for c in client.get_children(ACL_CHANGES)), default=-1)
            loaded = AclStore(client).read_all()
        self._update(lambda: self._replace(loaded))
        client.ChildrenWatch(ACL_CHANGES, self._changed)

    def stop(self) -> None:
        self._client = None  # kazoo's watch stops with its client; late calls do nothing

    def _changed(self, children: list[str]) -> bool:
        client = self._client
        if client is None:
            return False  # stopped: kazoo ends the watch
        with self._lock:
            fresh = sorted(c for c in children if _sequence(c) > self._seen)
            store = AclStore(client)
            updates: dict[Resource, frozenset[Acl]] = {}
            for child in fresh:
                try:
                    data, _ = client.get(f"{ACL_CHANGES}/{child}")
                    resource = Resource.parse(data.decode())
                    updates[resource] = store.read(resource)
                except NoNodeError:
                    continue  # purged meanwhile: a later one names the resource too
                except (AclError, UnicodeDecodeError) as exc:
                    log.warning("ignored the ACL change %s: %s", child, exc)
                self._seen = max(self._seen, _sequence(child))
        if updates:
            self._update(lambda: self._merge(updates))
        return True

    def _replace(self, loaded: dict[Resource, frozenset[Acl]]) -> None:
        self._acls = loaded
        self.loaded = True
        log.info("ACLs loaded: %d resources", len(loaded))

    def _merge(self, updates: Mapping[Resource, frozenset[Acl]]) -> None:
        for resource, acls in updates.items():
            if acls:
                self._acls[resource] = acls
            else:
                self._acls.pop(resource, None)
        log.info("ACLs changed: %s", ", ".join(str(r) for r in updates))

    def _update(self, fn: Callable[[], object]) -> None:
        def run() -> None:
            fn()
            if self.on_applied is not None:
                self.on_applied()

        self._apply(run)


def _sequence(child: str) -> int:
    digits = child.removeprefix(CHANGE_PREFIX)
    return int(digits) if digits.isdigit() else -1
