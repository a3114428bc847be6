"""How an hour is committed: staged, then published by renames, then the checkpoint.

A load writes everything under its own staging directory first:

    _staging/<topic>/<hour>.<run id>/rows/        the hour's rows (Spark's output, whole)
                                                  and their _load_summary.json (load_summary)
    _staging/<topic>/<hour>.<run id>/errors/      its bad records, if any
    _staging/<topic>/<hour>.<run id>/deduplicated/  rows/ written again without repeats
                                                  (then renamed to rows/; only if any)
    _staging/<topic>/<hour>.<run id>/_COMMIT      written last (temp name + rename): the
                                                  checkpoint to write; from here on the load
                                                  is decided and only rolls forward
Then `publish` (idempotent; every step checks what is already done):

    1. an existing hour directory (a backfill) moves aside into the staging directory,
       and rows/ is renamed to <topic>/load_hour=<hour>/          (the hour appears whole)
    2. the same for _errors/<topic>/load_hour=<hour>/ (an old one goes even if none is new)
    3. the checkpoint is written to a temporary name and renamed into _checkpoints/
    4. the staging directory is deleted

`recover` runs before every load of a topic: a staging directory with `_COMMIT` is published
(the run that made it died after deciding), one without is deleted (it died before). So a
load killed at any moment leaves the previous state or the whole new hour, never a
checkpoint whose data is not in place. One load per topic at a time (the DAG runs one).
"""

from __future__ import annotations

import json
import logging

from spark_apps.warehouse.checkpoint import Checkpoint, Warehouse
from spark_apps.warehouse.hadoop import FileSystem, basename, join, write_atomically

log = logging.getLogger(__name__)

COMMIT_FILE = "_COMMIT"


class Staging:
    def __init__(self, wh: Warehouse, topic: str, hour: str, run_id: str) -> None:
        self.wh = wh
        self.topic = topic
        self.hour = hour
        self.run_id = run_id
        self.root = join(wh.staging_root(topic), f"{hour}.{run_id}")

    @property
    def rows(self) -> str:
        return join(self.root, "rows")

    @property
    def deduplicated(self) -> str:
        """The rows written again without the duplicates the check found (rare)."""
        return join(self.root, "deduplicated")

    @property
    def errors(self) -> str:
        return join(self.root, "errors")

    def decide(self, checkpoint: Checkpoint, has_errors: bool) -> None:
        """Write _COMMIT: from now on the hour will be published, even if this run dies."""
        record = {"checkpoint": json.loads(checkpoint.to_json()), "has_errors": has_errors}
        write_atomically(
            self.wh.fs, join(self.root, COMMIT_FILE), json.dumps(record).encode(), self.run_id
        )

    def discard(self) -> None:
        self.wh.fs.delete(self.root)


def _move_aside(fs: FileSystem, path: str, staging_root: str, name: str) -> None:
    if not fs.exists(path):
        return
    aside = join(staging_root, name)
    if fs.exists(aside):
        fs.delete(aside)
    fs.rename(path, aside)


def publish(wh: Warehouse, staging_root: str) -> Checkpoint:
    """Put a decided staging directory's hour in place and write its checkpoint."""
    fs = wh.fs
    record = json.loads(fs.read_bytes(join(staging_root, COMMIT_FILE)))
    checkpoint = Checkpoint.from_json(json.dumps(record["checkpoint"]), where=staging_root)
    topic, hour = checkpoint.topic, checkpoint.load_hour
    rows = join(staging_root, "rows")
    if fs.exists(rows):
        _move_aside(fs, wh.hour_dir(topic, hour), staging_root, "replaced-rows")
        fs.rename(rows, wh.hour_dir(topic, hour))
    errors = join(staging_root, "errors")
    if record["has_errors"]:
        if fs.exists(errors):
            _move_aside(fs, wh.errors_dir(topic, hour), staging_root, "replaced-errors")
            fs.rename(errors, wh.errors_dir(topic, hour))
    else:
        _move_aside(fs, wh.errors_dir(topic, hour), staging_root, "replaced-errors")
    write_atomically(
        fs, wh.checkpoint_path(topic, hour), checkpoint.to_json().encode(), basename(staging_root)
    )
    fs.delete(staging_root)
    return checkpoint


def recover(wh: Warehouse, topic: str) -> list[str]:
    """Finish or remove what earlier loads of `topic` left in staging; what was done, said."""
    done = []
    for status in wh.fs.list(wh.staging_root(topic)):
        if not status.is_dir:
            continue
        if wh.fs.exists(join(status.path, COMMIT_FILE)):
            cp = publish(wh, status.path)
            done.append(f"published {topic} {cp.load_hour}, left decided by run {status.name}")
        else:
            wh.fs.delete(status.path)
            done.append(f"deleted the unfinished load {status.name} of {topic}")
    for line in done:
        log.warning("recovery: %s", line)
    return done
