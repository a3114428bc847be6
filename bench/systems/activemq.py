"""activemq: Debian's ActiveMQ 5.17, KahaDB, persistent messages over STOMP.

Server: the packaged broker's Java command line (what /usr/bin/activemq runs, without its
init-script layer): `java -Xms512M -Xmx512M ... -jar /usr/share/activemq/bin/activemq.jar
start xbean:file:W/conf/activemq.xml` with a generated activemq.xml: one STOMP connector on
127.0.0.1 and a free port, no JMX, KahaDB in the work directory with the journal synced
every second (journalDiskSyncStrategy="periodic", the paper's asynchronous flush; the
default would fsync every write). Heap 512 MB, as Debian's activemq-options sets.

Client: stomp.py (STOMP 1.2), queues, `persistent: true`.
  produce  batch 1: a SEND per message, no receipt (stomp.py does not wait); batch 50: a
           STOMP transaction BEGIN, 50 SENDs, COMMIT (KahaDB writes a transaction's
           messages as one batch). The clock stops when the broker has processed every
           frame: a final BEGIN with a receipt header, answered in order.
  consume  SUBSCRIBE ack:auto, activemq.prefetchSize:1000
  latency  SEND on one connection, the listener of a second connection's subscription
  group    competing consumers on the one queue, prefetch 1000 each
"""

from __future__ import annotations

import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import (
    LOOPBACK,
    BenchError,
    batches,
    cycled,
    free_port,
    one_way_consumer,
    one_way_producer,
    payloads,
    port_open,
    spawn,
    stop_pid,
    wait_for,
)

HOME = Path("/usr/share/activemq")
BATCHING = {
    1: "a STOMP SEND per message, persistent, no receipt",
    50: "a STOMP transaction per 50 messages (BEGIN, 50 SENDs, COMMIT)",
}
CONSUMING = "SUBSCRIBE ack:auto with activemq.prefetchSize:1000"
SETTINGS = {
    "store": 'KahaDB, journalDiskSyncStrategy="periodic", journalDiskSyncInterval=1000',
    "heap": "-Xms512M -Xmx512M (Debian's activemq-options)",
    "transport": "stomp://127.0.0.1 only; useJmx=false, advisorySupport=false",
    "messages": "persistent:true, queues (/queue/NAME)",
}
JAVA_OPENS = [
    "--add-reads=java.xml=java.logging",
    *(
        f"--add-opens=java.base/{p}=ALL-UNNAMED"
        for p in (
            "java.security",
            "java.net",
            "java.lang",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
        )
    ),
    "--add-opens=java.naming/javax.naming.spi=ALL-UNNAMED",
    "--add-opens=java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED",
]
_XML = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="bench" useJmx="false"
          persistent="true" advisorySupport="false" dataDirectory="{data}">
    <persistenceAdapter>
      <kahaDB directory="{data}/kahadb" journalDiskSyncStrategy="periodic"
              journalDiskSyncInterval="1000"/>
    </persistenceAdapter>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:{port}"/>
    </transportConnectors>
  </broker>
</beans>
"""
_LOG4J = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=%d %-5p [%t] %c - %m%n
"""


def available() -> tuple[bool, str]:
    if not (HOME / "bin" / "activemq.jar").exists() or not shutil.which("java"):
        return False, "activemq is not installed (bash bench/install-peers.sh)"
    try:
        import stomp  # noqa: F401
    except ImportError:
        return False, "stomp.py is not installed (bash bench/install-peers.sh)"
    return True, ""


def versions() -> dict[str, str]:
    import stomp

    deb = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "activemq"], capture_output=True, text=True
    ).stdout.strip()
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    java_version = java.split('"')[1] if '"' in java else "?"
    v = stomp.__version__
    version = v if isinstance(v, str) else ".".join(str(x) for x in v)
    return {
        "server": f"ActiveMQ {deb.split('+')[0]} (OpenJDK {java_version})",
        "client": f"stomp.py {version}",
        "debian": deb,
    }


class Server:
    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.proc: Any = None
        self.port = 0

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data" / "kahadb"

    def start(self) -> None:
        w = self.workdir
        conf, data = w / "conf", w / "data"
        conf.mkdir(parents=True, exist_ok=True)
        data.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        (conf / "activemq.xml").write_text(_XML.format(data=data, port=self.port))
        (conf / "log4j.properties").write_text(_LOG4J.format(log=w / "activemq.log"))
        argv = [
            "java",
            "-Xms512M",
            "-Xmx512M",
            *JAVA_OPENS,
            f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
            f"-Dactivemq.classpath={conf}",
            f"-Dactivemq.home={HOME}",
            f"-Dactivemq.base={w}",
            f"-Dactivemq.conf={conf}",
            f"-Dactivemq.data={data}",
            "-jar",
            str(HOME / "bin" / "activemq.jar"),
            "start",
            f"xbean:file:{conf / 'activemq.xml'}",
        ]
        log = w / "console.log"
        self.proc = spawn(argv, log, cwd=w)
        try:
            wait_for(lambda: port_open(self.port), 120, "activemq", self.proc, log, interval=0.2)
        except BaseException:
            self.stop()
            raise

    @property
    def endpoint(self) -> dict[str, Any]:
        return {"host": LOOPBACK, "port": self.port}

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc else []

    def stop(self) -> None:
        stop_pid(self.proc, timeout=60)


class _Listener:
    """Counts messages (and bytes) and wakes waiters; runs in stomp.py's receiver thread."""

    def __init__(self) -> None:
        self.count = 0
        self.bytes = 0
        self.t_last = 0.0
        self.target = 1 << 62
        self.done = threading.Event()
        self.receipts: dict[str, threading.Event] = {}
        self.last_body: bytes = b""
        self.arrived = threading.Event()
        self.error: str | None = None
        self.handoff: queue.SimpleQueue[tuple[bytes, int]] | None = None

    def on_message(self, frame: Any) -> None:
        if self.handoff is not None:
            self.handoff.put((frame.body, time.monotonic_ns()))
        self.count += 1
        body = frame.body
        self.bytes += len(body)
        self.last_body = body
        if self.count >= self.target:
            self.t_last = time.perf_counter()
            self.done.set()
        self.arrived.set()

    def on_receipt(self, frame: Any) -> None:
        event = self.receipts.get(frame.headers.get("receipt-id", ""))
        if event is not None:
            event.set()

    def on_error(self, frame: Any) -> None:
        self.error = f"{frame.headers} {frame.body!r}"
        self.done.set()
        self.arrived.set()
        for event in self.receipts.values():
            event.set()


class Client:
    def __init__(self, endpoint: dict[str, Any]) -> None:
        import stomp

        self.stomp = stomp
        self.ep = endpoint
        self._conns: list[Any] = []

    def _connect(self) -> tuple[Any, _Listener]:
        conn = self.stomp.Connection12(
            [(self.ep["host"], self.ep["port"])], auto_decode=False, heartbeats=(0, 0)
        )
        listener = _Listener()
        conn.set_listener("bench", listener)
        conn.connect(wait=True)
        self._conns.append(conn)
        return conn, listener

    def close(self) -> None:
        for conn in self._conns:
            if conn.is_connected():
                conn.disconnect()

    @staticmethod
    def _dest(topic: str) -> str:
        return f"/queue/{topic}"

    def _fence(self, conn: Any, listener: _Listener, timeout: float = 900) -> None:
        """Wait until the broker processed every frame sent so far on this connection."""
        rid = f"fence-{time.monotonic_ns()}"
        event = listener.receipts[rid] = threading.Event()
        conn.begin(transaction=rid, receipt=rid)
        if not event.wait(timeout) or listener.error:
            raise BenchError(f"activemq: no receipt ({listener.error})")
        conn.abort(transaction=rid)

    def produce(
        self,
        topic: str,
        n: int,
        size: int,
        batch: int,
        ready: Callable[[], None],
        wait_stored: bool = True,
    ) -> dict[str, Any]:
        conn, listener = self._connect()
        dest = self._dest(topic)
        pool = payloads(size)
        headers = {"persistent": "true"}
        send = conn.send
        ready()
        t0 = time.perf_counter()
        if batch == 1:
            for data in cycled(pool, n):
                send(dest, data, headers=headers)
        else:
            for group in cycled(batches(pool, batch), n // batch):
                tx = conn.begin()
                for data in group:
                    send(dest, data, headers=headers, transaction=tx)
                conn.commit(tx)
        self._fence(conn, listener)
        return {"messages": n // batch * batch, "seconds": time.perf_counter() - t0}

    def load(self, topic: str, n: int, size: int, partitions: int = 1) -> dict[str, Any]:
        return self.produce(topic, n, size, 50, lambda: None)

    def _consume(
        self, topic: str, ready: Callable[[], None], stop_at: int, idle_s: float
    ) -> tuple[int, int, float, float]:
        conn, listener = self._connect()
        listener.target = stop_at
        ready()
        t0 = time.perf_counter()
        conn.subscribe(
            self._dest(topic), id="1", ack="auto", headers={"activemq.prefetchSize": "1000"}
        )
        seen = 0
        last_change = time.perf_counter()
        while not listener.done.wait(0.05):
            now = time.perf_counter()
            if listener.count != seen:
                seen, last_change = listener.count, now
            elif now - last_change > idle_s:
                break
        if listener.error:
            raise BenchError(f"activemq: {listener.error}")
        t1 = listener.t_last if listener.done.is_set() else last_change
        conn.unsubscribe(id="1")
        return listener.count, listener.bytes, t0, t1

    def consume(
        self, topic: str, n: int, batch_bytes: int, ready: Callable[[], None]
    ) -> dict[str, Any]:
        count, nbytes, t0, t1 = self._consume(topic, ready, n, idle_s=60)
        if count < n:
            raise BenchError(f"activemq: consumed {count} of {n}")
        return {"messages": count, "seconds": t1 - t0, "payload_bytes": nbytes}

    def latency_consume(
        self, topic: str, total: int, warmup: int, ack_path: str, ready: Callable[[], None]
    ) -> dict[str, Any]:
        """The one-way latency's consumer: a STOMP subscription; stomp.py calls on_message in
        its receiver thread, which is where the application gets the message (timed there)."""
        sub, listener = self._connect()
        dest = self._dest(topic)
        rid = "subscribed"
        listener.receipts[rid] = threading.Event()
        arrivals: queue.SimpleQueue[tuple[bytes, int]] = queue.SimpleQueue()
        listener.handoff = arrivals
        sub.subscribe(dest, id="1", ack="auto", receipt=rid)
        if not listener.receipts[rid].wait(30):
            raise BenchError("activemq: no receipt for the subscription")

        def receive() -> tuple[bytes, int]:
            try:
                return arrivals.get(timeout=30)
            except queue.Empty:
                raise BenchError(f"activemq: a message did not arrive ({listener.error})") from None

        return one_way_consumer(total, warmup, receive, ack_path, ready)

    def latency_produce(self, topic: str, total: int, size: int, ack_path: str) -> dict[str, Any]:
        pub, _ = self._connect()
        dest = self._dest(topic)
        headers = {"persistent": "true"}
        return one_way_producer(
            total, size, lambda data: pub.send(dest, data, headers=headers), ack_path
        )

    def group_consume(
        self,
        topic: str,
        group: str,
        members: int,
        expect: int,
        idle_s: float,
        ready: Callable[[], None],
        batch_bytes: int = 0,
    ) -> dict[str, Any]:
        count, nbytes, t0, t1 = self._consume(topic, ready, expect, idle_s)
        return {"messages": count, "seconds": t1 - t0, "payload_bytes": nbytes}

    def growth(
        self, topic: str, total_bytes: int, size: int, batch: int, window_bytes: int
    ) -> dict[str, Any]:
        conn, listener = self._connect()
        dest = self._dest(topic)
        headers = {"persistent": "true"}
        per_window = max(1, window_bytes // (size * batch))
        window_groups = list(cycled(batches(payloads(size), batch), per_window))
        windows = []
        stored = 0
        clock = time.perf_counter
        t_prev = clock()
        while stored < total_bytes:
            for group in window_groups:
                tx = conn.begin()
                for data in group:
                    conn.send(dest, data, headers=headers, transaction=tx)
                conn.commit(tx)
            stored += per_window * batch * size
            if stored >= total_bytes:
                self._fence(conn, listener)
            now = clock()
            windows.append([stored, per_window * batch / (now - t_prev)])
            t_prev = now
        return {"windows": windows, "message_bytes": size}

    def drop(self, topic: str) -> None:
        """STOMP cannot delete a queue; queues that were consumed are empty already."""
