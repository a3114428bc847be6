"""A whole-file write through Hadoop (hadoop.HadoopFS.write_bytes) replaces the file in one step.

The checkpoint of an hour is such a file: a load or a backfill writes it beside and renames it
over the old one. On HDFS, FileSystem.rename refuses an existing target; a delete and then a
rename leaves the hour without a checkpoint if the writer dies between the two. The write
takes FileContext's rename with OVERWRITE, one call that HDFS's namenode does atomically.

No HDFS runs here: these tests write on `file://` through the Hadoop path (Spark's local
mode, the session's shared SparkSession), and for the refusal, wrap the real FileSystem in
the one rule of HDFS's that matters here (its rename answers false over an existing file), and
look at the checkpoint after every call the write makes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline_warehouse.filesystem import WarehouseFileSystemError
from spark_apps.hadoop_fs import HadoopFS


def visible_files(folder: Path) -> list[str]:
    """The files in `folder`, without Hadoop's checksum side files (.<name>.crc)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".crc"))


def test_a_write_through_hadoop_replaces_the_file(spark: Any, tmp_path: Path) -> None:
    fs = HadoopFS(spark, python_io_for_files=False)
    checkpoint = tmp_path / "_checkpoints" / "page_views" / "2026-11-22T10.json"
    fs.write_bytes(checkpoint.as_uri(), b'{"version": 1}')  # nothing there before
    fs.write_bytes(checkpoint.as_uri(), b'{"version": 2}')  # a backfill: replaced
    assert checkpoint.read_bytes() == b'{"version": 2}'
    assert fs.read_bytes(checkpoint.as_uri()) == b'{"version": 2}'
    assert visible_files(checkpoint.parent) == [checkpoint.name]  # no temporary left


def test_a_write_over_a_directory_is_refused_and_changes_nothing(
    spark: Any, tmp_path: Path
) -> None:
    """FileSystem.rename moved the file *into* a directory of the target's name, and the write
    claimed success; the overwrite rename refuses it, in one line."""
    fs = HadoopFS(spark, python_io_for_files=False)
    target = tmp_path / "2026-11-22T10.json"
    (target / "inside").mkdir(parents=True)
    with pytest.raises(WarehouseFileSystemError) as refused:
        fs.write_bytes(target.as_uri(), b"{}")
    message = str(refused.value)
    assert message.startswith(f"write {target.as_uri()}: could not rename ")
    assert "\n" not in message
    assert sorted(p.name for p in target.iterdir()) == ["inside"]
    assert visible_files(tmp_path) == [target.name]  # the temporary is gone


class Observed:
    """A Java object whose every call is followed by a look at the checkpoint; `rename` of a
    FileSystem answers false over an existing file, as HDFS's does."""

    def __init__(self, real: Any, look: Callable[[str], None], hdfs_rename: bool) -> None:
        self._real, self._look, self._hdfs_rename = real, look, hdfs_rename

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._real, name)

        def call(*args: Any) -> Any:
            if name == "rename" and self._hdfs_rename and self._real.exists(args[1]):
                result: Any = False
            else:
                result = method(*args)
            self._look(f"{name}{tuple(str(a) for a in args[:2])}")
            return result

        return call


def test_the_checkpoint_is_never_missing_on_a_store_whose_rename_refuses_to_replace(
    spark: Any, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "_checkpoints" / "page_views" / "2026-11-22T10.json"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b'{"version": 1}')
    seen: list[tuple[str, bytes | None]] = []  # (the call, the checkpoint after it)
    renames: list[list[str]] = []  # FileContext.rename's options

    def look(call: str) -> None:
        seen.append((call, checkpoint.read_bytes() if checkpoint.exists() else None))

    class HdfsLike(HadoopFS):
        def _fs(self, uri: str) -> tuple[Any, Any]:
            fs, path = super()._fs(uri)
            return Observed(fs, look, hdfs_rename=True), path

        def _context(self, path: Any) -> Any:
            context = super()._context(path)
            if context is None:
                return None
            recorder = Observed(context, look, hdfs_rename=False)
            rename = recorder.__getattr__("rename")

            def recorded(source: Any, target: Any, options: Any) -> Any:
                renames.append([str(o) for o in options])
                return rename(source, target, options)

            recorder.rename = recorded  # type: ignore[attr-defined]
            return recorder

    HdfsLike(spark, python_io_for_files=False).write_bytes(checkpoint.as_uri(), b'{"version": 2}')
    assert checkpoint.read_bytes() == b'{"version": 2}'
    assert seen, "the write made no call through the observed objects"
    missing = [call for call, content in seen if content is None]
    assert not missing, f"the checkpoint was missing after {missing}"
    assert renames == [["OVERWRITE"]]  # one rename, that replaces
    assert visible_files(checkpoint.parent) == [checkpoint.name]
