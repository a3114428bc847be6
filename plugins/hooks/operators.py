"""Thin operators over the hooks: run the mirror until caught up; run a Spark app.

They check their arguments when the DAG is parsed and build hooks only when they run, as
Airflow's providers do; what they run is the same command a user runs by hand
(`logbroker mirror ...`, `spark-submit spark_apps/...`), so a task's log reads like a
terminal session and a failure can be replayed outside Airflow.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowException

from .logbroker_hook import LogbrokerHook
from .spark_submit import LogbrokerSparkSubmitHook
from .streamed_process import StreamedProcess


def properties(values: Mapping[str, object]) -> str:
    """A Kafka-style .properties text, one `key=value` a line."""
    return "".join(f"{key}={value}\n" for key, value in values.items() if value is not None)


class MirrorOperator(BaseOperator):
    """`logbroker mirror --until-caught-up` from one cluster to another.

    The consumer and producer configs are written from the two connections (`zk.connect`
    and `schema.registry.zk` from each; `groupid` is `mirror_group`), plus any extra keys.
    SIGTERM on kill: the mirror drains what is in flight and commits before it exits.
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
            **self.consumer_config,
        }
        producer = {
            "zk.connect": target.zk_connect,
            "schema.registry.zk": target.schema_registry,
            **self.producer_config,
        }
        with tempfile.TemporaryDirectory(prefix="mirror-") as tmp:
            consumer_file, producer_file = (
                Path(tmp, "consumer.properties"),
                Path(tmp, "producer.properties"),
            )
            consumer_file.write_text(properties(consumer))
            producer_file.write_text(properties(producer))
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


class SparkAppOperator(BaseOperator):
    """spark-submit one of our PySpark apps (or any) through LogbrokerSparkSubmitHook."""

    template_fields = ("application", "application_args", "conf")
    ui_color = "#fde8c8"

    def __init__(
        self,
        *,
        application: str,
        application_args: Sequence[str] = (),
        conf: Mapping[str, str] | None = None,
        spark_conn_id: str = LogbrokerSparkSubmitHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.application = application
        self.application_args = list(application_args)
        self.conf = dict(conf or {})
        self.spark_conn_id = spark_conn_id
        self._hook: LogbrokerSparkSubmitHook | None = None

    def execute(self, context: Context) -> None:
        self._hook = LogbrokerSparkSubmitHook(self.spark_conn_id)
        self._hook.submit(
            self.application,
            [str(a) for a in self.application_args],
            conf=self.conf,
            name=f"{self.dag_id}.{self.task_id}",
        )

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()
