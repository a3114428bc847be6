"""`logbroker schema-registry`: serve the Confluent Schema Registry's REST API over logbroker's
registry in ZooKeeper (serde/confluent_api.py has the routes and error codes)."""

from __future__ import annotations

import argparse
import sys
from urllib.parse import urlsplit

from . import add_logging_args, formatter

EPILOG = """\
examples:
  logbroker schema-registry --zookeeper 127.0.0.1:2181/registry
  logbroker schema-registry --zookeeper 127.0.0.1:2181/registry \\
      --listeners http://127.0.0.1:8082
  curl -s http://127.0.0.1:8081/subjects
  curl -s http://127.0.0.1:8081/subjects/page_views/versions/latest

Confluent's clients need only its URL, e.g. in Python:
  SchemaRegistryClient({"url": "http://127.0.0.1:8081"})
  AvroSerializer(client, schema_str)   # registers under subject <topic>, logbroker's name

Subjects: the subject of a topic's events is the topic's name, not <topic>-value.
confluent-kafka's default subject name strategy asks the registry first (its associations
route answers the topic's name); a client that uses the topic-value strategy outright
(older confluent-kafka, the Java serializer's default) needs a strategy that answers the
topic, e.g. "subject.name.strategy": lambda ctx, record_name: ctx.topic.

What it cannot do: only AVRO event schemas (first field `header`, docs/events.md); the
compatibility level is BACKWARD, fixed; nothing is deleted; schemas come back in
canonical JSON. Port 0 picks a free port; the line printed at start says which.
SIGTERM or Ctrl-C stops it.
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "schema-registry",
        help="serve the Confluent Schema Registry API over the ZooKeeper registry",
        formatter_class=formatter,
        description="Serve the Confluent Schema Registry's REST API (subjects, versions, schemas\n"
        "by id, register, compatibility, config) over the registry that logbroker keeps in\n"
        "ZooKeeper: the same subjects, versions and ids as `logbroker schemas`. Events framed\n"
        "by Confluent's serializers (magic byte 0, 4-byte schema id) are logbroker's events.",
        epilog=EPILOG,
    )
    p.add_argument(
        "--zookeeper",
        required=True,
        metavar="CONNECT",
        help="the registry: host:port[/chroot] (config key schema.registry.zk)",
    )
    p.add_argument(
        "--listeners",
        default="http://127.0.0.1:8081",
        metavar="URL",
        help="where to listen, Confluent's name for it (default http://127.0.0.1:8081)",
    )
    add_logging_args(p)
    p.set_defaults(run=run, log_level="INFO")


def parse_listener(text: str) -> tuple[str, int]:
    """(host, port) of one http:// listener URL; ValueError saying what is wrong."""
    if "," in text:
        raise ValueError(f"one listener only, got {text!r}")
    url = urlsplit(text.strip())
    if url.scheme != "http":
        raise ValueError(
            f"listener {text!r}: only http://HOST:PORT is served (no TLS: it binds "
            "127.0.0.1 by default; put a TLS proxy in front for more)"
        )
    if url.path not in ("", "/") or url.query:
        raise ValueError(f"listener {text!r}: the API is served at the root, no path")
    try:
        port = url.port
    except ValueError:
        raise ValueError(f"listener {text!r}: the port is not a number from 0 to 65535") from None
    if not url.hostname:
        raise ValueError(f"listener {text!r} has no host, e.g. http://127.0.0.1:8081")
    return url.hostname, 8081 if port is None else port


def run(args: argparse.Namespace) -> int:
    import signal

    from ..protocol.errors import LogbrokerError
    from ..serde.confluent_api import RegistryApiServer
    from ..serde.registry import SchemaRegistry

    try:
        host, port = parse_listener(args.listeners)
    except ValueError as exc:
        print(f"logbroker schema-registry: --listeners: {exc}", file=sys.stderr)
        return 2
    try:
        registry = SchemaRegistry(args.zookeeper)
    except (LogbrokerError, ValueError) as exc:
        print(f"logbroker schema-registry: {exc}", file=sys.stderr)
        return 1
    try:
        try:
            server = RegistryApiServer(registry, host, port)
        except OSError as exc:
            print(
                f"logbroker schema-registry: cannot listen on {host}:{port}: "
                f"{exc.strerror or exc} (another registry there? choose another with "
                f"--listeners http://{host}:PORT)",
                file=sys.stderr,
            )
            return 1

        def stop(signum: int, frame: object) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, stop)
        print(
            f"serving the Confluent Schema Registry API on {server.url} "
            f"over the registry at {registry.connect}",
            flush=True,
        )
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    finally:
        registry.close()
    return 0
