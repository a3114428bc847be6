"""logbroker's own clients on a 0.8-format topic beside a 0.7-format replicated topic of the
same layout, on the same brokers (issue 44: produce b50 and consume each >= 0.9x).

    .venv/bin/python bench/kafka08_clients.py [--messages N] [--size BYTES] [--rounds R]
        [--brokers B] [--partitions P] [--profile]

One ZooKeeper and `--brokers` brokers (port.08 set) on 127.0.0.1, in a temporary directory.
Each round creates two fresh topics, one per format, with `--partitions` partitions and a
replication factor of `--brokers` (`topics create --replication-factor B [--message-format
0.8]`), and runs each workload on both, the two formats alternating (which one goes first
alternates too: the machines here are shared and noisy):

  produce_b50      Producer(zk_connect=...) at acks 0, `send(topic, [50 payloads])` per
                   request (run.py's produce b50: one set per request, no answer); the clock
                   stops when the leaders' high watermarks show every message (0.7: byte
                   offsets, 0.8: logical ones)
  produce_b50_ack  the same at request.required.acks 1 (each send waits for its answer)
  consume          PartitionReader (0.7) / PartitionReader08 (0.8).iter_batches of each
                   partition from its start to its end, fetches of 1000 messages' worth
                   (~210 KB of 0.7 entries, ~226 KB of 0.8 ones)

Payloads are run.py's: `--size` random bytes, unkeyed (0.8 messages with a null key). Each
workload reports messages/s per format (median, min, max over the rounds) and the 0.8/0.7
ratio of the medians, with the CPU seconds the client process and the brokers spent per
million messages (where the time goes: the client's Python, or the brokers). `--profile`
then runs one 0.8 produce_b50 and one consume under cProfile and prints the client's
functions with the most time of their own. Nothing here is asserted; tests never time
anything.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from common import batches, cycled, payloads

from logbroker.client.cluster import Cluster
from logbroker.client.leaders import Leaders
from logbroker.client.partition_reader import PartitionReader
from logbroker.client.partition_reader08 import PartitionReader08
from logbroker.client.producer import Producer
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZooKeeperServer, find_free_port

BATCH = 50
FORMATS = ("0.7", "0.8")
ENTRY_OVERHEAD = {"0.7": 10, "0.8": 26}  # 0.7: size, magic, attributes, crc; 0.8: + offset, key
WORKLOADS = ("produce_b50", "produce_b50_ack", "consume")


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.pool = payloads(args.size)
        self.zk = ZooKeeperServer(work / "zookeeper")
        self.brokers: list[BrokerProcess] = []
        self.connect = ""
        # (workload, format) -> [messages/s], [client cpu s / M msgs], [broker cpu s / M msgs]
        self.rates: dict[tuple[str, str], list[float]] = {}
        self.client_cpu: dict[tuple[str, str], list[float]] = {}
        self.broker_cpu: dict[tuple[str, str], list[float]] = {}

    # -- the cluster ----------------------------------------------------------------------

    def start(self) -> None:
        self.zk.start()
        self.connect = self.zk.create_chroot("/bench08").connect
        for i in range(self.args.brokers):
            broker = BrokerProcess(
                self.work / f"broker-{i}",
                broker_id=i,
                zk_connect=self.connect,
                overrides={
                    "port.08": str(find_free_port()),
                    "socket.receive.buffer": "1048576",  # run.py's broker setting
                    "log.cleanup.interval.mins": "60",
                },
            )
            self.brokers.append(broker.start(timeout=60))

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()
        self.zk.stop()

    def create(self, topic: str, message_format: str) -> None:
        with Cluster(self.connect) as cluster:
            cluster.create_replicated_topic(
                topic, self.args.partitions, self.args.brokers, message_format=message_format
            )

    @contextmanager
    def readers(self, topic: str, message_format: str) -> Iterator[list[Any]]:
        """A reader per partition, from its leader, of the topic's format."""
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=self.connect, timeout=30)
        zk.start(timeout=30)
        leaders = Leaders(zk)
        kind = PartitionReader08 if message_format == "0.8" else PartitionReader
        fetch = 1000 * (self.args.size + ENTRY_OVERHEAD[message_format])
        found = [
            kind(leaders, topic, p, fetch_size=fetch)  # type: ignore[operator]
            for p in range(self.args.partitions)
        ]
        try:
            yield found
        finally:
            for reader in found:
                reader.close()
            leaders.close()
            zk.stop()
            zk.close()

    def _ends(self, message_format: str, n: int) -> int:
        """The high watermark all partitions together reach after n messages."""
        if message_format == "0.8":
            return n
        return n * (self.args.size + ENTRY_OVERHEAD["0.7"])

    # -- workloads --------------------------------------------------------------------------

    def measure(self, workload: str, message_format: str, run: Callable[[], int]) -> None:
        brokers = [psutil.Process(b.pid) for b in self.brokers if b.pid is not None]
        cpu0 = os.times()
        broker0 = sum(p.cpu_times().user + p.cpu_times().system for p in brokers)
        t0 = time.perf_counter()
        messages = run()
        seconds = time.perf_counter() - t0
        cpu1 = os.times()
        broker1 = sum(p.cpu_times().user + p.cpu_times().system for p in brokers)
        key = (workload, message_format)
        per_million = 1e6 / messages
        self.rates.setdefault(key, []).append(messages / seconds)
        client = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        self.client_cpu.setdefault(key, []).append(client * per_million)
        self.broker_cpu.setdefault(key, []).append((broker1 - broker0) * per_million)
        print(
            f"    {workload:16} {message_format}  {messages / seconds:>10,.0f} msg/s  "
            f"client {client:5.2f} s cpu, brokers {broker1 - broker0:5.2f} s cpu",
            flush=True,
        )

    def produce(self, topic: str, message_format: str, acks: int) -> int:
        n = self.args.messages // BATCH * BATCH
        with (
            Producer(zk_connect=self.connect, request_required_acks=acks) as producer,
            self.readers(topic, message_format) as readers,
        ):
            base = sum(r.latest_offset() for r in readers)
            producer.send(topic, self.pool[:BATCH])  # routes, connections: not timed
            base += self._ends(message_format, BATCH)

            def run() -> int:
                send = producer.send
                for messages in cycled(batches(self.pool, BATCH), n // BATCH):
                    send(topic, messages)
                want = base + self._ends(message_format, n)
                while sum(r.latest_offset() for r in readers) < want:
                    time.sleep(0.0005)
                return n

            self.measure(f"produce_b50{'_ack' if acks else ''}", message_format, run)
        return n

    def consume(self, topic: str, message_format: str) -> None:
        with self.readers(topic, message_format) as readers:
            ends = [r.latest_offset() for r in readers]
            starts = [r.earliest_offset() for r in readers]

            def run() -> int:
                count = 0
                for reader, start, end in zip(readers, starts, ends, strict=True):
                    for batch in reader.iter_batches(start):
                        count += len(batch.payloads)
                        if batch.next_offset >= end:
                            break
                return count

            self.measure("consume", message_format, run)

    def round(self, number: int) -> None:
        order = FORMATS if number % 2 == 0 else FORMATS[::-1]
        topics = {}
        for fmt in order:
            topics[fmt] = f"b50-{fmt.replace('.', '')}-r{number}"
            self.create(topics[fmt], fmt)
        for fmt in order:
            self.produce(topics[fmt], fmt, 0)
        for fmt in order:
            self.produce(topics[fmt], fmt, 1)
        for fmt in order:
            self.consume(topics[fmt], fmt)

    def report(self) -> None:
        print(
            f"\n{self.args.messages:,} messages of {self.args.size} B per workload, "
            f"{self.args.rounds} rounds, {self.args.brokers} broker(s), "
            f"{self.args.partitions} partition(s), replication factor {self.args.brokers}"
        )
        head = (
            f"{'workload':16} {'0.7 msg/s':>11} {'0.8 msg/s':>11} {'0.8/0.7':>8}  "
            f"{'client cpu s/M 0.7 | 0.8':>25}  {'brokers cpu s/M 0.7 | 0.8':>26}"
        )
        print(head)
        print("-" * len(head))
        for workload in WORKLOADS:
            old, new = self.rates.get((workload, "0.7")), self.rates.get((workload, "0.8"))
            if not old or not new:
                continue
            ratio = statistics.median(new) / statistics.median(old)
            cpu = {
                f: (
                    statistics.median(self.client_cpu[(workload, f)]),
                    statistics.median(self.broker_cpu[(workload, f)]),
                )
                for f in FORMATS
            }
            print(
                f"{workload:16} {statistics.median(old):>11,.0f} {statistics.median(new):>11,.0f}"
                f" {ratio:>8.2f}  {cpu['0.7'][0]:>11.2f} | {cpu['0.8'][0]:<11.2f}"
                f"  {cpu['0.7'][1]:>12.2f} | {cpu['0.8'][1]:<11.2f}"
            )
            for fmt, rates in (("0.7", old), ("0.8", new)):
                print(f"    {fmt}: min {min(rates):,.0f}, max {max(rates):,.0f}")

    def profile(self) -> None:
        """One 0.8 produce_b50 and consume under cProfile: the client's own time."""
        topic = "b50-08-profile"
        self.create(topic, "0.8")
        for name, work in (
            ("produce_b50", lambda: self.produce(topic, "0.8", 0)),
            ("consume", lambda: self.consume(topic, "0.8")),
        ):
            profiler = cProfile.Profile()
            profiler.enable()
            work()
            profiler.disable()
            print(f"\n0.8 {name} under cProfile (the client process; tottime = own time):")
            pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(12)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-kafka08-clients-"))
    bench = Bench(args, work)
    try:
        bench.start()
        for number in range(args.rounds):
            print(f"round {number + 1} of {args.rounds}", flush=True)
            bench.round(number)
        bench.report()
        if args.profile:
            bench.profile()
    finally:
        bench.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
