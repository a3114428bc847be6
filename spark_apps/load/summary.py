"""The hour's _load_summary.json, written into its staged rows so that it is published with
them (the format: pipeline_warehouse.load_summary; the audit reads it instead of the rows)."""

from __future__ import annotations

from typing import Any

from pipeline_warehouse import load_summary
from pipeline_warehouse.checkpoint import Checkpoint, Warehouse
from spark_apps.summary_counts import frame_rows, names_without_repeats


def write_summary(
    wh: Warehouse,
    rows_dir: str,
    checkpoint: Checkpoint,
    previous: Checkpoint | None,
    certified: bool,
    profile: Any,
    conflicts: list[list[Any]] | None = None,
) -> None:
    """From the profile of the rows as they stay (None: there are none); `certified`: no name
    of the hour is in the previous hour's load (the load made it so); `conflicts` (`_audit`
    only): the rows of the names the load saw with different contents."""
    groups: list[list[Any]] = []
    names: list[list[Any]] = []
    if profile is not None:
        groups = frame_rows(profile, load_summary.GROUP_COLUMNS)
        # the duplicates were dropped: every named row left is a distinct name
        names = frame_rows(names_without_repeats(profile), load_summary.NAME_COLUMNS)
    summary = load_summary.LoadSummary(
        topic=checkpoint.topic,
        load_hour=checkpoint.load_hour,
        committed_at=checkpoint.committed_at,
        rows_sha256=checkpoint.rows_sha256,
        rows=checkpoint.rows,
        files=load_summary.data_files(wh.fs, rows_dir),
        groups=groups,
        names=names,
        previous=(
            load_summary.Certificate(
                previous.load_hour,
                previous.committed_at,
                previous.rows_sha256,
                load_summary.data_files(
                    wh.fs, wh.hour_dir(previous.topic, previous.load_hour), previous.files
                ),
            )
            if previous is not None and certified
            else None
        ),
        conflicts=conflicts,
    )
    load_summary.write(wh.fs, load_summary.summary_path(rows_dir), summary)
