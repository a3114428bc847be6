"""`logbroker topics`: create, list and describe topics (like kafka-topics)."""

from __future__ import annotations

import argparse
import sys

from . import add_logging_args, formatter, int_at_least, print_table, topic_name


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "topics",
        help="create, list and describe topics",
        formatter_class=formatter,
        description="Topics of a cluster, found through ZooKeeper.",
        epilog="examples:\n"
        "  logbroker topics --zookeeper 127.0.0.1:2181/live create page-views --partitions 4\n"
        "  logbroker topics --zookeeper 127.0.0.1:2181/live list\n"
        "  logbroker topics --zookeeper 127.0.0.1:2181/live describe page-views\n\n"
        "'create' makes the partitions on every live broker (0.7 created topics on their\n"
        "first message; this makes the partition count explicit). 'describe' prints, per\n"
        "partition: broker, partition, earliest and latest offset, and bytes on disk.",
    )
    p.add_argument("--zookeeper", required=True, metavar="CONNECT", help="host:port[/chroot]")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a topic on every live broker")
    create.add_argument("topic", type=topic_name)
    create.add_argument(
        "--partitions", type=int_at_least(1), required=True, help="partitions per broker"
    )
    actions.add_parser("list", help="list topics and their partition counts per broker")
    describe = actions.add_parser("describe", help="partitions with offsets and sizes")
    describe.add_argument("topic", type=topic_name)
    add_logging_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..client.cluster import Cluster
    from ..protocol.errors import LogbrokerError

    try:
        with Cluster(args.zookeeper) as cluster:
            if args.action == "create":
                created = cluster.create_topic(args.topic, args.partitions)
                for broker_id, count in created.items():
                    print(f"created {args.topic} on broker {broker_id}: {count} partitions")
            elif args.action == "list":
                for topic, counts in cluster.topics().items():
                    spread = ", ".join(f"broker {b}: {n}" for b, n in sorted(counts.items()))
                    print(f"{topic}  ({sum(counts.values())} partitions; {spread})")
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
