"""docker-compose.yaml and the Dockerfile: valid, and true to the repository.

No Docker engine runs on these machines (docs/deploy.md says what was and was not run), so
the file is validated by docker-compose v1 itself (`config -q` needs no engine) and checked
against the repository: every path it mounts or names under /app, every config file, every
`logbroker` subcommand and every variable it takes from .env must exist.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yaml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def test_docker_compose_validates_it() -> None:
    binary = shutil.which("docker-compose")
    assert binary, "docker-compose (Debian's v1) is installed by scripts/install-system-deps.sh"
    done = subprocess.run(
        [binary, "-f", str(COMPOSE), "config", "-q"],
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "POSTGRES_PASSWORD": "x",
            "AIRFLOW_ADMIN_PASSWORD": "x",
            "AIRFLOW__API_AUTH__JWT_SECRET": "x",
        },
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_every_service_has_what_it_needs(compose: dict[str, Any]) -> None:
    services = compose["services"]
    expected = {
        "zk1", "zk2", "zk3", "live-broker-0", "live-broker-1", "live-broker-2",
        "analysis-broker-0", "analysis-broker-1", "analysis-broker-2", "topics", "mirror", "postgres", "airflow-api-server", "airflow-scheduler",
        "airflow-dag-processor", "airflow-triggerer", "spark-master", "spark-worker-1",
        "spark-worker-2", "namenode", "datanode-1", "datanode-2",
    }  # fmt: skip
    assert expected <= set(services)
    for name, service in services.items():
        assert "image" in service, name
        stateful = name.startswith(("zk", "live-broker", "analysis-broker", "postgres",
                                    "namenode", "datanode", "spark-worker"))  # fmt: skip
        if stateful:
            assert any(":" in v and not v.startswith(".") for v in service.get("volumes", [])), (
                f"{name} keeps state: it needs a named volume"
            )
    for name in ("zk1", "live-broker-0", "analysis-broker-0", "postgres", "airflow-api-server",
                 "spark-master", "namenode"):  # fmt: skip
        assert "healthcheck" in services[name], name


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return []


def test_every_path_it_names_exists(compose: dict[str, Any]) -> None:
    texts = _strings(compose["services"])
    # bind mounts from the repository
    for text in texts:
        match = re.match(r"^\./([^:]+):", text)
        if match:
            assert (ROOT / match.group(1)).exists(), f"mounted path ./{match.group(1)} is missing"
    # files of ours inside the image: /app is the repository
    named = {m for t in texts for m in re.findall(r"/app/[\w./-]+", t)}
    assert named, "expected configs under /app/include"
    for path in named:
        assert (ROOT / path.removeprefix("/app/")).exists(), f"{path} is not in the repository"


def test_logbroker_commands_exist(compose: dict[str, Any]) -> None:
    from logbroker.cli import build_parser

    subcommands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    for name, service in compose["services"].items():
        command = service.get("command") or []
        if command[:1] == ["logbroker"]:
            assert command[1] in subcommands, f"{name}: logbroker {command[1]} does not exist"
        for script in command[2:] if command[:1] == ["sh"] else []:
            for called in re.findall(r"\blogbroker (\S+)", script):
                assert called in subcommands, f"{name}: logbroker {called} does not exist"


# -- replication: three brokers per cluster, topics with three copies ------------------------


def test_each_cluster_has_three_brokers_that_replicate(compose: dict[str, Any]) -> None:
    from logbroker.config import load_config

    services = compose["services"]
    for cluster in ("live", "analysis"):
        brokers = sorted(n for n in services if n.startswith(f"{cluster}-broker-"))
        assert brokers == [f"{cluster}-broker-{i}" for i in range(3)]
        ids = set()
        for name in brokers:
            command = services[name]["command"]
            overrides = dict(a.split("=", 1) for a in command[command.index("--override") + 1 :: 2])
            config = load_config(ROOT / command[3].removeprefix("/app/"), overrides)
            assert config.zk_connect.endswith(f"/{cluster}")
            assert (config.default_replication_factor, config.min_insync_replicas) == (3, 2)
            assert config.controlled_shutdown_enable
            grace = int(services[name]["stop_grace_period"].removesuffix("s"))
            assert grace > config.controlled_shutdown_timeout_ms / 1000, name
            ids.add(config.brokerid)
        assert ids == {0, 1, 2}, cluster


def test_the_pipelines_topics_are_created_replicated_before_anything_writes(
    compose: dict[str, Any],
) -> None:
    from hooks.pipeline import load_pipeline
    from logbroker.cli import build_parser

    services = compose["services"]
    topics = services["topics"]
    [script] = topics["command"][2:]
    # run the script's loops here, with the real parser: what each `logbroker` call asks
    loops = dict(re.findall(r"for (\w+) in ([^;]+);", script))
    [line] = re.findall(r"logbroker topics .*?--if-not-exists", script.replace("\\\n", " "))
    asked = set()
    for cluster in loops["cluster"].split():
        for topic in loops["topic"].split():
            argv = line.replace("$$cluster", cluster).replace("$$topic", topic).split()[1:]
            args = build_parser().parse_args(argv)
            assert (args.replication_factor, args.if_not_exists) == (3, True)
            asked.add((args.zookeeper.rsplit("/", 1)[1], args.topic))
    environment = compose["x-airflow"]["environment"]
    pipeline = load_pipeline(ROOT / environment["LOGBROKER_PIPELINE"].removeprefix("/app/"))
    mirrored = services["mirror"]["command"][services["mirror"]["command"].index("--whitelist") + 1]
    for topic in {*pipeline.topics, *mirrored.split("|")}:
        assert {("live", topic), ("analysis", topic)} <= asked, topic
    done = {"condition": "service_completed_successfully"}
    assert services["mirror"]["depends_on"]["topics"] == done
    assert compose["x-airflow"]["depends_on"]["topics"] == done
    assert {f"{c}-broker-{i}" for c in ("live", "analysis") for i in range(3)} <= set(
        topics["depends_on"]
    )


def test_dockerfile_copies_what_exists() -> None:
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), f"Dockerfile copies {source}, which is missing"


def test_secrets_come_from_env_file(compose: dict[str, Any]) -> None:
    used = set(re.findall(r"\$\{(\w+)", COMPOSE.read_text()))
    documented = set(re.findall(r"^(\w+)=", (ROOT / ".env.example").read_text(), re.M))
    assert used <= documented, f"not in .env.example: {sorted(used - documented)}"
    for text in _strings(compose["services"]):
        assert not re.search(r"(PASSWORD|SECRET)\w*[=:]\s*[^$\s{]", text), text


# -- the warehouse on HDFS, read by the Airflow services through WebHDFS --------------------


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_the_namenode_serves_webhdfs_to_the_airflow_services(compose: dict[str, Any]) -> None:
    from pipeline_warehouse.filesystem import WEBHDFS_PORT

    services = compose["services"]
    hdfs_site = services["namenode"]["environment"]
    assert hdfs_site["HDFS-SITE.XML_dfs.webhdfs.enabled"] == "true"
    http_port = _port(hdfs_site["HDFS-SITE.XML_dfs.namenode.http-address"])
    assert http_port == WEBHDFS_PORT  # where python_uri sends an hdfs:// warehouse
    assert str(http_port) in services["namenode"]["expose"]
    # The namenode answers a read or a write with a redirect to a datanode's HTTP port, by
    # the datanode's own hostname: it must be the service's name, which resolves on the
    # network (a container id does not), and that port must be open there.
    data_port = _port(hdfs_site["HDFS-SITE.XML_dfs.datanode.http.address"])
    for name in ("datanode-1", "datanode-2"):
        assert services[name]["hostname"] == name
        assert services[name]["environment"] == hdfs_site  # the same hdfs-site.xml
        assert str(data_port) in services[name]["expose"]
    for name in ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor",
                 "airflow-triggerer"):  # fmt: skip
        service = services[name]
        assert service["depends_on"]["namenode"] == {"condition": "service_healthy"}, name
        assert not service.get("networks"), f"{name} must share the namenode's network"


def test_the_pipeline_airflow_runs_reads_the_warehouse_through_webhdfs(
    compose: dict[str, Any],
) -> None:
    from fsspec.implementations.webhdfs import WebHDFS

    from hooks.pipeline import load_pipeline
    from pipeline_warehouse.filesystem import FsspecFS, python_uri

    environment = compose["x-airflow"]["environment"]
    mounted = ROOT / environment["LOGBROKER_PIPELINE"].removeprefix("/app/")
    pipeline = load_pipeline(mounted)
    assert pipeline.warehouse == "hdfs://namenode:8020/warehouse"  # what Spark writes
    assert pipeline.warehouse_reader == python_uri(pipeline.warehouse)
    assert pipeline.warehouse_reader == "webhdfs://namenode:9870/warehouse"
    assert pipeline.reports_reader == "file:///opt/airflow/reports"  # the airflow-home volume
    # Both URIs reach fsspec's WebHDFS client at the namenode (made offline: no request is
    # sent until a call), never fsspec's hdfs://, which needs libhdfs.
    files = FsspecFS()
    for uri in (pipeline.warehouse_reader, pipeline.warehouse):
        fs, path = files._fs(f"{uri}/_checkpoints")
        assert isinstance(fs, WebHDFS), uri
        assert (fs.url, path) == ("http://namenode:9870/webhdfs/v1", "/warehouse/_checkpoints")


def test_fsspecs_webhdfs_needs_only_requests() -> None:
    """Its module-level imports beyond the standard library are `requests` alone (Kerberos's
    client is imported only when kerberos=True), and the lock pins requests."""
    import ast
    import sys

    from fsspec.implementations import webhdfs

    tree = ast.parse(Path(webhdfs.__file__).read_text())
    imported = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) == {"requests"}
    assert re.search(r"^requests==", (ROOT / "requirements.lock").read_text(), re.M)
