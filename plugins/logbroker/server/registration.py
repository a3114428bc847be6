"""The broker's registration in ZooKeeper, as Kafka 0.7's `KafkaZooKeeper` did it.

At `start()` the broker connects to `zk.connect` (which may end in a chroot such as `/live`; the
chroot is created if missing, kazoo does not create it), makes sure the persistent parents
`/brokers/ids` and `/brokers/topics` exist, and creates

    /brokers/ids/<id>               ephemeral  "creatorId:host:port", creatorId = "<host>-<ms>"
    /brokers/topics/<topic>/<id>    ephemeral  partition count, decimal; one per topic it has
    /replication/endpoints/<id>     ephemeral  its other listeners (the 0.8 port), when it has
                                               any (coordination/replication_state.py)

(see `logbroker.coordination.paths`). A broker id whose node already exists in another session
makes `start()` fail with BrokerIdTakenError, naming the other broker's host:port: another broker
uses the id, or this broker was restarted before its previous session timed out (0.7 failed the
same way; the node of a killed broker lives until `zk.sessiontimeout.ms` has passed).

While running:

* `register_topic()` is called from the broker's event loop when a topic's first log is created.
  It never blocks: it remembers the topic and hands the write to the registration's own thread.
* When the ZooKeeper session is lost (expired: the server deleted the ephemeral nodes) and kazoo
  connects again with a new session, the same thread re-creates `/brokers/ids/<id>` (with a new
  creatorId, as 0.7 did) and the node of every known topic. Known topics are those of `topics()`
  at start plus every `register_topic()` since. A short disconnection that keeps the session needs
  nothing: the nodes survive it.
* If the id was taken by another broker while our session was gone, the broker logs an error and
  registers again as soon as that node disappears.
* A topic whose node cannot be written (a node in the way that ZooKeeper will not let us write
  under: an ACL, an ephemeral parent) is logged with the path and the reason, and the others
  are registered all the same, at start and after every expiry; `unregistered` names it, and
  it is tried again at the next `register_topic()` for it or the next session.

`stop()` deletes the nodes that this session owns, then closes the session.

With `zookeeper.auth` the session logs in with that digest; with `zookeeper.set.acl` too, every
znode it creates (the nodes above and the parents; the controller, the replicas, the ACL and
credential stores share this session) is the digest's, readable by all (coordination/zk_acl.py).

Threads: kazoo's connection and event threads call our state listener, which only enqueues; every
ZooKeeper write after `start()` happens on one worker thread, in order, so a re-registration and
a new topic never race each other. `start()` and `stop()` block (run them in an executor from
asyncio); `register_topic()`, `connected` and `session_id` do not.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import ForceRetryError, KazooRetry, RetryFailedError

from ..coordination import paths
from ..coordination import replication_state as zk
from ..coordination.errors import ZooKeeperUnavailableError
from ..coordination.zk_acl import ZkDigest, kazoo_options
from ..protocol.errors import LogbrokerError, describe_exception

log = logging.getLogger(__name__)

# kazoo's default reconnect back-off grows to an hour; a broker must come back within seconds.
_CONNECTION_RETRY = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0}


def wall_clock_ms() -> int:
    """Milliseconds since the epoch, like Java's System.currentTimeMillis()."""
    return time.time_ns() // 1_000_000


class ZooKeeperRegistrationError(LogbrokerError):
    """ZooKeeper answered, but refused a write the broker's registration needs."""


# The session or the client is gone: the whole registration is redone in the next session
# (or the broker is stopping), so one topic's failure of this kind is not that topic's.
_NOT_THE_TOPICS_FAULT = (SessionExpiredError, RetryFailedError)


class BrokerIdTakenError(LogbrokerError):
    """`/brokers/ids/<id>` belongs to another live ZooKeeper session: the id is in use."""

    broker_id: int
    holder: str  # "host:port" of the broker that holds the id, as its node says
    owner_session: int


def _taken(
    broker_id: int, path: str, data: bytes, owner: int, timeout_ms: int
) -> BrokerIdTakenError:
    value = data.decode("utf-8", errors="replace")
    try:
        host, port = paths.parse_broker_value(value)
        holder = f"{host}:{port}"
    except ValueError:
        holder = f"an unreadable value {value!r}"
    if owner == 0:
        why = "it is a persistent node, not a live broker's: delete it by hand"
    else:
        why = (
            f"ZooKeeper session 0x{owner:x}: another broker uses this brokerid, or this broker "
            f"was restarted before its previous session expired (zk.sessiontimeout.ms = "
            f"{timeout_ms}); choose another brokerid, or start again once the old node is gone"
        )
    error = BrokerIdTakenError(
        f"broker id {broker_id} is already registered by {holder} ({path} = {value!r}; {why})"
    )
    error.broker_id, error.holder, error.owner_session = broker_id, holder, owner
    return error


class BrokerRegistration:
    """One broker's nodes in ZooKeeper, kept alive across session expiries (see the module doc)."""

    def __init__(
        self,
        zk_connect: str,
        broker_id: int,
        host: str,
        port: int,
        *,
        session_timeout_ms: int = 6000,
        connection_timeout_ms: int = 6000,
        topics: Callable[[], Mapping[str, int]] = dict,
        clock_ms: Callable[[], int] = wall_clock_ms,
        endpoints: Mapping[str, tuple[str, int]] | None = None,
        zk_auth: ZkDigest | None = None,
        set_acl: bool = False,
    ) -> None:
        """`endpoints`: the broker's listeners besides the 0.7 port ({"KAFKA08": (host,
        port)}), written to /replication/endpoints/<id> with every registration. `zk_auth`:
        the session's digest login (zookeeper.auth); with `set_acl` (zookeeper.set.acl) every
        znode this session creates is the digest's, the world may only read it (zk_acl.py)."""
        if set_acl and zk_auth is None:
            raise ValueError("zookeeper.set.acl needs zookeeper.auth (the digest)")
        self.zk_connect = zk_connect.strip()
        self._hosts, self.chroot = paths.split_connect_string(self.zk_connect)
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.path = paths.broker_id_path(broker_id)  # validates the id
        paths.broker_value(paths.make_creator_id(host, 0), host, port)  # validates host and port
        if session_timeout_ms <= 0 or connection_timeout_ms <= 0:
            raise ValueError("ZooKeeper session and connection timeouts must be positive")
        self._session_timeout_ms = session_timeout_ms
        self._connection_timeout_ms = connection_timeout_ms
        self._op_timeout_s = max(session_timeout_ms, connection_timeout_ms) / 1000
        self._topics_source = topics
        self._clock_ms = clock_ms
        self.endpoints = dict(endpoints or {})
        self.endpoints_path = zk.endpoints_path(broker_id)
        self._zk_auth = zk_auth
        self.set_acl = set_acl

        self._lock = threading.Lock()
        self._state = "new"  # -> "starting" -> "started" -> "stopped"
        self._topics: dict[str, int] = {}
        self._unregistered: dict[str, str] = {}  # topic -> why its node could not be written
        self._client: KazooClient | None = None
        self._tasks: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._stopping = threading.Event()
        # The session that owns /brokers/ids/<id> now; written by start() and then the worker only.
        self._registered_session: int | None = None

    # -- what the broker reads ---------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        """True while the client is connected to ZooKeeper (not before start, not after stop)."""
        client = self._client
        return client is not None and client.connected

    @property
    def session_id(self) -> int | None:
        """The current ZooKeeper session id while connected, else None."""
        client = self._client
        client_id = client.client_id if client is not None else None
        return int(client_id[0]) if client_id else None

    @property
    def unregistered(self) -> dict[str, str]:
        """Topics whose node could not be written in this session, and why."""
        with self._lock:
            return dict(self._unregistered)

    @property
    def client(self) -> KazooClient | None:
        """The kazoo client between start() and stop(), for tests and diagnostics: do not write."""
        return self._client

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Connect, create the chroot and parents, register the broker and its topics.

        Raises ZooKeeperUnavailableError when ZooKeeper cannot be reached within the connection
        timeout, BrokerIdTakenError when another session holds the id. Either way the client is
        stopped before the error is raised. Call it once.
        """
        with self._lock:
            if self._state != "new":
                raise RuntimeError(f"start() called on a registration that is {self._state}")
            self._state = "starting"
        client = KazooClient(
            hosts=self.zk_connect,
            timeout=self._session_timeout_ms / 1000,
            connection_retry=dict(_CONNECTION_RETRY),
            **self._kazoo_options(),
        )
        self._client = client
        doing = "connecting"
        try:
            self._connect(client)
            retry = self._retry(deadline=self._op_timeout_s)
            try:
                doing = f"creating the chroot {self.chroot}"
                self._ensure_chroot(client, retry)
                for parent in (paths.BROKER_IDS, paths.BROKER_TOPICS):
                    doing = f"creating {parent}"
                    retry(self._call, client.ensure_path_async, parent)
                client.add_listener(self._on_state)
                with self._lock:
                    for topic, partitions in dict(self._topics_source()).items():
                        self._remember(topic, partitions)
                doing = f"creating {self.path}"
                self._register_all(client, retry, again=False)
            except RetryFailedError as exc:
                raise ZooKeeperUnavailableError(
                    f"lost ZooKeeper at {self.zk_connect} while registering broker "
                    f"{self.broker_id} at {self.address} ({exc})"
                ) from exc
            except KazooException as exc:
                raise ZooKeeperRegistrationError(
                    f"{doing} in ZooKeeper {self.zk_connect} failed: {describe_exception(exc)}"
                ) from exc
        except BaseException:
            with self._lock:
                self._state = "stopped"
            self._stopping.set()
            self._close_client()
            raise
        with self._lock:
            if self._state != "starting":  # stop() was called meanwhile and closed the client
                return
            self._state = "started"
            self._worker = threading.Thread(
                target=self._run,
                args=(client,),
                name=f"zk-registration-{self.broker_id}",
                daemon=True,
            )
            self._worker.start()

    def register_topic(self, topic: str, partitions: int) -> None:
        """Register (or update) `/brokers/topics/<topic>/<id>`; returns at once, never blocks.

        The topic is remembered, so that it is registered again after a session loss.
        """
        with self._lock:
            if self._state == "stopped":
                log.debug("broker %d: not registering topic %r after stop()", self.broker_id, topic)
                return
            if self._topics.get(topic) == partitions and topic not in self._unregistered:
                return
            self._remember(topic, partitions)
        self._tasks.put(("topic", topic))

    def stop(self) -> None:
        """Delete this session's nodes, stop and close the client. Idempotent."""
        with self._lock:
            if self._state == "stopped":
                return
            was, self._state = self._state, "stopped"
            worker, self._worker = self._worker, None
        self._stopping.set()
        self._tasks.put(None)
        if worker is not None:
            worker.join(1.0)  # a worker waiting on ZooKeeper is released by the close below
        client = self._client
        if client is not None and client.connected:
            try:
                self._delete_own_nodes(client)
            except Exception as exc:  # the session close deletes them anyway
                log.warning(
                    "broker %d: could not delete its ZooKeeper nodes: %r", self.broker_id, exc
                )
        self._close_client()
        if worker is not None:
            worker.join(self._op_timeout_s)
        if was != "new":
            log.info(
                "broker %d at %s left ZooKeeper %s (%s)",
                self.broker_id,
                self.address,
                self.zk_connect,
                self.path,
            )

    # -- connecting --------------------------------------------------------------------------

    def _connect(self, client: KazooClient) -> None:
        # kazoo's start() would warn about a missing chroot; we create it instead.
        connected = client.start_async()
        connected.wait(self._connection_timeout_ms / 1000)
        if not client.connected:
            raise ZooKeeperUnavailableError(
                f"could not connect to ZooKeeper at {self.zk_connect} within "
                f"{self._connection_timeout_ms} ms (zk.connect, zk.connectiontimeout.ms); "
                f"broker {self.broker_id} at {self.address} is not registered"
            )

    def _ensure_chroot(self, client: KazooClient, retry: KazooRetry) -> None:
        if self.chroot is None or retry(self._call, client.exists_async, "/") is not None:
            return
        # A chrooted client cannot create its own chroot's parents: use one without the chroot.
        # It sets no ACL: the chroot stays open, /consumers and the pipeline's nodes go there.
        bootstrap = KazooClient(
            hosts=self._hosts,
            timeout=self._session_timeout_ms / 1000,
            auth_data=self._zk_auth.auth_data if self._zk_auth else None,
        )
        try:
            bootstrap.start_async().wait(self._connection_timeout_ms / 1000)
            if not bootstrap.connected:
                raise ZooKeeperUnavailableError(
                    f"could not connect to ZooKeeper at {self._hosts} within "
                    f"{self._connection_timeout_ms} ms to create the chroot {self.chroot}"
                )
            retry(self._call, bootstrap.ensure_path_async, self.chroot)
            log.info("created the chroot %s on ZooKeeper %s", self.chroot, self._hosts)
        finally:
            bootstrap.stop()
            bootstrap.close()

    def _kazoo_options(self) -> dict[str, Any]:
        """The digest login, and with set_acl the ACL of every znode created (zk_acl.py)."""
        if self._zk_auth is None:
            return {}
        if not self.set_acl:
            return {"auth_data": self._zk_auth.auth_data}
        return kazoo_options(self._zk_auth)

    def _close_client(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is None:
            return
        client.remove_listener(self._on_state)
        try:
            client.stop()
        finally:
            client.close()

    # -- registering (start() and then the worker thread) -------------------------------------

    def _retry(self, deadline: float | None) -> KazooRetry:
        return KazooRetry(
            max_tries=-1,
            delay=0.05,
            max_delay=1.0,
            deadline=deadline,
            ignore_expire=deadline is not None,  # the worker re-registers in the next session
            interrupt=self._stopping.is_set,
        )

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one kazoo *_async call and wait for it, at most the operation time-out."""
        try:
            return method(*args, **kwargs).get(timeout=self._op_timeout_s)
        except KazooTimeoutError as exc:
            raise OperationTimeoutError(
                f"no answer from ZooKeeper in {self._op_timeout_s:g} s"
            ) from exc

    @staticmethod
    def _session_of(client: KazooClient) -> int:
        client_id = client.client_id
        if client_id is None:
            raise ConnectionLoss("not connected to ZooKeeper")
        return int(client_id[0])

    def _remember(self, topic: str, partitions: int) -> None:
        paths.broker_topic_broker_path(topic, self.broker_id)  # validates the name
        paths.topic_value(partitions)  # validates the count
        self._topics[topic] = partitions

    def _register_all(self, client: KazooClient, retry: KazooRetry, *, again: bool) -> None:
        value, session = retry(self._create_broker_node, client)
        self._registered_session = session
        if self.endpoints:
            retry(self._write_endpoints, client, session)
        with self._lock:
            topics = dict(self._topics)
            self._unregistered.clear()
        # Every topic, whatever happens to one: a topic left out is one no consumer reads.
        written = sum(
            self._write_topic_or_log(client, retry, topic, partitions, session) is not None
            for topic, partitions in sorted(topics.items())
        )
        log.info(
            "%s broker %d at %s in ZooKeeper %s: %s = %r, %d of %d topics (session 0x%x)",
            "re-registered (new session after the old one was lost)" if again else "registered",
            self.broker_id,
            self.address,
            self.zk_connect,
            self.path,
            value,
            written,
            len(topics),
            session,
        )

    def _write_topic_or_log(
        self, client: KazooClient, retry: KazooRetry, topic: str, partitions: int, session: int
    ) -> str | None:
        """Write one topic's node; on a failure that is the topic's own, log it, remember it
        in `unregistered` and return None (a lost session or a stop still raises)."""
        try:
            done: str = retry(self._write_topic_node, client, topic, partitions, session)
        except _NOT_THE_TOPICS_FAULT:
            raise
        except Exception as exc:
            if self._stopping.is_set():
                raise
            why = describe_exception(exc)
            with self._lock:
                self._unregistered[topic] = why
            log.error(
                "broker %d at %s: could not register topic %s (%s in ZooKeeper %s): %s; "
                "the other topics are registered, this one is tried again at its next "
                "registration or the next session",
                self.broker_id,
                self.address,
                topic,
                paths.broker_topic_broker_path(topic, self.broker_id),
                self.zk_connect,
                why,
            )
            return None
        with self._lock:
            self._unregistered.pop(topic, None)
        return done

    def _write_endpoints(self, client: KazooClient, session: int) -> None:
        """Create `/replication/endpoints/<id>`, replacing one another session left."""
        value = zk.encode_endpoints(self.endpoints)
        self._call(client.ensure_path_async, zk.ENDPOINTS)
        try:
            self._call(client.create_async, self.endpoints_path, value, ephemeral=True)
            return
        except NodeExistsError:
            pass
        try:
            data, stat = self._call(client.get_async, self.endpoints_path)
        except NoNodeError:
            raise ForceRetryError() from None
        if stat.ephemeralOwner != session:  # an earlier session's, expiring: ours now
            with contextlib.suppress(NoNodeError, BadVersionError):
                self._call(client.delete_async, self.endpoints_path, version=stat.version)
            raise ForceRetryError()
        if data != value:
            self._call(client.set_async, self.endpoints_path, value, version=stat.version)

    def _create_broker_node(self, client: KazooClient) -> tuple[str, int]:
        """Create `/brokers/ids/<id>`; return its value and owning session (ours)."""
        session = self._session_of(client)
        creator = paths.make_creator_id(self.host, self._clock_ms())
        value = paths.broker_value(creator, self.host, self.port)
        try:
            _, stat = self._call(
                client.create_async, self.path, value.encode(), ephemeral=True, include_data=True
            )
            return value, int(stat.ephemeralOwner)
        except NodeExistsError:
            pass
        try:
            data, stat = self._call(client.get_async, self.path)
        except NoNodeError:
            raise ForceRetryError() from None  # deleted meanwhile: create it again
        if stat.ephemeralOwner != session:
            if stat.ephemeralOwner and self._is_our_previous_run(data):
                return self._wait_for_stale_node(client, stat.ephemeralOwner)
            raise _taken(
                self.broker_id, self.path, data, stat.ephemeralOwner, self._session_timeout_ms
            )
        # Ours already: an earlier attempt in this session succeeded before the connection dropped.
        return data.decode(), session

    def _is_our_previous_run(self, data: bytes) -> bool:
        """The node names this very address: this broker crashed and restarted before its
        old session expired (kill -9, then start again at once)."""
        try:
            return paths.parse_broker_value(data) == (self.host, self.port)
        except ValueError:
            return False

    def _wait_for_stale_node(self, client: KazooClient, owner: int) -> tuple[str, int]:
        """Wait (up to a session timeout and a little) for our old session's node to go."""
        log.warning(
            "broker id %d is still held by session 0x%x of this broker's previous run at %s; "
            "waiting up to %d ms for it to expire",
            self.broker_id,
            owner,
            self.address,
            self._session_timeout_ms,
        )
        deadline = time.monotonic() + self._session_timeout_ms / 1000 + 5
        while time.monotonic() < deadline:
            if self._call(client.exists_async, self.path) is None:
                return self._create_broker_node(client)
            time.sleep(0.1)
        data, stat = self._call(client.get_async, self.path)
        raise _taken(self.broker_id, self.path, data, stat.ephemeralOwner, self._session_timeout_ms)

    def _write_topic_node(
        self, client: KazooClient, topic: str, partitions: int, session: int
    ) -> str:
        """Create or update `/brokers/topics/<topic>/<id>`; return what was done."""
        path = paths.broker_topic_broker_path(topic, self.broker_id)
        value = paths.topic_value(partitions).encode()
        self._call(client.ensure_path_async, paths.broker_topic_path(topic))
        try:
            self._call(client.create_async, path, value, ephemeral=True)
            return "created"
        except NodeExistsError:
            pass
        try:
            data, stat = self._call(client.get_async, path)
        except NoNodeError:
            raise ForceRetryError() from None
        if stat.ephemeralOwner != session:
            # We own /brokers/ids/<id> in this session, so the node is a leftover: replace it.
            log.warning(
                "broker %d: %s belonged to session 0x%x, not ours (0x%x): replacing it",
                self.broker_id,
                path,
                stat.ephemeralOwner,
                session,
            )
            with contextlib.suppress(NoNodeError, BadVersionError):
                self._call(client.delete_async, path, version=stat.version)
            raise ForceRetryError()
        if data == value:
            return "unchanged"
        try:
            self._call(client.set_async, path, value, version=stat.version)
        except (NoNodeError, BadVersionError):
            raise ForceRetryError() from None
        return "updated"

    # -- the worker thread -------------------------------------------------------------------

    def _on_state(self, state: str) -> bool:
        """kazoo's state listener, on kazoo's threads: never block here, only enqueue."""
        if self._stopping.is_set():
            return False
        if state == KazooState.CONNECTED:
            self._tasks.put(("check", ""))
        elif state == KazooState.LOST:
            log.warning(
                "broker %d at %s: ZooKeeper session lost; its nodes are gone until it reconnects",
                self.broker_id,
                self.address,
            )
        elif state == KazooState.SUSPENDED:
            log.warning("broker %d: disconnected from ZooKeeper, reconnecting", self.broker_id)
        return False  # stay registered

    def _on_broker_node_event(self, event: object) -> None:
        """Watch on a node that another broker took from us: try again when it changes."""
        if not self._stopping.is_set():
            self._tasks.put(("check", ""))

    def _run(self, client: KazooClient) -> None:
        retry = self._retry(deadline=None)
        while True:
            task = self._tasks.get()
            if task is None or self._stopping.is_set():
                return
            kind, topic = task
            try:
                if kind == "check":
                    self._check_session(client, retry)
                else:
                    self._sync_topic(client, retry, topic)
            except BrokerIdTakenError as exc:
                self._registered_session = None
                log.error(
                    "broker %d at %s could not re-register: %s", self.broker_id, self.address, exc
                )
                self._watch_taken_node(client)
            except SessionExpiredError:
                log.info(
                    "broker %d: session expired during a registration; retrying in the next one",
                    self.broker_id,
                )
            except Exception:
                if self._stopping.is_set():
                    return  # the client was closed under a call: RetryFailed/ConnectionClosed
                log.exception(
                    "broker %d: ZooKeeper registration task %r failed", self.broker_id, task
                )

    def _check_session(self, client: KazooClient, retry: KazooRetry) -> None:
        """After (re)connecting: if the session is not the one that registered, register again."""
        client_id = client.client_id
        if client_id is None or client_id[0] == self._registered_session:
            return  # disconnected again (a later CONNECTED brings us back), or the same session
        self._register_all(client, retry, again=True)

    def _sync_topic(self, client: KazooClient, retry: KazooRetry, topic: str) -> None:
        # While disconnected this raises ConnectionLoss, so the retry waits for the connection:
        # the same session comes back (write now) or a new one (the re-registration writes it).
        session = retry(self._session_of, client)
        with self._lock:
            partitions = self._topics[topic]
        if session != self._registered_session:
            return  # not registered in this session (yet)
        done = self._write_topic_or_log(client, retry, topic, partitions, session)
        if done not in (None, "unchanged"):
            log.info(
                "broker %d at %s: %s %s = %d partitions",
                self.broker_id,
                self.address,
                done,
                paths.broker_topic_broker_path(topic, self.broker_id),
                partitions,
            )

    def _watch_taken_node(self, client: KazooClient) -> None:
        try:
            if client.exists(self.path, watch=self._on_broker_node_event) is None:
                self._tasks.put(("check", ""))  # already gone
        except Exception as exc:  # disconnected: the next CONNECTED enqueues a check anyway
            log.debug("broker %d: could not watch %s: %r", self.broker_id, self.path, exc)

    # -- stopping ----------------------------------------------------------------------------

    def _delete_own_nodes(self, client: KazooClient) -> None:
        """Delete the nodes that this session owns (pipelined, bounded by the op time-out)."""
        session = self._registered_session
        client_id = client.client_id
        if session is None or client_id is None or client_id[0] != session:
            return
        with self._lock:
            topics = sorted(self._topics)
        node_paths = [paths.broker_topic_broker_path(t, self.broker_id) for t in topics]
        if self.endpoints:
            node_paths.append(self.endpoints_path)
        node_paths.append(self.path)
        gets = [(path, client.exists_async(path)) for path in node_paths]
        deletes = []
        for path, pending in gets:
            try:
                stat = pending.get(timeout=self._op_timeout_s)
            except NoNodeError:
                continue
            if stat is not None and stat.ephemeralOwner == session:
                deletes.append(client.delete_async(path, version=stat.version))
        for pending in deletes:
            with contextlib.suppress(NoNodeError, BadVersionError):
                pending.get(timeout=self._op_timeout_s)
