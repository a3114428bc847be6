"""A ZooKeeper session expired on the server, on purpose, the way production sees it happen.

    new_session_id = expire_session(client, zk)   # the old session's ephemeral nodes are gone

The standard way: a second client attaches to the same session (its id and password) and
closes it, so that the server ends the session and deletes its ephemeral nodes. The tests'
`expire_session` fixture (tests/conftest.py) is this function bound to the session's server.
"""

from __future__ import annotations

import threading
import time

from kazoo.client import KazooClient, KazooState

from logbroker.stack.zookeeper import ZooKeeperServer, four_letter_word


def expire_session(
    client: KazooClient, server: ZooKeeperServer | str, timeout: float = 30.0
) -> int:
    """Expire ``client``'s ZooKeeper session on the server, on purpose; return the new session id.

    The standard way: a second client attaches to the same session (id and password) and closes
    it, so the server ends the session and deletes its ephemeral nodes. Returns once ``client`` has
    seen KazooState.LOST and is CONNECTED again with a new session, and the old session is gone
    from the server (checked with ``dump`` when the server answers it). ``server`` is a
    ZooKeeperServer or a connect string without chroot.

    (kazoo's own test harness only pretends: it makes the client believe that its session expired,
    while the server keeps the old session, and its ephemeral nodes, until the session times out.)
    """
    if not client.connected or client.client_id is None:
        raise RuntimeError("expire_session needs a connected client")
    hosts = server.connect_string if isinstance(server, ZooKeeperServer) else server
    old_id, password = client.client_id
    deadline = time.monotonic() + timeout
    lost = threading.Event()
    reconnected = threading.Event()

    def listener(state: str) -> bool:
        if state == KazooState.LOST:
            lost.set()
        elif state == KazooState.CONNECTED and lost.is_set():
            reconnected.set()
        return False  # stay registered

    client.add_listener(listener)
    try:
        # If the client re-attached to the session in the instant between the twin's connect and
        # its close, the session survives: try again.
        while not lost.is_set():
            _close_session(hosts, old_id, password, _remaining(deadline, "close the session"))
            lost.wait(min(2.0, _remaining(deadline, "see KazooState.LOST")))
        if not reconnected.wait(_remaining(deadline, "reconnect after KazooState.LOST")):
            raise TimeoutError(f"the client did not reconnect within {timeout:g} s after LOST")
    finally:
        client.remove_listener(listener)
    new_id = client.client_id[0] if client.client_id else None
    if new_id is None or new_id == old_id:
        raise RuntimeError(f"expected a new session after expiring 0x{old_id:x}, got {new_id!r}")
    _wait_session_gone(hosts, old_id, deadline)
    return int(new_id)


def _close_session(hosts: str, session_id: int, password: bytes, timeout: float) -> None:
    twin = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=10)
    try:
        twin.start(timeout=timeout)
        if twin.client_id is None or twin.client_id[0] != session_id:
            raise RuntimeError(f"session 0x{session_id:x} is already gone from the server")
    finally:
        twin.stop()  # sends closeSession and waits for the reply
        twin.close()


def _wait_session_gone(hosts: str, session_id: int, deadline: float) -> None:
    """Poll ``dump`` (sessions with their ephemerals) until the session is not listed."""
    first = hosts.split("/", 1)[0].split(",")[0]
    host, _, port = first.rpartition(":")
    marker = f"0x{session_id:x}"
    while True:
        try:
            dump = four_letter_word(host or "127.0.0.1", int(port or 2181), "dump", timeout=2.0)
        except (OSError, ValueError):
            return  # cannot check here; on a single server the LOST already implies it
        if "SessionTracker dump" not in dump:
            return  # dump not whitelisted, or not the leader of an ensemble
        # Only the session list counts: "Connections dump" can name a closed session's last
        # connection until it times out.
        if marker not in dump.split("Connections dump:", 1)[0]:
            return
        _remaining(deadline, f"see session {marker} disappear from the server's dump")
        time.sleep(0.02)


def _remaining(deadline: float, doing: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"expire_session: timed out waiting to {doing}")
    return left
