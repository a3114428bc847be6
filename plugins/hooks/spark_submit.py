"""`LogbrokerSparkSubmitHook`: spark-submit of our PySpark apps, its log in the task log.

A connection of type `logbroker_spark` (not `spark`, so that the Spark provider can be
installed beside us without a clash; we do not use the provider, see STACK.md P1):

    host     the master: `local[2]`, `spark://10.0.0.5:7077`, `yarn`, `k8s://...`
    extra    {"conf": {"spark.executor.memory": "2g"}, "deploy_mode": "client",
              "spark_submit": "/opt/spark/bin/spark-submit",      # default: the one beside
              "env": {"JAVA_HOME": "..."}}                          # this Python

What our apps need and the hook always provides: `PYSPARK_PYTHON` (Spark otherwise starts
its Python workers with whatever `python3` is on PATH, which lacks pyarrow and our code),
plus 127.0.0.1 binding for local masters. Workers import `logbroker` and `spark_apps` (Spark
pickles the data source classes by reference): both are installed with the project.
spark-submit's output is streamed line by line into the task log as it comes.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException

from .streamed_process import StreamedProcess


class LogbrokerSparkSubmitHook(BaseHook):
    """Run a PySpark application with spark-submit on the connection's master."""

    conn_name_attr = "spark_conn_id"
    default_conn_name = "logbroker_spark_default"
    conn_type = "logbroker_spark"
    hook_name = "Spark (logbroker)"

    def __init__(self, spark_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spark_conn_id = spark_conn_id
        self._process: StreamedProcess | None = None

    def settings(self) -> dict[str, Any]:
        try:
            conn = self.get_connection(self.spark_conn_id)
        except Exception:  # no such connection: local mode on this machine
            if self.spark_conn_id != self.default_conn_name:
                raise
            return {"master": "local[2]", "conf": {}, "deploy_mode": None, "env": {}}
        extra = conn.extra_dejson
        return {
            "master": conn.host or "local[2]",
            "conf": dict(extra.get("conf", {})),
            "deploy_mode": extra.get("deploy_mode"),
            "spark_submit": extra.get("spark_submit"),
            "env": dict(extra.get("env", {})),
        }

    def get_conn(self) -> dict[str, Any]:
        return self.settings()

    def command(
        self,
        application: str,
        application_args: Sequence[str] = (),
        *,
        conf: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> list[str]:
        """The spark-submit command line (what the task log shows first)."""
        settings = self.settings()
        cmd = [
            settings.get("spark_submit") or spark_submit_binary(),
            "--master",
            settings["master"],
        ]
        if settings.get("deploy_mode"):
            cmd += ["--deploy-mode", settings["deploy_mode"]]
        if name:
            cmd += ["--name", name]
        merged = {**default_conf(settings["master"]), **settings["conf"], **dict(conf or {})}
        for key, value in sorted(merged.items()):
            cmd += ["--conf", f"{key}={value}"]
        return [*cmd, application, *application_args]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.settings()["env"])
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        return env

    def submit(
        self,
        application: str,
        application_args: Sequence[str] = (),
        *,
        conf: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        """Run the app; its output goes to the task log; a non-zero exit raises with the
        last lines of that output, so the failure reads in the task's summary."""
        cmd = self.command(application, application_args, conf=conf, name=name)
        self.log.info("spark-submit: %s", " ".join(cmd))
        self._process = StreamedProcess(cmd, self.environment(), self.log)
        returncode = self._process.run()
        if returncode != 0:
            raise AirflowException(
                f"spark-submit {Path(application).name} exited with {returncode}; "
                f"last lines:\n{self._process.last_lines()}"
            )

    def on_kill(self) -> None:
        if self._process is not None:
            self._process.stop()


def spark_submit_binary() -> str:
    """spark-submit beside this Python (pyspark installs it into the venv), else on PATH."""
    beside = Path(sys.executable).with_name("spark-submit")
    if beside.exists():
        return str(beside)
    found = shutil.which("spark-submit")
    if found is None:
        raise AirflowException("spark-submit not found beside this Python or on PATH")
    return found


def default_conf(master: str) -> dict[str, str]:
    """What every submit gets unless the connection or the call says otherwise."""
    conf = {"spark.ui.showConsoleProgress": "false"}
    if master.startswith("local"):  # this machine only: bind nothing beyond loopback
        conf.update({"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"})
        conf["spark.ui.enabled"] = "false"
    return conf
