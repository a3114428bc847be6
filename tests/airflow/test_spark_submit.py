"""SparkAppOperator: the Spark provider's operator, a real spark-submit on local[2], no scheduler.

The connection comes as users give it (AIRFLOW_CONN_<ID>, JSON); the applications are tiny
PySpark scripts written here. PATH gets the virtualenv's bin/ first, as the stacks give it to
Airflow's processes: the provider runs `spark-submit` from PATH.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from logbroker.stack.airflow_stack import process_running

pytestmark = pytest.mark.timeout(300)

VENV_BIN = str(Path(sys.executable).parent)

SETTINGS_APP = """
import json, sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
conf = spark.sparkContext.getConf()
import spark_apps.pyfiles
seen = {key: conf.get(key, None) for key in (
    "spark.master", "spark.pyspark.python", "spark.pyspark.driver.python",
    "spark.driver.host", "spark.submit.pyFiles", "spark.app.name")}
seen["driver_python"] = sys.executable
seen["worker_python"] = spark.sparkContext.parallelize([0], 1).map(
    lambda _: __import__("sys").executable).collect()[0]
seen["driver_java_options"] = conf.get("spark.driver.extraJavaOptions", None)
jvm_pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
seen["jvm_maps"] = open(f"/proc/{jvm_pid}/maps").read()

open(sys.argv[1], "w").write(json.dumps(seen))
spark.stop()
"""

# The driver's main thread sleeps in Python while a Spark job's Python workers sleep too:
# killed, spark-submit's JVM alone would leave the driver (and its workers) running.
STUCK_APP = """
import threading, time
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
job = lambda: spark.sparkContext.parallelize(range(2), 2).map(lambda x: time.sleep(600)).collect()
threading.Thread(target=job, daemon=True).start()
time.sleep(600)
"""


@pytest.fixture
def spark_conn(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("PATH", os.pathsep.join([VENV_BIN, os.environ.get("PATH", "")]))
    secret = uuid.uuid4().hex
    extra = {
        "conf": {
            # A setting whose value is a secret: it must never reach a log unmasked.
            "spark.hadoop.fs.s3a.secret.key": secret,
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        }
    }
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_TEST",
        json.dumps({"conn_type": "spark", "host": "local[2]", "extra": extra}),
    )
    return {"conn_id": "spark_test", "secret": secret}


def test_a_connection_that_cannot_be_read_is_an_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hooks.spark_submit import SparkAppOperator, SparkConnectionError

    def prepare(conn_id: str) -> None:
        SparkAppOperator(task_id="t", application="app.py", conn_id=conn_id).prepare_submit()

    # The provider alone would log a line and submit to `yarn`; the default id is no exception.
    monkeypatch.delenv("AIRFLOW_CONN_LOGBROKER_SPARK_DEFAULT", raising=False)
    with pytest.raises(SparkConnectionError, match="'logbroker_spark_default' could not be read"):
        SparkAppOperator(task_id="t", application="app.py").prepare_submit()
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_OLD", json.dumps({"conn_type": "logbroker_spark", "host": "local[2]"})
    )
    with pytest.raises(SparkConnectionError, match="'spark_old' is of type 'logbroker_spark'"):
        prepare("spark_old")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_EMPTY", json.dumps({"conn_type": "spark"}))
    with pytest.raises(SparkConnectionError, match="'spark_empty' has no host"):
        prepare("spark_empty")
    # Spark itself refuses Python apps in a standalone master's cluster mode: said up front.
    cluster = {"conn_type": "spark", "host": "spark://127.0.0.1:7077",
               "extra": {"deploy-mode": "cluster"}}  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps(cluster))
    with pytest.raises(SparkConnectionError, match="'spark_cluster': Spark runs no Python app"):
        prepare("spark_cluster")


def test_the_archive_goes_to_executors_not_to_a_local_master(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--py-files for a master with executors elsewhere; none for a local master or a
    standalone one on loopback (`make up`'s), whose Python workers run where the project is
    installed (an archive would only make every application compile the readers' numba code
    again)."""
    from hooks.spark_submit import SparkAppOperator

    masters = {
        "spark_local": "local[2]",
        "spark_loopback": "spark://127.0.0.1:7077",
        "spark_localhost": "spark://localhost:7077,localhost:7078",
        "spark_standalone": "spark://h:7077",
        "spark_half_remote": "spark://127.0.0.1:7077,h:7077",
    }
    for name, master in masters.items():
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{name.upper()}", json.dumps({"conn_type": "spark", "host": master})
        )
    for name in ("spark_local", "spark_loopback", "spark_localhost"):
        here = SparkAppOperator(task_id="t", application="app.py", conn_id=name)
        here.prepare_submit()
        assert not here.py_files, name
    half = SparkAppOperator(task_id="t", application="app.py", conn_id="spark_half_remote")
    half.prepare_submit()
    assert half.py_files
    standalone = SparkAppOperator(task_id="t", application="app.py", conn_id="spark_standalone")
    standalone.prepare_submit()
    assert Path(standalone.py_files).name.startswith("pyfiles-")
    assert Path(standalone.py_files).exists()


@pytest.mark.slow
def test_submit_runs_the_app_with_our_settings_and_masks_secrets(
    spark_conn: dict[str, Any], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from hooks.spark_submit import SparkAppOperator

    app = tmp_path / "settings_app.py"
    app.write_text(SETTINGS_APP)
    out = tmp_path / "seen.json"
    from spark_apps.pyfiles import build_archive

    archive = build_archive()
    operator = SparkAppOperator(  # an archive given explicitly is shipped, master or not
        task_id="settings",
        application=str(app),
        application_args=[str(out)],
        conn_id=spark_conn["conn_id"],
        name="settings-app",
        py_files=str(archive),
    )
    operator.execute({})
    logged = "".join(capfd.readouterr())  # the task log: Airflow's logging writes it here
    seen = json.loads(out.read_text())
    assert seen["spark.master"] == "local[2]"
    assert seen["spark.app.name"] == "settings-app"
    # Python workers and the driver run this interpreter (it has pyarrow and our packages).
    assert seen["spark.pyspark.python"] == seen["spark.pyspark.driver.python"] == sys.executable
    assert seen["driver_python"] == seen["worker_python"] == sys.executable
    assert seen["spark.driver.host"] == "127.0.0.1"  # a local master binds loopback only
    # The driver's JVM maps Spark's class archive (make setup made it), and the connection's
    # own JVM options are kept after the archive's.
    from spark_apps.class_archive import ARCHIVE

    assert ARCHIVE.is_file(), f"no {ARCHIVE}: `make setup` makes it"
    assert str(ARCHIVE) in seen["jvm_maps"], seen["driver_java_options"]
    assert seen["driver_java_options"].endswith("-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    assert Path(seen["spark.submit.pyFiles"].removeprefix("file:")).name == archive.name
    # The whole command is in the task log, the secret's value masked.
    [command] = [line for line in logged.splitlines() if "Spark-Submit cmd" in line]
    assert "spark.hadoop.fs.s3a.secret.key=******" in command
    assert "--py-files" in command and str(app) in command
    assert spark_conn["secret"] not in logged


@pytest.mark.slow
def test_on_kill_leaves_no_process_that_spark_submit_started(
    spark_conn: dict[str, Any], tmp_path: Path
) -> None:
    import psutil

    from hooks.spark_submit import SparkAppOperator

    app = tmp_path / "stuck_app.py"
    app.write_text(STUCK_APP)
    operator = SparkAppOperator(
        task_id="stuck", application=str(app), conn_id=spark_conn["conn_id"]
    )
    failure: list[BaseException] = []

    def run() -> None:
        try:
            operator.execute({})
        except BaseException as exc:  # the killed spark-submit's exit: what we wait for
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started: list[int] = []
    try:
        # Wait until spark-submit runs the driver and a Spark job's Python workers.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            process = getattr(operator._hook, "_submit_sp", None)
            if process is not None and process.poll() is None:
                tree = psutil.Process(process.pid).children(recursive=True)
                if any("pyspark.daemon" in command_line(p) for p in tree):
                    started = [process.pid, *(p.pid for p in tree)]
                    break
            assert thread.is_alive(), failure
            time.sleep(0.2)
        assert started, "spark-submit never started its Python workers"
    finally:
        operator.on_kill()  # what the test checks, and the cleanup when it fails earlier
        thread.join(60)
    assert not thread.is_alive() and failure, "execute did not end with the killed spark-submit"
    left = [pid for pid in started if process_running(pid)]
    assert left == [], [command_line(psutil.Process(pid)) for pid in left]


def command_line(process: Any) -> str:
    import psutil

    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # gone meanwhile, or a zombie
        return ""


# A parent that never reaps its child: killed, the child stays a zombie until the parent ends.
NEGLECTFUL_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.timeout(60)
def test_kill_all_kills_and_takes_a_zombie_for_gone() -> None:
    """on_kill's processes are not the task's children: one killed whose parent is alive and
    does not reap it is a zombie, which kill_all must count as gone rather than wait the
    hour given here (the test's own timeout ends it first)."""
    import subprocess

    import psutil

    from hooks.spark_submit import kill_all

    parent = subprocess.Popen(
        [sys.executable, "-c", NEGLECTFUL_PARENT], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        assert kill_all([child], timeout=3600) == [child.pid]
        assert child.status() == psutil.STATUS_ZOMBIE  # killed, and not reaped
        assert parent.poll() is None
    finally:
        parent.kill()
        parent.wait()
