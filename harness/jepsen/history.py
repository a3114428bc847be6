"""The history of a fault run: the checker's (checker.py) only input, saved as JSON.

    <results>/history.json
    {
      "version": 1,
      "meta": {"seed": 1, "topic": "jepsen", "partitions": 3, "brokers": [1, 2, 3],
               "started": t, "nemesis_ended": t, "ended": t, "settings": {...}},
      "ops": [                                  every send of every producer, in invoke order
        {"client": "p1", "value": "p1.0.17", "partition": 0, "acks": -1, "type": "ok",
         "offset": 1234, "next": 1257, "attempts": 1, "error": "", "invoke": t, "complete": t},
        {... "type": "info", "offset": null, "next": null, "error": "ProduceError: ..."}
      ],                                        "complete": null when the client never said
      "reads": [{"client": "c1", "partition": 0, "offset": 1234, "next": 1257,
                 "value": "p1.0.17", "t": t}, ...],       every message a reader was handed
      "read_errors": [{"client": "c1", "partition": 0, "offset": 1234, "error": "...", "t": t}],
      "faults": [nemesis.FaultEvent as a dict, ...],
      "network": [{"t": t, "action": "cut_between", "hosts": ["b1", "zk"]}, ...],
      "states": [{"t": t, "partition": 0, "version": 3, "leader": 2, "epoch": 1,
                  "isr": [2, 3]}, ...],                   ZooKeeper's states, as watched
      "controllers": [[t, broker, controller epoch], ...],  (-1, -1: none)
      "live": [[t, [broker ids]], ...],
      "leader_claims": [[partition, leader epoch, broker], ...],  from the brokers' logs
      "recovered": true,  "recovery": "...",    every ISR whole again after the healing
      "final": {"0": {"leader": 2, "high_watermark": 45678,
                      "messages": [[offset, next, value], ...]}},  read from each leader
      "replicas": {"0": {"1": {"end": 45678, "sha256": "...", "first_difference": null,
                               "epochs": [[epoch, start], ...]}}}
    }

`t` is wall-clock seconds (time.time()) throughout. An op's `acks` is the producer's
request.required.acks: -1 (the checked promise) or 1 (its losses are counted, not checked). Partition and broker keys are strings (JSON
objects). A replica's `sha256` is over its stored bytes below the leader's high watermark,
`end` its log's end, `first_difference` the first byte offset below the high watermark where
it differs from the leader's stored bytes (null: none).

The clients' own history files (workload.py) are merged into "ops", "reads" and
"read_errors" by `merge_client_history`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VERSION = 1

History = dict[str, Any]


def merge_client_history(history: History, client: str, path: Path) -> None:
    """Add a client's JSON lines (workload.py) to `history`. A last line cut off by a kill is
    skipped; an "invoke" without its outcome becomes an op of type "info" with
    "complete": null."""
    ops = history.setdefault("ops", [])
    reads = history.setdefault("reads", [])
    errors = history.setdefault("read_errors", [])
    pending: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return
    with open(path) as lines:
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # the line a killed client was writing
            kind = record.get("f")
            if kind == "invoke":
                op = {
                    "client": client,
                    "value": record["value"],
                    "partition": record["partition"],
                    "acks": record.get("acks", -1),
                    "type": "info",
                    "offset": None,
                    "next": None,
                    "attempts": 1,
                    "error": "no outcome recorded",
                    "invoke": record["t"],
                    "complete": None,
                }
                pending[record["value"]] = op
                ops.append(op)
            elif kind in ("ok", "info"):
                found = pending.pop(record["value"], None)
                if found is None:
                    continue
                found.update(
                    type=kind,
                    partition=record["partition"],
                    offset=record.get("offset"),
                    next=record.get("next"),
                    attempts=record.get("attempts", 1),
                    error=record.get("error", ""),
                    complete=record["t"],
                )
            elif kind == "read":
                reads.append(
                    {
                        "client": client,
                        "partition": record["partition"],
                        "offset": record["offset"],
                        "next": record["next"],
                        "value": record["value"],
                        "t": record["t"],
                    }
                )
            elif kind == "error":
                errors.append(
                    {
                        "client": client,
                        **{k: record.get(k) for k in ("partition", "offset", "error", "t")},
                    }
                )


def save(history: History, path: Path) -> None:
    path.write_text(json.dumps(history, separators=(",", ":")) + "\n")


def load(path: Path) -> History:
    history: History = json.loads(Path(path).read_text())
    if history.get("version") != VERSION:
        raise ValueError(f"{path}: history version {history.get('version')!r}, not {VERSION}")
    return history
