"""`logbroker offsets`: offsets of a partition before a time (like GetOffsetShell)."""

from __future__ import annotations

import argparse
import sys

from . import (
    add_command_config,
    add_logging_args,
    command_credentials,
    formatter,
    int_at_least,
    topic_name,
)


def offsets_time(text: str) -> int:
    """-1 (latest), -2 (earliest) or milliseconds since the epoch (>= 0): OFFSETS' time."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < -2:
        raise argparse.ArgumentTypeError(
            f"expected -1 (the latest offset), -2 (the earliest) or a time in ms since the "
            f"epoch (0 or more), got {text!r}"
        )
    return value


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "offsets",
        help="offsets of a partition before a time",
        formatter_class=formatter,
        description="Ask one broker for offsets of a partition (0.7's OFFSETS request): the\n"
        "start offsets of its segments (and the end), newest first, before --time. A\n"
        "replicated topic's partition is asked of its leader, found with --zookeeper.",
        epilog="examples:\n"
        "  logbroker offsets --broker 127.0.0.1:9092 --topic page-views --partition 0 --time -1\n"
        "  logbroker offsets --broker 127.0.0.1:9092 --topic page-views --partition 0 --time -2\n"
        "  logbroker offsets --broker 127.0.0.1:9092 --topic page-views --partition 0 \\\n"
        "      --time 1700000000000 --max 10\n"
        "  logbroker offsets --zookeeper 127.0.0.1:2181/live --topic orders --partition 4 \\\n"
        "      --time -1                  # replicated: partition 4's leader, wherever it is\n\n"
        "--time -1 is the latest offset (the end; of a replicated partition the high\n"
        "watermark, the end of what consumers can read), -2 the earliest; any other value is\n"
        "milliseconds since the epoch. A 0.7 topic's --partition is a broker's own partition\n"
        "(give that --broker); a replicated topic's is its number, 0 to N-1.",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--broker", metavar="HOST:PORT", help="the broker (a 0.7 topic's)")
    where.add_argument(
        "--zookeeper",
        metavar="CONNECT",
        help="host:port[/chroot]: find a replicated partition's leader",
    )
    p.add_argument("--topic", required=True, type=topic_name)
    p.add_argument("--partition", type=int_at_least(0), required=True)
    p.add_argument("--time", type=offsets_time, required=True, metavar="-1|-2|MS")
    p.add_argument(
        "--max", type=int_at_least(1), default=1, metavar="N", help="how many offsets (default 1)"
    )
    add_command_config(p)
    add_logging_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..client.connection import BrokerUnavailableError
    from ..client.simple_consumer import SimpleConsumer
    from ..protocol.errors import LogbrokerError

    if args.zookeeper:
        return _replicated(args)
    host, _, port = args.broker.rpartition(":")
    try:
        credentials = command_credentials(args)
        with SimpleConsumer(
            host or "127.0.0.1",
            int(port),
            tls=credentials.context(),
            sasl=credentials.sasl,
        ) as consumer:
            consumer.connection.connect()
            try:
                offsets = consumer.offsets_before(args.topic, args.partition, args.time, args.max)
            except BrokerUnavailableError as exc:
                # 0.7 answers OFFSETS for a partition it does not have by closing the connection
                raise BrokerUnavailableError(
                    f"{exc}: it refused OFFSETS for partition {args.partition} of "
                    f"{args.topic!r}, most likely a partition it does not have, or a replicated "
                    "partition it does not lead (`logbroker topics describe` lists them; "
                    "--zookeeper finds a replicated partition's leader; the broker's log says why)"
                ) from exc
    except (LogbrokerError, ValueError) as exc:
        print(f"logbroker offsets: {exc}", file=sys.stderr)
        return 1
    for offset in offsets:
        print(offset)
    return 0


def _replicated(args: argparse.Namespace) -> int:
    """OFFSETS of a replicated partition, asked of its leader (followed if it moves)."""
    from kazoo.client import KazooClient

    from ..client.leaders import Leaders
    from ..client.partition_reader import PartitionReader
    from ..protocol.errors import LogbrokerError

    try:
        credentials = command_credentials(args)
    except ValueError as exc:
        print(f"logbroker offsets: {exc}", file=sys.stderr)
        return 1
    zk = KazooClient(hosts=args.zookeeper, timeout=10)
    try:
        zk.start(timeout=10)
        reader = PartitionReader(
            Leaders(zk, tls=credentials.tls, sasl=credentials.sasl is not None),
            args.topic,
            args.partition,
            leader_timeout_ms=10000,
            sasl=credentials.sasl,
            tls=credentials.context(),
        )
        with reader:
            offsets = reader.offsets_before(args.time, args.max)
    except LogbrokerError as exc:
        print(f"logbroker offsets: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # ZooKeeper unreachable: kazoo's timeout
        print(f"logbroker offsets: cannot read {args.zookeeper}: {exc!r}", file=sys.stderr)
        return 1
    finally:
        zk.stop()
        zk.close()
    for offset in offsets:
        print(offset)
    return 0
