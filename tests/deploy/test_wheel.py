"""The project installed from its wheel into a fresh virtualenv, and run outside the checkout:
what a deployment that installs the package gets (issue 43 finding 6).

One wheel is built from a copy of the working tree (`pip wheel --no-build-isolation`, as `make
setup` builds; LOGBROKER_PURE_PYTHON=1 compiles no extension: the rest of the suite runs the
compiled walks, and the build takes 3 s instead of 35) and installed with uv into a new
virtualenv. The third-party packages come from the project's .venv through a .pth file naming
a folder of links to them, without the editable install's finder and metadata, so only the
wheel's copy of our code can be imported, never the checkout's. Everything runs in a
directory outside the checkout, with no PYTHONPATH:

- `logbroker --help` and `--version`, the hourly load's `python -m ... --help`;
- our packages import from the virtualenv and the tests' harness/ not at all; the DAGs' job
  files and the audit's data (expectation suites, report assets and templates) are the
  installed ones, and the report's index renders from them;
- Airflow lists the Pipeline pages' plugin from the package's entry point, with an empty
  plugins folder;
- a real hourly load: spark-submit of the job file the load task submits, against a broker,
  the driver and Spark's Python workers the virtualenv's interpreter.

The module costs about 40 s, most of it the load's spark-submit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from spark.helpers import PAGE_VIEW, SMALL_JOB_JAVA, start_cluster

from spark_apps.class_archive import with_archive

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
OURS = ("logbroker", "pipeline_warehouse", "hooks", "pipeline_ui", "spark_apps")
HOUR = "2026-11-22T10"

pytestmark = pytest.mark.slow


@dataclass
class Installed:
    venv: Path
    site: Path  # the virtualenv's site-packages: where every file of ours must come from
    cwd: Path  # outside the checkout
    env: dict[str, str]

    def run(
        self, argv: list[str], extra_env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            cwd=self.cwd,
            env={**self.env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
        )

    def python(self, code: str) -> str:
        done = self.run([str(self.venv / "bin" / "python"), "-c", code])
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout


def _copy_tree(destination: Path) -> None:
    """The checkout's files as git sees them (committed or not, ignored ones left out)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file() and not name.startswith(("bench/results/", "docs/images/")):
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


def _third_party_view(folder: Path) -> None:
    """Links to everything in .venv's site-packages but our editable install."""
    folder.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        ours = entry.name.startswith(("logbroker-", "__editable__")) or entry.name in OURS
        if not ours and entry.name != "__pycache__":
            (folder / entry.name).symlink_to(entry)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("wheel")
    _copy_tree(work / "src")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    build = subprocess.run(
        [*pip_wheel, "-w", str(work / "dist"), str(work / "src")],
        env={**os.environ, "LOGBROKER_PURE_PYTHON": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = (work / "dist").glob("logbroker-*.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(
        subprocess.run(
            [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    _third_party_view(work / "third_party")
    (site / "third_party.pth").write_text(f"{work / 'third_party'}\n")
    uv_install = [VENV_BIN / "uv", "pip", "install", "-q", "--offline", "--no-deps"]
    subprocess.run([*uv_install, "--python", str(venv / "bin" / "python"), wheel], check=True)
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    path = [str(venv / "bin")] + [
        p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != VENV_BIN
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env |= {"PATH": os.pathsep.join(path), "HOME": str(work)}
    yield Installed(venv, site, elsewhere, env)


def test_the_commands_run(installed: Installed) -> None:
    helped = installed.run(["logbroker", "--help"])
    assert helped.returncode == 0, helped.stderr
    assert "logbroker: a Kafka 0.7-compatible distributed commit log" in helped.stdout
    version = installed.run(["logbroker", "--version"])
    assert version.returncode == 0 and version.stdout.startswith("logbroker 0.1.0")
    python = installed.venv / "bin" / "python"
    assert (installed.venv / "bin" / "logbroker").read_text().startswith(f"#!{python}\n")
    job = installed.run([str(python), "-m", "spark_apps.jobs.hourly_load", "--help"])
    assert job.returncode == 0 and "--zookeeper" in job.stdout, job.stderr


def test_everything_comes_from_the_installed_package(installed: Installed) -> None:
    found = json.loads(
        installed.python(
            "import importlib, importlib.util, json\n"
            "from logbroker.include_files import include_path\n"
            "from hooks.pipeline import installed_jobs\n"
            "from spark_apps.audit.quality import SUITES_SOURCE\n"
            "from spark_apps.audit.report_assets import ASSETS_SOURCE\n"
            f"files = {{n: importlib.import_module(n).__file__ for n in {OURS!r}}}\n"
            "files['jobs'] = str(installed_jobs() / 'hourly_load.py')\n"
            "files['suite'] = str(SUITES_SOURCE / 'audit_events.json')\n"
            "files['assets'] = str(ASSETS_SOURCE / 'MANIFEST.json')\n"
            "from spark_apps.audit.report import TEMPLATES, index_page\n"
            "files['templates'] = str(TEMPLATES / 'hour.html')\n"
            "from pathlib import Path\n"
            "index = index_page([{'audit_hour': '2026-11-22T10'}], Path('/r/index.html'), Path('/r'))\n"
            "files['index'] = 'href=\"hours/2026-11-22T10.html\"' in index\n"
            "files['schema'] = str(include_path('schemas', 'audit_count.avsc'))\n"
            "files['harness'] = importlib.util.find_spec('harness') is not None\n"
            "print(json.dumps(files))\n"
        )
    )
    assert found.pop("harness") is False, "the tests' harness/ is not installed"
    assert found.pop("index") is True, "the report's index renders from the installed templates"
    for name, file in found.items():
        assert Path(file).is_relative_to(installed.site), f"{name}: {file}"
        assert Path(file).is_file(), f"{name}: {file} is not installed"


def test_a_deployment_names_its_pipeline(installed: Installed, tmp_path: Path) -> None:
    """A checkout's include/pipeline/pipeline.json is not installed: without
    LOGBROKER_PIPELINE the DAGs fail in one line that says to set it; a relative warehouse
    in the file named is taken from the file's directory, not from the installation's."""
    code = "from hooks.pipeline import load_pipeline; print(load_pipeline().warehouse)"
    python = str(installed.venv / "bin" / "python")
    unset = installed.run([python, "-c", code])
    assert unset.returncode == 1
    assert (
        unset.stderr.strip()
        .splitlines()[-1]
        .endswith("set LOGBROKER_PIPELINE to the pipeline's settings file")
    ), unset.stderr
    settings = json.loads((ROOT / "include" / "pipeline" / "pipeline.json").read_text())
    (tmp_path / "pipeline.json").write_text(json.dumps({**settings, "warehouse": "wh"}))
    named = installed.run(
        [python, "-c", code], {"LOGBROKER_PIPELINE": str(tmp_path / "pipeline.json")}
    )
    assert named.returncode == 0, named.stderr
    assert named.stdout.strip() == (tmp_path / "wh").as_uri()


def test_airflow_finds_the_pages_plugin_in_the_package(installed: Installed) -> None:
    """Loaded from the entry point, with the deployment's pipeline (the pages read it)."""
    home = installed.cwd / "airflow"
    empty = installed.cwd / "plugins"
    empty.mkdir(exist_ok=True)
    pipeline = installed.cwd / "pipeline.json"
    pipeline.write_text((ROOT / "include" / "pipeline" / "pipeline.json").read_text())
    listed = installed.run(
        [str(installed.venv / "bin" / "python"), "-m", "airflow", "plugins", "-o", "json"],
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(empty),
            "AIRFLOW__CORE__DAGS_FOLDER": str(empty),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "LOGBROKER_PIPELINE": str(pipeline),
        },
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "[" in listed.stdout, listed.stdout + listed.stderr
    start = listed.stdout.index("[")
    plugins = {p["name"]: p for p in json.loads(listed.stdout[start:])}
    assert "logbroker_pipeline" in plugins, listed.stdout
    source = plugins["logbroker_pipeline"]["source"]
    assert "pipeline_ui.plugin:LogbrokerPipelinePlugin" in source, source
    assert "group='airflow.plugins'" in source, source


@pytest.mark.timeout(600)
def test_a_load_runs_from_the_installed_job(
    installed: Installed, zookeeper: object, tmp_path: Path
) -> None:
    cluster = start_cluster(zookeeper, tmp_path / "cluster", "wheel", brokers=1)  # type: ignore[arg-type]
    try:
        cluster.register("wheel_views", PAGE_VIEW)
        cluster.produce("wheel_views", [cluster.event("wheel_views") for _ in range(20)])
        job = Path(
            installed.python(
                "from hooks.pipeline import installed_jobs; print(installed_jobs() / 'hourly_load.py')"
            ).strip()
        )
        assert job.is_relative_to(installed.site)
        python = str(installed.venv / "bin" / "python")
        wh = tmp_path / "wh"
        submit = [
            str(VENV_BIN / "spark-submit"), "--master", "local[1]",
            "--conf", "spark.ui.enabled=false",
            # as the tests' other drivers: C1 only, Spark's classes from the class archive
            "--conf", f"spark.driver.extraJavaOptions={with_archive(SMALL_JOB_JAVA)}", str(job),
            "--zookeeper", cluster.live.connect, "--schema-registry", cluster.registry.connect,
            "--topics", "wheel_views", "--hour", HOUR, "--warehouse", wh.as_uri(),
        ]  # fmt: skip
        done = installed.run(
            submit,
            {
                "PYSPARK_PYTHON": python,
                "PYSPARK_DRIVER_PYTHON": python,
                "SPARK_LOCAL_IP": "127.0.0.1",
            },
            timeout=500,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert f"loaded wheel_views {HOUR}: 20 rows" in done.stdout, done.stdout[-3000:]
        checkpoint = json.loads((wh / "_checkpoints" / "wheel_views" / f"{HOUR}.json").read_text())
        assert checkpoint["rows"] == 20
    finally:
        cluster.stop()
