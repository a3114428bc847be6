"""Where each live broker's Kafka 0.8 listener is, from ZooKeeper, kept fresh by watches.

    /replication/endpoints/<id>   ephemeral, the broker's session: its listeners besides the
                                  0.7 port, `{"version": 1, "endpoints": ["KAFKA08://host:port"]}`
                                  (coordination/replication_state.py: encode_endpoints,
                                  decode_endpoints)

A 0.8-format topic's partition is served by its leader's 0.8 listener only (docs/protocol.md,
"The Kafka 0.8 listener"): the clients ask `Leaders` (leaders.py) who leads, and this object
where that broker's listener is. A child watch on `/replication/endpoints` and a data watch on
each broker's node keep the answer current: a broker that dies takes its node with its
session, and one that restarts writes it again (on a new port, if it picked one). A client
refused or cut off calls `refresh()`, as with `Leaders.refresh`: the watch may lag.
`version` grows with every change, for callers that cache connections.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.recipe.watchers import DataWatch

from ..coordination import replication_state as replication
from ..coordination.replication_state import StateFormatError
from ..coordination.zk_acl import watch_children
from .brokers import BrokerEndpoint

log = logging.getLogger(__name__)

# The TLS listeners' names a client looks up (security/listeners.py's default map): with
# security.protocol=SSL (no login; a client certificate where the listener asks one), and with
# SASL_SSL (a login): each protocol's listener is the one named after it, by convention
SSL_LISTENER = "SSL"
SSL08_LISTENER = "SSL08"
SASL_SSL_LISTENER = "SASL_SSL"
SASL_SSL08_LISTENER = "SASL_SSL08"


def tls_listener(sasl: bool, wire08: bool = False) -> str:
    """The listener a TLS client reaches brokers at: SASL_SSL / SASL_SSL08 when it logs in,
    SSL / SSL08 when it does not (a 0.8-format topic's leader at the 0.8 one)."""
    if sasl:
        return SASL_SSL08_LISTENER if wire08 else SASL_SSL_LISTENER
    return SSL08_LISTENER if wire08 else SSL_LISTENER


class Listeners:
    """broker id -> its `listener` (KAFKA08 by default) as a BrokerEndpoint. Thread-safe;
    `on_change()` is called from kazoo's thread after a change."""

    def __init__(
        self,
        client: KazooClient,
        listener: str = replication.KAFKA08,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.listener = listener
        self.on_change = on_change
        self.version = 0
        self._lock = threading.Lock()
        self._endpoints: dict[int, BrokerEndpoint] = {}
        self._watched: set[int] = set()
        self._closed = False
        # reads them at once (made by the brokers only, where ZooKeeper is locked down)
        watch_children(client, replication.ENDPOINTS, self._children)

    def endpoint(self, broker_id: int) -> BrokerEndpoint | None:
        """Where broker `broker_id`'s listener is; None when it is not live or has none."""
        with self._lock:
            return self._endpoints.get(broker_id)

    def endpoints(self) -> dict[int, BrokerEndpoint]:
        with self._lock:
            return dict(self._endpoints)

    def refresh(self) -> bool:
        """Read every broker's node now (after a refusal: the watches may lag behind); True
        if anything changed."""
        try:
            children = self.client.get_children(replication.ENDPOINTS)
        except KazooException as exc:
            log.warning("could not read %s: %s", replication.ENDPOINTS, exc)
            return False
        found: dict[int, BrokerEndpoint] = {}
        for child in children:
            if not child.isdigit():
                continue
            try:
                data, _ = self.client.get(replication.endpoints_path(int(child)))
            except NoNodeError:
                continue
            except KazooException as exc:
                log.warning("could not read the listeners of broker %s: %s", child, exc)
                return False
            endpoint = self._decode(int(child), data)
            if endpoint is not None:
                found[endpoint.id] = endpoint
        self._children(children)  # watch the new ones too
        with self._lock:
            changed = found != self._endpoints
            if changed:
                self._endpoints = found
                self.version += 1
        if changed:
            self._notify()
        return changed

    def close(self) -> None:
        """Stop the watches (they also end with the client)."""
        self._closed = True

    # -- the watches ---------------------------------------------------------------------

    def _children(self, children: list[str]) -> bool | None:
        if self._closed:
            return False
        for child in children:
            if not child.isdigit():
                continue
            broker = int(child)
            with self._lock:
                if broker in self._watched:
                    continue
                self._watched.add(broker)
            try:  # its first call reads the node before it returns
                DataWatch(
                    self.client,
                    replication.endpoints_path(broker),
                    functools.partial(self._changed, broker),
                )
            except KazooException as exc:
                with self._lock:
                    self._watched.discard(broker)  # the next child event watches it again
                log.debug("could not watch the listeners of broker %d: %s", broker, exc)
        return None

    def _changed(self, broker: int, data: bytes | None, stat: Any, event: Any = None) -> bool:
        if self._closed:
            return False
        endpoint = None if data is None else self._decode(broker, data)
        with self._lock:
            if data is None:
                self._watched.discard(broker)  # gone with its session; watched again when back
            if self._endpoints.get(broker) == endpoint:
                return data is not None
            if endpoint is None:
                self._endpoints.pop(broker, None)
            else:
                self._endpoints[broker] = endpoint
            self.version += 1
        log.info(
            "broker %d: %s listener %s",
            broker,
            self.listener,
            endpoint.address if endpoint is not None else "gone",
        )
        self._notify()
        return data is not None

    def _decode(self, broker: int, data: bytes) -> BrokerEndpoint | None:
        try:
            found = replication.decode_endpoints(data, broker).get(self.listener)
        except StateFormatError as exc:
            log.warning("ignoring %s", exc)
            return None
        return None if found is None else BrokerEndpoint(broker, *found)

    def _notify(self) -> None:
        if self.on_change is not None and not self._closed:
            try:
                self.on_change()
            except Exception:
                log.exception("listener change callback failed")
