"""How an hour is committed: staged, decided, then published; the checkpoint is the switch.

A load writes everything under its own staging directory first:

    _staging/<topic>/<hour>.<run id>/rows/          the hour's data files, named with the
                                                    load's write id, and _load_summary.json
    _staging/<topic>/<hour>.<run id>/errors/        its bad records, if any
    _staging/<topic>/<hour>.<run id>/deduplicated/  rows/ written again without repeats
                                                    (then renamed to rows/; only if any)
    _staging/<topic>/<hour>.<run id>/_COMMIT        written last, whole (temporary name +
                                                    rename): the checkpoint to write, which
                                                    names the version's files, and the
                                                    fencing token (the czxid of the load's
                                                    lock node, lock.py); from here on the load
                                                    is decided and only rolls forward

Then `publish` (idempotent: every step checks what is already done, so a publish that died
is finished by running it again). It starts, and takes step 4, only while the publishing
load holds the topic's lock with a token no older than the `_COMMIT`'s (`fence`):

    1. the data files go into <topic>/load_hour=<hour>/: for the hour's first version the
       staged rows/ directory is renamed into place (the hour appears whole); for a later
       one (a backfill) each file is renamed in beside the current version's files, which
       stay where they are: readers of the checkpoint still read those
    2. the same for the bad records, into _errors/<topic>/load_hour=<hour>/
    3. the summary (_load_summary.json) replaces the old one (the audit checks that a summary
       describes the checkpoint's version before it believes it, so either order is safe)
    4. THE SWITCH: the checkpoint is written to a temporary name and renamed over the old one
    5. the files of versions the checkpoint does not name are deleted
    6. the staging directory is deleted

`recover` runs before every load of a topic, under the topic's lock (lock.py): a staging
directory with `_COMMIT` is published (the run that made it died after deciding), one without
is deleted (it died before, and no other load can be running). So a load killed at any moment
leaves the old version or the new one, the checkpoint never names a file that is not there,
and readers that go through the checkpoint never see the hour missing.

One `_COMMIT` cannot be published: a load whose ZooKeeper session expired after its last
check decides after the next holder's recovery deleted its staging, and its `_COMMIT` names
files that are gone. Its own publish is fenced off (its lock is lost); `recover` drops such a
`_COMMIT` with a warning naming the topic, the hour and the files, and the topic loads on
(else every later load's recovery failed on it, and the topic never loaded again).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from pipeline_warehouse import load_summary
from pipeline_warehouse.checkpoint import Checkpoint, Warehouse
from pipeline_warehouse.filesystem import basename, join, parquet_files

log = logging.getLogger(__name__)

COMMIT_FILE = "_COMMIT"

# Called with a _COMMIT's fencing token before a publish and before its switch; raises
# (lock.LoadLockError) when the caller may not publish it (TopicLock.fence).
Fence = Callable[[int | None], None]


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

    def data_files(self) -> tuple[str, ...]:
        return tuple(e.name for e in parquet_files(self.wh.fs, self.rows))

    def error_files(self) -> tuple[str, ...]:
        return tuple(e.name for e in parquet_files(self.wh.fs, self.errors))

    def decide(self, checkpoint: Checkpoint, token: int | None) -> None:
        """Write _COMMIT: from now on the hour will be published, even if this run dies.
        `token`: the fencing token of the lock this load holds (its node's czxid)."""
        record = {"checkpoint": json.loads(checkpoint.to_json()), "fencing_token": token}
        self.wh.fs.write_bytes(join(self.root, COMMIT_FILE), json.dumps(record).encode())

    def discard(self) -> None:
        self.wh.fs.delete(self.root)


def _move_in(wh: Warehouse, staged: str, target: str, names: tuple[str, ...]) -> None:
    """Put the staged files `names` into directory `target` (steps 1 and 2)."""
    fs = wh.fs
    if not fs.exists(target) and fs.exists(staged):
        fs.rename(staged, target)  # the first version: the directory appears whole
        return
    present = {e.name for e in fs.list(target)}
    for name in names:
        if name not in present:
            fs.rename(join(staged, name), join(target, name))


def _delete_others(wh: Warehouse, directory: str, keep: tuple[str, ...]) -> None:
    """Delete the data files of `directory` that the checkpoint does not name (step 5)."""
    for entry in parquet_files(wh.fs, directory):
        if entry.name not in keep:
            wh.fs.delete(entry.uri)


def _decided(wh: Warehouse, staging_root: str) -> tuple[Checkpoint, int | None]:
    """A staging directory's _COMMIT: the checkpoint to write, and its fencing token."""
    record = json.loads(wh.fs.read_bytes(join(staging_root, COMMIT_FILE)))
    checkpoint = Checkpoint.from_json(json.dumps(record["checkpoint"]), where=staging_root)
    return checkpoint, record.get("fencing_token")


def publish(wh: Warehouse, staging_root: str, fence: Fence | None = None) -> Checkpoint:
    """Put a decided staging directory's version in place and switch the checkpoint to it.
    `fence` (the publishing load's TopicLock.fence) is asked first and before the switch."""
    fs = wh.fs
    checkpoint, token = _decided(wh, staging_root)
    if fence is not None:
        fence(token)
    topic, hour = checkpoint.topic, checkpoint.load_hour
    files, error_files = checkpoint.files or (), checkpoint.error_files or ()
    hour_dir, errors_dir = wh.hour_dir(topic, hour), wh.errors_dir(topic, hour)
    rows, errors = join(staging_root, "rows"), join(staging_root, "errors")
    staged_summary = load_summary.summary_path(rows)
    summary_bytes = fs.read_bytes(staged_summary) if fs.exists(staged_summary) else None
    _move_in(wh, rows, hour_dir, files)
    _move_in(wh, errors, errors_dir, error_files)
    if summary_bytes is not None:
        fs.write_bytes(load_summary.summary_path(hour_dir), summary_bytes)
    if fence is not None:  # the lock may have gone while the files moved: not the switch
        fence(token)
    fs.write_bytes(wh.checkpoint_path(topic, hour), checkpoint.to_json().encode())
    _delete_others(wh, hour_dir, files)
    _delete_others(wh, errors_dir, error_files)
    if not error_files and fs.exists(errors_dir) and not fs.list(errors_dir):
        fs.delete(errors_dir)
    fs.delete(staging_root)
    log.info(
        "published %s %s version %s (%s)", topic, hour, checkpoint.version, basename(staging_root)
    )
    return checkpoint


def _gone(wh: Warehouse, staging_root: str, checkpoint: Checkpoint) -> list[str]:
    """The files `checkpoint` names that are neither staged nor in place already (a publish
    that died half-way moved some): a publish of it cannot finish."""
    topic, hour = checkpoint.topic, checkpoint.load_hour
    gone = []
    for staged, target, names in (
        (join(staging_root, "rows"), wh.hour_dir(topic, hour), checkpoint.files or ()),
        (join(staging_root, "errors"), wh.errors_dir(topic, hour), checkpoint.error_files or ()),
    ):
        present = {e.name for d in (staged, target) if wh.fs.exists(d) for e in wh.fs.list(d)}
        gone += [name for name in names if name not in present]
    return gone


def recover(wh: Warehouse, topic: str, fence: Fence | None = None) -> list[str]:
    """Finish or remove what earlier loads of `topic` left in staging; what was done, said.
    Only under the topic's lock (`fence`: its TopicLock.fence): an unfinished staging
    directory is then nobody's."""
    done = []
    for entry in wh.fs.list(wh.staging_root(topic)):
        if not entry.is_dir:
            continue
        if wh.fs.exists(join(entry.uri, COMMIT_FILE)):
            decided, token = _decided(wh, entry.uri)
            gone = _gone(wh, entry.uri, decided)
            if gone:
                if fence is not None:
                    fence(token)  # not a live holder's: this load still holds the lock
                wh.fs.delete(entry.uri)
                done.append(
                    f"dropped the decided load {entry.name} of {topic} {decided.load_hour} "
                    f"(version {decided.version}, fencing token {token}): {len(gone)} of its "
                    f"files are gone ({', '.join(gone[:3])}{', ...' if len(gone) > 3 else ''}); "
                    "it decided after losing its lock, when the next load's recovery had "
                    "deleted its staging; the hour keeps its checkpoint"
                )
                continue
            cp = publish(wh, entry.uri, fence)
            done.append(f"published {topic} {cp.load_hour}, left decided by run {entry.name}")
        else:
            wh.fs.delete(entry.uri)
            done.append(f"deleted the unfinished load {entry.name} of {topic}")
    for line in done:
        log.warning("recovery: %s", line)
    return done
