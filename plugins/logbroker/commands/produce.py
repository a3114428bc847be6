"""`logbroker produce`: one message per line of stdin or a file (like kafka-console-producer)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from typing import BinaryIO

from . import (
    add_command_config,
    add_logging_args,
    command_logins,
    formatter,
    int_at_least,
    topic_name,
)
from .progress import progress_bar


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "produce",
        help="publish lines of stdin or a file as messages",
        formatter_class=formatter,
        description="Publish one message per line (the line without its newline). Brokers are\n"
        "found through ZooKeeper or listed. By default lines are queued and sent in batches\n"
        "in the background (0.7's async producer, fire-and-forget); --sync sends each batch\n"
        "before reading on, --acks waits for the broker's acknowledgement of every batch.\n"
        "A replicated topic (topics create --replication-factor) is sent partition by\n"
        "partition to the leaders (needs --zookeeper); --request-required-acks -1 waits until\n"
        "every in-sync replica has each batch, and retries the batches a failover refused.\n"
        "A 0.8-format topic (topics create --message-format 0.8) is sent to the leaders'\n"
        "Kafka 0.8 listeners as 0.8 messages, each with its key (--key-separator), and\n"
        "logical offsets; --fsync has no 0.8 equivalent and is refused for it.",
        epilog="examples:\n"
        "  echo hello | logbroker produce --zookeeper 127.0.0.1:2181/live --topic greetings\n"
        "  logbroker produce --broker-list 127.0.0.1:9092 --topic page-views \\\n"
        "      --file events.jsonl --compression snappy --batch-size 500\n"
        "  logbroker produce --zookeeper 127.0.0.1:2181/live --topic users \\\n"
        "      --key-separator $'\\t' --acks < keyed.tsv      # key<TAB>message per line\n"
        "  logbroker produce --zookeeper 127.0.0.1:2181/live --topic orders \\\n"
        "      --request-required-acks -1 --file orders.jsonl    # replicated: all ISR\n"
        "  logbroker produce --zookeeper 127.0.0.1:2181/live --topic clicks \\\n"
        "      --key-separator : --acks < clicks.txt    # a 0.8-format topic: keys kept\n"
        "  logbroker produce --zookeeper 127.0.0.1:2181/live --topic page_views --acks \\\n"
        "      --format avro --schema-registry 127.0.0.1:2181/registry --file page_views.jsonl\n"
        '  # page_views.jsonl: {"member_id": 42, "session_id": "s1", "page": "/jobs", ...}\n\n'
        "--request-required-acks (Kafka 0.8's console producer flag): 0 sends without an answer,\n"
        "1 waits for the leader's append (as --acks), -1 for every in-sync replica's. With 1 or\n"
        "-1 the command exits 0 only when every line was acknowledged, otherwise 1, saying how\n"
        "many lines were not. A batch refused by a failover (the leader moved, no leader yet,\n"
        "too few in-sync replicas, not acknowledged in time) or a lost connection is sent\n"
        "again until it has failed for --delivery-timeout-ms (default 2 minutes: a leader\n"
        "killed -9 is replaced once its ZooKeeper session expires), the wait doubling from\n"
        "--retry-backoff-ms to 1 s; --message-send-max-retries also bounds the retries.\n"
        "A retry after 'not acknowledged' may store a batch twice (the pipeline drops\n"
        "duplicates by their event header).\n\n"
        "--format avro: each line is a JSON record of the subject's latest schema (subject =\n"
        "topic unless --subject); the header is filled unless the line gives it. A bad line\n"
        "stops the command with its line number and field, and nothing of its batch is sent.\n"
        "The producer publishes its counts per 10-minute window to _audit when it closes\n"
        "(--no-audit: not).\n",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--zookeeper", metavar="CONNECT", help="host:port[/chroot]")
    where.add_argument("--broker-list", metavar="HOST:PORT,...", help="brokers, without ZooKeeper")
    add_command_config(p)
    p.add_argument("--topic", required=True, type=topic_name)
    p.add_argument("--file", type=argparse.FileType("rb"), help="read this file instead of stdin")
    p.add_argument(
        "--key-separator",
        metavar="S",
        help="each line is KEY S MESSAGE; the key picks the partition (and a 0.8-format "
        "topic keeps it); a line without S is sent whole, without a key",
    )
    p.add_argument("--compression", choices=("none", "gzip", "snappy"), default="none")
    p.add_argument(
        "--batch-size",
        type=int_at_least(1),
        default=200,
        metavar="N",
        help="messages per request (default 200)",
    )
    p.add_argument(
        "--partitions",
        type=int_at_least(1),
        default=1,
        metavar="N",
        help="with --broker-list: partitions per broker",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--sync", action="store_true", help="send each batch before reading on")
    mode.add_argument(
        "--acks", action="store_true", help="wait for the broker to acknowledge each batch"
    )
    mode.add_argument(
        "--fsync", action="store_true", help="like --acks, and the broker fsyncs first"
    )
    mode.add_argument(
        "--request-required-acks",
        type=int,
        choices=(0, 1, -1),
        metavar="{0,1,-1}",
        help="0: no answer; 1: the leader appended; -1: every in-sync replica has it",
    )
    p.add_argument(
        "--request-timeout-ms",
        type=int_at_least(0),
        default=10000,
        metavar="MS",
        help="with -1: how long the leader waits for its in-sync replicas (default 10000)",
    )
    p.add_argument(
        "--delivery-timeout-ms",
        type=int_at_least(0),
        default=120000,
        metavar="MS",
        help="how long a refused or failed batch is retried (default 120000)",
    )
    p.add_argument(
        "--message-send-max-retries",
        type=int_at_least(0),
        default=None,
        metavar="N",
        help="at most N retries of a batch (default: as many as the delivery timeout allows)",
    )
    p.add_argument(
        "--retry-backoff-ms",
        type=int_at_least(0),
        default=100,
        metavar="MS",
        help="the first wait before a retry, doubled per retry up to 1000 (default 100)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--format",
        choices=("text", "avro"),
        default="text",
        help="text: a line is a message; avro: a JSON record sent as an Avro event",
    )
    p.add_argument(
        "--schema-registry",
        metavar="CONNECT",
        help="with --format avro: the registry (schema.registry.zk), host:port[/chroot]",
    )
    p.add_argument(
        "--subject", metavar="S", help="with --format avro: the subject (default: topic)"
    )
    p.add_argument(
        "--no-audit", action="store_true", help="with --format avro: publish no _audit counts"
    )
    add_logging_args(p)
    p.set_defaults(run=run)


def read_lines(stream: BinaryIO) -> Iterator[bytes]:
    for line in stream:
        yield line[:-1] if line.endswith(b"\n") else line


def producer_acks(args: argparse.Namespace) -> dict[str, object]:
    """The Producer's acknowledgement and retry settings from the command line."""
    return {
        "acks": "fsync" if args.fsync else "ack" if args.acks else "none",
        "request_required_acks": args.request_required_acks,
        "request_timeout_ms": args.request_timeout_ms,
        "retries": args.message_send_max_retries,
        "retry_backoff_ms": args.retry_backoff_ms,
        "retry_backoff_max_ms": max(1000, args.retry_backoff_ms),
        "delivery_timeout_ms": args.delivery_timeout_ms,
    }


def run(args: argparse.Namespace) -> int:
    from ..client.producer import AsyncProducer, Producer
    from ..protocol.errors import LogbrokerError

    stream: BinaryIO = args.file or sys.stdin.buffer
    if args.format == "avro":
        from .avro_lines import produce

        return produce(args, stream)
    separator = args.key_separator.encode() if args.key_separator else None
    total = os.fstat(stream.fileno()).st_size if args.file else None
    large = (total or 0) > 1 << 20 or (total is None and sys.stderr.isatty())
    show = not args.no_progress and large
    try:
        producer = Producer(
            zk_connect=args.zookeeper,
            broker_list=args.broker_list,
            num_partitions=args.partitions,
            compression_codec=args.compression,
            **command_logins(args),
            **producer_acks(args),  # type: ignore[arg-type]
        )
    except (LogbrokerError, ValueError, OSError) as exc:
        print(f"logbroker produce: {exc}", file=sys.stderr)
        return 1
    try:
        producer.check_topic(args.topic)  # before a line is read
    except LogbrokerError as exc:
        producer.close()
        print(f"logbroker produce: {exc}", file=sys.stderr)
        return 2
    sender = (
        None
        if (args.sync or producer.required_acks != 0)
        else AsyncProducer(producer, batch_size=args.batch_size, queue_time_ms=200)
    )
    started = time.monotonic()
    count = nbytes = 0
    batch: list[tuple[str, object, bytes]] = []
    bar = progress_bar(
        total=total, unit="B", unit_scale=True, disable=not show, file=sys.stderr, desc=args.topic
    )
    try:
        for line in read_lines(stream):
            key = None
            if separator is not None:
                key_bytes, sep, message = line.partition(separator)
                if sep:  # a line without the separator is sent whole, without a key
                    # surrogateescape: a key that is not UTF-8 reaches a 0.8 message as it was
                    key, line = key_bytes.decode("utf-8", "surrogateescape"), message
            count += 1
            nbytes += len(line)
            bar.update(len(line) + 1)
            if sender is not None:
                sender.send(args.topic, line, key)
                continue
            batch.append((args.topic, key, line))
            if len(batch) >= args.batch_size:
                producer.send_batch(batch)  # type: ignore[arg-type]
                batch = []
        if batch:
            producer.send_batch(batch)  # type: ignore[arg-type]
        if sender is not None:
            sender.close()
        else:
            producer.close()
    except LogbrokerError as exc:
        producer.close()
        if producer.required_acks == 0:
            print(f"logbroker produce: {exc} ({producer.stats.as_dict()})", file=sys.stderr)
            return 1
        missing = count - producer.stats.sent_messages
        if args.file:  # the lines after the failure were not sent either: count them
            rest = _lines_left(stream)
            what = f"{missing + rest} of {count + rest} lines were not acknowledged"
        else:
            what = (
                f"{missing} of the {count} lines read were not acknowledged (the rest of "
                "the input was not read)"
            )
        print(f"logbroker produce: {what}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        bar.close()
    stats = producer.stats
    elapsed = time.monotonic() - started
    print(
        f"sent {stats.sent_messages} of {count} messages ({nbytes} bytes) to {args.topic} in "
        f"{elapsed:.2f} s; retried sets {stats.retried_sets}, failed {stats.failed_messages}, "
        f"dropped {stats.dropped_messages}",
        file=sys.stderr,
    )
    return 0 if stats.sent_messages == count else 1


def _lines_left(stream: BinaryIO) -> int:
    """The lines of a file after the one that failed: not sent, counted for the message."""
    return sum(1 for _ in stream)
