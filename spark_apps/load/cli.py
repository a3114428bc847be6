"""The hourly load: one hour of each topic, from the analysis cluster into the warehouse.

Run by spark-submit on any master (see --help); `verify` re-reads committed hours from the
brokers. The topics given load one after the other in the one Spark session (one JVM for
many topics: docs/performance.md, "Many topics an hour"), each on its own: its lock, its
commit, its checkpoint. A topic that fails is named in one line and the next topic loads;
the exit status is 1 when any failed, after a last line naming them all. The work is in
run.py (one topic's load), commit.py (staging and the atomic commit) and
pipeline_warehouse/checkpoint.py (the files); docs/design.md §3.6 is the contract.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import traceback
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from logbroker.security.client import CLIENT_CONFIG_ENV
from pipeline_warehouse.time_format import parse_hour, parse_instant
from pipeline_warehouse.topics import PipelineTopicError, is_pipeline_topic, parse_topic_list

if TYPE_CHECKING:
    from logbroker.security.client import ClientCredentials
    from pipeline_warehouse.checkpoint import Warehouse

EPILOG = """\
what it does, per topic:
  the range     from the end of the last committed hour's checkpoint (the earliest offsets
                for a topic's first load) to the end each partition has now; an hour that
                already has a checkpoint is re-read over exactly its stored range (backfill:
                the same rows and the same rows_sha256)
  the order     hours commit in order: loading H needs H-1 committed (the error names it)
  one at a time a load holds its topic's lock in ZooKeeper (/pipeline/load-locks) from
                before it touches the warehouse to the end of its commit; another load of
                the topic waits (--lock-timeout), then fails naming the holder
  the commit    each load is a new version of the hour: its files are staged, then put
                beside the current version's, and the checkpoint
                <warehouse>/_checkpoints/<topic>/<hour>.json, written last in one rename,
                switches the hour to them; a load killed at any moment leaves the old
                version or the new one, never a checkpoint without its files
  exactly once  events are deduplicated by (producer_id, seq) within the hour and against
                the previous hour; the count is in the checkpoint
  many topics   each topic loads on its own, one after the other in one Spark session; one
                that fails is named in an `hourly_load: topic ...` line and the others
                still load; the exit status is then 1 and the last line names every topic
                that failed. --skip-committed-since T skips each topic whose hour has a
                checkpoint committed at T or later (what an earlier try committed: the DAG's
                retries pass the run's start)
  bad records   payloads that are not registered Avro events go to
                <warehouse>/_errors/<topic>/load_hour=<hour>/ with the reason; more than
                --max-bad-fraction of the hour's messages fails the load

topics:
  legal broker topic names; names starting with '_' are the warehouse's own (_checkpoints,
  _errors, ...) and are refused, except _audit; with --topic-pattern they are skipped

layout (docs/design.md §3.6):
  <warehouse>/<topic>/load_hour=YYYY-MM-DDTHH/part-*.parquet
  <warehouse>/_checkpoints/<topic>/YYYY-MM-DDTHH.json
  <warehouse>/_errors/<topic>/load_hour=YYYY-MM-DDTHH/

examples:
  spark-submit --master 'local[2]' spark_apps/jobs/hourly_load.py \\
      --zookeeper 127.0.0.1:2181/analysis --schema-registry 127.0.0.1:2181/registry \\
      --topics page_views,searches --hour 2026-11-22T10 --warehouse "file://$PWD/var/warehouse"
  spark-submit --master spark://127.0.0.1:7077 spark_apps/jobs/hourly_load.py \\
      --zookeeper zk1:2181/analysis --schema-registry zk1:2181/registry \\
      --topic-pattern '[a-z_]+' --hour 2026-11-22T11 --warehouse hdfs://namenode/warehouse
  python spark_apps/jobs/hourly_load.py verify --zookeeper 127.0.0.1:2181/analysis \\
      --topics page_views --hour 2026-11-22T10 --hour 2026-11-22T11 \\
      --warehouse "file://$PWD/var/warehouse"
"""

VERIFY_EPILOG = """\
verify re-reads each committed hour's stored offset range from the brokers and compares
rows_sha256 and the message counts with the checkpoint, and the warehouse's row count with
the checkpoint's rows. Exit status 0 when every hour matches, 1 otherwise.

examples:
  python spark_apps/jobs/hourly_load.py verify --zookeeper 127.0.0.1:2181/analysis \\
      --topics page_views --hour 2026-11-22T10 --hour 2026-11-22T11 \\
      --warehouse "file://$PWD/var/warehouse"
"""


def _hour(text: str) -> str:
    try:
        parse_hour(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a fraction between 0 and 1, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"a fraction between 0 and 1, got {value}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of bytes, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1 byte, got {value}")
    return value


def _not_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of bytes, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"0 bytes or more, got {value}")
    return value


def _instant(text: str) -> datetime:
    try:
        return parse_instant(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"an ISO 8601 instant (2026-11-22T13:05:00Z), got {text!r}"
        ) from None


def _common(parser: argparse.ArgumentParser, several_hours: bool = False) -> None:
    parser.add_argument(
        "--zookeeper",
        required=True,
        metavar="CONNECT",
        help="the analysis cluster's ZooKeeper connect string, chroot included",
    )
    parser.add_argument(
        "--client-config",
        metavar="FILE",
        default=os.environ.get(CLIENT_CONFIG_ENV) or None,
        help="the analysis cluster's client credentials, a .properties file (0600) of "
        "security.protocol, ssl.*, sasl.mechanism, sasl.username, sasl.password (default: "
        f"${CLIENT_CONFIG_ENV}); the Airflow load writes one from its connection",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--topics",
        type=_topic_list,
        metavar="T1,T2",
        help="the topics, comma-separated (legal broker topic names; names starting with '_' "
        "are the warehouse's own, except _audit)",
    )
    which.add_argument(
        "--topic-pattern", metavar="RE", help="every topic whose whole name matches RE"
    )
    if several_hours:  # verify: one application for all of them, not a JVM per hour
        parser.add_argument(
            "--hour",
            required=True,
            type=_hour,
            action="append",
            dest="hours",
            metavar="YYYY-MM-DDTHH",
            help="an hour to check; repeat it for several",
        )
    else:
        parser.add_argument("--hour", required=True, type=_hour, metavar="YYYY-MM-DDTHH")
    parser.add_argument(
        "--warehouse",
        default="file://" + str(Path.cwd() / "warehouse"),
        metavar="URI",
        help="any Hadoop filesystem URI (default: file://$PWD/warehouse)",
    )
    parser.add_argument(
        "--master",
        default="local[2]",
        help="Spark master when not run by spark-submit (which sets its own; default local[2])",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spark-submit spark_apps/jobs/hourly_load.py",
        description="Load one hour of topics from the analysis cluster into the warehouse, "
        "exactly once, committing offsets with the data (the Kafka paper, section 4).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(parser)
    parser.add_argument(
        "--schema-registry",
        required=True,
        metavar="CONNECT",
        help="the schema registry's ZooKeeper connect string (e.g. 127.0.0.1:2181/registry)",
    )
    parser.add_argument(
        "--max-bad-fraction",
        type=_fraction,
        default=0.01,
        metavar="F",
        help="fail when more than this fraction of the hour's messages are bad (default 0.01)",
    )
    parser.add_argument(
        "--fetch-size",
        type=_positive,
        default=4 * 1024 * 1024,
        metavar="BYTES",
        help="bytes per fetch request (default 4 MiB; a larger message is fetched whole)",
    )
    parser.add_argument(
        "--max-bytes-per-partition",
        type=_positive,
        default=1024 * 1024 * 1024,
        metavar="BYTES",
        help="a partition's range longer than this is read (and written) by several Spark "
        "tasks; each piece but the first walks the message sizes before it (default 1 GiB; "
        "ranges are also split, largest first, while there are fewer than the cores)",
    )
    parser.add_argument(
        "--parquet-writer",
        choices=["auto", "arrow", "spark"],
        default="auto",
        help="who writes the rows' Parquet files: arrow = the Spark tasks that read them, with "
        "Arrow's writer (file:// warehouses); spark = Spark's writer, through Hadoop's "
        "FileSystem (any URI); auto (default) = arrow where it can",
    )
    parser.add_argument(
        "--driver-write-bytes",
        type=_not_negative,
        default=16 * 1024 * 1024,
        metavar="BYTES",
        help="an hour of a topic of at most this many bytes is read and written by the driver "
        "with Arrow's writer, the same files, with no Spark job (whose own cost is most of a "
        "small topic's load); 0: always Spark's tasks (default 16 MiB)",
    )
    parser.add_argument(
        "--skip-committed-since",
        type=_instant,
        metavar="INSTANT",
        help="skip each topic whose hour has a checkpoint committed at this ISO 8601 instant "
        "or later (a retry of the run that committed it); without it, a committed hour is "
        "loaded again from its stored offsets",
    )
    parser.add_argument(
        "--lock-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long to wait while another load of a topic holds its lock (in ZooKeeper, "
        "/pipeline/load-locks); then fail, naming the holder (default 600; 0: do not wait)",
    )
    return parser


def build_verify_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python spark_apps/jobs/hourly_load.py verify",
        description="Check committed hours against the brokers: rows_sha256, messages, rows.",
        epilog=VERIFY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(parser, several_hours=True)
    return parser


def _topic_list(text: str) -> list[str]:
    try:
        return parse_topic_list(text)
    except PipelineTopicError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _client(args: argparse.Namespace) -> dict[str, str]:
    """--client-config's credential keys ({} without it); SystemExit with one line naming the
    file and the key (never a value) when it cannot be used."""
    from logbroker.config import read_properties
    from logbroker.security.client import ClientCredentials, credential_properties

    if not args.client_config:
        return {}
    try:
        with open(args.client_config, encoding="utf-8") as handle:
            client = credential_properties(read_properties(handle))
        ClientCredentials.from_properties(client)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"hourly_load: --client-config {args.client_config}: {exc}") from None
    return client


def _credentials(args: argparse.Namespace) -> ClientCredentials:
    from logbroker.security.client import ClientCredentials

    return ClientCredentials.from_properties(_client(args))


def _topics(args: argparse.Namespace) -> list[str]:
    if args.topics:
        return list(args.topics)
    from logbroker.client.cluster import Cluster

    with Cluster(args.zookeeper, credentials=_credentials(args)) as cluster:
        every = sorted({*cluster.topics(), *cluster.replicated_topics()})
        matching = [t for t in every if re.fullmatch(args.topic_pattern, t)]
    topics = [t for t in matching if is_pipeline_topic(t)]
    for skipped in sorted(set(matching) - set(topics)):
        print(
            f"hourly_load: skipping topic {skipped!r}: not a name the warehouse takes "
            "(names starting with '_' are its own, but _audit)",
            file=sys.stderr,
        )
    if not topics:
        raise SystemExit(f"no topic in {args.zookeeper} matches {args.topic_pattern!r}")
    return topics


def run_load(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from logbroker.protocol.errors import LogbrokerError
    from pipeline_warehouse.checkpoint import WarehouseError
    from spark_apps.hadoop_fs import open_warehouse
    from spark_apps.load.run import load_hour
    from spark_apps.load.settings import LoadSettings
    from spark_apps.session import build_session

    topics = _topics(args)
    spark = build_session("logbroker hourly_load", master=args.master)
    spark.sparkContext.setLogLevel("WARN")
    settings = LoadSettings(
        zookeeper=args.zookeeper,
        schema_registry=args.schema_registry,
        max_bad_fraction=args.max_bad_fraction,
        fetch_size=args.fetch_size,
        max_bytes_per_partition=args.max_bytes_per_partition,
        parquet_writer=args.parquet_writer,
        driver_write_bytes=args.driver_write_bytes,
        lock_timeout=args.lock_timeout,
        client=_client(args),
    )
    wh = open_warehouse(args.warehouse, spark)
    failed: list[str] = []
    for topic in topics:
        if args.skip_committed_since is not None:
            done = _committed_since(wh, topic, args.hour, args.skip_committed_since)
            if done is not None:
                print(f"skipped {topic} {args.hour}: committed at {done}", flush=True)
                continue
        try:
            report = load_hour(spark, wh, settings, topic, args.hour)
        except (LogbrokerError, WarehouseError) as exc:  # LoadError is one: said in one line
            print(f"hourly_load: topic {topic!r} {args.hour} failed: {exc}", file=sys.stderr)
            failed.append(topic)
            continue
        except Exception as exc:  # Spark's or ours: the topics after it still load
            traceback.print_exc()
            print(
                f"hourly_load: topic {topic!r} {args.hour} failed: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}",
                file=sys.stderr,
            )
            failed.append(topic)
            continue
        print(report.summary(), flush=True)
    spark.stop()
    if failed:
        print(
            f"hourly_load: {len(failed)} of {len(topics)} topics failed for {args.hour}: "
            f"{', '.join(failed)}; the others committed",
            file=sys.stderr,
        )
    return 1 if failed else 0


def _committed_since(wh: Warehouse, topic: str, hour: str, since: datetime) -> str | None:
    """The hour's checkpoint's commit time when it is `since` or later, else None."""
    checkpoint = wh.checkpoint(topic, hour)
    if checkpoint is None:
        return None
    # committed_at has whole seconds: a commit in the second `since` falls in counts too
    committed = parse_instant(checkpoint.committed_at)
    return checkpoint.committed_at if committed >= since.replace(microsecond=0) else None


def run_verify(argv: list[str]) -> int:
    args = build_verify_parser().parse_args(argv)
    from pipeline_warehouse.checkpoint import WarehouseError
    from spark_apps.hadoop_fs import open_warehouse
    from spark_apps.load.verify import verify
    from spark_apps.session import build_session

    topics = _topics(args)
    spark = build_session("logbroker hourly_load verify", master=args.master)
    spark.sparkContext.setLogLevel("WARN")
    wh = open_warehouse(args.warehouse, spark)
    bad = 0
    for hour in args.hours:
        for topic in topics:
            try:
                result = verify(
                    wh, topic, hour, zookeeper=args.zookeeper, credentials=_credentials(args)
                )
            except WarehouseError as exc:
                print(f"{topic} {hour}: {exc}")
                bad += 1
                continue
            print(result.summary(), flush=True)
            bad += not result.ok
    spark.stop()
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if argv and argv[0] == "verify":
        return run_verify(argv[1:])
    if argv and argv[0] == "load":
        argv = argv[1:]
    return run_load(argv)


if __name__ == "__main__":
    sys.exit(main())
