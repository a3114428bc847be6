"""`make down`'s half of the pipeline stack: everything a stack recorded is stopped by PID,
and the Airflow tasks it did not record by its marker, never the shell `make down` runs in."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from logbroker.client.cluster import Cluster
from logbroker.stack.airflow_stack import STACK_MARKER, AirflowStack, process_running
from logbroker.stack.pipeline_stack import REPO_ROOT, PipelineStack, stop_recorded
from logbroker.stack.traffic import TOPICS

# A task as the stack's tasks run: in a process group of its own (Airflow's supervisor does
# setpgid), starting a child in a session of its own (as StreamedProcess and pyspark do).
FAKE_TASK = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_stop_recorded_stops_every_process_the_stack_started(tmp_path: Path) -> None:
    stack = PipelineStack(
        tmp_path / "stack", brokers_per_cluster=1, registry_api_port=0, log=lambda _: None
    )
    stack.start(airflow=False)  # ZooKeeper and both clusters, the registry, the topics
    try:
        for zk in (stack.live, stack.analysis):  # the demo's topics, ad_clicks in 0.8's format
            with Cluster(zk) as cluster:
                assert {"page_views", "searches", "_audit"} <= set(cluster.topics())
                assignment = cluster.assignment("ad_clicks")
                assert assignment is not None and assignment.message_format == "0.8"
                assert [p.state is not None and p.state.online
                        for p in cluster.describe_replicated("ad_clicks")] == [True, True]  # fmt: skip
        state = json.loads((tmp_path / "stack" / "stack.json").read_text())
        # Confluent's registry API (issue 45 item 2) serves the stack's registered schemas
        api = state["schema_registry"]["url"]
        with urllib.request.urlopen(f"{api}/subjects", timeout=10) as answer:
            assert set(json.loads(answer.read())) == {*TOPICS, "_audit"}
        pids = [state["zookeeper"]["pid"], state["schema_registry"]["pid"]] + [
            b["pid"] for brokers in state["brokers"].values() for b in brokers
        ]
        assert len(pids) == 4 and all(pid for pid in pids)
        stopped = stop_recorded(tmp_path / "stack")
        assert sorted(stopped) == sorted(pids)
        for pid in pids:
            # gone, or a zombie of this process (its child) that nothing serves any more
            assert (
                not Path(f"/proc/{pid}").exists()
                or b") Z " in Path(f"/proc/{pid}/stat").read_bytes()
            )
        assert not (tmp_path / "stack" / "stack.json").exists()
        assert stop_recorded(tmp_path / "stack") == []  # a second `make down`: nothing to do
    finally:
        stack.stop()


def test_message_formats_name_the_stacks_topics_and_known_formats(tmp_path: Path) -> None:
    stack = PipelineStack(tmp_path, message_formats={"searches": "0.8", "page_views": "0.7"})
    assert [stack.message_format(t) for t in (*TOPICS, "_audit")] == ["0.7", "0.8", "0.7", "0.7"]
    assert PipelineStack(tmp_path).message_formats == {"ad_clicks": "0.8"}  # the demo's
    with pytest.raises(ValueError, match="message_formats names 'clicks', not a topic"):
        PipelineStack(tmp_path, message_formats={"clicks": "0.8"})
    with pytest.raises(
        ValueError, match=re.escape("'ad_clicks' has message.format '0.9', not one of")
    ):
        PipelineStack(tmp_path, message_formats={"ad_clicks": "0.9"})


@pytest.mark.parametrize("shell_env", ["sourced env.sh", "and holds the stack's marker"])
def test_down_from_a_shell_that_sourced_env_sh_stops_the_tasks_and_spares_the_shell(
    tmp_path: Path, shell_env: str
) -> None:
    """The README has users `. var/up/airflow/env.sh` before `airflow backfill create`; a
    `make down` from that shell then took the shell, `make` and `timeout` for task processes
    (they hold AIRFLOW_HOME=<home> as the tasks do), killed them, and died itself midway.
    Here `down` runs as `make down` runs it, under `make` and its recipe's shell, in a shell
    started with env.sh's settings. Even a shell that holds the stack's marker (one opened
    from a task, say) is spared: no ancestor of `down` is ever signalled."""
    workdir = tmp_path / "up"
    stack = AirflowStack(
        workdir / "airflow", dags_folder=REPO_ROOT / "dags", plugins_folder=REPO_ROOT / "plugins"
    )
    env_sh = stack.write_env_file()
    assert f"AIRFLOW_HOME={stack.home}" in env_sh.read_text()
    assert STACK_MARKER not in env_sh.read_text()
    (workdir / "stack.json").write_text(
        json.dumps({"airflow": {"pids": {}}, "brokers": {}, "zookeeper": {"pid": None}})
    )
    task = subprocess.Popen(
        [sys.executable, "-c", FAKE_TASK],
        env=stack.env(),
        stdout=subprocess.PIPE,
        text=True,
        process_group=0,
    )
    assert task.stdout is not None
    child = int(task.stdout.readline())
    # the user's shell: env.sh's settings in its environment (as in a shell started after
    # `. env.sh`); `make` (a shell here) runs the recipe's shell, which runs `up.py down`
    down = f"{sys.executable} {REPO_ROOT / 'scripts' / 'up.py'} down --workdir {workdir}"
    (tmp_path / "user_shell.sh").write_text(
        f"sh -c \"sh -c '{down}; echo recipe done'; echo make done\"\necho shell done\n"
    )
    marker = f"export {STACK_MARKER}={stack.home}; " if shell_env != "sourced env.sh" else ""
    try:
        shell = subprocess.run(
            ["bash", "--norc", "-c", f". {env_sh}; {marker}exec bash --norc user_shell.sh"],
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if k != STACK_MARKER},
            capture_output=True,
            text=True,
            timeout=120,
            start_new_session=True,  # whatever it signals, not this test's group
        )
        lines = shell.stdout.splitlines()
        assert (shell.returncode, lines[-3:]) == (0, ["recipe done", "make done", "shell done"]), (
            shell.returncode,
            shell.stdout,
            shell.stderr,
        )
        assert any(line.startswith("down: stopped") for line in lines)
        assert task.wait(timeout=30) is not None  # the task, and its child in its own session
        assert not process_running(child)
        assert not (workdir / "stack.json").exists()
    finally:
        for pid in (task.pid, child):
            if process_running(pid):
                os.kill(pid, 9)
        task.wait()
