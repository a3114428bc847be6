"""logbroker: `logbroker broker` (BrokerProcess) registered in a ZooKeeper (ZooKeeperServer).

Server: one broker with the sample server.properties settings (fsync every 10,000 messages
or 1,000 ms: the paper's "asynchronous flush"), and a standalone ZooKeeper for the group
consumer, both on 127.0.0.1 with their data in the work directory.

Client: the project's own clients, as a user would call them.
  produce  Producer (acks "none": 0.7's fire-and-forget PRODUCE), one `send` per message
           (batch 1) or one `send` of a list of 50 (batch 50: one message set, one request);
           the clock stops when the broker's latest offset shows every message appended.
  consume  SimpleConsumer.iter_batches (pipelined fetches), fetch size = 1000 messages of
           the set's entry size (~205 KiB).
  latency  one way: a producer process sends, a consumer process waits at the end of the log
           (SimpleConsumer.iter_messages with stop_at_end=False: a pipelined FETCH_WAIT)
  group    GroupConsumer (ZooKeeper rebalancing, FETCH_WAIT fetchers), one stream a process.
  intake   no client library: prebuilt PRODUCE frames of 50 200-byte messages over one raw
           socket (bench/intake.py), the broker's own cost of reading, validating and
           appending them, as its log grows (beside tcp's relay)
  secure   produce (batch 50) and consume as above over TLS and over SASL_SSL: the broker's
           SSL listener (a certificate from logbroker.security.certificates, no client
           certificate asked), and a second broker with SASL (SCRAM-SHA-256, a user in its
           own chroot; both its listeners mapped to SASL_*) on its SSL listener
  sizes    Producer.send of a list of 50 messages of 10 B to 100 KB for a few seconds, as
           `produce` at batch 50 (a 100 KB set is 5 MB a request: under max.message.size,
           1,000,000 bytes a payload, and max.socket.request.bytes, 100 MiB, the defaults)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import (
    BenchError,
    batches,
    cycled,
    one_way_consumer,
    one_way_producer,
    payload,
    payloads,
    pool_count,
)

ENTRY_OVERHEAD = 10  # int32 size, magic 1, attributes, CRC32
GROUP_TOPIC = "grp"
BATCHING = {
    1: "Producer.send(topic, payload): one PRODUCE request per message, no ack",
    50: "Producer.send(topic, [50 payloads]): one message set, one PRODUCE request, no ack",
}
SASL_USER = ("bench", "bench-secret")  # the SASL_SSL rows' SCRAM-SHA-256 login
CONSUMING = "SimpleConsumer.iter_batches, FETCHes of 1000 messages' worth (~205 KiB)"


def available() -> tuple[bool, str]:
    try:
        import logbroker  # noqa: F401
    except ImportError as exc:
        return False, f"logbroker is not importable: {exc}"
    if not Path("/usr/share/java/zookeeper.jar").exists():
        return False, "Debian's zookeeper is not installed (make setup)"
    return True, ""


def versions() -> dict[str, str]:
    import platform

    import logbroker

    return {
        "server": f"logbroker {logbroker.__version__} (CPython {platform.python_version()})",
        "client": f"logbroker {logbroker.__version__} Producer/SimpleConsumer/GroupConsumer",
    }


SETTINGS = {
    "log.flush.interval": "10000 (sample default)",
    "log.default.flush.interval.ms": "1000 (sample default)",
    "log.file.size": "536870912 (default)",
    "topic.partition.count.map": f"{GROUP_TOPIC}:2 (the group workloads' topic)",
    "zookeeper": "standalone, tickTime 500, forceSync=no",
}


class Server:
    def __init__(self, workdir: Path, broker_prefix: tuple[str, ...] = ()) -> None:
        """`broker_prefix`: a launcher both brokers run under (bench/profile_tls.py's)."""
        self.workdir = Path(workdir)
        self.broker_prefix = broker_prefix
        self.zk: Any = None
        self.broker: Any = None
        self.sasl_broker: Any = None

    @property
    def data_dir(self) -> Path:
        return self.workdir / "broker" / "logs"

    def start(self) -> None:
        from logbroker.cli import main
        from logbroker.security.certificates import CertificateAuthority
        from logbroker.stack.broker import BrokerProcess
        from logbroker.stack.zookeeper import ZooKeeperServer, find_free_port

        self.zk = ZooKeeperServer(self.workdir / "zookeeper").start()
        target = self.zk.create_chroot("/bench")
        self.zk_connect = target.connect
        ca = CertificateAuthority(self.workdir / "certs")
        self.cafile = str(ca.certfile)
        settings = {
            "topic.partition.count.map": f"{GROUP_TOPIC}:2",
            "log.cleanup.interval.mins": "60",
            # The sample server.properties' SO_RCVBUF (as 0.7's sample); the relay's
            # sockets have 1 MiB too. The code's default stays 0.7's 100 KB.
            "socket.receive.buffer": "1048576",
        }

        def tls(name: str, port: int) -> dict[str, str]:
            own = ca.issue(name)
            return {
                "listeners": f"SSL://127.0.0.1:{port}",
                "ssl.certfile": str(own.certfile),
                "ssl.keyfile": str(own.keyfile),
            }

        self.ssl_port = find_free_port()
        self.broker = BrokerProcess(
            self.workdir / "broker",
            broker_id=0,
            zk_connect=self.zk_connect,
            overrides={**settings, **tls("broker-0", self.ssl_port)},
            command_prefix=self.broker_prefix,
        ).start(timeout=60)
        # SASL_SSL: a broker of its own, both listeners mapped to SASL_* (logins only).
        sasl_target = self.zk.create_chroot("/bench-sasl")
        for user, password in (("broker-0", "broker-secret"), SASL_USER):
            assert main(["configs", "--zookeeper", sasl_target.connect, "--entity-type", "users",
                         "--alter", "--entity-name", user,
                         "--add-config", f"SCRAM-SHA-256=[password={password}]"]) == 0  # fmt: skip
        self.sasl_ssl_port = find_free_port()
        self.sasl_broker = BrokerProcess(
            self.workdir / "broker-sasl",
            broker_id=0,
            zk_connect=sasl_target.connect,
            overrides={
                **settings,
                **tls("broker-0", self.sasl_ssl_port),
                "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,SSL:SASL_SSL",
                "sasl.enabled.mechanisms": "SCRAM-SHA-256",
                "sasl.jaas.config": 'ScramLoginModule required username="broker-0" '
                'password="broker-secret";',
            },
            command_prefix=self.broker_prefix,
        ).start(timeout=60)

    @property
    def endpoint(self) -> dict[str, Any]:
        return {
            "host": self.broker.host,
            "port": self.broker.port,
            "zk": self.zk_connect,
            "ssl_port": self.ssl_port,
            "sasl_ssl_port": self.sasl_ssl_port,
            "cafile": self.cafile,
        }

    def pids(self) -> list[int]:
        brokers = (self.broker, self.sasl_broker)
        return [p for p in (*(b and b.pid for b in brokers), self.zk and self.zk.pid) if p]

    def stop(self) -> None:
        try:
            for broker in (self.sasl_broker, self.broker):
                if broker is not None:
                    broker.stop()
        finally:
            if self.zk is not None:
                self.zk.stop()


class Client:
    def __init__(self, endpoint: dict[str, Any]) -> None:
        """`endpoint["security"]`: PLAINTEXT (default), SSL or SASL_SSL (run.py's secure
        rows): the listener connected to, and the client's TLS and SASL settings."""
        from logbroker.security.sasl import SaslClientConfig
        from logbroker.security.tls import ClientSecurity

        self.ep = endpoint
        protocol = endpoint.get("security", "PLAINTEXT")
        self.port = {"SSL": "ssl_port", "SASL_SSL": "sasl_ssl_port"}.get(protocol, "port")
        self.port = endpoint[self.port]
        self.security = (
            None if protocol == "PLAINTEXT" else ClientSecurity(protocol, endpoint["cafile"])
        )
        self.sasl = (
            SaslClientConfig("SCRAM-SHA-256", *SASL_USER) if protocol == "SASL_SSL" else None
        )
        self.broker_list = f"0:{endpoint['host']}:{self.port}"
        self._closers: list[Callable[[], None]] = []

    def close(self) -> None:
        for close in reversed(self._closers):
            close()

    def _producer(self, partitions: int = 1, codec: str = "none") -> Any:
        from logbroker.client.producer import Producer

        producer = Producer(
            broker_list=self.broker_list,
            num_partitions=partitions,
            compression_codec=codec,
            security=self.security,
            sasl=self.sasl,
        )
        self._closers.append(producer.close)
        return producer

    def _consumer(self, fetch_size: int = 300 * 1024) -> Any:
        from logbroker.client.simple_consumer import SimpleConsumer

        consumer = SimpleConsumer(
            self.ep["host"],
            self.port,
            fetch_size=fetch_size,
            tls=self.security.context() if self.security else None,
            sasl=self.sasl,
        )
        self._closers.append(consumer.close)
        return consumer

    def _latest(self, consumer: Any, topic: str, partition: int = 0) -> int:
        from logbroker.protocol.errors import LogbrokerError

        try:
            return int(consumer.latest_offset(topic, partition))
        except LogbrokerError:
            return 0  # the topic does not exist yet

    def _wait_stored(self, consumer: Any, topic: str, offset: int, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while self._latest(consumer, topic) < offset:
            if time.monotonic() > deadline:
                raise BenchError(f"the broker did not append {topic} up to {offset}")
            time.sleep(0.0005)

    # -- workloads ------------------------------------------------------------------------

    def produce(
        self, topic: str, n: int, size: int, batch: int, ready: Callable[[], None]
    ) -> dict[str, Any]:
        producer = self._producer()
        watcher = self._consumer()
        start_offset = self._latest(watcher, topic)
        n = n // batch * batch
        end_offset = start_offset + n * (size + ENTRY_OVERHEAD)
        pool = payloads(size)
        send = producer.send
        ready()
        t0 = time.perf_counter()
        if batch == 1:
            for data in cycled(pool, n):
                send(topic, data)
        else:
            for messages in cycled(batches(pool, batch), n // batch):
                send(topic, messages)
        sent = time.perf_counter()
        self._wait_stored(watcher, topic, end_offset)
        t1 = time.perf_counter()
        return {
            "messages": n,
            "seconds": t1 - t0,
            "send_seconds": sent - t0,
            "stored_bytes": end_offset - start_offset,
        }

    def load(self, topic: str, n: int, size: int, partitions: int = 1) -> dict[str, Any]:
        producer = self._producer(partitions)
        watcher = self._consumer()
        sets = batches(payloads(size), 50)
        per_partition = n // partitions
        for p in range(partitions):
            key = str(p) if partitions > 1 else None  # Java's hash: "0" -> 0, "1" -> 1
            for messages in cycled(sets, per_partition // 50):
                producer.send(topic, messages, key=key)
        for p in range(partitions):
            deadline = time.monotonic() + 600
            want = (per_partition // 50) * 50 * (size + ENTRY_OVERHEAD)
            while self._latest(watcher, topic, p) < want:
                if time.monotonic() > deadline:
                    raise BenchError(f"load of {topic}-{p} did not complete")
                time.sleep(0.002)
        return {"messages": (per_partition // 50) * 50 * partitions}

    def consume(
        self, topic: str, n: int, batch_bytes: int, ready: Callable[[], None]
    ) -> dict[str, Any]:
        consumer = self._consumer(fetch_size=batch_bytes)
        offset = consumer.earliest_offset(topic, 0)
        ready()
        count = nbytes = 0
        t0 = time.perf_counter()
        # The consumer's batch iterator, as its docs show it for reading a lot: a fetch at a
        # time (the next one on its way while this one is walked), every CRC checked, and
        # every message handed to the application, as the peers' loops hand theirs.
        for batch in consumer.iter_batches(topic, 0, offset, stop_at_end=False, max_wait_ms=1000):
            for data in batch.payloads:
                count += 1
                nbytes += len(data)
            if count >= n:
                break
        t1 = time.perf_counter()
        return {"messages": count, "seconds": t1 - t0, "payload_bytes": nbytes}

    def latency_consume(
        self, topic: str, total: int, warmup: int, ack_path: str, ready: Callable[[], None]
    ) -> dict[str, Any]:
        """The one-way latency's consumer: SimpleConsumer.iter_messages waiting at the end of
        the log (FETCH_WAIT; caught up, a message is handed over before the next waiting
        fetch is sent)."""
        producer = self._producer()
        consumer = self._consumer(fetch_size=64 * 1024)
        producer.send(topic, payload(64))  # creates the topic
        self._wait_stored(consumer, topic, 64 + ENTRY_OVERHEAD)
        start = self._latest(consumer, topic)
        messages = consumer.iter_messages(topic, 0, start, stop_at_end=False, max_wait_ms=10_000)
        return one_way_consumer(total, warmup, lambda: next(messages).payload, ack_path, ready)

    def latency_produce(self, topic: str, total: int, size: int, ack_path: str) -> dict[str, Any]:
        producer = self._producer()
        send = producer.send
        return one_way_producer(total, size, lambda data: send(topic, data), ack_path)

    def group_consume(
        self,
        topic: str,
        group: str,
        members: int,
        expect: int,
        idle_s: float,
        ready: Callable[[], None],
        batch_bytes: int = 210_000,
    ) -> dict[str, Any]:
        from logbroker.client.group_consumer import GroupConsumer

        consumer = GroupConsumer(
            group_id=group,
            zk_connect=self.ep["zk"],
            autooffset_reset="smallest",
            consumer_timeout_ms=int(idle_s * 1000),
            fetch_size=batch_bytes,
            rebalance_backoff_ms=200,
        )
        self._closers.append(consumer.close)
        stream = consumer.create_message_streams({topic: 1})[topic][0]
        share = 2 // members  # the group topic has 2 partitions
        deadline = time.monotonic() + 60
        while sum(len(v) for v in consumer.owned_partitions().values()) != share:
            if time.monotonic() > deadline:
                raise BenchError(f"group {group}: no stable assignment after 60 s")
            time.sleep(0.02)
        ready()
        count = nbytes = 0
        t0 = time.perf_counter()
        t_last = t0
        for m in stream:
            count += 1
            nbytes += len(m.payload)
            if count >= expect:
                t_last = time.perf_counter()
                break
            if count % 1000 == 0:
                t_last = time.perf_counter()
        else:
            t_last = max(t_last, time.perf_counter() - idle_s)
        return {"messages": count, "seconds": t_last - t0, "payload_bytes": nbytes}

    def growth(
        self, topic: str, total_bytes: int, size: int, batch: int, window_bytes: int
    ) -> dict[str, Any]:
        producer = self._producer()
        watcher = self._consumer()
        sets = batches(payloads(size), batch)
        per_batch = batch * (size + ENTRY_OVERHEAD)
        batches_per_window = max(1, window_bytes // per_batch)
        windows: list[list[float]] = []
        sent_bytes = 0
        send = producer.send
        clock = time.perf_counter
        window_messages = batches_per_window * batch
        window_sets = list(cycled(sets, batches_per_window))
        stored = 0  # payload bytes, the x axis of every system's growth curve
        t_prev = t_start = clock()
        while stored < total_bytes:
            t_start = t_prev
            for messages in window_sets:
                send(topic, messages)
            sent_bytes += batches_per_window * per_batch
            stored += window_messages * size
            t_prev = clock()
            windows.append([stored, window_messages / (t_prev - t_start)])
        self._wait_stored(watcher, topic, sent_bytes)
        # What the broker still had to append at the end belongs to the last window.
        windows[-1][1] = window_messages / (clock() - t_start)
        return {"windows": windows, "message_bytes": size + ENTRY_OVERHEAD}

    def intake(
        self, topic: str, total_bytes: int, size: int, batch: int, window_bytes: int
    ) -> dict[str, Any]:
        """Prebuilt PRODUCE frames streamed over one socket until the log holds
        `total_bytes`; the time of every `window_bytes` appended (bench/intake.py)."""
        from intake import connect, produce_frames, set_bytes, stream

        frames = produce_frames(topic, size, batch)
        per = set_bytes(size, batch)
        watcher = self._consumer()
        start = self._latest(watcher, topic)
        sock = connect(self.ep["host"], self.ep["port"])
        self._closers.append(sock.close)
        windows = stream(
            sock,
            frames,
            per,
            total_bytes,
            window_bytes,
            lambda sent: self._wait_stored(watcher, topic, start + sent * per),
        )
        return {"windows": windows, "frame_bytes": len(frames[0]), "set_bytes": per}

    def produce_for(
        self, topic: str, size: int, batch: int, seconds: float, ready: Callable[[], None]
    ) -> dict[str, Any]:
        """The size sweep: Producer.send of `batch` messages of `size` bytes for about
        `seconds`; the clock stops when the broker shows the last one appended."""
        producer = self._producer()
        watcher = self._consumer()
        start = self._latest(watcher, topic)
        sets = batches(payloads(size, pool_count(size)), batch)
        count = len(sets)
        send = producer.send
        clock = time.perf_counter
        ready()
        t0 = clock()
        deadline = t0 + seconds
        sent = 0
        while True:
            send(topic, sets[sent % count])
            sent += 1
            if clock() >= deadline:
                break
        self._wait_stored(watcher, topic, start + sent * batch * (size + ENTRY_OVERHEAD))
        t1 = clock()
        return {"messages": sent * batch, "seconds": t1 - t0, "payload_bytes": sent * batch * size}

    def drop(self, topic: str) -> None:
        """Nothing to free: a log keeps its data (retention deletes it, as designed)."""

    # -- compression (workload 8; only logbroker compresses) -------------------------------

    def produce_json(
        self,
        topic: str,
        events: list[bytes],
        n: int,
        batch: int,
        codec: str,
        ready: Callable[[], None],
    ) -> dict[str, Any]:
        from logbroker.protocol import compression
        from logbroker.protocol.message_set import build_message_set

        producer = self._producer(codec=codec)
        watcher = self._consumer()
        batches = [events[i : i + batch] for i in range(0, len(events), batch)]
        code = compression.codec_by_name(codec)
        set_sizes = [len(build_message_set(b, code)) for b in batches]  # deterministic
        rounds = n // batch
        expected = sum(set_sizes[i % len(batches)] for i in range(rounds))
        raw = sum(len(build_message_set(batches[i % len(batches)])) for i in range(rounds))
        start = self._latest(watcher, topic)
        send = producer.send
        ready()
        t0 = time.perf_counter()
        for i in range(rounds):
            send(topic, batches[i % len(batches)])
        self._wait_stored(watcher, topic, start + expected)
        t1 = time.perf_counter()
        return {
            "messages": rounds * batch,
            "seconds": t1 - t0,
            "stored_bytes": expected,
            "uncompressed_bytes": raw,
            "payload_bytes": sum(len(b) for i in range(rounds) for b in batches[i % len(batches)]),
        }

    def consume_json(
        self, topic: str, n: int, batch_bytes: int, ready: Callable[[], None]
    ) -> dict[str, Any]:
        return self.consume(topic, n, batch_bytes, ready)
