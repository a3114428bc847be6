"""`make demo-broker`: the log broker alone, a private cluster end to end.

    .venv/bin/python scripts/broker_demo.py [--events 300000] [--workdir var/broker-demo] [--keep]

1. starts a private ZooKeeper and two brokers (4 partitions of each topic per broker),
   all on free 127.0.0.1 ports, with their data under --workdir;
2. creates the topic `page-views` and produces sample activity events (JSON lines:
   timestamp, server, user, page) with snappy compression, acknowledged by the brokers;
3. consumes them with a consumer group of two members, each its own process, which
   share the 8 partitions through ZooKeeper and commit their offsets there;
4. prints per partition what was produced, consumed, committed and the lag, and
   checks that every event arrived;
5. stops everything by PID, cleanly (consumers commit, brokers flush).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "page-views"
GROUP = "demo-loaders"
PAGES = ["/", "/search", "/jobs", "/profile", "/feed", "/messages", "/settings", "/company"]


def sample_events(count: int, seed: int = 7, start_ms: int = 1_767_225_600_000):
    """Deterministic activity events: JSON lines of timestamp, server, user, page."""
    rnd = random.Random(seed)
    for i in range(count):
        event = {
            "timestamp": start_ms + i * 10,
            "server": f"web-{rnd.randrange(12):02d}",
            "user": f"user-{rnd.randrange(50_000)}",
            "page": rnd.choice(PAGES),
            "seq": i,
        }
        yield json.dumps(event, separators=(",", ":")).encode()


def run_consumer(args: argparse.Namespace) -> int:
    """One group member: consume until idle, then report what it saw as JSON on stdout."""
    from logbroker.client.group_consumer import GroupConsumer

    consumer = GroupConsumer(
        group_id=args.group,
        zk_connect=args.zookeeper,
        autooffset_reset="smallest",
        consumer_timeout_ms=args.idle_ms,
        zk_session_timeout_ms=6000,
    )
    seen: Counter[str] = Counter()
    sequences = []
    try:
        for message in consumer.create_message_streams({args.topic: 1})[args.topic][0]:
            seen[message.partition] += 1
            sequences.append(json.loads(message.payload)["seq"])
    finally:
        consumer.close()
    json.dump({"partitions": dict(seen), "seqs": sequences}, sys.stdout)
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from logbroker.client.cluster import Cluster
    from logbroker.client.producer import Producer
    from logbroker.commands import print_table
    from logbroker.commands.progress import progress_bar
    from logbroker.stack.broker import BrokerProcess
    from logbroker.stack.zookeeper import ZooKeeperServer

    workdir = Path(args.workdir).resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    print(f"logbroker demo: working in {workdir}")
    zookeeper = ZooKeeperServer(workdir / "zookeeper")
    brokers: list[BrokerProcess] = []
    consumers: list[subprocess.Popen[bytes]] = []
    try:
        started = time.monotonic()
        zookeeper.start()
        zk = zookeeper.create_chroot("/live").connect
        print(
            f"  zookeeper  {zookeeper.connect_string} (pid {zookeeper.pid}), cluster chroot /live"
        )
        for broker_id in (0, 1):
            broker = BrokerProcess(
                workdir / f"broker-{broker_id}",
                broker_id=broker_id,
                zk_connect=zk,
                overrides={"num.partitions": "4", "metrics.port": "0"},
            )
            brokers.append(broker.start())
            print(
                f"  broker {broker_id}   127.0.0.1:{broker.port} (pid {broker.pid}), log.dir {broker.log_dir}"
            )
        print(f"  up in {time.monotonic() - started:.1f} s")

        with Cluster(zk) as cluster:
            cluster.create_topic(TOPIC, 4)
            print(f"\ncreated topic {TOPIC}: 4 partitions on each of 2 brokers")

            produced: Counter[str] = Counter()
            started = time.monotonic()
            with Producer(zk_connect=zk, compression_codec="snappy", acks="ack") as producer:
                batch: list[bytes] = []
                bar = progress_bar(
                    total=args.events,
                    unit="msg",
                    unit_scale=True,
                    desc="producing",
                    file=sys.stderr,
                )
                for payload in sample_events(args.events):
                    batch.append(payload)
                    if len(batch) == 500:
                        for result in producer.send(TOPIC, batch):
                            produced[f"{result.broker_id}-{result.partition}"] += result.messages
                        bar.update(len(batch))
                        batch = []
                if batch:
                    for result in producer.send(TOPIC, batch):
                        produced[f"{result.broker_id}-{result.partition}"] += result.messages
                    bar.update(len(batch))
                bar.close()
            elapsed = time.monotonic() - started
            print(
                f"produced {args.events:,} events (snappy, acknowledged) in {elapsed:.1f} s "
                f"= {args.events / elapsed:,.0f} msgs/s"
            )

            print(f"\nconsuming with group {GROUP!r}: 2 members in 2 processes")
            started = time.monotonic()
            for _ in range(2):
                consumers.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            __file__,
                            "consumer",
                            "--zookeeper",
                            zk,
                            "--topic",
                            TOPIC,
                            "--group",
                            GROUP,
                            "--idle-ms",
                            "4000",
                        ],
                        stdout=subprocess.PIPE,
                    )
                )
            reports = []
            for proc in consumers:
                out, _ = proc.communicate(timeout=300)
                if proc.returncode != 0:
                    raise SystemExit(f"a consumer failed with exit code {proc.returncode}")
                reports.append(json.loads(out))
            elapsed = time.monotonic() - started
            consumed: Counter[str] = Counter()
            member_of: dict[str, str] = {}
            seqs: list[int] = []
            for n, report in enumerate(reports):
                for partition, count in report["partitions"].items():
                    consumed[partition] += count
                    member_of[partition] = f"member {n + 1}"
                seqs += report["seqs"]
            print(
                f"consumed {len(seqs):,} events in {elapsed:.1f} s (including {4} s of idle wait at the end)"
            )

            rows = []
            lag = {f"{r.broker_id}-{r.partition}": r for r in cluster.group_partitions(GROUP)}
            for name in sorted(set(produced) | set(consumed)):
                r = lag.get(name)
                rows.append(
                    [
                        TOPIC,
                        name,
                        produced[name],
                        consumed[name],
                        member_of.get(name, "-"),
                        r.latest if r else None,
                        r.committed if r else None,
                        r.lag if r else None,
                    ]
                )
            print()
            print_table(
                rows,
                ["TOPIC", "PARTITION", "PRODUCED", "CONSUMED", "BY", "LATEST", "COMMITTED", "LAG"],
            )
            unique = set(seqs)
            missing = args.events - len(unique)
            print(
                f"\nproduced {sum(produced.values()):,}  consumed {len(seqs):,}  distinct {len(unique):,}  "
                f"missing {missing}  duplicates {len(seqs) - len(unique)}"
            )
            ok = missing == 0
    finally:
        for proc in consumers:
            if proc.poll() is None:
                proc.kill()
        for broker in brokers:
            code = broker.stop()
            print(f"stopped broker {broker.broker_id} (exit code {code})")
        zookeeper.stop()
        print("stopped zookeeper")
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    print("demo " + ("succeeded: every event was consumed" if ok else "FAILED: events are missing"))
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="mode")
    consumer = sub.add_parser("consumer", help="(internal) one group member")
    consumer.add_argument("--zookeeper", required=True)
    consumer.add_argument("--topic", required=True)
    consumer.add_argument("--group", required=True)
    consumer.add_argument("--idle-ms", type=int, default=4000)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--workdir", default=str(ROOT / "var" / "broker-demo"))
    parser.add_argument("--keep", action="store_true", help="keep the data directories")
    args = parser.parse_args(argv)
    if args.mode == "consumer":
        return run_consumer(args)
    return run_demo(args)


if __name__ == "__main__":
    sys.exit(main())
