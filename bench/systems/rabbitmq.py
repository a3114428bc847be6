"""rabbitmq: Debian's rabbitmq-server, a durable classic queue, persistent messages.

Server: `rabbitmq-server` (the script under /usr/lib/rabbitmq/bin, run as this user) with a
unique node name, AMQP on 127.0.0.1 and a free port, Erlang distribution on 127.0.0.1 and a
free port, mnesia and logs in the work directory, an empty rabbitmq.conf (defaults), no
plugins, and its own epmd (`epmd -address 127.0.0.1 -port P`, ERL_EPMD_PORT=P) that is
stopped by PID with it. Persistent messages without publisher confirms: RabbitMQ writes
them to its message store and syncs on its own schedule (the paper's asynchronous flush).

Client: pika, the default exchange, routing key = queue name, delivery_mode 2.
  produce  batch 1: BlockingConnection.basic_publish per message (each publish is flushed
           to the socket before the call returns); batch 50: pika's asynchronous
           SelectConnection, 50 basic_publish calls per I/O-loop turn, so that 50 messages
           go out in one socket write (AMQP 0-9-1 has no batch publish; transactions
           would add a synchronous commit). No confirms in either: like 0.7's producer.
           The clock stops when the queue holds every message (queue.declare passive).
  consume  basic_qos(prefetch_count=1000), basic_consume with auto_ack, BlockingConnection
  latency  one way: a producer process publishes, a consumer process's basic_consume
           callback receives
  group    competing consumers on the one queue (RabbitMQ's way to share a queue)
"""

from __future__ import annotations

import os
import shutil
import subprocess
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

SERVER_SCRIPT = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
BATCHING = {
    1: "BlockingConnection.basic_publish per message (flushed per publish), no confirms",
    50: "SelectConnection: 50 basic_publish per I/O-loop turn (one socket write), no confirms",
}
CONSUMING = "basic_qos(prefetch_count=1000), basic_consume(auto_ack=True)"
SETTINGS = {
    "queue": "classic, durable (x-queue-type default)",
    "messages": "persistent (delivery_mode 2), no publisher confirms",
    "rabbitmq.conf": "empty: every default (vm_memory_high_watermark 0.4, ...)",
    "Erlang": "the packaged defaults (+sbwt none)",
}
_MAX_BUFFER = 1 << 20  # pipelined publishing waits while pika holds more than this unsent


def available() -> tuple[bool, str]:
    if not SERVER_SCRIPT.exists() or not shutil.which("epmd"):
        return False, "rabbitmq-server is not installed (bash bench/install-peers.sh)"
    try:
        import pika  # noqa: F401
    except ImportError:
        return False, "pika is not installed (bash bench/install-peers.sh)"
    return True, ""


def versions() -> dict[str, str]:
    import pika

    deb = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"], capture_output=True, text=True
    ).stdout.strip()
    erl = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "erlang-base"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "server": f"RabbitMQ {deb.split('-')[0]} (Erlang {erl.split(':')[-1].split('+')[0]})",
        "client": f"pika {pika.__version__}",
        "debian": deb,
    }


class Server:
    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.epmd: Any = None
        self.proc: Any = None
        self.port = 0

    @property
    def data_dir(self) -> Path:
        return self.workdir / "mnesia"

    def start(self) -> None:
        w = self.workdir
        w.mkdir(parents=True, exist_ok=True)
        epmd_port, self.port, dist_port = free_port(), free_port(), free_port()
        self.epmd = spawn(["epmd", "-address", LOOPBACK, "-port", str(epmd_port)], w / "epmd.log")
        (w / "rabbitmq.conf").write_text("")
        (w / "enabled_plugins").write_text("[].\n")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(w),  # a fresh Erlang cookie, ours alone
            "LANG": "C.UTF-8",
            "ERL_EPMD_PORT": str(epmd_port),
            "ERL_EPMD_ADDRESS": LOOPBACK,
            "RABBITMQ_NODENAME": f"bench{os.getpid()}x{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": LOOPBACK,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.data_dir),
            "RABBITMQ_LOG_BASE": str(w / "log"),
            "RABBITMQ_CONFIG_FILE": str(w / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(w / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(w / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(w / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(w / "plugins-expand"),
            "RABBITMQ_PID_FILE": str(w / "rabbitmq.pid"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }
        log = w / "server.log"
        self.proc = spawn([str(SERVER_SCRIPT)], log, env=env, cwd=w)

        def amqp_ready() -> bool:
            import pika

            if not port_open(self.port):
                return False
            try:
                pika.BlockingConnection(_params(LOOPBACK, self.port)).close()
            except pika.exceptions.AMQPError:
                return False
            return True

        try:
            wait_for(amqp_ready, 120, "rabbitmq-server", self.proc, log, interval=0.5)
        except BaseException:
            self.stop()
            raise

    @property
    def endpoint(self) -> dict[str, Any]:
        return {"host": LOOPBACK, "port": self.port}

    def pids(self) -> list[int]:
        return [p.pid for p in (self.proc, self.epmd) if p is not None]

    def stop(self) -> None:
        try:
            stop_pid(self.proc, timeout=60)  # the script traps TERM and stops the node
        finally:
            stop_pid(self.epmd, timeout=5)


def _params(host: str, port: int) -> Any:
    import pika

    return pika.ConnectionParameters(
        host=host, port=port, heartbeat=0, blocked_connection_timeout=None
    )


class Client:
    def __init__(self, endpoint: dict[str, Any]) -> None:
        import pika

        self.pika = pika
        self.ep = endpoint
        self.props = pika.BasicProperties(delivery_mode=2)
        self._conns: list[Any] = []

    def _blocking(self) -> tuple[Any, Any]:
        conn = self.pika.BlockingConnection(_params(self.ep["host"], self.ep["port"]))
        self._conns.append(conn)
        return conn, conn.channel()

    def close(self) -> None:
        for conn in self._conns:
            if conn.is_open:
                conn.close()

    def _declare(self, channel: Any, queue: str) -> int:
        return int(channel.queue_declare(queue=queue, durable=True).method.message_count)

    def _wait_count(self, channel: Any, queue: str, n: int, timeout: float = 900) -> None:
        deadline = time.monotonic() + timeout
        while self._declare(channel, queue) < n:
            if time.monotonic() > deadline:
                raise BenchError(f"rabbitmq: {queue} did not reach {n} messages")
            time.sleep(0.002)

    def produce(
        self,
        topic: str,
        n: int,
        size: int,
        batch: int,
        ready: Callable[[], None],
        wait_stored: bool = True,
    ) -> dict[str, Any]:
        _conn, watch = self._blocking()
        start = self._declare(watch, topic)
        pool = payloads(size)
        n = n // batch * batch
        if batch == 1:
            _c, ch = self._blocking()
            publish = ch.basic_publish
            props = self.props
            ready()
            t0 = time.perf_counter()
            for data in cycled(pool, n):
                publish("", topic, data, props)
        else:
            t0 = self._pipelined(topic, n, pool, batch, ready)
        if wait_stored:
            self._wait_count(watch, topic, start + n)
        return {"messages": n, "seconds": time.perf_counter() - t0}

    def _pipelined(
        self,
        topic: str,
        n: int,
        pool: list[bytes],
        batch: int,
        ready: Callable[[], None],
        on_window: Callable[[int], None] | None = None,
        window: int = 0,
    ) -> float:
        """Publish n messages, `batch` per I/O-loop turn, with pika's SelectConnection;
        returns the start time (after `ready()`)."""
        pika = self.pika
        state: dict[str, Any] = {"sent": 0, "t0": 0.0, "error": None}
        props = self.props
        sets = batches(pool, batch)

        def burst() -> None:
            conn, ch = state["conn"], state["ch"]
            if conn._get_write_buffer_size() > _MAX_BUFFER:  # let the socket drain
                conn.ioloop.call_later(0.0005, burst)
                return
            before = state["sent"]
            publish = ch.basic_publish
            for data in sets[(before // batch) % len(sets)]:
                publish("", topic, data, props)
            state["sent"] += batch
            if on_window and before // window != state["sent"] // window:
                on_window(state["sent"])
            if state["sent"] < n:
                conn.ioloop.call_later(0, burst)
            else:
                conn.ioloop.call_later(0, finish)

        def finish() -> None:
            conn = state["conn"]
            if conn._get_write_buffer_size() > 0:
                conn.ioloop.call_later(0.0005, finish)
                return
            conn.close()

        def on_declared(_frame: Any) -> None:
            ready()
            state["t0"] = time.perf_counter()
            burst()

        def on_channel(ch: Any) -> None:
            state["ch"] = ch
            ch.queue_declare(queue=topic, durable=True, callback=on_declared)

        def on_open(conn: Any) -> None:
            conn.channel(on_open_callback=on_channel)

        def on_error(_conn: Any, exc: Any) -> None:
            state["error"] = exc
            _conn.ioloop.stop()

        def on_closed(conn: Any, reason: Any) -> None:
            if state["sent"] < n:
                state["error"] = reason
            conn.ioloop.stop()

        conn = pika.SelectConnection(
            _params(self.ep["host"], self.ep["port"]),
            on_open_callback=on_open,
            on_open_error_callback=on_error,
            on_close_callback=on_closed,
        )
        state["conn"] = conn
        conn.ioloop.start()
        if state["error"] is not None:
            raise BenchError(f"rabbitmq: pipelined publishing failed: {state['error']}")
        return float(state["t0"])

    def load(self, topic: str, n: int, size: int, partitions: int = 1) -> dict[str, Any]:
        return self.produce(topic, n, size, 50, lambda: None)

    def _consume(
        self, topic: str, ready: Callable[[], None], stop_at: int, idle_s: float
    ) -> tuple[int, int, float, float]:
        conn, ch = self._blocking()
        self._declare(ch, topic)
        ch.basic_qos(prefetch_count=1000)
        state = {"count": 0, "bytes": 0}

        def on_message(_ch: Any, _method: Any, _props: Any, body: bytes) -> None:
            state["count"] += 1
            state["bytes"] += len(body)

        ready()
        t0 = time.perf_counter()
        t_last = t0
        ch.basic_consume(topic, on_message, auto_ack=True)
        process = conn.process_data_events
        seen = 0
        while state["count"] < stop_at:
            process(time_limit=0.05)
            now = time.perf_counter()
            if state["count"] != seen:
                seen, t_last = state["count"], now
            elif now - t_last > idle_s:
                break
        if state["count"] >= stop_at:
            t_last = time.perf_counter()
        return state["count"], state["bytes"], t0, t_last

    def consume(
        self, topic: str, n: int, batch_bytes: int, ready: Callable[[], None]
    ) -> dict[str, Any]:
        count, nbytes, t0, t1 = self._consume(topic, ready, n, idle_s=60)
        if count < n:
            raise BenchError(f"rabbitmq: consumed {count} of {n}")
        return {"messages": count, "seconds": t1 - t0, "payload_bytes": nbytes}

    def latency_consume(
        self, topic: str, total: int, warmup: int, ack_path: str, ready: Callable[[], None]
    ) -> dict[str, Any]:
        """The one-way latency's consumer: a push consumer (basic_consume, auto_ack); pika's
        BlockingConnection calls the callback inside process_data_events, in this thread."""
        cconn, sub = self._blocking()
        self._declare(sub, topic)
        got: list[bytes] = []
        sub.basic_consume(topic, lambda _c, _m, _p, body: got.append(body), auto_ack=True)
        process = cconn.process_data_events

        def receive() -> bytes:
            while not got:
                process(time_limit=None)
            body = got.pop()
            if got:
                raise BenchError("latency: more than one message in flight")
            return body

        return one_way_consumer(total, warmup, receive, ack_path, ready)

    def latency_produce(self, topic: str, total: int, size: int, ack_path: str) -> dict[str, Any]:
        _pc, pub = self._blocking()
        props = self.props
        publish = pub.basic_publish
        return one_way_producer(total, size, lambda data: publish("", topic, data, props), ack_path)

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
        _conn, watch = self._blocking()
        self._declare(watch, topic)
        n = total_bytes // size // batch * batch
        window = max(batch, window_bytes // size // batch * batch)
        marks: list[tuple[int, float]] = []
        t0 = self._pipelined(
            topic,
            n,
            payloads(size),
            batch,
            lambda: None,
            on_window=lambda sent: marks.append((sent, time.perf_counter())),
            window=window,
        )
        self._wait_count(watch, topic, n)
        end = time.perf_counter()
        windows = []
        prev_n, prev_t = 0, t0
        for sent, t in [*marks[:-1], (n, end)]:
            windows.append([sent * size, (sent - prev_n) / (t - prev_t)])
            prev_n, prev_t = sent, t
        return {"windows": windows, "message_bytes": size}

    def drop(self, topic: str) -> None:
        _conn, ch = self._blocking()
        ch.queue_delete(queue=topic)
