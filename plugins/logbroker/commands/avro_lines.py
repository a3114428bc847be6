"""JSON lines in and out as Avro events: what `produce --format avro` and `consume --format avro` do.

Producing: each non-empty line is a JSON object, the record; its `header` (or any of the
header's fields) may be given, the rest is filled (audit/producer.py). Lines are read in
batches of --batch-size; a whole batch is parsed and encoded before any of it is sent, so a
line that is not JSON or does not fit the schema stops the command with its line number and
field, and nothing of its batch goes out (earlier batches did). The producer is audited unless
--no-audit: it publishes its counts to `_audit` on the cluster when it closes, error or not.

Consuming: one JSON object per event, Avro's values as they are (timestamps as UTC ms, bytes
as ISO-8859-1 text, as Avro's JSON encoding has them). A payload that is not an event is
reported on stderr with its partition and offset, counted, and skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..protocol.errors import LogbrokerError
from . import command_logins, plural


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.decode("latin-1")
    raise TypeError(f"{type(value).__name__} is not JSON")


def event_json(record: dict[str, Any]) -> str:
    return json.dumps(record, default=_json_default, ensure_ascii=False, separators=(", ", ": "))


def numbered_batches(stream: BinaryIO, size: int) -> Iterator[list[tuple[int, bytes]]]:
    """Non-empty lines with their 1-based line numbers, `size` at a time."""
    batch: list[tuple[int, bytes]] = []
    for number, line in enumerate(stream, 1):
        if line.strip():
            batch.append((number, line))
            if len(batch) >= size:
                yield batch
                batch = []
    if batch:
        yield batch


class BadLine(LogbrokerError):
    pass


def parse_records(batch: list[tuple[int, bytes]]) -> list[dict[str, Any]]:
    records = []
    for number, line in batch:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadLine(f"line {number}: not JSON: {exc.msg} at column {exc.colno}") from None
        except UnicodeDecodeError as exc:
            raise BadLine(f"line {number}: not UTF-8: {exc.reason} at byte {exc.start}") from None
        if not isinstance(record, dict):
            raise BadLine(f"line {number}: a record is a JSON object, not {type(record).__name__}")
        records.append(record)
    return records


def produce(args: argparse.Namespace, stream: BinaryIO) -> int:
    from ..audit.producer import AuditedProducer
    from ..client.producer import Producer
    from ..serde import SchemaRegistry

    if not args.schema_registry:
        print("logbroker produce: --format avro needs --schema-registry CONNECT", file=sys.stderr)
        return 2
    from .produce import producer_acks

    subject = args.subject or args.topic
    started = time.monotonic()
    try:
        registry = SchemaRegistry(args.schema_registry)
    except LogbrokerError as exc:
        print(f"logbroker produce: {exc}", file=sys.stderr)
        return 1
    try:
        producer = AuditedProducer(
            Producer(
                zk_connect=args.zookeeper,
                broker_list=args.broker_list,
                num_partitions=args.partitions,
                compression_codec=args.compression,
                **command_logins(args),
                **producer_acks(args),  # type: ignore[arg-type]
            ),
            registry,
            audit=not args.no_audit,
            validate=True,
        )
    except (LogbrokerError, ValueError, OSError) as exc:
        registry.close()
        print(f"logbroker produce: {exc}", file=sys.stderr)
        return 1
    code = 0
    schema_id = None
    try:
        for batch in numbered_batches(stream, args.batch_size):
            records = parse_records(batch)
            prepared = producer.prepare(
                args.topic, records, subject=subject, names=[f"line {n}" for n, _ in batch]
            )
            schema_id = prepared.schema_id
            producer.send_prepared(prepared)
    except LogbrokerError as exc:
        print(f"logbroker produce: {exc}", file=sys.stderr)
        if isinstance(exc, BadLine) or type(exc).__name__ == "EncodeError":
            print("logbroker produce: nothing of that line's batch was sent", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    finally:
        try:
            producer.close()  # publishes the audit counts of what was sent
        except LogbrokerError as exc:
            print(f"logbroker produce: publishing the audit counts failed: {exc}", file=sys.stderr)
            code = code or 1
        registry.close()
    audit = (
        f"; {plural(producer.publisher.published_events, 'audit count')} published to _audit"
        if producer.publisher is not None
        else "; audit off"
    )
    print(
        f"sent {plural(producer.sent_events, 'event')} to {args.topic} (subject {subject}, schema id "
        f"{schema_id}) in {time.monotonic() - started:.2f} s{audit}",
        file=sys.stderr,
    )
    return code


@dataclass
class Printed:
    """What print_events did so far: the caller still has it after a Ctrl-C."""

    events: int = 0
    skipped: int = 0  # payloads that were not events


def print_events(
    args: argparse.Namespace, messages: Iterator[Any], out: Any, printed: Printed
) -> None:
    """Decode and print each message, counting into `printed` as it goes."""
    from ..serde import EventCodec, SchemaRegistry, SerdeError

    with SchemaRegistry(args.schema_registry) as registry:
        codec = EventCodec(registry)
        for message in messages:
            where = f"{args.topic} {message.partition} offset {message.offset}"
            try:
                record = codec.decode(message.payload, where=where)
            except SerdeError as exc:
                print(f"logbroker consume: skipped: {exc}", file=sys.stderr)
                printed.skipped += 1
            else:
                line = event_json(record) + "\n"
                # counted first: a Ctrl-C is handled between two bytecodes, and after the
                # write it found the line on the user's screen and not yet in the count
                printed.events += 1
                out.write(line)
            if (
                args.max_messages is not None
                and printed.events + printed.skipped >= args.max_messages
            ):
                break
