"""`logbroker topics`: create, list and describe topics (like kafka-topics)."""

from __future__ import annotations

import argparse
import sys

from . import (
    add_command_config,
    add_logging_args,
    command_cluster,
    formatter,
    int_at_least,
    print_table,
    topic_name,
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "topics",
        help="create, list and describe topics",
        formatter_class=formatter,
        description="Topics of a cluster, found through ZooKeeper.",
        epilog="examples:\n"
        "  logbroker topics --zookeeper 127.0.0.1:2181/live create page-views --partitions 4\n"
        "  logbroker topics --zookeeper 127.0.0.1:2181/live create orders --partitions 6 \\\n"
        "      --replication-factor 3 --if-not-exists\n"
        "  logbroker topics --zookeeper 127.0.0.1:2181/live create clicks --partitions 3 \\\n"
        "      --replication-factor 3 --message-format 0.8   # for Kafka 0.8's clients\n"
        "  logbroker topics --zookeeper 127.0.0.1:2181/live list\n"
        "  logbroker topics --zookeeper 127.0.0.1:2181/live describe page-views\n"
        "  logbroker topics --zookeeper 127.0.0.1:2181/live describe --under-replicated-partitions\n\n"
        "A replication factor of 1 is 0.7's layout: 'create' makes N partitions on every live\n"
        "broker (0.7 created topics on their first message; this makes the count explicit),\n"
        "and 'describe' prints, per partition: broker, partition, earliest and latest offset,\n"
        "and bytes on disk. A factor of 2 or more makes a replicated topic: N partitions in\n"
        "all, each on that many brokers, one of them its leader (docs/replication.md), and\n"
        "'describe' prints kafka-topics' lines: Topic, Partition, Leader, Replicas, Isr.\n"
        "Without --replication-factor, the cluster's default.replication.factor applies.\n"
        "--message-format 0.8 (any factor, 1 included) makes a topic for Kafka 0.8's clients\n"
        "(kcat, librdkafka, kafka-python ...: the brokers' port.08 listener): logical offsets\n"
        "and keyed messages; 0.7-format topics are the 0.7 port's (docs/protocol.md).",
    )
    p.add_argument("--zookeeper", required=True, metavar="CONNECT", help="host:port[/chroot]")
    add_command_config(p)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a topic on every live broker")
    create.add_argument("topic", type=topic_name)
    create.add_argument(
        "--partitions",
        type=int_at_least(1),
        required=True,
        help="partitions per broker (factor 1), or in all (replicated)",
    )
    create.add_argument(
        "--replication-factor",
        type=int_at_least(1),
        metavar="R",
        help="replicas of each partition (default: the cluster's default.replication.factor)",
    )
    create.add_argument(
        "--message-format",
        choices=("0.7", "0.8"),
        default="0.7",
        help="0.7: byte offsets, the 0.7 port's clients; 0.8: logical offsets and keys, "
        "Kafka 0.8's clients on port.08 (default 0.7)",
    )
    create.add_argument(
        "--if-not-exists",
        action="store_true",
        help="a replicated topic that exists already is left as it is (exit 0): for scripts",
    )
    actions.add_parser("list", help="list topics and their partition counts per broker")
    describe = actions.add_parser("describe", help="partitions with offsets and sizes")
    describe.add_argument("topic", type=topic_name, nargs="?", help="default: every topic")
    describe.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="only the replicated partitions whose ISR is short of their replicas",
    )
    add_logging_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..protocol.errors import LogbrokerError

    try:
        with command_cluster(args) as cluster:
            if args.action == "create":
                factor = args.replication_factor or cluster.default_replication_factor()
                existing = cluster.assignment(args.topic) if args.if_not_exists else None
                if existing is not None:
                    print(
                        f"{args.topic} exists already: {existing.partitions} partitions, "
                        f"{existing.replication_factor} replicas each"
                    )
                    return 0
                if factor > 1 or args.message_format != "0.7":
                    described = cluster.create_replicated_topic(
                        args.topic, args.partitions, factor, message_format=args.message_format
                    )
                    print(
                        f"created {args.topic}: {len(described)} partitions, {factor} replicas "
                        f"each, message format {args.message_format}"
                    )
                    for row in described:
                        print(row.line())
                    return 0
                created = cluster.create_topic(args.topic, args.partitions)
                for broker_id, count in created.items():
                    print(f"created {args.topic} on broker {broker_id}: {count} partitions")
            elif args.action == "list":
                for topic, counts in cluster.topics().items():
                    spread = ", ".join(f"broker {b}: {n}" for b, n in sorted(counts.items()))
                    print(f"{topic}  ({sum(counts.values())} partitions; {spread})")
                for topic in cluster.replicated_topics():
                    described = cluster.describe_replicated(topic)
                    factor = len(described[0].replicas) if described else 0
                    found = cluster.assignment(topic)
                    fmt = found.message_format if found is not None else "?"
                    print(
                        f"{topic}  ({len(described)} partitions, replication factor {factor}, "
                        f"message format {fmt})"
                    )
            elif args.topic is None or args.under_replicated_partitions:
                names = [args.topic] if args.topic else cluster.replicated_topics()
                for topic in names:
                    for row in cluster.describe_replicated(topic):
                        if row.under_replicated or not args.under_replicated_partitions:
                            print(row.line())
            elif cluster.assignment(args.topic) is not None:
                for row in cluster.describe_replicated(args.topic):
                    print(row.line())
            else:
                rows = cluster.describe(args.topic)
                if not rows:
                    print(
                        f"logbroker topics: no live broker has topic {args.topic!r}",
                        file=sys.stderr,
                    )
                    return 1
                print_table(
                    [
                        [r.topic, r.broker_id, r.partition, r.earliest, r.latest, r.size]
                        for r in rows
                    ],
                    ["TOPIC", "BROKER", "PARTITION", "EARLIEST", "LATEST", "SIZE"],
                )
    except (LogbrokerError, ValueError) as exc:
        print(f"logbroker topics: {exc}", file=sys.stderr)
        return 1
    return 0
