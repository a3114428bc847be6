"""`make down`'s half of the pipeline stack: everything a stack recorded is stopped by PID."""

from __future__ import annotations

import json
from pathlib import Path

from logbroker.client.cluster import Cluster
from logbroker.testing.pipeline_stack import PipelineStack, stop_recorded
from logbroker.testing.traffic import TOPICS


def test_stop_recorded_stops_every_process_the_stack_started(tmp_path: Path) -> None:
    stack = PipelineStack(tmp_path / "stack", brokers_per_cluster=1, log=lambda _: None)
    stack.start(airflow=False)  # ZooKeeper and both clusters, the registry, the topics
    try:
        with Cluster(stack.analysis) as cluster:
            assert set(TOPICS) <= set(cluster.topics())
        state = json.loads((tmp_path / "stack" / "stack.json").read_text())
        pids = [state["zookeeper"]["pid"]] + [
            b["pid"] for brokers in state["brokers"].values() for b in brokers
        ]
        assert len(pids) == 3 and all(pid for pid in pids)
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
