"""Thin operators over the hooks: run the mirror until caught up; load topics' hour.

They check their arguments when the DAG is parsed and build hooks only when they run, as
Airflow's providers do; what they run is the same command a user runs by hand
(`logbroker mirror ...`, `spark-submit spark_apps/jobs/hourly_load.py ...`), so a task's log
reads like a terminal session and a failure can be replayed outside Airflow.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowException

from .assets import WAREHOUSE_ALIAS, warehouse_topic_asset
from .logbroker_hook import LogbrokerHook
from .spark_submit import SparkAppOperator
from .streamed_process import StreamedProcess


def committed_by_schedule(
    context: Context, warehouse: str, topic: str, hour: str, say: Callable[..., None]
) -> bool:
    """True when this is a scheduled run and the hour is committed already: loading it again
    would be a second load of the hour (a new version), not the schedule's one. `warehouse`:
    the URI Python reads the warehouse at (Pipeline.warehouse_reader), not Spark's.

    The schedule makes one run per hour, so a committed hour in a scheduled run comes from an
    earlier try of this run that committed and was stopped before it could report (`make
    down`, a lost worker), or from a backfill that came first. Backfills (and manual runs)
    load whatever is committed, from its stored offsets: that is what they are for."""
    from pipeline_warehouse.checkpoint import Warehouse

    run = context.get("dag_run")
    if getattr(run, "run_type", None) != "scheduled":  # DagRunType is a str enum
        return False
    checkpoint = Warehouse.open(warehouse).checkpoint(topic, hour)
    if checkpoint is None:
        return False
    say(
        "%s %s is committed already (version %s, %s): not loaded again by the schedule",
        topic,
        hour,
        checkpoint.version,
        checkpoint.committed_at,
    )
    return True


def properties(values: Mapping[str, object]) -> str:
    """A Kafka-style .properties text, one `key=value` a line."""
    return "".join(f"{key}={value}\n" for key, value in values.items() if value is not None)


def write_private(path: Path, text: str) -> None:
    """Write `text` to a new file only its owner can read (0600 from its creation: it may
    hold a password), in a directory that should be private too (mkdtemp's are 0700)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


class MirrorOperator(BaseOperator):
    """`logbroker mirror --until-caught-up` from one cluster to another.

    The consumer and producer configs are written from the two connections (`zk.connect`
    and `schema.registry.zk` from each, and each one's credentials: security.protocol,
    ssl.*, sasl.* with the login and password; `groupid` is `mirror_group`), plus any extra
    keys, into 0600 files of a private temporary directory removed when the mirror exits;
    the command line names only the files. SIGTERM on kill: the mirror drains what is in
    flight and commits before it exits.
    """

    template_fields = ("whitelist", "blacklist")
    ui_color = "#d8e8f8"

    def __init__(
        self,
        *,
        source_conn_id: str,
        target_conn_id: str,
        mirror_group: str,
        whitelist: str | None = None,
        blacklist: str | None = None,
        num_streams: int = 1,
        consumer_config: Mapping[str, object] | None = None,
        producer_config: Mapping[str, object] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (whitelist is None) == (blacklist is None):
            raise ValueError("MirrorOperator needs exactly one of whitelist and blacklist")
        if num_streams < 1:
            raise ValueError(f"num_streams must be at least 1, not {num_streams}")
        self.source_conn_id = source_conn_id
        self.target_conn_id = target_conn_id
        self.mirror_group = mirror_group
        self.whitelist = whitelist
        self.blacklist = blacklist
        self.num_streams = num_streams
        self.consumer_config = dict(consumer_config or {})
        self.producer_config = dict(producer_config or {})
        self._process: StreamedProcess | None = None

    def command(self, consumer_file: Path, producer_file: Path) -> list[str]:
        cmd = [sys.executable, "-m", "logbroker.cli", "mirror"]
        cmd += ["--consumer.config", str(consumer_file), "--producer.config", str(producer_file)]
        if self.whitelist is not None:
            cmd += ["--whitelist", self.whitelist]
        else:
            cmd += ["--blacklist", str(self.blacklist)]
        return [*cmd, "--num.streams", str(self.num_streams), "--until-caught-up"]

    def execute(self, context: Context) -> None:
        source, target = LogbrokerHook(self.source_conn_id), LogbrokerHook(self.target_conn_id)
        consumer = {
            "zk.connect": source.zk_connect,
            "groupid": self.mirror_group,
            "schema.registry.zk": source.schema_registry,
            **source.client_properties,
            **self.consumer_config,
        }
        producer = {
            "zk.connect": target.zk_connect,
            "schema.registry.zk": target.schema_registry,
            **target.client_properties,
            **self.producer_config,
        }
        with tempfile.TemporaryDirectory(prefix="mirror-") as tmp:
            consumer_file, producer_file = (
                Path(tmp, "consumer.properties"),
                Path(tmp, "producer.properties"),
            )
            write_private(consumer_file, properties(consumer))
            write_private(producer_file, properties(producer))
            self._process = StreamedProcess(
                self.command(consumer_file, producer_file), dict(os.environ), self.log
            )
            returncode = self._process.run()
        if returncode != 0:
            raise AirflowException(
                f"logbroker mirror exited with {returncode}; last lines:\n"
                + self._process.last_lines()
            )

    def on_kill(self) -> None:
        if self._process is not None:
            self._process.stop()


class HourlyLoadOperator(SparkAppOperator):
    """`spark-submit spark_apps/jobs/hourly_load.py` of a batch of topics for the run's hour
    (the start of its data interval), from the analysis cluster into the warehouse: one Spark
    application, in which each topic loads under its own lock and commits its own checkpoint;
    after every topic committed, the asset event `logbroker-warehouse/<topic>` of each, with
    `{"load_hour": hour}`.

    A topic that fails does not stop the others; the job names it in a line of its own, and
    the task fails. Its retry passes `--skip-committed-since <the run's start>`: the topics
    this run already committed are not loaded again (a backfill or a Clear of a finished run
    starts the run anew, and loads every topic again from its stored offsets). A scheduled
    run does not load a topic whose hour is committed already (`committed_by_schedule`).

    An operator (not a @task calling a hook) so that killing the task reaches `on_kill`,
    which stops the spark-submit and everything it started. Map it over batches of topics
    with `.partial(...).expand(topics=...)`, with `outlets=[WAREHOUSE_ALIAS]`.
    """

    ui_color = "#fde8c8"

    def __init__(
        self,
        *,
        topics: Sequence[str],
        analysis_conn_id: str,
        warehouse: str,
        warehouse_reader: str | None = None,
        max_bad_fraction: float = 0.01,
        parquet_writer: str = "auto",
        **kwargs: Any,
    ) -> None:
        from pipeline_warehouse.filesystem import python_uri

        from .pipeline import installed_jobs

        kwargs.setdefault("application", str(installed_jobs() / "hourly_load.py"))
        super().__init__(**kwargs)
        if isinstance(topics, str):  # a str is a sequence of one-letter topics: refuse it
            raise TypeError(f"HourlyLoadOperator topics: a list of topics, not {topics!r}")
        self.topics = list(topics)
        # the mapped task's label in the UI (map_index_template): short, as the database's
        # rendered_map_index column holds 250 characters at most (PostgreSQL refuses more)
        self.topics_label = topics_label(self.topics)
        self.analysis_conn_id = analysis_conn_id
        self.warehouse = warehouse
        # where this Python process reads the same files (Pipeline.warehouse_reader): the URI
        # Spark writes may be one only Hadoop's client reads (viewfs, hdfs on another port)
        self.warehouse_reader = warehouse_reader or python_uri(warehouse)
        self.max_bad_fraction = max_bad_fraction
        self.parquet_writer = parquet_writer

    # Airflow pushes what execute returns to XCom (BaseOperator.execute returns Any); the
    # spark-submit operators this one extends return nothing, this one the hour it loaded.
    def topics_to_load(self, context: Context, topics: Sequence[str], hour: str) -> list[str]:
        """`topics` but those a scheduled run finds committed already (read where Python
        reads the warehouse, `warehouse_reader`)."""
        return [
            t for t in topics
            if not committed_by_schedule(context, self.warehouse_reader, t, hour, self.log.info)
        ]  # fmt: skip

    def execute(self, context: Context) -> dict[str, Any]:  # type: ignore[override]
        from pipeline_warehouse.topics import check_topics

        topics = check_topics(self.topics)
        if not topics:
            raise AirflowException("hourly load: no topics to load")
        start = context["data_interval_start"]
        if start is None:
            raise AirflowException(
                f"hourly load of {', '.join(topics)}: the run has no data interval (its start "
                "is the hour)"
            )
        hour = start.strftime("%Y-%m-%dT%H")
        # a scheduled run loads an hour once: a topic it finds committed was committed by a
        # try stopped before it could report (make down), or by a backfill that came first
        to_load = self.topics_to_load(context, topics, hour)
        analysis = LogbrokerHook(self.analysis_conn_id)
        self.application_args = [
            "--zookeeper", analysis.zk_connect,
            "--schema-registry", analysis.schema_registry or "",
            "--topics", ",".join(to_load),
            "--hour", hour,
            "--warehouse", self.warehouse,
            "--max-bad-fraction", str(self.max_bad_fraction),
            "--parquet-writer", self.parquet_writer,
        ]  # fmt: skip
        run_start = context["dag_run"].start_date
        if context["ti"].try_number > 1 and run_start is not None:
            # a retry in this run: what an earlier try committed stays (a backfill or a Clear
            # of a finished run gives the run a new start: every topic loads again)
            self.application_args += ["--skip-committed-since", run_start.isoformat()]
        self.name = load_name(topics, hour)
        if to_load:
            # the connection's credentials reach the job in a 0600 file of a private
            # directory, named on its command line: never their values (the submit is logged)
            with tempfile.TemporaryDirectory(prefix="load-client-") as private:
                if analysis.client_properties:
                    client_file = Path(private, "client.properties")
                    write_private(client_file, properties(analysis.client_properties))
                    self.application_args += ["--client-config", str(client_file)]
                try:
                    super().execute(context)  # returns once every topic committed (or raises)
                except AirflowException as exc:
                    raise AirflowException(
                        f"hourly load of {hour}: {exc}; each topic that failed is named in an "
                        "`hourly_load: topic ...` line above, the others committed"
                    ) from exc
        for topic in topics:
            context["outlet_events"][WAREHOUSE_ALIAS].add(
                warehouse_topic_asset(self.warehouse, topic), extra={"load_hour": hour}
            )
        return {"topics": topics, "load_hour": hour}


def topics_label(topics: Sequence[str], limit: int = 200) -> str:
    """`a,b,c` up to three topics; else the first three and how many more (`a,b,c,+22`),
    cut to `limit` characters (a topic name may be long)."""
    shown = ",".join(topics[:3]) + (f",+{len(topics) - 3}" if len(topics) > 3 else "")
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def load_name(topics: Sequence[str], hour: str) -> str:
    """The Spark application's name: `hourly_load <topics_label> <hour>` (the Spark UI's
    column and a process's command line stay short)."""
    return f"hourly_load {topics_label(topics)} {hour}"
