"""`SparkAppOperator`: spark-submit of our PySpark apps through Airflow's Spark provider.

The provider's `SparkSubmitOperator` (apache-airflow-providers-apache-spark) does the submit:
the command, its log (secrets masked), tracking a cluster-mode application, `on_kill`.
This thin subclass adds what our apps need and what the pipeline relies on:

    the connection   type `spark` (the provider's); read strictly: a connection that is
                     missing, of another type or without a master is an error naming it (the
                     provider alone would log a line and submit to `yarn`)
    its fields       host: the master (`local[2]`, `spark://10.0.0.5:7077`, `yarn`, ...)
                     extra: {"deploy-mode": "client" | "cluster",     # the provider's keys
                             "spark-binary": "spark-submit", "rest-port": 6066,
                             "conf": {"spark.executor.memory": "2g"}}  # ours: the deployment's
                                                                       # Spark settings
    --conf           the deployment's (extra.conf) under the task's, over our defaults: Python
                     workers and the Python driver run this interpreter (`spark.pyspark.python`,
                     `spark.pyspark.driver.python`: Spark would otherwise run the `python3` on
                     PATH, which may lack pyarrow and our code); on local masters the driver
                     binds 127.0.0.1 only and has no UI
    driver JVM       in client mode, `spark.driver.extraJavaOptions` maps Spark's class
                     archive (spark_apps.class_archive) when `make setup` made one, in front of
                     the deployment's own options: the JVM starts ~40 % sooner
    --py-files       the archive of our packages (spark_apps.pyfiles), for
                     executors on hosts where the project is not installed; in cluster deploy
                     mode only when LOGBROKER_PYFILES_DIR (where the archive is built) is a
                     directory the workers see too, since the driver starts on a worker. Not
                     on a local master: it has no executors, its Python workers run here, where
                     the project is installed, and an archive would only make every application
                     compile the readers' numba code again (numba keys its cache for code in an
                     archive by the archive's path, which Spark copies anew per application:
                     ~15 s of a small hour's load). Nor on a standalone master reached on
                     loopback (`make up`'s spark://127.0.0.1:7077): its workers are on this
                     host, where the project is installed (a master whose remote workers
                     should get the archive is named by its network address)
    deploy mode      client on a standalone master (Spark refuses Python apps in its cluster
                     mode): spark-submit runs the driver, so the task ends when the app does;
                     cluster mode on YARN or Kubernetes, where the provider tracks the app
    on_kill          the provider kills spark-submit (SIGKILL) and, in cluster mode, the
                     application on the cluster; then every process spark-submit had started is
                     killed too: its Python driver, and pyspark's worker daemon, which runs in a
                     process group of its own that a kill of the task's group does not reach

The provider runs `spark-submit` from PATH (it refuses other paths), and pyspark's
`spark-submit` script runs `python3` from PATH to find its Spark: the processes that run tasks
need the project's virtualenv `bin/` first on PATH (docs/airflow.md).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import psutil
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook, Context
from airflow.sdk.exceptions import AirflowException

DEFAULT_CONN_ID = "logbroker_spark_default"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class SparkConnectionError(AirflowException):
    pass


def spark_connection(conn_id: str) -> dict[str, Any]:
    """The master, deploy mode and Spark settings of a `spark` connection; any problem reading
    it is a SparkConnectionError that names the connection."""
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:  # not found, secrets backend down, bad URI: all the same to us
        raise SparkConnectionError(
            f"Spark connection {conn_id!r} could not be read: {type(exc).__name__}: {exc}"
        ) from exc
    if conn.conn_type != "spark":
        raise SparkConnectionError(
            f"Spark connection {conn_id!r} is of type {conn.conn_type!r}, not 'spark'"
        )
    if not conn.host:
        raise SparkConnectionError(
            f"Spark connection {conn_id!r} has no host: set it to the master, e.g. local[2] or "
            "spark://host:7077"
        )
    extra = conn.extra_dejson
    conf = extra.get("conf", {})
    if not isinstance(conf, dict):
        raise SparkConnectionError(
            f"Spark connection {conn_id!r}: extra 'conf' must be an object of Spark settings"
        )
    master = conn.host if ("://" in conn.host or not conn.port) else f"{conn.host}:{conn.port}"
    return {
        "master": master,
        "deploy_mode": extra.get("deploy-mode"),
        "conf": {str(k): str(v) for k, v in conf.items()},
    }


def workers_on_this_host(master: str) -> bool:
    """A standalone master reached on loopback: a single-host cluster (`make up`'s)."""
    if not master.startswith("spark://"):
        return False
    hosts = [urlsplit(f"spark://{h}").hostname for h in master[len("spark://") :].split(",")]
    return all(host in LOOPBACK for host in hosts)


def default_conf(master: str) -> dict[str, str]:
    """What every submit gets unless the connection or the task says otherwise."""
    conf = {
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.ui.showConsoleProgress": "false",
    }
    if master.startswith("local"):  # this machine only: bind nothing beyond loopback
        conf.update({"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"})
        conf["spark.ui.enabled"] = "false"
    return conf


class SparkAppOperator(SparkSubmitOperator):
    """The provider's SparkSubmitOperator on a strictly read `spark` connection, with our apps'
    defaults, the `--py-files` archive, and a kill that leaves no process behind."""

    ui_color = "#fde8c8"

    def __init__(
        self,
        *,
        conn_id: str = DEFAULT_CONN_ID,
        conf: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(conn_id=conn_id, conf=dict(conf or {}), **kwargs)
        self.spark_conn_id = conn_id

    def prepare_submit(self) -> dict[str, Any]:
        """Read the connection and set conf, --py-files and the environment; the connection's
        settings (master, deploy_mode, conf) for the caller."""
        from spark_apps.class_archive import DRIVER_JAVA_OPTIONS, with_archive
        from spark_apps.pyfiles import build_archive

        settings = spark_connection(self.spark_conn_id)
        if settings["master"].startswith("spark://") and settings["deploy_mode"] == "cluster":
            raise SparkConnectionError(
                f"Spark connection {self.spark_conn_id!r}: Spark runs no Python application in "
                "cluster deploy mode on a standalone master; use client (the driver in this "
                "task), or YARN or Kubernetes for cluster mode"
            )
        self.conf = {**default_conf(settings["master"]), **settings["conf"], **(self.conf or {})}
        if settings["deploy_mode"] != "cluster":
            # The driver's JVM starts here, on this host: it maps Spark's class archive, when
            # `make setup` made one, before the deployment's own options.
            java_options = with_archive(self.conf.get(DRIVER_JAVA_OPTIONS))
            if java_options:
                self.conf[DRIVER_JAVA_OPTIONS] = java_options
        shared = settings["deploy_mode"] != "cluster" or os.environ.get("LOGBROKER_PYFILES_DIR")
        if settings["master"].startswith("local") or workers_on_this_host(settings["master"]):
            pass  # the installed packages serve the Python workers, their numba cache too
        elif not self.py_files and shared:
            self.py_files = str(build_archive())
        elif not self.py_files:  # cluster mode: the driver reads --py-files on a worker's disk
            self.log.info(
                "cluster deploy mode: no --py-files (set LOGBROKER_PYFILES_DIR to a directory "
                "the Spark workers see to ship the archive of our packages)"
            )
        if settings["master"].startswith("local"):
            # The JVM's other sockets (block manager) bind to loopback too.
            self.env_vars = {"SPARK_LOCAL_IP": "127.0.0.1", **(self.env_vars or {})}
        return settings

    def execute(self, context: Context) -> None:
        self.prepare_submit()
        super().execute(context)
        # A reprocessing backfill clears this task instance and must submit again: the provider
        # keeps the cluster driver's id across tries so a retry can reconnect to a live driver;
        # once the task succeeded, that id must not make the next try skip its submit.
        store = context.get("task_state_store")
        if store is not None:
            store.delete(self.external_id_key)

    def on_kill(self) -> None:
        hook = self._hook
        process = getattr(hook, "_submit_sp", None)  # the provider's spark-submit Popen
        started = descendants(process.pid) if process is not None else []
        super().on_kill()
        stopped = kill_all(started)
        if stopped:
            self.log.info("killed the processes spark-submit had started: %s", stopped)


def descendants(pid: int) -> list[psutil.Process]:
    """Every process under `pid` (children, their children, ...), now."""
    try:
        children: list[psutil.Process] = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return children


def kill_all(processes: list[psutil.Process], timeout: float = 10.0) -> list[int]:
    """SIGKILL each process still running, and wait until they are gone; the PIDs killed.

    SIGKILL at once: the load is safe to kill at any moment (its commit is a checkpoint
    switch), and Airflow escalates a killed task to SIGKILL after 5 s anyway. psutil refuses
    to signal a PID that another process has taken since `processes` were listed."""
    killed = []
    for process in processes:
        try:
            process.kill()
            killed.append(process)
        except psutil.NoSuchProcess:
            pass
    # Not psutil.wait_procs: it waits out its timeout for a zombie that is not our child, and
    # these are reaped by their own parent (or init), whenever it gets to it.
    deadline = time.monotonic() + timeout
    while any(_running(process) for process in killed) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [process.pid for process in killed]


def _running(process: psutil.Process) -> bool:
    try:
        zombie: bool = process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    return not zombie  # a zombie is gone, only not yet reaped by its parent
