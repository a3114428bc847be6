"""`logbroker lag`: how far a consumer group is behind (like ConsumerOffsetChecker)."""

from __future__ import annotations

import argparse
import sys

from . import add_command_config, add_logging_args, command_cluster, formatter, print_table


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "lag",
        help="a consumer group's committed offsets and lag",
        formatter_class=formatter,
        description="For every partition a group consumes: its owner, the committed offset,\n"
        "the broker's latest offset and the lag between them in bytes (offsets are byte\n"
        "positions). A 0.7 topic's partitions are <broker>-<partition>; a replicated topic's\n"
        "are its numbers, with the latest offset (the high watermark) from their leaders.",
        epilog="examples:\n  logbroker lag --zookeeper 127.0.0.1:2181/live --group hourly-load\n",
    )
    p.add_argument("--zookeeper", required=True, metavar="CONNECT", help="host:port[/chroot]")
    add_command_config(p)
    p.add_argument("--group", required=True)
    add_logging_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..protocol.errors import LogbrokerError

    try:
        with command_cluster(args) as cluster:
            rows = cluster.group_partitions(args.group)
    except (LogbrokerError, ValueError) as exc:
        print(f"logbroker lag: {exc}", file=sys.stderr)
        return 1
    print_table(
        [[r.topic, r.name, r.owner, r.committed, r.latest, r.lag] for r in rows],
        ["TOPIC", "PARTITION", "OWNER", "COMMITTED", "LATEST", "LAG"],
    )
    total = sum(r.lag or 0 for r in rows)
    print(f"total lag: {total} bytes over {len(rows)} partitions")
    return 0
