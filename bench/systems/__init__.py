"""The systems the benchmark measures, one module each, all with the same small interface.

Engine side (run.py), one `Server` per (repetition, system), in a work directory:

    server = module.Server(workdir)
    server.start()             # its own processes on 127.0.0.1, data in workdir
    server.endpoint            # a JSON-able dict the workers connect with
    server.data_dir            # what disk_bytes() measures
    server.pids()              # every process it started (stopped by PID in stop())
    server.stop()
    module.available()         # (True, "") or (False, why not): binaries and client installed
    module.versions()          # {"server": "...", "client": "..."} for the report

Worker side (worker.py, a fresh process per measured workload):

    client = module.Client(endpoint)
    client.produce(topic, n, size, batch, ready)          -> {"messages", "seconds"}
    client.consume(topic, n, batch_bytes, ready)          -> {"messages", "seconds", ...}
    client.latency_consume(topic, total, warmup, ack_path, ready)
                                                          -> {"latencies_ms": [...]}
    client.latency_produce(topic, total, size, ack_path)  (the one-way latency's two
                                                          processes: common.one_way_*)
    client.group_consume(topic, group, members, expect, idle_s, ready)
                                                          -> {"messages", "seconds"}
    client.load(topic, n, size, partitions)               (not timed: preloads a topic)
    client.growth(topic, total_bytes, size, batch, window_bytes) -> {"windows": [...]}
    client.intake(topic, total_bytes, size, batch, window_bytes)  (logbroker, tcp's relay:
                                                          prebuilt frames, bench/intake.py)
                                                          -> {"windows", "frame_bytes", ...}
    client.produce_for(topic, size, batch, seconds, ready) (the size sweep)
                                                          -> {"messages", "seconds",
                                                              "payload_bytes"}
    client.drop(topic)                                    (frees a topic/queue/stream)
    client.close()

`ready()` is called once the client is connected and set up, just before the clock starts;
in workloads with two processes at once it blocks until the engine says go to both.
`module.WORKLOADS` (optional) names the only workloads a system runs (redis_c, a reference).
`module.BATCHING` says, per batch size, what "a batch" means for that system's client.
"""

from __future__ import annotations

import importlib
from types import ModuleType

NAMES = ("logbroker", "rabbitmq", "activemq", "redis", "redis_c", "tcp")
PEERS = ("rabbitmq", "activemq", "redis")
# Clients of other benchmarks' workers, not systems run.py measures: bench/replication.py's.
OTHERS = ("replicated",)


def load(name: str) -> ModuleType:
    if name not in NAMES + OTHERS:
        raise ValueError(f"unknown system {name!r} (known: {', '.join(NAMES)})")
    return importlib.import_module(f"systems.{name}")
