"""`logbroker consume`: print a topic's messages, one per line (like kafka-console-consumer)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import Any

from . import (
    add_command_config,
    add_logging_args,
    command_logins,
    formatter,
    int_at_least,
    plural,
    topic_name,
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "consume",
        help="print a topic's messages, one per line",
        formatter_class=formatter,
        description="Consume a topic as a member of a consumer group (0.7's ZooKeeper consumer):\n"
        "the group's partitions are shared among its members and rebalance when members\n"
        "come and go; offsets are committed in ZooKeeper. Without --group a private group\n"
        "is made up and removed on exit, as Kafka's console consumer did.",
        epilog="examples:\n"
        "  logbroker consume --zookeeper 127.0.0.1:2181/live --topic page-views --from-beginning\n"
        "  logbroker consume --zookeeper 127.0.0.1:2181/live --topic page-views \\\n"
        "      --group audit --max-messages 1000 --timeout-ms 5000\n"
        "  logbroker consume --zookeeper 127.0.0.1:2181/live --topic page-views --print-offsets\n"
        "  logbroker consume --zookeeper 127.0.0.1:2181/live --topic orders --from-beginning\n"
        "      # replicated: each partition from its leader, across failovers\n\n"
        "  logbroker consume --zookeeper 127.0.0.1:2181/live --topic page_views --from-beginning \\\n"
        "      --format avro --schema-registry 127.0.0.1:2181/registry\n\n"
        "  logbroker consume --zookeeper 127.0.0.1:2181/live --topic clicks --from-beginning \\\n"
        "      --print-key --key-separator :     # a 0.8-format topic: key:payload per line\n\n"
        "Each line is the payload; with --print-offsets it is\n"
        "  <broker>-<partition> <offset> <next offset> <payload>\n"
        "(<partition> alone for a replicated topic, whose partitions are read from their\n"
        "leaders: only what every in-sync replica has, so nothing a failover can take back).\n"
        "--print-key puts each message's key and --key-separator (a tab by default) before\n"
        "its payload, 'null' for a message without one (a 0.7-format topic's have none). A\n"
        "0.8-format topic is read from its leaders' Kafka 0.8 listeners, at logical offsets\n"
        "(the n-th message of a partition is offset n); its group's offsets are committed\n"
        "where Kafka 0.8's clients of the same group read them.\n"
        "With --format avro each line is the event as JSON (timestamps in UTC ms); a payload\n"
        "that is not an event is reported on stderr with its partition and offset, and skipped.",
    )
    p.add_argument("--zookeeper", required=True, metavar="CONNECT", help="host:port[/chroot]")
    add_command_config(p)
    p.add_argument("--topic", required=True, type=topic_name)
    p.add_argument("--group", help="consumer group id (default: a private, temporary group)")
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest offset when the group has none",
    )
    p.add_argument(
        "--max-messages", type=int_at_least(1), metavar="N", help="stop after N messages"
    )
    p.add_argument(
        "--timeout-ms",
        type=int,
        default=-1,
        metavar="MS",
        help="stop when no message came for MS ms",
    )
    p.add_argument(
        "--print-offsets", action="store_true", help="prefix each line with partition and offsets"
    )
    p.add_argument(
        "--print-key", action="store_true", help="put each message's key before its payload"
    )
    p.add_argument(
        "--key-separator",
        metavar="S",
        default="\t",
        help="with --print-key: between key and payload (default: a tab)",
    )
    p.add_argument(
        "--format",
        choices=("text", "avro"),
        default="text",
        help="text: payloads as they are; avro: each event decoded to a JSON line",
    )
    p.add_argument(
        "--schema-registry",
        metavar="CONNECT",
        help="with --format avro: the registry (schema.registry.zk), host:port[/chroot]",
    )
    add_logging_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..client.group_consumer import GroupConsumer
    from ..protocol.errors import LogbrokerError
    from .avro_lines import Printed, print_events

    if args.format == "avro" and not args.schema_registry:
        print("logbroker consume: --format avro needs --schema-registry CONNECT", file=sys.stderr)
        return 2
    temporary = args.group is None
    group = args.group or f"console-consumer-{os.getpid()}-{os.urandom(3).hex()}"
    out = sys.stdout.buffer
    separator = args.key_separator.encode("utf-8", "surrogateescape")
    count = 0
    printed = Printed()  # --format avro: counted as printed, so that a Ctrl-C keeps the count
    try:
        consumer = GroupConsumer(
            group_id=group,
            zk_connect=args.zookeeper,
            autooffset_reset="smallest" if args.from_beginning else "largest",
            consumer_timeout_ms=args.timeout_ms,
            autocommit_enable=not temporary,
            **command_logins(args),
        )
    except (LogbrokerError, ValueError, OSError) as exc:
        print(f"logbroker consume: {exc}", file=sys.stderr)
        return 1
    try:
        stream = consumer.create_message_streams({args.topic: 1})[args.topic][0]
        messages: Iterator[Any] = iter(stream)
        if args.format == "avro":
            print_events(args, messages, sys.stdout, printed)
            messages = iter(())  # printed already
        for message in messages:
            if args.print_offsets:
                out.write(f"{message.partition} {message.offset} {message.next_offset} ".encode())
            if args.print_key:
                out.write(b"null" if message.key is None else message.key)
                out.write(separator)
            out.write(message.payload)
            out.write(b"\n")
            count += 1
            if args.max_messages is not None and count >= args.max_messages:
                break
        out.flush()
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        pass
    except LogbrokerError as exc:
        print(f"logbroker consume: {exc}", file=sys.stderr)
        return 1
    finally:
        consumer.close()
        if temporary:
            consumer.delete_group()
    if args.format == "avro":
        skipped = (
            "1 payload that was not an event"
            if printed.skipped == 1
            else f"{printed.skipped} payloads that were not events"
        )
        print(f"consumed {plural(printed.events, 'event')}, skipped {skipped}", file=sys.stderr)
        return 0
    print(f"consumed {plural(count, 'message')}", file=sys.stderr)
    return 0
